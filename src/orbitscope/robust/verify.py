"""Deterministic verification of L∞ robustness: interval bound propagation (IBP) and CROWN.

Both methods bound a network's outputs over the whole input set

    B(x, ε) = {x' : ‖x' − x‖∞ ≤ ε} ∩ [0, 1]^d,   i.e. x' ∈ [max(x − ε, 0), min(x + ε, 1)],

and *verify* an input when the lower bound of every margin f_y(x') − f_j(x'), j ≠ y, is > 0 over
that set: no perturbation in the ball changes the prediction (κ = 0, worst-case robustness). Both
are **sound** (a verified input has no counterexample, up to floating-point rounding of the
bounds, about 1e-6 relative in float32: pass ``dtype=torch.float64`` for tighter arithmetic) and
**incomplete** (an input that is not verified may still be robust).

Conventions:
    * Inputs ``x`` are (B, C, H, W) or (B, D) in [0, 1] *before* any normalisation; ε is in the
      same units (pixel values in [0, 1], e.g. 0.1 = 25.5 grey levels). A normalisation given as
      ``normalize=(mean, std)`` is the first layer of the verified network, so the ball stays in
      [0, 1] space (as in :func:`orbitscope.robust.certify.certify`).
    * Eval-mode semantics: BatchNorm uses its running statistics and is folded into the preceding
      Conv2d / Linear first (:func:`orbitscope.models.fold_batchnorm` with ``linear=True``); a
      BatchNorm that follows no such layer is a per-channel affine map; Dropout is the identity.
    * Supported layers: Conv2d (zero padding), Linear, ReLU, BatchNorm1d/2d, AvgPool2d (no
      ceil mode, no divisor override), MaxPool2d (no ceil mode), Flatten, Identity, Dropout.
      Any other layer raises :class:`~orbitscope.errors.SpecError` naming it.
    * The model is read as the chain of its leaf layers in call order (forward hooks on one
      forward pass), and the chain's output is checked against the model's own on the input and
      on random points of [0, 1]^d; a forward with functional operations between layers
      (``torch.relu``, ``F.pad``, …) is refused. An ``nn.Sequential`` is its chain by definition.

Methods:
    * **IBP** (Gowal et al. 2018): intervals pushed layer by layer (centre/radius form for affine
      layers, monotone ReLU and max-pool). Margins: the interval of the last nonlinear layer's
      output is pushed through the final affine layers with the margin matrix C folded in
      (Gowal et al.'s elision of the last layer), tighter than l_y − u_j.
    * **CROWN** (Zhang et al. 2018, "Efficient neural network robustness certification with
      general activation functions"): a backward pass of linear bounds A·z + c from the
      specification C·f(x) to the input box, where it is concretised exactly. Unstable ReLUs
      (l < 0 < u) get the upper line u(z − l)/(u − l) and the adaptive lower line α·z with
      α = 1 if u > −l else 0. Intermediate pre-activation bounds (``intermediate="crown"``, the
      default) are computed by CROWN itself, layer by layer, for every neuron not already stable
      under the interval of the previous layer, and intersected with that interval (both are
      sound). ``intermediate="ibp"`` is CROWN-IBP (Zhang et al. 2020): intermediate bounds by IBP,
      only the final pass by CROWN; much cheaper on CNNs, usually looser.
      MaxPool2d gets a linear relaxation: lower bound z_j* (j* = the window input with the
      largest lower bound), upper bound z_j* when that input's lower bound is ≥ every other
      input's upper bound (then the max *is* z_j*), else the constant max of the upper bounds.
    * CROWN's adaptive slope is not guaranteed to beat IBP input by input; the two usually agree
      in order (see ``tests/test_verify.py`` for the measured fraction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import SpecError
from ..models.reference import fold_batchnorm
from .bounds import Estimate
from .sequential import clopper_pearson

__all__ = [
    "VerificationResult",
    "VerifiedNetwork",
    "interval_bounds",
    "crown_bounds",
    "margin_spec",
    "verify",
    "VERIFY_METHODS",
]

#: Method names accepted by :func:`verify`.
VERIFY_METHODS = ("ibp", "crown")
_DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout)
#: Elements of the coefficient tensor A (rows × neurons) per backward chunk (≈ 128 MB in float32).
_CHUNK_ELEMENTS = 2**25


# ----------------------------------------------------------------------------------------- ops
class _Op:
    """One layer of the verified chain; ``in_shape``/``out_shape`` exclude the batch dim."""

    kind = "affine"
    in_shape: tuple[int, ...] = ()
    out_shape: tuple[int, ...] = ()

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def interval(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError


class _Affine(_Op):
    """z ↦ W z + b; subclasses give the linear part, |W|, Wᵀ and ⟨A, b⟩."""

    def linear(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def abs_linear(self, r: Tensor) -> Tensor:
        raise NotImplementedError

    def transpose(self, a: Tensor) -> Tensor:
        """(N, *out_shape) -> (N, *in_shape): rows of A times W."""
        raise NotImplementedError

    def bias_dot(self, a: Tensor) -> Tensor:
        """(N, *out_shape) -> (N,): ⟨A, b⟩ for each row."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x) + self.bias_view(x.ndim)

    def bias_view(self, ndim: int) -> Tensor:
        """The bias shaped to broadcast against a batch of ``ndim`` dims."""
        raise NotImplementedError

    def interval(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        mid, rad = (hi + lo) / 2, (hi - lo) / 2
        centre, spread = self.forward(mid), self.abs_linear(rad)
        return centre - spread, centre + spread


class _LinearOp(_Affine):
    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        self.w, self.b = weight, bias
        self.w_abs = weight.abs()

    def linear(self, x: Tensor) -> Tensor:
        return x @ self.w.T

    def abs_linear(self, r: Tensor) -> Tensor:
        return r @ self.w_abs.T

    def transpose(self, a: Tensor) -> Tensor:
        return a @ self.w

    def bias_dot(self, a: Tensor) -> Tensor:
        return a @ self.b

    def bias_view(self, ndim: int) -> Tensor:
        return self.b


class _ConvOp(_Affine):
    def __init__(self, weight: Tensor, bias: Tensor, stride: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int], groups: int) -> None:
        self.w, self.b, self.w_abs = weight, bias, weight.abs()
        self.kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        self.output_padding = (0, 0)

    def set_shapes(self, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> None:
        self.in_shape, self.out_shape = in_shape, out_shape
        k, s, p, d = self.w.shape[-2:], self.kw["stride"], self.kw["padding"], self.kw["dilation"]
        self.output_padding = tuple(  # type: ignore[assignment]
            in_shape[1 + i] - ((out_shape[1 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + 1) for i in range(2))

    def linear(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.w, None, **self.kw)

    def abs_linear(self, r: Tensor) -> Tensor:
        return F.conv2d(r, self.w_abs, None, **self.kw)

    def transpose(self, a: Tensor) -> Tensor:
        return F.conv_transpose2d(a, self.w, None, output_padding=self.output_padding, **self.kw)

    def bias_dot(self, a: Tensor) -> Tensor:
        return a.sum(dim=(-1, -2)) @ self.b

    def bias_view(self, ndim: int) -> Tensor:
        return self.b.view(-1, 1, 1)


class _ChannelAffine(_Affine):
    """Per-channel (dim 1) scale and shift: an unfolded eval BatchNorm or the input normalisation."""

    def __init__(self, scale: Tensor, shift: Tensor) -> None:
        self.scale, self.shift = scale, shift

    def _view(self, t: Tensor, ndim: int) -> Tensor:
        return t.view(-1, *[1] * (ndim - 2))

    def linear(self, x: Tensor) -> Tensor:
        return x * self._view(self.scale, x.ndim)

    def abs_linear(self, r: Tensor) -> Tensor:
        return r * self._view(self.scale.abs(), r.ndim)

    def transpose(self, a: Tensor) -> Tensor:
        return self.linear(a)

    def bias_dot(self, a: Tensor) -> Tensor:
        return (a * self._view(self.shift, a.ndim)).flatten(1).sum(1)

    def bias_view(self, ndim: int) -> Tensor:
        return self._view(self.shift, ndim)


class _ReshapeOp(_Affine):
    def linear(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], *self.out_shape)

    abs_linear = linear

    def transpose(self, a: Tensor) -> Tensor:
        return a.reshape(a.shape[0], *self.in_shape)

    def bias_dot(self, a: Tensor) -> Tensor:
        return a.new_zeros(a.shape[0])

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)

    def interval(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        return self.linear(lo), self.linear(hi)


class _ReluOp(_Op):
    kind = "relu"

    def forward(self, x: Tensor) -> Tensor:
        return x.clamp(min=0)

    def interval(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        return lo.clamp(min=0), hi.clamp(min=0)


class _MaxPoolOp(_Op):
    kind = "maxpool"

    def __init__(self, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int]) -> None:
        self.kw = {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation}

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, **self.kw)

    def interval(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        return self.forward(lo), self.forward(hi)

    def windows(self, t: Tensor, fill: float) -> Tensor:
        """(B, C, H, W) -> (B, C, k·k, L): the pooling windows, padding filled with ``fill``."""
        p = self.kw["padding"]
        padded = F.pad(t, (p[1], p[1], p[0], p[0]), value=fill)
        b, c = t.shape[:2]
        cols = F.unfold(padded.reshape(b * c, 1, *padded.shape[-2:]), self.kw["kernel_size"],
                        dilation=self.kw["dilation"], stride=self.kw["stride"])
        return cols.view(b, c, cols.shape[1], cols.shape[2])


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _to_ops(layer: nn.Module, name: str, dtype: torch.dtype, device: torch.device) -> list[_Op]:
    """The op(s) of one leaf layer ([] for an identity); SpecError for anything unsupported."""
    what = f"layer {name!r} ({type(layer).__name__})"

    def t(x: Tensor | None, size: int) -> Tensor:
        return (x.detach() if x is not None else torch.zeros(size)).to(device=device, dtype=dtype)

    if isinstance(layer, (nn.Identity, *_DROPOUT)):
        return []
    if type(layer) is nn.Linear:
        return [_LinearOp(t(layer.weight, 0), t(layer.bias, layer.out_features))]
    if type(layer) is nn.Conv2d:
        if layer.padding_mode != "zeros" or isinstance(layer.padding, str):
            raise SpecError(f"{what}: only explicit zero padding can be verified (padding_mode "
                            f"{layer.padding_mode!r}, padding {layer.padding!r}); give integer padding")
        return [_ConvOp(t(layer.weight, 0), t(layer.bias, layer.out_channels), _pair(layer.stride),
                        _pair(layer.padding), _pair(layer.dilation), layer.groups)]
    if type(layer) is nn.ReLU:
        return [_ReluOp()]
    if type(layer) is nn.Flatten:
        return [_ReshapeOp()]
    if type(layer) in (nn.BatchNorm1d, nn.BatchNorm2d):
        if layer.running_mean is None or layer.running_var is None:
            raise SpecError(f"{what}: a BatchNorm without running statistics uses batch statistics in eval "
                            "mode and cannot be verified per input; train it with track_running_stats=True")
        scale = t(layer.weight, 0) if layer.weight is not None else torch.ones(layer.num_features, dtype=dtype, device=device)
        scale = scale / torch.sqrt(t(layer.running_var, 0) + layer.eps)
        shift = (t(layer.bias, layer.num_features) if layer.bias is not None else 0) - t(layer.running_mean, 0) * scale
        return [_ChannelAffine(scale, shift)]
    if type(layer) is nn.AvgPool2d:
        if layer.ceil_mode or layer.divisor_override is not None or (not layer.count_include_pad and layer.padding):
            raise SpecError(f"{what}: only AvgPool2d without ceil_mode and divisor_override, counting padding, "
                            "can be verified; rebuild the layer with the defaults")
        pool = _ConvOp(torch.empty(0), torch.empty(0), _pair(layer.stride or layer.kernel_size),
                       _pair(layer.padding), (1, 1), 0)
        pool.kw["kernel"] = _pair(layer.kernel_size)  # the weight is built once the channels are known
        return [pool]
    if type(layer) is nn.MaxPool2d:
        if layer.ceil_mode or layer.return_indices:
            raise SpecError(f"{what}: only MaxPool2d without ceil_mode and return_indices can be verified")
        return [_MaxPoolOp(_pair(layer.kernel_size), _pair(layer.stride or layer.kernel_size), _pair(layer.padding),
                           _pair(layer.dilation))]
    raise SpecError(f"{what} is not supported by IBP/CROWN verification; supported: Conv2d, Linear, ReLU, "
                    "BatchNorm1d/2d, AvgPool2d, MaxPool2d, Flatten, Identity, Dropout")


def _leaf_chain(model: nn.Module, example: Tensor) -> tuple[list[tuple[str, nn.Module]], Tensor]:
    """Leaf layers of ``model`` in call order on ``example`` and the model's output there."""
    leaves = {name: m for name, m in model.named_modules() if not list(m.children())}
    order: list[str] = []
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: order.append(name))
             for name, m in leaves.items()]
    try:
        with torch.no_grad():
            out = model(example)
    except (RuntimeError, ValueError) as exc:
        raise SpecError(f"the model's forward failed on inputs of shape {tuple(example.shape)}: {exc}") from exc
    finally:
        for h in hooks:
            h.remove()
    return [(n, leaves[n]) for n in order], out


class VerifiedNetwork:
    """A model read as a chain of verifiable ops (BatchNorm folded, in ``dtype`` on ``device``).

    Built once per model and input shape; :func:`interval_bounds`, :func:`crown_bounds` and
    :func:`verify` build it themselves, pass one to avoid repeating the checks.

    Args:
        model: an ``nn.Module`` of supported layers (see the module docs); not modified.
        example: one batch of inputs (B, …) in [0, 1], before ``normalize``.
        normalize: ``(mean, std)`` per channel applied before the model, or None.
        dtype: arithmetic of the bounds (default: the model's parameter dtype).
    """

    def __init__(self, model: nn.Module, example: Tensor,
                 normalize: tuple[Sequence[float], Sequence[float]] | None = None,
                 dtype: torch.dtype | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise SpecError(f"model must be a torch nn.Module, got {type(model).__name__}")
        param = next(iter(model.parameters()), None)
        self.device = param.device if param is not None else example.device
        self.dtype = dtype or (param.dtype if param is not None else torch.float32)
        folded = fold_batchnorm(model, linear=True)
        probe = example[:4].to(device=self.device, dtype=param.dtype if param is not None else self.dtype)
        if normalize is not None:
            norm = _ChannelAffine(*self._normalisation(normalize, probe.shape[1]))
            probe_in = norm.forward(probe.to(self.dtype)).to(probe.dtype)
        else:
            norm, probe_in = None, probe
        chain, out = _leaf_chain(folded, probe_in)
        ops: list[_Op] = [norm] if norm is not None else []
        for name, layer in chain:
            ops += _to_ops(layer, name, self.dtype, self.device)
        names = [name for name, _ in chain]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise SpecError(f"layer(s) {repeated} are called more than once in forward; verification needs a chain "
                            "in which each layer runs once (give each use its own module, e.g. an nn.Sequential)")
        self.ops = ops
        self.layers = [name for name, _ in chain]
        self.input_shape = tuple(example.shape[1:])
        self._set_shapes()
        # the chain must be the model: on the probe and on random points of [0, 1]^d
        rand = torch.rand((3, *self.input_shape), generator=torch.Generator().manual_seed(0)).to(probe)
        with torch.no_grad():
            points = torch.cat([probe, rand])
            want = folded(self._normalise_like(points, normalize)).to(self.dtype)
        got = self.forward(points.to(self.dtype))
        if got.ndim != 2:
            raise SpecError(f"the model must return logits (B, K), got shape {tuple(got.shape)}")
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-3, atol=1e-4 * (1 + want.abs().max().item())):
            raise SpecError(f"{type(model).__name__}: the model is not the chain of its layers {self.layers} (it uses "
                            "functional operations between them, or reuses them); pass an nn.Sequential of supported "
                            "layers equal to the model")
        self.num_outputs = int(got.shape[1])

    def _normalisation(self, normalize: tuple[Sequence[float], Sequence[float]], channels: int) -> tuple[Tensor, Tensor]:
        mean = torch.as_tensor(normalize[0], dtype=self.dtype, device=self.device).reshape(-1)
        std = torch.as_tensor(normalize[1], dtype=self.dtype, device=self.device).reshape(-1)
        if not (std > 0).all() or mean.numel() not in (1, channels) or std.numel() not in (1, channels):
            raise SpecError(f"normalize must be (mean, std) with one value or {channels} per channel and std > 0, "
                            f"got {normalize!r}")
        return 1 / std.expand(channels), (-mean / std).expand(channels)

    def _normalise_like(self, x: Tensor, normalize: Any) -> Tensor:
        if normalize is None:
            return x
        return self.ops[0].forward(x.to(self.dtype)).to(x.dtype)

    def _set_shapes(self) -> None:
        shape = self.input_shape
        for op in self.ops:
            op.in_shape = shape
            if isinstance(op, _ConvOp) and op.w.numel() == 0:  # an average pool: a depthwise conv
                c, (kh, kw) = shape[0], op.kw.pop("kernel")
                op.w = torch.full((c, 1, kh, kw), 1.0 / (kh * kw), dtype=self.dtype, device=self.device)
                op.w_abs, op.b, op.kw["groups"] = op.w, torch.zeros(c, dtype=self.dtype, device=self.device), c
            if isinstance(op, _ReshapeOp):
                n = 1
                for s in shape:
                    n *= s
                op.out_shape = (n,)
            else:
                try:
                    out = op.forward(torch.zeros((1, *shape), dtype=self.dtype, device=self.device))
                except RuntimeError as exc:
                    raise SpecError(f"the model is not the chain of its layers {self.layers}: run in call order on "
                                    f"inputs {self.input_shape} they fail ({exc}); the forward uses functional "
                                    "operations between them (flatten, relu, ...); pass an nn.Sequential of supported "
                                    "layers equal to the model") from exc
                op.out_shape = tuple(out.shape[1:])
            if isinstance(op, _ConvOp):
                op.set_shapes(shape, op.out_shape)
            shape = op.out_shape

    def forward(self, x: Tensor) -> Tensor:
        """The chain's output on inputs ``x`` (B, …) in [0, 1] (normalisation included)."""
        for op in self.ops:
            x = op.forward(x)
        return x


# ---------------------------------------------------------------------------- bound machinery
def _relu_relaxation(lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Lower slope, upper slope and upper intercept of ReLU on [lo, hi] (lower intercept 0)."""
    active, unstable = lo >= 0, (lo < 0) & (hi > 0)
    width = torch.where(unstable, hi - lo, torch.ones_like(hi))
    up = torch.where(unstable, hi / width, active.to(hi.dtype))
    up_b = torch.where(unstable, -up * lo, torch.zeros_like(hi))
    low = torch.where(unstable, (hi > -lo).to(hi.dtype), active.to(hi.dtype))
    return low, up, up_b


def _maxpool_relaxation(op: _MaxPoolOp, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per output: flat input index j* (argmax of lower bounds), whether max = z_j* exactly, and
    the constant upper bound (max of upper bounds)."""
    lw, hw = op.windows(lo, float("-inf")), op.windows(hi, float("-inf"))
    j = lw.argmax(dim=2, keepdim=True)
    l_star = lw.gather(2, j).squeeze(2)
    others = hw.scatter(2, j, float("-inf")).amax(dim=2)
    index = torch.arange(lo.shape[-2] * lo.shape[-1], device=lo.device, dtype=lo.dtype).view(1, 1, *lo.shape[-2:])
    flat = op.windows(index, -1.0)[0, 0]  # (k·k, L)
    j_flat = flat.gather(0, j.view(-1, j.shape[-1])).view(j.shape[0], j.shape[1], -1).long()  # (B, C, L)
    out = (lo.shape[0], *op.out_shape)
    return j_flat, (l_star >= others).view(out), hw.amax(dim=2).view(out)


def _backward(net: VerifiedNetwork, k: int, a: Tensor, relax: dict[int, tuple[Tensor, ...]],
              lo: Tensor, hi: Tensor, stop: int = 0) -> Tensor:
    """Lower bound (B, S) of a·z_k, z_k = output of ops[:k], a: (B, S, *shape): linear bounds pushed
    back through ops[stop:k] and concretised over the box [lo, hi] of the input of op ``stop``."""
    b, s = a.shape[:2]
    const = a.new_zeros(b, s)
    for i in reversed(range(stop, k)):
        op = net.ops[i]
        if isinstance(op, _Affine):
            flat = a.reshape(b * s, *op.out_shape)
            const = const + op.bias_dot(flat).view(b, s)
            a = op.transpose(flat).view(b, s, *op.in_shape)
        elif isinstance(op, _ReluOp):
            low, up, up_b = relax[i]
            pos, neg = a.clamp(min=0), a.clamp(max=0)
            const = const + (neg * up_b.unsqueeze(1)).flatten(2).sum(-1)
            a = pos * low.unsqueeze(1) + neg * up.unsqueeze(1)
        else:  # max pool
            j_flat, exact, upper = relax[i]
            pos, neg = a.clamp(min=0), a.clamp(max=0)
            const = const + (neg * (~exact).unsqueeze(1) * upper.unsqueeze(1)).flatten(2).sum(-1)
            coef = (pos + neg * exact.unsqueeze(1)).flatten(3)  # (B, S, C, L)
            c, h, w = op.in_shape
            a = a.new_zeros(b, s, c, h * w).scatter_add_(3, j_flat.unsqueeze(1).expand(b, s, c, -1), coef)
            a = a.view(b, s, c, h, w)
    pos, neg = a.clamp(min=0).flatten(2), a.clamp(max=0).flatten(2)
    return const + (pos * lo.flatten(1).unsqueeze(1)).sum(-1) + (neg * hi.flatten(1).unsqueeze(1)).sum(-1)


def _relaxation(op: _Op, lo: Tensor, hi: Tensor) -> tuple[Tensor, ...]:
    return _relu_relaxation(lo, hi) if isinstance(op, _ReluOp) else _maxpool_relaxation(op, lo, hi)  # type: ignore[arg-type]


def _refine(net: VerifiedNetwork, k: int, relax: dict[int, tuple[Tensor, ...]], box: tuple[Tensor, Tensor],
            lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
    """CROWN bounds of the input of nonlinear op k for the neurons not stable under [lo, hi],
    intersected with [lo, hi]."""
    op = net.ops[k]
    select = ((lo < 0) & (hi > 0)) if isinstance(op, _ReluOp) else (hi > lo)
    b = lo.shape[0]
    select = select.reshape(b, -1)
    counts = select.sum(1)
    n_max = int(counts.max().item()) if b else 0
    if n_max == 0:
        return lo, hi
    order = torch.sort(select.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :n_max]
    width = max(max(_numel(o.in_shape), _numel(o.out_shape)) for o in net.ops[:k])
    rows = max(1, _CHUNK_ELEMENTS // (2 * b * width))
    lo_f, hi_f = lo.reshape(b, -1).clone(), hi.reshape(b, -1).clone()
    for start in range(0, n_max, rows):
        idx = order[:, start:start + rows]
        valid = (torch.arange(start, start + idx.shape[1], device=lo.device).unsqueeze(0) < counts.unsqueeze(1))
        a = lo.new_zeros(b, idx.shape[1], lo_f.shape[1]).scatter_(2, idx.unsqueeze(-1), 1.0)
        bound = _backward(net, k, torch.cat([a, -a], 1).view(b, -1, *op.in_shape), relax, *box)
        low, up = bound[:, :idx.shape[1]], -bound[:, idx.shape[1]:]
        cur_lo, cur_hi = lo_f.gather(1, idx), hi_f.gather(1, idx)
        lo_f.scatter_(1, idx, torch.where(valid, torch.maximum(cur_lo, low), cur_lo))
        hi_f.scatter_(1, idx, torch.where(valid, torch.minimum(cur_hi, up), cur_hi))
    return lo_f.view_as(lo), hi_f.view_as(hi)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _box(x: Tensor, eps: float | Tensor, clip: tuple[float, float] | None) -> tuple[Tensor, Tensor]:
    eps_t = torch.as_tensor(eps, dtype=x.dtype, device=x.device)
    if eps_t.ndim == 1 and x.ndim > 1:
        eps_t = eps_t.view(-1, *[1] * (x.ndim - 1))
    if not torch.isfinite(eps_t).all() or (eps_t < 0).any():
        raise SpecError(f"eps must be finite and >= 0 (pixel values in [0, 1]), got {eps!r}")
    lo, hi = x - eps_t, x + eps_t
    if clip is not None:
        if (x < clip[0] - 1e-6).any() or (x > clip[1] + 1e-6).any():
            raise SpecError(f"inputs must lie in [{clip[0]}, {clip[1]}] (before normalisation); got values in "
                            f"[{x.min().item():.4g}, {x.max().item():.4g}]; pass normalize=(mean, std) instead of "
                            "normalised inputs, or clip=None")
        lo, hi = lo.clamp(*clip), hi.clamp(*clip)
    return lo, hi


def _network(model: nn.Module | VerifiedNetwork, x: Tensor, normalize: Any, dtype: torch.dtype | None) -> VerifiedNetwork:
    if isinstance(model, VerifiedNetwork):
        if normalize is not None or dtype is not None:
            raise SpecError("a VerifiedNetwork carries its own normalize and dtype: pass them when building it, "
                            "not to the bound functions")
        return model
    return VerifiedNetwork(model, x, normalize=normalize, dtype=dtype)


def _prepare(net: VerifiedNetwork, x: Tensor, eps: float | Tensor, clip: tuple[float, float] | None
             ) -> tuple[Tensor, Tensor]:
    if not isinstance(x, Tensor) or tuple(x.shape[1:]) != net.input_shape:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise SpecError(f"x must be a tensor (B, {', '.join(map(str, net.input_shape))}), got {got}")
    x = x.detach().to(device=net.device, dtype=net.dtype)
    if isinstance(eps, Tensor):
        eps = eps.detach().to(device=net.device, dtype=net.dtype)
    return _box(x, eps, clip)


def _propagate(net: VerifiedNetwork, lo: Tensor, hi: Tensor, crown: bool
               ) -> tuple[dict[int, tuple[Tensor, ...]], list[tuple[Tensor, Tensor]]]:
    """Interval bounds at every op's input (refined by CROWN before nonlinear ops if ``crown``) and
    the relaxations of the nonlinear ops."""
    relax: dict[int, tuple[Tensor, ...]] = {}
    bounds: list[tuple[Tensor, Tensor]] = []
    cur = (lo, hi)
    for i, op in enumerate(net.ops):
        if op.kind != "affine":
            if crown and i > 0:
                cur = _refine(net, i, relax, (lo, hi), *cur)
            relax[i] = _relaxation(op, *cur)
        bounds.append(cur)
        cur = op.interval(*cur)
    bounds.append(cur)
    return relax, bounds


def margin_spec(y: Tensor, num_classes: int) -> Tensor:
    """The margin specification C (B, K − 1, K): row j is e_y − e_j for every class j ≠ y.

    Args:
        y: true labels (B,) in [0, K).
        num_classes: K.
    """
    y = torch.as_tensor(y).long().reshape(-1)
    if ((y < 0) | (y >= num_classes)).any():
        raise SpecError(f"labels must be in [0, {num_classes}), got {y.tolist()[:10]}")
    eye = torch.eye(num_classes, device=y.device)
    others = torch.stack([torch.cat([torch.arange(c), torch.arange(c + 1, num_classes)]) for c in range(num_classes)])
    return eye[y].unsqueeze(1) - eye[others.to(y.device)[y]]


def _spec(spec: Tensor | None, b: int, k: int, like: Tensor) -> Tensor:
    if spec is None:
        spec = torch.eye(k)
    spec = torch.as_tensor(spec).to(like)
    if spec.ndim == 2:
        spec = spec.unsqueeze(0).expand(b, -1, -1)
    if spec.ndim != 3 or spec.shape[0] != b or spec.shape[2] != k:
        raise SpecError(f"spec must be (S, {k}) or ({b}, S, {k}), got {tuple(spec.shape)}")
    return spec


def _ibp_spec_lower(net: VerifiedNetwork, spec: Tensor, bounds: list[tuple[Tensor, Tensor]]) -> Tensor:
    """IBP lower bound of spec·f: the final affine ops with the spec folded in (elision)."""
    first = len(net.ops)
    while first > 0 and net.ops[first - 1].kind == "affine":
        first -= 1
    return _backward(net, len(net.ops), spec, {}, *bounds[first], stop=first)


def interval_bounds(model: nn.Module | VerifiedNetwork, x: Tensor, eps: float | Tensor, *,
                    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
                    clip: tuple[float, float] | None = (0.0, 1.0),
                    dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """IBP bounds of the logits over the L∞ ball of radius ``eps`` around each input, within ``clip``.

    Args:
        model: a supported network (module docs) or a prepared :class:`VerifiedNetwork`.
        x: inputs (B, …) in [0, 1] before normalisation.
        eps: L∞ radius in [0, 1] pixel units; a float or one per input (B,).
        normalize: ``(mean, std)`` applied before the model (the ball stays in [0, 1] space).
        clip: the valid input range the ball is intersected with (None: no intersection).
        dtype: arithmetic of the bounds (default: the model's dtype).

    Returns:
        ``(lower, upper)``, each (B, K): for every x' in the ball, lower ≤ f(x') ≤ upper.
    """
    net = _network(model, x, normalize, dtype)
    with torch.no_grad():
        lo, hi = _prepare(net, x, eps, clip)
        return _propagate(net, lo, hi, crown=False)[1][-1]


def crown_bounds(model: nn.Module | VerifiedNetwork, x: Tensor, eps: float | Tensor, spec: Tensor | None = None, *,
                 intermediate: str = "crown",
                 normalize: tuple[Sequence[float], Sequence[float]] | None = None,
                 clip: tuple[float, float] | None = (0.0, 1.0),
                 dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """CROWN bounds of ``spec @ f(x')`` over the L∞ ball of radius ``eps`` (within ``clip``).

    Args:
        model: a supported network (module docs) or a prepared :class:`VerifiedNetwork`.
        x: inputs (B, …) in [0, 1] before normalisation.
        eps: L∞ radius in [0, 1] pixel units; a float or one per input (B,).
        spec: (S, K) or (B, S, K) linear specification (None: the identity, bounds of the logits);
            margins f_y − f_j come from :func:`margin_spec`.
        intermediate: ``"crown"`` (intermediate bounds by CROWN, default) or ``"ibp"`` (CROWN-IBP).
        normalize: ``(mean, std)`` applied before the model (the ball stays in [0, 1] space).
        clip: the valid input range the ball is intersected with (None: no intersection).
        dtype: arithmetic of the bounds (default: the model's dtype).

    Returns:
        ``(lower, upper)``, each (B, S): for every x' in the ball, lower ≤ spec·f(x') ≤ upper.
    """
    if intermediate not in ("crown", "ibp"):
        raise SpecError(f"intermediate must be 'crown' or 'ibp', got {intermediate!r}")
    net = _network(model, x, normalize, dtype)
    with torch.no_grad():
        lo, hi = _prepare(net, x, eps, clip)
        c = _spec(spec, lo.shape[0], net.num_outputs, lo)
        relax, _ = _propagate(net, lo, hi, crown=intermediate == "crown")
        both = _backward(net, len(net.ops), torch.cat([c, -c], 1), relax, lo, hi)
        return both[:, :c.shape[1]], -both[:, c.shape[1]:]


@dataclass
class VerificationResult:
    """Per-input outcome of :func:`verify`.

    Attributes:
        method: ``"ibp"`` or ``"crown"`` (``"crown-ibp"`` for CROWN with IBP intermediate bounds).
        eps: the L∞ radius (pixel values in [0, 1]).
        verified: (B,) bool: every margin's lower bound is > 0 (so also correctly classified).
        margin_lower: (B,) the lower bound of min_{j≠y} f_y − f_j over the ball.
        margin_bounds: (B, K) the lower bound of f_y − f_j per class j (+inf at j = y).
        clean_correct: (B,) bool: the unperturbed input is classified as ``y``.
        seconds: wall time of the bounds.
    """

    method: str
    eps: float | Tensor
    verified: Tensor
    margin_lower: Tensor
    margin_bounds: Tensor
    clean_correct: Tensor
    seconds: float

    @property
    def verified_accuracy(self) -> float:
        """Verified inputs / all inputs (the κ = 0 certified robust accuracy)."""
        return float(self.verified.float().mean().item()) if self.verified.numel() else float("nan")

    def accuracy_estimate(self, confidence: float = 0.95) -> Estimate:
        """Verified accuracy with an exact (Clopper–Pearson) interval over the inputs (as a
        sample of the data distribution; the per-input verdicts themselves are deterministic)."""
        k, n = int(self.verified.sum().item()), int(self.verified.numel())
        lo, hi = clopper_pearson(k, n, confidence=confidence)
        return Estimate(k / n if n else float("nan"), float(lo), float(hi), k, n, confidence, "two-sided")


def verify(model: nn.Module | VerifiedNetwork, x: Tensor, y: Tensor, eps: float | Tensor, method: str = "crown", *,
           intermediate: str = "crown", normalize: tuple[Sequence[float], Sequence[float]] | None = None,
           clip: tuple[float, float] | None = (0.0, 1.0), dtype: torch.dtype | None = None, batch_size: int = 32,
           progress: Callable[[int, int], None] | None = None) -> VerificationResult:
    """Verify L∞ robustness of each input: lower bound of f_y − f_j > 0 for every j ≠ y over the ball.

    Args:
        model: a supported network (module docs; evaluated in eval mode, not modified) or a
            prepared :class:`VerifiedNetwork`.
        x: inputs (B, …) in [0, 1] before normalisation.
        y: true labels (B,).
        eps: L∞ radius in [0, 1] pixel units; a float or one per input (B,).
        method: ``"ibp"`` or ``"crown"`` (margins bounded with the specification matrix C).
        intermediate: for CROWN, ``"crown"`` (default) or ``"ibp"`` intermediate bounds (CROWN-IBP).
        normalize: ``(mean, std)`` applied before the model (the ball stays in [0, 1] space).
        clip: the valid input range the ball is intersected with (None: no intersection).
        dtype: arithmetic of the bounds (default: the model's dtype; float64 for tighter rounding).
        batch_size: inputs bounded together (CROWN's memory grows with it).
        progress: called as ``progress(done, total)`` after each batch.

    Returns:
        a :class:`VerificationResult` (tensors on CPU).
    """
    import time

    if method not in VERIFY_METHODS:
        raise SpecError(f"method must be one of {VERIFY_METHODS}, got {method!r}")
    if intermediate not in ("crown", "ibp"):
        raise SpecError(f"intermediate must be 'crown' or 'ibp', got {intermediate!r}")
    y = torch.as_tensor(y).long().reshape(-1).cpu()
    if not isinstance(x, Tensor) or x.shape[0] != y.shape[0]:
        raise SpecError(f"x (B, …) and y (B,) must have the same length, got {getattr(x, 'shape', x)} and {tuple(y.shape)}")
    if int(batch_size) < 1:
        raise SpecError(f"batch_size must be >= 1, got {batch_size}")
    t0 = time.perf_counter()
    net = _network(model, x[:max(1, batch_size)], normalize, dtype)
    k = net.num_outputs
    eps_all = torch.as_tensor(eps).detach().cpu() if isinstance(eps, Tensor) else eps
    bounds, correct = [], []
    with torch.no_grad():
        for start in range(0, x.shape[0], batch_size):
            xb, yb = x[start:start + batch_size], y[start:start + batch_size]
            eb = eps_all[start:start + batch_size] if isinstance(eps_all, Tensor) and eps_all.ndim == 1 else eps_all
            lo, hi = _prepare(net, xb, eb, clip)
            c = margin_spec(yb.to(lo.device), k).to(lo)
            if method == "ibp":
                relax, inter = _propagate(net, lo, hi, crown=False)
                lower = _ibp_spec_lower(net, c, inter)
            else:
                relax, _ = _propagate(net, lo, hi, crown=intermediate == "crown")
                lower = _backward(net, len(net.ops), c, relax, lo, hi)
            full = torch.full((lower.shape[0], k), float("inf"), dtype=lower.dtype, device=lower.device)
            others = torch.ones(lower.shape[0], k, dtype=torch.bool, device=lower.device)
            others[torch.arange(lower.shape[0]), yb.to(lower.device)] = False
            full[others] = lower.reshape(-1)
            bounds.append(full.cpu())
            correct.append(net.forward(xb.to(device=net.device, dtype=net.dtype)).argmax(1).cpu() == yb)
            if progress is not None:
                progress(min(start + batch_size, x.shape[0]), x.shape[0])
    margins = torch.cat(bounds) if bounds else torch.empty(0, k)
    lower_min = margins.min(1).values if margins.numel() else torch.empty(0)
    name = "crown-ibp" if method == "crown" and intermediate == "ibp" else method
    return VerificationResult(name, eps_all, lower_min > 0, lower_min, margins,
                              torch.cat(correct) if correct else torch.empty(0, dtype=torch.bool),
                              time.perf_counter() - t0)

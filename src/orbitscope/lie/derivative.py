"""The Lie derivative of a model along a generator, end to end and attributed to its layers.

Definition (Gruver, Finzi, Goldblum & Wilson, "The Lie Derivative for Measuring Learned
Equivariance", ICLR 2023, Eq. 4)::

    L_X f(x) = d/dt [ρ_out(g_t)⁻¹ f(ρ_in(g_t) x)] at t = 0 = J_f(x) · X_in x − X_out f(x)
    LEE(x)   = ‖L_X f(x)‖²  (the squared Euclidean norm over every output value)

``X_in x = d/dt ρ_in(g_t) x`` is the input kind's generator and ``X_out`` the output kind's
(zero for class scores, the vector-field action for flow, the box action for detections). The
paper's Eq. 4 squares the norm; its authors' end-to-end script averages ``|·|`` instead (their
issue #6), while their layer-wise script squares: orbitscope squares everywhere.

How each part is computed:

* ``J_f(x) · v``: forward-mode automatic differentiation through the model
  (``torch.autograd.forward_ad``), exact to float precision, one pass;
* ``X x`` for every data kind: the **symmetric difference of the kind's own action**,
  ``(ρ(g_d) x − ρ(g_{−d}) x) / 2d``, computed in float64. Resampling by bilinear interpolation has a
  kink at ``t = 0`` (sampling points sit on pixel centres), where the derivative is one-sided and
  float rounding would pick the side pixel by pixel; the symmetric difference is the average of
  the two one-sided derivatives (exactly so for translations, to O(d) for rotations and scales).
  The step ``d`` moves the farthest pixel by :data:`STEP_PIXELS` (1e-3 px), well above float64
  rounding and far below the pixel spacing (:func:`default_step`).

The output of a classifier is its class probabilities by default (:data:`Scores`), as in the
authors' code (their end-to-end and layer-wise scripts both differentiate ``softmax(model(x))``).

Units: LEE is in (output unit)² per (generator unit)², e.g. probability² / radian² for a classifier
along ``rotation``; see :mod:`orbitscope.lie.generators` for the units of ``t``.

Layer attribution (the paper's decomposition): for a model that is a composition of layers,
``L_X (f_L ∘ … ∘ f_1) = Σ_i J_{>i} · (L_X f_i)``. Every call of a leaf module ``i`` has its own
defect ``δ_i = (tangent of its output, given equivariant tangents X(h) on its inputs) − X(output)``,
and ``c_i = J_{>i} δ_i`` is its contribution to the end-to-end ``L_X f``. The contributions are
computed **exactly**, one forward-mode pass per leaf-module call (no estimator, so no variance;
see :func:`_layer_terms` for how skip connections are handled), and add up to the end-to-end
derivative: Σ_i c_i = L_X f to float precision. Operations outside leaf modules (``torch.relu``, reshapes, padding) count
with the module that consumes their output; what happens after the last module's output is its
own term, ``"(output)"``. Intermediate feature maps (B, C, h, w) carry the spatial part of the
generator on their own grid (a translation by t input pixels moves an h × w map by t·w/W);
other features (vectors, per-point features) carry none, so a point network's whole derivative
enters at the first layer that reads coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor, nn

from ..engine.model_call import Normalizer
from ..errors import ModelError, SpecError
from ..group.elements import Transforms
from ..kinds.base import get_kind
from ..kinds.boxes import Boxes
from ..kinds.image import warp_images
from ..tasks.base import Task
from ..tasks.classification import to_probabilities
from .generators import Generator, get_generator

__all__ = ["STEP_PIXELS", "Method", "Scores", "default_step", "tangent", "output_vector", "LieTerms", "lie_terms", "check_generator"]

#: how far (pixels, or the data's length unit) the symmetric difference moves the farthest point
STEP_PIXELS = 1e-3
#: ``"jvp"``: forward-mode derivative through the model; ``"difference"``: symmetric difference of
#: the whole composite ``ρ_out⁻¹ f ρ_in`` (for models without forward-mode derivatives, e.g. ONNX)
Method = Literal["jvp", "difference"]
#: A classifier's output as differentiated: ``"probabilities"`` (default: the class probabilities
#: the task reads, a softmax of logits, as Gruver et al.'s code does; bounded and free of the
#: logits' arbitrary scale and offset) or ``"raw"`` (the scores as the model returns them)
Scores = Literal["probabilities", "raw"]


def frame_radius(kind: str, x: Any, context: dict[str, Any]) -> float:
    """Distance from the frame's centre to its farthest point: the half-diagonal of an image, a
    frame or a view (pixels), or the largest norm of a point cloud."""
    if kind == "points":
        points = torch.as_tensor(x).double()
        return float(torch.linalg.vector_norm(points, dim=-1).max()) if points.numel() else 1.0
    size = context.get("view_size") or context.get("image_size") or tuple(x.shape[-2:])
    return 0.5 * float(np.hypot(size[0], size[1]))


def default_step(generator: Generator, radius: float) -> float:
    """The symmetric difference's step ``d`` (in the generator's unit): ``g_d`` moves the farthest
    point of a frame of ``radius`` by :data:`STEP_PIXELS` (photometric generators: ``d`` = 1e-3)."""
    return STEP_PIXELS / max(float(generator.reach(max(radius, 1.0))), 1e-12)


def check_generator(generator: Generator, kind: str) -> None:
    """SpecError when the generator cannot act on the data kind (3-D rotations on images,
    photometric generators on point clouds or flow fields)."""
    if generator.dim == 3 and kind != "points":
        raise SpecError(f"generator {generator.name!r} rotates in 3-D and acts on point clouds only, not on "
                        f"{kind!r} inputs; use one of rotation, translate_x, translate_y, scale, shear, brightness, contrast")
    if not generator.spatial and kind in ("points", "flow"):
        raise SpecError(f"generator {generator.name!r} changes image values and does not act on {kind!r} inputs; use a "
                        "spatial generator (so3_x, so3_y, so3_z, rotation, translate_x, ...)")


def _act(kind: str, data: Any, generator: Generator, t: float, context: dict[str, Any]) -> Any:
    k = get_kind(kind)
    return k.rows(k.act(data, generator.element(t), layout="orbit", **context))


def _double(data: Any) -> Any:
    if isinstance(data, Boxes):
        return Boxes(data.xyxy.double(), data.labels, data.valid, None if data.scores is None else data.scores.double())
    return data.double()


def tangent(kind: str, data: Any, generator: str | Generator, step: float, **context: Any) -> Any:
    """``X x = d/dt ρ(g_t) x`` at t = 0 for data of ``kind`` (see the module docstring): the
    symmetric difference of the kind's action at ``±step``, in float64. Boxes give an (B, N, 4)
    tensor of corner velocities; other kinds a float64 tensor shaped like the data."""
    gen = get_generator(generator)
    x = _double(data)
    plus, minus = _act(kind, x, gen, step, context), _act(kind, x, gen, -step, context)
    if isinstance(plus, Boxes):
        return (plus.xyxy - minus.xyxy) / (2 * step)
    return (plus - minus) / (2 * step)


def output_vector(outputs: Any) -> Tensor:
    """A task's outputs as one (B, D) tensor: tensors flattened; detections as the xyxy corners
    and scores of their valid boxes (padding rows 0)."""
    if isinstance(outputs, Tensor):
        return outputs.reshape(outputs.shape[0], -1)
    if isinstance(outputs, Boxes):
        valid = outputs.valid
        xyxy = torch.where(valid[..., None], outputs.xyxy, torch.zeros_like(outputs.xyxy))
        parts = [xyxy.reshape(len(outputs), -1)]
        if outputs.scores is not None:
            parts.append(torch.where(valid, outputs.scores, torch.zeros_like(outputs.scores)))
        return torch.cat(parts, 1)
    raise ModelError(f"the Lie derivative needs tensor or box outputs, got {type(outputs).__name__}")


def output_context(context: dict[str, Any]) -> dict[str, Any]:
    """The action context of outputs: they live in the model's input frame (the view of a window)."""
    out = {k: v for k, v in context.items() if k != "view_size"}
    if context.get("view_size") is not None:
        out["image_size"] = tuple(context["view_size"])
    return out


def output_tangent(task: Task, outputs: Any, generator: Generator, step: float, context: dict[str, Any]) -> Tensor:
    """``X_out f(x)`` as a (B, D) float64 tensor aligned with :func:`output_vector`."""
    kind = task.output_kind or "scores"
    if kind in ("scores", "label"):
        return torch.zeros(output_vector(outputs).shape, dtype=torch.float64, device=output_vector(outputs).device)
    moved = tangent(kind, outputs, generator, step, **output_context(context))
    if isinstance(outputs, Boxes):
        moved = torch.where(outputs.valid[..., None], moved, torch.zeros_like(moved)).reshape(len(outputs), -1)
        if outputs.scores is not None:  # scores are invariant
            moved = torch.cat([moved, torch.zeros(outputs.scores.shape, dtype=moved.dtype, device=moved.device)], 1)
        return moved
    return moved.reshape(moved.shape[0], -1)


def _feature_tangent(h: Tensor, generator: Generator, step: float, frame: tuple[int, int]) -> Tensor:
    """X on an intermediate feature map (B, C, h, w) (or (..., h, w)): the spatial part of the
    generator on the map's own grid; zero for other tensors and for photometric generators."""
    if not generator.spatial or generator.dim != 2 or h.ndim < 4 or not h.is_floating_point():
        return torch.zeros_like(h)
    hh, ww = h.shape[-2:]
    fh, fw = frame
    scale = np.array([ww / fw, hh / fh])
    flat = h.detach().double().reshape(-1, 1, hh, ww)
    plus, minus = (warp_images(flat, Transforms.create(1, linear=g.linear, shift=g.shift * scale), clip=False)[0]
                   for g in (generator.element(step), generator.element(-step)))
    return ((plus - minus) / (2 * step)).reshape(h.shape).to(h.dtype)


@dataclass
class LieTerms:
    """The Lie derivative of one batch.

    Attributes:
        derivative: ``L_X f(x)`` per sample, (B, D) float64 (D = output values).
        lee: ``‖L_X f(x)‖²`` per sample, (B,) float64.
        layers: names of the leaf modules with a contribution (call order of first use), then
            ``"(output)"``; empty when layers were not asked for.
        layer_lee: ``‖c_i‖²`` per sample and layer, (B, len(layers)) float64.
        layer_sum: ``Σ_i c_i`` per sample, (B, D) float64 (equals ``derivative`` to float precision).
        layer_types: the class name of each layer's module (``""`` for ``"(output)"``).
    """

    derivative: Tensor
    lee: Tensor
    layers: list[str]
    layer_lee: Tensor | None
    layer_sum: Tensor | None
    layer_types: list[str] | None = None


class _Hooks:
    """Forward hooks on every leaf module that rewrite the tangent of a call's output to the
    equivariant one, ``X(output)``, for the calls before ``reset_below`` (see :func:`_layer_terms`);
    ``reset_below = None`` records the calls and rewrites nothing."""

    def __init__(self, model: nn.Module, generator: Generator, step: float, frame: tuple[int, int],
                 out_tangent: Callable[[Tensor], Tensor]) -> None:
        self.generator, self.step, self.frame, self.out_tangent = generator, step, frame, out_tangent
        self.reset_below: int | None = None
        self.record_defects = False  # keep each reset call's defect (tangent − X(output))
        self.defects: list[Tensor | None] = []
        self.probe_t: list[Tensor] | None = None  # probe pass: output + t_i · defect_i, t_i = 0 leaves
        self.calls: list[str] = []
        self.x_cache: list[Tensor | None] = []
        self.output_call: int | None = None  # the call whose output is the model's output
        self.ptrs: list[int] = []
        self.count = 0
        leaves = [(name, m) for name, m in model.named_modules() if not list(m.children()) and name]
        self.types = {name: type(m).__name__ for name, m in leaves}
        self.handles = [m.register_forward_hook(self._make(name)) for name, m in leaves]

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def _make(self, name: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: Any, out: Any) -> Any:
            if not isinstance(out, Tensor) or not out.is_floating_point():
                return None
            i = self.count
            self.count += 1
            if self.probe_t is not None:  # a grad-enabled pass without tangents
                d = self.defects[i]
                if d is None:
                    return None
                t = self.probe_t[i]
                if out.ndim == 0 or out.shape[0] != t.shape[0]:
                    raise SpecError(f"layers='probes' needs every leaf module to keep the batch as the first dimension "
                                    f"of its output, but {name!r} returns {tuple(out.shape)} for {t.shape[0]} samples "
                                    "(the model folds samples into rows, e.g. per-point layers); use layers=True (exact)")
                return out + t.reshape(-1, *([1] * (out.ndim - 1))).to(out.dtype) * d.to(out.dtype)
            primal, tan = fwAD.unpack_dual(out)
            if self.reset_below is None:  # recording pass
                self.calls.append(name)
                self.ptrs.append(primal.data_ptr())
                self.x_cache.append(None)
                self.defects.append(None)
                return None
            if i >= self.reset_below or tan is None:
                return None
            if self.x_cache[i] is None:
                self.x_cache[i] = self.out_tangent(primal) if i == self.output_call else \
                    _feature_tangent(primal, self.generator, self.step, self.frame)
            x = self.x_cache[i].to(tan.dtype)  # type: ignore[union-attr]
            if self.record_defects:
                self.defects[i] = (tan - x).detach().clone()
            return fwAD.make_dual(primal, x)
        return hook


def lie_terms(model: nn.Module, task: Task, x: Tensor, generator: str | Generator, *, context: dict[str, Any] | None = None,
              normalize: Normalizer | None = None, step: float | None = None, method: Method = "jvp",
              layers: bool | str = False, scores: Scores = "probabilities", probes: int = 64,
              seed: int = 0) -> LieTerms:
    """The Lie derivative of ``model`` along ``generator`` on one prepared input batch ``x`` of
    ``task.input_kind`` (see the module docstring). ``context``: the action context (``image_size``
    of the input frame, by default the input's own; ``view_size`` for a window over context;
    ``interpolation``/``padding``).
    ``layers`` (``method="jvp"`` only): also the per-layer contributions, ``True`` or ``"exact"``
    (one forward-mode pass per leaf-module call) or ``"probes"`` (the unbiased estimator of
    :func:`_probe_terms` from ``probes`` Gaussian probes, seeded by ``seed``: its cost does not grow
    with the depth). ``scores``: what a classifier's output is differentiated as (see
    :data:`Scores`)."""
    gen = get_generator(generator)
    check_generator(gen, task.input_kind)
    ctx = dict(context or {})
    frame_of = getattr(get_kind(task.input_kind), "frame_size", None)
    if frame_of is not None:  # targets and outputs live in the input's frame (the context for windows)
        ctx.setdefault("image_size", frame_of(x))
    norm = normalize or Normalizer(None)
    step = float(step) if step is not None else default_step(gen, frame_radius(task.input_kind, x, ctx))
    if not step > 0:
        raise SpecError(f"step must be > 0, got {step}")
    v = tangent(task.input_kind, x, gen, step, **ctx)
    view = _act(task.input_kind, x, gen, 0.0, ctx) if task.input_kind == "window" else x
    frame = tuple(view.shape[-2:]) if task.input_kind != "points" else (1, 1)

    if scores not in ("probabilities", "raw"):
        raise SpecError(f"scores must be 'probabilities' or 'raw', got {scores!r}")
    as_probabilities = scores == "probabilities" and task.output_kind == "scores" and hasattr(task, "output")

    def forward(inp: Tensor) -> Any:
        out = task.read_outputs(model(norm(inp)))
        return to_probabilities(out, task.output) if as_probabilities else out  # type: ignore[attr-defined]

    if layers not in (False, True, "exact", "probes"):
        raise SpecError(f"layers must be False, True/'exact' or 'probes', got {layers!r}")
    if layers == "probes" and not (isinstance(probes, int) and probes >= 1):
        raise SpecError(f"probes must be a positive number of Gaussian probes, got {probes!r}")
    if method == "difference":
        if layers:
            raise SpecError("layer attribution needs method='jvp' (forward-mode derivatives through the model)")
        return _difference(forward, task, x, gen, step, ctx)
    if method != "jvp":
        raise SpecError(f"method must be 'jvp' or 'difference', got {method!r}")
    hooks = _Hooks(model, gen, step, frame, lambda y: output_tangent(task, y, gen, step, ctx).reshape(y.shape)) \
        if layers else None
    try:
        with torch.no_grad():
            if hooks is not None:  # this pass also records the leaf-module calls
                hooks.reset_below, hooks.count = None, 0
            outputs, tan, ptr = _jvp(forward, view, v.to(view.dtype))
            x_out = output_tangent(task, outputs, gen, step, ctx)
            derivative = tan.double() - x_out
            if hooks is None:
                return LieTerms(derivative, derivative.pow(2).sum(1), [], None, None)
            hooks.output_call = next((i for i in reversed(range(len(hooks.calls))) if hooks.ptrs[i] == ptr), None) \
                if isinstance(outputs, Tensor) else None
            if layers == "probes":
                return _probe_terms(hooks, forward, view, v.to(view.dtype), x_out, derivative, probes, seed)
            return _layer_terms(hooks, forward, view, v.to(view.dtype), tan, x_out, derivative)
    finally:
        if hooks is not None:
            hooks.close()


def _jvp(forward: Callable[[Tensor], Any], x: Tensor, v: Tensor) -> tuple[Any, Tensor, int]:
    """(outputs without tangents, tangent of :func:`output_vector` (B, D), the address of the
    output's storage, which identifies the leaf call that produced it)."""
    with fwAD.dual_level():
        try:
            out = forward(fwAD.make_dual(x, v))
        except (NotImplementedError, RuntimeError) as exc:
            if "forward AD" in str(exc) or "forward-mode" in str(exc) or "not implemented" in str(exc).lower():
                raise ModelError(f"the model has an operation without a forward-mode derivative ({exc}); use "
                                 "method='difference' (a symmetric difference of the whole model)") from None
            raise
        vec = output_vector(out)
        primal, tan = fwAD.unpack_dual(vec)
        if tan is None:
            raise ModelError("the model's output carries no forward-mode derivative with respect to its input: the "
                             "model detaches it (.detach(), torch.no_grad(), a round trip through numpy) or ignores "
                             "it; use method='difference' (a symmetric difference of the whole model)")
        plain = _strip(out)
    return plain, tan.detach().clone(), primal.data_ptr()


def _strip(outputs: Any) -> Any:
    """Outputs without their forward-mode tangents."""
    if isinstance(outputs, Tensor):
        return fwAD.unpack_dual(outputs).primal.detach().clone()
    if isinstance(outputs, Boxes):
        return Boxes(_strip(outputs.xyxy), outputs.labels.clone(), outputs.valid.clone(),
                     None if outputs.scores is None else _strip(outputs.scores))
    return outputs


def _layer_terms(hooks: _Hooks, forward: Callable[[Tensor], Any], x: Tensor, v: Tensor, s_0: Tensor, x_out: Tensor,
                 derivative: Tensor) -> LieTerms:
    """Contributions by resetting prefixes of the calls: with ``S_m`` the output's tangent when
    calls ``0 … m−1`` carry the equivariant tangent ``X(y)`` and later calls propagate freely,
    call ``k`` contributes ``c_k = S_k − S_{k+1}`` (paths that bypass call k, e.g. skip
    connections, are the same in both and cancel) and the output term is ``S_n − X_out f``;
    ``S_0 − X_out f = L_X f``, so the contributions add up to the end-to-end derivative. ``s_0``
    is S_0, from the end-to-end pass that recorded the calls."""
    s_prev = s_0
    names, index = _call_names(hooks)
    contributions = torch.zeros((x_out.shape[0], len(names), x_out.shape[1]), dtype=torch.float64, device=x_out.device)
    s_prev = s_prev.double()
    for m in range(1, len(hooks.calls) + 1):
        hooks.reset_below, hooks.count = m, 0
        _, s_m, _ = _jvp(forward, x, v)
        contributions[:, index[hooks.calls[m - 1]]] += s_prev - s_m.double()
        s_prev = s_m.double()
    contributions[:, -1] = s_prev - x_out
    total = contributions.sum(1)
    return LieTerms(derivative, derivative.pow(2).sum(1), names, contributions.pow(2).sum(2), total,
                    [hooks.types.get(n, "") for n in names])


def _call_names(hooks: _Hooks) -> tuple[list[str], dict[str, int]]:
    names: list[str] = []
    index: dict[str, int] = {}
    for name in hooks.calls:
        if name not in index:
            index[name] = len(names)
            names.append(name)
    return names + ["(output)"], index


def _probe_terms(hooks: _Hooks, forward: Callable[[Tensor], Any], x: Tensor, v: Tensor, x_out: Tensor,
                 derivative: Tensor, probes: int, seed: int) -> LieTerms:
    """Layer contributions estimated, at a cost that does not grow with the depth: one
    forward-mode pass with every call reset records each call's defect δ_i; then, in a
    grad-enabled pass whose call outputs become ``y_i + t_i δ_i`` (``t_i = 0``), each probe
    ``u ~ N(0, I)`` on the output gives ``∂(u · f)/∂t_i = u · c_i`` for every call by one backward
    pass, and ``E[(u · c_i)²] = ‖c_i‖²``: the mean over ``probes`` probes is unbiased, with
    variance ``2‖c_i‖⁴ / probes`` (the estimator of Gruver et al.'s layer-wise code, applied to
    exact defects). Calls of one module are summed before squaring. The ``"(output)"`` term is
    exact; ``layer_sum`` is not available (None)."""
    names, index = _call_names(hooks)
    hooks.reset_below, hooks.count, hooks.record_defects = len(hooks.calls), 0, True
    _, s_all, _ = _jvp(forward, x, v)
    hooks.record_defects = False
    b = x_out.shape[0]
    generator = torch.Generator(device="cpu").manual_seed(seed)
    hooks.probe_t = [torch.zeros(b, dtype=torch.float64, device=x.device, requires_grad=True) for _ in hooks.calls]
    hooks.count = 0
    estimate = torch.zeros((b, len(names)), dtype=torch.float64, device=x_out.device)
    try:
        with torch.enable_grad():
            out = output_vector(forward(x))
            for _ in range(probes):
                u = torch.randn(out.shape, generator=generator, dtype=torch.float64).to(out.device, out.dtype)
                grads = torch.autograd.grad((u * out).sum(), hooks.probe_t, retain_graph=True, allow_unused=True)
                per_module = torch.zeros((b, len(names) - 1), dtype=torch.float64, device=x_out.device)
                for i, g in enumerate(grads):
                    if g is not None:
                        per_module[:, index[hooks.calls[i]]] += g.detach().double()
                estimate[:, :-1] += per_module.pow(2)
    finally:
        hooks.probe_t = None
    estimate[:, :-1] /= probes
    estimate[:, -1] = (s_all.double() - x_out).pow(2).sum(1)
    return LieTerms(derivative, derivative.pow(2).sum(1), names, estimate, None, [hooks.types.get(n, "") for n in names])


def _difference(forward: Callable[[Tensor], Any], task: Task, x: Tensor, gen: Generator, step: float,
                ctx: dict[str, Any]) -> LieTerms:
    """``(F(d) − F(−d)) / 2d`` with ``F(t) = ρ_out(g_t)⁻¹ f(ρ_in(g_t) x)`` (see :data:`Method`)."""
    sides = []
    with torch.no_grad():
        for t in (step, -step):
            xt = _act(task.input_kind, x, gen, t, ctx)
            out = forward(xt)
            g = gen.element(t)[np.zeros(len(x), dtype=int)]
            back = task.canonicalize(out, g, **ctx) if task.output_kind not in ("scores", "label", "", None) else out
            sides.append(output_vector(back).double())
    if sides[0].shape != sides[1].shape:
        raise ModelError("the model's outputs at +step and -step differ in shape (detections appear or vanish); "
                         "the Lie derivative needs outputs that change smoothly")
    derivative = (sides[0] - sides[1]) / (2 * step)
    return LieTerms(derivative, derivative.pow(2).sum(1), [], None, None)

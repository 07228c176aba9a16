"""Reference models, a tiny architecture registry and inference helpers.

Conventions
-----------
* Images are float tensors of shape ``(B, C, H, W)`` with values in ``[0, 1]``
  (any normalisation is the model's own business).
* Models return unnormalised logits of shape ``(B, num_classes)``.
* A model *config* is a JSON-able ``dict`` with an ``"arch"`` key naming a
  registered architecture plus the keyword arguments of its constructor;
  ``build_model(config)`` rebuilds an (untrained) model from it.

The reference architecture is our own small CNN of the same layout idea as the plain CNN of
NERO's MNIST case study (Zhao et al., arXiv 2305.19889): six conv blocks (conv, BatchNorm, ReLU)
with average pooling, then a 576 -> 64 -> 10 MLP head; but its convolutions are 3x3 and narrow
(8 … 64 channels, 73,866 parameters), it pools 2x2 after blocks 2, 4 and 6 of a 28x28 input
and its head uses ReLU without BatchNorm. NERO's own network (7x7 and 5x5 convolutions, 24 … 96
channels, 29x29 input, 625,234 parameters) is :class:`orbitscope.models.nero_cnn.NeroCNN`.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from .registry import check_arch_args, register_model

__all__ = [
    "ReferenceCNN",
    "SmallCNN",
    "ZooConvNet",
    "default_config",
    "fold_batchnorm",
    "FoldedLinearBatchNorm",
    "optimize_for_inference",
    "model_hash",
    "set_eval_mode",
    "eval_mode",
    "model_device",
]

logger = logging.getLogger(__name__)

DEFAULT_WIDTHS: tuple[int, ...] = (8, 16, 16, 32, 32, 64)
#: Number of 2x2 average-pooling stages, i.e. spatial size is divided by 2**3.
_N_POOLS = 3
#: Spatial size (per side) of the feature map entering the FC head for 28x28 input.
_FEATURE_SIDE = 3


class ReferenceCNN(nn.Module):
    """Our small MNIST reference CNN (not rotation-equivariant by construction).

    Six conv blocks and a 576-feature head like NERO's MNIST CNN, but much smaller and with 3x3
    convolutions; it is *not* NERO's shape (that is :class:`orbitscope.models.nero_cnn.NeroCNN`).

    Layout: ``features`` is a flat ``nn.Sequential`` of
    ``[Conv2d(3x3, padding=1), BatchNorm2d, ReLU] x 2, AvgPool2d(2)`` repeated
    three times (six conv blocks), followed by ``classifier``
    ``Flatten -> Linear(widths[-1]*3*3, hidden) -> ReLU -> Linear(hidden, num_classes)``.

    With the default widths ``(8, 16, 16, 32, 32, 64)`` a 28x28 input becomes a
    64x3x3 = 576-feature vector (28 -> 14 -> 7 -> 3 with floor pooling).
    Inputs must be ``(B, in_channels, H, W)`` with ``H // 8 == W // 8 == 3``
    (28x28 is the intended size); anything else raises ``ValueError``.

    Args:
        in_channels: image channels ``C``.
        num_classes: number of output logits.
        widths: output channels of the six conv blocks.
        hidden: width of the hidden FC layer.
    """

    arch_name = "reference_cnn"
    __jit_unused_properties__ = ["config"]  # keep the module scriptable with torch.jit.script

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        widths: Sequence[int] = DEFAULT_WIDTHS,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        widths = check_arch_args("ReferenceCNN", in_channels, num_classes, widths, hidden, n_widths=6)
        self.in_channels = int(in_channels)
        self.num_classes = int(num_classes)
        self.widths = widths
        self.hidden = int(hidden)

        layers: list[nn.Module] = []
        prev = self.in_channels
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(prev, w, kernel_size=3, padding=1), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            if i % 2 == 1:
                layers.append(nn.AvgPool2d(2))
            prev = w
        self.features = nn.Sequential(*layers)
        self.n_features = widths[-1] * _FEATURE_SIDE * _FEATURE_SIDE
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(self.n_features, self.hidden),
            nn.ReLU(inplace=True),
            nn.Linear(self.hidden, self.num_classes),
        )

    @property
    def config(self) -> dict[str, Any]:
        """JSON-able config such that ``build_model(config)`` rebuilds this architecture."""
        return {
            "arch": self.arch_name,
            "in_channels": self.in_channels,
            "num_classes": self.num_classes,
            "widths": list(self.widths),
            "hidden": self.hidden,
        }

    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor) or x.dim() != 4:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"ReferenceCNN expected input of shape (B, C, H, W) = (B, {self.in_channels}, 28, 28), got {got}"
            )
        _, c, h, w = x.shape
        if c != self.in_channels:
            raise ValueError(
                f"ReferenceCNN expected input of shape (B, C, H, W) with C={self.in_channels} channels, "
                f"got {tuple(x.shape)} (C={c})"
            )
        side = 2**_N_POOLS
        if h // side != _FEATURE_SIDE or w // side != _FEATURE_SIDE:
            raise ValueError(
                f"ReferenceCNN expected input of shape (B, C, H, W) = (B, {self.in_channels}, 28, 28); "
                f"got {tuple(x.shape)}: a {h}x{w} image gives a {h // side}x{w // side} feature map that does not "
                f"fit the {self.n_features}-feature FC layer (needs 3x3, i.e. H and W in [24, 31])"
            )

    def forward(self, x: Tensor) -> Tensor:
        """Map images ``(B, C, H, W)`` in ``[0, 1]`` to logits ``(B, num_classes)``."""
        if not (torch.jit.is_scripting() or torch.jit.is_tracing()):
            self._check_input(x)
        return self.classifier(self.features(x))


def default_config() -> dict[str, Any]:
    """Config of the default :class:`ReferenceCNN` (1 channel, 10 classes, default widths)."""
    return {
        "arch": ReferenceCNN.arch_name,
        "in_channels": 1,
        "num_classes": 10,
        "widths": list(DEFAULT_WIDTHS),
        "hidden": 64,
    }


class ZooConvNet(nn.Module):
    """What the model-zoo CNNs share (:class:`SmallCNN` here, ``VGGBN`` and ``SmallResNet`` in
    :mod:`orbitscope.models.zoo_nets`): image channels, logits, three conv widths and a hidden
    width, checked; the config :func:`~orbitscope.models.registry.build_model` rebuilds them
    from; and the input check (any (B, C, H, W) of at least 12 × 12 pixels)."""

    arch_name = ""

    def __init__(self, in_channels: int, num_classes: int, widths: Sequence[int], hidden: int) -> None:
        super().__init__()
        self.widths = check_arch_args(type(self).__name__, in_channels, num_classes, widths, hidden, 3)
        self.in_channels, self.num_classes, self.hidden = in_channels, num_classes, hidden

    @property
    def config(self) -> dict[str, Any]:
        """JSON-able config such that ``build_model(config)`` rebuilds this architecture."""
        return {"arch": self.arch_name, "in_channels": self.in_channels, "num_classes": self.num_classes,
                "widths": list(self.widths), "hidden": self.hidden}

    def check_input(self, x: Tensor) -> None:
        """ValueError unless ``x`` is (B, in_channels, H, W) with H, W >= 12."""
        if x.ndim != 4 or x.shape[1] != self.in_channels or min(x.shape[-2:]) < 12:
            raise ValueError(f"{type(self).__name__} expects (B, {self.in_channels}, H, W) with H, W >= 12, "
                             f"got {tuple(x.shape)}")


class SmallCNN(ZooConvNet):
    """A five-layer CNN for model zoos (ML4ML's MNIST assessor used a 5-layer CNN).

    ``conv1 → ReLU → max-pool 2 → conv2 → ReLU → max-pool 2 → conv3 → ReLU → adaptive average
    pool to 3×3 → fc1 → ReLU → fc2``; 3×3 convolutions with padding 1. The last two convolutions
    (``conv2``, ``conv3``) are the layers ML4ML probes. Any input of at least 12×12 pixels.

    Args:
        in_channels: image channels.
        num_classes: number of output logits.
        widths: output channels of the three convolutions.
        hidden: width of ``fc1``.
    """

    arch_name = "small_cnn"

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths: Sequence[int] = (8, 16, 32),
                 hidden: int = 64) -> None:
        super().__init__(in_channels, num_classes, widths, hidden)
        w1, w2, w3 = self.widths
        self.conv1 = nn.Conv2d(in_channels, w1, 3, padding=1)
        self.conv2 = nn.Conv2d(w1, w2, 3, padding=1)
        self.conv3 = nn.Conv2d(w2, w3, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.squeeze = nn.AdaptiveAvgPool2d(3)
        self.fc1 = nn.Linear(w3 * 9, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = self.squeeze(torch.relu(self.conv3(x)))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


register_model(ReferenceCNN.arch_name, ReferenceCNN)
register_model(SmallCNN.arch_name, SmallCNN)

# --------------------------------------------------------------------------- inference helpers


def _fold_conv_bn(conv: nn.Conv2d | nn.Linear, bn: nn.BatchNorm2d | nn.BatchNorm1d) -> nn.Conv2d | nn.Linear:
    """Return a new layer (a copy of ``conv``: a Conv2d, or a Linear before a BatchNorm1d) equal
    to ``bn(conv(x))`` with BN in eval mode (running statistics)."""
    assert bn.running_mean is not None and bn.running_var is not None
    fused = copy.deepcopy(conv)
    w = conv.weight.detach().to(torch.float64)
    b = conv.bias.detach().to(torch.float64) if conv.bias is not None else torch.zeros(w.shape[0], dtype=torch.float64, device=w.device)
    mean = bn.running_mean.detach().to(torch.float64)
    var = bn.running_var.detach().to(torch.float64)
    gamma = bn.weight.detach().to(torch.float64) if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().to(torch.float64) if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)
    fused.weight = nn.Parameter((w * scale.reshape(-1, *[1] * (w.ndim - 1))).to(conv.weight.dtype))
    fused.bias = nn.Parameter(((b - mean) * scale + beta).to(conv.weight.dtype))
    return fused


class FoldedLinearBatchNorm(nn.Module):
    """A ``Linear -> BatchNorm1d`` pair folded for inputs of rows × features: on a 2-D input it
    runs ``fused`` (one Linear equal to the pair in eval mode); on any other rank, where
    BatchNorm1d normalises axis 1 rather than the Linear's features, it runs the original pair."""

    def __init__(self, fused: nn.Linear, linear: nn.Linear, bn: nn.BatchNorm1d) -> None:
        super().__init__()
        self.fused, self.linear, self.bn = fused, linear, bn

    def forward(self, x: Tensor) -> Tensor:
        return self.fused(x) if x.ndim == 2 else self.bn(self.linear(x))


def _foldable(conv: nn.Module, bn: nn.Module, linear: bool = False) -> bool:
    if not (isinstance(bn, (nn.BatchNorm1d, nn.BatchNorm2d)) and bn.track_running_stats
            and bn.running_mean is not None):
        return False
    if type(conv) is nn.Conv2d and type(bn) is nn.BatchNorm2d:
        return bn.num_features == conv.out_channels
    # a Linear's outputs (rows, features) normalised per feature: the per-point MLPs of point-cloud
    # networks (1×1 convolutions written as matrix products)
    return linear and type(conv) is nn.Linear and type(bn) is nn.BatchNorm1d and bn.num_features == conv.out_features


def _fold_in_place(module: nn.Module, linear: bool = False) -> int:
    """Fold conv->bn pairs (and Linear->BatchNorm1d pairs when ``linear``) inside every
    ``nn.Sequential`` under ``module``; return the count."""
    n = 0
    for child in module.children():
        n += _fold_in_place(child, linear)
    if isinstance(module, nn.Sequential):
        names = list(module._modules.keys())
        for a, b in zip(names[:-1], names[1:]):
            conv, bn = module._modules[a], module._modules[b]
            if conv is not None and bn is not None and _foldable(conv, bn, linear):
                fused = _fold_conv_bn(conv, bn)  # type: ignore[arg-type]
                module._modules[a] = FoldedLinearBatchNorm(fused, conv, bn) if isinstance(conv, nn.Linear) else fused
                module._modules[b] = nn.Identity()
                n += 1
    return n


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a parameter-free model)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode (:func:`set_eval_mode`) for the block, then restore every
    submodule's own ``training`` flag exactly (a caller may have mixed modes on purpose)."""
    modes = {m: m.training for m in model.modules()}
    set_eval_mode(model)
    try:
        yield model
    finally:
        for module, mode in modes.items():
            module.training = mode


def set_eval_mode(model: nn.Module) -> nn.Module:
    """``model.eval()``, tolerating graphs whose mode is fixed (``torch.export`` modules raise
    NotImplementedError: they keep the mode they were exported in). Returns ``model``."""
    try:
        model.eval()
    except NotImplementedError:
        logger.debug("%s does not support eval(); using the mode it was exported in", type(model).__name__)
    return model


def fold_batchnorm(model: nn.Module, *, linear: bool = False) -> nn.Module:
    """Return an eval-mode deep copy with every ``Conv2d -> BatchNorm2d`` pair folded, and with
    ``linear=True`` every ``Linear -> BatchNorm1d`` pair too (a Linear whose outputs, rows ×
    features, the BatchNorm normalises per feature: the per-point layers of point-cloud networks;
    the pair becomes a :class:`FoldedLinearBatchNorm`, which runs the original pair on inputs that
    are not 2-D).

    Pairs are detected as consecutive children of an ``nn.Sequential`` (at any depth).
    The conv (or Linear) gets weights ``W * g / sqrt(var + eps)`` (per output channel) and bias
    ``(b - mean) * g / sqrt(var + eps) + beta``; the BN is replaced by ``nn.Identity``.
    The result equals ``model.eval()`` up to float rounding. ``model`` is not modified.
    """
    folded = set_eval_mode(copy.deepcopy(model))
    n = _fold_in_place(folded, linear)
    logger.debug("fold_batchnorm: folded %d conv/bn pairs in %s", n, type(model).__name__)
    return folded


def optimize_for_inference(
    model: nn.Module, *, fold_bn: bool = True, channels_last: bool = True, compile: bool = False
) -> nn.Module:
    """Return an eval-mode copy prepared for fast inference (``model`` is not modified).

    Args:
        fold_bn: fold BatchNorm into preceding convolutions (:func:`fold_batchnorm`).
        channels_last: convert parameters to ``torch.channels_last`` memory format
            (inputs need not be converted; results are unchanged up to rounding).
        compile: wrap with ``torch.compile`` (slow first call; optional).
    """
    out = fold_batchnorm(model) if fold_bn else set_eval_mode(copy.deepcopy(model))
    if channels_last:
        out = out.to(memory_format=torch.channels_last)
    set_eval_mode(out)
    for p in out.parameters():
        p.requires_grad_(False)
    if compile:
        out = torch.compile(out)  # type: ignore[assignment]
    return out


def model_hash(model: nn.Module) -> str:
    """Stable content hash: first 16 hex chars of sha256 over the state dict.

    Hashes, for every key in sorted order, the key, dtype, shape and the raw bytes
    of the tensor (made contiguous on CPU, so memory format and device do not matter).
    Independent of process, Python hash seed and parameter ``requires_grad``.
    A ``torch.compile`` wrapper hashes like the model it wraps.
    """
    model = getattr(model, "_orig_mod", model)
    h = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        t = state[key]
        if not isinstance(t, Tensor):
            h.update(f"{key}|{type(t).__name__}|{t!r}\n".encode())
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]

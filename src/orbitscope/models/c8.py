"""A C8-equivariant CNN: regular-representation group convolutions for rotations by multiples of 45°.

NERO (Zhao et al., arXiv:2305.19889) compared its MNIST CNNs against an E(2)-steerable CNN for
the cyclic group C8 (Weiler & Cesa 2019, "General E(2)-Equivariant Steerable CNNs", NeurIPS,
arXiv:1911.08251). :class:`C8CNN` is our own network of that kind, built like
:class:`~orbitscope.models.equivariant.P4CNN` (Cohen & Welling 2016, "Group Equivariant
Convolutional Networks", ICML, arXiv:1602.07576) but with eight rotations on the group axis:
a lifting convolution Z² -> C8 and group convolutions C8 -> C8 in the regular representation
(a rotation by 45° rolls the group axis by one).

Filters are rotated by 45° without resampling pixels. Each filter is a learned combination of a
fixed **steerable basis**: Gaussian rings of radius 0, 1, …, k // 2 (σ = 0.6 px) times the circular
harmonics cos(mφ), sin(mφ) up to a frequency cap per ring (:func:`steerable_basis`), sampled on
the k × k grid inside the disk of radius k // 2 + 0.5. Rotating a basis function by any angle is
an exact operation on the continuous function, so the filter rotated by r·45° is the same
continuous filter rotated and then sampled (band-limited, no interpolation of the learned
weights). The bank is built so that the C4 subgroup acts exactly on the grid: the basis at
rotation 2k is ``rot90^k`` of the basis at 0 and the basis at 2k + 1 is ``rot90^k`` of the basis
at 1 (index permutations). Hence:

* rotating a square input by a multiple of 90° rotates every feature map and rolls the group axis
  by two per 90°, exactly (up to float rounding), and the logits (max over the group axis and
  space) are invariant to float precision on square inputs whose side is divisible by 4
  (28 → 14 → 7; the network halves the resolution twice);
* rotating by 45° (or any odd multiple) rolls the group axis by one only approximately: the input
  itself is resampled, the filters are samples of rotated continuous functions, and the 2 × 2
  pooling grid does not rotate with the image. :func:`rotate_c8` acts on feature maps by our warp.

Convention:
    Feature maps on C8 are tensors ``(B, C, 8, H, W)``; index ``r`` on the group axis stands for
    the rotation by ``r · 45°`` counter-clockwise as displayed (rows grow downwards), i.e.
    orbitscope's ``Rotation([45 * r])``; ``r = 2k`` is ``torch.rot90(x, k, dims=(-2, -1))``.
    Rotating the input by ``s · 45°`` acts on C8 feature maps as
    ``y'[:, :, r] = rot(y[:, :, r - s], s · 45°)`` (indices mod 8): exact for even ``s``,
    approximate for odd ``s``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..group.orbits import Rotation
from ..kinds import warp_images
from .registry import check_arch_args, register_model

__all__ = ["ROTATIONS", "steerable_basis", "rotate_c8", "C8LiftingConv", "C8GroupConv", "C8CNN"]

#: Elements of C8: the group axis of every C8 feature map has this length.
ROTATIONS = 8
#: Width (pixels) of the Gaussian radial profile of the basis rings.
RING_SIGMA = 0.6


def _max_frequency(radius: int) -> int:
    """Frequency cap of the ring at ``radius`` px: the radius itself. Higher harmonics alias on so
    few pixels: on 5 × 5 filters and MNIST digits, a random filter's 45° rotation through the
    basis departs from the rotated response by a median 4% with this cap, 6% with ``radius + 1``
    and 8% with ``2 · radius`` (the input warp's own share, a ring without harmonics: 2%)."""
    return radius


def steerable_basis(kernel_size: int) -> Tensor:
    """The fixed filter basis of the C8 convolutions at the eight rotations.

    Basis function j is a ring profile ``exp(-(ρ - ρ_j)² / (2 σ²))`` (σ = :data:`RING_SIGMA`) times
    ``cos(m_j φ)`` or ``sin(m_j φ)``, with ρ_j = 0, 1, …, k // 2 and m_j = 0, 1, …, ρ_j (harmonics
    m_j > 0 are zero at the centre); sampled at the pixel centres with ρ ≤ k // 2 + 0.5 (the corners
    of the square are zero) and scaled to unit L2 norm at rotation 0.

    Args:
        kernel_size: odd filter side k.

    Returns:
        ``(8, J, k, k)`` float64: entry ``[r, j]`` is basis function j rotated by ``r · 45°``
        counter-clockwise as displayed, ``f(R⁻¹ p)``; ``[2k]`` is exactly ``rot90^k`` of ``[0]`` and
        ``[2k + 1]`` exactly ``rot90^k`` of ``[1]``. J = 1 for k = 1, 4 for k = 3, 9 for k = 5.
    """
    if kernel_size < 1 or kernel_size % 2 != 1:
        raise ValueError(f"kernel_size must be odd and positive (so rotations keep the kernel centred), got {kernel_size}")
    c = kernel_size // 2
    coords = torch.arange(kernel_size, dtype=torch.float64) - c
    y, x = torch.meshgrid(coords, coords, indexing="ij")  # x to the right, y down (rows)
    inside = (x**2 + y**2) <= (c + 0.5) ** 2

    def sampled(theta: float) -> Tensor:
        # f rotated by theta CCW as displayed, evaluated at p: f(R⁻¹ p); with y down, R maps
        # (x, y) to (x cos θ + y sin θ, -x sin θ + y cos θ), so R⁻¹ p is:
        ct, st = math.cos(theta), math.sin(theta)
        qx, qy = x * ct - y * st, x * st + y * ct
        rho, phi = torch.sqrt(qx**2 + qy**2), torch.atan2(-qy, qx)  # φ counter-clockwise as displayed
        out = []
        for ring in range(c + 1):
            profile = torch.exp(-((rho - ring) ** 2) / (2 * RING_SIGMA**2))
            out.append(profile)
            for m in range(1, _max_frequency(ring) + 1):  # a harmonic of m > 0 vanishes at the centre
                out += [profile * torch.cos(m * phi) * (rho > 1e-9), profile * torch.sin(m * phi) * (rho > 1e-9)]
        return torch.stack(out) * inside

    base = sampled(0.0)
    norm = base.flatten(1).norm(dim=1)[:, None, None]
    first, second = base / norm, sampled(math.pi / 4) / norm
    bank = []
    for k in range(4):
        bank += [torch.rot90(first, k, dims=(-2, -1)), torch.rot90(second, k, dims=(-2, -1))]
    return torch.stack(bank)


def rotate_c8(features: Tensor, s: int = 1, *, interpolation: str = "bilinear") -> Tensor:
    """Act on C8 feature maps (B, C, 8, H, W) by the rotation ``s · 45°`` (CCW as displayed): roll
    the group axis by ``+s`` and rotate every map spatially, by ``torch.rot90`` for even ``s``
    (exact) and by orbitscope's warp otherwise (``interpolation``, zero padding; approximate)."""
    if features.ndim != 5 or features.shape[2] != ROTATIONS:
        raise ValueError(f"C8 feature maps must have shape (B, C, 8, H, W), got {tuple(features.shape)}")
    rolled = torch.roll(features, shifts=s, dims=2)
    if s % 2 == 0:
        return torch.rot90(rolled, s // 2, dims=(-2, -1))
    b, c, r, h, w = rolled.shape
    flat = rolled.reshape(b, c * r, h, w)
    warped = warp_images(flat, Rotation([45.0 * s]).transforms(), interpolation=interpolation)[0]  # type: ignore[arg-type]
    return warped.reshape(b, c, r, h, w)


class _C8Conv(nn.Module):
    """Shared machinery: coefficients over the steerable basis, a bias shared over the eight
    rotations, and one ``conv2d`` with the bank of rotated filters (``m`` input rotations:
    1 for the lifting layer, 8 for group convolutions)."""

    in_rotations = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 5, bias: bool = True) -> None:
        super().__init__()
        basis = steerable_basis(kernel_size).float()
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.register_buffer("basis", basis, persistent=False)  # fixed: rebuilt from kernel_size
        n_basis = basis.shape[1]
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels * self.in_rotations, n_basis))
        self.bias: nn.Parameter | None
        self.register_parameter("bias", nn.Parameter(torch.empty(out_channels)) if bias else None)
        # the filters' variance as nn.Conv2d's default (kaiming uniform, a = √5) would give them:
        # a pixel variance 1 / (3 fan_in) spread over J unit-norm basis functions
        fan_in = in_channels * self.in_rotations * kernel_size**2
        bound = kernel_size / math.sqrt(n_basis * fan_in)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, bias={self.bias is not None}"

    def filter_bank(self) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _conv(self, x: Tensor) -> Tensor:
        """x (B, C_in·m, H, W) -> (B, C_out, 8, H, W)."""
        bias = self.bias.repeat_interleave(ROTATIONS) if self.bias is not None else None
        y = F.conv2d(x, self.filter_bank(), bias, padding=self.kernel_size // 2)
        return y.reshape(y.shape[0], self.out_channels, ROTATIONS, *y.shape[-2:])


class C8LiftingConv(_C8Conv):
    """Lifting convolution Z² -> C8: correlate the image with the filter rotated by r·45°, r = 0..7.

    ``out[b, o, r] = Σ_i x[b, i] ⋆ ψ_r[o, i]`` (+ bias[o], shared over r), with
    ``ψ_r[o, i] = Σ_j weight[o, i, j] · basis[r, j]`` (:func:`steerable_basis`). Input
    (B, C_in, H, W) -> output (B, C_out, 8, H, W), "same" zero padding. The weight holds the
    basis coefficients, (C_out, C_in, J).
    """

    def filter_bank(self) -> Tensor:
        """(C_out·8, C_in, k, k): filter o rotated by r·45° at row ``8·o + r``."""
        return torch.einsum("oij,rjyx->oriyx", self.weight, self.basis).flatten(0, 1)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"C8LiftingConv expected images (B, {self.in_channels}, H, W), got {tuple(x.shape)}")
        return self._conv(x)


class C8GroupConv(_C8Conv):
    """Group convolution C8 -> C8 in the regular representation.

    ``out[o, r](t) = Σ_{i, s, u} f[i, s](t + u) · ψ[o, i, s - r](R_r⁻¹ u)``: the filter for output
    rotation r is the base filter rotated spatially by r·45° (through the basis) with its group axis
    rolled by r. Input and output are (B, C, 8, H, W); "same" zero padding. The weight holds the
    basis coefficients, (C_out, C_in·8, J) with index ``8·i + s``.
    """

    in_rotations = ROTATIONS

    def filter_bank(self) -> Tensor:
        """(C_out·8, C_in·8, k, k): row ``8·o + r`` is filter o transformed by the rotation r."""
        w = self.weight.reshape(self.out_channels, self.in_channels, ROTATIONS, -1)
        rolled = torch.stack([torch.roll(w, shifts=r, dims=2) for r in range(ROTATIONS)], dim=1)  # (o, r, i, s, j)
        bank = torch.einsum("orisj,rjyx->orisyx", rolled, self.basis)
        return bank.reshape(self.out_channels * ROTATIONS, self.in_channels * ROTATIONS, *bank.shape[-2:])

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 5 or x.shape[2] != ROTATIONS or x.shape[1] != self.in_channels:
            raise ValueError(f"expected C8 feature maps (B, {self.in_channels}, 8, H, W), got {tuple(x.shape)}")
        b, _, _, h, w = x.shape
        return self._conv(x.reshape(b, self.in_channels * ROTATIONS, h, w))


class C8CNN(nn.Module):
    """A small C8-equivariant CNN: logits exactly invariant to 90° rotations, nearly to 45° ones.

    Layout (``widths = (w0, w1, w2, w3)``, channels per rotation)::

        C8LiftingConv(in, w0) → BN → ReLU → 2×2 max pool
        C8GroupConv(w0, w1)   → BN → ReLU
        C8GroupConv(w1, w2)   → BN → ReLU → 2×2 max pool
        C8GroupConv(w2, w3)   → BN → ReLU
        max over the group axis and over space → Linear(w3, hidden) → ReLU → Linear(hidden, classes)

    The layout of :class:`~orbitscope.models.equivariant.P4CNN` with eight rotations instead of
    four. BatchNorm is ``BatchNorm3d`` over (B, C, 8, H, W), shared by the rotations; the
    convolutions have no bias. Invariance at multiples of 90° is exact (float rounding) for
    square inputs whose side is divisible by 4; at odd multiples of 45° it is approximate (see the
    module docs), and the network is not invariant to other angles beyond what it learns.
    With the default widths it has 18k parameters and costs about 1.3 times the default
    ``P4CNN``'s forward time (512 digits on one CPU thread, prepared by
    :func:`~orbitscope.models.optimize_for_inference`: 0.46 s against 0.36 s).

    Args:
        in_channels: image channels C.
        num_classes: number of output logits.
        widths: channels (per rotation) of the four C8 layers.
        hidden: width of the hidden layer of the invariant head.
        kernel_size: odd filter side of every C8 layer.
    """

    arch_name = "c8cnn"

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths: Sequence[int] = (4, 8, 8, 16),
                 hidden: int = 64, kernel_size: int = 5) -> None:
        super().__init__()
        widths = check_arch_args("C8CNN", in_channels, num_classes, widths, hidden, n_widths=4)
        self.in_channels, self.num_classes, self.widths, self.hidden = int(in_channels), int(num_classes), widths, int(hidden)
        self.kernel_size = int(kernel_size)
        w0, w1, w2, w3 = widths
        k = self.kernel_size
        pool = (1, 2, 2)  # 2×2 spatial max pooling of every map of the group axis
        self.features = nn.Sequential(
            C8LiftingConv(in_channels, w0, k, bias=False), nn.BatchNorm3d(w0), nn.ReLU(inplace=True), nn.MaxPool3d(pool),
            C8GroupConv(w0, w1, k, bias=False), nn.BatchNorm3d(w1), nn.ReLU(inplace=True),
            C8GroupConv(w1, w2, k, bias=False), nn.BatchNorm3d(w2), nn.ReLU(inplace=True), nn.MaxPool3d(pool),
            C8GroupConv(w2, w3, k, bias=False), nn.BatchNorm3d(w3), nn.ReLU(inplace=True),
        )
        self.classifier = nn.Sequential(nn.Linear(w3, self.hidden), nn.ReLU(inplace=True), nn.Linear(self.hidden, self.num_classes))

    @property
    def config(self) -> dict[str, Any]:
        """JSON-able config such that ``build_model(config)`` rebuilds this architecture."""
        return {"arch": self.arch_name, "in_channels": self.in_channels, "num_classes": self.num_classes,
                "widths": list(self.widths), "hidden": self.hidden, "kernel_size": self.kernel_size}

    def invariant_features(self, x: Tensor) -> Tensor:
        """(B, widths[-1]) features invariant to 90° rotations (max over the group axis and space)."""
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"C8CNN expected images (B, {self.in_channels}, H, W), got {tuple(x.shape)}")
        return self.features(x).amax(dim=(2, 3, 4))

    def forward(self, x: Tensor) -> Tensor:
        """Images (B, C, H, W) in [0, 1] -> logits (B, num_classes)."""
        return self.classifier(self.invariant_features(x))


register_model(C8CNN.arch_name, C8CNN)

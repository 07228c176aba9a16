"""Pixel-space noise samplers: L-inf and L2 uniform, Gaussian."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from ..errors import SpecError
from .sampler_base import PerturbationSampler, format_number, positive_number

__all__ = ["GaussianNoise", "L2Uniform", "LinfUniform", "PixelSampler"]


class PixelSampler(PerturbationSampler):
    """Noise added value by value (L∞, L2, Gaussian)."""


def _uniform(shape: Sequence[int], generator: torch.Generator | None, like: Tensor) -> Tensor:
    return torch.rand(tuple(shape), generator=generator, device=like.device, dtype=like.dtype)


class LinfUniform(PixelSampler):
    """Uniform in the L∞ box of radius ``eps`` around x, clipped to [0, 1] (Mu & Lim's sampler).

    ``x' ~ U[clamp(x − ε, 0, 1), clamp(x + ε, 0, 1)]`` independently per value. With
    ``quantize=True`` the sample is then rounded down to the 8-bit grid, ``floor(255 x') / 255``
    (Mu & Lim's setting); for x on the 8-bit grid and 255·ε an integer the result stays in the box,
    otherwise it may lie up to 1/255 below it.
    """

    kind = "linf"
    cli_flags = ("8bit",)
    cli_usage = "linf:EPS[:8bit]"

    def __init__(self, eps: float, quantize: bool = False) -> None:
        self.eps = positive_number(eps, "eps")
        if self.eps > 1:
            raise SpecError(f"eps must be at most 1 (images are in [0, 1], so a larger L-inf box covers every "
                            f"image), got {eps}; for {format_number(self.eps)} on the 0..255 scale write {format_number(self.eps)}/255")
        self.quantize = bool(quantize)

    @classmethod
    def from_cli(cls, numbers: list[float], flags: set[str]) -> LinfUniform:
        return cls(numbers[0], quantize="8bit" in flags)

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        lo = (x - self.eps).clamp(0.0, 1.0)
        hi = (x + self.eps).clamp(0.0, 1.0)
        out = lo + (hi - lo) * _uniform(x.shape, generator, x)
        if self.quantize:
            out = torch.floor(out * 255.0) / 255.0
        return out

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "eps": self.eps, "quantize": self.quantize}

    def __str__(self) -> str:
        return f"linf:{format_number(self.eps)}" + (":8bit" if self.quantize else "")


class L2Uniform(PixelSampler):
    """Uniform in the L2 ball of radius ``eps`` (over all C·H·W values of a row), then clipped.

    Exact sampling: ``u = g / |g|`` with ``g ~ N(0, I_d)`` is uniform on the sphere and the radius
    ``r = ε U^{1/d}`` has the ball's radial law ``P(r ≤ t) = (t/ε)^d``.
    """

    kind = "l2"
    cli_usage = "l2:EPS"

    def __init__(self, eps: float) -> None:
        self.eps = positive_number(eps, "eps")

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        b, d = x.shape[0], x[0].numel()
        g = torch.randn((b, d), generator=generator, device=x.device, dtype=x.dtype)
        direction = g / g.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
        u = _uniform((b, 1), generator, x).clamp_min(torch.finfo(x.dtype).tiny)
        radius = self.eps * torch.exp(torch.log(u) / d)  # U^{1/d}, accurate for large d
        return (x + (radius * direction).reshape(x.shape)).clamp(0.0, 1.0)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "eps": self.eps}

    def __str__(self) -> str:
        return f"l2:{format_number(self.eps)}"


class GaussianNoise(PixelSampler):
    """``x + N(0, sigma²)`` independently per value, clipped to [0, 1]."""

    kind = "gaussian"
    cli_usage = "gaussian:SIGMA"

    def __init__(self, sigma: float) -> None:
        self.sigma = positive_number(sigma, "sigma")

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        noise = torch.randn(tuple(x.shape), generator=generator, device=x.device, dtype=x.dtype)
        return (x + self.sigma * noise).clamp(0.0, 1.0)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "sigma": self.sigma}

    def __str__(self) -> str:
        return f"gaussian:{format_number(self.sigma)}"

"""Semantic samplers: random group elements (rotation, shift, scale, brightness) applied to images."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import SpecError
from ..kinds import warp_images
from ..group.elements import Transforms, rotation_matrix
from .sampler_base import PerturbationSampler, format_number, number_range, positive_number

__all__ = ["RandomBrightness", "RandomRotation", "RandomScale", "RandomShift", "SemanticSampler"]


class SemanticSampler(PerturbationSampler):
    """Random group elements acting on images through :func:`~orbitscope.kinds.warp_images`.

    Subclasses implement :meth:`elements` (B random :class:`Transforms`); :meth:`sample` applies
    them with ``layout="paired"`` (row i gets element i).
    """

    def __init__(self, interpolation: str = "bilinear", padding: str = "zeros") -> None:
        self.interpolation = interpolation
        self.padding = padding

    @abstractmethod
    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        """B random group elements (parameters drawn on ``device`` from ``generator``)."""

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        t = self.elements(x.shape[0], generator, x.device)
        return warp_images(x, t, layout="paired", interpolation=self.interpolation, padding=self.padding)  # type: ignore[arg-type]

    def _warp_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.interpolation != "bilinear":
            out["interpolation"] = self.interpolation
        if self.padding != "zeros":
            out["padding"] = self.padding
        return out


def _draw(b: int, lo: float, hi: float, generator: torch.Generator | None, device: torch.device) -> np.ndarray:
    """b values ~ U[lo, hi] drawn on the device, as float64 numpy (Transforms' representation)."""
    u = torch.rand(b, generator=generator, device=device, dtype=torch.float64)
    return (lo + (hi - lo) * u).cpu().numpy()


class RandomRotation(SemanticSampler):
    """Rotation by an angle ~ U[−max_angle, max_angle] degrees (CCW as displayed) about the centre."""

    kind = "rotation"
    cli_usage = "rotation:DEGREES"

    def __init__(self, max_angle: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.max_angle = positive_number(max_angle, "max_angle")
        if self.max_angle > 180:
            raise SpecError(f"max_angle must be at most 180 degrees, got {max_angle}")

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        angles = _draw(b, -self.max_angle, self.max_angle, generator, device)
        return Transforms.create(b, linear=rotation_matrix(angles))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_angle": self.max_angle, **self._warp_spec()}

    def __str__(self) -> str:
        return f"rotation:{format_number(self.max_angle)}"


class RandomShift(SemanticSampler):
    """Shift (tx, ty) in pixels (+x right, +y down), each component independently uniform.

    ``integer=True``: uniform on {−max_shift, …, max_shift} (exact pixel moves, zero fill);
    ``integer=False``: uniform on [−max_shift, max_shift] (bilinear resampling).
    """

    kind = "shift"
    cli_flags = ("continuous",)
    cli_usage = "shift:PIXELS[:continuous]"

    def __init__(self, max_shift: float, integer: bool = True, **warp: Any) -> None:
        super().__init__(**warp)
        self.max_shift = positive_number(max_shift, "max_shift")
        self.integer = bool(integer)
        if self.integer and self.max_shift != int(self.max_shift):
            raise SpecError(f"an integer shift needs a whole number of pixels, got {max_shift} "
                            "(use integer=False / 'shift:S:continuous' for continuous shifts)")

    @classmethod
    def from_cli(cls, numbers: list[float], flags: set[str]) -> RandomShift:
        return cls(numbers[0], integer="continuous" not in flags)

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        s = self.max_shift
        if self.integer:
            shift = torch.randint(-int(s), int(s) + 1, (b, 2), generator=generator, device=device)
            return Transforms.create(b, shift=shift.cpu().numpy().astype(np.float64))
        u = torch.rand((b, 2), generator=generator, device=device, dtype=torch.float64)
        return Transforms.create(b, shift=((2 * u - 1) * s).cpu().numpy())

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_shift": self.max_shift, "integer": self.integer, **self._warp_spec()}

    def __str__(self) -> str:
        return f"shift:{format_number(self.max_shift)}" + ("" if self.integer else ":continuous")


class RandomScale(SemanticSampler):
    """Isotropic scaling about the centre by a factor ~ U[low, high]."""

    kind = "scale"
    cli_numbers = 2
    cli_usage = "scale:LO:HI"

    def __init__(self, low: float, high: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.low, self.high = number_range(low, high, "scale")

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        f = _draw(b, self.low, self.high, generator, device)
        return Transforms.create(b, linear=f[:, None, None] * np.eye(2))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "low": self.low, "high": self.high, **self._warp_spec()}

    def __str__(self) -> str:
        return f"scale:{format_number(self.low)}:{format_number(self.high)}"


class RandomBrightness(SemanticSampler):
    """Brightness gain ~ U[low, high] (values multiplied, then clipped to [0, 1])."""

    kind = "brightness"
    cli_numbers = 2
    cli_usage = "brightness:LO:HI"

    def __init__(self, low: float, high: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.low, self.high = number_range(low, high, "brightness")

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        return Transforms.create(b, gain=_draw(b, self.low, self.high, generator, device))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "low": self.low, "high": self.high, **self._warp_spec()}

    def __str__(self) -> str:
        return f"brightness:{format_number(self.low)}:{format_number(self.high)}"

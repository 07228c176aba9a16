"""Perturbation samplers: random x' around an input x, batched on the device and seeded.

Every sampler maps a batch ``x`` (B, C, H, W) with values in [0, 1] to one random perturbation
per row, ``x'`` (B, C, H, W) in [0, 1], drawing all randomness from the ``torch.Generator`` it is
given (on ``x``'s device), so a seed fixes the samples. To draw n perturbations of one input,
repeat it n times (``x.expand(n, -1, -1, -1)``); :func:`orbitscope.robust.certify` does that.

Families (CLI spelling in brackets; numbers may be fractions such as ``8/255``):

* :class:`LinfUniform` (``linf:EPS`` or ``linf:EPS:8bit``): uniform in the L∞ box clipped to the
  valid range, ``x' ~ U[clamp(x − ε, 0, 1), clamp(x + ε, 0, 1)]`` independently per value; with
  ``quantize=True`` then ``floor(255 x') / 255``, the setting of Mu & Lim (arXiv 2404.16457).
* :class:`L2Uniform` (``l2:EPS``): uniform in the L2 ball of radius ε (exact: a Gaussian direction
  normalised to unit length times the radius ``ε U^{1/d}``, d = C·H·W), then clipped to [0, 1].
  Clipping moves mass onto the faces of the cube, so x' is uniform in the ball only where the
  ball lies inside [0, 1]^d.
* :class:`GaussianNoise` (``gaussian:SIGMA``): ``x + N(0, σ²)`` per value, clipped to [0, 1].
* Semantic, random group elements applied with :func:`orbitscope.kinds.actions.warp_images`
  (``layout="paired"``, bilinear, zero padding by default):
  :class:`RandomRotation` (``rotation:THETA``, angle ~ U[−θ, θ] degrees, CCW as displayed),
  :class:`RandomShift` (``shift:S`` integer pixels uniform in {−S, …, S} per axis, or
  ``shift:S:continuous`` for U[−S, S]; +x right, +y down), :class:`RandomScale`
  (``scale:LO:HI``, factor ~ U[LO, HI] about the centre) and :class:`RandomBrightness`
  (``brightness:LO:HI``, gain ~ U[LO, HI], values clipped to [0, 1]).
* :class:`ProductSampler` (``rotation:15+scale:0.9:1.1``, factors joined by ``+``): one random
  element of every semantic factor, composed (the first factor acts last, as
  :meth:`Transforms.compose`) and applied in one warp; then the pixel-noise factors in order.

``sampler.spec()`` is a JSON-able dict (:func:`sampler_from_spec` rebuilds the sampler) and
``str(sampler)`` the CLI string that :func:`parse_perturbation` reads back.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor


from ..kinds.actions import warp_images
from ..group.elements import Transforms, rotation_matrix

__all__ = [
    "PerturbationSampler",
    "PixelSampler",
    "SemanticSampler",
    "LinfUniform",
    "L2Uniform",
    "GaussianNoise",
    "RandomRotation",
    "RandomShift",
    "RandomScale",
    "RandomBrightness",
    "ProductSampler",
    "parse_perturbation",
    "sampler_from_spec",
    "list_perturbations",
]


def _check_images(x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor (B, C, H, W), got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be floating point with values in [0, 1], got dtype {x.dtype}")


def _check_generator(generator: torch.Generator | None, x: Tensor) -> None:
    if generator is not None and torch.device(generator.device).type != x.device.type:
        raise ValueError(
            f"the generator is on {generator.device} but x is on {x.device}: create it with "
            f"torch.Generator(device=x.device)"
        )


def _uniform(shape: Sequence[int], generator: torch.Generator | None, like: Tensor) -> Tensor:
    return torch.rand(tuple(shape), generator=generator, device=like.device, dtype=like.dtype)


def _fmt(v: float) -> str:
    """A number for a CLI string that reads back exactly: short decimal, else n/255, else repr."""
    short = f"{v:g}"
    if float(short) == v:
        return short
    n = round(v * 255)
    if float(Fraction(n, 255)) == v:
        return f"{n}/255"
    return repr(float(v))


class PerturbationSampler(ABC):
    """Draws one random perturbation x' per row of x (see the module docstring)."""

    kind: str = ""

    @abstractmethod
    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """x (B, C, H, W) in [0, 1] -> x' (B, C, H, W) in [0, 1], one perturbation per row.

        ``generator`` must live on ``x``'s device; None uses torch's global RNG.
        """

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """JSON-able description; :func:`sampler_from_spec` rebuilds the sampler."""

    @abstractmethod
    def __str__(self) -> str:
        """The CLI string (:func:`parse_perturbation` reads it back)."""

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return self.sample(x, generator)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerturbationSampler) and self.spec() == other.spec()

    def __hash__(self) -> int:
        return hash(str(self))

    def _prepare(self, x: Tensor, generator: torch.Generator | None) -> None:
        _check_images(x)
        _check_generator(generator, x)


# ---------------------------------------------------------------------------------------------
# pixel-space noise
# ---------------------------------------------------------------------------------------------


class PixelSampler(PerturbationSampler):
    """Noise added value by value (L∞, L2, Gaussian)."""


def _positive(value: float, name: str) -> float:
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return v


class LinfUniform(PixelSampler):
    """Uniform in the L∞ box of radius ``eps`` around x, clipped to [0, 1] (Mu & Lim's sampler).

    ``x' ~ U[clamp(x − ε, 0, 1), clamp(x + ε, 0, 1)]`` independently per value. With
    ``quantize=True`` the sample is then rounded down to the 8-bit grid, ``floor(255 x') / 255``
    (Mu & Lim's setting); for x on the 8-bit grid and 255·ε an integer the result stays in the box,
    otherwise it may lie up to 1/255 below it.
    """

    kind = "linf"

    def __init__(self, eps: float, quantize: bool = False) -> None:
        self.eps = _positive(eps, "eps")
        self.quantize = bool(quantize)

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
        return f"linf:{_fmt(self.eps)}" + (":8bit" if self.quantize else "")


class L2Uniform(PixelSampler):
    """Uniform in the L2 ball of radius ``eps`` (over all C·H·W values of a row), then clipped.

    Exact sampling: ``u = g / |g|`` with ``g ~ N(0, I_d)`` is uniform on the sphere and the radius
    ``r = ε U^{1/d}`` has the ball's radial law ``P(r ≤ t) = (t/ε)^d``.
    """

    kind = "l2"

    def __init__(self, eps: float) -> None:
        self.eps = _positive(eps, "eps")

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
        return f"l2:{_fmt(self.eps)}"


class GaussianNoise(PixelSampler):
    """``x + N(0, sigma²)`` independently per value, clipped to [0, 1]."""

    kind = "gaussian"

    def __init__(self, sigma: float) -> None:
        self.sigma = _positive(sigma, "sigma")

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        noise = torch.randn(tuple(x.shape), generator=generator, device=x.device, dtype=x.dtype)
        return (x + self.sigma * noise).clamp(0.0, 1.0)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "sigma": self.sigma}

    def __str__(self) -> str:
        return f"gaussian:{_fmt(self.sigma)}"


# ---------------------------------------------------------------------------------------------
# semantic: random group elements
# ---------------------------------------------------------------------------------------------


class SemanticSampler(PerturbationSampler):
    """Random group elements acting on images through :func:`~orbitscope.kinds.actions.warp_images`.

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


def _range(lo: float, hi: float, name: str) -> tuple[float, float]:
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(f"{name} range must satisfy 0 < LO <= HI, got {lo}:{hi}")
    return lo, hi


class RandomRotation(SemanticSampler):
    """Rotation by an angle ~ U[−max_angle, max_angle] degrees (CCW as displayed) about the centre."""

    kind = "rotation"

    def __init__(self, max_angle: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.max_angle = _positive(max_angle, "max_angle")
        if self.max_angle > 180:
            raise ValueError(f"max_angle must be at most 180 degrees, got {max_angle}")

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        angles = _draw(b, -self.max_angle, self.max_angle, generator, device)
        return Transforms.create(b, linear=rotation_matrix(angles))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_angle": self.max_angle, **self._warp_spec()}

    def __str__(self) -> str:
        return f"rotation:{_fmt(self.max_angle)}"


class RandomShift(SemanticSampler):
    """Shift (tx, ty) in pixels (+x right, +y down), each component independently uniform.

    ``integer=True``: uniform on {−max_shift, …, max_shift} (exact pixel moves, zero fill);
    ``integer=False``: uniform on [−max_shift, max_shift] (bilinear resampling).
    """

    kind = "shift"

    def __init__(self, max_shift: float, integer: bool = True, **warp: Any) -> None:
        super().__init__(**warp)
        self.max_shift = _positive(max_shift, "max_shift")
        self.integer = bool(integer)
        if self.integer and self.max_shift != int(self.max_shift):
            raise ValueError(f"an integer shift needs a whole number of pixels, got {max_shift} "
                             "(use integer=False / 'shift:S:continuous' for continuous shifts)")

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
        return f"shift:{_fmt(self.max_shift)}" + ("" if self.integer else ":continuous")


class RandomScale(SemanticSampler):
    """Isotropic scaling about the centre by a factor ~ U[low, high]."""

    kind = "scale"

    def __init__(self, low: float, high: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.low, self.high = _range(low, high, "scale")

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        f = _draw(b, self.low, self.high, generator, device)
        return Transforms.create(b, linear=f[:, None, None] * np.eye(2))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "low": self.low, "high": self.high, **self._warp_spec()}

    def __str__(self) -> str:
        return f"scale:{_fmt(self.low)}:{_fmt(self.high)}"


class RandomBrightness(SemanticSampler):
    """Brightness gain ~ U[low, high] (values multiplied, then clipped to [0, 1])."""

    kind = "brightness"

    def __init__(self, low: float, high: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.low, self.high = _range(low, high, "brightness")

    def elements(self, b: int, generator: torch.Generator | None, device: torch.device) -> Transforms:
        return Transforms.create(b, gain=_draw(b, self.low, self.high, generator, device))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "low": self.low, "high": self.high, **self._warp_spec()}

    def __str__(self) -> str:
        return f"brightness:{_fmt(self.low)}:{_fmt(self.high)}"


class ProductSampler(PerturbationSampler):
    """Several perturbations at once: ``ProductSampler([RandomRotation(15), RandomScale(0.9, 1.1)])``.

    The semantic factors' random elements g1, g2, … are composed into ``g1 ∘ g2 ∘ …`` (the last
    factor acts first) and applied in a single warp, with the first semantic factor's
    interpolation and padding; the pixel-noise factors are then applied in the given order.
    Parameters are drawn factor by factor, in order, from the one generator.
    """

    kind = "product"

    def __init__(self, factors: Sequence[PerturbationSampler]) -> None:
        flat: list[PerturbationSampler] = []
        for f in factors:
            if not isinstance(f, PerturbationSampler):
                raise TypeError(f"product factors must be perturbation samplers, got {type(f).__name__}")
            flat.extend(f.factors if isinstance(f, ProductSampler) else [f])
        if len(flat) < 2:
            raise ValueError("a product needs at least two factors")
        self.factors = flat
        self.semantic = [f for f in flat if isinstance(f, SemanticSampler)]
        self.pixel = [f for f in flat if not isinstance(f, SemanticSampler)]

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        out = x
        if self.semantic:
            elements = [f.elements(x.shape[0], generator, x.device) for f in self.semantic]
            t = elements[0]
            for e in elements[1:]:
                t = t.compose(e)
            first = self.semantic[0]
            out = warp_images(x, t, layout="paired", interpolation=first.interpolation,  # type: ignore[arg-type]
                              padding=first.padding)
        for f in self.pixel:
            out = f.sample(out, generator)
        return out

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "factors": [f.spec() for f in self.factors]}

    def __str__(self) -> str:
        return "+".join(str(f) for f in self.factors)


# ---------------------------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------------------------

_HELP = (
    "perturbation specs: 'linf:EPS' (add ':8bit' for Mu & Lim's 8-bit quantisation), 'l2:EPS', "
    "'gaussian:SIGMA', 'rotation:DEGREES', 'shift:PIXELS' (add ':continuous' for non-integer shifts), "
    "'scale:LO:HI', 'brightness:LO:HI'; numbers may be fractions such as 8/255; join factors with '+', "
    "e.g. 'rotation:15+scale:0.9:1.1'"
)


def _number(text: str, spec: str) -> float:
    try:
        return float(Fraction(text.strip()))
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"cannot read the number {text!r} in perturbation {spec!r}; {_HELP}") from None


def _parse_one(text: str) -> PerturbationSampler:
    name, *args = [a.strip() for a in text.split(":")]
    name = name.lower()
    flags = {a.lower() for a in args if a.lower() in ("8bit", "continuous")}
    nums = [_number(a, text) for a in args if a.lower() not in ("8bit", "continuous")]
    expected = {"linf": 1, "l2": 1, "gaussian": 1, "rotation": 1, "shift": 1, "scale": 2, "brightness": 2}
    allowed_flags = {"linf": {"8bit"}, "shift": {"continuous"}}
    if name not in expected:
        raise ValueError(f"unknown perturbation {name!r} in {text!r}; {_HELP}")
    if len(nums) != expected[name] or not flags <= allowed_flags.get(name, set()):
        raise ValueError(f"cannot parse perturbation {text!r}; {_HELP}")
    if name == "linf":
        return LinfUniform(nums[0], quantize="8bit" in flags)
    if name == "l2":
        return L2Uniform(nums[0])
    if name == "gaussian":
        return GaussianNoise(nums[0])
    if name == "rotation":
        return RandomRotation(nums[0])
    if name == "shift":
        return RandomShift(nums[0], integer="continuous" not in flags)
    if name == "scale":
        return RandomScale(*nums)
    return RandomBrightness(*nums)


def parse_perturbation(text: str) -> PerturbationSampler:
    """Build a sampler from a CLI string such as ``linf:8/255``, ``rotation:15+scale:0.9:1.1``.

    A sampler given instead of a string is returned as is.
    """
    if isinstance(text, PerturbationSampler):
        return text
    if not isinstance(text, str):
        raise TypeError(f"a perturbation is a spec string or a sampler, got {type(text).__name__}")
    parts = [p for p in text.replace(" ", "").split("+") if p]
    if not parts:
        raise ValueError(f"empty perturbation spec; {_HELP}")
    samplers = [_parse_one(p) for p in parts]
    return samplers[0] if len(samplers) == 1 else ProductSampler(samplers)


_CLASSES: dict[str, type[PerturbationSampler]] = {
    c.kind: c for c in (LinfUniform, L2Uniform, GaussianNoise, RandomRotation, RandomShift, RandomScale, RandomBrightness)
}


def sampler_from_spec(spec: dict[str, Any]) -> PerturbationSampler:
    """Rebuild a sampler from :meth:`PerturbationSampler.spec`."""
    spec = dict(spec)
    kind = spec.pop("kind", None)
    if kind == "product":
        return ProductSampler([sampler_from_spec(f) for f in spec["factors"]])
    if kind not in _CLASSES:
        raise ValueError(f"unknown perturbation kind {kind!r}; known: {', '.join(list_perturbations())}")
    return _CLASSES[kind](**spec)


def list_perturbations() -> list[str]:
    """The perturbation kinds (names usable in :func:`parse_perturbation`)."""
    return sorted(_CLASSES)

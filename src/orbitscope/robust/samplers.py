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
* Semantic, random group elements applied with :func:`orbitscope.kinds.warp_images`
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

Your own sampler: subclass :class:`PixelSampler` or :class:`SemanticSampler`, give it a ``kind``
and its CLI syntax (``cli_numbers`` numbers after the name, optional word ``cli_flags``, and
:meth:`~PerturbationSampler.from_cli` if the constructor does not take the numbers in order), and
register it with :func:`register_perturbation` (or ``PERTURBATIONS.register(kind, cls)``); then
``parse_perturbation("mykind:0.1")``, ``sampler_from_spec`` and products with ``+`` accept it.

Malformed specs raise :class:`~orbitscope.errors.SpecError` (a ``ValueError``): unknown names, a
wrong count of numbers, empty factors (``linf:0.03+``), non-finite or out-of-range values.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar, Sequence

import numpy as np
import torch
from torch import Tensor

from .._registry import Registry
from ..errors import DataError, SpecError
from ..kinds import warp_images
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
    "PERTURBATIONS",
    "register_perturbation",
    "parse_perturbation",
    "sampler_from_spec",
    "list_perturbations",
]


def _check_images(x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor (B, C, H, W), got {type(x).__name__}")
    if x.ndim != 4:
        raise DataError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
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
    """Draws one random perturbation x' per row of x (see the module docstring).

    CLI syntax (read by :func:`parse_perturbation`): ``kind`` then ``cli_numbers`` numbers and
    any of the words in ``cli_flags``, separated by ``:``; :meth:`from_cli` builds the sampler.
    """

    kind: ClassVar[str] = ""
    #: How many numbers follow the name in a CLI spec (``linf:EPS`` -> 1, ``scale:LO:HI`` -> 2).
    cli_numbers: ClassVar[int] = 1
    #: Optional words allowed after the name (e.g. ``("8bit",)``), lower case.
    cli_flags: ClassVar[tuple[str, ...]] = ()
    #: The syntax shown in error messages; default ``kind:X`` (one ``:X`` per number).
    cli_usage: ClassVar[str] = ""

    @classmethod
    def from_cli(cls, numbers: list[float], flags: set[str]) -> PerturbationSampler:
        """Build the sampler from the numbers and flags of a CLI spec (default: ``cls(*numbers)``)."""
        return cls(*numbers)

    @classmethod
    def usage(cls) -> str:
        """The CLI syntax, e.g. ``linf:EPS[:8bit]``."""
        return cls.cli_usage or cls.kind + ":X" * cls.cli_numbers + "".join(f"[:{f}]" for f in cls.cli_flags)

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


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise SpecError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{name} must be a number, got {value!r}") from None


def _positive(value: float, name: str) -> float:
    v = _as_float(value, name)
    if not (v > 0 and math.isfinite(v)):
        raise SpecError(f"{name} must be positive and finite, got {value}")
    return v


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
        self.eps = _positive(eps, "eps")
        if self.eps > 1:
            raise SpecError(f"eps must be at most 1 (images are in [0, 1], so a larger L-inf box covers every "
                            f"image), got {eps}; for {_fmt(self.eps)} on the 0..255 scale write {_fmt(self.eps)}/255")
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
        return f"linf:{_fmt(self.eps)}" + (":8bit" if self.quantize else "")


class L2Uniform(PixelSampler):
    """Uniform in the L2 ball of radius ``eps`` (over all C·H·W values of a row), then clipped.

    Exact sampling: ``u = g / |g|`` with ``g ~ N(0, I_d)`` is uniform on the sphere and the radius
    ``r = ε U^{1/d}`` has the ball's radial law ``P(r ≤ t) = (t/ε)^d``.
    """

    kind = "l2"
    cli_usage = "l2:EPS"

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
    cli_usage = "gaussian:SIGMA"

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


def _range(lo: float, hi: float, name: str) -> tuple[float, float]:
    lo, hi = _as_float(lo, f"{name} LO"), _as_float(hi, f"{name} HI")
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise SpecError(f"{name} range must satisfy 0 < LO <= HI (finite), got {lo}:{hi}")
    return lo, hi


class RandomRotation(SemanticSampler):
    """Rotation by an angle ~ U[−max_angle, max_angle] degrees (CCW as displayed) about the centre."""

    kind = "rotation"
    cli_usage = "rotation:DEGREES"

    def __init__(self, max_angle: float, **warp: Any) -> None:
        super().__init__(**warp)
        self.max_angle = _positive(max_angle, "max_angle")
        if self.max_angle > 180:
            raise SpecError(f"max_angle must be at most 180 degrees, got {max_angle}")

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
    cli_flags = ("continuous",)
    cli_usage = "shift:PIXELS[:continuous]"

    def __init__(self, max_shift: float, integer: bool = True, **warp: Any) -> None:
        super().__init__(**warp)
        self.max_shift = _positive(max_shift, "max_shift")
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
        return f"shift:{_fmt(self.max_shift)}" + ("" if self.integer else ":continuous")


class RandomScale(SemanticSampler):
    """Isotropic scaling about the centre by a factor ~ U[low, high]."""

    kind = "scale"
    cli_numbers = 2
    cli_usage = "scale:LO:HI"

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
    cli_numbers = 2
    cli_usage = "brightness:LO:HI"

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
            raise SpecError(f"a product needs at least two factors, got {len(flat)}")
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
# registry and parsing
# ---------------------------------------------------------------------------------------------

#: The perturbation families by ``kind``: name -> sampler class (see :func:`register_perturbation`).
PERTURBATIONS: Registry[type[PerturbationSampler]] = Registry("perturbation", key="kind")


def register_perturbation(cls: type[PerturbationSampler], *, replace: bool = False) -> type[PerturbationSampler]:
    """Register a sampler class under its ``kind`` (usable as a class decorator).

    The kind must be lower case without ``:``, ``+`` or spaces (it is the first word of the CLI
    spec); the class must be a :class:`PerturbationSampler` whose ``spec()`` holds ``kind`` and
    the constructor's keyword arguments (what :func:`sampler_from_spec` passes back).
    """
    if not (isinstance(cls, type) and issubclass(cls, PerturbationSampler)):
        raise TypeError(f"a perturbation must be a PerturbationSampler subclass, got {cls!r}")
    kind = cls.kind
    if not isinstance(kind, str) or not kind or kind != kind.lower() or any(c in kind for c in ":+ \t") \
            or kind == ProductSampler.kind:
        raise SpecError(f"{cls.__name__}.kind must be a lower-case name without ':', '+' or spaces "
                        f"(and not 'product'), got {kind!r}")
    PERTURBATIONS.register(kind, cls, replace=replace)
    return cls


for _cls in (LinfUniform, L2Uniform, GaussianNoise, RandomRotation, RandomShift, RandomScale, RandomBrightness):
    register_perturbation(_cls)
del _cls


def _help() -> str:
    forms = ", ".join(f"'{cls.usage()}'" for _, cls in PERTURBATIONS.list())
    return (f"perturbation specs: {forms} ('linf:EPS:8bit' quantises to 8 bits as Mu & Lim; 'shift:S:continuous' "
            "draws non-integer shifts); numbers may be fractions such as 8/255; join factors with '+', "
            "e.g. 'rotation:15+scale:0.9:1.1'")


def _number(text: str, spec: str, usage: str) -> float:
    t = text.strip()
    if not t:
        raise SpecError(f"perturbation {spec!r} has an empty number (a doubled or trailing ':'); usage: {usage}")
    try:
        value = float(Fraction(t))
    except OverflowError:
        value = math.inf
    except ZeroDivisionError:
        raise SpecError(f"perturbation {spec!r}: {t!r} divides by zero; usage: {usage}") from None
    except ValueError:
        try:
            value = float(t)  # 'nan', 'inf': readable, but refused below with a clearer message
        except ValueError:
            raise SpecError(f"cannot read the number {t!r} in perturbation {spec!r}; usage: {usage} "
                            "(numbers may be decimals or fractions such as 8/255)") from None
    if not math.isfinite(value):
        raise SpecError(f"perturbation {spec!r}: {t!r} is not a finite number; usage: {usage}")
    return value


def _parse_one(text: str) -> PerturbationSampler:
    name, *args = [a.strip() for a in text.split(":")]
    if name.lower() not in PERTURBATIONS:
        raise SpecError(f"unknown perturbation {name!r} in {text!r}; {_help()}")
    cls = PERTURBATIONS.get(name.lower())
    usage = cls.usage()
    flags: set[str] = set()
    nums: list[float] = []
    for a in args:
        word = a.lower()
        if word in cls.cli_flags:
            if word in flags:
                raise SpecError(f"perturbation {text!r} repeats the option {a!r}; usage: {usage}")
            flags.add(word)
        elif any(word in other.cli_flags for _, other in PERTURBATIONS.list()):  # another family's option
            allowed = f"its options are {', '.join(map(repr, cls.cli_flags))}" if cls.cli_flags else "it takes no options"
            raise SpecError(f"perturbation {text!r}: {cls.kind!r} has no option {a!r} ({allowed}); usage: {usage}")
        else:
            nums.append(_number(a, text, usage))
    if len(nums) != cls.cli_numbers:
        raise SpecError(f"perturbation {text!r}: {cls.kind!r} takes {cls.cli_numbers} number(s), got {len(nums)}; "
                        f"usage: {usage}")
    try:
        sampler = cls.from_cli(nums, flags)
    except SpecError as exc:
        raise SpecError(f"perturbation {text!r}: {exc}") from exc
    if not isinstance(sampler, PerturbationSampler):
        raise TypeError(f"{cls.__name__}.from_cli returned {type(sampler).__name__}, not a PerturbationSampler")
    return sampler


def parse_perturbation(text: str) -> PerturbationSampler:
    """Build a sampler from a CLI string such as ``linf:8/255``, ``rotation:15+scale:0.9:1.1``.

    A sampler given instead of a string is returned as is. Names and options are
    case-insensitive; spaces are ignored. Raises :class:`~orbitscope.errors.SpecError` for a
    malformed spec: an unknown name, a wrong count of numbers, an empty factor (the trailing
    ``+`` of ``linf:0.03+``), a repeated or unknown option, a non-finite or out-of-range value.
    """
    if isinstance(text, PerturbationSampler):
        return text
    if not isinstance(text, str):
        raise TypeError(f"a perturbation is a spec string or a sampler, got {type(text).__name__}")
    compact = "".join(text.split())
    if not compact:
        raise SpecError(f"empty perturbation spec; {_help()}")
    parts = compact.split("+")
    if not all(parts):
        raise SpecError(f"perturbation {text!r} has an empty factor (a leading, trailing or doubled '+'); "
                        "remove the extra '+' or add the missing factor, e.g. 'linf:0.03+rotation:5'")
    samplers = [_parse_one(p) for p in parts]
    return samplers[0] if len(samplers) == 1 else ProductSampler(samplers)


def sampler_from_spec(spec: Mapping[str, Any]) -> PerturbationSampler:
    """Rebuild a sampler from :meth:`PerturbationSampler.spec` (a dict with ``"kind"``)."""
    if not isinstance(spec, Mapping):
        hint = f"; for a CLI string use parse_perturbation({spec!r})" if isinstance(spec, str) else ""
        raise SpecError(f"a sampler spec is a dict such as {{'kind': 'linf', 'eps': 0.03}} (from sampler.spec()), "
                        f"got {type(spec).__name__}{hint}")
    spec = dict(spec)
    if spec.get("kind") == ProductSampler.kind:
        factors = spec.get("factors")
        if not isinstance(factors, (list, tuple)) or set(spec) != {"kind", "factors"}:
            raise SpecError("a product spec is {'kind': 'product', 'factors': [spec, spec, ...]} with at least two "
                            f"factor specs, got {spec!r}")
        return ProductSampler([sampler_from_spec(f) for f in factors])
    return PERTURBATIONS.from_spec(spec)


def list_perturbations() -> list[str]:
    """The registered perturbation kinds (names usable in :func:`parse_perturbation`), sorted."""
    return PERTURBATIONS.names()

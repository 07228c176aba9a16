"""The perturbation sampler interface (:class:`PerturbationSampler`) and the checks of its parameters."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import SpecError
from ..kinds.image import check_image_tensor

__all__ = ["PerturbationSampler", "format_number", "number_range", "positive_number"]


def _check_generator(generator: torch.Generator | None, x: Tensor) -> None:
    if generator is not None and torch.device(generator.device).type != x.device.type:
        raise ValueError(
            f"the generator is on {generator.device} but x is on {x.device}: create it with "
            f"torch.Generator(device=x.device)"
        )


def format_number(v: float) -> str:
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
        check_image_tensor(x, "x")
        _check_generator(generator, x)


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise SpecError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{name} must be a number, got {value!r}") from None


def positive_number(value: float, name: str) -> float:
    """``value`` as a float; SpecError naming ``name`` unless it is a positive finite number."""
    v = _as_float(value, name)
    if not (v > 0 and math.isfinite(v)):
        raise SpecError(f"{name} must be positive and finite, got {value}")
    return v


def number_range(lo: float, hi: float, name: str) -> tuple[float, float]:
    """``(lo, hi)`` as floats; SpecError naming ``name`` unless ``0 < lo <= hi`` (finite)."""
    lo, hi = _as_float(lo, f"{name} LO"), _as_float(hi, f"{name} HI")
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise SpecError(f"{name} range must satisfy 0 < LO <= HI (finite), got {lo}:{hi}")
    return lo, hi

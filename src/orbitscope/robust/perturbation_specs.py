"""The perturbation registry :data:`PERTURBATIONS` and the CLI specs: :func:`parse_perturbation`,
:func:`sampler_from_spec`, :func:`register_perturbation`, :func:`list_perturbations`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .._registry import Registry
from ..errors import SpecError
from .pixel_samplers import GaussianNoise, L2Uniform, LinfUniform
from .product_sampler import ProductSampler
from .sampler_base import PerturbationSampler
from .semantic_samplers import RandomBrightness, RandomRotation, RandomScale, RandomShift

__all__ = ["PERTURBATIONS", "list_perturbations", "parse_perturbation", "register_perturbation", "sampler_from_spec"]

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

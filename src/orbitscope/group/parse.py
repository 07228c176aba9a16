"""Command-line orbit specs: ``parse_orbit("rotation:0:360:5 x scale:0.8:1.2:0.1")`` for every
built-in orbit kind (JSON specs, which results store, are read by :func:`~.orbits.orbit_from_spec`)."""

from __future__ import annotations

import difflib



from ..errors import SpecError
from ..safe_repr import short_repr, short_text
from .finite import D4, Flip, TimeReversal, d4_time_reversal
from .grids import check_size, finite_number, inclusive_range
from .orbits import Brightness, Contrast, Orbit, Product, Rotation, Rotation90, Scale, Translation
from .so3 import NeroSO3, Octahedral, RandomSO3, SO3Grid

__all__ = ["parse_orbit"]


_SPEC_HELP = (
    "orbit specs: 'rotation:START:STOP:STEP' (degrees, STOP included), 'rotation90', "
    "'shift:START:STOP:STEP' (pixels, same grid for tx and ty; 'window-shift' is the same, e.g. NERO's "
    "detection orbit 'window-shift:-64:60:4'), 'scale:START:STOP:STEP', "
    "'brightness:START:STOP:STEP', 'contrast:START:STOP:STEP', "
    "'flip' or 'flip:x' (mirror left-right), 'flip:y' (top-bottom), 'd4' (the 8 exact symmetries of "
    "the square), 'time-reversal', 'd4xt' or 'd4xtime' (time-reversal x d4: NERO's 16 PIV elements), "
    "'so3-nero' or 'so3-nero:AXIS_STEP:ANGLE_STEP' (NERO's axis-angle sample, degrees; default 5:15), "
    "'so3:nero' (the same, default grid), 'so3:N' (N near-uniform 3-D rotations, super-Fibonacci), "
    "'so3-random:N' or 'so3-random:N:SEED' (N uniformly random rotations), 'octahedral' (the 24 rotations of the "
    "cube); products joined by ' x ', e.g. 'rotation:0:360:30 x scale:0.8:1.2:0.1'"
)

_RANGE_NAMES = ("rotation", "shift", "translation", "window-shift", "scale", "brightness", "contrast")


def parse_orbit(text: str) -> Orbit:
    """Parse a command-line orbit spec such as ``rotation:0:360:5`` (both ends included).

    Forms: ``rotation:START:STOP:STEP`` (degrees), ``rotation90``, ``shift:START:STOP:STEP``
    (pixels, same grid for tx and ty), ``scale:…``, ``brightness:…``, ``contrast:…``, ``flip[:x|y]``,
    ``d4``, ``time-reversal``, ``d4xt`` or ``d4xtime`` (time reversal × D4, NERO's element order),
    ``so3-nero[:AXIS_STEP:ANGLE_STEP]`` (or ``so3:nero``), ``so3:N``, ``so3-random:N[:SEED]`` and
    ``octahedral``; products joined by ``' x '``.
    Names are case-insensitive and ``_`` may stand for ``-`` (``time_reversal``, ``so3_nero``).
    ``d4 x time-reversal`` is read as ``time-reversal x d4`` (the two commute), so its dims are
    NERO's ``(time_reversed, d4)`` and it draws as NERO's mosaic.

    Raises:
        SpecError: an unknown form, a bound or step that is not a finite number (``nan``,
            ``inf``), or an orbit of more than :data:`MAX_ORBIT_SIZE` elements (with the count).
    """
    padded = f" {text.replace('×', ' x ')} "
    parts = [f.strip() for f in padded.split(" x ")]
    if not any(parts):
        raise SpecError(f"empty orbit spec; {_SPEC_HELP}")
    if len(parts) > 1 and not all(parts):
        raise SpecError(f"orbit {short_repr(text.strip())} has a dangling ' x ': a product needs an orbit on both sides, "
                        "e.g. 'rotation:0:360:30 x scale:0.8:1.2:0.1'")
    factors = parts
    try:
        orbits = [_parse_single(f) for f in factors]
        kinds = [o.kind for o in orbits]
        if kinds == ["d4", "time_reversal"]:  # the two commute: always NERO's layout (time_reversed, d4)
            orbits = orbits[::-1]
        out = orbits[0]
        for o in orbits[1:]:
            check_size(out.size * o.size, f"orbit {short_repr(text)}")
            out = Product(out, o)
    except ValueError as exc:  # an orbit's own check (e.g. 'so3:0', 'scale:0:0:1'): name the spec
        if any(f and f in str(exc) for f in factors):
            raise
        raise SpecError(f"orbit {short_repr(text.strip())}: {short_text(str(exc), 600)}") from exc
    return out


def _parse_single(text: str) -> Orbit:
    # finite.py and so3.py import this module, so they are imported here, when a spec is parsed

    name, *args = (a.strip() for a in text.split(":"))
    name = name.lower().replace("_", "-")
    plain = {"rotation90": Rotation90, "flip": Flip, "d4": D4, "time-reversal": TimeReversal,
             "d4xt": d4_time_reversal, "d4xtime": d4_time_reversal, "so3-nero": NeroSO3, "octahedral": Octahedral}
    known = sorted(set(plain) | set(_RANGE_NAMES) | {"so3", "so3-random"})
    if name not in known:
        close = difflib.get_close_matches(name, known, n=2)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise SpecError(f"unknown orbit {short_repr(name)} in {short_repr(text)}; {hint}{_SPEC_HELP}")
    if name in _RANGE_NAMES and len(args) != 3:
        raise SpecError(f"orbit {short_repr(text)}: {name} needs START:STOP:STEP (3 numbers, STOP included), got "
                        f"{len(args)}; e.g. '{name}:{'0:360:5' if name == 'rotation' else '-8:8:2' if name in ('shift', 'translation', 'window-shift') else '0.8:1.2:0.1'}'")
    bad = SpecError(f"cannot parse orbit {short_repr(text)}; {_SPEC_HELP}")
    if not args:
        if name not in plain:
            raise bad
        return plain[name]()
    if name == "flip" and len(args) == 1:
        if args[0].lower() not in Flip.AXES:
            raise SpecError(f"orbit {short_repr(text)}: the flip axis must be one of {list(Flip.AXES)}, got {short_repr(args[0])}")
        return Flip(args[0].lower())
    if name == "so3-nero" and len(args) == 2:
        axis_step = finite_number(args[0], f"orbit {short_repr(text)}: AXIS_STEP")
        angle_step = finite_number(args[1], f"orbit {short_repr(text)}: ANGLE_STEP")
        return NeroSO3(axis_step, angle_step)
    if name == "so3" and len(args) == 1 and args[0].lower() == "nero":
        return NeroSO3()
    if name == "so3-random" and len(args) in (1, 2):
        try:
            n, seed = int(args[0]), int(args[1]) if len(args) == 2 else 0
        except ValueError:
            raise SpecError(f"orbit {short_repr(text)}: N and SEED must be whole numbers, e.g. 'so3-random:500:0'") from None
        return RandomSO3(n, seed)
    if name == "so3" and len(args) == 1:
        try:
            n = int(args[0])
        except ValueError:
            raise SpecError(f"orbit {short_repr(text)}: N must be a whole number of rotations, got {short_repr(args[0])}") from None
        return SO3Grid(n)
    if name not in _RANGE_NAMES or len(args) != 3:
        raise bad
    grid = inclusive_range(*args, what=f"orbit {short_repr(text)}")
    if name == "rotation":
        return Rotation(grid)
    if name in ("shift", "translation", "window-shift"):  # a window over context moves by the task's input kind
        check_size(len(grid) ** 2, f"orbit {short_repr(text)} (tx x ty)")
        return Translation(grid)
    return {"scale": Scale, "brightness": Brightness, "contrast": Contrast}[name](grid)

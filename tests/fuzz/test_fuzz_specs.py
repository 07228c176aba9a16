"""Fuzzing the spec parsers (issue 38): data specs (every registered prefix, random keys and values:
huge, negative, non-finite, malformed, @N suffixes) and orbit specs. Each case is loaded in the
capped worker (``fuzzing.py``): a correct load, or one line naming the spec."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import assert_clean, fuzz_settings

SPECIAL = ["nan", "NaN", "inf", "-inf", "1e309", "-0", "0", "", " ", "0x10", "1_000", "٣", "9" * 5000, "2.5", "1e3",
           "None", "[]", "'", "\x00"]
#: numbers small enough to load quickly when valid, or far too large; medium values are slow but valid
NUMBER = st.one_of(st.integers(-3, 8).map(str), st.integers(10**7, 10**40).map(str), st.sampled_from(SPECIAL),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
KEYS = ["n", "points", "seed", "size", "density", "diameter", "intensity", "noise", "loss", "advection", "types",
        "max-disp", "v", "classes", "split", "recursive", "listing", "x"]
VALUE = st.one_of(NUMBER, st.builds(lambda a, b: f"{a}x{b}", NUMBER, NUMBER),
                  st.builds(lambda a, b: f"{a}..{b}", NUMBER, NUMBER),
                  st.sampled_from(["all", "uniform+rankine", "bunny+nope", "train", "test", "euler", "rk9"]),
                  st.text(max_size=12))
PART = st.one_of(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUE), st.text(max_size=10))
PREFIXES = ["meshes", "piv-synthetic", "mnist-subset", "fashion-mnist", "npz", "modelnet", "idx", "folder", "coco",
            "flow-folder", "cifar10", "MESHES", "piv-synthetic@3"]
DATA_SPEC = st.one_of(
    st.builds(lambda p, sep, parts, at: p + sep + ",".join(parts) + at, st.sampled_from(PREFIXES),
              st.sampled_from([":", "", "::", ": "]), st.lists(PART, max_size=4),
              st.sampled_from(["", "@1", "@0", "@-1", "@1e9", "@x", "@99999999999", "@2@3", "@"])),
    st.text(max_size=40),
)
ORBIT_KINDS = ["rotation", "shift", "scale", "brightness", "contrast", "flip", "d4", "time-reversal", "d4xt",
               "so3-nero", "so3", "so3-random", "octahedral", "rotation90", "nope"]
ORBIT_ONE = st.builds(lambda k, args: ":".join([k, *args]), st.sampled_from(ORBIT_KINDS), st.lists(NUMBER, max_size=4))
ORBIT_SPEC = st.one_of(st.builds(" x ".join, st.lists(ORBIT_ONE, min_size=1, max_size=3)), st.text(max_size=40))


def spec_names(spec: str) -> tuple[str, ...]:
    """What a message may quote of the spec: its text or its repr, whole or the first 30 characters
    ("empty" for a blank spec)."""
    if not spec.strip():
        return ("empty",)
    parts = [q.strip() for q in re.split(" x |×", spec)]  # an orbit product names its factor
    rest = spec.partition(":")[2].strip()
    parts += [rest, rest.rpartition("@")[0].strip(), *(q.strip() for q in rest.split(","))]  # the path(s), no @N
    return (spec.strip()[:30], repr(spec)[1:31], repr(spec.strip())[1:31], *(q[:30] for q in parts if q),
            *(repr(q)[1:31] for q in parts if q))


@fuzz_settings()
@given(spec=DATA_SPEC)
def test_data_specs(fuzz_worker, spec: str) -> None:
    case = {"target": "data_spec", "spec": spec}
    assert_clean(fuzz_worker.load(case), case, *spec_names(spec))


@fuzz_settings()
@given(spec=ORBIT_SPEC)
def test_orbit_specs(fuzz_worker, spec: str) -> None:
    case = {"target": "orbit_spec", "spec": spec}
    assert_clean(fuzz_worker.load(case), case, *spec_names(spec))

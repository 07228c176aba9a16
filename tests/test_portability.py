"""The suite passes on any CPU: floats read from a stored fixture are never compared bit for bit.

Fixtures under tests/data were written on one machine; float kernels differ between CPUs and
thread counts in the last bits, so a test that compares a fixture's floats with a fresh
computation exactly passes where the fixture was written and fails everywhere else. This guard
reads every test module and refuses exact array comparisons in any function that touches the
fixture folder: such a function compares through ``helpers.assert_matches_stored`` (integers
exactly, floats within float32 tolerance) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
FIXTURE_FOLDER = "data"
EXACT_COMPARISONS = {"assert_array_equal", "array_equal", "assert_equal", "equals", "identical"}


def _is_fixture_path(node: ast.AST) -> bool:
    """``Path(__file__).parent / "data" ...`` (any expression naming ``__file__`` and "data")."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    consts = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}
    return "__file__" in names and FIXTURE_FOLDER in consts


def fixture_comparisons(source: str) -> list[str]:
    """``function:line name`` for each exact array comparison in a function of ``source`` that
    reads the fixture folder, directly or through a module-level name bound to it."""
    tree = ast.parse(source)
    fixture_names = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign) and _is_fixture_path(stmt.value)
                     for t in stmt.targets if isinstance(t, ast.Name)}
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        reads_fixture = _is_fixture_path(fn) or any(
            isinstance(n, ast.Name) and n.id in fixture_names for n in ast.walk(fn))
        if not reads_fixture:
            continue
        for call in ast.walk(fn):
            if isinstance(call, ast.Call):
                f = call.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name in EXACT_COMPARISONS:
                    found.append(f"{fn.name}:{call.lineno} {name}")
    return found


def test_no_test_compares_a_fixtures_floats_exactly() -> None:
    offenders = {p.name: hits for p in sorted(TESTS.glob("*.py")) if (hits := fixture_comparisons(p.read_text()))}
    assert not offenders, (
        "these functions read tests/data and compare arrays exactly; floats computed on another "
        f"machine differ in the last bits: use helpers.assert_matches_stored instead: {offenders}")


def test_the_guard_finds_exact_comparisons_of_fixture_arrays() -> None:
    bad = '''
from pathlib import Path
import numpy as np
STORE = Path(__file__).parent / "data" / "store"

def test_direct(tmp_path):
    old = np.load(Path(__file__).parent / "data" / "x.npy")
    np.testing.assert_array_equal(old, fresh())

def test_through_a_name():
    assert load(STORE).result.equals(fresh())

def test_unrelated():
    np.testing.assert_array_equal(fresh(), fresh())
'''
    assert fixture_comparisons(bad) == ["test_direct:8 assert_array_equal", "test_through_a_name:11 equals"]
    good = bad.replace("np.testing.assert_array_equal(old", "assert_matches_stored(old").replace(
        "assert load(STORE).result.equals(fresh())", "assert_matches_stored(load(STORE), fresh())")
    assert fixture_comparisons(good) == []


def test_stored_floats_match_within_float32_tolerance_and_integers_exactly() -> None:
    import numpy as np
    import pytest

    from helpers import assert_matches_stored

    conf = np.array([0.25, 0.5, 0.118], np.float32)
    assert_matches_stored(conf, conf + np.float32(4.5e-8))  # the largest cross-CPU difference seen
    assert_matches_stored(np.array([np.nan, 0.0]), np.array([np.nan, 5e-8]))
    with pytest.raises(AssertionError):
        assert_matches_stored(conf, conf + np.float32(1e-4))  # a real change is still caught
    with pytest.raises(AssertionError):
        assert_matches_stored(np.array([3, 1]), np.array([3, 2]))  # predictions exactly
    with pytest.raises(AssertionError, match="dtype"):
        assert_matches_stored(conf, conf.astype(np.float64))

"""The gate's decisions on constructed results: evidence against equivalence mode, the
reference's own copies (0° and 360°) left out, a deterministic drop, and the regression sign
for a lower-is-better metric."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import orbitscope as osc
from orbitscope.results import OrbitResult
from orbitscope.stats import check_result, invariance_test, orbit_values
from orbitscope.stats.bands import difference_test
from orbitscope.tasks import Classification
from orbitscope.tasks.variables import Variable

ORBIT = osc.Rotation(range(0, 361, 30))  # 13 angles, 360° = 0°


def _result(values: np.ndarray, variable: Variable | None = None, name: str = "m") -> OrbitResult:
    var = variable or Classification().variable("correct")
    ds = xr.Dataset({var.name: (["sample", "angle"], values.astype(np.float32), var.attrs())},
                    coords={"sample": np.arange(len(values)), "angle": np.arange(0.0, 361.0, 30.0)},
                    attrs={"orbit": json.dumps(ORBIT.spec()), "orbit_dims": json.dumps(["angle"]),
                           "identity_index": 0, "run_name": name})
    return OrbitResult(ds)


def _accurate(n: int, p: float, seed: int) -> np.ndarray:
    """Every element the same column of 0/1 outcomes (an exactly invariant model), accuracy ≈ p."""
    col = (np.random.default_rng(seed).random(n) < p).astype(float)
    return np.repeat(col[:, None], 13, axis=1)


def test_the_reference_and_its_copy_at_360_are_not_tested():
    ov = orbit_values(_result(_accurate(100, 0.95, 0)))
    assert ov.same_as(0).tolist() == [True] + [False] * 11 + [True]
    report = check_result(_result(_accurate(100, 0.95, 0)), max_drop=0.03)
    assert report.passed and report.checks[0].details["elements"] == 11
    assert report.checks[0].details["at"] != {"angle": 0.0} and report.checks[0].details["at"] != {"angle": 360.0}


def test_equivalence_needs_the_samples_that_evidence_does_not():
    """An exactly invariant model (every element scores the same samples): evidence mode passes at
    any n; equivalence mode fails at n = 30 (the band's floor, one discordant pair in 30, is wider
    than 0.03) and passes at n = 2,000."""
    small, large = _result(_accurate(30, 0.9, 1)), _result(_accurate(2000, 0.9, 2))
    assert check_result(small, max_drop=0.03).passed
    failed = check_result(small, max_drop=0.03, mode="equivalence")
    assert not failed.passed and "not shown within the allowed 0.03" in failed.checks[0].reason
    assert "11 of 11 elements" in failed.checks[0].reason
    assert check_result(large, max_drop=0.03, mode="equivalence").passed


def test_a_drop_that_every_sample_makes_fails_both_the_gate_and_the_test():
    """A real metric that drops by exactly 0.5 at one element for every sample: zero spread, so
    the sup-t test must call it significant (not ignore the column), and the gate fail."""
    conf = Classification().variable("confidence")
    x = np.tile(np.linspace(0.5, 0.9, 40)[:, None], (1, 13))
    x[:, 4] -= 0.5
    res = _result(x, conf)
    test = invariance_test(res)
    assert test.p_value == pytest.approx(1 / 2001) and not test.invariant()
    assert test.max_drop == pytest.approx(0.5, abs=1e-6) and test.max_drop_at == {"angle": 120.0}
    assert not check_result(res, max_drop=0.02).passed
    d = np.zeros((40, 3))
    d[:, 1] = 0.5
    assert difference_test(d, from_binary=False)[0] == np.inf


def test_a_regression_of_a_lower_is_better_metric_is_an_increase():
    err = Variable("epe", "float32", kind="real", lower_is_better=True, label="EPE", unit="px")
    rng = np.random.default_rng(3)
    base = rng.uniform(0.5, 1.5, size=(200, 1)) * np.ones((1, 13))
    worse = base.copy()
    worse[:, 6] += 0.4  # the candidate's error is 0.4 px higher at 180°
    report = check_result(_result(worse, err, "candidate"), max_drop=None, baseline=_result(base, err, "baseline"),
                          max_regression=0.1)
    (reg,) = report.checks
    assert not reg.passed and reg.details["at"] == {"angle": 180.0}
    assert reg.details["drop"] == pytest.approx(0.4, abs=1e-6)
    assert "worsening against baseline" in reg.reason and "EPE" in reg.reason
    better = check_result(_result(base, err, "candidate"), max_drop=None, baseline=_result(worse, err, "baseline"),
                          max_regression=0.1)
    assert better.passed  # lower error than the baseline is no regression


def test_too_few_samples_give_no_test_and_two_samples_no_false_alarm():
    """Below 5 samples the test of invariance is not run. The bootstrap itself, at 2 samples of
    pure noise (H0), draws resamples that repeat one sample (no spread): they must count as
    infinitely far from the mean, not as 0, or every such test rejects (40 of 40 did)."""
    conf = Classification().variable("confidence")
    rng = np.random.default_rng(5)
    tiny = invariance_test(_result(rng.uniform(0.3, 0.9, size=(4, 13)), conf))
    assert np.isnan(tiny.p_value) and "needs at least 5 samples" in tiny.sentence() and tiny.invariant()
    ps = [difference_test(rng.uniform(-1, 1, size=(2, 12)), from_binary=False, resamples=500, seed=s)[1]
          for s in range(40)]
    assert sum(p <= 0.05 for p in ps) <= 6


def test_an_orbit_whose_elements_are_all_the_identity_tests_nothing_and_passes():
    """0° and 360° only: nothing differs from the reference, so nothing is tested (and nothing breaks)."""
    orbit = osc.Rotation([0, 360])
    ds = xr.Dataset({"correct": (["sample", "angle"], _accurate(50, 0.9, 4)[:, :2].astype(np.float32),
                                 Classification().variable("correct").attrs())},
                    coords={"sample": np.arange(50), "angle": [0.0, 360.0]},
                    attrs={"orbit": json.dumps(orbit.spec()), "orbit_dims": json.dumps(["angle"]), "identity_index": 0})
    res = OrbitResult(ds)
    test = invariance_test(res)
    assert test.max_drop_interval == (0.0, 0.0) and test.p_value == 1.0
    report = check_result(res, max_drop=0.02, mode="equivalence")
    assert report.passed and report.checks[0].details["elements"] == 0

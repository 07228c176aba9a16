"""A release gate: does a model's invariance (or its regression against a baseline) pass, with
statistical backing?

Two checks, each on the simultaneous drop band of :func:`~orbitscope.stats.invariance.orbit_drops`
at level 1 − α (so the family-wise error over all elements is ≤ α):

* **invariance**: the drop of the metric from the identity at every element, against
  ``max_drop``;
* **regression** (with a baseline result on the same samples and orbit): the drop of the model
  below the baseline at every element, against ``max_regression``.

Two ways to decide (``mode``):

* ``"evidence"`` (default): fail when the data show, at family-wise α, a drop larger than the
  tolerance somewhere (some lower bound > tolerance). A small test set then passes for lack of
  evidence: plan its size with :func:`~orbitscope.stats.planning.plan_samples`;
* ``"equivalence"``: pass only when the data show every drop is within the tolerance (every
  upper bound ≤ tolerance); a small test set then fails.

:class:`GateReport` renders JSON and JUnit XML for CI systems.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bands import DEFAULT_RESAMPLES
from .invariance import Drops, invariance_test_values, orbit_drops
from .values import orbit_values, result_name

__all__ = ["CheckOutcome", "GateReport", "check_result", "MODES", "DEFAULT_MAX_DROP"]

MODES = ("evidence", "equivalence")
#: the tolerance ``orbitscope check --max-drop`` and ``orbitscope plan --max-drop`` assume by default
DEFAULT_MAX_DROP = 0.02


@dataclass(frozen=True)
class CheckOutcome:
    """One check of a gate: its ``name`` (``invariance`` / ``regression``), whether it ``passed``,
    a readable ``reason`` and the numbers behind it."""

    name: str
    passed: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GateReport:
    """All checks of one gate run; ``passed`` when every check passed."""

    model: str
    checks: list[CheckOutcome]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when every check passed, 1 otherwise."""
        return 0 if self.passed else 1

    def summary(self) -> str:
        lines = [f"{'PASS' if self.passed else 'FAIL'} {self.model}"]
        lines += [f"  {'pass' if c.passed else 'FAIL'} {c.name}: {c.reason}" for c in self.checks]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"model": self.model, "passed": self.passed,
                           "checks": [{"name": c.name, "passed": c.passed, "reason": c.reason,
                                       "details": _jsonable(c.details)} for c in self.checks]}, indent=2)

    def to_junit(self, suite: str = "orbitscope check") -> str:
        """JUnit XML: one test suite, one test case per check (a failed check is a ``failure``)."""
        root = ET.Element("testsuites")
        ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(self.checks)),
                           failures=str(sum(not c.passed for c in self.checks)), errors="0", skipped="0")
        for c in self.checks:
            case = ET.SubElement(ts, "testcase", classname=f"orbitscope.{self.model}", name=c.name)
            if not c.passed:
                ET.SubElement(case, "failure", message=c.reason, type="OrbitCheckFailure").text = \
                    json.dumps(_jsonable(c.details), indent=2)
            else:
                ET.SubElement(case, "system-out").text = c.reason
        return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _decide(drops: Drops, tolerance: float, mode: str) -> tuple[bool, int, str]:
    """(passed, the deciding element, why) for one drop band, over the tested elements (the
    reference's own copies, whose drop is 0 by construction, are skipped)."""
    band, tested = drops.band, drops.tested
    total = int(tested.sum())
    if mode == "evidence":
        over = np.flatnonzero(tested & (band.lower > tolerance))
        if over.size:  # the element with the strongest evidence (the largest lower bound)
            k = int(over[np.argmax(band.lower[over])])
            return False, k, f"{over.size} of {total} elements significantly above it"
        return True, drops.worst, "no element significantly above it"
    if mode == "equivalence":
        over = np.flatnonzero(tested & ~(band.upper <= tolerance))
        if over.size:  # the element furthest from being shown within
            k = int(over[np.argmax(np.where(np.isfinite(band.upper[over]), band.upper[over], np.inf))])
            return False, k, f"{over.size} of {total} elements not shown within it"
        return True, drops.worst, "every element shown within it"
    raise ValueError(f"unknown mode {mode!r}; use {' or '.join(MODES)}")


def _outcome(name: str, drops: Drops, tolerance: float, mode: str, what: str, level: float) -> CheckOutcome:
    passed, k, why = _decide(drops, tolerance, mode)
    ov, band = drops.values, drops.band
    where = ov.where_text(k)
    d, lo, hi = float(band.mean[k]), float(band.lower[k]), float(band.upper[k])
    verb = {("evidence", True): "not significantly above", ("evidence", False): "significantly above",
            ("equivalence", True): "shown within", ("equivalence", False): "not shown within"}[(mode, passed)]
    worse = "worsening" if ov.lower_is_better else "drop"
    reason = (f"{what.replace('drop', worse, 1)} of {ov.label} {d:.3f} at {where} (simultaneous {level:.0%} "
              f"interval {lo:.3f} to {hi:.3f}) {verb} the allowed {tolerance:g}; {why} ({mode} mode, "
              f"{ov.n_samples} samples × {int(drops.tested.sum())} elements tested)")
    return CheckOutcome(name=name, passed=passed, reason=reason, details={
        "metric": ov.metric, "mode": mode, "tolerance": tolerance, "level": level, "at": ov.where(k),
        "drop": d, "lower": lo, "upper": hi, "max_drop": drops.max_drop, "max_drop_at": ov.where(drops.worst),
        "max_drop_interval": list(drops.max_drop_interval), "reference": drops.reference_text,
        "samples": ov.n_samples, "elements": int(drops.tested.sum()), "critical_value": band.critical})


def check_result(result: Any, *, max_drop: float | None = DEFAULT_MAX_DROP, alpha: float = 0.05, baseline: Any = None,
                 max_regression: float | None = None, metric: str | None = None, mode: str = "evidence",
                 resamples: int = DEFAULT_RESAMPLES, seed: int = 0, name: str | None = None) -> GateReport:
    """Run the gate on an evaluated result (see the module docstring).

    Args:
        result: the model's :class:`~orbitscope.results.OrbitResult`.
        max_drop: the largest allowed drop from the identity (metric units); None skips the
            invariance check.
        alpha: family-wise error of each check.
        baseline: a baseline model's result on the same samples and orbit: adds the regression check.
        max_regression: the largest allowed drop below the baseline at any element (default:
            ``max_drop``, or 0 when that is None).
        metric: default: the primary metric (accuracy for classification).
        mode: ``"evidence"`` or ``"equivalence"``.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use {' or '.join(MODES)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if max_drop is None and baseline is None:
        raise ValueError("nothing to check: give max_drop (invariance), a baseline (regression), or both")
    level = 1 - alpha
    ov = orbit_values(result, metric)
    checks = []
    if max_drop is not None:
        if ov.n_elements < 2:
            raise ValueError("the invariance check needs an orbit of at least two elements")
        test = invariance_test_values(ov, level=level, resamples=resamples, seed=seed)
        outcome = _outcome("invariance", test.drops, max_drop, mode, f"drop from {test.drops.reference_text}", level)
        outcome.details.update({"test": test.method, "statistic": test.statistic, "p_value": test.p_value})
        checks.append(outcome)
    if baseline is not None:
        from ..results.result import check_same_orbit, check_same_samples

        check_same_orbit(result, baseline)
        check_same_samples([result, baseline])
        vb = orbit_values(baseline, ov.metric)
        tolerance = max_regression if max_regression is not None else (max_drop if max_drop is not None else 0.0)
        drops = orbit_drops(ov, level=level, resamples=resamples, seed=seed, against=vb)
        base = result_name(baseline, "the baseline")
        checks.append(_outcome("regression", drops, tolerance, mode, f"drop against {base}", level))
    model = name or result_name(result, "model")
    return GateReport(model=model, checks=checks)

"""Invariance and regression checks for a model repository's tests (the pytest plugin that offers them
as a fixture is :mod:`orbitscope_pytest`).

The checks are :func:`orbitscope.stats.check_result`'s release gate (the simultaneous drop band
over every orbit element at family-wise ``alpha``, against a tolerance) as assertions: they
evaluate the model with :func:`orbitscope.evaluate` (or take an evaluated result), and raise
:class:`OrbitCheckFailed`, an ``AssertionError`` whose message is the gate's readable summary
(the metric, the worst element, its drop and interval, the tolerance) when a check fails.

With orbitscope installed, pytest loads its plugin (:mod:`orbitscope_pytest`, the ``pytest11``
entry point ``orbitscope``) and every test can ask for the ``orbit_check`` fixture, bound to a temporary
store of its own::

    import orbitscope as osc

    def test_rotation(orbit_check):
        orbit_check.invariant(model, data, osc.Rotation(range(-30, 31, 5)), max_drop=0.05)

    def test_no_regression(orbit_check):
        orbit_check.no_regression(model, last_release_model, data, "rotation:-30:30:5", max_regression=0.01)

Outside pytest (or with a store of your own)::

    from orbitscope.testing import assert_invariant, assert_no_regression

    report = assert_invariant(model, data, "rotation:-30:30:5", max_drop=0.05, store="orbitscope-runs")
    print(report.summary())

``pytest --orbitscope-junit checks.xml`` also writes every gate report of the session as JUnit
XML (one test suite per test, one test case per check), next to pytest's own ``--junitxml``.

In ``evidence`` mode (the default) a small test set passes for lack of evidence: size it with
:func:`orbitscope.stats.plan_samples` (``orbitscope plan``), or use ``mode="equivalence"``.

The plugin lives in its own small top-level package, :mod:`orbitscope_pytest`, because pytest
loads it in every session of every project where orbitscope is installed: it imports only the
standard library and pytest, and orbitscope (torch, xarray, …) only when a test asks for the
``orbit_check`` fixture.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .results.result import OrbitResult
    from .results.store import Store
    from .stats.gate import GateReport

__all__ = ["OrbitCheckFailed", "assert_invariant", "assert_no_regression", "OrbitCheck", "merge_junit"]


class OrbitCheckFailed(AssertionError):
    """A gate check failed: the message is the report's summary, ``report`` the
    :class:`~orbitscope.stats.gate.GateReport`."""

    def __init__(self, report: "GateReport") -> None:
        super().__init__(report.summary())
        self.report = report


def _as_result(model_or_result: Any, data: Any, orbit: Any, task: Any, store: Any, evaluate_kwargs: dict[str, Any],
               what: str) -> "OrbitResult":
    """``model_or_result`` itself when it is an evaluated result (an OrbitResult or a Run), else
    the model evaluated on ``data`` over ``orbit`` (``what`` names it in errors)."""
    from .engine.evaluation import Run, evaluate
    from .results.result import OrbitResult

    if isinstance(model_or_result, Run):
        model_or_result = model_or_result.result
    if isinstance(model_or_result, OrbitResult):
        extra = [k for k, v in (("data", data), ("orbit", orbit), ("task", task)) if v is not None]
        extra += sorted(evaluate_kwargs)
        if extra:
            raise TypeError(f"{what} is an evaluated result, so {', '.join(extra)} would be ignored: pass the model "
                            "instead to evaluate it, or drop them")
        return model_or_result
    if data is None or orbit is None:
        raise TypeError(f"{what} is a model: give data and orbit to evaluate it on, e.g. "
                        "(model, osc.mnist_subset('test'), osc.Rotation(range(-30, 31, 5)))")
    return evaluate(model_or_result, data, orbit, task, store=store, **evaluate_kwargs).result


def _gate(result: "OrbitResult", **kwargs: Any) -> "GateReport":
    from .stats.gate import check_result

    __tracebackhide__ = True  # pytest shows the test's line, not these frames

    report = check_result(result, **kwargs)
    if not report.passed:
        raise OrbitCheckFailed(report)
    return report


def assert_invariant(model_or_result: Any, data: Any = None, orbit: Any = None, *, max_drop: float = 0.02,
                     alpha: float = 0.05, metric: str | None = None, task: Any = None, mode: str = "evidence",
                     store: "Store | str | os.PathLike[str] | None" = None, **evaluate_kwargs: Any) -> "GateReport":
    """Assert that the metric drops by at most ``max_drop`` from the identity at every orbit element.

    Args:
        model_or_result: a model (evaluated with :func:`orbitscope.evaluate` on ``data`` over
            ``orbit``), or an evaluated :class:`~orbitscope.results.OrbitResult` / ``Run``.
        data: what :func:`orbitscope.evaluate` takes; only for a model.
        orbit: what :func:`orbitscope.evaluate` takes (it may be a spec such as
            ``"rotation:-30:30:5"``); only for a model.
        task: what :func:`orbitscope.evaluate` takes; only for a model.
        max_drop: the tolerance, in metric units (e.g. 0.02 accuracy).
        alpha: family-wise error over all orbit elements together.
        metric: default: the task's primary metric (accuracy for classification).
        mode: ``"evidence"`` (fail on a drop shown to exceed the tolerance) or ``"equivalence"``
            (pass only when every drop is shown within it).
        store: a store (or its folder) to evaluate through (resumable, reused); None: in memory.
        evaluate_kwargs: more :func:`orbitscope.evaluate` options (``batch_size``, ``normalize``, …).

    Returns:
        The :class:`~orbitscope.stats.gate.GateReport` when the check passes.

    Raises:
        OrbitCheckFailed: (an ``AssertionError``) the check failed; its message is the report's summary.
    """
    __tracebackhide__ = True
    result = _as_result(model_or_result, data, orbit, task, store, evaluate_kwargs, "model_or_result")
    return _gate(result, max_drop=max_drop, alpha=alpha, metric=metric, mode=mode)


def assert_no_regression(model_or_result: Any, baseline: Any, data: Any = None, orbit: Any = None, *,
                         max_regression: float = 0.0, max_drop: float | None = None, alpha: float = 0.05,
                         metric: str | None = None, task: Any = None, mode: str = "evidence",
                         store: "Store | str | os.PathLike[str] | None" = None,
                         **evaluate_kwargs: Any) -> "GateReport":
    """Assert that the model's metric is at most ``max_regression`` below the baseline's at every
    orbit element (on the same samples), and with ``max_drop`` also :func:`assert_invariant`'s check.

    ``model_or_result`` and ``baseline`` are each a model (evaluated on ``data`` over ``orbit``,
    with ``task`` and ``evaluate_kwargs``) or an evaluated result; the other arguments are
    :func:`assert_invariant`'s.

    Raises:
        OrbitCheckFailed: (an ``AssertionError``) a check failed; its message is the report's summary.
    """
    __tracebackhide__ = True
    result = _as_result(model_or_result, data, orbit, task, store, dict(evaluate_kwargs), "model_or_result")
    base = _as_result(baseline, data, orbit, task, store, dict(evaluate_kwargs), "baseline")
    return _gate(result, max_drop=max_drop, alpha=alpha, baseline=base, max_regression=max_regression, metric=metric,
                 mode=mode)


class OrbitCheck:
    """What the ``orbit_check`` fixture gives: :func:`assert_invariant` and
    :func:`assert_no_regression` evaluating through one store (by default the test's own
    temporary one), keeping every report they make (passed or failed) in ``reports``.

    Args:
        store: the store (or its folder) the checks evaluate through, unless a call gives ``store=``.
        on_report: called with each report, e.g. to collect them for ``--orbitscope-junit``.
    """

    def __init__(self, store: "Store | str | os.PathLike[str]",
                 on_report: Callable[["GateReport"], None] | None = None) -> None:
        self.store = store
        self.reports: list[GateReport] = []
        self._on_report = on_report

    def invariant(self, model_or_result: Any, data: Any = None, orbit: Any = None, **kwargs: Any) -> "GateReport":
        """:func:`assert_invariant` through this fixture's store."""
        __tracebackhide__ = True
        return self._run(assert_invariant, (model_or_result, data, orbit), kwargs)

    def no_regression(self, model_or_result: Any, baseline: Any, data: Any = None, orbit: Any = None,
                      **kwargs: Any) -> "GateReport":
        """:func:`assert_no_regression` through this fixture's store."""
        __tracebackhide__ = True
        return self._run(assert_no_regression, (model_or_result, baseline, data, orbit), kwargs)

    def _run(self, check: Callable[..., "GateReport"], args: tuple[Any, ...], kwargs: dict[str, Any]) -> "GateReport":
        __tracebackhide__ = True
        kwargs.setdefault("store", self.store)
        try:
            report = check(*args, **kwargs)
        except OrbitCheckFailed as failed:
            self._keep(failed.report)
            raise
        self._keep(report)
        return report

    def _keep(self, report: "GateReport") -> None:
        self.reports.append(report)
        if self._on_report is not None:
            self._on_report(report)


def merge_junit(reports: list[tuple[str, "GateReport"]]) -> str:
    """One JUnit XML document of several gate reports: a test suite per ``(name, report)``."""
    root = ET.Element("testsuites")
    for name, report in reports:
        root.extend(ET.fromstring(report.to_junit(suite=name)).iter("testsuite"))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)

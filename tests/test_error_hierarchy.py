"""Every error orbitscope defines is an OrbitscopeError and keeps its builtin base; assessors used
before fitting raise NotFittedError (issue 36, point 4)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import numpy as np
import pytest

import orbitscope.errors as errors
from orbitscope.errors import NotFittedError, OrbitscopeError, check_is_fitted

SRC = Path(__file__).resolve().parents[1] / "src" / "orbitscope"

#: the one exception class that is deliberately outside the hierarchy: pytest reports it as a failed assertion
OUTSIDE = {("orbitscope.testing", "OrbitCheckFailed")}


def _exception_classes_in_src() -> list[tuple[str, str]]:
    """(module, class) for every class in src/ whose bases name an ``...Error`` or ``Exception``."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(("orbitscope", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                # private classes (leading underscore) are control flow that never leaves their module
                if any(b.endswith(("Error", "Exception", "Failed")) for b in bases) and not node.name.startswith("_"):
                    found.append((module, node.name))
    return found


def test_the_scan_finds_the_known_error_classes():
    found = set(_exception_classes_in_src())
    for known in [("orbitscope.app.data", "AppError"), ("orbitscope.app.labelling_logic", "LabellingError"),
                  ("orbitscope.errors", "NotFittedError"), ("orbitscope.results.store", "RunBusyError")]:
        assert known in found


@pytest.mark.parametrize("module, name", [c for c in _exception_classes_in_src() if c not in OUTSIDE])
def test_every_error_class_in_src_derives_from_orbitscope_error(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, OrbitscopeError), f"{module}.{name} bases: {cls.__mro__}"


def test_every_class_of_the_errors_module_is_in_the_hierarchy_and_its_table():
    classes = [obj for _, obj in inspect.getmembers(errors, inspect.isclass) if obj.__module__ == "orbitscope.errors"]
    assert len(classes) >= 10
    table = errors.__doc__.split("raised when")[1].split("Defined beside")[0]  # the table's rows
    for cls in classes:
        assert issubclass(cls, OrbitscopeError)
        assert cls.__name__ in errors.__all__
        assert cls is OrbitscopeError or cls.__name__[:17] in table, cls.__name__  # long names end in "…"


@pytest.mark.parametrize("module, name", [("orbitscope.app.data", "AppError"),
                                          ("orbitscope.app.labelling_logic", "LabellingError")])
def test_interface_errors_keep_their_builtin_base(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, OrbitscopeError) and issubclass(cls, ValueError)
    with pytest.raises(ValueError, match="shown"):
        raise cls("shown to the user")


class _Estimator:
    pass


def test_check_is_fitted_needs_every_attribute():
    est = _Estimator()
    with pytest.raises(NotFittedError, match=r"_Estimator is not fitted; call fit\(X, y\) first"):
        check_is_fitted(est, "coef_")
    est.coef_ = 1
    check_is_fitted(est, "coef_")
    check_is_fitted(est, ["coef_"])
    with pytest.raises(NotFittedError, match=r"call fit\(a, b\) first"):
        check_is_fitted(est, ["coef_", "classes_"], fit_call="fit(a, b)")
    est.classes_ = [0, 1]
    check_is_fitted(est, ("coef_", "classes_"))


def test_assessors_used_before_fitting_raise_not_fitted_error():
    from orbitscope.ml4ml.assess.assessors import (AccuracyDropBaseline, AllLevelsCorrectBaseline,
                                                   MatrixCNNAssessor, WorstLevelAccuracyBaseline)

    images = np.zeros((2, 1, 4, 4), dtype=np.float32)
    correctness = [np.ones((3, 4)), np.zeros((3, 4))]
    calls = [lambda: MatrixCNNAssessor().predict_proba(images), lambda: MatrixCNNAssessor().predict(images)]
    for cls in (AccuracyDropBaseline, AllLevelsCorrectBaseline, WorstLevelAccuracyBaseline):
        calls += [lambda c=cls: c().predict(correctness), lambda c=cls: c().decision_function(correctness),
                  lambda c=cls: c().predict_proba(correctness)]
    for call in calls:
        with pytest.raises(NotFittedError, match="is not fitted; call fit") as info:
            call()
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, OrbitscopeError)

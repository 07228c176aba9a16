"""``orbitscope.testing``: the assertions, and the pytest plugin (the ``orbit_check`` fixture and
``--orbitscope-junit``) as a model repository meets it: loaded through its entry point by a
``python -m pytest`` of a generated test file."""

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

import orbitscope as osc
from orbitscope.stats import check_result
from orbitscope.testing import OrbitCheck, assert_invariant, assert_no_regression

from helpers import CentroidNet

TESTS = Path(__file__).resolve().parent
ROTATIONS = osc.Rotation(range(0, 181, 45))


@pytest.fixture(scope="module")
def centroids() -> np.ndarray:
    train = osc.mnist_subset("train")
    x = train.images.reshape(len(train), -1).astype(np.float64) / 255.0
    return np.stack([x[train.labels == c].mean(0) for c in range(10)])


@pytest.fixture(scope="module")
def data():
    return osc.parse_data_spec("mnist-subset:test@40")


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    (ep,) = [ep for ep in entry_points(group="pytest11") if ep.name == "orbitscope"]
    assert ep.value == "orbitscope_pytest"


def test_loading_the_plugin_imports_no_heavy_package():
    """pytest loads the plugin in every session where orbitscope is installed: importing it (as
    pytest does, by its entry point) loads the standard library and pytest only."""
    code = textwrap.dedent("""
        import sys
        from importlib.metadata import entry_points
        (ep,) = [ep for ep in entry_points(group="pytest11") if ep.name == "orbitscope"]
        module = ep.load()
        assert hasattr(module, "orbit_check") and hasattr(module, "pytest_addoption")
        print(sorted(m for m in ("torch", "xarray", "numpy", "scipy", "orbitscope") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_assertions_on_results(centroids, data):
    net = CentroidNet(centroids, scale=0.2).eval()
    upright = osc.evaluate(net, data, ROTATIONS).result
    symmetric = osc.evaluate(osc.symmetrize(net, osc.Rotation90()), data, ROTATIONS).result
    with pytest.raises(AssertionError) as failed:
        assert_invariant(upright, max_drop=0.05)
    direct = check_result(upright, max_drop=0.05)
    assert str(failed.value) == direct.summary() and "angle" in str(failed.value)
    assert failed.value.report.to_json() == direct.to_json()
    report = assert_invariant(symmetric, max_drop=0.02)
    assert report.passed and [c.name for c in report.checks] == ["invariance"]
    # the upright model is worse than the symmetrised one at the rotated elements ...
    with pytest.raises(AssertionError, match="regression: drop against"):
        assert_no_regression(upright, symmetric, max_regression=0.05)
    # ... and no worse than itself
    assert assert_no_regression(upright, upright).passed
    with pytest.raises(TypeError, match="give data and orbit"):
        assert_invariant(net)
    with pytest.raises(TypeError, match="orbit would be ignored"):
        assert_invariant(upright, orbit=ROTATIONS)


def test_the_fixture_class_evaluates_through_its_store(tmp_path, centroids, data):
    seen = []
    check = OrbitCheck(tmp_path / "runs", on_report=seen.append)
    net = CentroidNet(centroids, scale=0.2).eval()
    with pytest.raises(AssertionError):
        check.invariant(net, data, "rotation:0:180:45", max_drop=0.05)
    assert check.invariant(net, data, "rotation:0:180:45", max_drop=0.6).passed
    assert [r.passed for r in check.reports] == [False, True] and seen == check.reports
    (rec,) = osc.Store(tmp_path / "runs").runs()  # one run, reused by the second check
    assert rec.complete and rec.n_samples == 40


MODEL_TESTS = '''
import numpy as np
import orbitscope as osc
from helpers import CentroidNet

NET = CentroidNet(np.load({centroids!r}), scale=0.2).eval()
DATA = osc.parse_data_spec("mnist-subset:test@40")


def test_symmetrised_model_is_invariant(orbit_check):
    report = orbit_check.invariant(osc.symmetrize(NET, osc.Rotation90()), DATA, osc.Rotation90())
    assert report.passed
    assert orbit_check.store.parent.name.startswith("test_symmetrised")  # the test's own tmp_path


def test_upright_model_is_invariant(orbit_check):
    orbit_check.invariant(NET, DATA, osc.Rotation(range(0, 181, 45)), max_drop=0.05)
'''


@pytest.mark.slow  # pytest in a subprocess on a model repository
def test_plugin_in_a_model_repository(tmp_path, centroids, data):
    np.save(tmp_path / "centroids.npy", centroids)
    (tmp_path / "test_model.py").write_text(MODEL_TESTS.format(centroids=str(tmp_path / "centroids.npy")))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]),
               ORBITSCOPE_CONFIG=str(tmp_path / "config"))  # OMP_NUM_THREADS as here (conftest)
    junit = tmp_path / "out" / "orbit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:dash", "--rootdir", str(tmp_path),
         "--basetemp", str(tmp_path / "basetemp"), f"--orbitscope-junit={junit}", "test_model.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # pytest: some tests failed
    assert "1 failed, 1 passed" in out
    assert "FAILED test_model.py::test_upright_model_is_invariant" in out
    # the failure message is the gate's reason: the metric, the worst element, the tolerance
    net = CentroidNet(centroids, scale=0.2).eval()
    direct = check_result(osc.evaluate(net, data, ROTATIONS).result, max_drop=0.05)
    assert f"FAIL invariance: {direct.checks[0].reason}" in out and "the allowed 0.05" in out
    suites = {s.get("name"): s for s in ET.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == {"test_model.py::test_symmetrised_model_is_invariant",
                           "test_model.py::test_upright_model_is_invariant"}
    assert suites["test_model.py::test_symmetrised_model_is_invariant"].get("failures") == "0"
    (failure,) = suites["test_model.py::test_upright_model_is_invariant"].iter("failure")
    assert json.loads(failure.text)["tolerance"] == 0.05 and failure.get("message") in out

"""``orbitscope check`` (the release gate) and ``orbitscope plan`` end to end (typer's runner, real
MNIST digits, real stores), checked against :mod:`orbitscope.stats` called directly."""

import json
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.cli import app
from orbitscope.stats import check_result, plan_from_pilot, plan_samples, simulate_power
from orbitscope.stats.invariance import invariance_test

from helpers import CentroidNet

runner = CliRunner()

DATA = "mnist-subset:test@60"
ROTATIONS = "rotation:0:180:45"


@pytest.fixture(scope="module")
def centroid_net() -> CentroidNet:
    """Nearest-centroid MNIST classifier: ~80 % upright, much worse rotated."""
    train = osc.mnist_subset("train")
    x = train.images.reshape(len(train), -1).astype(np.float64) / 255.0
    return CentroidNet(np.stack([x[train.labels == c].mean(0) for c in range(10)]), scale=0.2).eval()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, centroid_net):
    """A user module with two factories, their weights (save_model), and a self-describing
    model file (an exactly C4-invariant symmetrised SmallCNN)."""
    folder = tmp_path_factory.mktemp("gate-models")
    (folder / "gate_cli_nets.py").write_text(textwrap.dedent("""
        import numpy as np
        import orbitscope as osc
        from helpers import CentroidNet

        def upright():
            return CentroidNet(np.zeros((10, 784)), scale=0.2)

        def symmetric():
            return osc.symmetrize(upright(), osc.Rotation90())
    """))
    osc.save_model(centroid_net, folder / "upright.safetensors")
    osc.save_model(osc.symmetrize(centroid_net, osc.Rotation90()), folder / "symmetric.safetensors")
    torch.manual_seed(0)
    osc.save_model(osc.symmetrize(osc.SmallCNN(), osc.Rotation90()), folder / "small_c4.safetensors")
    return folder


@pytest.fixture()
def nets(model_files, monkeypatch):
    monkeypatch.syspath_prepend(str(model_files))
    yield model_files
    sys.modules.pop("gate_cli_nets", None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, centroid_net):
    """A store with the upright and the symmetrised centroid net over rotations, and the
    symmetrised one over C4."""
    home = tmp_path_factory.mktemp("gate-store")
    data = osc.parse_data_spec(DATA)
    sym = osc.symmetrize(centroid_net, osc.Rotation90())
    ids = {
        "upright": osc.evaluate(centroid_net, data, ROTATIONS, store=home, name="upright").run_id,
        "symmetric": osc.evaluate(sym, data, ROTATIONS, store=home, name="symmetric").run_id,
        "c4": osc.evaluate(sym, data, "rotation90", store=home, name="symmetric-c4").run_id,
    }
    return home, ids


def _text(res):
    """The command's output with line wrapping undone (error lines wrap at the console's width)."""
    return " ".join(res.output.split())


def _cases(path):
    """{check name: failure element or None} of a JUnit file."""
    root = ET.parse(path).getroot()
    return {case.get("name"): case.find("failure") for case in root.iter("testcase")}


@pytest.mark.parametrize("spec", ["factory", "file"])
def test_check_passes_an_exactly_invariant_model(tmp_path, nets, spec):
    model = (["gate_cli_nets:symmetric", "--weights", str(nets / "symmetric.safetensors")] if spec == "factory"
             else [str(nets / "small_c4.safetensors")])
    junit, report = tmp_path / "ci" / "check.xml", tmp_path / "check.json"
    res = runner.invoke(app, ["check", *model, "--data", "mnist-subset:test@24", "--orbit", "rotation90",
                              "--home", str(tmp_path / "s"), "--junit", str(junit), "--json", str(report)])
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output and "FAIL" not in res.output
    cases = _cases(junit)
    assert list(cases) == ["invariance"] and cases["invariance"] is None
    payload = json.loads(report.read_text())
    assert payload["passed"] is True
    # exactly invariant: the same accuracy at every element, no drop anywhere
    assert payload["checks"][0]["details"]["max_drop"] == 0.0


def test_check_fails_a_rotation_sensitive_model_naming_the_worst_element(tmp_path, nets):
    home = tmp_path / "s"
    junit, report = tmp_path / "check.xml", tmp_path / "check.json"
    args = ["check", "gate_cli_nets:upright", "--weights", str(nets / "upright.safetensors"), "--data", DATA,
            "--orbit", ROTATIONS, "--max-drop", "0.05", "--home", str(home), "--junit", str(junit),
            "--json", str(report)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    (rec,) = osc.Store(home).runs()
    direct = check_result(osc.Store(home).load(rec.run_id), max_drop=0.05)
    (check,) = direct.checks
    assert not check.passed
    assert check.details["at"] == check.details["max_drop_at"]  # the deciding element is the worst one
    worst = f"at angle {check.details['at']['angle']:g} "
    assert "FAIL" in res.output and check.reason in res.output and worst in res.output
    assert json.loads(report.read_text()) == json.loads(direct.to_json())
    cases = _cases(junit)
    assert list(cases) == ["invariance"] and cases["invariance"].get("message") == check.reason
    # the same check again reuses the stored run and fails the same way
    again = runner.invoke(app, args)
    assert again.exit_code == 1 and "reused from the store" in again.output
    assert len(osc.Store(home).runs()) == 1


def test_check_a_stored_run_against_a_baseline_run(tmp_path, runs):
    home, ids = runs
    junit, report = tmp_path / "check.xml", tmp_path / "check.json"
    res = runner.invoke(app, ["check", ids["upright"][:8], "--baseline", ids["symmetric"], "--max-drop", "0.6",
                              "--max-regression", "0.05", "--home", str(home), "--junit", str(junit),
                              "--json", str(report)])
    assert res.exit_code == 1, res.output
    store = osc.Store(home)
    direct = check_result(store.load(ids["upright"]), max_drop=0.6, baseline=store.load(ids["symmetric"]),
                          max_regression=0.05)
    assert [c.passed for c in direct.checks] == [True, False]
    assert json.loads(report.read_text()) == json.loads(direct.to_json())
    cases = _cases(junit)
    assert cases["invariance"] is None and cases["regression"] is not None
    assert direct.checks[1].reason in res.output and "drop against symmetric" in res.output
    # against itself nothing regresses
    same = runner.invoke(app, ["check", "upright", "--baseline", "upright", "--max-drop", "0.6", "--home", str(home)])
    assert same.exit_code == 0, same.output


def test_check_model_specs_against_stored_runs(nets, runs):
    home, _ = runs
    res = runner.invoke(app, ["check", "gate_cli_nets:upright", "--weights", str(nets / "upright.safetensors"),
                              "--data", DATA, "--orbit", ROTATIONS, "--baseline", "upright", "--max-drop", "0.6",
                              "--home", str(home)])
    assert res.exit_code == 0, res.output  # the same model and data as the baseline run: its stored run, reused
    assert "reused from the store" in res.output and "pass regression" in res.output
    # a stored MODEL against a model-spec baseline, evaluated on --data over --orbit
    res = runner.invoke(app, ["check", "upright", "--baseline", "gate_cli_nets:symmetric", "--baseline-weights",
                              str(nets / "symmetric.safetensors"), "--data", DATA, "--orbit", ROTATIONS,
                              "--max-drop", "0.6", "--max-regression", "0.05", "--home", str(home)])
    assert res.exit_code == 1, res.output
    assert "pass invariance" in res.output and "FAIL regression: drop against symmetric" in res.output


@pytest.mark.parametrize("args, message", [
    (["upright", "--metric", "nope"], "unknown metric 'nope'"),
    (["gate_cli_nets:upright", "--orbit", "rotation90"], "give --data"),
    (["no-such-run"], "not a stored run"),
    (["upright", "--mode", "strict"], "--mode 'strict'"),
    (["upright", "--alpha", "1.5"], "--alpha"),
    (["upright", "--data", DATA], "drop it"),
    (["upright", "--weights", "w.safetensors"], "stored run"),
    (["upright", "--max-regression", "0.01"], "add --baseline"),
    (["upright", "--baseline", "symmetric-c4"],
     "cannot be compared with MODEL 'upright': results sample different orbit elements"),
])
def test_check_bad_input_exits_2_with_a_message(runs, nets, args, message):
    home, _ = runs
    res = runner.invoke(app, ["check", *args, "--home", str(home)])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and message in _text(res) and "Traceback" not in res.output


# K counts distinct elements besides the reference: 0°…360° by 5° has 72 distinct angles (360° is 0°), of
# which 71 are tested; so3:50 has no identity, so its first rotation is the reference
@pytest.mark.parametrize("where, k", [(["--orbit", "rotation:0:360:5"], 71), (["--orbit", "so3:50"], 49),
                                      (["--elements", "7"], 7)])
def test_plan_matches_plan_samples(where, k):
    res = runner.invoke(app, ["plan", "--delta", "0.05", *where, "--accuracy", "0.95"])
    assert res.exit_code == 0, res.output
    plan = plan_samples(0.05, elements=k, accuracy=0.95)
    assert plan.sentence() in res.output and f"{k} orbit elements" in res.output
    res = runner.invoke(app, ["plan", "--delta", "0.1", *where, "--sd", "0.4", "--max-drop", "0.02", "--alpha",
                              "0.1", "--power", "0.9"])
    assert res.exit_code == 0, res.output
    assert f"{plan_samples(0.1, elements=k, sd=0.4, max_drop=0.02, alpha=0.1, power=0.9).n} samples" in res.output


def test_plan_from_a_pilot_run_and_simulated_power(runs):
    home, ids = runs
    res = runner.invoke(app, ["plan", "--delta", "0.1", "--pilot", "upright", "--metric", "confidence",
                              "--home", str(home)])
    assert res.exit_code == 0, res.output
    plan = plan_from_pilot(osc.Store(home).load(ids["upright"]), 0.1, metric="confidence")
    assert plan.sentence() in res.output
    res = runner.invoke(app, ["plan", "--delta", "0.2", "--elements", "3", "--accuracy", "0.9", "--simulate",
                              "--repetitions", "20", "--rho", "0.3"])
    assert res.exit_code == 0, res.output
    n = plan_samples(0.2, elements=3, accuracy=0.9).n
    power = simulate_power(n, 0.2, elements=3, accuracy=0.9, rho=0.3, repetitions=20)
    assert f"at n = {n}: {power.sentence()}" in res.output


@pytest.mark.parametrize("args, message", [
    (["--elements", "4", "--sd", "0.3", "--simulate"], "needs --accuracy"),
    (["--elements", "4", "--sd", "0.3", "--accuracy", "0.9"], "exactly one of"),
    (["--accuracy", "0.9"], "--elements K"),
    (["--elements", "4", "--accuracy", "0.9", "--rho", "0.5"], "add --simulate"),
    (["--elements", "4", "--accuracy", "0.9", "--metric", "confidence"], "--pilot"),
])
def test_plan_bad_input_exits_2(args, message):
    res = runner.invoke(app, ["plan", "--delta", "0.05", *args])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and message in _text(res)


def test_summaries_state_the_test_of_invariance(tmp_path, runs, centroid_net):
    home, ids = runs
    res = runner.invoke(app, ["runs", "show", "upright", "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert invariance_test(osc.Store(home).load(ids["upright"])).sentence() in res.output
    one = tmp_path / "one"
    osc.evaluate(centroid_net, osc.parse_data_spec("mnist-subset:test@10"), osc.Rotation([0]), store=one, name="one")
    res = runner.invoke(app, ["runs", "show", "one", "--home", str(one)])
    assert res.exit_code == 0, res.output
    assert "no test of invariance" in res.output and "at least two orbit elements" in res.output


@pytest.mark.parametrize("flag, expected", [([], True), (["--pointwise-only"], False), (["--simultaneous"], True)])
def test_plot_passes_the_band_choice_to_nero_plot(tmp_path, runs, monkeypatch, flag, expected):
    import orbitscope.viz.plot as viz_plot

    seen = {}

    def fake_nero_plot(results, variable, **kwargs):
        seen.update(kwargs, variable=variable, n=len(results))
        return Figure()

    monkeypatch.setattr(viz_plot, "nero_plot", fake_nero_plot)
    home, _ = runs
    res = runner.invoke(app, ["plot", "upright", "symmetric", "-o", str(tmp_path / "f.png"), "--home", str(home),
                              *flag])
    assert res.exit_code == 0, res.output
    assert seen["simultaneous"] is expected and seen["variable"] == "correct" and seen["n"] == 2


def test_the_closed_form_plan_by_hand():
    """K = 72, identity accuracy 0.95, a drop of 0.05, no tolerance: σ² = 0.95·0.05 + 0.90·0.10 =
    0.1375, z = Φ⁻¹(1 − 0.05/144) + Φ⁻¹(0.8) = 3.3918 + 0.8416, n = ⌈(4.2334 · 0.37081 / 0.05)²⌉ = ⌈985.7⌉ = 986;
    with the tolerance 0.02 the effective drop is 0.03."""
    plan = plan_samples(0.05, elements=72, accuracy=0.95, max_drop=0.0)
    assert plan.sd == pytest.approx(0.370810, abs=1e-6)
    assert plan.n == 986
    assert plan_samples(0.05, elements=72, accuracy=0.95).n == pytest.approx(plan.n * (0.05 / 0.03) ** 2, rel=0.01)

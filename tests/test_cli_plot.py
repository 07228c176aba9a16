"""CLI commands end to end (typer's runner, real files) and the static NERO plots."""

import sys
import textwrap

import numpy as np
import pytest
import torch
from matplotlib.collections import PolyCollection, QuadMesh
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.demos import mnist as demo_mod
from orbitscope.cli import app
from orbitscope.models.loading import save_model
from orbitscope.viz.plot import MODEL_COLOURS, nero_plot, save_figure

from helpers import TinyNet

runner = CliRunner()



@pytest.fixture()
def user_model(tmp_path, monkeypatch):
    """A user package with a factory, and weights saved as safetensors."""
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent("""
        import torch
        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(1, 4, 5, stride=3)
                self.fc = torch.nn.Linear(4 * 8 * 8, 10)
            def forward(self, x):
                return self.fc(torch.relu(self.conv(x)).flatten(1))
        def make():
            return Tiny()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    torch.manual_seed(0)
    model = TinyNet()
    weights = tmp_path / "tiny.safetensors"
    save_model(model, weights)
    yield model, weights
    sys.modules.pop("userpkg.nets", None)
    sys.modules.pop("userpkg", None)


def test_evaluate_runs_show_plot(tmp_path, user_model):
    model, weights = user_model
    home = tmp_path / "store"
    args = ["evaluate", "--model", "userpkg.nets:make", "--weights", str(weights), "--data", "mnist-subset:test@40",
            "--orbit", "rotation:0:360:90", "--home", str(home), "--name", "tiny-rot"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    store = osc.Store(home)
    (rec,) = store.runs()
    assert rec.complete and rec.name == "tiny-rot" and rec.n_samples == 40
    # the stored numbers equal a direct evaluation of the same model (independent of the CLI path)
    direct = osc.evaluate(model, osc.parse_data_spec("mnist-subset:test@40"), osc.Rotation([0, 90, 180, 270, 360]))
    assert np.array_equal(store.load(rec.run_id).correct.values, direct.result.correct.values)
    # running the same command again reuses the run
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "reused" in again.output

    listed = runner.invoke(app, ["runs", "list", "--home", str(home)])
    assert listed.exit_code == 0 and rec.run_id in listed.output
    shown = runner.invoke(app, ["runs", "show", "tiny-rot", "--home", str(home)])
    assert shown.exit_code == 0 and rec.attrs["model_hash"] in shown.output

    fig_path = tmp_path / "fig.png"
    plotted = runner.invoke(app, ["plot", rec.run_id[:6], "-o", str(fig_path), "--home", str(home)])
    assert plotted.exit_code == 0, plotted.output
    assert fig_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig_path.stat().st_size > 10_000


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nope.module:make", "--data", "mnist-subset@5", "--orbit", "rotation:0:90:90"], "nope"),
        (["--model", "/no/such/file.pt2", "--data", "mnist-subset@5", "--orbit", "rotation:0:90:90"], "not found"),
        (["--model", "userpkg.nets:make", "--data", "bogus:1", "--orbit", "rotation:0:90:90"], "bogus"),
        (["--model", "userpkg.nets:make", "--data", "mnist-subset@5", "--orbit", "spin:1"], "orbit"),
        (["--model", "userpkg.nets:make", "--data", "mnist-subset@5", "--orbit", "rotation:0:90:90",
          "--normalize", "0.1"], "--normalize"),
    ],
)
def test_cli_errors_are_one_line_messages(tmp_path, user_model, args, message):
    res = runner.invoke(app, ["evaluate", *args, "--home", str(tmp_path / "s")])
    assert res.exit_code == 2
    assert "error:" in res.output and message in res.output
    assert "Traceback" not in res.output


def test_evaluate_imports_user_modules_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "mynets_cwd.py").write_text("import torch\n\ndef make():\n    return torch.nn.Sequential("
                                           "torch.nn.Flatten(), torch.nn.Linear(784, 10))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    res = runner.invoke(app, ["evaluate", "--model", "mynets_cwd:make", "--data", "mnist-subset@10",
                              "--orbit", "rotation:0:90:90", "--home", str(tmp_path / "s")])
    sys.modules.pop("mynets_cwd", None)
    assert res.exit_code == 0, res.output


def test_runs_on_missing_or_foreign_store(tmp_path):
    res = runner.invoke(app, ["runs", "list", "--home", str(tmp_path / "absent")])
    assert res.exit_code == 2 and "no orbitscope store" in res.output
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["runs", "list", "--home", str(foreign)])
    assert res.exit_code == 2 and "not an orbitscope store" in res.output


def _two_results(orbit):
    torch.manual_seed(0)
    data = osc.parse_data_spec("mnist-subset:test@30")
    return [osc.evaluate(TinyNet(), data, orbit, model_name=f"m{i}").result for i in range(2)]


def test_polar_plot_contents():
    results = _two_results(osc.Rotation(range(0, 361, 30)))
    fig = nero_plot(results, "correct", labels=["a", "b"])
    (ax,) = fig.axes
    assert ax.name == "polar"
    lines = ax.get_lines()
    assert len(lines) == 2 and [ln.get_color() for ln in lines] == MODEL_COLOURS[:2]
    for ln, res in zip(lines, results):
        theta, radius = ln.get_data()
        np.testing.assert_allclose(theta, np.deg2rad(np.arange(0, 361, 30)))
        np.testing.assert_allclose(radius, res.correct.values.mean(axis=0))  # aggregate = mean of individual curves
        assert not np.isnan(radius).any()
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    assert ax.get_ylim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_heatmap_and_line_plots(tmp_path):
    results = _two_results(osc.Product(osc.Rotation([0, 90, 180]), osc.Scale([0.8, 1.0])))
    fig = nero_plot(results, "confidence")
    # two heatmaps, under them their interval half-widths, and two colour bars
    assert len(fig.axes) == 6
    meshes = [c for ax in fig.axes[:4] for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(meshes) == 4
    expected = results[0].confidence.values.mean(axis=0).T  # x = angle, y = scale
    np.testing.assert_allclose(np.asarray(meshes[0].get_array()).reshape(expected.shape), expected, rtol=1e-6)
    assert meshes[0].get_clim() == (0.0, 1.0)
    agg = results[0].aggregate("confidence")
    half = ((agg["upper"] - agg["lower"]) / 2).values.T
    np.testing.assert_allclose(np.asarray(meshes[2].get_array()).reshape(half.shape), half, rtol=1e-6)
    assert len(nero_plot(results, "confidence", band=False).axes) == 3  # no bands: one row, one colour bar
    line = nero_plot(_two_results(osc.Brightness([0.5, 1.0, 1.5])), "correct")
    assert len(line.axes[0].get_lines()) == 2
    for ext in ("png", "pdf", "svg"):
        assert save_figure(fig, tmp_path / f"f.{ext}").stat().st_size > 1000
    with pytest.raises(ValueError, match="png"):
        save_figure(fig, tmp_path / "f.gif")
    with pytest.raises(ValueError, match="different orbit dims"):
        nero_plot([results[0], _two_results(osc.Rotation([0, 90]))[0]])


def test_stratified_evaluation_sets_and_demo_argument_check(tmp_path):
    test = osc.mnist_subset("test")
    d = test.stratified(10)
    assert len(d) == 100 and np.bincount(np.asarray(d.labels)).tolist() == [10] * 10
    labels = np.asarray(test.labels)
    expected = np.sort(np.concatenate([np.flatnonzero(labels == c)[:10] for c in range(10)]))
    np.testing.assert_array_equal(np.asarray(d.images), np.asarray(test.images)[expected])
    with pytest.raises(ValueError, match="multiple of 10"):
        demo_mod.run_demo(tmp_path / "h", tmp_path / "o", n_test=55)

"""The HTML report and the CLI's report/plot kinds, checked against numbers computed here."""

import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.cli import app
from orbitscope.viz.report import non_equivariance, summary_rows, write_report

from helpers import TinyNet

runner = CliRunner()



@pytest.fixture(scope="module")
def store_runs(tmp_path_factory):
    home = tmp_path_factory.mktemp("store")
    data = osc.mnist_subset("test").stratified(4)  # 40 digits, 4 per class
    runs = []
    for i in range(2):
        torch.manual_seed(i)
        runs.append(osc.evaluate(TinyNet(), data, osc.Rotation(range(0, 361, 30)), osc.Classification(store_probabilities=True),
                                 store=home, name=f"tiny{i}", model_name=f"tiny{i}"))
    return home, runs


def test_summary_rows_match_numpy(store_runs):
    _, runs = store_runs
    results = [r.result for r in runs]
    rows = summary_rows(results, ["a", "b"])
    for row, res in zip(rows, results):
        correct = res.correct.values.astype(float)
        assert row["accuracy at identity"] == pytest.approx(correct[:, 0].mean())
        assert row["orbit mean accuracy"] == pytest.approx(correct.mean(axis=0).mean())
        worst = correct.mean(axis=0).min()
        assert row["worst accuracy"].startswith(f"{worst:.3f}")
        conf = res.confidence.values.astype(float)
        assert non_equivariance(res) == pytest.approx(conf.std(axis=1).mean(), rel=1e-5)
        # label-free: consensus over the 12 distinct angles (360° repeats 0°)
        probs = res.probabilities.values[:, :12].astype(float)
        cons = probs.mean(axis=1).argmax(-1)
        agree = (res.prediction.values == cons[:, None]).mean()
        assert row["consensus agreement"] == pytest.approx(agree)


def test_report_is_self_contained_and_complete(store_runs, tmp_path):
    _, runs = store_runs
    path = write_report([r.result for r in runs], tmp_path / "r.html", labels=["a", "b"], n_samples=5)
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]+src=", text), "no external scripts: the report must work offline"
    assert text.count("plotly.js v") == 1  # the library is embedded once
    # 3 aggregate plots (accuracy, confidence, consensus) + 10 classes + 1 dataset-level (class-mean
    # accuracy) + 2 embeddings + 5 samples
    assert text.count('class="plotly-graph-div"') == 3 + 10 + 1 + 2 + 5
    assert "Dataset-level metrics" in text and "class-mean accuracy" in text
    assert text.count("<img") == 2 * 5  # input and transformed input per sensitive sample
    # the most orbit-sensitive samples: largest std of confidence over both models, computed here
    stds = np.max([r.result.confidence.values.std(axis=1) for r in runs], axis=0)
    top = runs[0].result.data.sample.values[np.argsort(-stds, kind="stable")[:5]]
    shown = [int(s) for s in re.findall(r"<b>sample (\d+)</b>", text)]
    assert shown == [int(s) for s in top]
    with pytest.raises(ValueError, match=".html"):
        write_report([runs[0].result], tmp_path / "r.pdf")
    with pytest.raises(ValueError):
        write_report([], tmp_path / "r.html")


def test_cli_report_and_plot_kinds(store_runs, tmp_path):
    home, runs = store_runs
    ids = [r.run_id for r in runs]
    out = tmp_path / "cli.html"
    res = runner.invoke(app, ["report", *ids, "-o", str(out), "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 1_000_000  # plotly.js embedded
    sample = int(runs[0].result.data.sample.values[7])
    cases = [
        (["--kind", "aggregate", "--metric", "consensus_agreement", "--marker", "angle=90"], "a.png"),
        (["--kind", "individual", "--sample", str(sample)], "i.svg"),
        (["--kind", "class", "--cls", "3"], "c.pdf"),
        (["--kind", "aggregate"], "a.html"),
        (["--kind", "embedding", "--method", "pca"], "e.html"),
    ]
    for args, name in cases:
        target = tmp_path / name
        res = runner.invoke(app, ["plot", *ids, "-o", str(target), "--home", str(home), *args])
        assert res.exit_code == 0, (args, res.output)
        assert target.stat().st_size > 5_000, args
    # individual plots default to the true-class confidence (the 0/1 correctness is a poor single-sample curve)
    ind = tmp_path / "ind.html"
    assert runner.invoke(app, ["plot", *ids, "-o", str(ind), "--kind", "individual", "--sample", str(sample),
                               "--home", str(home)]).exit_code == 0
    assert "individual NERO plot: true-class confidence" in ind.read_text()
    single = runner.invoke(app, ["plot", ids[0], "-o", str(tmp_path / "e.png"), "--kind", "embedding",
                                 "--home", str(home)])
    assert single.exit_code == 0, single.output
    for args in (["--kind", "individual"], ["--kind", "class"], ["--kind", "bogus"], ["--marker", "angle:90"]):
        res = runner.invoke(app, ["plot", *ids, "-o", str(tmp_path / "x.png"), "--home", str(home), *args])
        assert res.exit_code == 2 and "error:" in res.output, args


def test_cli_report_includes_a_robustness_comparison(store_runs, tmp_path):
    home, runs = store_runs
    folder = tmp_path / "robust-out"
    folder.mkdir()
    fragment = "<section><h2>Probabilistic robustness</h2><p>marker-7d1f</p></section>"
    (folder / "robustness_section.html").write_text(fragment)
    out = tmp_path / "with.html"
    res = runner.invoke(app, ["report", runs[0].run_id, "-o", str(out), "--home", str(home), "--robustness", str(folder)])
    assert res.exit_code == 0, res.output
    assert fragment in out.read_text()
    missing = runner.invoke(app, ["report", runs[0].run_id, "-o", str(out), "--home", str(home),
                                  "--robustness", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "robust compare" in missing.output

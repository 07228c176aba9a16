"""The demo pipeline end to end on a miniature configuration (two 1-epoch models trained on 100
digits in the demo's two worker processes, the C4-symmetrized one, 10 test digits, 90° steps)."""

import csv

import numpy as np
import pytest

import orbitscope as osc
from orbitscope.demos.mnist import SYMMETRIZED, DemoCase, run_demo
from orbitscope.training.recipes import TrainRecipe


@pytest.mark.slow  # end to end: two worker processes train, then evaluation, plots and reports, twice
def test_mini_demo_trains_evaluates_and_writes_everything(tmp_path):
    # two models to train (the demo trains several at once in two processes), 10 digits per class
    # each: what they learn is not checked, only that each stage runs and writes its outputs
    case = DemoCase("mini", lambda per_class: osc.mnist_subset("test").stratified(per_class), {
        "plain": TrainRecipe(name="mini-plain", epochs=1, n_train=100),
        "augmented": TrainRecipe(name="mini-aug", epochs=1, n_train=100, augmentation="uniform"),
        "plain-c4": SYMMETRIZED,
    })
    messages: list[str] = []
    res = run_demo(tmp_path / "home", tmp_path / "out", n_test=10, step=90.0, cases=(case,), status=messages.append,
                   ml4ml=False)
    assert any(m.startswith("training 2 model(s)") for m in messages)
    runs = res.runs["mini"]
    assert [r.result.attrs["model_name"] for r in runs] == ["plain", "augmented", "plain-c4"]
    # the symmetrized model is exactly invariant over the C4 orbit 0, 90, 180, 270, 360
    conf = runs[2].result.confidence.values
    np.testing.assert_allclose(conf, conf[:, :1].repeat(conf.shape[1], axis=1), atol=1e-5)
    folder = tmp_path / "out" / "mini"
    for name in ("report.html", "summary.csv", "nero_accuracy_polar.png", "nero_accuracy_all_models.png"):
        assert (folder / name).stat().st_size > 300, name
    with open(folder / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["model"] for r in rows] == ["plain", "augmented", "plain-c4"]
    for row, run in zip(rows, runs):
        assert float(row["accuracy at identity"]) == np.round(run.result.correct.values[:, 0].mean(), 4)
    # a second run reuses the cached models and the stored runs
    again = run_demo(tmp_path / "home", tmp_path / "out", n_test=10, step=90.0, cases=(case,), ml4ml=False)
    assert again.seconds["training"] == 0.0 and all(r.reused for r in again.runs["mini"])

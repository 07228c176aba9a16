"""The robustness comparison (table, plot, HTML), the CLI, and the cached adversarial recipe (tiny sizes)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from helpers import CentroidNet, TinyNet
from typer.testing import CliRunner

from orbitscope.cli import app
from orbitscope.data.datasets import mnist_subset
from orbitscope.models.loading import save_model
from orbitscope.models import build_model, model_hash
from orbitscope.robust.compare import RobustnessComparison, compare_robustness
from orbitscope.robust.sequential import list_tests

TINY_ARCH = {"arch": "reference_cnn", "in_channels": 1, "num_classes": 10, "widths": [4, 4, 4, 4, 4, 4], "hidden": 8}


@pytest.fixture(scope="module")
def centroid() -> CentroidNet:
    train = mnist_subset("train")
    cent = np.stack([train.images[train.labels == c].mean(0) / 255.0 for c in range(10)])
    return CentroidNet(cent)


@pytest.fixture(scope="module")
def digits():
    return mnist_subset("test").subset(slice(0, 6))


@pytest.fixture(scope="module")
def comparison(centroid, digits) -> RobustnessComparison:
    torch.manual_seed(0)
    return compare_robustness({"centroid": centroid, "tiny": TinyNet()}, digits, eps=(0.02, 0.1), rotations=(10,),
                              kappa=0.1, alpha=0.05, budget=64, pgd_steps=3, batch_size=256)


def test_rows_hold_every_model_perturbation_and_test(comparison: RobustnessComparison, centroid, digits) -> None:
    rows = comparison.rows
    assert [(r["model"], r["perturbation"]) for r in rows] == [
        (m, p) for m in ("centroid", "tiny") for p in ("linf:0.02", "linf:0.1", "rotation:10")]
    assert comparison.tests == list_tests()
    x = torch.stack([digits[i][0] for i in range(len(digits))])
    y = torch.tensor([digits[i][1] for i in range(len(digits))])
    with torch.no_grad():
        clean = float((centroid(x).argmax(1) == y).float().mean())
    for r in rows:
        if r["model"] == "centroid":
            assert r["clean_accuracy"] == pytest.approx(clean)
        assert (r["family"] == "rotation") == math.isnan(r["pgd_accuracy"])
        if r["family"] == "linf":
            assert 0 <= r["pgd_accuracy"] <= r["clean_accuracy"] + 1e-9
        for t in comparison.tests:
            assert 0 <= r[f"{t}_certified_lower"] <= r[f"{t}_certified"] <= r[f"{t}_certified_upper"] <= 1
            assert r[f"{t}_certified"] <= r["clean_accuracy"] + 1e-9
            assert 0 < r[f"{t}_mean_samples"] <= 64
    # the fixed test spends its whole budget on every correctly classified input; misclassified
    # inputs draw only the samples of the test-set bound, min(first look, 64) = 64 here as well
    assert all(r["binomial_mean_samples"] == 64 for r in rows)


def test_pgd_weakens_with_larger_eps(comparison: RobustnessComparison) -> None:
    c = [r for r in comparison.rows if r["model"] == "centroid" and r["family"] == "linf"]
    assert c[0]["pgd_accuracy"] >= c[1]["pgd_accuracy"]


def test_outputs_csv_png_html(comparison: RobustnessComparison, tmp_path) -> None:
    files = comparison.save(tmp_path)
    with files["csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 and "sprt_certified" in rows[0] and "binomial_mean_samples" in rows[0]
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = files["html_section"].read_text()
    assert section.startswith("<h2>Probabilistic robustness</h2>") and "data:image/png;base64" in section
    page = comparison.write_html(tmp_path / "r.html").read_text()
    assert "<table>" in page and "confidence-sequence" in page
    head, body = comparison.table()
    assert head[:4] == ["model", "perturbation", "clean", "PGD"] and len(body) == 6 and body[2][3] == "n/a"
    head, body = comparison.table("queries")
    assert head == ["model", "perturbation", *comparison.tests] and all(int(c) <= 64 for c in body[0][2:])


def test_section_in_the_nero_report(comparison: RobustnessComparison, digits, tmp_path) -> None:
    from orbitscope.engine.evaluation import evaluate
    from orbitscope.group import Rotation
    from orbitscope.viz.report import write_report

    run = evaluate(TinyNet(), digits, Rotation([0, 90, 180, 270]))
    section = comparison.html_section(png=b"png")
    path = write_report([run.result], tmp_path / "report.html", extra_sections=[section])
    text = path.read_text()
    assert section in text and text.index("Probabilistic robustness") > text.index("orbit-sensitive")
    plain = write_report([run.result], tmp_path / "plain.html").read_text()
    assert "Probabilistic robustness" not in plain


def test_compare_argument_errors(centroid, digits) -> None:
    with pytest.raises(ValueError, match="unknown test"):
        compare_robustness({"c": centroid}, digits, tests=["nope"])
    with pytest.raises(ValueError, match="positive"):
        compare_robustness({"c": centroid}, digits, eps=(-0.1,))
    with pytest.raises(ValueError, match="at least one model"):
        compare_robustness({}, digits)


# ----------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> str:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("m") / "tiny.safetensors"
    save_model(build_model(TINY_ARCH), path)
    return str(path)


def test_cli_certify(model_file: str, tmp_path) -> None:
    out = tmp_path / "per_input.csv"
    res = CliRunner().invoke(app, ["robust", "certify", "--model", model_file, "--data", "mnist-subset:test@6",
                                   "--perturbation", "rotation:10", "--test", "sprt", "--kappa", "0.1", "--alpha",
                                   "0.05", "--budget", "64", "--csv", str(out)])
    assert res.exit_code == 0, res.output
    assert "certified robust accuracy" in res.output and "model queries" in res.output
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 and {r["outcome"] for r in rows} <= {"robust", "not robust", "undecided"}
    assert all(int(r["samples"]) <= 64 for r in rows)


def test_cli_certify_errors(model_file: str) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["robust", "certify", "--model", model_file, "--perturbation", "linf:oops"])
    assert res.exit_code == 2 and "cannot read the number" in res.output
    res = runner.invoke(app, ["robust", "certify", "--model", "no-such-recipe-or-file", "--data", "mnist-subset:test@2"])
    assert res.exit_code == 2 and "not found" in res.output
    res = runner.invoke(app, ["robust", "certify", "--model", model_file, "--test", "wald"])
    assert res.exit_code == 2 and "unknown robustness test" in res.output


def test_cli_compare(model_file: str, tmp_path) -> None:
    res = CliRunner().invoke(app, ["robust", "compare", "--models", model_file, "--n", "5", "--eps", "0.1",
                                   "--rotations", "10", "--tests", "sprt,binomial", "--budget", "48", "--kappa", "0.1",
                                   "--alpha", "0.05", "--pgd-steps", "2", "-o", str(tmp_path / "out"), "--report",
                                   str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    for name in ("robustness.csv", "robustness.png", "robustness_section.html"):
        assert (tmp_path / "out" / name).is_file()
    assert (tmp_path / "r.html").is_file() and "tiny" in res.output and "rotation:10" in res.output


# ---------------------------------------------------------------------- adversarial recipe


def test_adversarial_recipe_is_cached_and_deterministic(tmp_path) -> None:
    pytest.importorskip("torchattacks")
    from orbitscope.robust.adversarial import AdversarialRecipe, cached_adversarial_model

    from orbitscope.training.recipes import training_data

    recipe = AdversarialRecipe(name="pgd-tiny", arch=TINY_ARCH, n_train=300, epochs=1, batch_size=64, steps=1,
                               eps=0.1)
    assert recipe.step_size == pytest.approx(0.25) and recipe.key() != AdversarialRecipe().key()
    model, info = cached_adversarial_model(recipe, tmp_path / "a", n_eval_pgd=20)
    assert not info["from_cache"] and info["n_samples"] == len(training_data(recipe.data_recipe())[0]) and 0 <= info["pgd_test_accuracy"] <= 1
    again, info2 = cached_adversarial_model(recipe, tmp_path / "a")
    assert info2["from_cache"] and model_hash(again) == model_hash(model) == info["model_hash"]
    files = list((tmp_path / "a").glob("pgd-tiny-*.safetensors"))
    assert len(files) == 1 and recipe.key() in files[0].name
    other, _ = cached_adversarial_model(recipe, tmp_path / "b", n_eval_pgd=20)  # retrained: same weights
    assert model_hash(other) == model_hash(model)
    with pytest.raises(ValueError, match="unknown adversarial recipe"):
        cached_adversarial_model("nope", tmp_path)


def test_cli_inputs_are_balanced_across_classes():
    from orbitscope.cli.robust import balanced_inputs

    labels = np.asarray(balanced_inputs("mnist-subset:test", 50).labels)
    assert np.bincount(labels).tolist() == [5] * 10  # the split is ordered by class: '@50' would be all zeros
    assert len(balanced_inputs("mnist-subset:test@7", 50)) == 7 and len(balanced_inputs("mnist-subset:test", 0)) == 1000

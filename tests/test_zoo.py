"""Model zoos, the model database, labels and the zoo CLI (on a tiny family of real MNIST models)."""

import dataclasses
from collections import Counter

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from orbitscope.ml4ml import zoo
from orbitscope.cli import app
from orbitscope.data.datasets import mnist_subset
from orbitscope.ml4ml.matrices import variance_matrix
from orbitscope.ml4ml.modeldb import ModelDatabase
from orbitscope.results.store import StoreError
from orbitscope.training.recipes import TrainRecipe, sample_angles, with_defects

runner = CliRunner()

#: A family small enough for CI: 200 training images, 1 epoch, 3 test images per class, ±2°.
TINY = dataclasses.replace(
    zoo.FAMILIES["mnist-small"], name="tiny", n_train=200, epochs_choices=(1,), little_data=100,
    images_per_class=3, test_orbit="rotation:-2:2:1", test_half_range=2.0, accuracy_floor=0.3)


def test_members_are_deterministic_and_cover_the_variations():
    recipes = [zoo.member_recipe("mnist-small", i) for i in range(60)]
    assert recipes[7] == zoo.member_recipe("mnist-small", 7) and recipes[7] != zoo.member_recipe("mnist-wide", 7)
    assert len({r.key() for r in recipes}) == 60 and len({r.name for r in recipes}) == 60
    relations = Counter(zoo.augmentation_relation(r, 15.0) for r in recipes)
    assert set(relations) == {"none", "narrower", "matched", "wider", "gap"}, relations
    assert any(r.label_noise > 0 for r in recipes) and any(r.class_imbalance > 0 for r in recipes)
    assert any(r.n_train == 1000 for r in recipes) and len({r.lr for r in recipes}) == 3
    with pytest.raises(ValueError, match="unknown model family"):
        zoo.member_recipe("cifar-huge", 0)


@pytest.mark.parametrize("kwargs, relation", [
    ({"augmentation": "none"}, "none"),
    ({"augmentation": "uniform", "max_angle": 5}, "narrower"),
    ({"augmentation": "uniform", "max_angle": 15}, "matched"),
    ({"augmentation": "uniform", "max_angle": 40}, "wider"),
    ({"augmentation": "uniform", "max_angle": 40, "min_angle": 5}, "gap"),
    ({"augmentation": "normal90"}, "wider"),
])
def test_augmentation_relation(kwargs, relation):
    assert zoo.augmentation_relation(TrainRecipe(**kwargs), 15.0) == relation


def test_provenance_label_rule():
    ok = {"accuracy_identity": 0.9}
    weak = {"accuracy_identity": 0.5}
    for rel, label in (("matched", "invariant"), ("wider", "invariant"), ("none", "not-invariant"),
                       ("narrower", "not-invariant"), ("gap", "borderline")):
        assert zoo.provenance_label({"relation": rel}, ok, 0.8) == label
        assert zoo.provenance_label({"relation": rel}, weak, 0.8) == "borderline"  # training failed


def test_gap_augmentation_angles():
    g = torch.Generator().manual_seed(0)
    a = sample_angles("uniform", 5000, generator=g, max_angle=30, min_angle=10)
    assert float(a.abs().min()) >= 10 and float(a.abs().max()) <= 30
    assert 0.45 < float((a > 0).float().mean()) < 0.55
    # min_angle = 0 keeps the original draw exactly (cached recipes reproduce)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    ref = (torch.rand(100, generator=g2) * 2 - 1) * 20
    torch.testing.assert_close(sample_angles("uniform", 100, generator=g1, max_angle=20), ref)
    with pytest.raises(ValueError, match="min_angle"):
        TrainRecipe(augmentation="uniform", max_angle=10, min_angle=10)


def test_training_defects():
    train = mnist_subset("train")
    clean = TrainRecipe(seed=4)
    assert with_defects(train, clean) is train
    noisy = with_defects(train, TrainRecipe(seed=4, label_noise=0.3))
    changed = noisy.labels != train.labels
    assert abs(changed.mean() - 0.3) < 0.03 and len(noisy) == len(train)
    np.testing.assert_array_equal(noisy.images, train.images)
    again = with_defects(train, TrainRecipe(seed=4, label_noise=0.3))
    np.testing.assert_array_equal(again.labels, noisy.labels)  # deterministic for the seed
    imb = with_defects(train, TrainRecipe(seed=4, class_imbalance=0.75))
    before, after = np.bincount(train.labels, minlength=10), np.bincount(imb.labels, minlength=10)
    np.testing.assert_array_equal(after[:5], before[:5])
    np.testing.assert_allclose(after[5:].sum(), round(0.25 * before[5:].sum()), atol=1)
    keys = {TrainRecipe().key(), TrainRecipe(label_noise=0.2).key(), TrainRecipe(class_imbalance=0.5).key(),
            TrainRecipe(augmentation="uniform", max_angle=30, min_angle=5).key()}
    assert len(keys) == 4


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory):
    """Four members (the interactive labelling test answers for four models, whether or not the
    slow parallel build below has added more)."""
    home = tmp_path_factory.mktemp("zoo")
    report = zoo.build_family(TINY, 4, store=home, workers=1)
    assert report.built == ["tiny-000", "tiny-001", "tiny-002", "tiny-003"] and not report.failed
    return home


def test_build_records_models_matrices_metrics_and_labels(tiny_db):
    db = ModelDatabase(tiny_db)
    models = db.models()
    assert [m.model_id for m in models] == ["tiny-000", "tiny-001", "tiny-002", "tiny-003"]
    assert db.families() == {"tiny": 4}
    for m in models:
        vm = m.load_matrices()
        assert vm.names == list(zoo.ZOO_SIGNALS) and vm.matrices.shape == (6, 5, 5)
        assert vm.correct.shape == (30, 5) and vm.n_images == int(vm.correct[:, vm.identity].sum())
        np.testing.assert_allclose(vm["conv3:max"], variance_matrix(vm.signals[vm.names.index("conv3:max")]))
        acc = vm.correct.mean(axis=0)
        assert m.metrics["accuracy_identity"] == pytest.approx(acc[2])
        assert m.metrics["accuracy_worst"] == pytest.approx(acc.min())
        assert m.metrics["all_correct_share"] == pytest.approx(vm.correct.all(axis=1).mean())
        rule = zoo.provenance_label(m.provenance, m.metrics, TINY.accuracy_floor)
        assert m.label("provenance") == rule and m.recipe == zoo.member_recipe(TINY, m.member).to_dict()
        assert m.provenance["relation"] == zoo.augmentation_relation(zoo.member_recipe(TINY, m.member), 2.0)


@pytest.mark.slow  # two worker processes, each importing torch and orbitscope and loading MNIST
def test_build_resumes_and_runs_in_parallel(tiny_db):
    before = {m.model_id: m.created for m in ModelDatabase(tiny_db).models()}
    report = zoo.build_family(TINY, 6, store=tiny_db, workers=2)
    assert report.skipped == ["tiny-000", "tiny-001", "tiny-002", "tiny-003"]
    assert sorted(report.built) == ["tiny-004", "tiny-005"]
    after = {m.model_id: m.created for m in ModelDatabase(tiny_db).models()}
    assert all(after[k] == v for k, v in before.items()) and len(after) == 6


def test_labels_are_validated_and_replaced(tiny_db):
    db = ModelDatabase(tiny_db)
    db.set_label("tiny-001", "borderline", source="human", labeller="ada")
    db.set_label("tiny-001", "invariant", source="human", labeller="ada")
    db.set_label("tiny-001", "not-invariant", source="human", labeller="bob")
    m = db.get("tiny-001")
    assert m.label("human", "ada") == "invariant" and m.label("human", "bob") == "not-invariant"
    assert len([lb for lb in m.labels if lb.source == "human"]) == 2
    with pytest.raises(ValueError, match="label must be"):
        db.set_label("tiny-001", "maybe", source="human", labeller="ada")
    with pytest.raises(ValueError, match="labeller"):
        db.set_label("tiny-001", "invariant", source="human", labeller=" ")
    with pytest.raises(StoreError, match="no model"):
        db.set_label("tiny-999", "invariant", source="human", labeller="ada")
    with pytest.raises(ValueError, match="malformed"):
        db.matrices_path("tiny", "../etc")


def test_zoo_cli_list_show_and_label(tiny_db, tmp_path):
    listed = runner.invoke(app, ["zoo", "list", "--home", str(tiny_db)], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "tiny-002" in listed.output
    shown = runner.invoke(app, ["zoo", "show", "tiny-000", "--home", str(tiny_db), "-o", str(tmp_path / "p.png")])
    assert shown.exit_code == 0 and (tmp_path / "p.png").stat().st_size > 5000 and "relation" in shown.output
    marked = runner.invoke(app, ["zoo", "label", "tiny-000", "tiny-002", "--by", "cy", "--as", "borderline", "--home", str(tiny_db)])
    assert marked.exit_code == 0, marked.output
    db = ModelDatabase(tiny_db)
    assert db.get("tiny-000").label("human", "cy") == "borderline" == db.get("tiny-002").label("human", "cy")
    # interactive: models without a label by "dee", in order: invariant, (bad answer) not invariant, skip, quit
    answers = runner.invoke(app, ["zoo", "label", "--by", "dee", "--home", str(tiny_db)], input="i\nx\nn\ns\nq\n")
    assert answers.exit_code == 0, answers.output
    assert "saved 2 label(s)" in answers.output and "please answer" in answers.output
    assert answers.output.count("quit (q)") == 5  # five prompts: the "q" was read, at tiny-003
    got = {m.model_id: m.label("human", "dee") for m in ModelDatabase(tiny_db).models()}
    assert got.pop("tiny-000") == "invariant" and got.pop("tiny-001") == "not-invariant"
    assert set(got.values()) == {None}
    assert (tiny_db / "zoo" / "panels" / "tiny-000.png").is_file()
    bad = runner.invoke(app, ["zoo", "label", "tiny-000", "--by", "x", "--as", "yes", "--home", str(tiny_db)])
    assert bad.exit_code == 2 and "error:" in bad.output
    unknown = runner.invoke(app, ["zoo", "train", "--family", "nope", "--n", "1", "--home", str(tiny_db)])
    assert unknown.exit_code == 2 and "unknown family" in unknown.output


def test_read_only_commands_do_not_create_a_store(tmp_path):
    home = tmp_path / "nothing-here"
    res = runner.invoke(app, ["zoo", "list", "--home", str(home)])
    assert res.exit_code == 2 and "zoo train" in res.output and not home.exists()

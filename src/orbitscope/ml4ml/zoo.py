"""Model zoos: families of small models trained with controlled variations, for ML4ML assessors.

A *family* fixes the architecture, the training data and the test transformation (default:
rotation −15…+15° by 1°, ML4ML's 31 levels); its members vary, deterministically by member index,
in what ML4ML varied (arXiv 2109.12926, see ``reference/seeds.md``):

* augmentation range relative to the test range (half-width T = 15°): ``none``; ``narrower``
  (uniform ±T/5…2T/3, i.e. ±3…10°); ``matched`` (±T); ``wider`` (±5T/3…4T, i.e. ±25…60°); ``gap``
  (magnitudes from T/3…2T/3 up to T…2T, i.e. 5…10° up to 15…30°: angles near 0° never seen);
* epochs (3, 4, 6, 8), learning rate (2e-3, 3e-3, 5e-3), label noise (0, or 0.2/0.4 for a quarter
  of the members), class imbalance (0, or half of the upper classes' images dropped for 15%),
  little data (1,000 training images and three times the epochs, for 15%), seed.

The three-invariance families (``<data>-<arch>-3``, :data:`ML4ML_TESTS`) also test brightness
(0.70…1.30 by 0.02) and scale (0.70…1.30 by 0.02, T = 0.3 each): every member draws a kind
for each of them as above, independently of its rotation kind (factors 1 ± the same ranges,
capped at ±0.9), carries ML4ML's other anomalies (noise images, test-set leakage of half the
test split, ordered batches, FGSM adversarial training at ε = 0.1, pretraining on the other
dataset; each with probability 1/12), is assessed on 1,000 test images per invariance, and gets
one provenance label per invariance.

The augmentation kinds are balanced: every block of five consecutive members has one of each.

Building a member trains it (cached in ``<home>/models/zoo/<family>``), evaluates it on the
family's test images over the test orbit with an activation probe on ``conv2`` and ``conv3``
(one engine pass), computes its variance matrices on the images correct at the identity, saves
them and adds the model, its metrics and its provenance label to the
:class:`~orbitscope.ml4ml.modeldb.ModelDatabase`. :func:`build_family` runs members on an
executor (local processes by default, or Ray: :mod:`orbitscope.engine.executors`): a worker
trains and measures a member without writing anything (:func:`train_member`) and sends back the
row, the matrices and the trained weights file's bytes; the driver, the one writer of the store,
saves them and records the member at once (:func:`save_member`), so an interrupted build
resumes where it stopped, and workers need no access to the store. Rows, labels and metrics do
not depend on the executor: each member trains alone, in one torch thread, with its own seeds.

Provenance label rule (:data:`PROVENANCE_RULE`, v2): a model whose accuracy at the identity
reaches the family's floor is ``invariant`` if its augmentation covers the whole test range
(``matched`` or ``wider``) and ``not-invariant`` if it saw no or only a narrower range (``none``,
``narrower``); models below the floor (training failed, so invariance says little) and ``gap``
models (the range is covered except near 0°) are ``borderline``, which assessors leave out by
default. The rule judges how a model was trained, not its accuracy.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..training.recipes import TrainRecipe
from ..engine.executors import Executor, LocalExecutor, ProcessExecutor, get_executor

__all__ = [
    "ZOO_TEST_ORBIT",
    "ML4ML_TESTS",
    "MATRIX_INTERPOLATION",
    "offset_relation",
    "PROBE_LAYERS",
    "ZOO_SIGNALS",
    "PROVENANCE_RULE",
    "Family",
    "FAMILIES",
    "get_family",
    "member_recipe",
    "augmentation_relation",
    "provenance_label",
    "apply_provenance_rule",
    "test_images",
    "model_matrices",
    "MemberBuild",
    "train_member",
    "save_member",
    "build_member",
    "build_family",
]

log = logging.getLogger(__name__)

#: ML4ML's rotation test: −15…+15° by 1° (31 levels, identity at the centre).
ZOO_TEST_ORBIT = "rotation:-15:15:1"
#: ML4ML's three tests (31 levels each, identity at the centre) and their half-widths T
#: (degrees; factor offsets).
ML4ML_TESTS: dict[str, tuple[str, float]] = {
    "rotation": (ZOO_TEST_ORBIT, 15.0),
    "brightness": ("brightness:0.7:1.3:0.02", 0.3),
    "scale": ("scale:0.7:1.3:0.02", 0.3),
}
#: Largest factor offset a brightness or scale augmentation draws (factors stay in (0, 2)).
_MAX_OFFSET = 0.9
#: Layers probed for activation statistics (the last two convolutions of every zoo architecture:
#: SmallCNN, VGGBN, SmallResNet).
PROBE_LAYERS = ("conv2", "conv3")
#: The matrices kept per model: ML4ML's five plus the true-class confidence.
ZOO_SIGNALS = ("top1_confidence", "confidence", "conv2:max", "conv2:max-mean", "conv3:max", "conv3:max-mean")
PROVENANCE_RULE = ("rule:v2 if accuracy at identity >= the family's floor: invariant when augmentation covers the "
                   "test range (matched/wider), not-invariant when none/narrower; else, and for gap, borderline")

_KINDS = ("none", "narrower", "matched", "wider", "gap")
_SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}
_WIDE = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [16, 32, 64], "hidden": 96}
_VGG = {"arch": "vgg_bn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}
_RESNET = {"arch": "small_resnet", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}


@dataclass(frozen=True)
class Family:
    """A model family.

    Attributes:
        name: file-name-safe family name.
        data: training data id (:data:`orbitscope.training.recipes.DATASETS`).
        arch: model config (its last two convolutions must be named as in :data:`PROBE_LAYERS`).
        test_half_range: half-width T of the test range, degrees.
        test_orbit: the test transformation (orbit spec string).
        images_per_class: test images per class used for the matrices.
        accuracy_floor: accuracy at the identity an invariant model must reach (provenance rule).
        n_train: training images (None: the dataset's default).
        epochs_choices: epochs drawn from (the "little data" members train three times as long).
        little_data: training images of the "little data" members (a fifth of the members).
        description: one line for listings.
        invariances: what members are assessed for, rotation first (keys of
            :data:`ML4ML_TESTS`); for brightness and scale each member draws its own augmentation
            kind, independently of its rotation augmentation (see :func:`member_recipe`).
        anomalies: members also draw ML4ML's other database anomalies (noise images, test-set
            leakage, ordered batches, FGSM adversarial training, pretraining on the other
            dataset), each for about one member in twelve.
    """

    name: str
    data: str
    arch: dict[str, Any]
    accuracy_floor: float
    description: str
    test_half_range: float = 15.0
    test_orbit: str = ZOO_TEST_ORBIT
    images_per_class: int = 30
    n_train: int | None = None
    epochs_choices: tuple[int, ...] = (3, 4, 6, 8)
    little_data: int = 1000
    invariances: tuple[str, ...] = ("rotation",)
    anomalies: bool = False


FAMILIES: dict[str, Family] = {
    "mnist-small": Family("mnist-small", "mnist-subset", _SMALL, 0.80, "SmallCNN 8-16-32 on the MNIST subset"),
    "mnist-wide": Family("mnist-wide", "mnist-subset", _WIDE, 0.80, "SmallCNN 16-32-64 on the MNIST subset"),
    "fashion-small": Family("fashion-small", "fashion-mnist", _SMALL, 0.6,
                            "SmallCNN 8-16-32 on 4,000 Fashion-MNIST images", n_train=4000),
    "fashion-wide": Family("fashion-wide", "fashion-mnist", _WIDE, 0.6,
                           "SmallCNN 16-32-64 on 4,000 Fashion-MNIST images", n_train=4000),
    "mnist-vgg": Family("mnist-vgg", "mnist-subset", _VGG, 0.80, "VGG-style 8-16-32 with BatchNorm on the MNIST subset"),
    "mnist-resnet": Family("mnist-resnet", "mnist-subset", _RESNET, 0.80, "residual 8-16-32 on the MNIST subset"),
    "fashion-vgg": Family("fashion-vgg", "fashion-mnist", _VGG, 0.6,
                          "VGG-style 8-16-32 with BatchNorm on 4,000 Fashion-MNIST images", n_train=4000),
    "fashion-resnet": Family("fashion-resnet", "fashion-mnist", _RESNET, 0.6,
                             "residual 8-16-32 on 4,000 Fashion-MNIST images", n_train=4000),
}
#: ML4ML's scope: three architectures (and the wider SmallCNN) × two datasets, each member assessed
#: for rotation, brightness and scale on 1,000 test images (100 per class), with the anomalies.
_THREE = ("rotation", "brightness", "scale")
for _arch_name, _arch in (("small", _SMALL), ("vgg", _VGG), ("resnet", _RESNET), ("wide", _WIDE)):
    for _data, _floor, _n in (("mnist-subset", 0.80, None), ("fashion-mnist", 0.6, 4000)):
        _name = f"{'mnist' if _data == 'mnist-subset' else 'fashion'}-{_arch_name}-3"
        FAMILIES[_name] = Family(_name, _data, _arch, _floor, f"{_arch['arch']} on {_data}, assessed for rotation, "
                                 "brightness and scale", n_train=_n, images_per_class=100, invariances=_THREE,
                                 anomalies=True)


def get_family(name: str | Family) -> Family:
    """The family called ``name`` (a :class:`Family` passes through)."""
    if isinstance(name, Family):
        return name
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def member_recipe(family: str | Family, index: int) -> TrainRecipe:
    """The training recipe of member ``index`` of ``family`` (deterministic)."""
    fam = get_family(family)
    if index < 0:
        raise ValueError(f"member index must be >= 0, got {index}")
    digest = hashlib.sha256(f"{fam.name}:{index}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    t = fam.test_half_range
    # each block of five consecutive members has one of each augmentation kind (seeded order)
    block = hashlib.sha256(f"{fam.name}:block{index // len(_KINDS)}".encode()).digest()
    order = np.random.default_rng(int.from_bytes(block[:8], "little")).permutation(len(_KINDS))
    kind = _KINDS[int(order[index % len(_KINDS)])]
    aug: dict[str, Any] = {"augmentation": "uniform", "max_angle": t}
    if kind == "none":
        aug = {"augmentation": "none"}
    elif kind == "narrower":  # ranges relative to T (for T = 15°: 3…10°, 25…60°, gap 5…10° up to 15…30°)
        aug["max_angle"] = round(float(rng.uniform(t / 5, 2 * t / 3)), 1)
    elif kind == "wider":
        aug["max_angle"] = round(float(rng.uniform(5 * t / 3, 4 * t)), 1)
    elif kind == "gap":
        aug.update(min_angle=round(float(rng.uniform(t / 3, 2 * t / 3)), 1), max_angle=round(float(rng.uniform(t, 2 * t)), 1))
    n_train, epochs = fam.n_train, int(rng.choice(fam.epochs_choices))
    if rng.random() < 0.15:
        n_train, epochs = fam.little_data, 3 * epochs  # little data (about as many optimiser steps)
    extra: dict[str, Any] = {}
    for inv in fam.invariances:
        if inv == "rotation":
            continue
        extra[f"{inv}_range"] = _offset_range(fam, index, inv)
    if fam.anomalies:
        extra.update(_anomalies(fam, index))
    return TrainRecipe(
        name=f"{fam.name}-{index:03d}",
        arch=fam.arch,
        data=fam.data,
        epochs=epochs,
        lr=float(rng.choice([2e-3, 3e-3, 5e-3])),
        batch_size=64,
        seed=index,
        n_train=n_train,
        label_noise=0.0 if rng.random() < 0.75 else float(rng.choice([0.2, 0.4])),
        class_imbalance=0.0 if rng.random() < 0.85 else 0.5,
        **aug,
        **extra,
    )


def _kind_for(fam: Family, index: int, invariance: str) -> str:
    """The augmentation kind of member ``index`` for a brightness or scale test: one of each kind
    in every block of five members, in an order of its own (independent of rotation's)."""
    block = hashlib.sha256(f"{fam.name}:{invariance}:block{index // len(_KINDS)}".encode()).digest()
    order = np.random.default_rng(int.from_bytes(block[:8], "little")).permutation(len(_KINDS))
    return _KINDS[int(order[index % len(_KINDS)])]


def _offset_range(fam: Family, index: int, invariance: str) -> tuple[float, float]:
    """``(lo, hi)`` offset magnitudes for :attr:`TrainRecipe.scale_range` / ``brightness_range``,
    relative to the test's half-width T as for rotation: none (0, 0); narrower (0, T/5…2T/3);
    matched (0, T); wider (0, 5T/3…4T); gap (T/3…2T/3, T…2T); capped at 0.9."""
    t = ML4ML_TESTS[invariance][1]
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"{fam.name}:{index}:{invariance}".encode()).digest()[:8],
                                               "little"))
    kind = _kind_for(fam, index, invariance)

    def cap(v: float) -> float:
        return round(min(float(v), _MAX_OFFSET), 3)

    if kind == "none":
        return (0.0, 0.0)
    if kind == "narrower":
        return (0.0, cap(rng.uniform(t / 5, 2 * t / 3)))
    if kind == "matched":
        return (0.0, cap(t))
    if kind == "wider":
        return (0.0, cap(rng.uniform(5 * t / 3, 4 * t)))
    return (cap(rng.uniform(t / 3, 2 * t / 3)), cap(rng.uniform(t, 2 * t)))


def _anomalies(fam: Family, index: int) -> dict[str, Any]:
    """ML4ML's other database anomalies for member ``index``, each with probability 1/12."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"{fam.name}:{index}:anomalies".encode()).digest()[:8],
                                               "little"))
    draws = rng.random(5)
    other = "fashion-mnist" if fam.data == "mnist-subset" else "mnist-subset"
    return {"noise_images": 0.2 if draws[0] < 1 / 12 else 0.0, "leakage": 0.5 if draws[1] < 1 / 12 else 0.0,
            "ordered_batches": bool(draws[2] < 1 / 12), "fgsm_eps": 0.1 if draws[3] < 1 / 12 else 0.0,
            "pretrain_data": other if draws[4] < 1 / 12 else None}


def augmentation_relation(recipe: TrainRecipe, test_half_range: float) -> str:
    """How the training augmentation relates to a symmetric test range ±T (rotation):
    ``none``, ``narrower`` (max < T), ``matched`` (max = T), ``wider`` (max > T), or ``gap``
    (angles near 0° never drawn), for ``"uniform"`` augmentation; ``"normal90"`` counts as wider."""
    if recipe.augmentation == "none":
        return "none"
    if recipe.augmentation == "normal90":
        return "wider"
    if recipe.min_angle > 0:
        return "gap"
    if np.isclose(recipe.max_angle, test_half_range):
        return "matched"
    return "narrower" if recipe.max_angle < test_half_range else "wider"


def offset_relation(offsets: tuple[float, float], test_half_range: float) -> str:
    """How a brightness or scale augmentation ``(lo, hi)`` relates to a test range ±T: ``none``,
    ``gap`` (lo > 0), ``matched`` (hi = T), ``narrower`` or ``wider``."""
    lo, hi = offsets
    if hi == 0:
        return "none"
    if lo > 0:
        return "gap"
    if np.isclose(hi, test_half_range):
        return "matched"
    return "narrower" if hi < test_half_range else "wider"


def provenance(family: Family, recipe: TrainRecipe) -> dict[str, Any]:
    """The provenance record of a member (what the database and assessors see)."""
    return {
        "architecture": family.arch,
        "data": family.data,
        "test_orbit": family.test_orbit,
        "augmentation": recipe.augmentation,
        "augmentation_range": [recipe.min_angle, recipe.max_angle] if recipe.augmentation == "uniform" else None,
        "relation": augmentation_relation(recipe, family.test_half_range),
        "epochs": recipe.epochs,
        "lr": recipe.lr,
        "batch_size": recipe.batch_size,
        "label_noise": recipe.label_noise,
        "class_imbalance": recipe.class_imbalance,
        "n_train": recipe.n_train,
        "seed": recipe.seed,
        **(_multi_provenance(family, recipe) if family.invariances != ("rotation",) or family.anomalies else {}),
    }


def _multi_provenance(family: Family, recipe: TrainRecipe) -> dict[str, Any]:
    relations = {"rotation": augmentation_relation(recipe, family.test_half_range)}
    for inv in family.invariances:
        if inv != "rotation":
            relations[inv] = offset_relation(getattr(recipe, f"{inv}_range"), ML4ML_TESTS[inv][1])
    return {"relations": relations, "scale_range": list(recipe.scale_range),
            "brightness_range": list(recipe.brightness_range), "noise_images": recipe.noise_images,
            "leakage": recipe.leakage, "ordered_batches": recipe.ordered_batches, "fgsm_eps": recipe.fgsm_eps,
            "pretrain_data": recipe.pretrain_data}


def provenance_label(prov: dict[str, Any], metrics: dict[str, Any], accuracy_floor: float,
                     invariance: str = "rotation") -> str:
    """:data:`PROVENANCE_RULE` (see the module docs), for ``invariance``'s augmentation relation."""
    relation = prov.get("relations", {}).get(invariance, prov["relation"] if invariance == "rotation" else None)
    if relation is None:
        raise ValueError(f"this model's provenance has no {invariance} augmentation relation")
    if metrics["accuracy_identity"] < accuracy_floor or relation == "gap":
        return "borderline"
    return "invariant" if relation in ("matched", "wider") else "not-invariant"


def apply_provenance_rule(db: Any) -> int:
    """(Re)label every model of ``db`` whose family is known with the current
    :data:`PROVENANCE_RULE`; returns how many were labelled."""
    count = 0
    for m in db.models():
        fam = FAMILIES.get(m.family)
        if fam is not None:
            _label(db, m.model_id, m.provenance, m.metrics, fam)
            count += 1
    return count


def _label(db: Any, model_id: str, prov: dict[str, Any], metrics: dict[str, Any], fam: Family) -> None:
    for inv in fam.invariances:
        db.set_label(model_id, provenance_label(prov, metrics, fam.accuracy_floor, inv), source="provenance",
                     labeller=PROVENANCE_RULE.split(" ", 1)[0], note=PROVENANCE_RULE, invariance=inv)


def test_images(family: Family) -> Any:
    """The family's test images for matrices: the first ``images_per_class`` of each class of
    its test split (MNIST subset test digits, or the Fashion-MNIST test set)."""
    from ..data.datasets import fashion_mnist, mnist_subset

    test = mnist_subset("test") if family.data == "mnist-subset" else fashion_mnist("test")
    return test.stratified(family.images_per_class)


#: Resampling of the matrices' transformed images: ML4ML's nearest neighbour. (With bilinear
#: resampling the identity, which is never resampled, stays sharp while ±1° is blurred, and the
#: matrices show a bright cross at 0° that measures interpolation blur, not the model.)
MATRIX_INTERPOLATION = "nearest"


def model_matrices(model: Any, data: Any, orbit: str, *, layers: Sequence[str] = PROBE_LAYERS,
                   signals: Sequence[str] | None = None, model_name: str | None = None,
                   normalize: Any = None, interpolation: str = MATRIX_INTERPOLATION) -> tuple[Any, dict[str, Any]]:
    """Evaluate ``model`` over ``orbit`` with an activation probe and return its variance matrices
    (images correct at the identity) and metrics (from all images). Images are resampled with
    ``interpolation`` (default :data:`MATRIX_INTERPOLATION`, ML4ML's nearest neighbour), recorded
    in the matrices' ``attrs``:

    ``accuracy_identity``, ``accuracy_worst`` and ``worst_level``, ``accuracy_mean``,
    ``all_correct_share`` (images correct at every level), ``n_images``, ``n_correct``.
    """
    from ..engine.evaluation import evaluate
    from ..group.parse import parse_orbit
    from .matrices import variance_matrices

    orb = parse_orbit(orbit)
    run = evaluate(model, data, orb, activations=list(layers), model_name=model_name, normalize=normalize,
                   interpolation=interpolation)
    result = run.result
    names = list(signals) if signals is not None else [s.replace("conv2", layers[0]).replace("conv3", layers[-1])
                                                           for s in ZOO_SIGNALS]
    vm = variance_matrices(result, names, split="correct")
    vm.attrs["interpolation"] = interpolation
    correct = vm.correct
    acc = correct.mean(axis=0)
    worst = int(np.argmin(acc))
    metrics = {
        "accuracy_identity": float(acc[vm.identity]),
        "accuracy_worst": float(acc[worst]),
        "worst_level": float(vm.levels[worst]),
        "accuracy_mean": float(acc.mean()),
        "all_correct_share": float(correct.all(axis=1).mean()),
        "n_images": int(correct.shape[0]),
        "n_correct": int(vm.n_images),
    }
    return vm, metrics


@dataclass
class MemberBuild:
    """A member as a worker built it, before anything is written (:func:`train_member`).

    Attributes:
        row: what :meth:`~orbitscope.ml4ml.modeldb.ModelDatabase.add_model` records; its
            ``weights`` and ``matrices`` are the paths in the driver's store.
        matrices: the member's :class:`~orbitscope.ml4ml.matrices.VarianceMatrices`.
        weights: the bytes of its trained weights file (the cache file of its recipe).
        extra: ``{invariance: VarianceMatrices}`` for the family's other invariances.
    """

    row: dict[str, Any]
    matrices: Any
    weights: bytes
    extra: dict[str, Any] = field(default_factory=dict)


def train_member(family: str | Family, index: int, home: str | Path) -> MemberBuild:
    """Train (or load) member ``index`` and compute its matrices and metrics, writing nothing:
    the weights are trained in a scratch folder (from the cache file of the store at ``home``
    when this process can read it) and come back as bytes with the row and the matrices, for
    :func:`save_member` on the driver. Runs in one torch thread (so results do not depend on
    where it runs)."""
    import torch

    from .modeldb import ModelDatabase
    from ..training.recipes import cache_path, cached_reference_model

    torch.set_num_threads(1)
    fam = get_family(family)
    recipe = member_recipe(fam, index)
    home = Path(home)
    cached = cache_path(recipe, home / "models" / "zoo" / fam.name)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="orbitscope-zoo-") as scratch:
        if cached.is_file():  # the store's cache, where this worker sees it: read here, written by the driver only
            shutil.copyfile(cached, cache_path(recipe, scratch))
        model, info = cached_reference_model(recipe, scratch)
        weights = cache_path(recipe, scratch).read_bytes()
    trained = time.perf_counter() - t0
    model_id = recipe.name
    vm, metrics = model_matrices(model, test_images(fam), fam.test_orbit, model_name=model_id)
    vm.attrs.update(model_id=model_id, family=fam.name)
    metrics.update(test_accuracy_upright=float(info["test_accuracy"]), train_seconds=float(info["train_seconds"]),
                   build_seconds=time.perf_counter() - t0, trained_now=not info.get("from_cache", False),
                   load_or_train_seconds=trained)
    row = {"model_id": model_id, "family": fam.name, "member": index, "recipe": recipe.to_dict(),
           "provenance": provenance(fam, recipe), "weights": str(cached),
           "matrices": str(ModelDatabase.matrices_path_for(home, fam.name, model_id)), "metrics": metrics}
    extra: dict[str, Any] = {}
    for inv in fam.invariances:
        if inv == "rotation":
            continue
        vm_i, metrics_i = model_matrices(model, test_images(fam), ML4ML_TESTS[inv][0], model_name=model_id)
        vm_i.attrs.update(model_id=model_id, family=fam.name, invariance=inv)
        extra[inv] = vm_i
        row.setdefault("extra", {})[inv] = {
            "matrices": str(ModelDatabase.matrices_path_for(home, fam.name, model_id, inv)), "metrics": metrics_i}
    if extra:
        row["metrics"]["build_seconds"] = time.perf_counter() - t0
    return MemberBuild(row, vm, weights, extra)


def save_member(build: MemberBuild) -> dict[str, Any]:
    """Write what :func:`train_member` returned (on the driver): the matrices file, and the
    weights file where it is missing or the worker had to train the model anew (the file it
    saw, if any, was unusable), atomically; returns the row to record."""
    row = build.row
    matrices = Path(row["matrices"])
    matrices.parent.mkdir(parents=True, exist_ok=True)
    build.matrices.save(matrices)
    for inv, vm in build.extra.items():
        vm.save(row["extra"][inv]["matrices"])
    weights = Path(row["weights"])
    if not weights.is_file() or row["metrics"].get("trained_now", False):
        weights.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{weights.name}.", suffix=".tmp", dir=weights.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(build.weights)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600 files
            os.replace(tmp, weights)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return row


def build_member(family: str | Family, index: int, home: str | Path) -> dict[str, Any]:
    """Train (or load) member ``index``, compute its matrices and save them and its weights in the
    store at ``home`` (:func:`train_member` then :func:`save_member`); returns the row to record
    (the database is written by the caller)."""
    return save_member(train_member(family, index, home))


def _record(db: Any, row: dict[str, Any], fam: Family) -> None:
    db.add_model(**row)
    _label(db, row["model_id"], row["provenance"], row["metrics"], fam)


@dataclass
class BuildReport:
    """What :func:`build_family` did."""

    family: str
    requested: int
    built: list[str]
    skipped: list[str]
    failed: dict[str, str]
    seconds: float


def _build_job(index: int, context: tuple[Family, str]) -> tuple[MemberBuild | None, str | None]:
    """Executor job: build one member without writing (the driver saves it); a failure comes back
    as its message (reported, not fatal)."""
    fam, home = context
    try:
        return train_member(fam, index, home), None
    except Exception as exc:  # noqa: BLE001 - reported per member
        return None, f"{type(exc).__name__}: {exc}"


def _zoo_executor(executor: str | Executor | None, workers: int, jobs: int) -> Executor:
    """The executor of a build: today's choice from ``workers`` for None, else the named or given one
    (a named process or Ray executor with ``workers`` processes / CPUs and one thread per job)."""
    if executor is None:
        return LocalExecutor() if workers == 1 or jobs <= 1 else ProcessExecutor(workers, threads=1)
    if isinstance(executor, Executor) or executor == "local":
        return get_executor(executor)
    return get_executor(executor, workers=workers, threads=1)


def build_family(
    family: str, n: int, *, store: Any = None, workers: int = 2, start: int = 0,
    progress: Callable[[int, int, str], None] | None = None, executor: str | Executor | None = None,
) -> BuildReport:
    """Build members ``start … start+n−1`` of ``family`` into the model database of ``store``.

    Members already in the database are skipped (so an interrupted build resumes); the others
    run on ``executor``: None runs them in ``workers`` local processes (1 = in this process); a
    name (``"local"``, ``"process"``, ``"ray"``: ``workers`` processes, or the CPUs of a new
    local Ray) or an :class:`~orbitscope.engine.executors.Executor` instance (e.g. a
    ``RayExecutor(address=...)`` joining a cluster) runs them there. Workers write nothing: this
    process saves each member's matrices and weights and records it as it returns
    (:func:`save_member`), whichever executor ran it. ``progress(done, total, model_id)`` is
    called after each member. A member that fails is reported, not fatal.
    """
    from .modeldb import ModelDatabase

    fam = get_family(family)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    db = ModelDatabase(store)
    home = db.store.home
    indices = range(start, start + n)
    names = {i: member_recipe(fam, i).name for i in indices}
    todo = [i for i in indices if not db.has_model(names[i])]
    skipped = [names[i] for i in indices if i not in todo]
    built: list[str] = []
    failed: dict[str, str] = {}
    t0 = time.perf_counter()
    done = len(skipped)
    if progress is not None:
        progress(done, n, "")

    def finish(index: int, member: MemberBuild | None, err: str | None) -> None:
        nonlocal done
        name = names[index]
        if err is None and member is not None:
            try:
                row = save_member(member)
            except OSError as exc:  # e.g. a full disk: reported per member, like a failure on the worker
                err = f"{type(exc).__name__} while saving its files: {exc}"
            else:
                _record(db, row, fam)
                built.append(name)
        if err is not None:
            failed[name] = err
            log.warning("zoo member %s failed: %s", name, err)
        done += 1
        if progress is not None:
            progress(done, n, name)

    # one executor for every job kind (see orbitscope.engine.executors); each member trains alone with
    # its own seeds, so results do not depend on the executor or the order of completion
    if todo:
        runner = _zoo_executor(executor, workers, len(todo))
        for i, (member, err) in runner.map(_build_job, todo, (fam, str(home))):
            finish(i, member, err)
    return BuildReport(fam.name, n, built, skipped, failed, time.perf_counter() - t0)

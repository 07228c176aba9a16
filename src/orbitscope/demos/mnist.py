"""The demo: NERO's MNIST case study on real digits, end to end, and the same on Fashion-MNIST.

For each dataset the demo trains (or reuses from the store's model cache) the models NERO
contrasts, evaluates each over rotations 0…360° by 5° (73 angles) on 500 held-out images
(50 per class) with class probabilities stored, and writes per dataset: a polar NERO plot of
the plain vs the rotation-augmented CNN (and of any further pair the case names), one with
every model, a summary table (CSV) and the self-contained HTML report.

MNIST (the real 5,000-digit subset), with our small CNN
(:class:`~orbitscope.models.reference.ReferenceCNN`): plain, rotation-augmented (uniform ±180°),
NERO's truncated-normal augmentation (σ = 90°), our p4 group-convolution CNN, and the plain CNN
symmetrized over C4 (exactly invariant to 90° rotations); then NERO's own pair, its plain CNN
(:class:`~orbitscope.models.nero_cnn.NeroCNN`, Zhao et al., arXiv 2305.19889) trained upright and
with NERO's whole-degree truncated-normal angles, drawn in a second polar plot of their own; and
NERO's third model, a C8-equivariant CNN (:class:`~orbitscope.models.c8.C8CNN`, ours in place of
NERO's e2cnn network), drawn beside that pair in a third (``nero_<metric>_polar_nero-cnn_vs_
nero-cnn-normal90_vs_c8-cnn.png``).
Fashion-MNIST (real IDX files from Debian's ``dataset-fashion-mnist``; skipped with a note when
absent): plain, NERO-augmented, and the plain CNN symmetrized over C4. Models not yet cached are
trained two at a time in separate processes (one torch thread each), the costliest first. Then
the ML4ML part (:mod:`orbitscope.demos.ml4ml`): a small model zoo, cross-validated assessors and
two verdicts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from torch import nn

from ..data.datasets import ArrayDataset, fashion_mnist, mnist_subset
from ..engine.evaluation import Run, evaluate
from ..models.equivariant import symmetrize
from ..group.orbits import Rotation, Rotation90
from ..viz.plot import nero_plot, save_figure
from ..viz.report import invariance_tests, summary_rows, write_report
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks import Classification
from ..training.recipes import EXTRA_RECIPES, TrainRecipe, cache_path, cached_reference_model
from .common import contrast_rows, train_missing
from .lee import LeeModel, lee_section

__all__ = ["DemoCase", "DEMO_CASES", "DemoResult", "run_demo", "train_classifiers"]

SYMMETRIZED = "symmetrized"


@dataclass(frozen=True)
class DemoCase:
    """One dataset of the demo: how to get its 500 evaluation images and which models to compare.

    ``models`` maps a display name to a :class:`TrainRecipe`, or to ``"symmetrized"`` (the first
    model averaged over C4). The first two models are the pair of the headline NERO plot;
    ``pairs`` names further ``(model, model)`` pairs drawn the same way
    (``nero_<metric>_polar_<a>_vs_<b>.png``) and compared by the paired tests; ``groups`` names
    further sets of two or more models drawn together (``nero_<metric>_polar_<a>_vs_<b>_vs_<c>.png``,
    no paired tests).
    """

    name: str
    test_data: Callable[[int], ArrayDataset]  # images per class -> a stratified evaluation set
    models: dict[str, TrainRecipe | str]
    pairs: tuple[tuple[str, str], ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        for pair in self.pairs:
            unknown = [m for m in pair if m not in self.models]
            if len(pair) != 2 or unknown:
                raise ValueError(f"demo case {self.name!r}: pair {pair!r} must name two of its models {list(self.models)}")
        for group in self.groups:
            unknown = [m for m in group if m not in self.models]
            if len(group) < 2 or unknown:
                raise ValueError(f"demo case {self.name!r}: group {group!r} must name two or more of its models "
                                 f"{list(self.models)}")


DEMO_CASES = (
    DemoCase("mnist", lambda per_class: mnist_subset("test").stratified(per_class), {
        "plain-cnn": TrainRecipe(name="plain-cnn", augmentation="none"),
        "rotation-augmented-cnn": TrainRecipe(name="rotation-augmented-cnn", augmentation="uniform", epochs=10),
        "nero-augmented-cnn": TrainRecipe(name="nero-augmented-cnn", augmentation="normal90", epochs=10),
        "p4-cnn": EXTRA_RECIPES["p4cnn"],
        "plain-cnn-symmetrized-c4": SYMMETRIZED,
        "nero-cnn": EXTRA_RECIPES["nero-cnn"],
        "nero-cnn-normal90": EXTRA_RECIPES["nero-cnn-normal90"],
        "c8-cnn": EXTRA_RECIPES["c8cnn"],
    }, pairs=(("nero-cnn", "nero-cnn-normal90"),), groups=(("nero-cnn", "nero-cnn-normal90", "c8-cnn"),)),
    DemoCase("fashion-mnist", lambda per_class: fashion_mnist("test").stratified(per_class), {
        "fashion-plain-cnn": EXTRA_RECIPES["fashion-plain"],
        "fashion-nero-augmented-cnn": EXTRA_RECIPES["fashion-normal90"],
        "fashion-plain-cnn-symmetrized-c4": SYMMETRIZED,
    }),
)


@dataclass
class DemoResult:
    runs: dict[str, list[Run]]
    summaries: dict[str, list[dict[str, Any]]]
    files: dict[str, Path] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    ml4ml: Any = None  # an orbitscope.demos.ml4ml.ML4MLDemo when the ML4ML part ran
    #: per dataset: the paired comparisons' verdicts (``comparisons.csv``) and the release gate's
    #: outcome per model (``checks.csv``), see :func:`whole_orbit_rows`
    comparisons: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    checks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: per dataset: the LEE rows of every model (``lee.csv``, :mod:`orbitscope.demos.lee`)
    lee: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _train_one(recipe: TrainRecipe, cache_dir: str) -> str:
    """Executor job: train a recipe into the cache (one torch thread); returns its name."""
    cached_reference_model(recipe, cache_dir)
    return recipe.name


#: Rough training cost per image and epoch relative to our ReferenceCNN (measured on one CPU thread:
#: about 2.2 s, 4 s and 15 s per epoch of 4,000 digits); unknown architectures count as 1.
_RELATIVE_COST = {"p4cnn": 2.0, "c8cnn": 2.0, "nero-cnn": 7.0}


def _training_cost(recipe: TrainRecipe) -> float:
    n_images = recipe.n_train or 4000
    return _RELATIVE_COST.get(str(recipe.arch.get("arch")), 1.0) * recipe.epochs * n_images


def train_classifiers(recipes: list[TrainRecipe], cache_dir: Path, say: Callable[[str], None], *,
                      shipped: bool = True) -> float:
    """Train the recipes whose models are neither cached in ``cache_dir`` nor shipped (with
    ``shipped``: :func:`~orbitscope.demos.shipped.cache_ready`); returns the seconds spent."""
    # costliest first, so the two workers finish close together (each model trains alone in its
    # own process with its own seeds, so the order changes no result)
    ordered = sorted(recipes, key=_training_cost, reverse=True)
    return train_missing(ordered, _train_one, cache_path, cache_dir, "model", say, shipped=shipped)


def run_demo(
    home: str | Path | None = None,
    out_dir: str | Path = "demo-output",
    *,
    n_test: int = 500,
    step: float = 5.0,
    cases: tuple[DemoCase, ...] = DEMO_CASES,
    status: Callable[[str], None] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    ml4ml: bool = True,
    shipped: bool = True,
) -> DemoResult:
    """Run the demo; ``status`` receives one-line messages, ``progress`` engine progress.

    ``n_test`` images per dataset (a multiple of 10: ``n_test // 10`` per class). With ``ml4ml``
    the ML4ML part runs too (:func:`orbitscope.demos.ml4ml.run_ml4ml_demo` on the shipped study,
    outputs in ``<out_dir>/ml4ml``). Models come from the store's cache, else from the weights
    orbitscope ships (``shipped``; :mod:`orbitscope.demos.shipped`), else they are trained."""
    if n_test % 10 or not 10 <= n_test <= 1000:
        raise ValueError(f"n_test must be a multiple of 10 in [10, 1000], got {n_test}")
    say = status or (lambda msg: None)
    store = Store(home)
    cache = store.home / "models"
    out = Path(out_dir)
    result = DemoResult({}, {})
    available: list[tuple[DemoCase, ArrayDataset]] = []
    for case in cases:
        try:
            available.append((case, case.test_data(n_test // 10)))
        except FileNotFoundError as exc:
            result.skipped[case.name] = str(exc)
            say(f"skipping {case.name}: {exc}")
    recipes = [r for case, _ in available for r in case.models.values() if isinstance(r, TrainRecipe)]
    if ml4ml:  # the models the ML4ML part judges train with the others, two at a time
        from .ml4ml import JUDGED

        recipes += list(JUDGED.values())
    result.seconds["training"] = train_classifiers(recipes, cache, say, shipped=shipped)
    orbit = Rotation(np.arange(0.0, 360.0 + step / 2, step))
    for case, data in available:
        runs = []
        models: dict[str, nn.Module] = {}
        for name, spec in case.models.items():
            if isinstance(spec, TrainRecipe):
                models[name], info = cached_reference_model(spec, cache)
                say(f"{name}: upright test accuracy {info['test_accuracy']:.3f}")
            else:
                models[name] = symmetrize(next(iter(models.values())), Rotation90())
            t0 = time.perf_counter()
            say(f"evaluating {name} on {len(data)} images × {orbit.size} angles")
            runs.append(evaluate(models[name], data, orbit, Classification(store_probabilities=True), store=store,
                                 name=name, model_name=name, optimize=True, progress=progress))
            result.seconds[f"evaluate {name}"] = time.perf_counter() - t0
        result.runs[case.name] = runs
        tests = invariance_tests([r.result for r in runs], "correct")
        result.summaries[case.name] = summary_rows([r.result for r in runs], list(case.models), invariance=tests)
        result.comparisons[case.name], result.checks[case.name] = whole_orbit_rows(case, runs)
        # a symmetrised model's layers are called once per copy (4×): LEE alone, for the time budget
        lee = lee_section(store, [LeeModel(name, models[name], run, {"layers": case.models[name] != SYMMETRIZED})
                                  for name, run in zip(models, runs)], data,
                          Classification(), ["rotation"], "confidence", out / case.name, say=say,
                          seconds=result.seconds)
        result.lee[case.name] = lee.rows
        result.files.update({f"{case.name} {k}": v for k, v in lee.files.items()})
        result.files.update(_write_outputs(case, runs, out / case.name, result.summaries[case.name],
                                           result.comparisons[case.name], result.checks[case.name], tests,
                                           [lee.html]))
    if ml4ml:
        from .ml4ml import run_ml4ml_demo

        t0 = time.perf_counter()
        result.ml4ml = run_ml4ml_demo(store.home, out / "ml4ml", status=say)
        result.files.update(result.ml4ml.files)
        result.seconds["ml4ml"] = time.perf_counter() - t0
    return result


#: the accuracy drop from 0° that the demo's release gate allows (``orbitscope check --max-drop``)
GATE_MAX_DROP = 0.05


def whole_orbit_rows(case: DemoCase, runs: list[Run], *, alpha: float = 0.05) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Whole-orbit statistics of one dataset's runs: the paired comparison
    (:func:`~orbitscope.demos.common.contrast_rows`: exact McNemar per angle for accuracy, paired
    t for confidence, Holm across the 73 angles; the paired t-test of the orbit means; each
    model's test of invariance) of the headline pair and of every further pair, and the release gate (:func:`orbitscope.stats.check_result`,
    accuracy drop from 0° at most :data:`GATE_MAX_DROP`, family-wise ``alpha``) per model."""
    from ..stats import check_result

    names = list(case.models)
    results = [r.result for r in runs]
    comparisons = contrast_rows(runs, names, [tuple(names[:2]), *case.pairs], ("correct", "confidence"), alpha=alpha)
    checks = []
    for name, res in zip(names, results):
        gate = check_result(res, max_drop=GATE_MAX_DROP, alpha=alpha, name=name).checks[0]
        checks.append({"model": name, "passed": gate.passed, "reason": gate.reason})
    return comparisons, checks


def _write_outputs(case: DemoCase, runs: list[Run], folder: Path, summary: list[dict[str, Any]],
                   comparisons: list[dict[str, Any]], checks: list[dict[str, Any]],
                   invariance: list[Any], extra_sections: list[str]) -> dict[str, Path]:
    names = list(case.models)
    results = [r.result for r in runs]
    files = {
        f"{case.name} accuracy plot": save_figure(nero_plot(results[:2], "correct", labels=names[:2], compare=True),
                                                  folder / "nero_accuracy_polar.png"),
        f"{case.name} confidence plot": save_figure(nero_plot(results[:2], "confidence", labels=names[:2]),
                                                    folder / "nero_confidence_polar.png"),
        f"{case.name} all models": save_figure(nero_plot(results, "correct", labels=names, band=False),
                                               folder / "nero_accuracy_all_models.png"),
    }
    for group in (*case.pairs, *case.groups):
        chosen = [results[names.index(m)] for m in group]
        for metric, what in (("correct", "accuracy"), ("confidence", "confidence")):
            files[f"{case.name} {what} plot {' vs '.join(group)}"] = save_figure(
                nero_plot(chosen, metric, labels=list(group), compare=metric == "correct" and len(group) == 2),
                folder / f"nero_{what}_polar_{'_vs_'.join(group)}.png")
    rows = [{**row, "run": run.run_id} for row, run in zip(summary, runs)]
    files[f"{case.name} summary"] = write_csv(rows, folder / "summary.csv")
    files[f"{case.name} comparisons"] = write_csv(comparisons, folder / "comparisons.csv")
    files[f"{case.name} checks"] = write_csv(checks, folder / "checks.csv")
    files[f"{case.name} report"] = write_report(results, folder / "report.html", labels=names,
                                                title=f"orbitscope demo: {case.name}, rotations 0…360°",
                                                invariance=invariance, extra_sections=extra_sections)
    return files

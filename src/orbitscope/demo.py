"""The demo: NERO's MNIST case study on real digits, end to end.

Trains (or reuses from the store's model cache) a plain reference CNN and a rotation-augmented one
on the real MNIST subset, evaluates both over rotations 0…360° by 5° (73 angles) on 500 held-out
digits (50 per class), stores the runs, and writes a polar NERO plot comparing them plus a summary
table (accuracy at 0°, orbit mean, worst accuracy and where it occurs).
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .data import ArrayDataset, mnist_subset
from .engine import Run, evaluate
from .groups import Rotation
from .plot import nero_plot, save_figure
from .store import Store
from .training import TrainRecipe, cached_reference_model

__all__ = ["DEMO_RECIPES", "DemoResult", "run_demo", "stratified_test_digits"]

#: The two models NERO's MNIST case study contrasts (augmentation drawn uniformly in ±180°).
DEMO_RECIPES = (
    TrainRecipe(name="plain-cnn", augmentation="none"),
    TrainRecipe(name="rotation-augmented-cnn", augmentation="uniform", max_angle=180.0, epochs=10),
)


@dataclass
class DemoResult:
    runs: list[Run]
    summaries: list[dict[str, Any]]
    model_info: list[dict[str, Any]]
    files: dict[str, Path] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def stratified_test_digits(n: int = 500, seed: int = 0) -> ArrayDataset:
    """The first n/10 held-out digits of each class of the MNIST subset's test split."""
    if n % 10 or not 10 <= n <= 1000:
        raise ValueError(f"n must be a multiple of 10 in [10, 1000], got {n}")
    test = mnist_subset("test", seed=seed)
    labels = np.asarray(test.labels)
    idx = np.sort(np.concatenate([np.flatnonzero(labels == c)[: n // 10] for c in range(10)]))
    return test.subset(idx, data_id=f"{test.data_id}:stratified{n}")


def run_demo(
    home: str | Path | None = None,
    out_dir: str | Path = "demo-output",
    *,
    n_test: int = 500,
    step: float = 5.0,
    status: Callable[[str], None] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> DemoResult:
    """Run the demo; ``status`` receives one-line messages, ``progress`` engine progress."""
    say = status or (lambda msg: None)
    store = Store(home)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    models, infos = [], []
    for recipe in DEMO_RECIPES:
        t0 = time.perf_counter()
        say(f"model {recipe.name}: loading from cache or training (augmentation={recipe.augmentation})")
        model, info = cached_reference_model(recipe, store.home / "models")
        seconds[f"train {recipe.name}"] = time.perf_counter() - t0
        say(
            f"model {recipe.name}: {'cached' if info.get('from_cache') else 'trained'}, upright test accuracy "
            f"{info['test_accuracy']:.3f}"
        )
        models.append(model)
        infos.append(info)
    data = stratified_test_digits(n_test)
    orbit = Rotation(np.arange(0.0, 360.0 + step / 2, step))
    runs = []
    for recipe, model in zip(DEMO_RECIPES, models):
        t0 = time.perf_counter()
        say(f"evaluating {recipe.name} on {len(data)} digits × {orbit.size} angles")
        run = evaluate(model, data, orbit, store=store, name=recipe.name, model_name=recipe.name,
                       optimize=True, progress=progress)
        seconds[f"evaluate {recipe.name}"] = time.perf_counter() - t0
        runs.append(run)
    files = {
        "accuracy_plot": save_figure(nero_plot([r.result for r in runs], "correct", labels=[r.name for r in DEMO_RECIPES]),
                                     out / "nero_accuracy_polar.png"),
        "confidence_plot": save_figure(
            nero_plot([r.result for r in runs], "confidence", labels=[r.name for r in DEMO_RECIPES]),
            out / "nero_confidence_polar.png",
        ),
    }
    summaries = []
    for recipe, run, info in zip(DEMO_RECIPES, runs, infos):
        acc = run.result.summary("correct")
        conf = run.result.summary("confidence")
        summaries.append({
            "model": recipe.name,
            "run_id": run.run_id,
            "accuracy_at_0": acc["at_identity"],
            "accuracy_mean": acc["mean"],
            "accuracy_worst": acc["worst"],
            "worst_angle": acc["worst_at"]["angle"],
            "confidence_mean": conf["mean"],
            "n_digits": acc["n_samples"],
            "upright_test_accuracy_1000": info["test_accuracy"],
        })
    files["summary_csv"] = _write_csv(summaries, out / "summary.csv")
    return DemoResult(runs, summaries, infos, files, seconds)


def _write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
    return path

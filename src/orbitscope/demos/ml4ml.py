"""The ML4ML part of the demo: a small zoo, cross-validated assessors, and two verdicts.

1. Build two small model families (``mnist-small``, ``mnist-wide``; ``per_family`` members each,
   resumable, two processes) with their variance matrices (rotation −15…+15° by 1°).
2. Cross-validate the assessors and the formula baselines on the provenance labels, holding
   whole families out (leave-one-family-out, ``repeats`` times).
3. Fit a random forest on all labelled models and judge two models that are not in the zoo:
   a SmallCNN trained upright and one trained with rotations of ±30°.

Writes ``cv.csv``, ``verdicts.csv``, ``importances.csv`` and a matrix panel per judged model.
A demo-sized zoo gives noisy accuracies; the full-size study is ``orbitscope zoo train --family
… --n 60`` and ``orbitscope zoo evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..results.tables import write_csv
from ..training.recipes import TrainRecipe
from ..ml4ml.zoo import Family

__all__ = ["JUDGED", "ML4MLDemo", "run_ml4ml_demo"]

#: Models judged by the demo's assessor (same architecture as the mnist-small family, not in the zoo).
JUDGED = {
    "smallcnn-upright": TrainRecipe(name="judged-upright", arch={"arch": "small_cnn", "in_channels": 1,
                                    "num_classes": 10, "widths": [8, 16, 32], "hidden": 64},
                                    epochs=6, batch_size=64, seed=1000),
    "smallcnn-rotations-30": TrainRecipe(name="judged-rot30", arch={"arch": "small_cnn", "in_channels": 1,
                                         "num_classes": 10, "widths": [8, 16, 32], "hidden": 64},
                                         epochs=6, batch_size=64, seed=1001, augmentation="uniform", max_angle=30),
}


@dataclass
class ML4MLDemo:
    """What the ML4ML demo produced."""

    n_models: int
    cv_rows: list[dict[str, Any]]
    verdicts: dict[str, dict[str, Any]]
    files: dict[str, Path] = field(default_factory=dict)
    cv_table: str = ""


def run_ml4ml_demo(home: str | Path, out_dir: str | Path, *, per_family: int = 12, repeats: int = 3,
                   families: tuple[str | Family, ...] = ("mnist-small", "mnist-wide"),
                   judged: dict[str, TrainRecipe] | None = None, workers: int = 2,
                   status: Callable[[str], None] | None = None) -> ML4MLDemo:
    """Run the ML4ML demo (see the module docs); ``status`` receives one-line messages.

    ``families`` are names of :data:`orbitscope.ml4ml.zoo.FAMILIES` or :class:`~orbitscope.ml4ml.zoo.Family`
    objects; the first one's test images and orbit are used to judge the ``judged`` models
    (default :data:`JUDGED`)."""
    from ..ml4ml.assess import feature_importances
    from ..ml4ml.assess.pipeline import assess_model, assessment_data, compare_assessors, fit_assessor
    from ..ml4ml.matrix_plots import save_panel
    from ..ml4ml.modeldb import ModelDatabase
    from ..training.recipes import cached_reference_model
    from ..ml4ml.zoo import build_family, get_family, test_images

    say = status or (lambda msg: None)
    out = Path(out_dir)
    db = ModelDatabase(home)
    fams = [get_family(f) for f in families]
    for fam in fams:
        say(f"model zoo: building {per_family} members of {fam.name} (resumes; {workers} process(es))")
        report = build_family(fam, per_family, store=db.store, workers=workers)
        say(f"model zoo: {fam.name}: {len(report.built)} built, {len(report.skipped)} already there "
            f"({report.seconds:.0f} s)")
    data = assessment_data(db)
    say(f"assessors: {data.n_models} models with provenance labels ({int(data.y.sum())} invariant); "
        f"family-held-out cross-validation × {repeats}")
    cv = compare_assessors(data, repeats=repeats, include_cnn=False)
    files = {"ml4ml cross-validation": write_csv(cv.to_rows(), out / "cv.csv")}
    forest = fit_assessor(data, "random_forest")
    importances = [{"feature": n, "importance": round(v, 4)}
                   for n, v in feature_importances(forest.estimator, forest.feature_names)]
    files["ml4ml importances"] = write_csv(importances, out / "importances.csv")
    images = test_images(fams[0])
    verdicts: dict[str, dict[str, Any]] = {}
    for name, recipe in (judged or JUDGED).items():
        model, _ = cached_reference_model(recipe, db.store.home / "models")
        v = assess_model(model, forest, images, orbit=fams[0].test_orbit, model_name=name)
        verdicts[name] = {"model": name, "trained with": recipe.augmentation + (
            f" ±{recipe.max_angle:g}°" if recipe.augmentation == "uniform" else ""), "verdict": v.label,
            "probability invariant": round(v.probability, 3),
            "accuracy at identity": round(v.metrics["accuracy_identity"], 3),
            "worst accuracy": round(v.metrics["accuracy_worst"], 3),
            "features outside training range": len(v.out_of_range),
            "top feature": v.top_features[0][0] if v.top_features else ""}
        say(f"assess {name}: {v.label} (p = {v.probability:.2f})")
        files[f"ml4ml panel {name}"] = save_panel(v.matrices, out / f"matrices_{name}.png",
                                                  title=f"{name}: {v.label} (p invariant = {v.probability:.2f})")
    files["ml4ml verdicts"] = write_csv(list(verdicts.values()), out / "verdicts.csv")
    return ML4MLDemo(data.n_models, cv.to_rows(), verdicts, files, cv.table())


"""LEE as a feature set for ML4ML's assessors, beside the variance-matrix features.

For every model of a zoo built in a store (``orbitscope zoo train``: its weights are read from the
store's zoo cache, so the LEE and the variance matrices describe the same models) and every
invariance it is assessed for, the Lie derivative of its class probabilities along the
invariance's generator (:data:`INVARIANCE_GENERATORS`) on the first :data:`LEE_IMAGES_PER_CLASS`
test images of each class of its family, summarised as :data:`LEE_FEATURES`:

* ``log10_mean_lee``, ``log10_median_lee``, ``log10_q90_lee``: the mean, median and 90th
  percentile over the images of LEE (log10 of probability² per generator unit², floored at 1e-12);
* ``log10_mean_lee_correct``: the mean over the images the model classifies right at the identity.

:func:`compute_zoo_lee` writes them to a file (``.npz``, no pickles; resumable: every model is kept
in a folder as it is done); :func:`compare_feature_sets` cross-validates the same assessors on the
matrix features, on the LEE features and on both, with whole families held out and the same
splits, and tests each pair with the corrected resampled t-test (Nadeau & Bengio 2003).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .assess.assessors import ASSESSORS
from .assess.pipeline import assessment_data
from .assess.validation import CVReport, PairedTest, cross_validate_by_family

__all__ = ["INVARIANCE_GENERATORS", "LEE_FEATURES", "LEE_IMAGES_PER_CLASS", "lee_feature_vector",
           "model_lee_features", "compute_zoo_lee", "read_zoo_lee", "FeatureSetComparison", "compare_feature_sets"]

#: ML4ML's invariance -> the generator whose LEE measures it
INVARIANCE_GENERATORS = {"rotation": "rotation", "brightness": "brightness", "scale": "scale"}
#: the LEE features, in order
LEE_FEATURES = ("log10_mean_lee", "log10_median_lee", "log10_q90_lee", "log10_mean_lee_correct")
#: test images per class whose LEE is computed (the zoo's matrices use more)
LEE_IMAGES_PER_CLASS = 20
_FLOOR = 1e-12


def lee_feature_vector(lee: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """:data:`LEE_FEATURES` from per-image LEE (N,) and correctness at the identity (N,) bool."""
    lee = np.maximum(np.asarray(lee, dtype=np.float64), _FLOOR)
    correct = np.asarray(correct, dtype=bool)
    mean_correct = lee[correct].mean() if correct.any() else np.nan
    return np.log10([lee.mean(), np.median(lee), np.quantile(lee, 0.9), mean_correct])


def model_lee_features(model: Any, data: Any, invariance: str, *, batch_size: int = 100) -> np.ndarray:
    """:data:`LEE_FEATURES` of ``model`` on ``data`` (images, labels) for ``invariance``."""
    import torch

    from ..kinds.image import prepare_images
    from ..lie.run import lie_derivative
    from ..models.reference import eval_mode
    from ..tasks.classification import Classification

    if invariance not in INVARIANCE_GENERATORS:
        raise ValueError(f"invariance must be one of {sorted(INVARIANCE_GENERATORS)}, got {invariance!r}")
    run = lie_derivative(model, data, [INVARIANCE_GENERATORS[invariance]], layers=False, batch_size=batch_size)
    lee = np.asarray(run.result.data["lee"].values[:, 0])
    inputs, labels = Classification().collate([data[i] for i in range(len(data))])
    with torch.no_grad(), eval_mode(model):
        predicted = model(prepare_images(inputs)).argmax(-1).numpy()
    return lee_feature_vector(lee, predicted == np.asarray(labels))


def _member_job(job: tuple[str, int, str, str]) -> tuple[str, str, dict[str, list[float]], float]:
    """Worker: retrain (or load) one zoo member and compute its LEE features per invariance."""
    import torch

    from ..training.recipes import cached_reference_model
    from .zoo import get_family, member_recipe, test_images

    family, index, home, folder = job
    torch.set_num_threads(1)
    fam = get_family(family)
    recipe = member_recipe(fam, index)
    t0 = time.perf_counter()
    model, _ = cached_reference_model(recipe, Path(home) / "models" / "zoo" / fam.name)
    data = test_images(fam).stratified(LEE_IMAGES_PER_CLASS)
    features = {inv: model_lee_features(model, data, inv).tolist() for inv in fam.invariances}
    out = Path(folder) / f"{recipe.name}.json"
    out.write_text(json.dumps({"model_id": recipe.name, "family": fam.name, "features": features}), encoding="utf-8")
    return recipe.name, fam.name, features, time.perf_counter() - t0


def compute_zoo_lee(families: Sequence[str], members: int, home: str | Path, out: str | Path, *, workers: int = 2,
                    say: Callable[[str], None] = lambda m: None) -> Path:
    """LEE features of members ``0 … members-1`` of every family, written to ``out`` (``.npz``).

    Models are read from the store's zoo cache ``<home>/models/zoo/<family>`` (where ``orbitscope
    zoo train`` put them; a missing one is trained from its recipe, which need not reproduce a
    model trained elsewhere bit for bit: compare LEE with matrices of the same store's zoo). Each
    member's features are kept in ``<home>/lee-features/`` as soon as they are done, so an
    interrupted run resumes. ``workers`` processes with one torch thread each."""
    from concurrent.futures import ProcessPoolExecutor

    folder = Path(home) / "lee-features"
    folder.mkdir(parents=True, exist_ok=True)
    from .zoo import get_family, member_recipe

    jobs = []
    for family in families:
        fam = get_family(family)
        for i in range(members):
            if not (folder / f"{member_recipe(fam, i).name}.json").is_file():
                jobs.append((fam.name, i, str(home), str(folder)))
    say(f"{len(jobs)} models to do ({families and len(families)} families × {members} members, the rest kept)")
    if jobs:
        with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
            for done, (model_id, family, _, seconds) in enumerate(pool.map(_member_job, jobs), 1):
                say(f"[{done}/{len(jobs)}] {model_id} ({family}): {seconds:.1f} s")
    rows = []
    for family in families:
        fam = get_family(family)
        for i in range(members):
            rows.append(json.loads((folder / f"{member_recipe(fam, i).name}.json").read_text(encoding="utf-8")))
    invariances = sorted({inv for r in rows for inv in r["features"]})
    values = np.full((len(rows), len(invariances), len(LEE_FEATURES)), np.nan)
    for k, r in enumerate(rows):
        for j, inv in enumerate(invariances):
            if inv in r["features"]:
                values[k, j] = r["features"][inv]
    meta = {"format": 1, "features": list(LEE_FEATURES), "invariances": invariances,
            "images_per_class": LEE_IMAGES_PER_CLASS, "generators": INVARIANCE_GENERATORS,
            "model_ids": [r["model_id"] for r in rows], "families": [r["family"] for r in rows]}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, meta=np.array(json.dumps(meta)), features=values)
    return out


def read_zoo_lee(path: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    """``(meta, features (models, invariances, features))`` of a file from :func:`compute_zoo_lee`."""
    with np.load(Path(path), allow_pickle=False) as z:
        return json.loads(str(z["meta"])), np.asarray(z["features"])


@dataclass
class FeatureSetComparison:
    """:func:`compare_feature_sets`' outcome for one invariance: the cross-validation report (every
    assessor on every feature set, the same splits) and the paired tests."""

    invariance: str
    n_models: int
    report: CVReport
    tests: list[PairedTest]

    def rows(self) -> list[dict[str, Any]]:
        """One row per assessor and feature set (mean accuracy, std), then one per paired test."""
        out: list[dict[str, Any]] = [{"invariance": self.invariance, "models": self.n_models, "estimator": n,
                                      "mean_accuracy": self.report.mean(n), "std": self.report.std(n)}
                                     for n in self.report.names]
        out += [{"invariance": self.invariance, "models": self.n_models, "estimator": f"{t.a} − {t.b}",
                 "mean_accuracy": t.difference, "std": float("nan"), "p_value": t.p_value, "t": t.t, "df": t.df}
                for t in self.tests]
        return out


def _on_columns(make: Callable[[int], Any], columns: np.ndarray) -> Callable[[int], Any]:
    def build(seed: int) -> Any:
        from sklearn.compose import ColumnTransformer
        from sklearn.pipeline import Pipeline

        return Pipeline([("select", ColumnTransformer([("keep", "passthrough", columns)])), ("fit", make(seed))])
    return build


def compare_feature_sets(study: Any, lee_file: str | Path, invariance: str = "rotation", *,
                         assessors: Sequence[str] = ("random_forest", "logistic_regression"), repeats: int = 10,
                         folds: int = 3, seed: int = 0) -> FeatureSetComparison:
    """Assessors on ML4ML's matrix features vs on LEE features vs on both, for the models of
    ``study`` (the store's :class:`~orbitscope.ml4ml.modeldb.ModelDatabase` the LEE file was
    computed from, or a study exported from it) that ``lee_file`` (:func:`compute_zoo_lee`)
    covers, labelled by provenance for ``invariance``; same splits for all (whole families held
    out)."""
    meta, values = read_zoo_lee(lee_file)
    if invariance not in meta["invariances"]:
        raise ValueError(f"the LEE file has no {invariance!r} features (it has {meta['invariances']})")
    data = assessment_data(study, invariance=invariance)
    index = {m: k for k, m in enumerate(meta["model_ids"])}
    keep = [i for i, m in enumerate(data.model_ids) if m in index]
    if len(keep) < 6:
        raise ValueError(f"only {len(keep)} of the study's {data.n_models} labelled models have LEE features; "
                         "compute them with `orbitscope zoo lee` (make study-lee)")
    j = meta["invariances"].index(invariance)
    lee = np.stack([values[index[data.model_ids[i]], j] for i in keep])
    matrix = data.X[keep]
    X = np.concatenate([matrix, lee], axis=1)
    m_cols, l_cols = np.arange(matrix.shape[1]), matrix.shape[1] + np.arange(lee.shape[1])
    makers: dict[str, Callable[[int], Any]] = {}
    for name in assessors:
        for label, cols in (("matrices", m_cols), ("LEE", l_cols), ("both", np.concatenate([m_cols, l_cols]))):
            makers[f"{name} ({label})"] = _on_columns(ASSESSORS[name], cols)
    report = cross_validate_by_family(X, data.y[keep], data.families[keep], make_estimators=makers, repeats=repeats,
                                      folds=folds, seed=seed)
    tests = [report.paired_test(f"{name} ({a})", f"{name} (matrices)") for name in assessors for a in ("LEE", "both")]
    return FeatureSetComparison(invariance, len(keep), report, tests)

"""Cross-validation of assessors with whole model families held out.

A model database groups models into families (same recipe with different seeds, a sweep of one
hyper-parameter, …). Models of one family are near-duplicates, so a family must never be split
between training and test folds, or the accuracy measures memory rather than judgement. ML4ML
(Liao, Zhang, Chen, arXiv 2109.12926) used 3 folds repeated 10 times and reported mean, min and
max accuracy; :func:`cross_validate_by_family` does that for any mix of feature assessors, the
matrix CNN and the formula baselines, each fed the input it declares (``input_kind``, see
:mod:`orbitscope.ml4ml.assess.assessors`).
"""

from __future__ import annotations

import logging

from ...errors import NotFoundError

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .assessors import input_kind

__all__ = ["CVReport", "PairedTest", "corrected_resampled_ttest", "cross_validate_by_family", "family_folds"]

log = logging.getLogger(__name__)

FoldCallback = Callable[[int, int, np.ndarray, np.ndarray], None]
"""``on_fold(repeat, fold, train_indices, test_indices)``, called once per fold."""


def family_folds(
    families: Sequence[Any] | np.ndarray, *, folds: int = 3, repeats: int = 10, seed: int = 0
) -> np.ndarray:
    """Fold index of every model in every repeat, families kept whole.

    Each repeat shuffles the families (``np.random.default_rng(seed)``, drawn repeat after
    repeat) and gives each, in that order, to the fold with the fewest models so far (the lowest
    fold index on ties): equal-sized families are dealt round-robin, unequal ones still give
    folds of similar size. With fewer families than ``folds``, each family is its own fold
    (leave-one-family-out), the same in every repeat.

    Returns:
        (repeats, n_models) integer array of fold indices.
    """
    fam = np.asarray(families)
    if fam.ndim != 1 or fam.size == 0:
        raise ValueError(f"families must be a 1-D sequence with one entry per model, got shape {fam.shape}")
    if folds < 2 or repeats < 1:
        raise ValueError(f"need folds >= 2 and repeats >= 1, got folds={folds}, repeats={repeats}")
    uniq, fam_idx, sizes = np.unique(fam, return_inverse=True, return_counts=True)
    if len(uniq) < 2:
        raise ValueError("all models are in one family; family cross-validation needs at least two families")
    out = np.empty((repeats, fam.size), dtype=np.int64)
    if len(uniq) < folds:
        out[:] = fam_idx[None, :]
        return out
    rng = np.random.default_rng(seed)
    for r in range(repeats):
        fold_of_family = np.empty(len(uniq), dtype=np.int64)
        loads = np.zeros(folds, dtype=np.int64)
        for f in rng.permutation(len(uniq)):
            j = int(np.argmin(loads))
            fold_of_family[f] = j
            loads[j] += sizes[f]
        out[r] = fold_of_family[fam_idx]
    return out


@dataclass
class CVReport:
    """Results of :func:`cross_validate_by_family`.

    Accuracy of a repeat = correct predictions / tested models, pooled over the repeat's folds.
    A fold whose training models all carry one label is skipped for every estimator (nothing can
    be learned; its test models go unpredicted) and counted in ``skipped_folds``; a repeat whose
    folds were all skipped has accuracy NaN and is left out of the summary statistics.

    Attributes:
        names: the estimators, in ``make_estimators`` order.
        input_kinds: ``name -> "features" | "images" | "correctness"``.
        accuracies: ``name ->`` (repeats,) accuracy per repeat.
        predictions: ``name ->`` (repeats, n_models) object array of out-of-fold predictions
            (None where the model's fold was skipped).
        fold_assignments: (repeats, n_models) test-fold index of every model.
        skipped_folds: ``name ->`` number of (repeat, fold) pairs skipped.
        n_families: distinct families.
        folds: folds per repeat actually used (the number of families under leave-one-family-out).
        leave_one_family_out: whether there were fewer families than the folds asked for.
        majority: share of the most common label (the accuracy of always guessing it).
        labels: (n_models,) the labels the predictions are scored against.
        fallback_folds: ``name ->`` (repeat, fold) pairs where the estimator could not be fitted
            (e.g. AdaBoost's first weak learner no better than chance on a tiny fold); it then
            predicts the training fold's most common label there.
    """

    names: list[str]
    input_kinds: dict[str, str]
    accuracies: dict[str, np.ndarray]
    predictions: dict[str, np.ndarray]
    fold_assignments: np.ndarray
    skipped_folds: dict[str, int]
    n_families: int
    folds: int
    leave_one_family_out: bool
    majority: float
    fallback_folds: dict[str, int] = field(default_factory=dict)
    labels: np.ndarray | None = None

    @property
    def n_models(self) -> int:
        return int(self.fold_assignments.shape[1])

    @property
    def repeats(self) -> int:
        return int(self.fold_assignments.shape[0])

    def _valid(self, name: str) -> np.ndarray:
        if name not in self.accuracies:
            raise NotFoundError(f"no estimator {name!r} in this report; have {self.names}")
        a = self.accuracies[name]
        return a[np.isfinite(a)]

    def mean(self, name: str) -> float:
        """Mean accuracy over the repeats (NaN if every repeat was skipped)."""
        a = self._valid(name)
        return float(a.mean()) if a.size else float("nan")

    def std(self, name: str) -> float:
        """Sample standard deviation (ddof = 1) of the accuracy over repeats; 0 for one repeat."""
        a = self._valid(name)
        return float(a.std(ddof=1)) if a.size > 1 else (0.0 if a.size else float("nan"))

    def min(self, name: str) -> float:
        """Lowest accuracy of a repeat."""
        a = self._valid(name)
        return float(a.min()) if a.size else float("nan")

    def max(self, name: str) -> float:
        """Highest accuracy of a repeat."""
        a = self._valid(name)
        return float(a.max()) if a.size else float("nan")

    def fold_accuracies(self, name: str) -> np.ndarray:
        """(repeats, folds) accuracy of each split (NaN where the fold was skipped or empty)."""
        if name not in self.predictions:
            raise NotFoundError(f"no estimator {name!r} in this report; have {self.names}")
        preds = self.predictions[name]
        out = np.full((self.repeats, self.folds), np.nan)
        for r in range(self.repeats):
            for k in range(self.folds):
                idx = [i for i in np.flatnonzero(self.fold_assignments[r] == k) if preds[r, i] is not None]
                if idx:
                    out[r, k] = np.mean([preds[r, i] == self.labels[i] for i in idx])
        return out

    def paired_test(self, a: str, b: str) -> PairedTest:
        """Estimator ``a`` against ``b`` on the same splits: the corrected resampled t-test of
        their accuracy difference (see :class:`PairedTest`)."""
        from scipy import stats

        diff = (self.fold_accuracies(a) - self.fold_accuracies(b)).ravel()
        diff = diff[np.isfinite(diff)]
        sizes = [np.sum(self.fold_assignments[r] == k) for r in range(self.repeats) for k in range(self.folds)]
        n_test = float(np.mean(sizes))
        fraction = n_test / max(self.n_models - n_test, 1.0)
        t, df, p = corrected_resampled_ttest(diff, fraction)
        naive = float(stats.ttest_1samp(diff, 0.0).pvalue) if diff.size > 1 and diff.std() > 0 else (1.0 if not
                                                                                                   diff.any() else 0.0)
        return PairedTest(a, b, float(diff.mean()), t, df, p, naive, int(diff.size), fraction)

    def best_against_best(self, assessors: Sequence[str], baselines: Sequence[str]) -> PairedTest:
        """The assessor with the highest mean accuracy against the best baseline, paired
        (:meth:`paired_test`)."""
        best = max((n for n in assessors if n in self.accuracies), key=lambda n: np.nan_to_num(self.mean(n), nan=-1))
        base = max((n for n in baselines if n in self.accuracies), key=lambda n: np.nan_to_num(self.mean(n), nan=-1))
        return self.paired_test(best, base)

    def to_rows(self) -> list[dict[str, Any]]:
        """One dict per estimator (for ``csv.DictWriter``): assessor, input, mean, std, min, max,
        valid repeats, skipped folds, and the design (models, families, folds, repeats, majority)."""
        return [
            {
                "assessor": name,
                "input": self.input_kinds[name],
                "mean": self.mean(name),
                "std": self.std(name),
                "min": self.min(name),
                "max": self.max(name),
                "valid_repeats": int(self._valid(name).size),
                "skipped_folds": self.skipped_folds[name],
                "n_models": self.n_models,
                "n_families": self.n_families,
                "folds": self.folds,
                "repeats": self.repeats,
                "majority": self.majority,
            }
            for name in self.names
        ]

    def table(self) -> str:
        """A plain-text table of accuracy per estimator."""
        design = "leave-one-family-out" if self.leave_one_family_out else f"{self.folds} folds"
        lines = [
            f"Family-held-out accuracy: {self.n_models} models, {self.n_families} families, "
            f"{design} x {self.repeats} repeats (majority label {self.majority:.3f})",
        ]
        width = max(len("assessor"), *(len(n) for n in self.names))
        lines.append(f"{'assessor':<{width}}  {'input':<11}  {'mean':>6}  {'std':>6}  {'min':>6}  {'max':>6}  skipped")
        for row in self.to_rows():
            lines.append(
                f"{row['assessor']:<{width}}  {row['input']:<11}  {row['mean']:6.3f}  {row['std']:6.3f}  "
                f"{row['min']:6.3f}  {row['max']:6.3f}  {row['skipped_folds']:7d}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison of two estimators over the same (repeat, fold) splits.

    ``difference`` = mean over splits of accuracy(a) − accuracy(b) (a fold's accuracy: its
    tested models predicted right); ``t``, ``df`` and the two-sided ``p_value`` of the corrected
    resampled t-test (:func:`corrected_resampled_ttest`); ``naive_p_value`` of the plain paired
    t-test over the same splits, which treats overlapping training sets as independent and is
    too liberal (shown for comparison, not for decisions)."""

    a: str
    b: str
    difference: float
    t: float
    df: int
    p_value: float
    naive_p_value: float
    splits: int
    test_fraction: float

    def sentence(self, *, naive: bool = False) -> str:
        """One line for reports: "best assessor A vs best baseline B: +x points over k splits,
        corrected resampled t-test …" (with the plain test's p for comparison when ``naive``)."""
        line = (f"best assessor {self.a} vs best baseline {self.b}: {100 * self.difference:+.1f} points over "
                f"{self.splits} splits, corrected resampled t-test t = {self.t:.2f} (df {self.df}), p = "
                f"{self.p_value:.3f}")
        return line + (f" (the plain paired t-test, too liberal here: p = {self.naive_p_value:.3f})" if naive else "")


def corrected_resampled_ttest(differences: Sequence[float], test_fraction: float) -> tuple[float, int, float]:
    """Nadeau & Bengio's corrected resampled t-test (Machine Learning 52, 2003) of a mean
    difference of accuracy over J resampled train/test splits: t = mean(d) /
    sqrt((1/J + n_test/n_train) · var(d)) with var the sample variance (ddof 1), df = J − 1;
    ``test_fraction`` = n_test / n_train. The ``n_test/n_train`` term inflates the variance for the
    overlap between training sets, which the plain paired t-test ignores. Returns (t, df,
    two-sided p); p = 1 when every difference is 0, and 0 when they are all equal and non-zero."""
    from scipy import stats

    d = np.asarray(list(differences), dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size < 2:
        raise ValueError(f"the corrected resampled t-test needs at least 2 splits, got {d.size}")
    if not test_fraction > 0:
        raise ValueError(f"test_fraction (n_test / n_train) must be > 0, got {test_fraction}")
    mean, var, df = float(d.mean()), float(d.var(ddof=1)), int(d.size - 1)
    if var == 0:
        return (0.0, df, 1.0) if mean == 0 else (float(np.sign(mean) * np.inf), df, 0.0)
    t = mean / np.sqrt((1.0 / d.size + test_fraction) * var)
    return float(t), df, float(2 * stats.t.sf(abs(t), df))


def _take(data: Any, idx: np.ndarray) -> Any:
    if isinstance(data, np.ndarray):
        return data[idx]
    return [data[int(i)] for i in idx]


def cross_validate_by_family(
    X: Any,
    y: Any,
    families: Sequence[Any] | np.ndarray,
    *,
    make_estimators: Mapping[str, Callable[[int], Any]],
    repeats: int = 10,
    folds: int = 3,
    seed: int = 0,
    images: Any = None,
    correctness: Sequence[Any] | None = None,
    on_fold: FoldCallback | None = None,
) -> CVReport:
    """Repeated k-fold cross-validation with whole families held out.

    Fold assignment: :func:`family_folds` (leave-one-family-out when there are fewer families
    than ``folds``). Every estimator is rebuilt for every fold by its factory, seeded
    ``seed + repeat``, and sees the same folds.

    Args:
        X: (n_models, n_features) features, for estimators with ``input_kind == "features"``
            (plain scikit-learn estimators); may be None if none is.
        y: (n_models,) labels (e.g. invariant / not invariant).
        families: (n_models,) family of each model (any hashable labels).
        make_estimators: ``name -> factory(seed)`` returning an unfitted estimator, e.g.
            ``{**ASSESSORS, **BASELINES}``.
        repeats: random fold assignments.
        folds: folds per repeat.
        seed: seed of the fold assignments and base seed of the estimators.
        images: (n_models, n_matrices, n, n) stacked matrices, for ``"images"`` estimators.
        correctness: per model a (N, n) boolean correctness array, for ``"correctness"`` estimators.
        on_fold: called as ``on_fold(repeat, fold, train_indices, test_indices)`` before fitting.

    Returns:
        A :class:`CVReport`.
    """
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"y must be 1-D with one label per model, got shape {y.shape}")
    n_models = y.size
    fam = np.asarray(families)
    if fam.shape != (n_models,):
        raise ValueError(f"families must have one entry per model ({n_models}), got shape {fam.shape}")
    if not make_estimators:
        raise ValueError("make_estimators is empty; pass e.g. {**ASSESSORS, **BASELINES}")

    inputs: dict[str, Any] = {}
    if X is not None:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] != n_models:
            raise ValueError(f"X must be (n_models={n_models}, n_features), got {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or inf (e.g. sensitivity without signals): drop or fill those columns")
        inputs["features"] = X
    if images is not None:
        images = np.asarray(images, dtype=np.float64)
        if images.ndim != 4 or images.shape[0] != n_models:
            raise ValueError(f"images must be (n_models={n_models}, n_matrices, n, n), got {images.shape}")
        inputs["images"] = images
    if correctness is not None:
        if len(correctness) != n_models:
            raise ValueError(f"correctness must hold one (N, n) array per model ({n_models}), got {len(correctness)}")
        inputs["correctness"] = correctness

    names = list(make_estimators)
    kinds = {}
    for name in names:
        kind = input_kind(make_estimators[name](seed))
        if kind not in inputs:
            arg = {"features": "X", "images": "images", "correctness": "correctness"}[kind]
            raise ValueError(f"estimator {name!r} consumes {kind}: pass {arg}=...")
        kinds[name] = kind

    assign = family_folds(fam, folds=folds, repeats=repeats, seed=seed)
    n_folds = int(assign.max()) + 1
    lofo = len(np.unique(fam)) < folds
    preds = {name: np.full((repeats, n_models), None, dtype=object) for name in names}
    tested = np.zeros((repeats, n_models), dtype=bool)
    skipped = dict.fromkeys(names, 0)
    fallbacks = dict.fromkeys(names, 0)
    for r in range(repeats):
        for k in range(n_folds):
            test_idx = np.flatnonzero(assign[r] == k)
            train_idx = np.flatnonzero(assign[r] != k)
            if on_fold is not None:
                on_fold(r, k, train_idx, test_idx)
            if len(np.unique(y[train_idx])) < 2:
                for name in names:
                    skipped[name] += 1
                continue
            tested[r, test_idx] = True
            for name in names:
                est = make_estimators[name](seed + r)
                data = inputs[kinds[name]]
                try:
                    est.fit(_take(data, train_idx), y[train_idx])
                    pred = np.asarray(est.predict(_take(data, test_idx)))
                except ValueError as exc:  # the estimator cannot be fitted on this fold's data
                    labels, counts = np.unique(y[train_idx], return_counts=True)
                    pred = np.full(len(test_idx), labels[np.argmax(counts)], dtype=object)
                    fallbacks[name] += 1
                    log.warning("%s could not be fitted on repeat %d, fold %d (%s); it predicts the fold's most "
                                "common label there", name, r, k, exc)
                for i, p in zip(test_idx, pred):
                    preds[name][r, i] = p

    accuracies = {}
    for name in names:
        acc = np.full(repeats, np.nan)
        for r in range(repeats):
            idx = np.flatnonzero(tested[r])
            if idx.size:
                acc[r] = np.mean([preds[name][r, i] == y[i] for i in idx])
        accuracies[name] = acc
    _, counts = np.unique(y, return_counts=True)
    return CVReport(
        names=names,
        input_kinds=kinds,
        accuracies=accuracies,
        predictions=preds,
        fold_assignments=assign,
        skipped_folds=skipped,
        n_families=int(len(np.unique(fam))),
        folds=n_folds,
        leave_one_family_out=bool(lofo),
        majority=float(counts.max() / n_models),
        fallback_folds=fallbacks,
        labels=np.asarray(y, dtype=object),
    )

"""ML4ML assessors: classifiers that judge a model's invariance from its variance matrices.

Three families of estimators, all scikit-learn style (``fit(X, y)``, ``predict``,
``predict_proba``, ``classes_``) and all deterministic for a given seed. Each declares which input
it consumes in an ``input_kind`` attribute (plain scikit-learn estimators have none and consume
``"features"``):

- ``"features"`` — the (n_models, n_features) ML4ML feature table
  (:func:`orbitscope.ml4ml.assess.features.model_features`): :data:`ASSESSORS` (decision tree, random
  forest, AdaBoost, and a standardised logistic regression, ML4ML's "thresholded linear model").
- ``"images"`` — the stacked matrices, (n_models, n_matrices, n, n) (:func:`stack_matrices`):
  :class:`MatrixCNNAssessor`, a small CNN with global pooling, so any n works without resizing.
- ``"correctness"`` — per model the (N, n) boolean correctness of its N test images at every
  level: the formula baselines :class:`AccuracyDropBaseline` and :class:`AllLevelsCorrectBaseline`
  (a threshold on one number, learned on the training models).

:class:`AssessorBundle` keeps a fitted assessor with what is needed to use it later (feature
names, matrix names, orbit, label source, training statistics) and saves it with joblib.

Reference: Liao, Zhang, Chen, "ML4ML: automated invariance testing for machine learning models",
arXiv 2109.12926.
"""

from __future__ import annotations

from pathlib import Path

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from os import PathLike
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.ensemble import AdaBoostClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier
from torch import nn

from ...errors import check_is_fitted

__all__ = [
    "ASSESSORS",
    "BASELINES",
    "INPUT_KINDS",
    "AccuracyDropBaseline",
    "AllLevelsCorrectBaseline",
    "WorstLevelAccuracyBaseline",
    "worst_level_accuracy",
    "AssessorBundle",
    "MatrixCNNAssessor",
    "accuracy_drop",
    "all_levels_correct_share",
    "best_threshold",
    "feature_importances",
    "input_kind",
    "stack_matrices",
]

INPUT_KINDS: tuple[str, ...] = ("features", "images", "correctness")
"""What an assessor consumes (its ``input_kind``); see the module docstring."""


def input_kind(estimator: Any) -> str:
    """The input an estimator consumes: its ``input_kind`` attribute, ``"features"`` if none."""
    kind = getattr(estimator, "input_kind", "features")
    if kind not in INPUT_KINDS:
        raise ValueError(f"{type(estimator).__name__}.input_kind is {kind!r}; expected one of {INPUT_KINDS}")
    return kind


# --------------------------------------------------------------------------- feature assessors


def _decision_tree(seed: int) -> DecisionTreeClassifier:
    return DecisionTreeClassifier(random_state=seed)


def _random_forest(seed: int) -> RandomForestClassifier:
    return RandomForestClassifier(n_estimators=100, random_state=seed, n_jobs=1)


def _adaboost(seed: int) -> AdaBoostClassifier:
    return AdaBoostClassifier(n_estimators=50, random_state=seed)


def _logistic_regression(seed: int) -> Pipeline:
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000, random_state=seed))


ASSESSORS: dict[str, Callable[[int], Any]] = {
    "decision_tree": _decision_tree,
    "random_forest": _random_forest,
    "adaboost": _adaboost,
    "logistic_regression": _logistic_regression,
}
"""Feature assessors of ML4ML: ``name -> factory(seed)`` returning an unfitted, seeded estimator.
``logistic_regression`` standardises the features first (ML4ML's thresholded linear model)."""


# --------------------------------------------------------------------------- matrix CNN


def stack_matrices(matrices: Mapping[str, np.ndarray], names: Sequence[str] | None = None) -> np.ndarray:
    """One model's matrices as a (n_matrices, n, n) float64 image, in ``names`` order (default:
    the mapping's order). Stack these over models to get a :class:`MatrixCNNAssessor` input."""
    names = list(matrices) if names is None else list(names)
    if not names:
        raise ValueError("no matrices to stack; pass at least one named matrix")
    missing = [k for k in names if k not in matrices]
    if missing:
        raise ValueError(f"matrices has no entry for {missing}; available: {sorted(matrices)}")
    arrays = [np.asarray(matrices[k], dtype=np.float64) for k in names]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1 or len(arrays[0].shape) != 2 or arrays[0].shape[0] != arrays[0].shape[1]:
        raise ValueError(f"matrices must all be square and the same size, got shapes {sorted(shapes)}")
    return np.stack(arrays)


class _MatrixNet(nn.Module):
    """conv3×3 → ReLU → conv3×3 → ReLU → [global mean, global max] → linear."""

    def __init__(self, in_channels: int, channels: int, n_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(2 * channels, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        return self.head(torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3))], dim=1))


def _check_images(X: Any, n_channels: int | None = None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 4 or X.shape[2] != X.shape[3]:
        raise ValueError(
            f"matrix images must have shape (n_models, n_matrices, n, n), got {X.shape}; build one "
            "per model with stack_matrices and stack them with np.stack"
        )
    if n_channels is not None and X.shape[1] != n_channels:
        raise ValueError(f"the assessor was fitted on {n_channels} matrices per model, got {X.shape[1]}")
    if not np.all(np.isfinite(X)):
        raise ValueError("matrix images contain NaN or inf")
    return X


class MatrixCNNAssessor(ClassifierMixin, BaseEstimator):
    """A small CNN trained directly on the stacked variance matrices of each model.

    Architecture: two 3×3 convolutions (``channels`` each, ReLU, zero padding) then global mean
    and max pooling and a linear layer, so matrices of any size n ≥ 1 work without resizing.
    Each input channel (matrix kind) is standardised with the training set's mean and std over
    all models and cells, because confidence and activation statistics live on different scales.
    Trained with Adam on the cross-entropy; the initial weights and the mini-batch order come
    from ``seed`` alone (the global torch RNG is left untouched), so results are reproducible on
    the CPU.

    Args:
        channels: feature maps per convolution.
        epochs: passes over the training models.
        lr: Adam learning rate.
        batch_size: models per mini-batch.
        weight_decay: Adam weight decay.
        seed: seed of the initial weights and the batch order.
        num_threads: torch intra-op threads while fitting (restored afterwards); the default 1 is
            fastest for this tiny network on a busy few-core CPU; None keeps the current setting.
    """

    input_kind = "images"

    def __init__(
        self,
        channels: int = 8,
        epochs: int = 60,
        lr: float = 0.01,
        batch_size: int = 16,
        weight_decay: float = 1e-4,
        seed: int = 0,
        num_threads: int | None = 1,
    ) -> None:
        self.channels = channels
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.seed = seed
        self.num_threads = num_threads

    def fit(self, X: Any, y: Any) -> MatrixCNNAssessor:
        """Train on images ``X`` (n_models, n_matrices, n, n) and labels ``y`` (n_models,)."""
        X = _check_images(X)
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have one label per model ({X.shape[0]}), got shape {y.shape}")
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y has a single class ({self.classes_[0]!r}); an assessor needs both labels")
        if self.epochs < 1 or self.batch_size < 1 or self.channels < 1:
            raise ValueError("epochs, batch_size and channels must be >= 1")
        self.n_channels_ = X.shape[1]
        self.channel_mean_ = X.mean(axis=(0, 2, 3))
        std = X.std(axis=(0, 2, 3))
        self.channel_scale_ = np.where(std > 0, std, 1.0)
        xt = torch.as_tensor(self._standardise(X), dtype=torch.float32)
        yt = torch.as_tensor(y_idx, dtype=torch.long)
        order = np.random.default_rng(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = _MatrixNet(self.n_channels_, self.channels, len(self.classes_))
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        loss_fn = nn.CrossEntropyLoss()
        net.train()
        old_threads = torch.get_num_threads()
        if self.num_threads is not None:
            torch.set_num_threads(int(self.num_threads))
        try:
            for _ in range(self.epochs):
                perm = torch.as_tensor(order.permutation(len(xt)))
                for start in range(0, len(xt), self.batch_size):
                    idx = perm[start : start + self.batch_size]
                    opt.zero_grad()
                    loss = loss_fn(net(xt[idx]), yt[idx])
                    loss.backward()
                    opt.step()
        finally:
            torch.set_num_threads(old_threads)
        net.eval()
        self.net_ = net
        return self

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return (X - self.channel_mean_[None, :, None, None]) / self.channel_scale_[None, :, None, None]

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, (n_models, n_classes), columns in ``classes_`` order."""
        check_is_fitted(self, "net_", fit_call="fit(X_images, y)")
        X = _check_images(X, self.n_channels_)
        with torch.inference_mode():
            logits = self.net_(torch.as_tensor(self._standardise(X), dtype=torch.float32))
            return torch.softmax(logits, dim=1).double().numpy()

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels (n_models,)."""
        check_is_fitted(self, "net_", fit_call="fit(X_images, y)")
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


# --------------------------------------------------------------------------- formula baselines


def _check_correctness(C: Any) -> np.ndarray:
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[0] < 1:
        raise ValueError(f"correctness must be a (N images, n levels) boolean array, got shape {C.shape}")
    if C.dtype != bool:
        if not np.all((C == 0) | (C == 1)):
            raise ValueError("correctness must be boolean (or 0/1): True where the prediction is right")
        C = C.astype(bool)
    return C


def _window(n: int, identity_index: int | None, window: int | None) -> tuple[int, slice]:
    if identity_index is None:
        if n % 2 == 0:
            raise ValueError(f"{n} levels has no centre level; pass identity_index (position of the identity)")
        identity_index = n // 2
    if not 0 <= identity_index < n:
        raise ValueError(f"identity_index {identity_index} is outside the {n} levels")
    if window is None:
        return identity_index, slice(0, n)
    if window < 0 or identity_index - window < 0 or identity_index + window >= n:
        raise ValueError(f"window {window} around level {identity_index} leaves the {n} levels; "
                         f"use at most {min(identity_index, n - 1 - identity_index)}")
    return identity_index, slice(identity_index - window, identity_index + window + 1)


def accuracy_drop(C: Any, *, identity_index: int | None = None, window: int | None = None) -> float:
    """Accuracy at the identity minus the worst accuracy over the levels (≥ 0; higher = less
    invariant).

    Args:
        C: (N, n) boolean correctness of N images at n levels.
        identity_index: the identity's level position (default: the centre; n must be odd).
        window: use only the levels identity ± ``window`` (default: all levels).
    """
    C = _check_correctness(C)
    i0, levels = _window(C.shape[1], identity_index, window)
    acc = C.mean(axis=0)
    return float(acc[i0] - acc[levels].min())


def all_levels_correct_share(C: Any, *, identity_index: int | None = None, window: int | None = None) -> float:
    """Share of the images that are correct at every level (of identity ± ``window`` if given);
    higher = more invariant. Arguments as :func:`accuracy_drop`."""
    C = _check_correctness(C)
    _, levels = _window(C.shape[1], identity_index, window)
    return float(np.mean(np.all(C[:, levels], axis=1)))


def worst_level_accuracy(C: Any, *, identity_index: int | None = None, window: int | None = None) -> float:
    """The lowest accuracy over the levels (of identity ± ``window`` if given); higher = more
    invariant. Arguments as :func:`accuracy_drop`."""
    C = _check_correctness(C)
    _, levels = _window(C.shape[1], identity_index, window)
    return float(C.mean(axis=0)[levels].min())


def best_threshold(scores: Any, y: Any) -> tuple[int, float, float]:
    """The one-dimensional threshold rule of highest training accuracy.

    The rule predicts class 1 where ``direction · (score − threshold) > 0`` (direction +1:
    ``score > threshold``; −1: ``score < threshold``), class 0 elsewhere. Candidate thresholds
    are −inf, the midpoints between consecutive distinct scores, and +inf (so constant rules are
    included); a midpoint never equals a training score. Tie-break: among rules of equal
    accuracy, direction +1 comes before −1 and, within a direction, the smaller threshold first.

    Args:
        scores: (n,) finite scores.
        y: (n,) labels in {0, 1} (or booleans).

    Returns:
        ``(direction, threshold, training accuracy)``.
    """
    s = np.asarray(scores, dtype=np.float64)
    t = np.asarray(y)
    if s.ndim != 1 or t.shape != s.shape or s.size == 0:
        raise ValueError(f"scores and y must be 1-D and the same non-zero length, got {s.shape} and {t.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or inf")
    t = t.astype(bool)
    u = np.unique(s)
    candidates = np.concatenate([[-np.inf], (u[:-1] + u[1:]) / 2.0, [np.inf]])
    best = (1, -math.inf, -1.0)
    for direction in (1, -1):
        pred = (direction * (s[None, :] - candidates[:, None])) > 0
        acc = np.mean(pred == t[None, :], axis=1)
        k = int(np.argmax(acc))  # first maximum = smallest threshold
        if acc[k] > best[2]:
            best = (direction, float(candidates[k]), float(acc[k]))
    return best


class _ThresholdBaseline(ClassifierMixin, BaseEstimator):
    """A threshold on one per-model score from the correctness array, learned by
    :func:`best_threshold` on the training models (labels: ``classes_[1]`` is "class 1")."""

    input_kind = "correctness"
    _score_fn: Callable[..., float]

    def score_models(self, X: Any) -> np.ndarray:
        """The baseline's score of each model; ``X`` is a sequence of (N_m, n) correctness arrays
        (or one (n_models, N, n) array)."""
        if isinstance(X, np.ndarray) and X.ndim != 3:
            raise ValueError(f"correctness input must be a sequence of (N, n) arrays, got an array of shape {X.shape}")
        return np.array(
            [type(self)._score_fn(C, identity_index=self.identity_index, window=self.window) for C in X],
            dtype=np.float64,
        )

    def fit(self, X: Any, y: Any) -> _ThresholdBaseline:
        """Learn direction and threshold maximising training accuracy (binary labels only)."""
        scores = self.score_models(X)
        y = np.asarray(y)
        if y.shape != scores.shape:
            raise ValueError(f"y must have one label per model ({len(scores)}), got shape {y.shape}")
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        if len(self.classes_) != 2:
            raise ValueError(f"threshold baselines need exactly two classes, got {list(self.classes_)}")
        self.direction_, self.threshold_, self.train_accuracy_ = best_threshold(scores, y_idx)
        return self

    def _check_fitted(self) -> None:
        check_is_fitted(self, "threshold_", fit_call="fit(correctness, y)")

    def decision_function(self, X: Any) -> np.ndarray:
        """``direction · (score − threshold)``: positive means ``classes_[1]``."""
        self._check_fitted()
        return self.direction_ * (self.score_models(X) - self.threshold_)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Hard probabilities (0 or 1), columns in ``classes_`` order."""
        p1 = (self.decision_function(X) > 0).astype(np.float64)
        return np.stack([1.0 - p1, p1], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels."""
        self._check_fitted()
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


class AccuracyDropBaseline(_ThresholdBaseline):
    """Formula baseline (a): threshold on :func:`accuracy_drop` (identity vs worst level).

    Args:
        identity_index: the identity's level position (default: the centre level).
        window: use only identity ± ``window`` levels (default: all).
    """

    _score_fn = staticmethod(accuracy_drop)

    def __init__(self, identity_index: int | None = None, window: int | None = None) -> None:
        self.identity_index = identity_index
        self.window = window


class AllLevelsCorrectBaseline(_ThresholdBaseline):
    """Formula baseline (b): threshold on :func:`all_levels_correct_share` (images correct at
    every level). Arguments as :class:`AccuracyDropBaseline`."""

    _score_fn = staticmethod(all_levels_correct_share)

    def __init__(self, identity_index: int | None = None, window: int | None = None) -> None:
        self.identity_index = identity_index
        self.window = window


class WorstLevelAccuracyBaseline(_ThresholdBaseline):
    """Formula baseline (c): threshold on :func:`worst_level_accuracy` (the accuracy at the
    worst level; ML4ML's follow-up compares its assessors with a worst-case-accuracy rule).
    Arguments as :class:`AccuracyDropBaseline`."""

    _score_fn = staticmethod(worst_level_accuracy)

    def __init__(self, identity_index: int | None = None, window: int | None = None) -> None:
        self.identity_index = identity_index
        self.window = window


def _accuracy_drop_baseline(seed: int) -> AccuracyDropBaseline:
    return AccuracyDropBaseline()


def _all_levels_correct_baseline(seed: int) -> AllLevelsCorrectBaseline:
    return AllLevelsCorrectBaseline()


def _worst_level_accuracy_baseline(seed: int) -> WorstLevelAccuracyBaseline:
    return WorstLevelAccuracyBaseline()


BASELINES: dict[str, Callable[[int], Any]] = {
    "accuracy_drop": _accuracy_drop_baseline,
    "worst_level_accuracy": _worst_level_accuracy_baseline,
    "all_levels_correct": _all_levels_correct_baseline,
}
"""Formula baselines (identity at the centre level): ``name -> factory(seed)``; seed unused."""


# --------------------------------------------------------------------------- importances


def _final_step(estimator: Any) -> Any:
    return estimator.steps[-1][1] if isinstance(estimator, Pipeline) else estimator


def feature_importances(fitted: Any, names: Sequence[str]) -> list[tuple[str, float]]:
    """Feature importances of a fitted feature assessor, largest first (ties keep ``names`` order).

    Trees, forests and AdaBoost: scikit-learn's impurity-based ``feature_importances_`` (they sum
    to 1 unless no split was made, then all 0). Linear models: |coefficient| (mean over classes
    for more than two), normalised to sum to 1; the coefficients are per standard deviation of the
    feature when the model sits in a pipeline after a ``StandardScaler`` (as in
    :data:`ASSESSORS`), otherwise in raw feature units, which are not comparable across features.

    Raises:
        TypeError: for estimators without either attribute (the CNN, the baselines).
    """
    est = _final_step(fitted)
    if hasattr(est, "feature_importances_"):
        imp = np.asarray(est.feature_importances_, dtype=np.float64)
    elif hasattr(est, "coef_"):
        coef = np.abs(np.atleast_2d(np.asarray(est.coef_, dtype=np.float64))).mean(axis=0)
        total = coef.sum()
        imp = coef / total if total > 0 else coef
    else:
        raise TypeError(
            f"{type(est).__name__} has neither feature_importances_ nor coef_: fit a tree, forest, "
            "AdaBoost or linear assessor (the CNN and the baselines have no per-feature importances)"
        )
    names = list(names)
    if len(names) != imp.size:
        raise ValueError(f"got {len(names)} names for {imp.size} features")
    order = sorted(range(len(names)), key=lambda k: -imp[k])  # stable: ties keep names order
    return [(names[k], float(imp[k])) for k in order]


# --------------------------------------------------------------------------- bundle


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("orbitscope", "scikit-learn", "numpy", "torch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def _column_stats(X: np.ndarray, names: Sequence[str]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "mean": float(np.mean(col)),
            "std": float(np.std(col)),
            "min": float(np.min(col)),
            "max": float(np.max(col)),
        }
        for name, col in zip(names, X.T)
    }


_BUNDLE_FORMAT = "orbitscope-assessor-bundle"
_BUNDLE_VERSION = 1


@dataclass
class AssessorBundle:
    """A fitted assessor with everything needed to apply it to a new model later.

    Attributes:
        estimator: the fitted assessor.
        feature_names: names of its input columns (``"<matrix>/<feature>"`` for feature
            assessors, the matrix names for the CNN, empty for the baselines).
        label_source: how the training labels were made (e.g. ``"3 human raters, majority"``).
        matrix_names: the matrices each model provides, in order.
        orbit_spec: the transformation levels the matrices were built on (any JSON-like value,
            e.g. ``{"group": "rotation", "levels": [-15, …, 15]}``); apply the assessor only to
            matrices built the same way.
        feature_stats: per input column, the training set's mean, std, min and max (per matrix
            over all cells for the CNN), to tell whether a new model is inside the training range.
        input_kind: what the estimator consumes (see :data:`INPUT_KINDS`).
        versions: package versions at training time.
    """

    estimator: Any
    feature_names: list[str]
    label_source: str
    matrix_names: list[str]
    orbit_spec: Any
    feature_stats: dict[str, dict[str, float]] = field(default_factory=dict)
    input_kind: str = "features"
    versions: dict[str, str] = field(default_factory=_versions)

    @classmethod
    def train(
        cls,
        estimator: Any,
        X: Any,
        y: Any,
        *,
        feature_names: Sequence[str],
        label_source: str,
        matrix_names: Sequence[str],
        orbit_spec: Any,
    ) -> AssessorBundle:
        """Fit ``estimator`` on (``X``, ``y``) and record the training statistics.

        ``X`` is what the estimator consumes: features (n_models, n_features), images
        (n_models, n_matrices, n, n) or a sequence of correctness arrays.
        """
        kind = input_kind(estimator)
        feature_names = list(feature_names)
        stats: dict[str, dict[str, float]] = {}
        if kind == "features":
            Xa = np.asarray(X, dtype=np.float64)
            if Xa.ndim != 2 or Xa.shape[1] != len(feature_names):
                raise ValueError(f"X must be (n_models, {len(feature_names)}) to match feature_names, got {Xa.shape}")
            stats = _column_stats(Xa, feature_names)
        elif kind == "images":
            Xa = _check_images(X)
            if Xa.shape[1] != len(feature_names):
                raise ValueError(f"images have {Xa.shape[1]} matrices but {len(feature_names)} feature_names "
                                 "(give the matrix names)")
            stats = _column_stats(Xa.transpose(1, 0, 2, 3).reshape(Xa.shape[1], -1).T, feature_names)
        estimator.fit(X, y)
        return cls(
            estimator=estimator,
            feature_names=feature_names,
            label_source=label_source,
            matrix_names=list(matrix_names),
            orbit_spec=orbit_spec,
            feature_stats=stats,
            input_kind=kind,
        )

    def _check_input(self, X: Any) -> Any:
        if self.input_kind == "features":
            Xa = np.asarray(X, dtype=np.float64)
            if Xa.ndim == 1:
                Xa = Xa[None, :]
            if Xa.ndim != 2 or Xa.shape[1] != len(self.feature_names):
                raise ValueError(f"expected features of shape (n_models, {len(self.feature_names)}) in the order "
                                 f"of feature_names, got {Xa.shape}")
            return Xa
        return X

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of the stored estimator (columns in ``classes``)."""
        return np.asarray(self.estimator.predict_proba(self._check_input(X)))

    def predict(self, X: Any) -> np.ndarray:
        """Predicted labels of the stored estimator."""
        return np.asarray(self.estimator.predict(self._check_input(X)))

    @property
    def classes(self) -> list[Any]:
        """The labels, in ``predict_proba`` column order."""
        return list(self.estimator.classes_)

    def out_of_range(self, x: Any) -> list[str]:
        """Names of the features of one model (a 1-D vector in ``feature_names`` order) outside
        the training min…max: the assessor extrapolates there."""
        if self.input_kind != "features":
            raise TypeError("out_of_range applies to feature assessors only")
        v = self._check_input(x)[0]
        return [n for n, val in zip(self.feature_names, v)
                if not self.feature_stats[n]["min"] <= val <= self.feature_stats[n]["max"]]

    def save(self, path: str | PathLike[str]) -> None:
        """Write the bundle to ``path`` with joblib (a pickle)."""
        import joblib

        from ...trust import mark_trusted

        payload = {"format": _BUNDLE_FORMAT, "format_version": _BUNDLE_VERSION, **self.__dict__}
        joblib.dump(payload, path)
        mark_trusted(path)  # this user wrote it: loading it later needs no --trust

    @classmethod
    def load(cls, path: str | PathLike[str], *, trust: bool = False) -> AssessorBundle:
        """Read a bundle written by :meth:`save`.

        Security: the file is a pickle, and loading a pickle runs code chosen by whoever wrote
        it. Bundles this user saved load as they are; any other is refused unless ``trust=True``
        (see :mod:`orbitscope.trust`).

        Raises:
            UntrustedFileError: a bundle this user did not write, without ``trust=True``.
        """
        import joblib

        from ...trust import require_trust

        if not Path(path).is_file():
            raise FileNotFoundError(f"no assessor bundle at {path}")
        require_trust(path, "an assessor bundle (a joblib pickle)", trust)

        payload = joblib.load(path)
        if not isinstance(payload, dict) or payload.get("format") != _BUNDLE_FORMAT:
            raise ValueError(f"{path} is not an orbitscope assessor bundle (write one with AssessorBundle.save)")
        if payload.get("format_version") != _BUNDLE_VERSION:
            raise ValueError(f"{path} has bundle format version {payload.get('format_version')}; this orbitscope "
                             f"reads version {_BUNDLE_VERSION}: retrain and save the assessor again")
        fields = {k: v for k, v in payload.items() if k not in ("format", "format_version")}
        return cls(**fields)

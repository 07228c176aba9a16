"""From the model database to assessors, and from a new model to a verdict.

* :func:`assessment_data` reads every labelled model of a :class:`~orbitscope.ml4ml.modeldb.ModelDatabase`
  into features (ML4ML's 5 matrices × 16 = 80), matrix images and correctness arrays;
* :func:`compare_assessors` cross-validates the assessors, the matrix CNN and the formula
  baselines with whole families held out;
* :func:`fit_assessor` trains one assessor on all of them (an
  :class:`~orbitscope.ml4ml.assess.assessors.AssessorBundle`);
* :func:`assess_model` evaluates a new model over the bundle's orbit (one engine pass with an
  activation probe), computes its matrices and features and returns a :class:`Verdict`.

Matrix names are made independent of layer names: the last two probed layers are called
``penultimate`` and ``last`` (ML4ML probes a model's last two convolutions), so assessors trained
on the zoo apply to any architecture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..matrices import VarianceMatrices, identity_scale
from .assessors import ASSESSORS, BASELINES, AssessorBundle, MatrixCNNAssessor, feature_importances, input_kind
from .features import model_features
from .validation import CVReport, cross_validate_by_family

__all__ = [
    "INVARIANCES",
    "InvarianceComparison",
    "compare_invariances",
    "assessor_vs_baseline",
    "CANONICAL_MATRICES",
    "POSITIVE",
    "canonical_matrices",
    "AssessmentData",
    "AssessmentRecord",
    "FEATURE_SETS",
    "RELATIVE",
    "model_record",
    "assessment_data",
    "compare_assessors",
    "fit_assessor",
    "Verdict",
    "assess_model",
]

#: ML4ML's five matrices per model, with layer-independent names.
CANONICAL_MATRICES = ("top1_confidence", "penultimate:max", "penultimate:max-mean", "last:max", "last:max-mean")
#: The label an assessor's probability refers to.
POSITIVE = "invariant"


def canonical_matrices(vm: VarianceMatrices) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """ML4ML's five matrices (and their signals) of ``vm`` under :data:`CANONICAL_MATRICES` names."""
    layers: list[str] = []
    for name in vm.names:
        if ":" in name and name.rsplit(":", 1)[0] not in layers:
            layers.append(name.rsplit(":", 1)[0])
    if len(layers) < 2:
        raise ValueError(f"ML4ML needs activation statistics of two layers; the matrices have {vm.names}")
    rename = {layers[-2]: "penultimate", layers[-1]: "last"}
    mats, sigs = {}, {}
    for i, name in enumerate(vm.names):
        layer, _, stat = name.rpartition(":")
        canon = f"{rename[layer]}:{stat}" if layer in rename else name
        if canon in CANONICAL_MATRICES:
            mats[canon], sigs[canon] = vm.matrices[i], vm.signals[i]
    missing = [n for n in CANONICAL_MATRICES if n not in mats]
    if missing:
        raise ValueError(f"missing matrices {missing} (have {vm.names}); compute top1_confidence and the max and "
                         "max-mean statistics of the last two probed layers")
    return {n: mats[n] for n in CANONICAL_MATRICES}, {n: sigs[n] for n in CANONICAL_MATRICES}


def _features(vm: VarianceMatrices) -> tuple[list[str], np.ndarray, np.ndarray]:
    mats, sigs = canonical_matrices(vm)
    names, x = model_features(mats, sigs)
    return names, x, np.stack([mats[n] for n in CANONICAL_MATRICES])


#: Prefix of the relative activation matrices' feature names.
RELATIVE = "rel:"
#: Which features assessors read: ML4ML's 80 of the raw matrices, the 80 with the four
#: activation matrices made relative to the signal's mean absolute value at the identity, or both.
FEATURE_SETS = ("raw", "relative", "both")


def _relative_features(vm: VarianceMatrices) -> tuple[list[str], np.ndarray]:
    """The 80 features with each activation matrix and its signal divided by the signal's mean
    absolute value at the identity (:func:`~orbitscope.ml4ml.matrices.identity_scale`): activation
    scales differ between architectures, which held-out families then meet out of range. The
    confidence matrix is unchanged (already on a common 0…1 scale); its features keep their names."""
    mats, sigs = canonical_matrices(vm)
    rel_m, rel_s = {}, {}
    for name in CANONICAL_MATRICES:
        key = name if ":" not in name else RELATIVE + name
        ref = identity_scale(sigs[name], vm.identity) if ":" in name else 1.0
        rel_m[key] = mats[name] / ref if ref > 0 else np.zeros_like(mats[name])
        rel_s[key] = sigs[name] / ref if ref > 0 else np.zeros_like(sigs[name])
    return model_features(rel_m, rel_s)


@dataclass(frozen=True)
class AssessmentRecord:
    """What the assessors and baselines read of one model for one invariance.

    Attributes:
        feature_names: the 80 feature names (:func:`orbitscope.ml4ml.assess.model_features`).
        features: (80,) float64 feature values.
        relative_names, relative_features: the same of the relative activation matrices
            (:data:`FEATURE_SETS`; activation features named ``rel:<matrix>/<feature>``).
        matrices: (5, n, n) ML4ML's five matrices (:data:`CANONICAL_MATRICES` order).
        correct: (N, n) bool, every test image's correctness at every level.
        identity: index of the identity level.
        levels: (n,) the levels.
    """

    feature_names: list[str]
    features: np.ndarray
    matrices: np.ndarray
    correct: np.ndarray
    identity: int
    levels: np.ndarray
    relative_names: list[str]
    relative_features: np.ndarray

    @classmethod
    def from_matrices(cls, vm: VarianceMatrices) -> "AssessmentRecord":
        """The record of a model's variance matrices (features computed here)."""
        names, x, img = _features(vm)
        rel_names, rel = _relative_features(vm)
        return cls(names, x, img, vm.correct, vm.identity, np.asarray(vm.levels), rel_names, rel)

    def feature_set(self, which: str = "raw") -> tuple[list[str], np.ndarray]:
        """``(names, values)`` of one of :data:`FEATURE_SETS`."""
        if which == "raw":
            return self.feature_names, self.features
        if which == "relative":
            return self.relative_names, self.relative_features
        if which == "both":
            extra = [i for i, n in enumerate(self.relative_names) if n.startswith(RELATIVE)]
            return ([*self.feature_names, *(self.relative_names[i] for i in extra)],
                    np.concatenate([self.features, self.relative_features[extra]]))
        raise ValueError(f"features must be one of {FEATURE_SETS}, got {which!r}")


def model_record(model: Any, invariance: str) -> AssessmentRecord:
    """The :class:`AssessmentRecord` of a database model for ``invariance``: computed from its
    matrices file (a :class:`~orbitscope.ml4ml.modeldb.ZooModel`), or as stored (a
    :class:`~orbitscope.ml4ml.study.StudyModel`, whose ``records`` hold them)."""
    stored = getattr(model, "records", None)
    if stored is not None:
        return stored[invariance]
    return AssessmentRecord.from_matrices(model.load_matrices(invariance))


@dataclass
class AssessmentData:
    """Labelled models ready for assessors (row i = model ``model_ids[i]``)."""

    model_ids: list[str]
    families: np.ndarray
    labels: list[str]
    y: np.ndarray  # 1 = invariant, 0 = not invariant
    X: np.ndarray  # (models, 80) features (144 for features="both")
    feature_names: list[str]
    images: np.ndarray  # (models, 5, n, n) matrices
    correctness: list[np.ndarray]  # per model (N, n) correctness of all test images
    identity: int
    orbit: Any
    label_source: str

    @property
    def n_models(self) -> int:
        return len(self.model_ids)


def assessment_data(db: Any, *, labels: str = "provenance", labeller: str | None = None,
                    borderline: str = "drop", invariance: str = "rotation", features: str = "raw") -> AssessmentData:
    """Features, matrix images and labels of every model of ``db`` labelled by ``labels`` for
    ``invariance`` (``rotation``, ``brightness`` or ``scale``: the models assessed for it).

    Args:
        db: a :class:`~orbitscope.ml4ml.modeldb.ModelDatabase`, or a
            :class:`~orbitscope.ml4ml.study.Study` read from a study file.
        labels: ``"provenance"`` or ``"human"``.
        labeller: for human labels, whose (default: the most recent label of each model).
        borderline: what ``borderline`` labels become: ``"drop"`` (default), ``"invariant"`` or
            ``"not-invariant"``.
        features: ``"raw"`` (ML4ML's 80), ``"relative"`` or ``"both"`` (:data:`FEATURE_SETS`).
    """
    if features not in FEATURE_SETS:
        raise ValueError(f"features must be one of {FEATURE_SETS}, got {features!r}")
    if borderline not in ("drop", "invariant", "not-invariant"):
        raise ValueError(f"borderline must be 'drop', 'invariant' or 'not-invariant', got {borderline!r}")
    if invariance not in INVARIANCES:
        raise ValueError(f"invariance must be 'rotation', 'brightness' or 'scale', got {invariance!r}")
    rows = []
    for m in db.models():
        if invariance not in m.invariances:
            continue
        label = m.label(labels, labeller, invariance)
        if label == "borderline":
            label = None if borderline == "drop" else borderline
        if label is not None:
            rows.append((m, label))
    if not rows:
        who = f" by {labeller}" if labeller else ""
        raise ValueError(f"no models with {labels} labels{who} for {invariance} in the model database at "
                         f"{db.location}; build a zoo (orbitscope zoo train) or label models (orbitscope zoo label)")
    ids, fams, labs, xs, imgs, cs = [], [], [], [], [], []
    names: list[str] = []
    identity, orbit = -1, None
    for m, label in rows:
        rec = model_record(m, invariance)
        names, x = rec.feature_set(features)
        ids.append(m.model_id)
        fams.append(m.family)
        labs.append(label)
        xs.append(x)
        imgs.append(rec.matrices)
        cs.append(rec.correct)
        identity = rec.identity
        if invariance == "rotation":
            orbit = m.provenance.get("test_orbit")
        else:
            from ..zoo import ML4ML_TESTS

            orbit = ML4ML_TESTS[invariance][0]
    if len({img.shape for img in imgs}) > 1:
        raise ValueError("models have matrices of different sizes (different test orbits); assess one orbit at a time")
    source = labels + (f" by {labeller}" if labeller else "")
    return AssessmentData(ids, np.asarray(fams), labs, np.array([lb == POSITIVE for lb in labs], dtype=int),
                          np.stack(xs), names, np.stack(imgs), cs, identity, orbit, source)


def _estimators(include_cnn: bool, identity: int) -> dict[str, Any]:
    makers: dict[str, Any] = dict(ASSESSORS)
    if include_cnn:
        makers["matrix_cnn"] = lambda seed: MatrixCNNAssessor(seed=seed)
    for name, make in BASELINES.items():
        makers[f"baseline:{name}"] = (lambda mk: (lambda seed: mk(seed).set_params(identity_index=identity)))(make)
    return makers


def compare_assessors(data: AssessmentData, *, repeats: int = 10, folds: int = 3, seed: int = 0,
                      include_cnn: bool = True) -> CVReport:
    """Cross-validate every assessor and the formula baselines with whole families held out
    (see :func:`orbitscope.ml4ml.assess.validation.cross_validate_by_family`)."""
    if len(set(data.y.tolist())) < 2:
        raise ValueError(f"all {data.n_models} labelled models have the same label; assessors need both classes")
    return cross_validate_by_family(data.X, data.y, data.families, make_estimators=_estimators(include_cnn, data.identity),
                                    repeats=repeats, folds=folds, seed=seed, images=data.images,
                                    correctness=data.correctness)


def assessor_vs_baseline(report: CVReport) -> Any:
    """The paired test (:meth:`~orbitscope.ml4ml.assess.validation.CVReport.best_against_best`)
    of the report's best assessor against its best formula baseline (``baseline:*``)."""
    baselines = [n for n in report.names if n.startswith("baseline:")]
    assessors = [n for n in report.names if n not in baselines]
    if not baselines or not assessors:
        raise ValueError(f"a paired test needs an assessor and a baseline; the report has {report.names}")
    return report.best_against_best(assessors, baselines)


#: The invariances a model database can hold (ML4ML's three tests).
INVARIANCES = ("rotation", "brightness", "scale")


@dataclass
class InvarianceComparison:
    """Assessors against baselines for one invariance: the labelled models (``data``), the
    cross-validation (``report``) and the paired test of the best assessor against the best
    baseline (``test``; None with ``note`` saying why, e.g. one label only)."""

    invariance: str
    data: AssessmentData | None
    report: CVReport | None
    test: Any = None
    note: str = ""

    def test_line(self) -> str:
        """The paired test in one line (:meth:`~orbitscope.ml4ml.assess.validation.PairedTest.sentence`),
        or why there is none."""
        if self.test is None:
            return f"best assessor vs best baseline: no paired test ({self.note})"
        return self.test.sentence()


def compare_invariances(db: Any, invariances: Sequence[str] = INVARIANCES, *, labels: str = "provenance",
                        labeller: str | None = None, borderline: str = "drop", repeats: int = 10, folds: int = 3,
                        seed: int = 0, include_cnn: bool = False, features: str = "raw") -> list[InvarianceComparison]:
    """:func:`compare_assessors` for each invariance of ``db`` (the same folds design and seed),
    with the best assessor tested against the best baseline by the corrected resampled t-test
    (:meth:`~orbitscope.ml4ml.assess.validation.CVReport.best_against_best`). An invariance
    without labelled models or with one label only is reported with its reason, not raised."""
    out = []
    for inv in invariances:
        try:
            data = assessment_data(db, labels=labels, labeller=labeller, borderline=borderline, invariance=inv,
                                   features=features)
            report = compare_assessors(data, repeats=repeats, folds=folds, seed=seed, include_cnn=include_cnn)
        except ValueError as exc:
            out.append(InvarianceComparison(inv, None, None, note=str(exc)))
            continue
        try:
            test = assessor_vs_baseline(report)
        except ValueError as exc:  # fewer than two tested splits
            out.append(InvarianceComparison(inv, data, report, note=str(exc)))
            continue
        out.append(InvarianceComparison(inv, data, report, test))
    return out


def fit_assessor(data: AssessmentData, name: str = "random_forest", *, seed: int = 0) -> AssessorBundle:
    """Train assessor ``name`` (a key of :data:`ASSESSORS`, ``"matrix_cnn"``) on all of ``data``."""
    makers = _estimators(True, data.identity)
    if name not in makers or name.startswith("baseline:"):
        raise ValueError(f"unknown assessor {name!r}; choose from {', '.join(n for n in makers if ':' not in n)}")
    est = makers[name](seed)
    kind = input_kind(est)
    X = data.X if kind == "features" else data.images
    names = data.feature_names if kind == "features" else list(CANONICAL_MATRICES)
    return AssessorBundle.train(est, X, data.y, feature_names=names, label_source=data.label_source,
                                matrix_names=list(CANONICAL_MATRICES), orbit_spec=data.orbit)


@dataclass
class Verdict:
    """An assessor's judgement of one model.

    Attributes:
        label: ``"invariant"`` or ``"not-invariant"``.
        probability: the assessor's probability that the model is invariant.
        top_features: up to ten ``(feature, importance, value, training min, training max)``, most
            important first (feature assessors only).
        out_of_range: features outside the training range (the assessor extrapolates there).
        matrices: the model's variance matrices.
        metrics: accuracy at identity and worst level, share correct at every level.
    """

    label: str
    probability: float
    top_features: list[tuple[str, float, float, float, float]]
    out_of_range: list[str]
    matrices: VarianceMatrices
    metrics: dict[str, Any] = field(default_factory=dict)


def assess_model(model: Any, bundle: AssessorBundle, data: Any, *, orbit: str | None = None,
                 layers: Sequence[str] = ("last-conv-2",), normalize: Any = None,
                 model_name: str | None = None) -> Verdict:
    """Evaluate ``model`` on ``data`` over the bundle's orbit and judge it with ``bundle``."""
    from ..zoo import model_matrices

    if orbit is not None and isinstance(bundle.orbit_spec, str) and orbit != bundle.orbit_spec:
        raise ValueError(f"the assessor was trained on matrices over {bundle.orbit_spec!r}; judging matrices over "
                         f"{orbit!r} with it would be meaningless. Train an assessor on a zoo with that test orbit")
    orbit = orbit or bundle.orbit_spec
    if not isinstance(orbit, str):
        raise ValueError("the assessor bundle does not record its orbit; pass orbit='rotation:-15:15:1' or similar")
    from ...engine.activations import ActivationProbe

    probe = ActivationProbe(tuple(layers)).resolve(model)
    probed = list(probe.layers)
    signals = ["top1_confidence"] + [f"{layer}:{st}" for layer in probed[-2:] for st in ("max", "max-mean")]
    vm, metrics = model_matrices(model, data, orbit, layers=probed, signals=signals, normalize=normalize,
                                 model_name=model_name)
    if vm.n_images < 2:
        raise ValueError(f"only {vm.n_images} test images are classified correctly at the identity; the matrices "
                         "need more (use more test images, or this model is not usable as is)")
    rec = AssessmentRecord.from_matrices(vm)
    img = rec.matrices
    if bundle.input_kind == "features":
        names, x = next(((n, v) for n, v in (rec.feature_set(k) for k in FEATURE_SETS) if n == bundle.feature_names),
                        (None, None))
        if names is None or x is None:
            raise ValueError("the assessor was trained on different features; retrain it with this orbitscope")
        proba = bundle.predict_proba(x[None, :])[0]
        stats = bundle.feature_stats
        top = [(n, imp, float(x[names.index(n)]), stats[n]["min"], stats[n]["max"])
               for n, imp in feature_importances(bundle.estimator, names)[:10]]
        outside = bundle.out_of_range(x)
    else:
        proba = bundle.predict_proba(img[None])[0]
        top, outside = [], []
    classes = [int(c) for c in bundle.classes]
    p = float(proba[classes.index(1)]) if 1 in classes else 0.0
    return Verdict("invariant" if p >= 0.5 else "not-invariant", p, top, outside, vm, metrics)

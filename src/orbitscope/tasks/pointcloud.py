"""Point-cloud classification (NERO's fourth case study): the same scores as image
classification, on clouds (B, N, 3) that the orbit rotates in 3-D, plus NERO's individual score.

``confidence`` is the softmax probability of the true class, as for images. NERO's individual
plots show another quantity, recorded here as ``nero_score`` (by default whenever the model's
outputs may be logits; see :class:`PointCloudClassification`): the true-class logit after
min–max normalisation **over the classes of that one prediction** (:func:`minmax_over_classes`),

    nero_score = (z_true - min_c z_c) / (max_c z_c - min_c z_c),

so it is 1 exactly where the true class has the largest logit (the prediction is right, barring
ties) and below 1 elsewhere. It depends only on the ordering and spacing of one output's logits,
not on the orbit or on other samples.

:func:`minmax_over_orbit` is a different normalisation, kept as a stated alternative: the raw
true-class logit (``store_logit=True`` records it as ``true_logit``) min–max normalised per
sample over its *orbit*. It is relative to each sample's own orbit, so it cannot be compared
across samples or models, and it is 0/1 at the worst/best element of every sample by
construction. It is not NERO's normalisation (its old name, ``orbit_minmax``, is a deprecated
alias).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np
import torch
import xarray as xr
from torch import Tensor

from ..group.elements import Transforms
from .base import register_task
from .classification import Classification, to_probabilities
from .variables import Variable

__all__ = ["PointCloudClassification", "minmax_over_classes", "minmax_over_orbit", "orbit_minmax"]

_TRUE_LOGIT = Variable("true_logit", "float32", description="the model's raw score (logit) for the true class",
                       kind="real", label="true-class logit")
_NERO_SCORE = Variable("nero_score", "float32", kind="probability",
                       description="the true-class logit min–max normalised over the classes of one prediction "
                                   "(NERO's individual score): 1 where the true class has the largest logit",
                       label="true-class logit, min–max over classes (NERO)")
#: the value of :func:`minmax_over_classes` where every class has the same logit (NERO's
#: ``lerp`` divides by zero there): no class is preferred, so halfway
TIED_SCORE = 0.5
#: the largest value below 1 that a float32 ``nero_score`` takes where the true class is not a
#: largest logit (so ``nero_score == 1`` exactly where it is one)
_BELOW_ONE = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def minmax_over_classes(scores: Tensor, labels: Tensor) -> Tensor:
    """NERO's individual point-cloud score: each row's true-class score min–max normalised over
    that row's classes, ``(z[y] - min_c z[c]) / (max_c z[c] - min_c z[c])``.

    Convention: ``scores`` are logits (any per-row shift or positive scale of them gives the same
    values, so log-softmax outputs and log-probabilities of a softmax do too); not probabilities,
    whose min–max is a different quantity. A row whose classes all score the same gives 0.5
    (``TIED_SCORE``; NERO's formula divides by zero there). Where the true class holds the row's largest score the value is
    exactly 1; elsewhere it is below 1 (at most the float32 just below 1) and at least 0. A row
    with a non-finite score gives NaN.

    Args:
        scores: (N, classes) logits.
        labels: (N,) true classes, integers in ``[0, classes)``.

    Returns:
        (N,) float32 values in [0, 1] (NaN for rows with non-finite scores).
    """
    z = scores.double()
    y = labels.to(z.device).long().reshape(-1, 1)
    true = z.gather(1, y)[:, 0]
    lo, hi = torch.aminmax(z, dim=1)  # one pass for both (the engine scores every slice of rows)
    span = hi - lo
    # rows with span 0 divide by 0 here and take TIED_SCORE below
    value = torch.where(true >= hi, 1.0, ((true - lo) / span).clamp(0.0, _BELOW_ONE))
    value = torch.where(span > 0, value, TIED_SCORE)
    return torch.where(torch.isfinite(z).all(dim=1), value, float("nan")).float()


def _rows_are_probabilities(outputs: Tensor, mode: str) -> bool:
    """Whether :func:`~orbitscope.tasks.to_probabilities` reads this batch as probabilities."""
    if mode != "auto":
        return mode == "probabilities"
    try:
        to_probabilities(outputs, "probabilities")  # raises unless the rows look like probabilities
    except ValueError:
        return False
    return True


@register_task
@dataclass(frozen=True)
class PointCloudClassification(Classification):
    """Classification of point clouds (B, N, 3): right-handed (x, y, z), normalised as NERO did
    (centroid at the origin, largest norm 1); the label is invariant under rotation.

    Records :class:`~orbitscope.tasks.Classification`'s variables and, when ``nero_score`` is
    on, ``nero_score``: NERO's individual score (:func:`minmax_over_classes` of the model's
    outputs; the module docstring). It needs logits, and the task must declare its variables
    before it sees any output, so it is an option, resolved at construction:

    * ``nero_score="auto"`` (default): on unless ``output="probabilities"`` (a model declared to
      return probabilities has no logits to read);
    * ``True`` / ``False``: always / never.

    Where a batch is read as probabilities (``output="probabilities"``, or ``"auto"`` and rows
    that are non-negative and sum to 1), the score is computed from their logarithms: for a
    softmax, ``log p_c = z_c - logsumexp(z)`` is a per-row shift of the logits, which the min–max
    removes, so the value is NERO's up to rounding; a row holding a probability of exactly 0 (an
    underflowed softmax) has lost its logits' spread and gives NaN. Probabilities that are not a
    softmax of logits (e.g. an average of softmaxes) give a min–max of their log-probabilities.

    Args:
        output: as :class:`~orbitscope.tasks.Classification`.
        store_probabilities: as :class:`~orbitscope.tasks.Classification`.
        store_logit: also record ``true_logit`` (the raw score of the true class), e.g. for
            :func:`minmax_over_orbit`; needs logit outputs.
        nero_score: ``"auto"``, True or False (see above); after construction a bool.
    """

    store_logit: bool = False
    nero_score: bool | Literal["auto"] = "auto"
    kind: str = field(default="pointcloud", init=False)
    input_kind = "points"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.nero_score == "auto":
            object.__setattr__(self, "nero_score", self.output != "probabilities")
        elif not isinstance(self.nero_score, (bool, np.bool_)):
            raise ValueError(f"nero_score must be 'auto', True or False, got {self.nero_score!r}")
        object.__setattr__(self, "nero_score", bool(self.nero_score))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "PointCloudClassification":
        # runs stored before nero_score existed have no key: they did not record it
        return cls(output=spec.get("output", "auto"), store_probabilities=bool(spec.get("store_probabilities", False)),
                   store_logit=bool(spec.get("store_logit", False)), nero_score=bool(spec.get("nero_score", False)))

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        return [*super().variables(num_outputs), *([_TRUE_LOGIT] if self.store_logit else []),
                *([_NERO_SCORE] if self.nero_score else [])]

    def score(self, outputs: Tensor, targets: Tensor, g: Transforms | None = None) -> dict[str, Tensor]:
        res = super().score(outputs, targets, g)
        if self.store_logit:
            res["true_logit"] = outputs.float().gather(1, targets.to(outputs.device).long().reshape(-1, 1))[:, 0]
        if self.nero_score:
            scores = outputs.float()
            if _rows_are_probabilities(scores, self.output):
                scores = torch.log(scores)  # -inf where a probability is 0: NaN (see the class docstring)
            res["nero_score"] = minmax_over_classes(scores, targets)
        return res

    def spec(self) -> dict[str, Any]:
        # ``nero_score`` only when on: runs stored before it existed keep their identity as runs
        # without it, and new default runs (which record it) get a new one
        return {**super().spec(), "store_logit": self.store_logit, **({"nero_score": True} if self.nero_score else {})}


def minmax_over_orbit(values: xr.DataArray) -> xr.DataArray:
    """Per-sample min–max normalisation over the orbit: for each sample, ``(v - min) / (max - min)``
    over all its orbit elements (0.5 where the sample is flat).

    This is *not* NERO's normalisation (NERO's individual point-cloud score normalises over the
    classes of each prediction: ``nero_score``, :func:`minmax_over_classes`). Its values are
    relative to each sample's own orbit: 0 at its worst element and 1 at its best by
    construction, so they cannot be compared across samples or models.

    Args:
        values: a (sample, *orbit dims) array such as ``result.data["true_logit"]``.

    Returns:
        The normalised values (float64, same dims), with probability-kind metadata in attrs.
    """
    dims = [d for d in values.dims if d != "sample"]
    v = values.astype(np.float64)
    lo, hi = v.min(dims), v.max(dims)
    span = hi - lo
    out = xr.where(span > 0, (v - lo) / span.where(span > 0, 1.0), 0.5)
    out.attrs = {"kind": "probability", "lower_is_better": 0, "needs_labels": 1,
                 "label": f"{values.attrs.get('label', values.name)}, min–max over the orbit", "unit": "",
                 "description": "per-sample min–max normalised over the sample's own orbit (relative to that "
                                "sample; not NERO's normalisation, which is over the classes: nero_score)"}
    return out.transpose(*values.dims)


def orbit_minmax(values: xr.DataArray) -> xr.DataArray:
    """Deprecated alias of :func:`minmax_over_orbit` (the old name wrongly suggested NERO's
    normalisation, which is over the classes: ``nero_score``).

    Args:
        values: as :func:`minmax_over_orbit`.

    Returns:
        As :func:`minmax_over_orbit`.
    """
    warnings.warn("orbit_minmax is deprecated: use minmax_over_orbit (a min–max over the sample's orbit, not "
                  "NERO's score; NERO's is the task's nero_score)", DeprecationWarning, stacklevel=2)
    return minmax_over_orbit(values)

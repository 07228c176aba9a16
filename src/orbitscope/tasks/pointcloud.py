"""Point-cloud classification (NERO's fourth case study): the same scores as image
classification, on clouds (B, N, 3) that the orbit rotates in 3-D.

Confidence is the softmax probability of the true class (``confidence``), as for images. NERO's
individual plots used the true-class *logit* instead, min–max normalised per sample over its
orbit; with ``store_logit=True`` the raw true-class logit is recorded as ``true_logit`` and
:func:`orbit_minmax` gives that normalisation as a stated alternative (it is relative to the
sample's own orbit, so it cannot be compared across samples or models, and it is 0/1 at the
worst/best element of every sample by construction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import xarray as xr
from torch import Tensor

from ..group.elements import Transforms
from .base import register_task
from .classification import Classification
from .variables import Variable

__all__ = ["PointCloudClassification", "orbit_minmax"]

_TRUE_LOGIT = Variable("true_logit", "float32", description="the model's raw score (logit) for the true class",
                       kind="real", label="true-class logit")


@register_task
@dataclass(frozen=True)
class PointCloudClassification(Classification):
    """Classification of point clouds (B, N, 3): right-handed (x, y, z), normalised as NERO did
    (centroid at the origin, largest norm 1); the label is invariant under rotation.

    Args:
        output: as :class:`~orbitscope.tasks.Classification`.
        store_probabilities: as :class:`~orbitscope.tasks.Classification`.
        store_logit: also record ``true_logit`` (the raw score of the true class) for NERO's
            min–max-normalised individual plots (:func:`orbit_minmax`); needs logit outputs.
    """

    store_logit: bool = False
    kind: str = field(default="pointcloud", init=False)
    input_kind = "points"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "PointCloudClassification":
        return cls(output=spec.get("output", "auto"), store_probabilities=bool(spec.get("store_probabilities", False)),
                   store_logit=bool(spec.get("store_logit", False)))

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        return [*super().variables(num_outputs), *([_TRUE_LOGIT] if self.store_logit else [])]

    def score(self, outputs: Tensor, targets: Tensor, g: Transforms | None = None) -> dict[str, Tensor]:
        res = super().score(outputs, targets, g)
        if self.store_logit:
            res["true_logit"] = outputs.float().gather(1, targets.to(outputs.device).long().reshape(-1, 1))[:, 0]
        return res

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "store_logit": self.store_logit}


def orbit_minmax(values: xr.DataArray) -> xr.DataArray:
    """NERO's per-sample min–max normalisation over the orbit: for each sample,
    ``(v - min) / (max - min)`` over all its orbit elements (0.5 where the sample is flat).

    ``values``: a (sample, *orbit dims) array such as ``result.data["true_logit"]``."""
    dims = [d for d in values.dims if d != "sample"]
    v = values.astype(np.float64)
    lo, hi = v.min(dims), v.max(dims)
    span = hi - lo
    out = xr.where(span > 0, (v - lo) / span.where(span > 0, 1.0), 0.5)
    out.attrs = {"kind": "probability", "lower_is_better": 0, "needs_labels": 1,
                 "label": f"{values.attrs.get('label', values.name)}, min–max over the orbit", "unit": "",
                 "description": "per-sample min–max normalised over the orbit (NERO's individual plots)"}
    return out.transpose(*values.dims)

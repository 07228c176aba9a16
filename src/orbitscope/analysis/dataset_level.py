"""Dataset-level metrics as plottable metrics, with bootstrap intervals over samples.

A dataset-level metric is one number per orbit element computed from *all* samples at once by the
task's ``compute`` (:func:`orbitscope.results.dataset_metrics`): classification's class-mean
accuracy, detection's AP@0.5, COCO mAP, NERO's mean(confidence)·mean(IoU), and so on. It has no
per-sample value, so it has no individual NERO plot, no per-sample ranking and no Student-t or
Wilson band. Its uncertainty is estimated here by the **percentile bootstrap over samples**:
``n_boot`` resamples of the samples with replacement (the same resamples at every orbit element,
drawn from a fixed seed, so a plot is reproducible), the metric recomputed on each, and the
``(1 − level)/2`` and ``(1 + level)/2`` quantiles of the finite replicates as the interval (Efron
& Tibshirani 1993, ch. 13). A replicate in which the metric is undefined (e.g. no ground truth in
view) is left out of that element's quantiles.

A stored run keeps each computed interval in its store's aggregate cache (keyed by metric, subset,
level, resamples and seed), so a plot or report drawn again reads it back. The replicates are
computed by the task's
:meth:`~orbitscope.tasks.Task.compute_resampled`: by default one ``compute`` per resample; a task
may vectorise it (classification does).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import xarray as xr

from ..errors import NotFoundError
from ..results.metric_lookup import dataset_metric_names
from ..results.result import OrbitResult, dataset_states
from ..tasks.variables import Variable

__all__ = ["DEFAULT_BOOTSTRAP", "dataset_metric_names", "is_dataset_metric", "dataset_interval",
           "bootstrap_counts"]

#: resamples of the bootstrap interval of a dataset-level metric
DEFAULT_BOOTSTRAP = 200


def is_dataset_metric(result: OrbitResult, metric: str) -> bool:
    """Whether ``metric`` is one of ``result``'s dataset-level metrics (and not a stored variable)."""
    return metric in dataset_metric_names(result)


def bootstrap_counts(n_samples: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """(n_boot, n_samples) int64: how often each sample is drawn in each resample (multinomial,
    n_samples draws with replacement), from ``numpy.random.default_rng(seed)``."""
    if n_samples < 1:
        raise ValueError("no samples to resample")
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_samples, np.full(n_samples, 1.0 / n_samples), size=n_boot).astype(np.int64)


def dataset_interval(result: OrbitResult, metric: str, *, subset: Any = None, level: float = 0.95,
                     n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> xr.Dataset:
    """A dataset-level metric per orbit element with its percentile-bootstrap interval.

    Args:
        result: an orbit run whose task declares ``metric`` as dataset-level.
        metric: e.g. ``"class_accuracy"``, ``"ap50"``, ``"nero_conf_iou"``.
        subset: boolean mask or index array over samples (e.g. one class); None: all.
        level: confidence level of the interval, in (0, 1).
        n_boot: bootstrap resamples (0: no interval; ``lower`` and ``upper`` are NaN).
        seed: seed of the resamples.

    Returns:
        Dataset over the orbit dims with ``mean`` (the metric on the samples themselves),
        ``lower``, ``upper``; ``attrs["n"]`` samples, ``attrs["method"]`` the interval.

    Raises:
        NotFoundError: ``metric`` is not a dataset-level metric of this run.
        ValueError: ``level`` outside (0, 1), negative ``n_boot``, or an empty subset.
    """
    if not is_dataset_metric(result, metric):
        names = dataset_metric_names(result)
        raise NotFoundError(f"{metric!r} is not a dataset-level metric of this run; it has: "
                            f"{', '.join(names) if names else 'none'}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be 0 (no interval) or more, got {n_boot}")
    task = result.task()
    dims = result.orbit_dims
    n = int(np.arange(result.n_samples)[np.asarray(subset)].size) if subset is not None else result.n_samples
    if n == 0:
        raise ValueError("the subset selects no samples")

    def compute() -> np.ndarray:
        _, _, states = dataset_states(result, subset)
        point = np.asarray(task.compute(states, len(dims))[metric], dtype=np.float64)
        if not n_boot:
            return np.stack([point, np.full(point.shape, np.nan), np.full(point.shape, np.nan)])
        reps = np.asarray(task.compute_resampled(states, len(dims), bootstrap_counts(n, n_boot, seed), metric),
                          dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an element undefined in every resample: NaN
            return np.stack([point, *np.nanquantile(reps, [(1 - level) / 2, (1 + level) / 2], axis=0)])

    reads = [v for v in (task.compute_reads or list(result.data.data_vars)) if v in result.data]
    point, lower, upper = result.cached_array(f"dataset-interval:{metric}:{level!r}:{n_boot}:{seed}", reads, compute,
                                              subset=subset)
    method = (f"percentile bootstrap over samples, {level:.0%}, {n_boot} resamples" if n_boot
              else "no interval (n_boot=0)")
    coords = {d: result.data.coords[d].values for d in dims}
    meta: Variable | None = task.variable(metric)
    attrs = meta.attrs() if meta is not None else {}
    return xr.Dataset({"mean": (dims, point, attrs), "lower": (dims, lower), "upper": (dims, upper)},
                      coords=coords, attrs={"n": int(n), "method": method, "metric": metric})

"""Evaluation results: a labelled array over ``sample`` × orbit dims, with provenance.

:class:`OrbitResult` wraps an :class:`xarray.Dataset` whose data variables are the task's
variables (e.g. ``confidence``, ``correct``) with dims ``("sample", *orbit.dims, *extra)`` and
whose ``attrs`` hold provenance (model id and hash, data id, orbit and task specs, package
versions, creation time, seed). Attribute access falls through to the dataset, so
``result.confidence.sel(angle=90)`` works.

Aggregates carry confidence intervals:

* binary variables (``correct``): the **Wilson score interval** for a binomial proportion;
* continuous variables (``confidence`` …): the **Student-t interval** for the mean,
  mean ± t_{1-a/2, n-1} · s / sqrt(n) (CLT approximation), clipped to [0, 1] when the variable
  is a probability.

Which applies is read from the variable's metadata (its kind, see
:mod:`orbitscope.tasks.variables`), which every result carries in its variables' attrs.
Dataset-level metrics that are not means of per-sample values (e.g. class-mean accuracy, AP)
come from the task's ``compute`` over per-sample states: :func:`dataset_metrics`.
"""

from __future__ import annotations

from ..errors import NotFoundError

import json
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from ..group.orbits import Orbit, orbit_from_spec
from ..tasks.variables import ENGINE_VARIABLES, Variable, variable_meta

__all__ = ["OrbitResult", "wilson_interval", "mean_interval", "aggregate", "assemble_result", "check_same_orbit",
           "variable_info", "declared_variable", "task_of", "dataset_metrics"]



def wilson_interval(successes: np.ndarray, n: np.ndarray | int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion (elementwise); n = 0 gives (0, 1)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    k = np.asarray(successes, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    z = stats.norm.ppf(0.5 + level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n_arr
        denom = 1 + z * z / n_arr
        centre = (p + z * z / (2 * n_arr)) / denom
        half = z * np.sqrt(p * (1 - p) / n_arr + z * z / (4 * n_arr * n_arr)) / denom
    lo = np.where((n_arr > 0) & (k > 0), centre - half, 0.0)  # exact 0 / 1 at k = 0 / k = n
    hi = np.where((n_arr > 0) & (k < n_arr), centre + half, 1.0)
    return np.clip(lo, 0, 1), np.clip(hi, 0, 1)


def mean_interval(values: np.ndarray, axis: int = 0, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and Student-t confidence interval along ``axis`` (NaNs ignored)."""
    v = np.asarray(values, dtype=np.float64)
    n = np.sum(~np.isnan(v), axis=axis)
    mean = np.nanmean(v, axis=axis) if v.size else np.full(np.delete(v.shape, axis), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.nanstd(v, axis=axis, ddof=1) if v.shape[axis] > 1 else np.zeros_like(mean)
        t = stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1))
        half = np.where(n > 1, t * sd / np.sqrt(n), np.inf)
    return mean, mean - half, mean + half


def aggregate(data: xr.Dataset | "OrbitResult", variable: str, *, level: float = 0.95, subset: Any = None) -> xr.Dataset:
    """Mean of ``variable`` over samples, with a confidence interval per orbit element.

    Args:
        data: an :class:`OrbitResult` or its dataset.
        variable: e.g. ``"correct"`` (accuracy, Wilson interval) or ``"confidence"`` (t interval).
        level: confidence level of the interval.
        subset: optional boolean mask or index array over samples (e.g. one class).

    Returns:
        Dataset with ``mean``, ``lower``, ``upper`` (orbit dims) and ``n``; ``attrs["method"]``
        names the interval.
    """
    ds = data.data if isinstance(data, OrbitResult) else data
    if variable not in ds:
        raise NotFoundError(f"no variable {variable!r} in this result; it has {sorted(ds.data_vars)}")
    da = ds[variable]
    if subset is not None:
        da = da.isel(sample=np.asarray(subset))
    axis = da.dims.index("sample")
    vals = da.values.astype(np.float64)
    n = vals.shape[axis]
    dims = [d for d in da.dims if d != "sample"]
    coords = {d: da.coords[d] for d in dims if d in da.coords}
    meta = variable_meta(da)
    if meta.kind == "state":
        raise ValueError(f"{variable!r} is a per-sample state ({meta.description or 'not a metric'}); it has no mean: "
                         "aggregate a metric, or use dataset_metrics() for dataset-level ones")
    if meta.kind == "binary":
        k = vals.sum(axis=axis)
        mean = k / n if n else np.full(k.shape, np.nan)
        lo, hi = wilson_interval(k, n, level)
        method = f"Wilson score interval, {level:.0%}"
    else:
        mean, lo, hi = mean_interval(vals, axis=axis, level=level)
        if meta.bounded:
            lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
        method = f"Student-t interval for the mean, {level:.0%}"
    return xr.Dataset(
        {"mean": (dims, mean), "lower": (dims, lo), "upper": (dims, hi)},
        coords=coords,
        attrs={"variable": variable, "n": int(n), "method": method, "level": level},
    )


class OrbitResult:
    """Results of evaluating one model over one orbit of one dataset."""

    def __init__(self, data: xr.Dataset) -> None:
        if "sample" not in data.dims:
            raise ValueError("an OrbitResult needs a 'sample' dimension")
        self.data = data

    # provenance ---------------------------------------------------------------------------
    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.data.attrs)

    @property
    def orbit(self) -> Orbit:
        return orbit_from_spec(json.loads(self.data.attrs["orbit"]))

    @property
    def orbit_dims(self) -> tuple[str, ...]:
        return tuple(json.loads(self.data.attrs["orbit_dims"]))

    @property
    def n_samples(self) -> int:
        return int(self.data.sizes["sample"])

    def __getattr__(self, name: str) -> Any:
        if name == "data":
            raise AttributeError(name)
        try:
            return self.data[name]
        except KeyError:
            return getattr(self.data, name)

    def __getitem__(self, name: str) -> xr.DataArray:
        return self.data[name]

    def __repr__(self) -> str:
        a = self.data.attrs
        return (
            f"OrbitResult(run={a.get('run_id', '?')}, model={a.get('model_name', '?')}, data={a.get('data_id', '?')}, "
            f"samples={self.n_samples}, orbit={dict(zip(self.orbit_dims, [self.data.sizes[d] for d in self.orbit_dims]))}, "
            f"variables={sorted(self.data.data_vars)})"
        )

    def task(self) -> Any:
        """The task that produced this result (rebuilt from its spec), or None."""
        return task_of(self.data.attrs.get("task"))

    def meta(self, name: str) -> Variable:
        """What variable ``name`` is (:class:`~orbitscope.tasks.variables.Variable`): from its
        stored attrs, else the task's declaration (also for variables not computed yet, such as
        consensus metrics), else the engine's; unknown names are ``real`` with their name as label."""
        if name in self.data and "kind" in self.data[name].attrs:
            return variable_meta(self.data[name])
        declared = declared_variable(name, self.task())
        if declared is not None:
            return declared
        return variable_meta(self.data[name]) if name in self.data else Variable(name, "float32", label=name)

    # aggregates ---------------------------------------------------------------------------
    def aggregate(self, variable: str = "correct", *, level: float = 0.95, subset: Any = None) -> xr.Dataset:
        """See :func:`aggregate`."""
        return aggregate(self, variable, level=level, subset=subset)

    def primary_metric(self) -> str:
        """The variable views show by default: ``correct`` when recorded, else the task's first
        metric (not a state), else the first variable over the orbit."""
        if "correct" in self.data:
            return "correct"
        task = self.task()
        for v in task.variables(0) if task is not None else []:
            if v.name in self.data and v.kind != "state":
                return v.name
        for name in self.data.data_vars:
            if self.data[name].dims[1:1 + len(self.orbit_dims)] == self.orbit_dims and self.meta(str(name)).kind != "state":
                return str(name)
        raise NotFoundError("this result records no metric over its orbit")

    def summary(self, variable: str | None = None) -> dict[str, Any]:
        """Headline numbers: value at the identity element, orbit mean, worst and best element
        (worst = lowest, or highest for lower-is-better variables such as errors).

        Returns a dict with ``at_identity``, ``mean``, ``worst``, ``worst_at`` (coords of the worst
        element), ``best``, ``best_at`` and ``n_samples``. ``variable`` defaults to
        :meth:`primary_metric`.
        """
        variable = variable or self.primary_metric()
        agg = self.aggregate(variable)
        mean = agg["mean"]
        flat = mean.values.ravel()
        dims = self.orbit_dims
        shape = tuple(self.data.sizes[d] for d in dims)

        def coords_at(i: int) -> dict[str, float]:
            idx = np.unravel_index(i, shape)
            return {d: float(self.data.coords[d].values[j]) for d, j in zip(dims, idx)}

        ident = self.data.attrs.get("identity_index")
        worst, best = int(np.nanargmin(flat)), int(np.nanargmax(flat))
        if self.meta(variable).lower_is_better:
            worst, best = best, worst
        return {
            "variable": variable,
            "n_samples": self.n_samples,
            "at_identity": float(flat[int(ident)]) if ident not in (None, -1) else None,
            "mean": float(np.nanmean(flat)),
            "worst": float(flat[worst]),
            "worst_at": coords_at(worst),
            "best": float(flat[best]),
            "best_at": coords_at(best),
        }

    def equals(self, other: "OrbitResult") -> bool:
        """Same variables with identical values (provenance timestamps ignored)."""
        return bool(self.data.drop_attrs().identical(other.data.drop_attrs()))


def _fill_value(dtype: np.dtype) -> Any:
    """Padding for ragged variables: NaN for floats, -1 for signed integers, 0 otherwise."""
    if np.issubdtype(dtype, np.floating):
        return np.nan
    if np.issubdtype(dtype, np.signedinteger):
        return -1
    return 0


def _join(chunks: list[np.ndarray], ragged: bool, name: str) -> np.ndarray:
    """Concatenate chunks along samples; ragged variables are padded to the largest extra shape."""
    shapes = {c.shape[1:] for c in chunks}
    if len(shapes) <= 1:
        return np.concatenate(chunks)
    if not ragged or len({len(sh) for sh in shapes}) != 1:
        raise ValueError(f"variable {name!r} has different shapes in different chunks ({sorted(shapes)}); only "
                         "variables declared ragged (e.g. a varying number of boxes) may")
    big = tuple(max(sh[i] for sh in shapes) for i in range(len(next(iter(shapes)))))
    fill = _fill_value(chunks[0].dtype)
    out = []
    for c in chunks:
        pad = [(0, 0)] + [(0, big[i] - c.shape[1 + i]) for i in range(len(big))]
        out.append(np.pad(c, pad, constant_values=fill))
    return np.concatenate(out)


def task_of(task_spec: Any) -> Any:
    """The task a stored spec (a dict or its JSON) describes, or None when it cannot be rebuilt
    (no spec, or a task kind not registered in this process)."""
    if task_spec is None:
        return None
    from ..tasks.base import task_from_spec

    try:
        spec = json.loads(task_spec) if isinstance(task_spec, str) else task_spec
        return task_from_spec(spec) if isinstance(spec, dict) else None
    except (ValueError, KeyError, TypeError):
        return None


def declared_variable(name: str, task: Any) -> Variable | None:
    """What the task declares ``name`` to be, else what the engine's own variables are, else None."""
    declared = task.variable(name) if task is not None else None
    return declared if declared is not None else ENGINE_VARIABLES.get(name)


def variable_info(name: str, spec: dict[str, Any], task: Any) -> Variable | None:
    """The metadata of a stored variable: recorded in the layout, else :func:`declared_variable`."""
    if "meta" in spec:
        return Variable.from_json(spec["meta"])
    return declared_variable(name, task)


def assemble_result(
    layout: dict[str, Any], parts: dict[str, list[np.ndarray]], samples: np.ndarray, attrs: dict[str, Any]
) -> OrbitResult:
    """Build an :class:`OrbitResult` from per-chunk arrays (sample-major, in sample order).

    ``layout`` holds ``orbit_dims``, ``orbit_shape``, ``coords`` (per orbit dim) and ``variables``
    (name -> ``dtype``, ``extra_dims``, ``extra_shape``, optional ``per_sample``: the variable has
    no orbit dims, e.g. the label or the stored input; optional ``ragged``: its extra shape may
    differ between chunks and is padded; optional ``meta``: its :class:`Variable`), as recorded by
    the engine. Each variable's metadata lands in its attrs (see :func:`variable_meta`).
    """
    data = {}
    task = None if all("meta" in v for v in layout["variables"].values()) else task_of(attrs.get("task"))
    for name, spec in layout["variables"].items():
        chunks = parts.get(name, [])
        orbit_dims = [] if spec.get("per_sample") else list(layout["orbit_dims"])
        orbit_shape = [] if spec.get("per_sample") else list(layout["orbit_shape"])
        empty = (0, *orbit_shape, *spec["extra_shape"])
        values = _join(chunks, bool(spec.get("ragged")), name) if chunks else np.empty(empty, spec["dtype"])
        info = variable_info(name, spec, task)
        data[name] = xr.Variable(["sample", *orbit_dims, *spec["extra_dims"]], values,
                                 attrs=info.attrs() if info is not None else None)
    coords: dict[str, Any] = {d: np.asarray(v) for d, v in layout["coords"].items()}
    coords["sample"] = np.asarray(samples, dtype=np.int64)
    clean = {k: (json.dumps(v) if isinstance(v, (dict, list, tuple)) else v) for k, v in attrs.items() if v is not None}
    return OrbitResult(xr.Dataset(data, coords=coords, attrs=clean))


def dataset_metrics(result: "OrbitResult", subset: Any = None) -> xr.Dataset:
    """Dataset-level metrics per orbit element from the task's ``compute`` (e.g.
    ``class_accuracy`` for classification), over all samples or a ``subset`` (mask / indices).

    Returns:
        Dataset over the orbit dims, one variable per metric (with its metadata in attrs).
    """
    from ..tasks.base import task_from_spec

    ds = result.data if isinstance(result, OrbitResult) else result
    if "task" not in ds.attrs:
        raise ValueError("the result carries no task spec; use the OrbitResult that evaluate() returned")
    task = task_from_spec(json.loads(ds.attrs["task"]) if isinstance(ds.attrs["task"], str) else ds.attrs["task"])
    dims = tuple(json.loads(ds.attrs["orbit_dims"]))
    sel = ds if subset is None else ds.isel(sample=np.asarray(subset))
    states = {n: sel[n].transpose("sample", *[d for d in sel[n].dims if d != "sample"]).values for n in sel.data_vars}
    metrics = task.compute(states, len(dims))
    meta = {v.name: v for v in task.dataset_variables()}
    coords = {d: ds.coords[d].values for d in dims}
    return xr.Dataset({n: xr.Variable(dims, np.asarray(v), attrs=meta[n].attrs() if n in meta else None)
                       for n, v in metrics.items()}, coords=coords, attrs={"n": int(sel.sizes["sample"])})


def check_same_orbit(a: OrbitResult, b: OrbitResult) -> None:
    """Raise ValueError unless two results sample the same orbit elements (same dims and grids)."""
    dims = a.orbit_dims
    if b.orbit_dims != dims:
        raise ValueError(f"results have different orbit dims: {dims} vs {b.orbit_dims}")
    for d in dims:
        ca, cb = np.asarray(a.data[d].values), np.asarray(b.data[d].values)
        if ca.shape != cb.shape or not np.allclose(ca, cb):
            raise ValueError(f"results sample different orbit elements (their {d!r} grids differ); "
                             "evaluate both on the same orbit")

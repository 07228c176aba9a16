"""Evaluation results: a labelled array over ``sample`` × orbit dims, with provenance.

:class:`OrbitResult` wraps an :class:`xarray.Dataset` whose data variables are the task's
variables (e.g. ``confidence``, ``correct``) with dims ``("sample", *orbit.dims, *extra)`` and
whose ``attrs`` hold provenance (model id and hash, data id, orbit and task specs, package
versions, creation time, seed). Attribute access falls through to the dataset, so
``result.confidence.sel(angle=90)`` works.

A result read from the store is *lazy* (:mod:`orbitscope.results.lazy`): its variables are read
on demand and by selection, and it knows where it came from (:attr:`OrbitResult.source`). Passes
over it (:meth:`OrbitResult.chunks`) go one stored chunk at a time, so aggregates, grouped
aggregates and per-sample summaries never hold the run in memory; their sufficient statistics are
cached in the store (:mod:`orbitscope.results.streaming`).

Aggregates carry confidence intervals (:mod:`orbitscope.results.intervals`):

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

import hashlib
import json
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import xarray as xr

from ..group.orbits import Orbit, orbit_from_spec
from ..tasks.variables import ENGINE_VARIABLES, Variable, variable_meta
from .intervals import mean_interval, t_interval, wilson_interval
from .lazy import ResultSource, fill_value, joined_extra_shape, pad_to
from .streaming import CachedArray, GroupedMoments, Moments

__all__ = ["OrbitResult", "wilson_interval", "mean_interval", "t_interval", "aggregate", "assemble_result",
           "result_from_arrays", "check_same_orbit", "variable_info", "declared_variable", "task_of", "dataset_metrics", "dataset_states",
           "subset_mask", "check_same_samples", "fill_value", "CHUNK_SAMPLES", "PIECE_VALUES", "rows_for"]



def aggregate(data: xr.Dataset | "OrbitResult", variable: str, *, level: float = 0.95, subset: Any = None,
              by: str | None = None) -> xr.Dataset:
    """Mean of ``variable`` over samples, with a confidence interval per orbit element.

    Computed in one pass over the result's chunks (:class:`~orbitscope.results.streaming.Moments`),
    so a stored run is never loaded whole; the sufficient statistics are cached in the store
    (the second call reads a few kilobytes).

    Args:
        data: an :class:`OrbitResult` or its dataset.
        variable: e.g. ``"correct"`` (accuracy, Wilson interval) or ``"confidence"`` (t interval).
        level: confidence level of the interval.
        subset: optional boolean mask or index array over samples (e.g. one class); each
            sample at most once.
        by: a per-sample variable (e.g. ``"label"``): one aggregate per distinct value, in one
            pass; the result gains a leading dim named ``by`` (its sorted values).

    Returns:
        Dataset with ``mean``, ``lower``, ``upper`` (orbit dims, after ``by``) and, with ``by``,
        ``n`` per group; ``attrs["n"]`` is the number of samples aggregated and
        ``attrs["method"]`` names the interval.
    """
    res = data if isinstance(data, OrbitResult) else OrbitResult(data)
    ds = res.data
    if variable not in ds:
        raise NotFoundError(f"no variable {variable!r} in this result; it has {sorted(ds.data_vars)}")
    da = ds[variable]
    dims = [str(d) for d in da.dims if d != "sample"]
    coords = {d: da.coords[d] for d in dims if d in da.coords}
    meta = variable_meta(da)
    if meta.kind == "state":
        raise ValueError(f"{variable!r} is a per-sample state ({meta.description or 'not a metric'}); it has no mean: "
                         "aggregate a metric, or use dataset_metrics() for dataset-level ones")
    if by is not None:
        grouped = res.grouped_moments(variable, by, subset=subset)
        m, out_dims = grouped.moments, [by, *dims]
        coords = {**coords, by: np.asarray(grouped.groups)}
        n_samples = int(grouped.sizes.sum())
    else:
        m, out_dims = res.moments(variable, subset=subset), dims
        n_samples = _subset_size(res.n_samples, subset)
    if meta.kind == "binary":
        k, n = m.total, m.n
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        lo, hi = wilson_interval(k, n, level)
        method = f"Wilson score interval, {level:.0%}"
    else:
        mean = m.mean_or_nan()
        lo, hi = t_interval(mean, np.sqrt(m.variance(ddof=1)) if (m.n > 1).any() else np.zeros_like(mean), m.n, level)
        if meta.bounded:
            lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
        method = f"Student-t interval for the mean, {level:.0%}"
    variables = {"mean": (out_dims, mean), "lower": (out_dims, lo), "upper": (out_dims, hi)}
    if by is not None:
        variables["n"] = ((by,), grouped.sizes)
    return xr.Dataset(variables, coords=coords,
                      attrs={"variable": variable, "n": n_samples, "method": method, "level": level})


def subset_mask(n: int, subset: Any) -> np.ndarray | None:
    """A subset of samples (None, a boolean mask over the ``n`` samples, or positions, each at
    most once) as a boolean mask (None for all samples)."""
    if subset is None:
        return None
    sub = np.asarray(subset)
    if sub.dtype == bool:
        if sub.shape != (n,):
            raise ValueError(f"a boolean subset needs one entry per sample ({n}), got shape {sub.shape}")
        return sub
    pos = sub.astype(np.int64).reshape(-1)
    if pos.size and (pos.min() < -n or pos.max() >= n):
        raise IndexError(f"subset positions must be in [0, {n}), got {pos.min()}..{pos.max()}")
    mask = np.zeros(n, bool)
    mask[pos] = True
    if int(mask.sum()) != pos.size:
        raise ValueError("the subset lists a sample twice: give each sample position at most once")
    return mask


def _subset_size(n: int, subset: Any) -> int:
    mask = subset_mask(n, subset)
    return n if mask is None else int(mask.sum())


def _subset_key(mask: np.ndarray | None) -> str:
    if mask is None:
        return "all"
    return "mask-" + hashlib.sha256(np.packbits(mask).tobytes() + str(mask.size).encode()).hexdigest()[:16]


#: Samples per pass of :meth:`OrbitResult.chunks` when the result's stored chunking is not known.
CHUNK_SAMPLES = 4096
#: At most this many values (samples × cells, all variables read) per piece of a stored result
#: in :meth:`OrbitResult.chunks`, so a pass's working set does not grow with the orbit's size.
PIECE_VALUES = 1 << 15


def rows_for(n_values_per_sample: int, max_values: int = PIECE_VALUES) -> int:
    """Samples per piece so that a piece holds at most ``max_values`` values (at least one)."""
    return max(1, int(max_values) // max(int(n_values_per_sample), 1))


class OrbitResult:
    """Results of evaluating one model over one orbit of one dataset."""

    def __init__(self, data: xr.Dataset, source: ResultSource | None = None) -> None:
        if "sample" not in data.dims:
            raise ValueError("an OrbitResult needs a 'sample' dimension")
        self.data = data
        #: where a stored result comes from (its chunks and aggregate cache); None in memory
        self.source = source if source is not None and source.bounds.n == data.sizes["sample"] else None
        # the variable objects the source describes: a variable replaced later (res.data[v] = ...)
        # is no longer what the store holds, so its aggregates are neither cached nor served
        self._stored_variables = {k: v for k, v in data.variables.items()} if self.source is not None else {}

    # reading ------------------------------------------------------------------------------
    def load(self) -> "OrbitResult":
        """This result with every variable read into memory, detached from the store (so it may be
        modified; the lazy original is unchanged and its cached aggregates are not used)."""
        return OrbitResult(self.data.copy(deep=False).load())

    def chunks(self, variables: Sequence[str] | None = None, *, size: int = CHUNK_SAMPLES,
               max_values: int = PIECE_VALUES) -> Iterator[tuple[slice, "OrbitResult"]]:
        """The result in consecutive pieces of samples, each in memory: ``(positions, piece)``.

        A stored result is cut at its stored chunks (each file read once per pass), and those
        into pieces of at most ``max_values`` values of the variables read, so the working set
        is bounded whatever the orbit's size; others in pieces of ``size`` samples.
        ``variables`` restricts what is read (default: all).
        """
        names = list(self.data.data_vars) if variables is None else list(dict.fromkeys(variables))
        ds = self.data[names]
        if self.source is not None:
            per_sample = sum(int(np.prod([n for d, n in ds[v].sizes.items() if d != "sample"])) for v in names)
            pieces = self.source.bounds.split(rows_for(per_sample, max_values))
            bounds = list(zip(pieces.starts.tolist(), pieces.stops.tolist()))
        else:
            n = self.n_samples
            bounds = [(a, min(a + size, n)) for a in range(0, n, size)]
        for a, b in bounds:
            yield slice(a, b), OrbitResult(ds.isel(sample=slice(a, b)).load())

    def _from_store(self, names: Sequence[str]) -> bool:
        """Whether variables ``names`` are still the ones read from the store."""
        return all(name in self.data.variables and self.data.variables[name] is self._stored_variables.get(name)
                   for name in names)

    def _cached(self, what: str, compute: Callable[[], Any], codec: Any, reads: Sequence[str]) -> Any:
        src = self.source
        if src is None or src.cache is None or not self._from_store(reads):
            return compute()
        key = src.cache_key(what)
        raw = src.cache.get(key)
        if raw is not None:
            try:
                return codec.from_bytes(raw)
            except (ValueError, OSError, KeyError):  # an unreadable entry is recomputed
                pass
        value = compute()
        src.cache.put(key, value.to_bytes())
        return value

    def moments(self, variable: str, *, subset: Any = None) -> Moments:
        """Count, total, mean and squared deviations of ``variable`` per cell (orbit element ×
        extra dims), over all samples or a ``subset``, in one pass over the chunks (cached)."""
        da = self.data[variable]
        dims = [d for d in da.dims if d != "sample"]
        mask = subset_mask(self.n_samples, subset)

        def compute() -> Moments:
            total = Moments.empty(tuple(da.sizes[d] for d in dims))
            for where, piece in self.chunks([variable]):
                values = piece.data[variable].transpose("sample", *dims).values
                total = total.update(values if mask is None else values[mask[where]])
            return total

        return self._cached(f"moments:{variable}:{_subset_key(mask)}", compute, Moments, [variable])

    def grouped_moments(self, variable: str, by: str, *, subset: Any = None) -> GroupedMoments:
        """:meth:`moments` per distinct value of the per-sample variable ``by`` (e.g. ``label``),
        in one pass (cached)."""
        if by not in self.data or self.data[by].dims != ("sample",):
            raise ValueError(f"cannot group by {by!r}: it is not a per-sample variable of this result "
                             f"(per-sample: {sorted(str(k) for k, v in self.data.data_vars.items() if v.dims == ('sample',))})")
        da = self.data[variable]
        dims = [d for d in da.dims if d != "sample"]
        mask = subset_mask(self.n_samples, subset)

        def pieces() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for where, piece in self.chunks([variable, by]):
                values = piece.data[variable].transpose("sample", *dims).values
                groups = piece.data[by].values
                if mask is not None:
                    values, groups = values[mask[where]], groups[mask[where]]
                yield values, groups

        shape = tuple(da.sizes[d] for d in dims)
        return self._cached(f"grouped:{variable}:{by}:{_subset_key(mask)}",
                            lambda: GroupedMoments.accumulate(pieces(), shape), GroupedMoments, [variable, by])

    def per_sample(self, variables: Sequence[str], fn: Callable[["OrbitResult"], np.ndarray],
                   key: str | None = None) -> np.ndarray:
        """``fn(piece)`` of each piece of :meth:`chunks` (one value per sample), concatenated:
        per-sample orbit summaries without holding the run in memory. With a ``key`` naming
        what ``fn`` computes, the values are cached in the store."""

        def compute() -> CachedArray:
            parts = [np.asarray(fn(piece)) for _, piece in self.chunks(variables)]
            return CachedArray(np.concatenate(parts) if parts else np.empty(0))

        if key is None:
            return compute().values
        return self._cached(f"per-sample:{key}", compute, CachedArray, variables).values

    def cached_array(self, what: str, variables: Sequence[str], compute: Callable[[], np.ndarray], *,
                     subset: Any = None) -> np.ndarray:
        """``compute()`` (an array derived from ``variables`` over all samples or a ``subset``),
        kept in the store's aggregate cache under ``what`` and the subset, so a stored run
        computes it once; computed afresh for an in-memory result or changed variables. ``what``
        must name everything else the value depends on (e.g. a level and a seed)."""
        mask = subset_mask(self.n_samples, subset)
        return self._cached(f"array:{what}:{_subset_key(mask)}", lambda: CachedArray(np.asarray(compute())),
                            CachedArray, variables).values

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
    def aggregate(self, variable: str = "correct", *, level: float = 0.95, subset: Any = None,
                  by: str | None = None) -> xr.Dataset:
        """See :func:`aggregate`."""
        return aggregate(self, variable, level=level, subset=subset, by=by)

    def primary_metric(self) -> str:
        """The variable views show by default: ``correct`` when recorded, else the task's
        ``primary`` metric (its consensus version when the primary is undefined everywhere, as on
        unlabelled data), else its first metric (not a state), else the first variable over the
        orbit."""
        if "correct" in self.data:
            return "correct"
        task = self.task()
        if task is not None and task.primary in self.data:  # e.g. detection: confidence × IoU
            label_free = task.consensus_name(task.primary)
            if label_free in self.data and not np.isfinite(self.aggregate(task.primary)["mean"].values).any():
                return label_free  # unlabelled data (no metric defined anywhere): its consensus version
            return task.primary
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
        at_identity = float(flat[int(ident)]) if ident not in (None, -1) else None
        if not np.isfinite(flat).any():  # e.g. a labelled metric of unlabelled data: undefined everywhere
            return {"variable": variable, "n_samples": self.n_samples, "at_identity": at_identity, "mean": float("nan"),
                    "worst": float("nan"), "worst_at": {}, "best": float("nan"), "best_at": {}}
        worst, best = int(np.nanargmin(flat)), int(np.nanargmax(flat))
        if self.meta(variable).lower_is_better:
            worst, best = best, worst
        return {
            "variable": variable,
            "n_samples": self.n_samples,
            "at_identity": at_identity,
            "mean": float(np.nanmean(flat)),
            "worst": float(flat[worst]),
            "worst_at": coords_at(worst),
            "best": float(flat[best]),
            "best_at": coords_at(best),
        }

    def equals(self, other: "OrbitResult") -> bool:
        """Same variables with identical values (provenance timestamps ignored)."""
        return bool(self.data.drop_attrs().identical(other.data.drop_attrs()))


def _join(chunks: list[np.ndarray], ragged: bool, name: str) -> np.ndarray:
    """Concatenate chunks along samples; ragged variables are padded to the largest extra shape."""
    extras = {c.shape[1:] for c in chunks}
    big = joined_extra_shape(extras, ragged)
    if big is None:
        raise ValueError(f"variable {name!r} has different shapes in different chunks ({sorted(extras)}); only "
                         "variables declared ragged (e.g. a varying number of boxes) may")
    if len(extras) == 1:
        return np.concatenate(chunks)
    fill = fill_value(chunks[0].dtype)
    return np.concatenate([pad_to(c, (len(c), *big), fill) for c in chunks])


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
    """Build an in-memory :class:`OrbitResult` from per-chunk arrays (sample-major, in sample order).

    ``layout`` holds ``orbit_dims``, ``orbit_shape``, ``coords`` (per orbit dim) and ``variables``
    (name -> ``dtype``, ``extra_dims``, ``extra_shape``, optional ``per_sample``: the variable has
    no orbit dims, e.g. the label or the stored input; optional ``ragged``: its extra shape may
    differ between chunks and is padded; optional ``meta``: its :class:`Variable`), as recorded by
    the engine.
    """
    values = {}
    for name, spec in layout["variables"].items():
        chunks = parts.get(name, [])
        orbit_shape = [] if spec.get("per_sample") else list(layout["orbit_shape"])
        empty = (0, *orbit_shape, *spec["extra_shape"])
        values[name] = _join(chunks, bool(spec.get("ragged")), name) if chunks else np.empty(empty, spec["dtype"])
    return result_from_arrays(layout, values, samples, attrs)


def result_from_arrays(layout: dict[str, Any], values: dict[str, Any], samples: np.ndarray, attrs: dict[str, Any],
                       source: ResultSource | None = None) -> OrbitResult:
    """An :class:`OrbitResult` over one array per variable (in memory, or lazy: anything an
    :class:`xarray.Variable` accepts) laid out as ``layout`` says (see :func:`assemble_result`).
    Each variable's metadata lands in its attrs (see :func:`variable_meta`)."""
    data = {}
    task = None if all("meta" in v for v in layout["variables"].values()) else task_of(attrs.get("task"))
    for name, spec in layout["variables"].items():
        orbit_dims = [] if spec.get("per_sample") else list(layout["orbit_dims"])
        info = variable_info(name, spec, task)
        data[name] = xr.Variable(["sample", *orbit_dims, *spec["extra_dims"]], values[name],
                                 attrs=info.attrs() if info is not None else None)
    coords: dict[str, Any] = {d: np.asarray(v) for d, v in layout["coords"].items()}
    coords["sample"] = np.asarray(samples, dtype=np.int64)
    clean = {k: (json.dumps(v) if isinstance(v, (dict, list, tuple)) else v) for k, v in attrs.items() if v is not None}
    return OrbitResult(xr.Dataset(data, coords=coords, attrs=clean), source)


def dataset_states(result: "OrbitResult", subset: Any = None) -> tuple[Any, tuple[str, ...], dict[str, np.ndarray]]:
    """What a task's ``compute`` reads, loaded once: ``(task, orbit dims, states)``, each state
    with the sample axis first (only the variables the task's ``compute_reads`` names), over all
    samples or a ``subset`` (mask / indices).

    Raises:
        ValueError: the result carries no task spec.
    """
    from ..tasks.base import task_from_spec

    ds = result.data if isinstance(result, OrbitResult) else result
    if "task" not in ds.attrs:
        raise ValueError("the result carries no task spec; use the OrbitResult that evaluate() returned")
    task = task_from_spec(json.loads(ds.attrs["task"]) if isinstance(ds.attrs["task"], str) else ds.attrs["task"])
    dims = tuple(json.loads(ds.attrs["orbit_dims"]))
    reads = task.compute_reads if task.compute_reads is not None else [n for n in ds.data_vars if n != "input"]
    sel = ds[[n for n in reads if n in ds]]
    sel = sel if subset is None else sel.isel(sample=np.asarray(subset))
    states = {n: sel[n].transpose("sample", *[d for d in sel[n].dims if d != "sample"]).values for n in sel.data_vars}
    return task, dims, states


def dataset_metrics(result: "OrbitResult", subset: Any = None) -> xr.Dataset:
    """Dataset-level metrics per orbit element from the task's ``compute`` (e.g.
    ``class_accuracy`` for classification), over all samples or a ``subset`` (mask / indices).
    Only the variables the task's ``compute_reads`` names are read from a stored run (for
    classification the label and correctness: a few bytes per sample and element).

    Returns:
        Dataset over the orbit dims, one variable per metric (with its metadata in attrs).
    """
    ds = result.data if isinstance(result, OrbitResult) else result
    task, dims, states = dataset_states(result, subset)
    metrics = task.compute(states, len(dims))
    meta = {v.name: v for v in task.dataset_variables()}
    coords = {d: ds.coords[d].values for d in dims}
    n = ds.sizes["sample"] if subset is None else np.arange(ds.sizes["sample"])[np.asarray(subset)].size
    return xr.Dataset({name: xr.Variable(dims, np.asarray(v), attrs=meta[name].attrs() if name in meta else None)
                       for name, v in metrics.items()}, coords=coords, attrs={"n": int(n)})


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


def check_same_samples(results: Sequence[OrbitResult]) -> None:
    """Per-sample comparisons (individual plots, rankings across models) need the same data:
    raise ValueError unless every result has the first one's data id and sample ids."""
    first = results[0]
    for r in results[1:]:
        if r.attrs.get("data_id") != first.attrs.get("data_id") or not np.array_equal(
            r.data["sample"].values, first.data["sample"].values
        ):
            raise ValueError(
                f"runs {first.attrs.get('run_id', '?')} and {r.attrs.get('run_id', '?')} were evaluated on different "
                f"data ({first.attrs.get('data_id')} vs {r.attrs.get('data_id')}): per-sample views need the same samples"
            )

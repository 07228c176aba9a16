"""Read-only access to a store for the web interface, with caches.

:class:`AppData` never writes to the store and never opens a path that came from the browser:
run ids from requests are looked up in the catalog (exact ids only) before anything is loaded,
and model weights are found by content hash among the store's own ``models/*.safetensors``
files. Everything the store holds is read, never recomputed; derived values (consensus
variables, rankings, embeddings, orbit statistics, live re-evaluations) are computed once per
key and kept in a bounded LRU cache.

Runs still being written by an evaluation are listed as running; their recorded chunks can be
shown (loaded with ``allow_partial``). Cache keys include each run's status and number of
recorded chunks (from a catalog snapshot refreshed every ``ttl`` seconds), so a growing run is
reloaded instead of served stale.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
from torch import nn

from ..analysis.dataset_level import dataset_metric_names
from ..analysis.nero import MODEL_COLOURS
from ..analysis.ranking import Ranking, rank_differences, rank_samples
from ..analysis.reduce import METHODS, Embedding, embed, orbit_statistic
from ..errors import OrbitscopeError
from ..lie.run import is_lee_run
from ..results.result import OrbitResult
from ..results.store import RunRecord, Store, StoreError
from .state import Selection
from .views import TaskView, view_for

__all__ = ["AppError", "AppData", "Context", "RunGroup", "RunInfo", "MAX_MODELS", "metric_choices"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Most runs compared at once (one scatter panel and colour each).
MAX_MODELS = 4


class AppError(OrbitscopeError, ValueError):
    """A request the interface cannot serve (unknown run, bad parameter, no data yet); its
    message is shown to the user."""


@dataclass(frozen=True)
class RunInfo:
    """A run as listed in the interface."""

    run_id: str
    name: str
    status: str
    chunks_done: int
    n_samples: int | None
    model_hash: str | None

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def label(self) -> str:
        if self.complete:
            return f"{self.name} ({self.n_samples} samples)"
        return f"{self.name} (running: {self.chunks_done} chunks so far)"


@dataclass(frozen=True)
class RunGroup:
    """Runs on the same data, orbit and task: the ones that can be compared."""

    key: str
    data_id: str
    orbit: dict[str, Any]
    task_kind: str
    coords: dict[str, list[float]]
    runs: tuple[RunInfo, ...]

    @property
    def label(self) -> str:
        grid = ", ".join(f"{d} {min(v):g}…{max(v):g} ×{len(v)}" for d, v in self.coords.items())
        return f"{self.data_id} · {self.orbit.get('kind')} ({grid}) · {len(self.runs)} runs"


def _group_key(rec: RunRecord) -> str:
    text = json.dumps([rec.data_id, rec.orbit, rec.task.get("kind")], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, eq=False)
class Context:
    """The loaded data behind one selection (everything but the sample and element).

    ``results`` are aligned on the samples all compared runs hold; ``positions`` are the rows
    shown (all, or the class subset), ``shown`` their sample ids.
    """

    key: tuple[Any, ...]
    group: RunGroup
    view: TaskView
    run_ids: tuple[str, ...]
    names: tuple[str, ...]
    colours: tuple[str, ...]
    results: tuple[OrbitResult, ...]
    metric: str
    positions: np.ndarray
    shown: np.ndarray
    dims: tuple[str, ...]
    coords: dict[str, np.ndarray]
    default_element: dict[str, float]
    #: the per-sample metric of the individual plot, rankings, embeddings and detail panel: the
    #: selected metric, or the view's default one when the selected metric is dataset-level
    sample_metric: str = ""

    @property
    def dataset_level(self) -> bool:
        """Whether the selected metric is dataset-level (aggregate plot only)."""
        return self.sample_metric != self.metric

    @property
    def mask(self) -> np.ndarray | None:
        n = self.results[0].n_samples
        if self.positions.size == n:
            return None
        mask = np.zeros(n, dtype=bool)
        mask[self.positions] = True
        return mask


class _LRU:
    """A thread-safe bounded cache; values are computed outside the lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def metric_choices(view: TaskView, results: Sequence[OrbitResult], label_free: bool) -> list[tuple[str, str]]:
    """``(value, label)`` of every metric the selector offers: the view's per-sample metrics,
    then the dataset-level metrics every result can compute (labelled "dataset level"; in
    label-free mode only those that need no labels)."""
    options = list(view.metric_options(results, label_free))
    if not results:
        return options
    first = results[0]
    dataset = [m for m in dataset_metric_names(list(results))
               if not (label_free and first.meta(m).needs_labels)]
    return options + [(m, f"{first.meta(m).display} (dataset level)") for m in dataset]


def align(results: Sequence[OrbitResult]) -> list[OrbitResult]:
    """The results restricted to the samples all of them hold (unchanged when they agree)."""
    ids = [np.asarray(r.data["sample"].values) for r in results]
    if all(i.shape == ids[0].shape and np.array_equal(i, ids[0]) for i in ids[1:]):
        return list(results)
    common = reduce(np.intersect1d, ids)
    return [OrbitResult(r.data.sel(sample=common)) for r in results]


class AppData:
    """Cached, read-only access to the runs of ``store`` (see the module docstring)."""

    def __init__(self, store: Store, *, ttl: float = 2.0, cache_size: int = 512) -> None:
        self.store = store
        self.ttl = ttl
        self._cache = _LRU(cache_size)
        self._snapshot: tuple[float, dict[str, RunRecord]] = (-np.inf, {})
        self._models_index: tuple[float, dict[str, Path]] = (-np.inf, {})
        self._lock = threading.Lock()

    @property
    def home(self) -> Path:
        return self.store.home

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` (bounded LRU)."""
        return self._cache.get(key, compute)

    # -- catalog -------------------------------------------------------------------------------
    def catalog(self) -> dict[str, RunRecord]:
        """Run id -> record, from a snapshot at most ``ttl`` seconds old."""
        with self._lock:
            taken, records = self._snapshot
            if time.monotonic() - taken < self.ttl:
                return records
        try:
            records = {r.run_id: r for r in self.store.runs()}
        except StoreError as exc:
            raise AppError(f"cannot read the store's catalog: {exc}") from exc
        with self._lock:
            self._snapshot = (time.monotonic(), records)
        return records

    def run(self, run_id: Any) -> RunRecord:
        """The record of an exact run id; AppError for anything else (never a path, a prefix
        or a name: ids come from the browser)."""
        if not isinstance(run_id, str) or not run_id:
            raise AppError(f"malformed run id {run_id!r}")
        rec = self.catalog().get(run_id)
        if rec is None:
            raise AppError(f"unknown run id {run_id[:80]!r}: not in the store {self.home}")
        return rec

    def groups(self) -> list[RunGroup]:
        """Comparable runs, grouped by data, orbit and task (in order of first creation)."""
        members: dict[str, list[RunRecord]] = {}
        for rec in self.catalog().values():
            if is_lee_run(rec):  # LEE runs have their own page (orbitscope.app.lee_page)
                continue
            members.setdefault(_group_key(rec), []).append(rec)
        out = []
        for key, recs in members.items():
            first = recs[0]
            infos = tuple(RunInfo(r.run_id, r.name, r.status, r.chunks_done, r.n_samples, r.attrs.get("model_hash"))
                          for r in recs)
            out.append(RunGroup(key, first.data_id, first.orbit, str(first.task.get("kind")),
                                {d: list(v) for d, v in first.layout.get("coords", {}).items()}, infos))
        return out

    def group(self, key: Any) -> RunGroup:
        groups = self.groups()
        if not groups:
            raise AppError(f"no runs in the store {self.home} yet: evaluate a model first")
        for g in groups:
            if g.key == key:
                return g
        if key is None:
            raise AppError("select a run group")
        raise AppError(f"unknown run group {str(key)[:40]!r}; reload the page to see the store's groups")

    # -- results -------------------------------------------------------------------------------
    def result(self, run_id: str, *, consensus: bool = False) -> OrbitResult:
        """A run's result (the recorded chunks of a running one), with the consensus variables
        when ``consensus``. AppError when it has no samples yet or cannot be read."""
        rec = self.run(run_id)
        if rec.chunks_done == 0:
            raise AppError(f"run {rec.name} ({run_id}) has no samples yet: it is {rec.status}")
        version = (run_id, rec.status, rec.chunks_done)

        def load() -> OrbitResult:
            try:
                return self.store.load(run_id, allow_partial=not rec.complete)
            except StoreError as exc:
                raise AppError(f"cannot read run {rec.name}: {exc}") from exc

        res = self.memo(("result", version), load)
        if not consensus:
            return res

        def add_consensus() -> OrbitResult:
            from ..analysis.consensus import with_consensus

            try:
                return with_consensus(res)
            except ValueError as exc:
                raise AppError(f"label-free metrics unavailable for {rec.name}: {exc}") from exc

        return self.memo(("consensus", version), add_consensus)

    def context(self, sel: Selection) -> Context:
        """Load and check everything ``sel`` needs (AppError with a readable message if not)."""
        group = self.group(sel.group)
        if not sel.runs:
            raise AppError("select one or more models to compare")
        if len(sel.runs) > MAX_MODELS:
            raise AppError(f"compare at most {MAX_MODELS} models at once")
        if len(set(sel.runs)) != len(sel.runs):
            raise AppError("a model is selected twice")
        members = {r.run_id for r in group.runs}
        for run_id in sel.runs:
            if run_id not in members:
                raise AppError(f"run {str(run_id)[:40]!r} is not in the group {group.label}")
        key = (sel.context_key(), tuple((r, self.run(r).status, self.run(r).chunks_done) for r in sel.runs))
        return self.memo(("context", key), lambda: self._context(sel, group, key))

    def _context(self, sel: Selection, group: RunGroup, key: tuple[Any, ...]) -> Context:
        view = view_for(group.task_kind)
        plain = [self.result(r) for r in sel.runs]
        if sel.label_free and not view.label_free_available(plain):
            raise AppError(view.label_free_unavailable(plain))
        if not sel.metric:
            raise AppError("select a metric")
        consensus = view.needs_consensus(sel.metric, sel.label_free)
        results = align([self.result(r, consensus=consensus) for r in sel.runs]) if consensus else align(plain)
        if results[0].n_samples == 0:
            raise AppError("the selected runs share no samples yet")
        per_sample = view.metric_options(results, sel.label_free)
        if sel.metric not in [v for v, _ in metric_choices(view, results, sel.label_free)]:
            raise AppError(f"metric {sel.metric[:40]!r} is not available for these models"
                           + (" in label-free mode" if sel.label_free else ""))
        sample_metric = (sel.metric if sel.metric in [v for v, _ in per_sample]
                         else view.default_metric(per_sample, sel.label_free))
        if sample_metric is None:
            raise AppError("these models record no per-sample metric to show beside the dataset-level one")
        try:
            mask = view.subset_mask(results, sel.subset, sel.label_free)
        except ValueError as exc:
            raise AppError(str(exc)) from exc
        positions = np.arange(results[0].n_samples) if mask is None else np.flatnonzero(mask)
        if positions.size == 0:
            raise AppError(f"no samples in class {sel.subset}" + (" (by consensus)" if sel.label_free else ""))
        names = [self.run(r).name for r in sel.runs]
        names = [n if names.count(n) == 1 else f"{n} [{r[:6]}]" for n, r in zip(names, sel.runs)]
        dims = results[0].orbit_dims
        coords = {d: np.asarray(results[0].data[d].values, dtype=np.float64) for d in dims}
        ident = int(results[0].attrs.get("identity_index", -1))
        flat = ident if ident >= 0 else 0
        idx = np.unravel_index(flat, tuple(len(coords[d]) for d in dims))
        default = {d: float(coords[d][i]) for d, i in zip(dims, idx)}
        return Context(
            key=key, group=group, view=view, run_ids=tuple(sel.runs), names=tuple(names),
            colours=tuple(MODEL_COLOURS[i % len(MODEL_COLOURS)] for i in range(len(sel.runs))),
            results=tuple(results), metric=sel.metric, sample_metric=sample_metric, positions=positions,
            shown=np.asarray(results[0].data["sample"].values)[positions], dims=dims, coords=coords,
            default_element=default,
        )

    def subset_results(self, ctx: Context) -> list[OrbitResult]:
        """The compared results restricted to the shown samples."""
        if ctx.mask is None:
            return list(ctx.results)
        return self.memo(("subset", ctx.key), lambda: [OrbitResult(r.data.isel(sample=ctx.positions))
                                                        for r in ctx.results])

    # -- derived values ------------------------------------------------------------------------
    def rankings(self, ctx: Context, rank_by: str) -> list[Ranking]:
        """One ranking per compared run over the shown samples (rank 1 = worst / most variable /
        furthest behind the other model, see :data:`orbitscope.app.state.RANK_BY`)."""

        def compute() -> list[Ranking]:
            out = []
            for i, res in enumerate(ctx.results):
                if rank_by == "behind_other" and len(ctx.results) > 1:
                    other = ctx.results[1 if i == 0 else 0]
                    out.append(rank_differences(res, other, ctx.sample_metric, "a_worse", subset=ctx.positions))
                else:
                    by = "most_variable" if rank_by == "most_variable" else "worst"
                    out.append(rank_samples(res, ctx.sample_metric, by, subset=ctx.positions))
            return out

        return self.memo(("rankings", ctx.key, rank_by), compute)

    def embedding(self, ctx: Context, index: int, method: str) -> Embedding:
        """Embedding of the shown samples' orbit vectors of run ``index`` (seed 0)."""
        if method not in METHODS:
            raise AppError(f"unknown dimension-reduction method {str(method)[:20]!r}; one of {', '.join(METHODS)}")

        def compute() -> Embedding:
            try:
                return embed(self.subset_results(ctx)[index], ctx.sample_metric, method, seed=0)
            except ValueError as exc:
                raise AppError(f"cannot embed {ctx.names[index]}: {exc}") from exc

        return self.memo(("embedding", ctx.key, index, method), compute)

    def statistic(self, ctx: Context, index: int, stat: str) -> np.ndarray:
        """Per-sample orbit statistic (``mean``/``variance``) of run ``index``, shown samples."""
        return self.memo(("statistic", ctx.key, index, stat),
                         lambda: orbit_statistic(self.subset_results(ctx)[index], ctx.sample_metric, stat))  # type: ignore[arg-type]

    # -- models --------------------------------------------------------------------------------
    def _model_files(self) -> dict[str, Path]:
        """Model hash -> cached weights file, from ``<home>/models/*.safetensors`` metadata."""
        with self._lock:
            taken, index = self._models_index
            if time.monotonic() - taken < max(self.ttl, 10.0):
                return index
        from ..models.loading import read_metadata

        index = {}
        for path in sorted((self.home / "models").glob("*.safetensors")):
            try:
                meta = read_metadata(path)
                info = json.loads(meta.get("info", "{}"))
                digest = info.get("model_hash") if isinstance(info, dict) else None
                digest = digest or meta.get("model_hash")
            except Exception as exc:  # noqa: BLE001 - an unreadable file is just not usable
                logger.warning("ignoring unreadable model file %s: %s", path, exc)
                continue
            if isinstance(digest, str):
                index.setdefault(digest, path)
        with self._lock:
            self._models_index = (time.monotonic(), index)
        return index

    def model(self, run_id: str) -> nn.Module | None:
        """The run's model, loaded from the store's weights cache when a file there has the
        run's model hash (and still hashes to it once loaded); None otherwise."""
        digest = self.run(run_id).attrs.get("model_hash")
        path = self._model_files().get(digest) if isinstance(digest, str) else None
        if path is None:
            return None

        def load() -> nn.Module | None:
            from ..models.loading import load_model
            from ..models.reference import model_hash

            try:
                model = load_model(path)
            except Exception as exc:  # noqa: BLE001 - any failure means "not loadable"
                logger.warning("cannot load model %s for run %s: %s", path, run_id, exc)
                return None
            if model_hash(model) != digest:
                logger.warning("model file %s does not hash to %s: not used", path, digest)
                return None
            return model

        return self.memo(("model", digest, str(path)), load)

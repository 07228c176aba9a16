"""Sweeps: many evaluations (models × datasets × orbits × tasks) through one executor, one writer.

:func:`sweep` plans every run first (:func:`~orbitscope.engine.evaluation.plan_run`: identity,
reuse, resumption), then sends the chunk jobs of all runs still to do through one executor map,
so a cluster stays busy across run boundaries; the caller's process records each chunk as it
returns and marks a run complete when its last chunk is in. Runs already finished in the store
are reused (``"reused"``); a run whose planning or any chunk fails is reported (``"failed"``,
with the run and chunk named) while the other runs go on; an interrupted sweep run again
resumes every run from its stored chunks.

A chunk that raises on a worker comes back as a :class:`ChunkFailure` value (not an exception),
so one failing model does not stop the executor's other jobs.
"""

from __future__ import annotations

import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from torch import nn

from ..errors import JobError, OrbitscopeError
from .chunk import ChunkJob, evaluate_chunk
from .evaluation import PlannedRun, Run, plan_run
from .executors import Executor, get_executor
from .shipping import Contexts

__all__ = ["SweepRun", "SweepOutcome", "SweepResult", "ChunkFailure", "sweep", "sweep_chunk", "SweepProgress"]

#: ``progress(index, done, total, status)``: run ``index`` has ``done`` of ``total`` samples
#: written; status is ``"planned"``, ``"running"``, ``"done"``, ``"reused"`` or ``"failed"``.
SweepProgress = Callable[[int, int, "int | None", str], None]


@dataclass
class SweepRun:
    """One evaluation of a sweep: ``evaluate(model, data, orbit, task, **options)``.

    ``label`` names it in tables (default: the run name); ``options`` are :func:`evaluate`'s
    keyword arguments (``batch_size``, ``normalize``, ``view_size``, …; not ``store``,
    ``executor`` or ``progress``, which the sweep sets)."""

    model: nn.Module
    data: Any
    orbit: Any
    task: Any = None
    name: str | None = None
    model_name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    data_label: str = ""
    task_label: str = ""


@dataclass
class SweepOutcome:
    """What became of one run: ``status`` ``"done"``, ``"reused"`` or ``"failed"`` (``error``)."""

    spec: SweepRun
    status: str
    run_id: str | None = None
    name: str | None = None
    run: Run | None = None
    error: str | None = None
    seconds: float = 0.0
    samples: int = 0


@dataclass
class SweepResult:
    """Every outcome of a sweep, in the order the runs were given."""

    outcomes: list[SweepOutcome]
    seconds: float
    executor: str

    @property
    def failed(self) -> list[SweepOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def runs(self) -> list[Run]:
        """The runs that exist (done or reused), in order."""
        return [o.run for o in self.outcomes if o.run is not None]

    def rows(self) -> list[dict[str, Any]]:
        """One summary row per run: name, model, data, orbit, task, status, run id, samples,
        seconds, and the headline metric at the identity, mean and worst over the orbit."""
        out = []
        for o in self.outcomes:
            s = o.spec
            orbit = s.orbit if isinstance(s.orbit, str) else getattr(s.orbit, "spec", lambda: str(s.orbit))()
            row: dict[str, Any] = {"run": o.name or s.label or "", "model": s.model_name or type(s.model).__name__,
                                   "data": s.data_label, "orbit": str(orbit), "task": s.task_label,
                                   "status": o.status, "run_id": o.run_id or "", "samples": o.samples,
                                   "seconds": round(o.seconds, 2), "metric": "", "at_identity": None, "mean": None,
                                   "worst": None, "error": o.error or ""}
            if o.run is not None:
                res = o.run.result
                metric = res.primary_metric()
                summary = res.summary(metric)
                row.update(metric=metric, at_identity=summary["at_identity"], mean=summary["mean"],
                           worst=summary["worst"])
            out.append(row)
        return out


@dataclass(frozen=True)
class ChunkFailure:
    """A chunk that raised on its worker: the error's type, message and traceback."""

    kind: str
    message: str
    detail: str


def sweep_chunk(job: tuple[int, ChunkJob], contexts: Any) -> Any:
    """Executor job of a sweep: chunk ``job[1]`` of run ``job[0]``; an error comes back as a
    :class:`ChunkFailure`."""
    key, chunk = job
    try:
        return evaluate_chunk(chunk, contexts[key])
    except Exception as exc:  # noqa: BLE001 - reported per run by the driver
        return ChunkFailure(type(exc).__name__, str(exc), traceback.format_exc(limit=8))


def _chunk_text(job: ChunkJob) -> str:
    return f"chunk {job.index} (samples {job.start}–{job.stop - 1})"


def sweep(runs: Sequence[SweepRun], *, store: Any, executor: str | Executor | None = None,
          progress: SweepProgress | None = None, resume: bool = True) -> SweepResult:
    """Evaluate every run of ``runs`` into ``store`` through one ``executor`` (see module docs).

    Args:
        runs: the evaluations (:class:`SweepRun`).
        store: a :class:`~orbitscope.results.store.Store` or its directory (required: a sweep
            writes every run there, so an interrupted sweep resumes).
        executor: ``"local"`` (default), ``"process"``, ``"ray"`` or an executor instance.
        progress: see :data:`SweepProgress`.
        resume: reuse finished runs and continue unfinished ones (False: recompute them all).

    Returns:
        A :class:`SweepResult`; runs that failed are in it with their error, never raised.
    """
    from ..results.store import open_store

    if store is None:
        raise ValueError("a sweep needs a store (a directory): every run is written there as it goes")
    st = open_store(store)
    runner = get_executor(executor)
    t0 = time.perf_counter()
    outcomes = [SweepOutcome(spec, "planned") for spec in runs]
    planned: dict[int, PlannedRun] = {}
    started: dict[int, float] = {}

    def report(i: int, status: str) -> None:
        if progress is not None:
            p = planned.get(i)
            progress(i, p.done if p is not None else 0, p.n if p is not None else None, status)

    def fail(i: int, message: str) -> None:
        o = outcomes[i]
        o.status, o.error = "failed", message
        o.seconds = time.perf_counter() - started.get(i, t0)
        planned.pop(i, None)
        report(i, "failed")

    with ExitStack() as stack:
        for i, spec in enumerate(runs):
            o = outcomes[i]
            try:
                p = plan_run(stack, spec.model, spec.data, spec.orbit, spec.task, store=st, name=spec.name,
                             model_name=spec.model_name, resume=resume, **spec.options)
            except (OrbitscopeError, ValueError, TypeError, RuntimeError) as exc:
                o.status, o.error = "failed", f"{spec.label or spec.name or f'run {i}'}: {type(exc).__name__}: {exc}"
                report(i, "failed")
                continue
            o.run_id, o.name = p.run_id, p.name
            if p.reused is not None:
                o.status, o.run, o.samples = "reused", p.reused, p.n or 0
                if progress is not None:
                    progress(i, p.n or 0, p.n, "reused")
                continue
            planned[i] = p
            report(i, "planned")
        contexts = Contexts({i: p.ctx for i, p in planned.items()})

        def jobs() -> Iterator[tuple[int, ChunkJob]]:
            for i in sorted(planned):
                p = planned.get(i)
                if p is None:
                    continue
                for job in p.jobs():
                    if i not in planned:  # it failed meanwhile: skip its remaining chunks
                        break
                    started.setdefault(i, time.perf_counter())
                    yield i, job

        def finish(i: int) -> None:
            p = planned.pop(i)
            o = outcomes[i]
            o.run, o.status, o.samples = p.finish(), "done", p.done
            o.seconds = time.perf_counter() - started.get(i, t0)
            if progress is not None:
                progress(i, p.done, p.n, "done")

        while planned:
            try:
                for (i, job), result in runner.map(sweep_chunk, jobs(), contexts):
                    p = planned.get(i)
                    if p is None:  # the run failed already; its late chunks are dropped
                        continue
                    if isinstance(result, ChunkFailure):
                        fail(i, f"run {p.name!r} ({p.run_id}), {_chunk_text(job)}: {result.kind}: {result.message}")
                        continue
                    p.write(job, result)
                    report(i, "running")
                    if p.source.n_chunks is not None and len(p.skip) == p.source.n_chunks:
                        finish(i)
                for i in sorted(planned):  # sources of unknown length end when their jobs do
                    finish(i)
            except JobError as exc:  # the executor could not run a job at all (e.g. workers kept dying)
                key, job = exc.job if isinstance(exc.job, tuple) else (None, None)
                if key not in planned:
                    raise
                p = planned[key]
                fail(key, f"run {p.name!r} ({p.run_id}), {_chunk_text(job)}: {exc}")
    return SweepResult(outcomes, time.perf_counter() - t0, getattr(runner, "name", type(runner).__name__))

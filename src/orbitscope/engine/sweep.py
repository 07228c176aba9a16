"""Sweeps: many evaluations (models × datasets × orbits × tasks) through one executor, one writer.

:func:`sweep` plans every run first (:func:`~orbitscope.engine.evaluation.plan_run`: identity,
reuse, resumption), then sends the chunk jobs of all runs still to do through one executor map,
so a cluster stays busy across run boundaries; the caller's process records each chunk as it
returns and marks a run complete when its last chunk is in. Runs already finished in the store
are reused (``"reused"``); a run whose planning or any chunk fails is reported (``"failed"``,
with the run and chunk named) while the other runs go on; an interrupted sweep run again
resumes every run from its stored chunks.

A chunk that raises on a worker comes back as a
:class:`~orbitscope.engine.executor_base.JobFailure` value (not an exception), so one failing
model does not stop the executor's other jobs.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from torch import nn

from ..errors import JobError, OrbitscopeError
from ..safe_repr import short_repr
from .chunk import ChunkJob, evaluate_chunk
from .evaluation import PlannedRun, Run, plan_run
from .executor_base import JobFailure
from .executors import Executor, get_executor
from .shipping import Contexts

__all__ = ["SweepRun", "SweepOutcome", "SweepResult", "sweep", "sweep_chunk", "SweepProgress"]

#: ``progress(index, done, total, status)``: run ``index`` has ``done`` of ``total`` samples
#: written; status is ``"planned"``, ``"running"``, ``"done"``, ``"reused"`` or ``"failed"``.
SweepProgress = Callable[[int, int, "int | None", str], None]


@dataclass
class SweepRun:
    """One evaluation of a sweep: ``evaluate(model, data, orbit, task, **options)``.

    ``label`` names it in tables (default: the run name); ``options`` are :func:`evaluate`'s
    keyword arguments (``batch_size``, ``normalize``, ``view_size``, …; not ``store``,
    ``executor`` or ``progress``, which the sweep sets). ``data_label``, ``orbit_label`` and
    ``task_label`` are the data, orbit and task as a sweep file wrote them (for tables)."""

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
    orbit_label: str = ""


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


def sweep_chunk(job: tuple[int, ChunkJob], contexts: Any) -> Any:
    """Executor job of a sweep: chunk ``job[1]`` of run ``job[0]``; an error comes back as a
    :class:`~orbitscope.engine.executor_base.JobFailure`."""
    key, chunk = job
    try:
        return evaluate_chunk(chunk, contexts[key])
    except Exception as exc:  # noqa: BLE001 - reported per run by the driver
        return JobFailure.of(exc)


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
        A :class:`SweepResult`. A run that fails (planning, shipping, a chunk on a worker, writing
        it) is in it with its error, never raised; a run listed twice (the same run id) is
        computed once and both entries get its outcome.
    """
    from ..results.store import RunBusyError, open_store
    from .shipping import ship

    if store is None:
        raise ValueError("a sweep needs a store (a directory): every run is written there as it goes")
    st = open_store(store)
    runner = get_executor(executor)
    t0 = time.perf_counter()
    outcomes = [SweepOutcome(spec, "planned") for spec in runs]
    planned: dict[int, PlannedRun] = {}
    locks: dict[int, ExitStack] = {}
    started: dict[int, float] = {}
    duplicates: dict[int, str] = {}  # entry -> the run id it repeats
    shipped: dict[int, Any] = {}  # run -> its context ready to travel (executors that ship)

    def report(i: int, status: str) -> None:
        if progress is not None:
            p = planned.get(i)
            progress(i, p.done if p is not None else 0, p.n if p is not None else None, status)

    def release(i: int) -> None:
        lock = locks.pop(i, None)
        if lock is not None:
            lock.close()

    def fail(i: int, message: str) -> None:
        o = outcomes[i]
        o.status, o.error = "failed", message
        o.seconds = time.perf_counter() - started.get(i, t0)
        report(i, "failed")
        planned.pop(i, None)
        release(i)

    def finish(i: int) -> None:
        p = planned[i]
        o = outcomes[i]
        try:
            o.run = p.finish()
        except (OrbitscopeError, OSError, ValueError) as exc:  # e.g. an empty dataset, a full disk
            fail(i, f"run {short_repr(p.name, 80)} ({p.run_id}): {type(exc).__name__}: {exc}")
            return
        o.status, o.samples = "done", p.done
        o.seconds = time.perf_counter() - started.get(i, t0)
        report(i, "done")
        planned.pop(i)
        release(i)

    # the models' eval modes stay in one stack for the whole sweep (a model may serve several runs);
    # each run's one-writer lock is released as soon as that run ends
    with ExitStack() as modes:
        modes.callback(lambda: [release(i) for i in list(locks)])
        for i, o in enumerate(outcomes):  # each run made once (a sweep file's runs are made when read)
            spec = o.spec
            lock = locks[i] = ExitStack()
            try:
                p = plan_run(modes, spec.model, spec.data, spec.orbit, spec.task, store=st, name=spec.name,
                             model_name=spec.model_name, resume=resume, lock_stack=lock, **spec.options)
                if runner.ships_by_reference and p.reused is None:
                    shipped[i] = ship(p.ctx)  # a model or dataset that cannot travel fails this run only
            except RunBusyError as exc:
                duplicates[i] = exc.run_id
                release(i)
                continue
            except (OrbitscopeError, ValueError, TypeError, RuntimeError, OSError) as exc:
                o.status, o.error = "failed", f"{spec.label or spec.name or f'run {i}'}: {type(exc).__name__}: {exc}"
                release(i)
                report(i, "failed")
                continue
            o.run_id, o.name = p.run_id, p.name
            if p.reused is not None:
                o.status, o.run, o.samples = "reused", p.reused, p.n or 0
                release(i)
                if progress is not None:
                    progress(i, p.n or 0, p.n, "reused")
                continue
            planned[i] = p
            report(i, "planned")
        contexts = Contexts({i: shipped.get(i, p.ctx) for i, p in planned.items()})  # each shipped once

        def jobs() -> Iterator[tuple[int, ChunkJob]]:
            for i in sorted(planned):
                p = planned.get(i)
                if p is None:
                    continue
                try:
                    for job in p.jobs():
                        if i not in planned:  # it failed meanwhile: skip its remaining chunks
                            break
                        started.setdefault(i, time.perf_counter())
                        yield i, job
                except (OrbitscopeError, OSError, ValueError, TypeError, RuntimeError) as exc:  # reading its data
                    if i in planned:
                        fail(i, f"run {short_repr(p.name, 80)} ({p.run_id}): reading its data failed: {type(exc).__name__}: {exc}")

        while planned:
            try:
                for (i, job), result in runner.map(sweep_chunk, jobs(), contexts):
                    p = planned.get(i)
                    if p is None:  # the run failed already; its late chunks are dropped
                        continue
                    if isinstance(result, JobFailure):
                        fail(i, f"run {short_repr(p.name, 80)} ({p.run_id}), {_chunk_text(job)}: {result.kind}: {result.message}")
                        continue
                    try:
                        p.write(job, result)
                    except (OrbitscopeError, OSError, ValueError) as exc:
                        fail(i, f"run {short_repr(p.name, 80)} ({p.run_id}), writing {_chunk_text(job)}: {type(exc).__name__}: {exc}")
                        continue
                    report(i, "running")
                    if p.source.n_chunks is not None and len(p.skip) >= p.source.n_chunks:
                        finish(i)
                for i in sorted(planned):  # sources of unknown length (or empty ones) end when their jobs do
                    finish(i)
            except JobError as exc:  # the executor could not run a job at all (e.g. its workers kept dying)
                key, job = exc.job if isinstance(exc.job, tuple) and len(exc.job) == 2 else (None, None)
                if key in planned:
                    p = planned[key]
                    where = _chunk_text(job) if isinstance(job, ChunkJob) else "a chunk"
                    fail(key, f"run {short_repr(p.name, 80)} ({p.run_id}), {where}: {exc}")
                elif key is None:
                    for i in sorted(planned):
                        fail(i, f"the executor failed: {exc}")
                # else: a late failure of a run that failed already; go on with the others
    by_id = {o.run_id: o for o in outcomes if o.run_id is not None}
    for i, run_id in duplicates.items():
        first = by_id.get(run_id)
        o = outcomes[i]
        if first is None:  # pragma: no cover - the busy run is always one planned before
            o.status, o.error = "failed", f"run {run_id} is being written elsewhere in this process"
            continue
        o.run_id, o.name, o.status, o.run, o.error, o.samples = (first.run_id, first.name, first.status, first.run,
                                                                  first.error, first.samples)
        report(i, o.status)
    return SweepResult(outcomes, time.perf_counter() - t0, getattr(runner, "name", type(runner).__name__))

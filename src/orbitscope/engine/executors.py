"""Executors: where jobs run. ``evaluate`` hands its chunk jobs to one, and so do the model-zoo
builder and the demo for training jobs; results always come back to the caller, the one writer.

* :class:`LocalExecutor` (default): in this process, in order, lazily (a DataLoader is read as
  the jobs are consumed, so memory stays bounded).
* :class:`ProcessExecutor`: a pool of worker processes (``spawn`` start method: safe with torch's
  thread pools); the shared context is pickled once per worker, jobs as they are submitted; at
  most ``2 × workers`` jobs are in flight, and results are yielded as they complete.

A job function is ``fn(job, context) -> result``; both must be picklable for processes (defined
at module level, models whose classes can be imported). Results are the same whichever executor
ran them: every job carries its own seed, and by default each worker uses as many torch threads
as the calling process (the thread count changes float summation order). With the ``spawn``
start method a script that starts a process executor must guard its entry point with
``if __name__ == "__main__":`` (Python re-imports the main module in every worker).

Executors are registered in :data:`EXECUTORS` (``"local"``, ``"process"``, and ``"ray"``: the
distributed one, :mod:`.ray_executor`, which ships contexts by reference, :mod:`.shipping`).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator, TypeVar

from .._registry import Registry
from .executor_base import Executor

__all__ = ["Executor", "LocalExecutor", "ProcessExecutor", "EXECUTORS", "get_executor"]

J = TypeVar("J")
R = TypeVar("R")


class LocalExecutor(Executor):
    """In-process, in job order."""

    name = "local"

    def map(self, fn: Callable[[Any, Any], R], jobs: Iterable[J], context: Any = None) -> Iterator[tuple[J, R]]:
        for job in jobs:
            yield job, fn(job, context)


_WORKER_CONTEXT: Any = None


def _init_worker(context: Any, threads: int | None) -> None:
    global _WORKER_CONTEXT
    if threads:
        import torch

        torch.set_num_threads(threads)
    _WORKER_CONTEXT = context


def _run_in_worker(fn: Callable[[Any, Any], Any], job: Any) -> Any:
    return fn(job, _WORKER_CONTEXT)


class ProcessExecutor(Executor):
    """A pool of ``workers`` processes.

    Args:
        workers: number of processes (default: the CPU count, at most 4).
        threads: torch intra-op threads per worker. Default: this process's own count
            (``torch.get_num_threads()``), which keeps results bit-identical to the local
            executor at the same forward batch (the local executor may tune its forward batch
            for the optimised model: pass ``forward_batch`` for bit-identical runs). Fewer threads per worker (e.g. 1) avoid oversubscribing the CPU and are
            faster, but matrix products then sum in another order and values may differ in the
            last bits (about 1e-7 relative in float32).
        start_method: multiprocessing start method (``"spawn"`` by default; ``"fork"`` starts
            faster but is unsafe once torch has started its thread pools).
    """

    name = "process"

    def __init__(self, workers: int | None = None, threads: int | None = None, start_method: str = "spawn") -> None:
        cpus = os.cpu_count() or 1
        self.workers = int(workers) if workers is not None else min(cpus, 4)
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if threads is None:
            import torch

            threads = torch.get_num_threads()
        self.threads = int(threads)
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.start_method = start_method

    def map(self, fn: Callable[[Any, Any], R], jobs: Iterable[J], context: Any = None) -> Iterator[tuple[J, R]]:
        ctx = multiprocessing.get_context(self.start_method)
        it = iter(jobs)
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(context, self.threads)) as pool:
            pending: dict[Future[Any], Any] = {}

            def submit() -> bool:
                try:
                    job = next(it)
                except StopIteration:
                    return False
                pending[pool.submit(_run_in_worker, fn, job)] = job
                return True

            for _ in range(2 * self.workers):
                if not submit():
                    break
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        job = pending.pop(fut)
                        result = fut.result()  # re-raises a worker's exception here
                        submit()
                        yield job, result
            finally:
                for fut in pending:
                    fut.cancel()

    def __repr__(self) -> str:
        return f"ProcessExecutor(workers={self.workers}, threads={self.threads})"


#: Registered executors: name -> factory(**options) -> Executor.
EXECUTORS: Registry[Callable[..., Executor]] = Registry("executor")
EXECUTORS.register("local", LocalExecutor)
EXECUTORS.register("process", ProcessExecutor)


def _ray_executor(**options: Any) -> Executor:
    from .ray_executor import RayExecutor  # ray itself is imported only when a map starts

    return RayExecutor(**options)


EXECUTORS.register("ray", _ray_executor)


def get_executor(executor: str | Executor | None, **options: Any) -> Executor:
    """An executor instance from a name (``"local"``, ``"process"``, ``"ray"`` or another
    registered one) built with ``options``, an instance (returned as is), or None (local)."""
    if executor is None:
        return LocalExecutor()
    if isinstance(executor, Executor):
        return executor
    return EXECUTORS.get(executor)(**options)

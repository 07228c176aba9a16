"""The Ray executor: jobs run as Ray tasks on a cluster (or a local Ray); results come back to the
caller, which stays the one writer of the store.

Install it with ``pip install 'orbitscope[ray]'``. ``RayExecutor()`` starts a local Ray with
``workers`` CPUs (or joins the one already started in this process); ``RayExecutor(address=...)``
joins a cluster: ``"auto"`` (the one ``ray start`` started on this machine), ``"HOST:PORT"``
(its GCS) or ``"ray://HOST:10001"`` (Ray Client).

* The shared context is shipped once per :meth:`map` by reference (:mod:`.shipping`: the model
  as its factory or config plus its weights, the data as its spec or arrays), put in Ray's object
  store, and landed once per worker process (rebuilt and cached there).
* Each job is a task with ``num_cpus`` CPUs. It runs on the device the caller chose (the
  model's, or ``evaluate(device=...)``), so results are the caller's: a CPU evaluation stays on
  CPUs even on a cluster with GPUs. Work on ``cuda`` asks each task for one GPU (or
  ``num_gpus``); ``num_gpus > 0`` given for CPU work moves the model to the worker's GPU (faster,
  and then results differ from a CPU run in the last float bits; run ids do not record the
  device). Results (dicts of numpy arrays) return through the object store. At most
  ``in_flight`` tasks are pending at once, and results are yielded as they complete.
* Faults: a task whose worker process dies is retried by Ray (``max_retries`` times); a job that
  raises comes back as a :class:`~orbitscope.errors.JobError` whose ``cause`` is the worker's
  exception (the caller names the run and chunk).
* Numbers: each task uses ``threads`` torch threads (default: this process's count, which keeps
  results bit-identical to the local executor on the same machine at the same forward batch (pass
  ``forward_batch``: the local executor may tune it); 1 is faster when every CPU
  runs a task, and differs in the last float bits).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ..errors import JobError, SpecError
from .executor_base import Executor
from .shipping import ship

__all__ = ["RayExecutor", "ray_module"]

J = TypeVar("J")
R = TypeVar("R")

#: landed contexts in this (worker) process, by object-store id; the newest few are kept
_LANDED: "OrderedDict[str, Any]" = OrderedDict()
_KEEP_LANDED = 4


def ray_module() -> Any:
    """The ``ray`` package, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise SpecError("the Ray executor needs the optional package ray: pip install 'orbitscope[ray]' "
                        "(or use executor 'local' or 'process')") from exc
    return ray


def _run_task(fn: Callable[[Any, Any], Any], job: Any, holder: list[Any], threads: int | None, device: str | None) -> Any:
    """The body of every Ray task: land the shared context (once per worker), run ``fn``."""
    import ray
    import torch

    if threads:
        torch.set_num_threads(threads)
    ref = holder[0]  # inside a list, so Ray passes the reference and does not fetch it per task
    key = ref.hex()
    ctx = _LANDED.get(key)
    if ctx is None:
        dev = device
        if dev == "auto":
            dev = "cuda" if ray.get_gpu_ids() else None
        ctx = ray.get(ref).landed(dev)
        _LANDED[key] = ctx
        while len(_LANDED) > _KEEP_LANDED:
            _LANDED.popitem(last=False)
    return fn(job, ctx)


def _devices(shipped: Any) -> set[str]:
    """The device types a shipped context (or a set of them) runs on."""
    items = shipped.values() if isinstance(shipped, dict) else [shipped]
    out = set()
    for item in items:
        ctx = getattr(item, "context", item)
        dev = getattr(ctx, "device", None)
        if dev is not None:
            out.add(getattr(dev, "type", str(dev)))
    return out


class RayExecutor(Executor):
    """Jobs as Ray tasks (see the module docs).

    Args:
        address: the cluster to join (``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:PORT"``);
            None: the Ray already started in this process, else a new local one.
        workers: CPUs of a new local Ray (default: this machine's CPU count); ignored when
            joining a cluster.
        num_cpus: CPUs per task.
        num_gpus: GPUs per task; None: 1 for work on ``cuda``, else 0 (see the module docs).
        threads: torch threads per task (default: this process's ``torch.get_num_threads()``).
        max_retries: times Ray reruns a task whose worker process died.
        in_flight: most pending tasks (default: twice the tasks the cluster runs at once).
        init_options: more keyword arguments for ``ray.init`` (e.g. ``runtime_env``).
    """

    name = "ray"
    ships_by_reference = True

    def __init__(self, address: str | None = None, workers: int | None = None, num_cpus: float = 1,
                 num_gpus: float | None = None, threads: int | None = None, max_retries: int = 3,
                 in_flight: int | None = None, init_options: dict[str, Any] | None = None) -> None:
        if workers is not None and int(workers) < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if num_cpus <= 0:
            raise ValueError(f"num_cpus must be > 0, got {num_cpus}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if threads is None:
            import torch

            threads = torch.get_num_threads()
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.address, self.workers = address, (int(workers) if workers is not None else None)
        self.num_cpus, self.num_gpus, self.threads = float(num_cpus), num_gpus, int(threads)
        self.max_retries, self.in_flight = int(max_retries), in_flight
        self.init_options = dict(init_options or {})
        self.started_here = False

    def connect(self) -> Any:
        """Join (or start) Ray; returns the ``ray`` module."""
        ray = ray_module()
        if ray.is_initialized():
            if self.address:
                logging.getLogger(__name__).info("Ray is already running in this process; using it, not %r",
                                                 self.address)
            return ray
        options: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        options.update(self.init_options)
        if self.address:
            options.pop("include_dashboard")  # only for a Ray started here
            try:
                ray.init(address=self.address, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise SpecError(f"cannot join the Ray cluster at {self.address!r}: {exc}. Start one with "
                                "'ray start --head', or leave the address out for a local Ray") from exc
        else:
            ray.init(num_cpus=self.workers or os.cpu_count() or 1, **options)
            self.started_here = True
        return ray

    def close(self) -> None:
        """Shut down the local Ray this executor started (a joined cluster keeps running). A local
        Ray otherwise stays up for this process's later maps and stops when the process exits."""
        if self.started_here:
            ray_module().shutdown()
            self.started_here = False

    def _gpus(self, shipped: Any) -> float:
        if self.num_gpus is not None:
            return float(self.num_gpus)
        return 1.0 if "cuda" in _devices(shipped) else 0.0

    def map(self, fn: Callable[[Any, Any], R], jobs: Iterable[J], context: Any = None) -> Iterator[tuple[J, R]]:
        it = iter(jobs)
        try:  # no jobs (e.g. every chunk already written): neither Ray nor the model is needed
            first = [next(it)]
        except StopIteration:
            return
        shipped = ship(context)
        ray = self.connect()
        holder = [ray.put(shipped)]
        gpus = self._gpus(shipped)
        if gpus > 0 and ray.cluster_resources().get("GPU", 0) < gpus:
            raise SpecError(f"each job needs {gpus:g} GPU(s) but the Ray cluster has "
                            f"{ray.cluster_resources().get('GPU', 0):g}: evaluate on cpu, or join a cluster with GPUs")
        task = ray.remote(_run_task).options(num_cpus=self.num_cpus, num_gpus=gpus, max_retries=self.max_retries)
        device = "auto" if gpus > 0 else None
        limit = self.in_flight or max(2, int(2 * ray.cluster_resources().get("CPU", 1) // self.num_cpus))
        pending: dict[Any, Any] = {}

        def submit() -> bool:
            try:
                job = first.pop() if first else next(it)
            except StopIteration:
                return False
            pending[task.remote(fn, job, holder, self.threads, device)] = job
            return True

        for _ in range(limit):
            if not submit():
                break
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    job = pending.pop(ref)
                    result = self._result(ray, ref, job)
                    submit()
                    yield job, result
        finally:
            self._drop(ray, list(pending))

    @staticmethod
    def _drop(ray: Any, refs: list[Any]) -> None:
        """Cancel the tasks still pending when a map stops early, and collect their results (an
        error nobody fetched would be printed by Ray as "unhandled")."""
        for ref in refs:
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - best effort: the task may be finishing
                pass
        if refs:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=2.0)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception:  # noqa: BLE001 - cancelled or failed: nobody needs it now
                    pass

    def _result(self, ray: Any, ref: Any, job: Any) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the job raised on its worker
            cause = getattr(exc, "cause", None) or exc
            where = f"a Ray worker (pid {getattr(exc, 'pid', '?')} on {getattr(exc, 'ip', '?')})"
            raise JobError(f"{type(cause).__name__} on {where}: {cause}", job, cause, where) from cause
        except ray.exceptions.RayError as exc:  # e.g. its worker died more than max_retries times
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise JobError(f"Ray could not run the job after {self.max_retries} retries: {first}", job, exc,
                           "Ray") from exc

    def __repr__(self) -> str:
        where = self.address or "local Ray"
        return f"RayExecutor({where!r}, num_cpus={self.num_cpus:g}, threads={self.threads})"

"""Overlap for in-process evaluation: read the next chunks while the model runs, write the last
one while the next is computed.

* :func:`read_ahead` / :func:`prefetched` read chunk data in a background thread, ``depth``
  chunks ahead of the consumer (reading a map-style dataset, decoding, collating; on CUDA the
  batch is put in pinned memory so that the copy to the device can run asynchronously); data
  that draws random numbers when read is read in order instead (results must not depend on
  timing).
* :class:`BackgroundWriter` records finished chunks in a background thread, at most ``depth``
  chunks behind, so that the next chunk's warp and forward do not wait for the store.

Both threads do work that mostly runs outside the GIL (tensor ops, zarr compression, file
writes) while the main thread runs the model. Nothing is lost when the loop is interrupted: the
writer finishes every chunk handed to it before the error propagates, so a resumed run starts
after the last computed chunk.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from typing import Any, Callable, Iterable, Iterator, TypeVar

import numpy as np
import torch

from .model_call import map_tensors

__all__ = ["prefetched", "read_ahead", "BackgroundWriter", "pin_batch"]

log = logging.getLogger(__name__)

J = TypeVar("J")

_DONE = object()


def pin_batch(batch: Any) -> Any:
    """CPU tensors of a collated batch (tensors, tuples, lists, dicts, dataclasses) in pinned memory."""
    return map_tensors(lambda t: t.pin_memory() if t.device.type == "cpu" else t, batch)


def prefetched(jobs: Iterable[J], load: Callable[[J], J], depth: int = 2) -> Iterator[J]:
    """``load(job)`` for every job, computed in a background thread (started at once) at most
    ``depth`` jobs ahead of the consumer, yielded in order. An exception raised by ``load`` is
    re-raised here, at the job where it happened; closing the iterator stops the thread."""
    if depth < 1:
        return (load(j) for j in jobs)
    slots: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def produce() -> None:
        job: Any = None
        try:
            for job in jobs:
                if stop.is_set():
                    return
                put((True, load(job)))
                job = None
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put((False, (exc, job)))
            return
        put((True, _DONE))

    thread = threading.Thread(target=produce, name="orbitscope-prefetch", daemon=True)
    thread.start()
    return _Prefetch(slots, stop, thread)


class _Prefetch:
    """The consumer side of :func:`prefetched`: an iterator whose ``close()`` stops the reader
    thread, also before the first item was taken. After ``load`` raised, ``failed_job`` is the
    job it raised on (None when the jobs' iterator itself raised)."""

    def __init__(self, slots: queue.Queue[Any], stop: threading.Event, thread: threading.Thread) -> None:
        self.slots, self.stop, self.thread = slots, stop, thread
        self.failed_job: Any = None

    def __iter__(self) -> "_Prefetch":
        return self

    def __next__(self) -> Any:
        if self.stop.is_set():
            raise StopIteration
        ok, item = self.slots.get()
        if not ok:
            self.close()
            exc, self.failed_job = item
            raise exc
        if item is _DONE:
            self.close()
            raise StopIteration
        return item

    def close(self) -> None:
        self.stop.set()
        self.thread.join()

    def __del__(self) -> None:  # an abandoned reader stops too
        self.stop.set()


def _rng_fingerprint() -> tuple[Any, ...]:
    """The states of torch's, numpy's and Python's global random generators."""
    state = np.random.get_state()
    return torch.get_rng_state(), hash(state[1].tobytes()) ^ hash(state[2:]), random.getstate()


def read_ahead(jobs: Iterable[J], load: Callable[[J], J], depth: int = 2) -> Iterator[J]:
    """``load(job)`` for every job, in order: the first here; the rest in a reader thread
    (:func:`prefetched`) unless loading the first drew from torch's, numpy's or Python's global
    random generators (e.g. random augmentations in ``__getitem__``). Such data is read in this
    thread, between the chunks, as without read-ahead: a reader thread would interleave its
    draws with the model's seeded ones and make results depend on timing. A chunk whose reading
    fails in the reader thread is read again here; if that works (data bound to the thread that
    opened it, e.g. a sqlite connection), the rest is read here too."""
    it = iter(jobs)
    first = next(it, None)
    if first is None:
        return
    before = _rng_fingerprint()
    loaded = load(first)
    after = _rng_fingerprint()
    draws = not (torch.equal(before[0], after[0]) and before[1:] == after[1:])
    if draws:
        log.info("the data draws random numbers when read: chunks are read in order, without read-ahead")
        yield loaded
        yield from (load(j) for j in it)
        return
    rest = prefetched(it, load, depth)
    try:
        yield loaded
        while True:
            try:
                item = next(rest)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - retried here: data may not read in other threads
                job = getattr(rest, "failed_job", None)
                if job is None:
                    raise
                item = load(job)  # a real read error raises again, here
                log.warning("reading chunk data in a reader thread failed (%s: %s) but works in this thread: "
                            "reading the rest in order, without read-ahead", type(exc).__name__, exc)
                yield item
                yield from (load(j) for j in it)  # the reader thread has stopped: `it` goes on after `job`
                return
            yield item
    finally:
        rest.close()


class BackgroundWriter:
    """``write(*args)`` calls run in one background thread, in order, at most ``depth`` behind
    (``depth=0``: in the caller's thread, at once).

    Use as a context manager: :meth:`submit` queues a call (and re-raises an earlier call's
    error); leaving the block waits for every queued call, also when the block raised, so that
    every computed chunk is written. A write error is raised at the next submit or at exit."""

    def __init__(self, write: Callable[..., None], depth: int = 1) -> None:
        self.write = write
        self.calls: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="orbitscope-writer", daemon=True) if depth > 0 else None

    def _run(self) -> None:
        while True:
            args = self.calls.get()
            if args is _DONE:
                return
            if self.error is None:
                try:
                    self.write(*args)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    self.error = exc

    def __enter__(self) -> "BackgroundWriter":
        if self.thread is not None:
            self.thread.start()
        return self

    def submit(self, *args: Any) -> None:
        if self.thread is None:  # depth 0: write now, in this thread
            self.write(*args)
            return
        if self.error is not None:
            raise self.error
        self.calls.put(args)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.thread is None:
            return
        self.calls.put(_DONE)
        self.thread.join()
        if self.error is not None and exc is None:
            raise self.error

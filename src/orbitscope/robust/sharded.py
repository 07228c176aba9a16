"""Certification on executors: the shards of ``certify(..., executor=...)``.

:func:`~orbitscope.robust.certify.certify` given an executor (a name such as ``"process"`` or
``"ray"``, or an :class:`~orbitscope.engine.executors.Executor` instance) splits the N inputs into
contiguous shards ``[s, s + shard_size)``. Each shard is one job (:func:`certify_shard`): it runs
:func:`~orbitscope.robust.certify.certify_slice` — the model in eval mode behind certify's model
call, with certify's normalisation, then ``certify_forward`` — on its slice of the data with
``stream_offset=s`` and the run's test, κ, α, budget, mode, batch size, pool size and seed. The
driver merges the shards' results in input order
(:func:`~orbitscope.robust.certify.merge_certifications`: per-input arrays concatenated, queries
summed, dataset numbers recomputed) and stays the only caller of ``progress``, called as
``progress(inputs_decided, n_inputs)`` as shards return.

Determinism: sharded = local, bit for bit. Input i's perturbations come from its own stream,
seeded by ``SeedSequence([seed, i, block])`` whichever shard holds it, and every test decides
input by input from that input's counts, so each input's outcome, samples, failures, looks,
bound, first failure and tower failures — and so the query count and the dataset numbers — are
those of the unsharded run. (As for a local run with another batch size, this assumes the model
scores an image independently of the other images in its batch, and that sampling runs on the
same kind of device: a CUDA generator draws other numbers than a CPU one.)

The shared context, :class:`ShardedCertify`, holds the model, the data, the sampler spec and the
options. The local and process executors use it as it is (process workers get a pickled copy,
once per worker); the Ray executor ships it (:meth:`ShardedCertify.shipped`): the model as a
:class:`~orbitscope.engine.shipping.ModelRef` (rebuilt on the worker and checked by hash), a
dataset as a :class:`~orbitscope.engine.shipping.DataRef` (its data spec, or its pickle), arrays
as they are. The data must be readable by index (a Dataset or arrays, not a DataLoader).

A shard that fails comes back as a :class:`~orbitscope.engine.executor_base.JobFailure`; the
driver raises its error (:func:`shard_error`: a DataError, ModelError, SpecError, ValueError or
TypeError as on the worker, else a ModelError) naming the shard's inputs, with the worker's
traceback as a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from ..engine.executor_base import JobFailure
from ..engine.executors import Executor, get_executor
from ..engine.shipping import DataRef, ModelRef, check_plain, data_ref, model_ref
from ..errors import DataError, JobError, ModelError, SpecError
from .samplers import PerturbationSampler, sampler_from_spec

__all__ = ["ShardedCertify", "ShippedCertify", "shard_error", "certify_shard", "run_shards", "shard_ranges",
           "input_count", "data_slice", "sampler_spec"]

Progress = Callable[[int, int | None], None]
#: The errors a failed shard is raised as on the driver (by name; any other becomes a ModelError).
_KINDS: dict[str, type[Exception]] = {cls.__name__: cls for cls in (DataError, ModelError, SpecError, ValueError,
                                                                    TypeError)}


# ---------------------------------------------------------------------------------------------
# the data: counted and sliced by index
# ---------------------------------------------------------------------------------------------


def _is_item_list(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and all(isinstance(d, tuple) and len(d) >= 2 for d in data)


def _is_pair(data: Any) -> bool:
    return isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, Dataset)


def _is_arrays(data: Any) -> bool:
    """Data that travels as it is: images alone, a pair (images, labels), a list of items."""
    return isinstance(data, (Tensor, np.ndarray)) or _is_item_list(data) or _is_pair(data)


def input_count(data: Any) -> int:
    """The number of inputs of certify's ``data`` read by index (see :func:`data_slice`)."""
    if isinstance(data, DataLoader):
        raise DataError("certify on an executor reads the inputs by index, which a DataLoader cannot do: pass its "
                        "dataset (loader.dataset) or the arrays, or certify without an executor")
    if isinstance(data, (Tensor, np.ndarray)) or _is_item_list(data):
        return len(data)
    if _is_pair(data):
        images, labels = data
        if len(images) != len(labels):
            raise DataError(f"images and labels differ in length: {len(images)} vs {len(labels)}")
        return len(images)
    if isinstance(data, Dataset) and hasattr(data, "__len__"):
        return len(data)  # type: ignore[arg-type]
    raise TypeError("data must be a map-style torch Dataset of (image, label), a pair (images, labels) of arrays, "
                    f"or (label-free) images alone; got {type(data).__name__}")


def data_slice(data: Any, start: int, stop: int) -> Any:
    """Inputs ``start … stop−1`` of ``data`` in the same form (arrays sliced, a Dataset as a
    :class:`~torch.utils.data.Subset`)."""
    if isinstance(data, (Tensor, np.ndarray)) or _is_item_list(data):
        return data[start:stop]
    if _is_pair(data):
        images, labels = data
        return images[start:stop], labels[start:stop]
    return Subset(data, range(start, stop))


def shard_ranges(n: int, shard_size: int) -> list[tuple[int, int]]:
    """``[(0, shard_size), (shard_size, 2·shard_size), …, (…, n)]``: contiguous input ranges."""
    if isinstance(shard_size, bool) or not isinstance(shard_size, (int, np.integer)) or shard_size < 1:
        raise ValueError(f"shard_size must be a positive integer (inputs per job), got {shard_size!r}")
    return [(s, min(s + int(shard_size), n)) for s in range(0, n, int(shard_size))]


def sampler_spec(sampler: PerturbationSampler) -> dict[str, Any]:
    """``sampler.spec()``, checked to rebuild the sampler (workers rebuild it from the spec)."""
    spec = sampler.spec()
    try:
        sampler_from_spec(spec)
    except (SpecError, KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"the sampler {sampler!r} cannot be rebuilt from its spec {spec!r} ({exc}), so it cannot be "
                        "sent to workers: register its class (orbitscope.robust.register_perturbation) in a module "
                        "the workers import, or certify without an executor") from exc
    return spec


# ---------------------------------------------------------------------------------------------
# the shared context and the job
# ---------------------------------------------------------------------------------------------


@dataclass
class ShardedCertify:
    """The shared context of the shard jobs of one certification.

    Attributes:
        model: the model (in a worker: its copy, or the one rebuilt from a :class:`ModelRef`).
        data: the whole data (a Dataset, a pair of arrays, images alone or a list of items).
        sampler: the sampler's spec (:func:`sampler_spec`).
        normalize: certify's ``(mean, std)`` normalisation, or None.
        device: where sampling and the model run (as a string).
        options: the other keyword arguments of ``certify_forward`` (test, kappa, alpha, budget,
            label_free, batch_size, max_active, seed, return_counterexamples).
        run: the function a shard runs, :func:`orbitscope.robust.certify.certify_slice` (given
            by certify; module-level, so it pickles by reference).
    """

    model: nn.Module
    data: Any
    sampler: dict[str, Any]
    normalize: tuple[Sequence[float], Sequence[float]] | None
    device: str
    options: dict[str, Any]
    run: Callable[..., Any]

    def certify_inputs(self, start: int, stop: int) -> Any:
        """The certification result of inputs ``start … stop−1`` (their streams numbered from ``start``)."""
        return self.run(self.model, data_slice(self.data, start, stop), sampler_from_spec(self.sampler),
                        normalize=self.normalize, device=self.device, stream_offset=start, **self.options)

    def shipped(self) -> ShippedCertify:
        """This context ready to travel by reference (Ray): the model as a :class:`ModelRef`, a
        dataset as a :class:`DataRef`, arrays as they are."""
        settings = (self.sampler, self.normalize, self.device, self.options, self.run)
        check_plain(settings)
        data = self.data if _is_arrays(self.data) else data_ref(self.data)
        return ShippedCertify(model_ref(self.model), data, self.sampler, self.normalize, self.device,
                              dict(self.options), self.run)


@dataclass(frozen=True)
class ShippedCertify:
    """A :class:`ShardedCertify` by reference; :meth:`landed` rebuilds it on a worker."""

    model: ModelRef
    data: Any = field(repr=False)
    sampler: dict[str, Any]
    normalize: tuple[Sequence[float], Sequence[float]] | None
    device: str
    options: dict[str, Any]
    run: Callable[..., Any]
    is_shipped = True  # a class attribute: ready to travel (shipping.ship returns it as it is)

    def landed(self, device: torch.device | str | None = None) -> ShardedCertify:
        """The context on this worker: the model rebuilt (eval mode, checked against the sent
        one) on ``device`` (default: the driver's), the data re-opened."""
        dev = str(device) if device is not None else self.device
        data = self.data.open() if isinstance(self.data, DataRef) else self.data
        return ShardedCertify(self.model.build().to(dev), data, self.sampler, self.normalize, dev, dict(self.options),
                              self.run)


def shard_error(failure: JobFailure, shard: tuple[int, int], n: int, where: str) -> Exception:
    """The error the driver raises for a shard that failed on its worker, naming the shard's
    inputs: the worker's type where it is a DataError, ModelError, SpecError, ValueError or
    TypeError (else a ModelError), with the worker's traceback attached as a note."""
    start, stop = shard
    exc = _KINDS.get(failure.kind, ModelError)(f"certifying inputs {start}–{stop - 1} (of {n}) failed on {where}: "
                                               f"{failure.kind}: {failure.message}")
    exc.add_note(f"worker traceback:\n{failure.detail}")
    return exc


def certify_shard(shard: tuple[int, int], context: ShardedCertify) -> Any:
    """Executor job: the certification result of inputs ``shard = (start, stop)``, or a
    :class:`~orbitscope.engine.executor_base.JobFailure` when it raises (the driver raises it,
    naming the shard: :func:`shard_error`)."""
    start, stop = shard
    try:
        return context.certify_inputs(start, stop)
    except Exception as exc:  # noqa: BLE001 - raised by the driver, with the shard named
        return JobFailure.of(exc)


def run_shards(context: ShardedCertify, executor: str | Executor, *, shard_size: int = 64,
               progress: Progress | None = None) -> list[Any]:
    """Certify the shards of ``context.data`` on ``executor``; returns their results in input
    order (merge them with :func:`~orbitscope.robust.certify.merge_certifications`).
    ``progress(inputs_decided, n_inputs)`` is called as shards return."""
    n = input_count(context.data)
    shards = shard_ranges(n, shard_size)
    if not shards:
        raise DataError("the dataset is empty: nothing to certify")
    runner = get_executor(executor)
    where = repr(runner)
    parts: dict[int, Any] = {}
    decided = 0
    results = runner.map(certify_shard, shards, context)
    try:
        for shard, part in results:
            if isinstance(part, JobFailure):
                raise shard_error(part, shard, n, where)
            parts[shard[0]] = part
            decided += shard[1] - shard[0]
            if progress is not None:
                progress(decided, n)
    except JobError as exc:  # the executor could not run a shard at all (e.g. its worker kept dying)
        if not (isinstance(exc.job, tuple) and len(exc.job) == 2):
            raise
        start, stop = exc.job
        raise JobError(f"certifying inputs {start}–{stop - 1} (of {n}) failed on {exc.where or where}: {exc}",
                       exc.job, exc.cause, exc.where) from exc
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()  # stop the executor's pending jobs when a shard failed
    return [parts[start] for start, _ in shards]

"""``evaluate``: plan chunk jobs, hand them to an executor, record each chunk once.

For every chunk of ``batch_size`` samples the engine applies all orbit elements to the inputs and
the targets through their data kinds (one batched warp per slice of elements for images), feeds
the model slices of about ``forward_batch`` transformed inputs under ``torch.inference_mode``,
scores them with the task (which sees each row's element), and the one writer records the chunk's
arrays (sample × orbit element) in the store before the next. Peak memory is bounded by one chunk
per worker, independent of the dataset's size. A run is identified by what determines its numbers
(model weights, data, orbit, task, chunking, normalisation, interpolation, …); evaluating the same
thing again resumes an interrupted run or returns a finished one from the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import DamagedRunError, DataError, JobError, ModelError, SpecError
from ..group.elements import unique_elements
from ..group.orbits import Orbit
from ..kinds.base import get_kind
from ..results.result import OrbitResult, assemble_result
from ..results.store import Store, open_store
from ..tasks import Classification, Task, Variable
from ..tasks.variables import ENGINE_VARIABLES
from .activations import ActivationProbe
from .batch_probe import BatchTuner, tuning_candidates, worth_tuning
from .chunk import ChunkJob, EvalContext, evaluate_chunk, first_forward_rows
from .executors import Executor, LocalExecutor, get_executor
from .model_call import ModelCall, Normalizer
from .pipeline import BackgroundWriter, pin_batch, read_ahead
from .optimization import check_optimize_options, propose_optimization, verify_on_first_batch
from .source import DataSource, groups_identity

__all__ = ["evaluate", "plan_run", "PlannedRun", "Run", "ModelError", "DataError", "plan_jobs", "forward_batch_for", "MAX_JOB_INPUTS",
           "default_forward_batch", "memory_budget"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int | None], None]


@dataclass
class Run:
    """An evaluation: its result, and where it is stored (``store`` is None when in memory)."""

    result: OrbitResult
    run_id: str
    store: Store | None = None
    reused: bool = False

    def summary(self, variable: str | None = None) -> dict[str, Any]:
        return self.result.summary(variable)


def _model_identity(model: nn.Module) -> tuple[str, str]:
    from ..models.reference import model_hash

    h = model_hash(model)
    return h, f"{type(model).__name__}-{h}"


def _model_input_numel(source: DataSource, view_size: tuple[int, int] | None) -> int | None:
    """Values per model input: the input's, or for a window over context the view's (C·h·w)."""
    shape = source.input_shape()
    if view_size is None or shape is None or len(shape) < 3:
        return source.input_numel()
    return int(np.prod(shape[:-2], dtype=np.int64)) * int(view_size[0]) * int(view_size[1])


#: chunks read ahead of the model by evaluate's in-process reader thread
PREFETCH_CHUNKS = 2

#: transformed inputs per model call by default, and for point clouds
FORWARD_BATCH = 512
POINTS_FORWARD_BATCH = 64


#: transformed inputs per model call on a CPU when the optimised model runs: channels_last
#: convolutions of NERO's MNIST CNN ran 10–20 % faster in slices of 64–256 inputs than of 512
#: on a 2-core CPU (``benchmarks/orbit_throughput.py --forward-batches``)
FAST_CPU_FORWARD_BATCH = 128
#: default on CUDA devices, capped by the device's free memory (:func:`memory_budget`)
CUDA_FORWARD_BATCH = 4096
#: CPU memory budget of one forward slice's activations by default, in MiB
CPU_MEMORY_BUDGET_MB = 1024.0


def default_forward_batch(forward_batch: int | None, input_kind: str, device: torch.device, fast: bool) -> int:
    """The requested forward batch, or the default: :data:`POINTS_FORWARD_BATCH` for point
    clouds; for the optimised model (``fast``) :data:`CUDA_FORWARD_BATCH` on CUDA and
    :data:`FAST_CPU_FORWARD_BATCH` on a CPU; for the original :data:`FORWARD_BATCH` (the
    engine's batch before optimisation became the default, so ``optimize=False`` runs as it did)."""
    if forward_batch is not None:
        return int(forward_batch)
    if input_kind == "points":
        return POINTS_FORWARD_BATCH
    if not fast:
        return FORWARD_BATCH
    return CUDA_FORWARD_BATCH if device.type == "cuda" else FAST_CPU_FORWARD_BATCH


def memory_budget(memory_budget_mb: float | None, device: torch.device, fast: bool = True,
                  mem_get_info: Callable[[torch.device], tuple[int, int]] | None = None) -> float:
    """MiB that one forward slice's activations may take: as given, else half the device's free
    memory on CUDA (``torch.cuda.mem_get_info``) when the optimised model runs, else
    :data:`CPU_MEMORY_BUDGET_MB` (the original model: as before optimisation was the default)."""
    if memory_budget_mb is not None:
        return float(memory_budget_mb)
    if device.type == "cuda" and fast:
        free, _total = (mem_get_info or torch.cuda.mem_get_info)(device)
        return max(64.0, free / 2 / 2**20)
    return CPU_MEMORY_BUDGET_MB


def forward_batch_for(forward_batch: int, memory_budget_mb: float, input_numel: int | None) -> int:
    """Transformed inputs per model call: ``forward_batch`` capped so that activations of at most
    64× the input size per input fit in ``memory_budget_mb``."""
    if input_numel is None:
        return forward_batch
    per_image = input_numel * 4 * 64
    return int(max(1, min(forward_batch, memory_budget_mb * 2**20 // per_image)))


def plan_jobs(source: DataSource, skip: set[int], seed: int) -> Iterator[ChunkJob]:
    """Chunk jobs for every chunk not in ``skip`` (map-style sources: descriptions only; loaders:
    with their batch, read in order as the jobs are consumed)."""
    if source.random_access:
        for i in range(source.n_chunks or 0):
            if i not in skip:
                start, stop = source.chunk_range(i)
                yield ChunkJob(i, start, stop, seed + i)
        return
    for i, start, batch in source.chunks(skip):
        yield ChunkJob(i, start, start + len(batch[0]), seed + i, batch=batch)


#: Model inputs (samples × orbit elements) above which evaluate asks for ``allow_large=True``.
MAX_JOB_INPUTS = 20_000_000


def _check_size(n: int | None, orbit: Orbit, store: Store | None, n_vars: int, allow_large: bool = False) -> None:
    """Refuse evaluations whose results could not possibly fit (memory, or the store's disk)."""
    if n is None:
        return
    cells = n * orbit.size
    if cells > MAX_JOB_INPUTS and not allow_large:
        raise SpecError(
            f"this evaluation would run the model on {n:,} samples × {orbit.size:,} orbit elements = {cells:,} inputs "
            f"(more than {MAX_JOB_INPUTS:,}; at about 10,000 inputs/s that is {cells / 1e4 / 3600:,.1f} hours on a CPU); "
            "use a coarser orbit or fewer samples, or confirm with allow_large=True (CLI: --yes)"
        )
    need = cells * 4 * max(n_vars, 1)  # at least 4 bytes per variable and element
    if store is not None:
        free = shutil.disk_usage(store.home).free
        where, hint = f"the free disk space at {store.home}", ""
    else:
        try:
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
            return
        where, hint = "the available memory", " (or pass store=... to write it to disk chunk by chunk)"
    if need > free:
        raise DataError(
            f"this evaluation would record {n:,} samples × {orbit.size:,} orbit elements × {n_vars} variables "
            f"≈ {need / 2**30:,.1f} GiB, more than {where} ({free / 2**30:,.1f} GiB); use a coarser orbit "
            f"or fewer samples{hint}"
        )


@dataclass
class PlannedRun:
    """A run ready for its chunks (from :func:`plan_run`), or a finished one found in the store
    (``reused``). ``skip`` holds the chunks already written, ``done`` counts their samples, ``n``
    is the run's number of samples."""

    run_id: str
    name: str
    ctx: EvalContext | None
    source: DataSource
    skip: set[int]
    seed: int
    writer: "_Writer | None"
    attrs: dict[str, Any]
    done: int
    n: int | None
    reused: Run | None = None

    def jobs(self) -> Iterator[ChunkJob]:
        """The chunk jobs still to do, in order."""
        return plan_jobs(self.source, self.skip, self.seed)

    def load(self, job: ChunkJob) -> ChunkJob:
        """``job`` with its chunk's data read (in pinned memory when the run is on CUDA)."""
        if job.batch is not None:
            return job
        batch = self.source.read_chunk(job.index)
        if self.ctx is not None and self.ctx.device.type == "cuda":
            batch = pin_batch(batch)
        return replace(job, batch=batch)

    def write(self, job: ChunkJob, arrays: dict[str, np.ndarray]) -> None:
        """Record one chunk's arrays (the one writer)."""
        assert self.writer is not None
        tuner = self.ctx.call.tuner if self.ctx is not None else None
        if tuner is not None and tuner.chosen is not None and "forward_batch_probe" not in self.attrs:
            # the plan ended in chunk 0 (see _forward_batch_tuner): its record carries the size kept
            self.attrs.update(forward_batch=tuner.chosen, forward_batch_probe=tuner.describe())
        arrays.update(self.source.groups_of(job.start, job.stop))
        self.writer.write(job, arrays)
        self.done += job.stop - job.start
        self.skip.add(job.index)  # written: jobs() no longer plans it

    def finish(self) -> Run:
        """Mark the run complete and return it."""
        assert self.writer is not None
        return self.writer.finish(self.done, self.attrs)

    def failure(self, exc: JobError) -> Exception:
        """The error to raise when one of this run's chunks failed on a worker, naming the run and
        the chunk: the worker's error type where it can carry the message (a worker that died
        stays a :class:`~orbitscope.errors.JobError`)."""
        job, cause = exc.job, exc.cause
        where = f"chunk {job.index} (samples {job.start}–{job.stop - 1})" if isinstance(job, ChunkJob) else "a chunk"
        head = f"run {self.name!r} ({self.run_id}), {where}, failed on {exc.where or 'a worker'}: "
        if cause is None or not isinstance(cause, Exception) or type(cause).__module__.startswith("ray"):
            return JobError(head + str(exc), job, cause, exc.where)
        message = head + f"{type(cause).__name__}: {cause}"
        try:
            return type(cause)(message)
        except Exception:  # noqa: BLE001 - an exception type whose constructor wants more
            return ModelError(message)


def evaluate(
    model: nn.Module,
    data: Any,
    orbit: Orbit | str,
    task: Task | None = None,
    *,
    store: Store | str | None = None,
    name: str | None = None,
    model_name: str | None = None,
    data_id: str | None = None,
    batch_size: int = 256,
    forward_batch: int | None = None,
    memory_budget_mb: float | None = None,
    device: str | torch.device | None = None,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    interpolation: str = "bilinear",
    padding: str = "zeros",
    view_size: tuple[int, int] | None = None,
    optimize: bool | str = "auto",
    precision: str = "float32",
    compile: bool = False,
    seed: int = 0,
    store_inputs: bool | None = None,
    activations: ActivationProbe | Sequence[str] | None = None,
    consensus: bool = False,
    executor: str | Executor | None = None,
    allow_large: bool = False,
    resume: bool = True,
    progress: Progress | None = None,
) -> Run:
    """Evaluate ``model`` on every sample of ``data`` transformed by every element of ``orbit``.

    Args:
        model: a PyTorch module mapping the task's inputs (images (B, C, H, W) for
            classification) to outputs the task reads (for classification: (B, classes) logits or
            probabilities).
        data: a map-style torch Dataset of (input, target) items, a DataLoader with a fixed batch
            size, or a pair (inputs, targets) of arrays/tensors.
        orbit: the group sample, e.g. ``Rotation(range(0, 361, 5))`` or a spec string
            (``"rotation:0:360:5"``, see :func:`orbitscope.parse_orbit`); its dims become result dims.
        task: how outputs are scored (default :class:`~orbitscope.tasks.Classification`); its
            input and target kinds say how each element acts on the data.
        store: a :class:`Store` or its directory, to write the run chunk by chunk (resumable);
            None keeps the result in memory only.
        name: a human-readable run name (default ``<model>-<orbit kind>``).
        batch_size: samples per chunk (the unit of storage and of resumption).
        forward_batch: transformed inputs per model call (capped by ``memory_budget_mb``, which
            assumes activations of at most 64× the input size per input); default
            :func:`default_forward_batch`: for the optimised model 128 on a CPU and 4096 on
            CUDA, 512 for the original, and 64 for point clouds (:data:`POINTS_FORWARD_BATCH`:
            per-point networks run about 3× faster in slices of 32–64 clouds than of 512 on a
            CPU, ``benchmarks/pointcloud_throughput.py``).
        memory_budget_mb: MiB that one forward slice's activations may take (default 1024; for
            the optimised model on CUDA half the free device memory: :func:`memory_budget`).
        device: where the actions and the model run (default: the model's device).
        normalize: ``(mean, std)`` per channel, applied after the orbit transform.
        interpolation: resampling of images, frames and flow fields (see
            :func:`orbitscope.kinds.warp_images`).
        padding: how the resampling fills pixels from outside the input (see
            :func:`orbitscope.kinds.warp_images`).
        view_size: (h, w) of the field of view for a task whose input kind is ``"window"``
            (a window over a larger context image).
        optimize: ``"auto"`` (default): run an optimised copy of the model (BatchNorm folded
            into convolutions, channels_last; repeated orbit elements such as 0° and 360° run
            once) when the first forward batch proves it equal to the original (outputs within
            :data:`~orbitscope.engine.optimization.TOLERANCE`, predictions exactly), else the
            original with a logged reason; ``True``: require it (an error where auto falls
            back); ``False``: the model as given, exactly as before optimisation was the
            default. ``attrs["optimization"]`` of the run records what ran and the check; see
            :mod:`orbitscope.engine.optimization`.
        precision: ``"float32"`` (default), or mixed precision ``"bfloat16"`` / ``"float16"``
            (``torch.autocast``; opt-in, proven by the same first-batch check at a looser
            tolerance).
        compile: also ``torch.compile`` the optimised model (opt-in; its compile time is
            recorded separately as ``compile_seconds``; in-process executor only).
        seed: seeds torch's RNG per chunk, so results do not depend on where a run resumed.
        store_inputs: keep each untransformed input so views can show it and re-transform it:
            images and frames as uint8 (variable ``input``), point clouds as float32
            (``input_points``); default: on when an input has at most 3 × 128 × 128 values. The target is always kept as the target kind stores it (``label`` for
            classification).
        activations: also record statistics of intermediate activations (an
            :class:`~orbitscope.engine.activations.ActivationProbe`, or layer names for all
            statistics), captured with forward hooks in the same pass: variable ``activation``
            with dims ``(sample, *orbit dims, layer, stat)``. Not combinable with
            ``optimize=True`` (folding BatchNorm would change what a convolution's output means).
        consensus: also score every element against NERO's consensus (label-free): the outputs
            mapped back by g⁻¹, averaged over the distinct elements by the task's rule, and
            re-applied by g; recorded as the task's consensus variables (e.g.
            ``consensus_agreement``).
        executor: where chunks run: ``"local"`` (default), ``"process"`` (a process pool), or an
            :class:`~orbitscope.engine.executors.Executor`. The run (its identity) is the same
            whichever ran, and so are its values, to float rounding: only the local executor
            tunes its forward batch (workers use the default size).
        allow_large: run jobs of more than :data:`MAX_JOB_INPUTS` model inputs (samples × orbit
            elements); without it they are refused with their size.
        resume: reuse a finished run / continue an unfinished one with the same identity.
        progress: called as ``progress(samples_done, n_samples)`` after each chunk.

    Returns:
        A :class:`Run` with ``result`` (an :class:`OrbitResult`: sample × orbit dims).
    """
    runner = get_executor(executor)
    if compile and not isinstance(runner, LocalExecutor):
        raise SpecError(f"compile=True runs in this process only (a compiled model does not travel to workers); "
                        f"use the local executor, or drop compile for executor {runner.name!r}")
    with ExitStack() as stack:
        planned = plan_run(stack, model, data, orbit, task, store=store, name=name, model_name=model_name,
                           data_id=data_id, batch_size=batch_size, forward_batch=forward_batch,
                           memory_budget_mb=memory_budget_mb, device=device, normalize=normalize,
                           interpolation=interpolation, padding=padding, view_size=view_size, optimize=optimize,
                           precision=precision, compile=compile, seed=seed, store_inputs=store_inputs,
                           activations=activations, consensus=consensus, allow_large=allow_large, resume=resume,
                           tune_forward_batch=isinstance(runner, LocalExecutor))
        if planned.reused is not None:
            if progress is not None:
                progress(planned.n or 0, planned.n)
            return planned.reused
        jobs: Iterator[ChunkJob] = planned.jobs()
        computed = planned.done
        in_process = isinstance(runner, LocalExecutor)
        if in_process and planned.source.random_access:  # read ahead while the model runs
            jobs = read_ahead(jobs, planned.load, depth=PREFETCH_CHUNKS)
        try:
            # in process, each chunk is written while the next is computed
            with BackgroundWriter(planned.write, depth=1 if in_process else 0) as writer:
                for job, arrays in runner.map(evaluate_chunk, jobs, planned.ctx):
                    writer.submit(job, arrays)
                    computed += job.stop - job.start  # written by the time the run finishes
                    if progress is not None:
                        progress(computed, planned.n)
        except JobError as exc:
            raise planned.failure(exc) from exc
        finally:
            close = getattr(jobs, "close", None)
            if close is not None:  # stops the reader thread
                close()
        return planned.finish()


def plan_run(
    stack: ExitStack,
    model: nn.Module,
    data: Any,
    orbit: Orbit | str,
    task: Task | None = None,
    *,
    store: Store | str | None = None,
    name: str | None = None,
    model_name: str | None = None,
    data_id: str | None = None,
    batch_size: int = 256,
    forward_batch: int | None = None,
    memory_budget_mb: float | None = None,
    device: str | torch.device | None = None,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    interpolation: str = "bilinear",
    padding: str = "zeros",
    view_size: tuple[int, int] | None = None,
    optimize: bool | str = "auto",
    precision: str = "float32",
    compile: bool = False,
    seed: int = 0,
    store_inputs: bool | None = None,
    activations: ActivationProbe | Sequence[str] | None = None,
    consensus: bool = False,
    allow_large: bool = False,
    resume: bool = True,
    lock_stack: ExitStack | None = None,
    tune_forward_batch: bool = False,
) -> "PlannedRun":
    """Everything :func:`evaluate` does before its chunks run: check the arguments, work out the
    run's identity, and reuse a finished run or plan the chunks still to do. The arguments are
    :func:`evaluate`'s (without ``executor`` and ``progress``); the model's eval mode and the
    run's one-writer lock are held in ``stack`` until it closes (the lock in ``lock_stack`` when
    given, so that a sweep can release each run's lock when the run ends). Sweeps plan many runs
    this way and run their chunks through one executor. ``tune_forward_batch``: let the run's
    first model calls choose the forward batch (:mod:`orbitscope.engine.batch_probe`; only when
    the chunks run in this process, where the tuner's choice can be recorded)."""
    task = task or Classification()
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(orbit, str):
        from ..group.parse import parse_orbit

        orbit = parse_orbit(orbit)
    if not isinstance(orbit, Orbit):
        raise TypeError(f"orbit must be an orbitscope Orbit (e.g. Rotation(...)) or a spec string such as "
                        f"'rotation:0:360:5', got {type(orbit).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be an orbitscope Task (e.g. Classification()), got {type(task).__name__}")
    if (forward_batch is not None and forward_batch < 1) or batch_size < 1:
        raise SpecError("batch_size and forward_batch must be >= 1")
    if memory_budget_mb is not None and not (isinstance(memory_budget_mb, (int, float))
                                             and np.isfinite(memory_budget_mb) and memory_budget_mb > 0):
        raise SpecError(f"memory_budget_mb must be a positive number of megabytes, got {memory_budget_mb!r}")
    check_optimize_options(optimize, precision, compile)
    if consensus and not task.supports_consensus:
        raise SpecError(f"task {task.kind!r} defines no consensus; evaluate without consensus=True")
    input_kind, target_kind = get_kind(task.input_kind), get_kind(task.target_kind)
    output_kind = get_kind(task.output_kind) if task.output_kind else None
    from ..models.reference import eval_mode, model_device

    try:
        device = torch.device(device) if device is not None else model_device(model)
    except RuntimeError as exc:
        raise SpecError(f"unknown device {device!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SpecError(f"device {str(device)!r}: CUDA is not available to this torch build ({torch.__version__}); use 'cpu'")
    source = DataSource(data, batch_size, data_id, collate=task.collate)
    transforms = orbit.transforms()
    if transforms.dim != 2 and task.input_kind in ("image", "window", "frames", "flow"):
        raise SpecError(f"orbit {orbit!r} acts in 3-D and cannot act on {task.input_kind} inputs; use a planar "
                        "orbit, or a task whose input kind is 'points'")
    norm = Normalizer(normalize, device)
    probe: ActivationProbe | None = None
    if activations is not None:
        if optimize is True:
            raise SpecError("activations cannot be recorded with optimize=True (BatchNorm folding changes the "
                            "hooked layers' outputs); use optimize='auto' (it keeps the original model) or False")
        probe = activations if isinstance(activations, ActivationProbe) else ActivationProbe(tuple(activations))
        probe = probe.resolve(model)
    st = open_store(store) if store is not None else None
    _check_size(source.n, orbit, st, len(task.variables(0)) + (len(task.consensus_variables()) if consensus else 0),
                allow_large)
    stack.enter_context(eval_mode(model))  # each submodule's mode is restored exactly afterwards
    mhash, mid = _model_identity(model)
    opt = propose_optimization(model, optimize, precision=precision, compile=compile,
                               recording_activations=probe is not None,
                               # point-cloud networks' per-point layers are Linear -> BatchNorm1d; an
                               # image model's head keeps its BatchNorm1d (a negligible cost there), so
                               # its optimised copy, and the numbers of its runs, stay as they were
                               linear_batchnorm=task.input_kind == "points")
    keep_inputs = store_inputs if store_inputs is not None else _small_inputs(source, task)
    config = {
        "result_format": 2,  # bump when the stored variables change
        "store_inputs": keep_inputs,
        "model_hash": mhash,
        # parameter-free layers (activations, pooling) are invisible to the weight hash
        "model_arch": hashlib.sha256(repr(model).encode()).hexdigest()[:16],
        "optimize": False,  # what ran (set below, once decided)
        "data_id": source.data_id,
        "n_samples": source.n,
        "orbit": orbit.spec(),
        "task": task.spec(),
        "chunk_size": source.chunk_size,
        "normalize": norm.spec,
        "interpolation": interpolation,
        "padding": padding,
        "seed": seed,
    }
    # options added after result format 2 enter the identity only when used, so earlier run
    # ids stay as they were
    if probe is not None:
        config["activations"] = probe.spec()
    if consensus:
        config["consensus"] = True
    if view_size is not None:
        config["view_size"] = [int(v) for v in view_size]
    if source.groups:
        config["sample_groups"] = groups_identity(source.groups)

    def identity(applied: bool) -> str:
        cfg = dict(config, optimize=applied)
        if applied and opt.precision != "float32":
            cfg["precision"] = opt.precision
        if applied and opt.compile:
            cfg["compile"] = True
        return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]

    model_name = model_name or getattr(model, "name", None) or type(model).__name__
    attrs = {
        "model_name": model_name,
        "model_id": mid,
        "model_hash": mhash,
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "data_id": source.data_id,
        "orbit": orbit.spec(),
        "orbit_dims": list(orbit.dims),
        "task": task.spec(),
        "normalize": config["normalize"],
        "interpolation": interpolation,
        "padding": padding,
        "optimize": False,
        "seed": seed,
        "activations": probe.spec() if probe is not None else None,
        "identity_index": orbit.identity_index() if orbit.identity_index() is not None else -1,
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": str(device),
    }
    if consensus:
        attrs["consensus"] = True
    if view_size is not None:
        attrs["view_size"] = config["view_size"]
    if source.groups:
        attrs["sample_groups"] = sorted(source.groups)
    asked_name = name  # as the caller gave it (None: the default name)
    name = name or f"{model_name}-{orbit.kind}"
    options: dict[str, Any] = {"interpolation": interpolation, "padding": padding}
    if view_size is not None:
        options["view_size"] = (int(view_size[0]), int(view_size[1]))
    original = ModelCall(model.to(device), read=task.read_outputs, normalize=norm, forward_batch=FORWARD_BATCH,
                         what=f"{task.input_kind} inputs {input_kind.shape_doc} after the orbit transform")
    ctx = EvalContext(call=original, task=task, input_kind=input_kind, target_kind=target_kind,
                      output_kind=output_kind, transforms=transforms, orbit_shape=orbit.shape,
                      forward_batch=FORWARD_BATCH, source=source, device=device, action_options=options, probe=probe,
                      keep_inputs=keep_inputs, consensus=consensus, model=model)
    input_numel = _model_input_numel(source, view_size)

    def slice_size(fast: bool) -> int:
        return forward_batch_for(default_forward_batch(forward_batch, task.input_kind, device, fast),
                                 memory_budget(memory_budget_mb, device, fast=fast), input_numel)

    if opt.candidate is not None:
        # an earlier run of this evaluation under either identity is reused or resumed as it was
        # written (complete runs first, then the optimised one); only a new run needs the check
        records = [(applied, st.find_run(identity(applied))) for applied in (True, False)] \
            if st is not None and resume else []
        earlier = sorted(((not rec.complete, not applied) for applied, rec in records if rec is not None))
        if earlier and (not earlier[0][1] or optimize == "auto"):
            applied = not earlier[0][1]
            opt.settle(applied, None if applied else "an earlier run of the original model is reused")
        else:
            verify_on_first_batch(opt, ctx, device, slice_size(True),
                                  run_rows=None if source.n is None else source.n * len(transforms))
    if optimize is True and opt.candidate is not None and not opt.applied \
            and "the original model failed" not in (opt.reason or ""):  # that one: the chunk reports it
        raise ModelError(f"optimize=True: the optimised model does not reproduce the original on the first batch "
                         f"({opt.reason}); evaluate with optimize='auto' (it falls back to the original) or False")
    run_id = identity(opt.applied)
    config["optimize"] = attrs["optimize"] = opt.applied
    attrs["optimization"] = opt.provenance()
    if opt.reason and not opt.applied and optimize is not False:
        log.info("run %s runs the original model: %s", run_id, opt.reason)
    skip: set[int] = set()
    started_with: int | None = None  # the forward batch a resumed run was started with
    if st is not None:
        # one writer per run: a second process evaluating the same run waits, then reuses or resumes it
        (lock_stack or stack).enter_context(st.run_lock(run_id))
        rec = st.find_run(run_id)
        if rec is not None and resume:
            started_with = rec.attrs.get("forward_batch")
            if rec.complete:
                try:
                    loaded = st.load(run_id, verify=True)
                except DamagedRunError as exc:  # recompute the damaged chunks, keep the rest
                    log.warning("%s; recomputing the damaged chunks", exc)
                    st.reopen_run(run_id)
                else:
                    if asked_name is not None and asked_name != rec.name:  # the earlier run keeps its name and id
                        log.warning("run %s is reused under its earlier name %r, not %r; to store it under the new "
                                    "name, evaluate again with --force (resume=False), which recomputes it", run_id,
                                    rec.name, asked_name)
                    return PlannedRun(run_id, name or f"{model_name}-{orbit.kind}", None, source, set(), seed,
                                      None, attrs, rec.n_samples or 0, rec.n_samples,
                                      reused=Run(loaded, run_id, st, reused=True))
            skip = st.done_chunks(run_id)
            log.info("resuming run %s: %d chunks already written", run_id, len(skip))
        elif rec is not None:
            st.delete_run(run_id)
        st.register_model(mid, model_name, mhash, {"class": attrs["model_class"]})
    fb = slice_size(opt.applied)
    weights, expand, run_transforms = None, None, transforms
    # elements that repeat run once: NERO's 3-D sample holds the identity 219 times (always
    # so); 0° and 360° of a planar grid when optimising
    if transforms.dim == 3 or opt.applied:
        rep = unique_elements(transforms)
        distinct = np.unique(rep)
        if len(distinct) < len(transforms):
            expand = np.searchsorted(distinct, rep)
            run_transforms = transforms[distinct]
    if consensus:
        weights = np.zeros(len(run_transforms))
        weights[np.unique(unique_elements(run_transforms))] = 1.0
    fast = opt.applied
    ctx.call = ModelCall(opt.model.to(device), read=task.read_outputs, normalize=norm, forward_batch=fb,
                         channels_last=fast and "channels_last" in opt.rewrites, what=original.what,
                         precision=opt.precision if fast else "float32")
    ctx.transforms, ctx.forward_batch, ctx.expand, ctx.consensus_weights = run_transforms, fb, expand, weights
    ctx.optimize = fast
    ctx.call.forward_batch = ctx.forward_batch = fb
    if started_with is not None and skip:
        # a resumed run keeps the size recorded for it (no new tuning)
        ctx.call.forward_batch = ctx.forward_batch = fb = int(started_with)
    elif forward_batch is None and fast and tune_forward_batch:
        tuner = _forward_batch_tuner(source, len(run_transforms), device,
                                     forward_batch_for(max(tuning_candidates(device.type, 1 << 30)),
                                                       memory_budget(memory_budget_mb, device), input_numel))
        if tuner is not None:  # the tuner slices chunk 0's calls: each holds at least its largest size
            ctx.call.tuner, ctx.forward_batch = tuner, max(tuner.rates) + source.chunk_size - 1
    attrs["forward_batch"] = fb
    variables = {v.name: v for v in task.variables(0)}
    if consensus:
        variables.update({v.name: v for v in task.consensus_variables()})
    if probe is not None:
        variables["activation"] = ENGINE_VARIABLES["activation"]
    per_sample = {n: (tuple(dims), n in kind.ragged) for kind in (target_kind, input_kind)
                  for n, dims in kind.stored.items()}
    if consensus:  # e.g. the fused consensus boxes of each sample
        per_sample.update({n: (tuple(dims), True) for n, dims in task.consensus_stored.items()})
    taken = set(per_sample) | set(variables) | set(ENGINE_VARIABLES)
    clash = sorted(set(source.groups) & taken)
    if clash:
        raise DataError(f"sample group name(s) {', '.join(map(repr, clash))} would replace a recorded variable of "
                        f"the same name; rename the group(s) in the dataset's sample_groups")
    per_sample.update({n: ((), False) for n in source.groups})  # the dataset's sample_groups
    writer = _Writer(st, run_id, orbit, variables, probe, per_sample, dict(name=name, model_id=mid,
                     data_id=source.data_id, orbit=orbit.spec(), task=task.spec(), attrs=attrs, n_samples=source.n,
                     chunk_size=source.chunk_size))
    done = 0 if not skip else sum(min(source.chunk_size, (source.n or 0) - c * source.chunk_size) for c in skip)
    return PlannedRun(run_id, name, ctx, source, skip, seed, writer, attrs, done, source.n)


def _forward_batch_tuner(source: DataSource, n_elements: int, device: torch.device, cap: int) -> BatchTuner | None:
    """A tuner for the run's first model calls (see :mod:`orbitscope.engine.batch_probe`) when
    the run is long enough and a dry run shows its plan ends within chunk 0 (so the chunk's record carries the
    size kept), else None (the default batch runs)."""
    candidates = tuning_candidates(device.type, cap)
    n = source.n or 0
    b = min(n, source.chunk_size)
    if not worth_tuning(n * n_elements, candidates) or b == 0:
        return None
    tuner = BatchTuner(candidates)
    # chunk 0's model calls, as evaluate_chunk makes them while tuning (see plan_run)
    per_call = max(1, (max(candidates) + source.chunk_size - 1) // b)
    calls = [min(per_call, n_elements - k0) * b for k0 in range(0, n_elements, per_call)]
    return tuner if tuner.settles_on(calls) else None


class _Writer:
    """The one writer: records chunks in the store (or keeps them in memory) as they arrive."""

    def __init__(self, store: Store | None, run_id: str, orbit: Orbit, variables: dict[str, Variable],
                 probe: ActivationProbe | None, per_sample: dict[str, tuple[tuple[str, ...], bool]],
                 create: dict[str, Any]) -> None:
        self.per_sample = per_sample
        self.store, self.run_id, self.orbit, self.variables, self.probe = store, run_id, orbit, variables, probe
        self.create = create
        self.layout: dict[str, Any] | None = None
        self.parts: dict[str, list[np.ndarray]] = {}
        self.samples: list[np.ndarray] = []
        self.created = False

    def write(self, job: ChunkJob, arrays: dict[str, np.ndarray]) -> None:
        if self.layout is None:
            self.layout = _layout(self.orbit, self.variables, arrays, self.probe, self.per_sample)
        if self.store is not None:
            if not self.created:
                self.store.create_run(self.run_id, layout=self.layout, **self.create)
                self.created = True
            self.store.write_chunk(self.run_id, job.index, job.start, arrays)
        else:
            for k, v in arrays.items():
                self.parts.setdefault(k, []).append((job.start, v))  # type: ignore[arg-type]
            self.samples.append(np.arange(job.start, job.stop))

    def finish(self, done: int, attrs: dict[str, Any]) -> Run:
        st = self.store
        if st is not None:
            if not self.created and st.find_run(self.run_id) is None:
                raise DataError("the dataset is empty: nothing to evaluate")
            st.finish_run(self.run_id, done)
            return Run(st.load(self.run_id), self.run_id, st)
        if self.layout is None:
            raise DataError("the dataset is empty: nothing to evaluate")
        order = np.argsort([s[0] for s in next(iter(self.parts.values()))], kind="stable")
        parts = {k: [v[i][1] for i in order] for k, v in self.parts.items()}  # type: ignore[index]
        samples = np.concatenate([self.samples[i] for i in order])
        attrs = dict(attrs, run_id=self.run_id, run_name=self.create["name"], status="complete", n_samples=done)
        return Run(assemble_result(self.layout, parts, samples, attrs), self.run_id, None)


def _layout(orbit: Orbit, declared: dict[str, Variable], arrays: dict[str, np.ndarray],
            probe: ActivationProbe | None, stored: dict[str, tuple[tuple[str, ...], bool]]) -> dict[str, Any]:
    """The run's layout; ``stored`` maps the per-sample arrays (not over the orbit: the stored
    input and target, a task's consensus arrays) to their dims and whether they are ragged."""
    nd = len(orbit.dims)
    variables: dict[str, Any] = {}
    coords: dict[str, Any] = {d: orbit.coords[d].tolist() for d in orbit.dims}
    if probe is not None:
        coords.update(layer=list(probe.layers), stat=list(probe.stats))
    for name, a in arrays.items():
        if name in stored and name not in declared:
            dims, ragged = stored[name]
            spec = {"dtype": str(a.dtype), "extra_dims": list(dims), "extra_shape": list(a.shape[1:]), "per_sample": True}
            if ragged:
                spec["ragged"] = True
            meta = ENGINE_VARIABLES.get(name) or (_group_variable(name, a) if not dims and not ragged else None)
            if meta is not None:
                spec["meta"] = meta.to_json()
            variables[name] = spec
            continue
        extra_shape = list(a.shape[1 + nd :])
        var = declared.get(name)
        extra_dims = list(var.extra_dims) if var is not None else [f"{name}_dim{i}" for i in range(len(extra_shape))]
        spec = {"dtype": str(a.dtype), "extra_dims": extra_dims, "extra_shape": extra_shape}
        if var is not None:
            spec["meta"] = var.to_json()
        variables[name] = spec
    return {
        "orbit_dims": list(orbit.dims),
        "orbit_shape": list(orbit.shape),
        "coords": coords,
        "variables": variables,
    }


def _group_variable(name: str, values: np.ndarray) -> Variable:
    return Variable(name, str(values.dtype), description=f"the sample's {name.replace('_', ' ')} (the dataset's "
                    "sample_groups)", kind="state", needs_labels=False, label=name.replace("_", " "))


def _small_inputs(source: DataSource, task: Task) -> bool:
    if task.input_kind not in ("image", "frames", "points"):
        return False
    numel = source.input_numel()
    return numel is not None and numel <= 3 * 128 * 128


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("orbitscope", "torch", "numpy", "xarray"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "unknown"
    out["torch"] = torch.__version__  # with its build tag (e.g. +cpu, +cu130), which the wheel's metadata may omit
    return out

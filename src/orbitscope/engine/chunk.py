"""Chunk jobs and their evaluation: one chunk of samples over every orbit element, a pure function.

A :class:`ChunkJob` is a small, picklable description (which samples, which seed); an
:class:`EvalContext` holds everything else (model call, task, kinds, elements, options) and is
sent to a worker once. :func:`evaluate_chunk` reads the chunk, applies each element to the input
*and* the target through their kinds, runs the model, scores, and returns the chunk's arrays
(``(samples, *orbit shape, *extra)`` per variable, plus the per-sample stored data). It writes
nothing: one writer (``evaluate``) records the arrays.

Rows are element-major: in a slice of elements ``k0 .. k1`` over B samples, row ``(k - k0)·B + b``
is sample ``b`` under element ``k``. Torch's RNG is seeded with the job's seed, so a chunk's
numbers do not depend on where, when, or in which process it runs.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import DataError, ModelError, SpecError
from ..group.elements import Transforms
from ..kinds.base import Kind
from ..tasks.base import Task
from .activations import ActivationProbe
from .model_call import ModelCall, finite_rows
from .source import DataSource

__all__ = ["ChunkJob", "EvalContext", "evaluate_chunk", "first_forward_rows"]


@dataclass(frozen=True)
class ChunkJob:
    """Chunk ``index`` = samples ``[start, stop)``, evaluated with torch seeded to ``seed``.

    ``batch`` carries the collated ``(inputs, targets)`` only for sources read in order (a
    DataLoader); map-style sources are read by the worker."""

    index: int
    start: int
    stop: int
    seed: int
    batch: tuple[Any, Any] | None = None


@dataclass
class EvalContext:
    """What every chunk of one evaluation shares (picklable for process executors)."""

    call: ModelCall
    task: Task
    input_kind: Kind
    target_kind: Kind
    output_kind: Kind | None
    transforms: Transforms
    orbit_shape: tuple[int, ...]
    forward_batch: int
    source: DataSource | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    action_options: dict[str, Any] = field(default_factory=dict)
    probe: ActivationProbe | None = None
    keep_inputs: bool = False
    consensus: bool = False
    consensus_weights: np.ndarray | None = None
    #: orbit element -> its position in ``transforms`` when only the distinct elements are
    #: evaluated (3-D samples such as NERO's, where 2,847 elements hold 2,416 rotations)
    expand: np.ndarray | None = None
    #: the model as given (before ``optimize``), and whether it was optimised: what a distributed
    #: executor ships to its workers by reference (:mod:`orbitscope.engine.shipping`)
    model: Any = None
    optimize: bool = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for process workers, which run ``call``: the un-optimised model is left out when
        an optimised copy runs (only a shipping executor needs it, and it ships from here)."""
        state = dict(self.__dict__)
        if state.get("optimize"):
            state["model"] = None
        return state


def _frame_context(kind: Kind, x: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Action context for targets: the frame size of the input (and the view for windows)."""
    ctx = dict(options)
    size = getattr(kind, "frame_size", None)
    if size is not None and hasattr(x, "shape"):
        ctx.setdefault("image_size", size(x))
    return ctx


def _check_frames(target_kind: Kind, y: Any, frame: dict[str, Any]) -> None:
    """Dense targets (e.g. flow) must live on the input's pixel grid (or the view's); ``frame``
    is the targets' action context (``image_size`` of the input, ``view_size`` of a window)."""
    size_of = getattr(target_kind, "frame_size", None)
    want = frame.get("view_size") or frame.get("image_size")
    if size_of is None or want is None or not hasattr(y, "shape"):
        return
    have = tuple(size_of(y))
    if have != tuple(want):
        raise DataError(f"the targets ({target_kind.name}) are {have[0]}×{have[1]} pixels but the inputs are "
                        f"{want[0]}×{want[1]}: give targets on the inputs' pixel grid (resample them, and scale "
                        "flow vectors by the same factor)")


def _score_into(out: dict[str, np.ndarray], scores: dict[str, Any], b: int, k: int, k0: int, k1: int,
                declared: dict[str, Any] | None = None, task: str = "") -> None:
    rows = (k1 - k0) * b
    for name, val in scores.items():
        if declared is not None and name not in declared:
            raise SpecError(f"task {task!r} returned a variable {name!r} it does not declare in variables() "
                            f"(declared: {', '.join(sorted(declared))}); declare it or fix its name")
        if not isinstance(val, torch.Tensor) or val.ndim == 0 or val.shape[0] != rows:
            shape = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
            raise SpecError(f"task {task!r}: score() must return one value per row for {name!r} "
                            f"({rows} rows = {k1 - k0} elements × {b} samples), got {shape}")
        v = val.detach().cpu().numpy()
        want = getattr(declared.get(name), "dtype", None) if declared is not None else None
        if want is not None and v.dtype != np.dtype(want):
            cast = v.astype(want)
            if np.issubdtype(np.dtype(want), np.integer) and not np.array_equal(cast, v):
                raise SpecError(f"task {task!r}: variable {name!r} is declared {want} but score() returned "
                                f"non-integral {v.dtype} values; return {want} values or change the declaration")
            v = cast
        v = v.reshape(k1 - k0, b, *val.shape[1:])
        if name not in out:
            out[name] = np.empty((b, k, *val.shape[1:]), dtype=v.dtype)
        out[name][:, k0:k1] = np.moveaxis(v, 0, 1)


def first_forward_rows(ctx: EvalContext, max_rows: int) -> tuple[Any, Any, Transforms] | None:
    """The rows of chunk 0 under its first ``max(1, max_rows // samples)`` elements, at most
    ``max_rows`` rows (when the chunk holds more samples than that, its first ``max_rows`` samples
    under the first element): ``(inputs, targets, elements)``, or None for empty data."""
    if ctx.source is None:
        return None
    batch = ctx.source.first_batch()
    if batch is None:
        return None
    x = ctx.input_kind.prepare(batch[0], ctx.device)
    y = ctx.target_kind.prepare(batch[1], ctx.device)
    b = ctx.input_kind.batch_size(x)
    if 0 < max_rows < b:
        try:  # tensors, arrays, lists and padded boxes slice alike; another kind's batch is kept whole
            xs, ys = x[:max_rows], y[:max_rows]
            if ctx.input_kind.batch_size(xs) == ctx.target_kind.batch_size(ys) == max_rows:
                x, y, b = xs, ys, max_rows
        except (TypeError, IndexError, KeyError, ValueError, AttributeError):
            pass
    if b == 0 or len(ctx.transforms) == 0:
        return None
    return _element_rows(ctx, x, y, ctx.transforms[:max(1, max_rows // b)], b,
                         _frame_context(ctx.input_kind, x, ctx.action_options))


def _element_rows(ctx: EvalContext, x: Any, y: Any, t: Transforms, b: int,
                  target_action: dict[str, Any]) -> tuple[Any, Any, Transforms]:
    """Inputs and targets of ``b`` samples under the elements ``t``, as element-major rows, and
    each row's element."""
    xg = ctx.input_kind.rows(ctx.input_kind.act(x, t, layout="orbit", **ctx.action_options))
    yg = ctx.target_kind.rows(ctx.target_kind.act(y, t, layout="orbit", **target_action))
    return xg, yg, t.repeat_interleave(b)


def evaluate_chunk(job: ChunkJob, ctx: EvalContext) -> dict[str, np.ndarray]:
    """All orbit elements for one chunk -> ``{variable: array}`` (see the module docstring)."""
    if job.batch is not None:
        inputs, targets = job.batch
    else:
        if ctx.source is None:
            raise ValueError("a chunk job without a batch needs a data source in its context")
        inputs, targets = ctx.source.read_chunk(job.index)
    x = ctx.input_kind.prepare(inputs, ctx.device)
    y = ctx.target_kind.prepare(targets, ctx.device)
    b, k = ctx.input_kind.batch_size(x), len(ctx.transforms)
    if ctx.target_kind.batch_size(y) != b:
        raise DataError(f"chunk {job.index} holds {b} inputs but {ctx.target_kind.batch_size(y)} targets")
    target_action = _frame_context(ctx.input_kind, x, ctx.action_options)
    _check_frames(ctx.target_kind, y, target_action)
    per_call = max(1, ctx.forward_batch // max(b, 1))  # elements per warp call
    declared = {v.name: v for v in ctx.task.variables(0)}
    if ctx.probe is not None:
        declared["activation"] = None
    out: dict[str, np.ndarray] = {}
    kept: list[tuple[int, int, Any, Transforms]] = []  # consensus: (k0, k1, outputs, row elements)
    canonical: list[Any] = []
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.manual_seed(job.seed)
        for k0 in range(0, k, per_call):
            k1 = min(k, k0 + per_call)
            xg, yg, g = _element_rows(ctx, x, y, ctx.transforms[k0:k1], b, target_action)
            with ctx.probe.attach(ctx.call.model) if ctx.probe is not None else nullcontext([]) as collected:
                outputs = ctx.call(xg)
            ok = finite_rows(outputs)
            if ok is not None and not bool(ok.all()):
                bad = ~ok
                first = int(torch.nonzero(bad)[0])
                element = k0 + first // b  # among the evaluated elements; the orbit's own index below
                if ctx.expand is not None:
                    element = int(np.flatnonzero(ctx.expand == element)[0])
                raise ModelError(
                    f"the model returned NaN/inf for sample {job.start + first % b} at orbit element {element} "
                    f"({int(bad.sum())} of {len(bad)} outputs in this batch); check the model and its inputs"
                )
            scores = ctx.task.score(outputs, yg, g)
            if ctx.probe is not None:
                scores["activation"] = torch.cat(collected)
                collected.clear()
            _score_into(out, scores, b, k, k0, k1, declared, ctx.task.kind)
            if ctx.consensus:
                kept.append((k0, k1, outputs, g))
                canonical.append(ctx.task.canonicalize(outputs, g, **target_action))
    per_sample = _consensus_into(out, ctx, kept, canonical, b, k, target_action) if ctx.consensus else {}
    if ctx.expand is not None:  # every orbit element takes the values of its distinct representative
        out = {n: a[:, ctx.expand] for n, a in out.items()}
    arrays = {n: a.reshape(b, *ctx.orbit_shape, *a.shape[2:]) for n, a in out.items()}
    arrays.update(per_sample)
    arrays.update(ctx.target_kind.store(y))
    if ctx.keep_inputs:
        arrays.update(ctx.input_kind.store(x))
    return arrays


def _consensus_into(out: dict[str, np.ndarray], ctx: EvalContext, kept: list[tuple[int, int, Any, Transforms]],
                    canonical: list[Any], b: int, k: int, target_action: dict[str, Any]) -> dict[str, np.ndarray]:
    """Score every element's outputs against the consensus pseudo-target (NERO): map outputs back
    by g⁻¹ (done per slice), average over the distinct elements, re-apply each element. Returns
    the task's per-sample consensus arrays (``Task.store_consensus``, e.g. fused boxes)."""
    from ..tasks.base import concat_outputs

    task = ctx.task
    weights = ctx.consensus_weights if ctx.consensus_weights is not None else np.ones(k)
    with torch.inference_mode():
        target = task.consensus(concat_outputs(canonical), k, b, weights)
        wanted = {v.name for v in task.consensus_variables()}
        for k0, k1, outputs, g in kept:
            t = ctx.transforms[k0:k1]
            cg = ctx.target_kind.rows(ctx.target_kind.act(target, t, layout="orbit", **target_action))
            scores = task.score(outputs, cg, g)
            renamed = {task.consensus_name(n): v for n, v in scores.items() if task.consensus_name(n) in wanted}
            _score_into(out, renamed, b, k, k0, k1)
    return task.store_consensus(target)

"""Inference optimisations, on by default and proven on the first batch.

``evaluate(optimize="auto")`` (the default) runs a rewritten copy of the model when that is safe:

* **BatchNorm folding**: every ``Conv2d -> BatchNorm2d`` pair of an ``nn.Sequential`` becomes
  one convolution (:func:`orbitscope.models.fold_batchnorm`), and the remaining pairs too (e.g.
  a ResNet block's ``conv1``/``bn1`` attributes) where the model can be traced with ``torch.fx``;
* **channels_last**: convolution weights and 4-D inputs in ``torch.channels_last`` memory format
  (oneDNN's and cuDNN's fast layout);
* optionally **mixed precision** (``precision="bfloat16"`` or ``"float16"``: the forward under
  ``torch.autocast``; outputs are cast back to float32) and **torch.compile** (``compile=True``,
  timed: its first call is reported separately as ``compile_seconds``).

Before any chunk runs, :func:`first_batch_check` calls the original and the rewritten model on
the rows of the run's first model calls (chunk 0 under its first elements: a sixty-fourth of the
run's model inputs, between :data:`CHECK_MIN_ROWS` and :data:`CHECK_ROWS` transformed inputs, in
slices of the run's forward batch) and compares them:

* every floating-point output within ``TOLERANCE[precision] · max(1, max |original|)`` (absolute,
  per output tensor; NaN and ±inf in the same places), when the outputs are tensors (or tuples
  or dicts of tensors); set-like outputs (detections, whose order changes when near-equal
  scores swap) are compared through the task's variables only;
* every integer or boolean output, and every integer or boolean variable the task records
  (for classification ``correct``: the predictions), exactly equal;
* the task's floating-point variables within the same tolerance;
* variables along a set axis the task declares unordered (``Task.unordered_dims``: a row's
  detections and top boxes, ranked by score) as sets: each of the original's entries pairs with
  one of the optimised model's that agrees in every such variable (labels and matches exactly,
  scores and boxes within the tolerance), so two near-equal scores that swap places do not fail
  the check.

If the check fails, or the model is not eligible (activations are being recorded with forward
hooks, the model carries its own hooks, a module stays in training mode, there is nothing to
rewrite, or the model cannot be copied), the original model runs and the reason is logged.
Either way the run's provenance (``attrs["optimization"]``) records what ran. ``optimize=True``
requires the rewrites (an ineligible model or a failed check is an error); ``optimize=False``
runs the model as given, exactly as orbitscope did before optimisation became the default.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import SpecError
from .model_call import PRECISIONS

__all__ = ["PRECISIONS", "TOLERANCE", "CHECK_ROWS", "CHECK_MIN_ROWS", "CHECK_SHARE", "check_rows", "Optimization",
           "check_optimize_options", "ineligibility", "rewrite_model", "try_rewrite", "first_batch_check",
           "compare_as_sets"]

log = logging.getLogger(__name__)

#: first-batch tolerance per precision, relative to ``max(1, max |original output|)``: float32
#: rewrites only reorder sums (measured differences ~1e-7 on our CNNs); bfloat16 keeps 8
#: significant bits (relative rounding 2⁻⁸ ≈ 0.4 % per operation), float16 11 bits
TOLERANCE: dict[str, float] = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-2}

#: transformed inputs (rows) of the first forward batch that the check compares, at most
CHECK_ROWS = 256
#: ... and at least; between the two, a run of
#: ``n`` model inputs checks ``n / CHECK_SHARE`` of them, so that running the original model
#: beside the optimised one costs a short run no more than a few per cent
CHECK_MIN_ROWS = 16
CHECK_SHARE = 64


def check_optimize_options(optimize: Any, precision: str, compile: bool) -> None:
    """Raise SpecError for an ``optimize`` other than "auto"/True/False or an unknown precision."""
    if not (optimize == "auto" or optimize is True or optimize is False):
        raise SpecError(f"optimize must be 'auto' (the default: optimise when the first batch proves it safe), "
                        f"True (require it) or False (run the model as given), got {optimize!r}")
    if precision not in PRECISIONS:
        raise SpecError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if optimize is False and (precision != "float32" or compile):
        raise SpecError("precision and compile are optimisations: they need optimize='auto' or True, "
                        "not optimize=False")


def _has_hooks(model: nn.Module) -> str | None:
    for name, m in model.named_modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks:
            return name or type(model).__name__
    return None


def ineligibility(model: nn.Module, *, recording_activations: bool, precision: str, compile: bool,
                  linear_batchnorm: bool = False) -> str | None:
    """Why the rewritten model must not run (None: it may). ``model`` is in eval mode already. A
    model that runs outside torch says why in its ``optimization_refused`` (e.g. an ONNX model)."""
    refused = getattr(model, "optimization_refused", None)
    if isinstance(refused, str):
        return refused
    if recording_activations:
        return "activations are recorded with forward hooks on the original layers"
    hooked = _has_hooks(model)
    if hooked is not None:
        return f"the model has forward/backward hooks (on {hooked!r}), which a rewritten copy would not honour"
    training = [n or type(model).__name__ for n, m in model.named_modules() if m.training]
    if training:
        return f"module {training[0]!r} stays in training mode (e.g. an exported graph): its outputs are not inference outputs"
    rewritable = (nn.Conv2d, nn.BatchNorm2d, nn.BatchNorm1d) if linear_batchnorm else (nn.Conv2d, nn.BatchNorm2d)
    if precision == "float32" and not compile and not any(isinstance(m, rewritable) for m in model.modules()):
        return "nothing to optimise (no convolution or BatchNorm; precision float32, no compile)"
    return None


@dataclass
class Optimization:
    """What the engine runs, and the provenance record of it.

    ``model`` is the module called (the original when ``applied`` is False); ``rewrites`` names
    the rewrites in ``model``; ``reason`` says why the original runs; ``check`` is the first-batch
    comparison (:func:`first_batch_check`); ``compile_seconds`` the first compiled call's time."""

    requested: Any
    model: nn.Module
    candidate: nn.Module | None = None
    applied: bool = False
    rewrites: tuple[str, ...] = ()
    precision: str = "float32"
    compile: bool = False
    reason: str | None = None
    check: dict[str, Any] | None = None
    compile_seconds: float | None = None

    def settle(self, applied: bool, reason: str | None = None) -> None:
        """Decide: run the candidate (``applied``) or the original (with ``reason``)."""
        self.applied = bool(applied and self.candidate is not None)
        if self.applied:
            self.model, self.reason = self.candidate, None  # type: ignore[assignment]
        else:
            self.reason = reason or self.reason

    def provenance(self) -> dict[str, Any]:
        """JSON-able record for the run's attributes."""
        out: dict[str, Any] = {"requested": self.requested, "ran": "optimized" if self.applied else "original",
                               "rewrites": list(self.rewrites), "precision": self.precision if self.applied else "float32",
                               "compile": self.compile and self.applied}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.check is not None:
            out["check"] = self.check
        if self.compile_seconds is not None:
            out["compile_seconds"] = round(self.compile_seconds, 3)
        return out


def _count_bn(model: nn.Module, linear: bool = False) -> int:
    """BatchNorm layers left to run (a folded Linear -> BatchNorm1d pair keeps its original pair
    for inputs that are not 2-D: not counted)."""
    from ..models.reference import FoldedLinearBatchNorm

    kinds = (nn.BatchNorm2d, nn.BatchNorm1d) if linear else nn.BatchNorm2d
    kept = sum(isinstance(m, FoldedLinearBatchNorm) for m in model.modules())
    return sum(isinstance(m, kinds) for m in model.modules()) - kept


def _traced_fold(model: nn.Module) -> nn.Module:
    """``model`` with the conv/BatchNorm pairs that are not children of one ``nn.Sequential``
    (e.g. a ResNet block's ``conv1``/``bn1`` attributes) folded too, through a ``torch.fx``
    trace; ``model`` itself when no BatchNorm is left, it cannot be traced (a forward that
    checks its input's shape or branches on it), or nothing more folds."""
    from torch.fx.experimental.optimization import fuse

    if not _count_bn(model):
        return model
    try:
        traced = fuse(model)
    except Exception as exc:  # noqa: BLE001 - not traceable: keep the Sequential folding
        log.debug("no traced BatchNorm folding for %s: %s: %s", type(model).__name__, type(exc).__name__, exc)
        return model
    return traced if _count_bn(traced) < _count_bn(model) else model


def rewrite_model(model: nn.Module, *, compile: bool = False,
                  linear_batchnorm: bool = False) -> tuple[nn.Module, tuple[str, ...]]:
    """An optimised copy of ``model`` (``model`` is not modified) and the names of the rewrites:
    BatchNorm folded into the preceding convolutions (pairs inside an ``nn.Sequential``, then
    the rest where the model can be traced with ``torch.fx``), and with ``linear_batchnorm``
    into the preceding Linear layers (``nn.Sequential`` pairs: point-cloud networks' per-point
    layers), channels_last where there are convolutions, compiled on request."""
    from ..models.reference import fold_batchnorm, optimize_for_inference

    has_conv = any(isinstance(m, nn.Conv2d) for m in model.modules())
    folded = _traced_fold(fold_batchnorm(model, linear=linear_batchnorm))
    fast = optimize_for_inference(folded, fold_bn=False, channels_last=has_conv, compile=compile)
    folds = _count_bn(folded, linear_batchnorm) < _count_bn(model, linear_batchnorm)
    names = (("fold_batchnorm",) if folds else ()) \
        + (("channels_last",) if has_conv else ())
    return fast, names + (("torch.compile",) if compile else ())


@dataclass
class _Comparison:
    """Running result of comparing leaves: largest scaled difference of the finite floating
    values, whether integer/boolean values were compared and agreed, the first disagreement."""

    worst: float = 0.0
    predictions: bool | None = None  # None: no integer/boolean values compared
    problem: str | None = None


def _compare(a: list[Tensor], b: list[Tensor], tol: float, what: str, into: _Comparison) -> None:
    """Compare two leaf lists into ``into`` (stops at the first disagreement)."""
    if len(a) != len(b):
        into.problem = f"the {what} differ in structure ({len(a)} vs {len(b)} tensors)"
        return
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            into.problem = f"{what} tensor {i} has shape {tuple(y.shape)}, the original's {tuple(x.shape)}"
            return
        x, y = x.detach().cpu(), y.detach().cpu()
        if not x.is_floating_point():
            same = torch.equal(x, y.to(x.dtype))
            into.predictions = same and into.predictions is not False
            if not same:
                n = int((x != y.to(x.dtype)).sum())
                into.problem = f"{what} tensor {i} (integer/boolean: predictions) differs in {n} of {x.numel()} values"
                return
            continue
        x64, y64 = x.double(), y.double()
        finite = torch.isfinite(x64)
        # NaN and ±inf must sit in the same places with the same values (NaN where NaN)
        same_special = torch.equal(torch.isnan(x64), torch.isnan(y64)) and torch.equal(
            torch.where(torch.isinf(x64), x64, 0), torch.where(torch.isinf(y64), y64, 0))
        if not same_special:
            into.problem = f"{what} tensor {i} is NaN or infinite in other places than the original's"
            return
        if not finite.any():
            continue
        scale = max(1.0, float(x64[finite].abs().max()))
        diff = float((x64[finite] - y64[finite]).abs().max()) / scale
        into.worst = max(into.worst, diff) if diff == diff else math.inf
        if not diff <= tol:
            into.problem = f"{what} tensor {i} differs by {diff:.3g} (relative to max(1, max |original|)), above {tol:g}"
            return


def _close(a: Tensor, b: Tensor, tol: float) -> Tensor:
    """(i, j) bool: entry ``i`` of ``a`` (K, F) equals entry ``j`` of ``b`` (K, F): integer
    fields exactly, floating fields within ``tol · max(1, max |a|)`` (NaN where NaN)."""
    if a.is_floating_point() != b.is_floating_point():  # e.g. labels against scores: never equal
        return torch.zeros(len(a), len(b), dtype=torch.bool)
    if not a.is_floating_point():
        return (a[:, None, :] == b[None, :, :].to(a.dtype)).all(-1)
    a64, b64 = a.double(), b.double()
    finite = torch.isfinite(a64)
    scale = max(1.0, float(a64[finite].abs().max())) if finite.any() else 1.0
    x, y = a64[:, None, :], b64[None, :, :]
    near = (x - y).abs() <= tol * scale
    same = (torch.isnan(x) & torch.isnan(y)) | (torch.isinf(x) & (x == y))
    return (near | same).all(-1)


def compare_as_sets(ref: dict[str, Tensor], cand: dict[str, Tensor], tol: float) -> tuple[float, str | None]:
    """Compare variables whose second axis is an unordered set (a row's detections ranked by score:
    near-equal scores swap under float rounding), all of one set axis together: every row's entries
    of ``ref`` must pair one to one with entries of ``cand`` that agree in every variable (integer
    values exactly, floating values within ``tol`` relative to ``max(1, max |ref|)``): a perfect
    matching of the bipartite graph of agreeing entries, found by ``scipy.optimize.linear_sum_assignment``
    (so near-equal entries that could pair either way never fail for the order they are tried
    in). Returns the largest scaled floating difference over the pairs and the first disagreement
    (None: agree)."""
    from scipy.optimize import linear_sum_assignment

    names = sorted(ref)
    for n in names:
        if n not in cand or cand[n].shape != ref[n].shape:
            return 0.0, f"recorded variable {n} has shape {tuple(cand[n].shape) if n in cand else None}, " \
                        f"the original's {tuple(ref[n].shape)}"
    rows, k = ref[names[0]].shape[:2]
    flat = {n: (ref[n].detach().cpu().reshape(rows, k, -1), cand[n].detach().cpu().reshape(rows, k, -1)) for n in names}
    worst = 0.0
    for r in range(rows):
        close = torch.ones(k, k, dtype=torch.bool)
        for a, b in flat.values():
            close &= _close(a[r], b[r], tol)
        rows_i, cols_j = linear_sum_assignment((~close).numpy().astype(np.int8))
        unpaired = [int(i) for i, j in zip(rows_i, cols_j) if not bool(close[i, j])]
        if unpaired:
            return worst, (f"recorded variables ({', '.join(names)}) of row {r}: entry {unpaired[0]} of the original "
                           f"has no counterpart in the optimised model's (compared as a set, tolerance {tol:g})")
        for i, j in zip(rows_i.tolist(), cols_j.tolist()):
            for a, b in flat.values():
                if a.is_floating_point():
                    x, y = a[r, i].double(), b[r, j].double()
                    ok = torch.isfinite(x) & torch.isfinite(y)
                    if ok.any():
                        scale = max(1.0, float(a[r][torch.isfinite(a[r])].abs().max()))
                        worst = max(worst, float((x[ok] - y[ok]).abs().max()) / scale)
    return worst, None


def _tensor_leaves(outputs: Any) -> list[Tensor] | None:
    """The tensors of outputs whose leaves correspond position by position (a tensor, a tuple of
    tensors, a dict of tensors by key), or None for set-like outputs such as detections (lists
    of per-image dicts, padded Boxes), whose order changes when near-equal scores swap."""
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, dict) and all(isinstance(v, Tensor) for v in outputs.values()):
        return [outputs[k] for k in sorted(outputs, key=str)]
    if isinstance(outputs, tuple) and outputs and all(isinstance(v, Tensor) for v in outputs):
        return list(outputs)
    return None


def first_batch_check(original: Callable[[Tensor], Any], optimized: Callable[[Tensor], Any], x: Tensor,
                      score: Callable[[Any], dict[str, Tensor]], precision: str,
                      unordered: dict[str, str] | None = None) -> tuple[dict[str, Any], str | None]:
    """Compare the original and the optimised model call on the rows ``x`` (see the module docs).

    ``score(outputs)`` gives the task's recorded variables for those rows. Raw outputs are
    compared leaf by leaf when they are tensors (or tuples/dicts of tensors); set-like outputs
    (detections) are compared through the task's recorded variables only. An exception of the
    original model propagates (the caller decides); one of the optimised model or of scoring
    its outputs is a failed check. ``unordered`` maps recorded variables to their unordered set
    axis (``Task.unordered_dims``): those are compared per axis as sets
    (:func:`compare_as_sets`). Returns the record for the provenance (rows, tolerance,
    largest difference, whether the predictions agree (None: none compared), the two forwards'
    times) and the failure reason (None when the check passes)."""
    tol = TOLERANCE[precision]
    t0 = time.perf_counter()
    reference = original(x)
    ref_scores = score(reference)
    t1 = time.perf_counter()
    record: dict[str, Any] = {"rows": int(len(x)), "tolerance": tol}
    try:
        candidate = optimized(x)
        t2 = time.perf_counter()
        cand_scores = score(candidate)
    except Exception as exc:  # noqa: BLE001 - any failure of the rewritten copy means: run the original
        record.update(passed=False, predictions_equal=None, max_difference=None)
        return record, f"the optimised model failed: {type(exc).__name__}: {exc}"
    record.update(original_seconds=round(t1 - t0, 4), optimized_seconds=round(t2 - t1, 4))
    result = _Comparison()
    leaves = _tensor_leaves(reference)
    if leaves is not None:
        _compare(leaves, _tensor_leaves(candidate) or [], tol, "outputs", result)
    unordered = {n: axis for n, axis in (unordered or {}).items() if n in ref_scores}
    if result.problem is None:
        names = sorted(set(ref_scores) - set(unordered))
        _compare([ref_scores[n] for n in names], [cand_scores.get(n, torch.empty(0)) for n in names],
                 tol, "recorded variables (" + ", ".join(names) + ")", result)
    for axis in sorted(set(unordered.values())):
        if result.problem is not None:
            break
        group = [n for n, a in unordered.items() if a == axis]
        worst, result.problem = compare_as_sets({n: ref_scores[n] for n in group},
                                                {n: cand_scores[n] for n in group if n in cand_scores}, tol)
        result.worst = max(result.worst, worst)
        if result.problem is None and any(not ref_scores[n].is_floating_point() for n in group):
            result.predictions = result.predictions is not False
    record.update(max_difference=None if math.isinf(result.worst) else float(f"{result.worst:.3g}"),
                  predictions_equal=result.predictions, passed=result.problem is None)
    return record, result.problem


def try_rewrite(model: nn.Module, compile: bool,
                linear_batchnorm: bool = False) -> tuple[nn.Module | None, tuple[str, ...], str | None]:
    """:func:`rewrite_model`, with a failure to copy or rewrite turned into a reason."""
    try:
        fast, names = rewrite_model(model, compile=compile, linear_batchnorm=linear_batchnorm)
    except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError, copy.Error) as exc:
        return None, (), f"the model could not be copied and rewritten ({type(exc).__name__}: {exc})"
    return fast, names, None


def propose_optimization(model: nn.Module, optimize: Any, *, precision: str = "float32", compile: bool = False,
                         recording_activations: bool = False, linear_batchnorm: bool = False) -> Optimization:
    """The optimisation plan for ``model`` (in eval mode): a rewritten candidate, to be proven
    by :func:`verify_on_first_batch`, or the original with the reason. ``optimize=True`` makes
    hooks, activations and training mode errors (SpecError) instead of reasons.
    ``linear_batchnorm``: also fold ``Linear -> BatchNorm1d`` pairs (:func:`rewrite_model`)."""
    opt = Optimization(requested=optimize, model=model, precision=precision, compile=compile)
    if optimize is False:
        opt.reason = "optimize=False"
        return opt
    reason = ineligibility(model, recording_activations=recording_activations, precision=precision, compile=compile,
                           linear_batchnorm=linear_batchnorm)
    if reason is not None and optimize is True and not reason.startswith("nothing to optimise"):
        raise SpecError(f"optimize=True, but {reason}; use optimize='auto' (it keeps the original model) or False")
    if reason is None or optimize is True:  # True on a model with nothing to rewrite: a checked copy, as before
        opt.candidate, opt.rewrites, reason = try_rewrite(model, compile, linear_batchnorm)
        if reason is not None and optimize is True:
            raise SpecError(f"optimize=True, but {reason}; use optimize='auto' or False")
        if reason is None and optimize is not True and not opt.rewrites and precision == "float32" and not compile:
            # e.g. a BatchNorm1d after a Conv1d: nothing folded, so the model runs as given
            opt.candidate, reason = None, "nothing to optimise (no BatchNorm could be folded, no convolution)"
    opt.reason = reason
    return opt


def check_rows(forward_batch: int, run_rows: int | None) -> int:
    """How many rows the first-batch check compares: ``run_rows / CHECK_SHARE`` (all of
    :data:`CHECK_ROWS` when the run's size is unknown), within [:data:`CHECK_MIN_ROWS`,
    :data:`CHECK_ROWS`] and at most ``forward_batch``."""
    wanted = CHECK_ROWS if run_rows is None else max(CHECK_MIN_ROWS, run_rows // CHECK_SHARE)
    return max(1, min(CHECK_ROWS, forward_batch, wanted))


def verify_on_first_batch(opt: Optimization, ctx: Any, device: torch.device, forward_batch: int,
                          run_rows: int | None = None) -> None:
    """Run :func:`first_batch_check` on the rows of the evaluation ``ctx``'s first model calls
    (chunk 0 under its first elements, :func:`check_rows` of a run of ``run_rows`` model inputs,
    both models called in slices of ``forward_batch``; ``ctx.call`` is the original model's
    call) and settle ``opt``: the candidate runs when the check passes. Torch's RNG state is
    left as it was. An error of the original model is raised under ``optimize=True``, else
    left to the chunk that meets it (its report names the run and the chunk)."""
    from .chunk import first_forward_rows
    from .model_call import ModelCall

    assert opt.candidate is not None
    base = ctx.call
    with torch.random.fork_rng(devices=[]):
        rows = first_forward_rows(ctx, check_rows(forward_batch, run_rows))
        if rows is None:  # no data: nothing to prove it on, nothing to run either
            opt.settle(opt.requested is True, "no data to check the optimised model on")
            return
        x, y, g = rows
        reference = ModelCall(base.model, read=base.read, concat=base.concat, normalize=base.norm,
                              forward_batch=forward_batch, what=base.what)
        try:
            fast = ModelCall(opt.candidate.to(device), read=base.read, concat=base.concat, normalize=base.norm,
                             channels_last="channels_last" in opt.rewrites, forward_batch=forward_batch,
                             what=base.what, precision=opt.precision)
        except (RuntimeError, ValueError, TypeError) as exc:  # e.g. no device memory left for the copy
            opt.settle(False, f"the optimised copy could not be moved to {device}: {type(exc).__name__}: {exc}")
            return
        try:
            unordered = {v.name: v.extra_dims[0] for v in ctx.task.variables(0)
                         if v.extra_dims and v.extra_dims[0] in ctx.task.unordered_dims}
            record, problem = first_batch_check(reference, fast, x, lambda out: ctx.task.score(out, y, g),
                                                opt.precision, unordered)
        except Exception as exc:  # noqa: BLE001 - the original model (or scoring its outputs) failed
            if opt.requested is True:
                raise
            opt.settle(False, f"the original model failed on the first batch ({type(exc).__name__}); its "
                              "error is reported by the chunk that meets it")
            return
        if opt.compile and problem is None:  # the first compiled call compiles: time a second one
            t0 = time.perf_counter()
            fast(x)
            opt.compile_seconds = max(0.0, record["optimized_seconds"] - (time.perf_counter() - t0))
    if device.type == "cuda":  # the check's activations: not counted against the run's memory budget
        torch.cuda.empty_cache()
    opt.check = record
    if problem is not None:
        log.warning("the optimised model is not used: %s (first-batch check on %d inputs); running the original",
                    problem, len(x))
    opt.settle(problem is None, None if problem is None else f"first-batch check failed: {problem}")

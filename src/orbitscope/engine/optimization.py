"""Inference optimisations, on by default and proven on the first batch.

``evaluate(optimize="auto")`` (the default) runs a rewritten copy of the model when that is safe:

* **BatchNorm folding**: every ``Conv2d -> BatchNorm2d`` pair of an ``nn.Sequential`` becomes
  one convolution (:func:`orbitscope.models.fold_batchnorm`);
* **channels_last**: convolution weights and 4-D inputs in ``torch.channels_last`` memory format
  (oneDNN's and cuDNN's fast layout);
* optionally **mixed precision** (``precision="bfloat16"`` or ``"float16"``: the forward under
  ``torch.autocast``; outputs are cast back to float32) and **torch.compile** (``compile=True``,
  timed: its first call is reported separately as ``compile_seconds``).

Before any chunk runs, :func:`first_batch_check` calls the original and the rewritten model on
the run's first forward batch (up to :data:`CHECK_ROWS` transformed inputs) and compares them:

* every floating-point output within ``TOLERANCE[precision] · max(1, max |original|)`` (absolute,
  per output tensor; NaN where the original has NaN);
* every integer or boolean output, and every integer or boolean variable the task records
  (for classification ``correct`` and the predicted ``label``: the predictions), exactly equal;
* the task's floating-point variables within the same tolerance.

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

import torch
from torch import Tensor, nn

from ..errors import SpecError
from .model_call import PRECISIONS

__all__ = ["PRECISIONS", "TOLERANCE", "CHECK_ROWS", "Optimization", "check_optimize_options", "ineligibility",
           "rewrite_model", "try_rewrite", "first_batch_check", "output_leaves"]

log = logging.getLogger(__name__)

#: first-batch tolerance per precision, relative to ``max(1, max |original output|)``: float32
#: rewrites only reorder sums (measured differences ~1e-7 on our CNNs); bfloat16 keeps 8
#: significant bits (relative rounding 2⁻⁸ ≈ 0.4 % per operation), float16 11 bits
TOLERANCE: dict[str, float] = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-2}

#: transformed inputs (rows) of the first forward batch that the check compares
CHECK_ROWS = 256


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


def ineligibility(model: nn.Module, *, recording_activations: bool, precision: str, compile: bool) -> str | None:
    """Why the rewritten model must not run (None: it may). ``model`` is in eval mode already."""
    if recording_activations:
        return "activations are recorded with forward hooks on the original layers"
    hooked = _has_hooks(model)
    if hooked is not None:
        return f"the model has forward/backward hooks (on {hooked!r}), which a rewritten copy would not honour"
    training = [n or type(model).__name__ for n, m in model.named_modules() if m.training]
    if training:
        return f"module {training[0]!r} stays in training mode (e.g. an exported graph): its outputs are not inference outputs"
    if precision == "float32" and not compile and not any(
            isinstance(m, (nn.Conv2d, nn.BatchNorm2d)) for m in model.modules()):
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


def rewrite_model(model: nn.Module, *, compile: bool = False) -> tuple[nn.Module, tuple[str, ...]]:
    """An optimised copy of ``model`` (BatchNorm folded, channels_last where there are
    convolutions, compiled on request) and the names of the rewrites applied."""
    from ..models.reference import optimize_for_inference

    has_conv = any(isinstance(m, nn.Conv2d) for m in model.modules())
    has_bn = any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    fast = optimize_for_inference(model, fold_bn=has_bn, channels_last=has_conv, compile=compile)
    names = (("fold_batchnorm",) if has_bn else ()) + (("channels_last",) if has_conv else ())
    return fast, names + (("torch.compile",) if compile else ())


def output_leaves(outputs: Any) -> list[Tensor]:
    """The tensors of a model's outputs in a fixed order (tensors; dicts by key; tuples and lists
    by position; objects by their attributes, e.g. padded Boxes)."""
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        return [t for k in sorted(outputs, key=str) for t in output_leaves(outputs[k])]
    if isinstance(outputs, (tuple, list)):
        return [t for o in outputs for t in output_leaves(o)]
    if hasattr(outputs, "__dict__"):
        return [t for k in sorted(vars(outputs)) for t in output_leaves(vars(outputs)[k])]
    return []


def _compare(a: list[Tensor], b: list[Tensor], tol: float, what: str) -> tuple[float, str | None]:
    """Largest scaled difference of two leaf lists, and the first disagreement (None: agree)."""
    if len(a) != len(b):
        return math.inf, f"the {what} differ in structure ({len(a)} vs {len(b)} tensors)"
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return math.inf, f"{what} tensor {i} has shape {tuple(y.shape)}, the original's {tuple(x.shape)}"
        if not x.is_floating_point():
            if not torch.equal(x.cpu(), y.cpu().to(x.dtype)):
                n = int((x.cpu() != y.cpu().to(x.dtype)).sum())
                return math.inf, f"{what} tensor {i} (integer/boolean: predictions) differs in {n} of {x.numel()} values"
            continue
        x64, y64 = x.detach().double().cpu(), y.detach().double().cpu()
        nan = torch.isnan(x64)
        if not torch.equal(nan, torch.isnan(y64)):
            return math.inf, f"{what} tensor {i} is NaN in other places than the original's"
        finite = ~nan
        if not finite.any():
            continue
        scale = max(1.0, float(x64[finite].abs().max()))
        diff = float((x64[finite] - y64[finite]).abs().max()) / scale
        worst = max(worst, diff)
        if not diff <= tol:
            return worst, f"{what} tensor {i} differs by {diff:.3g} (relative to max(1, max |original|)), above {tol:g}"
    return worst, None


def first_batch_check(original: Callable[[Tensor], Any], optimized: Callable[[Tensor], Any], x: Tensor,
                      score: Callable[[Any], dict[str, Tensor]], precision: str) -> tuple[dict[str, Any], str | None]:
    """Compare the original and the optimised model call on the rows ``x`` (see the module docs).

    ``score(outputs)`` gives the task's recorded variables for those rows. Returns the record for
    the provenance (rows, tolerance, largest difference, whether the predictions agree, the two
    forwards' times) and the failure reason (None when the check passes)."""
    tol = TOLERANCE[precision]
    t0 = time.perf_counter()
    try:
        reference = original(x)
    except Exception as exc:  # noqa: BLE001 - the chunk that meets it reports it, naming run and chunk
        return ({"rows": int(len(x)), "tolerance": tol, "passed": False},
                f"the original model failed on the first batch: {type(exc).__name__}")
    t1 = time.perf_counter()
    try:
        candidate = optimized(x)
    except Exception as exc:  # noqa: BLE001 - any failure of the rewritten copy means: run the original
        return ({"rows": int(len(x)), "tolerance": tol, "passed": False},
                f"the optimised model failed: {type(exc).__name__}: {exc}")
    t2 = time.perf_counter()
    record: dict[str, Any] = {"rows": int(len(x)), "tolerance": tol,
                              "original_seconds": round(t1 - t0, 4), "optimized_seconds": round(t2 - t1, 4)}
    worst, problem = _compare(output_leaves(reference), output_leaves(candidate), tol, "outputs")
    if problem is None:
        ref_scores, cand_scores = score(reference), score(candidate)
        names = sorted(ref_scores)
        w2, problem = _compare([ref_scores[n] for n in names], [cand_scores.get(n, torch.empty(0)) for n in names],
                               tol, "recorded variables (" + ", ".join(names) + ")")
        worst = max(worst, w2)
    record.update(max_difference=None if math.isinf(worst) else float(f"{worst:.3g}"),
                  predictions_equal=problem is None or "predictions" not in problem, passed=problem is None)
    return record, problem


def try_rewrite(model: nn.Module, compile: bool) -> tuple[nn.Module | None, tuple[str, ...], str | None]:
    """:func:`rewrite_model`, with a failure to copy or rewrite turned into a reason."""
    try:
        fast, names = rewrite_model(model, compile=compile)
    except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError, copy.Error) as exc:
        return None, (), f"the model could not be copied and rewritten ({type(exc).__name__}: {exc})"
    return fast, names, None


def propose_optimization(model: nn.Module, optimize: Any, *, precision: str = "float32", compile: bool = False,
                         recording_activations: bool = False) -> Optimization:
    """The optimisation plan for ``model`` (in eval mode): a rewritten candidate, to be proven
    by :func:`verify_on_first_batch`, or the original with the reason. ``optimize=True`` makes
    hooks, activations and training mode errors (SpecError) instead of reasons."""
    opt = Optimization(requested=optimize, model=model, precision=precision, compile=compile)
    if optimize is False:
        opt.reason = "optimize=False"
        return opt
    reason = ineligibility(model, recording_activations=recording_activations, precision=precision, compile=compile)
    if reason is not None and optimize is True and not reason.startswith("nothing to optimise"):
        raise SpecError(f"optimize=True, but {reason}; use optimize='auto' (it keeps the original model) or False")
    if reason is None or optimize is True:  # True on a model with nothing to rewrite: a checked copy, as before
        opt.candidate, opt.rewrites, reason = try_rewrite(model, compile)
        if reason is not None and optimize is True:
            raise SpecError(f"optimize=True, but {reason}; use optimize='auto' or False")
    opt.reason = reason
    return opt


def verify_on_first_batch(opt: Optimization, ctx: Any, device: torch.device) -> None:
    """Run :func:`first_batch_check` on the first forward batch of the evaluation ``ctx`` (its
    call is the original model's) and settle ``opt``: the candidate runs when the check passes."""
    from .chunk import first_forward_rows
    from .model_call import ModelCall

    assert opt.candidate is not None
    rows = first_forward_rows(ctx, CHECK_ROWS)
    if rows is None:  # no data: nothing to prove it on, nothing to run either
        opt.settle(opt.requested is True, "no data to check the optimised model on")
        return
    x, y, g = rows
    original = ctx.call
    fast = ModelCall(opt.candidate.to(device), read=original.read, concat=original.concat, normalize=original.norm,
                     channels_last="channels_last" in opt.rewrites, forward_batch=original.forward_batch,
                     what=original.what, precision=opt.precision)
    record, problem = first_batch_check(original, fast, x, lambda out: ctx.task.score(out, y, g), opt.precision)
    if opt.compile and problem is None:  # the first compiled call compiles: time a second one
        t0 = time.perf_counter()
        fast(x)
        opt.compile_seconds = max(0.0, record["optimized_seconds"] - (time.perf_counter() - t0))
    opt.check = record
    if problem is not None:
        log.warning("the optimised model is not used: %s (first-batch check on %d inputs); running the original",
                    problem, len(x))
    opt.settle(problem is None, None if problem is None else f"first-batch check failed: {problem}")

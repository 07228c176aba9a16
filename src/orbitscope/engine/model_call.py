"""One model call for every consumer (evaluate, certify, the interface's live view, reports):
normalise, forward in slices under inference mode, read the outputs, check they are finite.

Normalisation happens *after* any group action: inputs are in [0, 1] and ``normalize=(mean,
std)`` maps channel ``c`` to ``(x - mean[c]) / std[c]`` just before the model.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from ..errors import ModelError
from .batch_probe import BatchTuner

__all__ = ["Normalizer", "ModelCall", "finite_rows", "PRECISIONS", "map_tensors"]


class Normalizer:
    """``x -> (x - mean) / std`` per channel ``C`` of (..., C, H, W) tensors (images, frame
    sequences); the identity for None."""

    def __init__(self, normalize: tuple[Sequence[float], Sequence[float]] | None, device: torch.device | str = "cpu",
                 channel_axis: int = -3) -> None:
        self.spec: list[list[float]] | None = None
        self.channel_axis = channel_axis
        if normalize is None:
            self.mean = self.std = None
            return
        try:
            mean, std = normalize
            m = torch.as_tensor(mean, dtype=torch.float32, device=device).reshape(-1)
            s = torch.as_tensor(std, dtype=torch.float32, device=device).reshape(-1)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"normalize must be (mean, std) sequences, one value per channel: {exc}") from exc
        if not bool(torch.isfinite(m).all()) or not bool(torch.isfinite(s).all()):
            raise ValueError(f"normalisation mean and std must be finite, got {normalize}")
        if bool((s <= 0).any()):
            raise ValueError(f"normalisation std must be > 0, got {std}")
        self.mean, self.std = m, s
        self.spec = [list(map(float, v)) for v in normalize]

    def __call__(self, t: Tensor) -> Tensor:
        if self.mean is None or self.std is None:
            return t
        if t.ndim < -self.channel_axis:
            raise ValueError(f"normalize applies to (..., C, H, W) inputs, got shape {tuple(t.shape)}")
        shape = [1] * t.ndim
        shape[self.channel_axis] = -1
        if self.mean.numel() not in (1, t.shape[self.channel_axis]):
            raise ValueError(f"normalize has {self.mean.numel()} channel(s) but the inputs have "
                             f"{t.shape[self.channel_axis]}: give one mean and std per channel")
        return (t - self.mean.reshape(shape)) / self.std.reshape(shape)


def finite_rows(outputs: Any) -> Tensor | None:
    """(rows,) bool: every value of the row is finite; None when no tensor of rows is found.

    Looks into tensors, tuples/lists of tensors, dicts of tensors and lists of per-row dicts."""
    if isinstance(outputs, Tensor):
        if not outputs.is_floating_point() and not outputs.is_complex():
            return torch.ones(len(outputs), dtype=torch.bool, device=outputs.device) if outputs.ndim else None
        return torch.isfinite(outputs.reshape(len(outputs), -1)).all(dim=1) if outputs.ndim else None
    if isinstance(outputs, dict):
        parts = [finite_rows(v) for v in outputs.values()]
    elif isinstance(outputs, (tuple, list)) and outputs and all(isinstance(o, dict) for o in outputs):
        rows = []
        for o in outputs:
            ok = [bool(torch.isfinite(v).all()) for v in o.values() if isinstance(v, Tensor) and v.is_floating_point()]
            rows.append(all(ok))
        return torch.tensor(rows, dtype=torch.bool)
    elif isinstance(outputs, (tuple, list)):
        parts = [finite_rows(v) for v in outputs]
    else:
        return None
    parts = [p for p in parts if p is not None]
    if not parts or len({len(p) for p in parts}) != 1:
        return parts[0] if parts else None
    out = parts[0]
    for p in parts[1:]:
        out = out & p.to(out.device)
    return out


#: forward precisions: float32 (no autocast) or autocast to one of the half types
PRECISIONS: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def map_tensors(fn: Callable[[Tensor], Tensor], obj: Any) -> Any:
    """``obj`` with ``fn`` applied to every tensor in it (through dicts, tuples, named tuples,
    lists and dataclasses; anything else is left as it is)."""
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: map_tensors(fn, v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*(map_tensors(fn, v) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(fn, v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # e.g. padded Boxes
        return dataclasses.replace(obj, **{f.name: map_tensors(fn, getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def _as_float32(raw: Any) -> Any:
    """Half-precision floating tensors in ``raw`` -> float32."""
    return map_tensors(lambda t: t.float() if t.dtype in (torch.bfloat16, torch.float16) else t, raw)


class ModelCall:
    """Normalise, forward and read outputs, in slices of ``forward_batch`` rows.

    Args:
        model: the module to call (put it in eval mode with :meth:`evaluating`).
        read: turns one forward's raw return value into the task's outputs (default: identity).
        concat: joins the outputs of several slices (default:
            :func:`orbitscope.tasks.concat_outputs`).
        normalize: ``(mean, std)`` per channel, applied to each slice before the model.
        device: where the inputs are moved before normalisation (default: leave them).
        channels_last: call the model with channels-last memory format (4-D inputs).
        forward_batch: rows per forward call (after :attr:`tuner` has settled, its choice).
        precision: ``"float32"`` (no autocast), or ``"bfloat16"`` / ``"float16"``: the forward
            runs under ``torch.autocast`` on the inputs' device and floating-point outputs are
            cast back to float32.
        what: how the inputs are described in error messages.
    """

    def __init__(self, model: nn.Module, *, read: Callable[[Any], Any] | None = None,
                 concat: Callable[[Sequence[Any]], Any] | None = None,
                 normalize: tuple[Sequence[float], Sequence[float]] | Normalizer | None = None,
                 device: torch.device | str | None = None, channels_last: bool = False, forward_batch: int = 512,
                 what: str = "inputs", precision: str = "float32") -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if forward_batch < 1:
            raise ValueError(f"forward_batch must be >= 1, got {forward_batch}")
        from ..tasks.base import concat_outputs

        self.model = model
        self.device = None if device is None else torch.device(device)
        self.norm = normalize if isinstance(normalize, Normalizer) else Normalizer(normalize, self.device or "cpu")
        self.read = read or (lambda raw: raw)
        self.concat = concat or concat_outputs
        self.channels_last = channels_last
        self.forward_batch = int(forward_batch)
        #: while set and not settled, it chooses the slices (see :mod:`orbitscope.engine.batch_probe`)
        self.tuner: BatchTuner | None = None
        self.what = what
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.precision = precision

    @contextmanager
    def evaluating(self) -> Iterator["ModelCall"]:
        """Eval mode for the duration (each submodule's mode is restored exactly afterwards)."""
        from ..models.reference import eval_mode

        with eval_mode(self.model):
            yield self

    def forward(self, x: Tensor) -> Any:
        """One forward of already-normalised inputs; model failures become a ModelError."""
        if self.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        half = PRECISIONS[self.precision]
        try:
            if half is None:
                raw = self.model(x)
            else:
                with torch.autocast(device_type=x.device.type, dtype=half):
                    raw = _as_float32(self.model(x))
        except (RuntimeError, ValueError, TypeError, AssertionError, IndexError) as exc:
            raise ModelError(
                f"the model failed on a batch of shape {tuple(x.shape)} ({self.what}, after normalisation): {exc}. "
                "Check that the model accepts inputs of this channel count and size (a torch.export graph needs a "
                "dynamic batch dimension: export with dynamic_shapes)."
            ) from exc
        return self.read(raw)

    def __call__(self, x: Tensor) -> Any:
        """Outputs for all rows of ``x`` (normalised here), joined over forward slices."""
        if self.device is not None:
            x = x.to(self.device)
        x = self.norm(x)
        tuner = self.tuner
        with torch.inference_mode():
            if tuner is not None and tuner.chosen is None:
                wait = (lambda: torch.cuda.synchronize(x.device)) if x.device.type == "cuda" else None
                parts = tuner.run(self.forward, x, wait)
                if tuner.chosen is not None:
                    self.forward_batch = tuner.chosen
            else:
                fb = self.forward_batch
                parts = [self.forward(x[s : s + fb]) for s in range(0, len(x), fb)]
        if not parts:
            raise ModelError("no inputs to evaluate")
        return self.concat(parts)

"""Tasks: how a model's output is read and scored against the (transformed) target.

A task declares the data kinds of its input and target (so the engine knows how a group element
acts on them, see :mod:`orbitscope.kinds.actions`), the variables it records per sample and orbit
element, and a pure ``score`` function. Tasks are stateless and deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = ["Task", "Variable", "Classification", "task_from_spec"]


@dataclass(frozen=True)
class Variable:
    """One recorded quantity: numpy dtype, extra trailing dims (after sample × orbit dims)."""

    name: str
    dtype: str
    extra_dims: tuple[str, ...] = ()
    description: str = ""


class Task:
    """Base class. Subclasses set ``kind``, ``input_kind``, ``target_kind``."""

    kind: str = ""
    input_kind: str = "image"
    target_kind: str = "label"

    def variables(self, num_outputs: int) -> list[Variable]:  # pragma: no cover - abstract
        raise NotImplementedError

    def score(self, outputs: Tensor, targets: Tensor) -> dict[str, Tensor]:  # pragma: no cover
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


def _to_probabilities(outputs: Tensor, mode: str) -> Tensor:
    """Rows of class scores -> probabilities.

    ``mode="auto"`` treats a batch as probabilities when every row is non-negative and sums to 1
    (within 1e-3), else as logits (softmax). The rule is per batch and depends only on its values.
    """
    out = outputs.float()
    if mode == "logits":
        return torch.softmax(out, dim=-1)
    looks_like_probs = bool((out >= 0).all()) and bool(((out.sum(-1) - 1).abs() < 1e-3).all())
    if mode == "probabilities":
        if not looks_like_probs:
            raise ValueError(
                "output='probabilities' but the model's rows are not non-negative summing to 1; "
                "use output='logits' (or 'auto')"
            )
        return out
    return out if looks_like_probs else torch.softmax(out, dim=-1)


@dataclass(frozen=True)
class Classification(Task):
    """Image classification; the group acts trivially on labels (equivariance = invariance).

    Records per sample and orbit element:
    ``confidence`` (probability of the true class), ``prediction`` (argmax class), ``correct``
    (1 if prediction == label), ``top1_confidence`` (probability of the predicted class),
    ``entropy`` (of the predicted distribution, in nats) and, if ``store_probabilities``, the full
    ``probabilities`` (extra dim ``class``).

    Args:
        output: ``"logits"``, ``"probabilities"`` or ``"auto"`` (see ``_to_probabilities``).
        store_probabilities: also keep all class probabilities (N × K × classes floats).
    """

    output: Literal["auto", "logits", "probabilities"] = "auto"
    store_probabilities: bool = False
    kind: str = field(default="classification", init=False)

    def __post_init__(self) -> None:
        if self.output not in ("auto", "logits", "probabilities"):
            raise ValueError(f"output must be 'auto', 'logits' or 'probabilities', got {self.output!r}")

    def variables(self, num_outputs: int) -> list[Variable]:
        v = [
            Variable("confidence", "float32", description="probability of the true class"),
            Variable("prediction", "int32", description="predicted class (argmax)"),
            Variable("correct", "uint8", description="1 if the prediction equals the label"),
            Variable("top1_confidence", "float32", description="probability of the predicted class"),
            Variable("entropy", "float32", description="entropy of the predicted distribution (nats)"),
        ]
        if self.store_probabilities:
            v.append(Variable("probabilities", "float32", ("class",), "class probabilities"))
        return v

    def score(self, outputs: Tensor, targets: Tensor) -> dict[str, Tensor]:
        """outputs (N, classes), targets (N,) int -> dict of (N, ...) tensors."""
        if outputs.ndim != 2:
            raise ValueError(f"a classifier must return (batch, classes) scores, got shape {tuple(outputs.shape)}")
        targets = targets.to(outputs.device).long().reshape(-1)
        if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= outputs.shape[1]):
            raise ValueError(
                f"labels must lie in [0, {outputs.shape[1] - 1}] for a model with {outputs.shape[1]} outputs; "
                f"got labels in [{int(targets.min())}, {int(targets.max())}]"
            )
        probs = _to_probabilities(outputs, self.output)
        top1, pred = probs.max(dim=-1)
        logp = torch.log(probs.clamp_min(1e-30))
        res = {
            "confidence": probs.gather(1, targets[:, None])[:, 0],
            "prediction": pred.int(),
            "correct": (pred == targets).to(torch.uint8),
            "top1_confidence": top1,
            "entropy": -(probs * logp).sum(-1),
        }
        if self.store_probabilities:
            res["probabilities"] = probs
        return res

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "output": self.output, "store_probabilities": self.store_probabilities}


def task_from_spec(spec: dict[str, Any]) -> Task:
    """Rebuild a task from :meth:`Task.spec`."""
    kind = spec.get("kind")
    if kind == "classification":
        return Classification(output=spec.get("output", "auto"), store_probabilities=spec.get("store_probabilities", False))
    raise ValueError(f"unknown task kind {kind!r}; known: classification")


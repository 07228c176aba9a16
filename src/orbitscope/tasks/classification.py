"""Image classification: the group acts trivially on labels, so equivariance is invariance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from ..group.elements import Transforms
from .base import Task, register_task
from .variables import Variable

__all__ = ["Classification", "to_probabilities", "class_mean_accuracy"]


def to_probabilities(outputs: Tensor, mode: str) -> Tensor:
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


def class_mean_accuracy(labels: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Mean over the classes present of each class's accuracy (balanced accuracy).

    ``labels`` (N,), ``correct`` (N, ...) 0/1 -> (...) float64; classes are those in ``labels``."""
    classes = np.unique(labels)
    c = np.asarray(correct, dtype=np.float64)
    if len(classes) == 0:
        return np.full(c.shape[1:], np.nan)
    return np.mean([c[labels == k].mean(axis=0) for k in classes], axis=0)


_VARIABLES = (
    Variable("confidence", "float32", description="probability of the true class", kind="probability",
             label="true-class confidence"),
    Variable("prediction", "int32", description="predicted class (argmax)", kind="state", needs_labels=False,
             label="prediction"),
    Variable("correct", "uint8", description="1 if the prediction equals the label", kind="binary", label="accuracy"),
    Variable("top1_confidence", "float32", description="probability of the predicted class", kind="probability",
             needs_labels=False, label="top-1 confidence"),
    Variable("entropy", "float32", description="entropy of the predicted distribution", kind="real",
             lower_is_better=True, needs_labels=False, label="entropy", unit="nats"),
)
_PROBABILITIES = Variable("probabilities", "float32", ("class",), "class probabilities", kind="probability",
                          needs_labels=False, label="class probabilities")


_CONSENSUS_SCORES = (
    Variable("consensus_agreement", "uint8", description="1 if the prediction equals the consensus class",
             kind="binary", needs_labels=False, label="agreement with consensus"),
    Variable("consensus_confidence", "float32", description="probability of the consensus class",
             kind="probability", needs_labels=False, label="confidence in the consensus class"),
)
#: what :func:`orbitscope.analysis.consensus.consensus_scores` adds from stored probabilities
_CONSENSUS_MEASURES = (
    Variable("kl_to_consensus", "float64", description="KL(p_g || consensus)", kind="real", lower_is_better=True,
             needs_labels=False, label="KL divergence to consensus", unit="nats"),
    Variable("tv_to_consensus", "float64", description="total variation distance to the consensus",
             kind="probability", lower_is_better=True, needs_labels=False, label="total variation to consensus"),
    Variable("consensus_class", "int32", description="argmax of the consensus distribution", kind="state",
             needs_labels=False, label="consensus class"),
    Variable("consensus_probabilities", "float64", ("class",), "consensus class distribution", kind="probability",
             needs_labels=False, label="consensus probabilities"),
)


@register_task
@dataclass(frozen=True)
class Classification(Task):
    """Image classification; the group acts trivially on labels (equivariance = invariance).

    Records per sample and orbit element:
    ``confidence`` (probability of the true class), ``prediction`` (argmax class), ``correct``
    (1 if prediction == label), ``top1_confidence`` (probability of the predicted class),
    ``entropy`` (of the predicted distribution, in nats) and, if ``store_probabilities``, the full
    ``probabilities`` (extra dim ``class``). Dataset level (:meth:`compute`): ``class_accuracy``,
    the mean over classes of each class's accuracy.

    Consensus (NERO): the mean of the class probabilities over the distinct orbit elements; its
    argmax is the pseudo-label, scored as ``consensus_agreement`` (prediction == consensus class)
    and ``consensus_confidence`` (probability of the consensus class). With stored probabilities
    :func:`orbitscope.analysis.consensus.with_consensus` computes the same from a stored run.

    Args:
        output: ``"logits"``, ``"probabilities"`` or ``"auto"`` (see :func:`to_probabilities`).
        store_probabilities: also keep all class probabilities (N × K × classes floats).
    """

    output: Literal["auto", "logits", "probabilities"] = "auto"
    store_probabilities: bool = False
    kind: str = field(default="classification", init=False)
    supports_consensus = True

    def __post_init__(self) -> None:
        if self.output not in ("auto", "logits", "probabilities"):
            raise ValueError(f"output must be 'auto', 'logits' or 'probabilities', got {self.output!r}")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "Classification":
        return cls(output=spec.get("output", "auto"), store_probabilities=bool(spec.get("store_probabilities", False)))

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        v = list(_VARIABLES)
        if self.store_probabilities:
            v.append(_PROBABILITIES)
        return v

    def score(self, outputs: Tensor, targets: Tensor, g: Transforms | None = None) -> dict[str, Tensor]:
        """outputs (N, classes), targets (N,) int -> dict of (N, ...) tensors (``g`` is not needed:
        labels are invariant)."""
        if outputs.ndim != 2:
            raise ValueError(f"a classifier must return (batch, classes) scores, got shape {tuple(outputs.shape)}")
        targets = targets.to(outputs.device).long().reshape(-1)
        if len(targets) != len(outputs):
            raise DataError(f"{len(outputs)} model outputs but {len(targets)} labels")
        if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= outputs.shape[1]):
            raise DataError(
                f"labels must lie in [0, {outputs.shape[1] - 1}] for a model with {outputs.shape[1]} outputs; "
                f"got labels in [{int(targets.min())}, {int(targets.max())}]"
            )
        probs = to_probabilities(outputs, self.output)
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

    compute_reads = ("label", "correct")

    def compute(self, states: Mapping[str, np.ndarray], orbit_axes: int) -> dict[str, np.ndarray]:
        if "label" not in states or "correct" not in states:
            return {}
        return {"class_accuracy": class_mean_accuracy(np.asarray(states["label"]), states["correct"])}

    def compute_resampled(self, states: Mapping[str, np.ndarray], orbit_axes: int, counts: np.ndarray,
                          metric: str) -> np.ndarray:
        """``class_accuracy`` on every resample at once: each class's accuracy weighted by the
        draw counts, averaged over the classes drawn (as :func:`class_mean_accuracy` on the
        resampled samples)."""
        if metric != "class_accuracy":
            return super().compute_resampled(states, orbit_axes, counts, metric)
        labels = np.asarray(states["label"])
        correct = np.asarray(states["correct"], dtype=np.float64)
        flat = correct.reshape(len(labels), -1)
        w = np.asarray(counts, dtype=np.float64)
        total = np.zeros((w.shape[0], flat.shape[1]))
        present = np.zeros((w.shape[0], 1))
        for k in np.unique(labels):
            wk = np.where(labels == k, w, 0.0)  # (B, S)
            drawn = wk.sum(1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                total += np.where(drawn > 0, (wk @ flat) / np.maximum(drawn, 1), 0.0)
            present += drawn > 0
        return (total / present).reshape(w.shape[0], *correct.shape[1:])

    def dataset_variables(self) -> list[Variable]:
        return [Variable("class_accuracy", "float64", description="mean over classes of each class's accuracy",
                         kind="probability", label="class-mean accuracy")]

    # consensus: probabilities are invariant, so g⁻¹ acts as the identity
    def canonicalize(self, outputs: Tensor, g: Transforms, **context: Any) -> Tensor:
        return to_probabilities(outputs, self.output)

    def consensus(self, canonical: Tensor, n_elements: int, n_samples: int, weights: np.ndarray) -> Tensor:
        probs = canonical.double().reshape(n_elements, n_samples, -1)
        w = torch.as_tensor(weights, dtype=torch.float64, device=probs.device)
        mean = (probs * w[:, None, None]).sum(0) / w.sum()
        return mean.argmax(-1)

    def consensus_name(self, name: str) -> str:
        return {"correct": "consensus_agreement"}.get(name, f"consensus_{name}")

    def consensus_variables(self) -> list[Variable]:
        return list(_CONSENSUS_SCORES)

    def consensus_measures(self) -> list[Variable]:
        return list(_CONSENSUS_MEASURES)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "output": self.output, "store_probabilities": self.store_probabilities}

"""The task protocol (Task v2): how a model's output is read and scored against the moved target.

A task declares the data kinds of its input, target and output (:mod:`orbitscope.kinds`), the
variables it records (:class:`~orbitscope.tasks.variables.Variable`, with their meaning), and:

* ``collate(items)``: a list of dataset items ``(input, target)`` -> ``(inputs, targets)``
  batches; ragged targets (a varying number of boxes) are padded with a validity mask by their
  kind;
* ``read_outputs(raw)``: whatever the model returned (tensor, tuple, torchvision-style
  ``list[dict]``) -> the task's output form;
* ``score(outputs, targets_g, g)``: per-row variables. Rows are element-major (row ``k·B + b`` is
  sample ``b`` under element ``k``); ``targets_g`` were already mapped by the same element
  through the target kind's action, and ``g`` holds each row's element;
* ``compute(states)`` (optional): dataset-level metrics built from per-sample states (the
  torchmetrics update/compute split), e.g. AP per orbit element;
* ``canonicalize(outputs, g)`` (optional): the inverse action on outputs (``g⁻¹∘f(g·x)``), and
  ``consensus(canonical, weights)``: the canonical-frame pseudo-target averaged over the orbit
  (NERO's consensus); the engine re-applies each element to it and scores against it.

Tasks are stateless and deterministic; ``spec()`` describes one and
:func:`task_from_spec` rebuilds it (through the :data:`TASKS` registry).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from .._registry import Registry
from ..errors import DataError, ModelError
from ..group.elements import Transforms
from .variables import Variable

__all__ = ["Task", "TASKS", "register_task", "task_from_spec", "list_tasks", "split_item", "concat_outputs"]


def split_item(item: Any, index: int) -> tuple[Any, Any]:
    """A dataset item as ``(input, target)``; a DataError that says how to fix anything else."""
    if isinstance(item, dict):
        raise DataError(
            f"dataset item {index} is a dict (keys {sorted(map(str, item))}); orbitscope needs (input, target) "
            "pairs: wrap the dataset, e.g. a Dataset whose __getitem__ returns (item['image'], item['label'])"
        )
    if isinstance(item, (tuple, list)) and len(item) >= 2:
        return item[0], item[1]
    what = f"a {type(item).__name__}" + (f" of length {len(item)}" if isinstance(item, (tuple, list)) else "")
    raise DataError(f"dataset item {index} is {what}; orbitscope needs (input, target) pairs (for unlabelled data, "
                    "use a placeholder target and label-free metrics such as consensus)")


def concat_outputs(parts: Sequence[Any]) -> Any:
    """Concatenate per-call model outputs along rows: tensors, tuples/lists of tensors (per
    position), dicts of tensors (per key), lists of per-row objects (e.g. torchvision's
    ``list[dict]``), or objects whose class has a ``concat(parts)`` (e.g. padded Boxes)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, Tensor):
        return torch.cat(parts)
    if isinstance(first, dict):
        return {k: concat_outputs([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(concat_outputs([p[i] for p in parts]) for i in range(len(first)))
    if isinstance(first, list):
        return [row for p in parts for row in p]
    if callable(getattr(type(first), "concat", None)):  # e.g. padded Boxes
        return type(first).concat(parts)
    raise ModelError(f"cannot concatenate model outputs of type {type(first).__name__}; return tensors, tuples of "
                     "tensors, dicts of tensors or a list with one entry per input")


class Task:
    """Base class (see the module docstring). Subclasses set ``kind`` and the three data kinds,
    and implement ``variables``, ``score`` and ``spec``."""

    kind: str = ""
    #: the metric views and summaries show first (None: the first declared metric)
    primary: str | None = None
    input_kind: str = "image"
    target_kind: str = "label"
    output_kind: str = "scores"

    # -- declaration ---------------------------------------------------------------------------
    def variables(self, num_outputs: int = 0) -> list[Variable]:
        """The variables ``score`` returns, with their meaning."""
        raise NotImplementedError(f"{type(self).__name__} must implement variables()")

    def variable(self, name: str) -> Variable | None:
        """The declared variable called ``name`` (including consensus variables), or None."""
        for v in [*self.variables(0), *self.consensus_variables(), *self.consensus_measures(), *self.dataset_variables()]:
            if v.name == name:
                return v
        return None

    def consensus_metric_names(self) -> list[str]:
        """Names of the label-free variables derived from the consensus (scores and measures)."""
        return [v.name for v in [*self.consensus_variables(), *self.consensus_measures()] if v.kind != "state"]

    def spec(self) -> dict[str, Any]:
        """JSON-able description; part of every run's identity (``task_from_spec`` rebuilds it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement spec() (e.g. return {{'kind': self.kind}})")

    # -- data ----------------------------------------------------------------------------------
    def collate(self, items: Sequence[Any]) -> tuple[Any, Any]:
        """Dataset items -> ``(inputs, targets)``, each collated by its kind (``default_collate``
        for arrays; ragged targets such as boxes are padded with a validity mask)."""
        from ..kinds.base import get_kind

        pairs = [split_item(item, i) for i, item in enumerate(items)]
        return get_kind(self.input_kind).collate([p[0] for p in pairs]), self.collate_targets([p[1] for p in pairs])

    def collate_targets(self, targets: Sequence[Any]) -> Any:
        """Per-item targets -> one batch, by the target kind (boxes pad to a validity mask)."""
        from ..kinds.base import get_kind

        return get_kind(self.target_kind).collate(list(targets))

    def read_outputs(self, raw: Any) -> Any:
        """The model's return value -> the task's output form (default: a tensor; the first
        element of a tuple/list such as ``(logits, features)``; ``logits``/``out``/``scores`` of a
        dict; torchvision-style detections, a list of dicts with ``boxes``, as padded
        :class:`~orbitscope.kinds.Boxes` with scores)."""
        if isinstance(raw, Tensor):
            return raw
        if isinstance(raw, list) and raw and all(isinstance(d, dict) and "boxes" in d for d in raw):
            from ..kinds.boxes import read_detections  # torchvision-style detections

            return read_detections(raw)
        if isinstance(raw, (tuple, list)) and raw and isinstance(raw[0], Tensor):
            return raw[0]
        if isinstance(raw, dict):
            for key in ("logits", "out", "scores"):
                if isinstance(raw.get(key), Tensor):
                    return raw[key]
        raise ModelError(f"the model must return a tensor of scores for a {self.kind or 'this'} task, got "
                         f"{type(raw).__name__}")

    # -- scoring -------------------------------------------------------------------------------
    def score(self, outputs: Any, targets: Any, g: Transforms) -> dict[str, Tensor]:
        """Per-row variables (see the module docstring)."""
        raise NotImplementedError(f"{type(self).__name__} must implement score(outputs, targets, g)")

    def compute(self, states: Mapping[str, np.ndarray], orbit_axes: int) -> dict[str, np.ndarray]:
        """Dataset-level metrics from per-sample states: ``states[name]`` has shape
        ``(samples, *orbit shape, ...)``; returns arrays over the orbit shape. None by default."""
        return {}

    def compute_resampled(self, states: Mapping[str, np.ndarray], orbit_axes: int, counts: np.ndarray,
                          metric: str) -> np.ndarray:
        """One dataset-level ``metric`` on each bootstrap resample of the samples: ``counts``
        (B, samples) says how often each sample is drawn in resample b; returns (B, *orbit shape).

        By default one :meth:`compute` per resample, on the states with each sample repeated
        ``counts[b]`` times; a task may override it with a vectorised, weighted computation that
        gives the same values."""
        out = []
        for row in np.asarray(counts):
            idx = np.repeat(np.arange(row.size), row)
            out.append(np.asarray(self.compute({k: np.asarray(v)[idx] for k, v in states.items()}, orbit_axes)[metric]))
        return np.stack(out)

    def dataset_variables(self) -> list[Variable]:
        """Variables that ``compute`` returns (over orbit dims only)."""
        return []

    #: extra dims of recorded variables that are unordered sets (e.g. a row's detections, ranked
    #: by score): near-equal scores may swap their entries under float rounding, so the
    #: optimisation's first-batch check compares them as sets, not position by position
    unordered_dims: tuple[str, ...] = ()

    #: the stored variables ``compute`` reads (None: every variable except the stored input), so
    #: :func:`orbitscope.results.dataset_metrics` reads only those from a stored run
    compute_reads: tuple[str, ...] | None = None

    # -- consensus -----------------------------------------------------------------------------
    #: whether ``evaluate(..., consensus=True)`` is available for this task
    supports_consensus: bool = False

    def canonicalize(self, outputs: Any, g: Transforms, **context: Any) -> Any:
        """Outputs mapped back by each row's inverse element (``g⁻¹∘f(g·x)``), through the output
        kind's action. ``context`` is the targets' action context (``image_size``, and for a
        window over context ``view_size``: outputs then live in the view and map back to the
        context frame)."""
        if not self.output_kind:
            raise NotImplementedError(f"task {self.kind!r} has no output kind, so no consensus")
        from ..kinds.base import get_kind

        inverse = dict(context)
        if context.get("view_size") is not None:  # view -> context frame
            inverse["image_size"], inverse["view_size"] = context["view_size"], context.get("image_size")
        return get_kind(self.output_kind).act(outputs, g.inverse(), layout="paired", clip=False, **inverse)

    def consensus(self, canonical: Any, n_elements: int, n_samples: int, weights: np.ndarray) -> Any:
        """The canonical-frame pseudo-target per sample from ``canonical`` rows (element-major,
        ``n_elements × n_samples``), averaging element ``k`` with weight ``weights[k]`` (0 for
        repeated elements such as 360° after 0°). Default: the weighted mean of tensor outputs
        (e.g. flow: the mean field), then :meth:`consensus_target`."""
        if not isinstance(canonical, Tensor):
            raise NotImplementedError(f"task {self.kind!r} must define how to average {type(canonical).__name__} "
                                      "outputs (override consensus)")
        rows = canonical.double().reshape(n_elements, n_samples, *canonical.shape[1:])
        w = torch.as_tensor(weights, dtype=torch.float64, device=rows.device).reshape(-1, *[1] * (rows.ndim - 1))
        return self.consensus_target(((rows * w).sum(0) / w.sum()).to(canonical.dtype))

    def consensus_target(self, mean_output: Any) -> Any:
        """The averaged output as a target of the target kind (default: as it is, right when the
        output and target kinds agree, e.g. flow). Override it when they differ: class scores
        averaged into a pseudo-label need ``mean_output.argmax(-1)``."""
        return mean_output

    def consensus_variables(self) -> list[Variable]:
        """Variables scored against the consensus (label-free): by default every variable that
        needs labels, renamed ``consensus_<name>`` (see :meth:`consensus_name`)."""
        if not self.supports_consensus:
            return []
        return [v.renamed(self.consensus_name(v.name), needs_labels=False,
                          label=f"{v.label or v.name} vs consensus", description=f"{v.description} (against the consensus)")
                for v in self.variables(0) if v.needs_labels and v.kind != "state"]

    def consensus_name(self, name: str) -> str:
        return f"consensus_{name}"

    #: per-sample arrays :meth:`store_consensus` adds to a consensus run: name -> dims after
    #: ``sample`` (ragged: padded to the largest in the run, see the boxes kind)
    consensus_stored: dict[str, tuple[str, ...]] = {}

    def store_consensus(self, target: Any) -> dict[str, np.ndarray]:
        """Per-sample arrays recording the consensus pseudo-target (in the canonical frame), as
        declared by :attr:`consensus_stored`; none by default (a classifier's consensus is
        recomputed from its stored probabilities)."""
        return {}

    def consensus_measures(self) -> list[Variable]:
        """Further label-free variables an analysis derives from stored outputs (none by default)."""
        return []


#: Registered tasks: ``spec()["kind"]`` -> task class (with a ``from_spec`` classmethod or
#: keyword arguments matching the spec's other keys).
TASKS: Registry[type[Task]] = Registry("task kind")


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: register a task class under its ``kind``."""
    TASKS.register(cls.kind if isinstance(cls.kind, str) else cls.__name__.lower(), cls)
    return cls


def list_tasks() -> list[str]:
    """Names of the registered task kinds."""
    return TASKS.names()


def task_from_spec(spec: dict[str, Any]) -> Task:
    """Rebuild a task from :meth:`Task.spec`.

    Raises:
        SpecError: the spec names a task kind that is not registered in this process (import
            the module that defines it, with ``@register_task``, before loading its runs)."""
    from ..errors import SpecError

    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind is not None and kind not in TASKS:
        raise SpecError(f"unknown task kind {kind!r}; known: {', '.join(TASKS.names())}. A run of a task defined in "
                        "your own code needs that code imported (its @register_task) before the run is loaded")
    return TASKS.from_spec(spec)

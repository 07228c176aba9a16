"""The data-kind protocol and its registry: one mechanism for how group elements act on data.

A :class:`Kind` says, for one sort of data (images, labels, boxes, flow fields, point clouds, …),

* ``prepare(data, device)``: validate a collated batch and bring it to tensors on ``device``
  (raising :class:`~orbitscope.errors.DataError` with what to do);
* ``act(data, t, layout=…, **context)``: apply group elements ``t`` (a
  :class:`~orbitscope.group.Transforms`) in one of two layouts:

  - ``"orbit"`` (outer product): every sample × every element, element-major: ``(K, B, ...)``;
  - ``"paired"``: sample i gets element i (K == B): ``(B, ...)``;

* ``rows(acted)``: flatten an ``"orbit"`` result to rows ``K·B`` (row ``k·B + b`` is sample
  ``b`` under element ``k``), the layout in which tasks score;
* ``store(data)``: the arrays kept per sample in a run (``{}`` for none).

The engine applies the same element to a task's input *and* target through their kinds; tasks
map outputs back with the inverse element through the output's kind (for consensus).
``context`` carries what an action needs beyond the data, e.g. ``image_size`` (H, W) of the
frame the data live in and ``view_size`` (H, W) of the field of view for windows over context.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from .._registry import Registry
from ..errors import DataError, SpecError
from ..group.elements import Transforms

__all__ = ["Layout", "Kind", "KINDS", "register_kind", "get_kind", "act", "list_kinds", "check_layout", "orbit_rows",
           "as_float_tensor"]

#: How :meth:`Kind.act` pairs samples and elements: ``"orbit"`` (every sample under every element,
#: element-major ``(K, B, ...)``) or ``"paired"`` (sample i under element i, ``(B, ...)``).
Layout = Literal["orbit", "paired"]


def check_layout(t: Transforms, batch: int, layout: str) -> None:
    """Raise ValueError for an unknown layout or a paired batch of the wrong length."""
    if layout not in ("orbit", "paired"):
        raise ValueError(f"layout must be 'orbit' or 'paired', got {layout!r}")
    if layout == "paired" and len(t) != batch:
        raise ValueError(f"paired layout needs one element per sample: {len(t)} elements for {batch} samples")


def orbit_rows(x: Tensor) -> Tensor:
    """(K, B, ...) -> (K·B, ...), element-major."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


class Kind:
    """Base class of a data kind (see the module docstring). Subclasses set ``name``."""

    name: str = ""
    #: the batch layout, for messages, e.g. "(B, C, H, W)"
    shape_doc: str = ""
    #: per-sample arrays ``store`` returns: name -> extra dims after ``sample``
    stored: dict[str, tuple[str, ...]] = {}
    #: names in ``stored`` whose extra shape varies between batches (padded when read back)
    ragged: tuple[str, ...] = ()

    def collate(self, items: list[Any]) -> Any:
        """Per-item data -> one batch (default: torch's ``default_collate``; ragged kinds pad)."""
        from torch.utils.data._utils.collate import default_collate

        try:
            return default_collate(list(items))
        except (RuntimeError, TypeError) as exc:
            raise DataError(f"cannot batch the {self.name or 'data'} items ({exc}); they need one shape and type") from None

    def prepare(self, data: Any, device: torch.device) -> Any:
        """Validate a collated batch and move it to ``device`` (default: tensors as they are)."""
        return torch.as_tensor(data).to(device) if not isinstance(data, Tensor) else data.to(device)

    def act(self, data: Any, t: Transforms, *, layout: Layout = "orbit", **context: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def rows(self, acted: Any) -> Any:
        """An ``"orbit"``-layout result flattened to ``K·B`` rows."""
        return orbit_rows(acted)

    def store(self, data: Any) -> dict[str, np.ndarray]:
        """Arrays to keep per sample (first axis = sample); none by default."""
        return {}

    def batch_size(self, data: Any) -> int:
        """Number of samples in a prepared batch."""
        return int(len(data))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: The registered data kinds: name -> :class:`Kind` instance.
KINDS: Registry[Kind] = Registry("data kind")


def register_kind(kind: Kind, *, replace: bool = False) -> Kind:
    """Register a kind instance under ``kind.name``."""
    return KINDS.register(kind.name, kind, replace=replace)


def get_kind(name: str | Kind) -> Kind:
    """The kind registered as ``name`` (a :class:`Kind` passes through)."""
    if isinstance(name, Kind):
        return name
    if name not in KINDS:
        raise SpecError(f"unknown data kind {name!r}; known kinds: {', '.join(list_kinds())} (a new kind is a Kind "
                        "subclass registered with register_kind)")
    return KINDS.get(name)


def list_kinds() -> list[str]:
    """Data kinds that group elements act on."""
    return KINDS.names()


def act(kind: str | Kind, data: Any, t: Transforms, *, layout: Layout = "orbit", **context: Any) -> Any:
    """Apply elements ``t`` to ``data`` of the given kind (see each kind's module)."""
    return get_kind(kind).act(data, t, layout=layout, **context)


def as_float_tensor(data: Any, what: str, device: torch.device | None = None) -> Tensor:
    """A floating tensor from tensors/arrays (integers become float32), else a DataError."""
    try:
        x = torch.as_tensor(np.asarray(data) if not isinstance(data, Tensor) else data)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise DataError(f"{what} must be an array or tensor of numbers, got {type(data).__name__}: {exc}") from None
    if not x.is_floating_point():
        x = x.float()
    return x.to(device) if device is not None else x

"""Class labels: one integer per sample; group elements act trivially (equivariance = invariance)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from ..group.elements import Transforms
from .base import Kind, Layout, check_layout, register_kind

__all__ = ["LabelKind", "ScoresKind", "prepare_labels"]


def prepare_labels(y: Any, device: torch.device | str | None = None, n: int | None = None) -> Tensor:
    """Validate class labels: integers, shape (B,); returns int64 on ``device``.

    Raises:
        DataError: labels that are not one integer per sample (e.g. (B, 1) or one-hot (B, K)),
            not integral, or (with ``n``) not ``n`` of them.
    """
    try:
        t = torch.as_tensor(np.asarray(y) if not isinstance(y, Tensor) else y)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise DataError(f"labels must be integers, one per sample; got {type(y).__name__}: {exc}") from None
    if t.ndim != 1:
        hint = (" flatten them (labels.reshape(-1))" if t.ndim == 2 and t.shape[-1] == 1 else
                " give class indices (labels.argmax(-1) for one-hot rows)" if t.ndim == 2 else "")
        raise DataError(f"labels must be one integer class per sample, shape (B,); got shape {tuple(t.shape)}:{hint}")
    if t.is_floating_point():
        if not bool(torch.all(t == torch.round(t))):
            raise DataError("labels must be integer class indices; got non-integral floats")
    elif t.dtype == torch.bool or t.is_complex():
        raise DataError(f"labels must be integer class indices, got dtype {t.dtype}")
    if n is not None and len(t) != n:
        raise DataError(f"got {len(t)} labels for {n} inputs")
    return t.to(device=device, dtype=torch.int64)


class LabelKind(Kind):
    """Labels (B,) int64; ``act`` returns them unchanged (``"orbit"``: repeated per element).

    Stored per sample as ``label`` (int64)."""

    name = "label"
    shape_doc = "(B,)"
    stored = {"label": ()}

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        return prepare_labels(data, device)

    def act(self, data: Any, t: Transforms, *, layout: Layout = "orbit", **_: Any) -> Any:
        if not isinstance(data, Tensor):
            return data
        check_layout(t, len(data), layout)
        return data.unsqueeze(0).expand(len(t), *data.shape) if layout == "orbit" else data

    def store(self, data: Tensor) -> dict[str, np.ndarray]:
        return {"label": data.cpu().numpy().astype(np.int64).reshape(len(data))}


class ScoresKind(Kind):
    """Per-sample class scores or probabilities (B, K): invariant, like the labels they predict."""

    name = "scores"

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        return torch.as_tensor(data).to(device)

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", **_: Any) -> Tensor:
        check_layout(t, len(data), layout)
        return data.unsqueeze(0).expand(len(t), *data.shape) if layout == "orbit" else data


register_kind(LabelKind())
register_kind(ScoresKind())

"""Keypoints (B, N, 2) in image pixels and point clouds (B, N, 3).

Convention:
    Keypoints are (x, y) pixels in image coordinates (origin at the top-left corner, +y down);
    an element acts about the image centre: ``p -> L (p - c) + t + c``. For a window over
    context the points are given in context pixels and come out in view pixels:
    ``p -> L (p - c_context) + t + c_view``. Point clouds are right-handed (x, y, z);
    ``p -> L p + t``, planar elements rotating about z.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from ..group.elements import Transforms
from .base import Kind, Layout, as_float_tensor, check_layout, register_kind

__all__ = ["transform_keypoints", "transform_points", "KeypointsKind", "PointsKind", "apply_points"]


def _lin_shift(t: Transforms, like: Tensor, dim: int = 2) -> tuple[Tensor, Tensor | None]:
    """The elements' linear parts and shifts as tensors like ``like``; the shift is None when
    every element's is 0 (pure rotations, e.g. every 3-D sample): adding it would only cost a
    pass over the rows (``x + 0.0 == x``)."""
    lin, shift = t.embedded(dim)
    return (
        torch.as_tensor(lin, dtype=like.dtype, device=like.device),
        None if not np.any(shift) else torch.as_tensor(shift, dtype=like.dtype, device=like.device),
    )


def apply_points(p: Tensor, lin: Tensor, shift: Tensor | None, layout: Layout) -> Tensor:
    """p (B, N, d); lin (K, d, d); shift (K, d) or None (no shift) -> (K, B, N, d) for "orbit"
    or (B, N, d) for "paired"."""
    if layout == "orbit":
        moved = torch.einsum("kij,bnj->kbni", lin, p)
        return moved if shift is None else moved + shift[:, None, None, :]
    moved = torch.einsum("bij,bnj->bni", lin, p)
    return moved if shift is None else moved + shift[:, None, :]


def transform_keypoints(points: Tensor, t: Transforms, image_size: tuple[int, int], *, layout: Layout = "orbit",
                        view_size: tuple[int, int] | None = None) -> Tensor:
    """Keypoints (B, N, 2) as (x, y) pixels; ``image_size`` = (H, W) of their frame; with
    ``view_size`` (h, w), they come out in the coordinates of the central view (window over context)."""
    if points.ndim != 3 or points.shape[-1] != 2:
        raise ValueError(f"keypoints must have shape (B, N, 2), got {tuple(points.shape)}")
    check_layout(t, points.shape[0], layout)
    h, w = image_size
    oh, ow = image_size if view_size is None else view_size
    centre = torch.tensor([w / 2, h / 2], dtype=points.dtype, device=points.device)
    out_centre = centre if view_size is None else torch.tensor([ow / 2, oh / 2], dtype=points.dtype, device=points.device)
    lin, shift = _lin_shift(t, points)
    return apply_points(points - centre, lin, shift, layout) + out_centre


def transform_points(points: Tensor, t: Transforms, *, layout: Layout = "orbit") -> Tensor:
    """Point clouds (B, N, 3): p -> L p + t; planar elements rotate about the z axis."""
    if points.ndim != 3 or points.shape[-1] != 3:
        raise ValueError(f"point clouds must have shape (B, N, 3), got {tuple(points.shape)}")
    check_layout(t, points.shape[0], layout)
    lin, shift = _lin_shift(t, points, dim=3)
    return apply_points(points, lin, shift, layout)


class KeypointsKind(Kind):
    """Keypoints (B, N, 2) in pixels; context ``image_size`` (H, W) and optional ``view_size``."""

    name = "keypoints"
    shape_doc = "(B, N, 2)"

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        x = as_float_tensor(data, "keypoints", device)
        if x.ndim != 3 or x.shape[-1] != 2:
            raise DataError(f"keypoints must have shape (B, N, 2) as (x, y) pixels, got {tuple(x.shape)}")
        return x

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", image_size: tuple[int, int] | None = None,
            view_size: tuple[int, int] | None = None, **_: Any) -> Tensor:
        if image_size is None:
            raise ValueError("keypoints need image_size=(H, W) of the frame they live in")
        return transform_keypoints(data, t, image_size, layout=layout, view_size=view_size)


class PointsKind(Kind):
    """Point clouds (B, N, 3), float, right-handed."""

    name = "points"
    shape_doc = "(B, N, 3)"
    #: with ``store_inputs``: the untransformed clouds, float32 (not 8-bit like images)
    stored = {"input_points": ("point", "xyz")}

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        x = as_float_tensor(data, "point clouds", device)
        if x.ndim != 3 or x.shape[-1] != 3:
            raise DataError(f"point clouds must have shape (B, N, 3), got {tuple(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise DataError("point clouds contain NaN or infinite coordinates")
        return x

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", **_: Any) -> Tensor:
        return transform_points(data, t, layout=layout)

    def store(self, data: Tensor) -> dict[str, np.ndarray]:
        return {"input_points": data.detach().cpu().float().numpy()}


register_kind(KeypointsKind())
register_kind(PointsKind())

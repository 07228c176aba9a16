"""Dense flow fields (B, 2, H, W): (u, v) in pixels per frame, u along +x, v along +y (down).

Convention:
    An element ``p -> L p + t`` moves the field like an image (``F'(p) = L F(g⁻¹ p)``: the grid
    is resampled and every vector is turned by L); a time-reversed element also negates the field
    (the motion runs backwards). Photometric parts do not act. With NERO's D4 × time reversal
    (seeds.md §4) this reproduces its 16 transformed fields exactly (90° rotations and mirrors
    map pixel centres onto pixel centres and are applied by index gathering).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from ..group.elements import Transforms
from .base import Kind, Layout, as_float_tensor, register_kind
from .image import Interpolation, Padding, warp_images

__all__ = ["transform_flow", "FlowKind"]


def transform_flow(
    flow: Tensor,
    t: Transforms,
    *,
    layout: Layout = "orbit",
    interpolation: Interpolation = "bilinear",
    padding: Padding = "zeros",
) -> Tensor:
    """Flow fields (B, 2, H, W) with (u, v) in pixels per frame: warp the grid, rotate the vectors.

    ``F'(p) = L F(g⁻¹ p)``; time-reversed elements negate the field. Photometric parts do not act.
    """
    if flow.ndim != 4 or flow.shape[1] != 2:
        raise ValueError(f"flow must have shape (B, 2, H, W) with (u, v) channels, got {tuple(flow.shape)}")
    geo = Transforms.create(len(t), linear=t.linear, shift=t.shift)
    if layout == "paired":
        warped = _warp_rows(flow, geo, interpolation=interpolation, padding=padding)
    else:
        warped = warp_images(flow, geo, layout=layout, interpolation=interpolation, padding=padding, clip=False)
    lin = torch.as_tensor(t.linear * np.where(t.time_reversed, -1.0, 1.0)[:, None, None], dtype=flow.dtype, device=flow.device)
    if layout == "orbit":
        return torch.einsum("kij,kbjhw->kbihw", lin, warped)
    return torch.einsum("bij,bjhw->bihw", lin, warped)


def _warp_rows(flow: Tensor, geo: Transforms, *, interpolation: Interpolation, padding: Padding) -> Tensor:
    """Row ``r`` of ``flow`` warped by element ``r`` of ``geo`` (layout "paired"), one warp per
    run of consecutive rows under the same element (rows of an orbit evaluation are element-major:
    each element's rows form one run; a warp per row costs a pixel-index computation per row).
    Equal, value for value, to warping row by row: each output pixel reads the same source pixels
    with the same weights."""
    key = np.concatenate([np.asarray(geo.linear, np.float64).reshape(len(geo), -1), np.asarray(geo.shift, np.float64)], 1)
    starts = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]).any(axis=1)])
    if len(starts) == len(geo):  # every row its own element: the per-row warp
        return warp_images(flow, geo, layout="paired", interpolation=interpolation, padding=padding, clip=False)
    out = flow.new_empty(flow.shape)
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(geo)]):
        out[lo:hi] = warp_images(flow[lo:hi], geo[[lo]], layout="orbit", interpolation=interpolation,
                                 padding=padding, clip=False)[0]
    return out


class FlowKind(Kind):
    """Flow fields (B, 2, H, W) float; context options ``interpolation``, ``padding``."""

    name = "flow"
    #: the ground-truth field of every sample (canonical frame), for the views
    stored = {"target_flow": ("component", "flow_y", "flow_x")}
    shape_doc = "(B, 2, H, W)"

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        x = as_float_tensor(data, "flow fields", device)
        if x.ndim != 4 or x.shape[1] != 2:
            raise DataError(f"flow fields must have shape (B, 2, H, W) with (u, v) channels, got {tuple(x.shape)}"
                            + ("; move the (u, v) axis first: flow.permute(0, 3, 1, 2)" if x.ndim == 4 and x.shape[-1] == 2 else ""))
        return x

    @staticmethod
    def frame_size(data: Tensor) -> tuple[int, int]:
        return int(data.shape[-2]), int(data.shape[-1])

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", interpolation: Interpolation = "bilinear",
            padding: Padding = "zeros", **_: Any) -> Tensor:
        return transform_flow(data, t, layout=layout, interpolation=interpolation, padding=padding)

    def store(self, data: Tensor) -> dict[str, np.ndarray]:
        """The ground truth per sample, float32 (2, H, W) (NaN where unknown)."""
        return {"target_flow": data.detach().float().cpu().numpy()}


register_kind(FlowKind())

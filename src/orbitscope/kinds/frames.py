"""Frame sequences (B, T, C, H, W) in [0, 1], e.g. PIV image pairs (T = 2).

Every frame moves like an image (:func:`~orbitscope.kinds.image.warp_images`); a time-reversed
element also reverses the frame order (for a pair: swaps the two frames).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from ..group.elements import Transforms
from .base import Kind, Layout, register_kind
from .image import Interpolation, Padding, prepare_images, quantise_images, warp_images

__all__ = ["transform_frames", "FramesKind"]


def transform_frames(frames: Tensor, t: Transforms, *, layout: Layout = "orbit", **kwargs: object) -> Tensor:
    """Frame sequences (B, T, C, H, W): each frame like an image; time reversal reverses T."""
    if frames.ndim != 5:
        raise ValueError(f"frames must have shape (B, T, C, H, W), got {tuple(frames.shape)}")
    b, nt, c, h, w = frames.shape
    reverse_all = bool(t.time_reversed.all()) and bool(np.all(t.contrast == 1.0))
    if reverse_all:  # every element reverses time: reverse the B inputs, not the K·B warped ones
        frames = frames.flip(-4)  # (contrast acts about the mean over all frames: summed in the given order)
    warped = warp_images(frames.reshape(b, nt * c, h, w), t, layout=layout, **kwargs)  # type: ignore[arg-type]
    warped = warped.reshape(*warped.shape[:-3], nt, c, h, w)
    if reverse_all or not t.time_reversed.any():
        return warped
    rev = torch.as_tensor(t.time_reversed, device=frames.device)
    rev = rev.reshape(-1, *([1] * (warped.ndim - 1))) if layout == "orbit" else rev.reshape(-1, 1, 1, 1, 1)
    return torch.where(rev, warped.flip(-4), warped)


class FramesKind(Kind):
    """Frame sequences (B, T, C, H, W) in [0, 1] (uint8 is divided by 255); context options
    ``interpolation``, ``padding``. Stored (when small) as uint8 ``input`` (sample × frame ×
    channel × y × x)."""

    name = "frames"
    shape_doc = "(B, T, C, H, W)"
    stored = {"input": ("frame", "channel", "y", "x")}

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        x = torch.as_tensor(np.asarray(data) if not isinstance(data, Tensor) else data)
        if x.ndim == 4:
            raise DataError(f"frames must be (B, T, C, H, W); got 4 dims {tuple(x.shape)}: add a channel dim "
                            "(frames.unsqueeze(2)) for grey frames")
        if x.ndim != 5:
            raise DataError(f"frames must have shape (B, T, C, H, W), got {tuple(x.shape)}")
        b, nt, c, h, w = x.shape
        return prepare_images(x.reshape(b, nt * c, h, w), device, what="frames").reshape(b, nt, c, h, w)

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", interpolation: Interpolation = "bilinear",
            padding: Padding = "zeros", **_: Any) -> Tensor:
        return transform_frames(data, t, layout=layout, interpolation=interpolation, padding=padding)

    def store(self, data: Tensor) -> dict[str, np.ndarray]:
        return {"input": quantise_images(data)}

    @staticmethod
    def frame_size(data: Tensor) -> tuple[int, int]:
        return int(data.shape[-2]), int(data.shape[-1])


register_kind(FramesKind())

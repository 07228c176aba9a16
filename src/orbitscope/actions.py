"""Moved to :mod:`orbitscope.kinds` (one module per data kind); this name is kept so existing
imports keep working."""

from .kinds import (  # noqa: F401
    act,
    list_kinds,
    rotate_images,
    transform_boxes,
    transform_flow,
    transform_frames,
    transform_keypoints,
    transform_points,
    warp_images,
)

__all__ = ["warp_images", "rotate_images", "act", "list_kinds", "transform_boxes", "transform_keypoints",
           "transform_points", "transform_flow", "transform_frames"]

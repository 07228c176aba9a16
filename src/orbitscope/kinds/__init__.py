"""Data kinds and the one mechanism by which group elements act on them."""

from .actions import (
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

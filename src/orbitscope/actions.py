"""Moved to :mod:`orbitscope.kinds.actions`; this name is kept so existing imports keep working."""

from .kinds.actions import warp_images, rotate_images, act, list_kinds, transform_boxes, transform_keypoints, transform_points, transform_flow, transform_frames  # noqa: F401

__all__ = ['warp_images', 'rotate_images', 'act', 'list_kinds', 'transform_boxes', 'transform_keypoints', 'transform_points', 'transform_flow', 'transform_frames']

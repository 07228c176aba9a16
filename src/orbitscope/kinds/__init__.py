"""Data kinds and the one mechanism by which group elements act on them.

==========  ==========================  =======================================================
kind        data                        action of ``p -> L p + t``, gain, contrast, time reversal
==========  ==========================  =======================================================
image       (B, C, H, W) in [0, 1]      resample: out(p) = in(g⁻¹ p); then contrast, gain, clip
window      context (B, C, Hc, Wc)      act on the context, then cut the central view (h, w)
frames      (B, T, C, H, W)             like image on every frame; time reversal reverses T
label       (B,) int                    identity
scores      (B, K) class scores         identity
boxes       :class:`Boxes` (ragged)     transform the 4 corners, bounding box, clip, visibility
keypoints   (B, N, 2) xy pixels         p -> L (p - c) + t + c, with c the image centre
flow        (B, 2, H, W) (u, v)         warp the grid like an image, rotate vectors by L;
                                        time reversal negates
points      (B, N, 3)                   p -> L p + t (planar elements rotate about z)
==========  ==========================  =======================================================

Each kind is a :class:`Kind` in its own module, registered in :data:`KINDS`; a new kind is a new
module plus ``register_kind``. Image coordinates of pixel (row i, column j) are its centre
(j + 0.5, i + 0.5); the group's origin is the image centre (W / 2, H / 2).
"""

from .base import KINDS, Kind, Layout, act, as_float_tensor, check_layout, get_kind, list_kinds, orbit_rows, register_kind
from .boxes import (
    Boxes,
    BoxesKind,
    box_area,
    box_iou,
    clip_boxes,
    collate_boxes,
    fuse_boxes,
    read_detections,
    transform_boxes,
)
from .flow import FlowKind, transform_flow
from .frames import FramesKind, transform_frames
from .image import (
    ImageKind,
    WindowKind,
    prepare_images,
    quantise_images,
    rotate_images,
    warp_images,
    warp_window,
)
from .label import LabelKind, ScoresKind, prepare_labels
from .points import KeypointsKind, PointsKind, transform_keypoints, transform_points

__all__ = [
    "KINDS", "Kind", "Layout", "act", "as_float_tensor", "check_layout", "get_kind", "list_kinds", "orbit_rows",
    "register_kind", "Boxes", "BoxesKind", "box_area", "clip_boxes", "collate_boxes", "read_detections", "transform_boxes", "box_iou", "fuse_boxes", "FlowKind",
    "transform_flow", "FramesKind", "transform_frames", "ImageKind", "WindowKind", "prepare_images",
    "quantise_images", "rotate_images", "warp_images", "warp_window", "LabelKind", "ScoresKind", "prepare_labels",
    "KeypointsKind", "PointsKind", "transform_keypoints", "transform_points",
]

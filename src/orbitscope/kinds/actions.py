"""How group elements act on every kind of data, through one mechanism.

Each action takes a :class:`~orbitscope.group.orbits.Transforms` batch of K elements and the data, and
comes in two layouts:

* ``orbit`` (outer product): every sample × every element, output ``(K, B, ...)`` (element-major);
* ``paired``: sample i gets element i (K == B), output ``(B, ...)`` -- used for augmentation and
  random perturbations.

Kinds and their conventions (pixels, y down, origin at the image centre for the group):

============  ======================  =========================================================
kind          data                    action of ``p -> L p + t``, gain, contrast, time reversal
============  ======================  =========================================================
image         (B, C, H, W) in [0, 1]  resample: out(p) = in(g⁻¹ p); then contrast, gain, clip
frames        (B, T, C, H, W)         like image on every frame; time reversal reverses T
label         (B,) or anything        identity
boxes         (B, N, 4) xyxy pixels   transform the 4 corners, take their bounding box
keypoints     (B, N, 2) xy pixels     p -> L (p - c) + t + c, with c the image centre
flow          (B, 2, H, W) (u, v)     warp the grid like an image, rotate vectors by L;
                                      time reversal negates
points        (B, N, 3)               p -> L p + t (planar elements rotate about z)
============  ======================  =========================================================

Image coordinates of pixel (row i, column j) are its centre (j + 0.5, i + 0.5); the group's
origin is the image centre (W / 2, H / 2).
"""

from __future__ import annotations

from typing import Callable, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..group.elements import Transforms, _embed, rotation_matrix

__all__ = [
    "warp_images",
    "rotate_images",
    "act",
    "list_kinds",
    "transform_boxes",
    "transform_keypoints",
    "transform_points",
    "transform_flow",
    "transform_frames",
]

Interpolation = Literal["bilinear", "nearest", "bicubic"]
Padding = Literal["zeros", "border", "reflection"]
Layout = Literal["orbit", "paired"]

_INTERP = ("bilinear", "nearest", "bicubic")
_PADDING = ("zeros", "border", "reflection")


def _check_layout(t: Transforms, batch: int, layout: Layout) -> None:
    if layout not in ("orbit", "paired"):
        raise ValueError(f"layout must be 'orbit' or 'paired', got {layout!r}")
    if layout == "paired" and len(t) != batch:
        raise ValueError(f"paired layout needs one element per sample: {len(t)} elements for {batch} samples")


def _theta(t: Transforms, height: int, width: int) -> np.ndarray:
    """affine_grid matrices (K, 2, 3) in normalised coords (align_corners=False) for out(p) = in(g⁻¹p)."""
    lin, shift = t.linear, t.shift
    if t.dim != 2:
        raise ValueError("3-D rotations cannot act on images; use a planar orbit")
    m = np.linalg.inv(lin)
    c = -(m @ shift[..., None])[..., 0]
    theta = np.empty((len(t), 2, 3))
    theta[:, 0, 0] = m[:, 0, 0]
    theta[:, 0, 1] = m[:, 0, 1] * height / width
    theta[:, 0, 2] = 2.0 * c[:, 0] / width
    theta[:, 1, 0] = m[:, 1, 0] * width / height
    theta[:, 1, 1] = m[:, 1, 1]
    theta[:, 1, 2] = 2.0 * c[:, 1] / height
    return theta


def _exact_sources(t: Transforms, height: int, width: int) -> list[tuple[Tensor, Tensor] | None]:
    """Per element: integer source (rows, cols) when the warp maps pixel centres onto pixel
    centres (e.g. 90° rotations of square images, integer shifts), else None."""
    out: list[tuple[Tensor, Tensor] | None] = [None] * len(t)
    if t.dim != 2 or len(t) == 0:
        return out
    # vectorised pre-check: only signed permutation matrices (det ±1, integer entries) can be exact
    lin_all = np.asarray(t.linear)
    integer = np.isclose(np.abs(lin_all), np.round(np.abs(lin_all)), atol=1e-12).all(axis=(1, 2))
    unit = np.abs(np.abs(np.linalg.det(lin_all)) - 1) <= 1e-9
    candidates = np.flatnonzero(integer & unit)
    if len(candidates) == 0:
        return out
    ys, xs = np.meshgrid(np.arange(height) + 0.5 - height / 2, np.arange(width) + 0.5 - width / 2, indexing="ij")
    pts = np.stack([xs.ravel(), ys.ravel()])  # (2, H*W)
    for k in candidates:
        lin = t.linear[k]
        src = np.linalg.inv(np.round(lin)) @ (pts - t.shift[k][:, None])
        col = src[0] + width / 2 - 0.5
        row = src[1] + height / 2 - 0.5
        if np.allclose(col, np.round(col), atol=1e-9) and np.allclose(row, np.round(row), atol=1e-9):
            out[k] = (torch.from_numpy(np.round(row).astype(np.int64)), torch.from_numpy(np.round(col).astype(np.int64)))
    return out


def _gather_exact(x: Tensor, rows: Tensor, cols: Tensor, height: int, width: int, padding: str) -> Tensor | None:
    """x (..., H, W) resampled at integer sources; None if padding semantics would be needed."""
    inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    if not bool(inside.all()) and padding != "zeros":
        return None
    flat = x.reshape(*x.shape[:-2], height * width)
    idx = (rows.clamp(0, height - 1) * width + cols.clamp(0, width - 1)).to(x.device)
    res = flat[..., idx]
    if not bool(inside.all()):
        res = res * inside.to(device=x.device, dtype=x.dtype)
    return res.reshape(*x.shape[:-2], height, width)


def _photometric(x: Tensor, t: Transforms, layout: Layout, clip: bool) -> Tensor:
    """Apply contrast then gain. x is (K, B, C, H, W) for 'orbit' or (B, C, H, W) for 'paired'."""
    if bool(t.is_photometric_identity.all()):
        return x
    shape = (len(t), 1, 1, 1, 1) if layout == "orbit" else (len(t), 1, 1, 1)
    gain = torch.as_tensor(t.gain, dtype=x.dtype, device=x.device).reshape(shape)
    contrast = torch.as_tensor(t.contrast, dtype=x.dtype, device=x.device).reshape(shape)
    if not np.allclose(t.contrast, 1.0):
        mean = x.mean(dim=(-3, -2, -1), keepdim=True)
        x = mean + contrast * (x - mean)
    x = x * gain
    return x.clamp(0.0, 1.0) if clip else x


def warp_images(
    images: Tensor,
    t: Transforms,
    *,
    layout: Layout = "orbit",
    interpolation: Interpolation = "bilinear",
    padding: Padding = "zeros",
    clip: bool = True,
) -> Tensor:
    """Act on images (B, C, H, W): spatial resampling, then contrast and gain, then clip to [0, 1].

    ``layout="orbit"`` returns (K, B, C, H, W) (one batched ``grid_sample`` over all elements,
    with the batch folded into channels); ``layout="paired"`` returns (B, C, H, W).
    Elements that map pixel centres onto pixel centres (90° rotations of square images, mirror
    flips, integer shifts with zero padding) are applied exactly by index gathering.
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor (B, C, H, W), got {type(images).__name__}")
    if images.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"images must be floating point in [0, 1], got dtype {images.dtype}")
    if interpolation not in _INTERP:
        raise ValueError(f"interpolation must be one of {_INTERP}, got {interpolation!r}")
    if padding not in _PADDING:
        raise ValueError(f"padding must be one of {_PADDING}, got {padding!r}")
    b, c, h, w = images.shape
    _check_layout(t, b, layout)
    k = len(t)
    geo = ~t.is_geometric_identity
    exact = _exact_sources(t, h, w) if geo.any() else [None] * k
    # index of elements that need interpolation
    general = [i for i in range(k) if geo[i] and exact[i] is None]
    if layout == "orbit":
        out = images.unsqueeze(0).expand(k, b, c, h, w).clone() if not general else images.new_empty((k, b, c, h, w))
    else:
        out = images.clone()
    for i in range(k):
        if geo[i] and exact[i] is not None:
            src = images if layout == "orbit" else images[i]
            g = _gather_exact(src, *exact[i], h, w, padding)  # type: ignore[misc]
            if g is None:
                general.append(i)
            else:
                out[i] = g
        elif not geo[i] and layout == "orbit" and general:
            out[i] = images
    general.sort()
    if general:
        theta = torch.as_tensor(_theta(t[general], h, w), dtype=images.dtype, device=images.device)
        grid = F.affine_grid(theta, [len(general), 1, h, w], align_corners=False)
        if layout == "orbit":
            folded = images.reshape(1, b * c, h, w).expand(len(general), b * c, h, w)
            warped = F.grid_sample(folded, grid, mode=interpolation, padding_mode=padding, align_corners=False)
            out[general] = warped.reshape(len(general), b, c, h, w)
        else:
            out[general] = F.grid_sample(images[general], grid, mode=interpolation, padding_mode=padding, align_corners=False)
    if interpolation == "bicubic" and clip:
        out = out.clamp(0.0, 1.0)
    return _photometric(out, t, layout, clip)


def rotate_images(
    images: Tensor,
    angles_deg: Tensor | np.ndarray,
    *,
    interpolation: Interpolation = "bilinear",
    padding: Padding = "zeros",
) -> Tensor:
    """Rotate each image (B, C, H, W) by its own angle (B,) in degrees, CCW as displayed."""
    angles = np.asarray(angles_deg.detach().cpu() if isinstance(angles_deg, Tensor) else angles_deg, np.float64).ravel()
    t = Transforms.create(len(angles), linear=rotation_matrix(angles))
    return warp_images(images, t, layout="paired", interpolation=interpolation, padding=padding)


# ---------------------------------------------------------------------------------------------
# Geometric data
# ---------------------------------------------------------------------------------------------


def _lin_shift(t: Transforms, like: Tensor, dim: int = 2) -> tuple[Tensor, Tensor]:
    lin, shift = _embed(t.linear, t.shift, dim)
    return (
        torch.as_tensor(lin, dtype=like.dtype, device=like.device),
        torch.as_tensor(shift, dtype=like.dtype, device=like.device),
    )


def _apply_points(p: Tensor, lin: Tensor, shift: Tensor, layout: Layout) -> Tensor:
    """p (B, N, d); lin (K, d, d); shift (K, d) -> (K, B, N, d) or (B, N, d)."""
    if layout == "orbit":
        return torch.einsum("kij,bnj->kbni", lin, p) + shift[:, None, None, :]
    return torch.einsum("bij,bnj->bni", lin, p) + shift[:, None, :]


def transform_keypoints(points: Tensor, t: Transforms, image_size: tuple[int, int], *, layout: Layout = "orbit") -> Tensor:
    """Keypoints (B, N, 2) as (x, y) pixels in image coordinates; image_size = (H, W)."""
    if points.ndim != 3 or points.shape[-1] != 2:
        raise ValueError(f"keypoints must have shape (B, N, 2), got {tuple(points.shape)}")
    _check_layout(t, points.shape[0], layout)
    h, w = image_size
    centre = torch.tensor([w / 2, h / 2], dtype=points.dtype, device=points.device)
    lin, shift = _lin_shift(t, points)
    return _apply_points(points - centre, lin, shift, layout) + centre


def transform_boxes(boxes: Tensor, t: Transforms, image_size: tuple[int, int], *, layout: Layout = "orbit") -> Tensor:
    """Boxes (B, N, 4) xyxy in pixels -> axis-aligned bounding boxes of the transformed corners."""
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must have shape (B, N, 4) as xyxy pixels, got {tuple(boxes.shape)}")
    x0, y0, x1, y1 = boxes.unbind(-1)
    corners = torch.stack([torch.stack(c, -1) for c in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))], -2)  # B,N,4,2
    bsz, n = boxes.shape[:2]
    moved = transform_keypoints(corners.reshape(bsz, n * 4, 2), t, image_size, layout=layout)
    moved = moved.reshape(*moved.shape[:-2], n, 4, 2)
    lo, hi = moved.amin(-2), moved.amax(-2)
    return torch.cat([lo, hi], -1)


def transform_points(points: Tensor, t: Transforms, *, layout: Layout = "orbit") -> Tensor:
    """Point clouds (B, N, 3): p -> L p + t; planar elements rotate about the z axis."""
    if points.ndim != 3 or points.shape[-1] != 3:
        raise ValueError(f"point clouds must have shape (B, N, 3), got {tuple(points.shape)}")
    _check_layout(t, points.shape[0], layout)
    lin, shift = _lin_shift(t, points, dim=3)
    return _apply_points(points, lin, shift, layout)


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
    warped = warp_images(flow, geo, layout=layout, interpolation=interpolation, padding=padding, clip=False)
    lin = torch.as_tensor(t.linear * np.where(t.time_reversed, -1.0, 1.0)[:, None, None], dtype=flow.dtype, device=flow.device)
    if layout == "orbit":
        return torch.einsum("kij,kbjhw->kbihw", lin, warped)
    return torch.einsum("bij,bjhw->bihw", lin, warped)


def transform_frames(frames: Tensor, t: Transforms, *, layout: Layout = "orbit", **kwargs: object) -> Tensor:
    """Frame sequences (B, T, C, H, W): each frame like an image; time reversal reverses T."""
    if frames.ndim != 5:
        raise ValueError(f"frames must have shape (B, T, C, H, W), got {tuple(frames.shape)}")
    b, nt, c, h, w = frames.shape
    warped = warp_images(frames.reshape(b, nt * c, h, w), t, layout=layout, **kwargs)  # type: ignore[arg-type]
    warped = warped.reshape(*warped.shape[:-3], nt, c, h, w)
    if not t.time_reversed.any():
        return warped
    rev = torch.as_tensor(t.time_reversed, device=frames.device)
    rev = rev.reshape(-1, *([1] * (warped.ndim - 1))) if layout == "orbit" else rev.reshape(-1, 1, 1, 1, 1)
    return torch.where(rev, warped.flip(-4), warped)


def _act_label(labels: object, t: Transforms, *, layout: Layout = "orbit", **_: object) -> object:
    return labels


_KINDS: dict[str, Callable[..., object]] = {
    "image": warp_images,
    "frames": transform_frames,
    "label": _act_label,
    "boxes": transform_boxes,
    "keypoints": transform_keypoints,
    "flow": transform_flow,
    "points": transform_points,
}


def list_kinds() -> list[str]:
    """Data kinds that group elements act on."""
    return sorted(_KINDS)


def act(kind: str, data: object, t: Transforms, *, layout: Layout = "orbit", **kwargs: object) -> object:
    """Apply elements ``t`` to ``data`` of the given kind (see the module table)."""
    try:
        fn = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown data kind {kind!r}; known kinds: {', '.join(list_kinds())}") from None
    return fn(data, t, layout=layout, **kwargs)

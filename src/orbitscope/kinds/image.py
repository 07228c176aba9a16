"""Images (B, C, H, W) in [0, 1], and windows over a larger context image.

Convention:
    Pixel (row i, column j) has its centre at (x, y) = (j + 0.5, i + 0.5) and covers
    [j, j + 1] × [i, i + 1] (x along columns, y along rows, in pixels); the group's origin is the
    image centre (W / 2, H / 2), +x right, +y down, so "counter-clockwise" means as displayed.
    The kinds that act on pixel grids (frames, flow, windows) follow it. An element
    ``p -> L p + t`` resamples an image as ``out(p) = in(g⁻¹ p)`` (so content moves by +t and
    turns counter-clockwise as displayed for positive angles), then applies contrast (about each
    image's mean) and gain, then clips to [0, 1].

A **window over context** (kind ``"window"``) is the field of view of size ``view_size`` at the
centre of a larger context image: the element acts on the context, and the view is cut from the
transformed context, so a shift brings real content into view instead of padding (NERO's
detection orbit: the object appears displaced by +t over its real surroundings).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import DataError
from ..group.elements import Transforms, rotation_matrix
from .base import Kind, Layout, check_layout, register_kind

__all__ = ["Interpolation", "Padding", "warp_images", "warp_window", "rotate_images", "prepare_images",
           "quantise_images", "check_image_tensor", "ImageKind", "WindowKind"]

Interpolation = Literal["bilinear", "nearest", "bicubic"]
Padding = Literal["zeros", "border", "reflection"]

_INTERP = ("bilinear", "nearest", "bicubic")
_PADDING = ("zeros", "border", "reflection")


def _theta(t: Transforms, height: int, width: int, in_size: tuple[int, int] | None = None) -> np.ndarray:
    """affine_grid matrices (K, 2, 3) in normalised coords (align_corners=False) for out(p) = in(g⁻¹p).

    The output is (height, width); ``in_size`` (H_in, W_in) is the source's size when it differs
    (a window over context, both centred on the same point)."""
    lin, shift = t.linear, t.shift
    if t.dim != 2:
        raise ValueError("3-D rotations cannot act on images; use a planar orbit")
    m = np.linalg.inv(lin)
    c = -(m @ shift[..., None])[..., 0]
    theta = np.empty((len(t), 2, 3))
    if in_size is None or tuple(in_size) == (height, width):
        theta[:, 0, 0] = m[:, 0, 0]
        theta[:, 0, 1] = m[:, 0, 1] * height / width
        theta[:, 0, 2] = 2.0 * c[:, 0] / width
        theta[:, 1, 0] = m[:, 1, 0] * width / height
        theta[:, 1, 1] = m[:, 1, 1]
        theta[:, 1, 2] = 2.0 * c[:, 1] / height
        return theta
    hin, win = in_size  # theta = S_in⁻¹ · g⁻¹ · S_out with S = diag(W/2, H/2)
    theta[:, 0, 0] = m[:, 0, 0] * width / win
    theta[:, 0, 1] = m[:, 0, 1] * height / win
    theta[:, 0, 2] = 2.0 * c[:, 0] / win
    theta[:, 1, 0] = m[:, 1, 0] * width / hin
    theta[:, 1, 1] = m[:, 1, 1] * height / hin
    theta[:, 1, 2] = 2.0 * c[:, 1] / hin
    return theta


def _integer_offsets(t: Transforms, height: int, width: int,
                     in_size: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elements that only translate by whole pixels, as crops: (which (K,) bool, top row (K,),
    left column (K,)) of the (height, width) output's source rectangle in the input.

    With out(p) = in(p − t) and both frames centred on the same point, output pixel (i, j) reads
    input pixel (i + r0, j + c0) with r0 = (H_in − height) / 2 − t_y and c0 = (W_in − width) / 2
    − t_x; an element qualifies when its linear part is the identity and r0, c0 are integers."""
    k = len(t)
    if t.dim != 2 or k == 0:
        return np.zeros(k, dtype=bool), np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    hin, win = (height, width) if in_size is None else in_size
    shift = np.asarray(t.shift, dtype=np.float64)
    r0 = (hin - height) / 2 - shift[:, 1]
    c0 = (win - width) / 2 - shift[:, 0]
    ok = (np.asarray(t.linear) == np.eye(2)).all(axis=(1, 2))
    ok &= (np.abs(r0 - np.round(r0)) <= 1e-9) & (np.abs(c0 - np.round(c0)) <= 1e-9)
    return ok, np.round(r0).astype(np.int64), np.round(c0).astype(np.int64)


def _crop_exact(x: Tensor, r0: int, c0: int, out_size: tuple[int, int], padding: str) -> Tensor | None:
    """x (..., H, W) cut at rows r0 .. r0 + h, columns c0 .. c0 + w (a whole-pixel translation),
    zero outside x; None when part of the crop is outside and padding is not zeros. Equal, bit for
    bit, to :func:`_gather_exact` at the same integer sources."""
    height, width = x.shape[-2:]
    oh, ow = out_size
    if 0 <= r0 and r0 + oh <= height and 0 <= c0 and c0 + ow <= width:
        return x[..., r0:r0 + oh, c0:c0 + ow]
    if padding != "zeros":
        return None
    out = x.new_zeros((*x.shape[:-2], oh, ow))
    i0, i1 = max(0, -r0), min(oh, height - r0)
    j0, j1 = max(0, -c0), min(ow, width - c0)
    if i0 < i1 and j0 < j1:
        out[..., i0:i1, j0:j1] = x[..., r0 + i0:r0 + i1, c0 + j0:c0 + j1]
    return out


def _crops_inside(x: Tensor, r0: np.ndarray, c0: np.ndarray, out_size: tuple[int, int]) -> Tensor:
    """All crops of x (B, C, H, W) at (r0[k], c0[k]) (each inside x) as one (K, B, C, h, w) tensor
    (one stack of views: a single copy of the pixels, no index arithmetic per pixel)."""
    oh, ow = out_size
    return torch.stack([x[..., r:r + oh, c:c + ow] for r, c in zip(r0.tolist(), c0.tolist())])


def _exact_sources(
    t: Transforms, height: int, width: int, in_size: tuple[int, int] | None = None,
    skip: np.ndarray | None = None,
) -> list[tuple[Tensor, Tensor] | None]:
    """Per element: integer source (rows, cols) when the warp maps the output's pixel centres onto
    the source's pixel centres (e.g. 90° rotations of square images, integer shifts), else None
    (also for the elements marked in ``skip``)."""
    out: list[tuple[Tensor, Tensor] | None] = [None] * len(t)
    if t.dim != 2 or len(t) == 0:
        return out
    hin, win = (height, width) if in_size is None else in_size
    # vectorised pre-check: only signed permutation matrices (det ±1, integer entries) can be exact
    lin_all = np.asarray(t.linear)
    integer = np.isclose(np.abs(lin_all), np.round(np.abs(lin_all)), atol=1e-12).all(axis=(1, 2))
    unit = np.abs(np.abs(np.linalg.det(lin_all)) - 1) <= 1e-9
    candidates = np.flatnonzero(integer & unit & (True if skip is None else ~skip))
    if len(candidates) == 0:
        return out
    ys, xs = np.meshgrid(np.arange(height) + 0.5 - height / 2, np.arange(width) + 0.5 - width / 2, indexing="ij")
    pts = np.stack([xs.ravel(), ys.ravel()])  # (2, H*W)
    for k in candidates:
        lin = t.linear[k]
        src = np.linalg.inv(np.round(lin)) @ (pts - t.shift[k][:, None])
        col = src[0] + win / 2 - 0.5
        row = src[1] + hin / 2 - 0.5
        if np.allclose(col, np.round(col), atol=1e-9) and np.allclose(row, np.round(row), atol=1e-9):
            out[k] = (torch.from_numpy(np.round(row).astype(np.int64)), torch.from_numpy(np.round(col).astype(np.int64)))
    return out


def _gather_exact(x: Tensor, rows: Tensor, cols: Tensor, height: int, width: int, padding: str,
                  out_size: tuple[int, int] | None = None) -> Tensor | None:
    """x (..., H, W) resampled at integer sources; None if padding semantics would be needed."""
    inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    if not bool(inside.all()) and padding != "zeros":
        return None
    flat = x.reshape(*x.shape[:-2], height * width)
    idx = (rows.clamp(0, height - 1) * width + cols.clamp(0, width - 1)).to(x.device)
    res = flat[..., idx]
    if not bool(inside.all()):
        res = res * inside.to(device=x.device, dtype=x.dtype)
    oh, ow = (height, width) if out_size is None else out_size
    return res.reshape(*x.shape[:-2], oh, ow)


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


def check_image_tensor(images: Any, what: str = "images") -> None:
    """The one check of an image batch handed to an action or sampler: a floating-point tensor
    (B, C, H, W). TypeError for a non-tensor or non-float dtype, DataError (a ValueError) for the
    shape; values in [0, 1] are :func:`prepare_images`' business."""
    if not isinstance(images, Tensor):
        raise TypeError(f"{what} must be a torch.Tensor (B, C, H, W), got {type(images).__name__}")
    if images.ndim != 4:
        raise DataError(f"{what} must have shape (B, C, H, W), got {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"{what} must be floating point with values in [0, 1], got dtype {images.dtype}")


def _check_image_args(images: Any, interpolation: str, padding: str) -> None:
    check_image_tensor(images)
    if interpolation not in _INTERP:
        raise ValueError(f"interpolation must be one of {_INTERP}, got {interpolation!r}")
    if padding not in _PADDING:
        raise ValueError(f"padding must be one of {_PADDING}, got {padding!r}")


def _resample(images: Tensor, t: Transforms, layout: Layout, interpolation: str, padding: str,
              out_size: tuple[int, int] | None) -> Tensor:
    """The spatial part of the action; output (K, B, C, h, w) or (B, C, h, w), (h, w) = out_size."""
    b, c, h, w = images.shape
    oh, ow = (h, w) if out_size is None else out_size
    in_size = None if out_size is None else (h, w)
    window = out_size is not None and tuple(out_size) != (h, w)
    k = len(t)
    geo = ~t.is_geometric_identity if not window else np.ones(k, dtype=bool)
    # whole-pixel translations (NERO's window shifts): crops, not gathers
    shifted, r0, c0 = _integer_offsets(t, oh, ow, in_size) if geo.any() else (np.zeros(k, dtype=bool), None, None)
    shifted &= geo
    exact = _exact_sources(t, oh, ow, in_size, skip=shifted) if geo.any() else [None] * k
    general = [i for i in range(k) if geo[i] and not shifted[i] and exact[i] is None]
    if layout == "orbit":
        inside = shifted & (r0 >= 0) & (r0 + oh <= h) & (c0 >= 0) & (c0 + ow <= w) if shifted.any() else shifted
        if not general and not window:
            out = images.unsqueeze(0).expand(k, b, c, h, w).clone()
        elif shifted.any() and inside.all():  # every element a crop inside the input (a window over context)
            return _crops_inside(images, r0, c0, (oh, ow))
        else:
            out = images.new_empty((k, b, c, oh, ow))
    else:
        out = images.clone() if not window else images.new_empty((b, c, oh, ow))
    for i in range(k):
        if shifted[i]:
            crop = _crop_exact(images if layout == "orbit" else images[i], int(r0[i]), int(c0[i]), (oh, ow), padding)
            if crop is None:
                general.append(i)
            else:
                out[i] = crop
        elif geo[i] and exact[i] is not None:
            src = images if layout == "orbit" else images[i]
            g = _gather_exact(src, *exact[i], h, w, padding, (oh, ow))  # type: ignore[misc]
            if g is None:
                general.append(i)
            else:
                out[i] = g
        elif not geo[i] and layout == "orbit" and general:
            out[i] = images
    general.sort()
    if general:
        theta = torch.as_tensor(_theta(t[general], oh, ow, in_size), dtype=images.dtype, device=images.device)
        grid = F.affine_grid(theta, [len(general), 1, oh, ow], align_corners=False)
        if layout == "orbit":
            folded = images.reshape(1, b * c, h, w).expand(len(general), b * c, h, w)
            warped = F.grid_sample(folded, grid, mode=interpolation, padding_mode=padding, align_corners=False)
            out[general] = warped.reshape(len(general), b, c, oh, ow)
        else:
            out[general] = F.grid_sample(images[general], grid, mode=interpolation, padding_mode=padding, align_corners=False)
    return out


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
    _check_image_args(images, interpolation, padding)
    check_layout(t, images.shape[0], layout)
    out = _resample(images, t, layout, interpolation, padding, None)
    if interpolation == "bicubic" and clip:
        out = out.clamp(0.0, 1.0)
    return _photometric(out, t, layout, clip)


def warp_window(
    context: Tensor,
    t: Transforms,
    view_size: tuple[int, int],
    *,
    layout: Layout = "orbit",
    interpolation: Interpolation = "bilinear",
    padding: Padding = "zeros",
    clip: bool = True,
) -> Tensor:
    """Act on a context image (B, C, Hc, Wc) and cut the central field of view (h, w) = ``view_size``.

    Equals ``warp_images(context, t)`` cropped to its central h × w pixels (the view's centre is
    the context's centre; ``Hc - h`` and ``Wc - w`` must be even so pixel grids align), computed
    at the view's size only. Integer shifts are exact, so the view shows real context.
    """
    _check_image_args(context, interpolation, padding)
    check_layout(t, context.shape[0], layout)
    h, w = (int(view_size[0]), int(view_size[1]))
    hc, wc = context.shape[-2:]
    if h < 1 or w < 1 or h > hc or w > wc:
        raise ValueError(f"view_size {view_size} must be positive and fit in the context's {(hc, wc)}")
    if (hc - h) % 2 or (wc - w) % 2:
        raise ValueError(f"the context {(hc, wc)} and view {(h, w)} must differ by an even number of pixels "
                         "per side, so the view's pixel grid aligns with the context's")
    out = _resample(context, t, layout, interpolation, padding, (h, w))
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


def prepare_images(x: Any, device: torch.device | str | None = None, what: str = "inputs") -> Tensor:
    """Validate a batch of images and return float32 (B, C, H, W) in [0, 1] on ``device``.

    uint8 images are divided by 255; float images must already lie in [0, 1] (normalise inside
    the model call with ``normalize=(mean, std)``, not before).

    Raises:
        DataError: wrong rank, dtype, or value range (the message says how to fix it).
    """
    try:
        x = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise DataError(f"{what} must be image tensors (B, C, H, W), got {type(x).__name__}: {exc}") from None
    if x.ndim == 3:
        raise DataError(f"{what} must be (B, C, H, W); got (B, H, W) = {tuple(x.shape)}: add a channel dim")
    if x.ndim != 4:
        raise DataError(f"{what} must be images (B, C, H, W), got shape {tuple(x.shape)}")
    if x.dtype == torch.uint8:  # moved as uint8 (a quarter of the bytes), converted where it lands
        x = x.to(device=device, non_blocking=x.is_pinned()).float() / 255.0
    elif not x.is_floating_point():
        raise DataError(f"images must be float in [0, 1] or uint8, got {x.dtype}")
    x = x.to(device=device, dtype=torch.float32, non_blocking=x.is_pinned())
    if x.numel():
        lo, hi = float(x.min()), float(x.max())
        if lo < -1e-6 or hi > 1 + 1e-6:
            raise DataError(
                f"images must be in [0, 1] before model normalisation (found values in [{lo:.3g}, {hi:.3g}]); "
                "pass un-normalised images and give the model's normalisation as normalize=(mean, std)"
            )
    return x


def quantise_images(x: Tensor) -> np.ndarray:
    """Images in [0, 1] -> uint8 (round(255 x)); lossless for 8-bit source images."""
    return torch.round(x * 255).clamp(0, 255).to(torch.uint8).cpu().numpy()


class ImageKind(Kind):
    """Images (B, C, H, W) in [0, 1]; context options ``interpolation``, ``padding``.

    Stored per sample (when small) as uint8 ``input`` (sample × channel × y × x)."""

    name = "image"
    shape_doc = "(B, C, H, W)"
    stored = {"input": ("channel", "y", "x")}

    def prepare(self, data: Any, device: torch.device) -> Tensor:
        return prepare_images(data, device)

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", interpolation: Interpolation = "bilinear",
            padding: Padding = "zeros", **_: Any) -> Tensor:
        return warp_images(data, t, layout=layout, interpolation=interpolation, padding=padding)

    def store(self, data: Tensor) -> dict[str, np.ndarray]:
        return {"input": quantise_images(data)}

    @staticmethod
    def frame_size(data: Tensor) -> tuple[int, int]:
        """(H, W) of the frame the images live in (for boxes, keypoints)."""
        return int(data.shape[-2]), int(data.shape[-1])


class WindowKind(ImageKind):
    """A field of view ``view_size`` (h, w) at the centre of a larger context image (B, C, Hc, Wc).

    The element acts on the context and the view is cut from it (:func:`warp_window`); the task's
    input is the view. Targets given in context pixels (boxes, keypoints) move into view
    coordinates through their own kinds with ``image_size=(Hc, Wc)`` and ``view_size=(h, w)``.
    """

    name = "window"

    def __init__(self, view_size: tuple[int, int] | None = None) -> None:
        self.view_size = None if view_size is None else (int(view_size[0]), int(view_size[1]))

    def act(self, data: Tensor, t: Transforms, *, layout: Layout = "orbit", interpolation: Interpolation = "bilinear",
            padding: Padding = "zeros", view_size: tuple[int, int] | None = None, **_: Any) -> Tensor:
        size = view_size or self.view_size
        if size is None:
            raise ValueError("a window over context needs view_size=(h, w)")
        return warp_window(data, t, size, layout=layout, interpolation=interpolation, padding=padding)

    # stored inputs (``store_inputs``) are the untransformed context images, as ImageKind stores

    def __repr__(self) -> str:
        return f"WindowKind(view_size={self.view_size})"


register_kind(ImageKind())
register_kind(WindowKind())

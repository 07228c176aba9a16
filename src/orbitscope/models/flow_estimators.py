"""Classical dense flow estimators (optical flow, PIV) as models for the Flow task.

* :class:`Farneback`: OpenCV's ``calcOpticalFlowFarneback`` (Farnebäck 2003, polynomial
  expansion), by default with the parameters of NERO's PIV case study;
* :class:`DIS`: OpenCV's Dense Inverse Search (Kroeger et al. 2016), one of its presets;
* :class:`HornSchunck`: our own batched Horn–Schunck (1981) in torch, coarse to fine with warping;
* :class:`OpenPIV`: OpenPIV's windowed cross-correlation (``extended_search_area_piv``) with its
  signal-to-noise validation and outlier replacement, interpolated to a dense field.

Each maps image pairs (B, 2, C, H, W) in [0, 1], C = 1 (grey) or 3 (RGB), to flow fields
(B, 2, H, W) float32 on the input's device: (u, v) in pixels per frame, u along +x (right),
v along +y (down), such that frame 1 at p + (u, v) shows what frame 0 shows at p.

Grey levels: RGB frames become ITU-R BT.601 luma Y = 0.299 R + 0.587 G + 0.114 B (computed in
float32 on values clamped to [0, 1]); grey frames are used as they are. The OpenCV and OpenPIV
estimators take 8-bit frames: round(255 · Y) with NumPy's rounding (half to even), as uint8
(:func:`grey_uint8_pairs`). Horn–Schunck works on the unquantised float luma.

OpenCV estimators need ``opencv-python-headless``; :class:`OpenPIV` needs PyPI ``openpiv``
(``pip install openpiv==0.26.1``). Both are imported only when such a model is built.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import DataError, SpecError

__all__ = ["Farneback", "DIS", "HornSchunck", "OpenPIV", "DIS_PRESETS", "grey_uint8_pairs", "grey_pairs"]

#: DIS presets by name -> OpenCV constant name
DIS_PRESETS = {"ultrafast": "DISOPTICAL_FLOW_PRESET_ULTRAFAST", "fast": "DISOPTICAL_FLOW_PRESET_FAST",
               "medium": "DISOPTICAL_FLOW_PRESET_MEDIUM"}


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - installed by make test
        raise SpecError("OpenCV flow estimators need opencv-python-headless: "
                        "pip install 'opencv-python-headless<5'") from exc
    return cv2


def _openpiv() -> Any:
    try:
        import openpiv
        import openpiv.filters
        import openpiv.pyprocess
        import openpiv.validation
    except ImportError as exc:
        raise SpecError("the OpenPIV estimator needs PyPI openpiv: pip install openpiv==0.26.1") from exc
    return openpiv


def _check_pairs(x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DataError(f"flow estimators take a tensor of image pairs (B, 2, C, H, W), got {type(x).__name__}")
    if x.ndim != 5 or x.shape[1] != 2 or x.shape[2] not in (1, 3):
        hint = ""
        if x.ndim == 4 and x.shape[1] == 2:
            hint = "; for grey pairs add a channel dim: frames.unsqueeze(2)"
        elif x.ndim == 5 and x.shape[1] != 2:
            hint = f"; {x.shape[1]} frames per sample: these estimators take exactly 2 (a pair)"
        raise DataError("flow estimators take image pairs (B, 2, C, H, W) in [0, 1] with C = 1 (grey) or 3 (RGB), "
                        f"got shape {tuple(x.shape)}{hint}")
    if x.shape[-2] < 2 or x.shape[-1] < 2:
        raise DataError(f"frames must be at least 2 × 2 pixels, got {tuple(x.shape[-2:])}")
    return x


def grey_pairs(x: Tensor) -> Tensor:
    """Image pairs (B, 2, C, H, W) -> grey float32 pairs (B, 2, H, W) in [0, 1], on x's device
    (ITU-R BT.601 luma for RGB, of values clamped to [0, 1]; uint8 pairs are divided by 255)."""
    x = _check_pairs(x).detach()
    x = (x.float() / 255.0 if x.dtype == torch.uint8 else x.float()).clamp(0, 1)  # uint8 frames: 0..255
    if x.shape[2] == 1:
        return x[:, :, 0]
    return 0.299 * x[:, :, 0] + 0.587 * x[:, :, 1] + 0.114 * x[:, :, 2]


def grey_uint8_pairs(x: Tensor) -> np.ndarray:
    """Image pairs (B, 2, C, H, W) -> grey uint8 frames (B, 2, H, W): round(255 · luma), half to
    even (the exact arrays the OpenCV and OpenPIV estimators pass to their libraries)."""
    g = grey_pairs(x).cpu().numpy()
    return np.ascontiguousarray(np.round(g * 255).astype(np.uint8))


def _as_flow(fields: list[np.ndarray], like: Tensor) -> Tensor:
    """B arrays (H, W, 2) (OpenCV's layout: [..., 0] = dx, [..., 1] = dy) -> (B, 2, H, W)."""
    out = torch.from_numpy(np.ascontiguousarray(np.stack(fields).transpose(0, 3, 1, 2), dtype=np.float32))
    return out.to(like.device)


class Farneback(nn.Module):
    """OpenCV's Farnebäck optical flow (G. Farnebäck, "Two-frame motion estimation based on
    polynomial expansion", SCIA 2003) on grey uint8 frames.

    The defaults are NERO's PIV baseline (pyr_scale 0.5, levels 3, winsize 15, iterations 3,
    poly_n 5, poly_sigma 1.2, flags 0); each argument is ``calcOpticalFlowFarneback``'s own.
    """

    def __init__(self, *, pyr_scale: float = 0.5, levels: int = 3, winsize: int = 15, iterations: int = 3,
                 poly_n: int = 5, poly_sigma: float = 1.2, flags: int = 0) -> None:
        super().__init__()
        _cv2()
        if not 0 < pyr_scale < 1:
            raise SpecError(f"pyr_scale must lie in (0, 1), got {pyr_scale}")
        if levels < 1 or winsize < 1 or iterations < 1 or poly_n < 1 or poly_sigma <= 0:
            raise SpecError("levels, winsize, iterations and poly_n must be ≥ 1 and poly_sigma > 0")
        self.pyr_scale, self.levels, self.winsize = float(pyr_scale), int(levels), int(winsize)
        self.iterations, self.poly_n, self.poly_sigma, self.flags = int(iterations), int(poly_n), float(poly_sigma), int(flags)

    def extra_repr(self) -> str:  # part of the run identity (the module has no weights)
        return (f"opencv={_cv2().__version__}, pyr_scale={self.pyr_scale}, levels={self.levels}, "
                f"winsize={self.winsize}, iterations={self.iterations}, poly_n={self.poly_n}, "
                f"poly_sigma={self.poly_sigma}, flags={self.flags}")

    def forward(self, x: Tensor) -> Tensor:
        cv2 = _cv2()
        frames = grey_uint8_pairs(x)
        fields = [cv2.calcOpticalFlowFarneback(a, b, None, self.pyr_scale, self.levels, self.winsize,
                                               self.iterations, self.poly_n, self.poly_sigma, self.flags)
                  for a, b in frames]
        return _as_flow(fields, x)


class DIS(nn.Module):
    """OpenCV's Dense Inverse Search optical flow (T. Kroeger, R. Timofte, D. Dai, L. Van Gool,
    "Fast optical flow using dense inverse search", ECCV 2016) on grey uint8 frames, with one of
    OpenCV's presets: ``"ultrafast"``, ``"fast"`` or ``"medium"`` (default). A fresh
    ``cv2.DISOpticalFlow`` is made per call (it keeps no state between pairs)."""

    def __init__(self, preset: str = "medium") -> None:
        super().__init__()
        _cv2()
        if preset not in DIS_PRESETS:
            raise SpecError(f"no DIS preset {preset!r}; OpenCV has {', '.join(DIS_PRESETS)}")
        self.preset = preset

    def extra_repr(self) -> str:
        return f"preset={self.preset}, opencv={_cv2().__version__}"

    def forward(self, x: Tensor) -> Tensor:
        cv2 = _cv2()
        frames = grey_uint8_pairs(x)
        dis = cv2.DISOpticalFlow_create(getattr(cv2, DIS_PRESETS[self.preset]))
        return _as_flow([dis.calc(a, b, None) for a, b in frames], x)


# ----------------------------------------------------------------------------------------------
# Horn–Schunck
# ----------------------------------------------------------------------------------------------


def _neighbour_average(f: Tensor) -> Tensor:
    """Horn & Schunck's local average ū (their eq. for the Laplacian estimate): 1/6 of each
    edge neighbour plus 1/12 of each corner neighbour, replicated at the borders (no flow
    across the frame edge). Written as shifted sums (deterministic on every device)."""
    p = F.pad(f[:, None], (1, 1, 1, 1), mode="replicate")[:, 0]
    edge = p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:]
    corner = p[:, :-2, :-2] + p[:, :-2, 2:] + p[:, 2:, :-2] + p[:, 2:, 2:]
    return edge / 6 + corner / 12


def _cube_derivatives(e0: Tensor, e1: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Horn & Schunck's estimates of E_x, E_y, E_t (1981, section 7): each the mean of the four
    first differences along its axis in the 2 × 2 × 2 cube of pixels (i, j, k) … (i+1, j+1, k+1).
    They belong to the cube centres: a (B, H − 1, W − 1) grid offset by half a pixel."""
    ex = (e0[:, :-1, 1:] - e0[:, :-1, :-1] + e0[:, 1:, 1:] - e0[:, 1:, :-1]
          + e1[:, :-1, 1:] - e1[:, :-1, :-1] + e1[:, 1:, 1:] - e1[:, 1:, :-1]) / 4
    ey = (e0[:, 1:, :-1] - e0[:, :-1, :-1] + e0[:, 1:, 1:] - e0[:, :-1, 1:]
          + e1[:, 1:, :-1] - e1[:, :-1, :-1] + e1[:, 1:, 1:] - e1[:, :-1, 1:]) / 4
    et = (e1[:, :-1, :-1] - e0[:, :-1, :-1] + e1[:, :-1, 1:] - e0[:, :-1, 1:]
          + e1[:, 1:, :-1] - e0[:, 1:, :-1] + e1[:, 1:, 1:] - e0[:, 1:, 1:]) / 4
    return ex, ey, et


def _central_derivatives(e0: Tensor, e1: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Alternative: spatial central differences (f(p+1) − f(p−1)) / 2 of the frames' mean
    (replicated borders), temporal difference e1 − e0; on the pixel grid itself."""
    m = F.pad(((e0 + e1) / 2)[:, None], (1, 1, 1, 1), mode="replicate")[:, 0]
    return (m[:, 1:-1, 2:] - m[:, 1:-1, :-2]) / 2, (m[:, 2:, 1:-1] - m[:, :-2, 1:-1]) / 2, e1 - e0


def _pixels_to_cubes(f: Tensor) -> Tensor:
    """(B, H, W) on pixel centres -> (B, H − 1, W − 1) on cube centres (mean of the 4 corners)."""
    return (f[:, :-1, :-1] + f[:, :-1, 1:] + f[:, 1:, :-1] + f[:, 1:, 1:]) / 4


def _cubes_to_pixels(f: Tensor) -> Tensor:
    """(B, H − 1, W − 1) on cube centres -> (B, H, W) on pixel centres: bilinear (the mean of the
    4 surrounding cube centres), the nearest cube values extended at the borders."""
    return _pixels_to_cubes(F.pad(f[:, None], (1, 1, 1, 1), mode="replicate")[:, 0])


def _warp(img: Tensor, u: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Backward warp (B, H, W): img(x + u, y + v), bilinear, border values outside; and whether
    the sampled point lies inside the frame."""
    b, h, w = img.shape
    ys = torch.arange(h, device=img.device, dtype=img.dtype)[:, None]
    xs = torch.arange(w, device=img.device, dtype=img.dtype)[None, :]
    px, py = xs + u, ys + v
    grid = torch.stack([2 * px / (w - 1) - 1, 2 * py / (h - 1) - 1], dim=-1)
    out = F.grid_sample(img[:, None], grid, mode="bilinear", padding_mode="border", align_corners=True)[:, 0]
    inside = (px >= 0) & (px <= w - 1) & (py >= 0) & (py <= h - 1)
    return out, inside


def _resize(img: Tensor, size: tuple[int, int]) -> Tensor:
    return F.interpolate(img[:, None], size=size, mode="bilinear", align_corners=False, antialias=True)[:, 0]


class HornSchunck(nn.Module):
    """Horn–Schunck optical flow (B. K. P. Horn, B. G. Schunck, "Determining optical flow",
    Artificial Intelligence 17, 1981), vectorised over the batch in torch, on the input's device.

    Minimises Σ (E_x u + E_y v + E_t)² + α² (|∇u|² + |∇v|²) by the paper's iteration
    ``u ← ū − E_x (E_x ū + E_y v̄ + E_t) / (α² + E_x² + E_y²)`` (and likewise v), ū the weighted
    neighbourhood average (1/6 edge, 1/12 corner neighbours; replicated borders), from zero flow.

    Args:
        alpha: the smoothness weight α, in intensity units of **[0, 1]** grey levels (α = 0.05
            here is α ≈ 12.75 for 0–255 frames).
        iterations: iterations per pyramid level (and per warp).
        levels: pyramid levels; 1 is the paper's single-scale method (good to about a pixel of
            motion). With more, coarse to fine with warping: each level halves the frame
            (rounding up; bilinear with antialiasing), stopping before a side drops under 8 px.
            From the coarsest level, the flow found so far, w₀, is upsampled to the next level
            (bilinear, vectors scaled by the size ratio), the second frame is warped back by it
            (bilinear, ``E₁(p + w₀(p))``), and the iteration runs on the linearised data term
            E_x (u − u₀) + E_y (v − v₀) + E_t (E_t from the warped frame) with the smoothness on
            the whole flow, starting from w₀ (the "classic" warping scheme, e.g. D. Sun, S. Roth,
            M. J. Black, CVPR 2010). Pixels warped from outside the frame get no data term.
        warps: warping passes per level (each re-warps with the current flow), when levels > 1
            or warps > 1.
        derivatives: ``"cube"`` (default): the paper's 2 × 2 × 2 cube averages, which estimate
            the derivatives (and the flow) at the cube centres, half a pixel off the pixel
            grid; the flow is iterated there and moved to the pixel centres bilinearly at the
            end of each pass (the nearest cube value at the borders). ``"central"``: central
            spatial differences of the two frames' mean and E₁ − E₀, on the pixel grid.

    Deterministic: only shifted sums, bilinear resampling and ``grid_sample`` (no atomics), so
    a batch gives the same fields as its samples one by one.
    """

    def __init__(self, *, alpha: float = 0.05, iterations: int = 100, levels: int = 4, warps: int = 1,
                 derivatives: str = "cube") -> None:
        super().__init__()
        if not alpha > 0 or not math.isfinite(alpha):
            raise SpecError(f"alpha must be a positive number, got {alpha}")
        if iterations < 1 or levels < 1 or warps < 1:
            raise SpecError("iterations, levels and warps must be ≥ 1")
        if derivatives not in ("cube", "central"):
            raise SpecError(f"derivatives must be 'cube' or 'central', got {derivatives!r}")
        self.alpha, self.iterations, self.levels = float(alpha), int(iterations), int(levels)
        self.warps, self.derivatives = int(warps), derivatives

    def extra_repr(self) -> str:
        return (f"alpha={self.alpha} (grey in [0, 1]), iterations={self.iterations}, levels={self.levels}, "
                f"warps={self.warps}, derivatives={self.derivatives}")

    def _pyramid(self, g: Tensor) -> list[Tensor]:
        pyr = [g]
        while len(pyr) < self.levels:
            h, w = pyr[-1].shape[-2:]
            nh, nw = -(-h // 2), -(-w // 2)
            if min(nh, nw) < 8:
                break
            pyr.append(_resize(pyr[-1], (nh, nw)))
        return pyr[::-1]

    def _pass(self, e0: Tensor, e1: Tensor, u0: Tensor, v0: Tensor) -> tuple[Tensor, Tensor]:
        e1w, inside = _warp(e1, u0, v0)
        if self.derivatives == "cube":
            ex, ey, et = _cube_derivatives(e0, e1w)
            inside = _pixels_to_cubes(inside.to(e0.dtype)) == 1
            u0, v0 = _pixels_to_cubes(u0), _pixels_to_cubes(v0)
        else:
            ex, ey, et = _central_derivatives(e0, e1w)
        zero = torch.zeros((), dtype=ex.dtype, device=ex.device)
        ex, ey, et = (torch.where(inside, d, zero) for d in (ex, ey, et))
        rhs = et - ex * u0 - ey * v0  # linearised about (u0, v0): E_x u + E_y v + rhs = 0
        denom = self.alpha ** 2 + ex * ex + ey * ey
        u, v = u0, v0
        for _ in range(self.iterations):
            ub, vb = _neighbour_average(u), _neighbour_average(v)
            r = (ex * ub + ey * vb + rhs) / denom
            u, v = ub - ex * r, vb - ey * r
        if self.derivatives == "cube":
            u, v = _cubes_to_pixels(u), _cubes_to_pixels(v)
        return u, v

    def forward(self, x: Tensor) -> Tensor:
        g = grey_pairs(x)
        pyr0, pyr1 = self._pyramid(g[:, 0]), self._pyramid(g[:, 1])
        b = g.shape[0]
        u = v = None
        for e0, e1 in zip(pyr0, pyr1):
            h, w = e0.shape[-2:]
            if u is None or v is None:
                u = v = torch.zeros(b, h, w, dtype=g.dtype, device=g.device)
            else:
                ph, pw = u.shape[-2:]
                u = _resize(u, (h, w)) * (w / pw)
                v = _resize(v, (h, w)) * (h / ph)
            for _ in range(self.warps):
                u, v = self._pass(e0, e1, u, v)
        assert u is not None and v is not None
        return torch.stack([u, v], dim=1).contiguous()


# ----------------------------------------------------------------------------------------------
# OpenPIV
# ----------------------------------------------------------------------------------------------


def _interp_matrix(points: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """(len(points), len(nodes)) weights of 1-D linear interpolation, constant (nearest node)
    beyond the end nodes."""
    eye = np.eye(len(nodes))
    return np.stack([np.interp(points, nodes, eye[k]) for k in range(len(nodes))], axis=1)


class OpenPIV(nn.Module):
    """OpenPIV's PIV (windowed FFT cross-correlation, ``openpiv.pyprocess.extended_search_area_piv``),
    validated and repaired with OpenPIV's own post-processing, then made dense.

    Steps per pair (grey uint8 frames, passed to OpenPIV as int32 like its tutorial):

    1. ``extended_search_area_piv(a, b, window_size, overlap, dt=1, search_area_size,
       sig2noise_method=sig2noise_method)``: one vector per search window; windows start at
       pixel 0 and step by ``search_area_size − overlap``;
    2. ``validation.sig2noise_val(s2n, sig2noise_threshold)`` (plus non-finite vectors) flags
       outliers, ``filters.replace_outliers(..., method=outlier_method, max_iter, kernel_size)``
       replaces them; a vector still missing after that takes the value of the nearest valid
       one (zero everywhere if no vector is valid, e.g. a blank pair: no motion found);
    3. the vector grid, placed at the window centres (pixel index coordinates, pixel (0, 0) at
       (0, 0): start + (search_area_size − 1) / 2; OpenPIV's ``get_coordinates(...,
       center_on_field=False)`` gives them in pixel-edge coordinates, half a pixel more), is
       interpolated bilinearly to every pixel; beyond the outermost centres each axis keeps
       the nearest centre's value (nearest extrapolation).

    Signs: ``pyprocess`` reports u along +x and v along +y (rows, down), ours (checked in the
    tests); only OpenPIV's ``tools.transform_coordinates`` turns v upwards, and it is not used.

    Defaults: 32 px interrogation windows searched in 40 px areas every 8 px (``overlap`` 32,
    OpenPIV's overlap of the search areas), peak-to-peak signal to noise with threshold 1.2 and
    local-mean replacement (10 iterations, kernel size 2) as in OpenPIV's tutorial. Frames must
    be at least ``search_area_size`` pixels a side.
    """

    def __init__(self, *, window_size: int = 32, overlap: int = 32, search_area_size: int = 40,
                 sig2noise_method: str = "peak2peak", sig2noise_threshold: float = 1.2,
                 outlier_method: str = "localmean", outlier_max_iter: int = 10, outlier_kernel_size: int = 2) -> None:
        super().__init__()
        _openpiv()
        if window_size < 4 or search_area_size < window_size or not 0 <= overlap < search_area_size:
            raise SpecError("need window_size ≥ 4, search_area_size ≥ window_size and 0 ≤ overlap < search_area_size, "
                            f"got {window_size}, {search_area_size}, {overlap}")
        if sig2noise_method not in ("peak2peak", "peak2mean"):
            raise SpecError(f"sig2noise_method must be 'peak2peak' or 'peak2mean', got {sig2noise_method!r}")
        if outlier_method not in ("localmean", "disk", "distance"):
            raise SpecError(f"outlier_method must be 'localmean', 'disk' or 'distance', got {outlier_method!r}")
        self.window_size, self.overlap, self.search_area_size = int(window_size), int(overlap), int(search_area_size)
        self.sig2noise_method, self.sig2noise_threshold = sig2noise_method, float(sig2noise_threshold)
        self.outlier_method, self.outlier_max_iter = outlier_method, int(outlier_max_iter)
        self.outlier_kernel_size = int(outlier_kernel_size)

    def extra_repr(self) -> str:
        return (f"openpiv={_openpiv().__version__}, window_size={self.window_size}, overlap={self.overlap}, "
                f"search_area_size={self.search_area_size}, sig2noise_method={self.sig2noise_method}, "
                f"sig2noise_threshold={self.sig2noise_threshold}, outlier_method={self.outlier_method}, "
                f"outlier_max_iter={self.outlier_max_iter}, outlier_kernel_size={self.outlier_kernel_size}")

    def centres(self, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Window centres (x of the columns, y of the rows) in pixel index coordinates for
        frames of ``size`` (H, W)."""
        pp = _openpiv().pyprocess
        x, y = pp.get_coordinates(tuple(size), self.search_area_size, self.overlap, center_on_field=False)
        return x[0] - 0.5, y[:, 0] - 0.5

    def _grid(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        op = _openpiv()
        u, v, s2n = op.pyprocess.extended_search_area_piv(
            a.astype(np.int32), b.astype(np.int32), window_size=self.window_size, overlap=self.overlap, dt=1.0,
            search_area_size=self.search_area_size, sig2noise_method=self.sig2noise_method)
        flags = op.validation.sig2noise_val(s2n, threshold=self.sig2noise_threshold)
        flags = flags | ~np.isfinite(u) | ~np.isfinite(v)
        u, v = op.filters.replace_outliers(u, v, flags, method=self.outlier_method, max_iter=self.outlier_max_iter,
                                           kernel_size=self.outlier_kernel_size)
        u, v = np.ma.getdata(u).astype(np.float64), np.ma.getdata(v).astype(np.float64)
        bad = ~(np.isfinite(u) & np.isfinite(v))
        if bad.all():  # a featureless pair: no vector at all; report no motion rather than abort the run
            return np.zeros_like(u), np.zeros_like(v)
        if bad.any():
            from scipy.ndimage import distance_transform_edt

            iy, ix = distance_transform_edt(bad, return_distances=False, return_indices=True)
            u, v = u[iy, ix], v[iy, ix]
        return u, v

    def vectors(self, x: Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
        """The validated, repaired vector grids (u, v), each (rows, cols), per pair, before
        interpolation (at :meth:`centres`)."""
        frames = grey_uint8_pairs(x)
        h, w = frames.shape[-2:]
        if min(h, w) < self.search_area_size:
            raise DataError(f"OpenPIV with search_area_size {self.search_area_size} needs frames at least that "
                            f"large, got {h} × {w}")
        return [self._grid(a, b) for a, b in frames]

    def forward(self, x: Tensor) -> Tensor:
        grids = self.vectors(x)  # validates x
        h, w = int(x.shape[-2]), int(x.shape[-1])
        cx, cy = self.centres((h, w))
        mx, my = _interp_matrix(np.arange(w, dtype=np.float64), cx), _interp_matrix(np.arange(h, dtype=np.float64), cy)
        dense = np.stack([np.stack([my @ u @ mx.T, my @ v @ mx.T]) for u, v in grids]).astype(np.float32)
        return torch.from_numpy(dense).to(x.device)

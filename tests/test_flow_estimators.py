"""Classical flow estimators as models: the OpenCV and OpenPIV wrappers give exactly what the
libraries give on the same uint8 frames; every estimator recovers a known uniform shift of a
smooth random texture with our sign convention (u > 0: content moves right, v > 0: content moves
down); Horn–Schunck is batch-independent and deterministic; grey and RGB pairs both work; inputs
that are not pairs are refused clearly.

Measured interior EPE (px, 16 px margin, 96 × 96 texture of Gaussian-filtered noise, σ = 2 px,
shifted by (2, −1) px; 2 CPU cores, torch 2.14 / OpenCV 4.x / openpiv 0.26.1): Farnebäck 0.0004,
DIS medium 0.012, fast 0.13, ultrafast 0.15, OpenPIV 0.08, Horn–Schunck (defaults, cube
derivatives) 0.016, (central derivatives) 0.04, single-scale Horn–Schunck 0.32 (it cannot follow
2 px). The tolerances below are about 2–5 times those.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import ndimage

import orbitscope as osc
from orbitscope.errors import DataError, SpecError

cv2 = pytest.importorskip("cv2")

from orbitscope.models.flow_estimators import (  # noqa: E402
    DIS,
    Farneback,
    HornSchunck,
    OpenPIV,
    grey_pairs,
    grey_uint8_pairs,
)

try:
    import openpiv.pyprocess  # noqa: F401

    HAVE_OPENPIV = True
except ImportError:  # pragma: no cover - openpiv is optional
    HAVE_OPENPIV = False
needs_openpiv = pytest.mark.skipif(not HAVE_OPENPIV, reason="PyPI openpiv not installed")

SIZE, MARGIN = 96, 16


def texture(size: int = SIZE, pad: int = 20, sigma: float = 2.0, seed: int = 0) -> np.ndarray:
    """Smooth random texture in [0.1, 0.9], (size + 2 pad) a side."""
    rng = np.random.default_rng(seed)
    t = ndimage.gaussian_filter(rng.standard_normal((size + 2 * pad, size + 2 * pad)), sigma)
    return 0.1 + 0.8 * (t - t.min()) / (t.max() - t.min())


def shifted_pair(dx: int, dy: int, *, size: int = SIZE, pad: int = 20, seed: int = 0) -> np.ndarray:
    """Grey uint8 frames (2, size, size): frame 1 is frame 0 with its content moved by (dx, dy)
    pixels (dx > 0 right, dy > 0 down): frame1[y, x] = frame0[y − dy, x − dx] (exact crops of
    one texture, so no wrap-around seam)."""
    t = np.round(texture(size, pad, seed=seed) * 255).astype(np.uint8)
    a = t[pad:pad + size, pad:pad + size]
    b = t[pad - dy:pad - dy + size, pad - dx:pad - dx + size]
    assert np.array_equal(b[max(dy, 0):size + min(dy, 0), max(dx, 0):size + min(dx, 0)],
                          a[max(-dy, 0):size + min(-dy, 0), max(-dx, 0):size + min(-dx, 0)])
    return np.stack([a, b])


def as_pairs(frames: np.ndarray, rgb: bool = False) -> torch.Tensor:
    """uint8 (B, 2, H, W) or (2, H, W) -> float pairs (B, 2, C, H, W) in [0, 1]."""
    x = torch.from_numpy(frames.reshape(-1, 2, *frames.shape[-2:])).float()[:, :, None] / 255
    return x.expand(-1, -1, 3, -1, -1).contiguous() if rgb else x


def interior_epe(flow: torch.Tensor, dx: float, dy: float) -> float:
    f = flow[:, :, MARGIN:-MARGIN, MARGIN:-MARGIN].double()
    return float(torch.hypot(f[:, 0] - dx, f[:, 1] - dy).mean())


ESTIMATORS = {
    "farneback": (Farneback, 0.01),
    "dis-medium": (lambda: DIS("medium"), 0.05),
    "dis-fast": (lambda: DIS("fast"), 0.3),
    "dis-ultrafast": (lambda: DIS("ultrafast"), 0.3),
    "horn-schunck": (HornSchunck, 0.05),
    "horn-schunck-central": (lambda: HornSchunck(derivatives="central"), 0.1),
    "openpiv": (OpenPIV, 0.2),
}


def build(name: str):
    if name == "openpiv" and not HAVE_OPENPIV:
        pytest.skip("PyPI openpiv not installed")
    return ESTIMATORS[name][0]()


# --- the wrappers are the libraries' own calls ---------------------------------------------------


def test_uint8_frames_are_the_inputs_own():
    frames = shifted_pair(2, -1)
    assert np.array_equal(grey_uint8_pairs(as_pairs(frames))[0], frames)
    assert np.array_equal(grey_uint8_pairs(as_pairs(frames, rgb=True))[0], frames)  # R = G = B: luma = grey
    rgb = torch.rand(2, 2, 3, 5, 7, generator=torch.Generator().manual_seed(1))
    luma = 0.299 * rgb[:, :, 0] + 0.587 * rgb[:, :, 1] + 0.114 * rgb[:, :, 2]
    assert torch.allclose(grey_pairs(rgb), luma)
    assert np.array_equal(grey_uint8_pairs(rgb), np.round(luma.numpy() * 255).astype(np.uint8))


def test_farneback_is_opencvs_own_with_neros_parameters():
    frames = shifted_pair(2, -1)
    model = Farneback()
    ref = cv2.calcOpticalFlowFarneback(frames[0], frames[1], None, 0.5, 3, 15, 3, 5, 1.2, 0)
    out = model(as_pairs(frames))
    assert out.shape == (1, 2, SIZE, SIZE) and out.dtype == torch.float32
    assert torch.equal(out[0], torch.from_numpy(ref).permute(2, 0, 1))
    r = repr(model)
    assert "pyr_scale=0.5, levels=3, winsize=15, iterations=3, poly_n=5, poly_sigma=1.2, flags=0" in r
    assert f"opencv={cv2.__version__}" in r
    other = Farneback(winsize=21, levels=2)
    ref2 = cv2.calcOpticalFlowFarneback(frames[0], frames[1], None, 0.5, 2, 21, 3, 5, 1.2, 0)
    assert torch.equal(other(as_pairs(frames))[0], torch.from_numpy(ref2).permute(2, 0, 1))
    with pytest.raises(SpecError, match="pyr_scale"):
        Farneback(pyr_scale=1.5)


@pytest.mark.parametrize("preset", ["ultrafast", "fast", "medium"])
def test_dis_is_opencvs_own(preset):
    frames = np.stack([shifted_pair(2, -1), shifted_pair(-1, 1, seed=3)])  # a batch of two pairs
    out = DIS(preset)(as_pairs(frames))
    for i in range(2):
        dis = cv2.DISOpticalFlow_create(getattr(cv2, f"DISOPTICAL_FLOW_PRESET_{preset.upper()}"))
        ref = dis.calc(frames[i, 0], frames[i, 1], None)
        assert torch.equal(out[i], torch.from_numpy(ref).permute(2, 0, 1))
    assert f"preset={preset}" in repr(DIS(preset))


def test_dis_default_and_bad_preset():
    assert DIS().preset == "medium"
    with pytest.raises(SpecError, match="no DIS preset"):
        DIS("slow")


@needs_openpiv
def test_openpiv_is_openpivs_own_and_interpolated_bilinearly():
    from openpiv import filters, pyprocess, validation
    from scipy.interpolate import RegularGridInterpolator

    frames = shifted_pair(2, -1)
    model = OpenPIV()
    a, b = frames[0].astype(np.int32), frames[1].astype(np.int32)
    u, v, s2n = pyprocess.extended_search_area_piv(a, b, window_size=32, overlap=32, dt=1.0, search_area_size=40,
                                                   sig2noise_method="peak2peak")
    flags = validation.sig2noise_val(s2n, threshold=1.2) | ~np.isfinite(u) | ~np.isfinite(v)
    u, v = filters.replace_outliers(u, v, flags, method="localmean", max_iter=10, kernel_size=2)
    (gu, gv), = model.vectors(as_pairs(frames))
    assert np.array_equal(gu, np.ma.getdata(u)) and np.array_equal(gv, np.ma.getdata(v))
    # pyprocess's own v already points down: content moved up by 1 px gives v ≈ −1
    assert abs(float(np.mean(gu)) - 2) < 0.1 and abs(float(np.mean(gv)) + 1) < 0.1

    cx, cy = model.centres((SIZE, SIZE))
    x0, y0 = pyprocess.get_coordinates((SIZE, SIZE), 40, 32, center_on_field=False)
    assert np.array_equal(cx, x0[0] - 0.5) and np.array_equal(cy, y0[:, 0] - 0.5)
    assert cx[0] == (40 - 1) / 2 and np.all(np.diff(cx) == 8) and gu.shape == (len(cy), len(cx))

    dense = model(as_pairs(frames))[0].double().numpy()
    ys, xs = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing="ij")
    pts = np.stack([np.clip(ys, cy[0], cy[-1]), np.clip(xs, cx[0], cx[-1])], -1)  # nearest beyond the centres
    for comp, grid in ((0, gu), (1, gv)):
        ref = RegularGridInterpolator((cy, cx), grid, method="linear")(pts)
        assert np.allclose(dense[comp], ref, atol=1e-5)
    assert "window_size=32, overlap=32, search_area_size=40" in repr(model)


@needs_openpiv
def test_openpiv_refuses_frames_smaller_than_the_search_area_and_bad_settings():
    with pytest.raises(DataError, match="at least"):
        OpenPIV()(torch.rand(1, 2, 1, 30, 30))
    with pytest.raises(SpecError, match="search_area_size"):
        OpenPIV(window_size=32, search_area_size=16)


def test_openpiv_missing_raises_spec_error_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "openpiv", None)  # makes `import openpiv` fail
    with pytest.raises(SpecError, match=r"pip install openpiv==0\.26\.1"):
        OpenPIV()


@pytest.mark.slow  # a fresh interpreter imports torch
def test_importing_models_imports_neither_cv2_nor_openpiv():
    code = ("import sys, orbitscope.models, orbitscope.models.flow_estimators as fe; "
            "assert 'cv2' not in sys.modules and 'openpiv' not in sys.modules; "
            "assert orbitscope.models.HornSchunck is fe.HornSchunck")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- accuracy and sign convention on a known uniform shift ---------------------------------------


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize("shift", [(2, -1), (-1, 2)])
def test_recovers_a_uniform_shift_with_our_signs(name, shift):
    dx, dy = shift
    model = build(name)
    flow = model(as_pairs(shifted_pair(dx, dy)))
    assert flow.shape == (1, 2, SIZE, SIZE) and flow.dtype == torch.float32 and torch.isfinite(flow).all()
    epe = interior_epe(flow, dx, dy)
    assert epe < ESTIMATORS[name][1], f"{name}: interior EPE {epe:.4f} px"
    mean = flow[0, :, MARGIN:-MARGIN, MARGIN:-MARGIN].mean((1, 2))
    assert torch.sign(mean).tolist() == [np.sign(dx), np.sign(dy)]  # u > 0 right, v > 0 down


def test_single_scale_horn_schunck_follows_subpixel_but_not_pixel_shifts():
    t = texture(sigma=3.0)
    a = t[20:20 + SIZE, 20:20 + SIZE]
    # ndimage.shift moves the content by +shift along each axis: 0.25 px down, 0.5 px left
    b = ndimage.shift(t, (0.25, -0.5), order=3, mode="reflect")[20:20 + SIZE, 20:20 + SIZE]
    x = torch.tensor(np.stack([a, b]), dtype=torch.float32)[None, :, None]
    flow = HornSchunck(levels=1, iterations=300)(x)
    assert interior_epe(flow, -0.5, 0.25) < 0.05
    big = HornSchunck(levels=1)(as_pairs(shifted_pair(2, -1)))
    assert interior_epe(big, 2, -1) > 0.2  # why the pyramid is the default


# --- Horn–Schunck: batch independence, determinism, inputs ----------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"derivatives": "central", "levels": 2, "warps": 2}])
def test_horn_schunck_batched_equals_per_image_and_is_deterministic(kwargs):
    x = torch.rand(3, 2, 3, 40, 52, generator=torch.Generator().manual_seed(0))
    model = HornSchunck(**kwargs)
    full = model(x)
    assert full.shape == (3, 2, 40, 52)
    assert torch.equal(full, torch.cat([model(x[i:i + 1]) for i in range(3)]))
    assert torch.equal(full, model(x))


def test_horn_schunck_runs_on_the_inputs_device_and_validates_arguments():
    x = as_pairs(shifted_pair(2, -1))
    assert HornSchunck()(x).device == x.device
    if torch.cuda.is_available():
        out = HornSchunck()(x.cuda())
        assert out.is_cuda and interior_epe(out.cpu(), 2, -1) < 0.05
    for bad in ({"alpha": 0}, {"iterations": 0}, {"levels": 0}, {"derivatives": "sobel"}):
        with pytest.raises(SpecError):
            HornSchunck(**bad)
    r = repr(HornSchunck())
    assert "alpha=0.05 (grey in [0, 1]), iterations=100, levels=4, warps=1, derivatives=cube" in r


@pytest.mark.parametrize("name", ["farneback", "dis-medium", "horn-schunck", "openpiv"])
def test_grey_and_rgb_pairs_give_the_same_field(name):
    model = build(name)
    frames = np.stack([shifted_pair(2, -1), shifted_pair(1, 1, seed=5)])
    grey, rgb = model(as_pairs(frames)), model(as_pairs(frames, rgb=True))
    assert grey.shape == rgb.shape == (2, 2, SIZE, SIZE)
    assert torch.allclose(grey, rgb, atol=1e-5)
    colour = torch.rand(2, 2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    assert model(colour).shape == (2, 2, SIZE, SIZE)


@pytest.mark.parametrize("name", ["farneback", "dis-medium", "horn-schunck", "openpiv"])
def test_inputs_that_are_not_pairs_are_refused(name):
    model = build(name)
    with pytest.raises(DataError, match="unsqueeze"):
        model(torch.rand(1, 2, 48, 48))  # grey pair without a channel dim
    with pytest.raises(DataError, match="exactly 2"):
        model(torch.rand(1, 3, 1, 48, 48))  # three frames
    with pytest.raises(DataError, match="C = 1"):
        model(torch.rand(1, 2, 2, 48, 48))  # two channels
    with pytest.raises(DataError):
        model(torch.rand(2, 48, 48))
    assert isinstance(DataError("x"), ValueError) and issubclass(DataError, osc.errors.OrbitscopeError)


def test_review_fixes_uint8_pairs_and_blank_pairs():
    from orbitscope.models.flow_estimators import grey_pairs

    pair = (torch.arange(2 * 16, dtype=torch.uint8).reshape(1, 2, 1, 4, 4) * 7)
    np.testing.assert_allclose(grey_pairs(pair).numpy(), pair[:, :, 0].numpy() / 255.0, rtol=1e-6)
    pytest.importorskip("openpiv")
    from orbitscope.models import OpenPIV

    blank = OpenPIV()(torch.zeros(1, 2, 1, 64, 64))  # no texture: no vector, reported as no motion
    assert torch.isfinite(blank).all() and float(blank.abs().max()) == 0.0

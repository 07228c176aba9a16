"""PIV data: analytic flow fields, synthetic particle-image pairs, Middlebury ``.flo`` files and
folders of real image pairs.

Conventions (those of :mod:`orbitscope.kinds.frames` and :mod:`orbitscope.kinds.flow`):
    An item is ``(frames, flow)``: ``frames`` float32 (2, 1, H, W) in [0, 1] (frame 1, frame 2),
    ``flow`` float32 (2, H, W) = (u, v) in pixels per frame, u along +x (right), v along +y
    (down), NaN where there is no ground truth. The pixel grid, axes and the group's origin are
    those stated once in :mod:`orbitscope.kinds.image`. The analytic fields here
    (:func:`pixel_centres`, ``field.velocity(x, y)``, a vortex's ``centre``) use pixel-index
    coordinates, that module's coordinates shifted by −½: pixel (row i, column j) has its centre
    at (x, y) = (j, i), so the image centre is ((W − 1)/2, (H − 1)/2).

Analytic fields (:data:`FLOW_TYPES`, :func:`flow_field`) are :class:`FlowField` objects: exact
velocities at any points (``field.velocity(x, y)``, float64) and on the pixel centres
(``field.grid()``, float32 (2, H, W)). Synthetic pairs (:func:`particle_pair`): Gaussian
particles rendered by integrating their intensity over each pixel; frame 2 shows every particle
advected by the field evaluated at its own frame-1 position (``advection="euler"``: p + F(p),
so the ground truth F is exactly each particle's displacement) or integrated along the steady
field (``"rk2"``). :class:`PIVPairs` is a deterministic dataset of such pairs (data spec
``piv-synthetic:KEY=VALUE,...``); :class:`FlowFolder` reads real pairs (data spec
``flow-folder:PATH``).

References: Raffel, Willert, Scarano, Kähler, Wereley, Kompenhans, *Particle Image Velocimetry:
A Practical Guide*, 3rd ed., Springer 2018 (Gaussian particle images, e⁻² diameter, synthetic
images); Saffman, *Vortex Dynamics*, CUP 1992 (Rankine and Lamb–Oseen vortices); Taylor & Green,
Proc. R. Soc. A 158 (1937); Armaly et al., J. Fluid Mech. 127 (1983) (backward-facing step,
reattachment at 5–8 step heights); Baker et al., Middlebury flow benchmark, IJCV 92 (2011)
(``.flo`` format).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import numpy as np
import torch
from scipy.special import erf
from torch.utils.data import Dataset

from ..errors import DataError, SpecError
from .image_files import read_image
from .subsets import subset_tag
from .limits import check_data_bytes, check_data_items
from .specs import register_data_spec

__all__ = [
    "FLOW_TYPES", "FlowField", "flow_field", "pixel_centres", "uniform_flow", "shear_flow", "rankine_vortex",
    "lamb_oseen_vortex", "source_sink", "taylor_green", "backward_step", "fourier_turbulence",
    "ParticleOptions", "Particles", "SyntheticPair", "render_particles", "particle_pair", "PIVPairs",
    "piv_synthetic", "synthetic_pair_bytes", "read_flo", "write_flo", "FlowFolder", "flow_folder",
    "FRAME_EXTENSIONS",
]

PathLike = str | os.PathLike[str]
Size = int | tuple[int, int]
Velocity = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
#: Version of the synthetic generator; part of every ``data_id`` (bump it when items change).
GENERATOR_VERSION = 1


def _size(size: Size) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if int(h) != h or int(w) != w or h < 2 or w < 2:
        raise DataError(f"size must be an int or (H, W) of ints >= 2, got {size!r}")
    return int(h), int(w)


def pixel_centres(size: Size) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) float64 arrays (H, W) of the pixel centres: x = column, y = row."""
    h, w = _size(size)
    y, x = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    return x, y


class FlowField:
    """An analytic flow over an H × W image: ``velocity(x, y) -> (2, *x.shape)`` float64 (u, v) in
    px/frame at any points (pixel coordinates as in the module docstring), ``grid()`` the same at the
    pixel centres as (2, H, W) float32. ``params`` holds the constructor's arguments."""

    def __init__(self, name: str, size: Size, params: dict[str, Any], velocity: Velocity,
                 grid: Callable[[], np.ndarray] | None = None) -> None:
        self.name, self.size, self.params = name, _size(size), dict(params)
        self._velocity, self._grid = velocity, grid

    def velocity(self, x: Any, y: Any) -> np.ndarray:
        x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
        u, v = self._velocity(x, y)
        return np.stack(np.broadcast_arrays(u, v)).astype(np.float64, copy=False)

    def grid(self, dtype: Any = np.float32) -> np.ndarray:
        """The field at the pixel centres, (2, H, W) (float32 unless ``dtype`` says otherwise)."""
        g = self._grid() if self._grid is not None else self.velocity(*pixel_centres(self.size))
        return np.ascontiguousarray(g, dtype=dtype)

    def scaled(self, factor: float) -> FlowField:
        """The same field times ``factor`` (``params["scale"]`` records the product)."""
        k = float(factor)
        inner, grid = self._velocity, self._grid
        params = {**self.params, "scale": self.params.get("scale", 1.0) * k}
        return FlowField(self.name, self.size, params, lambda x, y: tuple(k * c for c in inner(x, y)),
                         None if grid is None else (lambda: k * grid()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"FlowField({self.name!r}, size={self.size}, {args})"


def _centre(size: tuple[int, int], centre: Sequence[float] | None) -> tuple[float, float]:
    if centre is None:
        return (size[1] - 1) / 2, (size[0] - 1) / 2
    cx, cy = (float(c) for c in centre)
    return cx, cy


def _positive(name: str, value: float) -> float:
    if not (np.isfinite(value) and value > 0):
        raise DataError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def uniform_flow(size: Size, *, u: float = 1.0, v: float = 0.0) -> FlowField:
    """Uniform translation F = (u, v) (px/frame) everywhere."""
    u, v = float(u), float(v)
    return FlowField("uniform", size, {"u": u, "v": v}, lambda x, y: (np.full_like(x, u), np.full_like(x, v)))


def shear_flow(size: Size, *, rate: float = 0.05, centre: Sequence[float] | None = None,
               angle: float = 0.0) -> FlowField:
    """Simple (Couette) shear: F(p) = γ ((p − c)·n) e, e = (cos θ, sin θ), n = (−sin θ, cos θ).

    ``rate`` γ (1/frame: px/frame of velocity per px across the flow), ``centre`` c (px, a point
    on the zero-velocity line; default the image centre), ``angle`` θ (degrees, the flow direction
    from +x towards +y). θ = 0: u = γ (y − c_y), v = 0. Divergence-free; vorticity −γ.
    """
    h = _size(size)
    cx, cy = _centre(h, centre)
    rate, th = float(rate), math.radians(float(angle))
    e, n = (math.cos(th), math.sin(th)), (-math.sin(th), math.cos(th))

    def vel(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = rate * ((x - cx) * n[0] + (y - cy) * n[1])
        return s * e[0], s * e[1]

    return FlowField("shear", size, {"rate": rate, "centre": (cx, cy), "angle": float(angle)}, vel)


def _swirl(cx: float, cy: float, over_r: Callable[[np.ndarray], np.ndarray]) -> Velocity:
    """Tangential flow about (cx, cy) with speed s(r) = r · over_r(r²), positive counter-clockwise
    as displayed: (u, v) = (s/r)·(dy, −dx)."""

    def vel(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx, dy = x - cx, y - cy
        f = over_r(dx * dx + dy * dy)
        return f * dy, -f * dx

    return vel


def rankine_vortex(size: Size, *, centre: Sequence[float] | None = None, core_radius: float = 8.0,
                   circulation: float = 100.0) -> FlowField:
    """Rankine vortex (Saffman 1992, §1.2): solid-body rotation inside the core, potential outside.

    Tangential speed s(r) = Γ r / (2π R²) for r ≤ R and Γ / (2π r) for r > R; peak Γ / (2π R) at
    r = R. ``centre`` (px, default the image centre), ``core_radius`` R (px), ``circulation`` Γ
    (px²/frame; > 0 counter-clockwise as displayed). Divergence-free.
    """
    c = _centre(_size(size), centre)
    r0, g = _positive("core_radius", core_radius), float(circulation)
    vel = _swirl(*c, lambda r2: g / (2 * np.pi) / np.maximum(r2, r0 * r0))
    return FlowField("rankine", size, {"centre": c, "core_radius": r0, "circulation": g}, vel)


def lamb_oseen_vortex(size: Size, *, centre: Sequence[float] | None = None, core_radius: float = 8.0,
                      circulation: float = 100.0) -> FlowField:
    """Lamb–Oseen vortex (Saffman 1992, §1.4; the viscous diffusion of a point vortex).

    s(r) = Γ / (2π r) · (1 − exp(−r² / r_c²)): solid-body Γ r / (2π r_c²) as r → 0, Γ / (2π r) as
    r → ∞, peak ≈ 0.6382 Γ / (2π r_c) at r ≈ 1.1209 r_c. ``core_radius`` r_c (px), ``circulation`` Γ
    (px²/frame, > 0 counter-clockwise as displayed), ``centre`` as for :func:`rankine_vortex`.
    """
    c = _centre(_size(size), centre)
    rc, g = _positive("core_radius", core_radius), float(circulation)

    def over_r(r2: np.ndarray) -> np.ndarray:
        q = r2 / (rc * rc)
        # (1 − e^−q)/q → 1 as q → 0, written without cancellation
        ratio = np.where(q > 1e-12, -np.expm1(-q) / np.where(q > 1e-12, q, 1.0), 1.0 - q / 2)
        return g / (2 * np.pi * rc * rc) * ratio

    return FlowField("lamb-oseen", size, {"centre": c, "core_radius": rc, "circulation": g}, _swirl(*c, over_r))


def source_sink(size: Size, *, centre: Sequence[float] | None = None, core_radius: float = 8.0,
                strength: float = 100.0) -> FlowField:
    """A source (Q > 0) or sink (Q < 0) of strength Q spread uniformly over a disk of radius R.

    Radial speed u_r = Q r / (2π R²) for r ≤ R, Q / (2π r) for r > R (the Rankine construction
    for a source): divergence Q / (π R²) inside the disk, 0 outside, irrotational everywhere.
    ``strength`` Q (px²/frame: area emitted per frame), ``core_radius`` R (px), ``centre`` (px).
    """
    cx, cy = _centre(_size(size), centre)
    r0, q = _positive("core_radius", core_radius), float(strength)

    def vel(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx, dy = x - cx, y - cy
        f = q / (2 * np.pi) / np.maximum(dx * dx + dy * dy, r0 * r0)
        return f * dx, f * dy

    return FlowField("source-sink", size, {"centre": (cx, cy), "core_radius": r0, "strength": q}, vel)


def taylor_green(size: Size, *, amplitude: float = 1.0, wavelength: float = 32.0,
                 phase: Sequence[float] = (0.0, 0.0)) -> FlowField:
    """Taylor–Green vortex array (Taylor & Green 1937), one frame of it.

    u = U cos(k (x − x₀)) sin(k (y − y₀)), v = −U sin(k (x − x₀)) cos(k (y − y₀)), k = 2π / λ:
    a checkerboard of counter-rotating cells of side λ / 2. ``amplitude`` U (px/frame),
    ``wavelength`` λ (px), ``phase`` (x₀, y₀) (px). Divergence-free.
    """
    a, lam = float(amplitude), _positive("wavelength", wavelength)
    x0, y0 = (float(p) for p in phase)
    k = 2 * np.pi / lam

    def vel(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        px, py = k * (x - x0), k * (y - y0)
        return a * np.cos(px) * np.sin(py), -a * np.sin(px) * np.cos(py)

    return FlowField("taylor-green", size, {"amplitude": a, "wavelength": lam, "phase": (x0, y0)}, vel)


def _logcosh(z: np.ndarray) -> np.ndarray:
    a = np.abs(z)
    return a + np.log1p(np.exp(-2 * a)) - math.log(2.0)


def backward_step(size: Size, *, speed: float = 2.0, step_x: float | None = None, step_height: float | None = None,
                  floor_y: float | None = None, reattachment: float | None = None, thickness: float | None = None,
                  spread: float = 0.05, reverse: float = 0.3) -> FlowField:
    """A backward-facing-step-like flow: a free stream along +x over a step whose corner is at
    (x_s, y_f − h), a shear layer leaving the corner and descending to the floor y = y_f at the
    reattachment x_s + L, and a recirculation bubble beneath it. A kinematic model (ours), not a
    Navier–Stokes solution: divergence-free because it comes from a stream function.

    With η = y_f − y (height above the floor), ξ = (x − x_s)/L, t = clip(ξ, 0, 1):
    layer centre η_c = h (1 − t²(3 − 2t)); thickness δ = δ₀ + α ℓ log(1 + e^{(x − x_s)/ℓ}), ℓ = h/2;
    z = (η − η_c)/δ, z₀ = −η_c/δ; bubble a(x) = sin²(π t), b(η) = 3√3 h s²(1 − s)², s = η/h in [0, 1]
    (0 outside). Stream function ψ = −U [½(η + δ (log cosh z − log cosh z₀)) − r a(x) b(η)] with
    u = ∂ψ/∂y, v = −∂ψ/∂x, i.e. u = U [½(1 + tanh z) − r a b'(η)], max b' = 1, so r is the bubble's
    peak reverse speed as a fraction of U. The floor is a streamline (v = 0 there); upstream the
    step (x < x_s, η < h) is nearly at rest (the layer's tail decays like e^{−2(h − η)/δ₀}).

    Args:
        speed: free-stream speed U (px/frame).
        step_x: x_s, the step's downstream face (px; default W/10 − ½).
        step_height: h (px; default H/5).
        floor_y: y_f (px; default H − ½, the bottom edge of the image).
        reattachment: L (px; default 5 h, within Armaly et al.'s 5–8 h).
        thickness: δ₀ (px; default 0.1 h).
        spread: α = dδ/dx downstream of the step.
        reverse: r, the bubble's peak reverse speed / U.
    """
    hh, ww = _size(size)
    u0 = float(speed)
    h = _positive("step_height", hh / 5 if step_height is None else step_height)
    xs = ww / 10 - 0.5 if step_x is None else float(step_x)
    yf = hh - 0.5 if floor_y is None else float(floor_y)
    big_l = _positive("reattachment", 5 * h if reattachment is None else reattachment)
    d0 = _positive("thickness", 0.1 * h if thickness is None else thickness)
    alpha, r = float(spread), float(reverse)
    ell, c3 = h / 2, 3 * math.sqrt(3.0)

    def vel(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eta = yf - y
        t = np.clip((x - xs) / big_l, 0.0, 1.0)
        inside = (x > xs) & (x < xs + big_l)
        eta_c = h * (1 - t * t * (3 - 2 * t))
        deta_c = np.where(inside, -h * 6 * t * (1 - t) / big_l, 0.0)
        q = (x - xs) / ell
        delta = d0 + alpha * ell * np.logaddexp(0.0, q)
        ddelta = alpha / (1 + np.exp(-q))
        z, z0 = (eta - eta_c) / delta, -eta_c / delta
        tz, tz0 = np.tanh(z), np.tanh(z0)
        dps_dx = 0.5 * (deta_c * (tz0 - tz) + ddelta * ((_logcosh(z) - z * tz) - (_logcosh(z0) - z0 * tz0)))
        s = eta / h
        in_b = (s >= 0) & (s <= 1)
        b = np.where(in_b, c3 * h * s * s * (1 - s) ** 2, 0.0)
        db = np.where(in_b, c3 * 2 * s * (1 - s) * (1 - 2 * s), 0.0)
        a = np.where(inside, np.sin(np.pi * t) ** 2, 0.0)
        da = np.where(inside, np.pi / big_l * np.sin(2 * np.pi * t), 0.0)
        return u0 * (0.5 * (1 + tz) - r * a * db), u0 * (dps_dx - r * da * b)

    params = {"speed": u0, "step_x": xs, "step_height": h, "floor_y": yf, "reattachment": big_l, "thickness": d0,
              "spread": alpha, "reverse": r}
    return FlowField("backstep", size, params, vel)


def fourier_turbulence(size: Size, *, rms: float = 1.0, k_min: float = 1 / 64, k_max: float = 1 / 8,
                       exponent: float = -5 / 3, seed: int = 0) -> FlowField:
    """Random divergence-free "turbulence": a stream function of Fourier modes with random phases.

    ψ(x) = Σ_m A_m cos(κ_m·x + φ_m) over the lattice wavevectors κ_m = 2π (m_x / W, m_y / H) of the
    H × W image (the field is periodic over it; one of each ±m pair, Nyquist modes left out) whose
    wavenumber k = |κ_m| / 2π (cycles/px; wavelength 1/k px) lies in [k_min, k_max];
    u = ∂ψ/∂y, v = −∂ψ/∂x (so ∇·F = 0 exactly). Amplitudes give the energy spectrum
    E(k) ∝ k^exponent (default −5/3, Kolmogorov's inertial range): in 2-D a shell holds ∝ k modes,
    so each mode's kinetic energy is ∝ k^(exponent − 1), A_m = k^((exponent − 1)/2) / |κ_m| (up
    to the common scale). Phases φ_m ~ U(0, 2π) from ``numpy.random.default_rng(seed)``
    (amplitudes are not randomised: the spectrum is exact). The field is then scaled so that its
    RMS displacement sqrt(mean over the pixel centres of u² + v²) equals ``rms`` (px/frame).
    """
    h, w = _size(size)
    rms = _positive("rms", rms)
    if not 0 < k_min <= k_max < 0.5:
        raise DataError(f"need 0 < k_min <= k_max < 0.5 cycles/px, got k_min={k_min}, k_max={k_max}")
    mx = np.arange(0, min(int(k_max * w), (w - 1) // 2) + 1)
    my_top = min(int(k_max * h), (h - 1) // 2)
    my = np.arange(-my_top, my_top + 1)
    kx, ky = mx / w, my / h  # cycles/px
    kk = np.hypot(kx[None, :], ky[:, None])  # (ny, nx)
    half = (mx[None, :] > 0) | ((mx[None, :] == 0) & (my[:, None] > 0))
    band = half & (kk >= k_min) & (kk <= k_max)
    if not band.any():
        raise DataError(f"no Fourier mode of a {h}x{w} image has a wavenumber in [{k_min}, {k_max}] cycles/px "
                        f"(the lowest is 1/{max(h, w)}): widen the band")
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    phase = rng.uniform(0.0, 2 * np.pi, size=kk.shape)  # drawn over the whole box: independent of the band
    ksafe = np.where(band, kk, 1.0)
    amp = np.where(band, ksafe ** ((exponent - 1) / 2) / (2 * np.pi * ksafe), 0.0)
    c = amp * np.exp(1j * phase)
    ang_x, ang_y = 2 * np.pi * kx, 2 * np.pi * ky
    coef = np.concatenate([1j * ang_y[:, None] * c, -1j * ang_x[None, :] * c], axis=1)  # (ny, 2nx): u | v

    def grid_raw() -> np.ndarray:
        ex = np.exp(1j * np.outer(np.arange(w), ang_x))  # (W, nx)
        ey = np.exp(1j * np.outer(np.arange(h), ang_y))  # (H, ny)
        tmp = ey @ coef  # (H, 2nx)
        n = len(mx)
        return np.stack([(tmp[:, :n] @ ex.T).real, (tmp[:, n:] @ ex.T).real])

    scale = rms / math.sqrt(float(np.mean(np.sum(grid_raw() ** 2, axis=0))))
    coef *= scale

    def vel(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xf, yf = x.reshape(-1), y.reshape(-1)
        tmp = np.exp(1j * np.outer(yf, ang_y)) @ coef  # (P, 2nx)
        ex = np.exp(1j * np.outer(xf, ang_x))
        n = len(mx)
        return (np.sum(tmp[:, :n] * ex, 1).real.reshape(x.shape), np.sum(tmp[:, n:] * ex, 1).real.reshape(x.shape))

    params = {"rms": rms, "k_min": float(k_min), "k_max": float(k_max), "exponent": float(exponent), "seed": int(seed)}
    return FlowField("turbulence", size, params, vel, grid_raw)


_CONSTRUCTORS: dict[str, Callable[..., FlowField]] = {
    "uniform": uniform_flow, "shear": shear_flow, "rankine": rankine_vortex, "lamb-oseen": lamb_oseen_vortex,
    "source-sink": source_sink, "taylor-green": taylor_green, "backstep": backward_step,
    "turbulence": fourier_turbulence,
}
#: The analytic flow types, in this order (the names :func:`flow_field` and the data spec take).
FLOW_TYPES: tuple[str, ...] = tuple(_CONSTRUCTORS)


def flow_field(name: str, size: Size, **params: Any) -> FlowField:
    """The analytic field ``name`` (one of :data:`FLOW_TYPES`) with the constructor's ``params``."""
    if name not in _CONSTRUCTORS:
        raise DataError(f"unknown flow type {name!r}; known: {', '.join(FLOW_TYPES)}")
    return _CONSTRUCTORS[name](size, **params)


def _random_field(name: str, size: tuple[int, int], rng: np.random.Generator) -> FlowField:
    """A field of type ``name`` with random shape parameters (amplitude arbitrary)."""
    h, w = size
    s = min(h, w)
    centre = (rng.uniform(0.25, 0.75) * (w - 1), rng.uniform(0.25, 0.75) * (h - 1))
    sign = float(rng.choice([-1.0, 1.0]))
    radius = rng.uniform(0.08, 0.2) * s
    if name == "uniform":
        th = rng.uniform(0, 2 * np.pi)
        return uniform_flow(size, u=math.cos(th), v=math.sin(th))
    if name == "shear":
        return shear_flow(size, rate=sign, centre=centre, angle=rng.uniform(0, 360))
    if name in ("rankine", "lamb-oseen"):
        return flow_field(name, size, centre=centre, core_radius=radius, circulation=sign)
    if name == "source-sink":
        return source_sink(size, centre=centre, core_radius=radius, strength=sign)
    if name == "taylor-green":
        lam = rng.uniform(0.4, 1.0) * s
        return taylor_green(size, wavelength=lam, phase=(rng.uniform(0, lam), rng.uniform(0, lam)))
    if name == "backstep":
        step_h = rng.uniform(0.15, 0.3) * h
        return backward_step(size, speed=1.0, step_height=step_h, step_x=rng.uniform(-0.5, 0.25 * w),
                             reattachment=rng.uniform(4, 7) * step_h, reverse=rng.uniform(0.2, 0.4))
    return fourier_turbulence(size, seed=int(rng.integers(2 ** 63 - 1)))


# --------------------------------------------------------------------------- particle images


def _range(name: str, value: float | Sequence[float], low: float, high: float) -> tuple[float, float]:
    lo, hi = (value, value) if np.isscalar(value) else tuple(value)  # type: ignore[misc]
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi) and low <= lo <= hi <= high):
        raise DataError(f"{name} must be a number or a range (low, high) with {low} <= low <= high <= {high}, "
                        f"got {value!r}")
    return lo, hi


def _fmt(x: float) -> str:
    r = repr(float(x))
    return r[:-2] if r.endswith(".0") else r


@dataclass(frozen=True)
class ParticleOptions:
    """How synthetic particle images are made.

    Attributes:
        density: particles per pixel (image plus margin; mean count in the image = density·H·W).
        diameter: particle-image diameter (px) at e⁻² of the peak (PIV's convention, Raffel et al.
            2018): intensity I₀ exp(−8 r² / d²), σ = d / 4; a number or a range (low, high) drawn
            uniformly per particle.
        intensity: peak intensity I₀ range (low, high), uniform per particle, in [0, 1].
        noise: σ of additive Gaussian sensor noise per pixel and frame (intensity units).
        loss: out-of-plane loss, the share of the particles visible in frame 1 that are missing
            from frame 2 (exactly round(loss·n) of those n; the margin's likewise), replaced there by
            as many new random particles (with new intensities and diameters).
        advection: "euler" (frame-2 position p + F(p)) or "rk2" (two midpoint-rule half steps of
            Δt = ½ along the steady field: the pathline; differs from F(p) by O(|F| |∇F|)).
    """

    density: float = 0.05
    diameter: float | tuple[float, float] = (2.0, 4.0)
    intensity: float | tuple[float, float] = (0.6, 1.0)
    noise: float = 0.02
    loss: float = 0.0
    advection: str = "euler"

    def __post_init__(self) -> None:
        _positive("density", self.density)
        object.__setattr__(self, "density", float(self.density))
        object.__setattr__(self, "diameter", _range("diameter", self.diameter, 0.5, 64.0))
        object.__setattr__(self, "intensity", _range("intensity", self.intensity, 0.0, 1.0))
        if not (np.isfinite(self.noise) and self.noise >= 0):
            raise DataError(f"noise must be a number >= 0 (σ in intensity units), got {self.noise!r}")
        if not 0 <= self.loss < 1:
            raise DataError(f"loss must be in [0, 1) (share of particles lost between frames), got {self.loss!r}")
        if self.advection not in ("euler", "rk2"):
            raise DataError(f"advection must be 'euler' or 'rk2', got {self.advection!r}")
        object.__setattr__(self, "noise", float(self.noise))
        object.__setattr__(self, "loss", float(self.loss))

    @property
    def id(self) -> str:
        """The options as ``key=value`` pairs of the data spec (see :func:`piv_synthetic`)."""
        def rng(r: tuple[float, float]) -> str:
            return _fmt(r[0]) if r[0] == r[1] else f"{_fmt(r[0])}..{_fmt(r[1])}"
        return (f"density={_fmt(self.density)},diameter={rng(self.diameter)},"  # type: ignore[arg-type]
                f"intensity={rng(self.intensity)},noise={_fmt(self.noise)},loss={_fmt(self.loss)},"  # type: ignore[arg-type]
                f"advection={self.advection}")


@dataclass(frozen=True)
class Particles:
    """Particle positions (px, pixel-centre coordinates), peak intensities and e⁻² diameters, (N,) each."""

    x: np.ndarray
    y: np.ndarray
    intensity: np.ndarray
    diameter: np.ndarray

    def __len__(self) -> int:
        return len(self.x)


class SyntheticPair(NamedTuple):
    """A generated pair: ``frames`` (2, 1, H, W) float32, ``flow`` (2, H, W) float32, the particles
    of each frame, and ``kept`` ((N,) bool: which of ``first`` are in ``second``, where they come
    first, in order, followed by the replacements)."""

    frames: np.ndarray
    flow: np.ndarray
    first: Particles
    second: Particles
    kept: np.ndarray


def render_particles(particles: Particles, size: Size) -> np.ndarray:
    """Image (H, W) float64 of Gaussian particles, each integrated over every pixel:
    value(i, j) = Σ_p I₀ (π d²/32) [erf(√8 (j + ½ − x_p)/d) − erf(√8 (j − ½ − x_p)/d)] · [same in y],
    i.e. the mean of I₀ exp(−8 r²/d²) over the pixel. Overlaps add; nothing is clipped. Each
    particle is summed over the pixels within ceil(1.5 d_max) + 1 of it (what lies beyond holds
    < 3e-9 of its light)."""
    h, w = _size(size)
    x, y = np.asarray(particles.x, np.float64), np.asarray(particles.y, np.float64)
    d = np.broadcast_to(np.asarray(particles.diameter, np.float64), x.shape)
    amp = np.broadcast_to(np.asarray(particles.intensity, np.float64), x.shape)
    if not len(x):
        return np.zeros((h, w))
    r = int(math.ceil(1.5 * float(d.max()))) + 1
    near = (x > -r - 1) & (x < w + r) & (y > -r - 1) & (y < h + r)
    x, y, d, amp = x[near], y[near], d[near], amp[near]
    steps = np.arange(2 * r + 2)
    a = (math.sqrt(8.0) / d)[:, None]
    col0, row0 = np.floor(x).astype(np.int64) - r, np.floor(y).astype(np.int64) - r
    gx = np.diff(erf(a * ((col0[:, None] + steps) - 0.5 - x[:, None])), axis=1)  # (P, K), K = 2r + 1
    gy = np.diff(erf(a * ((row0[:, None] + steps) - 0.5 - y[:, None])), axis=1)
    vals = (amp * np.pi * d * d / 32)[:, None, None] * gy[:, :, None] * gx[:, None, :]
    pad = 2 * r + 2  # every window lies inside the image padded by this much
    wp = w + 2 * pad
    flat = (row0 + pad)[:, None, None] * wp + (col0 + pad)[:, None, None] + (steps[:-1, None] * wp + steps[:-1])
    canvas = np.bincount(flat.ravel(), vals.ravel(), minlength=(h + 2 * pad) * wp).reshape(h + 2 * pad, wp)
    return canvas[pad:pad + h, pad:pad + w].copy()


def _spawn(rng: np.random.Generator, n: int, box: tuple[float, float, float, float], opts: ParticleOptions) -> Particles:
    x0, x1, y0, y1 = box
    return Particles(rng.uniform(x0, x1, n), rng.uniform(y0, y1, n), rng.uniform(*opts.intensity, n),  # type: ignore[misc]
                     rng.uniform(*opts.diameter, n))  # type: ignore[misc]


def _advect(field: FlowField, x: np.ndarray, y: np.ndarray, method: str) -> tuple[np.ndarray, np.ndarray]:
    if method == "euler":
        d = field.velocity(x, y)
        return x + d[0], y + d[1]
    for _ in range(2):  # midpoint rule, two steps of ½ frame
        k1 = field.velocity(x, y)
        k2 = field.velocity(x + 0.25 * k1[0], y + 0.25 * k1[1])
        x, y = x + 0.5 * k2[0], y + 0.5 * k2[1]
    return x, y


def particle_pair(field: FlowField, rng: np.random.Generator | int, options: ParticleOptions | None = None, *,
                  first: Particles | None = None) -> SyntheticPair:
    """A particle-image pair of ``field`` (see :class:`ParticleOptions`), deterministic given ``rng``.

    Frame-1 particles (``first``, or N = round(density · area) drawn uniformly over the image
    plus a margin of ceil(2 · peak |F| + max diameter) px, so particles flow in across the edges)
    are advected to frame 2 (``options.advection``); ``round(loss · n)`` of the n visible in frame 1
    (centre inside the image), and as many in proportion of the others, are replaced by new random
    ones (over the same area; over the image when ``first`` is given). Frames: :func:`render_particles` plus N(0, noise²) per pixel, clipped to [0, 1]
    (saturation). ``flow`` is ``field.grid()``. Draw order: particles, lost ones, replacements, noise.
    """
    opts = options or ParticleOptions()
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    h, w = field.size
    flow = field.grid()
    if first is None:
        m = math.ceil(2 * float(np.sqrt((flow.astype(np.float64) ** 2).sum(0)).max()) + opts.diameter[1])  # type: ignore[index]
        box = (-0.5 - m, w - 0.5 + m, -0.5 - m, h - 0.5 + m)
        first = _spawn(rng, int(round(opts.density * (w + 2 * m) * (h + 2 * m))), box, opts)
    else:
        box = (-0.5, w - 0.5, -0.5, h - 0.5)
    n = len(first)
    x2, y2 = _advect(field, np.asarray(first.x, np.float64), np.asarray(first.y, np.float64), opts.advection)
    kept = np.ones(n, bool)
    seen = (first.x >= -0.5) & (first.x < w - 0.5) & (first.y >= -0.5) & (first.y < h - 0.5)
    for group in (np.flatnonzero(seen), np.flatnonzero(~seen)):  # the share is exact among the visible ones
        kept[rng.choice(group, int(round(opts.loss * len(group))), replace=False)] = False
    new = _spawn(rng, int(n - kept.sum()), box, opts)
    second = Particles(np.concatenate([x2[kept], new.x]), np.concatenate([y2[kept], new.y]),
                       np.concatenate([first.intensity[kept], new.intensity]),
                       np.concatenate([first.diameter[kept], new.diameter]))
    frames = np.stack([render_particles(p, (h, w)) for p in (first, second)])
    if opts.noise:
        frames += rng.normal(0.0, opts.noise, frames.shape)
    frames = np.clip(frames, 0.0, 1.0).astype(np.float32)[:, None]
    return SyntheticPair(frames, flow, first, second, kept)


# --------------------------------------------------------------------------- the synthetic dataset



def synthetic_pair_bytes(size: Size, options: ParticleOptions, max_displacement: float, turbulence: bool = True
                         ) -> float:
    """An upper estimate of the bytes :func:`particle_pair` needs at its peak to make one pair of
    a :class:`PIVPairs` (checked against ``$ORBITSCOPE_MAX_DATA_BYTES`` before any pair is made).

    With N = density · (W + 2m)(H + 2m) particles (margin m = ⌈2 · max_displacement + d_max⌉), each
    rendered over a window of K × K pixels (K = 2⌈1.5 d_max⌉ + 3), the estimate is
    192 · (H + 2p)(W + 2p) + N · (22 K² + 512) bytes (p = K + 1, the render's padding), plus
    N · (12 n_y + 24 n_x) for the Fourier modes of the ``turbulence`` type when it is drawn
    (n_x ≈ W / 8, n_y ≈ H / 4). The coefficients bound the tracemalloc peak of 207 measured pairs
    (every type; 32² to 1,536² pixels; density 0.002 to 0.5; diameter up to 64; max-disp up to 30)
    with a margin of 1.3 to 11 (the largest for small images with wide margins). Returns ``inf``
    where the arithmetic overflows.
    """
    h, w = _size(size)
    d_max = float(options.diameter[1])  # type: ignore[index]
    try:
        m = math.ceil(2 * float(max_displacement) + d_max)
        particles = options.density * (w + 2 * m) * (h + 2 * m)
        k = 2 * (math.ceil(1.5 * d_max) + 1) + 1
        pad = k + 1
        total = 192.0 * (h + 2 * pad) * (w + 2 * pad) + particles * (22.0 * k * k + 512)
        if turbulence:
            nx, ny = min(w // 8, (w - 1) // 2) + 1, 2 * min(h // 8, (h - 1) // 2) + 1
            total += particles * (12.0 * ny + 24.0 * nx)
    except (OverflowError, ValueError):
        return math.inf
    return total if math.isfinite(total) else math.inf


class PIVPairs(Dataset):
    """Synthetic PIV pairs with exact ground truth: items ``(frames (2, 1, H, W), flow (2, H, W))``
    float32 tensors (module conventions).

    Item i has flow type ``flow_types[i % len(flow_types)]`` (:attr:`flow_type`, per item) and is
    made from ``numpy.random.default_rng(SeedSequence(seed, spawn_key=(i,)))`` alone: a field of
    that type with random shape parameters (centres, radii, wavelengths, step geometry, phases,
    orientation, sign), scaled so its peak |F| over the pixel centres is ``max_displacement`` ·
    U(0.5, 1), then :func:`particle_pair`. Item i is thus the same in every dataset sharing the
    seed, size and options, whatever ``n`` (``n=10`` is the first 10 of ``n=1000``). Bit-identical
    across runs on one machine (numpy/scipy float64 arithmetic may differ in the last bit elsewhere).
    ``data_id`` is the canonical data spec, so ``parse_data_spec(ds.data_id)`` rebuilds the set.
    """

    def __init__(self, n: int = 64, size: Size = 64, flow_types: Iterable[str] | str = FLOW_TYPES, seed: int = 0,
                 max_displacement: float = 4.0, options: ParticleOptions | None = None) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise DataError(f"n must be a positive integer (number of pairs), got {n!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise DataError(f"seed must be an integer >= 0, got {seed!r}")
        types = (flow_types,) if isinstance(flow_types, str) else tuple(flow_types)
        bad = [t for t in types if t not in FLOW_TYPES]
        if not types or bad:
            raise DataError(f"flow_types must be a non-empty selection of {', '.join(FLOW_TYPES)}; got {types!r}")
        self.size, self.seed, self.flow_types = _size(size), int(seed), types
        self.max_displacement = _positive("max_displacement", max_displacement)
        self.options = options or ParticleOptions()
        check_data_items(f"n={int(n)}", int(n), "use a smaller n")
        h, w = self.size
        check_data_bytes(f"size={h}x{w}, density={_fmt(self.options.density)}, diameter up to "
                         f"{_fmt(self.options.diameter[1])}, max-disp={_fmt(self.max_displacement)}",  # type: ignore[index]
                         synthetic_pair_bytes(self.size, self.options, self.max_displacement, "turbulence" in types),
                         "making one pair (particle windows, frames and flow)",
                         "use a smaller size, density, diameter or max-disp")
        self.indices = np.arange(int(n), dtype=np.int64)
        h, w = self.size
        self.data_id = (f"piv-synthetic:n={int(n)},size={h}x{w},types={'+'.join(types)},seed={self.seed},"
                        f"max-disp={_fmt(self.max_displacement)},{self.options.id},v={GENERATOR_VERSION}")

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def flow_type(self) -> np.ndarray:
        """Flow type name of every item (str array), e.g. for per-type subsets."""
        return np.array([self.flow_types[i % len(self.flow_types)] for i in self.indices], dtype=str)

    @property
    def sample_groups(self) -> dict[str, np.ndarray]:
        """Recorded by :func:`~orbitscope.evaluate` per sample, so results split by flow type."""
        return {"flow_type": self.flow_type}

    @property
    def labelled(self) -> np.ndarray:
        """Whether each item has ground truth: always True here."""
        return np.ones(len(self), bool)

    def _base(self, index: int) -> int:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} pairs")
        return int(self.indices[index])

    def _rng(self, base: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(base,)))

    def _field(self, base: int, rng: np.random.Generator) -> FlowField:
        f = _random_field(self.flow_types[base % len(self.flow_types)], self.size, rng)
        peak = float(np.sqrt((f.grid(np.float64) ** 2).sum(0)).max())
        return f.scaled(self.max_displacement * rng.uniform(0.5, 1.0) / peak)

    def field(self, index: int) -> FlowField:
        """The analytic field of item ``index`` (its ``params`` say how it was drawn)."""
        base = self._base(index)
        return self._field(base, self._rng(base))

    def pair(self, index: int) -> SyntheticPair:
        """Item ``index`` with its particles (numpy arrays)."""
        base = self._base(index)
        rng = self._rng(base)
        return particle_pair(self._field(base, rng), rng, self.options)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.pair(index)
        return torch.from_numpy(p.frames), torch.from_numpy(p.flow)

    def subset(self, indices: slice | Sequence[int] | np.ndarray, data_id: str | None = None) -> PIVPairs:
        """The items at ``indices`` (same generator); ``data_id`` defaults to ours + ``[a:b]`` or a hash."""
        if isinstance(indices, slice):
            picked = self.indices[indices]
        else:
            picked = np.array([self._base(int(i)) for i in np.asarray(indices).reshape(-1)], np.int64)
        new = object.__new__(PIVPairs)
        new.__dict__.update(self.__dict__)
        new.indices = np.asarray(picked, np.int64)
        new.data_id = data_id if data_id is not None else self.data_id + subset_tag(new.indices)
        return new


def piv_synthetic(n: int = 64, size: Size = 64, flow_types: Iterable[str] | str = FLOW_TYPES, seed: int = 0,
                  max_displacement: float = 4.0, **particle_options: Any) -> PIVPairs:
    """:class:`PIVPairs` with :class:`ParticleOptions` given as keywords (density, diameter, intensity,
    noise, loss, advection). Data spec: ``piv-synthetic[:KEY=VALUE,...]`` with keys ``n`` (64), ``size``
    (``64`` or ``HxW``), ``types`` (``all`` or names joined by ``+``), ``seed`` (0), ``max-disp`` (4, px),
    ``density``, ``diameter`` (``3`` or ``2..4``), ``intensity`` (``0.6..1``), ``noise``, ``loss``,
    ``advection`` (``euler``/``rk2``) and ``v`` (generator version), e.g.
    ``piv-synthetic:n=64,size=64,types=uniform+rankine@10``."""
    return PIVPairs(n, size, flow_types, seed, max_displacement, ParticleOptions(**particle_options))


_SPEC_KEYS = ("n", "size", "types", "seed", "max-disp", "density", "diameter", "intensity", "noise", "loss",
              "advection", "v")


def _spec_number(key: str, text: str, kind: type = float) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise SpecError(f"{key} must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None


def _piv_synthetic_spec(rest: str) -> PIVPairs:
    kw: dict[str, Any] = {}
    opts: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, val = (s.strip() for s in part.partition("="))
        key = key.lower()
        if not eq or key not in _SPEC_KEYS or not val:
            what = f"unknown key {key!r}" if eq and key not in _SPEC_KEYS else f"expected KEY=VALUE, got {part!r}"
            raise SpecError(f"{what}; accepted keys: {', '.join(_SPEC_KEYS)} "
                            "(e.g. piv-synthetic:n=64,size=64,types=uniform+rankine)")
        if key in kw or key in opts:
            raise SpecError(f"key {key!r} given twice")
        if key in ("n", "seed"):
            kw[key] = _spec_number(key, val, int)
        elif key == "size":
            dims = val.lower().split("x")
            kw["size"] = tuple(_spec_number("size", d, int) for d in dims) if len(dims) == 2 else \
                _spec_number("size", val, int)
        elif key == "types":
            kw["flow_types"] = FLOW_TYPES if val.lower() == "all" else tuple(t.strip().lower() for t in val.split("+"))
            bad = [t for t in kw["flow_types"] if t not in FLOW_TYPES]
            if bad:
                raise SpecError(f"unknown flow type(s) {bad}; types is 'all' or names joined by '+' from "
                                f"{', '.join(FLOW_TYPES)}")
        elif key == "max-disp":
            kw["max_displacement"] = _spec_number(key, val)
        elif key in ("diameter", "intensity"):
            lo, dots, hi = val.partition("..")
            opts[key] = (_spec_number(key, lo), _spec_number(key, hi)) if dots else _spec_number(key, val)
        elif key == "advection":
            opts[key] = val.lower()
        elif key == "v":
            if val != str(GENERATOR_VERSION):
                raise SpecError(f"this orbitscope makes synthetic PIV pairs of generator version {GENERATOR_VERSION}, "
                                f"not v={val}: such pairs cannot be rebuilt here")
        else:
            opts[key] = _spec_number(key, val)
    try:
        return piv_synthetic(**kw, **opts)
    except DataError as exc:
        raise SpecError(str(exc)) from exc


register_data_spec("piv-synthetic", _piv_synthetic_spec, usage="piv-synthetic[:n=N,size=S|HxW,types=A+B,seed=K,...]")


# --------------------------------------------------------------------------- Middlebury .flo

FLO_MAGIC = 202021.25  # the float32 whose little-endian bytes spell "PIEH"
#: Middlebury marks unknown flow by |u| or |v| > 1e9 (its flowIO's UNKNOWN_FLOW_THRESH); we read those as NaN.
FLO_UNKNOWN_THRESHOLD = 1e9
_FLO_UNKNOWN = np.float32(1e10)


def read_flo(path: PathLike) -> np.ndarray:
    """Read a Middlebury ``.flo`` file: (2, H, W) float32 (u, v) in px; unknown flow (|value| > 1e9) -> NaN.

    Format (little-endian): float32 magic 202021.25, int32 width W, int32 height H, then H·W·2
    float32 row-major with (u, v) interleaved per pixel. The header is checked against the file's
    size before the payload is read.
    """
    with open(path, "rb") as fh:
        raw = fh.read(12)
        total = os.fstat(fh.fileno()).st_size
        if len(raw) < 12:
            raise DataError(f"{path}: {len(raw)} bytes, too short for a .flo header (12 bytes: magic, width, height)")
        magic = np.frombuffer(raw, "<f4", 1)[0]
        if magic != np.float32(FLO_MAGIC):
            raise DataError(f"{path}: not a Middlebury .flo file (magic {magic!r}, bytes {raw[:4]!r}; expected "
                            f"{FLO_MAGIC} = b'PIEH'){' (a big-endian file?)' if raw[:4] == b'HEIP' else ''}")
        w, h = (int(v) for v in np.frombuffer(raw, "<i4", 2, 4))
        if w < 1 or h < 1 or w > 1 << 20 or h > 1 << 20:
            raise DataError(f"{path}: implausible .flo size width={w}, height={h} (a corrupt header?)")
        expected = 12 + 8 * w * h
        if total == expected:
            raw += fh.read(expected - 12)
            total = len(raw)  # shorter if the file shrank meanwhile
    if total != expected:
        raise DataError(f"{path}: a {w}x{h} .flo file has {expected} bytes, this one {total} "
                        f"({'truncated' if total < expected else 'trailing data'})")
    flow = np.frombuffer(raw, "<f4", 2 * w * h, 12).reshape(h, w, 2).transpose(2, 0, 1).astype(np.float32)
    flow[:, (np.abs(flow) > FLO_UNKNOWN_THRESHOLD).any(0)] = np.nan
    return flow


def write_flo(path: PathLike, flow: Any) -> None:
    """Write a (2, H, W) flow field as a Middlebury ``.flo`` file (see :func:`read_flo`); NaN and
    infinite values are written as Middlebury's unknown-flow marker 1e10 (read back as NaN)."""
    arr = flow.detach().cpu().numpy() if isinstance(flow, torch.Tensor) else np.asarray(flow)
    if arr.ndim != 3 or arr.shape[0] != 2:
        hint = "; move the (u, v) axis first: flow.transpose(2, 0, 1)" if arr.ndim == 3 and arr.shape[-1] == 2 else ""
        raise DataError(f"flow must have shape (2, H, W) with (u, v) channels, got {arr.shape}{hint}")
    if not np.issubdtype(arr.dtype, np.number):
        raise DataError(f"flow must be numeric, got dtype {arr.dtype}")
    out = np.array(arr.transpose(1, 2, 0), dtype="<f4", order="C", copy=True)
    out[~np.isfinite(out).all(-1)] = _FLO_UNKNOWN
    h, w = arr.shape[1:]
    with open(path, "wb") as fh:
        fh.write(np.array([FLO_MAGIC], "<f4").tobytes() + np.array([w, h], "<i4").tobytes() + out.tobytes())


# --------------------------------------------------------------------------- folders of real pairs

FRAME_EXTENSIONS = (".png", ".tif", ".tiff", ".bmp", ".jpg", ".jpeg", ".pgm", ".ppm")
#: frame-1 / frame-2 name endings, tried in this order (case-insensitive)
_PAIR_SUFFIXES = (("_img1", "_img2"), ("_a", "_b"))


class FlowFolder(Dataset):
    """Real image pairs in a folder (see :func:`flow_folder`): items ``(frames (2, 1, H, W), flow
    (2, H, W))`` float32 tensors, flow all NaN for pairs without ground truth. Frames declaring
    more than ``max_pixels`` (default :data:`~orbitscope.data.image_files.MAX_IMAGE_PIXELS`) are
    refused before they are decoded."""

    def __init__(self, root: PathLike, recursive: bool = False, max_pixels: int | None = None) -> None:
        self.root = Path(root).expanduser().absolute()
        if not self.root.is_dir():
            raise (NotADirectoryError if self.root.exists() else FileNotFoundError)(
                f"{self.root} is not a folder of image pairs (expected <stem>_img1.<ext>, <stem>_img2.<ext> "
                "and optionally <stem>_flow.flo)")
        files = [p for p in (self.root.rglob("*") if recursive else self.root.iterdir())
                 if p.is_file() and not p.name.startswith(".")]
        images = {str(p.with_suffix("")).lower(): p for p in sorted(files, reverse=True)
                  if p.suffix.lower() in FRAME_EXTENSIONS}  # sorted: one deterministic pick per name
        flos = {str(p.with_suffix("")).lower(): p for p in files if p.suffix.lower() == ".flo"}
        items: list[tuple[str, Path, Path, Path | None]] = []
        for key, first in sorted(images.items()):
            for s1, s2 in _PAIR_SUFFIXES:
                if key.endswith(s1):
                    base = key[: -len(s1)]
                    second = images.get(base + s2)
                    if second is None:
                        raise DataError(f"{first} has no partner {Path(base).name}{s2}.<ext> "
                                        f"({', '.join(FRAME_EXTENSIONS)}) in {first.parent}")
                    stem = str(first.relative_to(self.root).with_suffix(""))[: -len(s1)]
                    items.append((stem, first, second, flos.get(base + "_flow")))
                    break
        if not items:
            raise DataError(f"no image pairs in {self.root}: expected <stem>_img1.<ext> and <stem>_img2.<ext> "
                            f"(or <stem>_a / <stem>_b; ext one of {', '.join(FRAME_EXTENSIONS)}), ground truth "
                            "optionally in <stem>_flow.flo")
        self.items = items
        self.max_pixels = max_pixels
        self.data_id = f"flow-folder:{self.root}" + (",recursive" if recursive else "")
        self._ref: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.items)

    @property
    def stems(self) -> list[str]:
        return [it[0] for it in self.items]

    @property
    def flow_type(self) -> np.ndarray:
        """Per item: the file stem without trailing ``_<digits>`` groups (NERO-style names such as
        ``backstep_Re1000_00001`` -> ``backstep_Re1000``)."""
        return np.array([re.sub(r"(_\d+)+$", "", Path(s).name) or Path(s).name for s in self.stems], dtype=str)

    @property
    def sample_groups(self) -> dict[str, np.ndarray]:
        """Recorded by :func:`~orbitscope.evaluate` per sample, so results split by flow type."""
        return {"flow_type": self.flow_type}

    @property
    def labelled(self) -> np.ndarray:
        """Per item: whether a ``<stem>_flow.flo`` ground truth exists."""
        return np.array([it[3] is not None for it in self.items], bool)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        stem, p1, p2, pf = self.items[index]
        f1, f2 = (read_image(p, max_pixels=self.max_pixels) for p in (p1, p2))
        if f1.shape != f2.shape:
            raise DataError(f"{p1} is {f1.shape[0]}x{f1.shape[1]} (HxW) but {p2} is {f2.shape[0]}x{f2.shape[1]}")
        if self._ref is None:
            self._ref = f1.shape  # type: ignore[assignment]
        elif f1.shape != self._ref:
            raise DataError(f"{p1} is {f1.shape[0]}x{f1.shape[1]} (HxW) but earlier pairs are "
                            f"{self._ref[0]}x{self._ref[1]}: keep one size per folder")
        flow = read_flo(pf) if pf is not None else np.full((2, *f1.shape), np.nan, np.float32)
        if flow.shape[1:] != f1.shape:
            raise DataError(f"{pf} is {flow.shape[1]}x{flow.shape[2]} (HxW) but its frames are {f1.shape[0]}x{f1.shape[1]}")
        return torch.from_numpy(np.stack([f1, f2])[:, None]), torch.from_numpy(flow)

    def subset(self, indices: slice | Sequence[int] | np.ndarray, data_id: str | None = None) -> FlowFolder:
        picked = list(range(len(self)))[indices] if isinstance(indices, slice) else \
            [int(i) for i in np.asarray(indices).reshape(-1)]
        new = object.__new__(FlowFolder)
        new.__dict__.update(self.__dict__)
        new.items = [self.items[i] for i in picked]
        new.data_id = data_id if data_id is not None else self.data_id + subset_tag(np.asarray(picked, np.int64))
        return new


def flow_folder(path: PathLike, recursive: bool = False, max_pixels: int | None = None) -> FlowFolder:
    """Image pairs ``<stem>_img1.<ext>`` + ``<stem>_img2.<ext>`` (NERO / PIV-LiteFlowNet style, e.g.
    ``backstep_Re1000_00001_img1.tif``; also openpiv's ``<stem>_a`` + ``<stem>_b``), suffixes and
    extensions (:data:`FRAME_EXTENSIONS`) case-insensitive, with optional ground truth
    ``<stem>_flow.flo``. Frames are read as grey in [0, 1] (8-bit / 255, 16-bit / 65535, colour as
    luma; :func:`~orbitscope.data.image_files.read_image`). Pairs without a ``.flo`` are unlabelled:
    flow all NaN, ``labelled[i]`` False. Sorted by stem; ``recursive`` also searches sub-folders
    (stems then include the relative folder). A frame declaring more than ``max_pixels`` pixels
    (width × height; default :data:`~orbitscope.data.image_files.MAX_IMAGE_PIXELS`, 8192², or
    ``$ORBITSCOPE_MAX_IMAGE_PIXELS``) is refused before it is decoded."""
    return FlowFolder(path, recursive, max_pixels)


def _flow_folder_spec(rest: str) -> FlowFolder:
    if not rest:
        raise SpecError("expected flow-folder:PATH[,recursive] (a folder of <stem>_img1.<ext>, <stem>_img2.<ext> "
                        "[, <stem>_flow.flo])")
    recursive = rest.endswith(",recursive")
    return FlowFolder(rest[: -len(",recursive")] if recursive else rest, recursive)


register_data_spec("flow-folder", _flow_folder_spec, usage="flow-folder:PATH[,recursive]")

"""PIV data (orbitscope.data.piv): analytic fields against closed forms written out here, particle
pairs, determinism, Middlebury .flo files, folders of pairs and the data specs."""

import math
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from orbitscope.data import parse_data_spec
from orbitscope.data import piv
from orbitscope.errors import DataError, SpecError


def polar(field, centre, r, theta):
    """Tangential (counter-clockwise as displayed) and radial speed at (r, θ) about ``centre``;
    θ measured from +x towards −y (up on screen)."""
    dx, dy = r * np.cos(theta), -r * np.sin(theta)
    u, v = field.velocity(centre[0] + dx, centre[1] + dy)
    # CCW as displayed at angle θ is the direction (−sin θ, −cos θ) in image axes (y down)
    return u * -np.sin(theta) + v * -np.cos(theta), (u * dx + v * dy) / r


def fd_divergence(field, x, y, eps=1e-4):
    """Central differences of the point-wise velocity; also returns the gradient scale."""
    ux = (field.velocity(x + eps, y)[0] - field.velocity(x - eps, y)[0]) / (2 * eps)
    vy = (field.velocity(x, y + eps)[1] - field.velocity(x, y - eps)[1]) / (2 * eps)
    return ux + vy, np.abs(ux) + np.abs(vy)


# --------------------------------------------------------------------------- analytic fields


def test_every_flow_type_builds_a_float32_grid() -> None:
    assert piv.FLOW_TYPES == ("uniform", "shear", "rankine", "lamb-oseen", "source-sink", "taylor-green", "backstep",
                              "turbulence")
    for name in piv.FLOW_TYPES:
        g = piv.flow_field(name, (40, 56)).grid()
        assert g.shape == (2, 40, 56) and g.dtype == np.float32 and np.isfinite(g).all() and np.abs(g).max() > 0
    with pytest.raises(DataError, match="unknown flow type 'vortex'.*rankine"):
        piv.flow_field("vortex", 32)


def test_uniform_and_shear() -> None:
    g = piv.uniform_flow((5, 7), u=1.25, v=-0.5).grid()
    assert (g[0] == 1.25).all() and (g[1] == -0.5).all()
    f = piv.shear_flow((9, 11), rate=0.2, centre=(3.0, 4.0))
    g = f.grid(np.float64)
    rows = np.arange(9.0)[:, None] * np.ones(11)
    np.testing.assert_allclose(g[0], 0.2 * (rows - 4.0), atol=1e-15)
    assert (g[1] == 0).all()
    # turned by 90°: flow along +y, varying across x: v = −γ (x − c_x)
    u, v = piv.shear_flow((9, 11), rate=0.2, centre=(3.0, 4.0), angle=90).velocity(5.0, 1.0)
    assert abs(u) < 1e-15 and v == pytest.approx(-0.4)


def test_rankine_speed_profile() -> None:
    c, big_r, gamma = (30.5, 20.0), 6.0, 80.0
    f = piv.rankine_vortex((48, 64), centre=c, core_radius=big_r, circulation=gamma)
    for r in (0.5, 3.0, 6.0, 9.0, 24.0):
        expected = gamma * r / (2 * math.pi * big_r ** 2) if r <= big_r else gamma / (2 * math.pi * r)
        for theta in (0.0, 1.0, 2.5, 4.0):
            s, radial = polar(f, c, r, theta)
            assert s == pytest.approx(expected, rel=1e-12) and abs(radial) < 1e-12
    # counter-clockwise as displayed: right of the centre the flow goes up (v < 0)
    assert f.velocity(c[0] + 3, c[1])[1] < 0
    assert np.abs(f.velocity(*c)).max() == 0


def test_lamb_oseen_limits_and_peak() -> None:
    c, rc, gamma = (16.0, 16.0), 5.0, 60.0
    f = piv.lamb_oseen_vortex(33, centre=c, core_radius=rc, circulation=gamma)
    s0, _ = polar(f, c, 1e-4 * rc, 0.3)  # r -> 0: solid-body rotation Γ r / (2π r_c²)
    assert s0 == pytest.approx(gamma * 1e-4 * rc / (2 * math.pi * rc ** 2), rel=1e-6)
    for r in (30 * rc, 100 * rc):  # r -> ∞: the point vortex Γ / (2π r)
        assert polar(f, c, r, 1.1)[0] == pytest.approx(gamma / (2 * math.pi * r), rel=1e-12)
    r = np.linspace(0.01, 5, 50001) * rc
    s = polar(f, c, r, 0.7)[0]
    assert r[s.argmax()] / rc == pytest.approx(1.12091, abs=1e-4)  # the known peak radius
    assert s.max() / (gamma / (2 * math.pi * rc)) == pytest.approx(0.63817, abs=1e-4)
    assert np.isfinite(f.velocity(*c)).all() and np.abs(f.velocity(*c)).max() == 0


def test_source_sink_profile_and_divergence() -> None:
    c, big_r, q = (20.0, 24.0), 5.0, -40.0
    f = piv.source_sink(48, centre=c, core_radius=big_r, strength=q)
    for r in (1.0, 4.0, 7.0, 20.0):
        s, radial = polar(f, c, r, 0.9)
        assert abs(s) < 1e-12
        assert radial == pytest.approx(q * r / (2 * math.pi * big_r ** 2) if r <= big_r else q / (2 * math.pi * r))
    div_in, _ = fd_divergence(f, np.array([c[0] + 1.0]), np.array([c[1] - 2.0]))
    div_out, _ = fd_divergence(f, np.array([c[0] + 9.0]), np.array([c[1] + 3.0]))
    assert div_in[0] == pytest.approx(q / (math.pi * big_r ** 2), rel=1e-6) and abs(div_out[0]) < 1e-8


def test_taylor_green_values_and_divergence() -> None:
    f = piv.taylor_green((64, 48), amplitude=1.5, wavelength=24.0, phase=(2.0, 3.0))
    g = f.grid(np.float64)
    k = 2 * math.pi / 24
    assert g[0, 10, 7] == pytest.approx(1.5 * math.cos(k * 5) * math.sin(k * 7))
    assert g[1, 10, 7] == pytest.approx(-1.5 * math.sin(k * 5) * math.cos(k * 7))
    div = np.gradient(g[0], axis=1) + np.gradient(g[1], axis=0)
    assert np.abs(div[1:-1, 1:-1]).max() < 1e-12 * np.abs(np.gradient(g[0], axis=1)).max() + 1e-14


def test_divergence_free_fields_by_finite_differences() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.uniform(0, 63, 400), rng.uniform(0, 63, 400)
    for name in ("shear", "rankine", "lamb-oseen", "taylor-green", "backstep", "turbulence"):
        div, scale = fd_divergence(piv.flow_field(name, 64), x, y)
        assert np.abs(div).max() <= 1e-6 * scale.max(), name


def test_backstep_model() -> None:
    f = piv.backward_step((64, 96), speed=2.0, step_height=12.0, step_x=10.0, reattachment=60.0)
    p = f.params
    xs, h, big_l, yf = p["step_x"], p["step_height"], p["reattachment"], p["floor_y"]
    x = np.linspace(-10, 120, 50)
    assert np.abs(f.velocity(x, np.full_like(x, yf))[1]).max() < 1e-12  # the floor is a streamline
    u, v = f.velocity(xs + big_l / 2, yf - 0.15 * h)
    assert u < -0.1 * 2.0  # reverse flow in the recirculation bubble
    u, v = f.velocity(xs - 20.0, 5.0)  # free stream far above the step, upstream
    assert u == pytest.approx(2.0, rel=1e-6) and abs(v) < 1e-6
    assert abs(f.velocity(xs - 10.0, yf - 0.4 * h)[0]) < 1e-4 * 2.0  # nearly at rest below the corner
    assert f.velocity(xs + 1.5 * big_l, yf - 0.5 * h)[0] > 0  # forward again after reattachment


def radial_spectrum(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E(k) = 2π k · mean over the shell |k| ∈ [k − ½, k + ½) (in lattice units) of |û|² + |v̂|²."""
    h, w = g.shape[1:]
    e = (np.abs(np.fft.fft2(g[0])) ** 2 + np.abs(np.fft.fft2(g[1])) ** 2)
    kx, ky = np.meshgrid(np.fft.fftfreq(w) * w, np.fft.fftfreq(h) * h)
    shell = np.rint(np.hypot(kx, ky)).astype(int)
    ks = np.arange(1, min(h, w) // 2)
    mean = np.array([e[shell == k].mean() for k in ks])
    return ks / w, 2 * np.pi * ks * mean


def test_turbulence_spectrum_divergence_and_scale() -> None:
    f = piv.fourier_turbulence(128, rms=1.7, k_min=1 / 64, k_max=1 / 4, seed=5)
    g = f.grid(np.float64)
    assert math.sqrt(np.mean(g[0] ** 2 + g[1] ** 2)) == pytest.approx(1.7, rel=1e-12)
    k, e = radial_spectrum(g)
    sel = (k >= 1 / 32) & (k <= 1 / 5)
    slope = np.polyfit(np.log(k[sel]), np.log(e[sel]), 1)[0]
    assert slope == pytest.approx(-5 / 3, abs=0.08)
    assert e[k > 0.3].max() < 1e-20 * e.max()  # nothing outside the band
    # spectral divergence: i κ·F̂ is zero mode by mode
    kx, ky = np.meshgrid(np.fft.fftfreq(128), np.fft.fftfreq(128))
    div = np.fft.ifft2(1j * kx * np.fft.fft2(g[0]) + 1j * ky * np.fft.fft2(g[1])).real
    assert np.abs(div).max() < 1e-12
    # the point-wise path agrees with the grid path, and the field is periodic over the image
    x, y = piv.pixel_centres(128)
    np.testing.assert_allclose(f.velocity(x[::7, ::5], y[::7, ::5]), g[:, ::7, ::5], atol=1e-12)
    np.testing.assert_allclose(f.velocity(3.3 + 128, 7.1 - 128), f.velocity(3.3, 7.1), atol=1e-12)
    again, other = piv.fourier_turbulence(128, rms=1.7, k_min=1 / 64, k_max=1 / 4, seed=5), \
        piv.fourier_turbulence(128, rms=1.7, k_min=1 / 64, k_max=1 / 4, seed=6)
    assert (again.grid() == f.grid()).all() and not np.allclose(other.grid(), f.grid())
    with pytest.raises(DataError, match="no Fourier mode"):
        piv.fourier_turbulence(16, k_min=0.01, k_max=0.02)


# --------------------------------------------------------------------------- particle images


def test_render_matches_pixel_integrals() -> None:
    p = piv.Particles(np.array([5.3, 11.8, 0.2]), np.array([7.6, 3.1, 12.9]), np.array([0.9, 0.5, 0.7]),
                      np.array([2.0, 3.5, 4.0]))
    img = piv.render_particles(p, (14, 16))
    ref = np.zeros((14, 16))
    for xp, yp, i0, d in zip(p.x, p.y, p.intensity, p.diameter):
        a = math.sqrt(8) / d
        for i in range(14):
            for j in range(16):
                fx = math.erf(a * (j + 0.5 - xp)) - math.erf(a * (j - 0.5 - xp))
                fy = math.erf(a * (i + 0.5 - yp)) - math.erf(a * (i - 0.5 - yp))
                ref[i, j] += i0 * math.pi * d * d / 32 * fx * fy
    np.testing.assert_allclose(img, ref, atol=1e-9)
    # a big particle's brightest pixel is close to its peak intensity; its light sums to I₀ π d² / 8
    big = piv.render_particles(piv.Particles(np.array([20.0]), np.array([20.0]), np.array([0.8]), np.array([8.0])), 41)
    assert big.max() == pytest.approx(0.8, rel=0.03) and big.sum() == pytest.approx(0.8 * math.pi * 64 / 8, rel=1e-9)


def centroid(img: np.ndarray) -> np.ndarray:
    rows, cols = np.indices(img.shape)
    return np.array([(img * cols).sum(), (img * rows).sum()]) / img.sum()


def test_single_particle_moves_by_the_field() -> None:
    field = piv.rankine_vortex(64, centre=(28.0, 30.0), core_radius=6.0, circulation=90.0)
    opts = piv.ParticleOptions(diameter=3.0, intensity=0.8, noise=0.0)
    for x0, y0 in ((36.3, 25.7), (30.6, 31.2)):
        one = piv.Particles(np.array([x0]), np.array([y0]), np.array([0.8]), np.array([3.0]))
        pair = piv.particle_pair(field, 0, opts, first=one)
        shift = centroid(pair.frames[1, 0].astype(np.float64)) - centroid(pair.frames[0, 0].astype(np.float64))
        assert np.abs(shift - field.velocity(x0, y0)).max() < 0.05
        assert np.abs(shift).max() > 1.0
    # rk2 follows the pathline (here a solid-body rotation by Ω = Γ / (2π R²) rad/frame): second order
    rk = piv.particle_pair(field, 0, piv.ParticleOptions(noise=0.0, advection="rk2"), first=one).second
    om = -90.0 / (2 * math.pi * 36)  # counter-clockwise as displayed = clockwise in image axes (y down)
    dx, dy = x0 - 28.0, y0 - 30.0
    exact = np.array([28.0 + dx * math.cos(om) - dy * math.sin(om), 30.0 + dx * math.sin(om) + dy * math.cos(om)])
    euler_err = np.abs(np.array([x0, y0]) + field.velocity(x0, y0) - exact).max()
    rk_err = np.abs(np.array([rk.x[0], rk.y[0]]) - exact).max()
    assert rk_err < 0.01 and rk_err < euler_err / 20


def test_frame_two_is_frame_one_particles_advected() -> None:
    field = piv.taylor_green(48, amplitude=2.0, wavelength=30.0)
    pair = piv.particle_pair(field, np.random.default_rng(1), piv.ParticleOptions(noise=0.0, density=0.08))
    f1, f2 = pair.first, pair.second
    d = field.velocity(f1.x, f1.y)
    np.testing.assert_array_equal(f2.x, f1.x + d[0])
    np.testing.assert_array_equal(f2.y, f1.y + d[1])
    np.testing.assert_array_equal(pair.frames[1, 0], np.clip(piv.render_particles(f2, 48), 0, 1).astype(np.float32))
    np.testing.assert_array_equal(pair.frames[0, 0], np.clip(piv.render_particles(f1, 48), 0, 1).astype(np.float32))
    assert (pair.flow == field.grid()).all()
    # particles cover the image plus a margin, at the asked density
    assert f1.x.min() < -0.5 and f1.x.max() > 47.5
    inside = ((f1.x > -0.5) & (f1.x < 47.5) & (f1.y > -0.5) & (f1.y < 47.5)).sum()
    assert inside == pytest.approx(0.08 * 48 * 48, rel=0.15)


def test_out_of_plane_loss() -> None:
    field = piv.uniform_flow(64, u=1.5, v=0.5)
    pair = piv.particle_pair(field, 7, piv.ParticleOptions(loss=0.2, noise=0.0))
    n, f1 = len(pair.first), pair.first
    seen = (f1.x >= -0.5) & (f1.x < 63.5) & (f1.y >= -0.5) & (f1.y < 63.5)
    assert (~pair.kept[seen]).sum() == round(0.2 * seen.sum())  # the share of frame 1's visible particles
    lost = int((~pair.kept).sum())
    assert lost == round(0.2 * seen.sum()) + round(0.2 * (~seen).sum()) and len(pair.second) == n
    np.testing.assert_array_equal(pair.second.x[: n - lost], pair.first.x[pair.kept] + 1.5)
    new_x = pair.second.x[n - lost:]
    assert not np.isin(new_x, pair.first.x + 1.5).any()  # replacements are fresh particles
    none = piv.particle_pair(field, 7, piv.ParticleOptions(loss=0.0, noise=0.0))
    assert none.kept.all()


def test_noise_and_range() -> None:
    pair = piv.particle_pair(piv.uniform_flow(32), 2, piv.ParticleOptions(noise=0.05, density=0.2))
    assert pair.frames.dtype == np.float32 and pair.frames.shape == (2, 1, 32, 32)
    assert pair.frames.min() == 0.0 and pair.frames.max() <= 1.0
    for bad in (dict(density=0), dict(loss=1.0), dict(diameter=(4, 2)), dict(intensity=(0.5, 1.5)),
                dict(advection="rk4"), dict(noise=-1)):
        with pytest.raises(DataError):
            piv.ParticleOptions(**bad)


# --------------------------------------------------------------------------- the dataset


def test_dataset_items_and_determinism() -> None:
    ds = piv.piv_synthetic(10, size=32, seed=3, max_displacement=3.0)
    frames, flow = ds[4]
    assert frames.dtype == torch.float32 and frames.shape == (2, 1, 32, 32)
    assert flow.dtype == torch.float32 and flow.shape == (2, 32, 32)
    assert 0 <= float(frames.min()) and float(frames.max()) <= 1
    peak = float(flow.norm(dim=0).max())
    assert 1.5 - 1e-5 <= peak <= 3.0 + 1e-5
    assert list(ds.flow_type) == [piv.FLOW_TYPES[i % 8] for i in range(10)] and ds.labelled.all()
    again = piv.piv_synthetic(50, size=32, seed=3, max_displacement=3.0)  # item i does not depend on n
    for i in (0, 4, 9):
        assert ds[i][0].numpy().tobytes() == again[i][0].numpy().tobytes()
        assert ds[i][1].numpy().tobytes() == again[i][1].numpy().tobytes()
    assert not torch.equal(ds[1][0], ds[9][0])
    assert not torch.equal(ds[2][0], piv.piv_synthetic(10, size=32, seed=4, max_displacement=3.0)[2][0])
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert batch[0].shape == (4, 2, 1, 32, 32) and batch[1].shape == (4, 2, 32, 32)
    with pytest.raises(IndexError):
        ds[10]


def test_dataset_types_subsets_and_ids() -> None:
    ds = piv.PIVPairs(6, size=(24, 40), flow_types=("rankine", "turbulence"), seed=1)
    assert list(ds.flow_type) == ["rankine", "turbulence"] * 3
    assert ds.data_id == ("piv-synthetic:n=6,size=24x40,types=rankine+turbulence,seed=1,max-disp=4,density=0.05,"
                          "diameter=2..4,intensity=0.6..1,noise=0.02,loss=0,advection=euler,v=1")
    sub = ds.subset([1, 3])
    assert list(sub.flow_type) == ["turbulence", "turbulence"] and sub.data_id.startswith(ds.data_id + "[subset:2:")
    assert torch.equal(sub[1][0], ds[3][0])
    head = ds.subset(slice(0, 2))
    assert head.data_id == ds.data_id + "[0:2]" and len(head) == 2
    assert ds.field(0).name == "rankine" and ds.field(0).params["scale"] > 0
    with pytest.raises(DataError, match="flow_types"):
        piv.PIVPairs(4, flow_types=("rankine", "cylinder"))


def test_data_spec() -> None:
    ds = parse_data_spec("piv-synthetic:n=12,size=32,types=uniform+rankine,seed=2,max-disp=2.5,loss=0.1,diameter=3")
    assert isinstance(ds, piv.PIVPairs) and len(ds) == 12 and ds.size == (32, 32)
    assert ds.flow_types == ("uniform", "rankine") and ds.options.loss == 0.1 and ds.options.diameter == (3.0, 3.0)
    rebuilt = parse_data_spec(ds.data_id)
    assert rebuilt.data_id == ds.data_id and torch.equal(rebuilt[5][0], ds[5][0])
    short = parse_data_spec("piv-synthetic:n=12,size=32,types=uniform+rankine,seed=2,max-disp=2.5,loss=0.1,"
                            "diameter=3@4")
    assert len(short) == 4 and short.data_id == ds.data_id + "@4"
    default = parse_data_spec("piv-synthetic")
    assert len(default) == 64 and default.flow_types == piv.FLOW_TYPES and default.size == (64, 64)
    assert parse_data_spec("piv-synthetic:size=16x24,types=all,intensity=0.5..0.9,advection=rk2").size == (16, 24)
    for bad, match in [("piv-synthetic:n=4,colour=red", "unknown key 'colour'; accepted keys: n, size, types"),
                       ("piv-synthetic:n", "expected KEY=VALUE.*accepted keys"),
                       ("piv-synthetic:types=uniform+cylinder", "unknown flow type.*cylinder"),
                       ("piv-synthetic:n=x", "n must be an integer"),
                       ("piv-synthetic:loss=2", "loss must be in"),
                       ("piv-synthetic:n=2,n=3", "given twice"),
                       ("piv-synthetic:v=9", "generator version")]:
        with pytest.raises(SpecError, match=match):
            parse_data_spec(bad)


# --------------------------------------------------------------------------- .flo and folders


def test_flo_round_trip_is_bit_exact(tmp_path) -> None:
    flow = np.random.default_rng(0).normal(0, 3, (2, 5, 7)).astype(np.float32)
    flow[0, 1, 2] = np.float32(-0.0)
    piv.write_flo(tmp_path / "a.flo", flow)
    back = piv.read_flo(tmp_path / "a.flo")
    assert back.dtype == np.float32 and back.shape == (2, 5, 7) and back.tobytes() == flow.tobytes()
    piv.write_flo(tmp_path / "t.flo", torch.from_numpy(flow))
    assert (tmp_path / "t.flo").read_bytes() == (tmp_path / "a.flo").read_bytes()
    gaps = np.ascontiguousarray(flow.transpose(1, 2, 0)).transpose(2, 0, 1)  # a view of an (H, W, 2) array
    gaps[:, 0, 0] = np.nan
    piv.write_flo(tmp_path / "n.flo", gaps)
    assert np.isnan(piv.read_flo(tmp_path / "n.flo")[:, 0, 0]).all()
    assert np.isnan(gaps[:, 0, 0]).all()  # the caller's array is left alone (NaN written as 1e10)


def test_flo_layout_and_errors(tmp_path) -> None:
    # width 3, height 2; pixel (row i, col j) holds (u, v) = (10 i + j, −(10 i + j))
    values = [c for i in range(2) for j in range(3) for c in (10 * i + j, -(10 * i + j))]
    (tmp_path / "h.flo").write_bytes(struct.pack("<fii", 202021.25, 3, 2) + struct.pack("<12f", *values))
    assert (tmp_path / "h.flo").read_bytes()[:4] == b"PIEH"
    flow = piv.read_flo(tmp_path / "h.flo")
    assert flow.shape == (2, 2, 3) and flow[0, 1, 2] == 12 and flow[1, 1, 2] == -12 and flow[0, 0, 1] == 1
    (tmp_path / "bad.flo").write_bytes(struct.pack("<fii", 1.0, 3, 2) + bytes(48))
    with pytest.raises(DataError, match="magic.*202021.25"):
        piv.read_flo(tmp_path / "bad.flo")
    (tmp_path / "short.flo").write_bytes(struct.pack("<fii", 202021.25, 3, 2) + bytes(40))
    with pytest.raises(DataError, match="has 60 bytes, this one 52 .truncated"):
        piv.read_flo(tmp_path / "short.flo")
    (tmp_path / "tiny.flo").write_bytes(b"PIEH")
    with pytest.raises(DataError, match="too short"):
        piv.read_flo(tmp_path / "tiny.flo")
    (tmp_path / "neg.flo").write_bytes(struct.pack("<fii", 202021.25, -3, 2))
    with pytest.raises(DataError, match="implausible"):
        piv.read_flo(tmp_path / "neg.flo")
    with pytest.raises(DataError, match="transpose"):
        piv.write_flo(tmp_path / "x.flo", np.zeros((4, 5, 2)))


def test_flow_folder(tmp_path) -> None:
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (3, 2, 12, 16), dtype=np.uint8)
    flow = rng.normal(0, 1, (2, 12, 16)).astype(np.float32)
    Image.fromarray(imgs[0, 0]).save(tmp_path / "backstep_Re1000_00001_img1.tif")  # NERO-style names
    Image.fromarray(imgs[0, 1]).save(tmp_path / "backstep_Re1000_00001_img2.tif")
    piv.write_flo(tmp_path / "backstep_Re1000_00001_flow.flo", flow)
    Image.fromarray(imgs[1, 0]).save(tmp_path / "run_img1.png")  # no ground truth
    Image.fromarray(imgs[1, 1]).save(tmp_path / "run_img2.png")
    Image.fromarray(imgs[2, 0].astype(np.uint16) * 257).save(tmp_path / "exp_002_a.png")  # 16-bit, openpiv-style
    Image.fromarray(imgs[2, 1].astype(np.uint16) * 257).save(tmp_path / "exp_002_b.png")
    (tmp_path / "notes.txt").write_text("ignored")
    ds = piv.flow_folder(tmp_path)
    assert ds.stems == ["backstep_Re1000_00001", "exp_002", "run"]
    assert list(ds.labelled) == [True, False, False]
    assert list(ds.flow_type) == ["backstep_Re1000", "exp", "run"]
    frames, f = ds[0]
    assert frames.dtype == torch.float32 and frames.shape == (2, 1, 12, 16)
    np.testing.assert_array_equal(frames[:, 0].numpy(), imgs[0].astype(np.float32) / np.float32(255))
    assert f.numpy().tobytes() == flow.tobytes()
    frames, f = ds[2]
    assert torch.isnan(f).all() and f.shape == (2, 12, 16)
    np.testing.assert_allclose(ds[1][0][:, 0].numpy(), imgs[2] / 255, atol=1e-6)
    spec = parse_data_spec(f"flow-folder:{tmp_path}@2")
    assert len(spec) == 2 and spec.data_id == f"flow-folder:{tmp_path}@2"
    (tmp_path / "lonely_img1.png").write_bytes((tmp_path / "run_img1.png").read_bytes())
    with pytest.raises(DataError, match="lonely_img1.png has no partner lonely_img2"):
        piv.flow_folder(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no image pairs.*_img1"):
        piv.flow_folder(empty)
    with pytest.raises(FileNotFoundError):
        piv.flow_folder(tmp_path / "missing")


def test_a_recursive_folder_has_its_own_data_id(tmp_path):
    from PIL import Image

    from orbitscope.data.piv import flow_folder
    from orbitscope.data.specs import parse_data_spec

    (tmp_path / "sub").mkdir()
    for folder in (tmp_path, tmp_path / "sub"):
        for k in (1, 2):
            Image.fromarray(np.full((8, 8), 40 * k, np.uint8)).save(folder / f"p_img{k}.png")
    flat, deep = flow_folder(tmp_path), flow_folder(tmp_path, recursive=True)
    assert (len(flat), len(deep)) == (1, 2) and flat.data_id != deep.data_id
    assert len(parse_data_spec(deep.data_id)) == 2

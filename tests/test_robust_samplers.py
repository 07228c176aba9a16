"""Perturbation samplers: distributions against closed forms, conventions, parsing, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from orbitscope.kinds import warp_images
from orbitscope.robust.samplers import (
    GaussianNoise,
    L2Uniform,
    LinfUniform,
    ProductSampler,
    RandomBrightness,
    RandomRotation,
    RandomScale,
    RandomShift,
    list_perturbations,
    parse_perturbation,
    sampler_from_spec,
)
from orbitscope.group.elements import Transforms


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


SPECS = ["linf:8/255", "linf:8/255:8bit", "linf:0.1", "l2:0.5", "gaussian:0.1", "rotation:15", "shift:3",
         "shift:2.5:continuous", "scale:0.9:1.1", "brightness:0.8:1.2", "rotation:15+scale:0.9:1.1",
         "rotation:15+linf:8/255", "shift:2+brightness:0.9:1.1+gaussian:0.05"]


@pytest.mark.parametrize("spec", SPECS)
def test_parse_round_trip_shape_range_determinism(spec: str) -> None:
    s = parse_perturbation(spec)
    assert str(s) == spec and parse_perturbation(str(s)) == s and sampler_from_spec(s.spec()) == s
    x = torch.rand(6, 1, 12, 12, generator=gen(1))
    a, b, c = s.sample(x, gen(3)), s.sample(x, gen(3)), s.sample(x, gen(4))
    assert a.shape == x.shape and a.dtype == x.dtype
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_parse_numbers_and_errors() -> None:
    assert parse_perturbation("linf:8/255").eps == pytest.approx(8 / 255)
    assert parse_perturbation(" rotation:15 + scale:0.9:1.1 ").factors[1].low == 0.9
    for bad in ["", "linf", "linf:0.1:0.2", "linf:-0.1", "foo:1", "scale:1.1:0.9", "rotation:200", "shift:2.5",
                "l2:0.1:8bit", "linf:x", "linf:1/0"]:
        with pytest.raises(ValueError):
            parse_perturbation(bad)
    assert set(list_perturbations()) == {"linf", "l2", "gaussian", "rotation", "shift", "scale", "brightness"}


def test_bad_inputs() -> None:
    s = LinfUniform(0.1)
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        s.sample(torch.rand(3, 4, 4), gen())
    with pytest.raises(TypeError):
        s.sample(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), gen())


def test_linf_is_uniform_on_the_clipped_box() -> None:
    """Values 0, 0.05, 0.5, 1 with ε = 0.1: the box is clamp(x ± ε, 0, 1); within it, uniform (KS test)."""
    x0 = torch.tensor([0.0, 0.05, 0.5, 1.0])
    n = 4000
    x = x0.reshape(1, 4, 1, 1).expand(n, 4, 1, 1)
    out = LinfUniform(0.1).sample(x, gen(0)).reshape(n, 4).double().numpy()
    for j, v in enumerate(x0.tolist()):
        lo, hi = max(v - 0.1, 0.0), min(v + 0.1, 1.0)
        col = out[:, j]
        assert col.min() >= lo - 1e-7 and col.max() <= hi + 1e-7
        assert stats.kstest((col - lo) / (hi - lo), "uniform").pvalue > 1e-3


def test_linf_quantisation_is_floor_of_the_continuous_sample() -> None:
    x = torch.rand(5, 3, 6, 6, generator=gen(2))
    cont = LinfUniform(8 / 255).sample(x, gen(7))
    quant = LinfUniform(8 / 255, quantize=True).sample(x, gen(7))
    assert torch.equal(quant, torch.floor(cont * 255) / 255)
    grid = (quant * 255).round()
    assert torch.allclose(quant * 255, grid, atol=1e-4)
    # on the 8-bit grid with 255ε an integer, quantised samples stay in the box
    x8 = torch.floor(torch.rand(50, 1, 8, 8, generator=gen(3)) * 256).clamp(max=255) / 255
    q8 = LinfUniform(8 / 255, quantize=True).sample(x8, gen(4))
    assert float((q8 - x8).abs().max()) <= 8 / 255 + 1e-6


def test_l2_radius_law_and_ball() -> None:
    """d = 4 values, far from the cube's faces: |x' − x| ≤ ε and (r/ε)^d ~ U[0, 1]; directions unbiased."""
    n, eps = 4000, 0.2
    x = torch.full((n, 1, 2, 2), 0.5)
    out = L2Uniform(eps).sample(x, gen(5))
    delta = (out - x).reshape(n, 4).double()
    r = delta.norm(dim=1).numpy()
    assert r.max() <= eps + 1e-6
    assert stats.kstest((r / eps) ** 4, "uniform").pvalue > 1e-3
    unit = (delta / delta.norm(dim=1, keepdim=True)).numpy()
    assert np.abs(unit.mean(0)).max() < 4 / math.sqrt(n)  # each coordinate has variance 1/4


def test_l2_clips_to_valid_range() -> None:
    x = torch.zeros(100, 1, 4, 4)
    out = L2Uniform(2.0).sample(x, gen(0))
    assert float(out.min()) == 0.0 and float(out.max()) <= 1.0


def test_gaussian_noise_std() -> None:
    x = torch.full((20, 1, 16, 16), 0.5)
    out = GaussianNoise(0.05).sample(x, gen(1))
    d = (out - x).flatten().double().numpy()
    assert abs(d.std() - 0.05) < 0.002 and abs(d.mean()) < 0.002


def _angles(t: Transforms) -> np.ndarray:
    # y-down convention: linear = [[cos, sin], [-sin, cos]]
    return np.degrees(np.arctan2(t.linear[:, 0, 1], t.linear[:, 0, 0]))


def test_rotation_angles_uniform_and_warp_matches() -> None:
    s = RandomRotation(15)
    t = s.elements(3000, gen(0), torch.device("cpu"))
    a = _angles(t)
    assert a.min() >= -15 and a.max() <= 15
    assert stats.kstest((a + 15) / 30, "uniform").pvalue > 1e-3
    # sample() is warp_images of those elements, paired with the rows
    x = torch.rand(8, 1, 10, 10, generator=gen(1))
    expected = warp_images(x, s.elements(8, gen(2), torch.device("cpu")), layout="paired")
    assert torch.equal(s.sample(x, gen(2)), expected)


def test_rotation_direction_convention() -> None:
    """A pixel right of the centre moves up (y down) under a positive, counter-clockwise angle."""
    x = torch.zeros(200, 1, 21, 21)
    x[:, 0, 10, 16] = 1.0
    out = RandomRotation(90).sample(x, gen(3))
    t = RandomRotation(90).elements(200, gen(3), torch.device("cpu"))
    a = _angles(t)
    rows = (out[:, 0].sum(2) * torch.arange(21.0)).sum(1) / out[:, 0].sum((1, 2))
    pos, neg = a > 30, a < -30
    assert bool((rows[torch.from_numpy(pos)] < 10).all()) and bool((rows[torch.from_numpy(neg)] > 10).all())


def test_integer_shift_is_an_exact_zero_filled_move() -> None:
    s = RandomShift(2)
    x = torch.rand(40, 1, 9, 9, generator=gen(0))
    t = s.elements(40, gen(5), torch.device("cpu"))
    out = s.sample(x, gen(5))
    assert set(np.unique(t.shift).tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    for i in range(40):
        tx, ty = (int(v) for v in t.shift[i])
        ref = torch.zeros(1, 9, 9)
        src = x[i, :, max(0, -ty) : 9 - max(0, ty), max(0, -tx) : 9 - max(0, tx)]
        ref[:, max(0, ty) : 9 - max(0, -ty), max(0, tx) : 9 - max(0, -tx)] = src
        assert torch.allclose(out[i], ref, atol=1e-6), (tx, ty)
    all_shifts = s.elements(2000, gen(1), torch.device("cpu")).shift
    assert set(np.unique(all_shifts).tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}


def test_continuous_shift_scale_brightness_ranges() -> None:
    dev = torch.device("cpu")
    sh = RandomShift(1.5, integer=False).elements(500, gen(0), dev).shift
    assert np.abs(sh).max() <= 1.5 and len(np.unique(sh)) > 900
    sc = RandomScale(0.9, 1.1).elements(500, gen(0), dev).linear
    f = sc[:, 0, 0]
    assert np.allclose(sc[:, 1, 1], f) and np.allclose(sc[:, 0, 1], 0) and f.min() >= 0.9 and f.max() <= 1.1
    x = torch.full((500, 1, 4, 4), 0.5)
    out = RandomBrightness(0.8, 1.2).sample(x, gen(4))
    g = out[:, 0, 0, 0] / 0.5
    assert torch.allclose(out, g.reshape(-1, 1, 1, 1) * 0.5)
    assert float(g.min()) >= 0.8 - 1e-6 and float(g.max()) <= 1.2 + 1e-6
    assert torch.equal(RandomBrightness(1.5, 2.0).sample(torch.ones(3, 1, 2, 2), gen()), torch.ones(3, 1, 2, 2))


def test_product_composes_semantic_factors_in_one_warp_then_adds_noise() -> None:
    rot, scale, noise = RandomRotation(20), RandomScale(0.8, 1.2), LinfUniform(0.05)
    prod = ProductSampler([rot, scale, noise])
    x = torch.rand(6, 1, 12, 12, generator=gen(0))
    g = gen(9)
    t = rot.elements(6, g, x.device).compose(scale.elements(6, g, x.device))
    expected = noise.sample(warp_images(x, t, layout="paired"), g)
    assert torch.equal(prod.sample(x, gen(9)), expected)
    assert str(prod) == "rotation:20+scale:0.8:1.2+linf:0.05"
    with pytest.raises(ValueError):
        ProductSampler([rot])

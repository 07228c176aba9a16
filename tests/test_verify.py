"""IBP and CROWN verification (orbitscope.robust.verify) against independent references.

* sound: never verified where PGD (written here) or a dense grid + vertex search of a tiny
  network's box finds a counterexample, over thousands of inputs; bounds contain the outputs of
  random points and vertices of the ball;
* exact where it must be: on a 2-layer ReLU network, CROWN's margin bound against the true minimum
  over the box from one LP per activation pattern (``scipy.optimize.linprog``): never above it, and
  equal (1e-5) where no ReLU is unstable;
* IBP ≤ CROWN: over many inputs, with the fraction of exceptions reported;
* IBP against a plain loop of interval arithmetic written here for a 2-layer net.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from torch import nn

from orbitscope.errors import SpecError
from orbitscope.models.reference import ReferenceCNN, SmallCNN
from orbitscope.robust.verify import VerifiedNetwork, crown_bounds, interval_bounds, margin_spec, verify

DT = torch.float64


def mlp(d: int, hidden: tuple[int, ...], k: int, seed: int, scale: float = 1.0) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    prev = d
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    layers.append(nn.Linear(prev, k))
    net = nn.Sequential(*layers).double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(scale)
    return net


def conv_net(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                        nn.Linear(4 * 2 * 2, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    for m in net.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.3, 0.3)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return net.double().eval()


def box(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return (x - eps).clamp(0, 1), (x + eps).clamp(0, 1)


def margins(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """min_{j≠y} f_y − f_j per input (last dim = classes)."""
    true = logits.gather(-1, y.expand(logits.shape[:-1]).unsqueeze(-1))
    other = logits.scatter(-1, y.expand(logits.shape[:-1]).unsqueeze(-1), float("-inf")).amax(-1, keepdim=True)
    return (true - other).squeeze(-1)


def pgd_min_margin(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int = 30,
                   restarts: int = 3, seed: int = 0) -> torch.Tensor:
    """Smallest margin PGD finds in the box (signed steps on the margin, projection, restarts)."""
    lo, hi = box(x, eps)
    g = torch.Generator().manual_seed(seed)
    best = margins(model(x).detach(), y)
    for r in range(restarts):
        z = (lo + (hi - lo) * torch.rand(x.shape, generator=g, dtype=x.dtype)) if r else x.clone()
        for _ in range(steps):
            z.requires_grad_(True)
            m = margins(model(z), y)
            (grad,) = torch.autograd.grad(m.sum(), z)
            with torch.no_grad():
                best = torch.minimum(best, m.detach())
                z = torch.minimum(torch.maximum(z - 2.5 * eps / steps * grad.sign(), lo), hi)
        with torch.no_grad():
            best = torch.minimum(best, margins(model(z), y))
    return best


# ------------------------------------------------------------------------------- IBP reference
def ibp_reference(w1, b1, w2, b2, x, eps, y):
    """Plain-loop interval arithmetic for Linear -> ReLU -> Linear: logits bounds and the margin
    bounds f_y − f_j with the margin folded into the last layer."""
    d, h, k = len(x), len(b1), len(b2)
    lo = [max(x[i] - eps, 0.0) for i in range(d)]
    hi = [min(x[i] + eps, 1.0) for i in range(d)]
    hl, hu = [], []
    for j in range(h):
        a = b1[j] + sum(w1[j][i] * (lo[i] if w1[j][i] >= 0 else hi[i]) for i in range(d))
        b = b1[j] + sum(w1[j][i] * (hi[i] if w1[j][i] >= 0 else lo[i]) for i in range(d))
        hl.append(max(a, 0.0))
        hu.append(max(b, 0.0))
    out_l, out_u = [], []
    for c in range(k):
        out_l.append(b2[c] + sum(w2[c][j] * (hl[j] if w2[c][j] >= 0 else hu[j]) for j in range(h)))
        out_u.append(b2[c] + sum(w2[c][j] * (hu[j] if w2[c][j] >= 0 else hl[j]) for j in range(h)))
    marg = []
    for c in range(k):
        if c == y:
            marg.append(float("inf"))
            continue
        v = [w2[y][j] - w2[c][j] for j in range(h)]
        marg.append(b2[y] - b2[c] + sum(v[j] * (hl[j] if v[j] >= 0 else hu[j]) for j in range(h)))
    return out_l, out_u, marg


def test_ibp_matches_plain_interval_loop():
    checked = 0
    for seed in range(8):
        net = mlp(5, (7,), 4, seed)
        w1, b1 = net[0].weight.tolist(), net[0].bias.tolist()
        w2, b2 = net[2].weight.tolist(), net[2].bias.tolist()
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(12, 5, generator=g, dtype=DT)
        y = torch.randint(0, 4, (12,), generator=g)
        for eps in (0.0, 0.02, 0.2):
            lo, hi = interval_bounds(net, x, eps)
            res = verify(net, x, y, eps, "ibp")
            for b in range(12):
                ol, ou, marg = ibp_reference(w1, b1, w2, b2, x[b].tolist(), eps, int(y[b]))
                np.testing.assert_allclose(lo[b].numpy(), ol, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(hi[b].numpy(), ou, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(res.margin_bounds[b].numpy(), marg, rtol=1e-12, atol=1e-12)
                assert bool(res.verified[b]) == (min(marg) > 0)
                checked += 1
    assert checked == 8 * 3 * 12


# ------------------------------------------------------------------------------------- soundness
def ball_points(x: torch.Tensor, eps: float, n: int, seed: int) -> torch.Tensor:
    """n points of the clipped ball per input: half uniform, half vertices (each coordinate at an end)."""
    lo, hi = box(x, eps)
    g = torch.Generator().manual_seed(seed)
    u = torch.rand((n, *x.shape), generator=g, dtype=x.dtype)
    u[n // 2:] = u[n // 2:].round()
    return lo + (hi - lo) * u


@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_bounds_contain_outputs_of_points_in_the_ball(kind):
    total = 0
    for seed in range(4):
        net = mlp(6, (10, 10), 4, seed) if kind == "mlp" else conv_net(seed)
        shape = (6,) if kind == "mlp" else (1, 8, 8)
        x = torch.rand((8, *shape), generator=torch.Generator().manual_seed(seed), dtype=DT)
        y = net(x).argmax(1)
        c = margin_spec(y, 4).to(DT)
        for eps in (0.01, 0.05, 0.2):
            pts = ball_points(x, eps, 400, seed)
            with torch.no_grad():
                out = net(pts.reshape(-1, *shape)).reshape(400, 8, 4)
            spec_out = torch.einsum("bsk,nbk->nbs", c, out)
            il, iu = interval_bounds(net, x, eps)
            assert (out >= il - 1e-9).all() and (out <= iu + 1e-9).all()
            for inter in ("crown", "ibp"):
                cl, cu = crown_bounds(net, x, eps, intermediate=inter)
                assert (out >= cl - 1e-9).all() and (out <= cu + 1e-9).all()
                ml, mu = crown_bounds(net, x, eps, c, intermediate=inter)
                assert (spec_out >= ml - 1e-9).all() and (spec_out <= mu + 1e-9).all()
            total += out.numel()
    assert total == 4 * 3 * 400 * 8 * 4


def test_sound_against_pgd_over_thousands_of_inputs():
    counts = {"cases": 0, "verified_ibp": 0, "verified_crown": 0, "attacked": 0}
    for seed in range(10):
        net = mlp(4, (12, 12), 3, seed, scale=1.5) if seed % 2 else conv_net(seed)
        shape = (4,) if seed % 2 else (1, 8, 8)
        x = torch.rand((100, *shape), generator=torch.Generator().manual_seed(100 + seed), dtype=DT)
        y = net(x).argmax(1)
        for eps in (0.01, 0.03, 0.1, 0.3):
            attacked = pgd_min_margin(net, x, y, eps, steps=20, seed=seed) < -1e-9
            ibp = verify(net, x, y, eps, "ibp").verified
            crown = verify(net, x, y, eps, "crown").verified
            crown_ibp = verify(net, x, y, eps, "crown", intermediate="ibp").verified
            assert not (attacked & (ibp | crown | crown_ibp)).any(), (seed, eps)
            counts["cases"] += len(x)
            counts["verified_ibp"] += int(ibp.sum())
            counts["verified_crown"] += int(crown.sum())
            counts["attacked"] += int(attacked.sum())
    print("PGD soundness:", counts)
    assert counts["cases"] == 4000
    # the check has teeth: both outcomes occur often
    assert counts["attacked"] > 400 and counts["verified_crown"] > 400


def test_sound_against_dense_grid_on_a_tiny_network():
    net = mlp(2, (6,), 3, seed=3, scale=2.0)
    grid = torch.linspace(0, 1, 201, dtype=DT)
    counts = {"cases": 0, "verified": 0, "counterexample": 0}
    x = torch.rand(300, 2, generator=torch.Generator().manual_seed(7), dtype=DT)
    y = net(x).argmax(1)
    for eps in (0.01, 0.05, 0.15):
        res = {m: verify(net, x, y, eps, m).verified for m in ("ibp", "crown")}
        lo, hi = box(x, eps)
        for b in range(len(x)):
            gx = lo[b, 0] + (hi[b, 0] - lo[b, 0]) * grid
            gy = lo[b, 1] + (hi[b, 1] - lo[b, 1]) * grid
            pts = torch.cartesian_prod(gx, gy)  # 201² points including the four vertices
            with torch.no_grad():
                worst = margins(net(pts), y[b]).min()
            bad = bool(worst < -1e-12)
            assert not (bad and (res["ibp"][b] or res["crown"][b])), (eps, b, float(worst))
            counts["cases"] += 1
            counts["verified"] += int(res["crown"][b])
            counts["counterexample"] += int(bad)
    print("grid soundness:", counts)
    assert counts["counterexample"] > 50 and counts["verified"] > 50


# ------------------------------------------------------------------------------------ exactness
def true_min_by_patterns(w1, b1, c, lo, hi):
    """min over the box of c·(W2 relu(W1 x + b1)) + const (c: (h,) folded with W2) by one LP per
    activation pattern consistent with the interval bounds of the pre-activations."""
    h, d = w1.shape
    pre_lo = b1 + np.where(w1 > 0, w1 * lo, w1 * hi).sum(1)
    pre_hi = b1 + np.where(w1 > 0, w1 * hi, w1 * lo).sum(1)
    free = [j for j in range(h) if pre_lo[j] < 0 < pre_hi[j]]
    best = np.inf
    for pattern in itertools.product([0, 1], repeat=len(free)):
        act = (pre_lo >= 0).astype(float)
        for j, p in zip(free, pattern):
            act[j] = p
        # objective: sum_j c_j act_j (w1_j x + b1_j); constraints: the pattern's signs
        obj = (c * act) @ w1
        const = float((c * act) @ b1)
        a_ub, b_ub = [], []
        for j in free:
            if act[j]:
                a_ub.append(-w1[j]), b_ub.append(b1[j])  # w1_j x + b1_j >= 0
            else:
                a_ub.append(w1[j]), b_ub.append(-b1[j])  # w1_j x + b1_j <= 0
        r = linprog(obj, A_ub=np.array(a_ub) if a_ub else None, b_ub=np.array(b_ub) if b_ub else None,
                    bounds=list(zip(lo, hi)), method="highs")
        if r.status == 0:
            best = min(best, r.fun + const)
    return best, len(free)


def test_crown_against_exact_minimum_from_activation_patterns():
    gaps_unstable, n_exact, n_loose, n_rows = [], 0, 0, 0
    for seed in range(6):
        net = mlp(3, (5,), 3, seed, scale=1.5)
        w1, b1 = net[0].weight.detach().numpy(), net[0].bias.detach().numpy()
        w2, b2 = net[2].weight.detach().numpy(), net[2].bias.detach().numpy()
        x = torch.rand(12, 3, generator=torch.Generator().manual_seed(seed), dtype=DT)
        y = net(x).argmax(1)
        for eps in (0.02, 0.1, 0.3):
            res = verify(net, x, y, eps, "crown")
            lo, hi = box(x, eps)
            for b in range(len(x)):
                for j in range(3):
                    if j == int(y[b]):
                        continue
                    cvec = w2[int(y[b])] - w2[j]
                    exact, n_free = true_min_by_patterns(w1, b1, cvec, lo[b].numpy(), hi[b].numpy())
                    exact += b2[int(y[b])] - b2[j]
                    bound = float(res.margin_bounds[b, j])
                    assert bound <= exact + 1e-7, (seed, eps, b, j, bound, exact)
                    n_rows += 1
                    if n_free == 0:
                        assert bound == pytest.approx(exact, abs=1e-5)
                        n_exact += 1
                    else:
                        gaps_unstable.append(exact - bound)
                        n_loose += 1
    gaps = np.array(gaps_unstable)
    print(f"CROWN vs exact: {n_rows} margins, {n_exact} without unstable ReLU (equal), {n_loose} with: "
          f"gap median {np.median(gaps):.4g}, 90% {np.quantile(gaps, 0.9):.4g}, max {gaps.max():.4g}, "
          f"exact to 1e-6 in {(gaps < 1e-6).mean():.1%}")
    assert n_exact > 50 and n_loose > 50


# ------------------------------------------------------------------------------- IBP vs CROWN
def test_crown_at_least_as_tight_as_ibp_in_aggregate():
    worse, total, diffs = 0, 0, []
    for seed in range(8):
        net = mlp(8, (16, 16), 5, seed) if seed % 2 else conv_net(seed)
        shape = (8,) if seed % 2 else (1, 8, 8)
        x = torch.rand((50, *shape), generator=torch.Generator().manual_seed(seed), dtype=DT)
        y = net(x).argmax(1)
        for eps in (0.005, 0.02, 0.08):
            ibp = verify(net, x, y, eps, "ibp").margin_bounds
            crown = verify(net, x, y, eps, "crown").margin_bounds
            finite = torch.isfinite(ibp)
            d = (crown - ibp)[finite]
            worse += int((d < -1e-9).sum())
            total += int(finite.sum())
            diffs.append(d)
    d = torch.cat(diffs)
    print(f"CROWN margin bound below IBP's in {worse}/{total} margins ({worse / total:.2%}); "
          f"mean CROWN − IBP {d.mean():.4g}")
    assert d.mean() > 0
    assert worse / total < 0.05


# ------------------------------------------------------------------------------ our CNNs, specs
def test_reference_cnn_is_read_as_its_chain_and_bounds_hold():
    model = ReferenceCNN(widths=(2, 2, 2, 2, 2, 2), hidden=8).double()
    model.train()  # eval-mode semantics are used, the user's mode is left alone
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(0), dtype=DT)
    net = VerifiedNetwork(model, x)
    assert model.training
    assert [n for n in net.layers if "classifier" in n] == [f"classifier.{i}" for i in range(4)]
    model.eval()
    pts = ball_points(x, 0.002, 40, 0)
    with torch.no_grad():
        out = model(pts.reshape(-1, 1, 28, 28)).reshape(40, 3, 10)
    for method, inter in (("ibp", "crown"), ("crown", "ibp"), ("crown", "crown")):
        if method == "ibp":
            lo, hi = interval_bounds(net, x, 0.002)
        else:
            lo, hi = crown_bounds(net, x, 0.002, intermediate=inter)
        assert (out >= lo - 1e-9).all() and (out <= hi + 1e-9).all()


def test_normalisation_keeps_the_ball_in_input_space():
    torch.manual_seed(0)
    body = nn.Sequential(nn.Flatten(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).double().eval()
    mean, std = (0.3, 0.6), (0.2, 0.5)
    norm = nn.Conv2d(2, 2, 1).double()
    with torch.no_grad():
        norm.weight.zero_()
        norm.weight[0, 0], norm.weight[1, 1] = 1 / std[0], 1 / std[1]
        norm.bias.copy_(torch.tensor([-mean[0] / std[0], -mean[1] / std[1]]))
    explicit = nn.Sequential(norm, body).eval()
    x = torch.rand(5, 2, 2, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    y = explicit(x).argmax(1)
    for method in ("ibp", "crown"):
        a = verify(body, x, y, 0.05, method, normalize=(mean, std))
        b = verify(explicit, x, y, 0.05, method)
        torch.testing.assert_close(a.margin_bounds, b.margin_bounds)


def test_unsupported_models_are_refused_with_the_layer_named():
    x = torch.rand(2, 1, 28, 28)
    with pytest.raises(SpecError, match="AdaptiveAvgPool2d"):
        VerifiedNetwork(SmallCNN(), x)
    with pytest.raises(SpecError, match="Tanh"):
        VerifiedNetwork(nn.Sequential(nn.Flatten(), nn.Linear(784, 4), nn.Tanh(), nn.Linear(4, 2)), x)

    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(784, 4), nn.Linear(4, 2)

        def forward(self, z):
            return self.b(torch.relu(self.a(z.flatten(1))))

    with pytest.raises(SpecError, match="not the chain"):
        VerifiedNetwork(Functional(), x)
    shared = nn.Linear(4, 4)
    with pytest.raises(SpecError, match="more than once"):
        VerifiedNetwork(nn.Sequential(shared, nn.ReLU(), shared), torch.rand(2, 4))
    with pytest.raises(SpecError, match="inputs must lie in"):
        verify(nn.Sequential(nn.Linear(4, 2)), torch.rand(2, 4) + 2, torch.zeros(2), 0.1)


def test_per_input_eps_and_zero_eps():
    net = mlp(4, (8,), 3, seed=0)
    x = torch.rand(6, 4, generator=torch.Generator().manual_seed(0), dtype=DT)
    y = net(x).argmax(1)
    eps = torch.tensor([0.0, 0.01, 0.05, 0.0, 0.01, 0.05], dtype=DT)
    res = verify(net, x, y, eps, "crown")
    for b in range(6):
        single = verify(net, x[b:b + 1], y[b:b + 1], float(eps[b]), "crown")
        assert float(res.margin_lower[b]) == pytest.approx(float(single.margin_lower[0]), abs=1e-12)
    zero = verify(net, x, y, 0.0, "crown")  # eps = 0: the bound is the clean margin itself
    torch.testing.assert_close(zero.margin_lower, margins(net(x).detach(), y))
    assert zero.verified.all() and res.clean_correct.all()


@pytest.mark.slow
def test_shipped_plain_cnn_full_crown_contains_points_of_the_ball():
    from safetensors.torch import load_file

    from orbitscope.data import mnist_subset
    from orbitscope.demos.shipped import SHIPPED_WEIGHTS
    from orbitscope.models.reference import default_config
    from orbitscope.models.registry import build_model

    model = build_model(default_config())
    model.load_state_dict(load_file(next(SHIPPED_WEIGHTS.glob("plain-cnn-*.safetensors"))))
    model.eval()
    test = mnist_subset("test")
    x = torch.as_tensor(np.asarray(test.images[:1]), dtype=torch.float32).unsqueeze(1) / 255
    y = torch.as_tensor(np.asarray(test.labels[:1]))
    eps = 0.003
    pts = ball_points(x.double(), eps, 64, 0).float()
    with torch.no_grad():
        out = model(pts.reshape(-1, 1, 28, 28)).double()
    lo, hi = crown_bounds(model, x, eps, intermediate="ibp", dtype=DT)
    assert (out >= lo - 1e-4).all() and (out <= hi + 1e-4).all()
    res = verify(model, x, y, eps, "crown")  # full CROWN (float32) verifies this digit; IBP cannot
    assert res.verified.all() and not verify(model, x, y, eps, "ibp").verified.any()
    assert float(margins(out, y).min()) >= float(res.margin_lower[0])
    assert float(pgd_min_margin(model, x, y, eps)) >= float(res.margin_lower[0])

"""Randomized smoothing (orbitscope.robust.smoothing): error rates at the nominal α by simulation.

The base classifier thresholds a fixed unit-norm linear function of its input, s = w·x: class
= number of thresholds below s. Under x + σZ, s ~ N(w·x, σ²), so every class probability is a
difference of Φ values in closed form, and the smoothed classifier's true L2 radius is σΦ⁻¹(p_A)
(Cohen et al.'s bound is tight for linear classifiers). References: scipy.stats (norm, binom),
statsmodels' Clopper–Pearson interval, hand-derived closed forms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from statsmodels.stats.proportion import proportion_confint
from torch import nn

from orbitscope.errors import SpecError
from orbitscope.robust.smoothing import ABSTAIN, linf_radius, noise_counts, smoothed_certify, smoothed_predict

D = (1, 4, 4)  # 16 input values


class Threshold(nn.Module):
    """Class = #{thresholds t_k < w·(x − 0.5)} (one-hot logits); w a fixed unit vector."""

    def __init__(self, thresholds: list[float], seed: int = 0) -> None:
        super().__init__()
        w = torch.randn(int(np.prod(D)), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        self.register_buffer("w", w / w.norm())
        self.register_buffer("t", torch.tensor(thresholds, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = (x.reshape(x.shape[0], -1).double() - 0.5) @ self.w
        cls = (s.unsqueeze(1) > self.t).sum(1)
        return nn.functional.one_hot(cls, len(self.t) + 1).float()


def input_at(model: Threshold, score: float) -> torch.Tensor:
    """An input in [0, 1]^d with w·(x − 0.5) = score: x = 0.5 + score·w."""
    x = 0.5 + score * model.w
    assert (x >= 0).all() and (x <= 1).all()
    return x.reshape(1, *D).float()


def class_probs(model: Threshold, score: float, sigma: float) -> np.ndarray:
    cdf = stats.norm.cdf((model.t.numpy() - score) / sigma)
    return np.diff(np.concatenate([[0.0], cdf, [1.0]]))


def mc_upper(errors_expected_rate: float, reps: int, level: float = 1e-4) -> int:
    """Largest error count still consistent with rate ≤ α over ``reps`` repetitions."""
    return int(stats.binom.ppf(1 - level, reps, errors_expected_rate))


# ------------------------------------------------------------------------------ CERTIFY
@pytest.mark.parametrize("p_a", [0.9, 0.99])
def test_certify_error_rate_at_most_alpha(p_a):
    sigma, alpha, n0, n, reps = 0.25, 0.05, 64, 500, 2000
    model = Threshold([0.0])
    score = sigma * stats.norm.ppf(p_a)  # P(class 1) = P(s > 0) = Φ(score/σ) = p_a
    probs = class_probs(model, score, sigma)
    assert probs[1] == pytest.approx(p_a)
    true_radius = sigma * stats.norm.ppf(p_a)
    x = input_at(model, score).repeat(reps, 1, 1, 1)
    cert = smoothed_certify(model, x, torch.ones(reps), sigma, n0=n0, n=n, alpha=alpha, batch_size=50_000, generator=1)
    pred, radius = cert.prediction.numpy(), cert.radius.numpy()
    error = ((pred != ABSTAIN) & (pred != 1)) | ((pred == 1) & (radius > true_radius))
    # the exact error rate of the procedure (selection picks class 1 or not, then the CP bound):
    k = np.arange(n + 1)
    lower = np.where(k == 0, 0.0, stats.beta.ppf(alpha, k, n - k + 1))
    exact = float((stats.binom.pmf(k, n, p_a) * (lower > p_a)).sum())
    print(f"CERTIFY p_A={p_a}: {int(error.sum())}/{reps} errors (rate {error.mean():.4f}), exact rate {exact:.4f}, "
          f"nominal α {alpha}; abstained {(pred == ABSTAIN).mean():.3f}")
    assert exact <= alpha
    assert error.sum() <= mc_upper(alpha, reps)
    # and the simulation agrees with the exact rate (two-sided, so a too-small rate also fails)
    assert stats.binomtest(int(error.sum()), reps, exact).pvalue > 1e-4
    # teeth: the point estimate n_A / n as "lower bound" breaks the guarantee by far
    naive = (cert.counts[:, 1].numpy() / n) > p_a
    assert naive.sum() > mc_upper(alpha, reps)


def test_certify_false_certificates_among_three_classes():
    sigma, alpha, n, reps = 0.5, 0.05, 200, 2000
    model = Threshold([-0.329, 0.329], seed=3)
    score = 0.0  # classes 0 / 1 / 2 with 0.255 / 0.489 / 0.255: no class above 1/2, g's radius is 0
    probs = class_probs(model, score, sigma)
    assert 0.48 < probs.max() < 0.5
    x = input_at(model, score).repeat(reps, 1, 1, 1)
    cert = smoothed_certify(model, x, None, sigma, n0=50, n=n, alpha=alpha, batch_size=50_000, generator=2)
    # p_A < 1/2 for every class: any non-abstention is a false certificate; its exact probability is
    # at most Σ_c P(CP lower bound of class c > 1/2) (union over the selected class)
    wrong = int((cert.prediction != ABSTAIN).sum())
    k = np.arange(n + 1)
    lower = np.where(k == 0, 0.0, stats.beta.ppf(alpha, k, n - k + 1))
    union = float(sum((stats.binom.pmf(k, n, p) * (lower > 0.5)).sum() for p in probs))
    print(f"CERTIFY with max p = {probs.max():.3f}: {wrong}/{reps} false certificates (exact rate ≤ {union:.4f})")
    assert union <= alpha
    assert wrong <= mc_upper(union, reps)


# ------------------------------------------------------------------------------ PREDICT
def test_predict_wrong_class_rate_at_most_alpha():
    sigma, alpha, n, reps = 0.25, 0.05, 200, 2000
    model = Threshold([0.0])
    p_a = 0.505  # nearly tied: the hardest case for PREDICT (the rate tends to α/2 at a tie)
    score = sigma * stats.norm.ppf(p_a)
    x = input_at(model, score).repeat(reps, 1, 1, 1)
    out = smoothed_predict(model, x, sigma, n=n, alpha=alpha, batch_size=50_000, generator=3)
    wrong = (out.prediction != ABSTAIN) & (out.prediction != 1)
    # exact: returns class 0 iff n_0 > n_1 and the two-sided binomial test rejects
    k1 = np.arange(n + 1)
    p_val = np.array([stats.binomtest(int(max(k, n - k)), n, 0.5).pvalue for k in k1])
    exact = float((stats.binom.pmf(k1, n, p_a) * ((n - k1 > k1) & (p_val <= alpha))).sum())
    print(f"PREDICT p_A={p_a}: {int(wrong.sum())}/{reps} wrong (exact rate {exact:.4f}, nominal α {alpha}); "
          f"abstained {(out.prediction == ABSTAIN).float().mean():.3f}")
    assert exact <= alpha
    assert wrong.sum() <= mc_upper(alpha, reps)
    assert stats.binomtest(int(wrong.sum()), reps, exact).pvalue > 1e-4
    # teeth: without the abstention test the top count is wrong ~ 45 % of the time
    naive = out.counts.argmax(1) != 1
    assert naive.sum() > mc_upper(alpha, reps)
    # the p-values are scipy's two-sided binomial test of the top two counts
    top2 = torch.topk(out.counts, 2, dim=1).values
    for i in range(0, reps, 199):
        assert float(out.p_value[i]) == pytest.approx(stats.binomtest(int(top2[i, 0]), int(top2[i].sum()), 0.5).pvalue)


# ------------------------------------------------------------------------- formulas, conventions
def test_clopper_pearson_bound_matches_statsmodels():
    sigma, alpha, n = 0.4, 0.01, 300
    model = Threshold([0.0])
    scores = np.linspace(-0.45, 0.45, 40)
    x = torch.cat([input_at(model, s) for s in scores])
    cert = smoothed_certify(model, x, None, sigma, n0=20, n=n, alpha=alpha, generator=4)
    n_a = cert.counts.gather(1, cert.selection_counts.argmax(1, keepdim=True)).squeeze(1).numpy()
    ref = np.array([proportion_confint(int(k), n, alpha=2 * alpha, method="beta")[0] for k in n_a])
    ref = np.nan_to_num(ref, nan=0.0)  # statsmodels gives nan at k = 0
    np.testing.assert_allclose(cert.p_lower.numpy(), ref, rtol=1e-10, atol=1e-12)
    assert len(set(n_a.tolist())) > 10  # a spread of counts was checked


def test_radius_by_hand_for_a_constant_classifier():
    class Constant(nn.Module):
        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return torch.tensor([0.0, 0.0, 1.0]).repeat(z.shape[0], 1)

    sigma, alpha, n = 0.5, 0.001, 1000
    x = torch.rand(3, *D)
    cert = smoothed_certify(Constant(), x, torch.tensor([2, 2, 1]), sigma, n0=10, n=n, alpha=alpha)
    # n_A = n: the CP lower bound solves p^n = α, so p = α^(1/n); R = σ Φ⁻¹(p); R∞ = R / √16
    p = alpha ** (1 / n)
    r = sigma * stats.norm.ppf(p)
    np.testing.assert_allclose(cert.p_lower.numpy(), p, rtol=1e-9)
    np.testing.assert_allclose(cert.radius.numpy(), r, rtol=1e-9)
    np.testing.assert_allclose(cert.radius_linf.numpy(), r / 4, rtol=1e-9)
    assert linf_radius(2.0, 16) == 0.5
    assert cert.prediction.tolist() == [2, 2, 2] and cert.correct.tolist() == [True, True, False]
    # certified accuracy at a radius: correct and radius >= r (plain loop)
    for rad in (0.0, r - 1e-9, r + 1e-9):
        want = sum(1 for i in range(3) if cert.correct[i] and cert.radius[i] >= rad) / 3
        assert cert.certified_accuracy(rad) == pytest.approx(want)
    assert cert.certified_accuracy(r / 4 - 1e-9, "linf") == pytest.approx(2 / 3)
    est = cert.accuracy_estimate(0.0)
    assert est.count == 2 and est.total == 3 and est.lower < 2 / 3 < est.upper


def test_noise_is_added_in_input_space_without_clamping_and_seeded():
    class Seen(nn.Module):
        """Class 1 when any value is outside [0, 1], else 0."""

        def forward(self, z: torch.Tensor) -> torch.Tensor:
            out = ((z < 0) | (z > 1)).flatten(1).any(1).long()
            return nn.functional.one_hot(out, 2).float()

    x = torch.zeros(2, *D)
    counts = noise_counts(Seen(), x, 0.1, 100, generator=5)
    assert (counts[:, 1] == 100).all()  # not clamped: some of the 16 values are < 0 in every copy
    a = noise_counts(Threshold([0.0]), torch.rand(4, *D), 0.3, 250, batch_size=77, generator=9)
    b = noise_counts(Threshold([0.0]), torch.rand(4, *D, generator=torch.Generator().manual_seed(0)), 0.3, 250,
                     batch_size=77, generator=9)
    c = noise_counts(Threshold([0.0]), torch.rand(4, *D, generator=torch.Generator().manual_seed(0)), 0.3, 250,
                     batch_size=77, generator=9)
    assert a.sum(1).tolist() == [250] * 4 and torch.equal(b, c)
    # normalize applies after the noise: the same counts as a model that normalises itself
    mean, std = 0.3, 0.2

    class Normalised(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Threshold([0.5])

        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return self.inner((z - mean) / std)

    xs = torch.rand(3, *D, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(noise_counts(Threshold([0.5]), xs, 0.2, 300, normalize=([mean], [std]), generator=2),
                               noise_counts(Normalised(), xs, 0.2, 300, generator=2))


def test_progress_and_errors():
    seen: list[tuple[int, int]] = []
    smoothed_certify(Threshold([0.0]), torch.rand(3, *D), None, 0.2, n0=10, n=90, batch_size=40,
                     progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (300, 300) and all(a[0] < b[0] for a, b in zip(seen, seen[1:]))
    with pytest.raises(SpecError, match="sigma"):
        smoothed_predict(Threshold([0.0]), torch.rand(1, *D), 0.0)
    with pytest.raises(SpecError, match="alpha"):
        smoothed_certify(Threshold([0.0]), torch.rand(1, *D), None, 0.1, alpha=1.5)
    with pytest.raises(SpecError, match="labels"):
        smoothed_certify(Threshold([0.0]), torch.rand(1, *D), None, 0.1, n0=5, n=5).certified_accuracy(0.1)
    assert math.isfinite(float(smoothed_predict(Threshold([0.0]), torch.rand(2, *D), 0.1, n=20).p_value[0]))

"""certify(): per-input decisions against a plain loop, exact query counts, early stopping, modes.

The model under test fails iff one pixel of the perturbed input exceeds a threshold t, so under
the uniform L∞ box its failure probability is known in closed form:
p(x) = clip((hi − t) / (hi − lo), 0, 1) with [lo, hi] = clamp(x ± ε, 0, 1) at that pixel.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from orbitscope.engine.evaluation import DataError, ModelError
from orbitscope.robust.certify import CertificationResult, certify, perturbation_stream
from orbitscope.robust.samplers import LinfUniform
from orbitscope.robust.sequential import NOT_ROBUST, ROBUST, UNDECIDED, make_test

EPS, T = 0.1, 0.5


class PixelThreshold(nn.Module):
    """Class 1 iff pixel (0, 0, 0) > t, else class 0; counts every row it is asked to classify."""

    def __init__(self, t: float = T, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        self.t, self.mean, self.std = t, mean, std
        self.bn = nn.BatchNorm1d(1)  # only so that train/eval mode is observable
        self.batches: list[int] = []
        self.modes: list[bool] = []

    def forward(self, x: Tensor) -> Tensor:
        self.batches.append(len(x))
        self.modes.append(self.training)
        v = x[:, 0, 0, 0] * self.std + self.mean
        return torch.stack([self.t - v, v - self.t], 1)


def p_closed_form(v: float, eps: float = EPS, t: float = T) -> float:
    lo, hi = max(v - eps, 0.0), min(v + eps, 1.0)
    return float(np.clip((hi - t) / (hi - lo), 0.0, 1.0))


def images(values: list[float], size: int = 6) -> Tensor:
    x = torch.full((len(values), 1, size, size), 0.2)
    x[:, 0, 0, 0] = torch.tensor(values)
    return x


# pixel values: p = 0, 0, ~0.005 (below κ = 0.05), 0.05 (= κ), 0.25, 0.5 (p from the closed form)
VALUES = [0.1, 0.35, 0.401, 0.41, 0.45, 0.5]


def plain_loop(x: Tensor, labels: Tensor, test, *, seed: int, cap: int, eps: float = EPS) -> tuple[list, list, list]:
    """Reference: one input at a time, failures read directly off the pixel (no model)."""
    outcome, samples, failures = [], [], []
    sampler = LinfUniform(eps)
    for i in range(len(x)):
        stream = perturbation_stream(sampler, x[i : i + 1], seed=seed, index=i)
        pixels = torch.cat([next(stream) for _ in range(40)])[:, 0, 0, 0]  # 40 blocks: enough for cap
        assert len(pixels) >= cap
        fails = ((pixels > T).long() != labels[i]).numpy()
        n = f = 0
        d = UNDECIDED
        while True:
            m = int(min(test.next_look(np.array([n]))[0], cap - n))
            if m <= 0:
                break
            f += int(fails[n : n + m].sum())
            n += m
            d = int(test.decide(np.array([f]), np.array([n]))[0])
            if d != UNDECIDED:
                break
        outcome.append(d)
        samples.append(n)
        failures.append(f)
    return outcome, samples, failures


@pytest.mark.parametrize("name, budget", [("sprt", 3000), ("confidence-sequence", 3000), ("binomial", 600),
                                          ("published", 3000)])
def test_decisions_match_a_plain_per_input_loop(name: str, budget: int) -> None:
    x, y = images(VALUES), torch.zeros(len(VALUES), dtype=torch.long)
    test = make_test(name, kappa=0.05, alpha=0.01, budget=budget)
    res = certify(PixelThreshold(), (x, y), LinfUniform(EPS), test=test, batch_size=100, seed=3)
    ref = plain_loop(x, y, test, seed=3, cap=budget)
    assert res.outcome.tolist() == ref[0]
    assert res.samples.tolist() == ref[1]
    assert res.failures.tolist() == ref[2]
    assert res.outcome[0] == ROBUST and res.outcome[-1] == NOT_ROBUST  # p = 0 certifies, p = 0.5 does not
    assert np.allclose(res.bound, test.upper_bound(res.failures, res.samples))


def test_failure_rates_agree_with_the_closed_form() -> None:
    """A fixed-size test draws exactly n samples: F/n must be within 4.5 sd of the closed-form p.
    (Label-free, inputs classified 1 fail when the pixel drops to t or below: probability 1 − p.)"""
    values = [0.35, 0.42, 0.45, 0.5, 0.55, 0.58]
    x, y = images(values), torch.zeros(len(values), dtype=torch.long)
    n = 4000
    for label_free in (False, True):
        res = certify(PixelThreshold(), (x, y), LinfUniform(EPS), test="binomial", kappa=0.05, budget=n, seed=1,
                      label_free=label_free)
        for v, f, m, pred in zip(values, res.failures, res.samples, res.clean_pred):
            if not label_free and v > T:
                assert m == res.tower_m and pred == 1  # misclassified: not tested
                continue
            p = p_closed_form(v) if pred == 0 else 1 - p_closed_form(v)
            assert m == n and abs(f / n - p) <= 4.5 * np.sqrt(max(p * (1 - p), 1e-4) / n) + 1e-9, (v, f / n, p)


def test_queries_are_counted_exactly_and_batches_are_filled() -> None:
    x, y = images(VALUES * 3), torch.zeros(3 * len(VALUES), dtype=torch.long)
    model = PixelThreshold()
    res = certify(model, (x, y), "linf:0.1", test="sprt", kappa=0.05, budget=2000, batch_size=64, seed=0)
    assert sum(model.batches) == res.queries == int(res.samples.sum()) + len(x)
    perturbed = model.batches[1:]  # the first call is the clean pass over the data
    assert model.batches[0] == len(x) and max(perturbed) == 64
    # while at least 4 inputs are undecided, every batch is full: count only the final stretch
    assert sum(b < 64 for b in perturbed) <= int(np.sort(res.samples)[-4:].sum()) // 16 + 1


def test_early_stopping_inside_shared_batches() -> None:
    """p = 0 inputs and p = 0.035 inputs (between SPRT's p1 and κ, where it needs most samples)
    share batches; the p = 0 inputs stop after far fewer queries, while the others continue."""
    x = images([0.2, 0.407] * 6)
    y = torch.zeros(len(x), dtype=torch.long)
    model = PixelThreshold()
    res = certify(model, (x, y), "linf:0.1", test="sprt", kappa=0.05, budget=5000, batch_size=256)
    easy, hard = res.samples[0::2], res.samples[1::2]
    assert (res.outcome[0::2] == ROBUST).all()
    assert (easy == 176).all()  # Wald: ln(1/α)/ln((1 − p1)/(1 − κ)) = 161.2 -> 11 looks of 16 (p1 = 0.45 κ)
    assert easy.mean() < hard.mean() / 3
    # looks of 16: the first 11 batches hold one look of all 12 inputs; then only the 6 hard ones remain
    assert model.batches[1:12] == [192] * 11 and max(model.batches[12:]) <= 96
    assert sum(model.batches[1:]) == res.samples.sum()


def test_invariant_to_batch_size_and_pool_and_deterministic() -> None:
    x, y = images(VALUES * 2), torch.zeros(2 * len(VALUES), dtype=torch.long)
    runs = [certify(PixelThreshold(), (x, y), "linf:0.1", kappa=0.05, budget=1500, batch_size=b, max_active=a, seed=5)
            for b, a in ((7, None), (1000, None), (64, 1), (64, 3))]
    for r in runs[1:]:
        for key in ("outcome", "samples", "failures", "first_failure", "tower_failures"):
            assert np.array_equal(getattr(r, key), getattr(runs[0], key)), key
    other = certify(PixelThreshold(), (x, y), "linf:0.1", kappa=0.05, budget=1500, seed=6)
    assert not np.array_equal(other.failures, runs[0].failures)


def test_label_free_mode_and_misclassified_inputs() -> None:
    """Wrong labels: against labels every input is misclassified (never certified, no test);
    label-free, stable predictions certify whatever the labels."""
    x = images([0.1, 0.2, 0.45])
    wrong = torch.ones(3, dtype=torch.long)
    res = certify(PixelThreshold(), (x, wrong), "linf:0.1", kappa=0.05, budget=2000)
    assert (res.outcome == NOT_ROBUST).all() and res.skipped.all()
    assert (res.samples == res.tower_m).all() and res.dataset["certified_robust_accuracy"] == 0
    free = certify(PixelThreshold(), (x, wrong), "linf:0.1", kappa=0.05, budget=2000, label_free=True)
    assert free.outcome.tolist() == [ROBUST, ROBUST, NOT_ROBUST] and not free.skipped.any()
    assert free.clean_pred.tolist() == [0, 0, 0]
    assert free.dataset["certified_rate"] == pytest.approx(2 / 3) and free.dataset["certified_robust_accuracy"] == 0
    unlabelled = certify(PixelThreshold(), x, "linf:0.1", kappa=0.05, budget=2000, label_free=True)
    assert unlabelled.outcome.tolist() == free.outcome.tolist() and (unlabelled.label == -1).all()
    assert np.isnan(unlabelled.dataset["clean_accuracy"])
    with pytest.raises(DataError, match="label"):
        certify(PixelThreshold(), x, "linf:0.1")


def test_dataset_numbers_against_direct_computation() -> None:
    x = images(VALUES * 4)
    y = torch.zeros(len(x), dtype=torch.long)
    y[::5] = 1  # some misclassified inputs
    res = certify(PixelThreshold(), (x, y), "linf:0.1", test="confidence-sequence", kappa=0.05, budget=2000, seed=2)
    correct = res.clean_pred == y.numpy()
    d = res.dataset
    assert d["clean_accuracy"] == pytest.approx(correct.mean())
    assert d["certified_robust_accuracy"] == pytest.approx(((res.outcome == ROBUST) & correct).mean())
    assert d["certified_among_correct"] == pytest.approx(((res.outcome == ROBUST) & correct).sum() / correct.sum())
    assert d["global_failure_estimate"] == pytest.approx(res.first_failure.mean())
    assert d["queries"] == res.queries and d["mean_samples"] == pytest.approx(res.samples.mean())
    # first_failure / tower_failures are the failures of the first 1 / tower_m samples of each stream
    for i in range(len(x)):
        s = torch.cat([next(perturbation_stream(LinfUniform(EPS), x[i : i + 1], seed=2, index=i))])
        fails = ((s[:, 0, 0, 0] > T).long() != y[i]).numpy()
        assert res.first_failure[i] == fails[0] and res.tower_failures[i] == fails[: res.tower_m].sum()


def test_counterexamples_fail_and_lie_in_the_box() -> None:
    x, y = images(VALUES), torch.zeros(len(VALUES), dtype=torch.long)
    res = certify(PixelThreshold(), (x, y), "linf:0.1", kappa=0.05, budget=1000, return_counterexamples=True)
    ce = res.counterexamples
    assert isinstance(ce, Tensor) and ce.shape == x.shape
    found = torch.from_numpy(res.has_counterexample)
    assert bool((ce[found, 0, 0, 0] > T).all())
    assert torch.equal(ce[~found], x[~found])
    assert float((ce - x).abs().max()) <= EPS + 1e-6


def test_budget_cap_leaves_inputs_undecided() -> None:
    x, y = images([0.41]), torch.zeros(1, dtype=torch.long)  # p = κ exactly
    res = certify(PixelThreshold(), (x, y), "linf:0.1", test="sprt", kappa=0.05, budget=100)
    assert res.outcome[0] in (UNDECIDED, NOT_ROBUST) and res.samples[0] <= 100
    res = certify(PixelThreshold(), (x, y), "linf:0.1", test=make_test("sprt", kappa=0.05, alpha=0.01), budget=48)
    assert res.budget == 48 and res.samples[0] <= 48


def test_eval_mode_during_and_restored_after() -> None:
    model = PixelThreshold().train()
    certify(model, (images([0.1]), torch.zeros(1, dtype=torch.long)), "linf:0.1", kappa=0.05, budget=500)
    assert not any(model.modes) and model.training and model.bn.training


def test_normalisation_applied_after_the_perturbation() -> None:
    x, y = images(VALUES), torch.zeros(len(VALUES), dtype=torch.long)
    plain = certify(PixelThreshold(), (x, y), "linf:0.1", kappa=0.05, budget=1000, seed=4)
    normed = certify(PixelThreshold(mean=0.3, std=0.2), (x, y), "linf:0.1", kappa=0.05, budget=1000, seed=4,
                     normalize=([0.3], [0.2]))
    assert np.array_equal(plain.outcome, normed.outcome) and np.array_equal(plain.failures, normed.failures)


def test_data_forms_agree() -> None:
    x, y = images(VALUES), torch.zeros(len(VALUES), dtype=torch.long)
    a = certify(PixelThreshold(), (x, y), "linf:0.1", kappa=0.05, budget=800)
    b = certify(PixelThreshold(), TensorDataset(x, y), "linf:0.1", kappa=0.05, budget=800)
    c = certify(PixelThreshold(), DataLoader(TensorDataset(x, y), batch_size=4), "linf:0.1", kappa=0.05, budget=800)
    d = certify(PixelThreshold(), ((x * 255).round().to(torch.uint8), y), "linf:0.1", kappa=0.05, budget=800)
    for r in (b, c):
        assert np.array_equal(r.samples, a.samples) and np.array_equal(r.failures, a.failures)
    assert d.n_inputs == len(x)


def test_progress_and_result_rows(tmp_path) -> None:
    x, y = images(VALUES), torch.zeros(len(VALUES), dtype=torch.long)
    seen: list[tuple[int, int | None]] = []
    res = certify(PixelThreshold(), (x, y), "linf:0.1", kappa=0.05, budget=800, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(x), len(x)) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    path = res.to_csv(tmp_path / "r.csv")
    lines = path.read_text().splitlines()
    assert len(lines) == len(x) + 1 and lines[0].startswith("input,label,clean_pred")
    assert isinstance(res, CertificationResult) and res.summary()["perturbation"] == "linf:0.1"


class NaNModel(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        out = torch.zeros(len(x), 2)
        out[:, 0] = torch.where(x[:, 0, 0, 0] > 0.5, float("nan"), 0.0)
        return out


def test_errors() -> None:
    x, y = images([0.5, 0.55]), torch.zeros(2, dtype=torch.long)
    with pytest.raises(DataError, match="empty"):
        certify(PixelThreshold(), (x[:0], y[:0]), "linf:0.1")
    with pytest.raises(DataError, match=r"\(B, C, H, W\)"):
        certify(PixelThreshold(), (x[:, 0], y), "linf:0.1")
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        certify(PixelThreshold(), (x * 3, y), "linf:0.1")
    with pytest.raises(ModelError, match="NaN"):
        certify(NaNModel(), (x, y), "linf:0.1")
    with pytest.raises(ModelError, match="classes"):
        certify(nn.Flatten(0), (x, y), "linf:0.1")
    with pytest.raises(ValueError, match="unknown robustness test"):
        certify(PixelThreshold(), (x, y), "linf:0.1", test="nope")
    with pytest.raises(ValueError, match="seed"):
        certify(PixelThreshold(), (x, y), "linf:0.1", seed=-1)
    with pytest.raises(TypeError):
        certify(lambda t: t, (x, y), "linf:0.1")  # type: ignore[arg-type]

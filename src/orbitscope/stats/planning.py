"""Sample-size planning: how many samples detect a drop at any orbit element.

The question: with K elements, family-wise error α and power 1 − β, how many samples n make
the whole-orbit drop band (:func:`~orbitscope.stats.invariance.orbit_drops`, the one
``orbitscope check`` uses) exclude the tolerance ``max_drop`` at an element whose true drop
from the identity is δ? Its lower bound is d̂_k − c·σ/√n, with c ≤ z_{1 − α/(2K)} (the sup-t
critical value never exceeds Bonferroni's), so

    n = ⌈ ((z_{1 − α/(2K)} + z_{1 − β}) · σ / (δ − max_drop))² ⌉

is enough (a normal approximation; closed form). σ is the standard deviation of one sample's
drop q_identity − q_k:

* accuracy with identity accuracy p and element accuracy p − δ, assuming the two outcomes are
  **uncorrelated**: σ² = p(1 − p) + (p − δ)(1 − p + δ) (conservative: in real models
  they are positively correlated, which makes σ smaller);
* otherwise given (``sd``), or measured on a pilot run (:func:`plan_from_pilot`: the largest
  per-element σ of the drops).

:func:`simulate_power` checks a plan by running the real band on synthetic correlated orbits
(:mod:`orbitscope.stats.simulate`) with the drop planted at one element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from .bands import difference_band
from .gate import DEFAULT_MAX_DROP
from .simulate import correlated_orbit
from .values import orbit_values

__all__ = ["SamplePlan", "plan_samples", "plan_from_pilot", "simulate_power", "PowerEstimate", "tested_elements"]


@dataclass(frozen=True)
class SamplePlan:
    """A planned sample size and how it was derived."""

    n: int
    delta: float
    max_drop: float
    elements: int
    alpha: float
    power: float
    sd: float
    method: str

    def sentence(self) -> str:
        return (f"{self.n} samples detect a drop of {self.delta:g} (above a tolerance of {self.max_drop:g}) at any of "
                f"{self.elements} orbit elements with power {self.power:.6g} and family-wise α = {self.alpha:g} "
                f"({self.method}; σ of a sample's drop = {self.sd:.4g})")


def _check(delta: float, max_drop: float, elements: int, alpha: float, power: float) -> None:
    if elements < 1:
        raise ValueError(f"the orbit needs at least one element besides the identity, got {elements}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got alpha={alpha}, power={power}")
    if delta <= max_drop:
        raise ValueError(f"the drop to detect ({delta}) must exceed the tolerance max_drop ({max_drop}): a drop within "
                         "the tolerance is not a failure")


def _n(sd: float, delta: float, max_drop: float, elements: int, alpha: float, power: float) -> int:
    z = stats.norm.ppf(1 - alpha / (2 * elements)) + stats.norm.ppf(power)
    return max(2, int(math.ceil((z * sd / (delta - max_drop)) ** 2)))


def plan_samples(delta: float, *, elements: int, alpha: float = 0.05, power: float = 0.8,
                 max_drop: float = DEFAULT_MAX_DROP,
                 accuracy: float | None = None, sd: float | None = None) -> SamplePlan:
    """Samples needed to detect a drop ``delta`` at any of ``elements`` orbit elements.

    Args:
        delta: the true drop to detect, in the metric's units (e.g. 0.05 accuracy).
        elements: K, the orbit elements tested (besides the identity).
        max_drop: the tolerance the check allows (``orbitscope check --max-drop``; the same default).
        accuracy: for accuracy: the accuracy at the identity (σ under uncorrelated outcomes).
        sd: for any metric: the standard deviation of one sample's drop (instead of ``accuracy``).
    """
    _check(delta, max_drop, elements, alpha, power)
    if (accuracy is None) == (sd is None):
        raise ValueError("give either accuracy (the accuracy at the identity, for accuracy drops) or sd (the standard "
                         "deviation of one sample's drop, for any metric)")
    if accuracy is not None:
        if not 0 < accuracy <= 1 or accuracy - delta < 0:
            raise ValueError(f"accuracy must be in (0, 1] and at least delta; got accuracy={accuracy}, delta={delta}")
        q = accuracy - delta
        sd = math.sqrt(accuracy * (1 - accuracy) + q * (1 - q))
        how = "closed form, normal approximation, Bonferroni-bounded critical value, uncorrelated outcomes"
    else:
        how = "closed form, normal approximation, Bonferroni-bounded critical value, given σ"
    if sd <= 0:
        raise ValueError("the standard deviation of a drop must be positive")
    return SamplePlan(n=_n(sd, delta, max_drop, elements, alpha, power), delta=delta, max_drop=max_drop,
                      elements=elements, alpha=alpha, power=power, sd=float(sd), method=how)


def plan_from_pilot(result: Any, delta: float, *, metric: str | None = None, alpha: float = 0.05, power: float = 0.8,
                    max_drop: float = DEFAULT_MAX_DROP) -> SamplePlan:
    """:func:`plan_samples` with σ measured on a pilot run: the largest per-element standard
    deviation of the drop from the reference (the identity, else the orbit's first element),
    over the elements the check tests."""
    ov = orbit_values(result, metric)
    ref, _ = ov.reference()
    tested = ~ov.same_as(ref)
    elements = int(tested.sum())
    _check(delta, max_drop, elements, alpha, power)
    q = ov.quality()
    d = (q[:, [ref]] - q)[:, tested]
    with np.errstate(invalid="ignore"):
        sds = np.nanstd(d, axis=0, ddof=1) if d.shape[0] > 1 else np.full(d.shape[1], np.nan)
    sd = float(np.nanmax(sds)) if np.isfinite(sds).any() else float("nan")
    if not sd > 0:
        raise ValueError("the pilot's drops do not vary (every sample scores the same at every element), or the pilot "
                         "has fewer than two samples: give sd (the standard deviation of one sample's drop)")
    return SamplePlan(n=_n(sd, delta, max_drop, elements, alpha, power), delta=delta, max_drop=max_drop,
                      elements=elements, alpha=alpha, power=power, sd=sd,
                      method=f"closed form, σ measured on a pilot of {ov.n_samples} samples ({ov.metric})")


def tested_elements(orbit: Any) -> int:
    """K for an orbit: its distinct elements, less the reference's class (the identity, or the
    first element when there is none; 0° and 360° count once)."""
    from ..group.elements import unique_elements

    reps = unique_elements(orbit.transforms())
    ref = orbit.identity_index()
    ref = 0 if ref is None else int(ref)
    return int(np.unique(reps[reps != reps[ref]]).size)


@dataclass(frozen=True)
class PowerEstimate:
    """Simulated power with its Monte-Carlo standard error."""

    power: float
    se: float
    repetitions: int

    def sentence(self) -> str:
        return f"simulated power {self.power:.3f} ± {self.se:.3f} (Monte-Carlo s.e., {self.repetitions} repetitions)"


def simulate_power(n: int, delta: float, *, elements: int, accuracy: float = 0.9, max_drop: float = DEFAULT_MAX_DROP,
                   alpha: float = 0.05, rho: float = 0.5, repetitions: int = 200, resamples: int = 500,
                   seed: int = 0) -> PowerEstimate:
    """The share of synthetic orbits (identity accuracy ``accuracy``, every other element the
    same except one ``delta`` lower, AR(1) correlation ``rho``) on which the drop band's lower
    bound exceeds ``max_drop`` somewhere: the check's power at ``n`` samples."""
    rng = np.random.default_rng(seed)
    means = np.full(elements + 1, accuracy)
    means[1 + elements // 2] = accuracy - delta
    hits = 0
    for r in range(repetitions):
        x = correlated_orbit(n, means, rho=rho, binary=True, rng=rng)
        band = difference_band(x[:, [0]] - x, from_binary=True, level=1 - alpha, resamples=resamples,
                               seed=int(rng.integers(1 << 31)))
        hits += bool(np.nanmax(band.lower) > max_drop)
    p = hits / repetitions
    return PowerEstimate(power=p, se=math.sqrt(max(p * (1 - p), 1e-12) / repetitions), repetitions=repetitions)

"""A test of invariance over a whole orbit, with an effect size.

H0: the metric's mean is the same at every orbit element.

* default (``method="auto"`` = ``"sup-t"``): the **studentized sup-t bootstrap test** on the
  per-sample contrasts d_k = q_reference − q_k (the reference as for the drops below), T =
  max_k |d̄_k| / σ_k, referred to the bootstrap distribution of the same maximum with each
  resample's own σ*_k (:func:`~orbitscope.stats.bands.difference_test`, on the drop band's own
  bootstrap draws). It needs no exchangeability between
  elements, so it holds when nearby elements are correlated (as nearby angles are), and it
  rejects at α exactly when the simultaneous 1 − α drop band below excludes 0 somewhere. Its
  p-value's resolution is 1 / (B + 1) with B bootstrap resamples.
* the classical tests, on the samples with a value at every element (complete blocks; rows
  with NaN are left out and counted): **Cochran's Q** for binary metrics (Cochran 1950, "The
  comparison of percentages in matched samples", Biometrika 37), Q = (K − 1)(K Σ_j C_j² − N²) /
  (K N − Σ_i R_i²) with column totals C_j, row totals R_i and N = Σ C_j, referred to χ²(K − 1);
  the **Friedman test** on within-sample ranks (Friedman 1937, JASA 32) with the tie
  correction; a **permutation test** of Σ_k (m_k − m̄)² permuting each sample's values across
  elements (p = (1 + #{T* ≥ T}) / (1 + B)). All three assume the elements of a sample are
  *exchangeable* under H0 (compound symmetry). Along an orbit they are not: with AR(1)
  correlation ρ = 0.9 between neighbours they reject a true H0 13–18 % of the time at α = 0.05
  (``benchmarks/stats_validity.py``, ``tests/test_stats_validity.py``). They are offered for
  comparison with the literature, not as the default.

The effect size is the **largest drop from the identity**: d_k = q_identity − q_k per sample
(q: the metric oriented so that higher is better), its mean per element with a simultaneous
band (:func:`~orbitscope.stats.bands.difference_band`), and the largest mean drop with the
interval [max_k lower_k, max_k upper_k], which holds whenever the band does. Orbits without the
identity (e.g. a near-uniform SO(3) grid) take their first element as the reference, a choice
made without looking at the values (choosing the best element instead would bias every drop
upwards and fail invariant models). Elements equal to the reference as group elements (360°
for 0°) are not tested: their drop is 0 by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from .bands import DEFAULT_RESAMPLES, Band, bootstrap_p, difference_band, difference_statistic
from .values import OrbitValues, element_noun, orbit_values

__all__ = ["InvarianceTest", "Drops", "cochrans_q", "friedman", "permutation_invariance", "orbit_drops",
           "invariance_test", "invariance_test_values", "format_p", "METHODS"]


def format_p(p: float) -> str:
    """A p-value for a sentence: ``p = 0.031``, ``p < 1e-16``."""
    if not np.isfinite(p):
        return "p = n/a"
    if p < 1e-16:
        return "p < 1e-16"
    return f"p = {p:.3g}" if p < 0.001 else f"p = {p:.3f}"


def _complete(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values).any(axis=1)]


def cochrans_q(values: np.ndarray) -> tuple[float, int, float]:
    """Cochran's Q of a 0/1 matrix (rows: samples, columns: elements): ``(Q, df, p)``. Rows
    with NaN are left out; a matrix in which every row is constant gives Q = 0, p = 1."""
    x = _complete(np.asarray(values, dtype=np.float64))
    n, k = x.shape
    if k < 2:
        raise ValueError("a test of invariance needs at least two orbit elements")
    rows, cols = x.sum(1), x.sum(0)
    total = cols.sum()
    denom = k * total - np.sum(rows ** 2)
    if denom <= 0:
        return 0.0, k - 1, 1.0
    q = (k - 1) * (k * np.sum(cols ** 2) - total ** 2) / denom
    return float(q), k - 1, float(stats.chi2.sf(q, k - 1))


def friedman(values: np.ndarray) -> tuple[float, int, float]:
    """The Friedman statistic of a real matrix (rows: blocks/samples, columns: elements), with
    the tie correction: ``(χ²_F, df, p)``; rows with NaN are left out."""
    x = _complete(np.asarray(values, dtype=np.float64))
    n, k = x.shape
    if k < 2:
        raise ValueError("a test of invariance needs at least two orbit elements")
    if n == 0:
        return float("nan"), k - 1, float("nan")
    ranks = stats.rankdata(x, axis=1)
    rsum = ranks.sum(0)
    chi2 = 12.0 / (n * k * (k + 1)) * np.sum(rsum ** 2) - 3.0 * n * (k + 1)
    ties = 0.0
    for row in x:  # tie correction 1 − Σ(t³ − t) / (n k (k² − 1))
        _, counts = np.unique(row, return_counts=True)
        ties += float(np.sum(counts ** 3 - counts))
    corr = 1.0 - ties / (n * k * (k * k - 1))
    if corr <= 0:  # every row constant
        return 0.0, k - 1, 1.0
    chi2 /= corr
    return float(chi2), k - 1, float(stats.chi2.sf(chi2, k - 1))


def permutation_invariance(values: np.ndarray, *, permutations: int = 2000, seed: int = 0) -> tuple[float, int, float]:
    """Permutation test of equal column means, T = Σ_k (m_k − m̄)², permuting within rows:
    ``(T, permutations, p)``; rows with NaN are left out."""
    x = _complete(np.asarray(values, dtype=np.float64))
    if x.shape[1] < 2:
        raise ValueError("a test of invariance needs at least two orbit elements")

    def stat(m: np.ndarray) -> float:
        col = m.mean(0)
        return float(np.sum((col - col.mean()) ** 2))

    t = stat(x)
    rng = np.random.default_rng(seed)
    exceed = sum(stat(rng.permuted(x, axis=1)) >= t - 1e-12 for _ in range(permutations))
    return t, permutations, (1 + exceed) / (1 + permutations)


#: fewer samples than this and the bootstrap test is not run (its resamples repeat the same few samples)
MIN_BOOTSTRAP_SAMPLES = 5
#: the tests :func:`invariance_test` offers (``"auto"`` is ``"sup-t"``)
METHODS = ("sup-t", "cochran", "friedman", "permutation")


@dataclass(frozen=True)
class Drops:
    """Per-element drop from the reference element, with a simultaneous band (flat vectors in
    the metric's units, positive = worse than the reference). ``excluded`` marks the elements
    that are the reference itself as a group element (the reference, and e.g. 360° for 0°):
    their drop is 0 by construction, their band is [0, 0], and checks and counts skip them."""

    band: Band
    reference: int
    reference_is_identity: bool
    values: OrbitValues = field(repr=False)
    excluded: np.ndarray = field(repr=False)

    @property
    def tested(self) -> np.ndarray:
        """Boolean mask of the elements whose drop is tested (all but ``excluded``)."""
        return ~self.excluded

    @property
    def worst(self) -> int:
        """The flat index of the largest mean drop among the tested elements."""
        mean = np.where(self.tested & ~np.isnan(self.band.mean), self.band.mean, -np.inf)
        return int(np.argmax(mean))

    @property
    def max_drop(self) -> float:
        return float(self.band.mean[self.worst])

    @property
    def max_drop_interval(self) -> tuple[float, float]:
        """[max_k lower_k, max_k upper_k] over the tested elements: holds for the largest true
        drop whenever the band holds."""
        t = self.tested
        if not t.any():  # every element is the reference (e.g. an orbit of 0° and 360°)
            return 0.0, 0.0
        return float(np.nanmax(self.band.lower[t])), float(np.nanmax(self.band.upper[t]))

    @property
    def reference_text(self) -> str:
        if self.reference < 0:
            return "the baseline at the same element"
        where = self.values.where_text(self.reference)
        return "the identity" if self.reference_is_identity else f"the orbit's first element ({where})"


def orbit_drops(ov: OrbitValues, *, level: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                against: OrbitValues | None = None) -> Drops:
    """The drop of each element from the identity (from the orbit's first element when it has
    no identity; or, with ``against``, from the *same element* of another model on the same
    samples: a regression), with a simultaneous band."""
    q = ov.quality()
    if against is not None:
        if against.values.shape != ov.values.shape:
            raise ValueError(f"the two results differ in shape ({against.values.shape} vs {ov.values.shape}): "
                             "compare models on the same samples and orbit")
        diffs = against.quality() - q
        ref, is_identity = -1, False
        excluded = np.zeros(ov.n_elements, bool)
    else:
        ref, is_identity = ov.reference()
        excluded = ov.same_as(ref) if ov.n_elements > 1 else np.zeros(1, bool)
        diffs = q[:, [ref]] - q
    band = difference_band(diffs, from_binary=ov.binary, level=level, resamples=resamples, seed=seed,
                           tested=~excluded)
    if excluded.any():
        band = Band(mean=np.where(excluded, 0.0, band.mean), lower=np.where(excluded, 0.0, band.lower),
                    upper=np.where(excluded, 0.0, band.upper), critical=band.critical, level=band.level,
                    resamples=band.resamples, binary=band.binary, maxima=band.maxima)
    return Drops(band=band, reference=ref, reference_is_identity=is_identity, values=ov, excluded=excluded)


@dataclass(frozen=True)
class InvarianceTest:
    """The outcome of :func:`invariance_test` (see the module docstring)."""

    metric: str
    label: str
    method: str
    statistic: float
    df: int
    p_value: float
    n_samples: int
    n_elements: int
    left_out: int
    drops: Drops = field(repr=False)
    level: float = 0.95
    #: the smallest p-value the test can give (1 / (B + 1) for bootstrap and permutation tests; 0 otherwise)
    p_resolution: float = 0.0

    @property
    def max_drop(self) -> float:
        return self.drops.max_drop

    @property
    def max_drop_interval(self) -> tuple[float, float]:
        return self.drops.max_drop_interval

    @property
    def max_drop_at(self) -> dict[str, Any]:
        return self.drops.values.where(self.drops.worst)

    def invariant(self, alpha: float = 0.05) -> bool:
        """Whether H0 (the same mean everywhere) stands at level ``alpha``: not a proof of
        invariance, only the absence of evidence against it (see the max-drop interval)."""
        return not self.p_value <= alpha  # NaN (no test possible) counts as no evidence

    def sentence(self, alpha: float = 0.05) -> str:
        """One line, e.g. ``"not invariant (sup-t bootstrap test: max |t| = 32.1 over 72 contrasts,
        p ≤ 0.0005, 500 samples × 73 angles); largest drop of accuracy from the identity 0.878 at
        angle 95, and the largest true drop is in [0.829, 0.927] (simultaneous 95%)"``."""
        if not np.isfinite(self.p_value):
            verdict = f"no test ({self.method})"
        else:
            verdict = "no evidence against invariance" if self.invariant(alpha) else "not invariant"
        lo, hi = self.max_drop_interval
        left = f"; {self.left_out} samples with undefined values left out" if self.left_out else ""
        noun = element_noun(self.drops.values.dims)
        if self.p_resolution and self.p_value <= self.p_resolution * (1 + 1e-9):
            p_text = f"p ≤ {self.p_resolution:.2g}"
        else:
            p_text = format_p(self.p_value)
        if not np.isfinite(self.p_value):
            test = ""
        elif self.method.startswith("sup-t"):
            test = (f" ({self.method}: max |t| = {self.statistic:.3g} over {self.df} contrasts, {p_text}, "
                    f"{self.n_samples} samples × {self.n_elements} {noun})")
        else:
            test = (f" ({self.method} = {self.statistic:.4g}, {self.df} df, {p_text}, "
                    f"{self.n_samples} samples × {self.n_elements} {noun}{left})")
        return (f"{verdict}{test}; "
                f"largest drop of {self.label} from {self.drops.reference_text} {self.max_drop:.3f} at "
                f"{self.drops.values.where_text(self.drops.worst)}, and the largest true drop is in "
                f"[{lo:.3f}, {hi:.3f}] (simultaneous {self.level:.0%})")

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.max_drop_interval
        return {"metric": self.metric, "test": self.method, "statistic": self.statistic, "df": self.df,
                "p_value": self.p_value, "samples": self.n_samples, "elements": self.n_elements,
                "left_out": self.left_out, "reference": self.drops.reference_text, "max_drop": self.max_drop,
                "max_drop_lower": lo, "max_drop_upper": hi, "max_drop_at": self.max_drop_at, "level": self.level}


def invariance_test(result: Any, metric: str | None = None, *, method: str = "auto", level: float = 0.95,
                    subset: Any = None, resamples: int = DEFAULT_RESAMPLES, permutations: int = 2000,
                    seed: int = 0) -> InvarianceTest:
    """Test whether ``metric`` (default: the primary metric) has the same mean at every element
    of the result's orbit, and measure the largest drop from the identity.

    Args:
        method: ``"auto"`` or ``"sup-t"`` (the bootstrap test, valid under correlated elements),
            or the classical ``"cochran"`` (binary metrics), ``"friedman"``, ``"permutation"``
            (these assume exchangeable elements; see the module docstring).
        level: simultaneous level of the drop band (1 − α).
    """
    ov = orbit_values(result, metric, subset=subset)
    return invariance_test_values(ov, method=method, level=level, resamples=resamples, permutations=permutations,
                                  seed=seed)


def invariance_test_values(ov: OrbitValues, *, method: str = "auto", level: float = 0.95,
                           resamples: int = DEFAULT_RESAMPLES, permutations: int = 2000, seed: int = 0) -> InvarianceTest:
    """:func:`invariance_test` of an :class:`~orbitscope.stats.values.OrbitValues`."""
    if ov.n_elements < 2:
        raise ValueError("a test of invariance needs at least two orbit elements; this orbit has one")
    chosen = "sup-t" if method == "auto" else method
    if chosen not in METHODS:
        raise ValueError(f"unknown method {method!r}; use auto, {', '.join(METHODS)}")
    drops = orbit_drops(ov, level=level, resamples=resamples, seed=seed)
    complete = int((~np.isnan(ov.values).any(axis=1)).sum())
    resolution = 0.0
    if chosen == "sup-t" and ov.n_samples < MIN_BOOTSTRAP_SAMPLES:
        stat, df, p = float("nan"), int(drops.tested.sum()), float("nan")
        name, n_used, left = f"sup-t bootstrap test: needs at least {MIN_BOOTSTRAP_SAMPLES} samples", ov.n_samples, 0
    elif chosen == "sup-t":  # the drop band's contrasts, without the reference's own copies
        # the drop band's contrasts (without the reference's own copies) and its bootstrap maxima,
        # taken over the same tested columns
        q = ov.quality()
        contrasts = (q[:, [drops.reference]] - q)[:, drops.tested]
        stat = difference_statistic(contrasts, from_binary=ov.binary) if contrasts.shape[1] else 0.0
        p = bootstrap_p(stat, drops.band.maxima) if contrasts.shape[1] else 1.0
        df, name, resolution = contrasts.shape[1], "sup-t bootstrap test", 1 / (resamples + 1)
        n_used, left = ov.n_samples, 0
    else:
        n_used, left = complete, ov.n_samples - complete
        if complete == 0:  # e.g. detection views where every sample's object leaves the view somewhere
            stat, df, p = float("nan"), ov.n_elements - 1, float("nan")
            name = f"{chosen}: no sample has a value at every element; the drop band uses every value"
        elif chosen == "cochran":
            if not ov.binary:
                raise ValueError(f"Cochran's Q is for 0/1 metrics; {ov.metric!r} is not binary: use sup-t, friedman "
                                 "or permutation")
            stat, df, p = cochrans_q(ov.values)
            name = "Cochran's Q"
        elif chosen == "friedman":
            stat, df, p = friedman(ov.values)
            name = "Friedman χ²"
        else:
            stat, _, p = permutation_invariance(ov.values, permutations=permutations, seed=seed)
            df, name = ov.n_elements - 1, f"permutation test ({permutations} permutations) of Σ(m_k − m̄)²"
            resolution = 1 / (permutations + 1)
    return InvarianceTest(metric=ov.metric, label=ov.label, method=name, statistic=stat, df=df, p_value=p,
                          n_samples=n_used, n_elements=ov.n_elements, left_out=left, drops=drops, level=level,
                          p_resolution=resolution)

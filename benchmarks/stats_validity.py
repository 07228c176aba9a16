"""Validity of the whole-orbit statistics (orbitscope.stats), by simulation, in one table.

Synthetic results over samples × orbit elements whose elements are correlated
(:func:`orbitscope.stats.simulate.correlated_orbit`: a latent Gaussian AR(1) process along the
orbit, ρ^|j − k| between elements j and k; a binary metric thresholds it, a real one is the
latent itself), α = 0.05, the same simulations as ``tests/test_stats_validity.py`` with more
repetitions:

  (a) simultaneous coverage of the sup-t band (``sup_t_band``), K = 36 elements, binary
      accuracies 0.5–0.99 (elements near 1 included) and real means, n = 200 and n = 50; next to
      it the pointwise 95 % band (what ``aggregate`` draws: Wilson / Student-t) and the band's
      previous per-element intervals (Wilson at z = c; m ± c·s/√n) on the same data;
  (b) family-wise error of ``compare_values`` under H0 (A and B with identical marginals,
      correlated within a sample and across elements) for Holm, Bonferroni, max-T and no
      correction; FDR of Benjamini–Hochberg under a partial null (12 of 36 elements differ);
      a non-exchangeable H0 too (A's errors AR(1) ρ = 0.9, B's independent, same marginals);
  (c) power on planted differences (6 neighbouring elements): Holm vs max-T;
  (d) size of the invariance tests (the default sup-t bootstrap test; Cochran's Q, Friedman, within-row permutation) under H0 with
      exchangeable, independent and AR(1)-correlated elements, and power under a planted drop;
  (e) the release gate (``check_result``, evidence mode): false failures when every true drop
      is ≤ the tolerance (a third of the elements exactly at it), and the drop band's coverage;
  (f) ``simulate_power`` at ``plan_samples``' n against the planned power.

Each row: the rate, its Monte-Carlo standard error √(r(1 − r)/reps), the target, and
(rate − target)/s.e.(target). "ok" means within 3 s.e. of the target on the right side (the test
file's criterion); "BELOW"/"ABOVE" means the method misses its target by more than that; "info"
rows have no target (a contrast or a power).

Usage: python benchmarks/stats_validity.py [--repetitions 1000] [--seed 0] [--resamples 500]
       [--permutations 200] [--out benchmarks/results/stats_validity.txt] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from orbitscope.results.intervals import t_interval, wilson_interval
from orbitscope.stats import bands, gate, invariance, paired, planning
from orbitscope.stats.simulate import correlated_orbit
from orbitscope.stats.values import OrbitValues

ALPHA = 0.05
K = 36
MIN_POWER_REPS = 50  # repetitions of the power rows of (d) at least (--smoke: 5)


@dataclass
class Row:
    section: str
    method: str
    setting: str
    hits: float
    reps: int
    target: float | None  # None: no target (info)
    side: str  # ">=" (coverage, power), "<=" (error rates), "" (info)
    se: float | None = None  # for rates that are means of [0, 1] values (FDR): their sample s.e.

    @property
    def rate(self) -> float:
        return self.hits / self.reps

    @property
    def mc_se(self) -> float:
        return self.se if self.se is not None else math.sqrt(self.rate * (1 - self.rate) / self.reps)

    def verdict(self) -> tuple[str, str]:
        if self.target is None or not self.side:
            return "", "info"
        se_t = math.sqrt(self.target * (1 - self.target) / self.reps)
        if self.se is not None:
            se_t = max(self.se, 1e-12)
        z = (self.rate - self.target) / se_t
        if self.side == ">=":
            return f"{z:+6.1f}", "ok" if z >= -3 else "BELOW"
        return f"{z:+6.1f}", "ok" if z <= 3 else "ABOVE"


def ov_of(values: np.ndarray, binary: bool, *, lower_is_better: bool = False) -> OrbitValues:
    k = values.shape[1]
    return OrbitValues(values=values, metric="m", label="m", binary=binary, lower_is_better=lower_is_better,
                       dims=("angle",), shape=(k,), coords={"angle": 10.0 * np.arange(k)}, identity=0,
                       samples=np.arange(values.shape[0]))


def latent(rng: np.random.Generator, n: int, k: int, rho: float) -> np.ndarray:
    return correlated_orbit(n, np.zeros(k), rho=rho, binary=False, rng=rng)


def pair(rng, n, means_a, means_b, *, rho_a, rho_b, binary, within=0.5):
    """A and B on the same samples: a shared per-sample latent (correlation ``within``) plus each
    model's own; exchangeable when rho_a = rho_b and the means agree."""
    k = means_a.size
    shared = latent(rng, n, k, rho_a if rho_a == rho_b else 0.0)
    za = math.sqrt(within) * shared + math.sqrt(1 - within) * latent(rng, n, k, rho_a)
    zb = math.sqrt(within) * shared + math.sqrt(1 - within) * latent(rng, n, k, rho_b)
    if binary:
        return (za < stats.norm.ppf(means_a)).astype(float), (zb < stats.norm.ppf(means_b)).astype(float)
    return means_a + za, means_b + zb


def coverage(rows, reps, seed, resamples):
    for binary in (True, False):
        means = np.linspace(0.5, 0.99, K) if binary else np.linspace(0.0, 1.0, K)
        kind = "binary" if binary else "real"
        for n in (200, 50):
            for rho in (0.0, 0.9):
                rng = np.random.default_rng([seed, 1, int(binary), n, int(10 * rho)])
                sim = point = prev = 0
                for r in range(reps):
                    x = correlated_orbit(n, means, rho=rho, binary=binary, rng=rng)
                    band = bands.sup_t_band(x, binary=binary, level=1 - ALPHA, resamples=resamples, seed=r)
                    inside = lambda lo, hi: bool(np.all((lo <= means) & (means <= hi)))  # noqa: E731
                    sim += inside(band.lower, band.upper)
                    if binary:
                        point += inside(*wilson_interval(x.sum(0), np.full(K, n), 1 - ALPHA))
                        prev += inside(*wilson_interval(x.sum(0), np.full(K, n), 2 * stats.norm.cdf(band.critical) - 1))
                    else:
                        s = x.std(0, ddof=1)
                        point += inside(*t_interval(x.mean(0), s, np.full(K, n), 1 - ALPHA))
                        half = band.critical * s / math.sqrt(n)
                        prev += inside(x.mean(0) - half, x.mean(0) + half)
                setting = f"{kind}, K={K}, n={n}, rho={rho:g}"
                rows.append(Row("a", "sup-t band (simultaneous)", setting, sim, reps, 1 - ALPHA, ">="))
                rows.append(Row("a", "  pointwise 95% band", setting, point, reps, None, ""))
                rows.append(Row("a", "  previous: " + ("Wilson at z=c" if binary else "m ± c·s/√n"), setting, prev,
                                reps, None, ""))


def family_wise(rows, reps, seed, permutations):
    n = 200
    for binary in (True, False):
        kind = "binary" if binary else "real"
        means = np.linspace(0.6, 0.95, K) if binary else np.zeros(K)
        for rho_a, rho_b in ((0.0, 0.0), (0.9, 0.9), (0.9, 0.0)):
            rng = np.random.default_rng([seed, 2, int(binary), int(10 * rho_a), int(10 * rho_b)])
            hits = {c: 0 for c in (*paired.CORRECTIONS, "none")}
            for r in range(reps):
                a, b = pair(rng, n, means, means, rho_a=rho_a, rho_b=rho_b, binary=binary)
                va, vb = ov_of(a, binary), ov_of(b, binary)
                for c in paired.CORRECTIONS:
                    pc = paired.compare_values(va, vb, alpha=ALPHA, correction=c, permutations=permutations, seed=r)
                    hits[c] += bool((pc.worse | pc.better).any())
                hits["none"] += bool((pc.p <= ALPHA).any())
            corr = f"rho={rho_a:g}" if rho_a == rho_b else f"A rho={rho_a:g}, B rho={rho_b:g} (not exchangeable)"
            setting = f"{kind}, K={K}, n={n}, {corr}"
            for c, name in (("holm", "Holm"), ("bonferroni", "Bonferroni"), ("maxt", f"max-T ({permutations} flips)"),
                            ("fdr", "BH (FWER = FDR here)")):
                rows.append(Row("b", f"FWER {name}", setting, hits[c], reps, ALPHA, "<="))
            rows.append(Row("b", "  FWER uncorrected p ≤ α", setting, hits["none"], reps, None, ""))
    for binary in (True, False):
        kind = "binary" if binary else "real"
        means = np.linspace(0.6, 0.95, K) if binary else np.zeros(K)
        planted = np.arange(12)
        means_b = means.copy()
        means_b[planted] = stats.norm.cdf(stats.norm.ppf(means[planted]) + 0.35) if binary else means[planted] + 0.25
        rng = np.random.default_rng([seed, 3, int(binary)])
        fdp = np.empty(reps)
        for r in range(reps):
            a, b = pair(rng, n, means, means_b, rho_a=0.9, rho_b=0.9, binary=binary)
            pc = paired.compare_values(ov_of(a, binary), ov_of(b, binary), alpha=ALPHA, correction="fdr")
            flagged = pc.worse | pc.better
            fdp[r] = flagged[12:].sum() / max(flagged.sum(), 1)
        rows.append(Row("b", "FDR Benjamini–Hochberg", f"{kind}, 12 of {K} differ, rho=0.9", fdp.sum(), reps, ALPHA,
                        "<=", se=float(fdp.std(ddof=1) / math.sqrt(reps))))


def power(rows, reps, seed, permutations):
    n = 200
    planted = np.arange(15, 21)
    for binary in (True, False):
        kind = "binary" if binary else "real"
        means = np.full(K, 0.8) if binary else np.zeros(K)
        means_b = means.copy()
        means_b[planted] = stats.norm.cdf(stats.norm.ppf(0.8) + 0.6) if binary else 0.25
        rng = np.random.default_rng([seed, 4, int(binary)])
        found = {"holm": 0.0, "maxt": 0.0}
        for r in range(reps):
            a, b = pair(rng, n, means, means_b, rho_a=0.9, rho_b=0.9, binary=binary)
            for c in found:
                pc = paired.compare_values(ov_of(a, binary), ov_of(b, binary), alpha=ALPHA, correction=c,
                                           permutations=permutations, seed=r)
                found[c] += pc.worse[planted].mean()
        shift = f"accuracy 0.80 → {means_b[planted[0]]:.3f}" if binary else "+0.25 s.d."
        for c, name in (("holm", "Holm"), ("maxt", "max-T")):
            rows.append(Row("c", f"power {name} (per planted element)", f"{kind}, 6 of {K} ({shift}), rho=0.9",
                            found[c], reps, None, ""))


def invariance_tests(rows, reps, seed, permutations):
    def sample(rng, n, k, corr, drop, binary):
        if corr == "exchangeable":
            z = math.sqrt(0.5) * rng.standard_normal((n, 1)) + math.sqrt(0.5) * rng.standard_normal((n, k))
        else:
            z = latent(rng, n, k, {"independent": 0.0, "AR(1) rho=0.5": 0.5, "AR(1) rho=0.9": 0.9}[corr])
        shift = np.zeros(k)
        shift[k // 3: k // 3 + 3] = drop
        return (z < stats.norm.ppf(0.8) - shift).astype(float) if binary else z - shift

    def p_value(method, x, r, binary):
        if method.startswith("sup-t"):  # the default test of invariance
            return invariance.invariance_test_values(ov_of(x, binary), resamples=500, seed=r).p_value
        if method == "cochran":
            return invariance.cochrans_q(x)[2]
        if method == "friedman":
            return invariance.friedman(x)[2]
        return invariance.permutation_invariance(x, permutations=permutations, seed=r)[2]

    for im, method in enumerate(("sup-t (binary)", "sup-t (real)", "cochran", "friedman", "permutation")):
        binary = method in ("cochran", "sup-t (binary)")
        n, k = (100, 12) if method == "permutation" else (200, K)
        for ic, corr in enumerate(("independent", "exchangeable", "AR(1) rho=0.5", "AR(1) rho=0.9")):
            rng = np.random.default_rng([seed, 5, im, ic])
            rej = 0
            for r in range(reps):
                x = sample(rng, n, k, corr, 0.0, binary)
                rej += p_value(method, x, r, binary) <= ALPHA
            rows.append(Row("d", f"size {method}", f"{'binary' if binary else 'real'}, K={k}, n={n}, H0, {corr}",
                            rej, reps, ALPHA, "<="))
        rng = np.random.default_rng([seed, 6, im])
        drop = 0.6 if method == "permutation" else 0.3
        rej = 0
        for r in range(max(reps // 4, MIN_POWER_REPS)):
            x = sample(rng, n, k, "exchangeable", drop, binary)
            rej += p_value(method, x, r, binary) <= ALPHA
        rows.append(Row("d", f"  power {method}", f"3 elements drop {drop:g} latent s.d., exchangeable", rej,
                        max(reps // 4, MIN_POWER_REPS), None, ""))


class _Result:
    def __init__(self, ov):
        self.ov, self.attrs = ov, {"run_name": "sim"}


def gate_checks(rows, reps, seed, resamples):
    n, k = 200, K + 1
    saved = gate.orbit_values
    gate.orbit_values = lambda result, metric=None, **_: result.ov
    try:
        for binary in (True, False):
            tol = 0.03 if binary else 0.15
            drops = np.zeros(k)
            drops[1::3], drops[2::3] = tol / 2, tol
            for rho in (0.0, 0.9):
                rng = np.random.default_rng([seed, 7, int(binary), int(10 * rho)])
                fails = covered = 0
                for r in range(reps):
                    if binary:
                        x = correlated_orbit(n, 0.93 - drops, rho=rho, binary=True, rng=rng)
                    else:
                        x = correlated_orbit(n, 1.0 + drops, rho=rho, binary=False, sd=0.5, rng=rng)
                    ov = ov_of(x, binary, lower_is_better=not binary)
                    report = gate.check_result(_Result(ov), max_drop=tol, alpha=ALPHA, resamples=resamples, seed=r)
                    fails += not report.passed
                    band = invariance.orbit_drops(ov, level=1 - ALPHA, resamples=resamples, seed=r).band
                    covered += bool(np.all((band.lower <= drops + 1e-12) & (drops <= band.upper + 1e-12)))
                setting = (f"{'binary acc 0.93' if binary else 'real error (lower is better)'}, {k} elements, "
                           f"drops 0/tol/2/tol={tol:g}, rho={rho:g}")
                rows.append(Row("e", "gate false failure (evidence)", setting, fails, reps, ALPHA, "<="))
                rows.append(Row("e", "drop band coverage", setting, covered, reps, 1 - ALPHA, ">="))
    finally:
        gate.orbit_values = saved


def planning_checks(rows, reps, seed, resamples):
    for delta, max_drop, accuracy in ((0.1, 0.0, 0.9), (0.1, 0.02, 0.9), (0.05, 0.0, 0.95)):
        plan = planning.plan_samples(delta, elements=K, accuracy=accuracy, power=0.8, alpha=ALPHA, max_drop=max_drop)
        est = planning.simulate_power(plan.n, delta, elements=K, accuracy=accuracy, max_drop=max_drop, alpha=ALPHA,
                                      repetitions=reps, resamples=resamples, seed=seed)
        rows.append(Row("f", "simulate_power at plan_samples' n",
                        f"acc {accuracy:g}, δ={delta:g}, tol={max_drop:g}, K={K}: n={plan.n}, rho=0.5",
                        est.power * reps, reps, plan.power, ">="))


SECTIONS = {"a": ("(a) simultaneous coverage", coverage), "b": ("(b) error control across elements", family_wise),
            "c": ("(c) power on planted differences", power), "d": ("(d) invariance tests", invariance_tests),
            "e": ("(e) release gate", gate_checks), "f": ("(f) sample-size planning", planning_checks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repetitions", type=int, default=1000, help="simulated orbit results per row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=500, help="bootstrap resamples per band")
    ap.add_argument("--permutations", type=int, default=200, help="sign flips (max-T) / permutations per test")
    ap.add_argument("--sections", default="abcdef", help="which of (a)–(f) to run, e.g. 'ab'")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "stats_validity.txt")
    ap.add_argument("--smoke", action="store_true", help="5 repetitions, 100 resamples, 20 permutations, nothing "
                    "written (the test suite runs this; its rates mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        global MIN_POWER_REPS
        args.repetitions, args.resamples, args.permutations, args.out, MIN_POWER_REPS = 5, 100, 20, None, 5

    reps = args.repetitions
    rows: list[Row] = []
    timing = []
    for key in args.sections:
        title, fn = SECTIONS[key]
        t0 = time.perf_counter()
        extra = args.resamples if key in "aef" else args.permutations
        fn(rows, reps, args.seed, extra)
        timing.append(f"{title}: {time.perf_counter() - t0:.0f} s")
        print(f"done {title} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    lines = [
        "Validity of orbitscope.stats by simulation (benchmarks/stats_validity.py)",
        f"command: python {shlex.join(sys.argv)}",
        f"seed {args.seed}; {reps} repetitions per row (power rows of (d): {max(reps // 4, MIN_POWER_REPS)}); α = {ALPHA}; "
        f"{args.resamples} bootstrap resamples per band; {args.permutations} sign flips / permutations per test",
        "rate ± Monte-Carlo s.e. √(r(1 − r)/reps); z = (rate − target) / s.e. at the target; "
        "ok = within 3 s.e. on the right side of the target",
        "",
    ]
    w_m = max(len(r.method) for r in rows)
    w_s = max(len(r.setting) for r in rows)
    head = f"{'method':<{w_m}}  {'setting':<{w_s}}  {'rate':>6}  {'s.e.':>6}  {'target':>8}  {'z':>6}  verdict"
    section = None
    for r in rows:
        if r.section != section:
            section = r.section
            lines += ["", SECTIONS[section][0], head, "-" * len(head)]
        z, verdict = r.verdict()
        target = f"{r.side} {r.target:.3f}" if r.target is not None and r.side else "—"
        lines.append(f"{r.method:<{w_m}}  {r.setting:<{w_s}}  {r.rate:6.3f}  {r.mc_se:6.3f}  {target:>8}  {z:>6}  "
                     f"{verdict}")
    misses = [r for r in rows if r.verdict()[1] in ("BELOW", "ABOVE")]
    lines += ["", f"{len(misses)} of {sum(1 for r in rows if r.side)} rows with a target miss it by more than 3 s.e."
              + (":" if misses else ".")]
    lines += [f"  {r.method.strip()} — {r.setting}: {r.rate:.3f} vs {r.side} {r.target:.3f}" for r in misses]
    lines += ["", "time per section: " + "; ".join(timing)]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

"""Queries (model evaluations) per input of each robustness test, side by side in one run.

Oracle inputs with known failure probability p ∈ {0, κ/10, κ/2, κ, 1.1κ, 2κ, 10κ} (1.1κ added to
show error control just above κ); for every test in :func:`orbitscope.robust.sequential.list_tests`:
mean and 95th percentile of queries per *decided* input, % decided, % certified (at p ≥ κ that
is the false-certification rate, to compare with α). Failures are drawn per look with
``rng.binomial`` (exact for i.i.d. Bernoulli samples), so this measures the statistics, not a model.

Targets for the default test (issue text), at α = κ = 0.01: at every p except κ, mean queries at
most half those of the fixed exact binomial test sized for power 0.99 at p = κ/2; at p = 0,
within 2× of the zero-failure minimum ln(1/α)/κ. The published rule has no cap; it is stopped at
--max-samples (undecided there).

Usage: python benchmarks/robust_queries.py [--reps 4000] [--seed 0] [--kappa 0.01] [--alpha 0.01]
       [--max-samples 65536] [--out benchmarks/results/robust_queries.txt] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from orbitscope.robust.sequential import DEFAULT_TEST, ROBUST, UNDECIDED, fixed_sample_size, list_tests, make_test, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=4000, help="simulated inputs per (test, p)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kappa", type=float, default=0.01)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--max-samples", type=int, default=65_536, help="safety cap for the uncapped published rule")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "robust_queries.txt")
    ap.add_argument("--smoke", action="store_true", help="50 inputs per cell, nothing written (the test suite runs this)")
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.out = 50, None

    kappa, alpha = args.kappa, args.alpha
    ps = [("0", 0.0), ("κ/10", kappa / 10), ("κ/2", kappa / 2), ("κ", kappa), ("1.1κ", 1.1 * kappa), ("2κ", 2 * kappa), ("10κ", 10 * kappa)]
    names = list_tests()
    tests = {name: make_test(name, kappa=kappa, alpha=alpha) for name in names}
    n_fixed = fixed_sample_size(kappa, alpha, 0.99, kappa / 2)
    zero_min = math.log(1 / alpha) / kappa
    rng = np.random.default_rng(args.seed)

    stats: dict[tuple[str, str], tuple[float, float, float, float]] = {}
    t0 = time.perf_counter()
    for name, test in tests.items():
        for label, p in ps:
            out, n, _ = simulate(test, p, args.reps, rng, max_samples=args.max_samples)
            decided = out != UNDECIDED
            nd = n[decided]
            mean = float(nd.mean()) if nd.size else float("nan")
            p95 = float(np.percentile(nd, 95)) if nd.size else float("nan")
            stats[name, label] = (mean, p95, 100 * decided.mean(), 100 * np.mean(out == ROBUST))
    elapsed = time.perf_counter() - t0

    lines = [
        f"Queries per decided input, α = {alpha:g}, κ = {kappa:g}, {args.reps} simulated inputs per cell, seed {args.seed}",
        f"fixed exact test n (power 0.99 at κ/2) = {n_fixed}; half = {n_fixed / 2:.0f}; "
        f"zero-failure minimum ln(1/α)/κ = {zero_min:.1f}; 2× = {2 * zero_min:.1f}",
        f"published rule capped at {args.max_samples} samples (undecided there)",
        "",
    ]
    for name in names:
        lines.append(f"  {name}: {tests[name].spec()}")
    lines.append("")
    w = 30
    head = f"{'p':>6} |" + "|".join(f"{n:^{w}}" for n in names)
    sub = f"{'':>6} |" + "|".join(f"{'mean':>7}{'p95':>7}{'dec%':>7}{'cert%':>8} " for _ in names)
    lines += [head, sub, "-" * len(sub)]
    for label, _ in ps:
        cells = []
        for name in names:
            mean, p95, dec, cert = stats[name, label]
            cells.append(f"{mean:7.0f}{p95:7.0f}{dec:7.1f}{cert:8.2f} ")
        lines.append(f"{label:>6} |" + "|".join(cells))
    lines.append("")
    lines.append(f"Targets for the default test ({DEFAULT_TEST!r}):")
    ok_all = True
    for label, _ in ps:
        if label in ("κ", "1.1κ"):
            continue
        mean = stats[DEFAULT_TEST, label][0]
        ok = mean <= n_fixed / 2
        ok_all &= ok
        lines.append(f"  p = {label:>5}: mean {mean:7.0f} = {mean / n_fixed:5.3f} × fixed n  (≤ 0.5: {'yes' if ok else 'NO'})")
    mean0 = stats[DEFAULT_TEST, "0"][0]
    ok0 = mean0 <= 2 * zero_min
    lines.append(f"  p =     0: mean {mean0:7.0f} = {mean0 / zero_min:5.2f} × zero-failure minimum  (≤ 2: {'yes' if ok0 else 'NO'})")
    lines.append(f"  all targets met: {'yes' if ok_all and ok0 else 'NO'}")
    fc = {name: stats[name, "κ"][3] / 100 for name in names}
    lines.append(
        "False certification at p = κ (nominal α = {:g}): ".format(alpha)
        + ", ".join(f"{n} {v:.4f}" for n, v in fc.items())
        + f"  (Monte-Carlo s.e. at α: {math.sqrt(alpha * (1 - alpha) / args.reps):.4f})"
    )
    lines.append(f"simulation time {elapsed:.1f} s")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

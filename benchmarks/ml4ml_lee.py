"""Does LEE beat ML4ML's variance matrices as features for the invariance assessors?

Reads a zoo's model database (``orbitscope zoo train --home HOME``) and the LEE features of the
same models (``orbitscope zoo lee FILE --home HOME``), and for every invariance cross-validates the
random forest and the logistic regression on the matrix features, on the LEE features and on both,
over the same family-held-out splits (10 repeats of 3 folds), then tests LEE − matrices and both −
matrices with the corrected resampled t-test (Nadeau & Bengio 2003). Prints the table and writes it
to ``benchmarks/results/ml4ml_lee.txt``.

Usage: python benchmarks/ml4ml_lee.py --home study-runs --lee study-runs/ml4ml_lee.npz [--smoke]
(--smoke: one repeat, nothing written; it still needs the zoo and its LEE file, which ``make study``
and ``make study-lee`` build in about 70 minutes, so the test suite skips it where they are absent.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orbitscope.ml4ml.lee_features import compare_feature_sets, read_zoo_lee
from orbitscope.ml4ml.modeldb import ModelDatabase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", required=True)
    ap.add_argument("--lee", required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "ml4ml_lee.txt"))
    ap.add_argument("--smoke", action="store_true", help="one repeat, nothing written (the zoo is still needed)")
    args = ap.parse_args()
    if args.smoke:
        args.repeats, args.out = 1, ""
    for path, how in ((Path(args.home), "make study"), (Path(args.lee), "make study-lee")):
        if not path.exists():
            raise SystemExit(f"{path} does not exist: build the zoo and its LEE features first ({how})")
    db = ModelDatabase(args.home, create=False)
    meta, _ = read_zoo_lee(args.lee)
    lines = [f"assessors on ML4ML matrices vs LEE vs both: {len(meta['model_ids'])} models of "
             f"{', '.join(sorted(set(meta['families'])))}; {args.repeats} repeats × 3 family-held-out folds"]
    for inv in meta["invariances"]:
        cmp = compare_feature_sets(db, args.lee, inv, repeats=args.repeats)
        lines.append(f"\n{inv}: {cmp.n_models} labelled models, majority rate {cmp.report.majority:.3f}")
        for name in cmp.report.names:
            lines.append(f"  {name:36s} accuracy {cmp.report.mean(name):.3f} (sd {cmp.report.std(name):.3f})")
        for t in cmp.tests:
            lines.append(f"  {t.a} − {t.b}: {100 * t.difference:+.1f} points, corrected resampled t = {t.t:.2f} "
                         f"(df {t.df}), p = {t.p_value:.3g}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

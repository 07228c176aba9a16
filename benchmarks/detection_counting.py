"""NERO's and COCO's counting, key-object vs every-box ground truth, on the detection demo's data.

Evaluates the demo's two shipped CentreDetectors (0 % and 100 % jitter) on the demo's 500
held-out key objects over its 8 × 8 window shifts (−32…24 by 8, 64-px view), once per setting:

* ``ground_truth``: ``"key"`` (the demo's: the key object alone, the other digits in view ignored
  regions; NERO's protocol) and ``"all"`` (every digit in view is ground truth);
* the score thresholds: the COCO-style default ``score_threshold=0.5`` with NERO's counting of
  every prediction (``nero_score_threshold=0``), and both at 0.05 (torchvision's
  ``box_score_thresh``, the floor NERO's Faster R-CNN had; NERO's default here).

It prints, per model and setting, the orbit means of the per-sample means of conf × IoU, of
precision / recall / F1 with COCO's one-to-one matching and with NERO's counting, of AP@0.5
(COCO) and NERO's "AP" (voc_ap of the per-sample pairs in sample order), the share of
sample-shifts whose top box scores at least 0.5, and the seconds each evaluation took. Then, per
model and ground truth, the COCO-style precision / recall / F1 re-counted from the stored states
at other score thresholds (exact: the CentreDetector returns 10 detections, all kept in the
states). Runs are stored under --home (a second call reads them back).

Usage: python benchmarks/detection_counting.py [--home /tmp/detection-counting] [--n 500] [--smoke]
(--smoke: 4 key objects × 4 × 4 shifts, a temporary store, the local executor; the test suite runs it.)
Results: benchmarks/results/detection_counting.txt
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import warnings

import numpy as np

import orbitscope as osc
from orbitscope.demos.detection import DETECTORS, SCENE_ORBIT, TEST_SCENES
from orbitscope.engine.executors import ProcessExecutor
from orbitscope.results.store import Store
from orbitscope.demos.shipped import cache_ready
from orbitscope.training.detection import DetectorRecipe, cached_detector, detection_training_data, detector_cache_path


def _mean(a: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(np.nanmean(np.asarray(a, dtype=np.float64), 0)))


def coco_counts_at(res, threshold: float) -> tuple[float, float, float]:
    """COCO-style precision, recall, F1 (orbit means of sample means) re-counted from a run's
    states at another score threshold: the greedy matching runs in score order, so the detections
    scoring at least the threshold keep their matches."""
    scores, labels = res.det_scores.values, res.det_labels.values
    matched = (res.det_matched.values.astype(np.int64) & 1).astype(bool)
    shown = (labels >= 0) & (scores >= threshold)
    if "det_ignored" in res.data:
        shown &= ~(res.det_ignored.values.astype(np.int64) & 1).astype(bool)
    tp = (matched & shown).sum(-1).astype(np.float64)
    n_pred, n_gt = shown.sum(-1).astype(np.float64), res.gt_visible.values.sum(-1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(n_pred > 0, tp / n_pred, np.nan)
        r = np.where(n_gt > 0, tp / n_gt, np.nan)
        f1 = np.where(n_pred + n_gt > 0, 2 * tp / (n_pred + n_gt), np.nan)
    return _mean(p), _mean(r), _mean(f1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", default="/tmp/detection-counting")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--smoke", action="store_true", help="4 key objects, a temporary store, the local executor")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    tmp = tempfile.TemporaryDirectory(prefix="detection-counting-") if args.smoke else None
    if tmp is not None:
        args.home, args.n = tmp.name, 4
    executor = None if args.smoke else ProcessExecutor(workers=2, threads=1)
    store = Store(args.home)
    recipe = next(iter(DETECTORS.values()))
    test = detection_training_data(DetectorRecipe(scenes=40 if args.smoke else TEST_SCENES, seed=1, view=recipe.view,
                                                  max_shift=recipe.max_shift), split="test")
    test = test.subset(range(min(args.n, len(test))))
    orbit_spec = "window-shift:-32:24:16" if args.smoke else SCENE_ORBIT
    orbit = osc.parse_orbit(orbit_spec)
    settings = {"COCO >= 0.5 (default), NERO >= 0": {"score_threshold": 0.5, "nero_score_threshold": 0.0},
                "COCO >= 0.05, NERO >= 0.05 (default)": {"score_threshold": 0.05, "nero_score_threshold": 0.05}}
    cols = ("conf×IoU", "P coco", "R coco", "F1 coco", "P nero", "R nero", "F1 nero", "AP@0.5", "NERO AP", "top≥0.5")
    print(f"{len(test)} key objects × {orbit.size} shifts ({orbit_spec}, 64-px view); orbit means of sample means")
    print(f"{'model':28s} {'ground truth':6s} {'setting':38s} " + " ".join(f"{c:>8s}" for c in cols) + "  seconds")
    sweeps = []
    for name, r in DETECTORS.items():
        if not cache_ready(detector_cache_path(r, store.home / "models")):
            raise SystemExit(f"the shipped weights of {name} are missing: this benchmark does not train")
        model, _ = cached_detector(r, store.home / "models")
        for gt in ("key", "all"):
            for label, kw in settings.items():
                t0 = time.perf_counter()
                res = osc.evaluate(model, test, orbit, osc.Detection(ground_truth=gt, **kw), view_size=(r.view, r.view),
                                   store=store, name=name, model_name=name, optimize=True, batch_size=50,
                                   executor=executor).result
                dm = osc.dataset_metrics(res)
                values = (_mean(res.conf_iou.values), _mean(res.precision.values), _mean(res.recall.values),
                          _mean(res.f1.values), _mean(res.nero_precision.values), _mean(res.nero_recall.values),
                          _mean(res.nero_f1.values), float(np.nanmean(dm["ap50"].values)),
                          float(np.nanmean(dm["nero_ap"].values)), float(np.mean(res.confidence.values >= 0.5)))
                print(f"{name:28s} {gt:6s} {label:38s} " + " ".join(f"{v:8.4f}" for v in values)
                      + f"  {time.perf_counter() - t0:6.1f}", flush=True)
            sweeps.append((name, gt, {t: coco_counts_at(res, t) for t in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)}))
    print("\nCOCO-style precision / recall / F1 (one-to-one matching, IoU >= 0.5) by score threshold")
    for name, gt, sweep in sweeps:
        print(f"{name:28s} {gt:4s} " + "  ".join(f">={t:.2f}: {p:.3f}/{rr:.3f}/{f:.3f}" for t, (p, rr, f) in sweep.items()))


if __name__ == "__main__":
    main()

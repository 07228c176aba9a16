"""NERO's jitter contrast on our CentreDetector (preliminary, while issue 13 is in progress).

Trains two detectors by the repo's recipe (jitter 0 % and 100 %, 40 epochs on the built-in digit
scenes, cached under --cache), then evaluates each on held-out key-object contexts (test digits,
scene seed 1) over the window shifts -32..28 by 4 (16 × 16) with a 64-px view, and prints the
aggregate confidence × IoU and AP@0.5 at the centre, their orbit means and the worst shift.

Usage: python benchmarks/detection_jitter.py [--cache orbitscope-runs/models] [--epochs 40] [--smoke]
(--smoke: 64 training scenes, 1 epoch, 40 test scenes, 4 × 4 shifts, a temporary cache; the test
suite runs it so the script cannot rot.)
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import warnings

import numpy as np

import orbitscope as osc
from orbitscope.training.detection import DetectorRecipe, cached_detector, detection_training_data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="orbitscope-runs/models")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--smoke", action="store_true", help="tiny training and test sets, 1 epoch, a temporary cache")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    tmp = tempfile.TemporaryDirectory(prefix="detection-jitter-") if args.smoke else None
    train_scenes = {"scenes": 64} if args.smoke else {}
    if tmp is not None:
        args.cache, args.epochs = tmp.name, 1
    test = detection_training_data(DetectorRecipe(scenes=40 if args.smoke else 400, seed=1), split="test")
    orbit = osc.parse_orbit("window-shift:-32:28:16" if args.smoke else "window-shift:-32:28:4")
    centre = int(np.flatnonzero(orbit.coords["tx"] == 0)[0])
    for jitter in (0.0, 1.0):
        t0 = time.time()
        recipe = DetectorRecipe(name=f"centre-detector-jitter{int(jitter * 100)}", jitter=jitter, epochs=args.epochs,
                                **train_scenes)
        model, info = cached_detector(recipe, args.cache)
        res = osc.evaluate(model, test, orbit, osc.Detection(), view_size=(64, 64)).result
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            agg = np.nanmean(res.conf_iou.values, 0)
        ap50 = osc.dataset_metrics(res)["ap50"].values
        print(f"jitter {jitter:.0%} ({info['steps']} steps, {'cached' if info['from_cache'] else 'trained'}, "
              f"{time.time() - t0:.0f} s), {res.n_samples} test objects: conf×IoU centre {agg[centre, centre]:.3f}, "
              f"orbit mean {np.nanmean(agg):.3f}, worst {np.nanmin(agg):.3f}; AP@0.5 centre {ap50[centre, centre]:.3f}, "
              f"orbit mean {np.nanmean(ap50):.3f}", flush=True)


if __name__ == "__main__":
    main()

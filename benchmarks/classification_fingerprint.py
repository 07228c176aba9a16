"""Fingerprint classification runs: run ids and a hash of every stored array.

Run it on two checkouts and diff the outputs to show that a change keeps classification results
bit-identical:

    .venv/bin/python benchmarks/classification_fingerprint.py > before.json   # on the old commit
    .venv/bin/python benchmarks/classification_fingerprint.py > after.json    # on the new one
    diff before.json after.json

It evaluates an untrained fixed-seed CNN and a nearest-centroid model on 60 real MNIST digits over
several orbits (rotation with 0 and 360, shifts, a product with scale, brightness, contrast), with
and without stored probabilities, normalisation and an activation probe, into a temporary store,
then hashes each stored variable (values, dtype, shape) read back from the store, and the
consensus measures computed from it.

Runs use ``optimize=False`` (the model as given: the engine as it was before optimisation became
the default, which changes numbers by float rounding); ``--defaults`` fingerprints the default
settings instead; ``--smoke`` uses 10 digits (one per class) instead of 60 (the test suite runs it
so the script cannot rot; its hashes are not the full run's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile

import numpy as np
import torch
from torch import nn

import orbitscope as osc
from orbitscope.data.datasets import mnist_subset


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2), nn.BatchNorm2d(8), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 10),
    ).eval()


def _centroid(data: object) -> nn.Module:
    x = torch.stack([data[i][0] for i in range(len(data))])  # type: ignore[index]
    y = torch.tensor([int(data[i][1]) for i in range(len(data))])  # type: ignore[index]
    mu = torch.stack([x[y == c].mean(0).flatten() for c in range(10)])
    fc = nn.Linear(mu.shape[1], 10)
    with torch.no_grad():
        fc.weight.copy_(0.05 * mu)
        fc.bias.copy_(-0.025 * (mu * mu).sum(1))
    return nn.Sequential(nn.Flatten(), fc).eval()


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(str((a.dtype.str, a.shape)).encode() + a.tobytes()).hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--defaults", action="store_true", help="fingerprint the default settings (optimize='auto')")
    ap.add_argument("--smoke", action="store_true", help="10 digits instead of 60 (the test suite runs this)")
    args = ap.parse_args()
    data = mnist_subset("test").stratified(1 if args.smoke else 6)
    cnn, cen = _cnn(), _centroid(mnist_subset("train").stratified(20))
    cases = [
        ("cnn-rotation", cnn, osc.Rotation(range(0, 361, 30)), {}),
        ("cnn-rotation-probs", cnn, osc.Rotation(range(0, 361, 45)), {"task": osc.Classification(store_probabilities=True)}),
        ("cnn-rot90-norm", cnn, osc.Rotation90(), {"normalize": ([0.1307], [0.3081])}),
        ("cen-shift", cen, osc.Translation(range(-4, 5, 2)), {"batch_size": 25}),
        ("cen-rot-scale", cen, osc.Product(osc.Rotation([0, 15, 90]), osc.Scale([0.8, 1.0, 1.2])), {}),
        ("cen-brightness", cen, osc.parse_orbit("brightness:0.7:1.3:0.1"), {}),
        ("cen-contrast-nearest", cen, osc.parse_orbit("contrast:0.5:1.5:0.25"), {"interpolation": "nearest"}),
        ("cnn-activations", cnn, osc.parse_orbit("rotation:-15:15:5"), {"activations": ["0", "4"]}),
        ("cen-probs-shift", cen, osc.Translation([-2, 0, 2]), {"task": osc.Classification(store_probabilities=True)}),
    ]
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as home:
        for name, model, orbit, kw in cases:
            if not args.defaults:
                kw = {"optimize": False, **kw}
            run = osc.evaluate(model, data, orbit, store=home, name=name, **kw)
            res = run.result
            entry = {"run_id": run.run_id}
            for var in sorted(res.data.data_vars):
                entry[var] = _digest(res.data[var].values)
            if "probabilities" in res.data:
                cons = osc.with_consensus(res)
                for var in sorted(set(cons.data.data_vars) - set(res.data.data_vars)):
                    entry["consensus:" + var] = _digest(np.asarray(cons.data[var].values))
                meas = osc.invariance_measures(res)
                for var in sorted(meas.data_vars):
                    entry["measure:" + var] = _digest(np.asarray(meas[var].values))
            out[name] = entry
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

"""Summary tables and dataset-level plots of detection runs, shared by the detection demo's parts
(:mod:`orbitscope.demos.detection`, :mod:`orbitscope.demos.text`, :mod:`orbitscope.demos.faces`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..engine.evaluation import Run
from ..results.result import dataset_metrics

__all__ = ["headline_rows", "counting_rows"]


def _nan_stats(a: np.ndarray) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(a)), float(np.nanmin(a))


def headline_rows(runs: list[Run], names: list[str], metric: str = "conf_iou") -> list[dict[str, Any]]:
    """Per model: ``metric``'s sample mean at every element, then its orbit mean, its value at the
    identity (the centred view) and its worst element; AP@0.5 likewise (or its consensus
    version for ``consensus_*`` metrics), and the orbit mean of NERO's own aggregate mean(conf)·mean(IoU)."""
    rows = []
    prefix = "consensus_" if metric.startswith("consensus_") else ""
    for run, name in zip(runs, names):
        res = run.result
        agg = res.aggregate(metric)["mean"].values
        identity = tuple(int(np.argmin(np.abs(res.data.coords[d].values))) for d in res.orbit_dims)
        mean, worst = _nan_stats(agg)
        dm = dataset_metrics(res)
        row = {"model": name, "samples": res.n_samples, "elements": int(np.prod(agg.shape)),
               f"{metric} mean": round(mean, 4), f"{metric} centre": round(float(agg[identity]), 4),
               f"{metric} worst": round(worst, 4)}
        ap = dm.get(f"{prefix}ap50")
        if ap is not None:
            ap_mean, ap_worst = _nan_stats(ap.values)
            row.update({f"{prefix}AP@0.5 mean": round(ap_mean, 4),
                        f"{prefix}AP@0.5 centre": round(float(ap.values[identity]), 4),
                        f"{prefix}AP@0.5 worst": round(ap_worst, 4)})
        if not prefix and "nero_conf_iou" in dm:
            row["NERO mean(conf)·mean(IoU)"] = round(_nan_stats(dm["nero_conf_iou"].values)[0], 4)
        row["run"] = run.run_id
        rows.append(row)
    return rows


def counting_rows(runs: list[Run], names: list[str], consensus: bool = False) -> list[dict[str, Any]]:
    """The two ways of counting side by side: per model, one row with COCO's one-to-one matching
    (``precision``, ``recall``, ``f1`` over detections scoring at least the task's
    ``score_threshold``, IoU ≥ 0.5; and AP@0.5) and one with NERO's (``nero_precision``, … over
    every prediction scoring at least ``nero_score_threshold``, IoU > 0.5 with +1-pixel sides,
    duplicates all true positives; and NERO's "AP", voc_ap of the per-sample pairs in sample
    order): orbit means of the sample means, and at the identity (the centred view). Against the
    consensus objects with ``consensus``. See :mod:`orbitscope.tasks.detection`."""
    prefix = "consensus_" if consensus else ""
    rows = []
    for run, name in zip(runs, names):
        res = run.result
        task = res.task()
        dm = dataset_metrics(res)
        identity = tuple(int(np.argmin(np.abs(res.data.coords[d].values))) for d in res.orbit_dims)
        ways = (("COCO matching", f"score ≥ {task.score_threshold:g}", ("precision", "recall", "f1"), "ap50"),
                ("NERO counting", f"score ≥ {task.nero_score_threshold:g}", ("nero_precision", "nero_recall", "nero_f1"),
                 "nero_ap"))
        for way, threshold, (p, r, f), ap in ways:
            if any(f"{prefix}{v}" not in res.data for v in (p, r, f)):
                continue  # a run stored before NERO's counting was recorded
            row: dict[str, Any] = {"model": name, "counting": way, "predictions": threshold}
            for label, v in (("precision", p), ("recall", r), ("F1", f)):
                agg = res.aggregate(f"{prefix}{v}")["mean"].values
                row[f"{label} mean"], row[f"{label} centre"] = round(_nan_stats(agg)[0], 4), round(float(agg[identity]), 4)
            if f"{prefix}{ap}" in dm:
                values = dm[f"{prefix}{ap}"].values
                row["AP mean"], row["AP centre"] = round(_nan_stats(values)[0], 4), round(float(values[identity]), 4)
            rows.append(row)
    return rows

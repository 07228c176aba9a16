"""Static NERO plots (matplotlib, no pyplot state: safe headless and in servers).

The layout follows the orbit's topology (NERO, arXiv 2305.19889):

* one ``angle`` dim -> **polar** plot: polar angle = rotation angle (counter-clockwise, as the
  images are displayed), radius = metric in [0, 1], rings at 0.2 … 0.8, one closed curve per model
  with its confidence band;
* two dims (shifts, products such as rotation × scale) -> **heatmaps** side by side, viridis,
  range [0, 1] for probabilities;
* one other dim (scale, brightness, contrast) -> **line** plot with bands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from .result import OrbitResult, aggregate

__all__ = ["nero_plot", "save_figure", "MODEL_COLOURS"]

#: Consistent model colours (colour-blind-safe Okabe–Ito order).
MODEL_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

_METRIC_LABELS = {
    "correct": "accuracy",
    "confidence": "true-class confidence",
    "top1_confidence": "top-1 confidence",
    "entropy": "entropy (nats)",
}


def _labels(results: Sequence[OrbitResult], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        if len(labels) != len(results):
            raise ValueError(f"got {len(labels)} labels for {len(results)} results")
        return list(labels)
    return [str(r.attrs.get("run_name") or r.attrs.get("model_name") or f"model {i}") for i, r in enumerate(results)]


def nero_plot(
    results: OrbitResult | Sequence[OrbitResult],
    variable: str = "correct",
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    level: float = 0.95,
    band: bool = True,
) -> Figure:
    """Aggregate NERO plot of one or more results over the same orbit dims.

    Args:
        results: results to compare (consistent colours from :data:`MODEL_COLOURS`).
        variable: the metric, e.g. ``"correct"`` (accuracy) or ``"confidence"``.
        labels: legend entries (default: run or model names).
        title: figure title (default: the metric).
        level: confidence level of the bands (Wilson for accuracy, Student-t for means).
        band: draw the confidence bands.
    """
    results = [results] if isinstance(results, OrbitResult) else list(results)
    if not results:
        raise ValueError("nothing to plot: give at least one result")
    dims = results[0].orbit_dims
    for r in results[1:]:
        if r.orbit_dims != dims:
            raise ValueError(f"cannot overlay results over different orbit dims: {dims} vs {r.orbit_dims}")
    names = _labels(results, labels)
    aggs = [aggregate(r, variable, level=level) for r in results]
    metric = _METRIC_LABELS.get(variable, variable)
    title = title or f"aggregate NERO plot: {metric}"
    if len(dims) == 1 and dims[0] == "angle":
        fig = _polar(aggs, names, metric, band)
    elif len(dims) == 1:
        fig = _line(aggs, names, dims[0], metric, band)
    elif len(dims) == 2:
        fig = _heatmaps(aggs, names, dims, metric, variable)
    else:
        raise ValueError(f"no NERO layout for {len(dims)}-D orbits {dims}; select a 1-D or 2-D slice first")
    fig.suptitle(title)
    return fig


def _polar(aggs: list, names: list[str], metric: str, band: bool) -> Figure:
    fig = Figure(figsize=(6.4, 6.4), layout="constrained")
    ax = fig.add_subplot(projection="polar")
    for i, (agg, name) in enumerate(zip(aggs, names)):
        colour = MODEL_COLOURS[i % len(MODEL_COLOURS)]
        theta = np.deg2rad(agg.coords["angle"].values)
        ax.plot(theta, agg["mean"].values, color=colour, lw=2, label=f"{name}")
        if band:
            ax.fill_between(theta, agg["lower"].values, agg["upper"].values, color=colour, alpha=0.2, lw=0)
    ax.set_ylim(0, 1)
    ax.set_rticks([0.2, 0.4, 0.6, 0.8])
    ax.set_rlabel_position(100)
    ax.set_thetagrids(range(0, 360, 45))
    ax.set_title(f"{metric} vs rotation angle (°, counter-clockwise)", fontsize=10, pad=14)
    ax.legend(loc="lower left", bbox_to_anchor=(-0.1, -0.12), fontsize=9, frameon=False)
    return fig


def _line(aggs: list, names: list[str], dim: str, metric: str, band: bool) -> Figure:
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for i, (agg, name) in enumerate(zip(aggs, names)):
        colour = MODEL_COLOURS[i % len(MODEL_COLOURS)]
        x = agg.coords[dim].values
        ax.plot(x, agg["mean"].values, color=colour, lw=2, marker="o", ms=3, label=name)
        if band:
            ax.fill_between(x, agg["lower"].values, agg["upper"].values, color=colour, alpha=0.2, lw=0)
    ax.set_xlabel(dim)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return fig


def _heatmaps(aggs: list, names: list[str], dims: tuple[str, ...], metric: str, variable: str) -> Figure:
    n = len(aggs)
    fig = Figure(figsize=(4.2 * n + 1.0, 4.0), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    bounded = variable in ("correct", "confidence", "top1_confidence")
    vmin, vmax = (0.0, 1.0) if bounded else (min(float(np.nanmin(a["mean"])) for a in aggs), max(float(np.nanmax(a["mean"])) for a in aggs))
    image = None
    for ax, agg, name in zip(axes, aggs, names):
        # first orbit dim along x, second along y (+y pointing down for image shifts)
        xa, ya = agg.coords[dims[0]].values, agg.coords[dims[1]].values
        image = ax.pcolormesh(_edges(xa), _edges(ya), agg["mean"].values.T, cmap="viridis", vmin=vmin, vmax=vmax)
        ax.set_xlabel(dims[0])
        ax.set_ylabel(dims[1])
        if dims[1] == "ty":
            ax.invert_yaxis()
        ax.set_title(name, fontsize=10)
    fig.colorbar(image, ax=list(axes), label=metric)
    return fig


def _edges(centres: np.ndarray) -> np.ndarray:
    c = np.asarray(centres, dtype=float)
    if len(c) == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = (c[1:] + c[:-1]) / 2
    return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])


def save_figure(fig: Figure, path: str | Path, dpi: int = 150) -> Path:
    """Save a figure (format from the extension: .png, .pdf, .svg); creates parent folders."""
    p = Path(path)
    if p.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ValueError(f"figure path must end in .png, .pdf or .svg, got {p.name!r}")
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi)
    return p

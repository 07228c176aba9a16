"""The demo's LEE section: the Lie derivative of every case study's models beside their orbit.

For each model: a LEE run (:func:`orbitscope.lie.lie_derivative`, with layers) on ``n`` samples
spread evenly over the case study's evaluation set (the same samples as the orbit run), and per
generator a row of ``lee.csv``: the mean LEE with its interval, the layer contributing most, and
the rank agreement (Spearman's ρ with its interval) between each sample's LEE and how much its
score moves over the whole orbit (the standard deviation over the orbit of the case study's
metric, :func:`orbitscope.analysis.reduce.orbit_statistic`; not for a model differentiated by
a symmetric difference, whose LEE is float noise when it is invariant). ``lee_layers_<generator>.png`` shows each model's layer shares.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from torch import nn

from ..engine.evaluation import Run
from ..lie.run import lie_derivative
from ..analysis.reduce import orbit_statistic
from ..lie.summary import lee_rows, rank_agreement
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks.base import Task
from ..viz.lee_plots import lee_layer_figure, lee_report_section
from ..viz.plot import save_figure

__all__ = ["LeeModel", "LeeSection", "LEE_SAMPLES", "lee_section", "spread_indices"]

#: samples per model in the demo's LEE section
LEE_SAMPLES = 100


@dataclass
class LeeModel:
    """One model of a case study's LEE section: its orbit run (for the rank agreement) and how to
    call :func:`~orbitscope.lie.lie_derivative` (``options``: e.g. ``view_size``, ``method``)."""

    name: str
    model: nn.Module
    orbit_run: Run | None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class LeeSection:
    """What :func:`lee_section` produced: the rows of ``lee.csv``, the files written, the LEE runs,
    and the HTML section for the case study's report."""

    rows: list[dict[str, Any]]
    files: dict[str, Path]
    runs: list[Run]
    html: str


def spread_indices(n_total: int, n: int) -> np.ndarray:
    """``n`` sample indices spread evenly over ``range(n_total)`` (all when fewer)."""
    return np.unique(np.linspace(0, n_total - 1, min(n, n_total)).round().astype(np.int64))


def lee_section(store: Store, models: Sequence[LeeModel], data: Any, task: Task, generators: Sequence[str], metric: str,
                folder: Path, *, n: int = LEE_SAMPLES, say: Callable[[str], None] = lambda m: None,
                seconds: dict[str, float] | None = None) -> LeeSection:
    """LEE runs for ``models`` on ``n`` samples of ``data`` (a dataset with ``subset``), their rows
    (see the module docstring), files (``lee.csv``, ``lee_layers_<generator>.png``) and report
    section."""
    index = spread_indices(len(data), n)
    subset = data.subset(index.tolist())
    rows: list[dict[str, Any]] = []
    runs = []
    for m in models:
        t0 = time.perf_counter()
        say(f"LEE of {m.name} on {len(index)} samples along {', '.join(generators)}")
        options = dict(m.options)
        options.setdefault("layers", options.get("method", "jvp") == "jvp")
        run = lie_derivative(m.model, subset, list(generators), task, store=store, model_name=m.name,
                             name=f"{m.name}-lee", batch_size=25, **options)
        if seconds is not None:
            seconds[f"lee {m.name}"] = time.perf_counter() - t0
        runs.append(run)
        spread = orbit_statistic(m.orbit_run.result, metric, "std")[index] if m.orbit_run is not None else None
        method = options.get("method", "jvp")
        for row in lee_rows(run.result, m.name):
            row["method"] = method
            if spread is not None and method == "difference":
                # a symmetric difference of an invariant model is float noise: ranking it is meaningless
                row.update({f"spearman_vs_orbit_{metric}_sd": float("nan"), "spearman_lo": float("nan"),
                            "spearman_hi": float("nan")})
            elif spread is not None:
                lee = np.asarray(run.result.data["lee"].sel(generator=row["generator"]).values)
                rho, lo, hi, _ = rank_agreement(lee, spread)
                row.update({f"spearman_vs_orbit_{metric}_sd": rho, "spearman_lo": lo, "spearman_hi": hi})
            rows.append(row)
    files = {"lee table": write_csv(rows, folder / "lee.csv", significant=("mean_lee", "lee_lo", "lee_hi", "median_lee"))}
    layered = [(m.name, r.result) for m, r in zip(models, runs) if "layer_lee" in r.result.data]
    for g in generators:
        if layered:
            files[f"lee layers {g}"] = save_figure(
                lee_layer_figure([r for _, r in layered], g, labels=[name for name, _ in layered]),
                folder / f"lee_layers_{g}.png")
    html = lee_report_section([r.result for r in runs], rows, labels=[m.name for m in models],
                              title=f"Lie derivative (LEE) on {len(index)} samples")
    return LeeSection(rows, files, runs, html)

"""LEE runs drawn: bar charts of each layer's share of the Lie derivative (one panel per model),
and the report section that shows them with the LEE table."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from ..lie.summary import layer_shares, listed_attr
from ..results.result import OrbitResult
from .report import html_table, svg_figure

__all__ = ["lee_layer_figure", "lee_report_section"]


def lee_layer_figure(results: Sequence[OrbitResult], generator: str, *, labels: Sequence[str] | None = None,
                     top: int = 12) -> Figure:
    """Horizontal bars: per model (three panels per row), the ``top`` layers by their share of the
    summed mean ``‖c_i‖²`` along ``generator`` (layers in network order; the rest summed as "other
    layers")."""
    if not results:
        raise ValueError("give at least one LEE run")
    labels = list(labels) if labels is not None else [str(r.attrs.get("model_name", f"model {i}"))
                                                      for i, r in enumerate(results)]
    cols = min(3, len(results))
    rows = -(-len(results) // cols)
    fig = Figure(figsize=(4.6 * cols, (0.32 * top + 1.6) * rows), constrained_layout=True)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(results):]:
        ax.set_axis_off()
    for ax, result, label in zip(axes, results, labels):
        shares = layer_shares(result, generator)
        if not shares:
            ax.text(0.5, 0.5, "run without layers", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        names = list(shares)
        types = dict(zip(names, listed_attr(result, "layer_types")))
        keep = sorted(np.argsort([-shares[n] for n in names])[:top])
        shown = [names[i] for i in keep]
        values = [shares[n] for n in shown]
        rest = 1.0 - sum(values)
        if rest > 1e-9:
            shown.append("other layers")
            values.append(rest)
        y = np.arange(len(shown))[::-1]
        ax.barh(y, values, color="#4c72b0")
        ax.set_yticks(y, [f"{n} ({types[n]})" if types.get(n) else n for n in shown], fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of Σ‖c_i‖² (mean over samples)")
        lee = float(np.nanmean(result.data["lee"].sel(generator=generator).values))
        ax.set_title(f"{label}\nLEE {lee:.3g} along {generator}", fontsize=9)
    return fig


#: what the report says LEE is (its definition and how it was computed)
LEE_NOTE = ("Local equivariance error LEE = ‖L<sub>X</sub> f(x)‖², the squared norm of the Lie derivative "
            "d/dt ρ<sub>out</sub>(g<sub>t</sub>)⁻¹ f(ρ<sub>in</sub>(g<sub>t</sub>) x) at t = 0 (Gruver et al., ICLR 2023, "
            "Eq. 4), in output² per generator unit² (a classifier's output: its class probabilities), by forward-mode "
            "differentiation through the model; mean over samples with a 95 % BCa bootstrap interval (LEE is heavy-tailed: "
            "compare the median). It measures equivariance to infinitesimal transformations only: a model "
            "symmetric under a finite group (e.g. 90° rotations) need not have LEE 0. Layer shares: each leaf "
            "module's mean ‖c<sub>i</sub>‖², its own contribution to L<sub>X</sub> f, over the sum of all layers'.")


def lee_report_section(results: Sequence[OrbitResult], rows: Sequence[dict], *, labels: Sequence[str] | None = None,
                       title: str = "Lie derivative (LEE)") -> str:
    """An HTML section for :func:`~orbitscope.viz.report.write_report`'s ``extra_sections``: the
    note on what LEE is, the rows (e.g. :func:`orbitscope.lie.summary.lee_rows`, with rank
    agreements), and the layer-share bar chart of each generator (runs with layers)."""
    import html

    parts = [f"<h2>{html.escape(title)}</h2><p class='note'>{LEE_NOTE}</p>", html_table([dict(r) for r in rows])]
    layered = [(i, r) for i, r in enumerate(results) if "layer_lee" in r.data]
    if layered:
        names = list(labels) if labels is not None else [str(r.attrs.get("model_name", i)) for i, r in enumerate(results)]
        generators = [str(g) for g in layered[0][1].data["generator"].values]
        for g in generators:
            parts.append(svg_figure(lee_layer_figure([r for _, r in layered], g, labels=[names[i] for i, _ in layered])))
    return "".join(parts)

"""One colour scale for the filled NERO layouts (mosaic, disk), shared by matplotlib and plotly.

* lower-is-better metrics (errors, losses, entropy): reversed viridis, so a low error is bright,
  over the 0th–80th percentile of all models' values (NERO's PIV convention; the top 20 % saturate);
* any other metric: viridis over the metric's range (``NeroData.value_range``, [0, 1] for
  probabilities), or the values' min–max when the data has none.

The range is shared by every model (and every cell or disk) of one figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analysis.nero import NeroData

__all__ = ["ColourScale", "colour_scale", "lower_is_better", "cell_edges"]

#: Upper percentile of the colour range of lower-is-better metrics (NERO: 80).
ERROR_PERCENTILE = 80.0


@dataclass(frozen=True)
class ColourScale:
    """``cmap``: a matplotlib name ("viridis" or "viridis_r"); ``plotly_scale`` and ``reverse``: the
    plotly equivalent; ``lo``/``hi``: the value range; ``rule``: the rule in words, for a caption
    (e.g. ``"colour: reversed viridis (low = bright), 0th–80th percentile of all models' values"``)."""

    cmap: str
    reverse: bool
    lo: float
    hi: float
    plotly_scale: str = "Viridis"
    rule: str = ""


def lower_is_better(data: NeroData) -> bool:
    """Whether a lower value of ``data.metric`` is better (from the variable's metadata, which
    :func:`~orbitscope.analysis.nero.prepare_aggregate` puts in ``info["lower_is_better"]``)."""
    return bool(data.info.get("lower_is_better", False))


def _finite(data: NeroData) -> np.ndarray:
    parts = [np.ravel(np.asarray(s.values, dtype=float)) for s in data.series]
    flat = np.concatenate(parts) if parts else np.empty(0)
    return flat[np.isfinite(flat)]


def colour_scale(data: NeroData) -> ColourScale:
    """The colour map and shared range of ``data`` (see the module docstring)."""
    values = _finite(data)
    reverse = lower_is_better(data)
    shared = "all models'" if len(data.series) > 1 else "the"
    if reverse and values.size:
        lo, hi = (float(v) for v in np.percentile(values, [0.0, ERROR_PERCENTILE]))
        rule = f"0th–{ERROR_PERCENTILE:g}th percentile of {shared} values"
        if hi <= lo:  # most values equal: fall back to the full range
            hi = float(values.max())
            rule = f"min–max of {shared} values (their 0th–{ERROR_PERCENTILE:g}th percentiles are equal)"
    elif data.value_range is not None:
        lo, hi = (float(v) for v in data.value_range)
        rule = f"[{lo:.3g}, {hi:.3g}]"
    elif values.size:
        lo, hi = float(values.min()), float(values.max())
        rule = f"min–max of {shared} values"
    else:
        lo, hi = 0.0, 1.0
        rule = "[0, 1] (no finite values)"
    if hi <= lo:
        hi = lo + 1.0
    name = "reversed viridis (low = bright)" if reverse else "viridis"
    return ColourScale("viridis_r" if reverse else "viridis", reverse, lo, hi, rule=f"colour: {name}, {rule}")


def cell_edges(centres: np.ndarray) -> np.ndarray:
    """Edges of the cells around sample points ``centres`` (n,) -> (n + 1,): midpoints between
    neighbours, and half a step beyond the ends (a single point gets a unit cell)."""
    c = np.asarray(centres, dtype=float)
    if len(c) == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = (c[1:] + c[:-1]) / 2
    return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])

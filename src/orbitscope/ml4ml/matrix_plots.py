"""Variance matrices as images, with fixed, stated colour scales.

ML4ML's convention (the authors' code flips the *rows*, see ``reference/seeds.md``): the matrix is
drawn as ``M[::-1, :]``, so the zero diagonal runs from bottom-left to top-right; rows are levels
p_{n−1} … p_0 from top to bottom, columns p_0 … p_{n−1} from left to right. Colour scales are fixed, not fitted per matrix, so matrices of different
models compare by eye:

* confidences (``top1_confidence``, ``confidence``): raw RMS change, 0 … 0.15 (ML4ML's range);
* activation statistics (``layer:stat``): RMS change *relative to the mean absolute value of the
  signal at the identity level* over the same images (raw activations have model-dependent
  scales), 0 … :data:`ACTIVATION_VMAX`. Assessors read features of the raw matrices, of these
  relative ones, or of both (``assessment_data(..., features=)``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .matrices import VarianceMatrices, identity_scale

__all__ = ["CONFIDENCE_VMAX", "ACTIVATION_VMAX", "display_matrix", "matrix_figure", "matrix_panel"]

#: Upper end of the colour scale for confidence matrices (ML4ML's 0…0.15).
CONFIDENCE_VMAX = 0.15
#: Upper end of the colour scale for activation matrices (relative RMS change).
ACTIVATION_VMAX = 0.2
_CMAP = "magma"


def display_matrix(vm: VarianceMatrices, name: str) -> tuple[np.ndarray, float, str]:
    """The matrix as drawn (rows flipped), its colour-scale maximum and the colour-bar label."""
    m = vm[name]
    if ":" in name:
        ref = identity_scale(vm.signals[vm.names.index(name)], vm.identity)
        m = m / ref if ref > 0 else np.zeros_like(m)
        return m[::-1, :], ACTIVATION_VMAX, "RMS change / mean |signal| at identity"
    return m[::-1, :], CONFIDENCE_VMAX, "RMS change of confidence"


def _draw(ax, vm: VarianceMatrices, name: str):  # type: ignore[no-untyped-def]
    shown, vmax, label = display_matrix(vm, name)
    n = len(vm.levels)
    im = ax.imshow(shown, cmap=_CMAP, vmin=0.0, vmax=vmax, interpolation="nearest")
    ticks = sorted({0, n // 2, n - 1})
    ax.set_yticks(ticks, [f"{vm.levels[n - 1 - t]:g}" for t in ticks])
    ax.set_xticks(ticks, [f"{vm.levels[t]:g}" for t in ticks])
    ax.set_xlabel(vm.level_dim)
    ax.set_ylabel(vm.level_dim)
    ax.set_title(name, fontsize=9)
    return im, label


def matrix_figure(vm: VarianceMatrices, name: str) -> Figure:
    """One matrix with its colour bar."""
    fig = Figure(figsize=(4.2, 3.6), layout="constrained")
    ax = fig.add_subplot()
    im, label = _draw(ax, vm, name)
    fig.colorbar(im, ax=ax, label=label, shrink=0.85)
    fig.suptitle(_subtitle(vm), fontsize=8)
    return fig


def matrix_panel(vm: VarianceMatrices, title: str | None = None) -> Figure:
    """All matrices of a model side by side; one colour bar per scale."""
    k = max(1, len(vm.names))
    fig = Figure(figsize=(2.6 * k + 1.2, 3.2), layout="constrained")
    axes = fig.subplots(1, k, squeeze=False)[0]
    bars: dict[str, tuple[object, list[object]]] = {}
    for ax, name in zip(axes, vm.names):
        im, label = _draw(ax, vm, name)
        bars.setdefault(label, (im, []))[1].append(ax)
    for label, (im, axs) in bars.items():
        fig.colorbar(im, ax=axs, label=label, shrink=0.8)
    fig.suptitle(title or _subtitle(vm), fontsize=9)
    return fig


def _subtitle(vm: VarianceMatrices) -> str:
    model = vm.attrs.get("model_name", "model")
    return f"{model}: {vm.split} images at identity (N = {vm.n_images}), {len(vm.levels)} levels"


def save_panel(vm: VarianceMatrices, path: str | Path, title: str | None = None) -> Path:
    """Write :func:`matrix_panel` to ``path`` (.png/.pdf/.svg)."""
    from ..viz.plot import save_figure

    return save_figure(matrix_panel(vm, title), path)

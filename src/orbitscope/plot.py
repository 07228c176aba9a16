"""Moved to :mod:`orbitscope.viz.plot`; this name is kept so existing imports keep working."""

from .viz.plot import render, nero_plot, individual_plot, save_figure, MODEL_COLOURS  # noqa: F401

__all__ = ['render', 'nero_plot', 'individual_plot', 'save_figure', 'MODEL_COLOURS']

"""Moved to :mod:`orbitscope.viz.interactive`; this name is kept so existing imports keep working."""

from .viz.interactive import render_plotly, figure_html  # noqa: F401

__all__ = ['render_plotly', 'figure_html']

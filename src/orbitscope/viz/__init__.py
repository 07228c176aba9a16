"""Renderers of prepared data: matplotlib (papers), plotly (web), and the self-contained report."""

"""Moved to :mod:`orbitscope.viz.report`; this name is kept so existing imports keep working."""

from .viz.report import write_report, summary_rows, non_equivariance  # noqa: F401

__all__ = ['write_report', 'summary_rows', 'non_equivariance']

"""Moved to :mod:`orbitscope.analysis.ranking`; this name is kept so existing imports keep working."""

from .analysis.ranking import Ranking, rank_samples, rank_differences  # noqa: F401

__all__ = ['Ranking', 'rank_samples', 'rank_differences']

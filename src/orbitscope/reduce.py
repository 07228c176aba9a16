"""Moved to :mod:`orbitscope.analysis.reduce`; this name is kept so existing imports keep working."""

from .analysis.reduce import METHODS, Embedding, embed, embed_models, orbit_statistic, orbit_vectors, reducible_variables  # noqa: F401

__all__ = ['METHODS', 'Embedding', 'embed', 'embed_models', 'orbit_statistic', 'orbit_vectors', 'reducible_variables']

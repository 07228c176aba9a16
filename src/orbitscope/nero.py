"""Moved to :mod:`orbitscope.analysis.nero`; this name is kept so existing imports keep working."""

from .analysis.nero import MODEL_COLOURS, NeroSeries, NeroData, metric_result, class_subset, check_same_samples, prepare_aggregate, prepare_individual, layout_kind  # noqa: F401

__all__ = ['MODEL_COLOURS', 'NeroSeries', 'NeroData', 'metric_result', 'class_subset', 'check_same_samples', 'prepare_aggregate', 'prepare_individual', 'layout_kind']

"""Finding one metric of a result by name: a recorded variable, a consensus metric computed on
demand, or the explanation of why it has no per-sample values.

This module sits below :mod:`orbitscope.stats` and :mod:`orbitscope.analysis`, so both read a
metric the same way without importing each other. The consensus variables themselves are
computed by :func:`orbitscope.analysis.consensus.with_consensus`, which registers itself here
(:func:`register_consensus`) when :mod:`orbitscope` is imported; this module never imports
:mod:`orbitscope.analysis`.

A *dataset-level* metric (one value per orbit element computed from all samples, e.g. AP@0.5) is
listed by :func:`dataset_metric_names`; it has no per-sample value, so :func:`metric_result`
refuses it with a pointer to the aggregate plots.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..errors import NotFoundError
from .result import OrbitResult

__all__ = ["consensus_metrics", "dataset_metric_names", "metric_result", "register_consensus"]

#: the function adding a result's consensus variables (set by :mod:`orbitscope.analysis.consensus`)
_CONSENSUS: list[Callable[[OrbitResult], OrbitResult]] = []


def register_consensus(add_consensus: Callable[[OrbitResult], OrbitResult]) -> None:
    """Set the function that returns a result with its consensus variables added.

    Args:
        add_consensus: takes an :class:`~orbitscope.results.OrbitResult` and returns a new one
            holding its variables plus the task's consensus metrics (registering again replaces it).
    """
    _CONSENSUS[:] = [add_consensus]


def consensus_metrics(result: OrbitResult) -> list[str]:
    """The label-free consensus metrics the result's task declares (computed on demand).

    Args:
        result: a stored or in-memory result.

    Returns:
        The names, in the task's order; empty when the result records no task.
    """
    task = result.task()
    return task.consensus_metric_names() if task is not None else []


def dataset_metric_names(results: OrbitResult | Sequence[OrbitResult]) -> list[str]:
    """The dataset-level metrics every result can compute, in the task's order: those its task
    declares (:meth:`~orbitscope.tasks.Task.dataset_variables`), the ``consensus_*`` ones only
    for runs that stored consensus states, and only when every state ``compute`` reads is stored.

    Args:
        results: one result or several (the names all of them can compute).

    Returns:
        The metric names; empty for no results.
    """
    results = [results] if isinstance(results, OrbitResult) else list(results)
    if not results:
        return []
    common: list[str] | None = None
    for res in results:
        names = _available(res)
        common = names if common is None else [n for n in common if n in names]
    return common or []


def _available(result: OrbitResult) -> list[str]:
    task = result.task()
    if task is None:
        return []
    reads = task.compute_reads
    if reads is not None and not any(name in result.data for name in reads):
        return []
    has_consensus = any(str(v).startswith("consensus_") for v in result.data.data_vars)
    return [v.name for v in task.dataset_variables()
            if (has_consensus or not v.name.startswith("consensus_")) and v.name not in result.data]


def metric_result(result: OrbitResult, metric: str) -> OrbitResult:
    """``result`` itself if it records ``metric``, else with the consensus variables added.

    Args:
        result: a stored or in-memory result.
        metric: a recorded variable or one of :func:`consensus_metrics`.

    Returns:
        A result that holds ``metric`` as a variable.

    Raises:
        NotFoundError: the metric is unknown, or dataset-level (no per-sample values); the
            message lists the metrics that can be used.
    """
    if metric in result.data:
        return result
    if metric in consensus_metrics(result):
        if not _CONSENSUS:
            raise NotFoundError(f"{metric!r} is a consensus metric, computed by orbitscope.analysis.consensus: "
                                "`import orbitscope` (which loads it) before asking for it")
        return _CONSENSUS[0](result)
    known = sorted(set(consensus_metrics(result)) |
                   {v for v in result.data.data_vars if result.data[v].dims[1:] == result.orbit_dims})
    dataset = dataset_metric_names(result)
    if metric in dataset:
        raise NotFoundError(f"{metric!r} is a dataset-level metric (one value per element from all samples): it has "
                            f"no per-sample values; use it in an aggregate plot, or one of {', '.join(map(str, known))}")
    raise NotFoundError(f"unknown metric {metric!r}; available: {', '.join(map(str, known))}"
                        + (f"; dataset-level (aggregate plots only): {', '.join(dataset)}" if dataset else ""))

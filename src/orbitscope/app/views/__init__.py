"""Task-specific parts of the web interface, behind one small interface.

The shell (selectors, aggregate and individual NERO plots, dimension-reduction scatters, ranking
sliders, linking) knows nothing about tasks: it reads metric *variables* over ``sample`` × orbit
dims. A :class:`TaskView` supplies what does depend on the task: which metrics exist and which way
is better, how samples split into subsets (classes, flow types …), whether label-free mode is
possible, and the detail panel (the transformed input and the model outputs at the selected
element, and live re-evaluation at any element). Classification is implemented in
:mod:`.classification`, detection (boxes over the context image at each shift) in
:mod:`.detection`, dense flow (PIV: the transformed pair, moved flow fields, EPE maps) in
:mod:`.flow`, point clouds (the rotated cloud in 3-D, class bars, live re-evaluation at any
rotation) in :mod:`.pointcloud`; other tasks plug in the same way with :func:`register_view`.

Views live in the registry :data:`VIEWS` (task kind -> view class). :func:`view_for` looks a run's
``task["kind"]`` up there and falls back to the generic :class:`TaskView` for kinds without a
view; :func:`register_view` (a class decorator) adds or replaces the view of a kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
from dash import html
from torch import nn

from ..._registry import Registry
from ...errors import SpecError
from ...group.orbits import Orbit
from ...analysis.reduce import reducible_variables
from ...results.result import OrbitResult

__all__ = ["DetailRequest", "PixelMode", "TaskView", "VIEWS", "list_views", "register_view", "view_for"]


@dataclass(frozen=True)
class PixelMode:
    """What the mosaic's per-pixel mode can draw for one metric (see :meth:`TaskView.pixel_mode`).

    Attributes:
        shown: whether the interface offers the per-pixel / averaged toggle at all (the orbit is
            drawn as a mosaic and the task stores per-pixel maps).
        variable: the per-pixel map drawn in each cell in per-pixel mode (a variable with dims
            ``sample`` × orbit dims × two map dims); None when there is none for this metric
            (the cells then show each element's mean, and ``note`` says why and how to get maps).
        note: one line for the toggle's tooltip and the plot's caption.
    """

    shown: bool = False
    variable: str | None = None
    note: str = ""

    def drawn(self, metric: str, averaged: bool) -> tuple[str, str | None]:
        """The variable a mosaic of ``metric`` draws and the line its caption gets (None: no
        toggle, nothing to say): the map in per-pixel mode (the default), else ``metric``
        itself, one mean per cell (``averaged``, or no map: ``note`` says why)."""
        if not self.shown:
            return metric, None
        if self.variable is None:
            return metric, self.note
        if averaged:
            return metric, "averaged: each cell is the element's mean (per-pixel maps: the mosaic-cells toggle)"
        return self.variable, self.note


@dataclass(frozen=True, eq=False)
class DetailRequest:
    """What a detail panel shows: one sample at one orbit element, for every compared run.

    Attributes:
        results: the compared results (aligned on their common samples; with the consensus
            variables when label-free mode or a consensus metric is on).
        run_ids, names, colours: per run, in comparison order.
        sample: the selected sample id.
        element: the selected grid element ``{dim: value}``.
        label_free: label-free (consensus) mode.
        live_point: for :meth:`TaskView.live_detail`: any point in the orbit's range.
        live_transform: the orbit element at ``live_point`` as a one-element orbit.
        live_outputs: per run, what :meth:`TaskView.evaluate_live` returned (None: not loadable).
    """

    results: Sequence[OrbitResult]
    run_ids: Sequence[str]
    names: Sequence[str]
    colours: Sequence[str]
    sample: int
    element: Mapping[str, float]
    label_free: bool = False
    live_point: Mapping[str, float] | None = None
    live_transform: Orbit | None = None
    live_outputs: Sequence[Any] | None = None


class TaskView:
    """Defaults that work for any task (metrics from the stored variables, no subsets, a detail
    panel listing the metric values); subclasses override what their task knows better."""

    #: The task kind (``task["kind"]`` of a run) this view serves.
    kind: ClassVar[str] = "generic"

    # -- selectors ------------------------------------------------------------------------------
    def metric_options(self, results: Sequence[OrbitResult], label_free: bool) -> list[tuple[str, str]]:
        """``(value, label)`` of the metrics every result can show (in label-free mode only
        metrics that need no labels)."""
        common = set.intersection(*(set(reducible_variables(r)) for r in results)) if results else set()
        names = [v for v in sorted(common) if not (label_free and results[0].meta(v).needs_labels)]
        return [(v, results[0].meta(v).display) for v in names]

    def default_metric(self, options: Sequence[tuple[str, str]], label_free: bool) -> str | None:
        return options[0][0] if options else None

    def needs_consensus(self, metric: str | None, label_free: bool) -> bool:
        """Whether the results must carry label-free (consensus) variables."""
        return False

    def label_free_available(self, results: Sequence[OrbitResult]) -> bool:
        return False

    def label_free_unavailable(self, results: Sequence[OrbitResult]) -> str:
        """Why label-free mode is off for ``results`` (shown when :meth:`label_free_available`
        is False)."""
        return "label-free mode needs stored class probabilities for every selected model (evaluate with --probabilities)"

    def pixel_mode(self, results: Sequence[OrbitResult], metric: str | None) -> PixelMode:
        """The per-pixel maps behind ``metric`` that the mosaic can draw (the default: none, and
        no toggle)."""
        return PixelMode()

    def subset_options(self, results: Sequence[OrbitResult]) -> list[tuple[str, int]]:
        """``(label, value)`` of the sample subsets (e.g. classes); empty: no subsets."""
        return []

    def subset_mask(self, results: Sequence[OrbitResult], subset: int | None, label_free: bool) -> np.ndarray | None:
        """Boolean mask over the (aligned) samples of ``subset``; None: all samples."""
        return None

    # -- detail panel ---------------------------------------------------------------------------
    def stored_detail(self, req: DetailRequest, metric: str | None) -> list[Any]:
        """Components showing the stored values of the selected sample at the selected element."""
        rows = []
        for res, name in zip(req.results, req.names):
            da = res.data[metric].sel(sample=req.sample).sel({d: v for d, v in req.element.items()}, method="nearest")
            rows.append(html.Li(f"{name}: {metric} = {float(da.values):.4g}"))
        return [html.Ul(rows)]

    def evaluate_live(self, model: nn.Module, result: OrbitResult, sample: int, element: Orbit) -> Any:
        """Re-run ``model`` on the sample transformed by the one element of ``element``."""
        raise NotImplementedError(f"no live re-evaluation for {self.kind} tasks")

    def supports_live(self, results: Sequence[OrbitResult]) -> bool:
        return False

    def live_unavailable(self, results: Sequence[OrbitResult]) -> str:
        """Why there is no live re-evaluation (shown when :meth:`supports_live` is False)."""
        return "live re-evaluation needs the stored inputs"

    def live_detail(self, req: DetailRequest) -> list[Any]:
        """Components showing the live re-evaluation at ``req.live_point``."""
        return [html.P(f"no live re-evaluation for {self.kind} tasks yet")]

    @classmethod
    def register_callbacks(cls, app: Any, data: Any) -> None:
        """Attach the view's own Dash callbacks (controls of its detail panel that the shell
        does not know) to ``app``, serving the store behind ``data`` (an
        :class:`~orbitscope.app.data.AppData`). Called once per app for every registered view;
        the default adds none."""


#: The task views: task kind -> :class:`TaskView` subclass (see :func:`register_view`).
VIEWS: Registry[type[TaskView]] = Registry("task view", key="kind")


def register_view(cls: type[TaskView]) -> type[TaskView]:
    """Register a view class for its ``kind`` (usable as a class decorator); a later
    registration for the same kind replaces the earlier one (so a view can be overridden)."""
    if not (isinstance(cls, type) and issubclass(cls, TaskView)):
        raise TypeError(f"a task view must be a TaskView subclass, got {cls!r}")
    if "kind" not in vars(cls) or not isinstance(cls.kind, str) or not cls.kind:
        raise SpecError(f"{cls.__name__} needs its own non-empty kind (the task kind it serves, e.g. "
                        f"'classification'), got {cls.kind!r}")
    VIEWS.register(cls.kind, cls, replace=True)
    return cls


def list_views() -> list[str]:
    """The task kinds that have a registered view (sorted)."""
    return VIEWS.names()


def view_for(task_kind: str | None) -> TaskView:
    """The view for a task kind: its own, else the view of the nearest registered task class it
    derives from (e.g. a :class:`~orbitscope.tasks.Classification` subclass on point clouds gets
    the classification view), else the generic view."""
    if task_kind in VIEWS:
        return VIEWS.get(task_kind)()
    from ...tasks.base import TASKS

    if isinstance(task_kind, str) and task_kind in TASKS:
        for base in TASKS.get(task_kind).__mro__[1:]:
            kind = getattr(base, "kind", None)
            if isinstance(kind, str) and kind in VIEWS:
                return VIEWS.get(kind)()
    return TaskView()


from . import classification, detection, flow, pointcloud  # noqa: E402,F401  (register the built-in views; need the names above)

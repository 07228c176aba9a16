"""The detection view (NERO's detection case study): does the box move with the object?

Orbits of a detection run are shifts of the field of view over a larger context image (a
``window`` input, NERO's setting) or moves of the whole image; the shell draws them as heat maps
over (tx, ty), +ty downwards, and a click on a cell selects that shift.

Detail panel, per compared run, for the selected sample at the selected element:

* the **context image** (the stored ``input``: a run evaluated with ``store_inputs=True``), with
  the **field of view** at that element (the view frame mapped back by g⁻¹; outside it is
  dimmed), the **ground truth** (``target_boxes`` / ``target_labels`` / ``target_valid``, context
  frame; boxes out of view at this element are faded), the model's **top-3 predictions**
  (``top_boxes``, stored in the frame the model saw: mapped back to the context frame by g⁻¹, i.e.
  for a shift t of a ``view_size`` (h, w) window over a (H, W) context, view pixel (x, y) is
  context pixel (x + (W − w)/2 − tx, y + (H − h)/2 − ty)), and, for a run evaluated with
  ``consensus=True``, its **consensus objects** (``consensus_boxes``, context frame);
* a table of the top predictions: rank, class (``det_labels``), confidence (``det_scores``),
  IoU with the ground truth moved into the view and clipped (any class, as the task's ``iou``),
  and IoU with the consensus objects moved likewise;
* the stored metrics at that element.

The live panel re-runs every model whose weights are in the store at any element in the orbit's
range (e.g. tx = 3 between grid shifts): the window is cut from the stored context at that
element, the model's boxes are drawn on the context image the same way, with the table and the
metrics scored against the moved ground truth (and consensus).

Label-free mode (runs evaluated with ``consensus=True``): the metrics that need labels are
hidden (``confidence`` and the ``consensus_*`` metrics remain), class subsets follow the **first
compared run's** first consensus object, and the table's IoU is against the consensus.
Subsets otherwise are by the class of each sample's first ground-truth object.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from dash import dcc, html
from torch import nn

from ...engine.model_call import ModelCall
from ...group.elements import Transforms
from ...group.orbits import Orbit
from ...analysis.reduce import reducible_variables
from ...kinds import Boxes, box_iou, clip_boxes, get_kind, transform_boxes, transform_keypoints
from ...results.result import OrbitResult
from ...tasks import Detection
from ...tasks.detection import TOP_BOXES
from ..state import describe_element, flat_index
from . import DetailRequest, TaskView, register_view
from .classification import png_data_uri

__all__ = [
    "BOX_STYLES",
    "DetectionView",
    "LiveDetections",
    "context_image",
    "context_to_view",
    "detection_figure",
    "field_of_view",
    "frame_sizes",
    "view_to_context",
]

#: the detection task's per-element metrics, in menu order, and their consensus versions
_METRICS = tuple(v.name for v in Detection().variables() if v.kind != "state")
_CONSENSUS = tuple(v.name for v in Detection().consensus_variables() if v.kind != "state")
_SHORT = {"confidence": "confidence", "iou": "IoU", "conf_iou": "conf × IoU", "precision": "precision",
          "recall": "recall", "f1": "F1"}
#: how each kind of box is drawn: colour, dash, line width, legend name
BOX_STYLES: dict[str, dict[str, Any]] = {
    "fov": {"color": "#FFD600", "dash": "solid", "width": 2.0, "name": "field of view"},
    "gt": {"color": "#00E676", "dash": "solid", "width": 4.0, "name": "ground truth"},
    "prediction": {"color": "#FF3D00", "dash": "dash", "width": 2.0, "name": "prediction (top 3)"},
    "consensus": {"color": "#D500F9", "dash": "dot", "width": 2.0, "name": "consensus"},
}
_TABLE = {"borderCollapse": "collapse", "fontSize": "12px", "fontFamily": "monospace", "marginTop": "4px"}
_CELL = {"border": "1px solid #ddd", "padding": "1px 6px", "textAlign": "right"}


# --------------------------------------------------------------------------- geometry


def frame_sizes(result: OrbitResult) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """``(context (H, W), view (h, w))`` of a detection run: the context is the stored input's
    size (None without stored inputs); the view is the run's ``view_size`` for a window over
    context, None when the whole image moves (its frame is then the context's)."""
    context = None
    if "input" in result.data:
        sizes = result.data["input"].sizes
        context = (int(sizes["y"]), int(sizes["x"]))
    view = result.attrs.get("view_size")
    task = result.task()
    if getattr(task, "input_kind", "window") != "window" or view is None:
        return context, None
    view = json.loads(view) if isinstance(view, str) else view
    return context, (int(view[0]), int(view[1]))


def _frames(context: tuple[int, int], view: tuple[int, int] | None) -> dict[str, Any]:
    return {"image_size": context, "view_size": view}


def view_to_context(boxes: np.ndarray, t: Transforms, context: tuple[int, int],
                    view: tuple[int, int] | None) -> np.ndarray:
    """Boxes (n, 4) xyxy in the frame the model saw at the one element ``t`` -> the context frame
    (the inverse element, as :meth:`orbitscope.tasks.Task.canonicalize` maps outputs back; not
    clipped). For a shift t of a window: + ((W − w)/2 − tx, (H − h)/2 − ty)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if not len(b):
        return b
    xyxy = torch.as_tensor(b, dtype=torch.float64)[None]
    source, target = (view, context) if view is not None else (context, None)
    out = transform_boxes(xyxy, t.inverse(), source, layout="paired", view_size=target)
    return out[0].numpy()


def context_to_view(boxes: np.ndarray, t: Transforms, context: tuple[int, int],
                    view: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (n, 4) of the context frame moved by the one element ``t`` into the view (as the
    engine moves targets) and clipped to it: ``(boxes (n, 4), visible (n,))``."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if not len(b):
        return b, np.zeros(0, dtype=bool)
    xyxy = torch.as_tensor(b, dtype=torch.float64)[None]
    moved = transform_boxes(xyxy, t, context, layout="paired", view_size=view)
    clipped, visible = clip_boxes(moved, view or context)
    return clipped[0].numpy(), visible[0].numpy()


def field_of_view(t: Transforms, context: tuple[int, int], view: tuple[int, int] | None) -> np.ndarray:
    """The corners (4, 2) (x, y), in order around it, of the model's frame at the one element
    ``t``, in the context frame: an axis-aligned rectangle for shifts."""
    h, w = view or context
    corners = torch.tensor([[[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]]], dtype=torch.float64)
    source, target = (view, context) if view is not None else (context, None)
    return transform_keypoints(corners, t.inverse(), source, layout="paired", view_size=target)[0].numpy()


def context_image(result: OrbitResult, sample: int) -> np.ndarray:
    """The stored context image (C, H, W) float32 in [0, 1] of ``sample``.

    Raises:
        ValueError: the run did not store its inputs.
    """
    if "input" not in result.data:
        raise ValueError("this run did not store its context images (evaluate with store_inputs=True)")
    return result.data["input"].sel(sample=sample).values.astype(np.float32) / 255.0


def _iou_best(pred: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per prediction, its highest IoU with any of ``targets`` (NaN when there are none)."""
    if not len(pred):
        return np.zeros(0)
    if not len(targets):
        return np.full(len(pred), np.nan)
    iou = box_iou(torch.as_tensor(pred, dtype=torch.float64), torch.as_tensor(targets, dtype=torch.float64))
    return iou.amax(-1).numpy()


# --------------------------------------------------------------------------- per-sample data


@dataclass(frozen=True)
class _Objects:
    """Boxes of one kind in the context frame (valid ones only), with labels (and scores)."""

    boxes: np.ndarray
    labels: np.ndarray
    scores: np.ndarray | None = None


def _ground_truth(res: OrbitResult, sample: int) -> _Objects | None:
    if "target_boxes" not in res.data:
        return None
    point = res.data[["target_boxes", "target_labels", "target_valid"]].sel(sample=sample)
    valid = np.asarray(point["target_valid"].values, dtype=bool)
    return _Objects(np.asarray(point["target_boxes"].values, dtype=np.float64)[valid].reshape(-1, 4),
                    np.asarray(point["target_labels"].values)[valid].astype(np.int64))


def _consensus(res: OrbitResult, sample: int) -> _Objects | None:
    if "consensus_boxes" not in res.data:
        return None
    point = res.data[["consensus_boxes", "consensus_labels", "consensus_scores"]].sel(sample=sample)
    boxes = np.asarray(point["consensus_boxes"].values, dtype=np.float64).reshape(-1, 4)
    labels = np.asarray(point["consensus_labels"].values).astype(np.int64)
    keep = np.isfinite(boxes).all(1) & (labels >= 0)
    return _Objects(boxes[keep], labels[keep], np.asarray(point["consensus_scores"].values, dtype=np.float64)[keep])


def _first_labels(res: OrbitResult, source: str) -> np.ndarray:
    """Per sample, the class of its first ground-truth object (``source="target"``) or first
    consensus object (``"consensus"``); -1 for samples without one."""
    labels = np.asarray(res.data[f"{source}_labels"].values).reshape(res.n_samples, -1)
    if not labels.shape[1]:
        return np.full(res.n_samples, -1, dtype=np.int64)
    first = labels[:, 0].astype(np.int64)
    if source == "target" and "target_valid" in res.data:
        valid = np.asarray(res.data["target_valid"].values, dtype=bool).reshape(res.n_samples, -1)
        first = np.where(valid[:, 0], first, -1)
    return first


def _positions(res: OrbitResult, element: Mapping[str, float]) -> dict[str, int]:
    return {d: int(np.argmin(np.abs(res.data[d].values - float(element[d])))) for d in res.orbit_dims}


@dataclass(frozen=True)
class LiveDetections:
    """One model's detections on the live view: boxes (n, 4) in the view frame, sorted by
    score, their scores and classes, and the task's metrics there (against the moved ground
    truth, and ``consensus_*`` against the moved consensus objects when the run has them)."""

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Panel:
    """What one run's card shows."""

    name: str
    colour: str
    image: np.ndarray | None
    context: tuple[int, int] | None
    view: tuple[int, int] | None
    t: Transforms
    gt: _Objects | None
    consensus: _Objects | None
    pred_boxes: np.ndarray  # view frame
    pred_scores: np.ndarray
    pred_labels: np.ndarray
    metrics: dict[str, float]
    note: str | None = None


# --------------------------------------------------------------------------- drawing


def _box_path(b: Sequence[float]) -> tuple[list[float], list[float]]:
    x0, y0, x1, y1 = (float(v) for v in b)
    return [x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0]


def _trace(role: str, xs: list[float], ys: list[float], text: str, shown: set[str], **meta: Any) -> dict[str, Any]:
    style = BOX_STYLES[role]
    first = role not in shown
    shown.add(role)
    opacity = meta.pop("opacity", 1.0)
    width = meta.pop("width", style["width"])
    return {"type": "scatter", "mode": "lines", "x": xs, "y": ys, "name": style["name"], "legendgroup": role,
            "showlegend": first, "opacity": opacity,
            "line": {"color": style["color"], "dash": style["dash"], "width": width},
            "text": [text] * len(xs), "hovertemplate": "%{text}<extra></extra>", "meta": {"role": role, **meta}}


def detection_figure(image: np.ndarray, fov: np.ndarray, gt: Sequence[tuple[Sequence[float], int, bool]],
                     predictions: Sequence[tuple[Sequence[float], int, float, float]],
                     consensus: Sequence[tuple[Sequence[float], int, float]], height: int = 300) -> dict[str, Any]:
    """The context image with its boxes, as a plotly figure (a plain dict, built per click).

    Args:
        image: (C, H, W) in [0, 1]; pixel (row i, column j) spans [j, j + 1] × [i, i + 1].
        fov: the field of view's corners (4, 2) in context pixels; outside it is dimmed.
        gt: (box, class, in view) per ground-truth object; objects out of view are faded.
        predictions: (box, class, score, IoU) per prediction, by rank.
        consensus: (box, class, score) per consensus object.

    Every box is a closed line trace whose ``meta`` holds its ``role`` (``fov``, ``gt``,
    ``prediction``, ``consensus``) and its ``box`` (xyxy, context pixels), ``rank`` for
    predictions; the legend names each kind once (:data:`BOX_STYLES`).
    """
    _, h, w = image.shape
    shown: set[str] = set()
    data: list[dict[str, Any]] = [{"type": "image", "source": png_data_uri(image), "x0": 0.5, "y0": 0.5, "dx": 1,
                                   "dy": 1, "hoverinfo": "skip", "meta": {"role": "image"}}]
    ring = [[float(x), float(y)] for x, y in fov]
    data.append(_trace("fov", [p[0] for p in ring + ring[:1]], [p[1] for p in ring + ring[:1]], "field of view",
                       shown, polygon=ring))
    for box, label, visible in gt:
        text = f"ground truth: class {label}" + ("" if visible else " (out of view)")
        data.append(_trace("gt", *_box_path(box), text, shown, box=[float(v) for v in box], label=int(label),
                           in_view=bool(visible), opacity=0.85 if visible else 0.35))
    for box, label, score in consensus:
        data.append(_trace("consensus", *_box_path(box), f"consensus: class {label}, score {score:.2f}", shown,
                           box=[float(v) for v in box], label=int(label), score=float(score)))
    annotations = []
    for rank, (box, label, score, iou) in enumerate(predictions, start=1):
        iou_text = "" if not math.isfinite(iou) else f", IoU {iou:.2f}"
        data.append(_trace("prediction", *_box_path(box), f"prediction #{rank}: class {label}, score {score:.2f}{iou_text}",
                           shown, box=[float(v) for v in box], rank=rank, label=int(label), score=float(score),
                           width=BOX_STYLES["prediction"]["width"] if rank == 1 else 1.2,
                           opacity=1.0 if rank == 1 else 0.7))
        annotations.append({"x": float(box[0]), "y": float(box[1]), "text": f"#{rank}", "showarrow": False,
                            "xanchor": "left", "yanchor": "bottom", "font": {"size": 10, "color": BOX_STYLES[
                                "prediction"]["color"]}, "bgcolor": "rgba(0,0,0,0.45)", "borderpad": 1})
    hole = " ".join(f"{'M' if i == 0 else 'L'}{x:.3f},{y:.3f}" for i, (x, y) in enumerate(ring)) + " Z"
    shapes = [{"type": "path", "path": f"M0,0 H{w} V{h} H0 Z {hole}", "fillrule": "evenodd", "xref": "x",
               "yref": "y", "fillcolor": "rgba(0,0,0,0.45)", "line": {"width": 0}, "layer": "above"}]
    layout = {"height": height, "margin": {"l": 30, "r": 4, "t": 6, "b": 22}, "template": "plotly_white",
              "xaxis": {"range": [0, w], "showgrid": False, "zeroline": False, "constrain": "domain",
                        "tickfont": {"size": 9}},
              "yaxis": {"range": [h, 0], "showgrid": False, "zeroline": False, "scaleanchor": "x",
                        "scaleratio": 1, "constrain": "domain", "tickfont": {"size": 9}},
              "legend": {"x": 1.02, "y": 1, "xanchor": "left", "yanchor": "top", "font": {"size": 10},
                         "bgcolor": "rgba(255,255,255,0.8)"},
              "shapes": shapes, "annotations": annotations, "meta": {"context": [h, w]}}
    return {"data": data, "layout": layout}


def _fmt(v: float, digits: int = 3) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _table(panel: _Panel, label_free: bool, id_: str) -> Any:
    """Rank, class, confidence, and the IoU with the ground truth (not in label-free mode) and with
    the consensus objects, both moved into the view and clipped (needs the context's size, known
    from the stored input)."""
    columns: list[tuple[str, np.ndarray]] = []
    if panel.context is not None:
        for name, objects in (("GT", None if label_free else panel.gt), ("consensus", panel.consensus)):
            if objects is not None:
                moved, visible = context_to_view(objects.boxes, panel.t, panel.context, panel.view)
                columns.append((f"IoU ({name})", _iou_best(panel.pred_boxes, moved[visible])))
    head = html.Tr([html.Th(c, style=_CELL) for c in ("rank", "class", "confidence", *(n for n, _ in columns))])
    rows = [html.Tr([html.Td(str(k + 1), style=_CELL), html.Td(str(int(panel.pred_labels[k])), style=_CELL),
                     html.Td(_fmt(float(panel.pred_scores[k])), style=_CELL),
                     *(html.Td(_fmt(float(iou[k])), style=_CELL) for _, iou in columns)])
            for k in range(len(panel.pred_boxes))]
    if not rows:
        rows = [html.Tr(html.Td("no detection", colSpan=3 + len(columns), style={**_CELL, "textAlign": "center"}))]
    return html.Table([html.Thead(head), html.Tbody(rows)], id=id_, style=_TABLE)


def _metrics_line(metrics: Mapping[str, float], label_free: bool, id_: str) -> Any:
    names = [m for m in (("confidence", *_CONSENSUS) if label_free else _METRICS) if m in metrics]
    parts = []
    for m in names:
        base = m.removeprefix("consensus_")
        label = _SHORT.get(base, base) + (" vs consensus" if m != base else "")
        parts.append(f"{label} {_fmt(metrics[m])}")
    return html.Div(" · ".join(parts), id=id_, style={"fontSize": "11px", "color": "#444", "marginTop": "2px"})


def _card(panel: _Panel, i: int, label_free: bool, prefix: str) -> Any:
    body: list[Any] = [html.Div(panel.name, style={"fontWeight": "600", "fontSize": "13px", "color": panel.colour})]
    if panel.note:
        body.append(html.P(panel.note, id=f"{prefix}-boxes-{i}", className="note"))
    if panel.image is not None and panel.context is not None:
        ctx, view, t = panel.context, panel.view, panel.t
        gt = []
        if panel.gt is not None:
            _, visible = context_to_view(panel.gt.boxes, t, ctx, view)
            gt = [(b, int(c), bool(v)) for b, c, v in zip(panel.gt.boxes, panel.gt.labels, visible)]
        reference = panel.consensus if label_free else panel.gt
        iou = np.full(len(panel.pred_boxes), np.nan)
        if reference is not None:
            moved, visible = context_to_view(reference.boxes, t, ctx, view)
            iou = _iou_best(panel.pred_boxes, moved[visible])
        pred_ctx = view_to_context(panel.pred_boxes, t, ctx, view)
        predictions = [(b, int(c), float(s), float(v))
                       for b, c, s, v in zip(pred_ctx, panel.pred_labels, panel.pred_scores, iou)]
        consensus = [] if panel.consensus is None else [
            (b, int(c), float(s)) for b, c, s in zip(panel.consensus.boxes, panel.consensus.labels,
                                                     panel.consensus.scores)]  # type: ignore[arg-type]
        fig = detection_figure(panel.image, field_of_view(t, ctx, view), gt, predictions, consensus)
        body.append(dcc.Graph(id=f"{prefix}-boxes-{i}", figure=fig, config={"displayModeBar": False},
                              style={"height": f"{fig['layout']['height']}px"}))
    if panel.metrics:
        body.append(_metrics_line(panel.metrics, label_free, f"{prefix}-metrics-{i}"))
    body.append(_table(panel, label_free, f"{prefix}-table-{i}"))
    return html.Div(body, style={"flex": "1 1 280px", "minWidth": "260px", "maxWidth": "460px",
                                 "borderTop": f"4px solid {panel.colour}", "paddingTop": "4px"})


def _cards(panels: Sequence[tuple[int, _Panel]], label_free: bool, prefix: str) -> Any:
    """One card per run (``i``: the run's place in the comparison, in the component ids)."""
    return html.Div([_card(p, i, label_free, prefix) for i, p in panels],
                    style={"display": "flex", "gap": "12px", "flexWrap": "wrap", "alignItems": "flex-start"})


# --------------------------------------------------------------------------- the view


@register_view
class DetectionView(TaskView):
    """See the module docstring."""

    kind = "detection"

    # -- selectors ------------------------------------------------------------------------------
    def metric_options(self, results: Sequence[OrbitResult], label_free: bool) -> list[tuple[str, str]]:
        if not results:
            return []
        have = set.intersection(*(set(reducible_variables(r)) for r in results))
        first = results[0]
        order = (*_METRICS, *_CONSENSUS)
        names = [m for m in order if m in have and first.meta(m).kind != "state"]
        names += sorted(m for m in have - set(order) if first.meta(m).kind != "state")
        if label_free:
            names = [m for m in names if not first.meta(m).needs_labels]
        return [(m, first.meta(m).display) for m in names]

    def default_metric(self, options: Sequence[tuple[str, str]], label_free: bool) -> str | None:
        values = [v for v, _ in options]
        for preferred in (("consensus_conf_iou", "confidence") if label_free else ("conf_iou", "confidence")):
            if preferred in values:
                return preferred
        return values[0] if values else None

    def needs_consensus(self, metric: str | None, label_free: bool) -> bool:
        return False  # the consensus variables are stored by the run (evaluate with consensus=True)

    def label_free_available(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("consensus_iou" in r.data for r in results)

    def label_free_unavailable(self, results: Sequence[OrbitResult]) -> str:
        return ("label-free mode needs the detection consensus for every selected model "
                "(evaluate with consensus=True)")

    def subset_options(self, results: Sequence[OrbitResult]) -> list[tuple[str, int]]:
        if not results or "target_labels" not in results[0].data:
            return []
        classes = sorted({int(c) for c in _first_labels(results[0], "target") if c >= 0})
        return [(f"class {c}", c) for c in classes]

    def subset_mask(self, results: Sequence[OrbitResult], subset: int | None, label_free: bool) -> np.ndarray | None:
        if subset is None or not results:
            return None
        source = "consensus" if label_free else "target"
        if f"{source}_labels" not in results[0].data:
            raise ValueError(f"cannot select a class: the results have no {source}_labels")
        return _first_labels(results[0], source) == int(subset)

    # -- detail ---------------------------------------------------------------------------------
    def _heading(self, req: DetailRequest, res: OrbitResult) -> str:
        if req.label_free:
            objects = _consensus(res, req.sample)
            if objects is not None:
                what = _count(objects.labels)
                return f"sample {req.sample} · consensus: {what} ({req.names[0]})"
        objects = _ground_truth(res, req.sample)
        return f"sample {req.sample}" if objects is None else f"sample {req.sample} · {_count(objects.labels)}"

    def _panel(self, res: OrbitResult, name: str, colour: str, sample: int, t: Transforms, boxes: np.ndarray,
               scores: np.ndarray, labels: np.ndarray, metrics: dict[str, float]) -> _Panel:
        context, view = frame_sizes(res)
        note = None
        try:
            image = context_image(res, sample)
        except ValueError as exc:
            image, note = None, str(exc)
        return _Panel(name, colour, image, context, view, t, _ground_truth(res, sample), _consensus(res, sample),
                      boxes, scores, labels, metrics, note)

    def stored_detail(self, req: DetailRequest, metric: str | None) -> list[Any]:
        first = req.results[0]
        where = describe_element(first.orbit, req.element)
        panels = []
        for res, name, colour in zip(req.results, req.names, req.colours):
            pos = _positions(res, req.element)
            t = res.orbit.transforms()[[flat_index(res.orbit, req.element)]]
            names = ["top_boxes", "det_scores", "det_labels",
                     *(m for m in (*_METRICS, *_CONSENSUS) if m in res.data)]
            point = res.data[names].sel(sample=req.sample).isel(pos)
            top = np.asarray(point["top_boxes"].values, dtype=np.float64).reshape(-1, 4)
            k = min(len(top), int(np.asarray(point["det_scores"].values).shape[-1]))  # max_detections may be < 3
            top = top[:k]
            scores = np.asarray(point["det_scores"].values, dtype=np.float64)[:k]
            labels = np.asarray(point["det_labels"].values).astype(np.int64)[:k]
            keep = np.isfinite(top).all(1) & (labels >= 0)
            metrics = {m: float(point[m].values) for m in names[3:]}
            panels.append((len(panels), self._panel(res, name, colour, req.sample, t, top[keep], scores[keep],
                                                    labels[keep], metrics)))
        return [html.H4(f"{self._heading(req, first)} · {where}", id="detail-title"),
                _cards(panels, req.label_free, "detail")]

    def supports_live(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("input" in r.data and getattr(r.task(), "input_kind", None) in ("window", "image")
                                     for r in results)

    def live_unavailable(self, results: Sequence[OrbitResult]) -> str:
        return "live re-evaluation needs the stored context images (evaluate with store_inputs=True)"

    def evaluate_live(self, model: nn.Module, result: OrbitResult, sample: int, element: Orbit) -> LiveDetections:
        """``model``'s detections on the view cut at the one element of ``element`` from the
        stored context (the run's interpolation, padding and normalisation), and the task's
        metrics there."""
        task = result.task()
        if not isinstance(task, Detection):
            task = Detection()
        t = element.transforms()
        context, view = frame_sizes(result)
        x = torch.from_numpy(context_image(result, sample))[None]
        kind = get_kind(task.input_kind)
        options: dict[str, Any] = {"interpolation": result.attrs.get("interpolation", "bilinear"),
                                   "padding": result.attrs.get("padding", "zeros")}
        if view is not None:
            options["view_size"] = view
        xg = kind.rows(kind.act(x, t, layout="orbit", **options))
        norm = result.attrs.get("normalize")
        call = ModelCall(model, read=task.read_outputs, normalize=json.loads(norm) if norm else None,
                         what="the live view")
        with call.evaluating():
            out = call(xg)
        valid = out.valid[0]
        metrics: dict[str, float] = {}
        targets = {"": _ground_truth(result, sample), "consensus_": _consensus(result, sample)}
        for prefix, objects in targets.items():
            if objects is None or (prefix and "consensus_iou" not in result.data):
                continue
            target = Boxes(torch.as_tensor(objects.boxes, dtype=torch.float32)[None],
                           torch.as_tensor(objects.labels)[None], torch.ones(1, len(objects.boxes), dtype=torch.bool))
            boxes_kind = get_kind(task.target_kind)
            moved = boxes_kind.rows(boxes_kind.act(target, t, layout="orbit", **_frames(context, view)))  # type: ignore[arg-type]
            scored = task.score(out, moved, t)
            for m in _METRICS:
                if (prefix + m) in (*_METRICS, *_CONSENSUS):
                    metrics[prefix + m] = float(scored[m][0])
        return LiveDetections(out.xyxy[0][valid].double().numpy(), out.scores[0][valid].double().numpy(),
                              out.labels[0][valid].numpy().astype(np.int64), metrics)

    def live_detail(self, req: DetailRequest) -> list[Any]:
        first = req.results[0]
        point = dict(req.live_point or {})
        parts: list[Any] = [html.H4(f"live re-evaluation · {describe_element(first.orbit, point)}", id="live-title")]
        if req.live_transform is None:
            return parts + [html.P("choose an element with the live slider")]
        t = req.live_transform.transforms()
        outputs = list(req.live_outputs or [None] * len(req.results))
        notes, panels = [], []
        for i, (res, name, colour, out) in enumerate(zip(req.results, req.names, req.colours, outputs)):
            if out is None:
                notes.append(html.P(f"{name}: model not loadable: stored values only", className="note"))
                continue
            k = min(len(out.boxes), TOP_BOXES)
            panels.append((i, self._panel(res, name, colour, req.sample, t, out.boxes[:k], out.scores[:k],
                                          out.labels[:k], out.metrics)))
        if panels:
            parts.append(_cards(panels, req.label_free, "live"))
        return parts + notes


def _count(labels: np.ndarray) -> str:
    n = len(labels)
    if not n:
        return "no object"
    classes = ", ".join(str(int(c)) for c in labels[:4]) + (" …" if n > 4 else "")
    return f"{n} object{'s' if n > 1 else ''} (class {classes})"

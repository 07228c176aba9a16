"""The classification view: class subsets, label-free metrics, the digit and its class bars.

Detail panel (NERO's MNIST detail view): the stored input transformed by the selected orbit
element (re-warped from the stored uint8 ``input`` with the run's interpolation and padding), the
class-probability bars of every compared model at that element (from the stored
``probabilities``), and a live panel that re-runs each loadable model on the input transformed by
any element in the orbit's range (e.g. 37.5°, between grid angles) or any sampled element of a
discrete orbit (a D4 element, a flip, time reversal).

Tasks derived from :class:`~orbitscope.tasks.Classification` with other inputs (e.g. point
clouds, ``input_kind = "points"``) get the same metrics, subsets and class bars, but no image:
the detail view says so, and there is no live re-evaluation.

Label-free mode: metrics that need labels (``correct``, ``confidence``) are hidden, class subsets
are taken from the **first compared model's consensus class** (so every model is averaged over
the same samples), and the detail view names the consensus class instead of the label.
"""

from __future__ import annotations

import dataclasses

import base64
import io
import json
from typing import Any, Sequence

import numpy as np
import torch
from dash import dcc, html
from PIL import Image
from torch import nn

from ...kinds import warp_images
from ...group.orbits import Orbit
from ...analysis.nero import consensus_metrics
from ...analysis.reduce import reducible_variables
from ...results.result import OrbitResult
from ...engine.model_call import ModelCall
from ...tasks import Classification
from ...tasks.base import TASKS
from ..state import describe_element
from . import DetailRequest, TaskView, register_view

__all__ = ["ClassificationView", "input_kind", "transformed_input", "png_data_uri"]

#: order of the metric menu (the task's own variables first, then the consensus metrics)
_ORDER = tuple(v.name for v in Classification().variables()) + tuple(Classification().consensus_metric_names())
_IMAGE_STYLE = {"width": "168px", "height": "168px", "imageRendering": "pixelated", "border": "1px solid #ccc"}


def transformed_input(result: OrbitResult, sample: int, element: Orbit | int) -> np.ndarray:
    """The stored input of ``sample`` transformed by an orbit element: ``element`` is a flat
    index into the result's orbit or a one-element orbit. Returns (C, H, W) float32 in [0, 1].

    Raises:
        ValueError: the run did not store its inputs.
    """
    if "input" not in result.data:
        raise ValueError("this run did not store its inputs (evaluate with store_inputs=True)")
    raw = result.data["input"].sel(sample=sample).values
    x = torch.from_numpy(raw.astype(np.float32) / 255.0)[None]
    t = result.orbit.transforms()[int(element)] if isinstance(element, (int, np.integer)) else element.transforms()
    out = warp_images(x, t, interpolation=result.attrs.get("interpolation", "bilinear"),
                      padding=result.attrs.get("padding", "zeros"))
    return out[0, 0].numpy()


def png_data_uri(image: np.ndarray) -> str:
    """(C, H, W) floats in [0, 1] (1 or 3 channels; otherwise the first) -> a PNG data URI."""
    arr = (np.clip(np.asarray(image, dtype=np.float64), 0, 1) * 255).round().astype(np.uint8)
    pil = Image.fromarray(np.moveaxis(arr, 0, -1) if arr.shape[0] == 3 else arr[0])
    buf = io.BytesIO()
    pil.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _flat_index(result: OrbitResult, element: dict[str, float] | Any) -> int:
    dims = result.orbit_dims
    idx = tuple(int(np.argmin(np.abs(result.data[d].values - float(element[d])))) for d in dims)
    return int(np.ravel_multi_index(idx, tuple(result.data.sizes[d] for d in dims)))


def _where(element: dict[str, float] | Any, orbit: Orbit) -> str:
    return describe_element(orbit, element)


def _task(result: OrbitResult) -> Classification:
    """The run's task (its registered class, so that subclasses keep their input kind)."""
    raw = result.attrs.get("task", "{}") or "{}"
    spec = raw if isinstance(raw, dict) else json.loads(raw)
    cls = TASKS.get(spec["kind"]) if spec.get("kind") in TASKS else Classification
    if not (isinstance(cls, type) and issubclass(cls, Classification)):
        cls = Classification
    return cls.from_spec(spec)


def input_kind(result: OrbitResult) -> str:
    """The kind of the run's inputs (``"image"`` for plain classification)."""
    try:
        return str(_task(result).input_kind)
    except (ValueError, TypeError, KeyError):
        return "unknown"


def _bars(classes: Sequence[Any], probs: Sequence[np.ndarray | None], names: Sequence[str], colours: Sequence[str],
          marked: tuple[int, str] | None, title: str) -> dict[str, Any]:
    """Grouped class-probability bars, one colour per model (a plotly figure as a plain dict:
    built per click, and plotly's validation would cost more than the data); ``marked`` =
    (class, why) gets a pointer above it (the label, or the consensus class in label-free mode)."""
    x = [str(c) for c in classes]
    data = [{"type": "bar", "x": x, "y": [float(v) for v in np.asarray(p, dtype=float)], "name": name,
             "marker": {"color": colour}, "meta": {"series": name}}
            for p, name, colour in zip(probs, names, colours) if p is not None]
    annotations = [] if marked is None else [{
        "x": str(marked[0]), "y": 1.0, "text": f"▼ {marked[1]}", "showarrow": False, "yshift": 8,
        "font": {"color": "#333", "size": 11}}]
    layout = {"title": {"text": title, "font": {"size": 13}}, "barmode": "group", "height": 230,
              "margin": {"l": 40, "r": 10, "t": 40, "b": 30}, "template": "plotly_white",
              "yaxis": {"range": [0, 1.05], "title": {"text": "probability"}},
              "xaxis": {"type": "category"}, "legend": {"orientation": "h", "y": -0.18},
              "annotations": annotations}
    return {"data": data, "layout": layout}


@register_view
class ClassificationView(TaskView):
    """See the module docstring."""

    kind = "classification"

    # -- selectors ------------------------------------------------------------------------------
    def metric_options(self, results: Sequence[OrbitResult], label_free: bool) -> list[tuple[str, str]]:
        if not results:
            return []
        have = set.intersection(*(set(reducible_variables(r)) for r in results))
        probs = self.label_free_available(results)
        consensus = set(consensus_metrics(results[0]))
        first = results[0]
        names = [m for m in _ORDER if (m in have or (m in consensus and probs)) and first.meta(m).kind != "state"]
        names += sorted(m for m in have - set(_ORDER) if first.meta(m).kind != "state")
        if label_free:
            names = [m for m in names if not first.meta(m).needs_labels]
        return [(m, first.meta(m).display) for m in names]

    def default_metric(self, options: Sequence[tuple[str, str]], label_free: bool) -> str | None:
        values = [v for v, _ in options]
        for preferred in (("consensus_confidence", "consensus_agreement") if label_free else ("confidence", "correct")):
            if preferred in values:
                return preferred
        return values[0] if values else None

    def needs_consensus(self, metric: str | None, label_free: bool) -> bool:
        return label_free or metric in Classification().consensus_metric_names()

    def label_free_available(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("probabilities" in r.data for r in results)

    def subset_options(self, results: Sequence[OrbitResult]) -> list[tuple[str, int]]:
        if not results:
            return []
        res = results[0]
        if "class" in res.data.coords:
            classes = [int(c) for c in res.data["class"].values]
        elif "label" in res.data:
            classes = sorted({int(c) for c in np.unique(res.data["label"].values)})
        else:
            return []
        return [(f"class {c}", c) for c in classes]

    def subset_mask(self, results: Sequence[OrbitResult], subset: int | None, label_free: bool) -> np.ndarray | None:
        if subset is None or not results:
            return None
        source = "consensus_class" if label_free else "label"
        if source not in results[0].data:
            raise ValueError(f"cannot select a class: the results have no {source!r}")
        return np.asarray(results[0].data[source].values == int(subset))

    # -- detail ---------------------------------------------------------------------------------
    def _heading(self, req: DetailRequest, res: OrbitResult) -> str:
        if req.label_free and "consensus_class" in res.data:
            cls = int(res.data["consensus_class"].sel(sample=req.sample))
            return f"sample {req.sample} · consensus class {cls} ({req.names[0]})"
        if "label" in res.data:
            return f"sample {req.sample} · label {int(res.data['label'].sel(sample=req.sample))}"
        return f"sample {req.sample}"

    def _marked_class(self, req: DetailRequest, res: OrbitResult) -> tuple[int, str] | None:
        source, why = ("consensus_class", "consensus") if req.label_free else ("label", "label")
        return (int(res.data[source].sel(sample=req.sample)), why) if source in res.data else None

    def _image(self, res: OrbitResult, sample: int, element: Orbit | int, id_: str) -> Any:
        kind = input_kind(res)
        if kind != "image":
            return html.P(f"no image view for this input kind ({kind})", id=id_, className="note")
        try:
            return html.Img(id=id_, src=png_data_uri(transformed_input(res, sample, element)), style=_IMAGE_STYLE)
        except ValueError as exc:
            return html.P(str(exc), id=id_, className="note")

    def stored_detail(self, req: DetailRequest, metric: str | None) -> list[Any]:
        res = req.results[0]
        where = _where(req.element, res.orbit)
        flat = _flat_index(res, req.element)
        parts: list[Any] = [html.H4(f"{self._heading(req, res)} · {where}", id="detail-title")]
        image = self._image(res, req.sample, flat, "detail-image")
        if all("probabilities" in r.data for r in req.results):
            probs = [r.data["probabilities"].sel(sample=req.sample).transpose(*r.orbit_dims, "class").values
                     .reshape(-1, r.data.sizes["class"])[flat] for r in req.results]
            classes = res.data["class"].values if "class" in res.data.coords else np.arange(len(probs[0]))
            fig = _bars(classes, probs, req.names, req.colours, self._marked_class(req, res),
                        f"stored class probabilities at {where}")
            outputs: Any = dcc.Graph(id="detail-bars", figure=fig, config={"displayModeBar": False})
        else:
            items = []
            for r, name in zip(req.results, req.names):
                sel = {d: r.data[d].values[i] for d, i in zip(r.orbit_dims, np.unravel_index(flat, r.orbit.shape))}
                point = r.data.sel(sample=req.sample).sel(sel)
                items.append(html.Li(f"{name}: predicts {int(point['prediction'])}, "
                                     f"true-class confidence {float(point['confidence']):.3f}"))
            outputs = html.Div([html.P("class probabilities were not stored (evaluate with --probabilities)"),
                                html.Ul(items)], id="detail-bars")
        parts.append(html.Div([image, html.Div(outputs, style={"flex": "1"})],
                              style={"display": "flex", "gap": "12px", "alignItems": "center"}))
        return parts

    def supports_live(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("input" in r.data and input_kind(r) == "image" for r in results)

    def live_unavailable(self, results: Sequence[OrbitResult]) -> str:
        kinds = sorted({input_kind(r) for r in results} - {"image"})
        if kinds:
            return f"no image view for this input kind ({', '.join(kinds)}): no live re-evaluation"
        return "live re-evaluation needs the stored inputs (evaluate with store_inputs=True)"

    def evaluate_live(self, model: nn.Module, result: OrbitResult, sample: int, element: Orbit) -> np.ndarray:
        """Class probabilities (classes,) of ``model`` on the sample transformed by ``element``,
        with the run's normalisation and output reading (logits or probabilities)."""
        x = torch.from_numpy(transformed_input(result, sample, element))[None]
        norm = result.attrs.get("normalize")
        task = dataclasses.replace(_task(result), store_probabilities=True)
        call = ModelCall(model, read=task.read_outputs, normalize=json.loads(norm) if norm else None,
                         what="the transformed input")
        with call.evaluating():
            out = call(x)
        label = int(result.data["label"].sel(sample=sample)) if "label" in result.data else 0
        label = label if 0 <= label < out.shape[-1] else 0
        return task.score(out, torch.tensor([label]))["probabilities"][0].double().numpy()

    def live_detail(self, req: DetailRequest) -> list[Any]:
        res = req.results[0]
        point = dict(req.live_point or {})
        parts: list[Any] = [html.H4(f"live re-evaluation · {_where(point, res.orbit)}", id="live-title")]
        if req.live_transform is None:
            return parts + [html.P("choose an element with the live slider")]
        image = self._image(res, req.sample, req.live_transform, "live-image")
        outputs = list(req.live_outputs or [None] * len(req.results))
        notes = [html.P(f"{name}: model not loadable: stored values only", className="note")
                 for name, out in zip(req.names, outputs) if out is None]
        body: list[Any] = list(notes)
        if any(o is not None for o in outputs):
            n = next(len(o) for o in outputs if o is not None)
            classes = res.data["class"].values if "class" in res.data.coords else np.arange(n)
            fig = _bars(classes, outputs, req.names, req.colours, self._marked_class(req, res),
                        f"live class probabilities at {_where(point, res.orbit)}")
            body.insert(0, dcc.Graph(id="live-bars", figure=fig, config={"displayModeBar": False}))
        parts.append(html.Div([image, html.Div(body, style={"flex": "1"})],
                              style={"display": "flex", "gap": "12px", "alignItems": "center"}))
        return parts

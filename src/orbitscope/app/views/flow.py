"""The flow view (NERO's PIV case study): does the estimate turn, mirror and reverse with the pair?

Orbits of flow runs are usually D4 × time reversal (``d4xt``: dims ``("time_reversed", "d4")``),
which the shell draws as NERO's 4×4 mosaic; a click on a cell selects that element. As in NERO,
each cell shows the element's per-pixel error map by default (:meth:`FlowView.pixel_mode`: the
stored ``<metric>_map``; aggregate: its mean over the shown samples), with one mean per cell as
the "averaged" toggle. Any other orbit works too (the element is applied through the engine's
own kind actions).

Detail panel for the selected sample at the selected element:

* the **transformed pair**: the stored input (a run evaluated with ``store_inputs=True``) moved
  by the element with the ``frames`` kind's action (each frame warped like an image; time
  reversal swaps the frames); the runs of a group share their data, so the pair is drawn once;
* the **ground truth** moved by the element (the ``flow`` kind's action: grid resampled,
  vectors turned by L, negated under time reversal), when the run stores the target field as
  ``target_flow`` (sample × component × flow_y × flow_x; the flow kind stores it); runs made
  before it did say so;
* per compared run: its **consensus** field (``consensus_flow``, canonical frame, stored by runs
  evaluated with ``consensus=True``) moved by the element; the element's stored **EPE map**
  (``epe_map``; ``consensus_epe_map`` in label-free mode) as a heat map; the stored mean
  metrics (``epe``, ``rmse``, ``mae``, ``mse``, or the ``consensus_*`` ones in label-free mode).
  Estimates are not stored by the flow task (errors only): the live panel shows them.

Every flow is drawn as a colour-wheel image (hue = direction on screen, saturation = magnitude
up to a scale shared by the fields of one panel; NaN grey) with a quiver plot over it (about
16 × 16 arrows, image y down); a small wheel is the legend.

The live panel re-runs every model whose weights are in the store at any of the orbit's
elements (the live controls choose among the sampled elements: time forward / reversed and the
eight D4 elements): the estimate at that element, its EPE map against the moved ground truth
(when stored) or else the moved consensus, and the task's metrics against both.

Subsets: by the per-sample ``flow_type`` the run recorded from its data's ``sample_groups``
(synthetic pairs and flow folders declare it; other data has no subsets).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from dash import dcc, html
from matplotlib.colors import hsv_to_rgb
from torch import nn

from ...analysis.nero import layout_kind
from ...analysis.reduce import reducible_variables
from ...engine.model_call import ModelCall
from ...group.elements import Transforms
from ...group.orbits import Orbit
from ...kinds import get_kind
from ...results.result import OrbitResult
from ...tasks.flow import FLOW_METRICS, Flow, resample_flow
from ..state import describe_element, flat_index
from . import DetailRequest, PixelMode, TaskView, register_view
from .classification import png_data_uri

__all__ = [
    "FlowView",
    "LiveFlow",
    "QUIVER_ARROWS",
    "consensus_field",
    "epe_map_figure",
    "flow_colours",
    "flow_figure",
    "moved_flow",
    "stored_truth",
    "transformed_pair",
    "wheel_legend",
]

#: arrows of a quiver plot per side (about)
QUIVER_ARROWS = 16
#: the mean metrics, in menu order, and their label-free versions
_METRICS = tuple(FLOW_METRICS)
_CONSENSUS = tuple(f"consensus_{m}" for m in _METRICS)
#: names a stored per-sample ground-truth field may have (sample × component × y × x)
_TRUTH_NAMES = ("target_flow",)
_FIG_HEIGHT = 240
_NOTE = {"fontSize": "11px", "color": "#666", "margin": "2px 0"}
_CAPTION = {"fontSize": "11px", "color": "#444", "textAlign": "center"}
_FRAME_STYLE = {"width": "150px", "height": "150px", "imageRendering": "pixelated", "border": "1px solid #ccc"}


# --------------------------------------------------------------------------- data


def _options(result: OrbitResult) -> dict[str, Any]:
    return {"interpolation": result.attrs.get("interpolation", "bilinear"),
            "padding": result.attrs.get("padding", "zeros")}


def _transforms(element: Orbit | Transforms) -> Transforms:
    return element.transforms() if isinstance(element, Orbit) else element


def _task(result: OrbitResult) -> Flow:
    try:
        task = result.task()
    except (ValueError, TypeError, KeyError):
        return Flow()
    return task if isinstance(task, Flow) else Flow()


def transformed_pair(result: OrbitResult, sample: int, element: Orbit | Transforms) -> np.ndarray:
    """The stored pair of ``sample`` moved by the one element ``element`` (a one-element orbit or
    its transforms) with the run's input kind (``frames``): (T, C, H, W) float32 in [0, 1].

    Raises:
        ValueError: the run did not store its inputs.
    """
    if "input" not in result.data:
        raise ValueError("this run did not store its image pairs (evaluate with store_inputs=True)")
    raw = result.data["input"].sel(sample=sample).values
    x = torch.from_numpy(raw.astype(np.float32) / 255.0)[None]
    kind = get_kind(getattr(_task(result), "input_kind", "frames"))
    with torch.no_grad():
        out = kind.act(x, _transforms(element), layout="paired", **_options(result))
    return out[0].numpy()


def moved_flow(flow: np.ndarray, element: Orbit | Transforms, result: OrbitResult | None = None) -> np.ndarray:
    """A field (2, H, W) (u, v) moved by the one element ``element`` with the ``flow`` kind's
    action (the run's interpolation and padding): (2, H, W) float64."""
    x = torch.as_tensor(np.asarray(flow, dtype=np.float64))[None]
    options = _options(result) if result is not None else {}
    with torch.no_grad():
        out = get_kind("flow").act(x, _transforms(element), layout="paired", **options)
    return out[0].numpy()


def stored_truth(result: OrbitResult, sample: int) -> np.ndarray | None:
    """The stored ground-truth field (2, H, W) of ``sample`` (canonical frame), or None when the
    run keeps none."""
    for name in _TRUTH_NAMES:
        if name in result.data and result.data[name].ndim == 4 and result.data[name].shape[1] == 2:
            return np.asarray(result.data[name].sel(sample=sample).values, dtype=np.float64)
    return None


def consensus_field(result: OrbitResult, sample: int) -> np.ndarray | None:
    """The run's consensus field (2, H, W) of ``sample`` (canonical frame), or None."""
    if "consensus_flow" not in result.data:
        return None
    return np.asarray(result.data["consensus_flow"].sel(sample=sample).values, dtype=np.float64)


def _magnitude(flow: np.ndarray | None) -> float:
    if flow is None:
        return 0.0
    mag = np.hypot(flow[0], flow[1])
    mag = mag[np.isfinite(mag)]
    return float(mag.max()) if mag.size else 0.0


def _scale(*flows: np.ndarray | None) -> float:
    """A magnitude scale shared by ``flows`` (their largest |F|; 1 when all are zero)."""
    top = max([_magnitude(f) for f in flows] + [0.0])
    return top if top > 1e-12 else 1.0


# --------------------------------------------------------------------------- drawing


def flow_colours(flow: np.ndarray, scale: float | None = None) -> np.ndarray:
    """A field (2, H, W) as a colour-wheel image (3, H, W) in [0, 1]: hue = the direction as drawn
    on screen (y down), counter-clockwise from +x (red: right, then yellow-green: up, cyan: left,
    violet: down), saturation = |F| / ``scale`` (clipped to 1; default the largest |F|), value 1;
    pixels without a finite vector are grey."""
    u, v = (np.asarray(c, dtype=np.float64) for c in flow)
    mag = np.hypot(u, v)
    finite = np.isfinite(mag)
    s = scale if scale is not None else _scale(flow)
    s = s if s > 1e-12 else 1.0
    hue = np.mod(np.arctan2(-v, u) / (2 * np.pi), 1.0)
    hsv = np.stack([np.where(finite, hue, 0.0), np.where(finite, np.clip(mag / s, 0, 1), 0.0),
                    np.ones_like(mag)], -1)
    rgb = hsv_to_rgb(hsv)
    rgb[~finite] = 0.6
    return np.moveaxis(rgb, -1, 0)


def wheel_legend(size: int = 48) -> np.ndarray:
    """The colour wheel (3, size, size): the colour of the vector from the centre to each pixel
    (|F| = the radius is full saturation); white outside the disk."""
    c = (size - 1) / 2
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    u, v = xx - c, yy - c
    rgb = flow_colours(np.stack([u, v]), scale=c)
    outside = np.hypot(u, v) > c + 0.5
    rgb[:, outside] = 1.0
    return rgb


def _quiver(flow: np.ndarray, scale: float, arrows: int = QUIVER_ARROWS) -> list[dict[str, Any]]:
    """Arrows of ``flow`` every ``step`` pixels (about ``arrows`` a side) from pixel centres,
    the longest 0.9 step long; two traces: the arrows (lines, ``meta``: role ``quiver``, the
    base points and their (u, v)) and their bases (hover shows u, v)."""
    _, h, w = flow.shape
    step = max(1, -(-max(h, w) // arrows))
    rows, cols = np.arange(step // 2, h, step), np.arange(step // 2, w, step)
    xs, ys, us, vs = [], [], [], []
    for i in rows:
        for j in cols:
            xs.append(float(j) + 0.5)
            ys.append(float(i) + 0.5)
            us.append(float(flow[0, i, j]))
            vs.append(float(flow[1, i, j]))
    k = 0.9 * step / (scale if scale > 1e-12 else 1.0)
    lx: list[float | None] = []
    ly: list[float | None] = []
    for x, y, u, v in zip(xs, ys, us, vs):
        if not (math.isfinite(u) and math.isfinite(v)) or math.hypot(u, v) * k < 1e-3:
            continue
        tx, ty = x + k * u, y + k * v
        length = math.hypot(tx - x, ty - y)
        head = min(0.35 * length, 0.45 * step)
        angle = math.atan2(ty - y, tx - x)
        lx += [x, tx, None]
        ly += [y, ty, None]
        for side in (-1, 1):
            a = angle + math.pi - side * math.radians(28)
            lx += [tx, tx + head * math.cos(a), None]
            ly += [ty, ty + head * math.sin(a), None]
    meta = {"role": "quiver", "step": step, "x": xs, "y": ys, "u": us, "v": vs, "scale": float(scale)}
    lines = {"type": "scatter", "mode": "lines", "x": lx, "y": ly, "line": {"color": "#222", "width": 1.1},
             "hoverinfo": "skip", "showlegend": False, "meta": meta}
    bases = {"type": "scatter", "mode": "markers", "x": xs, "y": ys, "marker": {"size": 2.5, "color": "#222"},
             "customdata": [[u, v] for u, v in zip(us, vs)], "showlegend": False, "meta": {"role": "arrow-base"},
             "hovertemplate": "x %{x:.1f}, y %{y:.1f}<br>u %{customdata[0]:.3f}, v %{customdata[1]:.3f} px/frame"
                              "<extra></extra>"}
    return [lines, bases]


def _axes(h: int, w: int) -> dict[str, Any]:
    return {"xaxis": {"range": [0, w], "showgrid": False, "zeroline": False, "constrain": "domain",
                      "tickfont": {"size": 9}},
            "yaxis": {"range": [h, 0], "showgrid": False, "zeroline": False, "scaleanchor": "x", "scaleratio": 1,
                      "constrain": "domain", "tickfont": {"size": 9}}}


def flow_figure(flow: np.ndarray, title: str, scale: float | None = None, height: int = _FIG_HEIGHT,
                role: str = "flow") -> dict[str, Any]:
    """A field (2, H, W) as a plotly figure (a plain dict): the colour-wheel image
    (:func:`flow_colours`, pixel (row i, column j) spans [j, j + 1] × [i, i + 1], y down) with
    a quiver plot over it (:func:`_quiver`). ``layout.meta`` holds the role, the scale and the
    mean (u, v)."""
    _, h, w = flow.shape
    s = scale if scale is not None else _scale(flow)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(flow).all(0)
        mean = [float(flow[c][finite].mean()) if finite.any() else float("nan") for c in (0, 1)]
    data = [{"type": "image", "source": png_data_uri(flow_colours(flow, s)), "x0": 0.5, "y0": 0.5, "dx": 1, "dy": 1,
             "hoverinfo": "skip", "meta": {"role": "wheel"}}, *_quiver(flow, s)]
    layout = {"height": height, "margin": {"l": 26, "r": 4, "t": 22, "b": 18}, "template": "plotly_white",
              "title": {"text": title, "font": {"size": 11}, "x": 0.5, "xanchor": "center", "y": 0.98},
              **_axes(h, w), "meta": {"role": role, "scale": float(s), "mean": mean, "size": [h, w]}}
    return {"data": data, "layout": layout}


def epe_map_figure(epe: np.ndarray, frame: tuple[int, int], title: str, zmax: float,
                   height: int = _FIG_HEIGHT) -> dict[str, Any]:
    """An error map (h, w) as a heat map over the (H, W) frame it was block averaged from (reversed
    viridis: low error bright, as NERO's), from 0 to ``zmax``."""
    m = np.asarray(epe, dtype=np.float64)
    mh, mw = m.shape
    fh, fw = frame
    dy, dx = fh / mh, fw / mw
    z = [[None if not math.isfinite(float(v)) else float(v) for v in row] for row in m]
    data = [{"type": "heatmap", "z": z, "x0": dx / 2, "dx": dx, "y0": dy / 2, "dy": dy, "colorscale": "Viridis",
             "reversescale": True, "zmin": 0.0, "zmax": float(zmax) if zmax > 0 else 1.0,
             "colorbar": {"thickness": 8, "len": 0.85, "tickfont": {"size": 9}, "title": {"text": "px", "side": "right",
                                                                                         "font": {"size": 9}}},
             "hovertemplate": "x %{x:.0f}, y %{y:.0f}<br>%{z:.4f} px<extra></extra>", "meta": {"role": "epe-map"}}]
    layout = {"height": height, "margin": {"l": 26, "r": 4, "t": 22, "b": 18}, "template": "plotly_white",
              "title": {"text": title, "font": {"size": 11}, "x": 0.5, "xanchor": "center", "y": 0.98},
              **_axes(fh, fw), "meta": {"role": "epe-map", "shape": [mh, mw]}}
    return {"data": data, "layout": layout}


def _graph(id_: str, fig: dict[str, Any], width: str = "260px") -> Any:
    return dcc.Graph(id=id_, figure=fig, config={"displayModeBar": False},
                     style={"height": f"{fig['layout']['height']}px", "width": width})


def _fmt(v: float | None, digits: int = 3) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _legend(scale: float, id_: str) -> Any:
    return html.Div([
        html.Img(src=png_data_uri(wheel_legend()), style={"width": "44px", "height": "44px"}),
        html.Div(["hue: direction", html.Br(), "saturation: |F|", html.Br(), f"0 … {scale:.3g} px/frame"],
                 style={"fontSize": "10px", "color": "#444", "lineHeight": "1.25"}),
    ], id=id_, style={"display": "flex", "gap": "4px", "alignItems": "center"})


def _pair(frames: np.ndarray | None, note: str | None, id_: str) -> Any:
    """The two frames side by side (frame 1 is the earlier one as the model sees the pair)."""
    if frames is None:
        return html.P(note or "no stored image pair", id=id_, className="note", style=_NOTE)
    items = []
    for k, frame in enumerate(frames[:2]):
        items.append(html.Div([html.Img(id=f"{id_}-{k}", src=png_data_uri(frame), style=_FRAME_STYLE),
                               html.Div(f"frame {k + 1}", style=_CAPTION)]))
    return html.Div(items, id=id_, style={"display": "flex", "gap": "6px"})


def _metrics_line(metrics: Mapping[str, float], names: Sequence[str], id_: str) -> Any:
    parts = []
    for m in names:
        if m not in metrics:
            continue
        base = m.removeprefix("consensus_")
        label, unit, _ = FLOW_METRICS[base]
        parts.append(f"{label}{' vs consensus' if m != base else ''} {_fmt(metrics[m])} {unit}")
    return html.Div(" · ".join(parts) or "no metrics", id=id_,
                    style={"fontSize": "11px", "color": "#333", "marginTop": "2px", "fontFamily": "monospace"})


def _card(name: str, colour: str, body: Sequence[Any]) -> Any:
    return html.Div([html.Div(name, style={"fontWeight": "600", "fontSize": "13px", "color": colour}), *body],
                    style={"flex": "1 1 440px", "minWidth": "420px", "borderTop": f"4px solid {colour}",
                           "paddingTop": "4px"})


def _cards(cards: Sequence[Any]) -> Any:
    return html.Div(list(cards), style={"display": "flex", "gap": "12px", "flexWrap": "wrap",
                                        "alignItems": "flex-start", "marginTop": "6px"})


# --------------------------------------------------------------------------- live output


@dataclass(frozen=True)
class LiveFlow:
    """One model's estimate at the live element: the field (2, H, W) at the pair's resolution,
    the task's metrics against the moved ground truth (when stored) and ``consensus_*`` against
    the moved consensus (when the run has one), and the EPE maps behind them (``epe_map``,
    ``consensus_epe_map``), block averaged as the run stores them."""

    estimate: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)
    maps: dict[str, np.ndarray] = field(default_factory=dict)


# --------------------------------------------------------------------------- the view


def _positions(res: OrbitResult, element: Mapping[str, float]) -> dict[str, int]:
    return {d: int(np.argmin(np.abs(res.data[d].values - float(element[d])))) for d in res.orbit_dims}


def _flow_types(res: OrbitResult) -> np.ndarray | None:
    if "flow_type" not in res.data or res.data["flow_type"].dims != ("sample",):
        return None
    return np.asarray(res.data["flow_type"].values).astype(str)


@register_view
class FlowView(TaskView):
    """See the module docstring."""

    kind = "flow"

    # -- selectors ------------------------------------------------------------------------------
    def metric_options(self, results: Sequence[OrbitResult], label_free: bool) -> list[tuple[str, str]]:
        """The mean metrics (epe, rmse, mae, mse, then ``consensus_*``); the per-pixel maps are
        not menu entries (rankings and embeddings need one value per sample and element): the
        mosaic draws the map behind the chosen metric (:meth:`pixel_mode`), and the detail
        panel the selected element's EPE map."""
        if not results:
            return []
        have = set.intersection(*(set(reducible_variables(r)) for r in results))
        first = results[0]
        order = (*_METRICS, *_CONSENSUS)
        names = [m for m in order if m in have]
        names += sorted(m for m in have - set(order) if first.meta(m).kind != "state")
        if label_free:
            names = [m for m in names if not first.meta(m).needs_labels]
        return [(m, first.meta(m).display) for m in names]

    def default_metric(self, options: Sequence[tuple[str, str]], label_free: bool) -> str | None:
        values = [v for v, _ in options]
        preferred = "consensus_epe" if label_free else "epe"
        return preferred if preferred in values else (values[0] if values else None)

    def needs_consensus(self, metric: str | None, label_free: bool) -> bool:
        return False  # stored by the run (evaluate with consensus=True)

    def pixel_mode(self, results: Sequence[OrbitResult], metric: str | None) -> PixelMode:
        """NERO's default PIV view: each mosaic cell the element's per-pixel error map.

        The map behind a mean metric is ``<metric>_map`` (``epe_map``, ``mae_map``, ``mse_map``,
        or their ``consensus_*`` versions in label-free mode), stored by the runs evaluated with
        ``Flow(maps=...)`` naming it (the default stores the EPE map only). RMSE has none (its
        root is taken after the mean over pixels). The toggle is offered for mosaic orbits
        (D4, D4 × time reversal) only."""
        if not results or not metric or layout_kind(results[0].orbit_dims) != "mosaic":
            return PixelMode()
        base = metric.removeprefix("consensus_")
        if base not in FLOW_METRICS:
            return PixelMode(True, None, f"{results[0].meta(metric).display} has no per-pixel map: the cells show "
                             "each element's mean")
        label = FLOW_METRICS[base][0] + (" vs consensus" if base != metric else "")
        if base == "rmse":
            return PixelMode(True, None, "RMSE has no per-pixel map (its root is taken after the mean over pixels; "
                             "NERO's \"RMSE\" map is the MAE map): the cells show each element's mean; choose EPE, "
                             "MAE or MSE for per-pixel maps")
        variable = f"{metric}_map"
        missing = [r for r in results if variable not in r.data or r.data[variable].ndim != 3 + len(r.orbit_dims)]
        if missing:
            maps = tuple(dict.fromkeys([*_task(missing[0]).maps, base]))
            names = ", ".join(sorted({str(r.attrs.get("model_name", r.attrs.get("run_id", "?"))) for r in missing}))
            return PixelMode(True, None, f"no stored per-pixel {label} map in {names}: the cells show each element's "
                             f"mean; evaluate with Flow(maps={maps!r}) to record the maps")
        return PixelMode(True, variable, f"per pixel: each cell is the element's {label} map")

    def label_free_available(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("consensus_epe" in r.data for r in results)

    def label_free_unavailable(self, results: Sequence[OrbitResult]) -> str:
        return "label-free mode needs the flow consensus for every selected model (evaluate with consensus=True)"

    def subset_options(self, results: Sequence[OrbitResult]) -> list[tuple[str, int]]:
        types = _flow_types(results[0]) if results else None
        if types is None:
            return []
        return [(f"flow type {t}", i) for i, t in enumerate(sorted(set(types.tolist())))]

    def subset_mask(self, results: Sequence[OrbitResult], subset: int | None, label_free: bool) -> np.ndarray | None:
        if subset is None or not results:
            return None
        types = _flow_types(results[0])
        if types is None:
            raise ValueError("cannot select a flow type: the results store none (no per-sample flow_type)")
        names = sorted(set(types.tolist()))
        if not 0 <= int(subset) < len(names):
            return np.zeros(len(types), dtype=bool)
        return types == names[int(subset)]

    # -- detail ---------------------------------------------------------------------------------
    def _heading(self, req: DetailRequest, res: OrbitResult) -> str:
        types = _flow_types(res)
        if types is not None:
            position = int(np.flatnonzero(np.asarray(res.data["sample"].values) == req.sample)[0])
            return f"sample {req.sample} · {types[position]}"
        return f"sample {req.sample}"

    def _shared(self, req: DetailRequest, t: Transforms, prefix: str, flows: Sequence[np.ndarray | None],
                ) -> tuple[Any, np.ndarray | None, float]:
        """The row drawn once for all runs: the moved pair, the moved ground truth, the legend;
        returns it, the moved truth (or None) and the magnitude scale of the panel."""
        source = next((r for r in req.results if "input" in r.data), req.results[0])
        try:
            frames, note = transformed_pair(source, req.sample, t), None
        except ValueError as exc:
            frames, note = None, str(exc)
        truth = stored_truth(source, req.sample)
        moved = None if truth is None else moved_flow(truth, t, source)
        scale = _scale(moved, *flows)
        if moved is None:
            gt: Any = html.P("ground truth: not stored in this run (made before runs kept their target "
                             "field), so it is not drawn; metrics are as stored", id=f"{prefix}-gt",
                             className="note", style={**_NOTE, "maxWidth": "230px"})
        else:
            gt = _graph(f"{prefix}-gt", flow_figure(moved, "ground truth (moved)", scale, role="truth"))
        row = html.Div([
            html.Div([html.Div("transformed pair", style=_CAPTION), _pair(frames, note, f"{prefix}-pair")]),
            gt, _legend(scale, f"{prefix}-legend"),
        ], style={"display": "flex", "gap": "12px", "alignItems": "center", "flexWrap": "wrap"})
        return row, moved, scale

    def stored_detail(self, req: DetailRequest, metric: str | None) -> list[Any]:
        first = req.results[0]
        where = describe_element(first.orbit, req.element)
        moved_consensus, points = [], []
        for res in req.results:
            t = res.orbit.transforms()[[flat_index(res.orbit, req.element)]]
            cons = consensus_field(res, req.sample)
            moved_consensus.append(None if cons is None else moved_flow(cons, t, res))
            names = [m for m in (*_METRICS, *_CONSENSUS, "epe_map", "consensus_epe_map") if m in res.data]
            points.append(res.data[names].sel(sample=req.sample).isel(_positions(res, req.element)))
        t0 = first.orbit.transforms()[[flat_index(first.orbit, req.element)]]
        shared, _, scale = self._shared(req, t0, "detail", moved_consensus)
        map_name = "consensus_epe_map" if req.label_free else "epe_map"
        maps = [np.asarray(p[map_name].values, dtype=np.float64) if map_name in p else None for p in points]
        finite = [m[np.isfinite(m)] for m in maps if m is not None]
        zmax = max([float(f.max()) for f in finite if f.size] + [0.0])
        frame = next((tuple(int(s) for s in r.data["input"].shape[-2:]) for r in req.results if "input" in r.data),
                     None)
        cards = []
        for i, (res, name, colour, cons, point, m) in enumerate(zip(req.results, req.names, req.colours,
                                                                   moved_consensus, points, maps)):
            figures: list[Any] = []
            if cons is not None:
                figures.append(_graph(f"detail-consensus-{i}", flow_figure(cons, "consensus (moved)", scale,
                                                                           role="consensus")))
            else:
                figures.append(html.P("no consensus field (evaluate with consensus=True)",
                                      id=f"detail-consensus-{i}", className="note", style={**_NOTE, "width": "200px"}))
            if m is not None:
                what = "EPE vs consensus" if req.label_free else "EPE map"
                mean = float(point[map_name.removesuffix("_map")].values) if map_name.removesuffix("_map") in point \
                    else float(np.nanmean(m))
                figures.append(_graph(f"detail-epe-{i}", epe_map_figure(m, frame or m.shape, f"{what} (mean {mean:.3f} px)",
                                                                        zmax), width="290px"))
            else:
                figures.append(html.P(f"no stored {map_name} (the task's maps option)", id=f"detail-epe-{i}",
                                      className="note", style=_NOTE))
            metrics = {k: float(point[k].values) for k in (*_METRICS, *_CONSENSUS) if k in point}
            shown = _CONSENSUS if req.label_free else _METRICS
            cards.append(_card(name, colour, [
                html.Div(figures, style={"display": "flex", "gap": "6px", "alignItems": "flex-start"}),
                _metrics_line(metrics, shown, f"detail-metrics-{i}"),
                html.P("estimate: not stored (the flow task keeps errors only); see the live panel",
                       className="note", style=_NOTE)]))
        return [html.H4(f"{self._heading(req, first)} · {where}", id="detail-title"), shared, _cards(cards)]

    def supports_live(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("input" in r.data for r in results)

    def live_unavailable(self, results: Sequence[OrbitResult]) -> str:
        return "live re-evaluation needs the stored image pairs (evaluate with store_inputs=True)"

    def evaluate_live(self, model: nn.Module, result: OrbitResult, sample: int, element: Orbit) -> LiveFlow:
        """``model``'s estimate on the stored pair moved by the one element of ``element`` (the
        run's interpolation, padding and normalisation), resampled to the pair's size as the task
        scores it, with the task's metrics against the moved truth and consensus."""
        task = _task(result)
        t = element.transforms()
        x = torch.from_numpy(transformed_pair(result, sample, t))[None]
        norm = result.attrs.get("normalize")
        call = ModelCall(model, read=task.read_outputs, normalize=json.loads(norm) if norm else None,
                         what="the transformed pair")
        with call.evaluating():
            out = call(x)
        est = resample_flow(out.detach().float().cpu(), tuple(x.shape[-2:]))
        metrics: dict[str, float] = {}
        maps: dict[str, np.ndarray] = {}
        with_map = dataclasses.replace(task, maps=("epe",))  # the run's scoring, and the EPE map to draw
        for prefix, field_ in (("", stored_truth(result, sample)), ("consensus_", consensus_field(result, sample))):
            if field_ is None:
                continue
            target = torch.from_numpy(moved_flow(field_, t, result)).float()[None]
            scored = with_map.score(est, target, t)
            for m in _METRICS:
                metrics[prefix + m] = float(scored[m][0])
            maps[prefix + "epe_map"] = scored["epe_map"][0].double().numpy()
        return LiveFlow(est[0].double().numpy(), metrics, maps)

    def live_detail(self, req: DetailRequest) -> list[Any]:
        first = req.results[0]
        point = dict(req.live_point or {})
        parts: list[Any] = [html.H4(f"live re-evaluation · {describe_element(first.orbit, point)}", id="live-title")]
        if req.live_transform is None:
            return parts + [html.P("choose an element with the live controls")]
        t = req.live_transform.transforms()
        outputs = list(req.live_outputs or [None] * len(req.results))
        estimates = [o.estimate if o is not None else None for o in outputs]
        shared, _, scale = self._shared(req, t, "live", estimates)
        parts.append(shared)
        notes, cards = [], []
        frame = next((tuple(int(s) for s in r.data["input"].shape[-2:]) for r in req.results if "input" in r.data),
                     None)
        reference = "epe_map" if not req.label_free and any(o is not None and "epe_map" in o.maps for o in outputs) \
            else "consensus_epe_map"
        finite = [o.maps[reference][np.isfinite(o.maps[reference])] for o in outputs
                  if o is not None and reference in o.maps]
        zmax = max([float(f.max()) for f in finite if f.size] + [0.0])
        for i, (name, colour, out) in enumerate(zip(req.names, req.colours, outputs)):
            if out is None:
                notes.append(html.P(f"{name}: model not loadable (no weights in the store): estimate not shown, "
                                    "stored values only", className="note", style=_NOTE))
                continue
            figures: list[Any] = [_graph(f"live-flow-{i}", flow_figure(out.estimate, "estimate", scale,
                                                                       role="estimate"))]
            if reference in out.maps:
                what = "EPE" if reference == "epe_map" else "EPE vs consensus"
                mean = out.metrics.get(reference.removesuffix("_map"), float("nan"))
                figures.append(_graph(f"live-epe-{i}", epe_map_figure(out.maps[reference], frame or out.estimate.shape[-2:],
                                                                      f"{what} (mean {mean:.3f} px)", zmax),
                                      width="290px"))
            else:
                figures.append(html.P("no reference to score against (neither ground truth nor consensus stored)",
                                      id=f"live-epe-{i}", className="note", style=_NOTE))
            shown = [m for m in (*(() if req.label_free else _METRICS), *_CONSENSUS)]
            cards.append(_card(name, colour, [
                html.Div(figures, style={"display": "flex", "gap": "6px", "alignItems": "flex-start"}),
                _metrics_line(out.metrics, shown, f"live-metrics-{i}")]))
        if cards:
            parts.append(_cards(cards))
        return parts + notes

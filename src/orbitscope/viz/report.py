"""A self-contained HTML report comparing runs (works offline: plotly.js is embedded once).

Sections: provenance of each run; a summary table per model (accuracy at the identity element;
mean, worst and best accuracy over the orbit and where; the invariance test's p-value and the
largest drop from the identity with its simultaneous interval; the non-equivariance score;
label-free measures when class probabilities were stored); aggregate NERO plots with pointwise
and simultaneous confidence bands; whole-orbit statistics (a test of invariance per model, and
the paired comparison of the first run with each other run, :mod:`orbitscope.stats`);
per-class aggregate plots; the dimension-reduction view; and the most orbit-sensitive samples
with their individual NERO plots and thumbnails. Everything is read from the results; nothing
is re-evaluated.

Non-equivariance score: the mean over samples of the standard deviation of the metric (default
the true-class confidence) along the orbit. An invariant model scores 0.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from .interactive import figure_html, render_plotly
from ..analysis.dataset_level import DEFAULT_BOOTSTRAP, dataset_metric_names
from ..analysis.nero import (check_same_samples, layout_kind, metric_label, prepare_aggregate, prepare_individual,
                             rotation_quaternions, sample_classes, sample_groups)
from ..analysis.ranking import rank_samples
from ..analysis.reduce import embed, orbit_statistic
from .plot import SIMULTANEOUS_LAYOUTS, render
from .reduce_plots import scatter_plotly
from ..results.result import OrbitResult
from ..stats.invariance import InvarianceTest, format_p, invariance_test

__all__ = ["write_report", "summary_rows", "non_equivariance", "invariance_tests", "MAX_DROP_COLUMN", "REPORT_CSS",
           "html_table", "svg_figure"]

REPORT_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}td,th{border:1px solid #ddd;padding:.3rem .6rem;text-align:right}
th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:.5rem}
.sample{border:1px solid #eee;padding:.4rem}.thumbs img{image-rendering:pixelated;margin-right:.4rem;border:1px solid #ccc}
.note{color:#555;font-size:.88rem}code{background:#f3f3f3;padding:0 .2rem}
h3{font-size:1.05rem;margin-top:1.4rem}.static svg{max-width:560px;height:auto}
"""


def non_equivariance(result: OrbitResult, metric: str = "confidence") -> float:
    """Mean over samples of the standard deviation of ``metric`` along the orbit (0 = invariant)."""
    return float(np.mean(orbit_statistic(result, metric, "std")))


def _where(coords: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in coords.items())


def invariance_tests(results: Sequence[OrbitResult], metric: str) -> list[InvarianceTest | str]:
    """Per result, :func:`orbitscope.stats.invariance.invariance_test` of ``metric`` (simultaneous
    level 95 %), or the reason it cannot be computed (a one-element orbit, a metric with extra
    dims, no complete samples) as text."""
    out: list[InvarianceTest | str] = []
    for res in results:
        try:
            out.append(invariance_test(res, metric))
        except ValueError as exc:
            out.append(str(exc))
    return out


#: The summary column of the largest drop from the identity (with its simultaneous interval).
MAX_DROP_COLUMN = "max drop [simultaneous 95% interval]"


def _p_column(tests: Sequence[InvarianceTest | str]) -> str:
    """The p-value column's name, naming the test (e.g. ``"invariance p (sup-t bootstrap test)"``)."""
    method = next((t.method for t in tests if isinstance(t, InvarianceTest)), None)
    return f"invariance p ({method})" if method else "invariance p"


def summary_rows(results: Sequence[OrbitResult], labels: Sequence[str], metric: str = "confidence", *,
                 invariance: Sequence[InvarianceTest | str] | None = None) -> list[dict[str, Any]]:
    """One row of headline numbers per model (see the module docstring): the headline metric
    (:meth:`~orbitscope.results.OrbitResult.primary_metric`, accuracy for classification) at
    the identity, its orbit mean, worst and best element, the invariance test's p-value (column
    named by the test, e.g. ``"invariance p (sup-t bootstrap test)"``; a float) and the largest drop from
    the identity with its simultaneous 95 % interval (column :data:`MAX_DROP_COLUMN`, text
    ``"0.312 [0.270, 0.350]"``; ``"n/a"`` in both when the test cannot be computed), and the
    non-equivariance of ``metric``.

    Args:
        invariance: the results' :func:`invariance_tests` of the headline metric, when already
            computed (default: computed here).
    """
    rows = []
    headline = results[0].primary_metric()
    name = metric_label(results, headline)
    tests = list(invariance) if invariance is not None else invariance_tests(results, headline)
    p_column = _p_column(tests)
    for res, label, test in zip(results, labels, tests):
        acc = res.summary(headline)
        lo, hi = test.max_drop_interval if isinstance(test, InvarianceTest) else (np.nan, np.nan)
        row: dict[str, Any] = {
            "model": label,
            "samples": acc["n_samples"],
            f"{name} at identity": acc["at_identity"],
            f"orbit mean {name}": acc["mean"],
            f"worst {name}": f"{acc['worst']:.3f} ({_where(acc['worst_at'])})",
            f"best {name}": f"{acc['best']:.3f} ({_where(acc['best_at'])})",
            p_column: test.p_value if isinstance(test, InvarianceTest) else "n/a",
            MAX_DROP_COLUMN: (f"{test.max_drop:.3f} [{lo:.3f}, {hi:.3f}]" if isinstance(test, InvarianceTest)
                              else "n/a"),
            f"non-equivariance (orbit std of {metric_label(results, metric)})": non_equivariance(res, metric),
        }
        if "probabilities" in res.data:
            from ..analysis.consensus import invariance_measures, with_consensus

            agree = with_consensus(res).moments("consensus_agreement")  # streamed: exact count / cells
            row["consensus agreement"] = float(agree.total.sum() / agree.n.sum())
            try:
                inv = invariance_measures(res)
            except ValueError:  # no identity element (e.g. a near-uniform SO(3) grid): no flip rates
                pass
            else:
                row["prediction flip rate"] = float(inv["flip_rate"].mean())
                row["agreement with identity"] = float(inv["identity_agreement"].mean())
        rows.append(row)
    return rows


def html_table(rows: list[dict[str, Any]], formats: dict[str, Any] | None = None) -> str:
    """An HTML table of ``rows``; floats with three decimals, or by ``formats[column](value)``."""
    formats = formats or {}
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = ""
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            if isinstance(v, float) and c in formats:
                cells.append(f"<td>{html.escape(formats[c](v))}</td>")
            else:
                cells.append(f"<td>{v:.3f}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>")
        body += "<tr>" + "".join(cells) + "</tr>"
    return f"<table><tr>{head}</tr>{body}</table>"


def _thumbnail(image: np.ndarray, scale: int = 3) -> str:
    """uint8 (C, H, W) -> <img> with an inline PNG."""
    arr = np.asarray(image)
    pil = Image.fromarray(arr[0] if arr.shape[0] == 1 else np.moveaxis(arr, 0, -1))
    pil = pil.resize((pil.width * scale, pil.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    pil.save(buf, format="PNG")
    return f'<img alt="input" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _transformed_thumbnail(res: OrbitResult, sample: int, element: dict[str, float]) -> str:
    """The stored input transformed by one orbit element (the report's only computation on data)."""
    import torch

    from ..kinds import get_kind

    orbit = res.orbit
    dims = res.orbit_dims
    idx = np.ravel_multi_index(tuple(int(np.argmin(np.abs(orbit.coords[d] - element[d]))) for d in dims), orbit.shape)
    task = res.task()
    kind = get_kind(task.input_kind if task is not None else "image")
    x = torch.from_numpy(res.data["input"].sel(sample=sample).values.astype(np.float32) / 255.0)[None]
    options: dict[str, Any] = {"interpolation": res.attrs.get("interpolation", "bilinear"),
                               "padding": res.attrs.get("padding", "zeros")}
    view = res.attrs.get("view_size")
    if view is not None:  # a window over context: the field of view at that element
        view = json.loads(view) if isinstance(view, str) else view
        options["view_size"] = (int(view[0]), int(view[1]))
    out = kind.act(x, orbit.transforms()[[int(idx)]], layout="paired", **options)[0]
    return _thumbnail(_first_image((out.numpy() * 255).round().astype(np.uint8)))


def _first_image(values: np.ndarray) -> np.ndarray:
    """(C, H, W) -> itself; (T, C, H, W) frame sequences -> their first frame."""
    return values[0] if values.ndim == 4 else values


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("orbitscope")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def write_report(
    results: Sequence[OrbitResult],
    path: str | Path,
    *,
    labels: Sequence[str] | None = None,
    metric: str | None = None,
    method: str = "pca",
    n_samples: int = 10,
    title: str = "orbitscope report",
    seed: int = 0,
    extra_sections: Sequence[str] = (),
    invariance: Sequence[InvarianceTest | str] | None = None,
) -> Path:
    """Write the report for ``results`` (same orbit) to ``path`` (.html) and return the path.

    ``extra_sections``: HTML fragments appended after the built-in sections, e.g.
    :meth:`orbitscope.robust.compare.RobustnessComparison.html_section`. ``invariance``: the
    results' :func:`invariance_tests` of the headline metric, when already computed.
    """
    results = list(results)
    if not results:
        raise ValueError("give at least one run to report on")
    p = Path(path)
    if p.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"the report is an HTML file: give a path ending in .html, got {p.name!r}")
    check_same_samples(results)
    headline = results[0].primary_metric()
    if metric is None:  # the per-sample metric of the later sections: confidence, else the headline
        metric = "confidence" if all("confidence" in r.data for r in results) else headline
    agg = prepare_aggregate(results, headline, labels=labels, simultaneous=True)
    labels = [s.label for s in agg.series]
    tests = list(invariance) if invariance is not None else invariance_tests(results, headline)
    parts: list[str] = []
    first = [True]

    def fig(figure: Any, height: int | None = None) -> str:
        if height:  # small multiples: no repeated legend (the colours match the large plots above)
            figure.update_layout(height=height, showlegend=False, margin=dict(l=30, r=30, t=60, b=40))
            figure.update_polars(radialaxis=dict(angle=112, tickangle=112, tickfont=dict(size=9)))
        out = figure_html(figure, include_plotlyjs=True if first[0] else False)
        first[0] = False
        return out

    parts.append(f"<h1>{html.escape(title)}</h1><p class='note'>generated {time.strftime('%Y-%m-%d %H:%M')} by "
                 f"orbitscope {_version()}; every number below is read from the stored runs.</p>")
    parts.append("<h2>Runs</h2>" + html_table([{
        "model": lab, "run": r.attrs.get("run_id", ""), "model hash": r.attrs.get("model_hash", ""),
        "data": r.attrs.get("data_id", ""), "orbit": ", ".join(f"{d} × {r.data.sizes[d]}" for d in r.orbit_dims),
        "created": r.attrs.get("created", "")} for r, lab in zip(results, labels)]))
    p_column = _p_column(tests)
    parts.append("<h2>Summary</h2>" + html_table(summary_rows(results, labels, metric, invariance=tests),
                                             {p_column: lambda v: format_p(v).removeprefix("p = ")}) +
                 "<p class='note'>The aggregate plots below show two 95% bands. Filled: the pointwise interval of "
                 "each orbit element on its own (Wilson for accuracy, Student-t for means), which misses somewhere "
                 "on a large orbit far more often than 5% of the time. Dashed: the simultaneous band (sup-t "
                 "bootstrap over samples), which covers every element at once; a dip is only shown to be real "
                 "where it leaves the dashed band. The per-class, per-group and small plots show the pointwise "
                 "band only. Consensus measures (NERO) need no labels but measure self-consistency, not "
                 "correctness: an invariant but wrong model scores perfectly.</p>")

    parts.append("<h2>Aggregate NERO plots</h2><div class='grid'>")
    parts.append(fig(render_plotly(agg)))
    if metric != headline:
        parts.append(fig(render_plotly(prepare_aggregate(results, metric, labels=labels, simultaneous=True))))
    if all("probabilities" in r.data for r in results):
        parts.append(fig(render_plotly(prepare_aggregate(results, "consensus_agreement", labels=labels,
                                                         simultaneous=True))))
    parts.append("</div>")
    parts.append(_whole_orbit_section(results, labels, headline, tests))

    classes = sample_classes(results[0])
    if classes is not None and headline in ("correct", "conf_iou"):
        present = [int(c) for c in np.unique(classes) if c >= 0]
        parts.append(f"<h2>Per-class aggregate plots ({metric_label(results, headline)})</h2>"
                     + ("" if headline == "correct" else "<p class='note'>by the class of each sample's key object "
                        "(its first box)</p>") + "<div class='grid'>")
        for c in present:
            parts.append(fig(render_plotly(prepare_aggregate(results, headline, labels=labels, subset=c,
                                                              title=f"class {c}")), height=360))
        parts.append("</div>")

    parts.append(_groups_section(results, labels, headline, fig))
    parts.append(_dataset_section(results, labels, fig))
    parts.append(_consensus_section(results, labels, headline, fig))

    parts.append(f"<h2>Dimension reduction ({method}) of per-sample orbit vectors of {metric_label(results, metric)}</h2>")
    if results[0].n_samples < 3:
        parts.append(f"<p class='note'>needs at least 3 samples; this run has {results[0].n_samples}.</p>")
    else:
        parts.append("<div class='grid'>")
        for res, lab in zip(results, labels):
            emb = embed(res, metric, method=method, seed=seed)
            colour = emb.rows_of(orbit_statistic(res, metric, "mean"))
            sub = f" ({emb.n_samples:,} of {res.n_samples:,} samples, seeded subsample)" if emb.subsampled else ""
            parts.append(fig(scatter_plotly(emb, colour, f"orbit mean of {metric}", f"{lab}: {emb.label}{sub}"),
                             height=420))
        parts.append("</div>")

    parts.append(_sensitive_section(results, labels, metric, n_samples, fig))
    parts.extend(extra_sections)
    doc = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{REPORT_CSS}</style></head><body>{''.join(parts)}</body></html>")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(doc, encoding="utf-8")
    return p


def svg_figure(figure: Any) -> str:
    """A matplotlib figure as inline SVG (self-contained, offline)."""
    buf = io.StringIO()
    figure.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _whole_orbit_section(results: list[OrbitResult], labels: list[str], headline: str,
                         tests: Sequence[InvarianceTest | str]) -> str:
    """Per model the test of invariance of the headline metric; with several runs, the paired
    comparison of the first with each other (verdict and a static plot with the marks)."""
    name = html.escape(metric_label(results, headline))
    out = [f"<h2>Whole-orbit statistics</h2><p class='note'>Statistics over the whole orbit of {name} "
           "(orbitscope.stats): each sample's values at all elements are kept together, so the correlation "
           "between nearby elements is used, and error rates hold over all elements at once.</p>",
           "<h3>Invariance</h3><p class='note'>H0: the same mean at every orbit element, by the studentized "
           "sup-t bootstrap test of the contrasts with the identity (valid when nearby elements are correlated); "
           "the largest drop from the identity comes with its simultaneous 95% interval. A large p-value is no "
           "proof of invariance: read the interval.</p><ul>"]
    for label, test in zip(labels, tests):
        text = test.sentence() if isinstance(test, InvarianceTest) else f"not computed: {test}"
        out.append(f"<li><b>{html.escape(label)}</b>: {html.escape(text)}</li>")
    out.append("</ul>")
    if len(results) >= 2:
        out.append(f"<h3>Paired comparisons with {html.escape(labels[0])}</h3><p class='note'>per element an exact "
                   "McNemar test (0/1 metrics) or a paired t-test on the same samples, Holm's correction across "
                   "elements (family-wise error 5%); triangles on the first model's curve mark where it is "
                   "significantly worse (down) or better (up).</p>")
        # only the layouts that draw the marks get a plot
        drawn = layout_kind(results[0].orbit_dims, rotation_quaternions(results)) in SIMULTANEOUS_LAYOUTS
        for res, label in zip(results[1:], labels[1:]):
            data = prepare_aggregate([results[0], res], headline, labels=[labels[0], label], simultaneous=drawn,
                                     compare=True, title=f"{labels[0]} vs {label}: {metric_label(results, headline)}")
            if data.comparison is None:
                out.append(f"<p class='note'>{html.escape(labels[0])} vs {html.escape(label)}: "
                           f"{html.escape('; '.join(data.info.get('notes', ['not computed'])))}</p>")
                continue
            out.append(f"<p><b>{html.escape(data.comparison['verdict'])}</b></p>")
            if drawn:
                out.append(f"<div class='static'>{svg_figure(render(data))}</div>")
        if not drawn:
            out.append("<p class='note'>(the marks are drawn on polar and line plots; this orbit's layout gives the "
                       "verdicts only)</p>")
    return "".join(out)


#: most values of a sample group that get a plot each in the report
MAX_GROUP_PLOTS = 24


def _groups_section(results: list[OrbitResult], labels: list[str], headline: str, fig: Any) -> str:
    """Aggregate plots per value of each group the data declared (e.g. per flow type)."""
    out = []
    for name, values in sample_groups(results[0]).items():
        distinct = list(dict.fromkeys(values.tolist()))
        title = html.escape(name.replace('_', ' '))
        if len(distinct) > MAX_GROUP_PLOTS:
            out.append(f"<h2>Aggregate plots per {title}</h2><p class='note'>{len(distinct)} distinct values, more "
                       f"than {MAX_GROUP_PLOTS}: not drawn (use aggregate(..., by={name!r}))</p>")
            continue
        out.append(f"<h2>Aggregate plots per {title} ({metric_label(results, headline)})</h2><div class='grid'>")
        for value in distinct:
            mask = values == value
            out.append(fig(render_plotly(prepare_aggregate(results, headline, labels=labels, subset=mask,
                                                            title=f"{name.replace('_', ' ')} {value} "
                                                                  f"({int(mask.sum())} samples)")), height=360))
        out.append("</div>")
    return "".join(out)


def _dataset_section(results: list[OrbitResult], labels: list[str], fig: Any) -> str:
    """Dataset-level metrics per orbit element (the task's ``compute``, e.g. AP@0.5 for detection),
    each with its percentile-bootstrap band over samples."""
    names = dataset_metric_names(results)
    if not names:
        return ""
    out = ["<h2>Dataset-level metrics</h2><p class='note'>computed over all samples at each orbit element; band: "
           f"percentile bootstrap over samples ({DEFAULT_BOOTSTRAP} resamples)</p><div class='grid'>"]
    for name in names:
        data = prepare_aggregate(results, name, labels=labels,
                                 title=f"dataset-level: {metric_label(results, name)}")
        out.append(fig(render_plotly(data), height=420))
    out.append("</div>")
    return "".join(out)


def _consensus_section(results: list[OrbitResult], labels: list[str], headline: str, fig: Any) -> str:
    """Label-free plots against the stored consensus (e.g. detection's fused boxes), when recorded."""
    name = f"consensus_{headline}"
    if headline == "correct" or not all(name in r.data for r in results):
        return ""
    return (f"<h2>Against the consensus (label-free)</h2><p class='note'>each element scored against the sample's "
            f"consensus (NERO): self-consistency, not correctness.</p><div class='grid'>"
            f"{fig(render_plotly(prepare_aggregate(results, name, labels=labels)))}</div>")


def _sensitive_section(results: list[OrbitResult], labels: list[str], metric: str, n: int, fig: Any) -> str:
    """The n samples whose metric varies most along the orbit (largest std, over all models)."""
    stds = np.max([orbit_statistic(r, metric, "std") for r in results], axis=0)
    order = np.argsort(-stds, kind="stable")[:n]
    ranking = rank_samples(results[0], metric, by="most_variable")
    out = [f"<h2>The {len(order)} most orbit-sensitive samples</h2><p class='note'>ranked by the largest standard "
           f"deviation of {metric_label(results, metric)} along the orbit over the models; rank k/N is the rank "
           f"in {labels[0]}'s own ranking.</p><div class='grid'>"]
    for pos in order:
        sample = int(results[0].data.sample.values[pos])
        ind = prepare_individual(results, sample, metric, labels=labels,
                                 title=f"sample {sample}: {metric_label(results, metric)}")
        worst_pos = int(np.argmax(ind.series[0].values) if results[0].meta(metric).lower_is_better
                        else np.argmin(ind.series[0].values))
        worst = {d: float(ind.coords[d][i]) for d, i in zip(ind.dims, np.unravel_index(worst_pos, ind.series[0].values.shape))}
        ind.marker = worst
        thumbs = ""
        if "input" in results[0].data:
            thumbs = (f"<div class='thumbs'>{_thumbnail(_first_image(results[0].data['input'].sel(sample=sample).values))}"
                      f"{_transformed_thumbnail(results[0], sample, worst)}<span class='note'>input, and at "
                      f"{_where(worst)} (worst for {html.escape(labels[0])})</span></div>")
        rank = ranking.rank_of(int(pos))
        out.append(f"<div class='sample'><b>sample {sample}</b> · label {ind.info.get('label', '?')} · "
                   f"orbit std {stds[pos]:.3f} · rank {rank}/{len(ranking)}{thumbs}{fig(render_plotly(ind), 340)}</div>")
    out.append("</div>")
    return "".join(out)

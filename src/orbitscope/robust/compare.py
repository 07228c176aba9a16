"""Compare models' robustness: clean, PGD and certified probabilistic robust accuracy, per test.

For every model and perturbation level the comparison records the clean accuracy, the PGD
adversarial accuracy (``torchattacks.PGD``, L∞ only: an empirical *upper* bound on worst-case
robust accuracy), and for each sequential test the certified probabilistic robust accuracy
(correct and certified p(x) < κ, over all inputs; :func:`~orbitscope.robust.certify.certify`),
with the mean number of model queries per input and the undecided rate. Perturbations: uniform
L∞ boxes of radius ε (Mu & Lim's sampler) and random rotations by ±θ (PGD: n/a).

Probabilistic robustness asks for rare failures under *random* perturbations, so it is a much
weaker requirement than worst-case robustness: certified probabilistic accuracy is expected to
exceed PGD accuracy, most of all for models that were not trained adversarially.

Results: :class:`RobustnessComparison` (rows as dicts, CSV, a matplotlib figure, an HTML section
for :func:`orbitscope.viz.report.write_report` or a standalone page).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..engine.evaluation import DataError
from .certify import certify
from .samplers import LinfUniform, PerturbationSampler, RandomRotation
from .sequential import list_tests

__all__ = ["RobustnessComparison", "compare_robustness", "reference_models", "comparison_data", "DEFAULT_EPS",
           "DEFAULT_ROTATIONS"]

log = logging.getLogger(__name__)

DEFAULT_EPS = (0.05, 0.1, 0.2)
DEFAULT_ROTATIONS = (10.0, 20.0, 30.0)
_FAMILY_TITLE = {"linf": "uniform L∞ box, radius ε", "rotation": "random rotation, ±θ degrees"}
_FAMILY_X = {"linf": "ε (pixel values in [0, 1])", "rotation": "θ (degrees)"}


@dataclass
class RobustnessComparison:
    """Rows of a comparison (one per model × perturbation) and the settings that produced them.

    Row keys: ``model``, ``family`` (``linf``/``rotation``), ``level`` (ε or θ),
    ``perturbation`` (sampler spec), ``clean_accuracy``, ``pgd_accuracy`` (NaN for rotations or
    without torchattacks), and per test T: ``T_certified`` (certified robust accuracy),
    ``T_certified_lower``/``T_certified_upper`` (95% interval), ``T_among_correct``,
    ``T_undecided``, ``T_mean_samples`` (perturbed queries per input), ``T_seconds``.
    """

    rows: list[dict[str, Any]]
    tests: list[str]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(r["model"] for r in self.rows))

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(r["family"] for r in self.rows))

    def to_csv(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        cols = list(dict.fromkeys(k for r in self.rows for k in r))
        with p.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=cols)
            writer.writeheader()
            writer.writerows(self.rows)
        return p

    def table(self, what: str = "accuracy") -> tuple[list[str], list[list[str]]]:
        """Header and formatted rows for printing: ``what="accuracy"`` (clean, PGD, certified per
        test) or ``"queries"`` (mean perturbed queries per input, per test)."""
        if what not in ("accuracy", "queries"):
            raise ValueError(f"what must be 'accuracy' or 'queries', got {what!r}")
        head = ["model", "perturbation"] + (["clean", "PGD"] if what == "accuracy" else []) + list(self.tests)
        body = []
        for r in self.rows:
            cells = [str(r["model"]), r["perturbation"]]
            if what == "accuracy":
                cells += [_pct(r["clean_accuracy"]), _pct(r["pgd_accuracy"])]
                cells += [_pct(r[f"{t}_certified"]) for t in self.tests]
            else:
                cells += [f"{r[f'{t}_mean_samples']:.0f}" for t in self.tests]
            body.append(cells)
        return head, body

    def figure(self) -> Any:
        """matplotlib Figure: one panel per perturbation family × model (accuracy against level)."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fams, models = self.families, self.models
        fig, axes = plt.subplots(len(fams), len(models), figsize=(4.2 * len(models), 3.4 * len(fams)),
                                 squeeze=False, sharey=True)
        colours = plt.get_cmap("tab10").colors
        markers = "osD^v<>"
        for i, fam in enumerate(fams):
            for j, model in enumerate(models):
                ax = axes[i][j]
                rows = sorted((r for r in self.rows if r["family"] == fam and r["model"] == model),
                              key=lambda r: r["level"])
                if not rows:
                    ax.set_visible(False)
                    continue
                lv = [r["level"] for r in rows]
                ax.plot(lv, [r["clean_accuracy"] for r in rows], ":", color="0.5", label="clean")
                if fam == "linf" and not all(math.isnan(r["pgd_accuracy"]) for r in rows):
                    ax.plot(lv, [r["pgd_accuracy"] for r in rows], "--", color="k", marker="x", label="PGD")
                for k, t in enumerate(self.tests):
                    # thinner line per test, so that tests that agree stay visible on top of each other
                    ax.plot(lv, [r[f"{t}_certified"] for r in rows], "-", color=colours[k % 10],
                            lw=max(0.8, 3.5 - 0.8 * k), marker=markers[k % len(markers)], ms=max(3, 8 - 1.5 * k),
                            label=f"certified ({t})")
                ax.set_title(f"{model}: {_FAMILY_TITLE.get(fam, fam)}", fontsize=9)
                ax.set_xlabel(_FAMILY_X.get(fam, "level"), fontsize=8)
                ax.set_ylim(-0.02, 1.02)
                ax.grid(alpha=0.3)
                if j == 0:
                    ax.set_ylabel("accuracy")
        handles: dict[str, Any] = {}
        for ax in np.ravel(axes):
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(6, len(handles)), fontsize=8,
                   frameon=False)
        s = self.settings
        fig.suptitle(f"probabilistic robustness: κ = {s.get('kappa')}, α = {s.get('alpha')}, budget {s.get('budget')}, "
                     f"{s.get('n_inputs')} inputs", fontsize=10)
        fig.tight_layout(rect=(0, 0.07, 1, 0.95))
        return fig

    def save_figure(self, path: str | Path) -> Path:
        import matplotlib.pyplot as plt

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig = self.figure()
        fig.savefig(p, dpi=130)
        plt.close(fig)
        return p

    def html_section(self, png: bytes | None = None) -> str:
        """An HTML fragment (``<h2>`` section: notes, table, plot) for a report."""
        if png is None:
            import matplotlib.pyplot as plt

            fig = self.figure()
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110)
            plt.close(fig)
            png = buf.getvalue()
        s = self.settings
        head = ["model", "perturbation", "clean", "PGD"] + [f"certified ({t})" for t in self.tests] + \
               [f"queries/input ({t})" for t in self.tests]
        body = []
        for r in self.rows:
            cells = [html.escape(str(r["model"])), html.escape(r["perturbation"]), _pct(r["clean_accuracy"]),
                     _pct(r["pgd_accuracy"])]
            cells += [f"{_pct(r[f'{t}_certified'])} <span class='note'>[{_pct(r[f'{t}_certified_lower'])}, "
                      f"{_pct(r[f'{t}_certified_upper'])}]</span>" for t in self.tests]
            cells += [f"{r[f'{t}_mean_samples']:.0f}" for t in self.tests]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        table = "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(body) + \
                "</table>"
        note = (f"<p class='note'>{s.get('n_inputs')} inputs ({html.escape(str(s.get('data', '')))}); "
                f"κ = {s.get('kappa')}, α = {s.get('alpha')}, at most {s.get('budget')} perturbations per input; "
                f"seed {s.get('seed')}. Certified = correctly classified and certified p(x) &lt; κ by the test, over "
                "all inputs, with a 95% Clopper–Pearson interval. PGD: torchattacks.PGD, "
                f"{s.get('pgd_steps')} steps, random start (an upper bound on worst-case robust accuracy). "
                "The published rule re-tests after every round without correction and is not error-controlled; "
                "binomial, SPRT and the confidence sequence keep false certification below α.</p>")
        img = f"<img alt='robustness plot' style='max-width:100%' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        return f"<h2>Probabilistic robustness</h2>{note}{table}{img}"

    def write_html(self, path: str | Path, title: str = "orbitscope robustness report") -> Path:
        """A standalone, offline HTML page holding :meth:`html_section`."""
        from ..viz.report import REPORT_CSS

        p = Path(path)
        if p.suffix.lower() not in (".html", ".htm"):
            raise ValueError(f"the report is an HTML file: give a path ending in .html, got {p.name!r}")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                     f"<style>{REPORT_CSS}</style></head><body><h1>{html.escape(title)}</h1>{self.html_section()}</body></html>",
                     encoding="utf-8")
        return p

    def save(self, out_dir: str | Path, stem: str = "robustness") -> dict[str, Path]:
        """Write ``<stem>.csv``, ``<stem>.png`` and ``<stem>_section.html`` (a fragment) to ``out_dir``."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        png = self.save_figure(d / f"{stem}.png")
        section = d / f"{stem}_section.html"
        section.write_text(self.html_section(png.read_bytes()), encoding="utf-8")
        return {"csv": self.to_csv(d / f"{stem}.csv"), "png": png, "html_section": section}


def _pct(v: float) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"


def comparison_data(data: Any) -> tuple[Tensor, Tensor]:
    """(images (N, C, H, W) float in [0, 1], labels (N,)) from a Dataset or an (images, labels) pair."""
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = (torch.as_tensor(np.asarray(a)) if not isinstance(a, Tensor) else a for a in data)
    else:
        try:
            items = [data[i] for i in range(len(data))]
        except TypeError:
            raise TypeError(f"data must be a map-style Dataset or (images, labels), got {type(data).__name__}") from None
        if not items:
            raise DataError("the dataset is empty: nothing to compare")
        x = torch.stack([torch.as_tensor(it[0]) for it in items])
        y = torch.as_tensor([int(it[1]) for it in items])
    if len(x) == 0:
        raise DataError("the dataset is empty: nothing to compare")
    if x.dtype == torch.uint8:
        x = x.float() / 255.0
    return x.float(), y.long()


def _pgd(model: nn.Module, x: Tensor, y: Tensor, eps: float, steps: int, batch_size: int, seed: int) -> float:
    from .adversarial import pgd_accuracy

    try:
        return pgd_accuracy(model, x, y, eps=eps, steps=steps, batch_size=batch_size, seed=seed)
    except ImportError as exc:
        log.warning("PGD column left empty: %s", exc)
        return float("nan")


def compare_robustness(
    models: Mapping[str, nn.Module],
    data: Any,
    *,
    eps: Sequence[float] = DEFAULT_EPS,
    rotations: Sequence[float] = DEFAULT_ROTATIONS,
    tests: Sequence[str] | None = None,
    kappa: float = 0.01,
    alpha: float = 0.01,
    budget: int | None = 2000,
    quantize: bool = False,
    pgd_steps: int = 20,
    batch_size: int = 1024,
    seed: int = 0,
    optimize: bool = True,
    data_id: str = "",
    status: Callable[[str], None] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> RobustnessComparison:
    """Compare ``models`` (name -> classifier on images in [0, 1]) on ``data``; see the module docs.

    Args:
        eps: L∞ radii (pixel values in [0, 1]); each gives a :class:`LinfUniform` sampler
            (``quantize``: Mu & Lim's 8-bit rounding) and a PGD attack of the same radius.
        rotations: half-ranges θ in degrees of :class:`RandomRotation` samplers (PGD: n/a).
        tests: sequential test names (default: all of :func:`~.sequential.list_tests`).
        kappa: as in :func:`~.certify.certify`.
        alpha: as in :func:`~.certify.certify`.
        budget: as in :func:`~.certify.certify`; ``budget`` caps every test (the fixed binomial
            test then uses exactly ``budget`` samples).
        batch_size: as in :func:`~.certify.certify`.
        seed: as in :func:`~.certify.certify`.
        pgd_steps: PGD iterations (step 2.5·ε/steps, random start).
        optimize: certify a BatchNorm-folded, channels-last copy of each model (same
            predictions up to float rounding; faster on CPU).
        status: called with a line before each step; ``progress`` is passed to each certify.
    """
    from ..models.reference import eval_mode, optimize_for_inference

    tests = list(tests) if tests is not None else list_tests()
    unknown = set(tests) - set(list_tests())
    if unknown:
        raise ValueError(f"unknown test(s) {sorted(unknown)}; choose from {list_tests()}")
    if not models:
        raise ValueError("give at least one model to compare")
    for v in list(eps) + list(rotations):
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"perturbation levels must be positive, got {v}")
    x, y = comparison_data(data)
    perturbations: list[tuple[str, float, PerturbationSampler]] = [
        ("linf", float(e), LinfUniform(e, quantize=quantize)) for e in eps] + [
        ("rotation", float(t), RandomRotation(t)) for t in rotations]
    say = status or (lambda msg: None)
    rows: list[dict[str, Any]] = []
    for name, model in models.items():
        with eval_mode(model):
            fast = optimize_for_inference(model) if optimize else model
            with torch.inference_mode():
                pred = torch.cat([fast(x[s : s + batch_size]).argmax(1) for s in range(0, len(x), batch_size)])
            clean = int((pred == y).sum()) / len(x)
            for fam, level, sampler in perturbations:
                row: dict[str, Any] = {"model": name, "family": fam, "level": level, "perturbation": str(sampler),
                                       "clean_accuracy": clean, "pgd_accuracy": float("nan")}
                if fam == "linf":
                    say(f"{name}: PGD at ε = {level:g}")
                    row["pgd_accuracy"] = _pgd(model, x, y, level, pgd_steps, batch_size, seed)
                for t in tests:
                    say(f"{name}: certifying {sampler} with {t}")
                    t0 = time.perf_counter()
                    res = certify(fast, (x, y), sampler, test=t, kappa=kappa, alpha=alpha, budget=budget,
                                  batch_size=batch_size, seed=seed, progress=progress)
                    d = res.dataset
                    row.update({
                        f"{t}_certified": d["certified_robust_accuracy"],
                        f"{t}_certified_lower": d["certified_robust_accuracy_lower"],
                        f"{t}_certified_upper": d["certified_robust_accuracy_upper"],
                        f"{t}_among_correct": d["certified_among_correct"],
                        f"{t}_undecided": d["undecided_rate"],
                        f"{t}_mean_samples": d["mean_samples"],
                        f"{t}_seconds": time.perf_counter() - t0,
                    })
                rows.append(row)
    settings = {"kappa": kappa, "alpha": alpha, "budget": budget, "quantize": quantize, "pgd_steps": pgd_steps,
                "seed": seed, "n_inputs": int(len(x)), "data": data_id, "tests": tests}
    return RobustnessComparison(rows, tests, settings)


def reference_models(
    cache_dir: str | Path | None = None, names: Sequence[str] = ("plain", "uniform", "pgd"),
    status: Callable[[str], None] | None = None,
) -> dict[str, nn.Module]:
    """The reference MNIST models by recipe name, trained on first use and cached.

    Names from :func:`orbitscope.training.recipes.all_recipes` (e.g. ``plain``, ``uniform``) use
    :func:`~orbitscope.training.recipes.cached_reference_model`; ``pgd`` the adversarial recipe
    (:func:`~.adversarial.cached_adversarial_model`). ``cache_dir`` defaults to
    ``<$ORBITSCOPE_HOME or ./orbitscope-runs>/models``.
    """
    from .adversarial import ADVERSARIAL_RECIPES, adversarial_cache_path, cached_adversarial_model, default_cache_dir
    from ..training.recipes import all_recipes, cache_path, cached_reference_model

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    recipes = all_recipes()
    out: dict[str, nn.Module] = {}
    for name in names:
        if name in ADVERSARIAL_RECIPES:
            if status and not adversarial_cache_path(name, cache).is_file():
                status(f"training the adversarial model {name!r} (first use, a minute or two; cached in {cache})")
            out[name] = cached_adversarial_model(name, cache)[0]
        elif name in recipes:
            if status and not cache_path(recipes[name], cache).is_file():
                status(f"training the reference model {name!r} (first use; cached in {cache})")
            out[name] = cached_reference_model(recipes[name], cache)[0]
        else:
            raise ValueError(f"unknown recipe {name!r}; known: {sorted(set(recipes) | set(ADVERSARIAL_RECIPES))}")
    return out

"""The PIV demo: NERO's third case study (does the flow estimate commute with D4 × time reversal?).

Two parts, written to ``<out>/`` (mosaic PNGs, ``summary.csv``, ``report.html``):

1. **Synthetic particle pairs with exact ground truth** (200 held-out 64 × 64 pairs, 25 of each
   of the eight flow types of :mod:`orbitscope.data.piv`), over NERO's 16 elements: OpenCV's
   Farnebäck with NERO's parameters, and our :class:`~orbitscope.models.FlowCNN` trained by
   :class:`~orbitscope.training.flow.FlowRecipe` plainly, with random D4 × time-reversal
   augmentation. The plain CNN symmetrised over the 16 elements (exactly equivariant by
   construction, checked in ``tests/test_equivariance_by_construction.py``) costs 16 forwards
   per element (256 per pair): it is evaluated on the real pairs only.
2. **Real pairs without ground truth**, label-free with the consensus: OpenPIV's tutorial PIV
   pair (its package data) and OpenCV's optical-flow pairs ``rubberwhale`` and ``basketball``
   (Debian's opencv-doc), central 128 × 128 crops in grey. Skipped, with a note, where a source
   is not installed.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..analysis.nero import sample_groups
from ..data.photos import OPENCV_EXAMPLES
from ..data.specs import parse_data_spec
from ..engine.evaluation import Run, evaluate
from ..errors import DataError
from ..group.parse import parse_orbit
from ..models.equivariant import symmetrize
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks.flow import Flow
from ..training.flow import FlowRecipe, cached_flow_model, flow_cache_path
from ..viz.plot import nero_plot, save_figure
from ..viz.report import write_report
from .lee import LEE_SAMPLES, LeeModel, lee_section
from .common import CaseResult, contrast_rows, train_missing, with_invariance

__all__ = ["FLOW_RECIPES", "TEST_DATA", "PIVDemo", "run_piv_demo", "train_flow_models", "real_pairs", "element_rows"]

#: the learned estimators (display name -> recipe)
FLOW_RECIPES: dict[str, FlowRecipe] = {
    "flow-cnn": FlowRecipe(name="flow-cnn"),
    "flow-cnn-d4xt": FlowRecipe(name="flow-cnn-d4xt", augment="d4xt"),
}
#: held-out synthetic pairs (another seed than the recipes' training pairs)
TEST_DATA = "piv-synthetic:n=200,size=64,seed=1"
REAL_SIZE = 128
#: the headline contrasts (A, B) on the synthetic pairs: learned vs classical (NERO's ordering),
#: augmented vs plain (does training on the group's orbit flatten it?)
CONTRASTS = (("flow-cnn", "farneback"), ("flow-cnn-d4xt", "flow-cnn"))
#: the plain CNN symmetrised over the 16 elements: on the real pairs only (see the module docstring)
SYMMETRIZED = "flow-cnn-symmetrized"


#: the PIV demo's result (runs, summaries and files per part)
PIVDemo = CaseResult


def _train_one(recipe: FlowRecipe, cache_dir: str) -> str:
    """Executor job: train one flow model into the cache; returns its name."""
    cached_flow_model(recipe, cache_dir)
    return recipe.name


def element_rows(runs: list[Run], names: list[str], metric: str = "epe") -> list[dict[str, Any]]:
    """Per model: ``metric``'s sample mean at the identity, its mean over the 16 elements, and
    the worst element (name and value)."""
    from ..viz.mosaic import element_name

    rows = []
    for run, name in zip(runs, names):
        agg = run.result.aggregate(metric)["mean"].values.reshape(-1)  # 16, C order of (time_reversed, d4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            worst = int(np.nanargmax(agg)) if np.isfinite(agg).any() else 0
            rows.append({"model": name, "samples": run.result.n_samples, f"{metric} identity": round(float(agg[0]), 4),
                         f"{metric} mean of 16": round(float(np.nanmean(agg)), 4),
                         f"{metric} worst": round(float(agg[worst]), 4), "worst element": element_name(worst),
                         f"{metric} time-reversed mean / D4 mean": round(float(np.nanmean(agg[8:]) / np.nanmean(agg[:8])), 3),
                         "run": run.run_id})
    return rows


def _grey_crop(image: np.ndarray, size: int) -> np.ndarray:
    """(H, W[, 3]) uint8 -> central (size, size) grey float32 in [0, 1] (ITU-R 601 luma)."""
    img = image.astype(np.float32) / 255.0
    if img.ndim == 3:
        img = img[..., :3] @ np.array([0.299, 0.587, 0.114], np.float32)
    h, w = img.shape
    if h < size or w < size:
        raise DataError(f"a {w} × {h} image is smaller than the {size}-px crop")
    y0, x0 = (h - size) // 2, (w - size) // 2
    return np.ascontiguousarray(img[y0:y0 + size, x0:x0 + size])


def real_pairs(size: int = REAL_SIZE) -> tuple[tuple[np.ndarray, np.ndarray], list[str], dict[str, str]]:
    """Real unlabelled pairs ((frames (n, 2, 1, size, size), flows all NaN), names, skipped
    sources with the reason)."""
    from PIL import Image

    sources: list[tuple[str, Callable[[], tuple[Path, Path]]]] = []

    def openpiv_pair() -> tuple[Path, Path]:
        from importlib.resources import files

        base = Path(str(files("openpiv"))) / "data" / "test1"
        return base / "exp1_001_a.bmp", base / "exp1_001_b.bmp"

    sources.append(("openpiv-exp1_001", openpiv_pair))
    for name in ("rubberwhale", "basketball"):
        sources.append((f"opencv-{name}", lambda n=name: (OPENCV_EXAMPLES / f"{n}1.png", OPENCV_EXAMPLES / f"{n}2.png")))
    frames, names, skipped = [], [], {}
    for name, paths in sources:
        try:
            a, b = paths()
        except ImportError as exc:
            skipped[name] = f"openpiv is not installed ({exc}); pip install 'openpiv>=0.26,<0.27'"
            continue
        if not (a.is_file() and b.is_file()):
            skipped[name] = f"{a} is missing (install Debian's opencv-doc, or openpiv)"
            continue
        pair = [_grey_crop(np.asarray(Image.open(p).convert("RGB")), size) for p in (a, b)]
        frames.append(np.stack(pair)[:, None])
        names.append(name)
    if not frames:
        return (np.zeros((0, 2, 1, size, size), np.float32), np.zeros((0, 2, size, size), np.float32)), names, skipped
    stacked = np.stack(frames).astype(np.float32)
    return (stacked, np.full((len(stacked), 2, size, size), np.nan, np.float32)), names, skipped


def _per_flow_type(results: list[Any], names: list[str], flow_types: np.ndarray, folder: Path) -> Path:
    """One EPE mosaic per flow type (the samples of that type), and a table of their orbit
    means; returns the table's path."""
    rows = []
    for kind in dict.fromkeys(flow_types.tolist()):
        mask = flow_types == kind
        save_figure(nero_plot(results, "epe", labels=names, subset=mask, title=f"EPE (px), {kind} pairs"),
                    folder / f"nero_epe_mosaic_{kind}.png")
        for res, name in zip(results, names):
            agg = res.aggregate("epe", subset=mask)["mean"].values.reshape(-1)
            rows.append({"flow type": kind, "model": name, "pairs": int(mask.sum()),
                         "epe identity": round(float(agg[0]), 4), "epe mean of 16": round(float(np.mean(agg)), 4),
                         "epe worst": round(float(np.max(agg)), 4)})
    return write_csv(rows, folder / "summary_by_flow_type.csv")


def train_flow_models(cache: Path, say: Callable[[str], None], *, shipped: bool = True) -> float:
    """Train the demo's flow models that are neither cached in ``cache`` nor shipped; seconds spent."""
    return train_missing(list(FLOW_RECIPES.values()), _train_one, flow_cache_path, cache, "flow model", say,
                         shipped=shipped)


def run_piv_demo(home: str | Path | None = None, out_dir: str | Path = "demo-output/piv", *,
                 status: Callable[[str], None] | None = None,
                 progress: Callable[[int, int | None], None] | None = None, shipped: bool = True) -> PIVDemo:
    """Run the PIV demo (see the module docstring); learned models are cached in the store (taken
    from the shipped weights when ``shipped``: :mod:`orbitscope.demos.shipped`)."""
    from ..models.flow_estimators import Farneback

    say = status or (lambda msg: None)
    store = Store(home)
    cache = store.home / "models"
    out = Path(out_dir)
    demo = PIVDemo()
    demo.seconds["training"] = train_flow_models(cache, say, shipped=shipped)
    models: dict[str, torch.nn.Module] = {"farneback": Farneback()}
    for name, recipe in FLOW_RECIPES.items():
        models[name] = cached_flow_model(recipe, cache)[0]
    orbit = parse_orbit("d4xt")
    test = parse_data_spec(TEST_DATA)
    names = list(models)
    runs = []
    for name, model in models.items():
        t0 = time.perf_counter()
        say(f"evaluating {name} on {len(test)} synthetic pairs × {orbit.size} elements")
        runs.append(evaluate(model, test, orbit, Flow(), consensus=True, store_inputs=True, store=store, name=name,
                             model_name=name, optimize=name != "farneback", progress=progress))
        demo.seconds[f"evaluate {name}"] = time.perf_counter() - t0
    demo.runs["synthetic"] = runs
    demo.summaries["synthetic"] = with_invariance(element_rows(runs, names), runs, "epe")
    demo.summaries["synthetic contrast"] = contrast_rows(runs, names, CONTRASTS, ("epe",))
    # Farnebäck quantises its frames to 8 bits (a piecewise-constant function of the input): it has no
    # derivative, so no LEE. The layers (a pass per layer call) of the plain flow CNN only: the
    # demo's time budget
    lee_models = [LeeModel(name, model, run, {"layers": name == "flow-cnn"})
                  for (name, model), run in zip(models.items(), runs) if name != "farneback"]
    lee = lee_section(store, lee_models, test, Flow(), ["rotation"], "epe", out / "synthetic", n=LEE_SAMPLES // 2,
                      say=say, seconds=demo.seconds)
    demo.summaries["synthetic lee"] = lee.rows
    demo.files.update({f"piv {k}": v for k, v in lee.files.items()})
    results = [r.result for r in runs]
    folder = out / "synthetic"
    demo.files.update({
        "piv EPE mosaic": save_figure(nero_plot(results, "epe", labels=names), folder / "nero_epe_mosaic.png"),
        "piv EPE maps": save_figure(nero_plot(results[:2], "epe_map", labels=names[:2]), folder / "nero_epe_maps.png"),
        "piv consensus mosaic": save_figure(nero_plot(results, "consensus_epe", labels=names),
                                            folder / "nero_consensus_epe_mosaic.png"),
        "piv summary": write_csv(demo.summaries["synthetic"], folder / "summary.csv"),
        "piv contrast": write_csv(demo.summaries["synthetic contrast"], folder / "contrast.csv"),
        "piv per flow type": _per_flow_type(results, names, sample_groups(results[0])["flow_type"],
                                            folder / "by_flow_type"),
        "piv report": write_report(results, folder / "report.html", labels=names,
                                   title="orbitscope demo: PIV, D4 × time reversal (synthetic pairs)",
                                   extra_sections=[lee.html]),
    })

    pairs, real_names, skipped = real_pairs()
    demo.skipped.update(skipped)
    for name, why in skipped.items():
        say(f"skipping the real pair {name}: {why}")
    if len(real_names):
        models[SYMMETRIZED] = symmetrize(models["flow-cnn"], "d4xt", input_kind="frames", output_kind="flow")
        names = list(models)
        runs = []
        data = (pairs[0], pairs[1])
        for name, model in models.items():
            say(f"evaluating {name} on {len(real_names)} real pairs × {orbit.size} elements (consensus)")
            runs.append(evaluate(model, data, orbit, Flow(), consensus=True, store_inputs=True, store=store,
                                 name=f"{name}-real", model_name=name, optimize=name != "farneback",
                                 progress=progress))
        demo.runs["real"] = runs
        demo.summaries["real"] = element_rows(runs, names, "consensus_epe")
        results = [r.result for r in runs]
        folder = out / "real"
        demo.files.update({
            "real consensus mosaic": save_figure(nero_plot(results, "consensus_epe", labels=names),
                                                 folder / "nero_consensus_epe_mosaic.png"),
            "real summary": write_csv(demo.summaries["real"], folder / "summary.csv"),
            "real report": write_report(results, folder / "report.html", labels=names,
                                        title="orbitscope demo: PIV on real pairs (label-free, consensus)"),
        })
    return demo

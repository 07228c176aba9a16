"""The point-cloud demo: NERO's fourth case study (how does a classifier's confidence change as
the object turns in 3-D?).

Models, trained by :mod:`orbitscope.training.pointcloud` on the built-in real-mesh shape set
(``meshes:train``, :mod:`orbitscope.data.meshes`; canonically oriented, no rotation in the
per-sample augmentation): PointNet and a small DGCNN, each plainly and with a uniformly random
rotation per cloud per step (NERO's "data aug" model), the invariant-by-construction
:class:`~orbitscope.models.point_nets.DistanceNet` (a function of pairwise distances), and the
plain PointNet symmetrised over the cube's 24 rotations (exactly invariant to those only).

Two parts, written to ``<out>/`` (PNGs, ``summary.csv``, ``report.html``):

1. **NERO's sample** (3 planes × axis angles × 13 rotation angles 0…180°; each distinct rotation
   evaluated once) at 10° axis steps (:data:`NERO_ORBIT`; NERO's own 5° grid, ``so3:nero``, is
   twice the work) on 200 held-out clouds (20 per class), drawn as NERO's disks (identity at the
   centre, 180° at the rim) of accuracy and true-class confidence, for PointNet plain and
   rotation-augmented (:data:`NERO_MODELS`, NERO's contrast), and NERO's individual disk of one
   cloud (:data:`INDIVIDUAL_SAMPLE`) in NERO's individual score, ``nero_score`` (the true-class
   logit min–max normalised over the classes of each prediction: 1 exactly where the prediction
   is right; the demo's models return logits, so the task records it).
2. **A near-uniform grid** (super-Fibonacci, 64 rotations) on the same 200 clouds, every model:
   means over it estimate the mean over all of SO(3) without NERO's bias towards the identity.

Each part's ``summary.csv`` carries each model's test of invariance of accuracy, and its
``contrast.csv`` the headline contrasts (:data:`CONTRASTS`) with the whole-orbit statistics
(:func:`orbitscope.demos.common.contrast_rows`). The 200 clouds are 20 instances of each of the
10 meshes, made by stated variation (:mod:`orbitscope.data.meshes`: anisotropic scaling, taper,
bend, overall scale, surface resampling, jitter), not 200 distinct objects.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..data.specs import parse_data_spec
from ..engine.evaluation import Run, evaluate
from ..group.elements import unique_elements
from ..group.parse import parse_orbit
from ..models.equivariant import symmetrize
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks.pointcloud import PointCloudClassification
from ..training.pointcloud import PointCloudRecipe, cached_point_model, point_cache_path
from ..viz.plot import individual_plot, nero_plot, save_figure
from ..viz.report import write_report
from ..lie.generators import SPATIAL
from .lee import LEE_SAMPLES, LeeModel, lee_section
from .common import CaseResult, contrast_rows, train_missing, with_invariance

__all__ = ["POINT_RECIPES", "TRAINING_ORDER", "NERO_TEST", "NERO_ORBIT", "GRID_TEST", "GRID_ORBIT", "NERO_MODELS", "INDIVIDUAL_SAMPLE", "CONTRASTS", "DEMO_TASK", "run_pointcloud_demo", "train_point_models", "rotation_rows"]

#: the trained models (display name -> recipe)
POINT_RECIPES: dict[str, PointCloudRecipe] = {
    "pointnet": PointCloudRecipe(arch="pointnet", name="pointnet"),
    "pointnet-so3": PointCloudRecipe(arch="pointnet", augment="so3", name="pointnet-so3"),
    "dgcnn": PointCloudRecipe(arch="dgcnn", name="dgcnn"),
    "dgcnn-so3": PointCloudRecipe(arch="dgcnn", augment="so3", name="dgcnn-so3"),
    "distance": PointCloudRecipe(arch="distance", name="distance"),
}
#: training order, longest first (two at a time: the two lanes then end close together)
TRAINING_ORDER = ("dgcnn-so3", "pointnet-so3", "dgcnn", "pointnet", "distance")
#: held-out clouds (256 points each, 20 per class: 200) for NERO's sample and for the uniform
#: grid; NERO's construction at 10° axis steps (3 × 37 × 13 = 1,443 elements, 1,174 distinct
#: rotations; NERO's own 5° grid, ``so3:nero``, has 2,416) for the models in :data:`NERO_MODELS`
#: (DGCNN's kNN graphs cost about ten PointNets, DistanceNet's pairwise distances about three, and
#: DistanceNet is invariant by construction: both are on the uniform grid only), sized so that the
#: whole case study stays within about two minutes on 2 CPU cores
NERO_TEST = "meshes:test,n=20,points=256"
NERO_ORBIT = "so3-nero:10:15"
NERO_MODELS = ("pointnet", "pointnet-so3")
#: the held-out cloud (its ``sample`` coordinate) drawn in NERO's individual disk of ``nero_score``
INDIVIDUAL_SAMPLE = 0
GRID_TEST = "meshes:test,n=20,points=256"
GRID_ORBIT = "so3:64"
#: the headline contrasts (A, B) per part: augmented vs plain, symmetrised vs plain
CONTRASTS = {"nero": (("pointnet-so3", "pointnet"),),
             "uniform": (("pointnet-so3", "pointnet"), ("dgcnn-so3", "dgcnn"), ("pointnet-octahedral", "pointnet"))}
#: the finite group the plain PointNet is symmetrised over
SYMMETRY_GROUP = "octahedral"
#: the demo's task: class probabilities kept (consensus, the interface's bars); every model here
#: returns logits (the symmetrised one log mean probabilities), so ``nero_score`` is recorded
DEMO_TASK = PointCloudClassification(store_probabilities=True)

#: the point-cloud demo's result (runs, summaries and files per part)
PointCloudDemo = CaseResult


def _train_one(recipe: PointCloudRecipe, cache_dir: str) -> str:
    """Executor job: train one point-cloud model into the cache; returns its name."""
    cached_point_model(recipe, cache_dir)
    return recipe.label


def _element_text(orbit: Any, index: int) -> str:
    coords = {d: orbit.coords[d] for d in orbit.dims}
    pos = np.unravel_index(index, orbit.shape)
    if orbit.dims == ("plane", "axis_angle", "rotation_angle"):
        plane = ("xy", "xz", "yz")[int(coords["plane"][pos[0]])]
        return f"{plane} plane, axis {coords['axis_angle'][pos[1]]:g}°, turn {coords['rotation_angle'][pos[2]]:g}°"
    q = orbit.quaternions[index]
    angle = float(np.degrees(2 * np.arccos(min(1.0, abs(q[0])))))
    axis = q[1:] * np.sign(q[0] or 1.0)
    axis = axis / (np.linalg.norm(axis) or 1.0)
    return f"rotation {index}: {angle:.0f}° about ({axis[0]:.2f}, {axis[1]:.2f}, {axis[2]:.2f})"


def rotation_rows(runs: list[Run], names: list[str], orbit: Any) -> list[dict[str, Any]]:
    """Per model: accuracy at the identity (when the sample holds it), the mean over the
    *distinct* rotations of the sample (each counted once), the worst rotation, and the same for
    the true-class confidence."""
    t = orbit.transforms()
    distinct = np.unique(unique_elements(t))
    ident = orbit.identity_index()
    rows = []
    for run, name in zip(runs, names):
        acc = run.result.aggregate("correct")["mean"].values.reshape(-1)
        conf = run.result.aggregate("confidence")["mean"].values.reshape(-1)
        worst = int(distinct[np.argmin(acc[distinct])])
        rows.append({
            "model": name, "clouds": run.result.n_samples, "rotations": len(distinct),
            "accuracy identity": round(float(acc[ident]), 4) if ident is not None else "",
            "accuracy mean": round(float(acc[distinct].mean()), 4),
            "accuracy worst": round(float(acc[worst]), 4), "worst rotation": _element_text(orbit, worst),
            "confidence mean": round(float(conf[distinct].mean()), 4),
            "confidence worst": round(float(conf[distinct].min()), 4),
            "run": run.run_id,
        })
    return rows


def train_point_models(cache: Path, say: Callable[[str], None], *, shipped: bool = True) -> float:
    """Train the demo's point-cloud models that are neither cached in ``cache`` nor shipped;
    seconds spent."""
    return train_missing([POINT_RECIPES[n] for n in TRAINING_ORDER], _train_one, point_cache_path, cache,
                         "point-cloud model", say, shipped=shipped)


def run_pointcloud_demo(home: str | Path | None = None, out_dir: str | Path = "demo-output/pointcloud", *,
                        status: Callable[[str], None] | None = None,
                        progress: Callable[[int, int | None], None] | None = None,
                        shipped: bool = True) -> PointCloudDemo:
    """Run the point-cloud demo (see the module docstring); trained models are cached in the store
    (taken from the shipped weights when ``shipped``: :mod:`orbitscope.demos.shipped`)."""
    say = status or (lambda msg: None)
    store = Store(home)
    cache = store.home / "models"
    out = Path(out_dir)
    demo = PointCloudDemo()
    demo.seconds["training"] = train_point_models(cache, say, shipped=shipped)
    models: dict[str, torch.nn.Module] = {name: cached_point_model(recipe, cache)[0]
                                          for name, recipe in POINT_RECIPES.items()}
    symmetrized = f"pointnet-{SYMMETRY_GROUP}"  # 24 forwards per cloud: on the uniform grid only
    models[symmetrized] = symmetrize(models["pointnet"], SYMMETRY_GROUP, input_kind="points")
    task = DEMO_TASK
    for part, spec, orbit_spec, consensus in (("nero", NERO_TEST, NERO_ORBIT, True),
                                              ("uniform", GRID_TEST, GRID_ORBIT, False)):
        orbit = parse_orbit(orbit_spec)
        data = parse_data_spec(spec)
        runs = []
        names = list(models) if part == "uniform" else list(NERO_MODELS)
        for name in names:
            model = models[name]
            t0 = time.perf_counter()
            say(f"evaluating {name} on {len(data)} clouds × {orbit.size} rotations ({part})")
            runs.append(evaluate(model, data, orbit, task, consensus=consensus, store=store, name=f"{name}-{part}",
                                 model_name=name, batch_size=8, progress=progress))
            demo.seconds[f"evaluate {name} {part}"] = time.perf_counter() - t0
        demo.runs[part] = runs
        demo.summaries[part] = with_invariance(rotation_rows(runs, names, orbit), runs, "correct")
        demo.summaries[f"{part} contrast"] = contrast_rows(runs, names, CONTRASTS[part], ("correct", "confidence"))
        results = [r.result for r in runs]
        folder = out / part
        what = f"NERO's SO(3) sample ({orbit_spec})" if part == "nero" else f"{orbit.size} near-uniform rotations"
        if part == "uniform":
            # per-point features carry no group action, so every layer attribution would name the
            # first layer: LEE alone; DistanceNet detaches its input (a symmetric difference)
            # (the octahedral average runs 24 forwards per cloud: left out, for the demo's time budget)
            lee_models = [LeeModel(name, models[name], run, {"method": "difference"} if name == "distance" else
                                   {"layers": False}) for name, run in zip(names, runs) if name != symmetrized]
            lee = lee_section(store, lee_models, data, task, SPATIAL, "confidence", folder, n=LEE_SAMPLES // 2,
                              say=say, seconds=demo.seconds)
            demo.summaries["uniform lee"] = lee.rows
            demo.files.update({f"pointcloud {k}": v for k, v in lee.files.items()})
        else:  # NERO's individual disk, in NERO's individual score
            demo.files["pointcloud nero individual"] = save_figure(
                individual_plot(results, INDIVIDUAL_SAMPLE, "nero_score", labels=names),
                folder / f"nero_score_sample{INDIVIDUAL_SAMPLE}.png")
        demo.files.update({
            f"pointcloud {part} accuracy": save_figure(nero_plot(results, "correct", labels=names),
                                                       folder / "nero_accuracy.png"),
            f"pointcloud {part} confidence": save_figure(nero_plot(results, "confidence", labels=names),
                                                         folder / "nero_confidence.png"),
            f"pointcloud {part} summary": write_csv(demo.summaries[part], folder / "summary.csv"),
            f"pointcloud {part} contrast": write_csv(demo.summaries[f"{part} contrast"], folder / "contrast.csv"),
            f"pointcloud {part} report": write_report(results, folder / "report.html", labels=names,
                                                      title=f"orbitscope demo: point clouds over {what}",
                                                      extra_sections=[lee.html] if part == "uniform" else []),
        })
    return demo

"""The faces part of the detection demo: a real pretrained face detector (MTCNN) over window shifts.

Two models: :class:`~orbitscope.models.MTCNN` (Zhang et al. 2016, the trained P-, R-, O-Nets that
facenet-pytorch ships) and, for contrast, OpenCV's Haar frontal-face cascade
(:class:`~orbitscope.models.classical_detectors.HaarCascade`, label 0 = face like MTCNN's). Both
run on a 128-px field of view moved over window shifts −16…14 by 2 px (16 × 16 elements):

(a) **labelled face scenes** (:func:`orbitscope.data.face_contexts`: real face crops pasted on
    real photographs, exact boxes = the pasted rectangles): conf×IoU per sample and AP@0.5 per
    element against the key face (``Detection(ground_truth="key")``: other faces in view are
    ignored regions);
(b) **real, unlabelled face photos** (:data:`orbitscope.data.photos.FACES`: scikit-image's
    astronaut, and OpenCV's messi5.jpg when opencv-doc is installed), label-free with the
    consensus.

Everything is written under ``out``: ``scenes/`` and ``photos/`` each with NERO heatmaps (PNG),
``summary.csv`` and ``report.html``. The box convention of (a) is the pasted crop's (hairline to
chin), not MTCNN's training boxes, so even a perfect MTCNN does not reach IoU 1 there; what the
heatmaps show is how the score and the box change as the face moves under P-Net's stride-2 grid
and the pyramid's scales.

Measured (n_scenes = 100, 16 × 16 shifts): MTCNN's AP@0.5 is 0.92 at the identity and 0.86–1.00
over the orbit (mean 0.93), conf×IoU 0.75 at the identity and 0.70–0.80 over it; the Haar
cascade's AP@0.5 is 0.63–0.68 (mean 0.67). Averaged over faces the heatmaps are flat (no shift is
systematically worse: the face stays in view), but per face MTCNN is not shift-equivariant: its
box moves by about 1–1.5 px (standard deviation of each corner over the orbit, in the context's
frame; up to 6 px) with no dominant period, and the near-profile face flickers between found and
missed. Expect about 16–18 ms per 128-px view for MTCNN on two free CPU cores (P-Net over six
pyramid levels, then about 18 R-Net and 1–2 O-Net crops per view), so (a) takes minutes at
n_scenes = 100.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from torch import nn

from ..data.face_scenes import face_contexts
from ..data.photos import FACES, OPENCV_EXAMPLES, photo_contexts
from ..engine.evaluation import Run, evaluate
from ..group.parse import parse_orbit
from ..models.classical_detectors import HaarCascade
from ..models.mtcnn import MTCNN
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks.detection import Detection
from ..viz.plot import individual_plot, nero_plot, save_figure
from ..viz.report import write_report
from .detection_summary import headline_rows

__all__ = ["FACES_ORBIT", "FACES_VIEW", "face_models", "run_faces_part"]

FACES_ORBIT, FACES_VIEW = "window-shift:-16:14:2", 128


def face_models() -> dict[str, nn.Module]:
    """The part's models by display name: MTCNN (pretrained) and OpenCV's Haar frontal-face
    cascade, both labelling faces 0."""
    return {"mtcnn": MTCNN(), "opencv-haar-frontalface": HaarCascade(label=0)}


def _evaluate_all(models: dict[str, nn.Module], data: Any, orbit_spec: str, part: str, store: Store,
                  say: Callable[[str], None], progress: Callable[[int, int | None], None] | None, *,
                  labelled: bool) -> tuple[list[Run], list[float]]:
    """Evaluate every model: on labelled key-object contexts against the key face
    (``Detection(ground_truth="key")``), on unlabelled photos against the consensus."""
    orbit = parse_orbit(orbit_spec)
    runs, seconds = [], []
    for name, model in models.items():
        say(f"evaluating {name} on {len(data)} {part} × {orbit.size} shifts")
        t0 = time.perf_counter()
        task = Detection(ground_truth="key") if labelled else Detection()
        runs.append(evaluate(model, data, orbit, task, view_size=(FACES_VIEW, FACES_VIEW), consensus=not labelled,
                             store_inputs=True, store=store, name=f"{name}-{part.replace(' ', '-')}",
                             model_name=name, progress=progress))
        seconds.append(time.perf_counter() - t0)
        say(f"{name} on {part}: {seconds[-1]:.1f} s")
    return runs, seconds


def run_faces_part(store: Store, out: Path, say: Callable[[str], None],
                   progress: Callable[[int, int | None], None] | None, *, n_scenes: int = 100,
                   orbit: str = FACES_ORBIT, photos: bool = True
                   ) -> tuple[list[Run], list[str], list[dict[str, Any]], dict[str, Path]]:
    """Run the faces part (see the module docstring).

    Args:
        store: where the runs are written (a rerun reuses them).
        out: output folder (``scenes/`` and ``photos/`` under it).
        say: status messages; progress: the engine's progress callback (or None).
        n_scenes: labelled face contexts evaluated in (a).
        orbit: the window-shift orbit (shifts up to 16 px: the contexts have room for no more).
        photos: also run (b).

    Returns:
        ``(runs, names, summary rows, files)``: runs and their display names in order (part (a)'s
        models, then part (b)'s), one :func:`~orbitscope.demos.detection_summary.headline_rows` row per
        run with ``part`` and ``seconds`` added (conf×IoU and AP@0.5 against the labels for (a),
        against the consensus for (b)), and the written files by description.
    """
    if n_scenes < 3:
        raise ValueError(f"n_scenes must be at least 3 (the report's dimension reduction), got {n_scenes}")
    out = Path(out)
    models = face_models()
    names = list(models)
    files: dict[str, Path] = {}

    scenes = face_contexts(n_scenes, view=FACES_VIEW, max_shift=16)
    runs, seconds = _evaluate_all(models, scenes, orbit, "face scenes", store, say, progress, labelled=True)
    rows = [{"part": "face scenes", **row, "seconds": round(s, 1)}
            for row, s in zip(headline_rows(runs, names), seconds)]
    results = [r.result for r in runs]
    folder = out / "scenes"
    files["faces conf×IoU heatmaps"] = save_figure(nero_plot(results, "conf_iou", labels=names),
                                                   folder / "nero_conf_iou_heatmap.png")
    files["faces confidence heatmaps"] = save_figure(nero_plot(results, "confidence", labels=names),
                                                     folder / "nero_confidence_heatmap.png")
    files["faces IoU heatmaps"] = save_figure(nero_plot(results, "iou", labels=names), folder / "nero_iou_heatmap.png")
    files["faces AP heatmaps"] = save_figure(nero_plot(results, "ap50", labels=names), folder / "nero_ap50_heatmap.png")
    files["faces sample 0"] = save_figure(individual_plot(results, int(results[0].data.sample.values[0]), "conf_iou",
                                                          labels=names), folder / "nero_conf_iou_sample0.png")
    files["faces scenes summary"] = write_csv(rows, folder / "summary.csv")
    files["faces scenes report"] = write_report(results, folder / "report.html", labels=names,
                                                title="orbitscope demo: MTCNN vs Haar on labelled face scenes, "
                                                      "window shifts")
    all_runs, all_names = list(runs), list(names)

    if photos:
        available = [c for c in FACES if c.source.startswith("skimage:")
                     or (OPENCV_EXAMPLES / c.source.split("#")[0]).is_file()]
        if len(available) < len(FACES):
            say("messi5.jpg is missing (Debian's opencv-doc): the photos part uses the astronaut only")
        data = photo_contexts(available, view=FACES_VIEW, max_shift=16)
        photo_runs, photo_seconds = _evaluate_all(face_models(), data, orbit, "face photos", store, say, progress,
                                                  labelled=False)
        rows += [{"part": "face photos", **row, "seconds": round(s, 1)}
                 for row, s in zip(headline_rows(photo_runs, names, "consensus_conf_iou"), photo_seconds)]
        presults = [r.result for r in photo_runs]
        folder = out / "photos"
        files["face photos consensus heatmaps"] = save_figure(
            nero_plot(presults, "consensus_conf_iou", labels=names), folder / "nero_consensus_conf_iou_heatmap.png")
        for i, sample in enumerate(presults[0].data.sample.values):
            files[f"face photo {i}"] = save_figure(individual_plot(presults, int(sample), "consensus_iou", labels=names),
                                                   folder / f"nero_consensus_iou_photo{i}.png")
        files["face photos summary"] = write_csv([r for r in rows if r["part"] == "face photos"],
                                                 folder / "summary.csv")
        files["face photos report"] = write_report(presults, folder / "report.html", labels=names, metric="confidence",
                                                   title="orbitscope demo: MTCNN vs Haar on real face photos "
                                                         "(label-free)")
        all_runs += photo_runs
        all_names += names
    return all_runs, all_names, rows, files

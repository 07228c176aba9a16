"""The detection demo: NERO's detection case study (does the box move with the object?).

Parts, each written under ``<out>/`` (heatmap PNGs, ``summary.csv``, ``report.html``):

1. **Our detector, 0 % vs 100 % jitter** (NERO's contrast), ``scenes/``. Two shipped
   :class:`CentreDetector` s trained by :class:`~orbitscope.training.detection.DetectorRecipe` on
   the built-in digit scenes (real MNIST digits pasted on real photographs), one always seeing the
   key object at the centre of its 64-px view, one with NERO's truncated-normal offsets (σ =
   view/4 at 100 %, NERO's 32 px of 128). Both are evaluated on 500 held-out key-object contexts (test digits, other
   scenes) over window shifts −32…24 by 8 (8 × 8 elements: NERO's geometry, shifts up to half the
   view, at half its 128-px scale) with NERO's key-object ground truth
   (``Detection(ground_truth="key")``), in two worker processes. ``summary.csv`` carries each
   model's test of invariance of conf × IoU, ``contrast.csv`` the paired comparison (orbit means
   and per shift; :func:`~orbitscope.demos.common.contrast_rows`), ``counting.csv`` precision,
   recall, F1 and AP with COCO's one-to-one matching and with NERO's counting side by side
   (:func:`~orbitscope.demos.detection_summary.counting_rows`). The key-object ground truth is
   NERO's protocol and the question the demo asks (does the box follow *this* object?); every
   digit in view as ground truth (``ground_truth="all"``) is measured beside it by
   ``benchmarks/detection_counting.py`` (``benchmarks/results/detection_counting.txt``).
2. **Real detectors on real, unlabelled photos**, label-free with the consensus, ``photos/``:
   OpenCV's HOG people detector on pedestrians of ``vtest.avi`` (shifts −30…30 by 6, 192-px view);
   MTCNN (when facenet-pytorch's weights are installed), OpenCV's Haar frontal-face cascade and
   scikit-image's LBP face cascade on two faces (shifts −16…14 by 2, 128-px view). Skipped with a
   note when Debian's opencv-doc (the photos) is not installed.
3. **Real pretrained detectors on labelled data** (skipped, with the reason, when their package is
   missing): MTCNN vs the Haar cascade on 60 labelled face scenes (:mod:`orbitscope.demos.faces`,
   ``faces/``) and PaddleOCR's PP-OCRv4 text detector and orientation classifier
   (:mod:`orbitscope.demos.text`, ``text/``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..data.photos import FACES, PEOPLE, opencv_examples_available, photo_contexts
from ..engine.evaluation import Run, evaluate
from ..engine.executors import ProcessExecutor
from ..group.parse import parse_orbit
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks.detection import Detection
from ..training.detection import DetectorRecipe, cached_detector, detection_training_data, detector_cache_path
from ..viz.plot import individual_plot, nero_plot, save_figure
from ..viz.report import write_report
from .lee import LEE_SAMPLES, LeeModel, lee_section
from .common import CaseResult, contrast_rows, train_missing, with_invariance
from .detection_summary import counting_rows, headline_rows

__all__ = ["DETECTORS", "DetectionDemo", "run_detection_demo", "train_detectors", "headline_rows", "counting_rows"]

#: the two detectors of NERO's contrast (display name -> recipe)
DETECTORS: dict[str, DetectorRecipe] = {
    "centre-detector-jitter0": DetectorRecipe(name="centre-detector-jitter0", jitter=0.0),
    "centre-detector-jitter100": DetectorRecipe(name="centre-detector-jitter100", jitter=1.0),
}
SCENE_ORBIT = "window-shift:-32:24:8"
#: held-out scenes (test digits, another seed than training): about 590 key objects, of which the
#: demo takes the first ``n_objects``
TEST_SCENES = 2400
#: the labelled face scenes of MTCNN vs Haar (:mod:`orbitscope.demos.faces`) and their shifts
FACE_SCENES, FACE_SCENE_ORBIT = 60, "window-shift:-16:16:8"
PEOPLE_ORBIT, PEOPLE_VIEW = "window-shift:-30:30:6", 192
FACES_ORBIT, FACES_VIEW = "window-shift:-16:14:2", 128


#: the detection demo's result (runs, summaries and files per part)
DetectionDemo = CaseResult


def _train_one(recipe: DetectorRecipe, cache_dir: str) -> str:
    """Executor job: train one detector into the cache; returns its name."""
    cached_detector(recipe, cache_dir)
    return recipe.name


def train_detectors(cache: Path, say: Callable[[str], None], *, shipped: bool = True) -> float:
    """Train the demo's detectors that are neither cached in ``cache`` nor shipped; seconds spent."""
    return train_missing(list(DETECTORS.values()), _train_one, detector_cache_path, cache, "detector", say,
                         shipped=shipped)


def run_detection_demo(home: str | Path | None = None, out_dir: str | Path = "demo-output/detection", *,
                       n_objects: int = 500, photos: bool = True, status: Callable[[str], None] | None = None,
                       progress: Callable[[int, int | None], None] | None = None,
                       shipped: bool = True, pretrained: bool = True) -> DetectionDemo:
    """Run the detection demo (see the module docstring); models are cached in the store (taken
    from the shipped weights when ``shipped``: :mod:`orbitscope.demos.shipped`)."""
    if n_objects < 3:
        raise ValueError(f"n_objects must be at least 3 (the report's dimension reduction), got {n_objects}")
    say = status or (lambda msg: None)
    store = Store(home)
    cache = store.home / "models"
    out = Path(out_dir)
    demo = DetectionDemo()
    demo.seconds["training"] = train_detectors(cache, say, shipped=shipped)

    recipe = next(iter(DETECTORS.values()))
    test = detection_training_data(DetectorRecipe(scenes=TEST_SCENES, seed=1, view=recipe.view,
                                                  max_shift=recipe.max_shift), split="test")
    if len(test) < n_objects:
        say(f"the {TEST_SCENES} held-out scenes hold {len(test)} key objects, fewer than the {n_objects} asked for")
    test = test.subset(range(min(n_objects, len(test))))
    orbit = parse_orbit(SCENE_ORBIT)
    runs, names, lee_models = [], list(DETECTORS), []
    for name, r in DETECTORS.items():
        model, _ = cached_detector(r, cache)
        t0 = time.perf_counter()
        say(f"evaluating {name} on {len(test)} key objects × {orbit.size} shifts")
        runs.append(evaluate(model, test, orbit, Detection(ground_truth="key"), view_size=(r.view, r.view), store_inputs=True,
                             store=store, name=name, model_name=name, optimize=True, batch_size=50,
                             executor=ProcessExecutor(workers=2, threads=1), progress=progress))
        demo.seconds[f"evaluate {name}"] = time.perf_counter() - t0
        # layers (a pass per layer call) for the first model of the pair only: the demo's time budget
        lee_models.append(LeeModel(name, model, runs[-1], {"view_size": (r.view, r.view), "layers": not lee_models}))
    demo.runs["scenes"] = runs
    demo.summaries["scenes"] = with_invariance(headline_rows(runs, names), runs, "conf_iou")
    demo.summaries["scenes contrast"] = contrast_rows(runs, names, [(names[0], names[1])], ("conf_iou",))
    demo.summaries["scenes counting (COCO vs NERO)"] = counting_rows(runs, names)
    # LEE with layers costs a forward-mode pass per layer call: 50 key objects, horizontal shifts
    lee = lee_section(store, lee_models, test, Detection(ground_truth="key"), ["translate_x"], "conf_iou",
                      out / "scenes", n=LEE_SAMPLES // 2, say=say, seconds=demo.seconds)
    demo.summaries["scenes lee"] = lee.rows
    demo.files.update({f"scenes {k}": v for k, v in lee.files.items()})
    demo.files.update(_write_scene_outputs(runs, names, out / "scenes", demo.summaries["scenes"],
                                           demo.summaries["scenes contrast"], [lee.html]))
    demo.files["detection counting"] = write_csv(demo.summaries["scenes counting (COCO vs NERO)"],
                                                 out / "scenes" / "counting.csv")

    if photos and not opencv_examples_available():
        demo.skipped["photos"] = ("OpenCV's example photos are missing: install Debian's opencv-doc "
                                  "(sudo apt-get install opencv-doc; make demo does it as root)")
        say(f"skipping the photos: {demo.skipped['photos']}")
    elif photos:
        demo.files.update(_photos(demo, store, out / "photos", say, progress))
    if pretrained:
        _pretrained(demo, store, out, say, progress)
    return demo


def _pretrained(demo: DetectionDemo, store: Store, out: Path, say: Callable[[str], None],
                progress: Callable[[int, int | None], None] | None) -> None:
    """The real pretrained detectors that ship inside PyPI packages: MTCNN vs OpenCV's Haar cascade
    on labelled face scenes (:mod:`orbitscope.demos.faces`, with their contrast) and PP-OCRv4's
    text detector and orientation classifier (:mod:`orbitscope.demos.text`), each skipped with
    the reason when its package is missing."""
    from ..errors import SpecError
    from ..models.mtcnn import mtcnn_weights_dir
    from ..models.ppocr import DETECTOR_FILE, ORIENTATION_FILE, ppocr_model_path
    from .faces import run_faces_part
    from .text import run_text_part

    try:
        mtcnn_weights_dir()
    except SpecError as exc:
        demo.skipped["faces"] = str(exc)
        say(f"skipping MTCNN: {exc}")
    else:
        t0 = time.perf_counter()
        runs, names, rows, files = run_faces_part(store, out / "faces", say, progress, n_scenes=FACE_SCENES,
                                                  orbit=FACE_SCENE_ORBIT, photos=False)
        demo.runs["faces"], demo.summaries["faces (MTCNN vs Haar)"] = runs, rows
        demo.summaries["faces contrast"] = contrast_rows(runs, names, [(names[0], names[1])], ("conf_iou",))
        files["faces contrast"] = write_csv(demo.summaries["faces contrast"], out / "faces" / "scenes" / "contrast.csv")
        demo.summaries["faces counting (COCO vs NERO)"] = counting_rows(runs, names)
        files["faces counting"] = write_csv(demo.summaries["faces counting (COCO vs NERO)"],
                                            out / "faces" / "scenes" / "counting.csv")
        demo.files.update(files)
        demo.seconds["faces"] = time.perf_counter() - t0

    try:
        ppocr_model_path(DETECTOR_FILE), ppocr_model_path(ORIENTATION_FILE)
    except SpecError as exc:
        demo.skipped["text"] = str(exc)
        say(f"skipping PP-OCR: {exc}")
    else:
        t0 = time.perf_counter()
        runs, names, rows, files = run_text_part(store, out / "text", say, progress)
        demo.runs["text"], demo.summaries["text (PP-OCR)"] = runs, rows
        demo.files.update(files)
        demo.seconds["text"] = time.perf_counter() - t0


def _write_scene_outputs(runs: list[Run], names: list[str], folder: Path, summary: list[dict[str, Any]],
                         contrast: list[dict[str, Any]], extra_sections: list[str]) -> dict[str, Path]:
    results = [r.result for r in runs]
    files = {
        "detection conf×IoU heatmaps": save_figure(nero_plot(results, "conf_iou", labels=names),
                                                  folder / "nero_conf_iou_heatmap.png"),
        "detection sample 0": save_figure(individual_plot(results, int(results[0].data.sample.values[0]), "conf_iou",
                                                          labels=names), folder / "nero_conf_iou_sample0.png"),
    }
    files["detection AP heatmaps"] = save_figure(nero_plot(results, "ap50", labels=names), folder / "nero_ap50_heatmap.png")
    files["detection summary"] = write_csv(summary, folder / "summary.csv")
    files["detection contrast"] = write_csv(contrast, folder / "contrast.csv")
    files["detection report"] = write_report(results, folder / "report.html", labels=names,
                                             title="orbitscope demo: detection, window shifts (0 % vs 100 % jitter)",
                                             extra_sections=extra_sections)
    return files


def _mtcnn_if_available() -> dict[str, Any]:
    """``{"mtcnn": MTCNN()}`` when facenet-pytorch's weights are installed, else ``{}``."""
    from ..errors import SpecError
    from ..models.mtcnn import MTCNN, mtcnn_weights_dir

    try:
        mtcnn_weights_dir()
    except SpecError:
        return {}
    return {"mtcnn": MTCNN()}


def _photos(demo: DetectionDemo, store: Store, folder: Path, say: Callable[[str], None],
            progress: Callable[[int, int | None], None] | None) -> dict[str, Path]:
    from ..models.classical_detectors import HaarCascade, HOGPeople, LBPFace

    files: dict[str, Path] = {}
    parts = (("people", HOGPeople(), {"opencv-hog-people": None}, PEOPLE, PEOPLE_ORBIT, PEOPLE_VIEW),
             ("faces", None, {**_mtcnn_if_available(), "opencv-haar-frontalface": HaarCascade(),
                              "skimage-lbp-face": LBPFace()}, FACES, FACES_ORBIT, FACES_VIEW))
    for part, single, models, contexts, orbit_spec, view in parts:
        orbit = parse_orbit(orbit_spec)
        shift = int(max(np.abs(orbit.coords["tx"]).max(), np.abs(orbit.coords["ty"]).max()))
        data = photo_contexts(contexts, view=view, max_shift=shift)
        runs, names = [], []
        for name, model in models.items():
            model = model if model is not None else single
            t0 = time.perf_counter()
            say(f"evaluating {name} on {len(data)} unlabelled {part} photos × {orbit.size} shifts (consensus)")
            runs.append(evaluate(model, data, orbit, Detection(), view_size=(view, view), consensus=True,
                                 store_inputs=True, store=store, name=name, model_name=name, progress=progress))
            names.append(name)
            demo.seconds[f"evaluate {name}"] = time.perf_counter() - t0
        demo.runs[part] = runs
        demo.summaries[part] = headline_rows(runs, names, "consensus_conf_iou")
        results = [r.result for r in runs]
        sub = folder / part
        files[f"{part} consensus heatmaps"] = save_figure(nero_plot(results, "consensus_conf_iou", labels=names),
                                                          sub / "nero_consensus_conf_iou_heatmap.png")
        for i, sample in enumerate(results[0].data.sample.values):
            files[f"{part} photo {i}"] = save_figure(individual_plot(results, int(sample), "consensus_iou", labels=names),
                                                     sub / f"nero_consensus_iou_photo{i}.png")
        files[f"{part} summary"] = write_csv(demo.summaries[part], sub / "summary.csv")
        files[f"{part} report"] = write_report(results, sub / "report.html", labels=names, metric="confidence",
                                               title=f"orbitscope demo: OpenCV detectors on real {part} (label-free)")
    return files

"""The text part of the detection demo: PaddleOCR's pretrained PP-OCRv4 text detector (DBNet) and
its 0°/180° text-line classifier, run as real models through the engine.

Four evaluations, written to ``<out>/`` (PNG plots, ``summary.csv``, ``report.html`` per part):

1. ``scenes``: the detector over window shifts (−32…32 by 16 px, 5 × 5) on :func:`text_contexts`
   (words rendered on real photographs, exact boxes, key word centred in a 160-px view), with
   labels (AP@0.5, conf×IoU) and the consensus; the backgrounds are :data:`SCENE_BACKGROUNDS`
   (without scikit-image's grass and gravel textures, on which the detector at this resolution
   finds almost nothing);
2. ``fine``: the detector over horizontal shifts 0…32 px by 1 (ty = 0) on the first
   :data:`FINE_SCENES` contexts: does the box follow the word pixel by pixel
   (:func:`box_shift_error`), and does anything repeat with the network's 4-px output grid or its
   32-px downsampling?
3. ``photos``: the detector, label-free with the consensus, over window shifts −16…16 by 4 on
   real text photographs: crops of scikit-image's ``page()`` and, where Debian's opencv-doc is
   installed, of OpenCV's ``imageTextN.png`` (centres in :data:`TEXT_PHOTOS`, chosen by eye);
   ``skimage.data.text()`` is left out: at its native scale the detector finds nothing in it;
4. ``orientation``: the classifier over rotations 0…350° by 10 on upright :func:`text_lines`
   (48 × 192 crops, label "0"). The Classification task's labels do not move with the group
   element (labels are invariant there), so its ``correct`` means "still called upright". The
   expected answer under rotation by θ is "180" for θ in (90°, 270°) and "0" outside; this part
   computes that accuracy per angle from the stored predictions (90° and 270° have no right
   answer and are left out) and plots it, with the mean probability of "180" per angle.

The detector runs at the images' own resolution (``limit_type="max"``, ``limit_side_len=960``:
PaddleOCR's own default; 160 and 128 are multiples of 32, so nothing is resized). rapidocr's
default (the shorter side scaled up to 736 px) finds more text on busy backgrounds but costs
about 20× more per 160-px view.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..analysis.nero import MODEL_COLOURS, NeroData, NeroSeries, layout_kind
from ..data.photos import OPENCV_EXAMPLES, PhotoContext, photo_contexts
from ..data.text_scenes import text_contexts, text_lines
from ..engine.evaluation import Run, evaluate
from ..group.orbits import Translation
from ..group.parse import parse_orbit
from ..models.ppocr import ORIENTATION_LABELS, PPOCROrientation, PPOCRTextDetector
from ..results.result import OrbitResult
from ..results.store import Store
from ..results.tables import write_csv
from ..tasks.classification import Classification
from ..tasks.detection import Detection
from ..viz.plot import individual_plot, nero_plot, render, save_figure
from ..viz.report import write_report
from .detection_summary import headline_rows

__all__ = ["run_text_part", "TEXT_PHOTOS", "DETECTOR_SETTINGS", "SCENE_ORBIT", "SCENE_VIEW", "SCENE_SHIFT",
           "SCENE_BACKGROUNDS", "FINE_SCENES", "PHOTO_ORBIT", "PHOTO_VIEW", "LINES_ORBIT", "N_LINES", "orientation_rows",
           "expected_orientation", "box_shift_error"]

#: the detector as the demo runs it (native resolution; PaddleOCR's defaults otherwise rapidocr's)
DETECTOR_SETTINGS: dict[str, Any] = {"limit_type": "max", "limit_side_len": 960}
SCENE_VIEW, SCENE_SHIFT = 160, 32
SCENE_ORBIT = "window-shift:-32:32:16"
#: backgrounds of the demo's scenes: scikit-image's grass and gravel textures are left out, the
#: detector at native resolution misses nearly every word on them (1 of 33 key words found)
SCENE_BACKGROUNDS = ("coffee", "rocket", "brick", "chelsea", "astronaut", "camera")
FINE_SCENES = 6
PHOTO_VIEW, PHOTO_ORBIT = 128, "window-shift:-16:16:4"
LINES_ORBIT, N_LINES = "rotation:0:350:10", 40
#: real text photographs (centres chosen by eye; no boxes: evaluated with the consensus)
TEXT_PHOTOS: tuple[PhotoContext, ...] = (
    PhotoContext("skimage:page", 96, 95, "scikit-image page(): heading and paragraph, left"),
    PhotoContext("skimage:page", 288, 95, "scikit-image page(): paragraph, right"),
    PhotoContext("imageTextN.png", 140, 128, "OpenCV imageTextN.png: printed paragraph, left"),
    PhotoContext("imageTextN.png", 416, 128, "OpenCV imageTextN.png: printed paragraph, right"),
)


def expected_orientation(angles: np.ndarray) -> np.ndarray:
    """The right class index for an upright line rotated by each angle (degrees): 1 ("180") in
    (90, 270) mod 360, 0 ("0") in (−90, 90), −1 at exactly 90 and 270 (no right answer)."""
    a = np.mod(np.asarray(angles, np.float64), 360.0)
    return np.where(np.isclose(a, 90.0) | np.isclose(a, 270.0), -1, ((a > 90.0) & (a < 270.0)).astype(int))


def _orientation_curves(result: OrbitResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(angles, accuracy against :func:`expected_orientation` per angle (NaN where none),
    mean P("180") per angle)."""
    angles = np.asarray(result.data.coords["angle"].values, np.float64)
    pred = np.asarray(result.data["prediction"].values)  # (sample, angle)
    want = expected_orientation(angles)
    acc = np.where(want >= 0, (pred == want[None]).mean(0), np.nan)
    p180 = np.asarray(result.data["probabilities"].values)[..., 1].mean(0)
    return angles, acc, p180


def orientation_rows(run: Run, name: str) -> list[dict[str, Any]]:
    """Summary of the orientation run: accuracy against :func:`expected_orientation` at 0° and
    180°, within ±30° of each, near vertical (60°–120° and 240°–300°, 90° and 270° left out),
    over all angles with a right answer, and its worst angle."""
    angles, acc, _ = _orientation_curves(run.result)
    a = np.mod(angles, 360.0)

    def near(centre: float, width: float) -> float:
        d = np.abs(np.mod(a - centre + 180.0, 360.0) - 180.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return round(float(np.nanmean(acc[d <= width])), 4)

    worst = int(np.nanargmin(acc))
    return [{"model": name, "samples": run.result.n_samples, "elements": len(angles),
             "accuracy 0°": near(0.0, 0.0), "accuracy 180°": near(180.0, 0.0),
             "accuracy ±30° of 0°": near(0.0, 30.0), "accuracy ±30° of 180°": near(180.0, 30.0),
             "accuracy near vertical": round(float(np.nanmean([near(90.0, 30.0), near(270.0, 30.0)])), 4),
             "accuracy mean (angles with a right answer)": round(float(np.nanmean(acc)), 4),
             "accuracy worst": round(float(acc[worst]), 4), "worst angle": float(angles[worst]), "run": run.run_id}]


def box_shift_error(result: OrbitResult) -> tuple[np.ndarray, np.ndarray]:
    """How far the top box strays from moving with the content, for a run over horizontal window
    shifts ``tx`` (ty = 0) that includes tx = 0: per sample and shift, the least max-abs corner
    difference (px) between one of the three top boxes at tx and the top box at tx = 0 moved by
    tx (content in a window shifted by t is displaced by +t). NaN where there is no box at 0 or
    at tx. An exactly shift-equivariant detector gives 0 everywhere (away from the borders).

    Returns (tx (E,), error (samples, E))."""
    tx = np.asarray(result.data.coords["tx"].values, np.float64)
    boxes = np.asarray(result.data["top_boxes"].values, np.float64).reshape(result.n_samples, len(tx), -1, 4)
    origin = int(np.argmin(np.abs(tx)))
    if tx[origin] != 0:
        raise ValueError("box_shift_error needs the shift tx = 0 in the orbit")
    moved = boxes[:, origin, 0][:, None] + tx[None, :, None] * np.array([1.0, 0.0, 1.0, 0.0])  # (S, E, 4)
    diff = np.abs(boxes - moved[:, :, None]).max(-1)  # (S, E, top); NaN where no box
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return tx, np.nanmin(diff, -1)


def _fine_row(run: Run) -> dict[str, Any]:
    tx, err = box_shift_error(run.result)
    on4 = np.mod(tx, 4) == 0
    on4[tx == 0] = False  # tx = 0 is exact by definition
    rest = ~on4 & (tx != 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"box moves exactly (tx ≠ 0)": round(float(np.nanmean(err[:, tx != 0] == 0)), 4),
                "box moves exactly (tx ≡ 0 mod 4)": round(float(np.nanmean(err[:, on4] == 0)), 4),
                "box moves exactly (tx ≢ 0 mod 4)": round(float(np.nanmean(err[:, rest] == 0)), 4),
                "box error ≤ 2 px": round(float(np.nanmean(err[:, tx != 0] <= 2)), 4),
                "box error median px": float(np.nanmedian(err[:, tx != 0]))}


def _curve_plot(dims: tuple[str, ...], coords: dict[str, np.ndarray], series: dict[str, np.ndarray], metric: str,
                label: str, title: str, value_range: tuple[float, float] | None = (0.0, 1.0)) -> Any:
    """A NERO plot (polar, line or heatmap by the dims) of per-element values computed here."""
    return render(NeroData(kind=layout_kind(dims), scope="aggregate", metric=metric, metric_label=label, dims=dims,
                           coords=coords, value_range=value_range, title=title,
                           series=[NeroSeries(n, MODEL_COLOURS[i % len(MODEL_COLOURS)], np.asarray(v, np.float64))
                                   for i, (n, v) in enumerate(series.items())]))


def _photo_list() -> tuple[PhotoContext, ...]:
    here = (OPENCV_EXAMPLES / "imageTextN.png").is_file()
    return tuple(c for c in TEXT_PHOTOS if c.source.startswith("skimage:") or here)


def run_text_part(store: Store, out: Path, say: Callable[[str], None],
                  progress: Callable[[int, int | None], None] | None, *, n_scenes: int = 100
                  ) -> tuple[list[Run], list[str], list[dict[str, Any]], dict[str, Path]]:
    """Run the text part (see the module docstring) into ``store``, writing plots and tables
    under ``out``; returns (runs, their names, summary rows, files written). Rows carry a
    ``part`` and ``seconds`` column (wall time of each evaluation)."""
    if n_scenes < FINE_SCENES:
        raise ValueError(f"n_scenes must be at least {FINE_SCENES}, got {n_scenes}")
    out = Path(out)
    detector = PPOCRTextDetector(**DETECTOR_SETTINGS)
    runs: list[Run] = []
    names: list[str] = []
    rows: list[dict[str, Any]] = []
    files: dict[str, Path] = {}
    run_seconds: dict[str, float] = {}
    parts: dict[str, str] = {}

    def timed(part: str, name: str, what: str, call: Callable[[], Run]) -> Run:
        say(f"evaluating {name}: {what}")
        t0 = time.perf_counter()
        run = call()
        seconds = time.perf_counter() - t0
        say(f"{name}: {seconds:.1f} s")
        runs.append(run)
        names.append(name)
        run_seconds[name] = seconds
        parts[name] = part
        return run

    # 1. rendered scenes, labelled
    scenes = text_contexts(n_scenes, view=SCENE_VIEW, max_shift=SCENE_SHIFT, backgrounds=SCENE_BACKGROUNDS)
    orbit = parse_orbit(SCENE_ORBIT)
    name = "ppocr-det-scenes"
    run = timed("scenes", name, f"{len(scenes)} rendered-text contexts × {orbit.size} window shifts",
                lambda: evaluate(detector, scenes, orbit, Detection(ground_truth="key"), view_size=(SCENE_VIEW, SCENE_VIEW),
                                 consensus=True, store_inputs=True, store=store, name=name, model_name=name,
                                 forward_batch=64, progress=progress))
    rows += headline_rows([run], [name])
    res = [run.result]
    folder = out / "scenes"
    files["text scenes conf×IoU heatmap"] = save_figure(nero_plot(res, "conf_iou", labels=[name]),
                                                        folder / "nero_conf_iou_heatmap.png")
    files["text scenes AP heatmap"] = save_figure(nero_plot(res, "ap50", labels=[name]), folder / "nero_ap50_heatmap.png")
    files["text scenes consensus heatmap"] = save_figure(nero_plot(res, "consensus_iou", labels=[name]),
                                                         folder / "nero_consensus_iou_heatmap.png")
    files["text scenes sample 0"] = save_figure(individual_plot(res, int(run.result.data.sample.values[0]), "conf_iou",
                                                                labels=[name]), folder / "nero_conf_iou_sample0.png")
    files["text scenes report"] = write_report(res, folder / "report.html", labels=[name],
                                               title="orbitscope: PP-OCRv4 text detector, window shifts on rendered text")

    # 2. fine horizontal shifts
    fine = scenes.subset(range(FINE_SCENES))
    fine_orbit = Translation(range(0, SCENE_SHIFT + 1), [0])
    name = "ppocr-det-fine"
    run = timed("fine", name, f"{len(fine)} contexts × {fine_orbit.size} horizontal shifts of 1 px",
                lambda: evaluate(detector, fine, fine_orbit, Detection(), view_size=(SCENE_VIEW, SCENE_VIEW),
                                 consensus=True, store=store, name=name, model_name=name, forward_batch=64,
                                 progress=progress))
    rows += [{**row, **_fine_row(run)} for row in headline_rows([run], [name])]
    tx, err = box_shift_error(run.result)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        files["text fine box error"] = save_figure(
            _curve_plot(("tx",), {"tx": tx}, {"mean": np.nanmean(np.minimum(err, 8), 0),
                                              "share exact (×8)": 8 * np.nanmean(err == 0, 0)},
                        "box_error", "px (errors capped at 8)",
                        "top box vs the tx = 0 box moved by tx (0 = exactly equivariant)", value_range=(0.0, 8.0)),
            out / "fine" / "box_shift_error.png")
    curves = {label: run.result.aggregate(v)["mean"].values.reshape(-1)
              for label, v in (("IoU with the ground truth", "iou"), ("confidence", "confidence"),
                               ("IoU with the consensus", "consensus_iou"))}
    files["text fine shifts"] = save_figure(
        _curve_plot(("tx",), {"tx": tx}, curves, "iou", "mean over contexts",
                    f"PP-OCRv4 detector, horizontal shifts by 1 px ({len(fine)} contexts)"),
        out / "fine" / "fine_shift_curves.png")
    files["text fine shifts sample 0"] = save_figure(
        _curve_plot(("tx",), {"tx": tx}, {"IoU with the ground truth": run.result.data["iou"].values[0].reshape(-1),
                                          "confidence": run.result.data["confidence"].values[0].reshape(-1)},
                    "iou", "sample 0", "PP-OCRv4 detector, horizontal shifts by 1 px, context 0"),
        out / "fine" / "fine_shift_sample0.png")

    # 3. real text photographs, label-free
    contexts = _photo_list()
    porbit = parse_orbit(PHOTO_ORBIT)
    photos = photo_contexts(contexts, view=PHOTO_VIEW, max_shift=16)
    name = "ppocr-det-photos"
    run = timed("photos", name, f"{len(photos)} unlabelled text photographs × {porbit.size} shifts (consensus)",
                lambda: evaluate(detector, photos, porbit, Detection(), view_size=(PHOTO_VIEW, PHOTO_VIEW),
                                 consensus=True, store_inputs=True, store=store, name=name, model_name=name,
                                 forward_batch=64, progress=progress))
    rows += headline_rows([run], [name], "consensus_conf_iou")
    res = [run.result]
    folder = out / "photos"
    files["text photos consensus heatmap"] = save_figure(nero_plot(res, "consensus_conf_iou", labels=[name]),
                                                         folder / "nero_consensus_conf_iou_heatmap.png")
    for i, sample in enumerate(run.result.data.sample.values):
        files[f"text photo {i}"] = save_figure(individual_plot(res, int(sample), "consensus_iou", labels=[name]),
                                               folder / f"nero_consensus_iou_photo{i}.png")
    files["text photos report"] = write_report(res, folder / "report.html", labels=[name], metric="confidence",
                                               title="orbitscope: PP-OCRv4 text detector on real text (label-free)")

    # 4. orientation over rotations
    lines = text_lines(N_LINES)
    rorbit = parse_orbit(LINES_ORBIT)
    name = "ppocr-orientation"
    run = timed("orientation", name, f"{len(lines)} upright text lines × {rorbit.size} rotations",
                lambda: evaluate(PPOCROrientation(), lines, rorbit, Classification(store_probabilities=True),
                                 store_inputs=True, store=store, name=name, model_name=name, forward_batch=256,
                                 progress=progress))
    rows += orientation_rows(run, name)
    angles, acc, p180 = _orientation_curves(run.result)
    folder = out / "orientation"
    files["orientation accuracy polar"] = save_figure(
        _curve_plot(("angle",), {"angle": angles}, {"accuracy (expected: 180 in (90°, 270°))": acc,
                                                    f"mean P({ORIENTATION_LABELS[1]!r})": p180},
                    "accuracy", "accuracy / probability", "PP-OCR orientation classifier on rotated text lines"),
        folder / "orientation_accuracy_polar.png")
    files["orientation upright-confidence polar"] = save_figure(
        nero_plot([run.result], "confidence", labels=[name]), folder / "nero_p0_polar.png")
    files["orientation report"] = write_report([run.result], folder / "report.html", labels=[name],
                                               title="orbitscope: PP-OCR text-line orientation classifier, rotations "
                                                     "(label '0'; 'correct' = still called upright)")
    for row, nm in zip(rows, names):
        row["part"], row["seconds"] = parts[nm], round(run_seconds[nm], 2)
    columns = list(dict.fromkeys(k for row in rows for k in row))  # the parts' columns differ
    files["text summary"] = write_csv([{k: row.get(k, "") for k in columns} for row in rows], out / "summary.csv")
    return runs, names, rows, files

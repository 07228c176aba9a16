"""The documentation's figures, taken from the demo's outputs.

Every figure of the tutorials (docs/tutorials/*.md) is a PNG that ``make demo`` wrote; this script
copies the chosen ones from a demo output folder into ``docs/assets/figures/<case>/``: byte for
byte, or downscaled with PIL when a file is too large (see :data:`MAX_BYTES`; no colour reduction:
it would band the colour bars). Nothing is drawn here, so the site shows exactly what
the demo produced. The numbers the tutorials quote come from the same folder's ``summary.csv`` and
``contrast.csv`` files; ``--tables`` prints the ones the tutorials use.

Usage::

    make demo                                   # writes demo-output/
    .venv/bin/python docs/figures.py [demo-output] [--tables]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
from pathlib import Path

from PIL import Image

OUT = Path(__file__).resolve().parent / "assets" / "figures"
#: a figure is copied byte for byte unless it is larger than this (bytes) or wider than MAX_WIDTH
#: (then it is downscaled to DOWNSCALED_WIDTH px wide; downscaling a matplotlib PNG that is not much
#: wider adds anti-aliased colours and often makes the file larger, not smaller)
MAX_BYTES = 600_000
MAX_WIDTH = 2600
DOWNSCALED_WIDTH = 1400

#: (demo output file, site file under docs/assets/figures/)
FIGURES: list[tuple[str, str]] = [
    # NERO's MNIST case study: rotations 0…360° by 5°
    ("mnist/nero_accuracy_polar.png", "mnist/accuracy_polar.png"),
    ("mnist/nero_accuracy_all_models.png", "mnist/accuracy_all_models.png"),
    ("mnist/nero_accuracy_polar_nero-cnn_vs_nero-cnn-normal90.png", "mnist/accuracy_polar_nero_cnn.png"),
    # detection: window shifts
    ("detection/scenes/nero_conf_iou_heatmap.png", "detection/scenes_conf_iou_heatmap.png"),
    ("detection/scenes/nero_conf_iou_sample0.png", "detection/scenes_conf_iou_sample0.png"),
    ("detection/faces/scenes/nero_conf_iou_heatmap.png", "detection/faces_conf_iou_heatmap.png"),
    ("detection/text/fine/box_shift_error.png", "detection/text_box_shift_error.png"),
    ("detection/text/orientation/orientation_accuracy_polar.png", "detection/text_orientation_polar.png"),
    ("detection/photos/people/nero_consensus_conf_iou_heatmap.png", "detection/people_consensus_heatmap.png"),
    # PIV: D4 × time reversal
    ("piv/synthetic/nero_epe_mosaic.png", "piv/epe_mosaic.png"),
    ("piv/synthetic/by_flow_type/nero_epe_mosaic_backstep.png", "piv/epe_mosaic_backstep.png"),
    ("piv/synthetic/nero_epe_maps.png", "piv/epe_maps.png"),
    ("piv/real/nero_consensus_epe_mosaic.png", "piv/real_consensus_epe_mosaic.png"),
    # point clouds: SO(3)
    ("pointcloud/nero/nero_accuracy.png", "pointcloud/nero_accuracy_disks.png"),
    ("pointcloud/uniform/nero_accuracy.png", "pointcloud/uniform_accuracy_maps.png"),
]

#: the CSV files whose numbers the tutorials quote (printed by ``--tables``)
TABLES = [
    "mnist/summary.csv", "mnist/comparisons.csv",
    "detection/scenes/summary.csv", "detection/scenes/contrast.csv",
    "detection/faces/scenes/summary.csv", "detection/faces/scenes/contrast.csv", "detection/text/summary.csv",
    "detection/photos/people/summary.csv",
    "piv/synthetic/summary.csv", "piv/synthetic/contrast.csv", "piv/synthetic/by_flow_type/summary_by_flow_type.csv",
    "piv/real/summary.csv",
    "pointcloud/nero/summary.csv", "pointcloud/nero/contrast.csv",
    "pointcloud/uniform/summary.csv", "pointcloud/uniform/contrast.csv",
]


def copy_figure(source: Path, target: Path) -> tuple[int, int, int]:
    """``source`` as ``target``, as it is or downscaled (see :data:`MAX_BYTES`); (width, height, bytes)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    image = Image.open(source)
    if source.stat().st_size <= MAX_BYTES and image.width <= MAX_WIDTH:
        shutil.copyfile(source, target)
    else:
        width = min(DOWNSCALED_WIDTH, image.width)
        image = image.convert("RGB").resize((width, round(image.height * width / image.width)), Image.LANCZOS)
        image.save(target, optimize=True)
    return image.width, image.height, target.stat().st_size


def print_tables(demo: Path) -> None:
    """The quoted CSV files, as markdown tables (to check the tutorials' numbers against)."""
    for name in TABLES:
        path = demo / name
        if not path.is_file():
            print(f"\n{name}: missing")
            continue
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
        print(f"\n{name}\n")
        print("| " + " | ".join(rows[0]) + " |")
        print("|" + "---|" * len(rows[0]))
        for row in rows[1:]:
            print("| " + " | ".join(row) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", nargs="?", default="demo-output", help="the demo's output folder (default demo-output)")
    parser.add_argument("--tables", action="store_true", help="also print the CSV files the tutorials quote")
    args = parser.parse_args()
    demo = Path(args.demo)
    missing = [src for src, _ in FIGURES if not (demo / src).is_file()]
    if missing:
        print(f"not in {demo} (run make demo first): " + ", ".join(missing), file=sys.stderr)
        return 1
    total = 0
    for src, dst in FIGURES:
        width, height, size = copy_figure(demo / src, OUT / dst)
        total += size
        print(f"{src} -> docs/assets/figures/{dst}: {width} × {height}, {size / 1e3:.0f} kB")
    print(f"{len(FIGURES)} figures, {total / 1e6:.2f} MB")
    if args.tables:
        print_tables(demo)
    return 0


if __name__ == "__main__":
    sys.exit(main())

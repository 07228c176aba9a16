"""Detection data in COCO format, and NERO's key-object contexts.

COCO JSON (https://cocodataset.org/#format-data): ``images`` (``id``, ``file_name``, ``width``,
``height``), ``annotations`` (``image_id``, ``category_id``, ``bbox`` = [x, y, w, h] in pixels,
``iscrowd``), ``categories`` (``id``, ``name``). :func:`read_coco` turns boxes into our xyxy
convention (x1 = x + w, y1 = y + h) and keeps COCO's category ids as labels; crowd annotations
are left out (COCO's evaluation ignores them too). :func:`write_coco` writes the reverse, so
users with VOC or their own annotations can convert once and use the same loader.

:func:`key_object_contexts` builds NERO's detection set: for every qualifying object, a context
crop of (view + 2·max_shift)² pixels centred on the object, so that with the ``window`` input
kind the field of view (``view_size``) shows the object at its centre at shift 0 and displaced by
+t at shift t (NERO cut the window at top-left = centre − 64 − t), always over real context. An
object qualifies when that crop lies inside its image (NERO's rule, no padding) and its box
covers ``area`` (a fraction of view²; NERO: 10–50 %) of the view.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import DataError
from ..safe_repr import short_repr

__all__ = ["DetectionSet", "read_coco", "write_coco", "key_object_contexts"]

PathLike = str | os.PathLike[str]
_FLOAT32_MAX = float(np.finfo(np.float32).max)  # boxes are stored as float32


@dataclass(frozen=True, eq=False)
class _Item:
    image: np.ndarray | Path  # (C, H, W) uint8, or a file (grey stays 1 channel, else RGB) read when asked for
    boxes: np.ndarray  # (n, 4) float32 xyxy pixels
    labels: np.ndarray  # (n,) int64
    image_id: int
    file_name: str


def _load_image(source: np.ndarray | Path) -> np.ndarray:
    if isinstance(source, np.ndarray):
        return source
    from .image_files import DECODE_ERRORS, open_image

    try:
        with open_image(source) as im:  # the declared size is checked first
            grey = im.mode in ("1", "L", "I;16", "I")
            arr = np.asarray(im.convert("L" if grey else "RGB"))
    except DataError as exc:
        raise DataError(f"cannot read the image {exc}") from exc
    except DECODE_ERRORS as exc:
        raise DataError(f"cannot read the image {source}: {exc}") from exc
    return np.ascontiguousarray(arr[None] if arr.ndim == 2 else np.moveaxis(arr, -1, 0))


class DetectionSet(Dataset):
    """Images with boxes: items ``(image (C, H, W) float in [0, 1], {"boxes": (n, 4) xyxy,
    "labels": (n,)})``. ``categories`` maps label -> name; ``data_id`` identifies the set in run ids."""

    def __init__(self, items: Sequence[_Item], categories: dict[int, str], data_id: str) -> None:
        self.items = list(items)
        self.categories = dict(categories)
        self.data_id = data_id

    @classmethod
    def from_arrays(cls, images: Sequence[np.ndarray], targets: Sequence[dict[str, Any]], categories: dict[int, str],
                    data_id: str, names: Sequence[str] | None = None) -> "DetectionSet":
        """Images held in memory (uint8 (C, H, W)) with targets ``{"boxes": (n, 4) xyxy, "labels": (n,)}``."""
        if len(images) != len(targets):
            raise DataError(f"{len(images)} images but {len(targets)} targets")
        items = []
        for i, (img, t) in enumerate(zip(images, targets)):
            arr = np.asarray(img)
            if arr.ndim != 3 or arr.dtype != np.uint8:
                raise DataError(f"image {i} must be uint8 (C, H, W), got {arr.dtype} of shape {arr.shape}")
            boxes = np.asarray(t["boxes"], np.float32).reshape(-1, 4)
            labels = np.asarray(t.get("labels", np.zeros(len(boxes))), np.int64).reshape(-1)
            items.append(_Item(arr, boxes, labels, i + 1, names[i] if names is not None else f"image{i}.png"))
        return cls(items, categories, data_id)

    def __len__(self) -> int:
        return len(self.items)

    def subset(self, index: Sequence[int] | slice, data_id: str | None = None) -> "DetectionSet":
        """The items at ``index`` (in that order, or a slice); ``data_id`` records the selection
        (or is given)."""
        if isinstance(index, slice):
            index = range(len(self))[index]
        index = [int(i) for i in index]
        bad = [i for i in index if not 0 <= i < len(self)]
        if bad:
            raise DataError(f"subset indices {bad[:5]} are outside this set of {len(self)} items")
        contiguous = index == list(range(index[0], index[0] + len(index))) if index else True
        what = f"{index[0]}:{index[0] + len(index)}" if contiguous and index else ",".join(map(str, index))
        return DetectionSet([self.items[i] for i in index], self.categories, data_id or f"{self.data_id}[{what}]")

    def image(self, i: int) -> np.ndarray:
        """Image ``i`` as uint8 (C, H, W)."""
        return _load_image(self.items[i].image)

    def target(self, i: int) -> dict[str, np.ndarray]:
        it = self.items[i]
        return {"boxes": it.boxes.copy(), "labels": it.labels.copy()}

    def __getitem__(self, i: int) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"item {i} of a detection set of {len(self)}")
        return torch.from_numpy(self.image(i).astype(np.float32) / 255.0), self.target(i)


def _where(kind: str, index: int, entry: dict[str, Any]) -> str:
    """``annotation 3 (id 17)``: an entry of the JSON named by its index and, when it has one, its id."""
    return f"{kind} {index}" + (f" (id {short_repr(entry['id'], 40)})" if "id" in entry else "")


def _int_field(path: Path, where: str, entry: dict[str, Any], key: str) -> int:
    """``entry[key]`` as an int (JSON integers, integral floats or digit strings), else a DataError."""
    if key not in entry:
        raise DataError(f"{path}: {where} has no {key!r}; COCO annotations need it (fix or remove the entry)")
    value = entry[key]
    ok = (isinstance(value, int) and not isinstance(value, bool)) or \
        (isinstance(value, float) and value.is_integer()) or \
        (isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]{1,19}\s*", value) is not None)
    if not ok or not -2**63 <= int(value) < 2**63:
        raise DataError(f"{path}: {where}: {key!r} must be an integer (64-bit), got {short_repr(value, 60)}")
    return int(value)


def _bbox(path: Path, where: str, entry: dict[str, Any]) -> list[float]:
    """``entry["bbox"]`` = [x, y, width, height], four finite numbers with width, height >= 0, as xyxy."""
    if "bbox" not in entry:
        raise DataError(f"{path}: {where} has no 'bbox'; give [x, y, width, height] in pixels or remove it")
    b = entry["bbox"]
    if not (isinstance(b, (list, tuple)) and len(b) == 4
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in b)):
        raise DataError(f"{path}: {where}: 'bbox' must be [x, y, width, height], four numbers in pixels, got "
                        f"{short_repr(b, 80)}")
    x, y, w, h = (float(v) for v in b)
    if not all(math.isfinite(v) and abs(v) <= _FLOAT32_MAX for v in (x, y, w, h, x + w, y + h)):
        raise DataError(f"{path}: {where}: 'bbox' {short_repr(b, 80)} is not finite (or beyond float32); boxes "
                        "must be finite numbers (fix or remove the annotation)")
    if w < 0 or h < 0:
        raise DataError(f"{path}: {where} of image {entry.get('image_id')!r} has a negative width or height "
                        f"(bbox {short_repr(b, 80)})")
    return [x, y, x + w, y + h]


def _entries(path: Path, raw: dict[str, Any], key: str, kind: str) -> list[dict[str, Any]]:
    entries = raw[key]
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise DataError(f"{path}: {kind} {i} of {key!r} must be an object, got {short_repr(entry, 60)}")
    return entries


def _unique_ids(path: Path, entries: list[dict[str, Any]], kind: str) -> list[int]:
    ids = [_int_field(path, _where(kind, i, e), e, "id") for i, e in enumerate(entries)]
    first: dict[int, int] = {}
    for i, k in enumerate(ids):
        if k in first:
            plural = "categories" if kind == "category" else f"{kind}s"
            raise DataError(f"{path}: {plural} {first[k]} and {i} have the same id {k}; {kind} ids must be unique")
        first[k] = i
    return ids


def read_coco(annotations: PathLike, images: PathLike | None = None, *,
              categories: Sequence[int | str] | None = None) -> DetectionSet:
    """A COCO-format annotation file as a :class:`DetectionSet` (images read lazily from
    ``images``, default: the JSON file's folder). ``categories`` keeps only those (ids or names);
    images keep all their boxes of the kept categories, also images with none.

    The file is checked whole before anything is built: every image needs a unique integer
    ``id`` and a ``file_name``; every category a unique integer ``id``; every annotation an
    ``image_id`` of a listed image, a ``category_id`` of a listed category and (unless it is a
    crowd annotation) a ``bbox`` of four finite numbers with non-negative width and height.

    Raises:
        DataError: an unreadable or malformed file (also one nested too deeply to parse): one
            line naming the file, the entry (its index and id) and the field.
    """
    path = Path(annotations)
    try:
        raw = json.loads(path.read_text())
    except RecursionError:
        raise DataError(f"cannot read the COCO annotations {path}: its JSON is nested too deeply to parse "
                        "(COCO files are a few levels deep)") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the COCO annotations {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise DataError(f"{path} is not COCO-format annotations: it holds a JSON {type(raw).__name__}, not an object "
                        "with the lists 'images', 'annotations' and 'categories'")
    for key in ("images", "annotations", "categories"):
        if not isinstance(raw.get(key), list):
            raise DataError(f"{path} is not COCO-format annotations: it has no list {key!r} "
                            f"(keys: {short_repr(sorted(map(str, raw)), 120)})")
    cats = _entries(path, raw, "categories", "category")
    names = {k: str(c.get("name", k)) for k, c in zip(_unique_ids(path, cats, "category"), cats)}
    keep = set(names)
    if categories is not None:
        by_name = {v: k for k, v in names.items()}
        unknown = [c for c in categories if (c not in by_name if isinstance(c, str) else int(c) not in names)]
        if unknown:
            raise DataError(f"categories {unknown} are not in {path}; it has {sorted(names.values())}")
        keep = {by_name[c] if isinstance(c, str) else int(c) for c in categories}
    folder = Path(images) if images is not None else path.parent
    listed = _entries(path, raw, "images", "image")
    image_ids = _unique_ids(path, listed, "image")
    for i, im in enumerate(listed):
        if not (isinstance(im.get("file_name"), str) and im["file_name"]):
            raise DataError(f"{path}: {_where('image', i, im)} " + (
                f"has a 'file_name' that is not a non-empty string: {short_repr(im['file_name'], 60)}"
                if "file_name" in im else "has no 'file_name'; give the image file's name relative to the images "
                "folder"))
    per_image: dict[int, list[tuple[list[float], int]]] = {k: [] for k in image_ids}
    stray: list[tuple[int, int]] = []  # (annotation index, category id) of categories not listed
    for i, a in enumerate(_entries(path, raw, "annotations", "annotation")):
        where = _where("annotation", i, a)
        image_id = _int_field(path, where, a, "image_id")
        category = _int_field(path, where, a, "category_id")
        if a.get("iscrowd", 0):
            continue
        box = _bbox(path, where, a)
        if category not in names:
            stray.append((i, category))
            continue
        if category not in keep:
            continue
        if image_id not in per_image:
            raise DataError(f"{path}: {where} refers to image {image_id}, which is not listed in 'images'")
        per_image[image_id].append((box, category))
    if stray:
        found = sorted({c for _, c in stray})
        raise DataError(f"{path}: {len(stray)} annotation(s) (the first: annotation {stray[0][0]}) have category_id "
                        f"{short_repr(found, 60)}, not listed in 'categories' (ids {short_repr(sorted(names), 60)}); "
                        "add those categories or remove the annotations")
    items = []
    for k, im in sorted(zip(image_ids, listed), key=lambda pair: pair[0]):
        anns = per_image[k]
        items.append(_Item(folder / im["file_name"], np.asarray([b for b, _ in anns], np.float32).reshape(-1, 4),
                           np.asarray([c for _, c in anns], np.int64), k, str(im["file_name"])))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return DetectionSet(items, {k: names[k] for k in sorted(keep)},
                        f"coco:{path.name}:{digest}" + (f":{','.join(map(str, sorted(keep)))}" if categories else ""))


def write_coco(data: DetectionSet, annotations: PathLike, images: PathLike | None = None) -> Path:
    """Write ``data`` as COCO-format JSON at ``annotations``; images held in memory are saved as
    PNG files under ``images`` (default: beside the JSON), files already on disk are referenced."""
    from PIL import Image

    out = Path(annotations)
    folder = Path(images) if images is not None else out.parent
    folder.mkdir(parents=True, exist_ok=True)
    imgs, anns = [], []
    for i, it in enumerate(data.items):
        arr = data.image(i)
        name = it.file_name
        if isinstance(it.image, np.ndarray):
            Image.fromarray(arr[0] if arr.shape[0] == 1 else np.moveaxis(arr, 0, -1)).save(folder / name)
        elif Path(it.image).resolve().parent != folder.resolve():
            name = os.path.relpath(Path(it.image).resolve(), folder.resolve())
        imgs.append({"id": it.image_id, "file_name": name, "height": int(arr.shape[1]), "width": int(arr.shape[2])})
        for b, lab in zip(it.boxes.tolist(), it.labels.tolist()):
            w, h = b[2] - b[0], b[3] - b[1]
            anns.append({"id": len(anns) + 1, "image_id": it.image_id, "category_id": int(lab),
                         "bbox": [b[0], b[1], w, h], "area": w * h, "iscrowd": 0})
    doc = {"images": imgs, "annotations": anns,
           "categories": [{"id": k, "name": v} for k, v in sorted(data.categories.items())]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc))
    return out


def key_object_contexts(data: DetectionSet, *, view: int = 128, max_shift: int = 64,
                        area: tuple[float, float] = (0.10, 0.50), categories: Sequence[int] | None = None,
                        limit: int | None = None) -> DetectionSet:
    """NERO's key-object set (see the module docstring): one context crop per qualifying object,
    in image order then annotation order, at most ``limit``. The key object is box 0 of each
    target; the other boxes of the image that reach into the crop follow, clipped to it."""
    if view < 1 or max_shift < 0:
        raise DataError(f"view must be positive and max_shift non-negative, got {view}, {max_shift}")
    lo, hi = area
    size = view + 2 * max_shift
    items: list[_Item] = []
    for i, it in enumerate(data.items):
        if limit is not None and len(items) >= limit:
            break
        arr: np.ndarray | None = None
        for j, (box, lab) in enumerate(zip(it.boxes, it.labels)):
            if categories is not None and int(lab) not in set(categories):
                continue
            frac = float((box[2] - box[0]) * (box[3] - box[1])) / view ** 2
            if not lo <= frac <= hi:
                continue
            arr = data.image(i) if arr is None else arr
            cx, cy = int(round((box[0] + box[2]) / 2)), int(round((box[1] + box[3]) / 2))
            x0, y0 = cx - size // 2, cy - size // 2
            if x0 < 0 or y0 < 0 or x0 + size > arr.shape[2] or y0 + size > arr.shape[1]:
                continue  # the moved window would leave the image
            order = [j] + [k for k in range(len(it.boxes)) if k != j]
            moved = it.boxes[order] - np.array([x0, y0, x0, y0], np.float32)
            clipped = np.clip(moved, 0, size)
            seen = (clipped[:, 2] > clipped[:, 0]) & (clipped[:, 3] > clipped[:, 1])
            crop = np.ascontiguousarray(arr[:, y0:y0 + size, x0:x0 + size])
            items.append(_Item(crop, clipped[seen].astype(np.float32), it.labels[order][seen], len(items) + 1,
                               f"{Path(it.file_name).stem}-object{j}.png"))
            if limit is not None and len(items) >= limit:
                break
    if not items:
        raise DataError(f"no object qualifies: none has a box covering {lo:.0%}–{hi:.0%} of {view}² with a "
                        f"{size}² crop around it inside its image; lower max_shift, widen area, or use larger images")
    cats = data.categories if categories is None else {c: data.categories.get(c, str(c)) for c in categories}
    return DetectionSet(items, cats, f"{data.data_id}:keyobjects:v{view}:s{max_shift}:a{lo:g}-{hi:g}"
                        + (f":c{','.join(map(str, categories))}" if categories is not None else "")
                        + (f":n{limit}" if limit is not None else ""))

"""ModelNet10/40 from a folder you already have (nothing is downloaded).

Two layouts are recognised (:class:`ModelNetFolder` picks the one it finds under ``root``):

* **OFF meshes** (the Princeton release, ``ModelNet10.zip`` / ``ModelNet40.zip``):
  ``ROOT/<class>/{train,test}/<class>_NNNN.off``. Each mesh is read with :func:`read_off` and
  ``points`` points are sampled uniformly on its surface, area-weighted
  (:class:`~orbitscope.data.meshes.Surface`), with the Generator
  ``default_rng(SeedSequence(seed, spawn_key=(crc32("<class>/<split>/<file name>"),)))``, so a file's
  cloud depends only on the file, ``points`` and ``seed``.
* **Resampled text** (``modelnet40_normal_resampled``, as used by PointNet++ and NERO):
  ``ROOT/<class>/<class>_NNNN.txt`` with one ``x,y,z,nx,ny,nz`` line per point (10,000 per file),
  the class list ``ROOT/modelnet40_shape_names.txt`` and the splits ``ROOT/modelnet40_train.txt`` /
  ``ROOT/modelnet40_test.txt`` (one sample id such as ``night_stand_0001`` per line); the same with
  ``modelnet10_`` for ModelNet10 (``listing="modelnet10"``; by default modelnet40 when its files are
  there). As NERO did, the cloud is the first ``points`` lines of the file (the normals are ignored;
  ``seed`` plays no part).

Either way the cloud is then normalised (:func:`~orbitscope.data.meshes.normalise_cloud`: centroid at
the origin, largest norm 1) and returned as float32 (N, 3) in the file's own axes (no rotation; note
that the original ModelNet40 meshes are not all consistently aligned, ModelNet10's are).

OFF parsing (:func:`read_off`) accepts ``#`` comments and blank lines, the header glitch of many
ModelNet files where the counts follow ``OFF`` on the same line (``OFF490 518 0``), the ``C``/``N``/
``ST`` header variants (extra vertex columns are ignored), and polygon faces (``k i1 … ik`` with k >= 3,
split into the fan of triangles (i1, i_j, i_j+1)); trailing per-face colours are ignored. Binary OFF
is not supported.

Data spec: ``modelnet:PATH[,split=train|test][,points=P][,seed=K][,classes=A+B][,listing=modelnet10]``
(defaults test, 1,024 points, seed 0), e.g. ``modelnet:/data/ModelNet10,split=test``.
"""

from __future__ import annotations

import itertools
import os
import re
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import DataError, SpecError
from .subsets import picked_indices, subset_tag
from .limits import check_data_bytes
from .meshes import CLOUD_BYTES_PER_POINT, Surface, normalise_cloud
from .specs import register_data_spec

__all__ = ["read_off", "read_resampled_txt", "ModelNetFolder", "modelnet_folder", "SPLITS"]

PathLike = str | os.PathLike[str]
#: The splits of both layouts.
SPLITS = ("train", "test")
_HEADER = re.compile(r"(ST)?C?N?OFF(?![A-Za-z])")
_LAYOUTS = ("the OFF layout ROOT/<class>/{train,test}/<class>_NNNN.off (ModelNet10.zip / ModelNet40.zip), or the "
            "resampled layout ROOT/modelnet40_shape_names.txt, ROOT/modelnet40_{train,test}.txt and "
            "ROOT/<class>/<class>_NNNN.txt (modelnet40_normal_resampled)")


# --------------------------------------------------------------------------- OFF files


def _content_lines(text: str) -> list[tuple[int, str]]:
    lines = text.splitlines()
    if "#" in text:
        lines = [s.partition("#")[0] for s in lines]
    return [(i, s) for i, s in enumerate(lines, 1) if s.strip()]


def read_off(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read an ASCII OFF mesh: ``(vertices float64 (V, 3), faces int64 (F, 3))``, polygons split into
    triangle fans (see the module docstring for what is accepted).

    Raises:
        DataError: the file is missing, binary, or malformed; the message names the file and line.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"OFF file not found: {p}") from None
    except UnicodeDecodeError:
        raise DataError(f"{p}: not a text OFF file (binary OFF is not supported; convert it to ASCII OFF)") from None
    except OSError as exc:
        raise DataError(f"{p}: cannot read the file ({exc})") from exc
    lines = _content_lines(text)
    if not lines:
        raise DataError(f"{p}: the file is empty (expected an 'OFF' header, then the vertex and face counts)")
    first_no, first = lines[0]
    head = first.strip()
    m = _HEADER.match(head)
    if not m:
        raise DataError(f"{p}, line {first_no}: expected the header 'OFF', got {head[:40]!r} "
                        "(only ASCII OFF meshes are read)")
    fused = head[m.end():].strip()
    if fused.upper().startswith("BINARY"):
        raise DataError(f"{p}, line {first_no}: binary OFF is not supported; convert it to ASCII OFF")
    if fused:  # the ModelNet glitch: "OFF490 518 0"
        counts_no, counts, body = first_no, fused, lines[1:]
    elif len(lines) > 1:
        (counts_no, counts), body = lines[1], lines[2:]
    else:
        raise DataError(f"{p}: the file ends after the header; expected a line 'V F E' with the vertex, face "
                        "and edge counts")
    try:
        nums = [int(t) for t in counts.split()]
    except ValueError:
        nums = []
    if len(nums) not in (2, 3) or nums[0] < 3 or nums[1] < 1:
        raise DataError(f"{p}, line {counts_no}: expected the counts 'V F E' (integers, V >= 3 vertices, F >= 1 "
                        f"faces), got {counts.strip()[:60]!r}")
    nv, nf = nums[0], nums[1]
    if len(body) < nv + nf:
        have_v = min(len(body), nv)
        raise DataError(f"{p}: the header announces {nv} vertices and {nf} faces, but the file ends after "
                        f"{have_v} vertices and {max(0, len(body) - nv)} faces (a truncated file?)")
    vertices = _parse_vertices(p, body[:nv])
    faces = _parse_faces(p, body[nv:nv + nf], nv)
    return vertices, faces


def _parse_vertices(p: Path, lines: list[tuple[int, str]]) -> np.ndarray:
    try:  # fast path: every line has the same number of columns
        table = np.loadtxt([s for _, s in lines], dtype=np.float64, comments=None, ndmin=2)
        if table.shape[1] < 3:
            raise ValueError
        v = np.ascontiguousarray(table[:, :3])
    except ValueError:
        rows = []
        for no, s in lines:
            try:
                r = [float(t) for t in s.split()[:3]]
                if len(r) < 3:
                    raise ValueError
            except ValueError:
                raise DataError(f"{p}, line {no}: expected a vertex 'x y z' (three numbers), got {s.strip()[:60]!r}"
                                ) from None
            rows.append(r)
        v = np.array(rows, dtype=np.float64)
    if not np.isfinite(v).all():
        bad = int(np.flatnonzero(~np.isfinite(v).all(axis=1))[0])
        raise DataError(f"{p}, line {lines[bad][0]}: vertex coordinates must be finite, got {lines[bad][1].strip()!r}")
    return v


def _face_error(p: Path, no: int, s: str, why: str) -> DataError:
    return DataError(f"{p}, line {no}: {why}; a face is 'k i1 ... ik' (k >= 3 vertex indices, 0-based), "
                     f"got {s.strip()[:60]!r}")


def _parse_faces(p: Path, lines: list[tuple[int, str]], nv: int) -> np.ndarray:
    try:  # fast path: all triangles, the same number of columns on every line
        table = np.loadtxt([s for _, s in lines], dtype=np.int64, comments=None, ndmin=2)
    except ValueError:
        table = None
    if table is not None and table.shape[1] >= 4 and (table[:, 0] == 3).all():
        f = np.ascontiguousarray(table[:, 1:4])
        if f.min() >= 0 and f.max() < nv:
            return f
    tris: list[tuple[int, int, int]] = []
    for no, s in lines:
        r = s.split()
        try:
            k = int(r[0])
            idx = [int(t) for t in r[1:k + 1]]
        except (ValueError, IndexError):
            raise _face_error(p, no, s, "the face is not made of integers") from None
        if k < 3 or len(idx) < k:
            raise _face_error(p, no, s, f"a face needs at least 3 indices and as many as it announces ({k})")
        out = [i for i in idx if not 0 <= i < nv]
        if out:
            raise _face_error(p, no, s, f"vertex index {out[0]} is out of range (the file has {nv} vertices, "
                                        f"numbered 0..{nv - 1})")
        tris.extend((idx[0], idx[j], idx[j + 1]) for j in range(1, k - 1))
    return np.array(tris, dtype=np.int64).reshape(-1, 3)


# --------------------------------------------------------------------------- resampled text


def read_resampled_txt(path: PathLike, points: int = 1024) -> np.ndarray:
    """The first ``points`` points ``x, y, z`` (float64 (points, 3)) of a resampled ModelNet text file
    with lines ``x,y,z,nx,ny,nz`` (the normals and any further columns are ignored).

    Raises:
        DataError: missing file, fewer lines than ``points``, or a malformed line (file and line named).
    """
    p = Path(path)
    try:
        with open(p, encoding="utf-8") as fh:
            lines = list(itertools.islice(fh, points))
    except FileNotFoundError:
        raise DataError(f"point file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{p}: cannot read the file as text ({exc})") from exc
    if len(lines) < points:
        raise DataError(f"{p} has only {len(lines)} points (lines) but {points} were asked for; use points="
                        f"{len(lines)} or fewer")
    rows = [s.split(",") for s in lines]
    try:
        if min(map(len, rows)) < 3:
            raise ValueError
        xyz = np.array([r[:3] for r in rows], dtype=np.float64)
    except ValueError:
        for no, (s, r) in enumerate(zip(lines, rows), 1):
            try:
                if len(r) < 3:
                    raise ValueError
                [float(t) for t in r[:3]]
            except ValueError:
                raise DataError(f"{p}, line {no}: expected 'x,y,z,nx,ny,nz' (comma-separated numbers), got "
                                f"{s.strip()[:60]!r}") from None
        raise DataError(f"{p}: cannot read the points as numbers") from None
    if not np.isfinite(xyz).all():
        no = int(np.flatnonzero(~np.isfinite(xyz).all(axis=1))[0]) + 1
        raise DataError(f"{p}, line {no}: coordinates must be finite, got {lines[no - 1].strip()!r}")
    return xyz


# --------------------------------------------------------------------------- the dataset


def _read_list(path: Path) -> list[str]:
    try:
        return [s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {path} ({exc})") from exc



class ModelNetFolder(Dataset):
    """ModelNet10/40 clouds from a folder (either layout of the module docstring): items
    ``(points float32 tensor (N, 3), label int64 tensor ())``, normalised (centroid at the origin,
    largest norm 1).

    Args:
        root: the dataset folder (the one holding the class folders).
        split: ``"train"`` or ``"test"``.
        points: N, points per cloud (1,024 as in NERO).
        seed: integer >= 0 for the surface sampling of OFF meshes (unused by the text layout).
        classes: keep only these class names (in the dataset's class order; labels index the kept
            classes); default all.
        listing: text layout only: ``"modelnet40"`` or ``"modelnet10"`` (which ``*_shape_names.txt``
            and split lists to use); default modelnet40 when its files exist.
        cache: keep each cloud in memory once made (12 KiB per 1,024-point cloud).

    Items are in class order, then file order (sorted names for OFF, the split list's order for text).

    Attributes:
        classes: class names (label = index). labels: int64 (len,). files: the file of each item.
        layout: ``"off"`` or ``"txt"``. listing: the text layout's listing (None for OFF). data_id: the canonical data spec, e.g.
            ``"modelnet:/data/ModelNet10,split=test,points=1024,seed=0"``.

    Raises:
        DataError: a missing folder, a folder in neither layout, no files for the split, unknown
            classes; malformed files when their items are read (file and line named).
    """

    def __init__(self, root: PathLike, split: str = "test", points: int = 1024, seed: int = 0,
                 classes: Sequence[str] | None = None, listing: str | None = None, cache: bool = True) -> None:
        if split not in SPLITS:
            raise DataError(f"split must be 'train' or 'test', got {split!r}")
        if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or points < 1:
            raise DataError(f"points must be a positive integer, got {points!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise DataError(f"seed must be an integer >= 0, got {seed!r}")
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            what = "is a file, not a folder" if self.root.exists() else "does not exist"
            raise DataError(f"ModelNet folder {self.root} {what}; give the folder in {_LAYOUTS}")
        self.root = self.root.resolve()
        self.split, self.points, self.seed = split, int(points), int(seed)
        if listing is not None and listing not in ("modelnet10", "modelnet40"):
            raise DataError(f"listing must be 'modelnet10' or 'modelnet40', got {listing!r}")
        names = sorted(self.root.glob("modelnet*_shape_names.txt"))
        if names or listing is not None:
            self.layout = "txt"
            all_classes, items = self._scan_txt(listing)
        else:
            self.layout, self.listing = "off", None
            all_classes, items = self._scan_off()
        if classes is not None:
            wanted = (classes,) if isinstance(classes, str) else tuple(classes)
            unknown = [c for c in wanted if c not in all_classes]
            if not wanted or unknown:
                raise DataError(f"unknown class(es) {unknown or list(wanted)} in {self.root}; the classes are "
                                f"{', '.join(all_classes)}")
            chosen = tuple(c for c in all_classes if c in wanted)
        else:
            chosen = tuple(all_classes)
        self.classes: tuple[str, ...] = chosen
        index = {c: i for i, c in enumerate(chosen)}
        kept = [(c, f) for c, f in items if c in index]
        if not kept:
            raise DataError(f"no {split} files for the chosen classes in {self.root}")
        self.files: tuple[Path, ...] = tuple(f for _, f in kept)
        self.labels = np.array([index[c] for c, _ in kept], dtype=np.int64)
        self.cache = bool(cache)
        kept_bytes = 12 * len(self.files) * self.points if self.cache else 0  # float32 (points, 3) per file
        check_data_bytes(f"points={self.points}", self.points * CLOUD_BYTES_PER_POINT + kept_bytes, "sampling one cloud"
                         + (f" and keeping all {len(self.files):,} in memory" if self.cache else ""), "use fewer points")
        self._clouds: dict[Path, np.ndarray] = {}
        self.data_id = f"modelnet:{self.root},split={split},points={self.points}"
        if self.layout == "off":
            self.data_id += f",seed={self.seed}"
        else:
            self.data_id += f",listing={self.listing}"
        if classes is not None and chosen != tuple(all_classes):
            self.data_id += f",classes={'+'.join(chosen)}"

    def _scan_off(self) -> tuple[list[str], list[tuple[str, Path]]]:
        class_dirs = sorted(d for d in self.root.iterdir() if d.is_dir() and any((d / s).is_dir() for s in SPLITS))
        if not class_dirs:
            inner = [d for d in self.root.iterdir() if d.is_dir() and any(d.glob("*/train"))]
            hint = f" (did you mean {inner[0]}?)" if inner else ""
            raise DataError(f"{self.root} is not a ModelNet folder: no class folders with train/ or test/ inside "
                            f"and no modelnet*_shape_names.txt{hint}; expected {_LAYOUTS}")
        items = [(d.name, f) for d in class_dirs for f in sorted((d / self.split).glob("*.off"))]
        if not items:
            raise DataError(f"no .off files in {self.root}/<class>/{self.split}/ (found the class folders "
                            f"{', '.join(d.name for d in class_dirs[:5])}{', ...' if len(class_dirs) > 5 else ''})")
        return [d.name for d in class_dirs], items

    def _scan_txt(self, listing: str | None) -> tuple[list[str], list[tuple[str, Path]]]:
        if listing is None:
            listing = "modelnet40" if (self.root / "modelnet40_shape_names.txt").is_file() else "modelnet10"
        self.listing = listing
        names_file = self.root / f"{listing}_shape_names.txt"
        split_file = self.root / f"{listing}_{self.split}.txt"
        for f in (names_file, split_file):
            if not f.is_file():
                raise DataError(f"{f} is missing; the resampled ModelNet layout needs {names_file.name} (one class "
                                f"per line) and {listing}_train.txt / {listing}_test.txt (one sample id per line)")
        all_classes = _read_list(names_file)
        if not all_classes:
            raise DataError(f"{names_file} lists no classes")
        known = set(all_classes)
        ids = _read_list(split_file)
        if not ids:
            raise DataError(f"{split_file} lists no samples")
        items: list[tuple[str, Path]] = []
        for no, sid in enumerate(ids, 1):
            cls = sid.rsplit("_", 1)[0]
            if cls not in known or cls == sid:
                raise DataError(f"{split_file}, line {no}: sample id {sid!r} does not start with a class of "
                                f"{names_file.name} followed by _NNNN")
            items.append((cls, self.root / cls / f"{sid}.txt"))
        missing = [f for _, f in items if not f.is_file()]
        if missing:
            raise DataError(f"{len(missing)} of the {len(items)} files listed in {split_file.name} are missing, "
                            f"e.g. {missing[0]}")
        order = {c: i for i, c in enumerate(all_classes)}
        items.sort(key=lambda cf: order[cf[0]])  # stable: class order, then the list's order
        return all_classes, items

    def __len__(self) -> int:
        return len(self.files)

    def cloud(self, index: int) -> np.ndarray:
        """Item ``index``'s normalised cloud, float32 (points, 3) (read-only when cached)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} clouds")
        path = self.files[index]
        if path in self._clouds:
            return self._clouds[path]
        if self.layout == "txt":
            xyz = read_resampled_txt(path, self.points)
        else:
            v, f = read_off(path)
            key = zlib.crc32(f"{path.parent.parent.name}/{self.split}/{path.name}".encode())
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(key,)))
            xyz, _ = Surface(v, f, str(path)).sample(self.points, rng)
        cloud = normalise_cloud(xyz, str(path))
        if self.cache:
            cloud.setflags(write=False)
            self._clouds[path] = cloud
        return cloud

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.cloud(index).copy()), torch.tensor(int(self.labels[index]), dtype=torch.int64)

    def subset(self, indices: slice | Sequence[int] | np.ndarray, data_id: str | None = None) -> ModelNetFolder:
        """The items at ``indices`` (classes kept, the cache shared); ``data_id`` defaults to ours +
        ``[a:b]`` or a hash."""
        picked = picked_indices(len(self), indices, self.data_id)
        new = object.__new__(ModelNetFolder)
        new.__dict__.update(self.__dict__)
        new.files = tuple(self.files[i] for i in picked)
        new.labels = self.labels[picked]
        new.data_id = data_id if data_id is not None else self.data_id + subset_tag(picked)
        return new


def modelnet_folder(root: PathLike, split: str = "test", points: int = 1024, seed: int = 0,
                    classes: Sequence[str] | None = None, listing: str | None = None) -> ModelNetFolder:
    """:class:`ModelNetFolder` (the same arguments)."""
    return ModelNetFolder(root, split, points, seed, classes, listing)


_SPEC_KEYS = ("split", "points", "seed", "classes", "listing")


def _modelnet_spec(rest: str) -> ModelNetFolder:
    if not rest:
        raise SpecError("expected modelnet:PATH[,split=train|test][,points=P][,seed=K][,classes=A+B]"
                        "[,listing=modelnet10] (a ModelNet10/40 folder)")
    parts = rest.split(",")
    kw: dict[str, Any] = {}
    while len(parts) > 1:  # options are taken from the end, so a path may hold commas
        key, eq, val = (s.strip() for s in parts[-1].partition("="))
        if not eq:
            break
        key = key.lower()
        if key not in _SPEC_KEYS or not val:
            raise SpecError(f"unknown option {parts[-1].strip()!r}; accepted: split=train|test, points=P, seed=K, "
                            "classes=A+B, listing=modelnet10|modelnet40 (e.g. modelnet:/data/ModelNet10,split=test)")
        if key in kw:
            raise SpecError(f"option {key!r} given twice")
        if key in ("points", "seed"):
            try:
                kw[key] = int(val)
            except ValueError:
                raise SpecError(f"{key} must be an integer, got {val!r}") from None
        elif key == "classes":
            kw[key] = tuple(c.strip() for c in val.split("+"))
        else:
            kw[key] = val.lower()
        parts.pop()
    path = ",".join(parts).strip()
    if not path:
        raise SpecError("expected modelnet:PATH before the options (e.g. modelnet:/data/ModelNet10,split=test)")
    try:
        return ModelNetFolder(path, kw.get("split", "test"), kw.get("points", 1024), kw.get("seed", 0),
                              kw.get("classes"), kw.get("listing"))
    except DataError as exc:
        if "split must" in str(exc) or "points must" in str(exc) or "seed must" in str(exc) \
                or "listing must" in str(exc) or "over the data limit" in str(exc):
            raise SpecError(str(exc)) from exc
        raise


register_data_spec("modelnet", _modelnet_spec,
                   usage="modelnet:PATH[,split=train|test,points=P,seed=K,classes=A+B,listing=modelnet10]")

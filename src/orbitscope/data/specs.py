"""Data specs ``PREFIX[:ARGS][@N]`` (the CLI's ``--data``): the registry :data:`DATA_SPECS`,
:func:`register_data_spec`, :func:`parse_data_spec` and the built-in prefixes (``mnist-subset``,
``fashion-mnist``, ``idx``, ``folder``, ``coco``, ``npz``)."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from .._registry import Registry
from ..errors import DataError, SpecError
from ..safe_repr import short_repr, short_text
from .arrays import ArrayDataset
from .builtin import fashion_mnist, load_idx_dataset, mnist_subset
from .folder import ImageFolder
from .limits import check_data_bytes

__all__ = ["DATA_SPECS", "DataSpecParser", "parse_data_spec", "register_data_spec"]

#: A data spec parser: the text after ``PREFIX:`` ("" when there is none) -> a dataset.
DataSpecParser = Callable[[str], Dataset]

#: The data spec prefixes: prefix -> parser(rest) -> dataset (see :func:`register_data_spec`).
DATA_SPECS: Registry[DataSpecParser] = Registry("data spec prefix", key="prefix")
_USAGE: dict[str, str] = {}
_BUILTIN_ORDER = ("mnist-subset", "fashion-mnist", "idx", "folder", "coco", "npz")
#: An @-suffix meant as a sample count but not a positive integer ("@-3", "@2.5", "@1e3").
_COUNT_LIKE = re.compile(r"[-+]?[\d.,_]*\d[\d.,_]*(e[-+]?\d+)?", re.IGNORECASE)


def register_data_spec(prefix: str, parser: DataSpecParser | None = None, *, usage: str | None = None,
                       replace: bool = False) -> Any:
    """Register ``parser(rest) -> dataset`` for specs ``PREFIX[:REST][@N]`` (also a decorator).

    ``rest`` is the text after ``PREFIX:`` (stripped; "" when absent). The parser raises
    :class:`~orbitscope.errors.SpecError` for a malformed ``rest`` (:func:`parse_data_spec` adds
    the spec to the message) and returns a map-style dataset of ``(image, label)`` with a
    ``data_id``; ``@N`` uses its ``subset`` method when it has one. ``usage`` (e.g.
    ``"cifar10[:train|:test]"``) is listed in the "accepted forms" of error messages.
    """
    if not isinstance(prefix, str) or not prefix or prefix != prefix.strip().lower() \
            or any(c in prefix for c in ":@, \t"):
        raise SpecError(f"a data spec prefix must be a non-empty lower-case name without ':', '@', ',' or spaces, "
                        f"got {prefix!r}")

    def add(fn: DataSpecParser) -> DataSpecParser:
        if not callable(fn):
            raise TypeError(f"a data spec parser must be callable(rest) -> dataset, got {type(fn).__name__}")
        DATA_SPECS.register(prefix, fn, replace=replace)
        _USAGE[prefix] = usage or f"{prefix}[:ARGS]"
        return fn

    return add if parser is None else add(parser)


def _forms() -> str:
    names = [n for n in _BUILTIN_ORDER if n in DATA_SPECS] + [n for n in DATA_SPECS.names() if n not in _BUILTIN_ORDER]
    forms = ", ".join(_USAGE.get(n, f"{n}[:ARGS]") for n in names)
    return f"accepted forms: {forms}, each optionally followed by @N (first N samples)"


def _split(rest: str, allowed: tuple[str, ...]) -> str:
    split = (rest or "test").lower()
    if split not in allowed:
        raise SpecError(f"split must be one of {allowed}, got {rest!r}")
    return split


@register_data_spec("mnist-subset", usage="mnist-subset[:train|:test|:all]")
def _mnist_subset_spec(rest: str) -> ArrayDataset:
    return mnist_subset(_split(rest, ("train", "test", "all")))


@register_data_spec("fashion-mnist", usage="fashion-mnist[:train|:test]")
def _fashion_mnist_spec(rest: str) -> ArrayDataset:
    return fashion_mnist(_split(rest, ("train", "test")))


@register_data_spec("idx", usage="idx:IMAGES_PATH,LABELS_PATH")
def _idx_spec(rest: str) -> ArrayDataset:
    parts = [q.strip() for q in rest.split(",")]
    if len(parts) != 2 or not all(parts):
        raise SpecError("expected idx:IMAGES_PATH,LABELS_PATH (two IDX files separated by a comma)")
    paths = [Path(q).expanduser() for q in parts]
    for role, raw, path in zip(("images", "labels"), parts, paths):
        if not path.exists():
            raise FileNotFoundError(f"IDX {role} file not found: {raw} (the form is idx:IMAGES_PATH,LABELS_PATH)")
    return load_idx_dataset(paths[0], paths[1], f"idx:{rest}")


@register_data_spec("folder", usage="folder:PATH")
def _folder_spec(rest: str) -> ImageFolder:
    if not rest:
        raise SpecError("expected folder:PATH (a folder holding PATH/<class_name>/<image>.png)")
    return ImageFolder(rest)


def _declared_npy_bytes(path: str, archive: zipfile.ZipFile, key: str) -> int:
    """The bytes the header of member ``key`` (``key.npy``) of an npz archive declares, checked
    against the member's size before numpy allocates them."""
    info = archive.getinfo(f"{key}.npy")
    with archive.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(fh)
        header = fh.tell()
    count = 1
    for dim in shape:
        count *= int(dim)
    declared = count * dtype.itemsize
    if declared > info.file_size - header:
        raise DataError(f"{path}: array {key!r} declares shape {tuple(shape)} of {dtype} ({declared:,} bytes) but "
                        f"holds {max(info.file_size - header, 0):,} bytes (a truncated or damaged file); save it again "
                        "with np.savez(PATH, x=images, y=labels)")
    return declared


def _load_npz(path: str) -> ArrayDataset:
    p = Path(path).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not an .npz file (for a folder of images use folder:PATH)")
    if not p.is_file():
        raise FileNotFoundError(f"npz file not found: {path} (npz:PATH reads a file saved with "
                                "np.savez(PATH, x=images, y=labels))")
    if not zipfile.is_zipfile(p):
        with open(p, "rb") as fh:
            npy = fh.read(6) == b"\x93NUMPY"
        what = "a single .npy array" if npy else "not a zip archive"
        raise DataError(f"{path} is not an .npz file ({what}); save images and labels together with "
                        "np.savez(PATH, x=images, y=labels)")
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = {"x", "y"} - set(z.files)
            if missing:
                raise DataError(f"{path}: npz needs keys 'x' (images) and 'y' (labels); "
                                f"missing {sorted(missing)}, found {sorted(z.files)}")
            declared = sum(_declared_npy_bytes(path, z.zip, name) for name in ("x", "y"))
            check_data_bytes(f"{path}: arrays x and y", declared, "their declared shapes", "save smaller arrays")
            x, y = z["x"], z["y"]
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: cannot read the arrays 'x' and 'y' ({exc}); save plain numeric arrays with "
                        "np.savez(PATH, x=images, y=labels) (object arrays would need pickle, which is refused)") from exc
    try:
        return ArrayDataset(x, y, f"npz:{path}")
    except DataError as exc:  # the arrays' shapes or types: name the file
        raise DataError(f"{path}: {exc}") from None


@register_data_spec("coco", usage="coco:ANNOTATIONS.json[:IMAGES_DIR]")
def _coco_spec(rest: str) -> Dataset:
    from .coco import read_coco

    if not rest:
        raise SpecError("expected coco:ANNOTATIONS.json[:IMAGES_DIR] (COCO-format annotations; images beside the "
                        "file unless IMAGES_DIR is given)")
    ann, _, images = rest.partition(":")
    if not ann.strip():
        raise SpecError("the annotations file is missing before ':'; expected coco:ANNOTATIONS.json[:IMAGES_DIR]")
    return read_coco(Path(ann).expanduser(), Path(images).expanduser() if images else None)


@register_data_spec("npz", usage="npz:PATH (keys x, y)")
def _npz_spec(rest: str) -> ArrayDataset:
    if not rest:
        raise SpecError("expected npz:PATH (a file saved with np.savez(PATH, x=images, y=labels))")
    return _load_npz(rest)


def parse_data_spec(spec: str) -> ArrayDataset | ImageFolder:
    """Build a dataset from a CLI string ``PREFIX[:ARGS][@N]``.

    Built-in forms: ``mnist-subset[:train|:test|:all]`` and ``fashion-mnist[:train|:test]``
    (default split "test"), ``idx:IMAGES_PATH,LABELS_PATH``, ``folder:PATH`` and
    ``npz:PATH`` (arrays ``x`` images, ``y`` labels); more with :func:`register_data_spec`.
    Prefixes and splits are case-insensitive. An optional ``@N`` suffix (N a positive
    integer) keeps the first N samples (``data_id`` gets the same suffix); N larger than the
    dataset is an error.

    Raises:
        SpecError: unknown prefix, malformed arguments or ``@N`` (lists the accepted forms).
        FileNotFoundError / IsADirectoryError / NotADirectoryError: a path that is missing or
            of the wrong kind.
        DataError: a file whose contents cannot be used (with the fix).
    """
    if not isinstance(spec, str):
        hint = f"; for a file or folder write e.g. 'npz:{os.fspath(spec)}' or 'folder:{os.fspath(spec)}'" \
            if isinstance(spec, os.PathLike) else ""
        raise SpecError(f"a data spec is a string such as 'mnist-subset:test@100', got {type(spec).__name__}{hint}")
    shown = short_repr(spec)
    text = spec.strip()
    if not text:
        raise SpecError(f"empty data spec; {_forms()}")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise SpecError(f"data spec {shown} holds a control character (a newline, tab, NUL, ...); write the spec on "
                        "one line, without control characters")
    limit: int | None = None
    head, at, tail = text.rpartition("@")
    if at:
        count = tail.strip()
        if count.isascii() and count.isdigit():
            # more than 18 digits: 10^18, more than any dataset holds (int() of 5,000 digits would raise)
            text, limit = head.strip(), int(count[-19:]) if len(count.lstrip("0")) <= 18 else 10**18
            if limit <= 0:
                raise SpecError(f"{shown}: the @N limit must be positive (the number of samples to keep), "
                                f"got @{short_text(count, 40)}")
        elif not count or _COUNT_LIKE.fullmatch(count):
            raise SpecError(f"{shown}: the @N suffix must be a positive integer (the number of samples to keep), "
                            f"got '@{short_text(count, 40)}'")
    prefix, sep, rest = text.partition(":")
    key = prefix.strip().lower()
    if key not in DATA_SPECS:
        base = key.split("@")[0]
        if base in DATA_SPECS:
            raise SpecError(f"{shown}: unexpected {short_repr(key[len(base):], 40)} after {base!r}: only one @N suffix "
                            f"(N a positive integer) may follow, e.g. '{base}@100'")
        raise SpecError(f"unknown data spec {shown}; {_forms()}")
    rest = rest.strip()
    if sep and not rest:
        raise SpecError(f"data spec {shown} has nothing after ':'; {_forms()}")
    try:
        ds = DATA_SPECS.get(key)(rest)
    except SpecError as exc:
        hint = " (an @N suffix must be a positive integer)" if "@" in rest else ""
        raise SpecError(f"data spec {shown}: {short_text(str(exc), 600)}{hint}") from exc
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        raise
    except OSError as exc:  # e.g. a file name too long for the file system
        raise DataError(f"data spec {shown}: cannot open {short_repr(rest)}: {exc.strerror or exc}") from exc
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise TypeError(f"the parser registered for data spec prefix {key!r} returned {type(ds).__name__}, "
                        "not a dataset of (image, label)")
    if limit is not None:
        data_id = getattr(ds, "data_id", text)
        if limit > len(ds):
            raise SpecError(f"{shown}: asked for {limit} samples but {data_id} has {len(ds)}; "
                            f"use @{len(ds)} or fewer")
        if hasattr(ds, "subset"):
            ds = ds.subset(slice(0, limit), data_id=f"{data_id}@{limit}")
        else:
            sub = torch.utils.data.Subset(ds, range(limit))
            sub.data_id = f"{data_id}@{limit}"  # type: ignore[attr-defined]
            ds = sub
    try:  # how to open it again elsewhere (orbitscope.engine.shipping: Ray workers re-open it from this)
        ds.data_spec = spec  # type: ignore[union-attr]
    except AttributeError:  # pragma: no cover - a dataset type with __slots__
        pass
    return ds

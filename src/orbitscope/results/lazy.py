"""Lazy, chunked arrays behind an :class:`xarray.Dataset`: read on demand, by selection.

A stored run is a sequence of chunks of samples (``[start, stop)`` positions along ``sample``),
one ``.npy`` file per variable per chunk (see :mod:`orbitscope.results.store`).
:class:`RowChunkedArray` presents such a sequence as one array to xarray's lazy indexing
machinery (an :class:`xarray.backends.BackendArray` with *outer* indexing support): selecting a
sample range, an orbit element or a class subset reads only the chunks that hold the selected
samples, each memory-mapped for the duration of the read and copied out, so a selection costs
memory proportional to its own size, never to the run's. Nothing is cached between reads: a
repeated selection reads again (call ``.load()`` on a small result to keep it in memory).

The same class serves *derived* variables (e.g. NERO's consensus scores, a function of each
sample's stored probabilities): their chunks are computed on demand instead of read.

Why memory-mapped ``.npy`` chunks and not Zarr or dask: the store's guarantees (atomic chunk
files, CRC-32 per chunk, resume bit-identical, consistent prefixes for concurrent readers) are
built on exactly these files, existing stores open unchanged, and xarray's own lazy indexing
gives selection by label without a task scheduler. ``benchmarks/lazy_backend.py`` measures the
alternatives side by side.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from ..errors import DamagedRunError, StoreError

__all__ = ["ChunkBounds", "RowChunkedArray", "ChunkFile", "ChunkTable", "read_chunk_file", "check_chunk_file", "lazy_variable",
           "ResultSource", "outer_index", "file_crc", "verify_chunk_file", "stored_arrays", "fill_value", "joined_extra_shape", "pad_to"]

_CRC_BLOCK = 1 << 20
#: Chunk files whose checksum this process verified: a 64-bit digest of (path, size, mtime_ns, crc),
#: so the set costs tens of bytes per file however many runs are read.
_VERIFIED: set[int] = set()


@dataclass(frozen=True)
class ChunkBounds:
    """Where each chunk's samples sit along the ``sample`` dim: ``starts[i]:stops[i]`` (positions,
    contiguous and increasing, ``starts[0] == 0``)."""

    starts: np.ndarray
    stops: np.ndarray

    @classmethod
    def from_sizes(cls, sizes: Sequence[int]) -> "ChunkBounds":
        stops = np.cumsum(np.asarray(sizes, dtype=np.int64))
        return cls(np.concatenate([[0], stops[:-1]]).astype(np.int64), stops)

    @property
    def n(self) -> int:
        return int(self.stops[-1]) if len(self.stops) else 0

    def __len__(self) -> int:
        return len(self.starts)

    def split(self, max_rows: int) -> "ChunkBounds":
        """The same chunks cut into pieces of at most ``max_rows`` samples (never across chunks)."""
        if max_rows >= int(np.max(self.stops - self.starts, initial=0)):
            return self
        starts = np.concatenate([np.arange(a, b, max_rows) for a, b in zip(self.starts, self.stops)]).astype(np.int64)
        stops = np.minimum(starts + max_rows, np.repeat(self.stops, -(-(self.stops - self.starts) // max_rows)))
        return ChunkBounds(starts, stops.astype(np.int64))

    def locate(self, positions: np.ndarray) -> np.ndarray:
        """The chunk holding each position."""
        return np.searchsorted(self.stops, positions, side="right")


def outer_index(arr: np.ndarray, key: tuple[Any, ...]) -> np.ndarray:
    """``arr`` indexed by an *outer* key (each entry an int, a slice or a 1-D integer array, applied
    to its own axis independently, as xarray's ``OuterIndexer`` means it). Basic indices are
    applied first (views, no copy), then each array index with :func:`numpy.take`."""
    key = tuple(key) + (slice(None),) * (arr.ndim - len(key))
    basic: list[Any] = []
    takes: list[tuple[int, np.ndarray]] = []
    drop: list[int] = []
    for axis, k in enumerate(key):
        if isinstance(k, (int, np.integer)):
            basic.append(slice(int(k), int(k) + 1 if int(k) != -1 else None))
            drop.append(axis)
        elif isinstance(k, slice):
            basic.append(k)
        else:
            basic.append(slice(None))
            takes.append((axis, np.asarray(k, dtype=np.int64)))
    out = arr[tuple(basic)]
    for axis, idx in takes:
        out = np.take(out, idx, axis=axis)
    out = np.asarray(out)
    return out.reshape([s for a, s in enumerate(out.shape) if a not in drop]) if drop else out


class RowChunkedArray(BackendArray):
    """An array whose first axis (samples) is split into chunks, each produced by ``read(i)``.

    ``read(i)`` returns chunk ``i`` as an array (possibly a memory map) of shape
    ``(stops[i] - starts[i], *shape[1:])`` — or smaller in later axes for ragged variables, which
    are padded with ``fill``. Indexing reads the chunks that hold the selected rows, one at a time.
    """

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, bounds: ChunkBounds, read: Callable[[int], np.ndarray],
                 fill: Any = None) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.bounds = bounds
        self.read = read
        self.fill = fill

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._getitem)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("a stored result is read-only: call result.load() for an in-memory copy you can modify")

    def _chunk(self, i: int) -> np.ndarray:
        arr = self.read(i)
        want = (int(self.bounds.stops[i] - self.bounds.starts[i]), *self.shape[1:])
        if arr.shape != want:  # ragged: pad the later axes
            if arr.shape[0] != want[0] or arr.ndim != len(want) or any(a > w for a, w in zip(arr.shape, want)):
                raise StoreError(f"chunk {i} has shape {arr.shape}, expected {want}")
            arr = pad_to(arr, want, self.fill)
        return arr

    def _getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        first, rest = key[0], tuple(key[1:])
        n = self.shape[0]
        if isinstance(first, (int, np.integer)):
            pos = int(first) % n if n else int(first)
            i = int(self.bounds.locate(np.asarray([pos]))[0])
            return np.array(outer_index(self._chunk(i), (pos - int(self.bounds.starts[i]), *rest)), dtype=self.dtype)
        positions = (np.arange(*first.indices(n), dtype=np.int64) if isinstance(first, slice)
                     else np.asarray(first, np.int64))
        if positions.size == 0:
            probe = np.empty((0, *self.shape[1:]), self.dtype)
            return outer_index(probe, (slice(None), *rest))
        which = self.bounds.locate(positions)
        out: np.ndarray | None = None
        for i in np.unique(which):
            rows = np.flatnonzero(which == i)
            local = positions[rows] - int(self.bounds.starts[i])
            chunk = self._chunk(int(i))
            lo, hi = int(local.min()), int(local.max()) + 1
            contiguous = np.array_equal(local, np.arange(lo, hi))
            part = outer_index(chunk, ((slice(lo, hi) if contiguous else local), *rest))
            if out is None:  # filled chunk by chunk: one copy, and each memory map released before the next
                out = np.empty((positions.size, *part.shape[1:]), self.dtype)
            if rows[-1] - rows[0] + 1 == rows.size:
                out[rows[0]:rows[-1] + 1] = part
            else:
                out[rows] = part
            del chunk, part
        assert out is not None
        return out


def lazy_variable(array: RowChunkedArray) -> indexing.LazilyIndexedArray:
    """``array`` wrapped for an :class:`xarray.Variable` (selections stay lazy until ``.values``)."""
    return indexing.LazilyIndexedArray(array)


# --------------------------------------------------------------------------- chunk files


@dataclass(frozen=True)
class ChunkFile:
    """One stored chunk of one variable: where it is, what the catalog says about it."""

    path: Path
    run_id: str
    chunk: int
    rows: int
    dtype: np.dtype
    crc: int | None


@dataclass(frozen=True)
class ChunkTable:
    """The stored chunks of one variable, compactly (arrays, not one object per file): chunk
    ``i`` is ``folder/<chunks[i]:06d>.npy`` with ``rows[i]`` samples and CRC-32 ``crcs[i]``
    (-1: recorded before checksums)."""

    folder: Path
    run_id: str
    dtype: np.dtype
    chunks: np.ndarray
    rows: np.ndarray
    crcs: np.ndarray

    def __len__(self) -> int:
        return len(self.chunks)

    def file(self, i: int) -> ChunkFile:
        crc = int(self.crcs[i])
        return ChunkFile(self.folder / f"{int(self.chunks[i]):06d}.npy", self.run_id, int(self.chunks[i]),
                         int(self.rows[i]), self.dtype, None if crc < 0 else crc)

    def read(self, i: int) -> np.ndarray:
        return read_chunk_file(self.file(i))


def _header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, data offset) from a ``.npy`` header, reading only the header."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(fh)
        if fortran:
            raise ValueError("Fortran-ordered arrays are not written by orbitscope")
        return tuple(shape), np.dtype(dtype), fh.tell()


def _damaged(f: ChunkFile, what: str) -> StoreError:
    """A chunk file that is not what the catalog recorded: damaged (recomputed by evaluating the
    same run again) when the catalog holds its checksum, else a corrupt store."""
    if f.crc is not None:
        return DamagedRunError(f"run {f.run_id} is damaged: chunk {f.chunk} ({f.path}) {what}; run the same "
                               "evaluation again to recompute the damaged chunks")
    return StoreError(f"store is corrupt: {f.path} {what}")


def check_chunk_file(f: ChunkFile) -> tuple[int, ...]:
    """Cheap structural check of a chunk file (its header and size, not its checksum): returns its
    shape. DamagedRunError when it is missing, or when it is not what the catalog says and the
    catalog has its checksum (StoreError for stores made before checksums)."""
    try:
        shape, dtype, offset = _header(f.path)
        size = f.path.stat().st_size
    except FileNotFoundError:
        raise DamagedRunError(f"run {f.run_id} is damaged: {f.path} (chunk {f.chunk}) is listed in the catalog but "
                              "missing; run the same evaluation again to recompute it") from None
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise _damaged(f, f"cannot be read ({exc})") from exc
    if not shape or shape[0] != f.rows or dtype != f.dtype:
        raise _damaged(f, f"has shape {shape} / dtype {dtype}, expected {f.rows} samples of {f.dtype}")
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size != expected:
        raise _damaged(f, f"does not match its checksum (it has {size} bytes, its header says {expected})"
                       if f.crc is not None else f"has {size} bytes, its header says {expected}")
    return shape


def file_crc(path: Path) -> int:
    """CRC-32 of a file, read in 1 MiB blocks."""
    crc = 0
    with open(path, "rb") as fh:
        while block := fh.read(_CRC_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc


def verify_chunk_file(f: ChunkFile) -> None:
    """Compare the file's CRC-32 with the catalog's (once per process and file version)."""
    if f.crc is None:
        return
    try:
        st = f.path.stat()
    except FileNotFoundError:
        check_chunk_file(f)  # raises the missing-file error
        raise
    key = int.from_bytes(hashlib.blake2b(f"{f.path}|{st.st_size}|{st.st_mtime_ns}|{f.crc}".encode(),
                                         digest_size=8).digest(), "little")
    if key in _VERIFIED:
        return
    try:
        crc = file_crc(f.path)
    except OSError as exc:  # e.g. replaced by a folder
        raise _damaged(f, f"cannot be read ({exc})") from exc
    if crc != f.crc:
        raise DamagedRunError(f"run {f.run_id} is damaged: chunk {f.chunk} ({f.path}) does not match its checksum; run "
                              "the same evaluation again to recompute the damaged chunks")
    _VERIFIED.add(key)


def read_chunk_file(f: ChunkFile, *, mmap: bool = True) -> np.ndarray:
    """A chunk file's array, its checksum verified on its first read in this process:
    memory-mapped (read-only) when ``mmap``, else read into memory. (Headers and sizes were
    checked when the run was opened; what is read is checked against the catalog again.)"""
    verify_chunk_file(f)
    try:
        arr = np.load(f.path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        check_chunk_file(f)  # raises the missing-file error
        raise
    except ValueError:
        if not mmap:
            check_chunk_file(f)  # a readable explanation when there is one
            raise _damaged(f, "cannot be read") from None
        return read_chunk_file(f, mmap=False)  # e.g. an empty array, which cannot be mapped
    except (OSError, EOFError) as exc:
        raise _damaged(f, f"cannot be read ({exc})") from exc
    if not arr.shape or arr.shape[0] != f.rows or arr.dtype != f.dtype:
        raise _damaged(f, f"has shape {arr.shape} / dtype {arr.dtype}, expected {f.rows} samples of {f.dtype}")
    return arr


def stored_arrays(layout: dict[str, Any], chunks: Sequence[tuple[int, int, int, str | None]], base: Path, run_id: str,
                  bounds: ChunkBounds, *, verify: bool = False) -> dict[str, RowChunkedArray]:
    """One lazy array per stored variable of a run: ``chunks`` are the catalog's rows
    ``(chunk, start, stop, checksums JSON)`` in sample order, ``base`` the run's folder. Every
    chunk file's header and size are checked now (its checksum too when ``verify``)."""
    ids = np.asarray([c for c, _, _, _ in chunks], dtype=np.int64)
    rows = bounds.stops - bounds.starts
    sums = [json.loads(checksum) if checksum else {} for _, _, _, checksum in chunks]
    out = {}
    for name, spec in layout["variables"].items():
        dtype = np.dtype(spec["dtype"])
        crcs = np.asarray([int(s[name]) if name in s else -1 for s in sums], dtype=np.int64)
        table = ChunkTable(base / name, run_id, dtype, ids, rows, crcs)
        shapes = set()
        for i in range(len(table)):
            f = table.file(i)
            shapes.add(check_chunk_file(f))
            if verify:
                verify_chunk_file(f)
        extra = _extra_shape(name, spec, shapes, layout)
        out[name] = RowChunkedArray((bounds.n, *extra), dtype, bounds, table.read, fill=fill_value(dtype))
    return out


def fill_value(dtype: np.dtype) -> Any:
    """Padding of ragged variables: NaN for floats, -1 for signed integers, 0 otherwise."""
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return -1 if np.issubdtype(dtype, np.signedinteger) else 0


def joined_extra_shape(extras: set[tuple[int, ...]], ragged: bool) -> tuple[int, ...] | None:
    """The shape after ``sample`` that chunks with these shapes after ``sample`` join into: their
    one shape, or for a ragged variable the largest along each axis; None when they cannot join
    (different shapes of a variable not declared ragged, or different numbers of axes)."""
    if len(extras) == 1:
        return next(iter(extras))
    if not ragged or len({len(e) for e in extras}) != 1:
        return None
    return tuple(max(e[i] for e in extras) for i in range(len(next(iter(extras)))))


def pad_to(arr: np.ndarray, shape: tuple[int, ...], fill: Any) -> np.ndarray:
    """``arr`` padded at the end of each axis to ``shape`` with ``fill``."""
    return np.pad(np.asarray(arr), [(0, w - a) for a, w in zip(arr.shape, shape)], constant_values=fill)


def _extra_shape(name: str, spec: dict[str, Any], shapes: set[tuple[int, ...]], layout: dict[str, Any]) -> tuple[int, ...]:
    """The shape after ``sample`` of a stored variable; ragged variables take the largest."""
    extras = {sh[1:] for sh in shapes}
    if not extras:  # no chunks yet
        return (*([] if spec.get("per_sample") else layout["orbit_shape"]), *spec["extra_shape"])
    joined = joined_extra_shape(extras, bool(spec.get("ragged")))
    if joined is None:
        raise StoreError(f"variable {name!r} has different shapes in different chunks ({sorted(extras)}); only "
                         "variables declared ragged (e.g. a varying number of boxes) may")
    return joined


# --------------------------------------------------------------------------- where a result lives


@dataclass(frozen=True)
class ResultSource:
    """Where a lazy result comes from, for chunk-by-chunk passes and cached aggregates.

    ``cache`` (duck-typed: ``get(key) -> bytes | None`` and ``put(key, bytes)``) keeps aggregates
    of this run; ``version`` changes whenever the run's chunks do, so a cache entry never
    outlives the data it summarises; ``namespace`` tells derived results apart (e.g. consensus
    variables computed with a given tolerance).
    """

    run_id: str
    bounds: ChunkBounds
    version: str
    cache: Any = None
    namespace: str = ""

    def derived(self, namespace: str, bounds: ChunkBounds | None = None) -> "ResultSource":
        return ResultSource(self.run_id, self.bounds if bounds is None else bounds, self.version, self.cache,
                            f"{self.namespace}/{namespace}" if self.namespace else namespace)

    def cache_key(self, what: str) -> str:
        return f"{self.version}|{self.namespace}|{what}"

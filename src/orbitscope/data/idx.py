"""The IDX file reader (the MNIST file format), raw or gzip-compressed."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError
from .limits import MAX_DATA_BYTES_ENV, data_byte_limit

__all__ = ["PathLike", "read_idx", "MAX_IDX_DIMS", "GZIP_MAX_RATIO"]

#: A file or folder path: a string or an ``os.PathLike``.
PathLike = str | os.PathLike[str]

#: IDX dtype code -> big-endian numpy dtype.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


#: The most dimensions an IDX header may declare (numpy arrays hold at most 32 in numpy 1.x, 64 in 2.x).
MAX_IDX_DIMS = 32
#: DEFLATE inflates one byte to at most 1032 (RFC 1951's longest match per shortest code); a gzip
#: file of c bytes thus holds at most about 1032·c bytes. With a margin:
GZIP_MAX_RATIO = 1100
_CHUNK = 1 << 20  # bytes inflated per read
_SURPLUS_COUNTED = 64 << 20  # bytes past the declared payload inflated (and dropped) to say how many there are


def _parse_idx_header(head: bytes, path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """Parse an IDX header; return (big-endian dtype, shape, header length in bytes)."""
    if len(head) < 4:
        raise DataError(f"{path}: not an IDX file (only {len(head)} bytes, need a 4-byte magic)")
    if head[0] != 0 or head[1] != 0:
        raise DataError(f"{path}: bad IDX magic {head[:4].hex()} (must start with two zero bytes)")
    code, ndim = head[2], head[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise DataError(f"{path}: unknown IDX dtype code 0x{code:02X} (known: {known})")
    if ndim > MAX_IDX_DIMS:
        raise DataError(f"{path}: the IDX header declares {ndim} dimensions, more than the {MAX_IDX_DIMS} an array "
                        "can have (a corrupt header?)")
    header_len = 4 + 4 * ndim
    if len(head) < header_len:
        raise DataError(f"{path}: truncated IDX header: expected {header_len} bytes, found {len(head)}")
    shape = tuple(int(d) for d in np.frombuffer(head, dtype=">u4", count=ndim, offset=4))
    return _IDX_DTYPES[code], shape, header_len


def _check_in_memory_size(path: Path, dtype: np.dtype, shape: tuple[int, ...], expected: int, limit: int) -> None:
    """Refuse a payload to be held in memory that is over ``limit`` bytes (before reading it)."""
    if expected > limit:
        raise DataError(f"{path}: its header declares shape {shape} of {dtype.name} = {expected:,} bytes, over the "
                        f"limit of {limit:,} bytes for an IDX file read into memory; if the file is genuine, raise "
                        f"the limit with the environment variable {MAX_DATA_BYTES_ENV} (e.g. "
                        f"{MAX_DATA_BYTES_ENV}={-(-expected // 2**30)}G) or read_idx(..., max_bytes=...)")


def _inflate_idx(path: Path, limit: int) -> tuple[np.dtype, tuple[int, ...], np.ndarray]:
    """The header and payload of a gzip IDX file, bounded: the header is read from the stream's
    first bytes, the declared size checked against ``limit`` and the file size, and the payload
    inflated into a buffer of exactly that size (never more)."""
    with gzip.open(path, "rb") as gz:
        head = gz.read(4)
        if len(head) == 4 and head[:2] == b"\0\0" and head[3] <= MAX_IDX_DIMS:
            head += gz.read(4 * head[3])
        dtype, shape, hlen = _parse_idx_header(head, path)
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        _check_in_memory_size(path, dtype, shape, expected, limit)
        packed = path.stat().st_size
        if hlen + expected > GZIP_MAX_RATIO * packed:
            raise DataError(f"{path}: truncated IDX payload: the header declares shape {shape} of {dtype.name} = "
                            f"{expected:,} bytes, more than a gzip file of {packed:,} bytes can hold "
                            f"(at most about {GZIP_MAX_RATIO}× its size)")
        payload = np.empty(expected, np.uint8)
        view, got = memoryview(payload), 0
        while got < expected:
            n = gz.readinto(view[got:got + _CHUNK])
            if not n:
                raise DataError(f"{path}: truncated IDX payload for shape {shape} of {dtype.name}: "
                                f"expected {expected} bytes, found {got}")
            got += n
        extra = 0
        while extra <= _SURPLUS_COUNTED and (n := len(gz.read(_CHUNK))):  # counted, not kept
            extra += n
        if extra:
            found = f"{expected + extra}" if extra <= _SURPLUS_COUNTED else f"more than {expected + _SURPLUS_COUNTED}"
            raise DataError(f"{path}: oversized IDX payload for shape {shape} of {dtype.name}: "
                            f"expected {expected} bytes, found {found}")
    return dtype, shape, payload


def read_idx(path: PathLike, max_bytes: int | None = None) -> np.ndarray:
    """Read an IDX file (MNIST format), raw or gzip-compressed.

    Gzip is detected by the magic bytes ``1f 8b`` (not the extension). The header is
    ``00 00 <dtype code> <ndim>`` then ``ndim`` big-endian uint32 dimensions, then the
    big-endian payload. The result has native byte order and the header's shape.
    Raw (uncompressed) ubyte/byte files are returned as a read-only ``np.memmap``; gzip
    files are decompressed into memory.

    Bounds, checked from the header before any payload is read: at most :data:`MAX_IDX_DIMS`
    dimensions; a payload read into memory (gzip files, and raw files of multi-byte types) of at
    most ``max_bytes`` (default ``$ORBITSCOPE_MAX_DATA_BYTES`` or 4 GiB, see
    :mod:`orbitscope.data.limits`); a gzip payload no larger than the compressed file can hold
    (:data:`GZIP_MAX_RATIO` × its size). Gzip files are inflated into a buffer of the declared
    size, never further.

    Args:
        path: the IDX file.
        max_bytes: the bound on the payload read into memory, in bytes.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DataError: bad magic, unknown dtype code, too many dimensions, corrupt gzip, a payload
            over ``max_bytes``, or a payload whose size differs from the one the header implies
            (each message names the file).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not an IDX file")
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    limit = data_byte_limit() if max_bytes is None else int(max_bytes)
    with open(path, "rb") as fh:
        is_gzip = fh.read(2) == _GZIP_MAGIC
    if is_gzip:
        try:
            dtype, shape, payload = _inflate_idx(path, limit)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc
        return payload.view(dtype).reshape(shape).astype(dtype.newbyteorder("="))
    with open(path, "rb") as fh:
        dtype, shape, hlen = _parse_idx_header(fh.read(4 + 4 * 255), path)
    found = path.stat().st_size - hlen
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if found != expected:
        kind = "truncated" if found < expected else "oversized"
        raise DataError(
            f"{path}: {kind} IDX payload for shape {shape} of {dtype.name}: "
            f"expected {expected} bytes, found {found}"
        )
    native = dtype.newbyteorder("=")
    if dtype.itemsize == 1 and expected > 0 and len(shape) > 0:
        return np.memmap(path, dtype=native, mode="r", offset=hlen, shape=shape)
    _check_in_memory_size(path, dtype, shape, expected, limit)
    with open(path, "rb") as fh:
        fh.seek(hlen)
        return np.frombuffer(fh.read(), dtype=dtype).reshape(shape).astype(native)

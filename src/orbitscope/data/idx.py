"""The IDX file reader (the MNIST file format), raw or gzip-compressed."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError

__all__ = ["PathLike", "read_idx"]

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
    header_len = 4 + 4 * ndim
    if len(head) < header_len:
        raise DataError(f"{path}: truncated IDX header: expected {header_len} bytes, found {len(head)}")
    shape = tuple(int(d) for d in np.frombuffer(head, dtype=">u4", count=ndim, offset=4))
    return _IDX_DTYPES[code], shape, header_len


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (MNIST format), raw or gzip-compressed.

    Gzip is detected by the magic bytes ``1f 8b`` (not the extension). The header is
    ``00 00 <dtype code> <ndim>`` then ``ndim`` big-endian uint32 dimensions, then the
    big-endian payload. The result has native byte order and the header's shape.
    Raw (uncompressed) ubyte/byte files are returned as a read-only ``np.memmap``; gzip
    files are decompressed into memory.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: bad magic, unknown dtype code, corrupt gzip, or a payload whose
            size differs from the one the header implies.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not an IDX file")
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    with open(path, "rb") as fh:
        is_gzip = fh.read(2) == _GZIP_MAGIC
    if is_gzip:
        try:
            with gzip.open(path, "rb") as gz:
                content = gz.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc
        dtype, shape, hlen = _parse_idx_header(content[: 4 + 4 * 255], path)
        found = len(content) - hlen
    else:
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
    if is_gzip:
        return np.frombuffer(content, dtype=dtype, offset=hlen).reshape(shape).astype(native)
    if dtype.itemsize == 1 and expected > 0 and len(shape) > 0:
        return np.memmap(path, dtype=native, mode="r", offset=hlen, shape=shape)
    with open(path, "rb") as fh:
        fh.seek(hlen)
        return np.frombuffer(fh.read(), dtype=dtype).reshape(shape).astype(native)

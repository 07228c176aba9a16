"""The data source: uniform, random access by chunk to arrays, map-style datasets and loaders.

A chunk is ``chunk_size`` consecutive samples (the unit of evaluation, storage and resumption);
chunk ``i`` holds samples ``[i·chunk_size, min((i+1)·chunk_size, n))``. Map-style datasets and
arrays are read by index (so any chunk can be evaluated alone, in any process); a DataLoader is
read in order (its batch size is the chunk size).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..errors import DataError

__all__ = ["DataSource", "hash_arrays", "groups_identity"]

Collate = Callable[[Sequence[Any]], tuple[Any, Any]]


def hash_arrays(*arrays: Tensor) -> str:
    """A 16-hex-digit content hash of tensors (shape, dtype and bytes)."""
    h = hashlib.sha256()
    for a in arrays:
        t = a.detach().cpu().contiguous()
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


class _ItemList(Dataset):
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


class DataSource:
    """Chunked access to ``data``: a map-style torch Dataset of (input, target) items, a
    DataLoader with a fixed batch size that does not shuffle, a pair (inputs, targets) of arrays,
    or a list of (input, target) tuples.

    Args:
        data: see above.
        batch_size: samples per chunk (a DataLoader's own batch size wins).
        data_id: identifies the data in run ids (default: the dataset's ``data_id`` attribute,
            a content hash for arrays, else ``"<class>:<length>"``).
        collate: turns a list of items into ``(inputs, targets)`` (a task's ``collate``).
    """

    def __init__(self, data: Any, batch_size: int, data_id: str | None = None, collate: Collate | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.loader: DataLoader | None = None
        self.dataset: Dataset | None = None
        self.collate = collate
        if isinstance(data, DataLoader):
            if data.batch_size is None:
                raise DataError("a DataLoader given to evaluate needs a fixed batch_size")
            if not isinstance(data.sampler, torch.utils.data.SequentialSampler):
                raise DataError(
                    "a DataLoader given to evaluate must not shuffle or use a custom sampler: results are indexed "
                    "by position and runs resume by chunk (use shuffle=False)"
                )
            self.loader = data
            self.chunk_size = int(data.batch_size)
            try:
                self.n: int | None = len(data.dataset)  # type: ignore[arg-type]
            except TypeError:
                self.n = None
            inner = data.dataset
        elif isinstance(data, list) and data and all(isinstance(d, tuple) and len(d) >= 2 for d in data):
            # a list of (input, target) tuples
            self.dataset = _ItemList(list(data))
            self.chunk_size, self.n = batch_size, len(data)
            inner = None
            data_id = data_id or f"items:{len(data)}"
        elif isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, Dataset):
            images, targets = (torch.as_tensor(np.asarray(a)) if not isinstance(a, Tensor) else a for a in data)
            if len(images) != len(targets):
                raise DataError(f"images and targets differ in length: {len(images)} vs {len(targets)}")
            self.dataset = torch.utils.data.TensorDataset(images, targets)
            self.chunk_size, self.n = batch_size, len(images)
            inner = None
            data_id = data_id or "arrays:" + hash_arrays(images, targets)
        elif isinstance(data, Dataset) and hasattr(data, "__getitem__") and hasattr(data, "__len__"):
            self.dataset = data
            self.chunk_size, self.n = batch_size, len(data)  # type: ignore[arg-type]
            inner = data
        else:
            raise TypeError(
                "data must be a torch Dataset of (input, target), a DataLoader, or a pair (images, targets) of "
                f"arrays; got {type(data).__name__}"
            )
        self.data_id = data_id or getattr(inner, "data_id", None) or f"{type(inner).__name__}:{self.n}"
        self.groups = _sample_groups(inner, self.n)

    def groups_of(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The :attr:`groups` of samples [start, stop)."""
        return {name: values[start:stop] for name, values in self.groups.items()}

    @property
    def random_access(self) -> bool:
        """Chunks can be read by index (map-style data), not only in order (a DataLoader)."""
        return self.dataset is not None

    @property
    def n_chunks(self) -> int | None:
        return None if self.n is None else -(-self.n // self.chunk_size)

    def chunk_range(self, index: int) -> tuple[int, int]:
        """(start, stop) sample indices of chunk ``index``."""
        start = index * self.chunk_size
        stop = start + self.chunk_size if self.n is None else min(start + self.chunk_size, self.n)
        return start, stop

    def first_item(self) -> Any:
        """The first item (None for loaders or empty data)."""
        if self.dataset is None or not self.n:
            return None
        return self.dataset[0]  # type: ignore[index]

    def first_batch(self) -> tuple[Any, Any] | None:
        """The collated ``(inputs, targets)`` of chunk 0 (a DataLoader's first batch, read by a
        fresh iteration), or None for empty data."""
        if self.loader is not None:
            batch = next(iter(self.loader), None)
            if batch is None:
                return None
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise DataError(f"a DataLoader batch must be (inputs, targets), got {type(batch).__name__}")
            return batch[0], batch[1]
        return self.read_chunk(0) if self.n else None

    def input_shape(self) -> tuple[int, ...] | None:
        """Shape of one input (e.g. (C, H, W)), probed once from the first item; None for loaders."""
        if not hasattr(self, "_shape"):
            item = self.first_item()
            first = item[0] if isinstance(item, (tuple, list)) and item else None
            try:
                self._shape = tuple(torch.as_tensor(first).shape) if first is not None else None
            except (TypeError, ValueError, RuntimeError):
                self._shape = None
        return self._shape

    def input_numel(self) -> int | None:
        """Values per input (e.g. C·H·W), probed once from the first item; None for loaders."""
        shape = self.input_shape()
        return None if shape is None else int(np.prod(shape, dtype=np.int64))

    def _collate(self, items: list[Any]) -> tuple[Any, Any]:
        if self.collate is not None:
            return self.collate(items)
        from torch.utils.data._utils.collate import default_collate

        batch = default_collate(items)
        return batch[0], batch[1]

    def read_chunk(self, index: int) -> tuple[Any, Any]:
        """The collated ``(inputs, targets)`` of chunk ``index`` (map-style data only)."""
        if self.dataset is None or self.n is None:
            raise DataError("this data (a DataLoader) can only be read in order; pass a map-style Dataset for "
                            "random access to chunks")
        start, stop = self.chunk_range(index)
        if start >= stop:
            raise IndexError(f"chunk {index} is past the end of the data ({self.n} samples)")
        return self._collate([self.dataset[j] for j in range(start, stop)])

    def chunks(self, skip: set[int] | None = None) -> Iterator[tuple[int, int, tuple[Any, Any]]]:
        """Yield (chunk index, first sample index, (inputs, targets)) for chunks not in ``skip``."""
        skip = skip or set()
        if self.loader is not None:
            start = 0
            for i, batch in enumerate(self.loader):
                if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                    raise DataError(f"a DataLoader batch must be (inputs, targets), got {type(batch).__name__}")
                size = len(batch[0])
                if i not in skip:
                    yield i, start, (batch[0], batch[1])
                start += size
            return
        assert self.dataset is not None and self.n is not None
        for i in range(self.n_chunks or 0):
            if i in skip:
                continue
            yield i, self.chunk_range(i)[0], self.read_chunk(i)


def groups_identity(groups: dict[str, np.ndarray]) -> dict[str, str]:
    """``{name: 16-hex-digit hash of its labels}``: part of a run's identity, so a run is not
    reused for the same data with other group labels."""
    out = {}
    for name, values in sorted(groups.items()):
        h = hashlib.sha256(str(values.dtype).encode())
        h.update(np.ascontiguousarray(values).tobytes())
        out[name] = h.hexdigest()[:16]
    return out


def _sample_groups(dataset: Any, n: int | None) -> dict[str, np.ndarray]:
    """A dataset's ``sample_groups``: ``{name: one label per item}`` (e.g. ``{"flow_type": ...}``),
    recorded by :func:`~orbitscope.evaluate` as per-sample variables so results can be split by
    them (``aggregate(..., by=name)``, the report, the interface). Labels are strings or integers;
    strings are stored with one width for the whole dataset."""
    groups = getattr(dataset, "sample_groups", None) if dataset is not None else None
    if groups is None:
        return {}
    if not isinstance(groups, dict):
        raise DataError(f"{type(dataset).__name__}.sample_groups must be a dict {{name: per-item labels}}, "
                        f"got {type(groups).__name__}")
    out: dict[str, np.ndarray] = {}
    for name, values in groups.items():
        arr = np.asarray(values)
        if not isinstance(name, str) or not name.isidentifier():
            raise DataError(f"sample group names must be identifiers, got {name!r}")
        if arr.ndim != 1 or (n is not None and len(arr) != n):
            raise DataError(f"sample group {name!r} needs one label per item ({n}), got shape {arr.shape}")
        if arr.dtype.kind in "US" or arr.dtype == object or arr.size == 0:
            arr = arr.astype(str)
        elif arr.dtype.kind not in "iub":
            raise DataError(f"sample group {name!r} must hold strings or integers, got {arr.dtype}")
        out[name] = arr
    return out

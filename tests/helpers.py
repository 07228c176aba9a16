"""Small fixed models shared by the tests (imported as ``from helpers import ...``)."""

from typing import Callable

import numpy as np
import torch
from torch import nn


class TinyNet(nn.Module):
    """A 5×5 stride-3 convolution and a linear layer: 28×28 inputs -> 10 logits, untrained."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5, stride=3)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class CentroidNet(nn.Module):
    """Nearest-centroid classifier as one linear layer: logits = scale · (x·mu_c − |mu_c|²/2).

    A fixed, data-derived model (no training) that is accurate upright (~80 % on MNIST digits)
    and sensitive to rotation, so orbit curves are non-trivial.
    """

    def __init__(self, centroids: np.ndarray, scale: float = 0.05) -> None:
        super().__init__()
        mu = torch.as_tensor(np.asarray(centroids).reshape(len(centroids), -1), dtype=torch.float32)
        self.fc = nn.Linear(mu.shape[1], len(mu))
        with torch.no_grad():
            self.fc.weight.copy_(scale * mu)
            self.fc.bias.copy_(-0.5 * scale * (mu * mu).sum(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def fixture_linear_model() -> nn.Module:
    """The seeded linear classifier tests/data/make_store_format2.py writes the store fixtures with
    (that script keeps its own copy: it runs standalone at old commits)."""
    rng = np.random.default_rng(0)
    fc = nn.Linear(784, 10)
    with torch.no_grad():
        fc.weight.copy_(torch.as_tensor(rng.normal(0, 0.05, (10, 784)), dtype=torch.float32))
        fc.bias.copy_(torch.as_tensor(rng.normal(0, 0.1, 10), dtype=torch.float32))
    return nn.Sequential(nn.Flatten(), fc)


class Pairs(torch.utils.data.Dataset):
    """A map-style dataset of ``(torch.as_tensor(inputs[i]), targets[i])`` (targets kept as they
    are, e.g. detection dicts)."""

    def __init__(self, inputs, targets):
        self.inputs, self.targets = inputs, targets

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        return torch.as_tensor(self.inputs[i]), self.targets[i]


# Floats that were computed on another machine (the stored fixtures under tests/data) differ from
# a fresh computation here in the last bits: convolutions, matrix products and grid_sample take
# CPU-specific kernels (oneDNN/OpenBLAS pick code paths by instruction set and thread count). The
# fixtures' floats differed by at most 4.5e-8 (relative 3.8e-7) on a second machine of the same
# kind; rtol 1e-5 is float32's 1e-7 resolution with two orders of margin, atol 1e-7 covers values
# near zero. Integers and booleans (labels, predictions, correctness) stay exact.
STORED_FLOAT_RTOL = 1e-5
STORED_FLOAT_ATOL = 1e-7


def assert_matches_stored(stored: np.ndarray, fresh: np.ndarray, err_msg: str = "") -> None:
    """``stored`` (read from a fixture written on another machine) equals ``fresh``: integer and
    boolean arrays exactly, float arrays within ``STORED_FLOAT_RTOL``/``STORED_FLOAT_ATOL`` (see
    above), with NaN and ±inf in the same places."""
    stored, fresh = np.asarray(stored), np.asarray(fresh)
    assert stored.dtype == fresh.dtype, f"{err_msg}: dtype {stored.dtype} != {fresh.dtype}"
    assert stored.shape == fresh.shape, f"{err_msg}: shape {stored.shape} != {fresh.shape}"
    if np.issubdtype(stored.dtype, np.inexact):
        np.testing.assert_allclose(stored, fresh, rtol=STORED_FLOAT_RTOL, atol=STORED_FLOAT_ATOL,
                                   equal_nan=True, err_msg=err_msg)
    else:
        np.testing.assert_array_equal(stored, fresh, err_msg=err_msg)


def decided(scores: np.ndarray, margin: float) -> np.ndarray:
    """Where the top two of ``scores`` (last axis: classes) are more than ``margin`` apart: the
    predictions two float computations (another kernel, another runtime) must agree on; closer
    pairs are near-ties that rounding may break either way."""
    top2 = np.sort(np.asarray(scores), axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0] > margin


def plotly_array(value: object) -> np.ndarray:
    """A plotly figure's data array as numpy: plotly may hand back lists, numpy arrays or base64
    typed arrays (``{"bdata", "dtype", "shape"?}``)."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        if shape:
            arr = arr.reshape([int(n) for n in str(shape).split(",")] if isinstance(shape, str) else shape)
        return arr
    return np.asarray(value)


def interrupt_after(calls: int) -> Callable[[int, "int | None"], None]:
    """A progress callback for ``evaluate`` that raises KeyboardInterrupt on its ``calls``-th call
    (after that many chunks are written): an interrupted run, through the public API."""
    seen: list[int] = []

    def progress(done: int, n: int | None) -> None:
        seen.append(done)
        if len(seen) == calls:
            raise KeyboardInterrupt

    return progress

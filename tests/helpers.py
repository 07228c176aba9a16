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


# -- the command line under a memory cap (hostile-input tests) ------------------------------------
#: What a capped command may allocate beyond what its interpreter holds once orbitscope, torch, the
#: CLI and the loaders are imported: those imports alone map about 3.5 GB of address space, so an
#: RLIMIT_AS of 1 GiB set before them could not even load libtorch; the child sets it after them.
CLI_CAP_BYTES = 2**30
CLI_TIMEOUT_S = 120
_CAPPED_CHILD = """
import resource, sys
import orbitscope, orbitscope.cli, orbitscope.engine, orbitscope.data, orbitscope.data.meshes, orbitscope.data.piv
import cv2  # imported before the cap, as the loaders would
from orbitscope.cli import app
held = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (held + int(sys.argv[1]),) * 2)
sys.argv = ["orbitscope", *sys.argv[2:]]
app()
"""


def start_capped_cli(args: list[str], cwd: "str | object", env: "dict[str, str] | None" = None,
                     cap_bytes: int = CLI_CAP_BYTES, unset: "tuple[str, ...]" = ()) -> "subprocess.Popen[str]":
    """Start ``orbitscope ARGS`` in a subprocess that may allocate at most ``cap_bytes`` beyond its
    imports (``COLUMNS=400``: one message is one line, however long), with ``env`` on top of this
    process's environment less the variables in ``unset``; finish it with :func:`finish_capped_cli`."""
    import os
    import subprocess
    import sys

    inherited = {k: v for k, v in os.environ.items() if k not in unset}
    full_env = {**inherited, "COLUMNS": "400", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", _CAPPED_CHILD, str(int(cap_bytes)), *args], cwd=cwd,
                            env=full_env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish_capped_cli(proc: "subprocess.Popen[str]", timeout_s: float = CLI_TIMEOUT_S) -> "subprocess.CompletedProcess[str]":
    """Wait for a :func:`start_capped_cli` process; kill it and fail the test after ``timeout_s``."""
    import subprocess

    import pytest

    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"orbitscope ran past {timeout_s} s: {err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_capped_cli(args: list[str], cwd: "str | object", env: "dict[str, str] | None" = None,
                   timeout_s: float = CLI_TIMEOUT_S) -> "subprocess.CompletedProcess[str]":
    """``orbitscope ARGS`` under the memory cap (:func:`start_capped_cli`), failing the test after
    ``timeout_s``."""
    return finish_capped_cli(start_capped_cli(args, cwd, env), timeout_s)

"""Issue 38, defect 4: every size parameter of a data spec has an upper bound checked before
allocating (``orbitscope.data.limits``): ``meshes:`` (n, points), ``piv-synthetic:`` (n, size,
density, diameter, max-disp), ``modelnet:`` (points), ``npz:`` (declared array shapes) and
:func:`~orbitscope.data.scenes.digit_scenes` (n, size). The command-line cases run ``orbitscope``
in a subprocess under a memory cap and a time cap: exit status 2, one line naming the spec, the
parameter, the bound and how to raise it; never a MemoryError."""

from __future__ import annotations

import io
import math
import subprocess
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from orbitscope.data import parse_data_spec
from orbitscope.data.limits import MAX_DATA_BYTES, MAX_DATA_BYTES_ENV, MAX_DATA_ITEMS_ENV, data_byte_limit
from orbitscope.errors import DataError, SpecError

from helpers import finish_capped_cli, start_capped_cli

def evaluate_capped(spec: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``orbitscope evaluate --data SPEC`` (the data spec is read before the model) under the caps."""
    args = ["evaluate", "--model", "nomodule:factory", "--data", spec, "--orbit", "rotation90", "--task",
            "pointcloud", "--home", str(tmp_path / "home")]
    # the limits' variables are not inherited: their defaults apply unless ``env`` sets them
    proc = start_capped_cli(args, tmp_path, {"OMP_NUM_THREADS": "1", **(env or {})},
                            unset=(MAX_DATA_BYTES_ENV, MAX_DATA_ITEMS_ENV))
    return finish_capped_cli(proc)


@pytest.mark.slow
@pytest.mark.parametrize("spec, parameter", [
    ("meshes:test,n=1,points=300000000", "points=300000000"),  # 33.5 GiB in the issue
    ("piv-synthetic:n=1,size=100000", "size=100000x100000"),  # 74.5 GiB in the issue
    ("piv-synthetic:n=1000000000000", "n=1000000000000"),  # n = 10^12
    ("meshes:test,n=1000000000000", "n=1000000000000"),
])
def test_issue_specs_are_one_line_through_the_cli(spec: str, parameter: str, tmp_path: Path) -> None:
    proc = evaluate_capped(spec, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    for needle in (repr(spec), parameter, "over the data limit of", "ORBITSCOPE_MAX_DATA_"):
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("spec, env, parameter", [
    ("meshes:test,n=1,points=300000000", MAX_DATA_BYTES_ENV, "points=300000000"),
    ("piv-synthetic:n=1,size=100000", MAX_DATA_BYTES_ENV, "size=100000x100000"),
    ("piv-synthetic:n=1,density=1e300", MAX_DATA_BYTES_ENV, "density=1e+300"),
    ("piv-synthetic:n=1,max-disp=1e300", MAX_DATA_BYTES_ENV, "max-disp=1e+300"),
    ("piv-synthetic:n=1,size=512,diameter=64", MAX_DATA_BYTES_ENV, "diameter up to 64"),
    ("piv-synthetic:n=1000000000000", MAX_DATA_ITEMS_ENV, "n=1000000000000"),
    ("meshes:test,n=1000000000000", MAX_DATA_ITEMS_ENV, "n=1000000000000"),
    ("meshes:test,n=10000000,points=1", MAX_DATA_ITEMS_ENV, "n=10000000"),
])
def test_every_size_parameter_is_bounded(spec: str, env: str, parameter: str, monkeypatch) -> None:
    monkeypatch.delenv(MAX_DATA_BYTES_ENV, raising=False)
    monkeypatch.delenv(MAX_DATA_ITEMS_ENV, raising=False)
    if env == MAX_DATA_BYTES_ENV and "diameter" in spec:
        monkeypatch.setenv(MAX_DATA_BYTES_ENV, "100M")  # a small limit: 512², diameter 64 needs ≈ 2 GiB
    with pytest.raises(SpecError) as info:
        parse_data_spec(spec)
    text = str(info.value)
    assert "\n" not in text and len(text) < 600, text
    for needle in (repr(spec), parameter, "over the data limit", env):
        assert needle in text, (needle, text)


def test_mesh_bound_is_the_stated_formula_at_the_edge(monkeypatch) -> None:
    from orbitscope.data.meshes import CLOUD_BYTES_PER_POINT, available_classes

    k, n, points = len(available_classes()), 2, 64
    need = n * k * points * 12 + points * CLOUD_BYTES_PER_POINT  # float32 clouds + sampling one (docstring)
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(need))
    assert len(parse_data_spec(f"meshes:test,n={n},points={points}")) == n * k
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(need - 1))
    with pytest.raises(SpecError, match="points=64"):
        parse_data_spec(f"meshes:test,n={n},points={points}")
    monkeypatch.setenv(MAX_DATA_ITEMS_ENV, str(n * k - 1))
    monkeypatch.delenv(MAX_DATA_BYTES_ENV)
    with pytest.raises(SpecError, match=f"gives {n * k} items"):
        parse_data_spec(f"meshes:test,n={n},points={points}")


def reference_pair_bytes(h: int, w: int, density: float, d_max: float, max_disp: float, turbulence: bool) -> float:
    """The estimate as the docstring of synthetic_pair_bytes states it, written out again."""
    margin = math.ceil(2 * max_disp + d_max)
    particles = density * (w + 2 * margin) * (h + 2 * margin)
    window = 2 * (math.ceil(1.5 * d_max) + 1) + 1
    pad = window + 1
    total = 192 * (h + 2 * pad) * (w + 2 * pad) + particles * (22 * window ** 2 + 512)
    if turbulence:
        nx, ny = min(w // 8, (w - 1) // 2) + 1, 2 * min(h // 8, (h - 1) // 2) + 1
        total += particles * (12 * ny + 24 * nx)
    return total


def test_piv_bound_is_the_stated_formula_at_the_edge(monkeypatch) -> None:
    spec = "piv-synthetic:n=3,size=40x56,density=0.1,diameter=2..6,max-disp=3"
    need = reference_pair_bytes(40, 56, 0.1, 6.0, 3.0, True)
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(math.ceil(need)))
    assert len(parse_data_spec(spec)) == 3
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(math.floor(need) - 1))
    with pytest.raises(SpecError, match="size=40x56"):
        parse_data_spec(spec)
    # without the turbulence type the Fourier term is left out
    no_turb = reference_pair_bytes(40, 56, 0.1, 6.0, 3.0, False)
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(math.ceil(no_turb)))
    assert len(parse_data_spec(spec + ",types=uniform+rankine")) == 3


@pytest.mark.parametrize("flow_type, size, density, diameter, max_disp", [
    ("rankine", (48, 64), 0.05, (2.0, 4.0), 4.0),
    ("turbulence", (64, 96), 0.2, (2.0, 4.0), 2.0),
    ("backstep", (40, 40), 0.01, (20.0, 30.0), 6.0),
    ("uniform", (128, 32), 0.5, (1.0, 2.0), 10.0),
])
def test_piv_estimate_bounds_the_measured_peak(flow_type, size, density, diameter, max_disp) -> None:
    from orbitscope.data.piv import PIVPairs, ParticleOptions, synthetic_pair_bytes

    options = ParticleOptions(density=density, diameter=diameter)
    ds = PIVPairs(2, size, (flow_type,), 0, max_disp, options)
    ds.pair(0)  # warm caches
    tracemalloc.start()
    try:
        ds.pair(1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = synthetic_pair_bytes(size, options, max_disp, flow_type == "turbulence")
    assert peak <= estimate <= 15 * peak, (peak, estimate)


def test_mesh_estimate_bounds_the_measured_peak() -> None:
    from orbitscope.data.meshes import CLOUD_BYTES_PER_POINT, MeshClouds, available_classes

    MeshClouds("test", 1, 16)  # loads the meshes once (cached)
    k, n, points = len(available_classes()), 2, 20_000
    tracemalloc.start()
    try:
        MeshClouds("test", n, points)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = n * k * points * 12 + points * CLOUD_BYTES_PER_POINT
    assert peak <= estimate <= 2 * peak, (peak, estimate)


def npz_declaring(path: Path, shape: tuple[int, ...], payload: int) -> Path:
    """An npz whose x.npy header declares ``shape`` (float64) but holds ``payload`` zero bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    y = io.BytesIO()
    np.save(y, np.zeros(1, np.int64))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", header.getvalue() + bytes(payload))
        z.writestr("y.npy", y.getvalue())
    return path


def test_npz_header_declaring_more_than_it_holds(tmp_path: Path) -> None:
    path = npz_declaring(tmp_path / "huge.npz", (10**6, 10**6), 64)
    with pytest.raises(DataError) as info:
        parse_data_spec(f"npz:{path}")
    text = str(info.value)
    assert str(path) in text and "(1000000, 1000000)" in text and "holds 64 bytes" in text, text


def test_npz_over_the_byte_limit(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ok.npz"
    np.savez(path, x=np.zeros((10, 8, 8), np.uint8), y=np.arange(10))
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(640 + 80))  # exactly x and y
    assert len(parse_data_spec(f"npz:{path}")) == 10
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(640 + 79))
    with pytest.raises(DataError, match=f"{MAX_DATA_BYTES_ENV}="):
        parse_data_spec(f"npz:{path}")


def test_digit_scenes_bounds() -> None:
    from orbitscope.data.scenes import digit_scenes

    with pytest.raises(DataError, match="n=1000000000 gives"):
        digit_scenes(10**9)
    with pytest.raises(DataError, match="size=100000"):
        digit_scenes(2, size=100_000)
    with pytest.raises(DataError, match="smallest background"):
        digit_scenes(2, size=2_000)


def test_modelnet_points_bound(tmp_path: Path) -> None:
    from orbitscope.data.modelnet import ModelNetFolder

    folder = tmp_path / "mn" / "chair" / "test"
    folder.mkdir(parents=True)
    (folder / "chair_0001.off").write_text("OFF\n4 2 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n")
    assert len(ModelNetFolder(tmp_path / "mn", points=64)) == 1
    with pytest.raises(SpecError, match=r"points=1000000000000: .* over the data limit"):
        parse_data_spec(f"modelnet:{tmp_path / 'mn'},points=1000000000000")


@pytest.mark.parametrize("value, limit", [("8G", 8 * 2**30), ("500M", 500 * 2**20), ("1.5GiB", 3 * 2**29),
                                          ("123", 123), (" 2t ", 2 * 2**40), ("", MAX_DATA_BYTES)])
def test_byte_limit_values(value: str, limit: int, monkeypatch) -> None:
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, value)
    assert data_byte_limit() == limit


@pytest.mark.parametrize("value", ["lots", "-5", "0", "nan", "inf", "1e400"])
def test_bad_limit_values_are_one_line(value: str, monkeypatch) -> None:
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, value)
    with pytest.raises(SpecError, match=MAX_DATA_BYTES_ENV):
        parse_data_spec("meshes:test,n=1,points=16")
    monkeypatch.delenv(MAX_DATA_BYTES_ENV)
    monkeypatch.setenv(MAX_DATA_ITEMS_ENV, value)
    with pytest.raises(SpecError, match=MAX_DATA_ITEMS_ENV):
        parse_data_spec("piv-synthetic:n=2")

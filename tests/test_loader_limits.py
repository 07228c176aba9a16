"""Issue 38: file loaders refuse hostile files with one line (image files declaring huge sizes,
gzip IDX files declaring huge payloads, IDX headers without a file name) and read 16-bit images at
their depth. The command-line cases run ``orbitscope`` in a subprocess under a memory cap and a
time cap: exit status 2, one line on stderr naming the file, no traceback."""

from __future__ import annotations

import gzip
import io
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from orbitscope.data import ImageFolder, read_idx
from orbitscope.data.image_files import MAX_IMAGE_PIXELS, MAX_IMAGE_PIXELS_ENV, read_image
from orbitscope.data.piv import FlowFolder
from orbitscope.errors import DataError

from helpers import CLI_TIMEOUT_S, run_capped_cli

TIMEOUT_S = CLI_TIMEOUT_S


def run_capped(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``orbitscope ARGS`` under the memory cap of :func:`helpers.run_capped_cli`."""
    return run_capped_cli(args, cwd, env)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit status 2, one ``error:`` line holding ``needles``, no traceback and no warning (the
    CLI's other lines, a progress bar and a note on the model's weights, may come before it)."""
    lines = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower() or "warn" in ln.lower()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def png_declaring(path: Path, width: int, height: int) -> Path:
    """A tiny valid 1x1 grey PNG whose IHDR is patched to declare ``width`` x ``height`` (CRC fixed)."""
    buf = io.BytesIO()
    Image.new("L", (1, 1), 7).save(buf, format="PNG")
    raw = bytearray(buf.getvalue())
    assert raw[12:16] == b"IHDR"
    raw[16:24] = struct.pack(">II", width, height)
    raw[29:33] = struct.pack(">I", zlib.crc32(bytes(raw[12:29])) & 0xFFFFFFFF)
    path.write_bytes(bytes(raw))
    return path


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> Path:
    (tmp_path / "hb_models.py").write_text("import torch\n\ndef make():\n    return torch.nn.Sequential("
                                           "torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), "
                                           "torch.nn.Linear(3, 10))\n")
    return tmp_path


# ----------------------------------------------------------------------------------- defect 3


def test_the_bomb_png_is_what_the_issue_describes(tmp_path):
    p = png_declaring(tmp_path / "bomb.png", 12000, 12000)
    assert p.stat().st_size < 200
    with pytest.warns(Image.DecompressionBombWarning), Image.open(p) as im:  # Pillow alone only warns
        assert im.size == (12000, 12000)


@pytest.mark.parametrize("side", [12000, 20000])  # 20000² is over Pillow's own DecompressionBombError bound
def test_folder_refuses_an_image_declaring_a_huge_size_in_one_line(tmp_path, tiny_model_dir, side):
    png_declaring((tmp_path / "data" / "cat").mkdir(parents=True) or tmp_path / "data" / "cat" / "bomb.png",
                  side, side)
    t0 = time.perf_counter()
    proc = run_capped(["evaluate", "--model", "hb_models:make", "--data", f"folder:{tmp_path / 'data'}",
                       "--orbit", "rotation:0:90:90", "--home", str(tmp_path / "home")], cwd=tiny_model_dir)
    line = assert_one_line_error(proc, "bomb.png", f"{side}x{side}", MAX_IMAGE_PIXELS_ENV)
    assert f"{MAX_IMAGE_PIXELS:,}" in line
    assert time.perf_counter() - t0 < TIMEOUT_S


@pytest.mark.parametrize("side", [12000, 20000])
def test_flow_folder_refuses_frames_declaring_a_huge_size_in_one_line(tmp_path, side):
    data = tmp_path / "pairs"
    data.mkdir()
    png_declaring(data / "bomb_img1.png", side, side)
    png_declaring(data / "bomb_img2.png", side, side)
    proc = run_capped(["evaluate", "--model", "orbitscope.models.flow_estimators:Farneback", "--task", "flow",
                       "--data", f"flow-folder:{data}", "--orbit", "d4", "--home", str(tmp_path / "home")],
                      cwd=tmp_path)
    assert_one_line_error(proc, "bomb_img1.png", f"{side}x{side}", MAX_IMAGE_PIXELS_ENV)


def test_the_pixel_limit_is_raised_by_argument_or_environment(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    Image.fromarray(np.full((6, 5), 200, np.uint8)).save(tmp_path / "a" / "x.png")
    with pytest.raises(DataError, match=r"x\.png declares 6x5 \(HxW\) = 30 pixels, over the image limit of 29"):
        ImageFolder(tmp_path, max_pixels=29)
    assert ImageFolder(tmp_path, max_pixels=30)[0][0].shape == (3, 6, 5)
    monkeypatch.setenv(MAX_IMAGE_PIXELS_ENV, "29")
    with pytest.raises(DataError, match="over the image limit of 29"):
        ImageFolder(tmp_path)
    with pytest.raises(DataError, match="over the image limit of 29"):
        read_image(tmp_path / "a" / "x.png")
    monkeypatch.setenv(MAX_IMAGE_PIXELS_ENV, "30")
    assert ImageFolder(tmp_path)[0][0].shape == (3, 6, 5)
    monkeypatch.setenv(MAX_IMAGE_PIXELS_ENV, "lots")
    with pytest.raises(DataError, match=f"{MAX_IMAGE_PIXELS_ENV}='lots' is not a positive integer"):
        read_image(tmp_path / "a" / "x.png")


def test_flow_folder_checks_each_frame_before_decoding(tmp_path):
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "p_img1.png")
    png_declaring(tmp_path / "p_img2.png", 12000, 12000)
    with pytest.raises(DataError, match=r"p_img2\.png declares 12000x12000"):
        FlowFolder(tmp_path)[0]
    with pytest.raises(DataError, match=r"p_img2\.png declares 12000x12000 .* over the image limit of 1,000"):
        FlowFolder(tmp_path, max_pixels=1000)[0]


def test_a_raised_limit_above_pillows_own_bound_is_honoured(tmp_path):
    """Pillow refuses 20000² on its own (DecompressionBombError); with our limit raised, the file is
    opened and fails only where its (truncated) pixel data does, still as one DataError."""
    p = png_declaring(tmp_path / "big.png", 20000, 20000)
    with pytest.raises(DataError, match=r"big\.png: cannot decode the image"):
        read_image(p, max_pixels=20000 * 20000)
    assert Image.MAX_IMAGE_PIXELS is not None  # Pillow's own bound is back in force


# ----------------------------------------------------------------------------------- defect 8


def test_folder_reads_16_bit_pngs_at_their_depth(tmp_path):
    rng = np.random.default_rng(38)
    values = rng.integers(0, 65536, size=(2, 7, 9), dtype=np.uint16)
    (tmp_path / "c").mkdir()
    for i, v in enumerate(values):
        Image.fromarray(v).save(tmp_path / "c" / f"{i}.png")
    with Image.open(tmp_path / "c" / "0.png") as im:
        assert im.mode.startswith("I;16")  # a genuine 16-bit file
    for i, v in enumerate(values):
        expected = np.empty(v.shape, np.float32)  # plain-loop reference: value / 65535
        for r in range(v.shape[0]):
            for c in range(v.shape[1]):
                expected[r, c] = np.float32(float(v[r, c]) / 65535.0)
        grey = ImageFolder(tmp_path, grayscale=True)[i][0]
        assert grey.shape == (1, 7, 9) and grey.dtype.is_floating_point
        np.testing.assert_array_equal(grey[0].numpy(), expected)
        rgb = ImageFolder(tmp_path)[i][0]
        np.testing.assert_array_equal(rgb.numpy(), np.stack([expected] * 3))
    assert (ImageFolder(tmp_path, grayscale=True)[0][0] < 1).float().mean() > 0.99  # not saturated


def test_folder_and_flow_folder_read_a_16_bit_frame_identically(tmp_path):
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 65536, size=(2, 6, 8), dtype=np.uint16)
    (tmp_path / "pairs").mkdir()
    Image.fromarray(a).save(tmp_path / "pairs" / "s_img1.png")
    Image.fromarray(b).save(tmp_path / "pairs" / "s_img2.png")
    frames = FlowFolder(tmp_path / "pairs")[0][0].numpy()
    (tmp_path / "folder" / "x").mkdir(parents=True)
    Image.fromarray(a).save(tmp_path / "folder" / "x" / "s.png")
    grey = ImageFolder(tmp_path / "folder", grayscale=True)[0][0].numpy()
    np.testing.assert_array_equal(frames[0], grey)
    np.testing.assert_array_equal(frames[1, 0], (b.astype(np.float64) / 65535).astype(np.float32))


def test_8_bit_images_load_bit_identically_to_the_former_reading(tmp_path):
    """Good inputs compute what they did: uint8 / 255 in float32, resize on the 8-bit image."""
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, size=(10, 12, 3), dtype=np.uint8)
    (tmp_path / "k").mkdir()
    Image.fromarray(rgb).save(tmp_path / "k" / "a.png")
    got = ImageFolder(tmp_path)[0][0].numpy()
    np.testing.assert_array_equal(got, rgb.transpose(2, 0, 1).astype(np.float32) / np.float32(255))
    resized = ImageFolder(tmp_path, grayscale=True, size=(5, 7))[0][0].numpy()
    with Image.open(tmp_path / "k" / "a.png") as im:
        ref = np.asarray(im.convert("L").resize((7, 5), Image.Resampling.BILINEAR), np.uint8)
    np.testing.assert_array_equal(resized[0], ref.astype(np.float32) / np.float32(255))


# ----------------------------------------------------------------------------------- defect 9 and the IDX minor


def idx_header(dims: list[int], code: int = 0x08) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


def test_a_gzip_idx_declaring_a_huge_size_is_refused_before_inflating(tmp_path):
    """291 KB of gzip inflating to hundreds of MB, under a header declaring far more: refused from
    the header alone, under a memory cap far below the inflated size."""
    path = tmp_path / "bomb-idx3-ubyte.gz"
    zeros = gzip.compress(bytes(2**22), compresslevel=9)  # gzip members concatenate: 150 x 4 MiB of zeros
    path.write_bytes(gzip.compress(idx_header([60000, 28000, 28])) + zeros * 150)  # 47 GB declared
    assert path.stat().st_size < 1_000_000
    code = textwrap.dedent(f"""
        import resource, sys
        from orbitscope.data import read_idx
        from orbitscope.errors import DataError
        held = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (held + 2**28, held + 2**28))  # 256 MiB beyond the imports
        try:
            read_idx({str(path)!r})
        except DataError as exc:
            print(exc)
            sys.exit(2)
    """)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stdout and "47,040,000,000" in proc.stdout, proc.stdout
    assert time.perf_counter() - t0 < 30


def test_a_gzip_idx_whose_stream_is_longer_than_its_header_says_is_refused_without_inflating_it_all(tmp_path):
    path = tmp_path / "long.gz"
    with gzip.open(path, "wb") as gz:
        gz.write(idx_header([2, 3]))
        gz.write(bytes(6 + 2**24))  # 16 MiB more than declared
    with pytest.raises(DataError, match=r"long\.gz: oversized IDX payload for shape \(2, 3\) of uint8: "
                                        r"expected 6 bytes, found 16777222"):
        read_idx(path)


def test_gzip_idx_size_limit_and_its_override(tmp_path):
    path = tmp_path / "ok.gz"
    data = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    with gzip.open(path, "wb") as gz:
        gz.write(idx_header([2, 3, 4]) + data.tobytes())
    np.testing.assert_array_equal(read_idx(path), data)
    with pytest.raises(DataError, match=r"ok\.gz: its header declares shape \(2, 3, 4\) of uint8 = 24 bytes, "
                                        r"over the limit of 23 bytes"):
        read_idx(path, max_bytes=23)
    np.testing.assert_array_equal(read_idx(path, max_bytes=24), data)


def test_a_gzip_idx_declaring_more_than_its_compressed_size_can_hold_is_refused(tmp_path):
    path = tmp_path / "short.gz"
    with gzip.open(path, "wb") as gz:
        gz.write(idx_header([1000, 1000, 100]) + bytes(100))  # 100 MB declared, 100 bytes given
    with pytest.raises(DataError, match=r"short\.gz: truncated IDX payload: the header declares shape "
                                        r"\(1000, 1000, 100\) .* more than a gzip file of \d+ bytes can hold"):
        read_idx(path, max_bytes=2**40)


def test_an_idx_header_of_255_dimensions_names_the_file(tmp_path):
    for name, opener in (("dims.idx", open), ("dims.gz", gzip.open)):
        with opener(tmp_path / name, "wb") as fh:
            fh.write(bytes([0, 0, 0x08, 255]) + struct.pack(">255I", *([1] * 255)) + b"\x07")
        with pytest.raises(DataError) as err:
            read_idx(tmp_path / name)
        assert str(tmp_path / name) in str(err.value), str(err.value)


# ----------------------------------------------------------------------------------- .flo files (flow-folder)


def test_a_flo_file_is_measured_before_it_is_read(tmp_path):
    """A 4 GiB (sparse) file whose header declares 2x2: refused from its header and size, under a
    memory cap far below the file's size."""
    path = tmp_path / "big.flo"
    with open(path, "wb") as fh:
        fh.write(struct.pack("<fii", 202021.25, 2, 2))
        fh.truncate(4 * 2**30)
    code = textwrap.dedent(f"""
        import resource, sys
        from orbitscope.data.piv import read_flo
        from orbitscope.errors import DataError
        held = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (held + 2**28, held + 2**28))
        try:
            read_flo({str(path)!r})
        except DataError as exc:
            print(exc)
            sys.exit(2)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{path}: a 2x2 .flo file has 44 bytes, this one {4 * 2**30} (trailing data)" in proc.stdout

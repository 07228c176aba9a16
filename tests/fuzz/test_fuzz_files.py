"""Fuzzing the file loaders (issue 38): COCO JSON, IDX (plain and gzip), image folders, flow folders,
``.flo`` files, OFF meshes, npz files and sweep files (YAML and TOML): random truncations, wrong
types, huge declared sizes, NaN/inf and deep nesting. Each case is written to its own folder and
loaded in the capped worker (``fuzzing.py``): a correct load, or one line naming the file."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from fuzzing import assert_clean, fuzz_settings

_counter = itertools.count()


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-cases")


def new_case(root: Path) -> Path:
    """A fresh folder with a unique name (messages must name it or a file in it)."""
    folder = root / f"case{next(_counter):05d}"
    folder.mkdir()
    return folder


def cut(data: bytes, keep: float | None) -> bytes:
    """``data`` truncated to the share ``keep`` (None: whole)."""
    return data if keep is None else data[: int(len(data) * keep)]


KEEP = st.one_of(st.none(), st.floats(0, 1))
#: JSON-like values, nested, with non-finite floats and huge integers
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)


def png_bytes(mode: str = "L", size: tuple[int, int] = (6, 5)) -> bytes:
    buf = io.BytesIO()
    arr = np.arange(size[0] * size[1] * (3 if mode == "RGB" else 1)) % 200
    img = Image.fromarray(arr.astype(np.uint16 if mode == "I;16" else np.uint8).reshape(
        (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])))
    img.save(buf, format="PNG")
    return buf.getvalue()


def png_declaring(width: int, height: int) -> bytes:
    raw = bytearray(png_bytes())
    raw[16:24] = struct.pack(">II", width, height)
    raw[29:33] = struct.pack(">I", zlib.crc32(bytes(raw[12:29])) & 0xFFFFFFFF)
    return bytes(raw)


IMAGE_FILE = st.one_of(
    st.sampled_from(["L", "RGB", "I;16"]).map(png_bytes),
    st.builds(png_declaring, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
    st.builds(cut, st.sampled_from(["L", "RGB"]).map(png_bytes), st.floats(0, 0.99)),
    st.binary(max_size=64),
)
DEEP = st.integers(1, 200_000).map(lambda d: "[" * d + "]" * d)


# --------------------------------------------------------------------------- COCO


def coco_base() -> dict:
    return {"images": [{"id": 1, "file_name": "a.png", "width": 6, "height": 5}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 3, 2]}],
            "categories": [{"id": 1, "name": "thing"}]}


def mutate_coco(doc: dict, where: str, key: str, value: object, drop: bool) -> dict:
    entry = doc if where == "top" else doc[where][0]
    if drop:
        entry.pop(key, None)
    else:
        entry[key] = value
    return doc


COCO_TEXT = st.one_of(
    st.builds(lambda d, keep: cut(json.dumps(d).encode(), keep),
              st.builds(mutate_coco, st.just(None).map(lambda _: coco_base()),
                        st.sampled_from(["top", "images", "annotations", "categories"]),
                        st.sampled_from(["id", "bbox", "category_id", "image_id", "file_name", "width", "height",
                                         "name", "images", "annotations", "categories", "iscrowd", "area"]),
                        JSONISH, st.booleans()), KEEP),
    JSONISH.map(lambda v: json.dumps(v).encode()),
    DEEP.map(str.encode),
)


@fuzz_settings()
@given(text=COCO_TEXT)
def test_coco(fuzz_worker, cases: Path, text: bytes) -> None:
    folder = new_case(cases)
    (folder / "a.png").write_bytes(png_bytes("RGB"))
    path = folder / "ann.json"
    path.write_bytes(text)
    case = {"target": "coco", "path": str(path)}
    assert_clean(fuzz_worker.load(case), case, path.name, folder.name)


# --------------------------------------------------------------------------- IDX


IDX_HEADER = st.builds(
    lambda code, dims, payload, gz, keep: (code, dims, payload, gz, keep),
    st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0xFF]),
    st.one_of(st.lists(st.integers(0, 40), max_size=4), st.lists(st.integers(0, 2**32 - 1), max_size=4),
              st.integers(0, 255).map(lambda n: [1] * n)),
    st.binary(max_size=512), st.booleans(), KEEP)


@fuzz_settings()
@given(params=IDX_HEADER)
def test_idx(fuzz_worker, cases: Path, params) -> None:
    code, dims, payload, gz, keep = params
    raw = bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload
    if gz:
        raw = gzip.compress(raw)
    path = new_case(cases) / "images-idx3-ubyte"
    path.write_bytes(cut(raw, keep))
    case = {"target": "idx", "path": str(path)}
    assert_clean(fuzz_worker.load(case), case, path.name)


# --------------------------------------------------------------------------- image folders, flow folders, .flo


@fuzz_settings()
@given(files=st.lists(st.tuples(st.sampled_from(["cat", "dog", ".hidden", "x y"]),
                                st.sampled_from(["a.png", "b.png", "c.jpg", "d.txt", "e.PNG"]), IMAGE_FILE),
                      max_size=4))
def test_image_folder(fuzz_worker, cases: Path, files) -> None:
    root = new_case(cases)
    for cls, name, data in files:
        (root / cls).mkdir(exist_ok=True)
        (root / cls / name).write_bytes(data)
    case = {"target": "folder", "path": str(root)}
    assert_clean(fuzz_worker.load(case), case, root.name)


def flo_bytes(magic: bytes, w: int, h: int, values: list[float], keep: float | None) -> bytes:
    return cut(magic + struct.pack("<ii", w, h) + np.asarray(values, "<f4").tobytes(), keep)


FLO = st.builds(flo_bytes, st.sampled_from([b"PIEH", b"PIEX", b""]),
                st.one_of(st.integers(-2, 6), st.integers(2**20, 2**31 - 1)),
                st.one_of(st.integers(-2, 6), st.integers(2**20, 2**31 - 1)),
                st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=80), KEEP)


@fuzz_settings()
@given(data=FLO)
def test_flo(fuzz_worker, cases: Path, data: bytes) -> None:
    path = new_case(cases) / "pair_flow.flo"
    path.write_bytes(data)
    case = {"target": "flo", "path": str(path)}
    assert_clean(fuzz_worker.load(case), case, path.name)


@fuzz_settings()
@given(first=IMAGE_FILE, second=IMAGE_FILE, flo=st.one_of(st.none(), FLO),
       names=st.sampled_from([("p_img1.png", "p_img2.png"), ("p_a.png", "p_b.png"), ("p_img1.png", "q_img2.png")]))
def test_flow_folder(fuzz_worker, cases: Path, first: bytes, second: bytes, flo, names) -> None:
    root = new_case(cases)
    (root / names[0]).write_bytes(first)
    (root / names[1]).write_bytes(second)
    if flo is not None:
        (root / "p_flow.flo").write_bytes(flo)
    case = {"target": "flow_folder", "path": str(root)}
    assert_clean(fuzz_worker.load(case), case, root.name)


# --------------------------------------------------------------------------- OFF meshes and npz files


NUM_TEXT = st.one_of(st.integers(-3, 10).map(str), st.integers(10**6, 10**30).map(str),
                     st.sampled_from(["nan", "inf", "-inf", "1e400", "x", "", "#"]),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr))
OFF_TEXT = st.builds(
    lambda head, counts, rows, keep: cut((head + " ".join(counts) + "\n" + "\n".join(" ".join(r) for r in rows)).encode(),
                                         keep),
    st.sampled_from(["OFF\n", "OFF", "COFF\n", "NOFF\n", "OFX\n", ""]), st.lists(NUM_TEXT, max_size=4),
    st.lists(st.lists(NUM_TEXT, max_size=6), max_size=8), KEEP)


@fuzz_settings()
@given(text=st.one_of(OFF_TEXT, st.binary(max_size=64)))
def test_off(fuzz_worker, cases: Path, text: bytes) -> None:
    path = new_case(cases) / "chair_0001.off"
    path.write_bytes(text)
    case = {"target": "off", "path": str(path)}
    assert_clean(fuzz_worker.load(case), case, path.name)


def npz_bytes(shape: list[int], descr: str, payload: int, keep: float | None, y_ok: bool) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    y = io.BytesIO()
    n = shape[0] if shape else 1
    np.save(y, np.zeros(n if y_ok and n <= 64 else 3, np.int64))  # labels matching x (when small) or not
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("x.npy", header.getvalue() + bytes(payload))
        z.writestr("y.npy", y.getvalue())
    return cut(out.getvalue(), keep)


NPZ = st.builds(npz_bytes, st.one_of(st.lists(st.integers(0, 5), max_size=4),
                                     st.lists(st.integers(0, 2**40), min_size=1, max_size=4)),
                st.sampled_from(["|u1", "<f4", "<f8", "|O", "<c16", "|V8", "<U3"]), st.integers(0, 2000), KEEP,
                st.booleans())


@fuzz_settings()
@given(data=st.one_of(NPZ, st.binary(max_size=64)))
def test_npz(fuzz_worker, cases: Path, data: bytes) -> None:
    path = new_case(cases) / "arrays.npz"
    path.write_bytes(data)
    case = {"target": "npz", "path": str(path)}
    assert_clean(fuzz_worker.load(case), case, path.name)


# --------------------------------------------------------------------------- sweep files


MODEL = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.text(max_size=6), JSONISH),
    "factory": st.one_of(st.just("fuzz_no_such_module:make"), JSONISH),
    "path": st.one_of(st.just("missing.safetensors"), JSONISH),
    "weights": JSONISH, "kwargs": JSONISH})
SPEC_LIST = st.one_of(st.lists(st.sampled_from(["mnist-subset:test@2", "rotation:0:90:90", "nope", "meshes:n=1"]),
                               max_size=3), JSONISH)
SWEEP = st.fixed_dictionaries({}, optional={
    "models": st.one_of(st.lists(MODEL, max_size=3), JSONISH), "data": SPEC_LIST, "orbits": SPEC_LIST,
    "tasks": st.one_of(st.lists(st.sampled_from(["classification", "detection", "nope"]), max_size=2), JSONISH),
    "defaults": st.one_of(st.fixed_dictionaries({}, optional={"batch_size": JSONISH}), JSONISH),
    "runs": st.one_of(st.lists(st.dictionaries(st.sampled_from(["model", "data", "orbit", "task", "options"]),
                                               JSONISH, max_size=5), max_size=2), JSONISH),
    "store": JSONISH, "executor": JSONISH, "name": JSONISH})


def laughs(depth: int, width: int) -> str:
    lines = [f'a0: &a0 [{", ".join(["lol"] * width)}]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
    return "\n".join(lines) + f"\nmodels: [{{name: m, factory: 'x:y'}}]\ndata: *a{depth - 1}\n"


def toml_of(doc: dict) -> str:
    """A crude TOML rendering (top-level keys as JSON values: valid TOML for strings, numbers, arrays
    of scalars; anything else is a syntax error the reader must report)."""
    return "\n".join(f"{k} = {json.dumps(v)}" for k, v in doc.items() if not isinstance(v, dict)) + "\n"


SWEEP_FILE = st.one_of(
    st.builds(lambda d, keep: (".yaml", cut(yaml.safe_dump(d).encode(), keep)), SWEEP, KEEP),
    st.builds(lambda d, keep: (".toml", cut(toml_of(d).encode(), keep)), SWEEP, KEEP),
    st.builds(lambda d, w: (".yaml", laughs(d, w).encode()), st.integers(1, 10), st.integers(1, 12)),
    st.builds(lambda text: (".yaml", text.encode()), DEEP),
    st.builds(lambda raw, ext: (ext, raw), st.binary(max_size=64), st.sampled_from([".yaml", ".toml", ".yml"])),
)


@fuzz_settings()
@given(sweep=SWEEP_FILE)
def test_sweep_files(fuzz_worker, cases: Path, sweep) -> None:
    ext, data = sweep
    path = new_case(cases) / f"sweep{ext}"
    path.write_bytes(data)
    case = {"target": "sweep", "path": str(path)}
    assert_clean(fuzz_worker.load(case), case, path.name)

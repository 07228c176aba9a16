"""Bad inputs a new user is likely to give get one-line errors that say what is wrong and what to do.

Each case here used to be accepted silently (``linf:0.03+``, labels outside the model's classes,
channels-last images, ``@-3``), or to fail with a message that did not help ("header too large",
"unknown data spec" for a bad ``@N``, an ``AttributeError`` for a non-string spec).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from orbitscope.data.datasets import ArrayDataset, parse_data_spec
from orbitscope.errors import DataError, ModelError, OrbitscopeError, SpecError
from orbitscope.models.loading import load_model, load_state_dict_file, load_user_model, read_metadata
from orbitscope.robust.samplers import parse_perturbation, sampler_from_spec
from orbitscope.robust.sequential import make_test


def raises(exc_type, call, *fragments):
    """``call()`` raises ``exc_type`` with a one-line message containing every fragment."""
    with pytest.raises(exc_type) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg, msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


# --------------------------------------------------------------------------- perturbation specs


@pytest.mark.parametrize("spec", ["linf:0.03+", "+linf:0.03", "linf:0.03++rotation:5", "rotation:15 + ", "linf:0.03+ +l2:1"])
def test_empty_perturbation_factor_is_refused(spec: str) -> None:
    # used to be accepted silently as if the stray '+' were not there
    raises(SpecError, lambda: parse_perturbation(spec), "empty factor", "'+'")


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ("linf:nan", ["'nan' is not a finite number", "linf:EPS"]),
        ("linf:inf", ["not a finite number"]),
        ("l2:1e400", ["not a finite number"]),  # used to raise OverflowError (a traceback on the CLI)
        ("scale:0.9:nan", ["not a finite number", "scale:LO:HI"]),
        ("linf:-0.03", ["eps must be positive"]),
        ("gaussian:0", ["sigma must be positive"]),
        ("linf:8", ["at most 1", "8/255"]),  # 8 meant on the 0..255 scale: used to be accepted
        ("linf:", ["empty number"]),
        ("linf::0.1", ["empty number"]),
        ("gaussian:1/0", ["divides by zero"]),
        ("linf:0.1:8bit:8bit", ["repeats the option"]),  # used to be accepted
        ("shift:2:continuous:continuous", ["repeats the option"]),
        ("l2:0.1:8bit", ["has no option '8bit'", "l2:EPS"]),
        ("scale:0.9", ["takes 2 number(s), got 1", "scale:LO:HI"]),
        ("blur:3", ["unknown perturbation 'blur'", "linf:EPS[:8bit]"]),
        ("linf:oops", ["cannot read the number 'oops'"]),
    ],
)
def test_malformed_perturbation_specs(spec: str, fragments: list[str]) -> None:
    raises(SpecError, lambda: parse_perturbation(spec), *fragments)


def test_sampler_spec_errors() -> None:
    raises(SpecError, lambda: sampler_from_spec("linf:0.1"), "parse_perturbation('linf:0.1')")
    raises(SpecError, lambda: sampler_from_spec({"kind": "product"}), "'factors'")  # was a KeyError
    raises(SpecError, lambda: sampler_from_spec({"kind": "linf", "eps": "abc"}), "eps must be a number")
    raises(SpecError, lambda: sampler_from_spec({"kind": "nope"}), "unknown perturbation 'nope'", "linf")


def test_errors_keep_their_builtin_bases() -> None:
    for call in (lambda: parse_perturbation("linf:0.03+"), lambda: make_test("nope", kappa=0.1, alpha=0.1),
                 lambda: parse_data_spec("cifar10")):
        with pytest.raises(ValueError):
            call()


def test_test_names() -> None:
    raises(SpecError, lambda: make_test("nope", kappa=0.01, alpha=0.01), "choose one of", "sprt")
    assert make_test("SPRT", kappa=0.01, alpha=0.01).name == "sprt"  # case-insensitive, like perturbations


# --------------------------------------------------------------------------- certify: labels


class TenClasses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def _certify(labels, **kw):
    from orbitscope.robust.certify import certify

    torch.manual_seed(0)
    model = TenClasses()
    x = torch.rand(len(labels), 1, 4, 4)
    return certify(model, (x, torch.as_tensor(labels)), "linf:0.01", budget=32, kappa=0.1, alpha=0.1, **kw)


def test_certify_labels_outside_the_model_classes() -> None:
    # used to come out "not robust" (every input counted as misclassified), silently
    raises(DataError, lambda: _certify([3, 12, 1]), "label 12", "input 1", "10 scores", "0..9", "label_free=True")
    raises(DataError, lambda: _certify([10, 0]), "label 10", "0..9")
    res = _certify([3, 12, 1], label_free=True)  # label-free mode needs no labels: no check there
    assert res.n_inputs == 3


def test_certify_label_types() -> None:
    raises(DataError, lambda: _certify(torch.tensor([1.5, 0.0])), "integer class indices", "1.5")  # was truncated to 1
    raises(DataError, lambda: _certify(torch.eye(3, 10)), "one-hot", "argmax")
    assert _certify(torch.tensor([1.0, 2.0])).n_inputs == 2  # whole-number floats are fine


# --------------------------------------------------------------------------- model files


@pytest.fixture()
def small(tmp_path: Path):
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    return model, tmp_path


def _factory_module(tmp_path: Path, monkeypatch) -> str:
    (tmp_path / "badinputs_factory.py").write_text(
        "from torch import nn\ndef make():\n    return nn.Sequential(nn.Flatten(), nn.Linear(4, 2))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "badinputs_factory:make"


@pytest.mark.parametrize("legacy", [False, True])
def test_pickle_named_safetensors(small, monkeypatch, legacy: bool) -> None:
    model, tmp = small
    path = tmp / "w.safetensors"
    torch.save(model.state_dict(), path, _use_new_zipfile_serialization=not legacy)
    assert path.read_bytes()[:4] == b"PK\x03\x04" if not legacy else path.read_bytes()[:1] == b"\x80"
    spec = _factory_module(tmp, monkeypatch)
    # each used to fail with safetensors' "Error while deserializing header: header too large"
    for call in (lambda: load_state_dict_file(path), lambda: read_metadata(path), lambda: load_model(path),
                 lambda: load_user_model(str(path)), lambda: load_user_model(spec, weights=path)):
        msg = raises(SpecError, call, "PyTorch pickle (torch.save) file, not safetensors", "save_file(torch.load(",
                     "rename it to .pt")
        assert "header too large" not in msg


def test_pickle_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"

    class Boom:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    path = tmp_path / "evil.safetensors"
    torch.save({"w": Boom()}, path)
    raises(SpecError, lambda: load_state_dict_file(path), "PyTorch pickle")
    assert not marker.exists()


def test_broken_safetensors_files(small) -> None:
    model, tmp = small
    good = tmp / "good.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(good))
    data = good.read_bytes()
    cases = {"empty": (b"", ModelError, "is empty (0 bytes)"),
             "short": (data[:5], ModelError, "truncated (5 bytes)"),
             "header": (data[:20], ModelError, "truncated"),
             "tensors": (data[:-7], ModelError, "truncated"),
             "text": (b"hello, not a model at all", SpecError, "not a safetensors file")}
    for name, (content, exc, fragment) in cases.items():
        p = tmp / f"{name}.safetensors"
        p.write_bytes(content)
        for fn in (load_state_dict_file, read_metadata, load_model):
            raises(exc, lambda: fn(p), fragment, str(p))  # noqa: B023 (called at once)
    assert set(load_state_dict_file(good)) == {"1.weight", "1.bias"}


def test_weights_told_by_content_not_extension(small) -> None:
    model, tmp = small
    misnamed = tmp / "weights.pt"  # a safetensors file named .pt: read as safetensors
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(misnamed))
    assert set(load_state_dict_file(misnamed)) == {"1.weight", "1.bias"}
    empty = tmp / "empty.pt"
    empty.write_bytes(b"")
    raises(ModelError, lambda: load_state_dict_file(empty), "is empty")
    raises(ModelError, lambda: load_user_model(str(empty)), "is empty")


def test_python_file_as_model(tmp_path: Path) -> None:
    src = tmp_path / "mynet.py"
    src.write_text("from torch import nn\ndef make():\n    return nn.Linear(2, 2)\n")
    raises(SpecError, lambda: load_user_model(str(src)), "Python source", "'mynet:factory'", "PYTHONPATH")


def test_pickle_named_pt_has_no_rename_hint(small) -> None:
    model, tmp = small
    path = tmp / "w.pt"
    torch.save(model.state_dict(), path)
    msg = raises(SpecError, lambda: load_model(path), "PyTorch pickle", "load_user_model('package.module:factory'")
    assert "rename" not in msg


# --------------------------------------------------------------------------- data specs


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ("mnist-subset@0", ["must be positive"]),
        ("mnist-subset@-3", ["must be a positive integer", "'@-3'"]),  # used to say "unknown data spec"
        ("mnist-subset@2.5", ["must be a positive integer", "'@2.5'"]),
        ("mnist-subset@", ["must be a positive integer"]),
        ("mnist-subset@abc", ["'@abc'", "only one @N suffix"]),
        ("mnist-subset@10@5", ["'@10'", "only one @N suffix"]),
        ("cifar10", ["unknown data spec 'cifar10'", "accepted forms", "npz:PATH"]),
        ("npz:", ["nothing after ':'", "accepted forms"]),
        ("mnist-subset:", ["nothing after ':'"]),
        ("folder", ["expected folder:PATH"]),
        ("idx:only-one-file", ["idx:IMAGES_PATH,LABELS_PATH"]),
        ("mnist-subset:valid", ["split must be one of", "'valid'"]),
        ("", ["empty data spec", "accepted forms"]),
    ],
)
def test_malformed_data_specs(spec: str, fragments: list[str]) -> None:
    raises(SpecError, lambda: parse_data_spec(spec), *fragments)


def test_data_spec_not_a_string() -> None:
    # used to be an AttributeError ('PosixPath' object has no attribute 'strip'): a traceback on the CLI
    raises(SpecError, lambda: parse_data_spec(Path("x.npz")), "a data spec is a string", "'npz:x.npz'")
    raises(SpecError, lambda: parse_data_spec(None), "a data spec is a string")


def test_data_spec_paths(tmp_path: Path) -> None:
    raises(FileNotFoundError, lambda: parse_data_spec(f"npz:{tmp_path / 'nope.npz'}"), "npz file not found",
           "np.savez(PATH, x=images, y=labels)")
    raises(FileNotFoundError, lambda: parse_data_spec(f"idx:{tmp_path / 'a'},{tmp_path / 'b'}"),
           "IDX images file not found", "idx:IMAGES_PATH,LABELS_PATH")
    raises(FileNotFoundError, lambda: parse_data_spec(f"folder:{tmp_path / 'nope'}"), "image folder not found")
    raises(IsADirectoryError, lambda: parse_data_spec(f"npz:{tmp_path}"), "is a directory", "folder:PATH")
    afile = tmp_path / "a.txt"
    afile.write_text("x")
    raises(NotADirectoryError, lambda: parse_data_spec(f"folder:{afile}"), "is a file, not an image folder")


def test_npz_contents(tmp_path: Path) -> None:
    text = tmp_path / "text.npz"
    text.write_text("hello")  # used to say "This file contains pickled (object) data"
    raises(DataError, lambda: parse_data_spec(f"npz:{text}"), "not an .npz file", "np.savez")
    npy = tmp_path / "arr.npz"
    with open(npy, "wb") as fh:
        np.save(fh, np.zeros((2, 4, 4), np.uint8))  # used to be a TypeError (context manager protocol)
    raises(DataError, lambda: parse_data_spec(f"npz:{npy}"), "a single .npy array")
    obj = tmp_path / "obj.npz"
    np.savez(obj, x=np.array([object()], dtype=object), y=np.zeros(1, np.int64))
    raises(DataError, lambda: parse_data_spec(f"npz:{obj}"), str(obj), "object arrays")
    col = tmp_path / "col.npz"
    np.savez(col, x=np.zeros((3, 4, 4), np.uint8), y=np.array([[0], [1], [2]]))
    raises(DataError, lambda: parse_data_spec(f"npz:{col}"), "reshape(-1)")


def test_image_folder_bad_files(tmp_path: Path) -> None:
    from PIL import Image

    from orbitscope.data.datasets import ImageFolder

    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        Image.new("L", (4, 4)).save(tmp_path / cls / "0.png")
    (tmp_path / "b" / "1.png").write_bytes(b"not a png")
    ds = ImageFolder(tmp_path)
    # used to be PIL's UnidentifiedImageError (an OSError: a traceback on the CLI)
    raises(DataError, lambda: ds[2], "1.png", "not a readable image", "replace or remove the file")
    raises(SpecError, lambda: ImageFolder(tmp_path, size=8), "size must be a pair (H, W)", "size=(8, 8)")  # was a TypeError


# --------------------------------------------------------------------------- ArrayDataset

IMGS = np.zeros((4, 1, 5, 5), np.uint8)


@pytest.mark.parametrize(
    "images, labels, kwargs, fragments",
    [
        (IMGS, np.zeros((4, 1), np.int64), {}, ["got a column of shape (4, 1)", "labels.reshape(-1)"]),
        (IMGS, np.eye(4, 10, dtype=np.int64), {}, ["one-hot", "labels.argmax(axis=1)"]),
        (IMGS, np.array([0.0, 1.0, 2.0, 3.0]), {}, ["whole numbers", "labels.astype(np.int64)"]),
        (IMGS, np.array([0.5, 1.0, 2.0, 3.0]), {}, ["not whole numbers"]),
        (IMGS, np.array(["a", "b", "a", "b"]), {}, ["np.unique(labels, return_inverse=True)"]),
        (IMGS, np.array([0, -1, 1, 2]), {}, ["labels must be >= 0"]),
        (np.zeros((4, 5, 5, 3), np.uint8), np.zeros(4, np.int64), {}, ["channels-last", "transpose(0, 3, 1, 2)"]),
        (np.zeros((4, 25), np.uint8), np.zeros(4, np.int64), {}, ["flattened", "reshape"]),
        (np.zeros((4, 1, 1, 5, 5), np.uint8), np.zeros(4, np.int64), {}, ["(N,H,W) or (N,C,H,W)"]),
        (np.zeros((4, 5, 5), np.int64), np.zeros(4, np.int64), {}, ["uint8 (0..255) or floating point", "astype"]),
        (np.full((4, 5, 5), 200.0), np.zeros(4, np.int64), {}, ["[0, 1]", "divide by 255"]),
        (IMGS, np.array([0, 1, 1, 0]), {"classes": "ab"}, ["list of class names"]),
        (IMGS, np.array([0, 1, 2, 3]), {"classes": ["a", "b"]}, ["label 3 out of range for 2 classes"]),
    ],
)
def test_array_dataset_bad_inputs(images, labels, kwargs, fragments) -> None:
    raises(DataError, lambda: ArrayDataset(images, labels, **kwargs), *fragments)


def test_array_dataset_methods() -> None:
    ds = ArrayDataset(IMGS, np.array([0, 1, 1, 0]))
    raises(DataError, lambda: ds.stratified(0), "per_class must be a positive integer")
    raises(DataError, lambda: ds.stratified(-1), "per_class")  # used to return 2 items (a [: -1] slice)
    raises(DataError, lambda: ds.subset([7]), "subset index 7 is out of range")  # was an IndexError
    assert len(ds.stratified(1)) == 2 and len(ds.subset([3, 0])) == 2


def test_every_error_here_is_an_orbitscope_error_or_a_file_error() -> None:
    for cls in (DataError, ModelError, SpecError):
        assert issubclass(cls, OrbitscopeError)

"""Tests for orbitscope.models.loading: safetensors round trips, user models (factory, TorchScript, torch.export)."""

from __future__ import annotations

import json
import shutil
import textwrap
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from orbitscope.errors import ModelError, SpecError
from safetensors.torch import save_file
from torch import nn

from orbitscope.models.loading import (
    StateDictMismatchError,
    describe_model,
    load_model,
    load_user_model,
    read_metadata,
    save_model,
)
from orbitscope.models import ReferenceCNN, model_hash

SMALL = dict(widths=(4, 4, 8, 8, 8, 8), hidden=16)

USER_MODULE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))

def make(width=4):
    return Net(width)

def not_a_module():
    return 42

NOT_CALLABLE = 3

class Zoo:
    make = staticmethod(make)
"""




@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Write a uniquely named user module into tmp_path, importable via sys.path; return its name."""
    name = f"userzoo_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    import sys

    sys.modules.pop(name, None)


def _trained_like(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter and BN buffer non-default values, return the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]:
            t.copy_(torch.rand(t.shape, generator=g) + 0.5 if t.dim() == 1 else torch.randn(t.shape, generator=g) * 0.3)
    return model.eval()


def _same_outputs(a: nn.Module, b: nn.Module) -> None:
    x = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        ya, yb = a(x), b(x)
    assert ya.shape == (3, 10)
    torch.testing.assert_close(ya, yb, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- save_model / load_model


def test_save_load_roundtrip_with_metadata(tmp_path: Path) -> None:
    m = _trained_like(ReferenceCNN(**SMALL))
    path = save_model(m, tmp_path / "sub" / "m.safetensors", metadata={"note": "hi", "acc": 0.5, "d": {"a": [1]}})
    assert path.is_file() and [p.name for p in path.parent.iterdir()] == ["m.safetensors"]
    meta = read_metadata(path)
    assert json.loads(meta["config"]) == m.config
    assert meta["note"] == "hi" and json.loads(meta["acc"]) == 0.5 and json.loads(meta["d"]) == {"a": [1]}
    loaded = load_model(path)
    assert isinstance(loaded, ReferenceCNN) and not loaded.training
    assert model_hash(loaded) == model_hash(m)
    _same_outputs(m, loaded)


def test_save_overwrites_atomically(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_model(_trained_like(ReferenceCNN(**SMALL), seed=1), path)
    m2 = _trained_like(ReferenceCNN(**SMALL), seed=2)
    save_model(m2, path)
    assert model_hash(load_model(path)) == model_hash(m2)
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_load_model_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        load_model(tmp_path / "missing.safetensors")
    bare = tmp_path / "bare.safetensors"
    save_file({k: v.contiguous() for k, v in ReferenceCNN().state_dict().items()}, str(bare))
    with pytest.raises(ValueError, match="load_user_model"):
        load_model(bare)
    wrong = tmp_path / "wrong.safetensors"
    save_model(ReferenceCNN(), wrong, config={"arch": "reference_cnn", "widths": [4] * 6})
    with pytest.raises(StateDictMismatchError):
        load_model(wrong)


# --------------------------------------------------------------------------- factory specs


@pytest.mark.parametrize("fmt", ["safetensors", "pt", "checkpoint", "prefixed"])
def test_factory_with_weights(tmp_path: Path, user_module: str, fmt: str) -> None:
    import importlib

    mod = importlib.import_module(user_module)
    ref = _trained_like(mod.make(width=6))
    sd = {k: v.clone() for k, v in ref.state_dict().items()}
    if fmt == "safetensors":
        weights = tmp_path / "w.safetensors"
        save_file(sd, str(weights))
    else:
        weights = tmp_path / "w.pt"
        obj = {"state_dict": sd, "epoch": 3} if fmt == "checkpoint" else sd
        if fmt == "prefixed":
            obj = {f"module.{k}": v for k, v in sd.items()}
        torch.save(obj, weights)
    loaded = load_user_model(f"{user_module}:make", str(weights), factory_kwargs={"width": 6})
    assert not loaded.training and type(loaded).__name__ == "Net"
    assert model_hash(loaded) == model_hash(ref)
    _same_outputs(ref, loaded)


def test_factory_dotted_attribute_and_no_weights(user_module: str) -> None:
    m = load_user_model(f"{user_module}:Zoo.make")
    assert type(m).__name__ == "Net" and not m.training


def test_factory_weight_mismatch_lists_keys(tmp_path: Path, user_module: str) -> None:
    import importlib

    sd = importlib.import_module(user_module).make().state_dict()
    bad = {k: v for k, v in sd.items() if k != "head.bias"}
    bad["extra.weight"] = torch.zeros(2)
    path = tmp_path / "bad.pt"
    torch.save(bad, path)
    with pytest.raises(StateDictMismatchError, match=r"head\.bias") as info:
        load_user_model(f"{user_module}:make", path)
    assert info.value.missing == ["head.bias"] and info.value.unexpected == ["extra.weight"]
    assert "extra.weight" in str(info.value)
    torch.save(sd, path)  # right keys, wrong shapes (width 4 vs 5)
    with pytest.raises(StateDictMismatchError, match="size mismatch"):
        load_user_model(f"{user_module}:make", path, factory_kwargs={"width": 5})


def test_factory_errors(tmp_path: Path, user_module: str) -> None:
    with pytest.raises(ImportError, match="no_such_module_xyz"):
        load_user_model("no_such_module_xyz:make")
    # user mistakes are orbitscope errors (one-line messages on the CLI), not bare builtins
    with pytest.raises(SpecError, match="missing_factory"):
        load_user_model(f"{user_module}:missing_factory")
    with pytest.raises(SpecError, match="not callable"):
        load_user_model(f"{user_module}:NOT_CALLABLE")
    with pytest.raises(ModelError, match="nn.Module"):
        load_user_model(f"{user_module}:not_a_module")
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_user_model(f"{user_module}:make", tmp_path / "nope.pt")
    with pytest.raises(FileNotFoundError, match="missing_model.pt2"):
        load_user_model(str(tmp_path / "missing_model.pt2"))
    with pytest.raises(FileNotFoundError, match="model.ts"):
        load_user_model("model.ts")
    notsd = tmp_path / "list.pt"
    torch.save([torch.zeros(1)], notsd)
    with pytest.raises(ModelError, match="state dict"):
        load_user_model(f"{user_module}:make", notsd)


# --------------------------------------------------------------------------- archives


def _script_and_trace(tmp_path: Path, m: nn.Module) -> list[Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(m)
        traced = torch.jit.trace(m, torch.rand(2, 1, 28, 28))
    paths = [tmp_path / "scripted.pt", tmp_path / "traced.ts"]
    scripted.save(str(paths[0]))
    traced.save(str(paths[1]))
    return paths


def test_torchscript_roundtrip(tmp_path: Path) -> None:
    m = _trained_like(ReferenceCNN(**SMALL))
    for path in _script_and_trace(tmp_path, m):
        with pytest.raises(ValueError, match="TorchScript archive .* trust=True"):  # a program: refused by default
            load_user_model(str(path))
        loaded = load_user_model(str(path), trust=True)
        assert isinstance(loaded, torch.jit.ScriptModule) and not loaded.training
        _same_outputs(m, loaded)
        with pytest.raises(ValueError, match="weights"):
            load_user_model(str(path), weights=str(path))


def test_torch_export_roundtrip_detected_by_content(tmp_path: Path) -> None:
    m = _trained_like(ReferenceCNN(**SMALL))
    batch = torch.export.Dim("batch", min=1, max=1024)
    ep = torch.export.export(m, (torch.rand(2, 1, 28, 28),), dynamic_shapes={"x": {0: batch}})
    path = tmp_path / "m.pt2"
    torch.export.save(ep, str(path))
    _same_outputs(m, load_user_model(str(path)))
    odd = tmp_path / "exported.bin"  # unusual extension: detected from the archive contents
    shutil.copy(path, odd)
    _same_outputs(m, load_user_model(str(odd)))
    with pytest.raises(ValueError, match="weights"):
        load_user_model(str(path), weights=str(path))
    # and a TorchScript file named like an export archive is still loaded as TorchScript
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(m).save(str(tmp_path / "script.pt2"))
    assert isinstance(load_user_model(str(tmp_path / "script.pt2"), trust=True), torch.jit.ScriptModule)


def test_spec_file_kinds(tmp_path: Path) -> None:
    m = _trained_like(ReferenceCNN(**SMALL))
    sd_path = tmp_path / "sd.pt"
    torch.save(m.state_dict(), sd_path)
    with pytest.raises(ValueError, match="factory"):
        load_user_model(str(sd_path))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a TorchScript"):
        load_user_model(str(junk))
    st = save_model(m, tmp_path / "m.safetensors")  # orbitscope file: delegates to load_model
    _same_outputs(m, load_user_model(str(st)))


def test_describe_model() -> None:
    m = ReferenceCNN(**SMALL)
    m.classifier[1].requires_grad_(False)
    d = describe_model(m)
    n = sum(p.numel() for p in m.parameters())
    frozen = sum(p.numel() for p in m.classifier[1].parameters())
    assert d["class_name"] == "ReferenceCNN" and d["n_parameters"] == n
    assert d["n_trainable"] == n - frozen and d["hash"] == model_hash(m)
    assert d["config"] == m.config
    json.dumps(d)

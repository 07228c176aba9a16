"""ONNX models on ONNX Runtime: one of our CNNs exported with torch.onnx.export gives the orbit
results torch gives (floats within tolerance, predictions exactly where torch decides clearly),
from the API, the CLI and a process pool; fixed-batch graphs, output selection and bad input."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.data import mnist_subset
from orbitscope.errors import ModelError, SpecError
from orbitscope.models import OnnxModel, model_hash
from orbitscope.models.loading import load_user_model
from orbitscope.models.onnx_model import OUTSIDE_TORCH_REASON
from orbitscope.models.reference import ReferenceCNN

from helpers import decided

pytest.importorskip("onnxruntime")

ORBIT = osc.Rotation([0, 30, 90, 180])


def export(model: nn.Module, path, *, batch: int | None = None, outputs=("logits",)) -> str:
    """``model`` as an ONNX graph (batch dimension symbolic unless ``batch`` fixes it)."""
    x = torch.rand(batch or 2, 1, 28, 28)
    axes = None if batch else {"image": {0: "batch"}, **{name: {0: "batch"} for name in outputs}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript-based exporter: fast, no onnxscript
        torch.onnx.export(model.eval(), (x,), str(path), dynamo=False, input_names=["image"],
                          output_names=list(outputs), dynamic_axes=axes)
    return str(path)


@pytest.fixture(scope="module")
def cnn() -> nn.Module:
    torch.manual_seed(4)
    net = ReferenceCNN().eval()
    for m in net.modules():  # BatchNorm statistics that are not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return net


@pytest.fixture(scope="module")
def digits():
    return mnist_subset("test").stratified(3)  # 30 real digits


@pytest.fixture(scope="module")
def onnx_file(cnn, tmp_path_factory) -> str:
    return export(cnn, tmp_path_factory.mktemp("onnx") / "cnn.onnx")


def test_orbit_results_equal_torch_within_float_tolerance(cnn, digits, onnx_file) -> None:
    store_probs = osc.Classification(store_probabilities=True)
    ref = osc.evaluate(cnn, digits, ORBIT, store_probs, optimize=False).result
    onnx_model = load_user_model(onnx_file)
    assert isinstance(onnx_model, OnnxModel) and onnx_model.providers == ["CPUExecutionProvider"]
    run = osc.evaluate(onnx_model, digits, ORBIT, store_probs, batch_size=7)  # optimize='auto', the default
    got = run.result
    for name in ("confidence", "top1_confidence", "entropy", "probabilities"):
        np.testing.assert_allclose(got[name].values, ref[name].values, atol=2e-6, err_msg=name)
    clear = decided(ref["probabilities"].values, 1e-4)
    assert clear.mean() > 0.95
    np.testing.assert_array_equal(got["prediction"].values[clear], ref["prediction"].values[clear])
    # the optimisation is skipped, with its reason, and the run remembers it
    record = got.attrs["optimization"]
    assert OUTSIDE_TORCH_REASON in (record if isinstance(record, str) else str(record))
    with pytest.raises(SpecError, match="ONNX Runtime model"):
        osc.evaluate(onnx_model, digits, ORBIT, optimize=True)


def test_the_file_is_the_identity(cnn, digits, onnx_file, tmp_path) -> None:
    a, b = load_user_model(onnx_file), load_user_model(onnx_file)
    assert model_hash(a) == model_hash(b)
    assert osc.evaluate(a, digits, ORBIT).run_id == osc.evaluate(b, digits, ORBIT).run_id
    torch.manual_seed(5)
    other = load_user_model(export(ReferenceCNN(), tmp_path / "other.onnx"))
    assert model_hash(other) != model_hash(a)
    assert osc.evaluate(other, digits, ORBIT).run_id != osc.evaluate(a, digits, ORBIT).run_id


def test_a_fixed_batch_graph_runs_in_slices(cnn, onnx_file, tmp_path) -> None:
    fixed = OnnxModel(export(cnn, tmp_path / "b3.onnx", batch=3))
    assert fixed.fixed_batch == 3 and OnnxModel(onnx_file).fixed_batch is None
    x = torch.rand(8, 1, 28, 28)  # 3 + 3 + 2 (padded to 3, the padding dropped)
    out = fixed(x)
    assert out.shape == (8, 10)
    np.testing.assert_allclose(out.numpy(), OnnxModel(onnx_file)(x).numpy(), atol=1e-6)


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc(x.flatten(1))
        return logits, logits.softmax(-1)


def test_outputs_are_selected_by_name_and_bad_input_is_explained(tmp_path) -> None:
    path = export(_TwoHeads(), tmp_path / "two.onnx", outputs=("logits", "probs"))
    x = torch.rand(4, 1, 28, 28)
    both = OnnxModel(path)(x)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[1].numpy(), both[0].softmax(-1).numpy(), atol=1e-6)
    only = OnnxModel(path, outputs=["probs"])(x)
    torch.testing.assert_close(only, both[1])
    with pytest.raises(ModelError, match=r"no output\(s\) \['scores'\].*\['logits', 'probs'\]"):
        OnnxModel(path, outputs=["scores"])
    with pytest.raises(ModelError, match=r"takes 1 input\(s\)"):
        OnnxModel(path)(x, x)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a graph")
    with pytest.raises(ModelError, match="ONNX Runtime cannot load"):
        load_user_model(broken)
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        load_user_model(str(tmp_path / "missing.onnx"))
    with pytest.raises(SpecError, match="weights were given"):
        load_user_model(path, weights=path)


def test_without_onnxruntime_the_error_says_how_to_install(onnx_file, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(SpecError, match=r"pip install 'orbitscope\[onnx\]'"):
        OnnxModel(onnx_file)


def test_the_cli_evaluates_an_onnx_file(onnx_file, cnn, tmp_path) -> None:
    from orbitscope.cli import app

    out = CliRunner().invoke(app, ["evaluate", "--model", onnx_file, "--data", "mnist-subset:test@12",
                                   "--orbit", "rotation:0:360:90", "--home", str(tmp_path / "runs")])
    assert out.exit_code == 0, out.output
    (rec,) = osc.Store(tmp_path / "runs").runs()
    stored = osc.Store(tmp_path / "runs").load(rec.run_id)
    ref = osc.evaluate(cnn, osc.parse_data_spec("mnist-subset:test@12"), osc.parse_orbit("rotation:0:360:90"),
                       optimize=False).result
    np.testing.assert_allclose(stored.confidence.values, ref.confidence.values, atol=2e-6)


@pytest.mark.slow  # spawns two worker processes
def test_process_workers_rebuild_it_from_its_path(onnx_file, digits) -> None:
    from orbitscope.engine.executors import ProcessExecutor

    model = load_user_model(onnx_file)
    local = osc.evaluate(model, digits, ORBIT, batch_size=10).result
    pooled = osc.evaluate(model, digits, ORBIT, batch_size=10, executor=ProcessExecutor(2)).result
    for name in ("confidence", "prediction"):
        np.testing.assert_array_equal(pooled[name].values, local[name].values)

"""Shipping by reference (what the Ray executor sends its workers), without Ray: every way a
model can travel rebuilds the same model, data travels as its spec or by value, and what cannot
travel is refused with what to do."""

from __future__ import annotations

import pickle
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.data.specs import parse_data_spec
from orbitscope.engine.chunk import evaluate_chunk
from orbitscope.engine.evaluation import plan_run
from orbitscope.engine.shipping import Contexts, DataRef, check_plain, data_ref, model_ref, ship
from orbitscope.errors import DataError, ModelError
from orbitscope.models.loading import load_user_model, save_model
from orbitscope.models.registry import build_model
from orbitscope.models.reference import model_hash

SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}

_BUILDS = [0]


def growing_net() -> torch.nn.Module:
    """A factory that builds a wider net every call (not reproducible in another process)."""
    _BUILDS[0] += 1
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10 + _BUILDS[0]))


def seeded_net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(SMALL)


def _trip(model: torch.nn.Module) -> torch.nn.Module:
    ref = pickle.loads(pickle.dumps(model_ref(model)))  # what a worker receives
    return ref.build()


def _outputs(model: torch.nn.Module) -> torch.Tensor:
    torch.manual_seed(5)
    x = torch.rand(3, 1, 28, 28)
    with torch.inference_mode():
        return model(x)


def test_registered_factory_torchscript_and_export_models_rebuild_identically(tmp_path: Path) -> None:
    torch.manual_seed(0)
    registered = build_model(SMALL).eval()
    save_model(registered, tmp_path / "m.safetensors")
    from_file = load_user_model(str(tmp_path / "m.safetensors"))
    factory = load_user_model("test_shipping:seeded_net", factory_kwargs={"seed": 3})
    with torch.no_grad():  # changed after loading: the current weights must travel
        next(factory.parameters()).add_(0.25)
    scripted = torch.jit.trace(build_model(SMALL).eval(), torch.rand(2, 1, 28, 28))
    torch.jit.save(scripted, tmp_path / "m.ts")
    exported = torch.export.export(build_model(SMALL).eval(), (torch.rand(2, 1, 28, 28),),
                                   dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(exported, tmp_path / "m.pt2")
    loaded_export = load_user_model(str(tmp_path / "m.pt2"))
    for model, how in ((registered, "config"), (from_file, "config"), (factory, "factory"), (scripted, "torchscript"),
                       (loaded_export, "export")):
        assert model_ref(model).how == how
        back = _trip(model)
        assert model_hash(back) == model_hash(model)
        torch.testing.assert_close(_outputs(back), _outputs(model), rtol=0, atol=0)
    # the weights travel as they are now, not as the file holds them
    assert model_hash(_trip(factory)) != model_hash(seeded_net(3))


def test_ship_as_marks_a_model_and_a_factory_that_builds_otherwise_is_caught() -> None:
    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(784, 11)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))

    with pytest.raises(ModelError, match="cannot be shipped.*ship_as"):
        model_ref(Plain())
    grown = osc.ship_as(growing_net(), "test_shipping:growing_net")
    with pytest.raises(ModelError, match="differs from the one sent"):
        _trip(grown)  # the next call builds a different architecture
    with pytest.raises(ModelError, match="script being run"):
        model_ref(osc.ship_as(seeded_net(), "__main__:make"))
    with pytest.raises(ValueError, match="package.module:function"):
        osc.ship_as(seeded_net(), "no_colon")


def test_data_travels_as_its_spec_or_by_value() -> None:
    spec = parse_data_spec("mnist-subset:test@12")
    ref = data_ref(spec)
    assert ref.how == "spec" and ref.payload == "mnist-subset:test@12"
    again = pickle.loads(pickle.dumps(ref)).open()
    assert again.data_id == spec.data_id and len(again) == 12
    sub = spec.stratified(1)  # not a spec any more: travels by value
    by_value = data_ref(sub)
    assert by_value.how == "value"
    assert torch.equal(by_value.open()[0][0], sub[0][0]) and len(by_value.open()) == len(sub)
    with pytest.raises(DataError, match="not 'something else'"):
        DataRef("spec", "mnist-subset:test@12", "something else").open()

    class Local(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int):
            return torch.zeros(1, 2, 2), 0

    with pytest.raises(DataError, match="inside a function"):
        data_ref(Local())


def test_a_shipped_evaluation_context_computes_the_same_chunks(tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@20")
    model = seeded_net(1)
    with ExitStack() as stack:
        planned = plan_run(stack, model, data, "rotation:0:360:120", batch_size=10, consensus=True, optimize=True)
        shipped = pickle.loads(pickle.dumps(ship(Contexts({7: planned.ctx}))))
        landed = shipped.landed(None)
        for job in planned.jobs():
            here, there = evaluate_chunk(job, planned.ctx), evaluate_chunk(job, landed[7])
            assert sorted(here) == sorted(there)
            for name in here:
                np.testing.assert_array_equal(here[name], there[name], err_msg=name)
    assert landed[7].call.model is not model and landed[7].source.data_id == data.data_id


def test_contexts_that_cannot_travel_are_refused() -> None:
    with pytest.raises(DataError, match="cannot be sent to workers"):
        check_plain({"f": lambda x: x})
    with pytest.raises(ModelError, match="model_ref"):
        check_plain(seeded_net())
    assert ship(("family", "/tmp/home")).landed(None) == ("family", "/tmp/home")

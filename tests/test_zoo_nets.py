"""The VGG-style and residual zoo architectures: shapes, configs, the probed layers, and a tiny
zoo member of each trained, evaluated and labelled like SmallCNN's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.ml4ml import zoo
from orbitscope.ml4ml.modeldb import ModelDatabase
from orbitscope.models import VGGBN, SmallResNet, build_model, model_hash


@pytest.mark.parametrize("cls", [VGGBN, SmallResNet])
def test_shapes_configs_and_errors(cls) -> None:
    torch.manual_seed(0)
    net = cls(in_channels=3, num_classes=7, widths=(4, 8, 8)).eval()
    for size in (12, 28, 33):
        assert net(torch.rand(2, 3, size, size)).shape == (2, 7)
    again = build_model(net.config)
    again.load_state_dict(net.state_dict())
    x = torch.rand(2, 3, 28, 28)
    torch.testing.assert_close(again.eval()(x), net(x), rtol=0, atol=0)
    assert model_hash(again) == model_hash(net)
    with pytest.raises(ValueError, match="expects"):
        net(torch.rand(2, 1, 28, 28))
    with pytest.raises(ValueError, match="widths"):
        cls(widths=(4, 8))


@pytest.mark.parametrize("cls", [VGGBN, SmallResNet])
def test_probed_layers_are_the_last_two_convolutions(cls) -> None:
    torch.manual_seed(0)
    net = cls().eval()
    convs = [name for name, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)]
    assert "conv2" in convs and "conv3" in convs and set(zoo.PROBE_LAYERS) == {"conv2", "conv3"}
    images = torch.rand(6, 1, 28, 28)
    run = osc.evaluate(net, (images, torch.zeros(6, dtype=torch.long)), "rotation:-2:2:1",
                       activations=list(zoo.PROBE_LAYERS))
    act = run.result["activation"]
    assert list(act.coords["layer"].values) == ["conv2", "conv3"] and np.isfinite(act.values).all()


@pytest.mark.parametrize("family", ["mnist-vgg", "mnist-resnet"])
def test_a_tiny_member_of_each_new_family_builds(tmp_path, family) -> None:
    tiny = dataclasses.replace(zoo.FAMILIES[family], name=f"tiny-{family}", n_train=200, epochs_choices=(1,),
                               little_data=100, images_per_class=3, test_orbit="rotation:-2:2:1",
                               test_half_range=2.0, accuracy_floor=0.3)
    report = zoo.build_family(tiny, 1, store=tmp_path, workers=1)
    assert report.built == [f"tiny-{family}-000"] and not report.failed
    (m,) = ModelDatabase(tmp_path).models()
    assert m.provenance["architecture"]["arch"] == zoo.FAMILIES[family].arch["arch"]
    vm = m.load_matrices()
    assert vm.names == list(zoo.ZOO_SIGNALS) and vm.matrices.shape[-1] == 5

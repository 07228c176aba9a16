"""Activation probes in the engine, ML4ML variance matrices and their images."""

import numpy as np
import pytest
import torch

from orbitscope import evaluate
from orbitscope.kinds import rotate_images
from orbitscope.engine.activations import STATS, ActivationProbe, activation_stats
from orbitscope.group import Rotation, parse_orbit
from orbitscope.ml4ml.matrices import VarianceMatrices, ml4ml_signals, read_signals, variance_matrices, variance_matrix
from orbitscope.ml4ml.matrix_plots import CONFIDENCE_VMAX, display_matrix, matrix_figure, matrix_panel
from orbitscope.models import SmallCNN
from orbitscope.results.store import Store


def _numpy_stats(a: np.ndarray) -> dict[str, np.ndarray]:
    """Independent reference: loops over images and channels."""
    out = {s: [] for s in STATS}
    for img in a:
        chans = img.reshape(img.shape[0], -1)
        means = np.array([c.mean() for c in chans])
        maxes = np.array([c.max() for c in chans])
        out["mean"].append(img.mean())
        out["std"].append(img.std())
        out["max"].append(img.max())
        out["min"].append(img.min())
        out["mean-max"].append(means.max())
        out["mean-std"].append(means.std())
        out["max-mean"].append(maxes.mean())
        out["max-std"].append(maxes.std())
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("shape", [(5, 3, 4, 6), (4, 7)])
def test_activation_stats_match_a_plain_loop(shape):
    a = torch.randn(*shape, dtype=torch.float64)
    got = activation_stats(a).numpy()
    ref = _numpy_stats(a.numpy().reshape(shape[0], shape[1], -1))
    for i, s in enumerate(STATS):
        np.testing.assert_allclose(got[:, i], ref[s], rtol=1e-5, atol=1e-6, err_msg=s)
    assert activation_stats(a, ("max-mean", "min")).shape == (shape[0], 2)
    with pytest.raises(ValueError, match="unknown activation statistics"):
        activation_stats(a, ("median",))


def _model() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN().eval()


def test_engine_records_hooked_statistics_equal_to_a_direct_forward(tmp_path):
    model = _model()
    x, y = torch.rand(7, 1, 28, 28), torch.randint(0, 10, (7,))
    orbit = Rotation([-10, 0, 10])
    run = evaluate(model, (x, y), orbit, activations=["last-conv-2"], batch_size=3, forward_batch=5, store=tmp_path)
    act = run.result.data["activation"]
    assert act.dims == ("sample", "angle", "layer", "stat") and act.shape == (7, 3, 2, len(STATS))
    assert list(act.coords["layer"].values) == ["conv2", "conv3"] and list(act.coords["stat"].values) == list(STATS)
    captured = {}
    handle = model.conv3.register_forward_hook(lambda _m, _i, o: captured.__setitem__("a", o))
    with torch.no_grad():
        model(rotate_images(x, torch.full((7,), 10.0)))
    handle.remove()
    direct = _numpy_stats(captured["a"].numpy())
    for i, s in enumerate(STATS):
        np.testing.assert_allclose(act.values[:, 2, 1, i], direct[s], rtol=1e-4, atol=1e-5, err_msg=s)
    # stored and reloaded with the same coordinates; hooks are gone afterwards
    loaded = Store(tmp_path).load(run.run_id)
    np.testing.assert_array_equal(loaded.data["activation"].values, act.values)
    assert list(loaded.data["activation"].coords["layer"].values) == ["conv2", "conv3"]
    assert not model.conv3._forward_hooks and not model.conv2._forward_hooks
    # probing does not change the recorded outputs; a run without a probe has no activation variable
    plain = evaluate(model, (x, y), orbit, batch_size=3).result
    np.testing.assert_allclose(plain.data["confidence"].values, run.result.data["confidence"].values, atol=1e-6)
    assert "activation" not in plain.data and run.run_id != evaluate(model, (x, y), orbit, batch_size=3).run_id


def test_probe_errors_are_explicit():
    model = _model()
    data = (torch.rand(2, 1, 28, 28), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="no layer named"):
        evaluate(model, data, Rotation([0]), activations=["features.3"])
    with pytest.raises(ValueError, match="optimize=True"):
        evaluate(model, data, Rotation([0]), activations=["conv2"], optimize=True)
    with pytest.raises(ValueError, match="only 3 convolution"):
        ActivationProbe(("last-conv-4",)).resolve(model)
    with pytest.raises(ValueError, match="unknown"):
        ActivationProbe(("conv2",), ("mean", "p95"))


def test_variance_matrix_equals_a_direct_double_loop():
    rng = np.random.default_rng(1)
    s = rng.normal(size=(40, 9)) * rng.uniform(0.1, 3, size=9)
    m = variance_matrix(s)
    ref = np.array([[np.sqrt(np.mean((s[:, i] - s[:, j]) ** 2)) for j in range(9)] for i in range(9)])
    np.testing.assert_allclose(m, ref, rtol=1e-9, atol=1e-12)
    assert np.array_equal(m, m.T) and np.all(np.diag(m) == 0)
    # a per-image constant offset does not change any difference
    np.testing.assert_allclose(variance_matrix(s + rng.normal(size=(40, 1)) * 100), ref, rtol=1e-7, atol=1e-9)
    assert variance_matrix(np.zeros((0, 4))).shape == (4, 4)
    with pytest.raises(ValueError, match="images, levels"):
        variance_matrix(np.zeros(5))


def _result():
    model = _model()
    torch.manual_seed(3)
    x, y = torch.rand(30, 1, 28, 28), torch.randint(0, 10, (30,))
    return evaluate(model, (x, y), parse_orbit("rotation:-4:4:1"), activations=["conv2", "conv3"]).result


def test_variance_matrices_from_a_result_split_by_identity_correctness(tmp_path):
    res = _result()
    correct0 = res.data["correct"].sel(angle=0).values.astype(bool)
    assert 0 < correct0.sum() < 30, "test needs both correct and incorrect images"
    assert ml4ml_signals(res) == ["top1_confidence", "conv2:max", "conv2:max-mean", "conv3:max", "conv3:max-mean"]
    vm = variance_matrices(res, split="correct")
    assert vm.n_images == correct0.sum() and vm.identity == 4 and list(vm.levels) == list(range(-4, 5))
    top1 = res.data["top1_confidence"].values[correct0]
    np.testing.assert_allclose(vm["top1_confidence"], variance_matrix(top1))
    conv3max = res.data["activation"].sel(layer="conv3", stat="max").values[correct0]
    np.testing.assert_allclose(vm["conv3:max"], variance_matrix(conv3max))
    assert vm.correct.shape == (30, 9)  # correctness of all images, for the formula baselines
    inc = variance_matrices(res, ["confidence"], split="incorrect")
    np.testing.assert_allclose(inc["confidence"], variance_matrix(res.data["confidence"].values[~correct0]))
    assert variance_matrices(res, ["confidence"], split="all").n_images == 30
    vm.save(tmp_path / "m.npz")
    back = VarianceMatrices.load(tmp_path / "m.npz")
    assert back.names == vm.names and back.split == "correct" and back.identity == 4
    np.testing.assert_array_equal(back.matrices, vm.matrices)
    np.testing.assert_array_equal(back.correct, vm.correct)
    with pytest.raises(ValueError, match="activation statistics|recorded layers"):
        read_signals(res, ["conv9:max"])
    with pytest.raises(ValueError, match="split"):
        variance_matrices(res, split="some")
    with pytest.raises(KeyError):
        vm["entropy"]


def test_matrices_need_a_one_dimensional_orbit_with_identity():
    model = _model()
    data = (torch.rand(3, 1, 28, 28), torch.tensor([0, 1, 2]))
    two_d = evaluate(model, data, parse_orbit("rotation:0:10:10 x scale:0.9:1.1:0.1")).result
    with pytest.raises(ValueError, match="one-dimensional"):
        variance_matrices(two_d, ["confidence"])
    no_identity = evaluate(model, data, Rotation([5, 10])).result
    with pytest.raises(ValueError, match="identity"):
        variance_matrices(no_identity, ["confidence"])


def test_matrix_images_use_flipped_rows_and_fixed_scales(tmp_path):
    vm = variance_matrices(_result())
    shown, vmax, _ = display_matrix(vm, "top1_confidence")
    n = len(vm.levels)
    np.testing.assert_array_equal(shown, vm["top1_confidence"][::-1, :])  # ML4ML's code flips the rows
    assert all(shown[i, n - 1 - i] == 0 for i in range(n)) and vmax == CONFIDENCE_VMAX
    act, _, label = display_matrix(vm, "conv3:max")
    ref = np.mean(np.abs(vm.signals[vm.names.index("conv3:max")][:, vm.identity]))
    np.testing.assert_allclose(act, vm["conv3:max"][::-1, :] / ref)
    assert "identity" in label
    fig = matrix_figure(vm, "top1_confidence")
    assert fig.axes[0].images[0].get_clim() == (0.0, CONFIDENCE_VMAX)
    panel = matrix_panel(vm)
    assert len([ax for ax in panel.axes if ax.images]) == len(vm.names)
    panel.savefig(tmp_path / "panel.png")
    assert (tmp_path / "panel.png").stat().st_size > 5000


def test_zoo_matrices_use_nearest_resampling_without_a_blur_cross():
    """Bilinear resampling blurs ±1° but never the identity (which is not resampled), so the
    matrices showed a bright cross at 0° measuring blur; ML4ML's nearest neighbour does not."""
    import torch

    from orbitscope.data.specs import parse_data_spec
    from orbitscope.ml4ml.zoo import MATRIX_INTERPOLATION, model_matrices
    from orbitscope.models.registry import build_model

    torch.manual_seed(0)
    model = build_model({"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64})
    data = parse_data_spec("mnist-subset:test").stratified(3)
    near, _ = model_matrices(model, data, "rotation:-4:4:1")
    blur, _ = model_matrices(model, data, "rotation:-4:4:1", interpolation="bilinear")
    assert MATRIX_INTERPOLATION == "nearest" and near.attrs["interpolation"] == "nearest"
    c = near.identity
    for vm in (near, blur):
        assert vm.n_images > 0
    M, B = near["conv3:max"], blur["conv3:max"]
    # at 28 × 28, nearest-neighbour rotations by 1° move no pixel: the inputs, hence the signal, are equal
    assert M[c, c - 1] == 0 and M[c, c + 1] == 0
    # bilinear: the step from the identity is larger than the next one (the cross)
    assert (B[c, c - 1] + B[c, c + 1]) > 1.2 * (B[c - 1, c - 2] + B[c + 1, c + 2])

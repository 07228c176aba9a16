"""Tests for the evaluation engine (:func:`orbitscope.evaluate`).

Every numeric check compares the engine against an independent reference written here:
plain double loops over (image, angle) with ``scipy.ndimage.rotate`` / ``np.rot90`` and a model
run with batch size 1, closed forms, or exactly invariant models.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import orbitscope as osc
from orbitscope import Brightness, Classification, DataError, ModelError, Rotation, Rotation90, evaluate
from orbitscope.data.datasets import ArrayDataset, mnist_subset
from orbitscope.models import ReferenceCNN
from orbitscope.engine.evaluation import PREFETCH_CHUNKS

from helpers import CentroidNet

VARIABLES = ("confidence", "prediction", "correct", "top1_confidence", "entropy")


# ---------------------------------------------------------------------------------------------
# fixtures and small models
# ---------------------------------------------------------------------------------------------




@pytest.fixture(scope="module")
def mnist_small() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """100 real MNIST test digits (10 per class): uint8 (N,1,28,28), float32 in [0,1], labels."""
    ds = mnist_subset("test")
    idx = np.concatenate([np.flatnonzero(ds.labels == c)[:10] for c in range(10)])
    u8 = np.ascontiguousarray(ds.images[idx][:, None])
    return u8, (u8 / 255.0).astype(np.float32), ds.labels[idx].copy()




@pytest.fixture(scope="module")
def centroid_net() -> CentroidNet:
    train = mnist_subset("train")
    x = train.images.reshape(len(train), -1).astype(np.float64) / 255.0
    centroids = np.stack([x[train.labels == c].mean(0) for c in range(10)])
    return CentroidNet(centroids).eval()


def one_conv_net(in_channels: int = 1, classes: int = 10, seed: int = 0) -> nn.Module:
    """A tiny 1-conv net (its outputs are bitwise independent of the batch size on CPU)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, classes)
    ).eval()


class PerSample(nn.Module):
    """Runs ``inner`` on one sample at a time, so its outputs are bitwise independent of how
    the engine batches (BLAS/oneDNN kernels may round differently per batch size)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.inner(x[i : i + 1]) for i in range(len(x))])


def reference_cnn_with_bn_stats(calibration: np.ndarray, seed: int = 0) -> ReferenceCNN:
    """A ReferenceCNN whose BatchNorm layers hold real, non-trivial running statistics
    (accumulated on ``calibration`` images) and random affine parameters."""
    torch.manual_seed(seed)
    model = ReferenceCNN()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = None  # cumulative average over the calibration pass
                m.weight.copy_(1.0 + 0.3 * torch.randn(m.num_features, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.num_features, generator=g))
        model.train()
        model(torch.from_numpy(calibration))
    return model.eval()


def softmax_np(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64) - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def reference_loop(model: nn.Module, images: np.ndarray, labels: np.ndarray, angles, rotate) -> dict[str, np.ndarray]:
    """Independent reference: for each image and angle, rotate with ``rotate(img2d, angle)``
    and run the model on a batch of one; returns confidence / prediction / correct (N, K)."""
    n, k = len(images), len(angles)
    conf = np.empty((n, k))
    pred = np.empty((n, k), dtype=np.int64)
    with torch.no_grad():
        for i in range(n):
            for j, a in enumerate(angles):
                img = np.stack([rotate(images[i, c], a) for c in range(images.shape[1])])
                x = torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32))[None]
                p = softmax_np(model(x).double().numpy()[0])
                conf[i, j] = p[labels[i]]
                pred[i, j] = int(np.argmax(p))
    return {"confidence": conf, "prediction": pred, "correct": (pred == labels[:, None]).astype(np.uint8)}


def scipy_rotate(img: np.ndarray, angle: float) -> np.ndarray:
    return ndi.rotate(img.astype(np.float64), angle, reshape=False, order=1, mode="constant", cval=0.0)


def assert_results_identical(a: osc.OrbitResult, b: osc.OrbitResult, variables=VARIABLES) -> None:
    np.testing.assert_array_equal(a.data.sample.values, b.data.sample.values)
    for v in variables:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


# ---------------------------------------------------------------------------------------------
# conventions: single-pixel images
# ---------------------------------------------------------------------------------------------


def test_reference_rotations_are_counter_clockwise_as_displayed():
    """The references used below rotate CCW as displayed (row 0 on top): a pixel right of the
    centre goes to above the centre under +90 degrees."""
    img = np.zeros((9, 9))
    img[4, 7] = 1.0  # right of the centre (4, 4)
    assert np.argwhere(np.rot90(img, 1) > 0.5).tolist() == [[1, 4]]  # above the centre
    assert np.argwhere(scipy_rotate(img, 90) > 0.5).tolist() == [[1, 4]]
    assert np.argwhere(scipy_rotate(img, 180) > 0.5).tolist() == [[4, 1]]
    assert np.argwhere(scipy_rotate(img, 270) > 0.5).tolist() == [[7, 4]]


class PixelsAsLogits(nn.Module):
    """Logits = 50 * flattened pixels: the prediction is the index of the brightest pixel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 50.0 * x.flatten(1)


@pytest.mark.parametrize("angle", [0, 20, 45, 90, 110, 180, 200, 270, 333, 360])
def test_engine_rotation_direction_single_pixel(angle):
    """A bright pixel 5 px right of the centre of a 15x15 image is found where a CCW-as-displayed
    rotation puts it (closed form, y down) and where scipy's rotation puts it."""
    size, c = 15, 7
    img = np.zeros((1, 1, size, size), np.float32)
    img[0, 0, c, c + 5] = 1.0
    run = evaluate(PixelsAsLogits(), (img, np.array([0])), Rotation([angle]))
    pred = int(run.result.prediction.values[0, 0])
    rad = math.radians(angle)
    # CCW as displayed with y pointing down: (dx, dy) -> (dx cos + dy sin, -dx sin + dy cos)
    row, col = c - 5 * math.sin(rad), c + 5 * math.cos(rad)
    expected = int(round(row)) * size + int(round(col))
    assert pred == expected, (divmod(pred, size), (row, col))
    ref = scipy_rotate(img[0, 0], angle)
    assert pred == int(np.argmax(ref))


def test_engine_rotation90_single_pixel_exact():
    """Rotation90 moves a pixel right -> top -> left -> bottom exactly (no interpolation)."""
    img = np.zeros((1, 1, 9, 9), np.float32)
    img[0, 0, 4, 7] = 1.0
    run = evaluate(PixelsAsLogits(), (img, np.array([0])), Rotation90(), Classification(store_probabilities=True))
    got = [divmod(int(p), 9) for p in run.result.prediction.values[0]]
    assert got == [(4, 7), (1, 4), (4, 1), (7, 4)]
    # exact: the top probability is the same at every element (one pixel of value 1 each time)
    top = run.result.top1_confidence.values[0]
    assert np.all(top == top[0])


# ---------------------------------------------------------------------------------------------
# accuracy and confidence per angle against an independent double loop
# ---------------------------------------------------------------------------------------------


def test_per_angle_accuracy_matches_scipy_double_loop(mnist_small, centroid_net):
    _, images, labels = mnist_small
    angles = [0, 15, 30, 45, 90, 135, 180, 233, 300, 360]
    run = evaluate(centroid_net, (images, labels), Rotation(angles), batch_size=32, forward_batch=200)
    ref = reference_loop(centroid_net, images, labels, angles, scipy_rotate)

    acc = run.result.correct.values.mean(0)
    ref_acc = ref["correct"].mean(0)
    # the curve is non-trivial: accurate upright, much worse when rotated
    assert ref_acc[0] > 0.6 and ref_acc[angles.index(180)] < ref_acc[0] - 0.3
    assert np.all(np.abs(acc - ref_acc) <= 0.03), (acc, ref_acc)
    conf = run.result.confidence.values.astype(np.float64)
    assert np.mean(np.abs(conf - ref["confidence"])) < 2e-3
    # per sample, almost every prediction agrees (interpolation differences only)
    assert np.mean(run.result.prediction.values == ref["prediction"]) >= 0.98
    # coordinates are the requested angles, samples in order
    np.testing.assert_array_equal(run.result.angle.values, angles)
    np.testing.assert_array_equal(run.result.sample.values, np.arange(len(images)))


def test_quarter_turns_match_rot90_exactly(mnist_small, centroid_net):
    """Multiples of 90 degrees are exact permutations: per-sample results equal np.rot90's."""
    _, images, labels = mnist_small
    angles = [0, 90, 180, 270, 360, -90]
    run = evaluate(centroid_net, (images, labels), Rotation(angles), batch_size=64)
    ref = reference_loop(centroid_net, images, labels, angles, lambda im, a: np.rot90(im, int(a) // 90))
    np.testing.assert_array_equal(run.result.prediction.values, ref["prediction"])
    np.testing.assert_array_equal(run.result.correct.values, ref["correct"])
    np.testing.assert_allclose(run.result.confidence.values, ref["confidence"], rtol=0, atol=1e-6)
    # 0 and 360 and -90/270 are the same element: bitwise equal columns
    conf = run.result.confidence.values
    np.testing.assert_array_equal(conf[:, 0], conf[:, 4])
    np.testing.assert_array_equal(conf[:, 3], conf[:, 5])
    # Rotation90 is the same orbit
    run90 = evaluate(centroid_net, (images, labels), Rotation90(), batch_size=64)
    np.testing.assert_array_equal(run90.result.confidence.values, conf[:, :4])


def test_confidence_entropy_match_closed_form(mnist_small, centroid_net):
    """confidence = p[label], top1 = max p, entropy = -sum p log p of the model's softmax."""
    _, images, labels = mnist_small
    images, labels = images[:20], labels[:20]
    run = evaluate(centroid_net, (images, labels), Rotation([0]), Classification(store_probabilities=True))
    with torch.no_grad():
        p = softmax_np(centroid_net(torch.from_numpy(images)).numpy())
    r = run.result
    np.testing.assert_allclose(r.confidence.values[:, 0], p[np.arange(20), labels], atol=1e-6)
    np.testing.assert_allclose(r.top1_confidence.values[:, 0], p.max(1), atol=1e-6)
    np.testing.assert_allclose(r.entropy.values[:, 0], -(p * np.log(p)).sum(1), atol=1e-5)
    np.testing.assert_allclose(r.probabilities.values[:, 0], p, atol=1e-6)
    assert r.probabilities.dims == ("sample", "angle", "class")
    assert r.prediction.dtype == np.int32 and r.correct.dtype == np.uint8


# ---------------------------------------------------------------------------------------------
# results do not depend on chunking or on the form of the data
# ---------------------------------------------------------------------------------------------


class FloatDataset(Dataset):
    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return torch.from_numpy(self.images[i]), int(self.labels[i])


ORBIT_MIXED = Rotation([0, 30, 90, 200, 360])  # identity, interpolated and exact elements


@pytest.mark.parametrize("batch_size,forward_batch", [(1, 1), (7, 3), (13, 64), (40, 4096), (1000, 5)])
def test_results_independent_of_batching(mnist_small, batch_size, forward_batch):
    _, images, labels = mnist_small
    images, labels = images[:40], labels[:40]
    model = PerSample(one_conv_net())
    base = evaluate(model, (images, labels), ORBIT_MIXED, batch_size=40, forward_batch=512).result
    run = evaluate(model, (images, labels), ORBIT_MIXED, batch_size=batch_size, forward_batch=forward_batch)
    assert_results_identical(base, run.result)


def test_results_independent_of_batching_reference_cnn(mnist_small):
    """A deeper CNN's convolutions may round differently per batch size, but not by more than
    float noise, and predictions agree."""
    _, images, labels = mnist_small
    images, labels = images[:30], labels[:30]
    model = reference_cnn_with_bn_stats(mnist_small[1][50:])
    a = evaluate(model, (images, labels), ORBIT_MIXED, batch_size=30, forward_batch=512).result
    b = evaluate(model, (images, labels), ORBIT_MIXED, batch_size=4, forward_batch=3).result
    np.testing.assert_array_equal(a.prediction.values, b.prediction.values)
    np.testing.assert_allclose(a.confidence.values, b.confidence.values, atol=1e-6)


def test_results_independent_of_data_form(mnist_small):
    u8, images, labels = mnist_small
    u8, images, labels = u8[:40], images[:40], labels[:40]
    model = PerSample(one_conv_net())
    base = evaluate(model, (images, labels), ORBIT_MIXED, batch_size=16).result
    forms = {
        "tensors": (torch.from_numpy(images), torch.from_numpy(labels)),
        "list pair": [images, labels],
        "dataset": FloatDataset(images, labels),
        "dataloader": DataLoader(FloatDataset(images, labels), batch_size=16),
        "dataloader other batch": DataLoader(FloatDataset(images, labels), batch_size=7),
        "uint8 arrays": (u8, labels),
        "uint8 tensors": (torch.from_numpy(u8), torch.from_numpy(labels)),
    }
    for name, data in forms.items():
        res = evaluate(model, data, ORBIT_MIXED, batch_size=16).result
        try:
            assert_results_identical(base, res)
        except AssertionError as exc:  # pragma: no cover - report which form
            raise AssertionError(f"data form {name!r} differs: {exc}") from None


def test_shuffling_dataloader_is_rejected_or_ordered(mnist_small):
    """Result rows are labelled by sample index (and a stored run resumes by position), so a
    DataLoader that shuffles must either be refused or give the same rows as sequential order."""
    _, images, labels = mnist_small
    ds = FloatDataset(images[:40], labels[:40])
    model = PerSample(one_conv_net())
    base = evaluate(model, ds, Rotation([0, 90]), batch_size=8).result
    torch.manual_seed(0)
    try:
        res = evaluate(model, DataLoader(ds, batch_size=8, shuffle=True), Rotation([0, 90])).result
    except DataError as exc:
        assert "shuffl" in str(exc).lower() or "sampler" in str(exc).lower()
    else:
        assert_results_identical(base, res)


def test_uint8_array_dataset_matches_uint8_arrays(mnist_small):
    """orbitscope's own ArrayDataset of uint8 digits must give the same numbers as the same
    uint8 digits passed as arrays (both mean "pixel / 255")."""
    u8, _, labels = mnist_small
    u8, labels = u8[:40], labels[:40]
    model = PerSample(one_conv_net())
    a = evaluate(model, (u8, labels), ORBIT_MIXED).result
    b = evaluate(model, ArrayDataset(u8, labels), ORBIT_MIXED).result
    assert_results_identical(a, b)


# ---------------------------------------------------------------------------------------------
# output kinds, normalisation, optimisation
# ---------------------------------------------------------------------------------------------


class SoftmaxWrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.inner(x), dim=-1)


@pytest.mark.parametrize("output", ["auto", "explicit"])
def test_logits_and_probabilities_models_agree(mnist_small, centroid_net, output):
    _, images, labels = mnist_small
    data = (images[:40], labels[:40])
    orbit = Rotation([0, 45, 90, 180])
    t_logits = Classification(output="logits" if output == "explicit" else "auto")
    t_probs = Classification(output="probabilities" if output == "explicit" else "auto")
    a = evaluate(centroid_net, data, orbit, t_logits).result
    b = evaluate(SoftmaxWrapper(centroid_net), data, orbit, t_probs).result
    np.testing.assert_array_equal(a.prediction.values, b.prediction.values)
    np.testing.assert_array_equal(a.correct.values, b.correct.values)
    for v in ("confidence", "top1_confidence"):
        np.testing.assert_allclose(a[v].values, b[v].values, atol=1e-6)
    np.testing.assert_allclose(a.entropy.values, b.entropy.values, atol=1e-5)


class Normalized(nn.Module):
    def __init__(self, inner: nn.Module, mean, std) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner((x - self.mean) / self.std)


def test_normalize_equals_model_that_normalises_itself():
    rng = np.random.default_rng(1)
    images = rng.random((24, 3, 10, 10), dtype=np.float32)
    labels = rng.integers(0, 5, 24)
    mean, std = [0.2, 0.5, 0.7], [0.1, 0.3, 0.05]  # very different per channel
    inner = one_conv_net(in_channels=3, classes=5, seed=3)
    orbit = Rotation([0, 33, 90])
    a = evaluate(inner, (images, labels), orbit, normalize=(mean, std)).result
    b = evaluate(Normalized(inner, mean, std), (images, labels), orbit).result
    np.testing.assert_array_equal(a.prediction.values, b.prediction.values)
    np.testing.assert_allclose(a.confidence.values, b.confidence.values, atol=1e-6)
    # and normalisation matters (guards against it being ignored)
    c = evaluate(inner, (images, labels), orbit).result
    assert not np.allclose(a.confidence.values, c.confidence.values, atol=1e-3)


def test_normalize_rejects_bad_values():
    images = np.zeros((2, 1, 8, 8), np.float32)
    with pytest.raises(ValueError, match="std"):
        evaluate(one_conv_net(), (images, np.array([0, 1])), Rotation([0]), normalize=([0.5], [0.0]))


def test_optimize_matches_plain_evaluation(mnist_small):
    _, images, labels = mnist_small
    data = (images[:40], labels[:40])
    model = reference_cnn_with_bn_stats(mnist_small[1][40:])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    orbit = Rotation([0, 45, 90, 180])
    a = evaluate(model, data, orbit, optimize=False).result
    b = evaluate(model, data, orbit, optimize=True).result
    # the BN statistics are non-trivial: folding changes the conv weights a lot
    from orbitscope.models import fold_batchnorm

    folded = fold_batchnorm(model)
    assert not torch.allclose(folded.features[0].weight, model.features[0].weight, atol=1e-2)
    np.testing.assert_array_equal(a.prediction.values, b.prediction.values)
    np.testing.assert_allclose(a.confidence.values, b.confidence.values, atol=1e-4, rtol=0)
    np.testing.assert_allclose(a.top1_confidence.values, b.top1_confidence.values, atol=1e-4, rtol=0)
    # predictions vary over samples (a non-degenerate model), and the caller's model is untouched
    assert len(np.unique(a.prediction.values)) > 1
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


# ---------------------------------------------------------------------------------------------
# exactly invariant models give flat results
# ---------------------------------------------------------------------------------------------


def dyadic_images(n: int, c: int, size: int, seed: int, low: int = 0) -> np.ndarray:
    """Images with values k/16 (exact in float32, so sums/means are exact)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(low, 17, (n, c, size, size)) / 16.0).astype(np.float32)


class PooledLinear(nn.Module):
    """Global average of each channel, then a linear map: invariant to pixel permutations."""

    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


class MeanNormalisedLinear(nn.Module):
    """Divides each image by its mean, then a linear map: invariant to brightness gains."""

    def __init__(self, numel: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(numel, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc((x / x.mean(dim=(1, 2, 3), keepdim=True)).flatten(1))


def assert_flat(result: osc.OrbitResult) -> None:
    for v in VARIABLES:
        vals = result[v].values
        assert np.array_equal(vals, np.repeat(vals[:, :1], vals.shape[1], axis=1)), v


def test_invariant_model_flat_on_rotation90():
    images = dyadic_images(12, 2, 8, seed=0)
    labels = np.arange(12) % 3
    orbit = Rotation([0, 90, 180, 270, 360, -90])
    run = evaluate(PooledLinear(2, 3), (images, labels), orbit, batch_size=5)
    assert_flat(run.result)
    # sanity: a non-invariant model on the same data is not flat
    other = evaluate(nn.Sequential(nn.Flatten(), nn.Linear(128, 3)), (images, labels), orbit).result
    assert not np.array_equal(other.confidence.values[:, 0], other.confidence.values[:, 1])


def test_invariant_model_flat_on_brightness():
    images = dyadic_images(12, 1, 8, seed=1, low=1)  # strictly positive: mean > 0
    labels = np.arange(12) % 4
    orbit = Brightness([0.25, 0.5, 1.0])  # exact power-of-two gains, never clipped
    run = evaluate(MeanNormalisedLinear(64, 4), (images, labels), orbit, batch_size=5)
    assert_flat(run.result)
    other = evaluate(nn.Sequential(nn.Flatten(), nn.Linear(64, 4)), (images, labels), orbit).result
    assert not np.array_equal(other.confidence.values[:, 0], other.confidence.values[:, 1])


# ---------------------------------------------------------------------------------------------
# clear errors
# ---------------------------------------------------------------------------------------------


class NaNWhenTopRightLit(nn.Module):
    """Returns NaN scores for inputs whose top-right pixel is lit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.flatten(1)[:, :3].clone()
        out[x[:, 0, 0, -1] > 0.5] = float("nan")
        return out


def test_nan_model_error_names_sample_and_element():
    # sample 6 has its top-LEFT pixel lit; a CCW quarter turn moves top-left -> bottom-left ->
    # bottom-right -> top-right, so the NaN appears at orbit element 3 (270 degrees) only.
    images = np.zeros((10, 1, 8, 8), np.float32)
    images[:, :, 2:6, 2:6] = 0.3
    images[6, 0, 0, 0] = 1.0
    labels = np.zeros(10, dtype=np.int64)
    for batch_size, forward_batch in [(4, 4), (10, 512), (3, 1)]:
        with pytest.raises(ModelError) as info:
            evaluate(NaNWhenTopRightLit(), (images, labels), Rotation90(), batch_size=batch_size,
                     forward_batch=forward_batch)
        msg = str(info.value)
        assert "NaN" in msg and "sample 6" in msg and "orbit element 3" in msg, msg


def test_inf_output_is_model_error():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    with torch.no_grad():
        model[1].bias.fill_(float("inf"))
    with pytest.raises(ModelError, match="sample 0"):
        evaluate(model, (np.zeros((2, 1, 8, 8), np.float32), np.array([0, 1])), Rotation([0]))


def test_model_failing_on_shape_is_model_error_with_shape():
    model = nn.Sequential(nn.Flatten(), nn.Linear(100, 10))  # expects 10x10 images
    images = np.zeros((5, 1, 8, 8), np.float32)
    with pytest.raises(ModelError) as info:
        evaluate(model, (images, np.zeros(5, dtype=np.int64)), Rotation([0, 90]))
    msg = str(info.value)
    assert "1, 8, 8)" in msg and "(B, C, H, W)" in msg, msg
    assert isinstance(info.value.__cause__, RuntimeError)


def test_reference_cnn_wrong_size_is_model_error():
    images = np.zeros((2, 1, 16, 16), np.float32)
    with pytest.raises(ModelError, match=r"16, 16"):
        evaluate(ReferenceCNN(), (images, np.array([0, 1])), Rotation([0]))


def test_model_outputs_are_read_by_the_task():
    """Task v2: a (logits, features) tuple is read as its logits; a non-tensor output is a ModelError."""

    class Logits(nn.Module):
        def forward(self, x):
            return x.flatten(1)[:, :3] * 10

    class TupleModel(Logits):
        def forward(self, x):
            return super().forward(x), x.mean()

    class SetModel(nn.Module):
        def forward(self, x):
            return {"features": x}

    data = (np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32), np.array([0, 1, 2, 0]))
    plain = evaluate(Logits(), data, Rotation([0, 45])).result
    tupled = evaluate(TupleModel(), data, Rotation([0, 45])).result
    np.testing.assert_array_equal(plain.confidence.values, tupled.confidence.values)
    with pytest.raises(ModelError, match="dict"):
        evaluate(SetModel(), data, Rotation([0]))


@pytest.mark.parametrize("bad", [1.5, -0.2])
def test_images_outside_unit_range_are_data_errors(bad):
    images = np.full((3, 1, 8, 8), 0.5, np.float32)
    images[1, 0, 3, 3] = bad
    with pytest.raises(DataError, match=r"\[0, 1\]") as info:
        evaluate(one_conv_net(), (images, np.zeros(3, dtype=np.int64)), Rotation([0]))
    assert "normalize" in str(info.value)


def test_three_dimensional_images_are_data_errors():
    images = np.zeros((3, 8, 8), np.float32)
    with pytest.raises(DataError, match="channel"):
        evaluate(one_conv_net(), (images, np.zeros(3, dtype=np.int64)), Rotation([0]))

    class NoChannel(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return torch.zeros(8, 8), 0

    with pytest.raises(DataError, match="channel"):
        evaluate(one_conv_net(), NoChannel(), Rotation([0]))


def test_integer_images_other_than_uint8_are_data_errors():
    with pytest.raises(DataError, match="uint8"):
        evaluate(one_conv_net(), (np.zeros((2, 1, 8, 8), np.int64), np.array([0, 1])), Rotation([0]))


def test_mismatched_lengths_are_data_errors():
    with pytest.raises(DataError, match="length"):
        evaluate(one_conv_net(), (np.zeros((3, 1, 8, 8), np.float32), np.array([0, 1])), Rotation([0]))


@pytest.mark.parametrize("label", [10, -1])
def test_labels_out_of_range_are_value_errors(label):
    labels = np.array([0, label, 2])
    with pytest.raises(ValueError, match="labels must lie in"):
        evaluate(one_conv_net(), (np.zeros((3, 1, 8, 8), np.float32), labels), Rotation([0]))


def test_wrong_model_and_orbit_types_are_type_errors():
    data = (np.zeros((2, 1, 8, 8), np.float32), np.array([0, 1]))
    with pytest.raises(TypeError, match="nn.Module"):
        evaluate(lambda x: x, data, Rotation([0]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Orbit"):
        evaluate(one_conv_net(), data, [0, 90])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        evaluate(one_conv_net(), data, Rotation([0]), batch_size=0)


@pytest.mark.parametrize("data", [42, "images.npy", {"x": 1}])
def test_wrong_data_type_is_type_error(data):
    with pytest.raises(TypeError, match="Dataset"):
        evaluate(one_conv_net(), data, Rotation([0]))


def test_empty_dataset_is_data_error(tmp_path):
    empty = (np.zeros((0, 1, 8, 8), np.float32), np.zeros(0, dtype=np.int64))
    with pytest.raises(DataError, match="empty"):
        evaluate(one_conv_net(), empty, Rotation([0, 90]))
    with pytest.raises(DataError, match="empty"):
        evaluate(one_conv_net(), empty, Rotation([0, 90]), store=tmp_path / "store")
    with pytest.raises(DataError, match="empty"):
        evaluate(one_conv_net(), FloatDataset(empty[0], empty[1]), Rotation([0]))


# ---------------------------------------------------------------------------------------------
# determinism and model state
# ---------------------------------------------------------------------------------------------


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)) + torch.randn(len(x), 4)


def test_same_seed_same_result_and_caller_rng_untouched():
    images = dyadic_images(10, 1, 8, seed=2)
    labels = np.arange(10) % 4
    orbit = Rotation([0, 30, 90])
    model_a, model_b = Noisy(), Noisy()
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a = evaluate(model_a, (images, labels), orbit, seed=3, batch_size=4).result
    # the engine seeds its own generator and restores the caller's
    assert torch.equal(torch.random.get_rng_state(), state)
    b = evaluate(model_b, (images, labels), orbit, seed=3, batch_size=4).result
    assert_results_identical(a, b)
    c = evaluate(model_a, (images, labels), orbit, seed=4, batch_size=4).result
    assert not np.array_equal(a.confidence.values, c.confidence.values)
    # and the seed is recorded
    assert a.attrs["seed"] == 3 and c.attrs["seed"] == 4


class ModeRecorder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
        self.bn = nn.BatchNorm1d(3)
        self.seen: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(self.training or self.bn.training or self.body.training)
        return self.bn(self.body(x))


@pytest.mark.parametrize("training", [True, False])
def test_model_mode_restored_and_eval_during_run(training):
    model = ModeRecorder().train(training)
    bn_before = model.bn.running_mean.clone()
    images = dyadic_images(6, 1, 8, seed=3)
    evaluate(model, (images, np.arange(6) % 3), Rotation([0, 45]))
    assert model.seen and not any(model.seen)  # eval mode while running
    assert model.training is training
    assert all(m.training is training for m in model.modules())
    assert torch.equal(model.bn.running_mean, bn_before)  # BN statistics not updated


def test_mixed_train_eval_modes_restored():
    """A model in training mode with a frozen (eval-mode) submodule, e.g. a frozen BatchNorm,
    must get exactly its per-module modes back."""
    model = ModeRecorder().train()
    model.bn.eval()
    images = dyadic_images(6, 1, 8, seed=3)
    evaluate(model, (images, np.arange(6) % 3), Rotation([0]))
    assert model.training is True and model.body.training is True
    assert model.bn.training is False


def test_model_mode_restored_after_model_error():
    model = nn.Sequential(nn.Flatten(), nn.Linear(100, 3)).train()
    with pytest.raises(ModelError):
        evaluate(model, (np.zeros((2, 1, 8, 8), np.float32), np.array([0, 1])), Rotation([0]))
    assert model.training and model[1].training


# ---------------------------------------------------------------------------------------------
# streaming: one chunk at a time
# ---------------------------------------------------------------------------------------------


class RecordingDataset(Dataset):
    """Records item accesses; when the first item of chunk c is requested, records how many
    chunks the store has already committed."""

    def __init__(self, n: int, chunk: int, home) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.random((n, 1, 8, 8), dtype=np.float32)
        self.labels = rng.integers(0, 3, n)
        self.chunk, self.home = chunk, home
        self.accesses: list[int] = []
        self.committed_at_chunk_start: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        self.accesses.append(i)
        if i % self.chunk == 0 and (self.home / "catalog.sqlite").exists():
            runs = osc.Store(self.home, create=False).runs()
            done = runs[0].chunks_done if runs else 0
            self.committed_at_chunk_start.setdefault(i // self.chunk, done)
        return torch.from_numpy(self.images[i]), int(self.labels[i])


class BatchRecorder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 3)
        self.batches: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.batches.append(len(x))
        return self.fc(x.flatten(1))


def test_streams_one_chunk_at_a_time_into_the_store(tmp_path):
    n, chunk, fb = 50, 8, 12
    home = tmp_path / "store"
    ds = RecordingDataset(n, chunk, home)
    model = BatchRecorder()
    progress: list[tuple[int, int | None]] = []
    orbit = Rotation([0, 30, 90])
    run = evaluate(model, ds, orbit, store=home, batch_size=chunk, forward_batch=fb,
                   progress=lambda d, t: progress.append((d, t)))
    n_chunks = math.ceil(n / chunk)
    # every item is read once, in order (a single up-front probe of item 0 is allowed)
    assert ds.accesses[-n:] == list(range(n)) and len(ds.accesses) <= n + 1
    # chunks are read ahead of the model and written behind it, boundedly: when chunk c is read,
    # all but the last PREFETCH_CHUNKS + 3 (read ahead, in the model, queued, being written) are
    # committed to the store
    lag = PREFETCH_CHUNKS + 3
    assert set(ds.committed_at_chunk_start) == set(range(n_chunks))
    assert all(c - lag <= done <= c for c, done in ds.committed_at_chunk_start.items())
    # model calls never exceed forward_batch; progress once per chunk
    assert max(model.batches) <= fb and sum(model.batches) == n * len(orbit)
    assert progress == [(min(n, (c + 1) * chunk), n) for c in range(n_chunks)]
    # and the stored result equals an in-memory evaluation
    mem = evaluate(model, FloatDataset(ds.images, ds.labels), orbit, batch_size=chunk, forward_batch=fb)
    assert_results_identical(run.result, mem.result)


def test_labels_and_inputs_are_stored_per_sample(tmp_path):
    """The target and the untransformed input (uint8) are kept once per sample, not per element."""
    data = mnist_subset("test").subset(range(30))
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    res = evaluate(model, data, Rotation([0, 45, 90]), store=tmp_path, batch_size=8).result
    assert res["label"].dims == ("sample",) and res["input"].dims == ("sample", "channel", "y", "x")
    np.testing.assert_array_equal(res["label"].values, np.asarray(data.labels))
    np.testing.assert_array_equal(res["input"].values[:, 0], np.asarray(data.images))  # lossless for 8-bit digits
    off = evaluate(model, data, Rotation([0, 45, 90]), store_inputs=False).result
    assert "input" not in off.data and "label" in off.data


def test_torch_export_models_evaluate_like_the_original(tmp_path):
    """torch.export graphs refuse .eval(); the engine must still run them (found by a newcomer)."""
    from orbitscope.models.loading import load_user_model

    data = mnist_subset("test").subset(range(12))
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 26 * 26, 10)).eval()
    example = (torch.rand(2, 1, 28, 28),)
    path = tmp_path / "m.pt2"
    batch = torch.export.Dim("batch")
    torch.export.save(torch.export.export(model, example, dynamic_shapes={"input": {0: batch}}), str(path))
    exported = load_user_model(str(path))
    ours = evaluate(exported, data, Rotation([0, 90])).result
    ref = evaluate(model, data, Rotation([0, 90])).result
    np.testing.assert_allclose(ours.confidence.values, ref.confidence.values, atol=1e-6)
    # a graph exported with a fixed batch size fails with a ModelError that says what to do
    torch.export.save(torch.export.export(model, example), str(tmp_path / "static.pt2"))
    with pytest.raises(ModelError, match="dynamic batch"):
        evaluate(load_user_model(str(tmp_path / "static.pt2")), data, Rotation([0, 90]))

"""Optimised by default, with proof: the first-batch check, its fallbacks, what the run records,
run identities, repeated elements run once, mixed precision, forward-batch sizing."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.engine.evaluation import default_forward_batch, memory_budget
from orbitscope.engine.optimization import TOLERANCE, first_batch_check
from orbitscope.errors import ModelError, SpecError
from orbitscope.kinds.image import prepare_images


def bn_cnn(seed: int = 0) -> nn.Module:
    """A small conv/BatchNorm classifier with non-trivial running statistics (as after training)."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                        nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 10))
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    return net.eval()


def _data(n: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 12, 12, generator=g), torch.randint(0, 10, (n,), generator=g)


def provenance(run: osc.Run) -> dict:
    value = run.result.attrs["optimization"]
    return json.loads(value) if isinstance(value, str) else value


def _values(run: osc.Run, name: str) -> np.ndarray:
    return np.asarray(run.result.data[name].values)


def test_default_runs_the_optimised_model_and_records_the_check(tmp_path) -> None:
    net, data = bn_cnn(), _data()
    fast = osc.evaluate(net, data, osc.Rotation([0, 30, 90]), store=tmp_path / "a", batch_size=8)
    plain = osc.evaluate(net, data, osc.Rotation([0, 30, 90]), store=tmp_path / "b", batch_size=8, optimize=False)
    rec = provenance(fast)
    assert rec["requested"] == "auto" and rec["ran"] == "optimized"
    assert rec["rewrites"] == ["fold_batchnorm", "channels_last"]
    check = rec["check"]
    assert check["passed"] and check["predictions_equal"] and check["tolerance"] == TOLERANCE["float32"]
    assert check["rows"] == 2 * 8  # chunk 0 (8 samples) under CHECK_MIN_ROWS // 8 = 2 elements (a short run)
    assert 0 < check["max_difference"] <= TOLERANCE["float32"]
    assert provenance(plain)["ran"] == "original" and provenance(plain)["reason"] == "optimize=False"
    assert fast.run_id != plain.run_id  # what ran is part of the identity
    # the predictions are those of the original model; probabilities agree to float rounding
    np.testing.assert_array_equal(_values(fast, "correct"), _values(plain, "correct"))
    np.testing.assert_allclose(_values(fast, "confidence"), _values(plain, "confidence"), atol=1e-5)
    assert not np.array_equal(_values(fast, "confidence"), _values(plain, "confidence"))  # it did run another model


def test_optimize_false_equals_a_plain_loop_bit_for_bit() -> None:
    """optimize=False: the model as given, at the engine's old forward batch; compared with the
    model called on each element's warped inputs by hand."""
    net, (x, y) = bn_cnn(), _data(40)
    angles = [0.0, 45.0, 90.0]
    run = osc.evaluate(net, (x, y), osc.Rotation(angles), optimize=False, batch_size=40)
    with torch.inference_mode():
        warped = osc.warp_images(x, osc.Rotation(angles).transforms())  # (K, B, C, H, W)
        logits = net(warped.reshape(-1, 1, 12, 12)).reshape(len(angles), 40, 10)
    expected = torch.softmax(logits, -1).gather(-1, y.expand(len(angles), -1)[..., None])[..., 0].T
    np.testing.assert_array_equal(_values(run, "confidence"), expected.numpy())


class _LayoutSensitive(nn.Module):
    """Outputs that depend on the weights' memory format: channels_last changes them by 1."""

    def __init__(self) -> None:
        super().__init__()
        self.body = bn_cnn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + float(self.body[3].weight.is_contiguous())


class _NeedsItsBatchNorm(nn.Module):
    """Reads its BatchNorm's statistics in forward: folding replaces the BatchNorm by an Identity."""

    def __init__(self) -> None:
        super().__init__()
        self.body = bn_cnn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + 0 * self.body[1].running_mean.sum()


@pytest.mark.parametrize("model, reason", [(_LayoutSensitive, "differs by"), (_NeedsItsBatchNorm, "failed")])
def test_a_failed_check_falls_back_to_the_original_with_the_reason(model, reason, tmp_path, caplog) -> None:
    net, data = model(), _data()
    with caplog.at_level(logging.WARNING, logger="orbitscope.engine.optimization"):
        auto = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path, batch_size=8)
    rec = provenance(auto)
    assert rec["ran"] == "original" and rec["check"]["passed"] is False
    assert reason in rec["reason"] and "first-batch check failed" in rec["reason"]
    assert any("not used" in r.message for r in caplog.records)
    plain = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path, batch_size=8, optimize=False)
    assert plain.reused and plain.run_id == auto.run_id  # the fallback is the original model's run
    with pytest.raises(ModelError, match="optimize=True"):
        osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, optimize=True)


def test_hooks_activations_and_training_mode_keep_the_original(tmp_path) -> None:
    net, data = bn_cnn(), _data()
    handle = net[0].register_forward_hook(lambda m, i, o: None)
    run = osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8)
    assert provenance(run)["ran"] == "original" and "hooks" in provenance(run)["reason"]
    with pytest.raises(SpecError, match="hooks"):
        osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, optimize=True)
    handle.remove()

    run = osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, activations=["0"])
    assert provenance(run)["ran"] == "original" and "activations" in provenance(run)["reason"]
    with pytest.raises(SpecError, match="activations"):
        osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, activations=["0"], optimize=True)

    class StaysTraining(nn.Module):  # e.g. a graph exported in training mode: eval() cannot change it
        def __init__(self) -> None:
            super().__init__()
            self.body = bn_cnn()

        def train(self, mode: bool = True) -> "StaysTraining":
            return self

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    stubborn = StaysTraining()
    run = osc.evaluate(stubborn, data, osc.Rotation([0, 90]), batch_size=8)
    assert provenance(run)["ran"] == "original" and "training mode" in provenance(run)["reason"]


def test_nothing_to_optimise_runs_the_original_under_its_identity(tmp_path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(144, 10)).eval()
    data = _data()
    plain = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path, optimize=False)
    auto = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path)
    assert auto.reused and auto.run_id == plain.run_id
    fresh = osc.evaluate(net, data, osc.Rotation([0, 90]))
    assert "nothing to optimise" in provenance(fresh)["reason"] and fresh.run_id == plain.run_id


def test_finished_runs_are_reused_without_a_new_check(tmp_path, monkeypatch) -> None:
    net, data = bn_cnn(), _data()
    first = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path, batch_size=8)
    import orbitscope.engine.evaluation as evaluation

    def no_check(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("a finished run needs no first-batch check")

    monkeypatch.setattr(evaluation, "verify_on_first_batch", no_check)
    again = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path, batch_size=8)
    assert again.reused and again.run_id == first.run_id
    explicit = osc.evaluate(net, data, osc.Rotation([0, 90]), store=tmp_path, batch_size=8, optimize=True)
    assert explicit.reused and explicit.run_id == first.run_id


class _Counting(nn.Module):
    """Counts the rows it is called on (a plain attribute, not a hook: it stays optimisable)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = bn_cnn()
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        return self.body(x)


def test_repeated_elements_run_once_when_optimising() -> None:
    from contextlib import ExitStack

    from orbitscope.engine.evaluation import plan_run

    data = _data(16)
    orbit = osc.Rotation([0, 90, 180, 270, 360])  # 360° is 0° again
    for optimize, distinct in (("auto", 4), (False, 5)):
        with ExitStack() as stack:
            planned = plan_run(stack, _Counting(), data, orbit, batch_size=16, optimize=optimize)
            assert len(planned.ctx.transforms) == distinct  # the elements the model runs on
    counting = _Counting()
    run = osc.evaluate(counting, data, orbit, batch_size=16)
    conf = _values(run, "confidence")
    np.testing.assert_array_equal(conf[:, 4], conf[:, 0])  # 360° takes 0°'s values
    assert counting.rows == provenance(run)["check"]["rows"]  # the original ran on the check's rows only
    plain = _Counting()
    osc.evaluate(plain, data, orbit, batch_size=16, optimize=False)
    assert plain.rows == 16 * 5  # as before: every element, no check


class MarginNet(nn.Module):
    """Class 0 wins by 10 logits whatever the input: a mixed-precision forward cannot flip it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = bn_cnn()
        self.register_buffer("offset", torch.tensor([10.0] + [0.0] * 9))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.1 * torch.tanh(self.body(x)) + self.offset


def test_bfloat16_is_opt_in_and_checked() -> None:
    data = _data()
    net = MarginNet().eval()
    fp32 = osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, optimize=False)
    half = osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, precision="bfloat16")
    rec = provenance(half)
    assert rec["ran"] == "optimized" and rec["precision"] == "bfloat16"
    assert rec["check"]["tolerance"] == TOLERANCE["bfloat16"] and rec["check"]["passed"]
    assert half.run_id != osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8).run_id
    np.testing.assert_array_equal(_values(half, "correct"), _values(fp32, "correct"))
    np.testing.assert_allclose(_values(half, "confidence"), _values(fp32, "confidence"), atol=5e-3)
    assert _values(half, "confidence").dtype == np.float32
    with pytest.raises(SpecError, match="precision"):
        osc.evaluate(net, data, osc.Rotation([0, 90]), precision="float8")
    with pytest.raises(SpecError, match="optimize=False"):
        osc.evaluate(net, data, osc.Rotation([0, 90]), precision="bfloat16", optimize=False)
    with pytest.raises(SpecError, match="optimize must be"):
        osc.evaluate(net, data, osc.Rotation([0, 90]), optimize="fast")


def test_first_batch_check_compares_outputs_and_predictions() -> None:
    x = torch.zeros(4, 1)
    ref = torch.tensor([[1.0, 2.0], [3.0, float("nan")], [0.5, 0.49], [2.0, 1.0]])

    def score(out: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"label": torch.nan_to_num(out, nan=-1).argmax(1), "top": torch.nan_to_num(out).max(1).values}

    def check(other: torch.Tensor, precision: str = "float32"):  # noqa: ANN202
        return first_batch_check(lambda _: ref, lambda _: other, x, score, precision)

    record, problem = check(ref + 5e-5)
    assert problem is None and record["passed"] and record["max_difference"] == pytest.approx(5e-5 / 3, rel=0.05)
    assert record["predictions_equal"] is True
    record, problem = check(ref + 3e-4)  # above 1e-4 × max |output| = 3e-4 / 3
    assert problem is not None and "above" in problem
    assert record["predictions_equal"] is None  # the outputs failed first: predictions not compared
    with_inf = ref.clone()
    with_inf[3, 1] = -float("inf")  # e.g. padded detection scores
    record, problem = first_batch_check(lambda _: with_inf, lambda _: with_inf + 1e-6, x, score, "float32")
    assert problem is None and record["max_difference"] == pytest.approx(1e-6 / 3, rel=0.05)
    other_inf = with_inf.clone()
    other_inf[3, 1] = float("inf")
    _, problem = first_batch_check(lambda _: with_inf, lambda _: other_inf, x, score, "float32")
    assert problem is not None and "infinite" in problem
    flipped = ref.clone()
    flipped[2] = torch.tensor([0.1, 0.5])
    record, problem = check(flipped, "bfloat16")  # 0.4 / 3 = 0.13: above even the bfloat16 tolerance
    assert problem is not None and not record["passed"]
    near_tie = ref.clone()
    near_tie[2] = torch.tensor([0.49, 0.5])  # within the bfloat16 tolerance, but the prediction flips
    record, problem = check(near_tie, "bfloat16")
    assert problem is not None and "predictions" in problem and record["predictions_equal"] is False
    nan_moved = ref.clone()
    nan_moved[1] = torch.tensor([float("nan"), 3.0])
    assert "NaN" in check(nan_moved)[1]
    assert "shape" in check(ref[:3])[1]


def test_uint8_images_moved_before_conversion_give_the_same_values() -> None:
    """prepare_images now moves uint8 to the device before dividing by 255: same float32 values
    (the transfer itself is only exercised on a GPU, tests/test_gpu.py)."""
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (5, 3, 7, 7), dtype=torch.uint8, generator=g)
    out = prepare_images(raw, "cpu")
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, raw.float() / 255.0, rtol=0, atol=0)


def test_forward_batches_follow_the_device() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert default_forward_batch(None, "image", cpu, fast=False) == 512  # as before
    assert default_forward_batch(None, "image", cuda, fast=False) == 512  # the original model: as before
    assert memory_budget(None, cuda, fast=False, mem_get_info=lambda d: (80 * 2**30, 139 * 2**30)) == 1024.0
    assert default_forward_batch(None, "image", cpu, fast=True) == 128
    assert default_forward_batch(None, "points", cpu, fast=True) == 64
    assert default_forward_batch(None, "image", cuda, fast=True) == 4096
    assert default_forward_batch(300, "image", cuda, fast=True) == 300
    assert memory_budget(None, cpu) == 1024.0
    assert memory_budget(None, cuda, mem_get_info=lambda d: (80 * 2**30, 139 * 2**30)) == 40 * 1024
    assert memory_budget(256.0, cuda, mem_get_info=lambda d: (80 * 2**30, 139 * 2**30)) == 256.0
    # ResNet-sized inputs on 80 GiB free: activations of 64 × 3·224·224 floats per input
    fb = osc.engine.evaluation.forward_batch_for(4096, 40 * 1024, 3 * 224 * 224)
    assert fb == int(40 * 1024 * 2**20 // (3 * 224 * 224 * 4 * 64))


def test_cli_optimize_choices() -> None:
    from orbitscope.cli.common import parse_optimize

    assert [parse_optimize(v) for v in ("auto", "on", "OFF", "true", "no")] == ["auto", True, False, True, False]
    with pytest.raises(ValueError, match="use auto"):
        parse_optimize("fast")


def test_a_failing_model_fails_as_before_whatever_optimize_says() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = bn_cnn()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("deliberate failure")

    for optimize in ("auto", True):
        with pytest.raises(ModelError, match="the model failed on a batch .*deliberate failure"):
            osc.evaluate(Broken(), _data(), osc.Rotation([0, 90]), batch_size=8, optimize=optimize)


def test_compile_stays_in_process() -> None:
    with pytest.raises(SpecError, match="compile=True runs in this process only"):
        osc.evaluate(bn_cnn(), _data(), osc.Rotation([0, 90]), compile=True, executor="process")


class _ResidualBlock(nn.Module):
    """Conv/BatchNorm pairs held as attributes (as in ResNet blocks), not inside a Sequential."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.conv1, self.bn1 = nn.Conv2d(1, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6)
        self.conv2, self.bn2 = nn.Conv2d(6, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6)
        self.head = nn.Linear(6, 10)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)) + h)
        return self.head(h.mean(dim=(2, 3)))


def test_batchnorm_outside_a_sequential_is_folded_through_a_trace() -> None:
    from orbitscope.engine.optimization import rewrite_model

    net = _ResidualBlock().eval()
    fast, names = rewrite_model(net)
    assert names == ("fold_batchnorm", "channels_last")
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fast.modules())  # both pairs folded
    assert sum(isinstance(m, nn.BatchNorm2d) for m in net.modules()) == 2  # the model itself is untouched
    data = _data()
    run = osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8)
    plain = osc.evaluate(net, data, osc.Rotation([0, 90]), batch_size=8, optimize=False)
    assert provenance(run)["ran"] == "optimized" and provenance(run)["check"]["passed"]
    np.testing.assert_array_equal(_values(run, "correct"), _values(plain, "correct"))
    np.testing.assert_allclose(_values(run, "confidence"), _values(plain, "confidence"), atol=1e-5)
    # a forward that checks its input's shape cannot be traced: the Sequential folding stays
    nero_fast, nero_names = rewrite_model(osc.models.NeroCNN().eval())
    assert "fold_batchnorm" in nero_names and type(nero_fast).__name__ == "NeroCNN"


def test_detections_are_compared_as_sets_so_near_ties_may_swap() -> None:
    """Two boxes of one row whose scores differ by 1e-7 swap places (below the top one) in the
    optimised model's output (as BatchNorm folding can make them): position by position the check
    fails; as the task's declared sets (Detection.unordered_dims) it passes. A changed label or a
    box moved by more than the tolerance still fails. (A near-tie at the top still fails: the
    row's IoU and confidence follow the top box.)"""
    from orbitscope.engine.optimization import compare_as_sets
    from orbitscope.kinds.boxes import Boxes

    task = osc.Detection(max_detections=3, max_objects=2)
    target = Boxes(torch.tensor([[[10.0, 10.0, 30.0, 30.0], [40.0, 40.0, 60.0, 60.0]]]), torch.tensor([[1, 2]]),
                   torch.tensor([[True, True]]))
    xyxy = torch.tensor([[[10.0, 10.0, 30.0, 30.0], [41.0, 40.0, 60.0, 61.0], [0.0, 0.0, 5.0, 5.0]]])
    labels, valid = torch.tensor([[1, 2, 3]]), torch.ones(1, 3, dtype=torch.bool)
    scores = torch.tensor([[0.9, 0.3, 0.3 - 1e-7]])  # both on one side of every score threshold
    ref = Boxes(xyxy, labels, valid, scores)
    order = [0, 2, 1]  # the near-tie swapped, scores still sorted
    swapped = Boxes(xyxy[:, order], labels[:, order], valid, scores)
    unordered = {v.name: v.extra_dims[0] for v in task.variables(0) if v.extra_dims
                 and v.extra_dims[0] in task.unordered_dims}
    assert {"det_scores", "det_labels", "det_matched", "top_boxes"} <= set(unordered)

    def check(other: Boxes, sets: dict[str, str] | None):  # noqa: ANN202
        return first_batch_check(lambda _: ref, lambda _: other, torch.zeros(1), lambda o: task.score(o, target),
                                 "float32", sets)

    record, problem = check(swapped, None)
    assert problem is not None and not record["passed"]
    record, problem = check(swapped, unordered)
    assert problem is None and record["passed"] and record["predictions_equal"] is True
    relabelled = Boxes(xyxy[:, order], torch.tensor([[1, 3, 1]]), valid, swapped.scores)
    assert check(relabelled, unordered)[1] is not None
    moved = Boxes(xyxy[:, order] + torch.tensor([0.0, 0.0, 0.0, 0.5]), labels[:, order], valid, swapped.scores)
    top_swapped = Boxes(xyxy[:, [1, 0, 2]], labels[:, [1, 0, 2]], valid, scores)
    assert check(top_swapped, unordered)[1] is not None
    assert check(moved, unordered)[1] is not None

    # the pairing itself, against hand-made sets: NaN pairs with NaN; every entry is used once
    a = {"s": torch.tensor([[0.5, 0.5, float("nan")]]), "l": torch.tensor([[1, 1, -1]])}
    b = {"s": torch.tensor([[0.5 + 1e-6, float("nan"), 0.5]]), "l": torch.tensor([[1, -1, 1]])}
    worst, problem = compare_as_sets(a, b, 1e-4)
    assert problem is None and worst == pytest.approx(1e-6, rel=0.05)  # float32 rounding of 0.5 + 1e-6
    b_dup = {"s": torch.tensor([[0.5, 0.7, float("nan")]]), "l": torch.tensor([[1, 1, -1]])}
    assert compare_as_sets(a, b_dup, 1e-4)[1] is not None


def test_point_cloud_networks_fold_linear_batchnorm_and_image_heads_keep_theirs() -> None:
    """Linear -> BatchNorm1d pairs (PointNet's per-point layers and head) fold in point-cloud runs:
    the folded copy equals the model (1e-5 relative) and has no BatchNorm1d left, a default run is
    optimised and checked, and its values agree with the model as given. An image model's
    Linear -> BatchNorm1d head is left alone (its optimised copy is as before)."""
    from orbitscope.engine.optimization import rewrite_model
    from orbitscope.models import fold_batchnorm
    from orbitscope.models.point_nets import PointNet

    torch.manual_seed(0)
    net = PointNet(4, width=8)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm1d):  # statistics as after training
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    net.eval()
    folded = fold_batchnorm(net, linear=True)
    from orbitscope.models.reference import FoldedLinearBatchNorm

    pairs = [m for m in folded.modules() if isinstance(m, FoldedLinearBatchNorm)]
    assert len(pairs) == 4 and all(isinstance(p.fused, nn.Linear) and p.fused.bias is not None for p in pairs)
    # every BatchNorm1d left sits in a folded pair (run only for inputs that are not 2-D)
    assert sum(isinstance(m, nn.BatchNorm1d) for m in folded.modules()) == len(pairs)
    assert sum(isinstance(m, nn.BatchNorm1d) for m in fold_batchnorm(net).modules()) == 4  # the default: convs only
    x = torch.randn(6, 50, 3)
    with torch.inference_mode():
        want = net(x)
        # an independent reference for one pair: Linear then BatchNorm1d by its formula
        lin, bn = net.features.layers[0], net.features.layers[1]
        h = x.reshape(-1, 3) @ lin.weight.T
        ref = (h - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
        torch.testing.assert_close(folded.features.layers[0](x.reshape(-1, 3)), ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(folded(x), want, rtol=1e-5, atol=1e-6)
    clouds = torch.randn(8, 50, 3)
    labels = torch.randint(0, 4, (8,))
    from orbitscope.models import NeroCNN
    from orbitscope.tasks import PointCloudClassification

    task = PointCloudClassification()
    orbit = osc.parse_orbit("so3-random:12:0")
    run = osc.evaluate(net, (clouds, labels), orbit, task)
    plain = osc.evaluate(net, (clouds, labels), orbit, task, optimize=False)
    rec = provenance(run)
    assert rec["ran"] == "optimized" and "fold_batchnorm" in rec["rewrites"] and rec["check"]["passed"]
    np.testing.assert_array_equal(_values(run, "prediction"), _values(plain, "prediction"))
    np.testing.assert_allclose(_values(run, "confidence"), _values(plain, "confidence"), rtol=1e-5, atol=1e-6)
    image_net = NeroCNN().eval()
    fast, _ = rewrite_model(image_net)
    assert sum(isinstance(m, nn.BatchNorm1d) for m in fast.modules()) == 1


def test_review_fixes_of_the_set_check_the_linear_fold_and_a_conv1d_point_net() -> None:
    """Near-equal entries that pair only crosswise pass (a matching, not a greedy pairing); labels
    are never equal to floats; a Linear -> BatchNorm1d pair on a 3-D input runs the original pair;
    a Conv1d -> BatchNorm1d point-cloud model has nothing to fold and runs as given."""
    from orbitscope.engine.optimization import compare_as_sets
    from orbitscope.models import fold_batchnorm
    from orbitscope.tasks import PointCloudClassification

    ref = {"s": torch.tensor([[0.50005, 0.5]]), "l": torch.tensor([[1, 1]])}
    cand = {"s": torch.tensor([[0.5, 0.50011]]), "l": torch.tensor([[1, 1]])}
    assert compare_as_sets(ref, cand, 1e-4)[1] is None  # greedy would pair 0.50005 with 0.5 first, then fail
    assert compare_as_sets({"l": torch.tensor([[2, -1]])}, {"l": torch.tensor([[2.7, -1.2]])}, 1e-4)[1] is not None

    torch.manual_seed(0)
    pair = nn.Sequential(nn.Linear(3, 16), nn.BatchNorm1d(16)).eval()
    pair[1].running_mean.uniform_(-1, 1)
    pair[1].running_var.uniform_(0.5, 2)
    folded = fold_batchnorm(pair, linear=True)
    with torch.inference_mode():
        for x in (torch.randn(5, 3), torch.randn(4, 16, 3)):  # 3-D: BatchNorm1d normalises axis 1 (16)
            torch.testing.assert_close(folded(x), pair(x), rtol=1e-5, atol=1e-6)

    class ConvPointNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn, self.fc = nn.Conv1d(3, 8, 1), nn.BatchNorm1d(8), nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.bn(self.conv(x.transpose(1, 2)))).amax(2))

    clouds, labels = torch.randn(6, 20, 3), torch.randint(0, 4, (6,))
    net = ConvPointNet().eval()
    auto = osc.evaluate(net, (clouds, labels), "octahedral", PointCloudClassification())
    off = osc.evaluate(net, (clouds, labels), "octahedral", PointCloudClassification(), optimize=False)
    rec = provenance(auto)
    assert rec["ran"] == "original" and "nothing to optimise" in rec["reason"] and auto.run_id == off.run_id

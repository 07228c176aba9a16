"""Models equivariant by construction give flat NERO results on the right group; deliberately
broken ones give the pattern predicted in closed form. One test per data kind (boxes over a window
on context, flow under D4 × time reversal, point clouds under SO(3)), each with a task defined
here: a new task is a class plus a registration, and the engine needs nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import orbitscope as osc
from orbitscope.group import D4, NeroSO3, Octahedral, Translation, d4_time_reversal
from orbitscope.kinds import Boxes, box_area, fuse_boxes, get_kind
from orbitscope.tasks import Classification, Task, Variable, register_task

from helpers import Pairs


# ------------------------------------------------------------------------------------ boxes
@register_task
@dataclass(frozen=True)
class TopBoxIoU(Task):
    """The model returns one box (B, 4) xyxy for the key object (the first valid target box)."""

    kind: str = field(default="test-top-box-iou", init=False)
    input_kind = "window"
    target_kind = "boxes"
    output_kind = "boxes"
    supports_consensus = True

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        return [Variable("iou", "float32", kind="probability", label="IoU"),
                Variable("visible", "uint8", kind="binary", label="object in view")]

    def score(self, outputs: Tensor, targets: Boxes, g) -> dict[str, Tensor]:
        gt = targets.xyxy[:, 0]
        visible = targets.valid[:, 0]
        lo = torch.maximum(outputs[:, :2], gt[:, :2])
        hi = torch.minimum(outputs[:, 2:], gt[:, 2:])
        inter = (hi - lo).clamp_min(0).prod(-1)
        iou = inter / (box_area(outputs) + box_area(gt) - inter)
        return {"iou": torch.where(visible, iou, torch.nan), "visible": visible.to(torch.uint8)}

    def canonicalize(self, outputs: Tensor, g, **context) -> Boxes:
        as_boxes = Boxes(outputs[:, None], torch.ones(len(outputs), 1, dtype=torch.long),
                         torch.ones(len(outputs), 1, dtype=torch.bool), torch.ones(len(outputs), 1))
        return super().canonicalize(as_boxes, g, **context)

    def consensus(self, canonical: Boxes, n_elements: int, n_samples: int, weights) -> Boxes:
        return fuse_boxes(canonical, n_elements, n_samples, weights)

    def spec(self) -> dict:
        return {"kind": self.kind}


class ThresholdBox(nn.Module):
    """Bounding box (pixel edges) of the pixels above 0.5, shifted by ``bias`` pixels along x."""

    def __init__(self, bias: float = 0.0) -> None:
        super().__init__()
        self.bias = bias

    def forward(self, x: Tensor) -> Tensor:
        on = x[:, 0] > 0.5
        rows, cols = on.any(2), on.any(1)
        idx_r = torch.arange(x.shape[-2], dtype=x.dtype)
        idx_c = torch.arange(x.shape[-1], dtype=x.dtype)
        big = 1e6
        x0 = torch.where(cols, idx_c, big).amin(1)
        x1 = torch.where(cols, idx_c, -big).amax(1) + 1
        y0 = torch.where(rows, idx_r, big).amin(1)
        y1 = torch.where(rows, idx_r, -big).amax(1) + 1
        return torch.stack([x0 + self.bias, y0, x1 + self.bias, y1], 1)


def _context_objects(n: int = 6, size: int = 64, seed: int = 0):
    """Context images with one bright rectangle each (fully inside the 32 × 32 centre view), and
    its box in context pixels."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 0.3, size=(n, 1, size, size)).astype(np.float32)
    targets = []
    for i in range(n):
        w, h = rng.integers(6, 12, size=2)
        x0, y0 = rng.integers(size // 2 - 10, size // 2 + 10 - max(w, h), size=2)
        images[i, 0, y0 : y0 + h, x0 : x0 + w] = 0.9
        targets.append({"boxes": np.array([[x0, y0, x0 + w, y0 + h]], np.float32), "labels": np.array([1])})
    return images, targets


def _expected_box_in_view(box, t, view=32, ctx=64):
    """Plain loop: the box moved by t from context to view coordinates, clipped, and visible."""
    off = (ctx - view) / 2
    x0, y0, x1, y1 = box[0] - off + t[0], box[1] - off + t[1], box[2] - off + t[0], box[3] - off + t[1]
    cx0, cy0, cx1, cy1 = max(x0, 0), max(y0, 0), min(x1, view), min(y1, view)
    return (cx0, cy0, cx1, cy1), (cx1 > cx0 and cy1 > cy0), (x0 >= 0 and y0 >= 0 and x1 <= view and y1 <= view)


def test_window_over_context_shows_real_context_exactly():
    images, _ = _context_objects(2)
    view = get_kind("window").act(torch.as_tensor(images), Translation([5], [-3]).transforms(), view_size=(32, 32))
    # content moves by +t: view pixel (r, c) shows context pixel (r + 16 + 3, c + 16 - 5)
    np.testing.assert_array_equal(view[0].numpy(), images[:, :, 19:51, 11:43])


def test_boxes_follow_the_window_shift_and_bias_costs_closed_form_iou():
    images, targets = _context_objects(6)
    data = Pairs(images, targets)
    orbit = Translation(range(-24, 25, 8))
    res = osc.evaluate(ThresholdBox(), data, orbit, TopBoxIoU(), view_size=(32, 32), batch_size=4).result
    biased = osc.evaluate(ThresholdBox(bias=3.0), data, orbit, TopBoxIoU(), view_size=(32, 32)).result
    tx, ty = orbit.coords["tx"], orbit.coords["ty"]
    cases = {"out of view": 0, "partly in view": 0, "inside": 0}
    for s in range(len(images)):
        box = targets[s]["boxes"][0]
        w = box[2] - box[0]
        for i, a in enumerate(tx):
            for j, b in enumerate(ty):
                clipped, visible, inside = _expected_box_in_view(box, (a, b))
                cases["inside" if inside else "partly in view" if visible else "out of view"] += 1
                assert res.visible.values[s, i, j] == visible
                if not visible:  # an object moved out of view is not a target
                    assert np.isnan(res.iou.values[s, i, j])
                    continue
                # the analytic detector sees exactly the visible part of the object: IoU 1
                assert res.iou.values[s, i, j] == pytest.approx(1.0, abs=1e-6)
                if inside and clipped[2] + 3 <= 32:  # whole object and biased box in view
                    assert biased.iou.values[s, i, j] == pytest.approx((w - 3) / (w + 3), abs=1e-6)
    assert min(cases.values()) > 10, cases  # every case occurs
    # the stored targets are the untransformed boxes (ragged kinds are padded when read back)
    np.testing.assert_array_equal(res.target_boxes.values[:, 0], np.stack([t["boxes"][0] for t in targets]))


def test_box_consensus_is_self_consistency_not_correctness():
    """A detector biased by +3 px agrees perfectly with its own consensus (the consensus box is the
    true box + 3 px in the context frame) while its IoU with the truth is (w - 3) / (w + 3)."""
    images, targets = _context_objects(4)
    orbit = Translation([-4, 0, 4])  # the objects stay fully in view
    res = osc.evaluate(ThresholdBox(bias=3.0), Pairs(images, targets), orbit, TopBoxIoU(), view_size=(32, 32),
                       consensus=True).result
    np.testing.assert_allclose(res.consensus_iou.values, 1.0, atol=1e-6)
    w = np.array([t["boxes"][0][2] - t["boxes"][0][0] for t in targets])
    np.testing.assert_allclose(res.iou.values, ((w - 3) / (w + 3))[:, None, None] * np.ones((1, 3, 3)), atol=1e-6)
    assert res.meta("consensus_iou").needs_labels is False


def test_fuse_boxes_against_a_hand_made_case():
    # two elements, one sample: element 0 sees objects A (label 1) and B (label 2); element 1 sees A
    # shifted by 2 px and a far box C of label 1; a third element is a repeat (weight 0)
    xyxy = torch.tensor([[[0.0, 0, 10, 10], [20, 20, 30, 30]], [[2.0, 0, 12, 10], [50, 50, 52, 52]],
                         [[100.0, 100, 101, 101], [0, 0, 0, 0]]])
    rows = Boxes(xyxy, torch.tensor([[1, 2], [1, 1], [1, -1]]), torch.tensor([[True, True], [True, True], [True, False]]),
                 torch.tensor([[0.9, 0.6], [0.7, 0.2], [1.0, -1.0]]))
    fused = fuse_boxes(rows, 3, 1, [1.0, 1.0, 0.0])
    got = {tuple(b.tolist()): (int(lab), float(sc)) for b, lab, sc, ok in
           zip(fused.xyxy[0], fused.labels[0], fused.scores[0], fused.valid[0]) if ok}
    # A: IoU(A, A+2) = 80/120 > 0.5 -> averaged corners, score (0.9 + 0.7) / 2
    assert got[(1.0, 0.0, 11.0, 10.0)] == (1, pytest.approx(0.8))
    assert got[(20.0, 20.0, 30.0, 30.0)] == (2, pytest.approx(0.3))  # B: only element 0
    assert got[(50.0, 50.0, 52.0, 52.0)] == (1, pytest.approx(0.1))  # C: only element 1
    assert len(got) == 3  # the repeated element's box is not counted
    assert fused.scores[0].tolist() == sorted(fused.scores[0].tolist(), reverse=True)


def test_ragged_targets_are_padded_and_invalid_rows_marked():
    images, targets = _context_objects(5)
    targets[3] = {"boxes": np.concatenate([targets[3]["boxes"], [[0, 0, 4, 4], [1, 1, 2, 2]]]).astype(np.float32),
                  "labels": np.array([1, 2, 3])}
    res = osc.evaluate(ThresholdBox(), Pairs(images, targets), Translation([0]), TopBoxIoU(), view_size=(32, 32),
                       batch_size=2).result
    assert res.target_boxes.shape == (5, 3, 4)  # padded to the largest count over all chunks
    assert res.target_valid.values.sum(1).tolist() == [1, 1, 1, 3, 1]
    assert res.target_labels.values[3].tolist() == [1, 2, 3] and res.target_labels.values[0].tolist() == [1, -1, -1]
    assert np.isnan(res.target_boxes.values[0, 1]).all()


# ------------------------------------------------------------------------------------ flow
@register_task
@dataclass(frozen=True)
class FlowError(Task):
    """Endpoint error of a dense flow estimate, and its signed mean mapped back to the canonical frame."""

    kind: str = field(default="test-flow-error", init=False)
    input_kind = "frames"
    target_kind = "flow"
    output_kind = "flow"
    supports_consensus = True  # the default rule: the mean of the 16 fields mapped back

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        return [Variable("epe", "float32", kind="real", lower_is_better=True, label="EPE", unit="px"),
                Variable("du_canonical", "float32", kind="real", label="mean u error, canonical frame", unit="px"),
                Variable("dv_canonical", "float32", kind="real", label="mean v error, canonical frame", unit="px")]

    def score(self, outputs: Tensor, targets: Tensor, g) -> dict[str, Tensor]:
        d = outputs - targets
        back = get_kind("flow").act(d, g.inverse(), layout="paired")
        return {"epe": d.norm(dim=1).mean((1, 2)), "du_canonical": back[:, 0].mean((1, 2)),
                "dv_canonical": back[:, 1].mean((1, 2))}

    def spec(self) -> dict:
        return {"kind": self.kind}


class ShiftSearch(nn.Module):
    """Exact flow for pairs whose second frame is the first rolled by an integer shift: the
    shift in [-2, 2]² with the smallest difference (uniform field), plus a constant ``bias`` on u."""

    def __init__(self, bias: float = 0.0) -> None:
        super().__init__()
        self.bias = bias

    def forward(self, frames: Tensor) -> Tensor:
        a, b = frames[:, 0, 0], frames[:, 1, 0]
        best, arg = None, None
        for du in range(-2, 3):
            for dv in range(-2, 3):
                err = (torch.roll(a, (dv, du), dims=(-2, -1)) - b).abs().sum((1, 2))
                cand = torch.tensor([du, dv], dtype=frames.dtype).expand(len(a), 2)
                if best is None:
                    best, arg = err, cand.clone()
                else:
                    better = err < best
                    best = torch.where(better, err, best)
                    arg = torch.where(better[:, None], cand, arg)
        flow = arg[:, :, None, None].expand(-1, -1, *a.shape[-2:]).clone()
        flow[:, 0] += self.bias
        return flow


def _shift_pairs(n: int = 4, size: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    frames = np.zeros((n, 2, 1, size, size), np.float32)
    flows = np.zeros((n, 2, size, size), np.float32)
    for i in range(n):
        img = rng.random((size, size)).astype(np.float32)
        du, dv = rng.integers(-2, 3, size=2)
        frames[i, 0, 0], frames[i, 1, 0] = img, np.roll(img, (dv, du), axis=(0, 1))
        flows[i] = np.array([du, dv], np.float32)[:, None, None]
    return frames, flows


def test_exact_flow_estimator_is_flat_over_d4_time_reversal_and_bias_flips_with_the_element():
    frames, flows = _shift_pairs()
    orbit = d4_time_reversal()
    res = osc.evaluate(ShiftSearch(), (frames, flows), orbit, FlowError()).result
    assert res.epe.dims == ("sample", "time_reversed", "d4")
    np.testing.assert_allclose(res.epe.values, 0.0, atol=1e-6)  # equal (zero) error in all 16 cells
    bias = 0.5
    biased = osc.evaluate(ShiftSearch(bias), (frames, flows), orbit, FlowError()).result
    np.testing.assert_allclose(biased.epe.values, bias, atol=1e-5)  # the error's size is flat...
    t = orbit.transforms()
    for k in range(16):  # ...but mapped back, its direction is g⁻¹ applied to (+bias, 0): closed form
        lin = np.linalg.inv(t.linear[k]) * (-1 if t.time_reversed[k] else 1)
        expect = lin @ np.array([bias, 0.0])
        tr, d = divmod(k, 8)
        np.testing.assert_allclose(biased.du_canonical.values[:, tr, d], expect[0], atol=1e-5)
        np.testing.assert_allclose(biased.dv_canonical.values[:, tr, d], expect[1], atol=1e-5)
    # the pattern really varies: identity (+b, 0), rot180 (−b, 0), time-reversed identity (−b, 0)
    assert biased.du_canonical.values[0, 0, 0] > 0 > biased.du_canonical.values[0, 0, 4]
    assert biased.du_canonical.values[0, 1, 0] < 0
    # consensus: the bias mapped back cancels over the 16 elements (their vectors sum to zero), so the
    # consensus is the true flow and every element's error against it is |bias|
    cons = osc.evaluate(ShiftSearch(bias), (frames, flows), orbit, FlowError(), consensus=True).result
    np.testing.assert_allclose(cons.consensus_epe.values, bias, atol=1e-5)


class TinyFlowNet(nn.Module):
    """An untrained convolutional estimator: no symmetry at all."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.Tanh(), nn.Conv2d(8, 2, 3, padding=1))

    def forward(self, frames: Tensor) -> Tensor:
        return self.net(frames[:, :, 0])


def test_symmetrized_flow_estimator_is_equivariant_and_raw_one_is_not():
    frames, flows = _shift_pairs(3)
    orbit = d4_time_reversal()
    raw = osc.evaluate(TinyFlowNet(), (frames, flows), orbit, FlowError()).result
    sym_model = osc.symmetrize(TinyFlowNet(), orbit, input_kind="frames", output_kind="flow")
    sym = osc.evaluate(sym_model, (frames, flows), orbit, FlowError()).result
    spread = lambda r: np.ptp(r.epe.values.reshape(len(frames), 16), axis=1)  # noqa: E731
    assert (spread(raw) > 1e-3).all()
    np.testing.assert_allclose(spread(sym), 0.0, atol=2e-6)
    # an equivariant estimator agrees exactly with its consensus; the raw one does not
    sym_c = osc.evaluate(sym_model, (frames, flows), orbit, FlowError(), consensus=True).result
    raw_c = osc.evaluate(TinyFlowNet(), (frames, flows), orbit, FlowError(), consensus=True).result
    np.testing.assert_allclose(sym_c.consensus_epe.values, 0.0, atol=2e-6)
    assert (raw_c.consensus_epe.values.mean(axis=(1, 2)) > 1e-3).all()
    # symmetrize == a plain loop over the 16 elements: mean of g⁻¹ f(g x)
    x = torch.as_tensor(frames)
    t = orbit.transforms()
    loop = torch.zeros(len(x), 2, 16, 16)
    net = TinyFlowNet()
    with torch.no_grad():
        for k in range(16):
            gx = get_kind("frames").act(x, t[[k] * len(x)], layout="paired")
            loop += get_kind("flow").act(net(gx), t[[k] * len(x)].inverse(), layout="paired")
        np.testing.assert_allclose(sym_model(x).numpy(), (loop / 16).numpy(), atol=1e-6)


# ------------------------------------------------------------------------------------ points
@register_task
@dataclass(frozen=True)
class PointCloudClassification(Classification):
    """Classification of point clouds (B, N, 3): the same scores, another input kind."""

    kind: str = field(default="test-point-classification", init=False)
    input_kind = "points"


class DistanceHistogram(nn.Module):
    """Invariant by construction: a histogram of pairwise distances -> linear classifier."""

    def __init__(self, classes: int = 3, bins: int = 12) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bins = bins
        self.fc = nn.Linear(bins, classes)

    def forward(self, p: Tensor) -> Tensor:
        d = torch.cdist(p, p).flatten(1)
        centres = torch.linspace(0, 2, self.bins, dtype=p.dtype)
        soft = torch.exp(-((d[..., None] - centres) ** 2) / 0.02).mean(1)
        return self.fc(soft.float())


class RawMLP(nn.Module):
    def __init__(self, n: int = 32, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * n, 16), nn.ReLU(), nn.Linear(16, classes))

    def forward(self, p: Tensor) -> Tensor:
        return self.net(p.float())


def _clouds(n: int = 6, points: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)
    pts = rng.normal(size=(n, points, 3)) * np.array([1.0, 0.5, 0.2])
    pts /= np.abs(pts).max(axis=(1, 2), keepdims=True)
    return pts.astype(np.float32), np.arange(n) % 3


@pytest.mark.parametrize("orbit", [NeroSO3(axis_step=45, angle_step=45), Octahedral()], ids=["nero-so3", "octahedral"])
def test_invariant_point_classifier_is_flat_over_so3_and_raw_mlp_is_not(orbit):
    pts, labels = _clouds()
    inv = osc.evaluate(DistanceHistogram(), (pts, labels), orbit, PointCloudClassification()).result
    raw = osc.evaluate(RawMLP(), (pts, labels), orbit, PointCloudClassification()).result
    conf = inv.confidence.values.reshape(len(pts), -1)
    assert np.ptp(conf, axis=1).max() < 1e-4
    assert (inv.prediction.values.reshape(len(pts), -1) == inv.prediction.values.reshape(len(pts), -1)[:, :1]).all()
    assert np.ptp(raw.confidence.values.reshape(len(pts), -1), axis=1).min() > 1e-2


def test_symmetrize_over_d4_on_images_equals_a_loop_and_is_exactly_invariant():
    from helpers import TinyNet

    torch.manual_seed(0)
    net = TinyNet().eval()
    sym = osc.symmetrize(net, D4())
    x = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    t = D4().transforms()
    with torch.no_grad():
        probs = torch.stack([torch.softmax(net(get_kind("image").act(x, t[[k] * 3], layout="paired")), -1)
                             for k in range(8)]).mean(0)
        np.testing.assert_allclose(torch.softmax(sym(x), -1).numpy(), probs.numpy(), atol=1e-6)
        for k in range(8):  # f_sym(h·x) = f_sym(x) for every h in D4, exactly (index permutations)
            hx = get_kind("image").act(x, t[[k] * 3], layout="paired")
            np.testing.assert_allclose(sym(hx).numpy(), sym(x).numpy(), atol=1e-5)


def test_summary_report_and_cli_tables_work_for_a_non_classification_task(tmp_path):
    """The headline metric of a flow run is its error, and worst = highest for lower-is-better."""
    from orbitscope.viz.report import write_report

    frames, flows = _shift_pairs()
    res = osc.evaluate(ShiftSearch(), (frames, flows), osc.Rotation([0, 90]), FlowError(), store=tmp_path).result
    with pytest.raises(TypeError, match="read-only"):  # a stored result is not changed in place
        res.data["epe"][:] = 0.0
    res = res.load()  # an in-memory copy may be
    res.data["epe"][:] = np.array([[0.0, 2.0], [2.0, 2.0], [0.0, 2.0], [1.0, 2.0]])  # element 90° is worse
    s = res.summary()
    assert res.primary_metric() == "epe" and s["worst_at"] == {"angle": 90.0} and s["worst"] == 2.0
    assert s["best_at"] == {"angle": 0.0} and s["best"] == pytest.approx(0.75)
    out = write_report([res], tmp_path / "flow.html")
    assert "EPE (px) at identity" in out.read_text()


def test_score_outputs_are_checked_against_the_declared_variables():
    @dataclass(frozen=True)
    class Misspelt(FlowError):
        kind: str = field(default="test-flow-misspelt", init=False)

        def score(self, outputs, targets, g):
            return {"epes": (outputs - targets).norm(dim=1).mean((1, 2))}

    @dataclass(frozen=True)
    class Short(FlowError):
        kind: str = field(default="test-flow-short", init=False)

        def score(self, outputs, targets, g):
            return {"epe": (outputs - targets).norm(dim=1).mean((1, 2))[:1]}

    frames, flows = _shift_pairs(2)
    with pytest.raises(osc.SpecError, match="'epes' it does not declare"):
        osc.evaluate(ShiftSearch(), (frames, flows), osc.Rotation([0]), Misspelt())
    with pytest.raises(osc.SpecError, match=r"one value per row for 'epe' \(2 rows"):
        osc.evaluate(ShiftSearch(), (frames, flows), osc.Rotation([0]), Short())
    with pytest.raises(osc.DataError, match=r"16×16 .* 8×8|8×8 pixels but the inputs are 16×16"):
        osc.evaluate(ShiftSearch(), (frames, flows[:, :, :8, :8]), osc.Rotation([0]), FlowError())

"""The Lie derivative (LEE): closed forms, independent references, the layer decomposition, the
orbit's finite-difference limit, discrete symmetries, and LEE runs in the store."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.demos.shipped import SHIPPED_WEIGHTS
from orbitscope.errors import SpecError
from orbitscope.group.elements import Transforms
from orbitscope.lie import (PLANAR, SPATIAL, get_generator, is_lee_run, lie_derivative, lie_terms, list_generators,
                            tangent)
from orbitscope.models.flow_cnn import FlowCNN
from orbitscope.models.point_nets import PointNet
from orbitscope.models.reference import SmallCNN
from orbitscope.tasks import Classification
from orbitscope.tasks.flow import Flow
from orbitscope.tasks.pointcloud import PointCloudClassification


def digits(b: int = 3, seed: int = 0, top: float = 1.0) -> torch.Tensor:
    """Images with a zero border (content inside rows 6..21, columns 8..19)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(b, 1, 28, 28)
    x[:, :, 6:22, 8:20] = torch.rand(b, 1, 16, 12, generator=g) * top
    return x


class PixelSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum((1, 2, 3))[:, None]


def central_gradient(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d/dx, d/dy) of images (..., H, W) by central differences with zero padding."""
    p = np.pad(img, [(0, 0)] * (img.ndim - 2) + [(1, 1), (1, 1)])
    return (p[..., 1:-1, 2:] - p[..., 1:-1, :-2]) / 2, (p[..., 2:, 1:-1] - p[..., :-2, 1:-1]) / 2


# -- generators ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list_generators())
def test_generators_are_one_parameter_subgroups(name):
    gen = get_generator(name)
    assert gen.element(0.0).allclose(Transforms.identity(1, dim=gen.dim))
    s, t = 0.3, -0.7
    assert gen.element(s).compose(gen.element(t)).allclose(gen.element(s + t), atol=1e-12)


def test_so3_generators_are_right_handed():
    # about z, +90° takes x to y; about x, y to z; about y, z to x
    for name, src, dst in (("so3_z", 0, 1), ("so3_x", 1, 2), ("so3_y", 2, 0)):
        e = np.eye(3)[src]
        np.testing.assert_allclose(get_generator(name).element(np.pi / 2).linear[0] @ e, np.eye(3)[dst], atol=1e-12)


# -- closed forms --------------------------------------------------------------------------------
def test_pixel_sum_closed_forms():
    """Σx is unchanged by rotations, shifts and shears of a zero-bordered image (LEE 0), grows as
    e^{2t} under scaling (L = 2Σx) and as e^t under gain (L = Σx)."""
    x = digits(top=0.5)  # no clipping under gain
    total = x.double().sum((1, 2, 3))
    task = Classification()
    for name in ("rotation", "translate_x", "translate_y", "shear"):
        assert float(lie_terms(PixelSum(), task, x, name, scores="raw").lee.max()) < 1e-9 * float(total.max() ** 2)
    np.testing.assert_allclose(lie_terms(PixelSum(), task, x, "scale", scores="raw").lee, (2 * total) ** 2, rtol=2e-5)
    np.testing.assert_allclose(lie_terms(PixelSum(), task, x, "brightness", scores="raw").lee, total ** 2, rtol=1e-5)


@pytest.mark.parametrize("name", ["translate_x", "translate_y", "rotation", "scale", "shear"])
def test_linear_model_matches_the_closed_form(name):
    """f(x) = W x: L_X f = W · X x, with X x = −∇x(p) · (A p) for the generator's matrix A
    (central differences, pixel centres from the image centre), computed here with numpy."""
    x = digits(2, seed=1)
    w = torch.randn(5, 28 * 28, generator=torch.Generator().manual_seed(2))
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 5, bias=False))
    model[1].weight.data = w
    gx, gy = central_gradient(x.double().numpy()[:, 0])
    ys, xs = np.meshgrid(np.arange(28) + 0.5 - 14, np.arange(28) + 0.5 - 14, indexing="ij")
    a = {"translate_x": ((0, 0), (0, 0)), "translate_y": ((0, 0), (0, 0)), "rotation": ((0, 1), (-1, 0)),
         "scale": ((1, 0), (0, 1)), "shear": ((0, 1), (0, 0))}[name]
    shift = {"translate_x": (1, 0), "translate_y": (0, 1)}.get(name, (0, 0))
    vx = a[0][0] * xs + a[0][1] * ys + shift[0]
    vy = a[1][0] * xs + a[1][1] * ys + shift[1]
    v = -(gx * vx + gy * vy)
    expected = v.reshape(2, -1) @ w.double().numpy().T
    got = lie_terms(model, Classification(), x, name, scores="raw").derivative.numpy()
    np.testing.assert_allclose(got, expected, atol=2e-3 * np.abs(expected).max())


def test_pairwise_distance_classifier_is_locally_invariant_under_so3():
    """The demo's DistanceNet reads only pairwise distances (in float64): its symmetric-difference
    LEE along every SO(3) axis is below the float32 floor of its outputs, while the demo's PointNet
    moves by many orders of magnitude more."""
    torch.manual_seed(0)
    pts = torch.randn(4, 512, 3)
    pts = pts / pts.norm(dim=-1).max()
    task = PointCloudClassification()
    dist = osc.load_model(next(SHIPPED_WEIGHTS.glob("distance-*.safetensors"))).eval()
    point = osc.load_model(next(SHIPPED_WEIGHTS.glob("pointnet-[0-9a-f]*.safetensors"))).eval()
    with pytest.raises(osc.ModelError, match="method='difference'"):  # DistanceNet detaches its input
        lie_terms(dist, task, pts, "so3_x")
    with torch.no_grad():
        logits = dist(pts)
    step = osc.lie.default_step(get_generator("so3_x"), float(pts.norm(dim=-1).max()))
    # float32 rounding of the logits, differenced over 2·step: the float-precision floor of LEE
    floor = logits.shape[1] * (np.finfo(np.float32).eps * float(logits.abs().max()) / step) ** 2
    for name in SPATIAL:
        invariant = lie_terms(dist, task, pts, name, method="difference", scores="raw").lee
        plain = lie_terms(point, task, pts, name, scores="raw").lee
        assert float(invariant.max()) < floor < 1e-4 * float(plain.min())


# -- discrete symmetries -------------------------------------------------------------------------
def test_c4_symmetrised_model_averages_the_derivative_over_its_copies():
    """A model invariant under 90° rotations is not locally invariant: its Lie derivative (of the
    class probabilities, which symmetrize averages) is the mean of the plain model's at the four
    rotated inputs (rotations commute), which is not 0."""
    torch.manual_seed(3)
    plain = SmallCNN().eval()
    sym = osc.symmetrize(plain, osc.Rotation90()).eval()
    x = digits(3, seed=4)
    task = Classification()
    got = lie_terms(sym, task, x, "rotation").derivative
    copies = [lie_terms(plain, task, torch.rot90(x, k, dims=(-2, -1)), "rotation").derivative for k in range(4)]
    expected = torch.stack(copies).mean(0)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * float(expected.abs().max()))
    assert float((got ** 2).sum(1).min()) > 1e-6 * float((torch.stack(copies) ** 2).sum(-1).max())


def test_c4_symmetrised_flow_net_averages_the_turned_derivatives():
    """The same for an equivariant output: FlowCNN averaged over 90° rotations (outputs mapped back
    by the flow action) has L_X f_sym(x) = mean_k ρ_out(R_k)⁻¹ L_X f(R_k x)."""
    torch.manual_seed(15)
    plain = FlowCNN(width=8).eval()
    group = osc.Rotation90()
    sym = osc.symmetrize(plain, group, input_kind="frames", output_kind="flow").eval()
    frames = torch.rand(2, 2, 1, 32, 32)
    got = lie_terms(sym, Flow(), frames, "rotation").derivative
    elements = group.transforms()
    turned = []
    for k in range(len(elements)):
        rotated = osc.act("frames", frames, elements[[k]])[0]
        d = lie_terms(plain, Flow(), rotated, "rotation").derivative.reshape(2, 2, 32, 32)
        turned.append(osc.act("flow", d, elements[[k]].inverse())[0].reshape(2, -1))
    expected = torch.stack(turned).mean(0)
    np.testing.assert_allclose(got, expected, atol=1e-4 * float(expected.abs().max()))
    assert float(got.abs().max()) > 0.01 * float(torch.stack(turned).abs().max())


def test_integer_shift_equivariance_is_not_local_invariance():
    """A ReLU conv net with global pooling and no bias is exactly invariant to integer shifts of a
    zero-bordered image, yet not to sub-pixel ones (ReLU does not commute with interpolation): its
    LEE along translate_x is > 0. The same net without ReLU commutes with the interpolation: 0."""
    torch.manual_seed(5)
    conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
    relu_net = nn.Sequential(conv, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    linear_net = nn.Sequential(conv, nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    x = digits(3, seed=6)
    shifted = torch.roll(x, 2, dims=-1)
    torch.testing.assert_close(relu_net(shifted), relu_net(x))
    task = Classification()
    scale = float(lie_terms(relu_net, task, x, "scale", scores="raw").lee.mean())
    assert float(lie_terms(relu_net, task, x, "translate_x", scores="raw").lee.min()) > 1e-6 * scale
    assert float(lie_terms(linear_net, task, x, "translate_x", scores="raw").lee.max()) < 1e-10 * scale


# -- the orbit's finite-difference limit ------------------------------------------------------------
class SoftmaxFloat64(nn.Module):
    """A model's class probabilities computed in float64 (so that the finite differences below
    are limited by the float32 warp of the orbit evaluation, not by the model's rounding)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.model(x.double()), -1)


def test_lee_is_the_limit_of_the_orbits_symmetric_difference():
    """Probabilities stored by an orbit evaluation at ±a degrees, differenced, tend to the Lie
    derivative along rotation as a -> 0. The input has no flat regions: at ties (max-pooling
    over a constant background) the network has no derivative and forward mode picks the first
    maximum, while a difference takes the larger side. The limit is reached to a few percent
    only: the orbit's float32 sampling grid rounds pixel coordinates to about 2e-6 px, a large
    part of a 0.01° turn's displacement near the image centre."""
    torch.manual_seed(7)
    plain = SmallCNN().eval()
    with torch.no_grad():
        plain.fc2.weight.mul_(30)  # a confident classifier
    model = SoftmaxFloat64(plain).eval()
    x = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(8)) * 0.9 + 0.05
    labels = torch.zeros(4, dtype=torch.long)
    lee = lie_terms(model, Classification(), x, "rotation").derivative.numpy()
    errors = []
    for a in (1.0, 0.1, 0.01):
        run = osc.evaluate(model, (x, labels), osc.Rotation([-a, a]),
                           Classification(store_probabilities=True, output="probabilities"), optimize=False)
        p = run.result.data["probabilities"].values.astype(np.float64)  # (sample, angle, class)
        fd = (p[:, 1] - p[:, 0]) / (2 * np.deg2rad(a))
        errors.append(np.abs(fd - lee).max() / np.abs(lee).max())
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.08, errors


def test_difference_method_agrees_with_forward_mode_for_flow_outputs():
    """The flow output's action (warp the field, turn the vectors) enters both methods through
    different code (X_out vs the inverse action on outputs); they agree to the few percent that
    float32 rounding and ReLU kinks leave a difference at the default step (a wrong sign or a
    missing turn of the vectors would be off by 100 %)."""
    torch.manual_seed(9)
    model = FlowCNN(width=8).eval()
    frames = torch.rand(2, 2, 1, 32, 32)
    for name in ("rotation", "translate_x", "brightness"):
        jvp = lie_terms(model, Flow(), frames, name).derivative
        diff = lie_terms(model, Flow(), frames, name, method="difference").derivative
        np.testing.assert_allclose(diff, jvp, atol=0.06 * float(jvp.abs().max()))


# -- layer decomposition ---------------------------------------------------------------------------
def feature_x(h: torch.Tensor, name: str, step: float, frame: int) -> torch.Tensor:
    """The generator on a feature map, written here from warp_images: symmetric difference at
    ±step with shifts scaled to the map's grid."""
    gen = get_generator(name)
    if h.ndim != 4 or not gen.spatial:
        return torch.zeros_like(h, dtype=torch.float64)
    s = h.shape[-1] / frame
    out = []
    for t in (step, -step):
        g = gen.element(t)
        out.append(osc.warp_images(h.double().reshape(-1, 1, *h.shape[-2:]),
                                   Transforms.create(1, linear=g.linear, shift=g.shift * s), clip=False)[0])
    return ((out[0] - out[1]) / (2 * step)).reshape(h.shape)


@pytest.mark.parametrize("name", ["rotation", "translate_y", "brightness"])
def test_layer_contributions_match_a_plain_chain_rule_loop(name):
    """c_i = J_{>i} (J_{f_i} X h_{i−1} − X h_i), computed layer by layer with torch.func.jvp, equals
    the hooks' contributions; they sum to the end-to-end derivative."""
    torch.manual_seed(10)
    layers = [nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, padding=1), nn.Tanh(),
              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3)]
    model = nn.Sequential(*layers).eval()
    x = digits(2, seed=11)
    terms = lie_terms(model, Classification(), x, name, layers=True, scores="raw")
    step = osc.lie.default_step(get_generator(name), 0.5 * np.hypot(28, 28))
    hs = [x]
    with torch.no_grad():
        for layer in layers:
            hs.append(layer(hs[-1]))
    expected = []
    for i, layer in enumerate(layers):
        xin = tangent("image", x, name, step).float() if i == 0 else feature_x(hs[i], name, step, 28).float()
        _, jv = torch.func.jvp(layer, (hs[i],), (xin,))
        delta = jv.double() - (feature_x(hs[i + 1], name, step, 28) if i < len(layers) - 1 else 0)
        rest = nn.Sequential(*layers[i + 1:])
        _, c = torch.func.jvp(rest, (hs[i + 1],), (delta.float(),))
        expected.append((c.detach().double() ** 2).sum(1))
    expected = torch.stack(expected, 1)
    names = [str(i) for i in range(len(layers))]
    assert terms.layers == names + ["(output)"]
    scale = float(terms.lee.max())
    np.testing.assert_allclose(terms.layer_lee[:, :-1], expected, atol=1e-4 * scale, rtol=1e-3)
    torch.testing.assert_close(terms.layer_sum, terms.derivative, atol=1e-5 * float(terms.derivative.abs().max()), rtol=0)


def test_layer_sum_for_flow_and_functional_operations():
    """FlowCNN mixes modules with functional upsampling and a flow output (vectors turn with the
    grid): the contributions, the output term included, still add up to L_X f."""
    torch.manual_seed(12)
    model = FlowCNN(width=8).eval()
    frames = torch.rand(2, 2, 1, 32, 32)
    terms = lie_terms(model, Flow(), frames, "rotation", layers=True)
    torch.testing.assert_close(terms.layer_sum, terms.derivative, atol=1e-4 * float(terms.derivative.abs().max()), rtol=0)
    assert terms.layers[-1] == "(output)" and len(terms.layers) == len(set(terms.layers)) > 5
    # the head's output is the model's output: it carries the flow action (the vectors turn), so
    # nothing is left for "(output)"
    assert float(terms.layer_lee[:, -1].max()) < 1e-8 * float(terms.lee.max())


# -- runs ------------------------------------------------------------------------------------------
def test_lee_run_is_stored_reused_and_resumed(tmp_path):
    torch.manual_seed(13)
    model = SmallCNN().eval()
    x = digits(10, seed=14)
    data = (x, torch.zeros(10, dtype=torch.long))
    memory = lie_derivative(model, data, ["rotation", "brightness"], batch_size=4)
    assert memory.result.data["lee"].dims == ("sample", "generator")
    assert memory.result.data["layer_lee"].dims == ("sample", "generator", "layer")
    store = osc.Store(tmp_path)
    calls = []

    def interrupt(done, n):
        calls.append(done)
        if len(calls) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        lie_derivative(model, data, ["rotation", "brightness"], store=store, batch_size=4, progress=interrupt)
    rec = store.runs()[0]
    assert not rec.complete and rec.chunks_done == 1 and is_lee_run(rec)
    resumed = lie_derivative(model, data, ["rotation", "brightness"], store=store, batch_size=4)
    assert resumed.run_id == rec.run_id
    np.testing.assert_array_equal(resumed.result.data["lee"].values, memory.result.data["lee"].values)
    np.testing.assert_array_equal(resumed.result.data["layer_lee"].values, memory.result.data["layer_lee"].values)
    again = lie_derivative(model, data, ["rotation", "brightness"], store=store, batch_size=4)
    assert again.reused and again.run_id == rec.run_id
    other = lie_derivative(model, data, ["rotation"], store=store, batch_size=4)
    assert other.run_id != rec.run_id
    agg = osc.aggregate(resumed.result, "lee")
    np.testing.assert_allclose(agg["mean"].values, memory.result.data["lee"].values.mean(0))


def test_clear_errors():
    model = SmallCNN().eval()
    data = (digits(2), torch.zeros(2, dtype=torch.long))
    with pytest.raises(SpecError, match="unknown generator"):
        lie_derivative(model, data, "twist")
    with pytest.raises(SpecError, match="point clouds only"):
        lie_derivative(model, data, "so3_x")
    with pytest.raises(SpecError, match="method='jvp'"):
        lie_derivative(model, data, "rotation", method="difference")
    pts = (torch.randn(2, 64, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(SpecError, match="does not act"):
        lie_derivative(PointNet(3).eval(), pts, "brightness", task=PointCloudClassification())
    assert set(PLANAR) | set(SPATIAL) == set(list_generators())


# -- summaries -------------------------------------------------------------------------------------
def test_bca_interval_of_the_mean_covers_and_stays_non_negative():
    """Simulation: lognormal (σ = 1) samples of 100, as heavy-tailed as LEE; the 95 % BCa interval
    of the mean covers the true mean close to its level and never reaches below 0."""
    from orbitscope.lie.summary import mean_interval_bca

    rng = np.random.default_rng(1)
    true = np.exp(0.5)
    hits, lows = 0, []
    for i in range(300):
        v = rng.lognormal(0.0, 1.0, 100)
        lo, hi = mean_interval_bca(v, resamples=999, seed=i)
        hits += lo <= true <= hi
        lows.append(lo)
    assert 0.87 <= hits / 300 <= 0.99
    assert min(lows) >= 0
    assert mean_interval_bca(np.zeros(5)) == (0.0, 0.0)


def test_rank_agreement_matches_scipy_and_fisher_interval():
    from scipy import stats

    from orbitscope.lie.summary import rank_agreement

    rng = np.random.default_rng(2)
    a = rng.normal(size=80)
    b = a + rng.normal(size=80)
    rho, lo, hi, n = rank_agreement(a, b)
    assert n == 80 and np.isclose(rho, stats.spearmanr(a, b).statistic)
    half = 1.959963984540054 * np.sqrt(1.06 / 77)
    np.testing.assert_allclose([lo, hi], np.tanh(np.arctanh(rho) + np.array([-half, half])))
    assert np.isnan(rank_agreement(a[:3], b[:3])[0])


def test_probe_estimator_is_unbiased_for_the_exact_contributions():
    """Gaussian probes: E[(u · c_i)²] = ‖c_i‖². The mean over 1,500 probes of every sizeable layer
    (summed over 4 samples, relative sd about sqrt(2/1500) ≈ 4 %) is within 15 % of the exact value,
    and the probes' average over layers is within 5 %; the output term is exact."""
    torch.manual_seed(16)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                          nn.Conv2d(4, 6, 3, padding=1), nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(6, 5)).eval()
    x = digits(4, seed=17)
    exact = lie_terms(model, Classification(), x, "rotation", layers=True)
    probed = lie_terms(model, Classification(), x, "rotation", layers="probes", probes=1500, seed=3)
    assert probed.layers == exact.layers and probed.layer_sum is None
    e, p = exact.layer_lee.sum(0).numpy(), probed.layer_lee.sum(0).numpy()
    big = e > 0.05 * e.max()
    np.testing.assert_allclose(p[big], e[big], rtol=0.15)
    assert abs(p[:-1].sum() / e[:-1].sum() - 1) < 0.05
    np.testing.assert_allclose(p[-1], e[-1], rtol=1e-9)
    torch.testing.assert_close(probed.derivative, exact.derivative)
    run = lie_derivative(model, (x, torch.zeros(4, dtype=torch.long)), "rotation", layers="probes", probes=8)
    assert run.result.attrs["layer_method"] == "probes" and run.result.data["layer_lee"].shape == (4, 1, len(e))
    with pytest.raises(SpecError, match="probes"):
        lie_derivative(model, (x, torch.zeros(4, dtype=torch.long)), "rotation", layers="probes", probes=0)


def test_interface_serves_lee_runs_apart_from_orbit_groups(tmp_path):
    from orbitscope.app.data import AppData
    from orbitscope.app.server import create_app

    torch.manual_seed(18)
    model = SmallCNN().eval()
    data = (digits(6, seed=19), torch.zeros(6, dtype=torch.long))
    store = osc.Store(tmp_path)
    osc.evaluate(model, data, osc.Rotation([0, 90]), store=store, model_name="tiny")
    lee = lie_derivative(model, data, ["rotation", "scale"], store=store, model_name="tiny")
    app_data = AppData(osc.Store(tmp_path, create=False))
    assert [g.orbit.get("kind") for g in app_data.groups()] == ["rotation"]  # the LEE run is not an orbit group
    client = create_app(data=app_data).server.test_client()
    page = client.get("/lee/")
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and "<svg" in text and "tiny" in text and "scale" in text
    assert f"{lee.result.data['lee'].values[:, 0].mean():.3f}" in text  # the table's mean LEE along rotation
    assert client.get("/lee").status_code in (301, 302, 308)
    with pytest.raises(SpecError, match="LEE"):
        from orbitscope.cli.common import load_orbit_run

        load_orbit_run(store, lee.run_id)


def test_cli_lee_writes_the_run_table_and_charts(tmp_path):
    from typer.testing import CliRunner

    from orbitscope.cli.commands import app

    weights = next(SHIPPED_WEIGHTS.glob("plain-cnn-*.safetensors"))
    args = ["lee", "--model", str(weights), "--data", "mnist-subset:test@12", "-g", "rotation", "-g", "brightness",
            "--home", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--batch-size", "6"]
    runner = CliRunner()
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "lee.csv").is_file() and (tmp_path / "out" / "lee_layers_rotation.png").is_file()
    import csv

    rows = list(csv.DictReader(open(tmp_path / "out" / "lee.csv")))
    assert [r["generator"] for r in rows] == ["rotation", "brightness"] and rows[1]["top_layer"] == "features.0"
    again = runner.invoke(app, args)
    assert "reused from the store" in again.output
    run_id = osc.Store(tmp_path / "store").runs()[0].run_id
    shown = runner.invoke(app, ["runs", "show", run_id, "--home", str(tmp_path / "store")])
    assert shown.exit_code == 0 and "brightness" in shown.output
    refused = runner.invoke(app, ["report", run_id, "--home", str(tmp_path / "store"), "-o", str(tmp_path / "r.html")])
    assert refused.exit_code != 0 and "LEE" in refused.output
    bad = runner.invoke(app, ["lee", "--model", str(weights), "--data", "mnist-subset:test@4", "-g", "so3_x",
                              "--home", str(tmp_path / "store")])
    assert bad.exit_code != 0 and "point clouds only" in bad.output


def test_probes_refuse_models_that_fold_samples_into_rows():
    pts = torch.randn(3, 64, 3)
    with pytest.raises(SpecError, match="layers=True"):
        lie_terms(PointNet(4).eval(), PointCloudClassification(), pts, "so3_z", layers="probes", probes=2)


class CentroidBox(nn.Module):
    """A 'detector' returning one 10 × 10 box at the intensity centroid of each image (pixel
    centres at j + 0.5), score 0.9: exactly equivariant to shifts of a zero-bordered image."""

    def forward(self, x: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        w = x.sum(1)
        total = w.sum((-2, -1))
        cols = torch.arange(x.shape[-1], dtype=x.dtype) + 0.5
        rows = torch.arange(x.shape[-2], dtype=x.dtype) + 0.5
        cx = (w.sum(-2) * cols).sum(-1) / total
        cy = (w.sum(-1) * rows).sum(-1) / total
        boxes = torch.stack([cx - 5, cy - 5, cx + 5, cy + 5], -1)
        return [{"boxes": b[None], "scores": torch.full((1,), 0.9, dtype=x.dtype) + 0 * b[:1],
                 "labels": torch.zeros(1, dtype=torch.long)} for b in boxes]


def test_detection_output_moves_with_its_boxes():
    """Boxes are the output: the box action moves them with the shift, so a shift-equivariant
    detector has LEE 0 along translate_x/y (its corners move 1 px per px, exactly as the action
    moves them); along scale the centroid moves but the box keeps its size: LEE > 0."""
    from orbitscope.tasks import Detection

    x = digits(3, seed=20).expand(3, 3, 28, 28).contiguous()
    task = Detection(input_kind="image")
    for name in ("translate_x", "translate_y"):
        terms = lie_terms(CentroidBox(), task, x, name)
        assert float(terms.lee.max()) < 1e-8
    moved = lie_terms(CentroidBox(), task, x, "scale").lee  # the centroid scales about the centre, the box does not
    assert float(moved.min()) > 0

"""The Flow task: error metrics against direct numpy, resampled estimators, NaN (unknown) pixels,
and exact closed forms over NERO's 16 elements for an exact and a biased estimator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope import Flow
from orbitscope.group.parse import parse_orbit

from test_equivariance_by_construction import ShiftSearch, _shift_pairs


def test_metrics_equal_direct_numpy_and_ignore_unknown_pixels():
    rng = np.random.default_rng(0)
    est = rng.normal(size=(5, 2, 12, 10)).astype(np.float32)
    truth = rng.normal(size=(5, 2, 12, 10)).astype(np.float32)
    truth[1, :, :3] = np.nan  # no ground truth on three rows of sample 1
    truth[4] = np.nan  # an unlabelled field
    got = Flow(maps=("epe", "mae", "mse"), map_size=64).score(torch.from_numpy(est), torch.from_numpy(truth))
    d = est.astype(np.float64) - truth
    epe = np.sqrt(d[:, 0] ** 2 + d[:, 1] ** 2)
    mae = (np.abs(d[:, 0]) + np.abs(d[:, 1])) / 2
    mse = (d[:, 0] ** 2 + d[:, 1] ** 2) / 2
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        want = {"epe": np.nanmean(epe, (1, 2)), "mae": np.nanmean(mae, (1, 2)), "mse": np.nanmean(mse, (1, 2))}
    want["rmse"] = np.sqrt(want["mse"])
    for name, value in want.items():
        np.testing.assert_allclose(got[name].numpy(), value, rtol=1e-5, err_msg=name)
    assert np.isnan(float(got["epe"][4]))
    np.testing.assert_allclose(got["epe_map"].numpy(), epe, rtol=1e-5)
    np.testing.assert_allclose(got["mae_map"].numpy(), mae, rtol=1e-5)


def test_maps_are_block_averaged_to_map_size():
    est = torch.zeros(1, 2, 8, 8)
    truth = torch.zeros(1, 2, 8, 8)
    truth[0, 0] = torch.arange(64.0).reshape(8, 8)
    got = Flow(map_size=4).score(est, truth)["epe_map"][0].numpy()
    want = np.arange(64.0).reshape(8, 8).reshape(4, 2, 4, 2).mean((1, 3))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_estimator_at_another_resolution_is_resampled_and_its_vectors_scaled():
    truth = torch.zeros(2, 2, 16, 16)
    truth[:, 0], truth[:, 1] = 2.0, -1.0  # uniform (2, -1) px per frame
    half = torch.zeros(2, 2, 8, 8)
    half[:, 0], half[:, 1] = 1.0, -0.5  # the same motion measured in half-resolution pixels
    got = Flow().score(half, truth)
    np.testing.assert_allclose(got["epe"].numpy(), 0.0, atol=1e-6)


def test_exact_and_biased_estimators_over_the_16_elements_and_their_consensus():
    frames, flows = _shift_pairs()
    orbit = parse_orbit("d4xt")
    exact = osc.evaluate(ShiftSearch(), (frames, flows), orbit, Flow(), consensus=True).result
    for name in ("epe", "rmse", "mae", "mse", "consensus_epe"):
        np.testing.assert_allclose(exact[name].values, 0.0, atol=1e-6, err_msg=name)
    bias = 0.5  # a constant +u bias at every element: |Δ| = bias everywhere, whatever g is
    res = osc.evaluate(ShiftSearch(bias), (frames, flows), orbit, Flow(), consensus=True).result
    np.testing.assert_allclose(res.epe.values, bias, atol=1e-5)
    np.testing.assert_allclose(res.mae.values, bias / 2, atol=1e-5)
    np.testing.assert_allclose(res.mse.values, bias ** 2 / 2, atol=1e-5)
    np.testing.assert_allclose(res.rmse.values, bias / np.sqrt(2), atol=1e-5)
    np.testing.assert_allclose(res.epe_map.values, bias, atol=1e-5)
    # mapped back, the 16 biases g⁻¹(+bias, 0) sum to zero over the group: the consensus is the
    # true field, so every element's error against it is again the bias
    np.testing.assert_allclose(res.consensus_epe.values, bias, atol=1e-5)
    assert res.primary_metric() == "epe"
    assert res.meta("consensus_epe").needs_labels is False


def test_bad_outputs_and_options_say_what_to_do():
    with pytest.raises(ValueError, match="RMSE has no per-pixel map"):
        Flow(maps=("rmse",))
    with pytest.raises(osc.errors.ModelError, match=r"\(batch, 2, H, W\)"):
        Flow().read_outputs(torch.zeros(2, 3, 4, 4))
    assert Flow.from_spec(Flow(maps=("mae",), map_size=8).spec()) == Flow(maps=("mae",), map_size=8)


def test_block_averaged_maps_live_beside_the_stored_input_pairs():
    """Maps have their own dims: a 96-px pair stored as input beside a 48-px map (found in review)."""
    frames, flows = _shift_pairs(n=2, size=96)
    res = osc.evaluate(ShiftSearch(0.25), (frames, flows), parse_orbit("d4xt"), Flow(map_size=48),
                       store_inputs=True).result
    assert res.input.shape[-2:] == (96, 96) and res.epe_map.shape[-2:] == (48, 48)
    np.testing.assert_allclose(res.epe_map.values, 0.25, atol=1e-5)


def test_the_consensus_field_is_stored_and_is_the_truth_for_a_biased_estimator(tmp_path):
    frames, flows = _shift_pairs(n=3, size=16)
    res = osc.evaluate(ShiftSearch(0.5), (frames, flows), parse_orbit("d4xt"), Flow(), consensus=True,
                       store=tmp_path).result
    # the 16 biases mapped back cancel: the consensus field is the true uniform flow
    np.testing.assert_allclose(res.consensus_flow.values, flows, atol=1e-5)


def test_cli_evaluates_synthetic_pairs_over_the_16_elements(tmp_path):
    from typer.testing import CliRunner

    from orbitscope.cli.commands import app
    from orbitscope.results.store import Store

    out = CliRunner().invoke(app, ["evaluate", "--task", "flow", "--data", "piv-synthetic:n=4,size=32,seed=2",
                                   "--orbit", "d4xt", "--model", "orbitscope.models.flow_estimators:Farneback",
                                   "--consensus", "--home", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "EPE (px)" in out.output
    res = Store(tmp_path).load(Store(tmp_path).runs()[0].run_id)
    assert res.epe.dims == ("sample", "time_reversed", "d4") and "consensus_flow" in res.data


def test_review_fixes_flow_outside_the_field_resampled_consensus_and_unlabelled_training(tmp_path):
    """Found in review: ground truth moved in from outside the field is unknown (NaN), not zero;
    an estimator at half resolution works with consensus; NaN ground truth does not train."""
    from orbitscope.kinds import get_kind

    field = torch.zeros(1, 2, 32, 48)
    field[:, 0], field[:, 1] = 1.5, 0.5
    g = parse_orbit("d4xt").transforms()[[2]]  # rot90 of a non-square field: a strip comes from outside
    turned = get_kind("flow").act(field, g, layout="paired")  # zero-padded there
    right = torch.zeros_like(turned)
    right[:, 0], right[:, 1] = 0.5, -1.5  # the turned uniform field, everywhere
    got = Flow().score(right, turned, g)
    assert float(got["epe"][0]) == pytest.approx(0.0, abs=1e-6)  # the padded strip is not scored
    assert torch.isnan(got["epe_map"][0]).any() and not torch.isnan(got["epe_map"][0]).all()

    class Half(torch.nn.Module):
        def forward(self, frames):
            return ShiftSearch()(frames)[:, :, ::2, ::2] / 2  # the same motion in half-resolution pixels

    frames, flows = _shift_pairs(n=2, size=16)
    res = osc.evaluate(Half(), (frames, flows), parse_orbit("d4xt"), Flow(), consensus=True).result
    np.testing.assert_allclose(res.epe.values, 0.0, atol=1e-6)
    assert res.consensus_flow.shape[-2:] == (16, 16)
    np.testing.assert_allclose(res.consensus_epe.values, 0.0, atol=1e-6)


def test_training_skips_pixels_without_ground_truth(tmp_path):
    from PIL import Image

    from orbitscope.data.piv import write_flo
    from orbitscope.training.flow import FlowRecipe, train_flow_model

    frames, flows = _shift_pairs(n=3, size=16)
    for i in range(3):
        for k in (0, 1):
            Image.fromarray((frames[i, k, 0] * 255).astype(np.uint8)).save(tmp_path / f"p{i}_img{k + 1}.png")
        if i:  # pair 0 has no ground truth
            write_flo(tmp_path / f"p{i}_flow.flo", flows[i])
    model, info = train_flow_model(FlowRecipe(data=f"flow-folder:{tmp_path}", epochs=1, batch_size=3, width=4))
    assert np.isfinite(info["first_loss"]) and all(torch.isfinite(p).all() for p in model.parameters())


def test_scores_of_many_rows_mask_the_outside_as_a_per_row_loop_does():
    """Issue 35: the share of each pixel inside the field is computed once per distinct element
    and gathered to the rows; the reference is a per-row numpy loop over pixel centres: a pixel
    is scored when its source g⁻¹p lies inside the H × W field."""
    h, w = 6, 10
    d4xt = parse_orbit("d4xt").transforms()
    shift = np.stack([np.arange(16) % 3 - 1, np.arange(16) // 4 - 2], 1).astype(float)  # whole pixels
    t = osc.group.Transforms.create(16, linear=d4xt.linear, shift=shift, time_reversed=d4xt.time_reversed)
    rows = t.repeat_interleave(3)  # element-major rows, as the engine scores them
    rng = np.random.default_rng(4)
    est = rng.normal(size=(len(rows), 2, h, w)).astype(np.float32)
    truth = rng.normal(size=(len(rows), 2, h, w)).astype(np.float32)
    truth[5, :, 0, :] = np.nan  # a row without ground truth in its first line
    got = Flow(maps=("epe",), map_size=64).score(torch.from_numpy(est), torch.from_numpy(truth), rows)
    ys, xs = np.meshgrid(np.arange(h) + 0.5 - h / 2, np.arange(w) + 0.5 - w / 2, indexing="ij")
    for r in range(len(rows)):
        src = np.linalg.inv(rows.linear[r]) @ (np.stack([xs.ravel(), ys.ravel()]) - rows.shift[r][:, None])
        col, row = src[0] + w / 2 - 0.5, src[1] + h / 2 - 0.5
        known = ((col > -1e-9) & (col < w - 1 + 1e-9) & (row > -1e-9) & (row < h - 1 + 1e-9)).reshape(h, w)
        d = est[r].astype(np.float64) - truth[r]
        epe = np.sqrt(d[0] ** 2 + d[1] ** 2)
        epe[~known] = np.nan
        assert np.isfinite(epe).sum() > 0
        np.testing.assert_allclose(float(got["epe"][r]), np.nanmean(epe), rtol=1e-5, err_msg=str(r))
        np.testing.assert_array_equal(np.isnan(got["epe_map"][r].numpy()), np.isnan(epe), err_msg=str(r))
    # a square field under D4: nothing is outside, nothing is masked
    sq = torch.zeros(len(rows), 2, 8, 8)
    assert not torch.isnan(Flow().score(sq + 1, sq, d4xt.repeat_interleave(3))["epe_map"]).any()

"""The PIV demo's pieces: its summary rows in closed form, and the real unlabelled pairs."""

from __future__ import annotations

import numpy as np
import pytest

import orbitscope as osc
from orbitscope.demos.piv import element_rows, real_pairs
from orbitscope.group.parse import parse_orbit

from test_equivariance_by_construction import ShiftSearch, _shift_pairs


def test_element_rows_report_identity_mean_and_worst_element():
    frames, flows = _shift_pairs(n=3, size=16)
    exact = osc.evaluate(ShiftSearch(), (frames, flows), parse_orbit("d4xt"), osc.Flow()).result
    biased = osc.evaluate(ShiftSearch(0.5), (frames, flows), parse_orbit("d4xt"), osc.Flow()).result

    class R:  # the Run interface element_rows reads
        def __init__(self, result, run_id):
            self.result, self.run_id = result, run_id

    rows = element_rows([R(exact, "a"), R(biased, "b")], ["exact", "biased"])
    assert rows[0]["epe identity"] == 0.0 and rows[0]["epe mean of 16"] == 0.0
    assert rows[1]["epe identity"] == pytest.approx(0.5) and rows[1]["epe worst"] == pytest.approx(0.5)
    assert rows[1]["epe time-reversed mean / D4 mean"] == pytest.approx(1.0)
    from orbitscope.viz.mosaic import element_name

    assert rows[1]["worst element"] in {element_name(e) for e in range(16)}


def test_real_pairs_are_grey_central_crops_without_ground_truth():
    (frames, flows), names, skipped = real_pairs(64)
    assert len(names) + len(skipped) == 3
    assert frames.shape == (len(names), 2, 1, 64, 64) and np.isnan(flows).all()
    if names:
        assert 0.0 <= frames.min() and frames.max() <= 1.0 and frames.std() > 0.01
        assert not np.array_equal(frames[:, 0], frames[:, 1])  # two different frames

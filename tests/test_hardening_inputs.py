"""One-line errors instead of tracebacks, hangs or days-long jobs (issue 11, item 8)."""

from __future__ import annotations

import zipfile

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.cli import app
from orbitscope.errors import ModelError, SpecError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 5))


class _Many(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.zeros(1, 8, 8), 0


def test_a_dangling_product_sign_is_named():
    with pytest.raises(SpecError, match="dangling ' x '"):
        osc.parse_orbit("rotation:0:360:30 x")
    with pytest.raises(SpecError, match="dangling"):
        osc.parse_orbit("x rotation:0:360:30")


def test_jobs_over_the_limit_are_refused_with_their_size_unless_confirmed(monkeypatch):
    import orbitscope.engine.evaluation as ev

    orbit = osc.parse_orbit("shift:-1000:1000:1")  # 4 million elements: days of work before
    with pytest.raises(SpecError, match=r"10 samples × 4,004,001 orbit elements = 40,040,010 inputs.*allow_large=True"):
        osc.evaluate(_model(), _Many(), orbit)
    monkeypatch.setattr(ev, "MAX_JOB_INPUTS", 5)
    with pytest.raises(SpecError, match="allow_large"):
        osc.evaluate(_model(), _Many(), osc.Rotation([0]))
    assert osc.evaluate(_model(), _Many(), osc.Rotation([0]), allow_large=True).result.n_samples == 10


def test_unknown_devices_and_raising_factories_and_damaged_archives_are_one_line(tmp_path, monkeypatch):
    with pytest.raises(SpecError, match="unknown device 'tpu'"):
        osc.evaluate(_model(), _Many(), osc.Rotation([0]), device="tpu")
    (tmp_path / "boom.py").write_text("def make():\n    raise RuntimeError('factory exploded')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModelError, match="factory 'boom:make' raised RuntimeError: factory exploded"):
        osc.load_user_model("boom:make")
    bad = tmp_path / "damaged.pt"
    with zipfile.ZipFile(bad, "w") as z:  # a TorchScript-shaped archive with garbage inside
        z.writestr("damaged/data.pkl", b"\x80\x02garbage")
        z.writestr("damaged/code/__torch__.py", b"x")
        z.writestr("damaged/constants.pkl", b"x")
    with pytest.raises((ModelError, SpecError), match="damaged|neither"):
        osc.load_user_model(str(bad))
    res = CliRunner().invoke(app, ["evaluate", "--model", "boom:make", "--data", "mnist-subset:test@10",
                                   "--orbit", "rotation90", "--home", str(tmp_path / "h")])
    assert res.exit_code == 2 and "factory exploded" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["evaluate", "--model", "boom:make", "--data", "mnist-subset:test@10",
                                   "--orbit", "rotation90", "--device", "tpu", "--home", str(tmp_path / "h")])
    assert res.exit_code == 2 and "unknown device" in res.output

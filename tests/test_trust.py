"""Files that are programs (issue 11, item 7): a planted assessor bundle or TorchScript file does
not run unless trusted; bundles this user saved load as before."""

from __future__ import annotations

import os
import warnings

import joblib
import pytest
import torch
from torch import nn

from orbitscope.models.loading import load_user_model
from orbitscope.trust import UntrustedFileError, is_trusted, mark_trusted


class _Payload:
    """Unpickling this creates a marker file: what a hostile bundle could do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_bundle_is_refused_before_it_can_run(tmp_path):
    from orbitscope.ml4ml.assess import AssessorBundle

    marker = tmp_path / "pwned"
    planted = tmp_path / "default.joblib"
    joblib.dump({"format": "x", "payload": _Payload(str(marker))}, planted)
    with pytest.raises(UntrustedFileError, match="joblib pickle.*runs code.*--trust"):
        AssessorBundle.load(planted)
    assert not marker.exists()  # nothing ran
    with pytest.raises(ValueError):  # trusted: it runs (so the refusal above is what protects)
        AssessorBundle.load(planted, trust=True)
    assert marker.exists()


def test_files_this_user_wrote_are_trusted_and_changed_files_are_not(tmp_path):
    f = tmp_path / "mine.bin"
    f.write_bytes(b"abc")
    assert not is_trusted(f)
    mark_trusted(f)
    assert is_trusted(f)
    f.write_bytes(b"abd")  # the recorded digest no longer matches
    assert not is_trusted(f)
    assert os.environ["ORBITSCOPE_CONFIG"] in str(__import__("orbitscope.trust", fromlist=["x"]).trust_registry())


def test_torchscript_needs_trust(tmp_path):
    m = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    path = tmp_path / "m.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(m).save(str(path))
    with pytest.raises(UntrustedFileError, match="TorchScript"):
        load_user_model(str(path))
    assert isinstance(load_user_model(str(path), trust=True), torch.jit.ScriptModule)

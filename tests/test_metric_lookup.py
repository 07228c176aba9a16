"""The metric lookup sits below stats and analysis (issue 36, point 6): no import of
``orbitscope.analysis`` anywhere in ``orbitscope.stats`` or ``orbitscope.results``, and a consensus
metric read by a statistic is the one computed independently from the stored probabilities."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.errors import NotFoundError
from orbitscope.results.metric_lookup import consensus_metrics, metric_result
from orbitscope.stats import orbit_values

SRC = Path(__file__).resolve().parents[1] / "src" / "orbitscope"


def _imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` / ``from`` anywhere in the file (module level or in a function) names."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return names


@pytest.mark.parametrize("package", ["stats", "results"])
def test_lower_layers_never_import_analysis(package):
    offenders = [(p.name, m) for p in sorted((SRC / package).glob("*.py")) for m in _imported_modules(p)
                 if m.lstrip(".").startswith("analysis") or "orbitscope.analysis" in m]
    assert offenders == []


class _Fixed(nn.Module):
    """Logits that depend on the mean brightness of the left half only (not rotation invariant)."""

    def forward(self, x):
        left = x[..., : x.shape[-1] // 2].mean(dim=(1, 2, 3))
        return torch.stack([left * 10, 1 - left * 10, torch.zeros_like(left)], dim=1)


@pytest.fixture(scope="module")
def result():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(12, 1, 8, 8, generator=g)
    labels = torch.zeros(12, dtype=torch.long)
    return osc.evaluate(_Fixed(), (images, labels), osc.Rotation90(),
                        osc.Classification(store_probabilities=True)).result


def test_consensus_metric_matches_a_plain_loop(result):
    assert "consensus_agreement" in consensus_metrics(result) and "consensus_agreement" not in result.data
    probs = result.data["probabilities"].transpose("sample", result.orbit_dims[0], "class").values.astype(np.float64)
    expected = np.zeros(probs.shape[:2])
    for s in range(probs.shape[0]):  # NERO consensus: the class of the mean probability over the 4 distinct elements
        mean = sum(probs[s, k] for k in range(probs.shape[1])) / probs.shape[1]
        for k in range(probs.shape[1]):
            expected[s, k] = float(int(np.argmax(probs[s, k])) == int(np.argmax(mean)))
    np.testing.assert_array_equal(orbit_values(result, "consensus_agreement").values, expected)
    assert "consensus_agreement" in metric_result(result, "consensus_agreement").data


def test_unknown_and_dataset_level_metrics_are_refused_with_the_alternatives(result):
    assert metric_result(result, "correct") is result
    with pytest.raises(NotFoundError, match="available: .*correct"):
        metric_result(result, "no_such_metric")
    with pytest.raises(NotFoundError, match="dataset-level"):
        metric_result(result, "class_accuracy")

"""Agreement between invariance labels: between human raters (Fleiss' kappa) and between raters
and the provenance rule (share of models labelled alike, Cohen's kappa)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .modeldb import LABELS

__all__ = ["fleiss_kappa", "cohen_kappa", "RaterAgreement", "rater_agreement"]


def fleiss_kappa(counts: Any) -> float:
    """Fleiss' kappa of an (items, categories) table of how many raters put each item in each
    category (Fleiss 1971): (P̄ − P̄ₑ) / (1 − P̄ₑ), with P̄ the mean per-item agreement and P̄ₑ
    the chance agreement from the category shares. Every item needs the same number n ≥ 2 of
    raters. NaN when chance agreement is already 1 (every rating in one category)."""
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 1:
        raise ValueError(f"counts must be an (items, categories) table, got shape {table.shape}")
    n = table.sum(axis=1)
    if not np.all(n == n[0]) or n[0] < 2:
        raise ValueError(f"every item needs the same number (>= 2) of ratings, got {sorted(set(n.tolist()))}")
    n = float(n[0])
    p_item = ((table * table).sum(axis=1) - n) / (n * (n - 1))
    p_cat = table.sum(axis=0) / table.sum()
    p_bar, p_e = float(p_item.mean()), float((p_cat * p_cat).sum())
    return float("nan") if np.isclose(p_e, 1.0) else (p_bar - p_e) / (1.0 - p_e)


def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Cohen's kappa of two raters over the same items: (p_o − p_e) / (1 − p_e); NaN when p_e = 1."""
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise ValueError("two raters need the same, non-empty list of items")
    cats = sorted(set(a) | set(b), key=str)
    p_o = float(np.mean([x == y for x, y in zip(a, b)]))
    p_e = float(sum((a.count(c) / len(a)) * (b.count(c) / len(b)) for c in cats))
    return float("nan") if np.isclose(p_e, 1.0) else (p_o - p_e) / (1.0 - p_e)


@dataclass(frozen=True)
class RaterAgreement:
    """Agreement on one invariance: ``fleiss`` over the models every rater labelled (with
    ``n_common`` such models), and per rater the share of their labels equal to the provenance
    rule's and Cohen's kappa with it (``against_provenance``: rater -> (models, share, kappa))."""

    invariance: str
    raters: tuple[str, ...]
    n_common: int
    fleiss: float
    against_provenance: dict[str, tuple[int, float, float]]


def rater_agreement(labels: Sequence[Any], invariance: str = "rotation") -> RaterAgreement:
    """:class:`RaterAgreement` from :class:`~orbitscope.ml4ml.modeldb.Label` records (e.g.
    ``ModelDatabase.labels()``): human raters among themselves (Fleiss' kappa, models labelled
    by all of them) and each against the provenance labels."""
    human: dict[str, dict[str, str]] = {}
    prov: dict[str, str] = {}
    for lb in labels:
        if lb.invariance != invariance:
            continue
        if lb.source == "human":
            human.setdefault(lb.labeller, {})[lb.model_id] = lb.label
        elif lb.source == "provenance":
            prov[lb.model_id] = lb.label
    raters = tuple(sorted(human))
    common = sorted(set.intersection(*(set(v) for v in human.values()))) if len(raters) >= 2 else []
    fleiss = float("nan")
    if common:
        table = np.array([[sum(human[r][m] == c for r in raters) for c in LABELS] for m in common])
        fleiss = fleiss_kappa(table)
    against: dict[str, tuple[int, float, float]] = {}
    for r in raters:
        shared = sorted(set(human[r]) & set(prov))
        if shared:
            mine, rule = [human[r][m] for m in shared], [prov[m] for m in shared]
            against[r] = (len(shared), float(np.mean([x == y for x, y in zip(mine, rule)])), cohen_kappa(mine, rule))
    return RaterAgreement(invariance, raters, len(common), fleiss, against)

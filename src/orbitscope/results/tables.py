"""Small helpers for tabular outputs."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

__all__ = ["write_csv", "is_p_column"]


def is_p_column(name: str) -> bool:
    """Whether a table column holds p-values: its name ends in `` p`` or has `` p (`` (the test)."""
    return name.endswith(" p") or " p (" in name


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path, significant: Sequence[str] = ()) -> Path:
    """Write dict rows (columns from the first row) to ``path``; floats with 4 decimals, except
    p-values (columns named ``... p`` or ``... p (test)``) and the ``significant`` columns, which
    keep 4 significant digits (a p-value of 1e-80 is not 0.0000). Creates parent folders; raises
    ValueError for no rows."""
    if not rows:
        raise ValueError(f"nothing to write to {path}: no rows")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4g}" if is_p_column(k) or k in significant else f"{v:.4f}")
                             if isinstance(v, float) else v
                             for k, v in row.items()})
    return p

"""The model database: models with provenance, variance matrices, metrics and invariance labels.

Kept in the store's SQLite catalog (tables ``zoo_models`` and ``zoo_labels``) next to the runs;
matrices live in ``<home>/zoo/<family>/<model_id>.npz`` (see
:meth:`orbitscope.ml4ml.matrices.VarianceMatrices.save`) and weights in the models cache.

Labels are ``"invariant"``, ``"borderline"`` or ``"not-invariant"`` and come from two sources:

* ``"provenance"``: derived from how a model was trained, by a stated rule
  (:func:`orbitscope.ml4ml.zoo.provenance_label`); labeller ``"rule:<version>"``;
* ``"human"``: recorded by a person (``orbitscope zoo label``), labeller = their name.

One label per (model, invariance, source, labeller); recording again replaces it. A model is
assessed for one or more invariances (``rotation``, ``brightness``, ``scale``): its main
matrices file and metrics are those of its family's first test orbit (rotation for every
family), and ``zoo_matrices`` holds those of the others (``<model_id>.<invariance>.npz``).
Stores written before labels had an invariance are migrated on opening (their labels are
rotation labels).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .matrices import VarianceMatrices
from ..results.store import Store, StoreError

__all__ = ["LABELS", "LABEL_SOURCES", "PRIMARY_INVARIANCE", "ZooModel", "Label", "ModelDatabase", "latest_label", "invariance_order"]

LABELS = ("invariant", "borderline", "not-invariant")
LABEL_SOURCES = ("provenance", "human")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS zoo_models (
    model_id TEXT PRIMARY KEY, family TEXT NOT NULL, member INTEGER NOT NULL, recipe TEXT NOT NULL,
    provenance TEXT NOT NULL, weights TEXT NOT NULL, matrices TEXT NOT NULL, metrics TEXT NOT NULL,
    created REAL NOT NULL, UNIQUE (family, member));
CREATE TABLE IF NOT EXISTS zoo_labels (
    model_id TEXT NOT NULL, source TEXT NOT NULL, labeller TEXT NOT NULL, label TEXT NOT NULL,
    note TEXT NOT NULL, created REAL NOT NULL, invariance TEXT NOT NULL DEFAULT 'rotation',
    PRIMARY KEY (model_id, invariance, source, labeller));
CREATE TABLE IF NOT EXISTS zoo_matrices (
    model_id TEXT NOT NULL, invariance TEXT NOT NULL, matrices TEXT NOT NULL, metrics TEXT NOT NULL,
    PRIMARY KEY (model_id, invariance));
"""
#: The invariance of a model's main matrices and of labels recorded without one.
PRIMARY_INVARIANCE = "rotation"


def _migrate(con: Any) -> None:
    """Give the labels of a store written before they had an invariance the invariance rotation."""
    cols = [r[1] for r in con.execute("PRAGMA table_info(zoo_labels)").fetchall()]
    if cols and "invariance" not in cols:
        con.executescript("""
            ALTER TABLE zoo_labels RENAME TO zoo_labels_v1;
            CREATE TABLE zoo_labels (
                model_id TEXT NOT NULL, source TEXT NOT NULL, labeller TEXT NOT NULL, label TEXT NOT NULL,
                note TEXT NOT NULL, created REAL NOT NULL, invariance TEXT NOT NULL DEFAULT 'rotation',
                PRIMARY KEY (model_id, invariance, source, labeller));
            INSERT INTO zoo_labels (model_id, source, labeller, label, note, created, invariance)
                SELECT model_id, source, labeller, label, note, created, 'rotation' FROM zoo_labels_v1;
            DROP TABLE zoo_labels_v1;
        """)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class Label:
    """One invariance label."""

    model_id: str
    source: str
    labeller: str
    label: str
    note: str = ""
    created: float = 0.0
    invariance: str = PRIMARY_INVARIANCE


def invariance_order(invariances: Any) -> list[str]:
    """``invariances`` in the order listings use: :data:`PRIMARY_INVARIANCE` first, then by name."""
    return sorted(set(invariances), key=lambda inv: (inv != PRIMARY_INVARIANCE, inv))


def latest_label(labels: Any, source: str = "provenance", labeller: str | None = None,
                 invariance: str = PRIMARY_INVARIANCE) -> str | None:
    """Of ``labels`` (:class:`Label` records), the one from ``source`` for ``invariance`` (by
    ``labeller``, else the most recent one); None if there is none."""
    hits = [lb for lb in labels if lb.source == source and lb.invariance == invariance
            and (labeller is None or lb.labeller == labeller)]
    return max(hits, key=lambda lb: lb.created).label if hits else None


@dataclass(frozen=True)
class ZooModel:
    """One model of the database.

    Attributes:
        model_id: ``<family>-<member:03d>``.
        family: the family it was drawn from (cross-validation holds whole families out).
        member: index within the family.
        recipe: its :class:`~orbitscope.training.recipes.TrainRecipe` as a dict.
        provenance: architecture, data, augmentation range relative to the test range (``none``,
            ``narrower``, ``matched``, ``wider``, ``gap``), epochs, learning rate, label noise,
            class imbalance, training images, seed, test orbit.
        weights: path of the trained weights (safetensors).
        matrices: path of its :class:`~orbitscope.ml4ml.matrices.VarianceMatrices` file.
        metrics: accuracy at identity, worst level accuracy, share of images correct at every
            level, training time.
        labels: its labels, all sources and invariances.
        extra: the other invariances it was assessed for: ``{invariance: {"matrices": path,
            "metrics": {...}}}``.
    """

    model_id: str
    family: str
    member: int
    recipe: dict[str, Any]
    provenance: dict[str, Any]
    weights: str
    matrices: str
    metrics: dict[str, Any]
    created: float
    labels: tuple[Label, ...] = field(default=())
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def invariances(self) -> list[str]:
        """The invariances it was assessed for, the main one first."""
        return [PRIMARY_INVARIANCE, *sorted(self.extra)]

    def _check(self, invariance: str) -> str:
        if invariance != PRIMARY_INVARIANCE and invariance not in self.extra:
            raise StoreError(f"model {self.model_id} was assessed for {', '.join(self.invariances)}, not {invariance}")
        return invariance

    def label(self, source: str = "provenance", labeller: str | None = None,
              invariance: str = PRIMARY_INVARIANCE) -> str | None:
        """The label from ``source`` for ``invariance`` (a given labeller, else the most recent);
        None if absent."""
        return latest_label(self.labels, source, labeller, invariance)

    def load_matrices(self, invariance: str = PRIMARY_INVARIANCE) -> VarianceMatrices:
        """Its variance matrices for ``invariance``."""
        if self._check(invariance) == PRIMARY_INVARIANCE:
            return VarianceMatrices.load(self.matrices)
        return VarianceMatrices.load(self.extra[invariance]["matrices"])

    def metrics_for(self, invariance: str = PRIMARY_INVARIANCE) -> dict[str, Any]:
        """Its metrics over ``invariance``'s test orbit."""
        return self.metrics if self._check(invariance) == PRIMARY_INVARIANCE else self.extra[invariance]["metrics"]


class ModelDatabase:
    """Access to the model tables of a store (created on first use).

    ``create=False`` refuses a missing store (for read-only commands) instead of creating one."""

    def __init__(self, store: Store | str | Path | None = None, *, create: bool = True) -> None:
        try:
            self.store = store if isinstance(store, Store) else Store(store, create=create)
        except StoreError as exc:
            if create:
                raise
            raise StoreError(f"{exc}; to start a model database, build a zoo: "
                             "'orbitscope zoo train --family mnist-small --n 60'") from exc
        with self.store.connection() as con:
            _migrate(con)
            con.executescript(_SCHEMA)

    @property
    def location(self) -> str:
        """Where the database is (for messages): the store's directory."""
        return str(self.store.home)

    @property
    def zoo_dir(self) -> Path:
        return self.store.home / "zoo"

    def matrices_path(self, family: str, model_id: str) -> Path:
        """Where a model's matrices are kept: ``<home>/zoo/<family>/<model_id>.npz``."""
        return self.matrices_path_for(self.store.home, family, model_id)

    @staticmethod
    def matrices_path_for(home: str | Path, family: str, model_id: str, invariance: str = PRIMARY_INVARIANCE) -> Path:
        """:meth:`matrices_path` for a store at ``home`` (without opening it); for an invariance
        other than the main one, ``<model_id>.<invariance>.npz``."""
        _check_id(family, "family")
        _check_id(model_id, "model id")
        _check_id(invariance, "invariance")
        tail = "" if invariance == PRIMARY_INVARIANCE else f".{invariance}"
        return Path(home) / "zoo" / family / f"{model_id}{tail}.npz"

    # -- models ---------------------------------------------------------------------------
    def add_model(self, model_id: str, family: str, member: int, recipe: dict[str, Any],
                  provenance: dict[str, Any], weights: str | Path, matrices: str | Path,
                  metrics: dict[str, Any], extra: dict[str, dict[str, Any]] | None = None) -> None:
        """Insert or replace one model row (the matrices files must already exist); ``extra``:
        ``{invariance: {"matrices": path, "metrics": {...}}}`` for invariances besides rotation."""
        _check_id(model_id, "model id")
        _check_id(family, "family")
        extra = dict(extra or {})
        for path in [matrices, *(e["matrices"] for e in extra.values())]:
            if not Path(path).is_file():
                raise StoreError(f"matrices file {path} does not exist; compute the matrices first")
        with self.store.connection() as con:
            con.execute(
                "INSERT OR REPLACE INTO zoo_models VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (model_id, family, int(member), json.dumps(recipe), json.dumps(provenance, default=str),
                 str(weights), str(matrices), json.dumps(metrics, default=float), time.time()),
            )
            con.execute("DELETE FROM zoo_matrices WHERE model_id = ?", (model_id,))
            con.executemany("INSERT INTO zoo_matrices VALUES (?, ?, ?, ?)",
                            [(model_id, inv, str(e["matrices"]), json.dumps(e["metrics"], default=float))
                             for inv, e in extra.items()])

    def has_model(self, model_id: str) -> bool:
        with self.store.connection() as con:
            return con.execute("SELECT 1 FROM zoo_models WHERE model_id = ?", (model_id,)).fetchone() is not None

    def models(self, family: str | None = None) -> list[ZooModel]:
        """All models (of one family), ordered by family and member, with their labels."""
        query = "SELECT model_id, family, member, recipe, provenance, weights, matrices, metrics, created FROM zoo_models"
        args: tuple[Any, ...] = ()
        if family is not None:
            query += " WHERE family = ?"
            args = (family,)
        with self.store.connection() as con:
            rows = con.execute(query + " ORDER BY family, member", args).fetchall()
            label_rows = con.execute("SELECT model_id, source, labeller, label, note, created, invariance "
                                     "FROM zoo_labels").fetchall()
            extra_rows = con.execute("SELECT model_id, invariance, matrices, metrics FROM zoo_matrices").fetchall()
        labels: dict[str, list[Label]] = {}
        for r in label_rows:
            labels.setdefault(r[0], []).append(Label(*r))
        extra: dict[str, dict[str, dict[str, Any]]] = {}
        for r in extra_rows:
            extra.setdefault(r[0], {})[r[1]] = {"matrices": r[2], "metrics": json.loads(r[3])}
        return [ZooModel(r[0], r[1], int(r[2]), json.loads(r[3]), json.loads(r[4]), r[5], r[6], json.loads(r[7]),
                         float(r[8]), tuple(labels.get(r[0], ())), extra.get(r[0], {})) for r in rows]

    def get(self, model_id: str) -> ZooModel:
        for m in self.models():
            if m.model_id == model_id:
                return m
        known = ", ".join(m.model_id for m in self.models()[:8])
        hint = f" (e.g. {known})" if known else "; it is empty: build a zoo with 'orbitscope zoo train'"
        raise StoreError(f"no model {model_id!r} in the model database at {self.store.home}{hint}")

    def families(self) -> dict[str, int]:
        """Family name -> number of models."""
        with self.store.connection() as con:
            rows = con.execute("SELECT family, COUNT(*) FROM zoo_models GROUP BY family ORDER BY family").fetchall()
        return {r[0]: int(r[1]) for r in rows}

    # -- labels ---------------------------------------------------------------------------
    def set_label(self, model_id: str, label: str, *, source: str, labeller: str, note: str = "",
                  invariance: str = PRIMARY_INVARIANCE) -> None:
        """Record a label for ``invariance`` (replacing this labeller's previous one for the model
        and invariance)."""
        if label not in LABELS:
            raise ValueError(f"label must be one of {LABELS}, got {label!r}")
        if source not in LABEL_SOURCES:
            raise ValueError(f"label source must be one of {LABEL_SOURCES}, got {source!r}")
        if not labeller or not labeller.strip():
            raise ValueError("a label needs the labeller's name (--by NAME)")
        if not self.has_model(model_id):
            raise StoreError(f"no model {model_id!r} in the model database; see 'orbitscope zoo list'")
        if invariance != PRIMARY_INVARIANCE:
            with self.store.connection() as con:
                known = con.execute("SELECT 1 FROM zoo_matrices WHERE model_id = ? AND invariance = ?",
                                    (model_id, invariance)).fetchone()
            if known is None:
                raise StoreError(f"model {model_id!r} was not assessed for {invariance!r}: it has no matrices for it")
        with self.store.connection() as con:
            con.execute("INSERT OR REPLACE INTO zoo_labels (model_id, source, labeller, label, note, created, "
                        "invariance) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (model_id, source, labeller.strip(), label, note, time.time(), invariance))

    def labels(self, source: str | None = None, invariance: str | None = None) -> list[Label]:
        """Every label (of one source, of one invariance)."""
        with self.store.connection() as con:
            rows = con.execute("SELECT model_id, source, labeller, label, note, created, invariance FROM zoo_labels "
                               "ORDER BY model_id, invariance, source, labeller").fetchall()
        return [Label(*r) for r in rows if (source is None or r[1] == source) and (invariance is None or r[6] == invariance)]


def _check_id(text: str, what: str) -> None:
    if not isinstance(text, str) or not _ID.match(text):
        raise ValueError(f"malformed {what} {text!r}: use letters, digits, '-', '_' and '.'")

"""What the labelling view (``/label/``, :mod:`orbitscope.app.labelling`) computes, as plain
functions on a :class:`~orbitscope.ml4ml.modeldb.ModelDatabase` (no Dash).

A rater labels one model at a time for one invariance, blind: they see only its id and its
variance matrices (and, going back, their own label), never its provenance, provenance label or
accuracy. Every value that comes from the browser (rater name, invariance, model id) is checked
here against fixed rules or the database; a bad one raises :class:`LabellingError`, whose
message the page shows. The only write is :meth:`ModelDatabase.set_label` with source
``"human"`` (:func:`record_label`).
"""

from __future__ import annotations

import base64
import io
import math
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OrbitscopeError
from ..ml4ml.agreement import rater_agreement
from ..ml4ml.matrix_plots import matrix_panel
from ..ml4ml.modeldb import LABELS, ModelDatabase, ZooModel, invariance_order
from ..results.store import Store, StoreError

__all__ = [
    "ACTIONS", "BUILD_HINT", "MAX_RATER_LENGTH", "AgreementRow", "AgreementSummary", "LabellingError", "Screen",
    "agreement_summary", "check_invariance", "check_model", "check_rater", "format_kappa", "has_zoo_models",
    "invariances", "models_for", "next_model", "open_database", "panel_uri", "previous_model", "progress",
    "record_label", "step",
]

#: What the page can ask for: show the next unlabelled model, label the shown one, skip it, go back.
ACTIONS = ("load", *LABELS, "skip", "previous")
MAX_RATER_LENGTH = 64
_RATER_PUNCTUATION = frozenset(" -_.'")
BUILD_HINT = "build one with 'orbitscope zoo train --family mnist-small-3 --n 10'"


class LabellingError(OrbitscopeError, ValueError):
    """A request the labelling view refuses (bad rater name, unknown model or invariance); its
    message is shown in the status line."""


# --------------------------------------------------------------------------- the database


def has_zoo_models(store: Store) -> bool:
    """Whether the store's catalog holds zoo models; reads only (creates no table)."""
    try:
        with store.connection() as con:
            if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'zoo_models'").fetchone() is None:
                return False
            return con.execute("SELECT 1 FROM zoo_models LIMIT 1").fetchone() is not None
    except (sqlite3.Error, StoreError, OSError):
        return False


def open_database(home: str | Path) -> ModelDatabase | None:
    """The model database of the store at ``home``; None when it holds no zoo models (then
    nothing is created in the store)."""
    store = Store(home, create=False)
    return ModelDatabase(store, create=False) if has_zoo_models(store) else None


def invariances(db: ModelDatabase) -> list[str]:
    """The invariances some model of ``db`` was assessed for, rotation first, then by name."""
    return invariance_order(inv for m in db.models() for inv in m.invariances)


def models_for(db: ModelDatabase, invariance: str) -> list[ZooModel]:
    """The models assessed for ``invariance``, in :meth:`ModelDatabase.models` order."""
    return [m for m in db.models() if invariance in m.invariances]


# --------------------------------------------------------------------------- checks


def check_rater(name: Any) -> str:
    """The rater's name, stripped: non-empty, at most :data:`MAX_RATER_LENGTH` characters, only
    letters, digits, spaces and ``- _ . '``."""
    if not isinstance(name, str) or not name.strip():
        raise LabellingError("enter your name first")
    name = name.strip()
    if len(name) > MAX_RATER_LENGTH:
        raise LabellingError(f"the rater name is too long ({len(name)} characters; at most {MAX_RATER_LENGTH})")
    bad = sorted({c for c in name if not (c.isalnum() or c in _RATER_PUNCTUATION)})
    if bad:
        shown = " ".join(repr(c) for c in bad[:5])
        raise LabellingError(f"the rater name may hold letters, digits, spaces and - _ . ' only, not {shown}")
    return name


def check_invariance(db: ModelDatabase, invariance: Any) -> str:
    """``invariance`` if some model of ``db`` was assessed for it."""
    known = invariances(db)
    if not isinstance(invariance, str) or invariance not in known:
        shown = repr(invariance[:40]) if isinstance(invariance, str) else type(invariance).__name__
        raise LabellingError(f"unknown invariance {shown}: this model database has {', '.join(known) or 'none'}")
    return invariance


def check_model(db: ModelDatabase, model_id: Any, invariance: str) -> ZooModel:
    """The model ``model_id`` of ``db``, which must have been assessed for ``invariance``."""
    if not isinstance(model_id, str) or not model_id:
        raise LabellingError("no model is shown")
    for m in db.models():
        if m.model_id == model_id:
            if invariance not in m.invariances:
                raise LabellingError(f"model {model_id} was assessed for {', '.join(m.invariances)}, not {invariance}")
            return m
    raise LabellingError(f"unknown model {model_id[:80]!r}: not in the model database")


# --------------------------------------------------------------------------- order


def _labelled(models: list[ZooModel], rater: str, invariance: str) -> set[str]:
    return {m.model_id for m in models if m.label("human", rater, invariance=invariance) is not None}


def next_model(db: ModelDatabase, rater: str, invariance: str, after: str | None = None) -> str | None:
    """The first model (in database order) assessed for ``invariance`` that ``rater`` has not
    labelled for it, looking after ``after`` first and then from the start (so ``after`` itself
    comes last); None when they labelled every one."""
    models = models_for(db, invariance)
    done = _labelled(models, rater, invariance)
    ids = [m.model_id for m in models]
    start = ids.index(after) + 1 if after in ids else 0
    for model_id in ids[start:] + ids[:start]:
        if model_id not in done:
            return model_id
    return None


def previous_model(db: ModelDatabase, invariance: str, current: str | None) -> str | None:
    """The model before ``current`` (in database order, among those assessed for
    ``invariance``); the last one when ``current`` is None; None before the first."""
    ids = [m.model_id for m in models_for(db, invariance)]
    if current is None:
        return ids[-1] if ids else None
    i = ids.index(current) if current in ids else 0
    return ids[i - 1] if i > 0 else None


def progress(db: ModelDatabase, rater: str, invariance: str) -> tuple[int, int]:
    """(models ``rater`` labelled for ``invariance``, models assessed for it)."""
    models = models_for(db, invariance)
    return len(_labelled(models, rater, invariance)), len(models)


# --------------------------------------------------------------------------- actions


def record_label(db: ModelDatabase, model_id: Any, label: Any, rater: Any, invariance: Any) -> str:
    """Check everything and record ``rater``'s ``label`` of ``model_id`` for ``invariance``
    (source ``"human"``; replaces their previous label of it); returns the stripped rater name."""
    rater = check_rater(rater)
    invariance = check_invariance(db, invariance)
    model = check_model(db, model_id, invariance)
    if label not in LABELS:
        raise LabellingError(f"unknown label {str(label)[:40]!r}: use one of {', '.join(LABELS)}")
    try:
        db.set_label(model.model_id, label, source="human", labeller=rater, invariance=invariance)
    except (StoreError, sqlite3.Error, OSError) as exc:
        raise LabellingError(f"the label could not be saved: {exc}") from exc
    return rater


@dataclass(frozen=True)
class Screen:
    """What the view shows after an action.

    Attributes:
        model_id: the model shown (None: none, e.g. every model is labelled or no rater yet).
        progress: ``"k of N labelled by <rater> for <invariance>"`` (empty without a rater).
        status: a message for the status line (empty when there is nothing to say).
        revealed: the rater's own label of the shown model when they have labelled it (never the
            provenance label: labelling is blind).
        error: whether ``status`` reports a refused request.
    """

    model_id: str | None
    progress: str = ""
    status: str = ""
    revealed: str = ""
    error: bool = False


def _screen(db: ModelDatabase, rater: str, invariance: str, model_id: str | None, status: str = "",
            error: bool = False) -> Screen:
    k, n = progress(db, rater, invariance)
    text = f"{k} of {n} labelled by {rater} for {invariance}" + (" · all labelled" if n and k == n else "")
    revealed = ""
    if model_id is not None:
        model = check_model(db, model_id, invariance)
        mine = model.label("human", rater, invariance=invariance)
        if mine is not None:
            # never the provenance label: seen per model, it would pull relabels toward the rule
            # and inflate the agreement with it that the view reports
            revealed = f"your label: {mine}"
    if model_id is None:
        done = f"all labelled: every model has your label for {invariance} (Previous revisits them)"
        status = f"{status} · {done}" if status else done
    return Screen(model_id, text, status, revealed, error)


def step(db: ModelDatabase, action: Any, rater: Any, invariance: Any, current: Any) -> Screen:
    """The view after ``action`` (one of :data:`ACTIONS`) by ``rater`` on the model ``current``
    shown for ``invariance``; a refused request keeps ``current`` and says why."""
    if action not in ACTIONS:
        raise LabellingError(f"unknown action {str(action)[:40]!r}")
    invariance = check_invariance(db, invariance)
    try:
        rater = check_rater(rater)
    except LabellingError as exc:
        return Screen(None, status=str(exc), error=True)
    if action == "load":
        return _screen(db, rater, invariance, next_model(db, rater, invariance))
    if action == "previous":
        if current is None:
            return _screen(db, rater, invariance, previous_model(db, invariance, None))
        model = check_model(db, current, invariance)
        before = previous_model(db, invariance, model.model_id)
        if before is None:
            return _screen(db, rater, invariance, model.model_id, "this is the first model")
        return _screen(db, rater, invariance, before)
    model = check_model(db, current, invariance)
    if action == "skip":
        following = next_model(db, rater, invariance, after=model.model_id)
        note = "no other model left to label" if following == model.model_id else f"skipped {model.model_id}"
        return _screen(db, rater, invariance, following, note)
    record_label(db, model.model_id, action, rater, invariance)
    saved = f"saved {action} for {model.model_id}"
    return _screen(db, rater, invariance, next_model(db, rater, invariance, after=model.model_id), saved)


# --------------------------------------------------------------------------- agreement


def format_kappa(value: float) -> str:
    """A kappa or share with three decimals; NaN (undefined) as ``–``."""
    return f"{value:.3f}" if isinstance(value, (int, float)) and math.isfinite(value) else "–"


@dataclass(frozen=True)
class AgreementRow:
    """One rater: models labelled, and against the provenance labels the models both labelled,
    the share labelled alike and Cohen's kappa (NaN without such models)."""

    rater: str
    labelled: int
    vs_provenance: int
    share_equal: float
    kappa: float


@dataclass(frozen=True)
class AgreementSummary:
    """The agreement card of one invariance, from :func:`~orbitscope.ml4ml.agreement.rater_agreement`."""

    invariance: str
    raters: tuple[str, ...]
    n_common: int
    fleiss: float
    rows: tuple[AgreementRow, ...]

    @property
    def fleiss_text(self) -> str:
        """Fleiss' kappa as the card shows it."""
        if len(self.raters) < 2 or self.n_common < 1:
            return "needs ≥ 2 raters with common models"
        return format_kappa(self.fleiss)


def agreement_summary(db: ModelDatabase, invariance: str) -> AgreementSummary:
    """Agreement of the human raters of ``invariance`` among themselves and with provenance."""
    labels = db.labels(invariance=invariance)
    ra = rater_agreement(labels, invariance)
    counts = {r: sum(lb.source == "human" and lb.labeller == r for lb in labels) for r in ra.raters}
    nan = float("nan")
    rows = tuple(AgreementRow(r, counts[r], *ra.against_provenance.get(r, (0, nan, nan))) for r in ra.raters)
    return AgreementSummary(invariance, ra.raters, ra.n_common, ra.fleiss, rows)


# --------------------------------------------------------------------------- the panel

_PANELS: OrderedDict[tuple[str, str, float], str] = OrderedDict()
_PANELS_LOCK = threading.Lock()
_PANELS_MAX = 32


def panel_uri(model: ZooModel, invariance: str, dpi: int = 80) -> str:
    """The model's matrix panel for ``invariance`` (:func:`matrix_panel`, titled with its id
    only) as a PNG data URI; the last few are cached."""
    key = (model.model_id, invariance, model.created)  # a rebuilt model is recorded anew
    with _PANELS_LOCK:
        if key in _PANELS:
            _PANELS.move_to_end(key)
            return _PANELS[key]
    fig = matrix_panel(model.load_matrices(invariance), title=model.model_id)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        fig.clear()  # an OO-API figure (no pyplot): nothing else holds it
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    with _PANELS_LOCK:
        _PANELS[key] = uri
        while len(_PANELS) > _PANELS_MAX:
            _PANELS.popitem(last=False)
    return uri

"""The embedded results store: a SQLite catalog plus chunked arrays on disk. No server.

Layout under the store's home (``$ORBITSCOPE_HOME`` or ``./orbitscope-runs``)::

    catalog.sqlite                    runs, models, chunks (WAL mode, safe for concurrent readers)
    runs/<run_id>/<variable>/<chunk>.npy   one file per variable per chunk of samples

Writing is chunk by chunk: each chunk's arrays are written to temporary files and moved into place
with an atomic ``os.replace``; only then is the chunk recorded in the catalog, in one transaction.
Readers only read chunks the catalog lists, so they never see half-written data, and a run that is
killed mid-way resumes from the last recorded chunk. Arrays are plain ``.npy`` files (readable
with numpy alone, memory-mappable); :meth:`OrbitResult.data` exports to Zarr/NetCDF through xarray.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from ..errors import StoreError
from .result import OrbitResult, assemble_result

__all__ = ["Store", "StoreError", "RunRecord", "default_home", "open_store"]

_FORMAT = "orbitscope-store"
_VERSION = 1
_CATALOG = "catalog.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (
    model_id TEXT PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL,
    info TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, name TEXT NOT NULL, model_id TEXT NOT NULL, data_id TEXT NOT NULL,
    orbit TEXT NOT NULL, task TEXT NOT NULL, layout TEXT NOT NULL, attrs TEXT NOT NULL,
    status TEXT NOT NULL, n_samples INTEGER, chunk_size INTEGER NOT NULL,
    created REAL NOT NULL, finished REAL);
CREATE TABLE IF NOT EXISTS chunks (
    run_id TEXT NOT NULL, chunk INTEGER NOT NULL, start INTEGER NOT NULL, stop INTEGER NOT NULL,
    PRIMARY KEY (run_id, chunk));
"""


def default_home() -> Path:
    """``$ORBITSCOPE_HOME`` if set, else ``./orbitscope-runs``."""
    return Path(os.environ.get("ORBITSCOPE_HOME") or "orbitscope-runs")


@dataclass(frozen=True)
class RunRecord:
    """One row of the run catalog."""

    run_id: str
    name: str
    model_id: str
    data_id: str
    orbit: dict[str, Any]
    task: dict[str, Any]
    layout: dict[str, Any]
    attrs: dict[str, Any]
    status: str
    n_samples: int | None
    chunk_size: int
    created: float
    finished: float | None
    chunks_done: int = 0

    @property
    def complete(self) -> bool:
        return self.status == "complete"


class Store:
    """A results store rooted at ``home`` (created on first write if ``create``)."""

    def __init__(self, home: str | os.PathLike[str] | None = None, *, create: bool = True) -> None:
        self.home = Path(home) if home is not None else default_home()
        self._catalog = self.home / _CATALOG
        if self.home.exists() and not self.home.is_dir():
            raise StoreError(f"store path {self.home} exists and is not a directory")
        if not self._catalog.exists():
            if self.home.exists() and any(p.name not in ("runs", "models", "zoo") for p in self.home.iterdir()):
                raise StoreError(
                    f"{self.home} is not an orbitscope store (no {_CATALOG}) and is not empty; "
                    "point ORBITSCOPE_HOME / --home at an empty or existing store directory"
                )
            if not create:
                raise StoreError(f"no orbitscope store at {self.home} (run an evaluation first, or check --home)")
            self._create_catalog()
        self._validated = False
        self._check_format()
        self._validated = True

    def _create_catalog(self) -> None:
        """Build the catalog under a temporary name and link it into place, so a concurrent
        opener sees either no catalog or a complete one (and two creators do not clash)."""
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.home / f".{_CATALOG}.{os.getpid()}.tmp"
        con = sqlite3.connect(tmp)
        try:
            with con:
                con.executescript(_SCHEMA)
                con.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (_FORMAT,))
                con.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (str(_VERSION),))
        finally:
            con.close()
        try:
            os.link(tmp, self._catalog)  # fails if another process created it first: keep theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)

    # -- connection -------------------------------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            con = sqlite3.connect(self._catalog, timeout=30.0)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the catalog {self._catalog}: {exc}") from exc
        try:
            if getattr(self, "_validated", False):  # never touch a foreign database's header
                con.execute("PRAGMA journal_mode=WAL")
            with con:
                yield con
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the catalog {self._catalog} is corrupt or not an orbitscope catalog: {exc}") from exc
        finally:
            con.close()

    def connection(self) -> AbstractContextManager[sqlite3.Connection]:
        """A catalog connection in one transaction (committed on exit), for modules that keep
        their own tables in the catalog (e.g. :mod:`orbitscope.ml4ml.modeldb`)."""
        return self._connect()

    def _check_format(self) -> None:
        try:
            with self._connect() as con:
                rows = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except StoreError:
            raise
        except sqlite3.Error as exc:  # pragma: no cover - covered via StoreError above
            raise StoreError(f"{self._catalog} is not an orbitscope catalog: {exc}") from exc
        if rows.get("format") != _FORMAT:
            raise StoreError(f"{self._catalog} is a SQLite file but not an orbitscope catalog")
        if int(rows.get("version", "0")) > _VERSION:
            raise StoreError(
                f"store {self.home} has format version {rows['version']}, newer than this orbitscope "
                f"understands ({_VERSION}); upgrade orbitscope"
            )

    # -- models ------------------------------------------------------------------------------
    def register_model(self, model_id: str, name: str, model_hash: str, info: dict[str, Any] | None = None) -> None:
        with self._connect() as con:
            con.execute(
                "INSERT OR IGNORE INTO models VALUES (?, ?, ?, ?, ?)",
                (model_id, name, model_hash, json.dumps(info or {}, default=str), time.time()),
            )

    def models(self) -> list[dict[str, Any]]:
        with self._connect() as con:
            rows = con.execute("SELECT model_id, name, hash, info, created FROM models ORDER BY created").fetchall()
        return [dict(model_id=r[0], name=r[1], hash=r[2], info=json.loads(r[3]), created=r[4]) for r in rows]

    # -- runs --------------------------------------------------------------------------------
    def _run_dir(self, run_id: str) -> Path:
        if not run_id or any(c in run_id for c in "/\\.") or len(run_id) > 64:
            raise StoreError(f"malformed run id {run_id!r}")
        return self.home / "runs" / run_id

    def create_run(
        self,
        run_id: str,
        *,
        name: str,
        model_id: str,
        data_id: str,
        orbit: dict[str, Any],
        task: dict[str, Any],
        layout: dict[str, Any],
        attrs: dict[str, Any],
        n_samples: int | None,
        chunk_size: int,
    ) -> RunRecord:
        """Create a run (or return the existing one with the same id, for resuming)."""
        existing = self.find_run(run_id)
        if existing is not None:
            if existing.chunk_size != chunk_size:
                raise StoreError(f"run {run_id} exists with chunk size {existing.chunk_size}, not {chunk_size}")
            return existing
        self._run_dir(run_id).mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, NULL)",
                (
                    run_id, name, model_id, data_id, json.dumps(orbit), json.dumps(task),
                    json.dumps(layout), json.dumps(attrs, default=str), n_samples, chunk_size, time.time(),
                ),
            )
        return self.get_run(run_id)

    def _record(self, row: tuple[Any, ...], chunks_done: int) -> RunRecord:
        return RunRecord(
            run_id=row[0], name=row[1], model_id=row[2], data_id=row[3], orbit=json.loads(row[4]),
            task=json.loads(row[5]), layout=json.loads(row[6]), attrs=json.loads(row[7]), status=row[8],
            n_samples=row[9], chunk_size=row[10], created=row[11], finished=row[12], chunks_done=chunks_done,
        )

    def find_run(self, run_id: str) -> RunRecord | None:
        self._run_dir(run_id)  # validates the id
        with self._connect() as con:
            row = con.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                return None
            done = con.execute("SELECT COUNT(*) FROM chunks WHERE run_id = ?", (run_id,)).fetchone()[0]
        return self._record(row, done)

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id, or a unique prefix of it, or a unique name."""
        if not run_id or not run_id.strip():
            raise StoreError(f"empty run id; `orbitscope runs list` shows the runs in {self.home}")
        is_id = _looks_like_id(run_id)
        rec = self.find_run(run_id) if is_id else None
        if rec is not None:
            return rec
        with self._connect() as con:  # exact prefix match (no LIKE wildcards), or exact name
            rows = con.execute(
                "SELECT run_id FROM runs WHERE (? AND substr(run_id, 1, ?) = ?) OR name = ? ORDER BY created",
                (is_id, len(run_id), run_id, run_id),
            ).fetchall()
        if len(rows) == 1:
            return self.find_run(rows[0][0])  # type: ignore[return-value]
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.home}; `orbitscope runs list` shows the runs there")
        raise StoreError(f"{run_id!r} matches {len(rows)} runs ({', '.join(r[0] for r in rows[:5])}); give more of the id")

    def runs(self) -> list[RunRecord]:
        with self._connect() as con:
            rows = con.execute("SELECT * FROM runs ORDER BY created").fetchall()
            done = dict(con.execute("SELECT run_id, COUNT(*) FROM chunks GROUP BY run_id").fetchall())
        return [self._record(r, done.get(r[0], 0)) for r in rows]

    def done_chunks(self, run_id: str) -> set[int]:
        with self._connect() as con:
            return {r[0] for r in con.execute("SELECT chunk FROM chunks WHERE run_id = ?", (run_id,))}

    def write_chunk(self, run_id: str, chunk: int, start: int, arrays: dict[str, np.ndarray]) -> None:
        """Write one chunk of samples [start, start + n) atomically, then record it."""
        n = {a.shape[0] for a in arrays.values()}
        if len(n) != 1:
            raise ValueError(f"all arrays of a chunk need the same number of samples, got {n}")
        stop = start + n.pop()
        base = self._run_dir(run_id)
        for name, arr in arrays.items():
            folder = base / name
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / f"{chunk:06d}.npy"
            tmp = folder / f".{chunk:06d}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                np.save(fh, np.ascontiguousarray(arr))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        with self._connect() as con:
            con.execute("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?)", (run_id, chunk, start, stop))

    def finish_run(self, run_id: str, n_samples: int) -> None:
        with self._connect() as con:
            con.execute(
                "UPDATE runs SET status = 'complete', n_samples = ?, finished = ? WHERE run_id = ?",
                (n_samples, time.time(), run_id),
            )

    def delete_run(self, run_id: str) -> None:
        rec = self.get_run(run_id)
        with self._connect() as con:
            con.execute("DELETE FROM chunks WHERE run_id = ?", (rec.run_id,))
            con.execute("DELETE FROM runs WHERE run_id = ?", (rec.run_id,))
        shutil.rmtree(self._run_dir(rec.run_id), ignore_errors=True)

    # -- reading -----------------------------------------------------------------------------
    def load(self, run_id: str, *, allow_partial: bool = False) -> OrbitResult:
        """Load a run's result. An unfinished run raises unless ``allow_partial`` (then the
        recorded chunks are returned, in sample order)."""
        rec = self.get_run(run_id)
        if not rec.complete and not allow_partial:
            raise StoreError(
                f"run {rec.run_id} is not complete ({rec.chunks_done} chunks written, status {rec.status}); "
                "resume it by running the same evaluation again, or pass allow_partial=True"
            )
        with self._connect() as con:
            chunks = con.execute(
                "SELECT chunk, start, stop FROM chunks WHERE run_id = ? ORDER BY start", (rec.run_id,)
            ).fetchall()
        base = self._run_dir(rec.run_id)
        parts: dict[str, list[np.ndarray]] = {}
        for name, spec in rec.layout["variables"].items():
            parts[name] = []
            for chunk, start, stop in chunks:
                path = base / name / f"{chunk:06d}.npy"
                try:
                    arr = np.load(path, allow_pickle=False)
                except FileNotFoundError:
                    raise StoreError(f"store is corrupt: {path} is listed in the catalog but missing") from None
                except (ValueError, OSError, EOFError) as exc:
                    raise StoreError(f"store is corrupt: cannot read {path}: {exc}") from exc
                if arr.shape[0] != stop - start or arr.dtype != np.dtype(spec["dtype"]):
                    raise StoreError(
                        f"store is corrupt: {path} has shape {arr.shape} / dtype {arr.dtype}, expected "
                        f"{stop - start} samples of {spec['dtype']}"
                    )
                parts[name].append(arr)
        samples = np.concatenate([np.arange(s, e) for _, s, e in chunks]) if chunks else np.arange(0)
        attrs = dict(rec.attrs, run_id=rec.run_id, run_name=rec.name, status=rec.status, n_samples=len(samples))
        return assemble_result(rec.layout, parts, samples, attrs)


def _looks_like_id(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text) and len(text) <= 64


def open_store(store: "Store | str | os.PathLike[str] | None") -> Store:
    """Accept a Store, a path, or None (the default home)."""
    return store if isinstance(store, Store) else Store(store)

"""The embedded results store: a SQLite catalog plus chunked arrays on disk. No server.

Layout under the store's home (``$ORBITSCOPE_HOME`` or ``./orbitscope-runs``)::

    catalog.sqlite                    runs, models, chunks (WAL mode, safe for concurrent readers)
    runs/<run_id>/<variable>/<chunk>.npy   one file per variable per chunk of samples

Writing is chunk by chunk: each chunk's arrays are written to temporary files and moved into place
with an atomic ``os.replace``; only then is the chunk recorded in the catalog, in one transaction.
Readers only read chunks the catalog lists, so they never see half-written data, and a run that is
killed mid-way resumes from the last recorded chunk. Each chunk's files carry a CRC-32 in the
catalog: loading verifies it (a damaged chunk is reported by run and chunk) and resuming recomputes
damaged or missing chunks. The folder is fsynced after each rename, so a power loss cannot leave
the catalog listing a chunk that is not on disk. A store that cannot be written (a read-only mount,
another user's files) is opened read-only: everything that reads works. Arrays are plain ``.npy`` files (readable
with numpy alone, memory-mappable). :meth:`Store.load` returns a *lazy* result over them (read on
demand and by selection, :mod:`orbitscope.results.lazy`); aggregates computed from a run are kept
in the catalog's ``aggregates`` table, keyed by a digest of the run's chunks, so they are computed
once (:mod:`orbitscope.results.streaming`). :meth:`OrbitResult.data` exports to Zarr/NetCDF
through xarray.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from ..errors import StoreError
from .store_errors import describe_sqlite_error, fsync_dir, os_error_message, pid_alive
from .lazy import ChunkBounds, ResultSource, file_crc, lazy_variable, stored_arrays
from .result import OrbitResult, result_from_arrays

__all__ = ["Store", "StoreError", "RunBusyError", "RunRecord", "default_home", "open_store"]

_FORMAT = "orbitscope-store"
_VERSION = 1
_CATALOG = "catalog.sqlite"

#: Cached aggregates (see :meth:`Store.cache_get`): safe to drop at any time.
_AGGREGATES = """
CREATE TABLE IF NOT EXISTS aggregates (
    run_id TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (run_id, key))"""

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
    checksum TEXT, PRIMARY KEY (run_id, chunk));
""" + _AGGREGATES + ";"


_TMP_CATALOG = re.compile(r"^\.catalog\.sqlite\.(\d+)\.tmp(-journal|-wal|-shm)?$")  # with SQLite's companions
_TMP_CHUNK = re.compile(r"^\.\d{6}\.(\d+)\.tmp$")


class RunBusyError(StoreError):
    """The run is already being written by this thread (``run_id`` names it)."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


#: run locks held in this process: (lock file, thread id)
_HELD_LOCKS: set[tuple[str, int]] = set()


def default_home() -> Path:
    """``$ORBITSCOPE_HOME`` if set, else ``./orbitscope-runs``."""
    return Path(os.environ.get("ORBITSCOPE_HOME") or "orbitscope-runs")


def _write_pid(fh: Any, text: str) -> None:
    """Replace the content of an open lock file with ``text`` (best effort: a lock file that cannot
    be written still locks)."""
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(text.encode("ascii"))
        fh.flush()
    except OSError:
        pass


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
            self._remove_stale_catalogs()
            if self.home.exists() and any(p.name not in ("runs", "models", "zoo") and not _TMP_CATALOG.match(p.name)
                                          for p in self.home.iterdir()):
                raise StoreError(
                    f"{self.home} is not an orbitscope store (no {_CATALOG}) and is not empty; "
                    "point ORBITSCOPE_HOME / --home at an empty or existing store directory"
                )
            if not create:
                raise StoreError(f"no orbitscope store at {self.home} (run an evaluation first, or check --home)")
            self._create_catalog()
        self.read_only = not os.access(self._catalog, os.W_OK) or not os.access(self.home, os.W_OK)
        self._validated = False
        self._check_format()
        self._validated = True

    def _remove_stale_catalogs(self) -> None:
        """Temporary catalogs left by a creator that crashed (its process is gone) are removed."""
        if not self.home.is_dir():
            return
        for p in self.home.iterdir():
            m = _TMP_CATALOG.match(p.name)
            if m and not pid_alive(int(m.group(1))):
                p.unlink(missing_ok=True)

    def _create_catalog(self) -> None:
        """Build the catalog under a temporary name and link it into place, so a concurrent
        opener sees either no catalog or a complete one (and two creators do not clash)."""
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            tmp = self.home / f".{_CATALOG}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            con = sqlite3.connect(tmp)
            try:
                with con:
                    con.executescript(_SCHEMA)
                    con.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (_FORMAT,))
                    con.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (str(_VERSION),))
            finally:
                con.close()
        except sqlite3.Error as exc:
            (self.home / f".{_CATALOG}.{os.getpid()}.tmp").unlink(missing_ok=True)
            raise StoreError(f"cannot create the store at {self.home}: " + describe_sqlite_error(exc, self._catalog)) from exc
        except OSError as exc:
            (self.home / f".{_CATALOG}.{os.getpid()}.tmp").unlink(missing_ok=True)
            raise StoreError(f"cannot create the store at {self.home}: {os_error_message(exc, self.home)}") from exc
        try:
            os.link(tmp, self._catalog)  # fails if another process created it first: keep theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)

    # -- connection -------------------------------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        read_only = getattr(self, "read_only", False)
        try:
            if read_only:  # no write access: never create -wal/-shm files or switch journal modes
                uri = f"file:{self._catalog.resolve()}?mode=ro&immutable=1"
                con = sqlite3.connect(uri, uri=True, timeout=30.0)
            else:
                con = sqlite3.connect(self._catalog, timeout=30.0)
        except sqlite3.Error as exc:
            raise StoreError(describe_sqlite_error(exc, self._catalog)) from exc
        try:
            if getattr(self, "_validated", False) and not read_only:  # never touch a foreign database's header
                con.execute("PRAGMA journal_mode=WAL")
            with con:
                yield con
        except sqlite3.DatabaseError as exc:
            raise StoreError(describe_sqlite_error(exc, self._catalog)) from exc
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
        if not self.read_only:  # stores made before chunk checksums: add the column (NULL = unchecked)
            self._validated = True
            with self._connect() as con:
                cols = {r[1] for r in con.execute("PRAGMA table_info(chunks)")}
                if "checksum" not in cols:
                    con.execute("ALTER TABLE chunks ADD COLUMN checksum TEXT")
                con.execute(_AGGREGATES)  # the aggregate cache, added to stores made before it

    # -- models ------------------------------------------------------------------------------
    def register_model(self, model_id: str, name: str, model_hash: str, info: dict[str, Any] | None = None) -> None:
        self._check_writable()
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
        self._check_writable()
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

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError(f"the store {self.home} is read-only (a read-only mount or another user's files): "
                             "reading works, writing does not; copy it, or give a writable --home")

    def remove_orphans(self, run_id: str) -> int:
        """Delete the temporary chunk files of writers that died (their process is gone); returns
        how many were removed."""
        base = self._run_dir(run_id)
        removed = 0
        if self.read_only or not base.is_dir():
            return 0
        for folder in base.iterdir():
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                m = _TMP_CHUNK.match(f.name)
                if m and not pid_alive(int(m.group(1))):
                    f.unlink(missing_ok=True)
                    removed += 1
        return removed

    def damaged_chunks(self, run_id: str) -> dict[int, str]:
        """Chunks whose files are missing, unreadable or differ from their recorded checksum:
        ``{chunk: what is wrong}``. Chunks recorded before checksums existed are only checked for
        presence."""
        base = self._run_dir(run_id)
        rec = self.find_run(run_id)
        if rec is None:
            return {}
        names = list(rec.layout.get("variables", {}))
        with self._connect() as con:
            rows = con.execute("SELECT chunk, checksum FROM chunks WHERE run_id = ?", (run_id,)).fetchall()
        bad: dict[int, str] = {}
        for chunk, checksum in rows:
            sums = json.loads(checksum) if checksum else {}
            for name in names:
                path = base / name / f"{chunk:06d}.npy"
                if not path.is_file():
                    bad[chunk] = f"{path} is missing"
                    break
                if name in sums and file_crc(path) != int(sums[name]):
                    bad[chunk] = f"{path} does not match its checksum"
                    break
        return bad

    def done_chunks(self, run_id: str) -> set[int]:
        """The chunks already written, for resuming: orphan temporary files of dead writers are
        removed and damaged or missing chunks are dropped from the catalog (so they are computed
        again)."""
        self.remove_orphans(run_id)
        damaged = self.damaged_chunks(run_id) if not self.read_only else {}
        if damaged:
            with self._connect() as con:
                con.executemany("DELETE FROM chunks WHERE run_id = ? AND chunk = ?", [(run_id, c) for c in damaged])
        with self._connect() as con:
            return {r[0] for r in con.execute("SELECT chunk FROM chunks WHERE run_id = ?", (run_id,))}

    def write_chunk(self, run_id: str, chunk: int, start: int, arrays: dict[str, np.ndarray]) -> None:
        """Write one chunk of samples [start, start + n) atomically, then record it with the
        CRC-32 of each file."""
        self._check_writable()
        n = {a.shape[0] for a in arrays.values()}
        if len(n) != 1:
            raise ValueError(f"all arrays of a chunk need the same number of samples, got {n}")
        stop = start + n.pop()
        base = self._run_dir(run_id)
        sums: dict[str, int] = {}
        for name, arr in arrays.items():
            folder = base / name
            final = folder / f"{chunk:06d}.npy"
            tmp = folder / f".{chunk:06d}.{os.getpid()}.tmp"
            try:
                folder.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as fh:
                    np.save(fh, np.ascontiguousarray(arr))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, final)
                fsync_dir(folder)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise StoreError(f"writing chunk {chunk} of run {run_id} failed: {os_error_message(exc, self.home)}") from exc
            sums[name] = file_crc(final)
        with self._connect() as con:
            con.execute("INSERT OR REPLACE INTO chunks (run_id, chunk, start, stop, checksum) VALUES (?, ?, ?, ?, ?)",
                        (run_id, chunk, start, stop, json.dumps(sums, sort_keys=True)))

    def finish_run(self, run_id: str, n_samples: int) -> None:
        self._check_writable()
        with self._connect() as con:
            con.execute(
                "UPDATE runs SET status = 'complete', n_samples = ?, finished = ? WHERE run_id = ?",
                (n_samples, time.time(), run_id),
            )

    @contextmanager
    def run_lock(self, run_id: str) -> Iterator[None]:
        """Hold the one-writer lock of a run (an ``flock`` on ``runs/<id>.lock``, released by the
        operating system if the process dies). A second writer of the same run waits here; when it
        gets the lock the run is complete (reuse it) or partly written (resume it)."""
        if self.read_only:
            yield
            return
        import fcntl
        import logging

        path = self.home / "runs" / f"{self._run_dir(run_id).name}.lock"
        held = (str(path.resolve()), threading.get_ident())
        if held in _HELD_LOCKS:  # waiting for our own lock would wait for ever
            raise RunBusyError(f"run {run_id} is already being written by this thread (the same run twice in one "
                               "sweep?)", run_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(path, "a+b")
        except OSError as exc:
            raise StoreError(f"cannot lock run {run_id}: {os_error_message(exc, self.home)}") from exc
        _HELD_LOCKS.add(held)
        try:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logging.getLogger(__name__).warning("run %s is being written by another process: waiting", run_id)
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            _write_pid(fh, str(os.getpid()))  # who writes the run (writer_alive reads it)
            yield
        finally:
            _HELD_LOCKS.discard(held)
            _write_pid(fh, "")
            fh.close()  # releases the lock

    def writer_alive(self, run_id: str) -> bool:
        """Whether a live process holds the run's writer lock (:meth:`run_lock`): its pid, recorded in
        the lock file while it holds the lock, names a running process. A run whose catalog status
        is ``running`` but whose writer is gone was interrupted (evaluating it again resumes it)."""
        path = self.home / "runs" / f"{self._run_dir(run_id).name}.lock"
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return False
        return text.isdigit() and pid_alive(int(text))

    def reopen_run(self, run_id: str) -> None:
        """Mark a finished run as running again (to recompute damaged chunks)."""
        self._check_writable()
        with self._connect() as con:
            con.execute("UPDATE runs SET status = 'running', finished = NULL WHERE run_id = ?", (run_id,))
            con.execute("DELETE FROM aggregates WHERE run_id = ?", (run_id,))

    def delete_run(self, run_id: str) -> None:
        self._check_writable()
        rec = self.get_run(run_id)
        with self._connect() as con:
            con.execute("DELETE FROM chunks WHERE run_id = ?", (rec.run_id,))
            con.execute("DELETE FROM aggregates WHERE run_id = ?", (rec.run_id,))
            con.execute("DELETE FROM runs WHERE run_id = ?", (rec.run_id,))
        shutil.rmtree(self._run_dir(rec.run_id), ignore_errors=True)

    # -- reading -----------------------------------------------------------------------------
    def load(self, run_id: str, *, allow_partial: bool = False, lazy: bool = True, verify: bool = False) -> OrbitResult:
        """A run's result. An unfinished run raises unless ``allow_partial`` (then the recorded
        chunks are returned, in sample order: a consistent prefix of a run being written).

        Args:
            lazy: variables are read on demand and by selection (memory-mapped chunks, see
                :mod:`orbitscope.results.lazy`); ``False`` reads everything into memory now.
            verify: check every chunk's CRC-32 now (one file at a time) instead of on first read.

        Every chunk file's header and size are checked when the run is opened (a missing,
        truncated or foreign file raises here); a lazy result verifies each chunk's checksum
        the first time it reads it, raising :class:`DamagedRunError` naming the chunk.
        """
        rec = self.get_run(run_id)
        if not rec.complete and not allow_partial:
            raise StoreError(
                f"run {rec.run_id} is not complete ({rec.chunks_done} chunks written, status {rec.status}); "
                "resume it by running the same evaluation again, or pass allow_partial=True"
            )
        chunks = self._chunk_rows(rec.run_id)
        base = self._run_dir(rec.run_id)
        sizes = [stop - start for _, start, stop, _ in chunks]
        bounds = ChunkBounds.from_sizes(sizes)
        values = stored_arrays(rec.layout, chunks, base, rec.run_id, bounds, verify=verify)
        contiguous = all(start == at for (_, start, _, _), at in zip(chunks, bounds.starts.tolist()))
        samples = np.arange(bounds.n) if contiguous else np.concatenate([np.arange(s, e) for _, s, e, _ in chunks])
        attrs = dict(rec.attrs, run_id=rec.run_id, run_name=rec.name, status=rec.status, n_samples=len(samples))
        source = ResultSource(rec.run_id, bounds, _version(rec, chunks), _RunCache(self, rec.run_id))
        result = result_from_arrays(rec.layout, {k: lazy_variable(v) for k, v in values.items()}, samples, attrs,
                                    source=source)
        return result if lazy else result.load()

    def _chunk_rows(self, run_id: str) -> list[tuple[int, int, int, str | None]]:
        with self._connect() as con:
            return con.execute(
                "SELECT chunk, start, stop, checksum FROM chunks WHERE run_id = ? ORDER BY start", (run_id,)
            ).fetchall()

    # -- cached aggregates ---------------------------------------------------------------------
    def cache_get(self, run_id: str, key: str) -> bytes | None:
        """A cached aggregate of a run (None when absent, or when the catalog predates the cache)."""
        try:
            with self._connect() as con:
                row = con.execute("SELECT value FROM aggregates WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
        except StoreError:
            return None
        return None if row is None else bytes(row[0])

    def cache_put(self, run_id: str, key: str, value: bytes) -> None:
        """Keep an aggregate of a run (a no-op on a read-only store); entries of earlier versions
        of the run's chunks are dropped."""
        if self.read_only:
            return
        version = key.split("|", 1)[0]
        try:
            with self._connect() as con:
                con.execute("DELETE FROM aggregates WHERE run_id = ? AND substr(key, 1, ?) != ?",
                            (run_id, len(version), version))
                con.execute("INSERT OR REPLACE INTO aggregates VALUES (?, ?, ?, ?)", (run_id, key, value, time.time()))
        except StoreError:  # a locked or full catalog: the aggregate is simply not cached
            return

    def clear_cache(self, run_id: str) -> None:
        if self.read_only:
            return
        with self._connect() as con:
            con.execute("DELETE FROM aggregates WHERE run_id = ?", (run_id,))


class _RunCache:
    """The cache interface a :class:`ResultSource` expects, for one run of one store."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id

    def get(self, key: str) -> bytes | None:
        return self.store.cache_get(self.run_id, key)

    def put(self, key: str, value: bytes) -> None:
        self.store.cache_put(self.run_id, key, value)


def _version(rec: RunRecord, chunks: list[tuple[int, int, int, str | None]]) -> str:
    """Changes whenever the run's chunks (or their checksums) do."""
    text = json.dumps([rec.status, rec.n_samples, chunks])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _looks_like_id(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text) and len(text) <= 64


def open_store(store: "Store | str | os.PathLike[str] | None") -> Store:
    """Accept a Store, a path, or None (the default home)."""
    return store if isinstance(store, Store) else Store(store)

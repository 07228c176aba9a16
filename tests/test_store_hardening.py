"""Store hardening (issue 11, store part): crash-safe creation, read-only stores, a full disk,
orphan temporary files, and per-chunk checksums. Each test reproduces the failure first."""

from __future__ import annotations

import errno
import importlib.util
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from orbitscope import Rotation, Store, StoreError, evaluate
from orbitscope.errors import DamagedRunError

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 5))


def _data(n: int = 30):
    rng = np.random.default_rng(0)
    return rng.random((n, 1, 8, 8), dtype=np.float32), rng.integers(0, 5, n)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _create_hanging(home: str) -> None:
    """(In a forked child.) Create a store at ``home``, hanging between building and linking its catalog."""
    os.link = lambda *a, **k: time.sleep(60)  # type: ignore[assignment]
    Store(home)


def test_a_creator_killed_mid_creation_leaves_a_usable_store(tmp_path):
    """A real SIGKILL while the catalog is being created: the next open works (before: every
    command said 'not an orbitscope store ... and is not empty'). The creator is a fork of this
    process (a spawned interpreter would spend seconds importing torch first); it only creates
    the store."""
    home = tmp_path / "s"
    proc = multiprocessing.get_context("fork").Process(target=_create_hanging, args=(str(home),))
    proc.start()
    try:
        deadline = time.time() + 60
        while not list(home.glob(".catalog.sqlite.*.tmp")) and time.time() < deadline:
            time.sleep(0.05)
        assert list(home.glob(".catalog.sqlite.*.tmp")), "the creator never reached the catalog step"
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    finally:
        if proc.is_alive():  # pragma: no cover - only on test failure
            proc.kill()
            proc.join()
    assert proc.exitcode == -signal.SIGKILL
    store = Store(home)  # the stale temporary catalog is recognised and removed
    assert not list(home.glob(".catalog.sqlite.*.tmp")) and (home / "catalog.sqlite").is_file()
    assert evaluate(_model(), _data(), Rotation([0]), store=store).result.n_samples == 30


def test_a_live_creators_temporary_catalog_does_not_block_other_openers(tmp_path):
    home = tmp_path / "s"
    home.mkdir()
    (home / f".catalog.sqlite.{os.getpid()}.tmp").write_bytes(b"")  # as if being created right now
    Store(home)
    stale = home / f".catalog.sqlite.{_dead_pid()}.tmp"
    stale.write_bytes(b"half")
    Store(home)  # an existing store: the stale file is left alone until a creation needs the check


def _read_only_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for f in files:
            os.chmod(os.path.join(root, f), 0o444)
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o555)
    os.chmod(dst, 0o555)
    return dst


def _read_only_mount(src: Path, dst: Path) -> bool:
    """A read-only bind mount of ``src`` at ``dst`` (as root, where the sandbox allows mounts)."""
    dst.mkdir()
    try:
        subprocess.run(["mount", "--bind", str(src), str(dst)], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    r = subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)], capture_output=True, timeout=30)
    if r.returncode != 0:
        subprocess.run(["umount", str(dst)], capture_output=True, timeout=30)
        return False
    return True


def test_a_read_only_store_can_be_read(tmp_path):
    """A read-only mount, or another user's files: listing and loading work, writing says what is
    wrong. Before: 'corrupt or not an orbitscope catalog: attempt to write a readonly database'."""
    home = tmp_path / "s"
    run = evaluate(_model(), _data(), Rotation([0, 90]), store=home, batch_size=10)
    ro = tmp_path / "ro"
    mounted = False
    if os.geteuid() == 0:
        mounted = _read_only_mount(home, ro)
        if not mounted:
            pytest.skip("as root, a read-only store needs a read-only mount, which this sandbox does not allow")
    else:
        _read_only_copy(home, ro)
    try:
        store = Store(ro)
        assert store.read_only
        assert [r.run_id for r in store.runs()] == [run.run_id]
        assert store.load(run.run_id).equals(run.result)
        with pytest.raises(StoreError, match="read-only .* writable --home"):
            store.delete_run(run.run_id)
        with pytest.raises(StoreError, match="read-only"):
            evaluate(_model(), _data(), Rotation([0, 45]), store=store, batch_size=10)
        assert not list(ro.glob("catalog.sqlite-*"))  # no -wal/-shm files were needed
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)], capture_output=True, timeout=30)


def test_a_full_disk_mid_run_is_a_one_line_error_and_the_run_resumes(tmp_path, monkeypatch):
    """ENOSPC from a chunk write (before: a raw OSError traceback)."""
    import orbitscope.results.store as st

    data = _data()
    real_save = st.np.save
    calls = {"n": 0}

    def save(fh, arr):
        calls["n"] += 1
        if calls["n"] > 10:  # the second chunk runs out of space
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(fh, arr)

    monkeypatch.setattr(st.np, "save", save)
    with pytest.raises(StoreError, match="disk holding .* is full .* run the same evaluation again"):
        evaluate(_model(), data, Rotation([0, 90]), store=tmp_path / "s", batch_size=10)
    monkeypatch.setattr(st.np, "save", real_save)
    store = Store(tmp_path / "s")
    rec = store.runs()[0]
    assert rec.chunks_done == 1  # the completed chunk is kept
    assert not list((tmp_path / "s").rglob("*.tmp"))  # the failed write left nothing behind
    run = evaluate(_model(), data, Rotation([0, 90]), store=store, batch_size=10)
    fresh = evaluate(_model(), data, Rotation([0, 90]), batch_size=10)
    np.testing.assert_array_equal(run.result.confidence.values, fresh.result.confidence.values)


def test_orphan_chunk_files_of_dead_writers_are_removed_on_resume(tmp_path):
    home = tmp_path / "s"
    run = evaluate(_model(), _data(), Rotation([0, 90]), store=home, batch_size=10)
    folder = home / "runs" / run.run_id / "confidence"
    orphan = folder / f".000001.{_dead_pid()}.tmp"
    orphan.write_bytes(b"partial")
    live = folder / f".000002.{os.getpid()}.tmp"
    live.write_bytes(b"being written")
    store = Store(home)
    store.done_chunks(run.run_id)
    assert not orphan.exists() and live.exists()


def test_a_bit_flip_is_caught_by_the_checksum_and_resume_recomputes_it(tmp_path):
    """A same-size bit flip used to load silently."""
    home = tmp_path / "s"
    data = _data()
    run = evaluate(_model(), data, Rotation([0, 90]), store=home, batch_size=10)
    f = home / "runs" / run.run_id / "confidence" / "000001.npy"
    raw = bytearray(f.read_bytes())
    raw[-3] ^= 0x10
    f.write_bytes(bytes(raw))
    store = Store(home)
    with pytest.raises(DamagedRunError, match=r"chunk 1 .*does not match its checksum"):
        store.load(run.run_id, verify=True)
    lazy = store.load(run.run_id)  # opening checks headers and sizes only; the first read checks the sum
    lazy.confidence.isel(sample=slice(0, 10)).values  # chunk 0 is intact
    with pytest.raises(DamagedRunError, match=r"chunk 1 .*does not match its checksum"):
        lazy.confidence.isel(sample=slice(10, 20)).values
    with pytest.raises(DamagedRunError, match=r"chunk 1 .*does not match its checksum"):
        store.load(run.run_id, lazy=False)
    assert set(store.damaged_chunks(run.run_id)) == {1}
    again = evaluate(_model(), data, Rotation([0, 90]), store=home, batch_size=10)  # recomputes chunk 1 only
    np.testing.assert_array_equal(again.result.confidence.values, run.result.confidence.values)
    assert store.damaged_chunks(run.run_id) == {}
    f.unlink()
    with pytest.raises(DamagedRunError, match="missing"):
        store.load(run.run_id)
    assert evaluate(_model(), data, Rotation([0, 90]), store=home, batch_size=10).result.equals(run.result)


def test_a_store_made_before_checksums_still_loads(tmp_path):
    fixture = Path(__file__).parent / "data" / "store_format2"
    home = tmp_path / "old"
    shutil.copytree(fixture, home)
    store = Store(home)
    for rec in store.runs():
        assert store.load(rec.run_id).n_samples == 20
        assert store.damaged_chunks(rec.run_id) == {}


SLOW_MODEL = """
import time

import numpy as np
import torch
from torch import nn


class Slow(nn.Module):
    def __init__(self, calls):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 5)
        self.calls = calls  # a plain attribute, not state: the same model in both processes

    def forward(self, x):
        with open(self.calls, "ab") as fh:
            fh.write(b".")
        time.sleep(0.2)
        return self.fc(x.flatten(1))


def data():
    rng = np.random.default_rng(0)
    return rng.random((30, 1, 8, 8), dtype=np.float32), rng.integers(0, 5, 30)
"""


@pytest.mark.slow  # a second process: seconds of importing torch
def test_two_processes_evaluating_the_same_run_compute_it_once(tmp_path):
    """Before: both computed every chunk, and a forced race reported 'UNIQUE constraint failed'.
    The two processes are a child and this one; the child imports first and both then start the
    same evaluation at once (a file says go), so that they race for the run."""
    home, calls, ready, go = tmp_path / "s", tmp_path / "calls", tmp_path / "ready", tmp_path / "go"
    (tmp_path / "slow_model.py").write_text(SLOW_MODEL)
    spec = importlib.util.spec_from_file_location("slow_model", tmp_path / "slow_model.py")
    slow = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(slow)  # the module the child imports, under the same name
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {SRC!r})
        sys.path.insert(0, {str(tmp_path)!r})
        import orbitscope as osc
        from slow_model import Slow, data

        open({str(ready)!r}, "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists({str(go)!r}):
            if time.monotonic() > deadline:
                sys.exit("never told to go")
            time.sleep(0.01)
        run = osc.evaluate(Slow({str(calls)!r}), data(), osc.Rotation([0, 90]), store={str(home)!r}, batch_size=10)
        print(run.run_id, run.reused, float(run.result.confidence.values.sum()))
    """)
    Store(home)  # created once, so both processes open the same catalog
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert proc.poll() is None, f"the child ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the child never got ready"
            time.sleep(0.01)
        go.touch()
        run = evaluate(slow.Slow(str(calls)), slow.data(), Rotation([0, 90]), store=home, batch_size=10)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:  # pragma: no cover - only on test failure
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-500:]
    lines = [out.split(), [run.run_id, str(run.reused), str(float(run.result.confidence.values.sum()))]]
    assert lines[0][0] == lines[1][0] and lines[0][2] == lines[1][2]  # same run, same numbers
    assert sorted(line[1] for line in lines) == ["False", "True"]  # one computed it, the other reused it
    assert len(calls.read_bytes()) == 3  # 3 chunks, one model call each, computed once in all


@pytest.mark.parametrize("message, expected", [
    ("database is locked", "locked by another process"),
    ("attempt to write a readonly database", "read-only"),
    ("database or disk is full", "disk holding .* is full"),
    ("disk I/O error", "I/O error"),
    ("file is not a database", "corrupt or not an orbitscope catalog"),
])
def test_sqlite_errors_are_named_as_what_they_are(tmp_path, message, expected):
    from orbitscope.results.store_errors import describe_sqlite_error

    import re
    assert re.search(expected, describe_sqlite_error(__import__("sqlite3").OperationalError(message), tmp_path / "c"))


def test_a_full_disk_during_catalog_creation_is_one_line(tmp_path, monkeypatch):
    import sqlite3

    real = sqlite3.connect

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sqlite3, "connect", full)
    with pytest.raises(StoreError, match="cannot create the store .* disk holding .* is full"):
        Store(tmp_path / "new")
    monkeypatch.setattr(sqlite3, "connect", real)
    assert not list((tmp_path / "new").glob(".catalog*"))  # nothing left behind
    Store(tmp_path / "new")

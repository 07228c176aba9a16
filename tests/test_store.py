"""Tests for the embedded results store (:class:`orbitscope.Store`) and resumable runs.

Includes a real ``SIGKILL`` of a writer process mid-run, concurrent readers while a separate
process writes, and corrupt / foreign store layouts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope import Classification, ModelError, Rotation, Store, StoreError, evaluate

VARIABLES = ("confidence", "prediction", "correct", "top1_confidence", "entropy")




# ---------------------------------------------------------------------------------------------
# a job script run in subprocesses (and imported here for the uninterrupted reference)
# ---------------------------------------------------------------------------------------------

JOB = '''
"""A deterministic evaluation of a slow-ish noisy model over 400 samples x 4 angles, in 20 chunks."""
import os
import sys
import time

import numpy as np
import torch
from torch import nn

N, CHUNK, ANGLES, SEED = 400, 20, [0, 45, 90, 180], 7


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        log = os.environ.get("CALLS_LOG")
        if log:
            with open(log, "a") as fh:
                fh.write(f"{len(x)}\\n")
        time.sleep(float(os.environ.get("SLEEP", "0")))
        h = torch.relu(self.conv(x)).mean(dim=(2, 3))
        # noise: resumed chunks only match if each chunk is seeded independently
        return self.fc(h) + 0.3 * torch.randn(len(x), 10)


def make():
    model = Slow()
    rng = np.random.default_rng(0)
    images = rng.random((N, 1, 10, 10), dtype=np.float32)
    labels = rng.integers(0, 10, N)
    return model, (images, labels)


def run(home):
    import orbitscope as osc

    model, data = make()
    # one model call per chunk: CHUNK samples x 4 angles
    return osc.evaluate(model, data, osc.Rotation(ANGLES), store=home, batch_size=CHUNK,
                        forward_batch=CHUNK * len(ANGLES), seed=SEED)


if __name__ == "__main__":
    go = os.environ.get("GO_FILE")
    if go:  # started ahead, so that its imports overlap the run before it: it evaluates once told to
        import orbitscope  # noqa: F401 - the slow part of starting

        deadline = time.monotonic() + 600
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                sys.exit(f"{go} never appeared")
            time.sleep(0.01)
    run(sys.argv[1])
'''

N, CHUNK = 400, 20
N_CHUNKS = N // CHUNK


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The job script on disk and imported as a module."""
    path = tmp_path_factory.mktemp("job") / "orbit_job.py"
    path.write_text(textwrap.dedent(JOB))
    spec = importlib.util.spec_from_file_location("orbit_job_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return path, mod


def start_job(path: Path, home: Path, *, sleep: float, calls_log: Path, go: Path | None = None) -> subprocess.Popen:
    """The job in a new process; with ``go``, it imports and then waits for that file to appear."""
    env = dict(os.environ, SLEEP=str(sleep), CALLS_LOG=str(calls_log))  # OMP_NUM_THREADS as here (conftest)
    if go is not None:
        env["GO_FILE"] = str(go)
    return subprocess.Popen([sys.executable, str(path), str(home)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def count_calls(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def assert_same(a: osc.OrbitResult, b: osc.OrbitResult) -> None:
    np.testing.assert_array_equal(a.data.sample.values, b.data.sample.values)
    for v in VARIABLES:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


# ---------------------------------------------------------------------------------------------
# kill -9 and resume; concurrent readers
# ---------------------------------------------------------------------------------------------


class Reader:
    """Repeatedly opens the store afresh and, whenever the writer has committed more chunks,
    loads the (only) run with ``allow_partial``, keeping what it saw; every load must succeed."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.seen: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self.last = -1

    def read(self) -> int:
        store = Store(self.home, create=False)
        runs = store.runs()
        if not runs:
            return 0
        done = runs[0].chunks_done
        if done != self.last:  # only load when something changed (keeps the CPU for the writer)
            res = store.load(runs[0].run_id, allow_partial=True)
            self.seen.append((res.data.sample.values.copy(), {v: res[v].values.copy() for v in VARIABLES}))
            self.last = done
        return done

    def check_prefixes_of(self, final: osc.OrbitResult) -> list[int]:
        sizes = []
        for samples, values in self.seen:
            assert len(samples) % CHUNK == 0
            np.testing.assert_array_equal(samples, np.arange(len(samples)))  # a contiguous prefix
            for v in VARIABLES:
                np.testing.assert_array_equal(values[v], final[v].values[: len(samples)], err_msg=v)
            sizes.append(len(samples))
        return sorted(set(sizes))


@pytest.mark.slow  # two writer processes (seconds of importing torch each) and deliberate slowness
def test_sigkill_mid_run_resume_and_concurrent_readers(job, tmp_path):
    """Kill -9 a writer mid-run, resume it in a new process, and compare with an uninterrupted
    run; meanwhile this process reads the store concurrently with both writers."""
    path, mod = job
    home = tmp_path / "killed"
    Store(home)  # create the catalog up front so readers never race its creation
    reader = Reader(home)
    log1, log2 = tmp_path / "calls1.txt", tmp_path / "calls2.txt"

    # 1. start a slow writer, and the writer that will resume it (it imports meanwhile, then waits
    #    for `go`); kill the first with SIGKILL once at least one chunk is committed
    go = tmp_path / "go"
    proc = start_job(path, home, sleep=0.15, calls_log=log1)
    resumer = start_job(path, home, sleep=0.05, calls_log=log2, go=go)
    try:
        deadline = time.monotonic() + 120
        while reader.read() < 1:
            assert proc.poll() is None, f"job ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "job never committed a chunk"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        store = Store(home, create=False)
        (rec,) = store.runs()
        done = rec.chunks_done
        assert 1 <= done < N_CHUNKS and not rec.complete
        assert count_calls(log1) >= done  # the killed process did compute what was committed
        with pytest.raises(StoreError, match="not complete"):
            store.load(rec.run_id)
        partial = store.load(rec.run_id, allow_partial=True)
        np.testing.assert_array_equal(partial.data.sample.values, np.arange(done * CHUNK))

        # 2. resume in a fresh process (computing only the missing chunks) while reading concurrently
        assert resumer.poll() is None, f"the resuming job ended before it was told to go: {resumer.communicate()}"
        go.touch()
        deadline = time.monotonic() + 180
        while resumer.poll() is None:
            assert time.monotonic() < deadline, "resumed writer did not finish"
            reader.read()  # must never fail
            time.sleep(0.01)
    finally:
        for p in (proc, resumer):
            if p.poll() is None:  # pragma: no cover - only on test failure
                p.kill()
                p.wait()
    _, stderr = resumer.communicate()
    assert resumer.returncode == 0, stderr
    assert count_calls(log2) == N_CHUNKS - done
    resumed = Store(home, create=False).load(rec.run_id)
    assert resumed.attrs["status"] == "complete" and resumed.n_samples == N

    # 3. an uninterrupted run of the same job (in this process, no sleep) in a second store
    reference = mod.run(tmp_path / "clean")
    assert reference.run_id == rec.run_id  # same identity: same model, data, orbit, chunking
    assert_same(resumed, reference.result)
    for v in VARIABLES:  # the partial load after the kill was an exact prefix
        np.testing.assert_array_equal(partial[v].values, reference.result[v].values[: done * CHUNK])

    # 4. every concurrent read saw a contiguous prefix equal to the final values
    sizes = reader.check_prefixes_of(reference.result)
    partial_sizes = [s for s in sizes if done * CHUNK < s < N]
    expected = min(3, N_CHUNKS - done - 1)  # the resumed writer commits N_CHUNKS - done chunks
    assert len(partial_sizes) >= expected, f"the reader did not overlap the writer enough: saw sizes {sizes}"

    # 5. running the job once more reuses the complete run without calling the model
    log3 = tmp_path / "calls3.txt"
    os.environ["CALLS_LOG"] = str(log3)
    try:
        again = mod.run(home)
    finally:
        del os.environ["CALLS_LOG"]
    assert again.reused and count_calls(log3) == 0
    assert_same(again.result, reference.result)


# ---------------------------------------------------------------------------------------------
# in-process resumption, reuse, identity
# ---------------------------------------------------------------------------------------------


class Counting(nn.Module):
    """A small linear classifier that counts its calls and can be told to fail after some.
    The counters are plain attributes, not state: every instance has the same weights/hash."""

    def __init__(self, fail_after: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 5)
        self.calls = 0
        self.fail_after = fail_after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("simulated crash")
        self.calls += 1
        return self.fc(x.flatten(1)) + 0.2 * torch.randn(len(x), 5)


def small_data(n: int = 50, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 8, 8), dtype=np.float32), rng.integers(0, 5, n)


def test_resume_after_crash_computes_only_missing_chunks(tmp_path):
    data = small_data()
    orbit = Rotation([0, 30, 90])
    kw = dict(batch_size=10, forward_batch=30, seed=1)  # one model call per chunk
    with pytest.raises(ModelError, match="simulated crash"):
        evaluate(Counting(fail_after=3), data, orbit, store=tmp_path / "s", **kw)
    store = Store(tmp_path / "s", create=False)
    (rec,) = store.runs()
    assert rec.chunks_done == 3 and rec.status != "complete"
    model = Counting()
    run = evaluate(model, data, orbit, store=store, **kw)
    assert model.calls == 2 and not run.reused
    fresh = evaluate(Counting(), data, orbit, **kw)  # in memory, uninterrupted
    assert_same(run.result, fresh.result)
    # a complete run is reused without calling the model; resume=False recomputes it
    again_model = Counting()
    again = evaluate(again_model, data, orbit, store=store, **kw)
    assert again.reused and again_model.calls == 0 and again.run_id == run.run_id
    redo_model = Counting()
    redo = evaluate(redo_model, data, orbit, store=store, resume=False, **kw)
    assert redo_model.calls == 5 and not redo.reused
    assert_same(redo.result, fresh.result)
    assert len(store.runs()) == 1


def test_run_identity_changes_with_what_determines_the_numbers(tmp_path):
    data = small_data(20)
    orbit = Rotation([0, 90])
    store = Store(tmp_path / "s")
    base = evaluate(Counting(), data, orbit, store=store, batch_size=10)
    other_weights = Counting()
    with torch.no_grad():
        other_weights.fc.weight[0, 0] += 1.0
    variants = {
        "weights": evaluate(other_weights, data, orbit, store=store, batch_size=10),
        "data": evaluate(Counting(), small_data(20, seed=1), orbit, store=store, batch_size=10),
        "orbit": evaluate(Counting(), data, Rotation([0, 91]), store=store, batch_size=10),
        "chunking": evaluate(Counting(), data, orbit, store=store, batch_size=5),
        "seed": evaluate(Counting(), data, orbit, store=store, batch_size=10, seed=9),
        "normalize": evaluate(Counting(), data, orbit, store=store, batch_size=10, normalize=([0.5], [0.5])),
        "interpolation": evaluate(Counting(), data, orbit, store=store, batch_size=10, interpolation="nearest"),
        "task": evaluate(Counting(), data, orbit, Classification(store_probabilities=True), store=store, batch_size=10),
    }
    for what, run in variants.items():
        assert not run.reused and run.run_id != base.run_id, what
    assert len({r.run_id for r in variants.values()}) == len(variants)
    assert len(store.runs()) == 1 + len(variants)


def test_same_weights_different_architecture_is_not_reused(tmp_path):
    """Two models with identical state dicts but different computations (ReLU vs Tanh, which
    have no parameters) must not share a stored run."""
    data = small_data(20)
    orbit = Rotation([0, 90])

    def net(act: nn.Module) -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), act, nn.Linear(8, 5))

    relu, tanh = net(nn.ReLU()), net(nn.Tanh())
    assert relu.state_dict().keys() == tanh.state_dict().keys()
    store = Store(tmp_path / "s")
    a = evaluate(relu, data, orbit, store=store)
    b = evaluate(tanh, data, orbit, store=store)
    expected = evaluate(tanh, data, orbit)  # in memory
    assert not b.reused
    assert_same(b.result, expected.result)
    assert not np.array_equal(a.result.confidence.values, b.result.confidence.values)


# ---------------------------------------------------------------------------------------------
# provenance
# ---------------------------------------------------------------------------------------------


def independent_state_hash(model: nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode() + v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_provenance_attributes(tmp_path):
    data = osc.ArrayDataset(*small_data(20), data_id="tiny-test-set")
    orbit = Rotation([0, 45, 90])
    model = Counting()
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    run = evaluate(model, data, orbit, store=tmp_path / "s", name="my-run", seed=5)
    mem = evaluate(model, data, orbit, seed=5)
    t1 = dt.datetime.now(dt.timezone.utc)
    for res in (run.result, Store(tmp_path / "s").load(run.run_id), mem.result):
        a = res.attrs
        assert a["data_id"] == "tiny-test-set"
        assert json.loads(a["orbit"]) == {"kind": "rotation", "angle": [0.0, 45.0, 90.0]}
        assert osc.orbit_from_spec(a["orbit"]) == orbit
        assert json.loads(a["task"]) == {"kind": "classification", "output": "auto", "store_probabilities": False}
        assert a["seed"] == 5 and a["run_id"] == run.run_id
        assert a["identity_index"] == 0
        versions = json.loads(a["versions"])
        assert versions["torch"] == torch.__version__ and versions["numpy"] == np.__version__
        assert versions["orbitscope"] == osc.__version__ and "python" in versions
        created = dt.datetime.strptime(a["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
        assert t0 - dt.timedelta(seconds=1) <= created <= t1
        assert a["model_class"].endswith("Counting")
        assert len(a["model_hash"]) == 16 and a["model_hash"] in a["model_id"]
        assert a["status"] == "complete" and a["n_samples"] == 20
    assert run.result.attrs["run_name"] == "my-run"
    # the model hash follows the weights, not the object
    twin, changed = Counting(), Counting()
    with torch.no_grad():
        changed.fc.bias[0] += 1e-3
    assert independent_state_hash(twin) == independent_state_hash(model) != independent_state_hash(changed)
    h = lambda m: evaluate(m, data, Rotation([0])).result.attrs["model_hash"]  # noqa: E731
    assert h(twin) == h(model) != h(changed)
    # the model is registered in the catalog
    models = Store(tmp_path / "s").models()
    assert [m["hash"] for m in models] == [run.result.attrs["model_hash"]]


# ---------------------------------------------------------------------------------------------
# lookup, homes
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def two_runs(tmp_path):
    store = Store(tmp_path / "s")
    data = small_data(20)
    a = evaluate(Counting(), data, Rotation([0, 90]), store=store, name="alpha", batch_size=10)
    b = evaluate(Counting(), data, Rotation([0, 45]), store=store, name="beta", batch_size=10)
    return store, a, b


def test_lookup_by_id_prefix_and_name(two_runs):
    store, a, b = two_runs
    assert store.get_run(a.run_id).run_id == a.run_id
    prefix = next(a.run_id[:k] for k in range(1, 17) if not b.run_id.startswith(a.run_id[:k]))
    assert store.get_run(prefix).run_id == a.run_id
    assert store.get_run("beta").run_id == b.run_id
    assert_same(store.load("alpha"), a.result)
    assert_same(store.load(b.run_id[:8]), b.result)
    common = os.path.commonprefix([a.run_id, b.run_id])
    if common:  # an ambiguous prefix names both candidates
        with pytest.raises(StoreError, match="matches 2 runs"):
            store.get_run(common)
    with pytest.raises(StoreError, match="`orbitscope runs list`"):
        store.load("deadbeef0000")
    with pytest.raises(StoreError, match="`orbitscope runs list`"):
        store.load("no-such-run-name")


@pytest.mark.parametrize("bad", ["", "../x", "..", "a/b", "x" * 65, "_", "%", "a_"])
def test_malformed_or_wildcard_run_ids_are_rejected(two_runs, bad):
    """Ids that are empty, path-like, over-long or SQL LIKE wildcards never select a run."""
    store, a, b = two_runs
    store.delete_run(b.run_id)  # a single run left: a wildcard would match it "uniquely"
    with pytest.raises(StoreError):
        store.load(bad)
    with pytest.raises(StoreError):
        store.delete_run(bad)
    assert [r.run_id for r in store.runs()] == [a.run_id]  # nothing was deleted


def test_store_home_from_environment(tmp_path, monkeypatch):
    home = tmp_path / "from-env"
    monkeypatch.setenv("ORBITSCOPE_HOME", str(home))
    store = Store()
    assert store.home == home and (home / "catalog.sqlite").is_file()
    run = evaluate(Counting(), small_data(10), Rotation([0]), store=Store())
    assert Store(home, create=False).get_run(run.run_id).complete
    monkeypatch.delenv("ORBITSCOPE_HOME")
    monkeypatch.chdir(tmp_path)
    assert Store().home == Path("orbitscope-runs") and (tmp_path / "orbitscope-runs" / "catalog.sqlite").is_file()


def test_store_without_create_does_not_create(tmp_path):
    with pytest.raises(StoreError, match="no orbitscope store"):
        Store(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()


# ---------------------------------------------------------------------------------------------
# corrupt and foreign stores
# ---------------------------------------------------------------------------------------------


def test_directory_with_unrelated_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("my thesis")
    with pytest.raises(StoreError, match="not an orbitscope store"):
        Store(tmp_path)
    assert not (tmp_path / "catalog.sqlite").exists()
    assert (tmp_path / "notes.txt").read_text() == "my thesis"


def test_path_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        Store(f)


def test_catalog_that_is_not_sqlite_is_refused(tmp_path):
    (tmp_path / "catalog.sqlite").write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(StoreError, match="corrupt or not an orbitscope catalog"):
        Store(tmp_path)


def test_foreign_sqlite_is_refused_and_left_untouched(tmp_path):
    cat = tmp_path / "catalog.sqlite"
    con = sqlite3.connect(cat)
    con.execute("CREATE TABLE users (name TEXT)")
    con.execute("INSERT INTO users VALUES ('ada')")
    con.commit()
    con.close()
    before = cat.read_bytes()
    with pytest.raises(StoreError):
        Store(tmp_path)
    # a foreign database must not be modified (e.g. switched to WAL journaling)
    assert cat.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.sqlite"]


def test_sqlite_with_foreign_meta_or_newer_version_is_refused(tmp_path):
    for fmt, version, match in [("something-else", "1", "not an orbitscope catalog"),
                                ("orbitscope-store", "99", "upgrade orbitscope")]:
        home = tmp_path / fmt
        home.mkdir()
        con = sqlite3.connect(home / "catalog.sqlite")
        con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        con.executemany("INSERT INTO meta VALUES (?, ?)", [("format", fmt), ("version", version)])
        con.commit()
        con.close()
        with pytest.raises(StoreError, match=match):
            Store(home)


@pytest.fixture()
def stored_run(tmp_path):
    store = Store(tmp_path / "s")
    run = evaluate(Counting(), small_data(30), Rotation([0, 90]), store=store, batch_size=10)
    return store, run


def chunk_file(store: Store, run_id: str, variable: str, chunk: int) -> Path:
    return store.home / "runs" / run_id / variable / f"{chunk:06d}.npy"


def test_deleted_chunk_file_is_store_error_naming_it(stored_run):
    store, run = stored_run
    f = chunk_file(store, run.run_id, "confidence", 1)
    assert f.is_file()
    f.unlink()
    with pytest.raises(StoreError, match="missing") as info:
        store.load(run.run_id)
    assert str(f) in str(info.value)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "wrong shape"])
def test_damaged_chunk_file_is_store_error_naming_it(stored_run, damage):
    store, run = stored_run
    f = chunk_file(store, run.run_id, "prediction", 2)
    if damage == "truncate":
        f.write_bytes(f.read_bytes()[:-7])
    elif damage == "garbage":
        f.write_bytes(b"not a npy file at all" * 10)
    else:
        np.save(f, np.zeros((3, 2), np.int32))
    with pytest.raises(StoreError, match="corrupt|damaged") as info:  # the checksum catches most first
        store.load(run.run_id)
    assert str(f) in str(info.value)


def test_store_roundtrip_equals_in_memory(stored_run):
    store, run = stored_run
    mem = evaluate(Counting(), small_data(30), Rotation([0, 90]), batch_size=10)
    loaded = Store(store.home, create=False).load(run.run_id)
    assert_same(loaded, mem.result)
    for v in VARIABLES:
        assert loaded[v].dtype == mem.result[v].dtype
    # the arrays are plain .npy files, readable with numpy alone
    f = chunk_file(store, run.run_id, "confidence", 0)
    np.testing.assert_array_equal(np.load(f), mem.result.confidence.values[:10])

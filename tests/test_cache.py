"""The compile cache (akgpy/tune/cache.py, docs/cache.md): hits across processes without
compiling or importing tvm, concurrent writers, kill -9, corrupt databases, tampered artifacts,
refused directories, shipped records. Every test opts in with its own temporary directory."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import CacheWarning
from akgpy.testing import random_inputs
from akgpy.tune import cache as cache_mod
from akgpy.tune import schedules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("AKGPY_CACHE", str(d))
    monkeypatch.setenv("AKGPY_CACHE_KEY", str(tmp_path / "keys" / "cache.key"))
    cache_mod.reset_stats()
    return d


def _graph(name="cached", scale=2.0):
    b = GraphBuilder(name)
    x, y = b.input("x", (32, 64)), b.input("y", (32, 64))
    b.output((x * y).sum(axis=1))
    b.output(x * scale + y)
    return b.build()


def _record(i: int, size: int = 4096) -> cache_mod.Record:
    key = cache_mod.CacheKey(f"g{i:06d}", "t", "llvm-so/1", "poly", "s", "{}", "{}", "default")
    return cache_mod.Record(key, config={"i": i}, best_s=1e-3 * i, default_s=2e-3,
                            artifact=os.urandom(size), manifest={"i": i})


_CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    import akgpy
    from akgpy.tune import cache
    from tests.test_cache import _graph
    prog = akgpy.fuse(_graph())
    import numpy as np
    out = prog(np.ones((32, 64), np.float32), np.full((32, 64), 2, np.float32))
    print(json.dumps({{"stats": cache.stats(), "tvm": "tvm" in sys.modules, "sources": cache.source_hash(),
                      "sum": float(out[0].sum() + out[1].sum())}}))
""")


def _child(env) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD.format(repo=REPO)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_hit_in_a_second_process_skips_compile_and_tvm(cache_dir):
    env = dict(os.environ)
    for _ in range(3):  # a source edit between the two processes (a shared tree) changes the key: retry
        first, second = _child(env), _child(env)
        if first["sources"] == second["sources"]:
            break
    assert first["stats"] == {"hits": 0, "misses": 1, "compiles": 1, "stores": 1}
    assert second["stats"] == {"hits": 1, "misses": 0, "compiles": 0, "stores": 0}
    assert not second["tvm"]
    assert second["sum"] == first["sum"] == 32 * 64 * 2 + 32 * 64 * 4


_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    from akgpy.tune.cache import Cache
    from tests.test_cache import _record
    c = Cache({dir!r}, key_file={key!r})
    for i in range({start}, {stop}):
        c.put(_record(i, {size}))
        print(i, flush=True)
""")


def _writer(cache_dir, key, start, stop, size=4096):
    return subprocess.Popen([sys.executable, "-c", _WRITER.format(repo=REPO, dir=str(cache_dir), key=key, start=start,
                                                                  stop=stop, size=size)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_eight_concurrent_writers_lose_no_record(cache_dir):
    key = os.environ["AKGPY_CACHE_KEY"]
    procs = [_writer(cache_dir, key, 100 * w, 100 * w + 25) for w in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    c = cache_mod.Cache(cache_dir, key_file=key)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        got = {r.config["i"] for r in c.records()}
    assert got == {100 * w + i for w in range(8) for i in range(25)}
    assert c.verify() == []


def test_kill_9_mid_write_loses_nothing_committed(cache_dir):
    key = os.environ["AKGPY_CACHE_KEY"]
    p = _writer(cache_dir, key, 0, 100_000, size=1 << 20)  # 1 MiB artifacts: a write takes a while
    committed = []
    deadline = time.time() + 120
    while len(committed) < 5 and time.time() < deadline:
        committed.append(int(p.stdout.readline()))
    time.sleep(0.05)  # into the next transaction
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert len(committed) == 5
    c = cache_mod.Cache(cache_dir, key_file=key)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        got = {r.config["i"] for r in c.records()}
        assert c._db().execute("PRAGMA quick_check").fetchone()[0] == "ok"
    assert set(committed) <= got
    assert not list(cache_dir.glob("*.corrupt-*"))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_database_is_moved_aside_and_rebuilt(cache_dir, damage):
    key = os.environ["AKGPY_CACHE_KEY"]
    c = cache_mod.Cache(cache_dir, key_file=key)
    for i in range(20):
        c.put(_record(i, 8192))
    c.close()
    db = cache_dir / cache_mod.DB_NAME
    with sqlite3.connect(db) as conn:  # fold the WAL into the file, so the damage is to the data
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = db.read_bytes()
    db.write_bytes(b"not a database" * 100 if damage == "garbage" else raw[:len(raw) // 3])
    c = cache_mod.Cache(cache_dir, key_file=key)
    with pytest.warns(CacheWarning, match="corrupt"):
        c.records()
    moved = [p for p in cache_dir.glob("cache.sqlite3.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(moved) == 1
    c.put(_record(7))
    assert [r.config["i"] for r in c.records()] == [7]


def test_tampered_artifact_is_refused_and_rebuilt(cache_dir):
    g = _graph("tampered")
    args = random_inputs(g, seed=0)
    want = akgpy.fuse(g, cache=False)(*args)
    akgpy.fuse(g)
    assert cache_mod.stats()["stores"] == 1
    c = cache_mod.default_cache()
    with sqlite3.connect(c.path) as conn:
        blob = bytearray(conn.execute("SELECT artifact FROM records").fetchone()[0])
        blob[len(blob) // 2] ^= 0x40
        conn.execute("UPDATE records SET artifact = ?", (bytes(blob),))
    with pytest.warns(CacheWarning, match="HMAC"):
        prog = akgpy.fuse(g)
    assert cache_mod.stats() == {"hits": 0, "misses": 2, "compiles": 2, "stores": 2}
    assert all(np.array_equal(a, b) for a, b in zip(want, prog(*args)))
    akgpy.fuse(g)  # the rebuilt record is good
    assert cache_mod.stats()["hits"] == 1


def test_record_under_another_users_key_is_refused(cache_dir, tmp_path):
    c = cache_mod.Cache(cache_dir, key_file=os.environ["AKGPY_CACHE_KEY"])
    c.put(_record(1))
    other = cache_mod.Cache(cache_dir, key_file=tmp_path / "other.key")
    with pytest.warns(CacheWarning, match="HMAC"):
        assert other.get(_record(1).key) is None


def test_directory_writable_by_others_is_refused(cache_dir):
    cache_dir.mkdir(parents=True)
    os.chmod(cache_dir, 0o777)
    with pytest.warns(CacheWarning, match="writable by other users"):
        assert cache_mod.default_cache() is None
    g = _graph("refused")
    prog = akgpy.fuse(g)  # compiles, uncached
    assert prog(*random_inputs(g, seed=0))
    assert not (cache_dir / cache_mod.DB_NAME).exists()


def test_key_file_inside_the_cache_is_refused(tmp_path):
    with pytest.warns(CacheWarning, match="inside the cache"):
        assert not cache_mod.Cache(tmp_path / "c", key_file=tmp_path / "c" / "k").usable


def test_shipped_records_bad_ones_ignored_good_one_used(cache_dir, tmp_path, monkeypatch):
    from akgpy.schedule.config import ScheduleConfig
    from akgpy.target import resolve_target
    g = _graph("shipped")
    target = resolve_target(None)
    gh = akgpy.structural_hash(g)
    shipped = tmp_path / "schedules"
    monkeypatch.setattr(schedules, "SHIPPED_DIR", shipped)
    shipped.mkdir()
    (shipped / schedules.file_name(g.name, gh, target.fingerprint)).write_text("{not json")
    with pytest.warns(CacheWarning, match="does not parse"):
        assert schedules.lookup(gh, target) is None
    cfg = ScheduleConfig().replace(collapse_dims=False)
    rec = schedules.ShippedRecord(gh, g.name, target.fingerprint, target.cpu, cfg.to_json(), 1e-4, 2e-4,
                                  cache_mod.machine())
    path = schedules.write(shipped, rec)
    assert schedules.read(path).config == cfg.to_json()
    bad = dict(json.loads(path.read_text()), config={"no_such_knob": 1})
    (shipped / "other-0000000000000000-000000000000.json").write_text(json.dumps(bad))
    with pytest.warns(CacheWarning):
        assert len(schedules.records(shipped)) == 1
    akgpy.fuse(g)
    stored = cache_mod.default_cache().records()
    assert len(stored) == 1 and stored[0].config == cfg.to_json() and stored[0].best_s == 1e-4


def test_identical_groups_of_a_model_compile_once(cache_dir):
    b = GraphBuilder("twins", model=True)
    x, y = b.input("x", (16, 32)), b.input("y", (16, 32))
    b.output(b.exp(x) + b.exp(y))
    g = b.build()
    prog = akgpy.fuse(g, fuse=False)  # one group per op: exp, exp, add
    assert cache_mod.stats() == {"hits": 1, "misses": 2, "compiles": 2, "stores": 2}
    args = random_inputs(g, seed=0)
    want = np.exp(args[0].astype(np.float64)) + np.exp(args[1].astype(np.float64))
    np.testing.assert_allclose(prog(*args)[0], want, rtol=1e-5)


def test_cache_off_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("AKGPY_CACHE", "off")
    cache_mod.reset_stats()
    akgpy.fuse(_graph("off"))
    assert cache_mod.default_cache() is None and cache_mod.stats()["stores"] == 0

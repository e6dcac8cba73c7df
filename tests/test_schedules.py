"""Shipped schedule records (schedules/, akgpy/tune/schedules.py): every record parses, names a
real graph (the bench set in corpus/ or a kernels/ pattern), gives a valid ScheduleConfig whose
compile matches the reference; the lookup policy; bad records ignored with a warning."""
import dataclasses
import json
from pathlib import Path

import pytest

from akgpy.errors import AkgpyError, CacheWarning
from akgpy.tune import schedules
from akgpy.tune.schedules import SHIPPED_DIR, ShippedRecord, lookup, portable_key, read, target_facts

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(SHIPPED_DIR.glob("*.json"))


def _known_graphs() -> dict:
    """structural hash -> graph, for the bench set and the kernels library (both sizes)."""
    from akgpy import load_composite
    out = {}
    for line in (ROOT / "bench" / "bench_set.txt").read_text().splitlines():
        rel = line.partition("#")[0].strip()
        if rel:
            g = load_composite(ROOT / "corpus" / rel)
            out[g.hash()] = g
    from kernels import PATTERNS
    for build in PATTERNS.values():
        for sizes in (build.small, {}):  # the small set and the realistic defaults
            g = build(**sizes)
            out[g.hash()] = g
    return out


@pytest.fixture(scope="module")
def known():
    return _known_graphs()


def test_shipped_records_exist():
    assert SHIPPED, "schedules/ ships no record"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name[:40] for p in SHIPPED])
def test_shipped_record_parses_names_a_graph_and_compiles_correctly(path, known):
    from akgpy.pipeline import compile_graph
    from akgpy.schedule.config import ScheduleConfig
    from akgpy.testing import check_program
    rec = read(path)
    assert path.name == schedules.file_name(rec.graph_name, rec.graph, rec.target)
    assert rec.machine.get("cpu") and rec.machine.get("date"), "a record names the machine that measured it"
    assert rec.target_facts is not None and rec.target_facts["cpu"] == rec.target_cpu
    assert rec.graph in known, f"{path.name}: graph {rec.graph[:16]} is in neither the bench set nor kernels/"
    g = known[rec.graph]
    cfg = ScheduleConfig.from_json(rec.config)
    assert cfg.to_json() == rec.config
    prog = compile_graph(g, config=cfg, cache=False)
    assert check_program(g, prog) == []


def _record(tmp_path, target, *, facts=None, fingerprint=None, graph="ab" * 32, name="g"):
    from akgpy.schedule.config import ScheduleConfig
    rec = ShippedRecord(graph, name, fingerprint or target.fingerprint, target.cpu, ScheduleConfig().to_json(),
                        1e-3, 2e-3, {"cpu": "test", "host": "x", "date": "2025-01-01T00:00:00Z"},
                        target_facts=facts if facts is not None else target_facts(target))
    return schedules.write(tmp_path, rec)


def test_lookup_prefers_exact_then_same_threads_then_any(tmp_path):
    from akgpy.target import resolve_target
    host = resolve_target(None)
    other_threads = dataclasses.replace(host, threads=host.threads + 7)
    other_caches = dataclasses.replace(host, llc_bytes=host.llc_bytes * 2, threads=host.threads + 3)
    p_threads = _record(tmp_path, other_threads)
    assert lookup("ab" * 32, host, tmp_path).path == p_threads  # another thread count still applies
    p_caches = _record(tmp_path, dataclasses.replace(host, llc_bytes=host.llc_bytes * 2))
    assert lookup("ab" * 32, host, tmp_path).path == p_caches  # same threads beats other threads
    p_exact = _record(tmp_path, host)
    assert lookup("ab" * 32, host, tmp_path).path == p_exact  # exact fingerprint first
    assert lookup("cd" * 32, host, tmp_path) is None
    assert {p_threads, p_caches, p_exact} <= set(tmp_path.glob("*.json"))
    assert portable_key(target_facts(other_caches)) == portable_key(target_facts(host))


def test_lookup_refuses_another_cpu_or_vector_width(tmp_path):
    from akgpy.target import resolve_target
    host = resolve_target(None)
    narrow = dataclasses.replace(host, vector_bytes=16 if host.vector_bytes != 16 else 32)
    _record(tmp_path, narrow)
    other_cpu = dataclasses.replace(host, cpu=host.cpu + "-x")
    _record(tmp_path, other_cpu)
    assert lookup("ab" * 32, host, tmp_path) is None
    # a record without target facts (older format) applies only on an exact fingerprint
    path = _record(tmp_path, dataclasses.replace(host, threads=host.threads + 1))
    d = json.loads(path.read_text())
    del d["target_facts"]
    path.write_text(json.dumps(d))
    assert lookup("ab" * 32, host, tmp_path) is None


def test_bad_records_are_ignored_with_a_warning(tmp_path):
    from akgpy.target import resolve_target
    host = resolve_target(None)
    good = _record(tmp_path, dataclasses.replace(host, threads=host.threads + 1))
    broken = tmp_path / schedules.file_name("g", "ab" * 32, "0" * 12)
    broken.write_text("{not json")
    bad_cfg = _record(tmp_path, host)
    d = json.loads(bad_cfg.read_text())
    d["config"]["fusion_depth"] = "deep"
    bad_cfg.write_text(json.dumps(d))
    with pytest.warns(CacheWarning) as seen:
        rec = lookup("ab" * 32, host, tmp_path)
    assert rec is not None and rec.path == good  # the broken ones skipped, the portable one found
    text = " ".join(str(w.message) for w in seen)
    assert broken.name in text and "fusion_depth" in text
    with pytest.raises(AkgpyError, match="fusion_depth"):
        read(bad_cfg)

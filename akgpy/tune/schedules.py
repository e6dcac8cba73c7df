"""Shipped schedule records: one reviewable JSON file per (graph, target) under schedules/
(schedules/README.md), each naming the machine that measured it. `compile_graph` consults them
after the user cache and before the target's default (tune/cache.compile_cached); a record that
does not parse, names another graph or target, or whose config is invalid is ignored with a
CacheWarning.

Lookup policy: a config is a set of choices, portable across machines that compile the same
code, so a record applies to a target of the same kind, CPU, codegen features and vector width
(`portable_key`). A record of exactly this target (same fingerprint) is preferred; else one
measured with the same thread count; else any (another thread count or other cache sizes),
the first by file name. A record without `target_facts` (written before them) applies only
on an exact fingerprint match.
"""
from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path

from ..errors import AkgpyError, CacheWarning

RECORD_SCHEMA = 1
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "schedules"
_FIELDS = ("schema", "graph", "graph_name", "target", "target_cpu", "config", "best_s", "default_s", "machine")
# Target fields a record keeps for the portable match (and for the reader); optional in a file
FACTS = ("kind", "cpu", "features", "vector_bytes", "threads", "l1_bytes", "l2_bytes", "llc_bytes")


@dataclasses.dataclass(frozen=True)
class ShippedRecord:
    graph: str  # structural hash
    graph_name: str
    target: str  # Target.fingerprint
    target_cpu: str  # Target.cpu, for the reader
    config: dict  # ScheduleConfig.to_json()
    best_s: float | None
    default_s: float | None
    machine: dict  # cpu, host (hash), date
    path: Path | None = None
    target_facts: dict | None = None  # FACTS of the target measured on (None: exact match only)

    def to_json(self) -> dict:
        d = {f: getattr(self, f) for f in _FIELDS if f != "schema"}
        if self.target_facts is not None:
            d["target_facts"] = self.target_facts
        return {"schema": RECORD_SCHEMA, **d}


def target_facts(target) -> dict:
    """The FACTS of a Target, as JSON values."""
    return {f: list(getattr(target, f)) if f == "features" else getattr(target, f) for f in FACTS}


def portable_key(facts: dict) -> tuple:
    """What must agree for a config to mean the same code: kind, CPU, features, vector width."""
    return (facts.get("kind"), facts.get("cpu"), tuple(facts.get("features") or ()), facts.get("vector_bytes"))


def from_result(graph, result, machine: dict | None = None) -> ShippedRecord:
    """The shipped record of a TuneResult (its best config, times and target) for `graph`."""
    from .machine import machine as this_machine
    t = result.target
    return ShippedRecord(result.graph, graph.name, t.fingerprint, t.cpu, result.best_config.to_json(),
                         result.best_time_s, result.default_time_s, machine or this_machine(),
                         target_facts=target_facts(t))


def file_name(graph_name: str, graph_hash: str, fingerprint: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", graph_name)[:80] or "graph"
    return f"{safe}-{graph_hash[:16]}-{fingerprint[:12]}.json"


def write(directory, record: ShippedRecord) -> Path:
    """Write `record` as directory/<graph name>-<hash>-<target>.json (sorted keys, one field a line)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / file_name(record.graph_name, record.graph, record.target)
    path.write_text(json.dumps(record.to_json(), indent=1, sort_keys=True) + "\n")
    return path


def read(path) -> ShippedRecord:
    """One record; AkgpyError naming the file and what is wrong."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise AkgpyError(f"schedule record {path.name} does not parse: {e}") from None
    if not isinstance(d, dict) or d.get("schema") != RECORD_SCHEMA:
        raise AkgpyError(f"schedule record {path.name} is not schema {RECORD_SCHEMA}")
    missing = [f for f in _FIELDS if f not in d]
    if missing:
        raise AkgpyError(f"schedule record {path.name} lacks {', '.join(missing)}")
    for f in ("graph", "graph_name", "target", "target_cpu"):
        if not isinstance(d[f], str):
            raise AkgpyError(f"schedule record {path.name}: {f} must be a string")
    if not isinstance(d["config"], dict) or not isinstance(d["machine"], dict):
        raise AkgpyError(f"schedule record {path.name}: config and machine must be objects")
    for f in ("best_s", "default_s"):
        if d[f] is not None and not isinstance(d[f], (int, float)):
            raise AkgpyError(f"schedule record {path.name}: {f} must be a number or null")
    facts = d.get("target_facts")
    if facts is not None and (not isinstance(facts, dict) or any(f not in facts for f in FACTS)):
        raise AkgpyError(f"schedule record {path.name}: target_facts must be an object with {', '.join(FACTS)}")
    from ..schedule.config import ScheduleConfig
    try:
        ScheduleConfig.from_json(d["config"])  # CompileError naming the bad field
    except AkgpyError as e:
        raise AkgpyError(f"schedule record {path.name}: {e}") from None
    return ShippedRecord(**{f: d[f] for f in _FIELDS if f != "schema"}, path=path, target_facts=facts)


def lookup(graph_hash: str, target, directory=None) -> ShippedRecord | None:
    """The shipped record for this graph and target (the policy in the module doc), or None;
    bad records are warned about and skipped."""
    d = Path(directory) if directory is not None else SHIPPED_DIR
    if not d.is_dir():
        return None
    exact, same_threads, other = [], [], []
    want = portable_key(target_facts(target))
    for path in sorted(d.glob(f"*-{graph_hash[:16]}-*.json")):
        try:
            rec = read(path)
        except AkgpyError as e:
            warnings.warn(f"{e}: ignored", CacheWarning, 2)
            continue
        if rec.graph != graph_hash or not path.name.endswith(f"-{rec.target[:12]}.json"):
            warnings.warn(f"schedule record {path.name} names graph {rec.graph[:16]} / target {rec.target[:12]}, "
                          "not the ones its file name says: ignored", CacheWarning, 2)
            continue
        if rec.target == target.fingerprint:
            exact.append(rec)
        elif rec.target_facts is not None and portable_key(rec.target_facts) == want:
            (same_threads if rec.target_facts.get("threads") == target.threads else other).append(rec)
    for group in (exact, same_threads, other):
        if group:
            return group[0]
    return None


def records(directory=None) -> list[ShippedRecord]:
    """Every record of a directory (bad ones warned about and skipped)."""
    d = Path(directory) if directory is not None else SHIPPED_DIR
    out = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else ():
        try:
            out.append(read(path))
        except AkgpyError as e:
            warnings.warn(f"{e}: ignored", CacheWarning, 2)
    return out

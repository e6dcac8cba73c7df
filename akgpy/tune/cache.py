"""The persistent compile cache: tuned configs and compiled artifacts, keyed so that a record is
only ever used for the very kernel it describes (docs/cache.md).

Key (`CacheKey`): the graph's structural hash, the target's fingerprint, the artifact format,
the schedule ("poly"/"plain"), a sha256 of akgpy's own sources, the TVM / tvm-ffi / islpy / LLVM
versions, every codegen flag (`config.Flag.affects_codegen`) and the explicit config's JSON (or
"default"). A `Record` holds the best config, its time and the default's, the trial history, the
machine that measured, and the artifact (runtime/artifact.py) with an HMAC-SHA256 of (key,
artifact, manifest) under a per-user key kept outside the cache: a record whose HMAC does not
match is a `CacheWarning` and a rebuild, never code that runs.

Storage: SQLite in WAL mode at `$AKGPY_CACHE/cache.sqlite3`; every write one transaction under a
busy timeout, so concurrent processes lose no record and a killed writer loses nothing
committed. A database that does not open, fails `PRAGMA quick_check` or holds a row that does
not decode is renamed aside (with a timestamp) with a warning and started afresh. A cache
directory other users can write is refused (warning; compiles run uncached).

Nothing here imports tvm unless a target must be resolved for the first time: the resolved
host Target and LLVM version are remembered in the database, so a warm `akgpy.fuse` in a fresh
process loads its kernel through runtime/native.py alone.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import json
import os
import sqlite3
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from .. import config as flags
from ..errors import AkgpyError, CacheWarning
from .machine import cpu_model, machine

DB_NAME = "cache.sqlite3"
DB_SCHEMA = 1  # PRAGMA user_version of a database this code writes
BUSY_TIMEOUT_MS = 60_000
SOURCE_SUFFIX = ".py"

_stats = {"hits": 0, "misses": 0, "compiles": 0, "stores": 0}
_stats_lock = threading.Lock()


def stats() -> dict[str, int]:
    """This process's counters: records used (hits), lookups that found none (misses), kernels
    compiled through the cache (compiles), records written (stores)."""
    with _stats_lock:
        return dict(_stats)


def reset_stats() -> None:
    with _stats_lock:
        for k in _stats:
            _stats[k] = 0


def _count(name: str, n: int = 1) -> None:
    with _stats_lock:
        _stats[name] += n


# -- what a key is made of ------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """sha256 over akgpy's own .py files (relative path and bytes), once per process. The
    hash is remembered beside the files' (path, size, mtime) stamp in a file of the process's
    default cache, so a warm process stats the files instead of reading them."""
    files = _sources()
    stamp = hashlib.sha256()
    for rel, full in files:
        st = os.stat(full)
        stamp.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    memo = _source_memo()
    if memo is not None:
        try:
            kept_stamp, kept = memo.read_text().split()
            if kept_stamp == stamp.hexdigest():
                return kept
        except (OSError, ValueError):
            pass
    h = hashlib.sha256()
    for rel, full in files:
        with open(full, "rb") as f:
            h.update(rel.encode() + b"\0" + f.read() + b"\0")
    if memo is not None:
        try:
            tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
            tmp.write_text(f"{stamp.hexdigest()} {h.hexdigest()}\n")
            os.replace(tmp, memo)
        except OSError:
            pass
    return h.hexdigest()


_PKG = Path(__file__).resolve().parents[1]


def _sources() -> list[tuple[str, str]]:
    """(path relative to the package, full path) of every .py file, sorted; os.walk, not
    pathlib's rglob, which costs a warm fuse ~5 ms."""
    out = []
    root = str(_PKG)
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        rel = os.path.relpath(d, root)
        out += [(n if rel == "." else f"{rel}/{n}", os.path.join(d, n)) for n in names if n.endswith(SOURCE_SUFFIX)]
    return sorted(out)


def _source_memo() -> Path | None:
    c = default_cache()
    return c.dir / "sources.stamp" if c is not None else None


@functools.lru_cache(maxsize=None)
def package_versions() -> dict[str, str]:
    """Versions of the packages that generate code, read from their dist-info directory names
    beside each package (importlib.metadata alone costs ~40 ms, a warm fuse has 20), and the
    size and mtime of TVM's compiler library (a rebuilt TVM of one version differs there)."""
    from importlib import util
    out = {}
    for package, dist in (("tvm", "apache_tvm"), ("tvm_ffi", "apache_tvm_ffi"), ("islpy", "islpy")):
        spec = util.find_spec(package)
        out[dist] = "absent"
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(list(spec.submodule_search_locations)[0])
        found = sorted(n for n in os.listdir(root.parent)
                       if n.startswith(dist + "-") and n.endswith(".dist-info") and "-" not in n[len(dist) + 1:-10])
        out[dist] = found[-1][len(dist) + 1:-10] if found else "unknown"
        lib = root / "lib" / "libtvm_compiler.so"
        if package == "tvm" and lib.is_file():
            st = lib.stat()
            out["libtvm_compiler"] = f"{st.st_size}:{st.st_mtime_ns}"
    return out


def codegen_flags() -> dict[str, str]:
    """Every flag declared to change generated code, with its value now."""
    return {f.name: f.get() for f in flags.FLAGS.values() if f.affects_codegen}


@dataclasses.dataclass(frozen=True)
class CacheKey:
    graph: str  # akgpy.structural_hash
    target: str  # Target.fingerprint
    artifact_format: str  # the backend's (runtime/artifact.ARTIFACT_FORMAT)
    schedule: str  # "poly" | "plain"
    sources: str  # source_hash()
    versions: str  # canonical JSON: package versions and LLVM's
    flags: str  # canonical JSON of codegen_flags()
    config: str  # canonical JSON of the explicit ScheduleConfig, or "default"

    @property
    def digest(self) -> str:
        return hashlib.sha256(_canonical(dataclasses.asdict(self)).encode()).hexdigest()

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def make(cls, graph_hash: str, target, *, schedule: str = "poly", config=None, llvm: str = "",
             artifact_format: str | None = None) -> "CacheKey":
        from ..runtime.artifact import ARTIFACT_FORMAT
        return cls(graph_hash, target.fingerprint, artifact_format or ARTIFACT_FORMAT, schedule, source_hash(),
                   _canonical({**package_versions(), "llvm": llvm}), _canonical(codegen_flags()),
                   config_text(config))


def config_text(cfg) -> str:
    if cfg is None:
        return "default"
    return _canonical(cfg.to_json()) if hasattr(cfg, "to_json") else repr(cfg)


@dataclasses.dataclass
class Record:
    key: CacheKey
    config: dict | None = None  # the best config's JSON (None: the default)
    best_s: float | None = None  # its time; None for an untuned compile
    default_s: float | None = None  # the default config's time
    history: list = dataclasses.field(default_factory=list)  # trials (the tuner's JSON rows)
    machine: dict = dataclasses.field(default_factory=machine)
    artifact: bytes | None = None
    manifest: dict | None = None

    @property
    def digest(self) -> str:
        return self.key.digest


# -- the store ------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    digest TEXT PRIMARY KEY, key TEXT NOT NULL, config TEXT, best_s REAL, default_s REAL,
    history TEXT NOT NULL, machine TEXT NOT NULL, artifact BLOB, manifest TEXT, mac TEXT,
    updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS targets (spec TEXT PRIMARY KEY, target TEXT NOT NULL, llvm TEXT NOT NULL);
"""


class Cache:
    """One cache directory. `usable` is False (with a warning given) when it is refused."""

    def __init__(self, directory: str | os.PathLike, *, key_file: str | os.PathLike | None = None):
        self.dir = Path(os.path.expanduser(str(directory)))
        self.path = self.dir / DB_NAME
        self._key_file = Path(os.path.expanduser(str(key_file or flags.CACHE_KEY.get())))
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._secret: bytes | None = None
        self.usable = self._check_dir()

    def __repr__(self) -> str:
        return f"Cache({str(self.dir)!r})"

    # the directory and the database
    def _check_dir(self) -> bool:
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = self.dir.stat()
        except OSError as e:
            warnings.warn(f"akgpy cache {self.dir} unusable ({e}); compiling without a cache", CacheWarning, 2)
            return False
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            warnings.warn(f"akgpy cache {self.dir} is writable by other users or owned by another one "
                          f"(mode {stat.filemode(st.st_mode)}); refusing it, compiling without a cache",
                          CacheWarning, 2)
            return False
        try:
            if self._key_file.resolve().is_relative_to(self.dir.resolve()):
                warnings.warn(f"akgpy cache key {self._key_file} lies inside the cache {self.dir}: whoever can "
                              "write the cache could forge records; refusing it", CacheWarning, 2)
                return False
        except OSError:
            pass
        return True

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        try:
            conn = self._connect()
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("quick_check failed")
            return conn
        except sqlite3.DatabaseError as e:
            self._move_aside(f"{type(e).__name__}: {e}")
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # WAL: a committed transaction survives a killed process
        if conn.execute("PRAGMA user_version").fetchone()[0] == DB_SCHEMA:
            return conn  # made before: no write transaction (a commit's fsync costs a warm fuse ~10 ms)
        with _transaction(conn):
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, DB_SCHEMA):
                raise sqlite3.DatabaseError(f"database schema {version}, this akgpy writes {DB_SCHEMA}")
            conn.execute(f"PRAGMA user_version={DB_SCHEMA}")
        return conn

    def _move_aside(self, why: str) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        moved = self.path.with_name(f"{DB_NAME}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                try:
                    os.replace(src, str(moved) + suffix)
                except OSError:
                    pass
        warnings.warn(f"akgpy cache database {self.path} is corrupt ({why}); moved aside to {moved.name} "
                      "and started afresh", CacheWarning, 3)

    def _run(self, fn: Callable[[sqlite3.Connection], Any]):
        """fn on the database; a corrupt one is moved aside and fn runs once on a fresh one."""
        with self._lock:
            try:
                return fn(self._db())
            except sqlite3.DatabaseError as e:
                if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                    raise AkgpyError(f"akgpy cache {self.path} stayed locked for {BUSY_TIMEOUT_MS} ms") from None
                self._move_aside(f"{type(e).__name__}: {e}")
                return fn(self._db())

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # the HMAC key
    def _key(self) -> bytes:
        if self._secret is None:
            self._secret = _secret(self._key_file)
        return self._secret

    def _mac(self, key: CacheKey, artifact: bytes | None, manifest: str | None) -> str:
        h = hmac.new(self._key(), digestmod=hashlib.sha256)
        for part in (_canonical(key.to_json()).encode(), artifact or b"", (manifest or "").encode()):
            h.update(len(part).to_bytes(8, "little") + part)
        return h.hexdigest()

    # records
    def put(self, record: Record) -> None:
        manifest = None if record.manifest is None else _canonical(record.manifest)
        row = (record.digest, _canonical(record.key.to_json()),
               None if record.config is None else _canonical(record.config), record.best_s, record.default_s,
               json.dumps(record.history), _canonical(record.machine), record.artifact, manifest,
               self._mac(record.key, record.artifact, manifest), time.time())

        def write(conn):
            with _transaction(conn):
                conn.execute("INSERT OR REPLACE INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)
        self._run(write)
        _count("stores")

    def get(self, key: CacheKey) -> Record | None:
        """The record for `key`, or None; one whose HMAC or encoding is bad is dropped with a warning."""
        row = self._run(lambda c: c.execute("SELECT * FROM records WHERE digest = ?", (key.digest,)).fetchone())
        if row is None:
            return None
        return self._decode(row, expect=key)

    def records(self) -> list[Record]:
        rows = self._run(lambda c: c.execute("SELECT * FROM records ORDER BY updated").fetchall())
        return [r for r in (self._decode(row) for row in rows) if r is not None]

    def remove(self, digest: str) -> None:
        def delete(conn):
            with _transaction(conn):
                conn.execute("DELETE FROM records WHERE digest = ?", (digest,))
        self._run(delete)

    def clear(self) -> int:
        def delete(conn):
            with _transaction(conn):
                return conn.execute("DELETE FROM records").rowcount
        return self._run(delete)

    def verify(self) -> list[str]:
        """Digests of the records whose HMAC or encoding is bad (each also warned about)."""
        rows = self._run(lambda c: c.execute("SELECT * FROM records").fetchall())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheWarning)
            return [row[0] for row in rows if self._decode(row, drop=False) is None]

    def _decode(self, row, expect: CacheKey | None = None, drop: bool = True) -> Record | None:
        digest, key_text, cfg, best_s, default_s, history, mach, artifact, manifest, mac, _ = row
        try:
            key = CacheKey(**json.loads(key_text))
            if key.digest != digest or (expect is not None and key != expect):
                raise ValueError("the key does not hash to the record's digest")
            if not hmac.compare_digest(mac or "", self._mac(key, artifact, manifest)):
                warnings.warn(f"akgpy cache record {digest[:16]} failed its HMAC check (tampered with, or written "
                              "with another user's key): ignored and rebuilt", CacheWarning, 3)
                if drop:
                    self.remove(digest)
                return None
            return Record(key, None if cfg is None else json.loads(cfg), best_s, default_s, json.loads(history),
                          json.loads(mach), artifact, None if manifest is None else json.loads(manifest))
        except (ValueError, TypeError) as e:
            warnings.warn(f"akgpy cache record {str(digest)[:16]} does not decode ({e}): ignored", CacheWarning, 3)
            if drop:
                self.remove(digest)
            return None

    # resolved targets (so a warm process need not import tvm to name its target)
    def target_for(self, spec) -> tuple[Any, str]:
        """(Target, LLVM version) for what the user passed as target."""
        from ..target import Target, resolve_target
        if isinstance(spec, Target):
            return spec, _llvm_version(spec)
        text = _spec_text(spec)
        if text is None:
            t = resolve_target(spec)
            return t, _llvm_version(t)
        row = self._run(lambda c: c.execute("SELECT target, llvm FROM targets WHERE spec = ?", (text,)).fetchone())
        if row is not None:
            try:
                return Target.from_json(json.loads(row[0])), row[1]
            except (ValueError, TypeError, AkgpyError):
                pass
        t = resolve_target(spec)
        llvm = _llvm_version(t)

        def write(conn):
            with _transaction(conn):
                conn.execute("INSERT OR REPLACE INTO targets VALUES (?,?,?)", (text, _canonical(t.to_json()), llvm))
        self._run(write)
        return t, llvm


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one writer at a time, under busy_timeout."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind, value, tb):
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
        return False


def _secret(path: Path) -> bytes:
    """The per-user HMAC key: read, or created (32 random bytes, mode 0600) on first use."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        for _ in range(100):
            data = path.read_bytes()
            if len(data) == 32:
                return data
            time.sleep(0.01)
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    return path.read_bytes()


def _spec_text(spec) -> str | None:
    """A canonical text of a target spec that names the same Target on this machine, or None
    where the spec is not plain data (a tvm.target.Target: tvm is loaded anyway). Host targets
    include what the host probe reads, so another CPU, cache size or thread count is another spec."""
    if spec is None or isinstance(spec, str):
        name = "host" if spec in (None, "llvm", "host", "cpu") else spec
    elif isinstance(spec, dict):
        name = spec
    else:
        return None
    return _canonical({"spec": name, "probe": _host_probe(), "threads": flags.threads(),
                       "versions": package_versions()})


@functools.lru_cache(maxsize=None)
def _host_probe() -> str:
    """What resolving the host reads besides LLVM: the CPU's model and flags, the cache sizes."""
    h = hashlib.sha256(cpu_model().encode())
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                h.update(line.encode())
                break
    except OSError:
        pass
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for p in sorted(base.glob("index*/size")) if base.is_dir() else ():
        try:
            h.update(p.read_text().encode())
        except OSError:
            pass
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _llvm_version(target) -> str:
    if target.kind != "llvm":
        return ""
    import tvm
    return str(tvm.target.codegen.llvm_version_major())


def _canonical(x) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"))


# -- the process's cache --------------------------------------------------------------------------

_default: dict[tuple, Cache | None] = {}


def default_cache() -> Cache | None:
    """The cache $AKGPY_CACHE names (one Cache per directory and key file); None when it is
    'off' or refused."""
    where = flags.CACHE.get()
    if where.strip().lower() in ("off", "0", "none", ""):
        return None
    ident = (os.path.expanduser(where), flags.CACHE_KEY.get())
    if ident not in _default:
        c = Cache(ident[0], key_file=ident[1])
        _default[ident] = c if c.usable else None
    return _default[ident]


# -- the lookup compile_graph makes ---------------------------------------------------------------

def compile_cached(graph, target, *, schedule: str, config, compile: Callable[[Any, Any], Any]):
    """The Program for `graph` through the cache: a record with an artifact for this key is
    loaded without compiling; a tuned record without one is compiled with its config; else a
    shipped record (schedules/, only when no config is given), else `config` or the target's
    default. `compile(target, config)` compiles without the cache. What was compiled is stored,
    unless a wall-clock guard shaped one of its kernels (then it is not reproducible)."""
    from ..runtime.artifact import ARTIFACT_FORMAT, pack, unpack

    def restore(rec: Record, tgt, recompile):
        return unpack(graph, rec.artifact, rec.manifest, target=tgt, recompile=recompile)
    return cached(graph, target, schedule=schedule, config=config, compile=compile, artifact_format=ARTIFACT_FORMAT,
                  pack=pack, restore=restore, fresh=lambda prog, packed: prog)


def cached(graph, target, *, schedule: str, config, compile: Callable[[Any, Any], Any], artifact_format: str,
           pack: Callable[[Any], tuple[bytes, dict]], restore: Callable[[Record, Any, Callable], Any],
           fresh: Callable[[Any, tuple[bytes, dict] | None], Any]):
    """What `compile_cached` does, for any artifact format (the key includes `artifact_format`):
    a hit is `restore(record, target, recompile)` (an AkgpyError or OSError drops the record and
    compiles instead); a compiled program is stored as `pack(program)` -> (bytes, manifest) and
    handed back as `fresh(program, packed)` (packed: what was stored, None if nothing was)."""
    cache = default_cache()
    if cache is None:
        return fresh(compile(target, config), None)
    from ..graph.hash import structural_hash
    graph_hash = structural_hash(graph)
    tgt, llvm = cache.target_for(target)
    key = CacheKey.make(graph_hash, tgt, schedule=schedule, config=config, llvm=llvm, artifact_format=artifact_format)
    rec = cache.get(key)
    if rec is not None and rec.artifact is not None:
        try:
            value = restore(rec, tgt, lambda i: compile(tgt, _config(rec.config, config)).kernels[i])
            _count("hits")
            return value
        except (AkgpyError, OSError) as e:
            warnings.warn(f"akgpy cache record {rec.digest[:16]} could not be loaded ({e}); compiling instead",
                          CacheWarning, 3)
            cache.remove(rec.digest)
            rec = None
    if rec is None:
        _count("misses")
        rec = Record(key, config=None if config is None else config.to_json())
        if config is None:
            from .schedules import lookup
            shipped = lookup(graph_hash, tgt)
            if shipped is not None:
                rec = Record(key, config=shipped.config, best_s=shipped.best_s, default_s=shipped.default_s,
                             machine=shipped.machine)
    prog = compile(tgt, _config(rec.config, config))
    _count("compiles")
    if not _reproducible(prog):
        return fresh(prog, None)
    rec.artifact, rec.manifest = pack(prog)
    cache.put(rec)
    return fresh(prog, (rec.artifact, rec.manifest))


def _config(recorded: dict | None, given):
    if given is not None or recorded is None:
        return given
    from ..schedule.config import ScheduleConfig
    return ScheduleConfig.from_json(recorded)


def _reproducible(prog) -> bool:
    """No kernel was shaped by a wall-clock guard (schedule/poly.SchedulePath; a path without
    that field is deterministic)."""
    for k in prog.kernels:
        sp = k.schedule_path
        if getattr(sp, "deterministic", True) is False or getattr(sp, "guard_fired", None):
            return False
    return True

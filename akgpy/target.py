"""What akgpy compiles for: `Target`, the hardware facts of one machine, resolved once.

Every fact a schedule or a backend reads about the hardware (vector width, cache sizes, kernel
threads, CPU features) lives here and nowhere else; the host is probed only when the target is
the host. Imports tvm only inside functions, so every stage may import this module.

Accepted by `resolve_target`:
    None, "llvm", "host", "cpu"      this machine (LLVM's host CPU, /proc/cpuinfo, sysfs caches)
    {"kind": "llvm", "mcpu": ...}    that CPU (LLVM's model of it); optional "mattr", "mtriple",
                                     and akgpy's own keys "threads", "l1_bytes", "l2_bytes",
                                     "llc_bytes", "vector_bytes" (not passed to TVM; a
                                     vector width above the CPU's is legalised by LLVM as
                                     register pairs: tests pin 64 that way on any host)
    a tvm.target.Target of kind llvm the same
    a Target                         itself
    "cuda", "ascend"                 CompileError: not yet (issues 7-9)
A CPU that is not the host's gets the GENERIC_* cache sizes below unless the dict names them.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from . import config
from .errors import CompileError

# CPU features that change generated code (instruction selection, vector width, float16 ops).
# Others LLVM lists (tuning hints such as "fast-15bytenop") are left out of `features`, so two
# names of one ISA get one fingerprint only where their codegen-relevant features agree.
CODEGEN_FEATURES = ("sse2", "sse4.1", "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                    "avx512dq", "avx512cd", "avx512vnni", "avx512bf16", "avx512fp16", "amx-tile", "neon", "sve",
                    "sve2", "fullfp16")

# Cache sizes assumed for a CPU other than the host's: a typical core (L1d 32 KiB, L2 512 KiB)
# and a 32 MiB last-level cache. The host's own come from sysfs.
GENERIC_L1_BYTES = 32 << 10
GENERIC_L2_BYTES = 512 << 10
GENERIC_LLC_BYTES = 32 << 20

KINDS_LATER = ("cuda", "ascend", "rocm", "opencl", "metal", "vulkan", "c")
_AKGPY_KEYS = ("threads", "l1_bytes", "l2_bytes", "llc_bytes", "vector_bytes")
_HOST_NAMES = ("llvm", "host", "cpu")


@dataclass(frozen=True)
class Target:
    kind: str  # "llvm"; later "cuda", "ascend"
    cpu: str  # LLVM mcpu name ("skylake-avx512"); a GPU arch later
    triple: str  # target triple ("x86_64-linux-gnu")
    features: tuple[str, ...]  # sorted CODEGEN_FEATURES the CPU has (LLVM's model plus mattr)
    mattr: tuple[str, ...]  # extra LLVM attributes passed to codegen ("+avx512fp16")
    vector_bytes: int  # widest vector register code may use: 64 (AVX-512 F/BW/VL), 32 (AVX2), 16
    l1_bytes: int  # per-core L1 data cache
    l2_bytes: int  # per-core L2
    llc_bytes: int  # last-level cache
    threads: int  # threads a kernel runs on
    is_host: bool = False  # the machine compiling (not part of the fingerprint)

    def __post_init__(self):
        for f in ("kind", "cpu", "triple"):
            if not isinstance(getattr(self, f), str):
                raise CompileError(f"Target.{f} must be a str, got {getattr(self, f)!r:.80}")
        for f in ("features", "mattr"):
            v = getattr(self, f)
            if not isinstance(v, tuple) or not all(isinstance(x, str) for x in v):
                raise CompileError(f"Target.{f} must be a tuple of str, got {v!r:.80}")
        if self.features != tuple(sorted(set(self.features))):
            raise CompileError(f"Target.features must be sorted and unique, got {self.features!r:.120}")
        for f in ("vector_bytes", "l1_bytes", "l2_bytes", "llc_bytes", "threads"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise CompileError(f"Target.{f} must be a positive int, got {v!r:.80}")
        if not isinstance(self.is_host, bool):
            raise CompileError(f"Target.is_host must be a bool, got {self.is_host!r:.80}")

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def vector_registers(self) -> int:
        """Vector registers code may keep values in: 32 with AVX-512 (and on AArch64), else 16."""
        return 32 if self.vector_bytes >= 64 or not self.is_x86 else 16

    @property
    def is_x86(self) -> bool:
        return self.triple.startswith(("x86_64", "i686", "i386"))

    @property
    def fingerprint(self) -> str:
        """16 hex digits of the SHA-256 of every field but is_host: equal fingerprints, equal code."""
        d = self.to_json()
        del d["is_host"]
        text = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, d) -> "Target":
        if not isinstance(d, dict):
            raise CompileError(f"Target.from_json expects a dict, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = set(d) - names, names - set(d) - {"is_host"}
        if unknown or missing:
            raise CompileError(f"Target.from_json: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**kw)

    def replace(self, **changes) -> "Target":
        return dataclasses.replace(self, **changes)

    def tvm(self):
        """The tvm.target.Target (dict form) code is generated for."""
        import tvm
        d = {"kind": self.kind, "mcpu": self.cpu, "mtriple": self.triple}
        if self.mattr:
            d["mattr"] = list(self.mattr)
        return tvm.target.Target(d)

    def describe(self) -> str:
        return (f"{self.kind} {self.cpu} ({self.triple}){' host' if self.is_host else ''}: "
                f"{self.vector_bytes}-byte vectors, L1 {self.l1_bytes >> 10} KiB, L2 {self.l2_bytes >> 10} KiB, "
                f"LLC {self.llc_bytes >> 20} MiB, {self.threads} threads, features {' '.join(self.features)}")


def resolve_target(target=None) -> Target:
    """The Target for what the user passed (see the module doc); CompileError for anything else."""
    if isinstance(target, Target):
        return target
    if target is None or (isinstance(target, str) and target in _HOST_NAMES):
        return host()
    if isinstance(target, str) and target in KINDS_LATER:
        raise CompileError(f"target {target!r}: not yet supported (akgpy compiles for 'llvm', the host CPU, so far)")
    if isinstance(target, dict):
        return _from_dict(target)
    try:
        import tvm
        is_tvm = isinstance(target, tvm.target.Target)
    except ImportError:  # no tvm: nothing else to recognise
        is_tvm = False
    if is_tvm:
        return _from_dict(dict(target.export()), shown=str(target))
    raise CompileError(f"unsupported target {target!r:.120}: akgpy compiles for 'llvm' (the host CPU) so far")


def _from_dict(d: dict, shown: str | None = None) -> Target:
    import tvm
    shown = shown or repr(d)[:120]
    kind = d.get("kind")
    if not isinstance(kind, str):
        raise CompileError(f"target {shown}: 'kind' must be a string such as 'llvm', got {kind!r:.40}")
    if kind != "llvm":
        raise CompileError(f"unsupported target kind {kind!r} ({shown}): not yet supported; akgpy compiles for "
                           f"'llvm' (the host CPU) so far")
    ours = {k: d[k] for k in _AKGPY_KEYS if k in d}
    for k, v in ours.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise CompileError(f"target {shown}: {k!r} must be a positive int, got {v!r:.40}")
    if ours.get("vector_bytes", 16) not in (16, 32, 64):
        raise CompileError(f"target {shown}: 'vector_bytes' must be 16, 32 or 64, got {ours['vector_bytes']!r}")
    tvm_cfg = {k: v for k, v in d.items() if k not in _AKGPY_KEYS}
    try:
        tgt = tvm.target.Target(tvm_cfg)
    except Exception as e:  # TVM's ValueError/TVMError on a malformed config
        raise CompileError(f"invalid target {shown}: {str(e).strip().splitlines()[0][:200]}") from None
    host_triple = _host_triple()
    triple = str(tgt.attrs.get("mtriple", "") or "") or host_triple
    if triple.split("-")[0] != host_triple.split("-")[0]:
        raise CompileError(f"target triple {triple!r} is not the host's ({host_triple!r}): akgpy runs what it "
                           f"compiles on this machine")
    cpu = str(tgt.attrs.get("mcpu", "") or "")
    if cpu in ("", "native"):
        cpu = _host_cpu()
    if not _valid_cpu(cpu, triple):
        raise CompileError(f"target {shown}: LLVM knows no CPU {cpu!r}")
    mattr = tuple(str(a) for a in (tgt.attrs.get("mattr", None) or ()))
    is_host = cpu == _host_cpu() and triple == host_triple
    if is_host and not mattr:
        mattr = host_mattr()
    if is_host and ours == {} and mattr == host_mattr():
        return host()
    return _make(cpu, triple, mattr, is_host, ours)


def _make(cpu: str, triple: str, mattr: tuple[str, ...], is_host: bool, ours: dict) -> Target:
    features = _features(cpu, triple, mattr)
    wide = all(f in features for f in ("avx512f", "avx512bw", "avx512vl"))
    vector_bytes = ours.get("vector_bytes") or (64 if wide else 32 if "avx2" in features or "avx" in features else 16)
    caches = _host_caches() if is_host else {}
    l1 = ours.get("l1_bytes") or caches.get(1) or GENERIC_L1_BYTES
    l2 = ours.get("l2_bytes") or caches.get(2) or GENERIC_L2_BYTES
    llc = ours.get("llc_bytes") or (max(caches.values()) if caches else GENERIC_LLC_BYTES)
    return Target(kind="llvm", cpu=cpu, triple=triple, features=features, mattr=mattr, vector_bytes=vector_bytes,
                  l1_bytes=l1, l2_bytes=l2, llc_bytes=llc, threads=ours.get("threads") or config.threads(),
                  is_host=is_host and not ours)


def host() -> Target:
    """This machine, probed once per thread count (TVM_NUM_THREADS may change between calls)."""
    return _host(config.threads())


@functools.lru_cache(maxsize=None)
def _host(threads: int) -> Target:
    return _make(_host_cpu(), _host_triple(), host_mattr(), True, {}).replace(threads=threads, is_host=True)


@functools.lru_cache(maxsize=None)
def _host_cpu() -> str:
    import tvm
    return str(tvm.target.codegen.llvm_get_system_cpu())


@functools.lru_cache(maxsize=None)
def _host_triple() -> str:
    import tvm
    return str(tvm.target.codegen.llvm_get_system_triple())


@functools.lru_cache(maxsize=None)
def _valid_cpu(cpu: str, triple: str) -> bool:
    import tvm
    return bool(tvm.target.codegen.llvm_is_valid_cpu(cpu, triple))


@functools.lru_cache(maxsize=None)
def _features(cpu: str, triple: str, mattr: tuple[str, ...]) -> tuple[str, ...]:
    import tvm
    d = {"kind": "llvm", "mcpu": cpu, "mtriple": triple, **({"mattr": list(mattr)} if mattr else {})}
    have = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(tvm.target.Target(d))}
    # llvm_get_cpu_features lists the CPU model's features; attributes given apart are applied here
    for a in mattr:
        if a[:1] == "+":
            have.add(a[1:])
        elif a[:1] == "-":
            have.discard(a[1:])
    return tuple(sorted(f for f in CODEGEN_FEATURES if f in have))


@functools.lru_cache(maxsize=None)
def _host_caches() -> dict[int, int]:
    """{level: bytes} of cpu0's data/unified caches, from sysfs (empty when unreadable)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    out: dict[int, int] = {}
    for d in sorted(base.glob("index*")):
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            s = (d / "size").read_text().strip()
            size = int(s.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1], 1)
            level = int((d / "level").read_text())
            out[level] = max(out.get(level, 0), size)
        except (OSError, ValueError):
            continue
    return out


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=None)
def host_mattr() -> tuple[str, ...]:
    """Features the host has beyond LLVM's model of its CPU name: a Xeon VM that LLVM calls
    "rocketlake" runs AVX512-FP16, which that model lacks (native float16 ops need it)."""
    import tvm
    cpu, triple = _host_cpu(), _host_triple()
    model = tvm.target.Target({"kind": "llvm", "mcpu": cpu})
    if triple.startswith(("x86_64", "i686", "i386")) and "avx512_fp16" in _cpu_flags() \
            and not tvm.target.codegen.target_has_features("avx512fp16", model):
        return ("+avx512fp16",)
    return ()

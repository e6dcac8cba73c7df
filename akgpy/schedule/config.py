"""The schedule knobs, in one object a tuner can search, with a default chooser per target.

Every schedule (plain, poly) reads only these fields; two configs that differ in a field that
matters for a kernel give different loop nests for it. The poly schedule's own decisions
(which statements fuse) come from isl, not from here.

Each field declares its domain (`Range` or `Choices`, `Sequence` for a tuple of values) in its
metadata; `ScheduleConfig` checks every value against it, and `to_json` / `from_json` /
`json_schema` carry a config to disk with `SCHEMA_VERSION`.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field

from ..errors import CompileError

# bumped when a field is renamed, removed or changes meaning; from_json refuses other versions
SCHEMA_VERSION = 1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Range:
    """Numbers lo..hi inclusive; integers unless `integer=False`; `log`: a searcher samples the
    range on a log scale (then lo is taken as 1 where it is 0)."""
    lo: float
    hi: float
    log: bool = False
    integer: bool = True

    def contains(self, v) -> bool:
        if self.integer:
            return _is_int(v) and self.lo <= v <= self.hi
        return (_is_int(v) or isinstance(v, float)) and math.isfinite(v) and self.lo <= v <= self.hi

    def describe(self) -> str:
        kind = "an int" if self.integer else "a number"
        return f"{kind} in [{self.lo}, {self.hi}]"

    def schema(self) -> dict:
        return {"type": "integer" if self.integer else "number", "minimum": self.lo, "maximum": self.hi}

    def to_json(self, v):
        return v

    def from_json(self, v):
        return v


@dataclass(frozen=True)
class Choices:
    """One of a fixed list of values (bools, ints, strings)."""
    values: tuple

    def contains(self, v) -> bool:
        # True == 1 in Python: a bool is a choice only among bools, an int only among ints
        return any(type(v) is type(c) and v == c for c in self.values)

    def describe(self) -> str:
        return f"one of {list(self.values)}"

    def schema(self) -> dict:
        return {"enum": list(self.values)}

    def to_json(self, v):
        return v

    def from_json(self, v):
        return v


@dataclass(frozen=True)
class Sequence:
    """A tuple of up to `max_len` values, each in `item` (JSON: a list)."""
    item: typing.Any
    max_len: int

    def contains(self, v) -> bool:
        return isinstance(v, tuple) and len(v) <= self.max_len and all(self.item.contains(x) for x in v)

    def describe(self) -> str:
        return f"a tuple of at most {self.max_len} values, each {self.item.describe()}"

    def schema(self) -> dict:
        return {"type": "array", "maxItems": self.max_len, "items": self.item.schema()}

    def to_json(self, v):
        return [self.item.to_json(x) for x in v]

    def from_json(self, v):
        return tuple(self.item.from_json(x) for x in v) if isinstance(v, list) else v


BOOL = Choices((False, True))
_BYTES = 1 << 40  # the largest byte count a field accepts


def _f(default, domain, doc: str = "", fact: bool = False):
    """A field with its domain. `fact`: a hardware fact, not a choice; it moves to Target."""
    return field(default=default, metadata={"domain": domain, "doc": doc, "fact": fact})


@dataclass(frozen=True)
class Maybe:
    """None (the pass decides) or a value of `inner`."""
    inner: typing.Any

    def contains(self, v) -> bool:
        return v is None or self.inner.contains(v)

    def describe(self) -> str:
        return f"None or {self.inner.describe()}"

    def schema(self) -> dict:
        return {"anyOf": [{"type": "null"}, self.inner.schema()]}

    def to_json(self, v):
        return None if v is None else self.inner.to_json(v)

    def from_json(self, v):
        return None if v is None else self.inner.from_json(v)


@dataclass(frozen=True)
class Text:
    """A non-empty string."""

    def contains(self, v) -> bool:
        return isinstance(v, str) and bool(v)

    def describe(self) -> str:
        return "a non-empty string"

    def schema(self) -> dict:
        return {"type": "string", "minLength": 1}

    def to_json(self, v):
        return v

    def from_json(self, v):
        return v


_MEMBER = Range(0, 63)


@dataclass(frozen=True)
class BandChoice:
    """The decisions akgpy's tree passes (poly/tree.py) or the contraction template
    (schedule/plain.py) make for one band, overridden; None or () leaves one to the pass.
    `key` names the band: "shared:<statements>" (the loops isl fused statements under),
    "own:<statement>" (a statement's loops below them), "contract:<block>" (a contraction's
    register-tiled nest); akgpy.tune.space lists the keys of a graph. An override the band
    cannot take (an order that is no permutation of its members) is ignored and said so in
    explain(); a parallel or vector loop that carries a dependence is dropped there too."""
    key: str = _f("", Text(), "the band: shared:<statements>, own:<statement> or contract:<block>")
    fusion_depth: int | None = _f(None, Maybe(Range(0, 64)), "shared: most of isl's band members kept as shared loops")
    order: tuple[int, ...] = _f((), Sequence(_MEMBER, 16),
                                "loop order, outermost first: indices into isl's kept members (shared) or the "
                                "statement's loops (own)")
    tile: tuple[int, ...] = _f((), Sequence(Range(1, 1 << 16, log=True), 16), "shared: tile sizes of the tiled members")
    parallel: int | None = _f(None, Maybe(Range(-1, 63)), "the member of the generated band that runs in "
                                                          "parallel; -1: none")
    vector: bool | None = _f(None, Maybe(Choices((False,))), "False: the innermost member is not vectorised")
    register_tile: tuple[int, ...] = _f((), Sequence(Range(1, 64), 2), "contract: rows x column vectors")
    pack: bool | None = _f(None, Maybe(BOOL), "contract: B packed into panels (on/off)")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            dom, v = f.metadata["domain"], getattr(self, f.name)
            if not dom.contains(v):
                raise CompileError(f"BandChoice.{f.name} ({self.key!r:.80}) must be {dom.describe()}, got {v!r:.80}")
        if self.register_tile and len(self.register_tile) != 2:
            raise CompileError(f"BandChoice.register_tile ({self.key!r:.80}) must be (rows, column vectors), "
                               f"got {self.register_tile!r}")

    @classmethod
    def domains(cls) -> dict:
        return {f.name: f.metadata["domain"] for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class Record:
    """One BandChoice (JSON: an object of its key and the fields it overrides)."""

    def contains(self, v) -> bool:
        return isinstance(v, BandChoice)

    def describe(self) -> str:
        return "a BandChoice"

    def schema(self) -> dict:
        props = {n: d.schema() for n, d in BandChoice.domains().items()}
        return {"type": "object", "properties": props, "required": ["key"], "additionalProperties": False}

    def to_json(self, c):
        # the fields left to the pass are left out: a record reads as what it overrides
        return {n: d.to_json(getattr(c, n)) for n, d in BandChoice.domains().items()
                if n == "key" or getattr(c, n) not in (None, ())}

    def from_json(self, d):
        if not isinstance(d, dict):
            return d  # contains() refuses it, naming the field
        doms = BandChoice.domains()
        unknown = sorted(set(d) - set(doms))
        if unknown:
            raise CompileError(f"ScheduleConfig.bands entry {d.get('key')!r:.80} has unknown field(s) {unknown}")
        return BandChoice(**{n: doms[n].from_json(x) for n, x in d.items()})


@dataclass(frozen=True)
class Bands(Sequence):
    """A tuple of BandChoice records with distinct keys."""

    def contains(self, v) -> bool:
        return super().contains(v) and len({c.key for c in v}) == len(v)

    def describe(self) -> str:
        return f"a tuple of at most {self.max_len} BandChoice records with distinct keys"


@dataclass(frozen=True)
class ScheduleConfig:
    # hardware fact (moves to Target): width of one vector register, lanes = vector_bytes // element size
    vector_bytes: int = _f(64, Choices((16, 32, 64)), fact=True)
    tile_i: int = _f(8, Range(1, 32), "contraction register tile: the most rows (schedule/plain.register_tile)")
    tile_j_vectors: int = _f(3, Range(1, 16), "contraction register tile: the most columns, in vectors")
    min_parallel: int = _f(2, Range(1, 1024, log=True), "a fused outer loop shorter than this runs serially")
    parallel: bool = _f(True, BOOL, "use the thread pool at all")
    unroll: bool = _f(True, BOOL, "unroll the contraction's row tile")
    # poly schedule only
    min_parallel_work: int = _f(4096, Range(1, 1 << 24, log=True),
                                "statement instances in a nest before it uses threads")
    tile: tuple[int, ...] = _f((), Sequence(Range(1, 1 << 16, log=True), 16),
                               "tile sizes for fused bands; () = cache model, only where it helps")
    # hardware fact (moves to Target): the cache model's L1 size
    l1_bytes: int = _f(32 * 1024, Range(1, _BYTES, log=True), fact=True)
    # hardware fact (moves to Target): per-core L2 size: a transpose's producer runs in blocks whose
    # intermediate fits half of it (tree.py, _transpose_block)
    l2_bytes: int = _f(512 * 1024, Range(1, _BYTES, log=True), fact=True)
    # hardware fact (moves to Target): last-level cache size: a contraction's B up to this size,
    # read by few rows of A, is packed into panels where it outgrows the TLB's reach
    # (schedule/plain._pack_panels)
    llc_bytes: int = _f(32 << 20, Range(1, _BYTES, log=True), fact=True)
    stride1_innermost: bool = _f(True, BOOL,
                                 "move the dim walking the largest array with stride 1 innermost")
    fusion_depth: int = _f(8, Range(0, 64), "most isl band members kept as loops shared by fused statements; 0 = none")
    input_fusion: bool = _f(True, BOOL, "isl's proximity includes two statements reading one input element")
    # an elementwise statement sharing vector math with a reduction runs in the reduction's loops,
    # where LLVM computes the shared chain once (poly/riders.py)
    share_math: bool = _f(True, BOOL)
    # graph rewrites that are not exact for every input value: exp(-x) taken from exp(-|x|) of
    # the same x (graph/algebra.share_exp: ~1.5 ulp; an infinite numerator times an underflowed
    # exp gives NaN). Off by default: IEEE's and numpy's results decide (docs/semantics.md)
    inexact_math: bool = _f(False, BOOL)
    # wall-clock bound on isl's fused search; past it isl searches again without constant shifts
    # (each of the corpus graphs that ran out got a fused answer so in 0.04-0.21 s), then with
    # each strongly connected component on its own (milliseconds), and only if those fail too
    # does the plain schedule run. The slowest corpus search that ends takes 1.5 s; every graph
    # past 2.5 s got the same or faster code without shifts (schedule/poly._isl_schedule)
    isl_timeout_s: float = _f(2.5, Range(1e-9, 3600.0, integer=False))
    # vector registers per op for an elementwise statement that rounds to float16 after many ops:
    # each rounding is a conversion pair with long latency, so more independent lanes in flight
    chain_registers: int = _f(4, Range(1, 16),
                              "default_config: NATIVE_FP16_CHAIN_REGISTERS where float16 ops are native")
    # float32 vector registers per op for vector math (te/fastmath.py's exp/log/tanh; each element
    # is a chain of ~40 dependent ops, and with one register per op too few chains fit the core's
    # out-of-order window): an elementwise statement's vector (schedule/kept.WIDE_MATH_INSTANCES
    # instances or more), and the most registers one step of a row sum's partials covers
    math_registers: int = _f(4, Range(1, 16))
    # the most float32 registers of vector math one step of a sum's partials covers when they
    # also sum over other reduced axes (a full sum): their lanes are added up once, not per row
    sum_math_registers: int = _f(8, Range(1, 32))
    # a kernel moving at least this many bytes writes its large outputs with non-temporal stores
    # (no write-allocate read); 0 = never. default_config: twice the host's last-level cache, or
    # the CPU's measured threshold (STREAM_POLICY_BY_CPU)
    stream_min_bytes: int = _f(64 << 20, Range(0, _BYTES, log=True))
    # a kernel that reads at least what it writes streams from this many bytes moved (below
    # stream_min_bytes, and only its stores of whole cache lines); 0 = no such kernels apart.
    # default_config: a number of the host's last-level caches by CPU (STREAM_READ_HEAVY_LLCS_BY_CPU)
    stream_read_heavy_min_bytes: int = _f(0, Range(0, _BYTES, log=True))
    # whether a kernel that writes more bytes than it reads streams too (see STREAM_POLICY_BY_CPU)
    stream_write_heavy: bool = _f(False, BOOL)
    # the share of a kernel's candidate output bytes that whole-line stores must write for any of
    # them to stream (0: each qualifying store streams); default_config: STREAM_POLICY_BY_CPU
    stream_share: float = _f(0.9, Range(0.0, 1.0, integer=False))
    # register width of an in-register transpose of elements narrower than 32 bits; 0 = vector_bytes.
    # default_config: 16. AVX2 has no 16-bit permute across the two halves of a register (vpermw
    # is AVX-512BW): a 16-lane float16 tile of 9 rows took ~16 shuffles per output register, and
    # yolo ~1373's seven [1024, 3, 3, 512] transposes ran 11.5 ms at 32 bytes, 10.0 ms at 16 (one
    # xmm, where vpshufb reaches every lane), 29 ms at 8 (2 threads, Zen 3). With AVX-512BW too
    # the xmm tiles win: 6.8 ms at 16 bytes, 8.2 at 32, 8.7 at 64 (2 threads, Xeon, vector_bytes 64)
    narrow_transpose_bytes: int = _f(0, Choices((0, 8, 16, 32, 64)))
    # software prefetch this many bytes ahead of each stride-1 vector read of a kernel argument
    # (akgpy/targets/prefetch.py); 0 = none. default_config: PREFETCH_BYTES
    prefetch_bytes: int = _f(0, Range(0, 1 << 20, log=True))
    # lower a graph of transposes and same-shape elementwise ops on fewer dims: each transpose's
    # stride-1 read run merged where every layout keeps it together (akgpy/graph/collapse.py);
    # False lowers the graph's own dims (what the tile planner's tests pin down)
    collapse_dims: bool = _f(True, BOOL)
    # per-band overrides of the tree passes' and the contraction template's decisions (tile
    # sizes, loop order, parallel/vector member, fusion depth, register tile, packing); () = the
    # passes decide everywhere. akgpy.tune.space lists a graph's bands and what each may take
    bands: tuple = _f((), Bands(Record(), 4096), "per-band overrides (BandChoice records); () = the passes decide")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            dom, v = f.metadata["domain"], getattr(self, f.name)
            if not dom.contains(v):
                raise CompileError(f"ScheduleConfig.{f.name} must be {dom.describe()}, got {v!r:.80}")

    def replace(self, **changes) -> "ScheduleConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def domains(cls) -> dict:
        """{field name: its domain}."""
        return {f.name: f.metadata["domain"] for f in dataclasses.fields(cls)}

    def to_json(self) -> dict:
        """Every field as JSON values, with "schema": SCHEMA_VERSION."""
        out = {"schema": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            out[f.name] = f.metadata["domain"].to_json(getattr(self, f.name))
        return out

    @classmethod
    def from_json(cls, d) -> "ScheduleConfig":
        """The config `to_json` wrote; fields left out keep their defaults. CompileError naming
        the field for an unknown field, a wrong schema version or a value outside its domain."""
        if not isinstance(d, dict):
            raise CompileError(f"ScheduleConfig.from_json expects a dict, got {type(d).__name__}")
        if d.get("schema") != SCHEMA_VERSION:
            raise CompileError(f"ScheduleConfig.from_json: schema {d.get('schema')!r} is not this akgpy's "
                               f"({SCHEMA_VERSION})")
        doms = cls.domains()
        unknown = sorted(set(d) - set(doms) - {"schema"})
        if unknown:
            raise CompileError(f"ScheduleConfig.from_json: unknown field(s) {unknown}")
        return cls(**{k: doms[k].from_json(v) for k, v in d.items() if k != "schema"})

    @classmethod
    def json_schema(cls) -> dict:
        """A JSON Schema (draft 2020-12) that every `to_json()` output satisfies."""
        props = {"schema": {"const": SCHEMA_VERSION}}
        for f in dataclasses.fields(cls):
            props[f.name] = {**f.metadata["domain"].schema(), **({"description": f.metadata["doc"]}
                                                                 if f.metadata["doc"] else {})}
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "akgpy ScheduleConfig",
                "type": "object", "properties": props, "required": ["schema"], "additionalProperties": False}


PREFETCH_BYTES = 2048
# chain_registers where float16 ops run natively (AVX512-FP16, targets/native_fp16.py): no
# conversion pairs left to hide, and 8 float32 registers per tanh polynomial spilled. bert
# GELU ~0750 2.88 -> 2.63 ms at 2, ~4253 3.12 -> 2.97, other float16 graphs within 2%
# (2 threads, kernel alone, interleaved)
NATIVE_FP16_CHAIN_REGISTERS = 2


# narrow_transpose_bytes by the LLVM CPU name of the target, where the measurements differ from
# the default 16. The best width follows the shuffle units, which no feature flag shows: on a
# Xeon (AVX-512BW) 16-byte tiles won (above), on AMD Zen 5 (full-width 512-bit shuffles) 64:
# yolo ~1373 4.1 -> 3.8 and 5.1/6.1 -> 4.2/5.0 ms (three interleaved A/B runs), its x49-pattern
# sibling ~0080 2.07 -> 1.69, vgg ~3714 and eight other float16 transposes of the corpus within
# +-3% (2 threads, kernel alone, a 128 MiB buffer written between calls). Unlisted CPUs keep 16.
NARROW_TRANSPOSE_BYTES_BY_CPU = {"znver5": 64}


# The streaming-store policy by the LLVM CPU name of the target, where it differs from the
# defaults measured on a Xeon VM: there the dropout ~6619 (writes 1.3x its reads) ran 12-14%
# slower streamed, and a kernel mixing streamed and cached output lines ran slower than with
# plain stores alone (streaming ~6619's float32 half cost 5%). A write skips its write-allocate
# read when it streams, and on AMD Zen 5 (STREAM triad 99 GB/s streamed, 64 with plain stores)
# both rules cost time. Kernel alone, 2 threads, interleaved, 21 repeats:
# - stream_write_heavy: dropout ~6619 7.27 -> 4.40 ms and its half-size sibling 3.59 -> 2.17,
#   the cast ~3234 (2x) 4.35 -> 2.81, four PadAkg copies (1.01-1.04x) 22.2 -> 14.2, 10.9 -> 7.1,
#   6.1 -> 3.9, 3.0 -> 1.9 ms; the other three corpus kernels of that kind within 1%.
# - stream_share 0 (each qualifying store streams): bert layernorm ~4253 1.98 -> 1.69 ms, whose
#   output rows read back by the row sum cannot stream; Reshape_Mul_Cast ~4406 6.24 -> 5.21;
#   three yolo Mul -> Transpose kernels, whose transposed half cannot, within +-5% (noise here).
#   These five are every corpus kernel whose streamed stores the share changes.
# On AMD Zen 4 (EPYC VM, 2 threads, same harness, A/B of identical code within +-10% here):
# stream_write_heavy: cast ~3234 0.85x (two runs), dropout ~6619 1.01-1.05x; stream_share 0:
# ~4253 0.76-0.78x (two runs), the other streamed bench kernels within noise.
# On AMD Zen 3 (EPYC VM, AVX2, 2 threads, same harness; A/B of identical code there reads
# 0.89-1.10): stream_write_heavy, on the 10 corpus kernels it changes: the cast ~3234 0.45-0.74
# (five runs), four PadAkg copies 0.57-0.71 (two runs each), Reshape_Mul_Cast ~6517 0.71-0.95,
# three others 0.93-0.99; dropout ~6619 0.89-1.38 (seven runs, bimodal; its half-size sibling
# 0.93-0.96). stream_share 0 was not clearly better there (bert ~4253 0.74, two kernels 1.2-1.4).
# Unlisted CPUs keep the defaults.
_AMD_STREAMS = {"stream_write_heavy": True, "stream_share": 0.0}
# stream_read_heavy_min_bytes, in last-level caches (Zen 4 and Zen 3: measured there). The 56 corpus
# kernels that move 1-2 LLCs (32-64 MiB) and read at least what they write, kernel alone, 2
# threads, interleaved, 5 rounds: geomean 0.85x, 22 of them 0.43-0.88x (vgg's cast-transpose
# ~3714 0.66-0.76x, resnet/yolo elementwise 0.49-0.69x); 3191 (bert dropout, 36 MiB) 1.10-1.14x
# in three runs, other single readings over 1.1x not repeated. Streaming their half- and
# quarter-line stores too cost up to 3.7x (case3: 32-byte float16 stores of 16-lane vectors);
# write-heavy kernels of that size ran slower streamed (bert layernorms ~3896 1.69x, ~8077 1.46x).
# On Zen 3 (default stream_share there) the rule changes the generated code of 3 corpus kernels,
# no others. With the LLC flushed before each call (the bench's conditions: other code runs
# between) yolo ~4409 ran 0.76-0.87x, ~7129 0.91-0.93x, ~2243 0.91-0.94x (two runs); back to
# back, where inputs stay cached, 0.82x, 1.00x, 1.01x.
STREAM_READ_HEAVY_LLCS_BY_CPU = {"znver4": 1, "znver3": 1}
# Intel Emerald Rapids (a 2-vCPU KVM guest whose sysfs reports the socket's 300 MiB L3): the
# guest keeps far less of it than that across kernel calls. A producer and its consumer back to
# back (x * 2 + 1, then * 3; float32, 2 threads, medians of interleaved rounds) ran at 35 GB/s
# up to 8 MiB tensors and at 24 GB/s, DRAM's speed, from 16 MiB; streaming the producer's output
# made the pair 1.08x at 8 MB moved by the producer, 0.95x at 16, 0.72-0.80x from 32 MB to 512
# (the consumer reads from memory either way). A STREAM triad streamed ran 1.3-1.45x its plain
# stores' GB/s at every size from 18 MB. So streaming starts at STREAM_MIN_BYTES_EMR moved, not
# at twice the LLC (600 MiB: no corpus kernel), for write-heavy kernels too, each qualifying
# store. Corpus kernels, kernel alone, interleaved, back to back (their inputs cached), 9
# repeats, the 196 non-contraction graphs moving 4 MB or more that the sweep reached (of 271;
# every network of the corpus): the 82 whose code this changes ran 0.69x (geomean, 0.29-1.09x);
# 16-32 MB 0.73x (29 kernels), 32-64 MB 0.66x (22), 64 MB and more 0.67x (31). stream_share 0
# against 0.9 changes 5 of them: bert layernorm ~4253 3.36 -> 1.81 ms, the others within noise.
# Bench kernels (LLC flushed between calls): the optimizers ~1050 6.15 -> 3.81, ~2769
# 3.90 -> 2.00, ~6743 3.40 -> 1.95 ms, the cast ~3234 12.8 -> 5.0, the layernorms ~3896
# 3.13 -> 1.77 and ~8077 2.55 -> 1.12. Kernels moving 8-16 MB ran 0.78x streamed (31, 0.30-1.10x),
# but alone: their consumer then reads from memory, and the producer/consumer pair above ran
# 1.08x at 8 MB moved, 0.95x at 16, so the bound stays at 16.
STREAM_MIN_BYTES_EMR = 16 << 20
STREAM_POLICY_BY_CPU = {"znver5": _AMD_STREAMS, "znver4": _AMD_STREAMS, "znver3": {"stream_write_heavy": True},
                        "emeraldrapids": {**_AMD_STREAMS, "stream_min_bytes": STREAM_MIN_BYTES_EMR}}


def _mcpu(tgt) -> str:
    return str(tgt.attrs.get("mcpu", "") or "") if tgt is not None else ""


def _narrow_transpose_bytes(tgt) -> int:
    return NARROW_TRANSPOSE_BYTES_BY_CPU.get(_mcpu(tgt), 16)


def default_config(target=None) -> ScheduleConfig:
    """The default knobs for a target: vector width from the host CPU's features, streaming
    threshold twice its LLC (or the CPU's measured one), software prefetch on, fewer chain
    registers where float16 is native, the narrow-transpose width and the streaming policy by
    CPU name (NARROW_TRANSPOSE_BYTES_BY_CPU, STREAM_POLICY_BY_CPU).
    A bare ScheduleConfig() has prefetch off and 4 chain registers."""
    try:
        from ..targets.llvm import (has_fp16_arithmetic, host_l2_bytes, host_llc_bytes, host_vector_bytes,
                                    resolve)
        vector_bytes = host_vector_bytes()
    except Exception:  # no LLVM: generic defaults
        return ScheduleConfig()
    try:
        tgt = resolve(target)  # the target built for, not the host
        native_fp16 = has_fp16_arithmetic(tgt)
    except Exception:  # a target llvm.build will reject with its own error
        tgt, native_fp16 = None, False
    chains = NATIVE_FP16_CHAIN_REGISTERS if native_fp16 else ScheduleConfig.chain_registers
    llc, mcpu = host_llc_bytes()[0], _mcpu(tgt)
    streams = {"stream_min_bytes": 2 * llc, **STREAM_POLICY_BY_CPU.get(mcpu, {})}
    return ScheduleConfig(vector_bytes=vector_bytes,
                          stream_read_heavy_min_bytes=STREAM_READ_HEAVY_LLCS_BY_CPU.get(mcpu, 0) * llc,
                          l2_bytes=host_l2_bytes(), llc_bytes=llc, narrow_transpose_bytes=_narrow_transpose_bytes(tgt),
                          prefetch_bytes=PREFETCH_BYTES, chain_registers=chains, **streams)

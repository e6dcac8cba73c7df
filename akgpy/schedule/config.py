"""The schedule choices, in one object a tuner can search. Choices only: the hardware's facts
(vector width, cache sizes, threads) come from the akgpy.Target compiled for, and each
backend picks the default choices for its target (`Backend.default_config`).

Every schedule (plain, poly) reads only these fields and the Target's facts; two configs that differ in a field that
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


def _f(default, domain, doc: str = ""):
    """A field with its domain (and a one-line doc for the JSON Schema)."""
    return field(default=default, metadata={"domain": domain, "doc": doc})


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
    tile_i: int = _f(8, Range(1, 32), "contraction register tile: the most rows (schedule/plain.register_tile)")
    tile_j_vectors: int = _f(3, Range(1, 16), "contraction register tile: the most columns, in vectors")
    min_parallel: int = _f(2, Range(1, 1024, log=True), "a fused outer loop shorter than this runs serially")
    # akgpy's runtime allocates outputs whole-cache-line aligned (streaming stores need it); a
    # framework's buffers are aligned as it pleases, and a self-contained kernel copies through a
    # temporary any output less aligned than it assumes (docs/kernel_meta.md)
    output_align: int = _f(64, Choices((0, 64)), "bytes of alignment a kernel assumes of its outputs; 0: their "
                           "dtype's (no streaming stores)")
    parallel: bool = _f(True, BOOL, "use the thread pool at all")
    unroll: bool = _f(True, BOOL, "unroll the contraction's row tile")
    # poly schedule only
    min_parallel_work: int = _f(4096, Range(1, 1 << 24, log=True),
                                "statement instances in a nest before it uses threads")
    tile: tuple[int, ...] = _f((), Sequence(Range(1, 1 << 16, log=True), 16),
                               "tile sizes for fused bands; () = cache model, only where it helps")
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
    # vector registers per op for an elementwise statement that rounds to float16 after many ops:
    # each rounding is a conversion pair with long latency, so more independent lanes in flight
    chain_registers: int = _f(4, Range(1, 16),
                              "targets/cpu/defaults: NATIVE_FP16_CHAIN_REGISTERS where float16 ops are native")
    # float32 vector registers per op for vector math (te/fastmath.py's exp/log/tanh; each element
    # is a chain of ~40 dependent ops, and with one register per op too few chains fit the core's
    # out-of-order window): an elementwise statement's vector (schedule/kept.WIDE_MATH_INSTANCES
    # instances or more), and the most registers one step of a row sum's partials covers
    math_registers: int = _f(4, Range(1, 16))
    # the most float32 registers of vector math one step of a sum's partials covers when they
    # also sum over other reduced axes (a full sum): their lanes are added up once, not per row
    sum_math_registers: int = _f(8, Range(1, 32))
    # a kernel moving at least this many bytes writes its large outputs with non-temporal stores
    # (no write-allocate read); 0 = never. targets/cpu/defaults: twice the target's last-level cache, or
    # the CPU's measured threshold (STREAM_POLICY_BY_CPU)
    stream_min_bytes: int = _f(64 << 20, Range(0, _BYTES, log=True))
    # a kernel that reads at least what it writes streams from this many bytes moved (below
    # stream_min_bytes, and only its stores of whole cache lines); 0 = no such kernels apart.
    # targets/cpu/defaults: a number of the target's last-level caches by CPU (STREAM_READ_HEAVY_LLCS_BY_CPU)
    stream_read_heavy_min_bytes: int = _f(0, Range(0, _BYTES, log=True))
    # whether a kernel that writes more bytes than it reads streams too (see STREAM_POLICY_BY_CPU)
    stream_write_heavy: bool = _f(False, BOOL)
    # the share of a kernel's candidate output bytes that whole-line stores must write for any of
    # them to stream (0: each qualifying store streams); targets/cpu/defaults: STREAM_POLICY_BY_CPU
    stream_share: float = _f(0.9, Range(0.0, 1.0, integer=False))
    # register width of an in-register transpose of elements narrower than 32 bits; 0 = the target's
    # vector_bytes.
    # targets/cpu/defaults: 16. AVX2 has no 16-bit permute across the two halves of a register (vpermw
    # is AVX-512BW): a 16-lane float16 tile of 9 rows took ~16 shuffles per output register, and
    # yolo ~1373's seven [1024, 3, 3, 512] transposes ran 11.5 ms at 32 bytes, 10.0 ms at 16 (one
    # xmm, where vpshufb reaches every lane), 29 ms at 8 (2 threads, Zen 3). With AVX-512BW too
    # the xmm tiles win: 6.8 ms at 16 bytes, 8.2 at 32, 8.7 at 64 (2 threads, Xeon, 64-byte vectors)
    narrow_transpose_bytes: int = _f(0, Choices((0, 8, 16, 32, 64)))
    # software prefetch this many bytes ahead of each stride-1 vector read of a kernel argument
    # (akgpy/targets/prefetch.py); 0 = none. targets/cpu/defaults: PREFETCH_BYTES
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

"""Which outputs a kernel writes with streaming (non-temporal) stores, and how far ahead it
prefetches its reads: CPU decisions the backend marks in `prepare` (targets/cpu/backend.py),
realised by the CPU TIR passes (targets/cpu/stream_stores.py, targets/cpu/prefetch.py). The
marks' PrimFunc attribute names live here.

Streaming pays when the output would not stay in cache for its next reader anyway: the kernel
moves at least `ScheduleConfig.stream_min_bytes` (default: twice the host's last-level cache,
or a CPU's measured threshold: a VM guest keeps little of a large shared L3),
and the output itself is at least `MIN_OUTPUT` (a few stores into a small output gain nothing).
A kernel whose data fits in cache keeps plain stores: its output is still cached for the next
kernel. Whether a kernel that writes more bytes than it reads streams depends on the CPU
(`ScheduleConfig.stream_write_heavy`, `defaults.STREAM_POLICY_BY_CPU`): on a Xeon VM the
dropout ~6619 (writes 1.3x its reads) ran 12-14% slower with streamed outputs at either vector
width, and the cast ~3234 (2x) gained only 4-7%; on AMD Zen 5 both ran 35-40% faster.
Measured with a threshold of one LLC, bert's layernorm ~3896 (47 MB, LLC 32 MiB) went
from 1.33 to 2.39 ms: repeated, much of its data stays cached, and streamed output lines skip
that. At 75 MB and above, of the bench kernels that read at least what they write, none got
slower and seven got 13-29% faster. Where the CPU's policy asks for it
(`ScheduleConfig.stream_read_heavy_min_bytes`), a kernel that reads at least what it writes
streams from one LLC, below `stream_min_bytes` only its stores of whole lines (`WHOLE_ATTR`):
on Zen 4 the read-heavy corpus kernels moving 1-2 LLCs ran 0.85x (geomean of 56), where half-line
float16 stores streamed too one ran 3.7x slower (defaults.STREAM_READ_HEAVY_LLCS_BY_CPU).
"""
from __future__ import annotations

from math import prod

import tvm_ffi
from tvm import tirx

from ...dtypes import to_numpy
from ...schedule.config import ScheduleConfig
from ...te.abi import OUTPUT_ALIGN
from ...te.lower import Lowered

ATTR = "akgpy.stream_outputs"  # PrimFunc attr: {buffer data name: [output tensor, bytes]}
PREFETCH_ATTR = "akgpy.prefetch_bytes"  # PrimFunc attr: software prefetch distance in bytes
SHARE_ATTR = "akgpy.stream_share"  # PrimFunc attr: ScheduleConfig.stream_share
WHOLE_ATTR = "akgpy.stream_whole_lines"  # PrimFunc attr: only vector stores of whole lines stream
MIN_OUTPUT = 1 << 20
# By default stream only when (nearly) all output bytes can: on a Xeon VM a kernel mixing
# streamed and cached output lines ran slower than with plain stores alone (dropout ~6619,
# measured while its float16 half-line stores could not stream: streaming the float32 half cost
# 5%). A function marked without SHARE_ATTR uses this; per CPU: defaults.STREAM_POLICY_BY_CPU.
STREAM_SHARE = ScheduleConfig.stream_share


def _bytes(p) -> int:
    return prod(p.shape) * to_numpy(p.dtype).itemsize


def _views(func, outputs: dict) -> dict:
    """Buffers declared over the same memory as an output (the code generator's flat views of
    kernel arguments), with that output's entry: stores through them are stores into it."""
    views = {}
    tvm_ffi.structural_walk(func.body, [(tirx.DeclBuffer, lambda d: views.__setitem__(
        str(d.buffer.data), outputs[str(d.data)]) if str(d.data) in outputs else None)])
    return views


def stream_candidates(low: Lowered, cfg: ScheduleConfig) -> tuple[list, bool, str]:
    """(the kernel's output params that stream where their stores fill whole lines, whether
    only stores of whole lines may (a read-heavy kernel below stream_min_bytes), and when there
    are none, why)."""
    moved = sum(_bytes(p) for p in low.params)
    # only arrays the runtime allocates start on a line; in-place targets are the caller's memory
    outputs = [p for p in low.params if p.kind != "input" and p.align >= OUTPUT_ALIGN and _bytes(p) >= MIN_OUTPUT]
    written = sum(_bytes(p) for p in outputs)
    read = sum(_bytes(p) for p in low.params if p.kind != "output")
    low_bar = cfg.stream_read_heavy_min_bytes if written <= read else 0
    whole_only = bool(low_bar) and low_bar <= moved < cfg.stream_min_bytes
    if not whole_only and (not cfg.stream_min_bytes or moved < cfg.stream_min_bytes):
        return [], False, ("off" if not cfg.stream_min_bytes
                           else f"kernel moves {moved >> 20} MiB < {cfg.stream_min_bytes >> 20} MiB"
                           + (f" (< {low_bar >> 20} MiB reading at least what it writes)" if low_bar else ""))
    if not outputs:
        return [], False, "no output of at least 1 MiB"
    if written > read and not cfg.stream_write_heavy:
        return [], False, (f"the kernel writes more than it reads: {written >> 20} MiB against {read >> 20} MiB, "
                           "and stream_write_heavy is off")
    return outputs, whole_only, ""


def mark_stream_outputs(mod, low: Lowered, cfg: ScheduleConfig):
    """(mod with the outputs to stream in its function's `ATTR`, a one-line note for explain)."""
    chosen, whole_only, why = stream_candidates(low, cfg)
    if not chosen:
        return mod, f"streaming stores: none ({why})"
    (gv, func), = list(mod.functions_items())
    chosen_ids = {id(p) for p in chosen}
    outputs = {str(v.data): [p.tensor, _bytes(p)] for v, p in zip(func.params, low.params) if id(p) in chosen_ids}
    moved = sum(_bytes(p) for p in low.params)
    func = func.with_attr(ATTR, {**outputs, **_views(func, outputs)}).with_attr(SHARE_ATTR, float(cfg.stream_share))
    if whole_only:
        func = func.with_attr(WHOLE_ATTR, True)
    mod = mod.__class__({gv: func})
    one, stores = (("store of whole lines", "stores of whole lines") if whole_only
                   else ("store that fills whole lines", "stores that fill whole lines"))
    when = (f"when {stores} write at least {cfg.stream_share:.0%} of their bytes"
            if cfg.stream_share else f"each {one}")
    bar = (f"{cfg.stream_read_heavy_min_bytes >> 20} MiB, reading at least what it writes" if whole_only
           else f"{cfg.stream_min_bytes >> 20} MiB")
    return mod, (f"streaming stores: candidates {', '.join(t for t, _ in outputs.values())} (kernel moves "
                 f"{moved >> 20} MiB >= {bar}); code generation streams {when}, into outputs not read back")


def mark_prefetch(mod, cfg: ScheduleConfig):
    """(mod asking code generation for software prefetch `cfg.prefetch_bytes` ahead, a note for
    explain). A hint to code generation (targets/cpu/prefetch.py), like the streaming stores."""
    if not cfg.prefetch_bytes:
        return mod, "software prefetch: none (off)"
    mod = mod.__class__({gv: f.with_attr(PREFETCH_ATTR, cfg.prefetch_bytes) for gv, f in mod.functions_items()})
    return mod, (f"software prefetch: {cfg.prefetch_bytes} bytes ahead of each stride-1 vector read of a "
                 "kernel argument, along the innermost loop that moves it, where code generation finds "
                 "one that qualifies (targets/cpu/prefetch.py)")

"""Per corpus graph and isl search variant: the isl operations counted and the time spent.

    python bench/isl_budget.py [--limit N] [--cap S] [--out bench/results/isl_budget.jsonl]

The data behind the operation budgets of poly/scheduler.py (docs/poly.md, "isl's bounds").
Each graph compiles in a forked worker; every isl search akgpy's poly schedule starts is
intercepted and each variant (full: constant shifts bounded by the largest extent; no constant
shifts; each SCC on its own) runs in a worker of its own, with no operation budget and a CPU
time cap (`--cap`), recording operations (read from the isl_ctx: islpy has no getter), CPU and
wall seconds. `today` is the variant the wall-clock rule of 2.5 s, then 2.0 s, picks on an
idle machine (judged by CPU time). Raw rows, one per isl call, go to a JSON-lines file.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_compile import CORPUS, corpus_files  # noqa: E402

# offsets of `operations` / `max_operations` in islpy 2026.2.2's struct isl_ctx, read from the
# disassembly of isl_ctx_reset_operations / isl_ctx_get_max_operations
OPS_OFF, MAX_OFF = 0x1D0, 0x1D8
VARIANTS = ("full", "no-shifts", "serialized")
FEATURES_ONLY = False  # --features: model counts only, no search measured


def _peek(addr: int) -> int:
    with open("/proc/self/mem", "rb", buffering=0) as f:  # EIO, not a crash, on a bad address
        f.seek(addr)
        return struct.unpack("<Q", f.read(8))[0]


def ctx_pointer(ctx) -> int:
    """The isl_ctx* inside islpy's Context: the word of the Python object that points at a
    struct whose max_operations is a sentinel just set."""
    sentinel, old = 0x5A5A_1234_ABCD, ctx.get_max_operations()
    ctx.set_max_operations(sentinel)
    try:
        raw = ctypes.string_at(id(ctx), 64)
        for k in range(0, 64, 8):
            p = struct.unpack_from("<Q", raw, k)[0]
            try:
                if p > 4096 and _peek(p + MAX_OFF) == sentinel:
                    return p
            except (OSError, OverflowError, struct.error):
                pass
    finally:
        ctx.set_max_operations(old)
    raise RuntimeError("isl_ctx pointer not found (islpy layout changed?)")


def mixed_dependences(deps) -> int:
    """Validity maps with an equality tying an input and an output dim with a coefficient other
    than 0 and +-1 (S[i, j] -> T[13i + j]: a Reshape or interleaved partials)."""
    import islpy as isl
    from akgpy.poly.isl_util import maps_of
    n = 0
    for m in maps_of(deps.validity):
        hit = False
        for bm in m.get_basic_maps():
            for c in bm.get_constraints():
                if not c.is_equality():
                    continue
                co = [abs(int(c.get_coefficient_val(t, i).to_python()))
                      for t in (isl.dim_type.in_, isl.dim_type.out) for i in range(m.dim(t))]
                if any(x > 1 for x in co):
                    hit = True
        n += hit
    return n


def mixed_coefficients(deps) -> list[list[int]]:
    """Per mixed validity map (as `mixed_dependences` counts them): the absolute values of the
    coefficients above 1 in its equalities."""
    import islpy as isl
    from akgpy.poly.isl_util import maps_of
    out = []
    for m in maps_of(deps.validity):
        big = set()
        for bm in m.get_basic_maps():
            for c in bm.get_constraints():
                if c.is_equality():
                    big |= {abs(int(c.get_coefficient_val(t, i).to_python()))
                            for t in (isl.dim_type.in_, isl.dim_type.out) for i in range(m.dim(t))} - {0, 1}
        if big:
            out.append(sorted(big))
    return out


def run_variant(model, deps, options, input_reuse, cap_s):
    """One search in a forked child with an RLIMIT_CPU cap: (ok, operations, cpu_s, wall_s, note)."""
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (int(cap_s) + 1, int(cap_s) + 1))
            from akgpy.poly import scheduler
            ptr, seen = ctx_pointer(model.ctx), {}
            real = scheduler.operation_budget

            class Budget:  # the scheduler's own budget, its count read before it is reset
                def __init__(self, ctx, max_operations, what):
                    self.inner = real(ctx, 1 << 62, what)

                def __enter__(self):
                    return self.inner.__enter__()

                def __exit__(self, *exc):
                    seen["ops"] = _peek(ptr + OPS_OFF)
                    return self.inner.__exit__(*exc)
            scheduler.operation_budget = Budget
            c0 = time.process_time()
            note = ""
            try:
                scheduler.compute_schedule(model, deps, options=options, input_reuse=input_reuse)
                ok = True
            except Exception as e:  # noqa: BLE001
                ok, note = False, f"{type(e).__name__}: {e}"[:200]
            out = json.dumps([ok, seen.get("ops", -1), time.process_time() - c0, note]).encode()
            os.write(w, out)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    wall = time.perf_counter() - t0
    if not data:
        return False, -1, cap_s, wall, f"killed at the {cap_s} s CPU cap"
    ok, ops, cpu, note = json.loads(data)
    return ok, ops, cpu, wall, note


def measure_graph(path: Path, cap_s: float) -> list[dict]:
    """Compile `path` (today's code), measuring every isl search it starts."""
    import akgpy
    import akgpy.schedule.poly as sp
    from akgpy.targets import llvm
    from akgpy.poly.isl_util import schedule_from_text
    from akgpy.poly import schedule_text
    rows: list[dict] = []

    def measured(model, deps, *, timeout_s, options=None, input_reuse=True, **kw):
        if options and "schedule_serialize_sccs" not in options and options.get("schedule_max_constant_term"):
            biggest = options["schedule_max_constant_term"]
            variants = [{"schedule_max_constant_term": biggest}, {"schedule_max_constant_term": 0},
                        {"schedule_max_constant_term": biggest, "schedule_serialize_sccs": 1}]
            row = {"graph": str(path.relative_to(CORPUS)), "call": len(rows),
                   "statements": len(model.statements), "validity_maps": len(list_maps(deps.validity)),
                   "mixed_deps": mixed_dependences(deps), "mixed_coefficients": mixed_coefficients(deps),
                   "biggest": biggest}
            if FEATURES_ONLY:
                rows.append(row)
                return schedule_from_text(model.ctx, schedule_text(model, deps, 1 << 62,
                                                                   {"schedule_max_constant_term": 0}, input_reuse))
            for name, opts in zip(VARIANTS, variants):
                ok, ops, cpu, wall, note = run_variant(model, deps, opts, input_reuse, cap_s)
                row[name] = {"ok": ok, "ops": ops, "cpu_s": round(cpu, 4), "wall_s": round(wall, 4), "note": note}
            today = next((n for n, b in zip(VARIANTS, (2.5, 2.0, 2.0))
                          if row[n]["ok"] and row[n]["cpu_s"] < b), "plain")
            row["today"] = today
            rows.append(row)
            if today != "plain":
                opts = variants[VARIANTS.index(today)]
                return schedule_from_text(model.ctx, schedule_text(model, deps, 1 << 62, opts, input_reuse))
            raise TimeoutError("every variant over today's bounds")
        return real(model, deps, timeout_s=timeout_s, options=options, input_reuse=input_reuse, **kw)

    def list_maps(um):
        from akgpy.poly.isl_util import maps_of
        return maps_of(um)
    class Stop(BaseException):  # scheduling done: LLVM's build is not measured
        pass

    def stop(*args, **kwargs):
        raise Stop
    real = sp.compute_schedule_bounded
    sp.compute_schedule_bounded = measured
    llvm.build = stop
    try:
        akgpy.fuse(akgpy.load_composite(path))
    except Stop:
        pass
    except akgpy.AkgpyError as e:
        rows.append({"graph": str(path.relative_to(CORPUS)), "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def in_worker(path: Path, cap_s: float, timeout_s: float) -> list[dict]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            try:
                out = measure_graph(path, cap_s)
            except BaseException as e:  # noqa: BLE001
                out = [{"graph": str(path.relative_to(CORPUS)), "error": f"{type(e).__name__}: {e}"[:300]}]
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline, data = time.monotonic() + timeout_s, b""
    import select
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            os.kill(pid, 9)
            data = json.dumps([{"graph": str(path.relative_to(CORPUS)), "error": f"worker timeout {timeout_s} s"}]).encode()
            break
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--cap", type=float, default=20.0, help="CPU seconds per isl search")
    ap.add_argument("--out", type=Path, default=Path("bench/results/isl_budget.jsonl"))
    ap.add_argument("--features", action="store_true", help="model counts only (no search measured)")
    ap.add_argument("--only", nargs="*", default=None, help="graph paths (relative to corpus/) to run")
    args = ap.parse_args(argv)
    global FEATURES_ONLY
    FEATURES_ONLY = args.features
    # imported once, before the workers fork (each would spend seconds importing TVM)
    import akgpy.pipeline, akgpy.runtime.program, akgpy.schedule.poly, akgpy.te.lower  # noqa: F401, E401
    files = corpus_files(CORPUS)[args.start:]
    if args.only:
        files = [CORPUS / f for f in args.only]
    if args.limit:
        files = files[:args.limit]
    with args.out.open("a") as out:
        for i, f in enumerate(files):
            for row in in_worker(f, args.cap, 4 * args.cap + 120):
                out.write(json.dumps(row) + "\n")
                out.flush()
            print(f"[{args.start + i + 1}] {f.name}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The campaign's isolation and bookkeeping: one forked child per case, its verdict sent back
through a pipe; a signal is a crash and no answer within the time limit a hang. Results go to an
append-only JSONL keyed by case id, so `--resume` skips the cases already done."""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

CLASSES = ("clean", "correct", "crash", "hang", "wrong", "bare")
LABELS = {"clean": "clean errors", "correct": "correct results", "crash": "crashes", "hang": "hangs",
          "wrong": "wrong results", "bare": "bare exceptions"}
DEFECTS = ("crash", "hang", "wrong", "bare")
MEMORY_LIMIT = 8 << 30  # address space per case: a runaway compile is a finding, not the machine's OOM


def case_id(seed: int, index: int) -> str:
    return f"{seed}:{index}"


def warm_up() -> None:
    """Import what every case needs once, in the server, so each forked child starts warm. Nothing
    runs a kernel here: TVM's thread pool must not exist before a fork."""
    import numpy  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401
    import tvm  # noqa: F401

    import akgpy
    import akgpy.pipeline  # noqa: F401
    g = akgpy.GraphBuilder("warm")
    x = g.input("x", (4, 8))
    g.output(x * 2.0 + 1.0)
    akgpy.fuse(g.build())  # loads the schedule, isl and LLVM code paths; not called
    from . import cases, onnx_cases  # noqa: F401
    cases.corpus_files()
    sys.path.insert(0, str(cases.REPO / "tests"))
    import test_property_layout  # noqa: F401  (the random-graph strategy)


def _classify_exception(e: BaseException, stage: str) -> tuple[str, str]:
    from akgpy.errors import AkgpyError
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
    text = f"{stage}: {type(e).__name__}: {e}"[:600]
    if isinstance(e, AkgpyError) and str(e).strip():
        return "clean", text
    return "bare", text + at


def run_in_process(seed: int, index: int, out: Path) -> dict:
    """Generate case (seed, index), run it here and classify what happened."""
    import warnings

    import numpy as np

    from .cases import Context, generator_for
    gen = generator_for(index)
    ctx = Context(seed, index, gen.name, out)
    warnings.simplefilter("ignore")
    try:
        with np.errstate(all="ignore"):
            verdict, detail = gen.fn(ctx)
        if verdict == "correct" and ctx.must_fail:
            verdict, detail = "wrong", f"accepted bad input: {detail}"
    except BaseException as e:  # every exception is a verdict (SystemExit too): classify it
        verdict, detail = _classify_exception(e, ctx.stage)
        if verdict == "clean" and ctx.must_succeed:
            verdict, detail = "wrong", f"refused valid input: {detail}"
    return {"class": verdict, "detail": detail, "describe": ctx.describe}


def _child(seed: int, index: int, out: Path, wfd: int) -> None:
    os.setpgid(0, 0)  # the parent kills the whole group on a hang (isl workers included)
    log = os.open(out / "logs" / f"{seed}-{index}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    import faulthandler
    faulthandler.enable()  # a fatal signal's Python stack goes to the case's log, not the server's terminal
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    res = run_in_process(seed, index, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(wfd, json.dumps(res).encode())
    os.close(wfd)


def run_forked(seed: int, index: int, out: Path, timeout: float) -> dict:
    """Run one case in a forked child: its verdict, or a crash (signal, exit) or hang (timeout)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            _child(seed, index, out, w)
        except BaseException:
            code = 70
        os._exit(code)
    os.close(w)
    buf, deadline, hung = b"", time.monotonic() + timeout, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            hung = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            buf += chunk
    os.close(r)
    if hung:
        for target in (-pid, pid):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _, status = os.waitpid(pid, 0)
    log = out / "logs" / f"{seed}-{index}.log"
    text = " | ".join(ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()) \
        if log.exists() else ""
    tail = text if len(text) < 500 else f"{text[:300]} ... {text[-200:]}"
    if hung:
        return {"class": "hang", "detail": f"no answer in {timeout:.0f} s; log: {tail[-200:]}"}
    if buf:
        try:
            res = json.loads(buf)
            log.unlink(missing_ok=True)
            return res
        except json.JSONDecodeError:
            pass
    why = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) \
        else f"exit status {os.WEXITSTATUS(status)}"
    return {"class": "crash", "detail": f"{why}; log: {tail}"}


def load_results(path: Path) -> dict[str, dict]:
    rows = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a killed run: that case runs again
            rows[row["id"]] = row
    return rows


def finish_repro(out: Path, row: dict) -> None:
    """Keep the repro the child wrote (composite JSON or ONNX + call) for a defect; drop it otherwise."""
    stem = out / "repros" / f"{row['seed']}-{row['index']}"
    files = [p for p in (stem.with_suffix(".json"), stem.with_suffix(".onnx")) if p.exists()]
    if row["class"] not in DEFECTS:
        for p in files:
            p.unlink()
        return
    jp = stem.with_suffix(".json")
    repro = json.loads(jp.read_text()) if jp.exists() else {"case": row["id"], "generator": row["generator"]}
    repro.update({k: row[k] for k in ("class", "detail")})
    repro["rerun"] = f"python -m bench.fuzz --case {row['id']}"
    jp.write_text(json.dumps(repro, indent=1))


def campaign(indices, seed: int, out: Path, *, resume: bool, timeout: float, progress=True) -> dict[str, dict]:
    """Run the cases (seed, i) for i in `indices` not yet in out/results.jsonl; return every row."""
    from .cases import generator_for
    for sub in ("repros", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    path = out / "results.jsonl"
    if not resume and path.exists():
        path.unlink()
    done = load_results(path)
    warm_up()
    with path.open("a") as f:
        for index in indices:
            cid = case_id(seed, index)
            if cid in done:
                continue
            t0 = time.monotonic()
            res = run_forked(seed, index, out, timeout)
            if "describe" not in res:  # the child died: its repro says what the case was
                repro = out / "repros" / f"{seed}-{index}.json"
                res["describe"] = json.loads(repro.read_text()).get("describe", "") if repro.exists() else ""
            row = {"id": cid, "seed": seed, "index": index, "generator": generator_for(index).name,
                   "seconds": round(time.monotonic() - t0, 2), **res}
            finish_repro(out, row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            done[cid] = row
            if progress and row["class"] in DEFECTS:
                print(f"{row['class']:7} {cid:>9} {row['generator']:16} {row.get('describe', '')[:80]} | "
                      f"{row['detail'][:200]}", flush=True)
    return done


def _signature(detail: str) -> str:
    """A defect's detail without its numbers and addresses: cases that fail alike group together."""
    import re
    return re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?(e[-+]?\d+)?", "#", detail.split("; log:")[0])[:80]


def summary(rows) -> str:
    rows = list(rows)
    total = Counter(r["class"] for r in rows)
    lines = [f"{len(rows)} attempts: " + ", ".join(f"{total[c]} {LABELS[c]}" for c in CLASSES)]
    per = defaultdict(Counter)
    for r in rows:
        per[r["generator"]][r["class"]] += 1
    head = f"  {'generator':18}" + "".join(f"{c:>8}" for c in CLASSES) + "   seconds"
    lines.append(head)
    secs = defaultdict(float)
    for r in rows:
        secs[r["generator"]] += r.get("seconds", 0.0)
    for name in sorted(per):
        lines.append(f"  {name:18}" + "".join(f"{per[name][c]:8}" for c in CLASSES) + f"{secs[name]:10.1f}")
    groups = defaultdict(list)
    for r in rows:
        if r["class"] in DEFECTS:
            groups[(r["class"], r["generator"], _signature(r["detail"]))].append(r)
    if groups:
        lines.append("defects, grouped by what they say (count, class, generator: first case | detail):")
        for (cls, gen, _), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], -len(kv[1]))):
            r = min(rs, key=lambda r: r["index"])
            others = " ".join(x["id"] for x in sorted(rs, key=lambda r: r["index"])[1:4])
            detail = " ".join(r["detail"].split())[:200]
            lines.append(f"  {len(rs):4} {cls:6} {gen}: {r['id']} {r.get('describe', '')[:90]} | {detail}"
                         + (f" (also {others}{' ...' if len(rs) > 4 else ''})" if others else ""))
    slow = sorted(rows, key=lambda r: -r.get("seconds", 0))[:5]
    lines.append("slowest: " + ", ".join(f"{r['id']} {r['generator']} {r['seconds']:.1f}s" for r in slow))
    return "\n".join(lines)

"""`akgpy-tune`: tune kernels from the command line (docs/tuning.md).

    akgpy-tune [options] INPUT...          tune every kernel of the inputs
    akgpy-tune cache ls|show|clear|export|import|verify ...

An INPUT is a composite JSON file, a directory (its *.json and *.onnx files, recursively) or an
ONNX model, whose fused kernel groups are tuned one by one (identical groups once). Every input
is loaded before tuning starts, so a bad file fails in the first second, not after an hour.
Exit status: 0 all tuned, 1 some kernel failed, 2 bad usage or input, 130 interrupted (Ctrl-C:
the kernels that finished keep their cache records, and the report covers them).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import AkgpyError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

EXAMPLES = """\
examples:
  akgpy-tune layernorm.json                          tune one composite graph (64 trials)
  akgpy-tune --trials 200 --time-budget 60 graphs/   every *.json / *.onnx under graphs/
  akgpy-tune bert.onnx --report tune.html            each fused group of a model, HTML report
  akgpy-tune g.json --target '{"kind": "llvm", "mcpu": "haswell"}' --report r.md
  akgpy-tune g.json --export-schedules schedules/    write reviewable records to ship
  akgpy-tune g.json --ray 10.0.0.1:6379              builds and measurements on a Ray cluster
  akgpy-tune cache ls                                what the cache holds (see: akgpy-tune cache -h)

inputs: composite JSON files, directories of them (*.json and *.onnx, recursively), ONNX models.
--target: host (default), a CPU name (haswell), a JSON target dict, or a TVM target string.
exit status: 0 all tuned, 1 a kernel failed, 2 bad usage or input, 130 interrupted (Ctrl-C keeps
the records of the kernels that finished and writes the report for them).
"""


class UsageError(AkgpyError):
    """Bad command-line input: exit status 2 with the message."""


@dataclass(frozen=True)
class Kernel:
    """One graph to tune and where it came from."""
    name: str
    source: str
    graph: object  # akgpy Graph


# -- inputs ------------------------------------------------------------------------------------

def collect(inputs) -> list[Kernel]:
    """Every kernel of the inputs, loaded now; identical graphs (by structural hash) once."""
    from ..graph import structural_hash

    paths: list[Path] = []
    for s in inputs:
        p = Path(s)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.suffix.lower() in (".json", ".onnx") and q.is_file())
            if not found:
                raise UsageError(f"{s}: directory has no *.json or *.onnx file")
            paths += found
        elif p.is_file():
            paths.append(p)
        else:
            raise UsageError(f"{s}: no such file or directory")
    kernels, seen = [], set()
    for p in paths:
        for k in _load(p):
            h = structural_hash(k.graph)
            if h not in seen:
                seen.add(h)
                kernels.append(k)
    return kernels


def _load(path: Path) -> list[Kernel]:
    if path.suffix.lower() == ".onnx":
        return _load_onnx(path)
    from ..frontends.composite import load_composite
    try:
        graph = load_composite(path)
    except AkgpyError as e:
        raise UsageError(f"{path}: not a composite graph akgpy can tune: {e}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read: {e}") from e
    if graph.kind == "model":  # a model graph written as composite JSON: its groups are the kernels
        return _groups(graph, path)
    return [Kernel(path.stem, str(path), graph)]


def _load_onnx(path: Path) -> list[Kernel]:
    from .. import from_onnx
    try:
        graph = from_onnx(str(path))
    except ImportError as e:
        raise UsageError(f"{path}: reading ONNX models needs the onnx package: pip install 'akgpy[onnx]'") from e
    except AkgpyError as e:
        raise UsageError(f"{path}: not an ONNX model akgpy can tune: {e}") from e
    except Exception as e:  # noqa: BLE001 - onnx raises its own types for a corrupt file
        raise UsageError(f"{path}: cannot read as an ONNX model: {type(e).__name__}: {e}") from e
    return _groups(graph, path)


def _groups(graph, path: Path) -> list[Kernel]:
    from ..fusion import partition
    part = partition(graph)
    return [Kernel(f"{path.stem}/{grp.name}", str(path), part.subgraph(grp))
            for grp in part.groups if grp.kind == "kernel"]


def parse_target(text: str | None):
    """--target as resolve_target's input: host names, a CPU name, a JSON dict or a TVM string."""
    from ..target import resolve_target
    if text is None:
        spec = None
    elif text.lstrip().startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"--target: not valid JSON: {e}") from e
    elif " " in text.strip() or text.startswith("-"):
        import tvm
        try:
            spec = tvm.target.Target(text)
        except Exception as e:  # noqa: BLE001 - TVM's parser error
            raise UsageError(f"--target {text!r}: TVM cannot parse it: {e}") from e
    elif text in ("llvm", "host", "cpu") or text in ("cuda", "ascend"):
        spec = text
    else:
        spec = {"kind": "llvm", "mcpu": text}
    try:
        return resolve_target(spec)
    except AkgpyError as e:
        raise UsageError(f"--target {text!r}: {e}") from e


# -- tuning ------------------------------------------------------------------------------------

class _Interrupt:
    """SIGINT raises KeyboardInterrupt as usual and is remembered: tune() may catch it and
    return what finished, and the CLI must still stop after that kernel."""

    def __init__(self):
        self.fired = False
        self._old = None

    def __enter__(self):
        def handler(signum, frame):
            self.fired = True
            raise KeyboardInterrupt
        self._old = signal.signal(signal.SIGINT, handler)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._old)


def _result_to_report(kernel: Kernel, res, graph_hash: str):
    """A TuneResult (tune/tuner.py) as the report's plain record; illegal points were never built
    or timed, so they are no trials of the plot."""
    from .report import KernelResult
    trials = [t for t in res.trials if t.status != "illegal"]
    changed = {}
    if res.best_config is not None and res.trials:
        default, best = res.trials[0].config, res.best_config.to_json()
        changed = {k: v for k, v in best.items() if default.get(k) != v}
    return KernelResult(kernel.name, kernel.source, graph_hash, "interrupted" if res.interrupted else "tuned",
                        res.default_time_s, res.best_time_s, tuple((t.time_s, t.status) for t in trials), changed)


class _Bar:
    """A rich progress bar on a terminal; one plain line per kernel otherwise (logs, CI)."""

    def __init__(self, total_kernels: int, trials: int, quiet: bool):
        self.quiet, self.trials = quiet, trials
        self.live = None
        if not quiet and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                           TimeElapsedColumn)
            except ImportError:
                return
            self.live = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self.overall = self.live.add_task("kernels", total=total_kernels)
            self.current = None
            self.live.start()

    def start_kernel(self, i: int, n: int, kernel: Kernel) -> None:
        if self.live is not None:
            self.current = self.live.add_task(f"[{i}/{n}] {kernel.name}", total=self.trials)
        elif not self.quiet:
            print(f"[{i}/{n}] tuning {kernel.name} ({kernel.source})", file=sys.stderr, flush=True)

    def trial(self, trial, partial) -> None:
        """tune()'s progress callback: one call per finished trial (illegal points count too:
        they use up no trial, but a bar that never moves while they are drawn looks stuck)."""
        if self.live is not None and self.current is not None and trial.status != "illegal":
            self.live.advance(self.current)

    def end_kernel(self, i: int, n: int, r) -> None:
        from .report import _ms, _x
        line = (f"[{i}/{n}] {r.name}: {r.status}, default {_ms(r.default_s)} ms, tuned {_ms(r.best_s)} ms, "
                f"{_x(r.speedup)}" + (f" ({r.error})" if r.error else ""))
        if self.live is not None:
            self.live.advance(self.overall)
            if self.current is not None:
                self.live.remove_task(self.current)
            self.live.console.print(line, highlight=False, markup=False)
        elif not self.quiet:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def _open_cache(arg: str | None):
    """--cache DIR|off as tune()'s cache argument."""
    if arg is None:
        return None  # tune(): the user cache unless AKGPY_CACHE=off
    if arg.lower() == "off":
        return False
    from .cache import Cache
    return Cache(Path(arg))


def _make_executor(args):
    if args.ray:
        from .distributed import RayExecutor
        return RayExecutor(args.ray)
    from .executor import LocalExecutor
    return LocalExecutor(args.workers)


def run_tune(args) -> int:
    if args.trials < 1:
        raise UsageError(f"--trials must be at least 1 (got {args.trials})")
    if args.time_budget is not None and args.time_budget <= 0:
        raise UsageError(f"--time-budget must be positive seconds (got {args.time_budget})")
    if args.report and Path(args.report).suffix.lower() not in (".md", ".markdown", ".html", ".htm"):
        raise UsageError(f"--report {args.report}: the file name must end in .md or .html")
    from .search import SEARCHERS
    if args.search not in SEARCHERS:
        raise UsageError(f"--search {args.search!r}: available: {', '.join(SEARCHERS)}")
    target = parse_target(args.target)
    kernels = collect(args.inputs)
    if not kernels:
        raise UsageError("the inputs hold no kernel to tune (only views, library or fallback groups)")
    from ..graph import structural_hash
    from .tuner import tune

    cache = _open_cache(args.cache)
    results, records, failures = [], [], 0
    bar = _Bar(len(kernels), args.trials, args.quiet)
    executor = None
    with _Interrupt() as interrupt:
        try:
            executor = _make_executor(args)
            for i, k in enumerate(kernels, 1):
                bar.start_kernel(i, len(kernels), k)
                h = structural_hash(k.graph)
                try:
                    res = tune(k.graph, target, trials=args.trials, time_budget_s=args.time_budget,
                               workers=args.workers, search=args.search, seed=args.seed, cache=cache,
                               executor=executor, progress=bar.trial)
                except AkgpyError as e:
                    failures += 1
                    r = _failed(k, h, str(e))
                else:
                    r = _result_to_report(k, res, h)
                    records.append((k, res))
                results.append(r)
                bar.end_kernel(i, len(kernels), r)
                if interrupt.fired:
                    break
        except KeyboardInterrupt:
            interrupt.fired = True
        finally:
            bar.close()
            if executor is not None:
                executor.close()
    meta = {"target": getattr(target, "describe", lambda: str(target))(),
            "target fingerprint": getattr(target, "fingerprint", ""),
            "trials per kernel": args.trials, "time budget per kernel (s)": args.time_budget,
            "search": args.search, "seed": args.seed, "executor": f"ray {args.ray}" if args.ray else "local"}
    if interrupt.fired:
        meta["interrupted"] = f"after {len(results)} of {len(kernels)} kernels"
    if args.report:
        from .report import write_report
        write_report(args.report, results, meta=meta)
        print(f"report: {args.report}", file=sys.stderr)
    if args.export_schedules:
        n = export_schedules(records, Path(args.export_schedules))
        print(f"exported {n} schedule records to {args.export_schedules}", file=sys.stderr)
    if interrupt.fired:
        print(f"akgpy-tune: interrupted: {len(results)} of {len(kernels)} kernels done, their records kept",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if failures:
        print(f"akgpy-tune: {failures} of {len(kernels)} kernels failed", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _failed(k: Kernel, h: str, error: str):
    from .report import KernelResult
    return KernelResult(k.name, k.source, h, "failed", error=error)


def export_schedules(records, directory: Path) -> int:
    """Each finished kernel's tuned config as a shipped text record (tune/schedules.py) in directory."""
    from . import schedules
    n = 0
    for k, res in records:
        if res.interrupted or res.best_config is None:
            continue
        schedules.write(directory, schedules.from_result(k.graph, res))
        n += 1
    return n


# -- akgpy-tune cache ... -----------------------------------------------------------------------

def _cache(args):
    from .cache import Cache, default_cache
    c = Cache(Path(args.cache)) if args.cache else default_cache()
    if c is None or not c.usable:
        where = args.cache or "$AKGPY_CACHE"
        raise UsageError(f"no usable cache at {where} (off, or refused: see the warning); pass --cache DIR")
    return c


def _ms_cell(t) -> str:
    return "-" if t is None else f"{t * 1e3:.4g}"


def _record_json(r, history: bool) -> dict:
    out = {"digest": r.digest, "key": r.key.to_json(), "config": r.config, "best_s": r.best_s,
           "default_s": r.default_s, "machine": r.machine,
           "artifact_bytes": None if r.artifact is None else len(r.artifact), "manifest": r.manifest}
    out["history"] = r.history if history else f"{len(r.history)} trials (--history shows them)"
    return out


def _find(cache, prefix: str):
    hits = [r for r in cache.records() if r.digest.startswith(prefix)]
    if not hits:
        raise UsageError(f"no record whose key starts with {prefix!r} (akgpy-tune cache ls lists them)")
    if len(hits) > 1:
        raise UsageError(f"{len(hits)} records start with {prefix!r}: give more of the key")
    return hits[0]


def cache_ls(args) -> int:
    c = _cache(args)
    records = c.records()
    rows = [("key", "graph", "target", "sched", "config", "default ms", "tuned ms", "trials", "artifact", "measured")]
    for r in records:
        rows.append((r.digest[:12], r.key.graph[:12], r.key.target[:12], r.key.schedule,
                     "default" if r.key.config == "default" else "explicit", _ms_cell(r.default_s),
                     _ms_cell(r.best_s), str(len(r.history)),
                     "-" if r.artifact is None else f"{len(r.artifact) >> 10} KiB",
                     f"{r.machine.get('cpu', '?')} {r.machine.get('date', '')}".strip()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"{len(records)} records in {c.dir}", file=sys.stderr)
    return EXIT_OK


def cache_show(args) -> int:
    print(json.dumps(_record_json(_find(_cache(args), args.key), args.history), indent=2, default=str))
    return EXIT_OK


def cache_clear(args) -> int:
    c = _cache(args)
    if args.key:
        r = _find(c, args.key)
        c.remove(r.digest)
        print(f"removed record {r.digest[:12]}", file=sys.stderr)
        return EXIT_OK
    if not args.yes:
        raise UsageError(f"clear deletes every record in {c.dir}: pass --yes (or a KEY to delete one)")
    print(f"removed {c.clear()} records from {c.dir}", file=sys.stderr)
    return EXIT_OK


def cache_verify(args) -> int:
    c = _cache(args)
    bad = c.verify()  # reports without dropping: reading the records would drop the bad ones
    for digest in bad:
        print(f"bad record {digest[:12]}: its HMAC or encoding does not check", file=sys.stderr)
    print(f"{len(bad)} bad records in {c.dir}" if bad else f"every record in {c.dir} checks", file=sys.stderr)
    return EXIT_FAILED if bad else EXIT_OK


def cache_export(args) -> int:
    """Tuned records (a config found for the default key) as shipped text records: what a
    reviewer reads and akgpy ships in schedules/."""
    from . import schedules
    c = _cache(args)
    out = Path(args.dir)
    n = 0
    for r in c.records():
        if r.config is None or r.best_s is None or r.key.config != "default":
            continue
        m = r.manifest or {}
        target = m.get("target") if isinstance(m.get("target"), dict) else {}
        kernels = m.get("kernels") or [{}]
        schedules.write(out, schedules.ShippedRecord(
            r.key.graph, str(kernels[0].get("name", "graph")), r.key.target, str(target.get("cpu", "")), r.config,
            r.best_s, r.default_s, r.machine))
        n += 1
    print(f"exported {n} tuned records to {out}", file=sys.stderr)
    return EXIT_OK


def cache_import(args) -> int:
    """Shipped text records into the cache as tuned records without an artifact (the first
    compile builds one). A record is keyed for this akgpy and the target its CPU names; one whose
    target fingerprint is not what that CPU resolves to here is skipped, named."""
    from . import schedules
    from .cache import CacheKey, Record
    c = _cache(args)
    src = Path(args.dir)
    if not src.is_dir():
        raise UsageError(f"{src}: not a directory of schedule records")
    n, skipped = 0, 0
    for rec in schedules.records(src):
        try:
            tgt, llvm = c.target_for({"kind": "llvm", "mcpu": rec.target_cpu} if rec.target_cpu else None)
        except AkgpyError as e:
            tgt, llvm = None, str(e)
        if tgt is None or tgt.fingerprint != rec.target:
            print(f"skipped {rec.path.name}: its target {rec.target[:12]} ({rec.target_cpu or '?'}) is not one "
                  f"this machine resolves", file=sys.stderr)
            skipped += 1
            continue
        key = CacheKey.make(rec.graph, tgt, llvm=llvm)
        c.put(Record(key, rec.config, rec.best_s, rec.default_s, [], rec.machine))
        n += 1
    print(f"imported {n} records from {src} into {c.dir}" + (f", {skipped} skipped" if skipped else ""),
          file=sys.stderr)
    return EXIT_OK


def cache_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="akgpy-tune cache", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Look at and manage the tuning/compile cache (docs/cache.md).",
        epilog="examples:\n  akgpy-tune cache ls\n  akgpy-tune cache show 3fa2c1\n  akgpy-tune cache verify\n"
               "  akgpy-tune cache export schedules/\n  akgpy-tune cache import schedules/\n"
               "  akgpy-tune cache clear --yes\n")
    p.add_argument("--cache", metavar="DIR", help="cache directory (default: $AKGPY_CACHE or ~/.cache/akgpy)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("ls", help="one line per record").set_defaults(fn=cache_ls)
    s = sub.add_parser("show", help="one record as JSON")
    s.add_argument("key", help="the record's key (a unique prefix will do)")
    s.add_argument("--history", action="store_true", help="include every trial")
    s.set_defaults(fn=cache_show)
    s = sub.add_parser("clear", help="delete every record (--yes), or the one KEY names")
    s.add_argument("key", nargs="?")
    s.add_argument("--yes", action="store_true", help="really delete every record")
    s.set_defaults(fn=cache_clear)
    s = sub.add_parser("export", help="tuned records as shipped text records in DIR")
    s.add_argument("dir")
    s.set_defaults(fn=cache_export)
    s = sub.add_parser("import", help="text records from DIR into the cache")
    s.add_argument("dir")
    s.set_defaults(fn=cache_import)
    sub.add_parser("verify", help="check every record; status 1 if one is bad").set_defaults(fn=cache_verify)
    return p


def run_cache(argv) -> int:
    args = cache_parser().parse_args(argv)
    return args.fn(args)


# -- argument parsing --------------------------------------------------------------------------

def tune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="akgpy-tune", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tune akgpy kernels: search schedule configs per kernel, keep the fastest correct one "
                    "in the cache (akgpy.fuse uses it from then on). Subcommand: akgpy-tune cache ... "
                    "(ls, show, clear, export, import, verify).",
        epilog=EXAMPLES)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="composite JSON file, directory, or ONNX model")
    p.add_argument("--target", help="what to compile for (default: this machine)")
    p.add_argument("--trials", type=int, default=64, help="configs tried per kernel, the default included (64)")
    p.add_argument("--time-budget", type=float, metavar="SECONDS", help="stop each kernel's search after this long")
    p.add_argument("--workers", type=int, help="build processes (default: the CPU count)")
    p.add_argument("--cache", metavar="DIR|off", help="cache directory (default: $AKGPY_CACHE or ~/.cache/akgpy)")
    p.add_argument("--report", metavar="FILE", help="write a report: FILE.md (plots beside it) or FILE.html")
    p.add_argument("--export-schedules", metavar="DIR", help="write each tuned record as a shipped text record")
    p.add_argument("--search", default="model", help="search strategy (model, tpe, random; default model)")
    p.add_argument("--seed", type=int, default=0, help="search seed (0)")
    p.add_argument("--ray", metavar="ADDRESS", help="run builds and measurements on this Ray cluster")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "cache":
            return run_cache(argv[1:])
        args = tune_parser().parse_args(argv)
        return run_tune(args)
    except UsageError as e:
        print(f"akgpy-tune: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except AkgpyError as e:
        print(f"akgpy-tune: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("akgpy-tune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

"""Run every graph of corpus/ with each kernel argument fenced by no-access pages
(akgpy.testing.run_fenced): a kernel that reads or writes outside an argument faults.

    python bench/corpus_fenced.py [--chunk N] [--limit N]

Graphs run in child processes, `--chunk` per child; a child that dies names the graph it was
running and the next child starts after it. Prints one line per graph that did not pass and a
summary; exits 1 if any graph faulted or mismatched the reference.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from corpus_compile import CORPUS, corpus_files  # this directory: run as a script


def child(files: list[str]) -> None:
    import akgpy
    from akgpy.errors import AkgpyError
    from akgpy.frontends.composite import load_composite
    from akgpy.testing import check_program
    for f in files:
        print(f"start {f}", flush=True)
        try:
            g = load_composite(Path(f))
            prog = akgpy.fuse(g)
        except AkgpyError as e:  # rejected by design (a hybrid Custom op): not this check's business
            print(f"skip {f} {type(e).__name__}", flush=True)
            continue
        bad = check_program(g, prog, fenced=True)
        print(f"{'ok' if not bad else 'mismatch'} {f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--chunk", type=int, default=60)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    files = [str(p) for p in corpus_files(args.corpus)]
    files = files[:args.limit] if args.limit else files
    done, faults, counts = 0, [], {"ok": 0, "skip": 0, "mismatch": 0}
    while done < len(files):
        chunk = files[done:done + args.chunk]
        run = subprocess.run([sys.executable, __file__, "--child", *chunk], capture_output=True, text=True)
        lines = [ln.split(" ", 1) for ln in run.stdout.splitlines() if " " in ln]
        for word, f in lines:
            if word in counts:
                counts[word] += 1
                if word != "ok":
                    print(f"{word}: {f}", flush=True)
        finished = sum(1 for word, _ in lines if word in counts)
        if run.returncode != 0:
            started = [f for word, f in lines if word == "start"]
            culprit = started[-1] if started else chunk[0]
            faults.append(culprit)
            print(f"fault (exit {run.returncode}): {culprit}\n{run.stderr[-1500:]}", flush=True)
            done += finished + 1
        else:
            done += len(chunk)
    print(f"{len(files)} graphs: {counts['ok']} ok, {counts['mismatch']} mismatched, {len(faults)} faulted, "
          f"{counts['skip']} rejected at compile time")
    return 1 if faults or counts["mismatch"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m akgpy.mindspore env|off|status`: opt a shell in to (or out of) akgpy as MindSpore's
AKG. `eval "$(python -m akgpy.mindspore env)"` is the whole set-up (docs/mindspore.md)."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "shim"
# graph-kernel fusion on, at the level that fuses on CPU; a value the user already set is kept
DEFAULT_FLAGS = "--opt_level=2"


def env_lines(flags: str = DEFAULT_FLAGS) -> list[str]:
    """Shell lines that put the `akg` shim first on PYTHONPATH (MindSpore appends its own AKG last,
    so the first `akg` found wins) and turn graph-kernel fusion on unless it is configured."""
    shim = shlex.quote(str(SHIM))
    return [f'export PYTHONPATH={shim}"${{PYTHONPATH:+:$PYTHONPATH}}"',
            f'export MS_DEV_GRAPH_KERNEL_FLAGS="${{MS_DEV_GRAPH_KERNEL_FLAGS:-{flags}}}"']


def off_lines() -> list[str]:
    """Shell lines that take the shim off PYTHONPATH again (MindSpore's bundled AKG answers)."""
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SHIM]
    return [f"export PYTHONPATH={shlex.quote(os.pathsep.join(keep))}" if keep else "unset PYTHONPATH"]


def status() -> str:
    """Which `akg` a MindSpore started from this environment would import."""
    import importlib.util
    spec = importlib.util.find_spec("akg")
    if spec is None or spec.origin is None:
        return "akg: not importable before MindSpore's own (MindSpore's bundled AKG will compile)"
    who = "akgpy" if Path(spec.origin).resolve().is_relative_to(SHIM) else "another package"
    return f"akg: {spec.origin} ({who} compiles MindSpore's graph kernels)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m akgpy.mindspore")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("env", help="print the shell lines that opt this shell in (eval them)")
    e.add_argument("--flags", default=DEFAULT_FLAGS, help="MS_DEV_GRAPH_KERNEL_FLAGS when unset (default: %(default)s)")
    sub.add_parser("off", help="print the shell lines that opt this shell out again")
    sub.add_parser("status", help="say which akg MindSpore would use")
    ns = ap.parse_args(argv)
    if ns.cmd == "env":
        print("\n".join(env_lines(ns.flags)))
    elif ns.cmd == "off":
        print("\n".join(off_lines()))
    else:
        print(status())
    return 0


if __name__ == "__main__":
    sys.exit(main())

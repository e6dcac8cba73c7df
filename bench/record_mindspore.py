"""Record the graph-kernel requests stock MindSpore sends its AKG, for akgpy's tests.

    python bench/record_mindspore.py [--out tests/data/mindspore/requests] [--networks a,b] [--max-files 40]

Each network of `akgpy.mindspore.zoo` runs in its own subprocess (GRAPH_MODE, CPU, graph-kernel
fusion on, a fresh MS_COMPILER_CACHE_PATH) with a recording `akg` shim first on PYTHONPATH. The
shim's `akg.ms.compilewithjson(json_str, attrs)` saves `{"json": ..., "attrs": ...}` and then
forwards the request to MindSpore's bundled AKG in a child interpreter (the bundled package is
also named `akg`, so it cannot share the shim's process), so MindSpore sees a normal compile and
keeps sending what it normally sends. The requests are then loaded with akgpy, deduplicated by
structural hash, and at most --max-files are written, op diversity first; one request per op
sequence akgpy refuses to load is kept as well (tests/test_composite_v2.py's EXCLUDED), and the
refusals are printed.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "data" / "mindspore" / "requests"
# LayerNorm and ReluGrad are not expanded on CPU by default; the rest are listed so a MindSpore
# that can expand them sends their primitives (2.10 on CPU leaves BatchNorm and GeLU whole).
FLAGS = ("--opt_level=2 --enable_expand_ops=LayerNorm,Softmax,SoftmaxGrad,GeLU,GeLUGrad,BatchNorm,"
         "BatchNormGrad,ReluGrad,BiasAdd,BiasAddGrad,SoftmaxCrossEntropyWithLogits")

_SHIM = '''\
"""Recording shim (written by bench/record_mindspore.py): save each request, then compile it
with MindSpore's bundled AKG in a child interpreter."""
import json, os, subprocess, sys

_FORWARD = """
import sys
sys.path.insert(0, sys.argv[1])
import akg.ms
sys.exit(0 if akg.ms.compilewithjson(open(sys.argv[2]).read(), sys.argv[3]) else 1)
"""


def compilewithjson(json_str, attrs):
    desc = json.loads(json_str)
    out = os.environ["AKGPY_RECORD_DIR"]
    path = os.path.join(out, "%s__%s.json" % (os.environ["AKGPY_RECORD_NETWORK"], desc["op"]))
    with open(path, "w") as f:
        json.dump({"json": desc, "attrs": json.loads(attrs) if attrs else None}, f, indent=1,
                  sort_keys=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and os.path.abspath(p) != os.environ["AKGPY_SHIM_DIR"])
    env.setdefault("TVM_LIBRARY_PATH", os.environ["AKGPY_BUNDLED_LIB"])
    text_path = path + ".text"
    with open(text_path, "w") as f:
        f.write(json_str)
    try:
        r = subprocess.run([sys.executable, "-c", _FORWARD, os.environ["AKGPY_BUNDLED_AKG"], text_path,
                            attrs or "{}"], env=env, capture_output=True, text=True)
    finally:
        os.remove(text_path)
    if r.returncode != 0:
        sys.stderr.write("bundled AKG failed on %s:\\n%s\\n" % (desc["op"], r.stderr[-2000:]))
    return r.returncode == 0
'''

_CHILD = '''\
import sys
import mindspore as ms
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
from akgpy.mindspore.zoo import NETWORKS
step, inputs = NETWORKS[sys.argv[1]]()
for _ in range(2):
    out = step(*[ms.Tensor(a) for a in inputs])
print("ran", sys.argv[1])
'''


def _mindspore_dir() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("mindspore")
    if spec is None or spec.origin is None:
        sys.exit("mindspore is not installed")
    return Path(spec.origin).parent


def record(network: str, raw_dir: Path, flags: str) -> int:
    """Run one network under the shim; the requests land in raw_dir. Returns the count."""
    ms_dir = _mindspore_dir()
    with tempfile.TemporaryDirectory(prefix=f"akgpy_rec_{network}_") as tmp:
        shim = Path(tmp) / "shim"
        (shim / "akg" / "ms").mkdir(parents=True)
        (shim / "akg" / "__init__.py").write_text('"""Recording shim."""\n')
        (shim / "akg" / "ms" / "__init__.py").write_text(_SHIM)
        env = dict(os.environ)
        env.update({
            "PYTHONPATH": os.pathsep.join([str(shim), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "MS_COMPILER_CACHE_PATH": str(Path(tmp) / "cache"),
            "MS_DEV_GRAPH_KERNEL_FLAGS": flags,
            "AKGPY_RECORD_DIR": str(raw_dir),
            "AKGPY_RECORD_NETWORK": network,
            "AKGPY_SHIM_DIR": str(shim),
            "AKGPY_BUNDLED_AKG": str(ms_dir / "_akg"),
            "AKGPY_BUNDLED_LIB": str(ms_dir / "lib" / "plugin" / "cpu"),
        })
        before = len(list(raw_dir.glob(f"{network}__*.json")))
        r = subprocess.run([sys.executable, "-c", _CHILD, network], env=env, cwd=tmp,
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0 or f"ran {network}" not in r.stdout:
            sys.stderr.write(r.stdout[-3000:] + r.stderr[-5000:])
            raise SystemExit(f"{network}: the MindSpore run failed (exit {r.returncode})")
        built = list((Path(tmp) / "cache" / "akg_kernel_meta").glob("*.so"))
        n = len(list(raw_dir.glob(f"{network}__*.json"))) - before
        print(f"{network}: {n} requests, {len(built)} kernels built by the bundled AKG", flush=True)
        return n


def _ops(desc: dict) -> list[str]:
    return [op["name"] for op in desc["op_desc"]]


def select(raw_dir: Path, max_files: int) -> tuple[list[Path], dict[str, str]]:
    """Unique requests (by akgpy's structural hash), greedily chosen so each adds the most op
    names not yet covered, then the largest; plus one request per op sequence akgpy refuses to
    load (the tests check it is refused clearly). Returns them and the refusals' reasons."""
    import akgpy
    from akgpy.errors import AkgpyError
    by_hash: dict[str, Path] = {}
    refused: dict[str, str] = {}
    refused_kinds: dict[tuple, Path] = {}
    for p in sorted(raw_dir.glob("*.json")):
        desc = json.loads(p.read_text())["json"]
        try:
            h = akgpy.load_composite(desc).hash()
        except AkgpyError as e:
            refused[p.name] = f"{type(e).__name__}: {e}"
            refused_kinds.setdefault(tuple(_ops(desc)), p)
            continue
        by_hash.setdefault(h, p)
    pool = list(by_hash.values())
    chosen: list[Path] = list(refused_kinds.values())[:max_files]
    seen: set[str] = set()
    while pool and len(chosen) < max_files:
        def gain(p: Path):
            ops = _ops(json.loads(p.read_text())["json"])
            return len(set(ops) - seen), len(ops), p.name
        best = max(pool, key=gain)
        pool.remove(best)
        chosen.append(best)
        seen |= set(_ops(json.loads(best.read_text())["json"]))
    return chosen, refused


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--networks", default=None, help="comma-separated zoo names (default: all)")
    ap.add_argument("--flags", default=FLAGS, help="MS_DEV_GRAPH_KERNEL_FLAGS")
    ap.add_argument("--max-files", type=int, default=40)
    ap.add_argument("--raw", type=Path, default=None, help="keep every raw request here")
    ap.add_argument("--no-run", action="store_true", help="select from --raw's requests, run nothing")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from akgpy.mindspore.zoo import NETWORKS
    names = args.networks.split(",") if args.networks else list(NETWORKS)
    with tempfile.TemporaryDirectory(prefix="akgpy_rec_raw_") as tmp:
        raw = args.raw or Path(tmp)
        raw.mkdir(parents=True, exist_ok=True)
        if args.no_run and args.raw is None:
            ap.error("--no-run needs --raw")
        for name in [] if args.no_run else names:
            record(name, raw, args.flags)
        chosen, refused = select(raw, args.max_files)
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.json"):
            old.unlink()
        for p in chosen:
            (args.out / p.name).write_text(p.read_text())
        ops = collections.Counter(n for p in chosen for n in _ops(json.loads(p.read_text())["json"]))
        print(f"kept {len(chosen)} requests in {args.out}; ops: {dict(sorted(ops.items()))}")
        for name, why in sorted(refused.items()):
            print(f"akgpy cannot load {name}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

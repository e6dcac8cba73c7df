"""Legal schedule configs give kernels that stay inside their arguments and match the reference.

A config `akgpy.tune.space(...).legal` accepts is one the tuner builds and times; a kernel of
such a config that faults or answers wrong is a compiler defect. Each case runs in a child
process with every kernel argument fenced by no-access pages (akgpy.testing.run_fenced), so a
fault is an exit status. bench/fuzz_configs.py runs the same check over many graphs."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "bench" / "fuzz_configs.py"

_CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import akgpy
    from akgpy import GraphBuilder
    from akgpy.schedule.config import ScheduleConfig
    from akgpy.testing import check_program
    from fuzz_configs import tuner_graph

    g = tuner_graph()
    cfg = ScheduleConfig.from_json(json.loads(sys.argv[2]))
    prog = akgpy.fuse(g, config=cfg, cache=False)
    print("explain:", [l for l in prog.explain().splitlines() if "exp/log/tanh" in l][0], flush=True)
    bad = check_program(g, prog, fenced=True)
    print("mismatch" if bad else "ok", bad, flush=True)
""")


def _run_fenced(cfg) -> subprocess.CompletedProcess:
    import json
    return subprocess.run([sys.executable, "-c", _CHILD, str(ROOT / "bench"), json.dumps(cfg.to_json())],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_scalar_math_swap_keeps_the_scheduled_statements():
    """The real-tune graph (exp then a row sum) with the partials' init loop not vectorised and
    no stride-1 reorder: no statement using exp is vectorised, so the schedule swapped in the
    libm lowering, whose block names matched but whose row sum is cut into 8 partials, not the
    vector lowering's 64 (prepass.wide_partials). The tree, scheduled for 64, wrote 64 partials
    of a row into an 8-wide buffer: the measurer segfaulted (tests/test_tuner.py's real tune,
    seed 0). The swap now requires equal statement domains and accesses."""
    from akgpy.schedule.config import BandChoice
    from akgpy.targets import default_config
    cfg = default_config().replace(stride1_innermost=False,
                                   bands=(BandChoice(key="own:S_ReduceSum_3_rf_init", vector=False),))
    done = _run_fenced(cfg)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "\nok " in "\n" + done.stdout, done.stdout
    assert "kept although no statement using it is vectorised" in done.stdout, done.stdout


@pytest.mark.fuzz
def test_seeded_legal_configs_run_fenced(tmp_path):
    """A seeded sample of legal points of two small graphs' spaces (the real-tune row sum and
    kernels/softmax at its small size), each compiled and run fenced against the reference."""
    out = tmp_path / "cases.jsonl"
    done = subprocess.run([sys.executable, str(TOOL), "--graphs", "tuner,kernels:softmax", "--points", "3",
                           "--seed", "1", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:])
    assert "2 graphs, 6 cases: 6 ok, 0 mismatch, 0 fault, 0 hang, 0 compile_error, 0 exception" in done.stdout, \
        done.stdout[-3000:]
    import json
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(r["status"] == "ok" and r["config"]["schema"] for r in rows)
    assert len({json.dumps(r["point"], sort_keys=True) for r in rows}) == 6

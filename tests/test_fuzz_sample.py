"""CI's sample of akgpy's fuzz campaign (bench/fuzz, issue 48): a fixed seed's first cases, every
generator in turn, through the campaign's own fork-server isolation. A crash (signal), a hang (no
answer in 60 s), a wrong result (vs the numpy reference or onnxruntime, the project's tolerances)
or a bare exception (anything but an AkgpyError with a message) fails it, with each case's id,
one-line description and rerun command (`python -m bench.fuzz --case SEED:INDEX`).

`pytest -m fuzz` selects it; it runs by default (about 2-3 minutes on one core)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SEED, CASES = 48, 144  # 9 rounds of the 16 generators

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]


def test_fuzz_sample_has_no_crash_hang_wrong_result_or_bare_exception(tmp_path):
    env = dict(os.environ, TVM_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "bench.fuzz", "--seed", str(SEED), "--cases", str(CASES),
                          "--out", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=840)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == CASES, run.stdout[-3000:] + run.stderr[-3000:]
    counts = Counter(r["class"] for r in rows)
    defects = [f"{r['id']} {r['class']} {r['generator']}: {r.get('describe', '')} | {r['detail'][:300]}"
               for r in rows if r["class"] in ("crash", "hang", "wrong", "bare")]
    assert not defects, f"{dict(counts)}\n" + "\n".join(defects)
    # the sample exercises both sides: inputs akgpy refuses and programs that run and match
    assert counts["clean"] and counts["correct"]

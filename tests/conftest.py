import os
import signal
from pathlib import Path

import pytest

import akgpy

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpus"  # AKG test data, byte for byte (corpus/NOTICE.md)
# Tests that assert lane counts, tile shapes or register counts pin the vector width: the host
# target takes it from the CPU (64 bytes with AVX-512, 32 with AVX2 only), and an AVX2 host
# legalises 64-byte vectors as register pairs, so the decisions and the reference check hold on
# both. WIDE is that target: the host's CPU with 64-byte vectors and the cache sizes these tests
# were written for (L1 32 KiB, L2 512 KiB, LLC 32 MiB); BARE the plain choices they ran with.
WIDE = {"kind": "llvm", "vector_bytes": 64, "l1_bytes": 32 << 10, "l2_bytes": 512 << 10, "llc_bytes": 32 << 20}
BARE = akgpy.ScheduleConfig()


def pytest_configure(config):
    # Kernels of one test must not fight the other xdist worker for cores.
    os.environ.setdefault("TVM_NUM_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")
    # every test compiles: none reads or writes the user's compile cache; tests/test_cache.py
    # opts in with a temporary directory
    os.environ["AKGPY_CACHE"] = "off"


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    assert CORPUS.is_dir(), f"corpus not found at {CORPUS}"
    return CORPUS


_corpus = {"passed": 0, "failed": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" and "test_corpus_graph[" in report.nodeid:
        _corpus["passed" if report.passed else "failed"] += 1


def pytest_terminal_summary(terminalreporter):
    n = _corpus["passed"] + _corpus["failed"]
    if n:
        terminalreporter.write_line(f"corpus: {n} graphs checked against the reference, {_corpus['passed']} passed, "
                                    f"{_corpus['failed']} failed")


@pytest.fixture
def no_hang():
    """Fail a case that takes over 120 s: a malformed input must not hang akgpy."""
    def on_alarm(signum, frame):
        raise TimeoutError("akgpy did not return within 120 s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(120)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def fresh_dynamo():
    """torch.compile tests: each starts and ends with dynamo's caches cleared, so one test's
    compiled graphs (and their guards) never serve another."""
    import torch
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()

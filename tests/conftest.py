import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"


def pytest_configure(config):
    # Kernels of one test must not fight the other xdist worker for cores.
    os.environ.setdefault("TVM_NUM_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    assert CORPUS.is_dir(), f"corpus not found at {CORPUS}"
    return CORPUS

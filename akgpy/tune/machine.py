"""Who measured: the machine a tuning record names (tune/cache.py's records, tune/schedules.py's
shipped ones), in a module of its own so that neither of those imports the other for it."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path


def machine() -> dict:
    """Who measured: the CPU's model name, a hash of the host name, the date (UTC)."""
    import socket  # 3 ms to import: not on the warm path
    return {"cpu": cpu_model(), "host": hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12],
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()

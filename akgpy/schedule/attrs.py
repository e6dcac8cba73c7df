"""PrimFunc attributes a schedule sets for the target's backend to read: names both sides
need, kept here so that neither imports the other's code."""
from __future__ import annotations

# arithmetic chains bound by latency (float16 rounding chains): the CPU backend asks LLVM's
# instruction scheduler for parallelism over register pressure (targets/cpu/llvm.py)
LATENCY_ATTR = "akgpy.latency_bound"

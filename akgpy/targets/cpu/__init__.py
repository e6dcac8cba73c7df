"""The CPU backend (targets/cpu/backend.py) and the passes only CPUs need."""

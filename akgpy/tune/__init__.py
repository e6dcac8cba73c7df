"""Autotuning and the persistent cache (docs/cache.md). Exports are lazy: `import akgpy.tune`
imports no tvm, so the warm path (a cached kernel loaded in a fresh process) stays cheap."""
from importlib import import_module

# public name -> the submodule that defines it
_EXPORTS = {
    "Cache": "cache", "CacheKey": "cache", "Record": "cache", "stats": "cache",
    "tune": "tuner", "TuneResult": "tuner", "Trial": "tuner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)

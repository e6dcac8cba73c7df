# lazy: runtime/native.py and runtime/artifact.py load a cached kernel without importing tvm,
# and importing this package must not pull in program.py's TE parameter records eagerly
__all__ = ["Program", "Kernel"]


def __getattr__(name):
    if name in __all__:
        from . import program
        return getattr(program, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

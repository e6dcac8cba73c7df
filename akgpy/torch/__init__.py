"""akgpy as a torch.compile backend: `torch.compile(model, backend="akgpy")` (docs/torch.md).
Importing this package imports no torch; the names below load it on first use."""


def akgpy_backend(gm, example_inputs, **kwargs):
    from .backend import akgpy_backend as backend
    return backend(gm, example_inputs, **kwargs)


def last_report():
    """What akgpy fused in the latest graph torch.compile handed it, and what stayed in torch."""
    from .report import last_report as last
    return last()


__all__ = ["akgpy_backend", "last_report"]

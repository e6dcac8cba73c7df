from .composite import dump_composite, load_composite

__all__ = ["load_composite", "dump_composite"]

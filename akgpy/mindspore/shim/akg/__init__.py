"""akgpy standing in for MindSpore's bundled AKG (docs/mindspore.md). This directory is put on
PYTHONPATH by `eval "$(python -m akgpy.mindspore env)"`; MindSpore imports `akg` in its main
process, so nothing is imported here until a compile worker calls `akg.ms.compilewithjson`."""
from . import ms  # noqa: F401  (MindSpore reads akg.ms after `__import__("akg", fromlist=["ms"])`)

"""`akg.ms.compilewithjson`, answered by akgpy (akgpy/mindspore/compiler.py)."""


def compilewithjson(json_str, attrs=None):
    from akgpy.mindspore.compiler import compilewithjson as build
    return build(json_str, attrs)

"""kdart._autoload: kdart.fla on for a training script without code changes.

    FLA_KDART=1 python train.py      # kdart serves fla's chunk_kda backward (kdart.fla.enable())
    FLA_KDART=0 python train.py      # kdart.fla.enable() in the code does nothing (logged once)

The wheel installs kdart-autoload.pth beside the kdart package; Python runs its one line at start-up, which
imports this module.  Without FLA_KDART=1 it only reads that variable.  With it, it waits (a meta-path
finder, nothing imported early) for fla's KDA package (fla.ops.kda, with chunk_kda and its backward) to be
imported by the script, then calls kdart.fla.enable() right after: the first backward is served.  A failure there (another fla, no torch) is
logged through the "kdart" logger and leaves fla as it is.  The switch is named as fla's own backend
switches are (FLA_<BACKEND>=0 turns a backend off).
"""
import os
import sys

# fla's KDA package: importing any of its modules runs it first, and it imports chunk_kda (its backward
# module and ChunkKDAFunction, which enable() patches) before it is done
TARGET = "fla.ops.kda"
_installed = False


class _EnableAfterImport:
    """A meta-path finder that lets the normal finders load TARGET, then enables kdart.fla once."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # once: the normal finders do the loading
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_enable(module):
            exec_module(module)
            try:
                sys.modules[name] = module  # (enable() imports it by name)
                from . import fla
                fla.enable()
                fla._lib.log.getChild("fla").info("FLA_KDART=1: kdart serves fla's chunk_kda backward")
            except Exception as e:  # never break the user's import
                from . import _lib
                _lib.log.getChild("fla").warning("FLA_KDART=1, but kdart.fla could not be enabled: %s", e)
        spec.loader = _Loader(loader, exec_then_enable)
        return spec


class _Loader:
    """The module's own loader, with exec_module followed by kdart.fla.enable()."""

    def __init__(self, loader, exec_module):
        self._loader, self.exec_module = loader, exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def install(environ=None):
    """Called at start-up by kdart-autoload.pth: with FLA_KDART=1, enable kdart.fla once fla's backward module
    is imported (at once when it already is).  Returns whether it acted."""
    global _installed
    env = os.environ if environ is None else environ
    if env.get("FLA_KDART") != "1" or _installed:
        return False
    _installed = True
    if TARGET in sys.modules:
        from . import fla
        fla.enable()
    else:
        sys.meta_path.insert(0, _EnableAfterImport())
    return True


install()

"""Shared fixtures.  The tests find libkdart.so through KDART_LIBRARY (tools/test.sh points it at the
build tree's), else the installed package's own copy; the package is imported from python/ when it is
not installed."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/, for an uninstalled checkout

import pytest  # noqa: E402


@pytest.fixture
def cpu_runtime(tmp_path, monkeypatch):
    """A runtime of its own that never uses CUDA, with a fresh cache in tmp_path."""
    monkeypatch.setenv("KDART_CACHE_DIR", str(tmp_path))
    import kdart
    # The flag, not KDART_DISABLE_CUDA: the environment is the whole process's, and every
    # handle opened while the variable is set would go without CUDA.
    rt = kdart.Runtime(flags=kdart._lib.OPEN_NO_CUDA)
    yield rt
    rt.close()


def child_env(**extra):
    """The environment of a child Python: this one's, with python/ first on PYTHONPATH and the rest of
    PYTHONPATH kept (where fla or torch may be installed with pip --target), plus extra."""
    path = os.pathsep.join(p for p in (os.path.dirname(HERE), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def private_shared_runtime():
    """A process-wide runtime (kdart.runtime(), and kdart.torch's handle on it) of this test alone, opened
    without CUDA (the OPEN_NO_CUDA flag) when first used.  Not KDART_DISABLE_CUDA: the environment is the
    whole process's, and every handle opened while the variable is set would go without CUDA."""
    import sys as _sys
    from kdart import _lib
    kt = _sys.modules.get("kdart.torch")
    saved_rt, saved_flags, saved_state = _lib._rt, _lib._rt_flags, dict(kt._rt_state) if kt else None
    _lib._rt, _lib._rt_flags = None, _lib.OPEN_NO_CUDA
    if kt:
        kt._rt_state.clear()
        kt._XI = kt._XD = None  # the C++ direct entries rebind to this test's runtime on first use
    yield
    mine = _lib._rt
    _lib._rt, _lib._rt_flags = saved_rt, saved_flags
    kt = _sys.modules.get("kdart.torch")
    if kt:
        kt._rt_state.clear()
        kt._XI = kt._XD = None
        if saved_state:
            kt._rt_state.update(saved_state)
            kt._bind_direct(kt._rt_state)  # back to the saved runtime's handle (this test's is closed below)
    if mine is not None and mine is not saved_rt:
        mine.close()

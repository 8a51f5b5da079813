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
    # The flag, not KDART_DISABLE_CUDA: libcuda is loaded once per process, and on a
    # GPU machine an earlier test may already have loaded it.
    rt = kdart.Runtime(flags=kdart._lib.OPEN_NO_CUDA)
    yield rt
    rt.close()


def has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()

"""kdart: the KDA backward JIT runtime from Python.

    import kdart
    kdart.version()                      # the C library's version (no torch needed)
    kdart.prepare("bwd_intra", "io=bf16,fold_dg=1,emit_bf16=0,K=128", "sm_90a")
    import kdart.torch                   # torch ops: kdart.torch.bwd_intra / bwd_dhu
    import kdart.fla; kdart.fla.enable() # fla's chunk_kda backward through kdart

    python -m kdart prewarm              # the cache PyTorch hits (kdart.cli: the kdart program, this NVRTC)

The C library is loaded on first use (see kdart._lib for where it is found); what it says goes to
Python's logging, logger "kdart".
"""
from ._lib import (KdartError, KdartRuntimeError, KdartValueError, Runtime, cache_list, kernels, prepare,
                   runtime, version)

__all__ = ["version", "kernels", "prepare", "cache_list", "runtime", "Runtime", "KdartError",
           "KdartValueError", "KdartRuntimeError"]

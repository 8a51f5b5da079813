"""kdart.cli: the kdart command from Python: `python -m kdart ...` and the wheel's `kdart` console script.

    python -m kdart prewarm            # the default set for the local GPU (none: sm_90a and sm_100a)
    python -m kdart why bwd_intra "io=bf16,fold_dg=1,emit_bf16=0,K=128"
    python -m kdart ls

It runs the same program as the shell's `kdart` (the package's bin/kdart, or the build tree's beside
KDART_LIBRARY), with one difference that matters: the NVRTC and nvJitLink it compiles with are the ones a
Python process uses.  kdart's cache keys name the compiler's version and build (a cubin from another NVRTC
is another cubin), and a process that imports torch has torch's NVRTC (the nvidia wheels') loaded before
kdart, whatever toolkit the machine has; so a prewarm through this door is the one that PyTorch hits, and
`why` here explains a miss seen from PyTorch.  docs/design.md, "One NVRTC per door", says more.
"""
import os
import shutil
import sys

from . import _lib


def cli_binary():
    """The kdart program: the package's bin/kdart, else the build tree's beside KDART_LIBRARY, else PATH's."""
    cands = [os.path.join(_lib.PKG_DIR, "bin", "kdart")]
    lib = os.environ.get("KDART_LIBRARY")
    if lib:
        cands.append(os.path.join(os.path.dirname(os.path.abspath(lib)), "kdart"))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("kdart")
    if found and os.path.realpath(found) != os.path.realpath(sys.argv[0]):  # (not this console script)
        return found
    return None


def nvrtc_dirs():
    """The directories of the NVRTC and nvJitLink that kdart loads in a Python process: kdart._lib.load()'s
    own choice (so the program links the very files a Python process does), without repeats."""
    try:
        libs = _lib.load().cuda_libs
    except RuntimeError:  # no library to load: the program says what is missing itself
        return []
    out = []
    for soname in ("libnvrtc.so.13", "libnvJitLink.so.13"):
        d = os.path.dirname(libs.get(soname, ""))  # "" for the loader's default search: nothing to add
        if d and d not in out:
            out.append(d)
    return out


def environment(env=None):
    """The environment the program runs in: the Python door's NVRTC directories first on LD_LIBRARY_PATH
    (searched before the program's own RUNPATH), and the package's kernel sources when it is installed."""
    env = dict(os.environ if env is None else env)
    dirs = nvrtc_dirs()
    if dirs:
        env["LD_LIBRARY_PATH"] = ":".join(dirs + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    kd = _lib.package_kernel_dir()
    if kd and not env.get("KDART_KERNEL_DIR"):
        env["KDART_KERNEL_DIR"] = kd
    return env


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = cli_binary()
    if prog is None:
        sys.stderr.write("kdart: the kdart program is not installed with this package (pip install kdart builds "
                         "it; from a checkout, set KDART_LIBRARY=build/libkdart.so)\n")
        return 4
    os.execve(prog, [prog] + argv, environment())
    return 0  # (never reached)

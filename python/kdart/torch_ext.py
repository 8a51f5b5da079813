"""kdart.torch_ext: builds and loads kdart.torch's C++ fast path (_torch_ext.cpp) against the installed torch.

    python -m kdart.torch_ext        # build once (about a minute: torch's headers), then every process uses it;
                                     # again only when torch or this source changed (--force: anyway)

One eager kdart.torch call from Python costs, on the path written in Python, a few microseconds per tensor
argument (each attribute read and each torch.empty goes through torch's Python bindings); the C++ path
hands the tensors to kdart's C function in one call (kdart validates every argument there, as for any C
caller) and allocates the outputs in C++.  With a CUDA build of torch and the CUDA runtime's headers (the
toolkit, or the nvidia-cuda-runtime wheel torch depends on) it has direct entries (intra_fast, dhu_fast)
that take the device, the current stream and the outputs' memory from c10::cuda, so the only Python left
on a call is kdart.torch's own function frame; without those headers only the pybind entries (intra, dhu)
are built, and Python passes the stream.  It is a torch extension, built on the user's machine for the
torch it runs with by a C++ compiler against torch's headers.  The build lives in
~/.cache/kdart/torch_ext/<key> (KDART_TORCH_EXT_DIR overrides), keyed by the torch version, Python ABI and
this source, so another torch gets its own build.

kdart.torch loads the build when it exists (load()); KDART_TORCH_EXT=0 keeps the Python path,
KDART_TORCH_EXT=1 builds it on first import when missing.  Without it everything works, only slower.
"""
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "_torch_ext.cpp")


def _kdart_include():
    """Where kdart.h is: the installed package's include/ (dlpack/dlpack.h beside it), else the checkout's."""
    pkg = os.path.join(HERE, "include")
    if os.path.exists(os.path.join(pkg, "kdart.h")):
        return pkg
    return os.path.join(os.path.dirname(os.path.dirname(HERE)), "runtime", "include")


def _include_dirs():
    """kdart.h and dlpack/dlpack.h (from the package, the system, or a shim over torch's copy of it)."""
    dirs = [_kdart_include()]
    if os.path.exists(os.path.join(dirs[0], "dlpack", "dlpack.h")):
        return dirs
    if not any(os.path.exists(os.path.join(d, "dlpack", "dlpack.h")) for d in ("/usr/include", "/usr/local/include")):
        dirs.append(_dlpack_shim())
    return dirs


def _dlpack_shim():
    import torch
    shim = os.path.join(build_dir(), "shim")
    os.makedirs(os.path.join(shim, "dlpack"), exist_ok=True)
    src = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "dlpack.h")
    dst = os.path.join(shim, "dlpack", "dlpack.h")
    if not os.path.exists(dst):
        with open(src, "rb") as f, open(dst + ".tmp", "wb") as g:
            g.write(f.read())
        os.replace(dst + ".tmp", dst)
    return shim


@functools.cache  # read once per process: load() and build() ask for the folder several times
def _key():
    import torch
    h = hashlib.sha256()
    for path in (SOURCE, os.path.join(_kdart_include(), "kdart.h")):
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    h.update(f"{torch.__version__}|{sys.version_info[:2]}|{sysconfig.get_config_var('SOABI')}".encode())
    return h.hexdigest()[:16]


def build_dir():
    root = os.environ.get("KDART_TORCH_EXT_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kdart", "torch_ext")
    return os.path.join(root, _key())


NAME = "kdart_torch_ext"


def _so_path():
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return os.path.join(build_dir(), NAME + suffix), os.path.join(build_dir(), NAME + ".so")


def load():
    """The built module, or None when it has not been built for this torch (never builds)."""
    for p in _so_path():
        if os.path.exists(p):
            import torch  # noqa: F401  (the extension links against the loaded torch)
            spec = importlib.util.spec_from_file_location(NAME, p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    return None


def _cuda_include():
    """A folder with cuda_runtime_api.h for c10/cuda's headers (the direct entries), or None: the CUDA
    toolkit torch found (CUDA_HOME), else the nvidia-cuda-runtime wheel's headers beside torch."""
    import torch
    ce = _quiet_cpp_extension()
    if not torch.version.cuda:
        return None
    cands = [os.path.join(ce.CUDA_HOME, "include")] if ce.CUDA_HOME else []
    import glob
    site = os.path.dirname(os.path.dirname(torch.__file__))
    cands += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "include"))) + [
        os.path.join(site, "nvidia", "cuda_runtime", "include")]
    for c in cands:
        if os.path.exists(os.path.join(c, "cuda_runtime_api.h")):
            return c
    return None


def build(verbose=False):
    """Compiles the extension for this torch (c++ and torch's headers; about a minute) and returns it."""
    import subprocess
    import tempfile

    import torch
    ce = _quiet_cpp_extension()
    d = build_dir()
    os.makedirs(d, exist_ok=True)
    so = _so_path()[0]
    incs = ce.include_paths() + _include_dirs() + [sysconfig.get_paths()["include"]]
    libs = ce.library_paths()
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    # with a CUDA torch and the CUDA runtime's headers: the direct entries (c10::cuda for the device, the
    # stream and the allocator); otherwise only the pybind entries, which take the stream from Python
    cuda_inc = _cuda_include()
    cuda = [f"-I{cuda_inc}", "-DKDART_EXT_CUDA"] if cuda_inc else []
    cuda_lib = ["-lc10_cuda"] if cuda_inc else []
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=d)
    os.close(fd)
    cmd = ([os.environ.get("CXX", "c++"), "-O2", "-shared", "-fPIC", "-std=c++20", "-w",
            f"-DTORCH_EXTENSION_NAME={NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            SOURCE, "-o", tmp] + [f"-I{i}" for i in incs] + cuda + [f"-L{i}" for i in libs]
           + ["-lc10"] + cuda_lib + ["-ltorch", "-ltorch_cpu", "-ltorch_python"] + [f"-Wl,-rpath,{i}" for i in libs])
    if verbose:
        print(" ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"kdart.torch_ext: the build failed ({cmd[0]} exit {r.returncode}):\n{r.stderr[-4000:]}")
    os.replace(tmp, so)  # atomic: a process loading it never sees half a file
    return load()


USAGE = """usage: python -m kdart.torch_ext [--force] [-v]

Builds kdart.torch's C++ fast path for the installed torch (about a minute), unless the build for this
torch and this source is there already (its folder is keyed by both: KDART_TORCH_EXT_DIR, else
~/.cache/kdart/torch_ext).

  --force     build again even when it is up to date
  -v          print the compiler command
  -h, --help  print this text and exit
"""


def _quiet_cpp_extension():
    """torch.utils.cpp_extension, imported without its note (on a machine without a GPU it logs "No CUDA
    runtime is found" at import, at warning level: true, and nothing this build needs)."""
    import logging
    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        log.setLevel(level)
    return cpp_extension


def main(argv=None):
    import time
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(USAGE)
        return 0
    bad = [a for a in argv if a not in ("-v", "--force")]
    if bad:
        sys.stderr.write(f"kdart.torch_ext: unknown argument {bad[0]!r}\n" + USAGE)
        return 2
    if "--force" not in argv and any(os.path.exists(p) for p in _so_path()):
        print(f"kdart.torch_ext: up to date in {build_dir()}")
        return 0
    t0 = time.time()
    build(verbose="-v" in argv)
    print(f"kdart.torch_ext: built in {time.time() - t0:.0f} s into {build_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

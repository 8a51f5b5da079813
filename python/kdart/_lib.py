"""kdart._lib: ctypes bindings of libkdart.so (no torch needed).

Finding the library, in order: $KDART_LIBRARY (a path to a libkdart.so, e.g.
the build tree's), then the package's own copy (kdart/lib/ or kdart/lib64/,
where the wheel's CMake install puts it).  Before loading it, NVRTC 13 and
nvJitLink 13 (libkdart.so's NEEDED entries) are preloaded with RTLD_GLOBAL
from the first place that has them: the nvidia-* wheels' lib folders under
site-packages, $CUDA_HOME/lib64, /usr/local/cuda/lib64, then the loader's
default search.  Nothing is loaded at import: the first call that needs the
library loads it, and raises RuntimeError naming every place it looked when
something is missing.

One process-wide runtime handle (runtime()) is opened lazily under a lock;
Runtime(...) opens independent handles (tests, tools).  Every failing C call
raises KdartValueError (argument errors: also a ValueError) or
KdartRuntimeError (also a RuntimeError), with kdart_last_error's message.
"""
import ctypes
import glob
import logging
import os
import site
import sys
import threading

PKG_DIR = os.path.dirname(os.path.abspath(__file__))

# Statuses that mean "the caller's arguments are wrong or unsupported".
VALUE_ERRORS = frozenset({"EINVAL", "ENULL", "EDTYPE", "ESHAPE", "ESTRIDE", "EALIGN", "EDEVICE",
                          "EUNSUPPORTED", "ESPEC", "EKERNEL", "EARCH"})


class KdartError(Exception):
    """A failed kdart call: .status (negative int), .name ("ESHAPE"), .message."""

    def __init__(self, status, name, message):
        super().__init__(message)
        self.status, self.name, self.message = status, name, message


class KdartValueError(KdartError, ValueError):
    pass


class KdartRuntimeError(KdartError, RuntimeError):
    pass


# ------------------------------------------------------------ C structs

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):  # dlpack 0.6 .. 1.x (DLTensor is unchanged)
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_PT = ctypes.POINTER(DLTensor)


class OpArgInfo(ctypes.Structure):  # kdart_op_arg_info
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("optional", ctypes.c_int),
                ("offset", ctypes.c_uint32), ("args_size", ctypes.c_uint32), ("dtype", ctypes.c_char_p),
                ("flag", ctypes.c_char_p), ("dims", ctypes.c_char_p)]


ARG_INPUT, ARG_OUTPUT, ARG_SEQS, ARG_INT, ARG_FLOAT = 1, 2, 3, 4, 5
_ARG_CTYPE = {ARG_INPUT: _PT, ARG_OUTPUT: _PT, ARG_SEQS: _PT, ARG_INT: ctypes.c_int, ARG_FLOAT: ctypes.c_float}


class OpArg:
    """One argument of an operation's args struct, as kdart_op_arg describes it."""
    __slots__ = ("name", "kind", "optional", "offset", "dtype", "flag", "dims")

    def __init__(self, info):
        self.name, self.kind, self.optional = info.name.decode(), info.kind, bool(info.optional)
        self.offset, self.dtype = info.offset, _s(info.dtype)
        self.flag = _s(info.flag)
        self.dims = tuple(d.strip() for d in info.dims.decode().split(",")) if info.dims else None

    @property
    def is_tensor(self):
        return self.kind in (ARG_INPUT, ARG_OUTPUT, ARG_SEQS)

    def __repr__(self):
        return f"OpArg({self.name}, kind={self.kind}, dtype={self.dtype}, dims={self.dims})"


_op_cache = {}


def op_args(kernel):
    """(args, size): kernel's operation's arguments (OpArg: tensors in the order of its checks, then scalars,
    then cu_seqlens and fla's index tensors) and its args struct's size, from the C side's own table
    (kdart_op_arg): bindings build their calls from it instead of writing the stage's rules down again."""
    got = _op_cache.get(kernel)
    if got is None:
        L = lib()
        info = OpArgInfo()
        n = L.kdart_op_arg(kernel.encode(), 0, ctypes.byref(info))
        if n < 0:
            raise error_for(n, f"{L.kdart_errname(n).decode()}: kdart_op_arg({kernel!r})")
        if n == 0:
            raise value_error("EINVAL", f"EINVAL: {kernel} has no operation of its own")
        args = []
        for i in range(n):
            L.kdart_op_arg(kernel.encode(), i, ctypes.byref(info))
            args.append(OpArg(info))
        got = _op_cache[kernel] = (tuple(args), info.args_size)
    return got


def op_struct(kernel):
    """A ctypes Structure laid out as kernel's args struct (its fields named as kdart_op_arg names them:
    "do" for d_o), checked field by field against the C offsets."""
    key = ("struct", kernel)
    cls = _op_cache.get(key)
    if cls is None:
        args, size = op_args(kernel)
        ordered = sorted(args, key=lambda a: a.offset)
        fields = [("struct_size", ctypes.c_uint32)] + [(a.name, _ARG_CTYPE[a.kind]) for a in ordered]
        cls = type(f"{kernel}_args", (ctypes.Structure,), {"_fields_": fields})
        bad = [a.name for a in ordered if getattr(cls, a.name).offset != a.offset]
        if bad or ctypes.sizeof(cls) != size:
            raise runtime_error("EINVAL", f"EINVAL: {kernel}'s args struct does not lay out as the library's "
                                          f"(fields {bad}, size {ctypes.sizeof(cls)} vs {size})")
        _op_cache[key] = cls
    return cls


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class Options(ctypes.Structure):  # kdart_options
    _fields_ = [("struct_size", ctypes.c_uint32), ("cache_path", ctypes.c_char_p),
                ("ro_cache_paths", ctypes.POINTER(ctypes.c_char_p)), ("n_ro_cache_paths", ctypes.c_size_t),
                ("kernel_dir", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("log", LOG_FN),
                ("log_user", ctypes.c_void_p), ("log_level", ctypes.c_int), ("compile_threads", ctypes.c_int),
                ("cache_max_bytes", ctypes.c_int64), ("flags", ctypes.c_uint32)]


class RtInfo(ctypes.Structure):  # kdart_rt_info
    _fields_ = [("cache_path", ctypes.c_char_p), ("cache_writable", ctypes.c_int),
                ("kernel_dir", ctypes.c_char_p), ("default_arch", ctypes.c_char_p),
                ("nvrtc_major", ctypes.c_int), ("nvrtc_minor", ctypes.c_int), ("nvrtc_build", ctypes.c_char_p),
                ("nvjitlink_major", ctypes.c_int), ("nvjitlink_minor", ctypes.c_int),
                ("cuda_available", ctypes.c_int), ("cache_max_bytes", ctypes.c_int64)]


class Prepared(ctypes.Structure):  # kdart_prepared
    _fields_ = [("key", ctypes.c_char * 65), ("source", ctypes.c_int), ("compile_ms", ctypes.c_double),
                ("lookup_ms", ctypes.c_double), ("load_ms", ctypes.c_double), ("loaded", ctypes.c_int)]


class Entry(ctypes.Structure):  # kdart_entry
    _fields_ = [("key", ctypes.c_char * 65), ("kernel", ctypes.c_char_p), ("spec", ctypes.c_char_p),
                ("arch", ctypes.c_char_p), ("failed", ctypes.c_int), ("tier", ctypes.c_int),
                ("manifest", ctypes.c_char_p), ("report", ctypes.c_char_p), ("log", ctypes.c_char_p),
                ("cubin", ctypes.c_void_p), ("cubin_size", ctypes.c_size_t), ("cubin_sha256", ctypes.c_char_p),
                ("compile_ms", ctypes.c_double), ("created", ctypes.c_int64), ("last_used", ctypes.c_int64),
                ("hits", ctypes.c_int64)]


ENTRY_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Entry))
FROM = {0: "memory", 1: "cache", 2: "ro-cache", 3: "compiled"}
OPEN_NO_ENV, OPEN_NO_CUDA, OPEN_CHECK = 0x1, 0x2, 0x4
# kdart_device_status bits (kernel_src/kda_params.h's KDART_DEVERR_*)
DEVERR_CU_ORDER, DEVERR_CU_RANGE, DEVERR_CHUNKS = 1, 2, 4
PREPARE_NO_LOAD, PREPARE_FORCE, PREPARE_NO_WAIT = 0x1, 0x2, 0x4

_vp, _cp, _i, _i64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64
_SIGNATURES = {
    "kdart_version": (_cp, []),
    "kdart_strerror": (_cp, [_i]),
    "kdart_errname": (_cp, [_i]),
    "kdart_options_init": (None, [ctypes.POINTER(Options)]),
    "kdart_open": (_i, [ctypes.POINTER(_vp), ctypes.POINTER(Options)]),
    "kdart_close": (None, [_vp]),
    "kdart_last_error": (_cp, [_vp]),
    "kdart_info": (_i, [_vp, ctypes.POINTER(RtInfo)]),
    "kdart_kernel_count": (_i, []),
    "kdart_kernel_name": (_cp, [_i]),
    "kdart_kernel_params": (_cp, [_cp]),
    "kdart_spec_canonical": (_i, [_cp, _cp, _cp, ctypes.c_size_t]),
    "kdart_prepare": (_i, [_vp, _cp, _cp, _cp, ctypes.c_uint32, ctypes.POINTER(Prepared)]),
    "kdart_cache_list": (_i, [_vp, ENTRY_FN, _vp]),
    "kdart_op_arg": (_i, [_cp, _i, ctypes.POINTER(OpArgInfo)]),
    "kdart_op_run": (_i, [_vp, _cp, _vp, _vp]),
    "kdart_get_function": (_i, [_vp, _cp, _cp, _vp]),
    "kdart_dhu_v_tile": (_i, [_vp, _i64, _i64, _i64, _i64, ctypes.POINTER(_i)]),
    "kdart_spec_for": (_i, [_vp, _cp, _vp, _cp, ctypes.c_size_t]),
    "kdart_device_status": (_i, [_vp, ctypes.POINTER(_i), _i]),
}


# ------------------------------------------------------- finding libraries

def _site_dirs():
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv builds
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs += [p for p in sys.path if p.endswith("site-packages") or p.endswith("dist-packages")]
    out = []
    for d in dirs:
        if d and d not in out:
            out.append(d)
    return out


def cuda_lib_dirs():
    """Where NVRTC and nvJitLink are looked for, in order."""
    dirs = []
    for sp in _site_dirs():
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/nvjitlink/lib"):
            dirs.append(os.path.join(sp, sub))
    if os.environ.get("CUDA_HOME"):
        dirs.append(os.path.join(os.environ["CUDA_HOME"], "lib64"))
    dirs.append("/usr/local/cuda/lib64")
    return dirs


def _preload(soname, dirs, tried):
    for d in dirs:
        p = os.path.join(d, soname)
        if os.path.exists(p):
            try:
                return ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL), p
            except OSError as e:
                tried.append(f"{p} ({e})")
                continue
        tried.append(p)
    try:  # the loader's default search (LD_LIBRARY_PATH, ld.so.cache)
        return ctypes.CDLL(soname, mode=ctypes.RTLD_GLOBAL), soname
    except OSError as e:
        tried.append(f"{soname} in the default search ({e})")
    return None, None


def _package_library():
    for libdir in ("lib", "lib64"):
        d = os.path.join(PKG_DIR, libdir)
        for name in ["libkdart.so"] + sorted(glob.glob(os.path.join(d, "libkdart.so.*")), reverse=True):
            p = os.path.join(d, name)
            if os.path.exists(p):
                return p
    return None


def package_kernel_dir():
    d = os.path.join(PKG_DIR, "share", "kdart", "kernel_src")
    return d if os.path.isdir(d) else None


class _Loaded:
    def __init__(self, lib, path, from_package, cuda_libs):
        self.lib, self.path, self.from_package, self.cuda_libs = lib, path, from_package, cuda_libs


_load_lock = threading.Lock()
_loaded = None


def load():
    """Loads libkdart (once); returns the _Loaded record.  RuntimeError if it cannot."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _load_lock:
        if _loaded is not None:
            return _loaded
        path = os.environ.get("KDART_LIBRARY") or None
        from_package = False
        if path is None:
            path = _package_library()
            from_package = path is not None
        if path is None:
            raise RuntimeError(f"kdart: libkdart.so not found: KDART_LIBRARY is not set and "
                               f"{PKG_DIR}/lib and {PKG_DIR}/lib64 hold no libkdart.so*")
        cuda_libs, missing = {}, []
        dirs = cuda_lib_dirs()
        for soname in ("libnvrtc.so.13", "libnvJitLink.so.13"):
            tried = []
            handle, where = _preload(soname, dirs, tried)
            if handle is None:
                missing.append(f"{soname}, looked in: " + "; ".join(tried))
            else:
                cuda_libs[soname] = where
        if missing:
            raise RuntimeError("kdart: NVRTC/nvJitLink 13 not found (pip install nvidia-cuda-nvrtc "
                               "nvidia-nvjitlink, or set CUDA_HOME): " + " | ".join(missing))
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError(f"kdart: cannot load {path}: {e}") from e
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _loaded = _Loaded(lib, path, from_package, cuda_libs)
        return _loaded



def k_tile(K):
    """The K tile (the specs' K) that serves head dim K: 64, 128 or 256."""
    return 64 if K <= 64 else 128 if K <= 128 else 256


def dhu_k_tile(K):
    """bwd_dhu's K tile for head dim K: as k_tile's, and 192 for K in 129..192."""
    return 192 if 128 < K <= 192 else k_tile(K)


def lib():
    return load().lib


def version():
    """kdart_version(), e.g. "0.1.0"."""
    return lib().kdart_version().decode()


def kernels():
    """{kernel name: its parameter string} from the registry."""
    L = lib()
    out = {}
    for i in range(L.kdart_kernel_count()):
        n = L.kdart_kernel_name(i)
        out[n.decode()] = L.kdart_kernel_params(n).decode()
    return out


def error_for(status, message):
    """The exception for a failed call's status and message."""
    name = lib().kdart_errname(status).decode()
    msg = message or f"{name}: {lib().kdart_strerror(status).decode()}"
    cls = KdartValueError if name in VALUE_ERRORS else KdartRuntimeError
    return cls(status, name, msg)


_statuses = {}


def status_of(name):
    """The status number of an error name ("ESHAPE"), from the library's own table (kdart_errname)."""
    if not _statuses:
        L = lib()
        for code in range(0, -128, -1):
            n = L.kdart_errname(code)
            if n:
                _statuses.setdefault(n.decode(), code)
    return _statuses[name]


def value_error(name, message):
    """KdartValueError for an argument kdart refuses, numbered as the C library numbers name."""
    return KdartValueError(status_of(name), name, message)


def runtime_error(name, message):
    return KdartRuntimeError(status_of(name), name, message)


def _b(s):
    return None if s is None else (s.encode() if isinstance(s, str) else s)


def _s(b):
    return None if b is None else b.decode(errors="replace")


# The C library's log, through Python's logging: logger "kdart" (kdart.fla and kdart.torch log under it
# too).  With no handler configured, Python prints WARNING and above to stderr, as the C library does for
# a program that sets no callback.  The callback may run on kdart's compile threads (ctypes takes the GIL).
log = logging.getLogger("kdart")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def _log_to_logging(user, level, message):
    try:
        log.log(_LEVELS.get(level, logging.WARNING), "%s", message.decode(errors="replace") if message else "")
    except Exception:  # a callback must never raise into C
        pass


_LOG_CB = LOG_FN(_log_to_logging)  # one object for the process: C keeps its address


def _c_log_level():
    """The most verbose C level worth passing up: what the "kdart" logger would show when the handle opens,
    or KDART_LOG's (info, debug) if more; None for KDART_LOG=off (the C library then logs nothing)."""
    env = os.environ.get("KDART_LOG", "")
    if env == "off":
        return None
    lv = 3 if log.isEnabledFor(logging.DEBUG) else 2 if log.isEnabledFor(logging.INFO) else 1
    return max(lv, {"debug": 3, "info": 2}.get(env, 1))


class Runtime:
    """One kdart_rt handle.  Thread-safe as the C handle is; close() once nobody uses it.  Its log goes to
    the "kdart" logger."""

    def __init__(self, cache_path=None, kernel_dir=None, arch=None, flags=0, ro_cache_paths=()):
        L = load()
        self.lib = L.lib
        if kernel_dir is None:
            kernel_dir = os.environ.get("KDART_KERNEL_DIR") or (package_kernel_dir() if L.from_package else None)
        opts = Options()
        self.lib.kdart_options_init(ctypes.byref(opts))
        self._keep = [_b(cache_path), _b(kernel_dir), _b(arch)] + [_b(p) for p in ro_cache_paths]
        opts.cache_path, opts.kernel_dir, opts.arch = self._keep[0], self._keep[1], self._keep[2]
        if ro_cache_paths:
            arr = (ctypes.c_char_p * len(ro_cache_paths))(*self._keep[3:])
            self._keep.append(arr)
            opts.ro_cache_paths, opts.n_ro_cache_paths = arr, len(ro_cache_paths)
        opts.flags = flags
        level = _c_log_level()
        if level is not None:
            opts.log, opts.log_level = _LOG_CB, level
        h = ctypes.c_void_p()
        rc = self.lib.kdart_open(ctypes.byref(h), ctypes.byref(opts))
        if rc:
            raise error_for(rc, f"{self.lib.kdart_errname(rc).decode()}: kdart_open failed: "
                                f"{self.lib.kdart_strerror(rc).decode()}")
        self.handle = h.value
        self.kernel_dir = kernel_dir

    def check(self, rc, what=""):
        """Raises the exception of a nonzero status, with the thread's last error message."""
        if rc:
            msg = _s(self.lib.kdart_last_error(self.handle)) if self.handle else ""
            raise error_for(rc, msg or (f"{what}: " if what else "") + self.lib.kdart_strerror(rc).decode())

    def close(self):
        if self.handle:
            self.lib.kdart_close(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def info(self):
        i = RtInfo()
        self.check(self.lib.kdart_info(self.handle, ctypes.byref(i)), "kdart_info")
        return {"cache_path": _s(i.cache_path), "cache_writable": bool(i.cache_writable),
                "kernel_dir": _s(i.kernel_dir), "default_arch": _s(i.default_arch),
                "nvrtc": f"{i.nvrtc_major}.{i.nvrtc_minor}", "nvrtc_build": _s(i.nvrtc_build),
                "nvjitlink": f"{i.nvjitlink_major}.{i.nvjitlink_minor}",
                "cuda_available": bool(i.cuda_available), "cache_max_bytes": i.cache_max_bytes}

    def prepare(self, kernel, spec="", arch=None, flags=0):
        """Compiles or finds one specialization; returns what kdart_prepared says."""
        p = Prepared()
        rc = self.lib.kdart_prepare(self.handle, _b(kernel), _b(spec), _b(arch), flags, ctypes.byref(p))
        self.check(rc, f"kdart_prepare({kernel}, {spec})")
        return {"key": p.key.decode(), "source": FROM.get(p.source, str(p.source)), "compile_ms": p.compile_ms,
                "lookup_ms": p.lookup_ms, "load_ms": p.load_ms, "loaded": bool(p.loaded)}

    def cache_list(self):
        """Every cache entry, as dicts (kernel, spec, arch, key, failed, tier, compile_ms, hits, ...)."""
        out = []

        def one(user, e):
            e = e.contents
            out.append({"key": e.key.decode(), "kernel": _s(e.kernel), "spec": _s(e.spec), "arch": _s(e.arch),
                        "failed": bool(e.failed), "tier": e.tier, "report": _s(e.report),
                        "compile_ms": e.compile_ms, "created": e.created, "last_used": e.last_used,
                        "hits": e.hits})
            return 0
        cb = ENTRY_FN(one)
        self.check(self.lib.kdart_cache_list(self.handle, cb, None), "kdart_cache_list")
        return out

    def device_status(self, clear=False):
        """The KDART_DEVERR_* bits variable-length launches set in the current context (synchronizes it)."""
        bits = ctypes.c_int()
        self.check(self.lib.kdart_device_status(self.handle, ctypes.byref(bits), int(bool(clear))),
                   "kdart_device_status")
        return bits.value

    def spec_for(self, kernel, args):
        """The canonical spec kdart_kda_<kernel> would launch for args (an op_struct(kernel) or its
        address): kdart's own checks and choices (kdart_spec_for), nothing launched."""
        buf = ctypes.create_string_buffer(256)
        addr = args if isinstance(args, int) else ctypes.addressof(args)
        rc = self.lib.kdart_spec_for(self.handle, kernel.encode(), addr, buf, len(buf))
        if rc < 0:  # (else the spec's length)
            self.check(rc, "kdart_spec_for")
        return buf.value.decode()

    def dhu_v_tile(self, B, HV, K, V):
        bv = ctypes.c_int()
        self.check(self.lib.kdart_dhu_v_tile(self.handle, B, HV, K, V, ctypes.byref(bv)), "kdart_dhu_v_tile")
        return bv.value


_rt_lock = threading.Lock()
_rt = None
_rt_flags = 0  # the process-wide runtime's open flags (tests set OPEN_NO_CUDA rather than the environment)


def runtime():
    """The process-wide Runtime, opened on first use (thread-safe)."""
    global _rt
    r = _rt
    if r is not None:
        return r
    with _rt_lock:
        if _rt is None:
            _rt = Runtime(flags=_rt_flags)
        return _rt


def prepare(kernel, spec="", arch=None, flags=0):
    return runtime().prepare(kernel, spec, arch, flags)


def cache_list():
    return runtime().cache_list()

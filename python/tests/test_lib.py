"""The ctypes layer against libkdart.so: no torch, no GPU."""
import os

import pytest
from conftest import child_env

import kdart
from kdart import _lib


def test_version():
    v = kdart.version()
    assert v.count(".") == 2 and all(p.isdigit() for p in v.split("."))


def test_kernels():
    ks = kdart.kernels()
    assert "bwd_intra" in ks and "bwd_dhu" in ks
    assert "fold_dg" in ks["bwd_intra"]


@pytest.mark.parametrize("kernel,first,outputs", [
    ("bwd_intra", "q", ["dq", "dk", "dg", "db"]),
    ("bwd_dhu", "qg", ["dh", "dv2", "dh0"]),
    ("wy_dqkg", "q", ["dq", "dk", "dv2", "dg", "db", "dA", "dAqk"]),
])
def test_op_description(kernel, first, outputs):
    """Each operation's args struct as the library describes it (kdart_op_arg): the struct the package builds
    from it lays out as the C one, field by field (op_struct checks each offset and the size)."""
    import ctypes
    args, size = _lib.op_args(kernel)
    assert args[0].name == first and args[0].kind == _lib.ARG_INPUT and args[0].dims[0] == "B"
    assert [a.name for a in args if a.kind == _lib.ARG_OUTPUT] == outputs
    assert [a.name for a in args if a.kind == _lib.ARG_SEQS][0] == "cu_seqlens"
    if kernel == "bwd_dhu":  # dv, or Aqk (fla's chunk_kda_bwd_dAv fused): both optional, exactly one given
        ins = {a.name: a for a in args if a.kind == _lib.ARG_INPUT}
        assert ins["dv"].optional and ins["Aqk"].optional and ins["Aqk"].dims[-1] == "64"
    if kernel == "wy_dqkg":
        assert [a.optional for a in args if a.name == "dAqk"] == [True]
    cls = _lib.op_struct(kernel)
    assert ctypes.sizeof(cls) == size
    assert all(getattr(cls, a.name).offset == a.offset for a in args)


def test_op_description_refusals():
    with pytest.raises(ValueError, match="no operation of its own"):
        _lib.op_args("chunk_rcumsum")
    with pytest.raises(ValueError, match="EKERNEL"):
        _lib.op_args("nope")


def test_open_info(cpu_runtime, tmp_path):
    info = cpu_runtime.info()
    assert info["cache_path"].startswith(str(tmp_path))
    assert info["cache_writable"] and not info["cuda_available"]
    assert info["nvrtc"].startswith("13.") and info["nvjitlink"].startswith("13.")
    assert os.path.isdir(info["kernel_dir"])


def test_prepare_and_list(cpu_runtime):
    spec = "io=bf16,fold_dg=1,emit_bf16=0,K=64,varlen=0,tail=0,beta=io"  # canonical: every parameter
    p = cpu_runtime.prepare("bwd_intra", spec, "sm_100a")
    assert p["source"] == "compiled" and len(p["key"]) == 64 and not p["loaded"]
    again = cpu_runtime.prepare("bwd_intra", spec, "sm_100a")
    assert again["key"] == p["key"] and again["source"] in ("memory", "cache")
    entries = cpu_runtime.cache_list()
    assert [(e["kernel"], e["spec"], e["arch"], e["failed"]) for e in entries] == [
        ("bwd_intra", spec, "sm_100a", False)]
    assert "registers=" in entries[0]["report"]


@pytest.mark.parametrize("kernel,spec,name", [
    ("no_such_kernel", "", "EKERNEL"),
    ("bwd_intra", "io=int8", "ESPEC"),
    ("bwd_intra", "K=96", "ESPEC"),
])
def test_bad_kernel_or_spec_is_value_error(cpu_runtime, kernel, spec, name):
    with pytest.raises(ValueError) as ei:
        cpu_runtime.prepare(kernel, spec, "sm_100a")
    e = ei.value
    assert isinstance(e, kdart.KdartError) and isinstance(e, kdart.KdartValueError)
    assert e.name == name and e.status < 0
    assert str(e).startswith(name + ":") and len(str(e)) > len(name) + 5  # kdart_last_error's message


def test_bad_arch_is_value_error(cpu_runtime):
    with pytest.raises(ValueError, match="EARCH"):
        cpu_runtime.prepare("bwd_intra", "", "sm_banana")


def test_runtime_error_mapping():
    e = _lib.error_for(-5, "ECOMPILE: boom")
    assert isinstance(e, RuntimeError) and not isinstance(e, ValueError) and e.name == "ECOMPILE"
    e = _lib.error_for(-20, "")
    assert isinstance(e, ValueError) and e.name == "ESHAPE" and "ESHAPE" in str(e)


def test_process_runtime_is_shared(monkeypatch, tmp_path, private_shared_runtime):
    monkeypatch.setenv("KDART_CACHE_DIR", str(tmp_path))
    import threading
    got = []
    ts = [threading.Thread(target=lambda: got.append(kdart.runtime())) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(got) == 4 and all(r is got[0] for r in got)


def test_cuda_lib_dirs_order(monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-x")
    d = _lib.cuda_lib_dirs()
    assert d.index("/opt/cuda-x/lib64") < d.index("/usr/local/cuda/lib64")
    assert any(p.endswith("nvidia/cu13/lib") for p in d[:d.index("/opt/cuda-x/lib64")])


def test_missing_library_message(monkeypatch, tmp_path):
    monkeypatch.setattr(_lib, "_loaded", None)
    monkeypatch.setenv("KDART_LIBRARY", str(tmp_path / "libkdart.so"))
    with pytest.raises(RuntimeError, match="cannot load"):
        _lib.load()


def test_kernel_dir_env_passed(monkeypatch, tmp_path):
    """KDART_KERNEL_DIR is honoured (passed as kdart_options.kernel_dir)."""
    monkeypatch.setenv("KDART_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KDART_KERNEL_DIR", str(tmp_path))
    with kdart.Runtime(flags=_lib.OPEN_NO_CUDA) as rt:
        assert rt.kernel_dir == str(tmp_path) and rt.info()["kernel_dir"] == str(tmp_path)


def _door(args, tmp_path):
    """`python -m kdart ARGS` (the Python door of the kdart program) on tmp_path's cache."""
    import subprocess
    import sys
    env = child_env()
    env.pop("KDART_ARCH", None)
    return subprocess.run([sys.executable, "-m", "kdart", "--cache", str(tmp_path / "kdart.db")] + args,
                          env=env, capture_output=True, text=True, timeout=600)


def test_one_cache_two_doors(tmp_path):
    """A prewarm through the kdart program's Python door (python -m kdart) is what the library in a Python
    process hits: the same NVRTC, so the same keys; nothing is compiled again, no entry added."""
    r = _door(["prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 compiled" in r.stdout
    stats = _door(["stats"], tmp_path).stdout
    with _lib.Runtime(cache_path=str(tmp_path / "kdart.db"), flags=_lib.OPEN_NO_CUDA) as rt:
        info = rt.info()
        assert f"{info['nvrtc']} ({info['nvrtc_build']})" in stats  # one NVRTC, one key
        before = rt.cache_list()
        for K in (64, 128, 256):
            assert rt.prepare("chunk_rcumsum", f"K={K}", "sm_90a")["source"] == "cache"
        assert len(rt.cache_list()) == len(before) == 3


def test_door_environment(monkeypatch, tmp_path):
    """The program runs with the Python door's NVRTC directory first on LD_LIBRARY_PATH."""
    from kdart import cli
    libs = {so: str(tmp_path / so) for so in ("libnvrtc.so.13", "libnvJitLink.so.13")}  # as load() chose them
    monkeypatch.setattr(_lib, "load", lambda: _lib._Loaded(None, "libkdart.so", False, libs))
    env = cli.environment({"LD_LIBRARY_PATH": "/x"})
    assert env["LD_LIBRARY_PATH"] == f"{tmp_path}:/x"


def test_torch_ext_help_builds_nothing(tmp_path):
    """`python -m kdart.torch_ext --help` prints its usage and builds nothing (no torch needed); a bad
    argument is a usage error."""
    import subprocess
    import sys
    env = child_env(
               KDART_TORCH_EXT_DIR=str(tmp_path / "ext"))
    r = subprocess.run([sys.executable, "-m", "kdart.torch_ext", "--help"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m kdart.torch_ext"), r.stdout + r.stderr
    assert not (tmp_path / "ext").exists()
    r = subprocess.run([sys.executable, "-m", "kdart.torch_ext", "--nope"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "unknown argument '--nope'" in r.stderr
    assert not (tmp_path / "ext").exists()


def test_c_log_reaches_logging(monkeypatch, tmp_path, caplog):
    """The C library's warnings arrive in Python's logging, logger "kdart" (a refused setting, named once),
    and KDART_LOG=off keeps them out."""
    import logging
    monkeypatch.setenv("KDART_CACHE_MAX_BYTES", "abc")
    with caplog.at_level(logging.WARNING, logger="kdart"):
        _lib.Runtime(cache_path=str(tmp_path / "a.db"), flags=_lib.OPEN_NO_CUDA).close()
    said = [r.getMessage() for r in caplog.records if r.name == "kdart"]
    assert len(said) == 1 and "KDART_CACHE_MAX_BYTES=abc ignored" in said[0], said
    caplog.clear()
    monkeypatch.setenv("KDART_LOG", "off")
    with caplog.at_level(logging.WARNING, logger="kdart"):
        _lib.Runtime(cache_path=str(tmp_path / "b.db"), flags=_lib.OPEN_NO_CUDA).close()
    assert not [r for r in caplog.records if r.name == "kdart"]

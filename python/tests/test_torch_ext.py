"""kdart.torch_ext, the C++ fast path, where it is built (`python -m kdart.torch_ext`; skipped otherwise): it
hands every call to kdart's C validation and returns kdart's status for a refused one (kdart.torch then
raises from its Python path), and kdart.torch uses it for eager CUDA calls.  Needs torch; no GPU."""
import pytest

torch = pytest.importorskip("torch")
from kdart import torch_ext  # noqa: E402

ext = torch_ext.load()
if ext is None:
    pytest.skip("kdart.torch_ext is not built (python -m kdart.torch_ext)", allow_module_level=True)

import kdart.torch as kt  # noqa: E402
from kda_ref import dhu_inputs, intra_inputs  # noqa: E402


def test_loaded_by_kdart_torch():
    assert kt._EXT is not None and kt._EXT.ABI == ext.ABI


def test_refusals_are_kdart_statuses(private_shared_runtime):
    st = kt._fast()
    a = intra_inputs(1, 64, 2, 2, 64, torch.bfloat16, "cpu")
    before = [t.clone() for t in a]
    assert ext.intra(st["handle"], st["intra_addr"], 0, *a, True, False, None, None) == -23  # EDEVICE: CPU
    assert "tensor q is not in CUDA device memory" in st["rt"].lib.kdart_last_error(st["handle"]).decode()
    assert all(torch.equal(x, y) for x, y in zip(a, before))
    bad = list(a)
    bad[2] = bad[2].double()
    assert ext.intra(st["handle"], st["intra_addr"], 0, *bad, True, False, None, None) < 0
    d, h0, dht = dhu_inputs(1, 64, 2, 64, 64, torch.bfloat16, "cpu")
    assert ext.dhu(st["handle"], st["dhu_addr"], 0, *d, h0, dht, float("nan"), 1, None, None, None, False) == -23
    assert ext.dhu(st["handle"], st["dhu_addr"], 0, d[0][0], *d[1:], h0, dht, 0.1, 1, None, None, None, False) < 0


def test_dhu_passes_state_v_first(private_shared_runtime):
    """state_v_first reaches kdart: with the V-first state shapes the call passes the direct
    entry's and kdart's checks up to the device (CPU tensors: EDEVICE, -23; kdart checks the device before
    the shapes, so the layouts themselves are test_torch_gpu's)."""
    st = kt._fast()
    d, h0, dht = dhu_inputs(1, 64, 2, 64, 128, torch.bfloat16, "cpu")  # K = 64, V = 128
    vf = (h0.transpose(-1, -2).contiguous(), dht.transpose(-1, -2).contiguous())
    assert ext.dhu(st["handle"], st["dhu_addr"], 0, *d, *vf, float("nan"), 1, None, None, None, True) == -23


def test_direct_entries_leave_other_calls_to_the_python_path(private_shared_runtime):
    """intra_fast / dhu_fast (built with c10::cuda) answer None for what they do not take: CPU tensors,
    a non-tensor argument, the wrong argument count, a varlen dh without chunk_indices; nothing written."""
    if not hasattr(ext, "intra_fast"):
        pytest.skip("built without the CUDA runtime's headers: no direct entries")
    kt._fast()  # binds them
    assert kt._XI is ext.intra_fast and kt._XD is ext.dhu_fast
    a = intra_inputs(1, 64, 2, 2, 64, torch.bfloat16, "cpu")
    before = [t.clone() for t in a]
    assert ext.intra_fast(*a, True, False, None, None) is None
    assert ext.intra_fast(*a, True, False) is None
    assert ext.intra_fast(*a[:-1], 3, True, False, None, None) is None
    assert all(torch.equal(x, y) for x, y in zip(a, before))
    d, h0, dht = dhu_inputs(1, 64, 2, 64, 64, torch.bfloat16, "cpu")
    assert ext.dhu_fast(*d, h0, dht, 0.1, None, None, None, False) is None
    assert ext.dhu_fast(*d, h0, dht, 0.1, None, None, None) is None  # 12 arguments: not its arity
    cu = torch.tensor([0, 64], dtype=torch.int32)
    assert ext.dhu_fast(*d, h0, dht, "x", cu, None, None, False) is None
    with pytest.raises(TypeError):
        ext.bind(1, 2)
    # through kdart.torch, a CPU call still raises kdart's EDEVICE from the Python path
    with pytest.raises(ValueError, match="CUDA"):
        kt.bwd_intra(*a, fold_dg=True)


def test_direct_entries_call_the_current_runtime():
    """Whenever the direct entries are bound, they call kdart.torch's current runtime (the private runtime
    of a test, closed after it, must not stay bound: conftest's private_shared_runtime rebinds)."""
    if not hasattr(ext, "intra_fast"):
        pytest.skip("built without the CUDA runtime's headers: no direct entries")
    st = kt._fast()
    if kt._XI is not None:
        assert ext.bound() == st["handle"]

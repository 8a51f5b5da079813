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


def test_dhu_passes_state_v_first(private_shared_runtime, monkeypatch):
    """state_v_first reaches kdart (issue 15): refused behind the gate naming it; with the gate open the call
    gets past it to the tensor checks (CPU tensors: EDEVICE; the V-first shapes need a GPU, test_torch_gpu)."""
    st = kt._fast()
    d, h0, dht = dhu_inputs(1, 64, 2, 64, 128, torch.bfloat16, "cpu")  # K = 64, V = 128
    vf = (h0.transpose(-1, -2).contiguous(), dht.transpose(-1, -2).contiguous())
    monkeypatch.delenv("KDART_EXPERIMENTAL", raising=False)
    assert ext.dhu(st["handle"], st["dhu_addr"], 0, *d, *vf, float("nan"), 1, None, None, None, True) == -24
    assert "state_v_first" in st["rt"].lib.kdart_last_error(st["handle"]).decode()
    monkeypatch.setenv("KDART_EXPERIMENTAL", "1")
    assert ext.dhu(st["handle"], st["dhu_addr"], 0, *d, *vf, float("nan"), 1, None, None, None, True) == -23

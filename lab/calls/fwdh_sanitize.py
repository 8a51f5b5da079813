"""kdart's fwd_h alone at the bench shapes under compute-sanitizer memcheck (no fla): B2 T8192 H32 K=V=128
(BV 32: 256 scans), prod8192 (B16 T8192 H16 K128 V256, BV 64) and 32768 packed tokens in 7 documents, both
state layouts; prints a checksum per case (with `--time`, also kdart's time per call without the sanitizer)."""
import sys

import torch

sys.path.insert(0, "bench")
from common import Row, make_fwdh, seq_layout  # noqa: E402

import kdart.torch as kt  # noqa: E402

LENS = [8192, 4096, 6000, 1, 7000, 63, 7410]
CASES = [Row("b2_t8192_h32", 2, 8192, 32, 32, 128, 128), Row("prod8192", 16, 8192, 16, 16, 128, 256),
         Row("packed", 1, sum(LENS), 32, 32, 128, 128, lens=LENS)]
timing = "--time" in sys.argv
for r in CASES:
    lay = seq_layout(r.B, r.T, r.lens, device="cuda")
    s = make_fwdh(r, "cuda", lay)
    kw = {}
    if r.lens:
        cu = torch.tensor([0] + list(torch.tensor(r.lens).cumsum(0)), device="cuda", dtype=torch.int32)
        kw = dict(cu_seqlens=cu, cu_seqlens_cpu=cu.cpu())
    for svf in (False, True):
        h0 = s["h0"].transpose(-1, -2).contiguous() if svf else s["h0"]
        f = lambda: kt.chunk_gated_delta_rule_fwd_h(s["kg"], s["w"], s["u"], gk=s["g"], initial_state=h0,  # noqa
                                                     output_final_state=True, state_v_first=svf, **kw)
        h, vn, ht = f()
        torch.cuda.synchronize()
        line = f"{r.name} svf={int(svf)} h {h.float().abs().sum().item():.6e} vn {vn.float().abs().sum().item():.6e}"
        if timing:
            for _ in range(3):
                f()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                f()
            e1.record()
            torch.cuda.synchronize()
            line += f" {e0.elapsed_time(e1) / 20:.3f} ms"
        print(line, flush=True)

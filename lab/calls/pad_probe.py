#!/usr/bin/env python3
"""lab/calls/pad_probe.py: the copies of kdart.torch's odd-dim padding alone (session 15), B2 T8192 H16
by default: F.pad against kdart.torch._zero_padded on a bf16 and an fp32 [B,T,H,D] tensor, and the slice
back of dh [B,T/64,H,Dp,Dp] and dv2.  Medians of CUDA-event timings (ms) and the GB/s over the bytes each
must move (read + write, without F.pad's fill)."""
import os
import sys


def main():
    import torch
    import kdart.torch as kt
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from masked_dhu import median_ms
    B, T, H = 2, 8192, 16
    F = torch.nn.functional
    for D in (int(a) for a in (sys.argv[1:] or ["63", "101"])):
        Dp = D + (-D) % 8
        for dt in (torch.bfloat16, torch.float32):
            x = torch.randn(B, T, H, D, device="cuda").to(dt)
            nbytes = x.numel() * x.element_size() * (1 + Dp / D)
            for name, f in (("F.pad", lambda: F.pad(x, (0, Dp - D))), ("zero_padded", lambda: kt._zero_padded(x, (Dp,)))):
                ms = median_ms(f, 30)
                print(f"pad D={D} {str(dt)[6:]:8} {name:12} {ms:.4f} ms {nbytes / ms / 1e6:7.0f} GB/s")
        dh = torch.randn(B, T // 64, H, Dp, Dp, device="cuda").to(torch.bfloat16)
        dv2 = torch.randn(B, T, H, Dp, device="cuda").to(torch.bfloat16)
        for name, f, n in (("dh slice", lambda: dh[..., :D, :D].contiguous(), dh.numel() * 2 * 2 * D * D / Dp / Dp),
                           ("dv2 slice", lambda: dv2[..., :D].contiguous(), dv2.numel() * 2 * 2 * D / Dp)):
            ms = median_ms(f, 30)
            print(f"cut D={D} {name:21} {ms:.4f} ms {n / ms / 1e6:7.0f} GB/s")


if __name__ == "__main__":
    main()

# lab/calls/scans_overlap.py: how much the two scans of the whole backward, fwd_h (h, v_new) and bwd_dhu
# (dh, dv2 with fla's dAv fused), would gain run side by side (cuDNN's structure: the forward state scan and
# the reverse gradient scan as independent halves).  Both read only the recompute's outputs, so they may run
# at once; here on two torch streams forked from and joined to the current one, with today's kernels (the
# block scheduler decides how they share the SMs).  Prints each alone, the two in turn, and the two side by
# side (CUDA events, median of 20).  Runs on the lent GPU from the repository root (PYTHONPATH=python:
# python/tests:lab/calls, KDART_LIBRARY set).  Usage: scans_overlap.py [B T H K V]
import sys
import torch
import kdart.torch as kt
from kda_ref import whole_inputs
from labtime import timed


def main():
    B, T, H, K, V = (int(x) for x in sys.argv[1:6]) if len(sys.argv) > 5 else (2, 8192, 32, 128, 128)
    torch.manual_seed(0)
    t = whole_inputs(B, T, H, H, K, V, B, torch.bfloat16, "cuda")
    gk, w, u, qg, kg = kt.gate_recompute_w_u(t["g"], t["A_log"], t["k"], t["v"], t["beta"], t["Akk"], q=t["q"],
                                             dt_bias=t["dt_bias"], lower_bound=-5.0)
    scale = K ** -0.5

    def fwd():
        return kt.chunk_gated_delta_rule_fwd_h(kg, w, u, gk=gk, initial_state=t["h0"])

    def dhu():
        return kt.bwd_dhu(qg, kg, w, t["d_o"], None, gk, t["h0"], t["dht"], scale, Aqk=t["Aqk"])

    def seq():
        fwd(), dhu()

    streams = torch.cuda.Stream(), torch.cuda.Stream()

    def side_by_side(first, second):
        """first, then second, each on its own stream forked from and joined to the current one (the one
        launched first takes the SMs it fits on first)."""
        cur, outs = torch.cuda.current_stream(), []
        for s, fn in zip(streams, (first, second)):
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                outs.append(fn())
        for s in streams:
            cur.wait_stream(s)
        return outs

    def par():
        return side_by_side(fwd, dhu)

    def par_rev():  # bwd_dhu's CTAs first (they take a whole SM each)
        return side_by_side(dhu, fwd)

    ref_h, ref_dh = fwd()[0].clone(), dhu()[0].clone()
    (h, _, _), (dh, _, _) = par()
    torch.cuda.synchronize()
    assert torch.equal(h, ref_h) and torch.equal(dh, ref_dh)  # (the streams change no result)
    print(f"B{B} T{T} H{H} K{K} V{V}: fwd_h {timed(fwd):.3f} ms, bwd_dhu {timed(dhu):.3f}, in turn {timed(seq):.3f}, "
          f"side by side {timed(par):.3f} (bwd_dhu first {timed(par_rev):.3f})", flush=True)


if __name__ == "__main__":
    main()

# lab/calls/whole_ab.py: the whole backward (production flags, random saved tensors, no fla) timed alone with
# CUDA events: kdart.torch's stages one by one, kdart.torch.chunk_kda_bwd (one C call since it went through
# kdart_kda_chunk_bwd), the bare C call (args and workspace built once), and each one's host time per call,
# with per-kernel profiles and peak memory; on the packed row
# also wy_dqkg without dAqk + bwd_intra (what the whole route ran there before wy_dqkg took the intra terms
# on every grid) against wy_dqkg with dAqk and intra.  Runs on the lent GPU from the repository root
# (PYTHONPATH=python:python/tests, KDART_LIBRARY set).  Usage: whole_ab.py [rows]; WHOLE_NCU=1: only the bare
# call, three times (for ncu)
import os
import sys
import time
import torch
import kdart.torch as kt
from kda_ref import chunk_indices, whole_inputs, wy_inputs
from labtime import timed

ROWS = {  # name: (B, T, H, HV, K, V, cu)
    "b2_t8192_h32": (2, 8192, 32, 32, 128, 128, None),
    "prod8192": (16, 8192, 16, 16, 128, 256, None),
    "packed32768": (1, 32768, 32, 32, 128, 128, [0, 3000, 8192, 9000, 17000, 24000, 30001, 32768]),
    # one document of 30000 tokens among two short ones: bwd_dhu's V split scans it 32 columns wide (its dv
    # from bwd_dav's long_only rows), the short ones 64 wide with the dv fused
    "packed32768_long": (1, 32768, 32, 32, 128, 128, [0, 2000, 32000, 32768]),
    # B2 T8192 as cuDNN frontend's THD layout hands it over: two equal documents, which bwd_dhu's V split
    # calls long by 3% (8192 x 132 SMs against 16384 x 32 heads x 2 tiles)
    "packed2x8192": (1, 16384, 32, 32, 128, 128, [0, 8192, 16384]),
    # bench/varlen.py's seq8 (seed 2): one document of 24820 tokens (1.56 times the split's share) among 7
    "packed_seq8": (1, 32768, 32, 32, 128, 128, [0, 1854, 2782, 3002, 27822, 28283, 31059, 31328, 32768]),
    # 65536 tokens in 25 documents of drawn (lognormal) lengths, the longest ones last: bwd_dhu's grid
    # without the V split (more than four waves), fwd_h's in index order
    "packed65536_n25": (1, 65536, 32, 32, 128, 128, [0, 539, 1514, 3031, 5578, 5896, 6322, 8135, 13220, 17851, 19176,
                                                     19256, 20141, 21679, 23626, 24475, 28103, 28815, 30319, 30599,
                                                     32565, 32917, 42875, 43852, 54834, 65536]),
    # K = V = 256 on 16384 packed tokens in 5 documents: the packed fused kernel with the last step's part is
    # its largest specialization (132,480 bytes of sm_90a text)
    "packed16384_k256": (1, 16384, 16, 16, 256, 256, [0, 1000, 5000, 9001, 12000, 16384]),
}
def c_call(t, scale, lb):
    """A function that runs kdart_kda_chunk_bwd on t's tensors (kdart.torch's plan of the args, laid out and
    pointed at t once), and the workspace's bytes."""
    outs = {n: t[n] for n in kt._CB_OUTS if t.get(n) is not None}
    ins = {n: x for n, x in t.items() if n not in outs}
    plan = kt._CBPlan(ins, [(n, tuple(x.shape), x.dtype) for n, x in outs.items()],
                      dict(scale=scale, lower_bound=lb, safe_gate=1), t["q"].device)
    ws = torch.zeros(plan.ws_bytes, dtype=torch.uint8, device="cuda")
    assert plan.run(ins, outs, ws) == 0
    st = kt._fast()
    h, s = st["handle"], torch.cuda.current_stream().cuda_stream

    def run():
        rc = st["chunk_bwd"](h, plan.addr, s)
        assert rc == 0, rc
    return run, plan.ws_bytes


def host_ms(f, n=30):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        f()
    t = (time.perf_counter() - t) / n * 1e3
    torch.cuda.synchronize()
    return t


def profile(f, n=5):
    """Kernel name -> mean device ms per call of f (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile as prof
    f()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            f()
        torch.cuda.synchronize()
    out = {}
    for e in p.key_averages():
        if e.device_type.name == "CUDA" and e.device_time_total > 0:
            out[e.key[:120]] = e.device_time_total / 1e3 / n
    return out


def main():
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else ["b2_t8192_h32", "packed32768"]
    for name in names:
        B, T, H, HV, K, V, cu = ROWS[name]
        torch.manual_seed(0)
        dev, io = "cuda", torch.bfloat16
        cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32, device=dev)
        ci = None if cu_t is None else chunk_indices(cu_t)
        N = B if cu is None else len(cu) - 1
        t = whole_inputs(B, T, H, HV, K, V, N, io, dev)
        q, k, v, g, beta, Aqk, Akk, do, dht, h0, qr, kr, beta_raw, A_log, dt_bias = (t[n] for n in (
            "q", "k", "v", "g", "beta", "Aqk", "Akk", "d_o", "dht", "h0", "q_rstd", "k_rstd", "beta_raw", "A_log",
            "dt_bias"))
        lb, scale = -5.0, K ** -0.5

        def whole(fn=kt.chunk_kda_bwd):
            return fn(q, k, v, g, beta, Aqk, Akk, do, dht, scale=scale, initial_state=h0, q_rstd=qr, k_rstd=kr,
                      beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True, lower_bound=lb,
                      use_beta_sigmoid_in_kernel=True, cu_seqlens=cu_t, chunk_indices=ci)

        def stages():
            return whole(kt._chunk_kda_bwd_stages)
        want = stages()
        outs = {n: torch.empty_like(w) for n, w in zip(("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"),
                                                       want)}
        outs["ddt_bias"] = outs["ddt_bias"].view(HV, K)
        t.update(dt_bias=dt_bias.view(HV, K), cu_seqlens=cu_t, chunk_indices=ci, **outs)
        cf, nbytes = c_call(t, scale, lb)
        cf()
        torch.cuda.synchronize()
        if os.environ.get("WHOLE_NCU"):  # the bare call twice more and nothing else, for ncu
            cf(), cf()
            torch.cuda.synchronize()
            continue
        same = all(torch.equal(torch.nan_to_num(outs[n].view(w.shape), nan=7.0), torch.nan_to_num(w, nan=7.0))
                   for n, w in zip(("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"), want))
        ts_, tw, tc = timed(stages), timed(whole), timed(cf)
        hs, hw, hc = host_ms(stages), host_ms(whole), host_ms(cf)
        print(f"{name}: stages {ts_:.3f} ms (host {hs:.3f} ms/call); kdart.torch.chunk_kda_bwd {tw:.3f} ms (host "
              f"{hw:.3f}); bare C call {tc:.3f} ms (host {hc:.3f}, workspace {nbytes / 2**20:.0f} MiB); bitwise "
              f"equal: {same}", flush=True)
        for label, f in (("stages", stages), ("chunk_kda_bwd", whole), ("bare", cf)):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = f()
            torch.cuda.synchronize()
            print(f"{name} {label} peak memory over its start: {(torch.cuda.max_memory_allocated() - base) / 2**20:.0f} MiB",
                  flush=True)
            del out  # (the bare call returns None: its outputs are outs, allocated above)
            pr = profile(f)
            print(f"{name} {label} profile: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                         sorted(pr.items(), key=lambda kv: -kv[1])[:8]), flush=True)
        if cu is not None:  # the wy part alone, old and new
            torch.manual_seed(0)
            a = wy_inputs(B, T, H, HV, K, V, io, dev, cu=cu_t)
            kw = dict(scale=scale, cu_seqlens=cu_t, chunk_indices=ci)
            o = kt.wy_dqkg(*a, dAqk=True, **kw)
            dAqk = o[6].clone()

            def old():
                dq, dk, dv, db, dg, dA = kt.wy_dqkg(*a, **kw)
                return kt.bwd_intra(a[0], a[1], a[4], a[5], dAqk, dA, dq, dk, db, dg, fold_dg=True, cu_seqlens=cu_t,
                                    chunk_indices=ci)

            def new():
                return kt.wy_dqkg(*a, dAqk=True, intra=True, **kw)
            to, tn = timed(old), timed(new)
            print(f"{name}: wy_dqkg + bwd_intra {to:.3f} ms, wy_dqkg(dAqk, intra) {tn:.3f} ms ({to / tn:.2f}x)",
                  flush=True)
        del t, outs, want
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

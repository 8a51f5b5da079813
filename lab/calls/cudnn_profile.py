# lab/calls/cudnn_profile.py: cuDNN frontend 1.32's sm_90 KDA backward, kernel by kernel (torch.profiler),
# in its own configuration (bench/e2e.py's "cudnn" inputs) at B2 T8192 H32 (two documents) and 32768 tokens
# in 7 documents.  The question it answers: is its fused per-chunk kernel (k_bwd: one 512-thread CTA per
# chunk and head, dq and dk kept in registers, the intra-chunk part on tensor cores with anchored sub-blocks)
# faster than kdart's fused wy_dqkg + bwd_intra (1.61-1.70 ms at B2), and what do its prep and its two-scan
# grid cost against kdart's recompute_wu + fwd_h + bwd_dhu.  No fla needed.  Runs on the lent GPU from the
# repository root with cuDNN frontend's wheels on PYTHONPATH (next-s12c.sh).  Usage: cudnn_profile.py [iters]
import sys

import torch

sys.path.insert(0, "bench")
import e2e  # noqa: E402  (bench/e2e.py: the inputs and cuDNN's stepper)

ROWS = {"b2_t8192_h32": (1, 16384, 32, 32, 128, 128, (8192, 8192)),
        "packed_t32768_hv32": (1, 32768, 32, 32, 128, 128, e2e.SHAPES["packed_t32768_hv32"][6])}


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for name, (B, T, H, HV, K, V, docs) in ROWS.items():
        leaves, do, dht, kw = e2e.inputs(B, T, H, HV, K, V, docs, "cudnn")
        e2e.backward_ms(leaves, do, dht, kw, 1, stepper=e2e.cudnn_step)  # its NVRTC compiles
        ms, _ = e2e.backward_ms(leaves, do, dht, kw, iters, queued=True, stepper=e2e.cudnn_step)
        prof = e2e.profile_backward(leaves, do, dht, kw, iters, stepper=e2e.cudnn_step)
        tot = sum(prof.values())
        print(f"{name}: cuDNN backward queued {ms:.3f} ms; kernels {tot:.3f} ms per backward", flush=True)
        for key, t in sorted(prof.items(), key=lambda kv: -kv[1]):
            print(f"  {t:8.3f} ms {100 * t / tot:5.1f}%  {key}")
        del leaves, do, dht, kw
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

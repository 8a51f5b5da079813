"""One kdart wy_dqkg launch at B2 T8192 H32 K=V=128 (bench/common.py's inputs), for ncu."""
import os
import sys
sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "..", "bench"),
                os.path.join(os.path.dirname(__file__), "..", "..", "python")]
import torch  # noqa: E402
from common import Row, make_wy  # noqa: E402
import kdart.torch as kt  # noqa: E402

s = make_wy(Row("r", 2, 8192, 32, 32, 128, 128), "cuda")
for _ in range(2):
    kt.wy_dqkg(s["q"], s["k"], s["v"], s["v_new"], s["g"], s["beta"], s["A"], s["h"], s["do"], s["dh"], s["dv"],
               scale=s["scale"])
torch.cuda.synchronize()

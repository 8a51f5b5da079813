"""bench/e2e.py's byte floors without a GPU: the analytic byte counts its report divides by."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "bench"))
import e2e  # noqa: E402


def test_io_floor_counts_each_input_and_gradient_once():
    """The production configuration at B2 T8192 H32 K = V = 128, counted here tensor by tensor: q, k, v, the
    raw gate, beta's logits, Aqk, Akk and do in bf16, the two rstd's, h0 and dht in fp32; the five gradients
    in their inputs' dtypes and dh0 in fp32."""
    B, T, H, K, V = 2, 8192, 32, 128, 128
    n, s0 = B * T, B * H * K * V
    ins = (n * H * K * 2) * 4 + n * H * 2 + 2 * n * H * 64 * 2 + n * H * V * 2 + 2 * n * H * 4 + 2 * s0 * 4
    outs = (n * H * K * 2) * 4 + n * H * 2 + s0 * 4
    io, layout = e2e.byte_floor(B, T, H, H, K, V, None, "prod")
    assert abs(io - (ins + outs) / 1e9) < 1e-9
    assert 1.3 < io < 1.4 and 5 * io < layout < 6 * io  # (the doc's 1.35 GB; five kernels' intermediates)


def test_floors_scale_with_tokens_and_states():
    """Twice the tokens in as many chunks (two rows against one of twice the length) move the same bytes;
    packed documents add the chunks their ends split; the fp32 gate of the recipe reads more than bf16."""
    a = e2e.byte_floor(2, 4096, 4, 8, 64, 128, None, "prod")
    b = e2e.byte_floor(1, 8192, 4, 8, 64, 128, None, "prod")
    c = e2e.byte_floor(1, 8192, 4, 8, 64, 128, (4000, 4192), "prod")
    assert abs(a[1] - b[1]) < 1e-3 and a[0] > b[0]  # (a has two h0, dht and dh0 states, b one)
    assert c[1] > b[1] and c[0] > b[0]
    r = e2e.byte_floor(2, 4096, 4, 8, 64, 128, None, "recipe")
    assert r[0] > a[0]
    assert e2e.floor_ms(4.25) == 1.0

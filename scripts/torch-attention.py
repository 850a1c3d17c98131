"""PyTorch's causal scaled-dot-product attention at `ferrocm bench --only
attention`'s prefill shapes (bf16, batch 1, 32 heads, s 2048 and 8192, d 128
and 64), timed as the anchors in notes/gpu-anchors.md were: after warm-up,
the best of five rounds, each the average of `reps` calls queued back to back
between two CUDA events.

    python3 scripts/torch-attention.py   # on a machine with a CUDA GPU and torch

TFLOP/s counts 2 s^2 d h (the causal half of the two products), as ferrocm's
bench does.
"""
import torch
import torch.nn.functional as F

dev = torch.device("cuda")


def timed(f, reps=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            f()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / reps)
    return best


g = torch.Generator(device=dev).manual_seed(0)
heads = 32
for s, d in [(2048, 128), (8192, 128), (2048, 64), (8192, 64)]:
    q, k, v = (torch.randn(1, heads, s, d, device=dev, generator=g).bfloat16() for _ in range(3))
    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    tflops = 2 * s * s * d * heads / (ms * 1e-3) / 1e12
    print(f"sdpa causal bf16 s{s} d{d}: {ms:.4f} ms, {tflops:.1f} TFLOP/s")

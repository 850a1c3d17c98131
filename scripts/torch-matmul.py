"""PyTorch's matmul at `ferrocm bench`'s matrix sizes, timed as the anchors in
notes/gpu-anchors.md were: after warm-up, the best of five rounds, each the
average of `reps` calls queued back to back between two CUDA events.

    python3 scripts/torch-matmul.py   # on a machine with a CUDA GPU and torch

It prints one line per case: time, TFLOP/s and, for the matrix-vector
products, GB/s of weight read and its share of a device-to-device copy
measured in the same run (bytes read + written, as `ferrocm bench` counts).
"""
import torch

dev = torch.device("cuda")


def timed(f, reps=50):
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


src = torch.empty(16384 * 4096, dtype=torch.float32, device=dev)
dst = torch.empty_like(src)
copy_ms = timed(lambda: dst.copy_(src))
copy_gbps = 2 * src.numel() * 4 / (copy_ms * 1e-3) / 1e9
print(f"copy f32 16384x4096: {copy_ms:.4f} ms, {copy_gbps:.0f} GB/s (read + written)")
h = 4096
ffn = h * 7 // 2
g = torch.Generator(device=dev).manual_seed(0)
w14 = torch.randn(ffn, h, device=dev, generator=g).bfloat16()
x1 = torch.randn(1, h, device=dev, generator=g).bfloat16()
w4 = torch.randn(h, h, device=dev, generator=g)
v4 = torch.randn(h, device=dev, generator=g)
b4 = torch.randn(h, h, device=dev, generator=g).bfloat16()
a1 = torch.randn(h // 4, h // 4, device=dev, generator=g)
tok = torch.randn(h // 8, h, device=dev, generator=g).bfloat16()
bias = torch.randn(h, device=dev, generator=g).bfloat16()
cases = [
    ("gemv bf16 (weight bytes)", lambda: torch.nn.functional.linear(x1, w14), ffn * h * 2, 2 * ffn * h),
    ("matvec f32 (weight bytes)", lambda: torch.mv(w4, v4), h * h * 4, 2 * h * h),
    ("gemm bf16", lambda: b4 @ b4, 3 * h * h * 2, 2 * h**3),
    ("gemm f32", lambda: a1 @ a1, 3 * (h // 4) ** 2 * 4, 2 * (h // 4) ** 3),
    (
        "linear+bias+silu bf16",
        lambda: torch.nn.functional.silu(torch.nn.functional.linear(tok, b4, bias)),
        (h // 8 * h * 2 + h * h) * 2,
        2 * (h // 8) * h * h,
    ),
]
for name, f, nbytes, flops in cases:
    ms = timed(f)
    gbps = nbytes / (ms * 1e-3) / 1e9
    print(
        f"{name:<26} {ms:.4f} ms  {flops / (ms * 1e-3) / 1e12:7.2f} TFLOP/s  "
        f"{gbps:6.0f} GB/s  {100 * gbps / copy_gbps:5.1f}% of copy"
    )

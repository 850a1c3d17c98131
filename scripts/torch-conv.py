"""PyTorch's conv2d (cuDNN) at `ferrocm bench --only conv`'s shapes, timed as
the anchors in notes/gpu-anchors.md were: after warm-up, the best of five
rounds, each the average of `reps` calls queued back to back between two CUDA
events.

    python3 scripts/torch-conv.py   # on a machine with a CUDA GPU and torch

f32 rows twice: strict f32 (`allow_tf32 = False`, what ferrocm's f32 kernel
computes) and PyTorch's default for cuDNN convolutions (TF32 inputs). One line
per case: time and TFLOP/s, benchmark mode on (cuDNN's algorithm search, as a
tuned deployment runs).
"""
import torch

dev = torch.device("cuda")
torch.backends.cudnn.benchmark = True


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


shapes = [
    ("conv2d 3x3 64->64", 1, 64, 64, 56, 3, 1, 1),
    ("conv2d stem 7x7/2 3->64", 1, 3, 64, 224, 7, 2, 1),
    ("conv2d 3x3 256->256 b32", 32, 256, 256, 14, 3, 1, 1),
    ("conv2d depthwise 3x3 512 b8", 8, 512, 512, 28, 3, 1, 512),
    ("conv2d sd 3x3 320->320 b2", 2, 320, 320, 64, 3, 1, 1),
]
g = torch.Generator(device=dev).manual_seed(0)
for name, n, cin, cout, size, k, stride, groups in shapes:
    x = torch.randn(n, cin, size, size, device=dev, generator=g)
    w = torch.randn(cout, cin // groups, k, k, device=dev, generator=g) * 0.1
    b = torch.randn(cout, device=dev, generator=g) * 0.1
    out = (size + 2 * (k // 2) - k) // stride + 1
    flops = 2 * n * cout * out * out * (cin // groups) * k * k
    for label, dtype, tf32 in [("f32", torch.float32, False), ("f32 tf32", torch.float32, True),
                               ("bf16", torch.bfloat16, False)]:
        torch.backends.cudnn.allow_tf32 = tf32
        xs, ws, bs = x.to(dtype), w.to(dtype), b.to(dtype)
        f = lambda: torch.nn.functional.conv2d(xs, ws, bs, stride=stride, padding=k // 2, groups=groups)
        ms = timed(f)
        print(f"{name} {label}: {ms:.4f} ms, {flops / (ms * 1e-3) / 1e12:.2f} TFLOP/s")

# The transposed convolution of `ferrocm bench --only conv`: doubling a
# (2, 320, 32, 32) activation, kernel 4, stride 2, padding 1 (useful FLOPs:
# each input times each of its taps).
n, ch, size = 2, 320, 32
x = torch.randn(n, ch, size, size, device=dev, generator=g)
w = torch.randn(ch, ch, 4, 4, device=dev, generator=g) * 0.1
b = torch.randn(ch, device=dev, generator=g) * 0.1
flops = 2 * n * ch * size * size * ch * 16
for label, tf32 in [("f32", False), ("f32 tf32", True)]:
    torch.backends.cudnn.allow_tf32 = tf32
    f = lambda: torch.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1)
    ms = timed(f)
    print(f"conv_transpose2d 4x4/2 320->320 b2 {label}: {ms:.4f} ms, "
          f"{flops / (ms * 1e-3) / 1e12:.2f} TFLOP/s")

"""PyTorch beside `ferrocm bench --only conv`'s network rows (group_norm(32),
max_pool 3x3/2, nearest and bilinear 2x upsampling), timed as the anchors in
notes/gpu-anchors.md were (after warm-up, the best of five rounds, each the
average of `reps` calls queued back to back between two CUDA events); and,
with `--fixture PATH`, the golden outputs of tests/fixtures/convnet.json.

    python3 scripts/torch-convnet.py                      # timings (CUDA)
    python3 scripts/torch-convnet.py --fixture out.json   # the fixture (CPU)

The fixture's inputs are `x[i] = ((i * 7919) % 1000) / 125 - 4` (exact in f32,
so the Rust test rebuilds them), shaped per case; its outputs are PyTorch's
f32 results on the CPU, written as f32 values, and a max pool's indices. The
transposed convolutions' weights come from the same formula over the weight's
shape, divided by 8.
"""
import json
import sys

import torch
import torch.nn.functional as F


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


def inputs(shape):
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.float64)
    return (((i * 7919) % 1000) / 125 - 4).to(torch.float32).reshape(shape)


# (name, input shape, the op)
CASES = [
    ("max_pool2d k3 s2 p1", [2, 3, 9, 11], lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
    ("max_pool2d k3 s2 p1 ceil", [1, 2, 12, 13], lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)),
    ("max_pool2d k2 s3 dil2 p1 ceil", [1, 2, 10, 7], lambda x: F.max_pool2d(x, 2, 3, 1, dilation=2, ceil_mode=True, return_indices=True)),
    ("max_pool1d k4 s3 p2 ceil", [2, 2, 17], lambda x: F.max_pool1d(x, 4, 3, 2, ceil_mode=True, return_indices=True)),
    ("max_pool3d k2 s2", [1, 2, 4, 5, 6], lambda x: F.max_pool3d(x, 2, 2, return_indices=True)),
    ("avg_pool2d k3 s2 p1", [2, 3, 9, 11], lambda x: F.avg_pool2d(x, 3, 2, 1)),
    ("avg_pool2d k3 s2 p1 ceil exclude", [1, 2, 8, 7], lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    ("avg_pool2d k4x3 s3 p2x1 ceil", [1, 2, 8, 7], lambda x: F.avg_pool2d(x, (4, 3), 3, (2, 1), ceil_mode=True)),
    ("avg_pool2d k3 s1 p1 divisor 5", [1, 2, 6, 6], lambda x: F.avg_pool2d(x, 3, 1, 1, divisor_override=5)),
    ("avg_pool1d k3 s2 p1", [2, 2, 11], lambda x: F.avg_pool1d(x, 3, 2, 1)),
    ("avg_pool3d k2 s1 p1 exclude", [1, 2, 3, 4, 5], lambda x: F.avg_pool3d(x, 2, 1, 1, count_include_pad=False)),
    ("adaptive_avg_pool2d 3x4", [2, 2, 7, 10], lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
    ("adaptive_avg_pool2d 5x7 up", [1, 2, 3, 2], lambda x: F.adaptive_avg_pool2d(x, (5, 7))),
    ("adaptive_avg_pool1d 4", [2, 2, 11], lambda x: F.adaptive_avg_pool1d(x, 4)),
    ("adaptive_max_pool2d 3x4", [2, 2, 7, 10], lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True)),
    ("upsample nearest size 6x10", [1, 2, 10, 6], lambda x: F.interpolate(x, size=(6, 10), mode="nearest")),
    ("upsample nearest scale 1.5x3", [1, 2, 7, 3], lambda x: F.interpolate(x, scale_factor=(1.5, 3.0), mode="nearest")),
    ("upsample nearest scale 2", [1, 2, 5, 7], lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest")),
    ("upsample bilinear size 13x5", [1, 2, 4, 9], lambda x: F.interpolate(x, size=(13, 5), mode="bilinear", align_corners=False)),
    ("upsample bilinear size 13x5 corners", [1, 2, 4, 9], lambda x: F.interpolate(x, size=(13, 5), mode="bilinear", align_corners=True)),
    ("upsample bilinear scale 0.5x0.75", [1, 2, 6, 6], lambda x: F.interpolate(x, scale_factor=(0.5, 0.75), mode="bilinear", align_corners=False)),
    ("upsample bilinear scale 2", [1, 2, 5, 7], lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)),
    ("group_norm 2 groups", [2, 4, 5, 3], lambda x: F.group_norm(x, 2, torch.linspace(0.5, 2.0, 4), torch.linspace(-1.0, 1.0, 4), 1e-5)),
    ("group_norm 1 group no affine", [1, 6, 7], lambda x: F.group_norm(x, 1, eps=1e-5)),
    ("instance_norm", [2, 3, 4, 5], lambda x: F.instance_norm(x, eps=1e-5)),
    ("batch_norm", [3, 4, 2, 3], lambda x: F.batch_norm(x, torch.linspace(-1.0, 1.0, 4), torch.linspace(0.5, 3.0, 4), torch.linspace(0.5, 2.0, 4), torch.linspace(-1.0, 1.0, 4), False, 0.1, 1e-5)),
    # Transposed convolutions: weights from the same formula over the
    # weight's shape, divided by 8; biases linspace(-1, 1, C_out).
    ("conv_transpose2d k4 s2 p1", [1, 3, 4, 5], lambda x: F.conv_transpose2d(x, inputs([3, 4, 4, 4]) / 8, torch.linspace(-1.0, 1.0, 4), stride=2, padding=1)),
    ("conv_transpose2d k3 s2x3 p1x0 op1x2 dil1x2 g2", [2, 4, 3, 4], lambda x: F.conv_transpose2d(x, inputs([4, 3, 3, 3]) / 8, torch.linspace(-1.0, 1.0, 6), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(1, 2))),
    ("conv_transpose1d k5 s3 p4 op1 depthwise", [1, 3, 7], lambda x: F.conv_transpose1d(x, inputs([3, 1, 5]) / 8, None, stride=3, padding=4, output_padding=1, groups=3)),
    ("conv_transpose3d k2 s2", [1, 2, 2, 3, 2], lambda x: F.conv_transpose3d(x, inputs([2, 3, 2, 2, 2]) / 8, torch.linspace(-1.0, 1.0, 3), stride=2)),
]


def fixture(path):
    out = {"generator": "scripts/torch-convnet.py --fixture, PyTorch " + torch.__version__ + " on the CPU; inputs x[i] = ((i * 7919) % 1000) / 125 - 4; transposed convolutions' weights the same over their shape, / 8", "cases": []}
    for name, shape, f in CASES:
        r = f(inputs(shape))
        case = {"name": name, "input": shape}
        if isinstance(r, tuple):
            case["output"] = list(r[0].shape)
            case["values"] = r[0].flatten().tolist()
            case["indices"] = r[1].flatten().tolist()
        else:
            case["output"] = list(r.shape)
            case["values"] = r.flatten().tolist()
        out["cases"].append(case)
    # One case per line.
    with open(path, "w") as fh:
        fh.write('{"generator": ' + json.dumps(out["generator"]) + ',\n"cases": [\n')
        fh.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in out["cases"]))
        fh.write("\n]}\n")


def bench():
    for times in (1, 16):
        bench_at(times)


def bench_at(times):
    """The rows at `times` their batch (`ferrocm bench`'s `batch_times`):
    the stem's batch of 1 counts as 2; at 16 every tensor is past the L2."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    n = 2 * times
    tag = lambda name: name if times == 1 else f"{name} b{n}"
    sd = torch.randn(n, 320, 64, 64, device=dev, generator=g)
    w, b = torch.randn(320, device=dev) * 0.1 + 1, torch.randn(320, device=dev) * 0.1
    copy = lambda t: t.numel() * t.element_size()
    for label, dt in [("f32", torch.float32), ("bf16", torch.bfloat16)]:
        x, ww, bb = sd.to(dt), w.to(dt), b.to(dt)
        ms = timed(lambda: F.group_norm(x, 32, ww, bb, 1e-5))
        print(f"group_norm(32) sd b{n} {label}: {ms:.4f} ms, {2 * copy(x) / (ms * 1e-3) / 1e9:.0f} GB/s")
    xb = sd.to(torch.bfloat16)
    rm, rv = torch.randn(320, device=dev) * 0.1, torch.rand(320, device=dev) + 0.5
    ms = timed(lambda: F.batch_norm(xb, rm, rv, w, b, training=False, eps=1e-5))
    print(f"batch_norm sd b{n} bf16 (f32 statistics): {ms:.4f} ms, {2 * copy(xb) / (ms * 1e-3) / 1e9:.0f} GB/s")
    stem = torch.randn(1 if times == 1 else n, 64, 112, 112, device=dev, generator=g)
    ms = timed(lambda: F.max_pool2d(stem, 3, 2, 1))
    print(f"{tag('max_pool 3x3/2 stem')} f32: {ms:.4f} ms, {(copy(stem) * 1.25) / (ms * 1e-3) / 1e9:.0f} GB/s")
    sdb = sd.to(torch.bfloat16)
    ms = timed(lambda: F.avg_pool2d(sdb, 2))
    print(f"avg_pool 2x2/2 sd b{n} bf16: {ms:.4f} ms, {(copy(sdb) * 1.25) / (ms * 1e-3) / 1e9:.0f} GB/s")
    small = torch.randn(n, 320, 32, 32, device=dev, generator=g).to(torch.bfloat16)
    for mode in ["nearest", "bilinear"]:
        kw = {} if mode == "nearest" else {"align_corners": False}
        ms = timed(lambda: F.interpolate(small, scale_factor=2.0, mode=mode, **kw))
        print(f"{tag(f'upsample {mode} 2x')} bf16: {ms:.4f} ms, {5 * copy(small) / (ms * 1e-3) / 1e9:.0f} GB/s")

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fixture":
        fixture(sys.argv[2])
    else:
        bench()

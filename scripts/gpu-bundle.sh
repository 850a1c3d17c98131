#!/usr/bin/env bash
# Builds, here, everything a GPU run needs into gpu-bundle/ (ignored by git):
# the release `ferrocm` binary with the `cuda` feature, the test executables
# that run on the CUDA device, and scripts/gpu-run.sh. The GPU machine needs
# no Rust toolchain: copy the folder there (or carry it with the device tool)
# and run `bash gpu-bundle/gpu-run.sh LOGDIR`.
#
# Only the PTX module matters on an NVIDIA GPU: the bundle embeds one AMDGPU
# arch (gfx942) to stay small; debug info is stripped for the same reason.
set -euo pipefail
cd "$(dirname "$0")/.."
export FERROCM_ARCHS="${FERROCM_ARCHS:-gfx942}"
export CARGO_PROFILE_RELEASE_STRIP=debuginfo
export CARGO_PROFILE_RELEASE_DEBUG=false
out=gpu-bundle
rm -rf "$out"
mkdir -p "$out"
cargo build --release -p ferrocm-cli --features cuda --bin ferrocm
cp target/release/ferrocm "$out/"
# Test executables: the reference tests (every op against f64 formulas, on
# every device that answers), the NaN-rule and long-row accuracy tests, integer
# wrapping and division-by-zero faults, DynTensor's dispatch, the quantized
# formats and GGUF files (their fixtures read from the working directory),
# the host crate's unit tests (CUDA discovery, the PTX checks) and its
# GPU-backend tests
# through Device, and the example crate's fused op (a kernel module of its
# own, loaded on the GPU at its first launch).
cargo test --release --features cuda --no-run --message-format=json \
    -p ferrocm --test reference --test nan_and_accuracy --test integer_semantics --test indexing --test matmul --test llm --test dyn_tensor --test quant --test gguf --test conv --test pool --test channel_norm \
    -p ferrocm-models --test llama --test sampling \
    -p ferrocm-host --lib --test gpu_backends \
    -p ferrocm-example-fused-op --test fused 2>/dev/null |
    python3 -c '
import json, sys, shutil
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["target"]["name"]
        kind = m["target"]["kind"][0]
        pkg = m["package_id"]
        prefix = "host-" if "ferrocm-host" in pkg and kind == "test" else ""
        dst = "'"$out"'/test-" + prefix + name + ("-lib" if kind == "lib" else "")
        shutil.copy(m["executable"], dst)
        print("bundled", dst)
'
cp scripts/gpu-run.sh scripts/torch-matmul.py "$out/"
# Symbols are not needed there; the bundle must stay small to travel.
strip "$out"/ferrocm "$out"/test-* 2>/dev/null || true
du -sh "$out"/*

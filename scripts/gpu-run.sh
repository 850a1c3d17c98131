#!/usr/bin/env bash
# Runs on a GPU machine without a Rust toolchain, from a bundle made by
# scripts/gpu-bundle.sh:
#   bash gpu-bundle/gpu-run.sh LOGDIR [STEP...]
# Steps (default: all, in this order): info, check (`ferrocm check` on the
# CUDA device), kernels (the driver's per-kernel resource report, fails on
# local memory), bench (`ferrocm bench`, table and JSON), memcheck, racecheck,
# synccheck (the same check under compute-sanitizer), tests (the bundled test
# executables), torch (PyTorch's matmul and GEMV at the bench's sizes, the
# reference the library path is held to). Each step's log goes to LOGDIR/STEP.log, a one-line result per
# step to LOGDIR/summary.txt (printed last). STEP_TIMEOUT (seconds, default
# 300) bounds each step.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
logs="${1:-gpu-logs}"
shift || true
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(info check kernels bench memcheck racecheck synccheck tests torch)
limit="${STEP_TIMEOUT:-300}"
# cuBLAS: PyTorch's wheels ship it (libcublas.so.13 under site-packages/nvidia);
# ferrocm opens it by the path in FERROCM_CUBLAS when the loader cannot find it.
if [ -z "${FERROCM_CUBLAS:-}" ]; then
    dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    lib=$(find $dirs /usr/local/cuda*/lib64 -name 'libcublas.so.1[0-9]*' 2>/dev/null | sort | tail -n 1)
    [ -n "$lib" ] && export FERROCM_CUBLAS="$lib"
fi
mkdir -p "$logs"
bin="$here/ferrocm"
summary="$logs/summary.txt"
step() {
    local name="$1"; shift
    local start=$(date +%s)
    timeout "$limit" "$@" > "$logs/$name.log" 2>&1
    local rc=$?
    printf '%-26s rc=%-3s %4ss  %s\n' "$name" "$rc" "$(( $(date +%s) - start ))" \
        "$(grep -v '^\s*$' "$logs/$name.log" | tail -n 1 | cut -c1-110)" | tee -a "$summary"
}
sanitize() {
    if ! command -v compute-sanitizer >/dev/null; then
        echo "compute-sanitizer not found" | tee -a "$summary"
        return
    fi
    step "sanitizer-$1" compute-sanitizer --tool "$1" --error-exitcode 9 --print-limit 50 \
        "$bin" check --device cuda
}
for s in "${steps[@]}"; do
    case "$s" in
        info)
            nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
                --format=csv > "$logs/nvidia-smi.log" 2>&1
            step info "$bin" info ;;
        check) step check "$bin" check --device cuda ;;
        kernels) step kernels "$bin" kernels --device cuda ;;
        bench)
            step bench "$bin" bench --device cuda
            timeout "$limit" "$bin" bench --device cuda --json --no-cpu > "$logs/bench.json" 2>&1 ;;
        memcheck | racecheck | synccheck) sanitize "$s" ;;
        torch) step torch python3 "$here/torch-matmul.py" ;;
        tests)
            for t in "$here"/test-*; do
                step "$(basename "$t")" "$t" --test-threads 4
            done
            # The matrix products again on ferrocm's own kernels (the runs
            # above use the vendor BLAS where it loads).
            if [ -x "$here/test-matmul" ]; then
                step test-matmul-kernels env FERROCM_VENDOR_BLAS=0 "$here/test-matmul" --test-threads 4
            fi ;;
        *) echo "unknown step $s" | tee -a "$summary" ;;
    esac
done
echo "== summary"
cat "$summary"

#!/usr/bin/env bash
# On a GPU machine, in one call: builds llama.cpp's test-backend-ops (CUDA,
# sm_90) from the anchors' source, then runs ferrocm's quantized bench and
# llama.cpp's MUL_MAT perf on the same shapes (weight 4096 x 14336, 1 and 8
# columns, every format both have), so the two are timed on the same card:
#   bash scripts/quant-vs-llama.sh BUNDLE_DIR LLAMA_TAR_XZ LOGDIR
# BUNDLE_DIR: a gpu-bundle/ from scripts/gpu-bundle.sh; LLAMA_TAR_XZ:
# ../shared/anchors/llama.cpp.tar.xz (carried with the device tool). About
# 4 minutes of build on 16 cores (flash attention's kernels, which MUL_MAT
# does not use, left out: 251 s on an H100 machine), then 2 of timing.
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
tarball=$(realpath "${2:?llama.cpp.tar.xz}")
logs=$(mkdir -p "${3:?log dir}" && cd "$3" && pwd)
work=/tmp/llama-side
mkdir -p "$work" && cd "$work"
[ -d llama.cpp ] || tar xJf "$tarball"
start=$(date +%s)
cmake -S llama.cpp -B build -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=ON \
    -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > "$logs/cmake.log" 2>&1
cmake --build build -j "$(nproc)" --target test-backend-ops > "$logs/build.log" 2>&1
echo "llama.cpp build: $(( $(date +%s) - start )) s" | tee "$logs/time.txt"
nvidia-smi --query-gpu=name --format=csv,noheader > "$logs/gpu.txt"
"$bundle/ferrocm" bench --device cuda --no-cpu --only quant --size 16384x4096 > "$logs/ferrocm.log" 2>&1
for n in 1 8; do
    for t in q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4; do
        timeout 60 build/bin/test-backend-ops perf -b CUDA0 -o MUL_MAT \
            -p "type_a=$t,type_b=f32,m=4096,n=$n,k=14336" 2>&1 | grep MUL_MAT | head -1
    done
done > "$logs/llama.log"
# One line per format and column count: ferrocm's us, llama.cpp's us.
grep -E "x[18] f32 \(weight bytes\)" "$logs/ferrocm.log" | sed 's/(weight bytes)//' |
    awk '{printf "%s n=%s %.1f\n", $2, substr($3, 2), $6 * 1000}' > "$logs/ferrocm.txt"
sed -E 's/.*type_a=([^,]*),.*n=([0-9]+),.* ([0-9.]+) us\/run.*/\1 n=\2 \3/' "$logs/llama.log" > "$logs/llama.txt"
echo "format columns: ferrocm us / llama.cpp us"
while read -r f n us; do
    l=$(awk -v f="$f" -v n="$n" '$1 == f && $2 == n {print $3}' "$logs/llama.txt")
    echo "$f $n: $us / ${l:--}"
done < "$logs/ferrocm.txt" | tee "$logs/side-by-side.txt"

#!/usr/bin/env bash
# Builds and runs the API fuzzer (fuzz/fuzz_targets/api.rs) with libFuzzer:
# coverage instrumentation as cargo-fuzz sets it, overflow checks and debug
# assertions on, no ASan (the emulator switches stacks, which ASan does not
# follow; the Rust code is checked by the sanitizer of the emulator and by
# overflow checks instead).
#
#   bash scripts/fuzz.sh [SECONDS] [libFuzzer options...]
#   FUZZ_TARGET=gguf bash scripts/fuzz.sh [SECONDS]   # the GGUF reader
#
# Runs for SECONDS (default 150) over the checked-in corpus (fuzz/corpus/api)
# plus a scratch corpus it grows in fuzz/target/corpus; a crash leaves its
# input in fuzz/artifacts/api/ and fails the script. Reproduce one with
#   fuzz/target/x86_64-unknown-linux-gnu/release/api fuzz/artifacts/api/crash-...
# Merge new coverage into the checked-in corpus with
#   bash scripts/fuzz.sh 0 -merge=1 fuzz/corpus/api fuzz/target/corpus
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-150}
shift || true
target=x86_64-unknown-linux-gnu

# The host copies of the kernels are what the emulator runs: one arch of code
# objects and no PTX keep the build short.
export FERROCM_ARCHS=${FERROCM_ARCHS:-gfx90a}
export FERROCM_PTX=off
# Only the target's code is instrumented (--target keeps RUSTFLAGS off build
# scripts and proc macros); the kernels' device build clears RUSTFLAGS.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers"
start=$(date +%s)
cargo build --manifest-path fuzz/Cargo.toml --release --target "$target" --bin api --bin gguf
echo "fuzzer build took $(( $(date +%s) - start ))s"

name=${FUZZ_TARGET:-api}
bin=fuzz/target/$target/release/$name
# The API target keeps its scratch corpus where earlier versions did.
scratch=fuzz/target/corpus
[ "$name" = api ] || scratch=fuzz/target/corpus-$name
mkdir -p "$scratch" "fuzz/artifacts/$name"
if [ "$seconds" = 0 ]; then
    exec "$bin" "$@"
fi
"$bin" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
    -artifact_prefix="fuzz/artifacts/$name/" -print_final_stats=1 \
    "$@" "$scratch" "fuzz/corpus/$name"

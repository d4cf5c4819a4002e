#!/usr/bin/env bash
# Builds, here, everything the GPU machine runs (it has no Rust): the starling-gpu test
# binaries, the `--gpu` examples and the stripped `benches/gpu.rs`, into DIR, with
# DIR/run.sh. Run DIR/run.sh there: it finds the CUDA libraries, runs every test group,
# checks every example, runs the benchmark, and ends with one table. Without a device it
# says so and exits 0.
#
#   bash scripts/gpu-bundle.sh gpu-bundle        # here (DIR is ignored by git: .git/info/exclude)
#   bash gpu-bundle/run.sh                        # there
#
# FEATURE (default `cuda`) picks the facade's CUDA feature; STARLING_GPU_BENCH_* are passed
# through to the benchmark (see benches/gpu.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/gpu-bundle.sh DIR}
feature=${FEATURE:-cuda}
mkdir -p "$dir/bin"
grep -qxF "/$dir" .git/info/exclude 2>/dev/null || echo "/$dir" >>.git/info/exclude

exe() { sed -n 's/.*Executable .*(\(.*\))$/\1/p'; }

echo "== building the CUDA 13 API level too (--features cuda-13): cholesky and the starling-gpu tests"
cargo build --release -p starling --features cuda-13 --example cholesky
cp target/release/examples/cholesky "$dir/bin/cholesky-cuda13"
: >"$dir/tests13.txt"
for t in $(cargo test --release -p starling-gpu --no-default-features --features cuda-13 --no-run 2>&1 | exe); do
    name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
    cp "$t" "$dir/bin/test13-$name"
    echo "test13-$name" >>"$dir/tests13.txt"
done

echo "== building (release, --features $feature)"
cargo build --release --features "$feature" --example cholesky --example stencil5
cp target/release/examples/cholesky target/release/examples/stencil5 "$dir/bin/"
: >"$dir/tests.txt"
for t in $(cargo test --release -p starling-gpu --no-run 2>&1 | exe); do
    name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
    cp "$t" "$dir/bin/test-$name"
    echo "test-$name" >>"$dir/tests.txt"
done
bench=$(cargo bench --features "$feature" --bench gpu --no-run 2>&1 | exe | head -1)
cp "$bench" "$dir/bin/bench-gpu"
strip "$dir"/bin/* 2>/dev/null || true
cp scripts/gpu-run.sh "$dir/run.sh"
chmod +x "$dir/run.sh"
du -sh "$dir"

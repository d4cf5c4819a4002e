#!/usr/bin/env bash
# Starling's side of bench/compare (the insert submission cost and the ping-pong) against
# an older commit, in one run on this machine, with no StarPU and no MPI needed: builds
# `examples/compare.rs` of this tree twice in release — against this tree's library and
# against the older commit's (a `git worktree` with its own target directory; the
# example's file is copied into it, so both sides run the same program) — then runs the
# two binaries alternately, REPS times each, and prints the medians and the ratios
# (this tree / base: below 1 is faster).
#
#   bash scripts/bench-against.sh [base-commit]      # default e5327fd (before issue 17)
#   REPS=7 BASE_DIR=/tmp/base bash scripts/bench-against.sh e5327fd
#   OWN_EXAMPLE=1 bash scripts/bench-against.sh 305f071   # each side its own compare.rs
#
# OWN_EXAMPLE=1 builds the base commit's own `examples/compare.rs` instead of this tree's:
# for a base older than an API change (the point-to-point builders of issue 19), whose
# library cannot build this tree's example; both run the same workloads and print the same
# SAMPLE lines, each in its own API's spelling (the base needs the same subcommands:
# `pingpong` came after e5327fd). BASE_EXAMPLE_FROM=<rev> builds that commit's
# compare.rs against the base instead: `BASE_EXAMPLE_FROM=305f071 bash
# scripts/bench-against.sh e5327fd` runs the old API's example (with `pingpong`) on
# e5327fd's library, and this tree's example on this tree's.
#
# Per run: `compare insert 256 10 3 unpruned` and `pruned` (µs per logical task, fake
# rank 2 of 1024, kernels off: bench/compare's insert row) and `compare pingpong 2000 3`
# (half round trip, 2 in-process ranks, 1 worker each). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
base_rev="${1:-e5327fd}"
base_dir="${BASE_DIR:-/tmp/starling-base-$base_rev}"
reps="${REPS:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"
base_target="${BASE_TARGET:-$base_dir-target}"

if [ ! -d "$base_dir" ]; then
    git worktree add --detach "$base_dir" "$base_rev" >&2
fi
if [ -n "${BASE_EXAMPLE_FROM:-}" ]; then
    git show "$BASE_EXAMPLE_FROM:examples/compare.rs" >"$base_dir/examples/compare.rs"
elif [ "${OWN_EXAMPLE:-0}" = 1 ]; then
    git -C "$base_dir" checkout --quiet -- examples/compare.rs
else
    cp examples/compare.rs "$base_dir/examples/compare.rs"
fi
echo "# building this tree ($(git rev-parse --short HEAD)) and $base_rev, release" >&2
cargo build --quiet --release --example compare
(cd "$base_dir" && CARGO_TARGET_DIR="$base_target" cargo build --quiet --release --example compare)
new_bin="$target/release/examples/compare"
base_bin="$base_target/release/examples/compare"

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
export STARLING_PROGRESS=0
for rep in $(seq 1 "$reps"); do
    for side in base new; do
        bin=$base_bin
        [ "$side" = new ] && bin=$new_bin
        echo "# round $rep/$reps: $side" >&2
        {
            "$bin" insert 256 10 3 unpruned
            "$bin" insert 256 10 3 pruned
            "$bin" pingpong 2000 3
        } | sed -n "s/^SAMPLE /$side /p" >>"$raw"
    done
done

python3 - "$raw" "$base_rev" "$(git rev-parse --short HEAD)" <<'PY'
import statistics, sys
samples = {}
for line in open(sys.argv[1]):
    side, bench, _impl, param, value, unit = line.split()
    if bench == "insert":
        param = param.split(",")[0]
    samples.setdefault((bench, param), {}).setdefault(side, []).append(float(value))
print(f"| benchmark | {sys.argv[2]} (base), median [min–max] | {sys.argv[3]} (this tree) | this / base |")
print("| --- | --- | --- | --- |")
for (bench, param), s in samples.items():
    b, n = s.get("base", []), s.get("new", [])
    if not b or not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    what = (f"insert, stencil 256², fake rank 2/1024, {param}: µs per logical task"
            if bench == "insert" else f"ping-pong {param}, in-process, half round trip (µs)")
    print(f"| {what} | {mb:.4g} [{min(b):.4g}–{max(b):.4g}] | {mn:.4g} [{min(n):.4g}–{max(n):.4g}] | {mn / mb:.3f}× |")
PY

#!/usr/bin/env bash
# The scheduling policies side by side (issue 21's CPU targets), on one rank of 2 workers:
#
# 1. the tiled Cholesky example (n = 4096, nb = 512, no check) under `prio` and `dmda`,
#    alternating run after run (RUNS each, default 5): the median wall time and GFlop/s
#    of each, and dmda / prio (target: ≥ 0.95);
# 2. `benches/sched.rs`: 100 000 empty tasks under `prio` and `ws`, alternating in one
#    process (target: ws / prio ≥ 1).
#
# dmda's models go to a fresh STARLING_HOME under target/ (its first run calibrates them:
# it is counted, as a user's first run would be). BENCH_RUNS sets the empty-task runs
# (default 9). Usage:
#   [BENCH_RUNS=15] scripts/bench-sched.sh [RUNS] [N] [NB]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
N=${2:-4096}
NB=${3:-512}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release --example cholesky
cargo bench --bench sched --no-run
HOME_DIR="$TARGET/bench-sched-home"
rm -rf "$HOME_DIR"
declare -A TIMES GFLOPS
for run in $(seq 1 "$RUNS"); do
    if (( run % 2 )); then order="prio dmda"; else order="dmda prio"; fi
    for sched in $order; do
        out=$(STARLING_SCHED=$sched STARLING_NCPU=2 STARLING_HOME="$HOME_DIR" STARLING_PROGRESS=0 \
            "$TARGET/release/examples/cholesky" 1 "$N" "$NB" --no-check 2>&1)
        # The example prints "factorization: <ms> ms, <GFlop/s> GFlop/s" on stderr.
        t=$(grep -oE 'factorization: [0-9.]+ ms' <<<"$out" | grep -oE '[0-9.]+' | head -1)
        g=$(grep -oE '[0-9.]+ GFlop/s' <<<"$out" | head -1 | cut -d' ' -f1)
        if [[ -z "$t" || -z "$g" ]]; then echo "$out"; echo "no timing in the output" >&2; exit 1; fi
        TIMES[$sched]+="$t "
        GFLOPS[$sched]+="$g "
        echo "run $run $sched: $t ms, $g GFlop/s"
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tp=$(median <<<"${TIMES[prio]}"); td=$(median <<<"${TIMES[dmda]}")
gp=$(median <<<"${GFLOPS[prio]}"); gd=$(median <<<"${GFLOPS[dmda]}")
echo "cholesky n=$N nb=$NB, 1 rank, 2 workers, $RUNS runs each (medians):"
echo "  prio  $tp ms  $gp GFlop/s   (runs: ${TIMES[prio]})"
echo "  dmda  $td ms  $gd GFlop/s   (runs: ${TIMES[dmda]})"
awk -v a="$gd" -v b="$gp" 'BEGIN { printf "  dmda / prio GFlop/s: %.3f\n", a / b }'
BENCH=$(ls -t "$TARGET"/release/deps/sched-* 2>/dev/null | grep -v '\.d$' | head -1)
"$BENCH" "${BENCH_RUNS:-9}" 100000

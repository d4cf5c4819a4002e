#!/usr/bin/env bash
# Cholesky in master-slave mode against the insert-task mode on the same ranks, both in
# this one run, interleaved: under mpirun (one process per rank) and on the in-process
# cluster. Prints a Markdown table of medians of the example's own GFlop/s.
#
#   bash scripts/bench-ms.sh [runs] [n] [nb] [ranks...]    (defaults: 5 1024 128 2 3)
#
# insert-task: `cholesky N n nb --no-check` (every rank factorizes its 2-D block-cyclic
# tiles); master-slave: `cholesky N n nb --no-check --ms` (rank 0 submits everything, the
# N − 1 others run the tasks). STARLING_NCPU (default 1) workers per rank, the same in
# both modes, so master-slave computes on N − 1 ranks' workers, insert-task on N.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}" n="${2:-1024}" nb="${3:-128}"
shift $(($# < 3 ? $# : 3))
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(2 3)
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
cargo build --quiet --release --features mpi --example cholesky
bin="${CARGO_TARGET_DIR:-target}/release/examples/cholesky"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
out=$(mktemp)
log=$(mktemp)
trap 'rm -f "$out" "$log"' EXIT

# one WHERE MODE N: runs the example, appends "WHERE MODE N gflops" to $out.
one() {
    local where=$1 mode=$2 r=$3 extra=()
    [ "$mode" = ms ] && extra=(--ms)
    if [ "$where" = mpi ]; then
        mpirun "${flags[@]}" -n "$r" "$bin" "$r" "$n" "$nb" --no-check "${extra[@]}" >"$log" 2>&1 || { cat "$log"; exit 1; }
    else
        "$bin" "$r" "$n" "$nb" --no-check "${extra[@]}" >"$log" 2>&1 || { cat "$log"; exit 1; }
    fi
    echo "$where $mode $r $(grep -m1 '^factorization:' "$log" | sed -E 's/.* ([0-9.]+) GFlop\/s/\1/')" >>"$out"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq "$runs"); do
    for r in "${ranks[@]}"; do
        for where in mpi local; do
            one "$where" insert "$r"
            one "$where" ms "$r"
        done
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
echo "Cholesky n = $n, nb = $nb, $STARLING_NCPU worker(s) per rank, median of $runs runs (load $load_before → $load_after)"
echo
echo "| ranks | where | insert-task GFlop/s | master-slave GFlop/s | master-slave / insert-task |"
echo "| --- | --- | --- | --- | --- |"
for r in "${ranks[@]}"; do
    for where in mpi local; do
        it=$(awk -v w="$where" -v r="$r" '$1==w && $2=="insert" && $3==r {print $4}' "$out" | median)
        ms=$(awk -v w="$where" -v r="$r" '$1==w && $2=="ms" && $3==r {print $4}' "$out" | median)
        ratio=$(awk -v a="$ms" -v b="$it" 'BEGIN {printf "%.2f", a / b}')
        label=$([ "$where" = mpi ] && echo "mpirun" || echo "in-process")
        echo "| $r | $label | $it | $ms | $ratio |"
    done
done

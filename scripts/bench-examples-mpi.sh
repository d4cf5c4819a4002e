#!/usr/bin/env bash
# The stencil and Cholesky examples with 2 and 4 ranks: under mpirun (one process per
# rank) against the in-process cluster (one process, ranks as threads), the same release
# binaries, interleaved run by run. Prints a Markdown table of medians.
#
#   bash scripts/bench-examples-mpi.sh [runs] [stencil X Y iterations] [cholesky n nb]
#   (defaults: 5 runs; stencil5 64 64 4; cholesky 1024 128)
#
# Two figures per job: the example's own timing (stencil5: its 2 × iterations sweeps and
# migrations, between two barriers, per task; cholesky: the factorization between two
# barriers, and GFlop/s), and the whole process's wall time (start-up, registration,
# gather and check, shutdown; under mpirun also MPI's start-up). Each run also checks
# the results: a failed example stops the script. STARLING_NCPU (default 1) workers per
# rank; mpirun's default placement (Open MPI binds each process to a core with 2 processes;
# the workers follow: STARLING_WORKERS_GETBIND); extra mpirun options in MPIRUN_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
sx="${2:-64}" sy="${3:-64}" si="${4:-4}"
cn="${5:-1024}" cnb="${6:-128}"
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
cargo build --quiet --release --features mpi --example stencil5 --example cholesky
target="${CARGO_TARGET_DIR:-target}/release/examples"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# shellcheck disable=SC2206 # words on purpose
flags+=(${MPIRUN_FLAGS:-})
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
out=$(mktemp)
log=$(mktemp)
trap 'rm -f "$out" "$log"' EXIT

# one MODE N NAME ARGS...: runs the example, appends "NAME MODE N wall_ms line" to $out.
one() {
    local mode=$1 n=$2 name=$3
    shift 3
    local t0 t1
    t0=$(date +%s%N)
    if [ "$mode" = mpi ]; then
        mpirun "${flags[@]}" -n "$n" "$target/$name" "$n" "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
    else
        "$target/$name" "$n" "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
    fi
    t1=$(date +%s%N)
    local line
    case $name in
        stencil5) line=$(grep -m1 "µs per task" "$log") ;;
        cholesky) line=$(grep -m1 "^factorization:" "$log") ;;
    esac
    echo "$name $mode $n $(((t1 - t0) / 1000000)) $line" >>"$out"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq "$runs"); do
    for n in 2 4; do
        # Alternate the two modes, so that a noisy neighbour hurts both alike.
        one mpi "$n" stencil5 "$sx" "$sy" "$si"
        one local "$n" stencil5 "$sx" "$sy" "$si"
        one mpi "$n" cholesky "$cn" "$cnb"
        one local "$n" cholesky "$cn" "$cnb"
    done
done
echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores, STARLING_NCPU=$STARLING_NCPU, $runs runs)"
echo
python3 - "$out" "$sx" "$sy" "$si" "$cn" "$cnb" <<'PY'
import re, statistics, sys
path, sx, sy, si, cn, cnb = sys.argv[1:]
runs = {}
for line in open(path):
    name, mode, n, wall, rest = line.split(" ", 4)
    if name == "stencil5":
        m = re.search(r"in ([0-9.]+) ms \(([0-9.]+) µs per task\)", rest)
        inner = (float(m.group(1)), float(m.group(2)))
    else:
        m = re.search(r"factorization: ([0-9.]+) ms, ([0-9.]+) GFlop/s", rest)
        inner = (float(m.group(1)), float(m.group(2)))
    runs.setdefault((name, int(n), mode), []).append((inner, float(wall)))
med = statistics.median
print("| example, ranks | mpirun: timed part (median) | in-process: timed part (median) | mpirun / in-process | mpirun: whole process | in-process: whole process |")
print("| --- | --- | --- | --- | --- | --- |")
for name, label in (("stencil5", f"stencil5 {sx}×{sy}, 2×{si} sweeps"), ("cholesky", f"cholesky n = {cn}, nb = {cnb}")):
    for n in (2, 4):
        m, l = runs[(name, n, "mpi")], runs[(name, n, "local")]
        mi, li = med(r[0][0] for r in m), med(r[0][0] for r in l)
        mx, lx = med(r[0][1] for r in m), med(r[0][1] for r in l)
        mw, lw = med(r[1] for r in m), med(r[1] for r in l)
        unit = "µs/task" if name == "stencil5" else "GFlop/s"
        print(f"| {label}, {n} ranks | {mi:.1f} ms ({mx:.2f} {unit}) | {li:.1f} ms ({lx:.2f} {unit}) "
              f"| {mi / li:.2f}× | {mw:.0f} ms | {lw:.0f} ms |")
PY

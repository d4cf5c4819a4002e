#!/usr/bin/env bash
# Starling side by side with StarPU-MPI 1.3 (Debian's) and raw MPI, in one run on this
# machine: builds everything, runs the benchmarks interleaved, prints one table.
#
#   bash bench/compare/run.sh [--quick] [--only "pingpong ring empty insert cholesky"]
#
# 1. Installs with apt, when missing: libstarpu-dev libstarpumpi-1.3-3 starpu-examples
#    libopenmpi-dev openmpi-bin libopenblas-dev (and pkg-config, build-essential, libclang-dev
#    for rsmpi).
# 2. Builds the C programs of this folder with mpicc and `pkg-config starpumpi-1.3`, and the
#    Starling side: examples ring, cholesky, compare and mpi_bench (features mpi,
#    openblas), in release mode.
# 3. Runs, 2 ranks with one worker each (STARPU_NCPU=1, STARLING_NCPU=1), both sides with
#    the same binding (mpirun --bind-to core --map-by core, StarPU also
#    STARPU_WORKERS_GETBIND=1: rank r owns core r; PLACEMENT=nobind for --bind-to none),
#    repeating A, B, A, B… so that a noisy neighbour hurts every side alike:
#      pingpong  half round trip 8 B, 1 KiB; bandwidth 64 KiB, 1 MiB, 16 MiB: raw MPI
#                (pingpong_raw.c), StarPU-MPI send/recv and detached (pingpong_starpu.c),
#                Starling blocking send/recv (examples/mpi_bench.rs)
#      ring      the handbook's token ring, time per hop (ring_starpu.c, examples/ring.rs)
#      empty     empty-task submit + execute on one rank, per task (empty_task_starpu.c,
#                examples/compare.rs empty-tasks)
#      insert    the stencil's submission cost per logical task, fake rank 2 of 1024,
#                kernels off, every handle registered, 256², unpruned and with the
#                handbook's pruning (insert_starpu.c, examples/compare.rs insert)
#      cholesky  N = 4096 and 8192, tile 512, f64, 1 × 2 block-cyclic: StarPU with OpenBLAS
#                (cholesky_starpu.c), Starling with its default (faer) kernels and with
#                the same OpenBLAS (examples/cholesky.rs --openblas)
# 4. Prints the table (medians [min–max] over all samples, ratios, goals) and writes
#    target/compare/<stamp>/{raw.txt,table.md}.
#
# --quick: fewer repetitions, shorter ring, Cholesky at N = 4096 only (≈ 3–4 min; the full
# run ≈ 8–10 min). The machine should be otherwise idle: before each benchmark the script
# waits up to QUIET_WAIT seconds (default 60, 0 with --quick) for the machine to be under
# 25 % busy, and records what it saw. Not part of CI (too long).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

quick=0
only="pingpong ring empty insert cholesky"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --only) only="$2"; shift ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
wants() { [[ " $only " == *" $1 "* ]]; }

# ----- 1. install ----------------------------------------------------------------------
packages=(libstarpu-dev libstarpumpi-1.3-3 starpu-examples libopenmpi-dev openmpi-bin
          libopenblas-dev pkg-config build-essential libclang-dev python3)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "# installing: ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >&2
fi

# ----- 2. build --------------------------------------------------------------------------
out_root="${CARGO_TARGET_DIR:-$root/target}/compare"
bin="$out_root/bin"
stamp=$(date +%Y%m%d-%H%M%S)
results="$out_root/$stamp"
mkdir -p "$bin" "$results"
raw="$results/raw.txt"
: >"$raw"
echo "# building the C programs" >&2
flags=$(pkg-config --cflags --libs starpumpi-1.3)
for prog in pingpong_raw pingpong_starpu ring_starpu empty_task_starpu insert_starpu cholesky_starpu; do
    # shellcheck disable=SC2086
    mpicc -O2 -D_GNU_SOURCE -Wall -o "$bin/$prog" "bench/compare/$prog.c" $flags -lopenblas -lm
done
echo "# building Starling (release)" >&2
cargo build --quiet --release --features mpi,openblas --example ring --example cholesky --example compare \
    --example mpi_bench
ex="${CARGO_TARGET_DIR:-$root/target}/release/examples"

# ----- 3. run ----------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export STARPU_SILENT=1 STARPU_NCPU=1 STARLING_NCPU=1 OPENBLAS_NUM_THREADS=1
export STARLING_PROGRESS=0
case "${PLACEMENT:-pinned}" in
    pinned) bind=(--bind-to core --map-by core); starpu_bind=(-x STARPU_WORKERS_GETBIND=1) ;;
    nobind) bind=(--bind-to none); starpu_bind=(-x STARPU_WORKERS_NOBIND=1 -x STARPU_MPI_NOBIND=1) ;;
    *) echo "PLACEMENT: pinned or nobind" >&2; exit 2 ;;
esac
mpi2=(mpirun --oversubscribe -n 2 "${bind[@]}" -x STARPU_SILENT -x STARPU_NCPU -x STARLING_NCPU
      -x OPENBLAS_NUM_THREADS -x STARLING_PROGRESS)
starpu2=("${mpi2[@]}" "${starpu_bind[@]}")
limit=${STEP_TIMEOUT:-120}

# Waits until the machine is quiet (< 25 % busy over a second), at most QUIET_WAIT s.
quiet_wait=${QUIET_WAIT:-$([ $quick -eq 1 ] && echo 0 || echo 60)}
busy() {
    local a b
    read -r -a a < <(head -1 /proc/stat)
    sleep 1
    read -r -a b < <(head -1 /proc/stat)
    local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
    echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
quiet() {
    local waited=0 b
    b=$(busy)
    while [ "$b" -ge 25 ] && [ $waited -lt "$quiet_wait" ]; do
        sleep 4; waited=$((waited + 5)); b=$(busy)
    done
    echo "# $1: machine ${b}% busy before (waited ${waited}s)" | tee -a "$raw" >&2
}

# step LABEL CONVERT CMD...: runs CMD under a timeout and appends to raw.txt the SAMPLE
# lines that CONVERT (a shell snippet reading CMD's output on stdin) makes of it.
step() {
    local label="$1" convert="$2"; shift 2
    local log="$results/step.log" rc=0
    echo "# $label" >&2
    timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
    { echo "## $label"; cat "$log"; } >>"$results/output.txt"
    eval "$convert" <"$log" | grep '^SAMPLE ' >>"$raw" || true
    if [ $rc -ne 0 ]; then
        echo "FAILED $label rc=$rc$([ $rc -eq 124 ] && echo ' (timeout)')" | tee -a "$raw" >&2
    fi
}
# The Starling programs print their own lines; these snippets turn them into SAMPLE lines.
# mpi_bench: "sample starling <bytes> <half round trip in ns>".
conv_pingpong() {
    awk '$1 == "sample" && $2 == "starling" {
        s = $3; n = s "B";
        if (s >= 1048576 && s % 1048576 == 0) n = s / 1048576 "MiB";
        else if (s >= 1024 && s % 1024 == 0) n = s / 1024 "KiB";
        printf "SAMPLE pingpong starling %s %.6g us\n", n, $4 / 1000 }'
}
# ring: "detached ring: 2000 hops in X ms, Y µs per hop (MPI, 2 processes)".
conv_ring() {
    sed -n "s/.* \([0-9.]*\) µs per hop (MPI.*/SAMPLE ring starling niter=$1,ranks=2 \1 us/p"
}
# cholesky: "factorization: X ms, Y GFlop/s".
conv_cholesky() {
    sed -n "s/^factorization: .*, \([0-9.]*\) GFlop\/s/SAMPLE cholesky $2 N=$1,nb=512 \1 GFlop\/s/p"
}

if [ $quick -eq 1 ]; then rounds=2; reps=3; niter=200; chol_sizes="4096"; else rounds=3; reps=5; niter=1000; chol_sizes="4096 8192"; fi
sizes="8,1024,65536,1048576,16777216"
{
    echo "# date: $(date -Is)  host: $(hostname)  cores: $(nproc)  placement: ${PLACEMENT:-pinned}  quick: $quick"
    echo "# StarPU: $(dpkg-query -W -f '${Version}' libstarpumpi-1.3-3)  Open MPI: $(dpkg-query -W -f '${Version}' openmpi-bin)  OpenBLAS: $(dpkg-query -W -f '${Version}' libopenblas-dev)  $(rustc --version)"
    echo "# starling commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified)')"
} | tee -a "$raw" >&2

if wants pingpong; then
    quiet pingpong
    for r in $(seq $rounds); do
        step "pingpong raw MPI ($r)" cat "${mpi2[@]}" "$bin/pingpong_raw" -reps 7 -sizes "$sizes" -iters 20000,20000,2000,300,20
        step "pingpong Starling ($r)" conv_pingpong "${mpi2[@]}" "$ex/mpi_bench" starling
        step "pingpong StarPU send/recv ($r)" cat "${starpu2[@]}" "$bin/pingpong_starpu" -mode sync -reps "$reps" -sizes "$sizes" -iters 100,100,50,20,5
        # The detached pipeline sometimes hangs in StarPU-MPI 1.3.10 (anchor numbers §6.1):
        # one launch per size, so that a hang costs one size.
        for s in ${sizes//,/ }; do
            it=$([ "$s" -le 1024 ] && echo 200 || { [ "$s" -le 1048576 ] && echo 50 || echo 5; })
            limit=60 step "pingpong StarPU detached $s ($r)" cat "${starpu2[@]}" "$bin/pingpong_starpu" -mode detached -reps "$reps" -sizes "$s" -iters "$it"
        done
    done
fi
if wants ring; then
    quiet ring
    for r in $(seq $rounds); do
        step "ring StarPU ($r)" cat "${starpu2[@]}" "$bin/ring_starpu" -niter "$niter" -reps 2
        step "ring Starling ($r)" "conv_ring $niter" "${mpi2[@]}" "$ex/ring" 2 "$niter"
        step "ring Starling ($r, again)" "conv_ring $niter" "${mpi2[@]}" "$ex/ring" 2 "$niter"
    done
fi
if wants empty; then
    quiet empty
    for r in $(seq $rounds); do
        step "empty tasks StarPU ($r)" cat "$bin/empty_task_starpu" -ntasks 100000 -reps "$reps"
        step "empty tasks Starling ($r)" cat "$ex/compare" empty-tasks 100000 "$reps"
    done
fi
if wants insert; then
    quiet insert
    fake=(mpirun --oversubscribe -n 1 --bind-to none -x STARPU_SILENT -x STARPU_NCPU
          -x STARPU_MPI_FAKE_RANK=2 -x STARPU_MPI_FAKE_SIZE=1024 -x STARPU_DISABLE_KERNELS=1)
    for r in $(seq $rounds); do
        for prune in 0 1; do
            variant=$([ $prune -eq 1 ] && echo pruned || echo unpruned)
            step "insert StarPU $variant ($r)" cat "${fake[@]}" "$bin/insert_starpu" -x 256 -y 256 -niter 10 -prune $prune -reps 2
            step "insert Starling $variant ($r)" cat "$ex/compare" insert 256 10 2 "$variant"
        done
    done
fi
if wants cholesky; then
    quiet cholesky
    for r in $(seq $rounds); do
        for n in $chol_sizes; do
            step "cholesky StarPU N=$n ($r)" cat "${starpu2[@]}" "$bin/cholesky_starpu" -n "$n" -nb 512
            step "cholesky Starling faer N=$n ($r)" "conv_cholesky $n starling_faer" \
                "${mpi2[@]}" "$ex/cholesky" 2 "$n" 512 --no-check
            step "cholesky Starling OpenBLAS N=$n ($r)" "conv_cholesky $n starling_openblas" \
                "${mpi2[@]}" "$ex/cholesky" 2 "$n" 512 --no-check --openblas
        done
    done
fi

# ----- 4. the table ----------------------------------------------------------------------
python3 "$root/bench/compare/table.py" "$raw" | tee "$results/table.md"
echo >&2
echo "# raw samples and table: $results" >&2

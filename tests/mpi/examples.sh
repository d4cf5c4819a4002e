#!/usr/bin/env bash
# Every example that runs on ranks, under mpirun with 2 and 4 processes, against the same
# example on the in-process cluster (scripts/test.sh runs it); the master-slave runs
# (`ms`, `--ms`, master_slave) too: 1 master and 1 or 3 slaves.
#
# The examples print their results on standard output, each line from one rank, and their
# timings on standard error; so a job's standard output, sorted, must equal the in-process
# run's, sorted. Each (example, process count) is one test: it fails when the job or the
# in-process run fails (an example exits non-zero when its own check fails), hangs, or
# prints other result lines. The last line is the tally, in cargo's words, which
# scripts/test.sh adds to its total.
set -uo pipefail
cd "$(dirname "$0")/../.."
# STARLING_MPIRUN names another launcher (tests/mpi/mpich.sh: mpirun.mpich, with the
# examples built against MPICH in its own target directory).
mpirun="${STARLING_MPIRUN:-mpirun}"
if ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "skipped: $mpirun not found (install openmpi-bin)"
    echo "test result: ok. 0 passed; 0 failed; 28 ignored"
    exit 0
fi
cargo build --quiet --features mpi --examples || exit 1
dir="${CARGO_TARGET_DIR:-target}/debug/examples"
flags=()
if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    flags+=(--oversubscribe)
    [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"

# Each example with small arguments after the rank count (sim_ring is not here: it runs
# the simulator in one thread, not ranks).
cases=(
    "ring 50"
    "stencil5 16 16 2"
    "cholesky 64 16"
    "lu both 4 8"
    "scatter_gather 7 16"
    "complex 3"
    "pernode 6 5"
    "redux all 7 32"
    "migration 9 2"
    "comm 3"
    "ring 50 ms"
    "cholesky 64 16 --ms"
    "master_slave 8 4"
    "master_slave 8 4 tight"
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
for case in "${cases[@]}"; do
    read -r name args <<<"$case"
    for n in 2 4; do
        what="$name on $n MPI processes"
        # shellcheck disable=SC2086 # the arguments are words
        if ! timeout 120 "$dir/$name" "$n" $args >"$work/local" 2>"$work/local.err"; then
            cat "$work/local" "$work/local.err"
            echo "$what: FAILED: the in-process run failed"
            failed=$((failed + 1))
            continue
        fi
        # shellcheck disable=SC2086
        if ! timeout 120 "$mpirun" "${flags[@]}" -n "$n" "$dir/$name" "$n" $args \
            >"$work/mpi" 2>"$work/mpi.err"; then
            cat "$work/mpi" "$work/mpi.err"
            echo "$what: FAILED: the job failed or hung"
            failed=$((failed + 1))
            continue
        fi
        if ! diff <(sort "$work/local") <(sort "$work/mpi") >"$work/diff"; then
            cat "$work/diff"
            echo "$what: FAILED: the results differ from the in-process run (< in-process, > mpirun)"
            failed=$((failed + 1))
            continue
        fi
        echo "$what: ok ($(wc -l <"$work/mpi") result lines, the same as in-process)"
        passed=$((passed + 1))
    done
done
echo "test result: $([ "$failed" -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed; 0 ignored"
[ "$failed" -eq 0 ]

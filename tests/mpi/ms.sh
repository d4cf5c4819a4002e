#!/usr/bin/env bash
# Master-slave mode under mpirun beyond the examples' results (tests/mpi/examples.sh runs
# those): an unknown codelet name is refused on the master with a clear error, another
# rank can be the master (STARLING_MPI_MASTER_NODE), the slaves' worker count comes from
# STARLING_NMPIMSTHREADS, a tight memory budget writes copies back (STARLING_MS_STATS), and
# data larger than the budget is refused. (A slave that stops answering is tested in
# process, std-adapter/src/ms/tests.rs: under Open MPI a slave process that exits ends the
# whole job, and mpirun names it.) The last line is the tally, in cargo's words.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skipped: mpirun not found (install openmpi-bin)"
    echo "test result: ok. 0 passed; 0 failed; 7 ignored"
    exit 0
fi
cargo build --quiet --features mpi --example master_slave || exit 1
bin="${CARGO_TARGET_DIR:-target}/debug/examples/master_slave"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
passed=0
failed=0
check() { # name, condition result
    if [ "$2" -eq 0 ]; then
        echo "$1: ok"
        passed=$((passed + 1))
    else
        cat "$out"
        echo "$1: FAILED"
        failed=$((failed + 1))
    fi
}

timeout 120 mpirun "${flags[@]}" -n 2 "$bin" 2 6 2 unknown >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "refused: task of codelet \`stranger\`: no codelet of that name is registered" "$out"
check "an unknown codelet is refused on the master (exit 2, the name in the error)" $?

STARLING_MPI_MASTER_NODE=2 timeout 120 mpirun "${flags[@]}" -n 3 "$bin" 3 6 3 >"$out" 2>&1
grep -q "OK: master-slave sums equal" "$out"
check "rank 2 as the master (STARLING_MPI_MASTER_NODE=2)" $?

STARLING_MS_STATS=1 STARLING_NMPIMSTHREADS=2 timeout 120 mpirun "${flags[@]}" -n 2 "$bin" 2 8 4 >"$out" 2>&1
grep -q "OK: master-slave sums equal" "$out" && grep -q "slave 1: 2 worker(s)" "$out"
check "two workers on the slave (STARLING_NMPIMSTHREADS=2)" $?

STARLING_MS_STATS=1 timeout 120 mpirun "${flags[@]}" -n 3 "$bin" 3 8 4 tight >"$out" 2>&1
grep -q "OK: master-slave sums equal" "$out" && grep -Eq "\([1-9][0-9]* written back\)" "$out"
check "a tight memory budget writes copies back and keeps every value" $?

# Results come back only when the master reads them: 8 blocks of 2 KiB, 48 tasks on one
# slave, each block sent once and fetched once (at its unregistration); with 3 slaves the
# blocks also move between slaves, and each still comes back once.
STARLING_MS_STATS=1 timeout 120 mpirun "${flags[@]}" -n 2 "$bin" 2 8 4 >"$out" 2>&1
grep -q "slave 1: 1 worker(s), 48 task(s), 16384 bytes in, 16384 bytes back to the master" "$out"
check "one slave: every block sent once and fetched once, when the master reads it" $?
STARLING_MS_STATS=1 timeout 120 mpirun "${flags[@]}" -n 4 "$bin" 4 8 4 >"$out" 2>&1
back=$(grep -o "[0-9]* bytes back to the master" "$out" | awk '{s += $1} END {print s}')
[ "$back" = 16384 ] && grep -q "OK: master-slave sums equal" "$out"
check "three slaves: 16384 bytes back in all ($back), each block once" $?

STARLING_MS_MEMORY=1000 timeout 120 mpirun "${flags[@]}" -n 2 "$bin" 2 6 2 >"$out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && grep -q "needs 2048 bytes on a slave, more than a slave's memory budget of 1000 bytes" "$out"
check "data larger than a slave's memory budget is refused with its size (STARLING_MS_MEMORY)" $?

echo "test result: $([ "$failed" -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed; 0 ignored"
[ "$failed" -eq 0 ]

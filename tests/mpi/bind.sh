#!/usr/bin/env bash
# Workers bound to the cores the launcher gave the process (STARLING_WORKERS_GETBIND,
# mpi-adapter/src/bind.rs), under mpirun with 2 processes (scripts/test.sh runs it).
#
# Each job runs the ring with STARLING_DISPLAY_BINDINGS=1, which prints each rank's process
# cores and, read back from each worker's own thread, the core it runs on; the checks
# compare those lines with the mask the job was given. The last line is the tally.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpirun >/dev/null 2>&1 || ! command -v taskset >/dev/null 2>&1; then
    echo "skipped: mpirun or taskset not found (install openmpi-bin, util-linux)"
    echo "test result: ok. 0 passed; 0 failed; 4 ignored"
    exit 0
fi
cargo build --quiet --features mpi --example ring || exit 1
exe="${CARGO_TARGET_DIR:-target}/debug/examples/ring"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_DISPLAY_BINDINGS=1
unset STARLING_NCPU STARLING_WORKERS_GETBIND # each job sets its own
cores=$(nproc)
last=$((cores - 1)) # the core the taskset jobs confine the processes to
passed=0
failed=0

# job NAME ENV... -- PREFIX... : runs PREFIX mpirun FLAGS EXTRA -n 2 ring, with the
# environment ENV (KEY=VALUE words) and the mpirun options in the array `extra`; leaves
# the output in $out.
extra=()
job() {
    local name=$1
    shift
    local env=()
    while [ "$1" != "--" ]; do env+=("$1"); shift; done
    shift
    if ! out=$(env "${env[@]}" timeout 120 "$@" mpirun "${flags[@]}" "${extra[@]}" -n 2 "$exe" 2 20 2>&1); then
        printf '%s\n' "$out"
        echo "bind: $name: FAILED: the job failed or hung"
        failed=$((failed + 1))
        return 1
    fi
}
# expect NAME PATTERN COUNT: $out must hold COUNT lines matching PATTERN (grep -E).
expect() {
    local got
    got=$(grep -cE "$2" <<<"$out")
    if [ "$got" -ne "$3" ]; then
        printf '%s\n' "$out" | grep starling-mpi
        echo "bind: $1: FAILED: $3 lines like /$2/ expected, $got found"
        failed=$((failed + 1))
        return 1
    fi
}
ok() { echo "bind: $1: ok"; passed=$((passed + 1)); }

# 1. The process confined to one core (taskset; mpirun does not rebind): binding is on by
#    default, one worker per core of the mask, pinned to it.
name="taskset -c $last, default: one worker, on core $last"
extra=(--bind-to none)
job "$name" -- taskset -c "$last" &&
    expect "$name" "rank [01]: 1 worker\(s\) bound to process cores \[$last\]: worker 0 → core $last \(mask \[$last\]\)$" 2 &&
    ok "$name"
# 2. mpirun binds each process to a core of its own: each rank's worker runs there.
if [ "$cores" -ge 2 ]; then
    name="mpirun --bind-to core: each rank's worker on the rank's core"
    extra=(--bind-to core)
    if job "$name" -- &&
        expect "$name" "rank [01]: 1 worker\(s\) bound to process cores \[([0-9]+)\]: worker 0 → core \1 \(mask \[\1\]\)$" 2; then
        distinct=$(grep -oE "process cores \[[0-9]+\]" <<<"$out" | sort -u | wc -l)
        if [ "$distinct" -eq 2 ]; then ok "$name"; else
            printf '%s\n' "$out" | grep starling-mpi
            echo "bind: $name: FAILED: both ranks on one core"
            failed=$((failed + 1))
        fi
    fi
else
    echo "bind: mpirun --bind-to core: skipped (one core)"
fi
# 3. Binding off: the pool is still sized to the mask, but the worker is not pinned.
name="STARLING_WORKERS_GETBIND=0: one worker, not bound"
extra=(--bind-to none)
job "$name" STARLING_WORKERS_GETBIND=0 -- taskset -c "$last" &&
    expect "$name" "rank [01]: 1 worker\(s\), not bound; process cores \[$last\]$" 2 &&
    ok "$name"
# 4. STARLING_NCPU chooses the count; the workers share the mask's cores in turn.
name="STARLING_NCPU=3 on one core: three workers, all on core $last"
job "$name" STARLING_NCPU=3 -- taskset -c "$last" &&
    expect "$name" "rank [01]: 3 worker\(s\) bound to process cores \[$last\]: worker 0 → core $last \(mask \[$last\]\), worker 1 → core $last \(mask \[$last\]\), worker 2 → core $last \(mask \[$last\]\)$" 2 &&
    ok "$name"
echo "test result: $([ "$failed" -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed; 0 ignored"
[ "$failed" -eq 0 ]

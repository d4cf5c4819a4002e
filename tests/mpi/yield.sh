#!/usr/bin/env bash
# Open MPI's mpi_yield_when_idle (scripts/test.sh runs it): Open MPI turns it on by itself
# on an oversubscribed node, and then every empty poll of MPI gives up the core, on top of
# the yields of Starling's own threads. `starling::mpi::init` sets it to 0 before it
# initialises MPI (transport::no_yield_when_idle) when it is unset, unless
# STARLING_MPI_YIELD_WHEN_IDLE=1; a value the user gave is kept.
#
# Each job runs the ring on 4 processes with STARLING_DISPLAY_BINDINGS=1, which prints
# what each rank did to the parameter; the checks read those lines (what Starling did to
# the variable, not the value Open MPI then used: performance.md has the timing). The
# last line is the tally.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skipped: mpirun not found (install openmpi-bin)"
    echo "test result: ok. 0 passed; 0 failed; 4 ignored"
    exit 0
fi
if ! mpirun --version 2>&1 | grep -q "Open MPI"; then
    echo "skipped: mpirun is not Open MPI's (the parameter is Open MPI's)"
    echo "test result: ok. 0 passed; 0 failed; 4 ignored"
    exit 0
fi
cargo build --quiet --features mpi --example ring || exit 1
exe="${CARGO_TARGET_DIR:-target}/debug/examples/ring"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_DISPLAY_BINDINGS=1 STARLING_NCPU=1
unset STARLING_MPI_YIELD_WHEN_IDLE OMPI_MCA_mpi_yield_when_idle
passed=0
failed=0

# job NAME EXPECTED ENV... : runs the ring with the environment ENV (KEY=VALUE words) and
# checks that each of the 4 ranks printed EXPECTED about the parameter.
job() {
    local name=$1 expected=$2
    shift 2
    local out
    if ! out=$(env "$@" timeout 120 mpirun "${flags[@]}" -n 4 "$exe" 4 20 2>&1); then
        printf '%s\n' "$out"
        echo "yield: $name: FAILED: the job failed or hung"
        failed=$((failed + 1))
        return
    fi
    local n
    n=$(printf '%s\n' "$out" | grep -c "mpi_yield_when_idle: $expected")
    if [ "$n" -eq 4 ]; then
        echo "yield: $name: ok (4 ranks: $expected)"
        passed=$((passed + 1))
    else
        printf '%s\n' "$out" | grep "mpi_yield_when_idle" || printf '%s\n' "$out"
        echo "yield: $name: FAILED: $n of 4 ranks said \"$expected\""
        failed=$((failed + 1))
    fi
}

job "by default Starling turns it off" "turned off (it was unset)"
job "STARLING_MPI_YIELD_WHEN_IDLE=1 leaves it" "left to Open MPI (STARLING_MPI_YIELD_WHEN_IDLE)" STARLING_MPI_YIELD_WHEN_IDLE=1
job "set to 0 by the user, kept" "left as set (0)" OMPI_MCA_mpi_yield_when_idle=0
job "set to 1 by the user, kept" "left as set (1)" OMPI_MCA_mpi_yield_when_idle=1

status=ok
[ "$failed" -eq 0 ] || status=FAILED
echo "test result: $status. $passed passed; $failed failed; 0 ignored"
[ "$failed" -eq 0 ]

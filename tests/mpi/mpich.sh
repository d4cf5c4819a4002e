#!/usr/bin/env bash
# The MPI rank on MPICH: the facade with its `mpi` feature (starling-mpi's transport and
# the rank built around it) built against MPICH (its own target directory,
# `MPICC=mpicc.mpich`) and its point-to-point jobs (tests/mpi_p2p.rs, on 2 and 4 processes) and the ping-pong example run under MPICH's launcher (Hydra,
# `mpirun.mpich`). Everything else runs on Open MPI, the system's default `mpicc` and
# `mpirun`; this shows that nothing in the adapter is Open MPI's alone (MPICH's
# `MPI_TAG_UB`, thread levels, request and cancellation behaviour differ).
#
# `STARLING_MPICH_EXAMPLES=1` also runs every example under MPICH against the in-process
# run (tests/mpi/examples.sh; it builds the workspace again, so it is not part of CI).
#
# Needs Debian's `mpich` and `libmpich-dev` (scripts/test.sh installs them); without them
# it prints "skipped". The last line is the tally, which scripts/test.sh adds to its total
# (the mpi_p2p jobs count there too).
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpicc.mpich >/dev/null 2>&1 || ! command -v mpirun.mpich >/dev/null 2>&1; then
    echo "skipped: MPICH not found (apt-get install mpich libmpich-dev)"
    echo "test result: ok. 0 passed; 0 failed; 1 ignored"
    exit 0
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/mpich" MPICC=mpicc.mpich STARLING_MPIRUN=mpirun.mpich
export STARLING_NCPU="${STARLING_NCPU:-1}"
echo "MPICH: $(mpirun.mpich --version 2>&1 | sed -n 's/^ *Version: *//p' | head -1)"
# Hydra needs no launcher agent on one machine; fork keeps it from looking for ssh.
export HYDRA_LAUNCHER=fork
mpi=(-p starling --no-default-features --features mpi)
cargo build --quiet "${mpi[@]}" --test mpi_p2p --example hello_pingpong || exit 1
# The point-to-point jobs: the test launches itself under $STARLING_MPIRUN and prints
# its own `test result:` line.
cargo test --quiet "${mpi[@]}" --test mpi_p2p 2>&1
p2p=${PIPESTATUS[0]}
passed=0
failed=0
what="hello_pingpong on 2 MPICH processes"
if out=$(timeout 120 mpirun.mpich -n 2 "$CARGO_TARGET_DIR/debug/examples/hello_pingpong" 2>&1) &&
    [ "$(grep -c 'rounds done' <<<"$out")" -eq 2 ]; then
    echo "mpich: $what ... ok"
    passed=$((passed + 1))
else
    echo "$out"
    echo "mpich: $what ... FAILED"
    failed=$((failed + 1))
fi
# Every example against the in-process run, as tests/mpi/examples.sh does on Open MPI:
# opt-in (STARLING_MPICH_EXAMPLES=1), since it builds the whole workspace a second time.
examples=0
if [ "${STARLING_MPICH_EXAMPLES:-0}" = 1 ]; then
    bash tests/mpi/examples.sh
    examples=$?
fi
if [ "$failed" -eq 0 ]; then
    echo "test result: ok. $passed passed; 0 failed; 0 ignored"
else
    echo "test result: FAILED. $passed passed; $failed failed; 0 ignored"
fi
[ "$failed" -eq 0 ] && [ "$p2p" -eq 0 ] && [ "$examples" -eq 0 ]

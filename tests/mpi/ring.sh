#!/usr/bin/env bash
# The ring example under mpirun: 2 and 4 processes, every variant (scripts/test.sh runs it).
# Fails when a ring's final token is wrong or a job fails or hangs.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skipped: mpirun not found (install openmpi-bin)"
    echo "test result: ok. 0 passed; 0 failed; 6 ignored"
    exit 0
fi
cargo build --quiet --features mpi --example ring
exe="${CARGO_TARGET_DIR:-target}/debug/examples/ring"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
loops=100
passed=0
for n in 2 4; do
    for variant in detached async sync; do
        if ! out=$(timeout 120 mpirun "${flags[@]}" -n "$n" "$exe" "$n" "$loops" "$variant" 2>&1); then
            printf '%s\n' "$out"
            echo "ring $variant on $n MPI processes: FAILED" >&2
            exit 1
        fi
        if ! grep -q "token = $((loops * n)) == $loops \* $n" <<<"$out"; then
            printf '%s\n' "$out"
            echo "ring $variant on $n MPI processes: wrong token" >&2
            exit 1
        fi
        echo "ring $variant on $n MPI processes: ok ($(grep -o '[0-9.]* µs per hop' <<<"$out"))"
        passed=$((passed + 1))
    done
done
# A failed job exits above, ending the CI run; the tally counts the jobs that passed.
echo "test result: ok. $passed passed; 0 failed; 0 ignored"

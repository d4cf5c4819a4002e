#!/usr/bin/env bash
# Traces under mpirun (scripts/test.sh runs it): the ring on 2 MPI processes with
# STARLING_TRACE, then trace-merge. Fails when a rank writes no trace, or when a message's
# arrow has no other end.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skipped: mpirun not found (install openmpi-bin)"
    exit 0
fi
cargo build --quiet --features mpi --example ring --bin trace-merge
target="${CARGO_TARGET_DIR:-target}/debug"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The ring's own messages only: the graph-agreement check (on in debug builds) would add
# its barrier exchanges.
export STARLING_CHECK_AGREEMENT=0
export STARLING_TRACE="$dir/"
if ! out=$(timeout 120 mpirun "${flags[@]}" -n 2 "$target/examples/ring" 2 100 2>&1); then
    printf '%s\n' "$out"
    echo "traced ring on 2 MPI processes: FAILED" >&2
    exit 1
fi
unset STARLING_TRACE
summary=$("$target/trace-merge" "$dir" 2>&1) || { printf '%s\n' "$summary"; exit 1; }
echo "$summary"
# 100 loops on 2 ranks: 199 messages, each with its arrow.
if ! grep -q "ranks {0, 1}: 200 tasks, .* 199 message arrows (0 unmatched" <<<"$summary"; then
    echo "traced ring on 2 MPI processes: wrong trace" >&2
    exit 1
fi
echo "traced ring on 2 MPI processes: ok"

#!/usr/bin/env bash
# The eager limit (RankConfig::eager_limit, STARLING_EAGER_LIMIT): Starling's blocking
# send/recv ping-pong between 2 MPI processes at sizes around each limit, for several
# limits, with raw rsmpi in the same run, alternating. Prints a Markdown table of the
# median half round trip (µs) per size and limit.
#
#   bash scripts/bench-eager.sh [runs]      (rounds of every job, default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
cargo build --quiet --release --features mpi --example mpi_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/mpi_bench"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
sizes="${SIZES:-8 1024 2048 3968 4096 8192 16384 65536}"
limits="${LIMITS:-0 1024 3968 4096 16384 65536}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$runs"); do
    # shellcheck disable=SC2086 # the sizes are words
    mpirun "${flags[@]}" -n 2 "$bin" raw $sizes 2>/dev/null | sed "s/^sample raw/sample raw -/" >>"$out"
    for limit in $limits; do
        # shellcheck disable=SC2086
        STARLING_EAGER_LIMIT=$limit mpirun "${flags[@]}" -n 2 "$bin" starling $sizes 2>/dev/null |
            sed "s/^sample starling/sample starling $limit/" >>"$out"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
python3 - "$out" "$sizes" "$limits" <<'PY'
import statistics, sys
samples = {}
for line in open(sys.argv[1]):
    p = line.split()
    if p[:1] == ["sample"]:
        samples.setdefault((p[1], p[2], int(p[3])), []).append(float(p[4]))
sizes = [int(s) for s in sys.argv[2].split()]
limits = sys.argv[3].split()
def cell(key):
    v = samples.get(key)
    return f"{statistics.median(v) / 1e3:.2f}" if v else "—"
print("| size | raw MPI | " + " | ".join(f"eager limit {l}" for l in limits) + " |")
print("| --- | --- | " + " | ".join("---" for _ in limits) + " |")
for s in sizes:
    print(f"| {s} B | {cell(('raw', '-', s))} | " + " | ".join(cell(("starling", l, s)) for l in limits) + " |")
print()
print("Median half round trip in µs over every sample of every run; the fastest Starling cell of each row is the best limit for that size.")
PY

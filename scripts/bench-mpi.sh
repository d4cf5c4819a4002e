#!/usr/bin/env bash
# Starling over MPI against raw rsmpi, both under mpirun in this one run, and the token
# ring over MPI. Prints a Markdown table of medians and Starling/raw ratios.
#
#   bash scripts/bench-mpi.sh [runs]      (runs of each ping-pong job, default 3)
#
# Ping-pong between 2 ranks, half round trip: Starling's blocking `send`/`recv` on a
# `Vector<u8>` handle, as built (the waiting thread drives MPI itself) and with
# `RankConfig::caller_drives` off (every MPI call on the progression thread, the previous
# design; `STARLING_CALLER_DRIVES=0`), (examples/mpi_bench.rs) vs raw rsmpi `send_with_tag` /
# `receive_into_with_tag` of the same bytes (MPI_THREAD_SINGLE, blocking calls), and, below
# the table, the MPI calls of Starling's protocol without the runtime (`raw-pattern`).
# Each job prints 7 samples per size; a figure is the median of the jobs' medians (and, for
# bandwidth, also the best job against raw's best job), so that a job that ran at this
# machine's second, slower speed does not move it. Ring: the
# handbook's ring (examples/ring.rs, detached variant, 1000 loops) per hop, on 2 and 4
# MPI processes and, for scale, on the in-process cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
cargo build --quiet --release --features mpi --example mpi_bench
cargo build --quiet --release --features mpi --example ring
target="${CARGO_TARGET_DIR:-target}/release/examples"
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
job=0
# One mpirun job; its samples are numbered with the job, so that each job gets its own
# median (see below).
bench() {
    job=$((job + 1))
    mpirun "${flags[@]}" -n 2 "$target/mpi_bench" "$@" | sed "s/^sample /sample $job /" >>"$out"
}
for _ in $(seq "$runs"); do
    # Alternate the jobs, so that a noisy neighbour hurts all alike.
    bench raw
    bench starling
    bench starling-thread
    # The MPI calls of Starling's protocol alone (the floor under the runtime).
    bench raw-pattern
done
for _ in $(seq "$runs"); do
    for n in 2 4; do
        mpirun "${flags[@]}" -n "$n" "$target/ring" "$n" 1000 2>&1 | sed -n "s/.*µs per hop (MPI.*/&/p" |
            sed "s/^/ring mpi $n /" >>"$out"
        "$target/ring" "$n" 1000 2>&1 | sed -n "s/.*µs per hop (in-process.*/&/p" |
            sed "s/^/ring local $n /" >>"$out"
    done
done
echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores; raw MPI spins, so a busy machine hurts it most)"
echo
python3 - "$out" <<'PY'
import re, statistics, sys
jobs, rings = {}, {}
for line in open(sys.argv[1]):
    p = line.split()
    if p[:1] == ["sample"]:
        jobs.setdefault((p[2], int(p[3])), {}).setdefault(p[1], []).append(float(p[4]))
    elif p[:1] == ["ring"]:
        m = re.search(r"([0-9.]+) µs per hop", line)
        rings.setdefault((p[1], int(p[2])), []).append(float(m.group(1)))
med = lambda v: statistics.median(v)
# Each job's median, then the median of those: on this machine a whole job sometimes runs
# at a second, slower speed (raw MPI's too: 1 MiB in about 500 µs instead of 125 µs, the
# same for the job's every sample), and one such job must not move the figure.
samples = {key: [med(v) for v in by_job.values()] for key, by_job in jobs.items()}
def us(ns):
    return f"{ns / 1e3:.2f} µs" if ns < 1e5 else f"{ns / 1e3:.0f} µs"
rows = []
SIZES = ((8, "8 B"), (1 << 10, "1 KiB"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"))
for size, label in SIZES:
    s, r = med(samples[("starling", size)]), med(samples[("raw", size)])
    t = med(samples[("starling-thread", size)])
    if size <= 1024:
        rows.append((f"ping-pong {label}, half round trip", us(s), us(t), us(r), f"{s / r:.1f}×"))
    else:
        bw = lambda ns: f"{size / ns:.2f} GB/s ({us(ns)})"
        best = 100 * min(samples[("raw", size)]) / min(samples[("starling", size)])
        rows.append((f"ping-pong {label}, bandwidth (half round trip)", bw(s), bw(t), bw(r),
                     f"{s / r:.2f}× ({100 * r / s:.0f} % of raw bandwidth; best jobs: {best:.0f} %)"))
for n in (2, 4):
    m = med(rings[("mpi", n)])
    local = rings.get(("local", n))
    scale = f"in-process: {med(local):.2f} µs" if local else "—"
    rows.append((f"ring, {n} MPI processes: per hop (message + task)", f"{m:.2f} µs", "—", "—", scale))
print("| benchmark | Starling over MPI (median of jobs) | Starling, progression thread only | raw rsmpi | Starling time / raw time |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
print()
print("Each job's median, in run order (a job at this machine's slower speed stands out):")
for size, label in ((8, "8 B"), (1 << 20, "1 MiB")):
    for name in ("raw", "starling", "starling-thread"):
        print(f"- {label}, {name}: " + ", ".join(us(v) for v in samples[(name, size)]))
print()
print("The MPI calls of Starling's protocol without the runtime (raw-pattern: a 24-byte header by MPI_Isend "
      "into an MPI_Irecv from any source posted ahead of time, with the payload inline up to 3968 bytes, "
      "else as its own message received once the header arrived; MPI_Test polling), half round trip, "
      "median of jobs, and its time / raw time: "
      + ", ".join(f"{label} {us(med(samples[('raw-pattern', size)]))} "
                  f"({med(samples[('raw-pattern', size)]) / med(samples[('raw', size)]):.2f}×)"
                  for size, label in SIZES))
PY

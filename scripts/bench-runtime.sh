#!/usr/bin/env bash
# Runs the threaded runtime's benchmarks (Starling and its std baselines side by side, in
# one process) and prints a Markdown table of medians and Starling/baseline time ratios
# from that run.
#
#   bash scripts/bench-runtime.sh [criterion args...]     e.g. --measurement-time 6
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p starling --bench runtime -- --warm-up-time 1 --measurement-time 3 "$@" >/dev/null
python3 - <<'PY'
import json, os
root = "target/criterion"
def median(group, impl, case):
    p = os.path.join(root, group, impl, case, "new", "estimates.json")
    with open(p) as f:
        return json.load(f)["median"]["point_estimate"]  # ns per iteration
def us(ns):
    return f"{ns / 1e3:.2f} µs" if ns < 1e5 else f"{ns / 1e3:.0f} µs"
rows = []
# Ping-pong: one iteration is a round trip; latency is half of it, bandwidth is size / half.
for case, label, size in (("8B", "8 B", 8), ("1KiB", "1 KiB", 1 << 10),
                          ("64KiB", "64 KiB", 64 << 10), ("1MiB", "1 MiB", 1 << 20),
                          ("16MiB", "16 MiB", 16 << 20)):
    s, b = median("ping_pong", "starling", case) / 2, median("ping_pong", "mpsc_channel", case) / 2
    if size <= 1024:
        rows.append((f"ping-pong {label}, half round trip", us(s), us(b), f"{s / b:.2f}×"))
    else:
        bw = lambda ns: f"{size / ns:.2f} GB/s ({us(ns)})"
        rows.append((f"ping-pong {label}, bandwidth (half round trip)", bw(s), bw(b), f"{s / b:.2f}×"))
# Tasks: one iteration is a batch of 1000 tasks and a wait_for_all.
for case, what in (("empty", "`Codelet::empty`, 0 accesses"),
                   ("trivial", "trivial kernel, 0 accesses"),
                   ("rw_chain", "RW chain on one handle")):
    s, b = median("tasks", "starling", case) / 1000, median("tasks", "pool", case) / 1000
    rows.append((f"task, {what}: submit + run, per task", us(s), us(b), f"{s / b:.2f}×"))
# Ring: one iteration is one lap, `ranks` hops.
for ranks in (2, 4):
    s = median("ring", "starling", str(ranks)) / ranks
    rows.append((f"ring, {ranks} ranks: per hop (message + task)", us(s), "—", "—"))
print("| benchmark | Starling (median) | baseline (median) | Starling time / baseline time |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY

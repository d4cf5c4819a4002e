#!/usr/bin/env bash
# Runs the core's benchmarks (Starling and its naive std references side by side, in one
# process) and prints a table of medians and Starling/reference ratios from that run, then
# the framing throughput against a plain copy of the same bytes.
#
#   bash scripts/bench-core.sh [criterion args...]     e.g. --measurement-time 10
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p starling-core --bench core -- --warm-up-time 2 --measurement-time 8 "$@" >/dev/null
python3 - <<'PY'
import json, os
root = "target/criterion"
def median(group, impl, case):
    p = os.path.join(root, group, impl, case, "new", "estimates.json")
    with open(p) as f:
        return json.load(f)["median"]["point_estimate"]  # ns per iteration
rows = []
for case, n in (("1", 4096), ("64", 4096), ("4096", 4096)):
    s, r = median("matcher", "starling", case), median("matcher", "naive_std", case)
    rows.append((f"matcher, {case} live key(s): one match + re-post", s / n, r / n))
tasks = {"stencil5": 392, "cholesky_gemm": 220}
for case, n in tasks.items():
    s, r = median("planner", "starling", case), median("planner", "naive_std", case)
    rows.append((f"planner, {case} task (plan + apply cache)", s / n, r / n))
print(f"{'benchmark':58} {'Starling':>10} {'naive std':>10} {'speed-up':>9}")
for name, s, r in rows:
    print(f"{name:58} {s:8.1f} ns {r:8.1f} ns {r / s:8.2f}x")
# Framing: 64 KiB of payload per iteration, against a copy of the same wire bytes.
print()
print(f"{'framing (64 KiB of payload)':40} {'median':>10} {'MB/s':>8} {'memcpy':>10} {'x memcpy':>9}")
for body in (64, 1024, 4096):
    wire = (65536 // body) * (body + 11)
    m = median("framing", "memcpy", str(body))
    for op in ("encode", "decode_chunks", "decode_bytes"):
        t = median("framing", op, str(body))
        print(f"{op + ', ' + str(body) + ' B frames':40} {t / 1e3:7.1f} us {wire / t * 1e3:8.0f} {m / 1e3:7.2f} us {t / m:8.1f}x")
PY

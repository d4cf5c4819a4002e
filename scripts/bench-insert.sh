#!/usr/bin/env bash
# Runs the insert-task utility's benchmarks (the stencil's submission cost as fake rank 2
# of 1024, and the tiled Cholesky on 1, 2 and 4 in-process ranks against the same tile
# kernels in a sequential loop, all in one process) and prints a Markdown table of medians
# and ratios from that run.
#
#   bash scripts/bench-insert.sh [criterion args...]     e.g. a filter: cholesky
#   STARLING_BENCH_TIME=10 bash scripts/bench-insert.sh   seconds per benchmark (default 4)
#   STARLING_BENCH_STENCIL_SIDE=128 bash scripts/bench-insert.sh   the grid (default 256)
# The table reads the latest results of every benchmark, so a filtered run reuses the
# others from the previous run.
set -euo pipefail
cd "$(dirname "$0")/.."
side="${STARLING_BENCH_STENCIL_SIDE:-256}"
cargo bench -p starling --bench insert -- --warm-up-time 1 \
    --measurement-time "${STARLING_BENCH_TIME:-4}" "$@" >/dev/null
SIDE="$side" python3 - <<'PY'
import json, os
root = "target/criterion"
side = int(os.environ["SIDE"])
def median(group, impl, case):
    p = os.path.join(root, group, impl, case, "new", "estimates.json")
    with open(p) as f:
        return json.load(f)["median"]["point_estimate"]  # ns per iteration
rows = []
# Stencil: one iteration is one sweep of (side-2)^2 logical tasks.
case, tasks = f"{side}x{side}", (side - 2) ** 2
per = {impl: median("stencil_insert", impl, case) / tasks
       for impl in ("unpruned", "unpruned_checked", "unpruned_cpu", "unpruned_checked_cpu",
                    "pruned", "pruned_handbook", "test_only")}
base = per["test_only"]
for impl, what in (("unpruned", "every insert submitted"),
                   ("unpruned_checked", "every insert submitted, graph-agreement check on"),
                   ("pruned", "pruned: handbook test + cache test (the example's rule)"),
                   ("pruned_handbook", "pruned: handbook test alone"),
                   ("test_only", "baseline: the handbook test alone, no insert")):
    rows.append((f"stencil {case}, fake rank 2/1024, {what}: µs per logical task",
                 f"{per[impl] / 1e3:.4f} µs", f"{per[impl] / base:.1f}×"))
rows.append((f"stencil {case}: unpruned / pruned", f"{per['unpruned'] / per['pruned']:.0f}×", "—"))
rows.append((f"stencil {case}: agreement check on / off (unpruned, wall-clock)",
             f"{per['unpruned_checked'] / per['unpruned']:.3f}×", "—"))
rows.append((f"stencil {case}: agreement check on / off (unpruned, CPU time of the submitting thread: "
             f"{per['unpruned_cpu'] / 1e3:.3f} → {per['unpruned_checked_cpu'] / 1e3:.3f} µs per insert)",
             f"{per['unpruned_checked_cpu'] / per['unpruned_cpu']:.3f}×", "—"))
# Cholesky: one iteration is one factorization of n = 2048 (n^3/3 flops).
n, nb = 2048, 256
case = f"n{n}_nb{nb}"
flops = n ** 3 / 3
seq = median("cholesky", "sequential", case)
rows.append((f"Cholesky n = {n}, nb = {nb}, sequential loop of the faer kernels (baseline)",
             f"{flops / seq:.2f} GFlop/s ({seq / 1e6:.1f} ms)", "1.00×"))
for ranks in (1, 2, 4):
    s = median("cholesky", f"starling_{ranks}", case)
    rows.append((f"Cholesky n = {n}, nb = {nb}, Starling, {ranks} rank(s) × 1 worker",
                 f"{flops / s:.2f} GFlop/s ({s / 1e6:.1f} ms)", f"{s / seq:.2f}×"))
print("| benchmark | median | time / baseline time |")
print("| --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY

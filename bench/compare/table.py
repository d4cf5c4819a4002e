#!/usr/bin/env python3
"""The comparison's table, from the SAMPLE lines of run.sh's raw.txt.

    python3 bench/compare/table.py target/compare/<stamp>/raw.txt

Every SAMPLE line is `SAMPLE <bench> <impl> <param> <value> <unit>`; the samples of one
(bench, impl, param) from every launch are pooled: median [min–max]. Ratios are of
medians. Prints a Markdown table, then the goals of the issue with what was measured.
"""

import statistics
import sys

SIZES = {"8B": 8, "1KiB": 1 << 10, "64KiB": 64 << 10, "1MiB": 1 << 20, "16MiB": 16 << 20}


def load(path):
    samples, notes, failed = {}, [], []
    for line in open(path, encoding="utf-8"):
        p = line.split()
        if p[:1] == ["SAMPLE"] and len(p) >= 6:
            try:
                samples.setdefault((p[1], p[2], p[3]), []).append(float(p[4]))
            except ValueError:
                pass
        elif line.startswith("FAILED"):
            failed.append(line.strip())
        elif line.startswith("# "):
            notes.append(line[2:].strip())
    return samples, notes, failed


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    if v >= 0.1:
        return f"{v:.3f}"
    return f"{v:.4f}"


class Stat:
    def __init__(self, values):
        self.values = values
        self.median = statistics.median(values) if values else None

    def cell(self, unit=""):
        if not self.values:
            return "—"
        lo, hi = min(self.values), max(self.values)
        return f"{fmt(self.median)}{unit} [{fmt(lo)}–{fmt(hi)}]"


def main():
    samples, notes, failed = load(sys.argv[1])

    def stat(bench, impl, param, bw=None):
        vals = samples.get((bench, impl, param), [])
        if bw is not None:  # half round trip in µs → GB/s
            vals = [bw / (v * 1e3) for v in vals if v > 0]
        return Stat(vals)

    rows, goals = [], []

    def ratio(a, b, invert=False):
        if a.median is None or b.median is None or b.median == 0:
            return None
        return b.median / a.median if invert else a.median / b.median

    # 1. ping-pong
    for name, label in (("8B", "8 B"), ("1KiB", "1 KiB")):
        raw, spr = stat("pingpong", "raw_mpi", name), stat("pingpong", "starpu_sendrecv", name)
        det, sta = stat("pingpong", "starpu_detached", name), stat("pingpong", "starling", name)
        r_sp, r_raw = ratio(sta, spr), ratio(sta, raw)
        rows.append((f"ping-pong {label}, half round trip (µs)", raw.cell(), spr.cell(),
                     det.cell(), sta.cell(),
                     f"{fmt(r_sp)}×" if r_sp else "—", f"{fmt(r_raw)}×" if r_raw else "—"))
        if name == "8B":
            goals.append(("8 B latency within 1.5× of raw MPI", "Starling / raw ≤ 1.5",
                          r_raw, r_raw is not None and r_raw <= 1.5, f"{fmt(r_raw)}×"))
    for name, label in (("64KiB", "64 KiB"), ("1MiB", "1 MiB"), ("16MiB", "16 MiB")):
        size = SIZES[name]
        raw, spr = stat("pingpong", "raw_mpi", name, size), stat("pingpong", "starpu_sendrecv", name, size)
        det, sta = stat("pingpong", "starpu_detached", name, size), stat("pingpong", "starling", name, size)
        r_sp, r_raw = ratio(sta, spr), ratio(sta, raw)
        rows.append((f"ping-pong {label}, bandwidth (GB/s)", raw.cell(), spr.cell(), det.cell(),
                     sta.cell(), f"{fmt(r_sp)}×" if r_sp else "—",
                     f"{100 * r_raw:.0f} %" if r_raw else "—"))
        if name in ("1MiB", "16MiB"):
            goals.append((f"{label} bandwidth ≥ 95 % of raw MPI", "Starling / raw ≥ 95 %", r_raw,
                          r_raw is not None and r_raw >= 0.95,
                          f"{100 * r_raw:.0f} %" if r_raw else "—"))

    # 2. ring
    params = sorted({k[2] for k in samples if k[0] == "ring"})
    for p in params:
        sp, sta = stat("ring", "starpu", p), stat("ring", "starling", p)
        r = ratio(sta, sp)
        rows.append((f"token ring, per hop (µs; {p})", "—", sp.cell(), "—", sta.cell(),
                     f"{fmt(r)}×" if r else "—", "—"))
        goals.append(("ring hop ≥ 5× faster than StarPU-MPI", "StarPU / Starling ≥ 5",
                      r, r is not None and r <= 0.2, f"{fmt(1 / r)}× faster" if r else "—"))

    # 3. empty tasks
    for p in sorted({k[2] for k in samples if k[0] == "empty_task"}):
        sp, sta = stat("empty_task", "starpu", p), stat("empty_task", "starling", p)
        r = ratio(sta, sp)
        rows.append((f"empty task, submit + execute, 1 worker (µs per task; {p})", "—", sp.cell(),
                     "—", sta.cell(), f"{fmt(r)}×" if r else "—", "—"))
        goals.append(("empty task ≥ 5× faster than StarPU", "StarPU / Starling ≥ 5", r,
                      r is not None and r <= 0.2, f"{fmt(1 / r)}× faster" if r else "—"))

    # 4. insert
    for p in sorted({k[2] for k in samples if k[0] == "insert"}, key=lambda s: (not s.startswith("unpruned"), s)):
        sp, sta = stat("insert", "starpu", p), stat("insert", "starling", p)
        r = ratio(sta, sp)
        variant = p.split(",")[0]
        rest = ",".join(p.split(",")[1:])
        rows.append((f"stencil insert, {variant}, all registered (µs per logical task; {rest})", "—",
                     sp.cell(), "—", sta.cell(), f"{fmt(r)}×" if r else "—", "—"))
        if variant == "unpruned":
            ok = r is not None and r <= 0.2 and sta.median <= 0.24
            goals.append(("insert submission ≥ 5× faster than StarPU's 1.2 µs per registered insert",
                          "StarPU / Starling ≥ 5 here, and Starling ≤ 0.24 µs", r, ok,
                          f"{fmt(1 / r)}× faster, {fmt(sta.median)} µs" if r else "—"))

    # 5. Cholesky
    for n in sorted({k[2] for k in samples if k[0] == "cholesky"}, key=lambda s: int(s.split(",")[0][2:])):
        sp = stat("cholesky", "starpu_openblas", n)
        for impl, what in (("starling_faer", "Starling faer kernels"),
                           ("starling_openblas", "Starling OpenBLAS kernels")):
            sta = stat("cholesky", impl, n)
            if not sta.values:
                continue
            r = ratio(sta, sp)
            rows.append((f"Cholesky {n}, 2 ranks, StarPU OpenBLAS vs {what} (GFlop/s)", "—",
                         sp.cell(), "—", sta.cell(), f"{fmt(r)}×" if r else "—", "—"))
            if impl == "starling_openblas":
                goals.append((f"Cholesky {n} ≥ StarPU-MPI on the same kernels", "Starling / StarPU ≥ 1",
                              r, r is not None and r >= 1, f"{fmt(r)}×" if r else "—"))

    print("| benchmark | raw MPI | StarPU-MPI (send/recv) | StarPU-MPI detached | Starling | Starling / StarPU | Starling / raw |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if all(c == "—" for c in r[1:]):
            continue  # not run
        print("| " + " | ".join(r) + " |")
    print()
    print("Ratios are of medians (time: Starling's time / theirs, below 1 is faster; GB/s and")
    print("GFlop/s: Starling's rate / theirs). Cells: median [min–max] over every sample.")
    print()
    print("| goal | test | measured | met |")
    print("| --- | --- | --- | --- |")
    for g in goals:
        if g[2] is None:
            continue  # not measured
        print(f"| {g[0]} | {g[1]} | {g[4]} | {'yes' if g[3] else 'NO'} |")
    if failed:
        print()
        for f in failed:
            print(f"- {f}")
    if notes:
        print()
        for n in notes:
            print(f"- {n}")


if __name__ == "__main__":
    main()

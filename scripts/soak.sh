#!/usr/bin/env bash
# The soak run of issue 17 ("correct at any size"), outside CI: every workload of the
# issue's table at SCALE × its size (default 10), on 2 and 4 ranks, in-process and, when
# `mpirun` is on the PATH (and the `mpi` build succeeds), under mpirun; default engine
# tables. Each run must print its results, exit 0 (the example checks every value it
# moved, and fails on an error, a watchdog, or anything left at shutdown), and its peak
# resident set size is reported (the example reads its own VmHWM; /usr/bin/time -v is not
# needed). Then the cost per message of 1 000 against 100 000 outstanding messages between
# two ranks, in one process and under mpirun, rounds alternating between the sizes, and
# raw MPI's own figure for as many messages outstanding (bench/compare/outstanding_raw.c,
# each message on its own tag), as the baseline.
#
#   bash scripts/soak.sh                  # everything (≈ 6–8 min on 2 cores with mpirun)
#   SCALE=1 bash scripts/soak.sh          # the issue's own sizes
#   ONLY="stencil gather" bash scripts/soak.sh
#   MPI=0 bash scripts/soak.sh            # in-process only
#   MPICH=0 bash scripts/soak.sh          # without the MPICH runs
#
# Under mpirun the workloads run twice when MPICH is installed (`mpicc.mpich` and
# `mpirun.mpich`, Debian's `mpich` and `libmpich-dev`): on Open MPI (the system's `mpirun`)
# and on MPICH (the rank built with `MPICC=mpicc.mpich` in its own target directory, run
# under Hydra), whose unexpected-message handling, eager limits and tag bound differ.
#
# The workloads are `examples/soak.rs`'s (its header says what each does); the table
# printed at the end has one row per (workload, ranks, launcher): ok/FAILED, seconds, peak
# RSS (per process under mpirun: the largest). Logs: target/soak/<stamp>/. Documented in
# docs/robustness.md ("Full tables"); figures in docs/performance.md.
set -uo pipefail
cd "$(dirname "$0")/.."
scale="${SCALE:-10}"
only="${ONLY:-stencil gather get-data early-recvs reverse one-tag pairs cache outstanding}"
limit="${STEP_TIMEOUT:-600}"
target="${CARGO_TARGET_DIR:-target}"
out="$target/soak/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
wants() { [[ " $only " == *" $1 "* ]]; }

# Both builds share the target directory (the `mpi` feature's crates get their own
# hashes); each binary is copied out before the other build replaces it.
cargo build --quiet --release --example soak || exit 1
local_bin="$out/soak"
cp "$target/release/examples/soak" "$local_bin"
mpi_bin=""
if [ "${MPI:-1}" != 0 ] && command -v mpirun >/dev/null 2>&1; then
    if cargo build --quiet --release --features mpi --example soak; then
        mpi_bin="$out/soak-mpi"
        cp "$target/release/examples/soak" "$mpi_bin"
    else
        echo "# the mpi build failed: in-process only" >&2
    fi
else
    echo "# mpirun not found (or MPI=0): in-process only" >&2
fi
mpich_bin=""
if [ -n "$mpi_bin" ] && [ "${MPICH:-1}" != 0 ] && command -v mpicc.mpich >/dev/null 2>&1 &&
    command -v mpirun.mpich >/dev/null 2>&1; then
    if MPICC=mpicc.mpich CARGO_TARGET_DIR="$target/mpich" \
        cargo build --quiet --release --features mpi --example soak; then
        mpich_bin="$out/soak-mpich"
        cp "$target/mpich/release/examples/soak" "$mpich_bin"
    else
        echo "# the MPICH build failed: Open MPI only" >&2
    fi
fi
# Hydra needs no launcher agent on one machine; fork keeps it from looking for ssh.
export HYDRA_LAUNCHER=fork
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none

# The issue's sizes: stencil (grid 8 × n: 4 000 on 2 ranks, 1 100 on 4), 100 000 handles
# gathered / fetched, 20 000 early receives, 1 100 reversed, 4 200 on one tag, 50 000
# pairs, 70 000 cached variables.
size_of() {
    case "$1:$2" in
        stencil:2) echo $((4000 * scale)) ;;
        stencil:4) echo $((1100 * scale)) ;;
        gather:*|get-data:*) echo $((100000 * scale)) ;;
        early-recvs:*) echo $((20000 * scale)) ;;
        reverse:*) echo $((1100 * scale)) ;;
        one-tag:*) echo $((4200 * scale)) ;;
        pairs:*) echo $((50000 * scale)) ;;
        cache:*) echo $((70000 * scale)) ;;
    esac
}

rows=()
failed=0
# run LAUNCHER WORKLOAD RANKS N
run() {
    local launcher="$1" w="$2" r="$3" n="$4" log="$out/$2-$3-$1.log" rc=0
    echo "# $w on $r ranks ($launcher), n = $n" >&2
    if [ "$launcher" = mpirun ]; then
        timeout "$limit" mpirun "${mpi_flags[@]}" -n "$r" "$mpi_bin" "$w" "$r" "$n" >"$log" 2>&1 || rc=$?
    elif [ "$launcher" = mpich ]; then
        timeout "$limit" mpirun.mpich -n "$r" "$mpich_bin" "$w" "$r" "$n" >"$log" 2>&1 || rc=$?
    else
        timeout "$limit" "$local_bin" "$w" "$r" "$n" >"$log" 2>&1 || rc=$?
    fi
    # One "soak: ... in X s, peak RSS Y MiB" line per process.
    local secs rss status=ok
    secs=$(sed -n 's/^soak: .* in \([0-9.]*\) s, peak RSS.*/\1/p' "$log" | sort -g | tail -1)
    rss=$(sed -n 's/^soak: .*, peak RSS \([0-9]*\) MiB/\1/p' "$log" | sort -g | tail -1)
    if [ $rc -ne 0 ] || grep -q "FAILED\|watchdog" "$log"; then
        status="FAILED (rc=$rc$([ $rc -eq 124 ] && echo ', timeout'))"
        failed=$((failed + 1))
        grep -m3 "FAILED\|watchdog" "$log" | cut -c1-300 >&2
    fi
    rows+=("| $w | $n | $r | $launcher | $status | ${secs:-?} s | ${rss:-?} MiB |")
}

for w in stencil gather get-data early-recvs reverse one-tag pairs cache; do
    wants "$w" || continue
    for r in 2 4; do
        n=$(size_of "$w" "$r")
        run in-process "$w" "$r" "$n"
        [ -n "$mpi_bin" ] && run mpirun "$w" "$r" "$n"
        [ -n "$mpich_bin" ] && run mpich "$w" "$r" "$n"
    done
done

echo
echo "| workload | n | ranks | launcher | result | time | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"

if wants outstanding; then
    echo
    echo "# outstanding messages between two ranks: 1 000 against 100 000" >&2
    log="$out/outstanding.log"
    if timeout "$limit" "$local_bin" outstanding 2 1000,100000 "${ROUNDS:-5}" >"$log" 2>&1; then
        grep '^outstanding' "$log" | sort -u
    else
        echo "outstanding: FAILED (see $log)"
        failed=$((failed + 1))
    fi
    # The same over MPI: its progression polls without pause, so what an idle pass costs
    # is paid on every poll (a search through the waiting receives made it quadratic).
    if [ -n "$mpi_bin" ]; then
        log="$out/outstanding-mpi.log"
        if timeout "$limit" mpirun "${mpi_flags[@]}" -n 2 "$mpi_bin" outstanding 2 1000,100000 "${ROUNDS:-5}" >"$log" 2>&1; then
            grep '^outstanding' "$log" | sort -u | sed 's/^outstanding/outstanding (mpirun)/'
        else
            echo "outstanding (mpirun): FAILED (see $log)"
            failed=$((failed + 1))
        fi
        # The baseline: raw MPI's own cost per message, each message on its own tag, with
        # as many outstanding (bench/compare/outstanding_raw.c).
        if command -v mpicc >/dev/null; then
            raw_bin="$out/outstanding_raw"
            log="$out/outstanding-raw.log"
            if mpicc -O2 -Wall -o "$raw_bin" bench/compare/outstanding_raw.c &&
                timeout "$limit" mpirun "${mpi_flags[@]}" -n 2 "$raw_bin" 1000,100000 "${ROUNDS:-5}" >"$log" 2>&1; then
                grep '^outstanding_raw' "$log" | sed 's/^outstanding_raw/outstanding (raw MPI, the baseline)/'
            else
                echo "outstanding (raw MPI): FAILED (see $log)"
            fi
        fi
    fi
    if [ -n "$mpich_bin" ]; then
        log="$out/outstanding-mpich.log"
        if timeout "$limit" mpirun.mpich -n 2 "$mpich_bin" outstanding 2 1000,100000 "${ROUNDS:-5}" >"$log" 2>&1; then
            grep '^outstanding' "$log" | sort -u | sed 's/^outstanding/outstanding (mpich)/'
        else
            echo "outstanding (mpich): FAILED (see $log)"
            failed=$((failed + 1))
        fi
    fi
fi
echo
echo "soak: $failed failed; logs in $out"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The device check, run on the GPU machine from the folder scripts/gpu-bundle.sh made
# (copied there as run.sh). Ends with a table: each test group, each example, the
# Cholesky against cuSOLVER, the staging bandwidth. No device: says so, exits 0.
#
# Logs go to $OUT (the device tool's folder that comes back) when it is set, else to
# ./out beside this script. Each row is printed as soon as it is known, so a run cut
# short still reports what it did. BUDGET (seconds, default 430) bounds the whole run:
# a section that would not fit in what is left is skipped, with a row saying so, and
# the benchmark gets what is left.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
deadline=$((SECONDS + ${BUDGET:-430}))
left() { echo $((deadline - SECONDS)); }
out=$here/out
mkdir -p "$out"
exec > >(tee -a "${OUT:-$out}/run.log") 2>&1
# $OUT brings back 8 files at most: the logs travel as one archive.
trap '[ -n "${OUT:-}" ] && tar czf "$OUT/logs.tgz" -C "$here" out' EXIT
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no CUDA device here (nvidia-smi -L failed): nothing to check"
    exit 0
fi
nvidia-smi -L
echo "libraries:"
for l in libcuda.so.1 libnvrtc.so libcublas.so libcublasLt.so libcusolver.so; do
    f=$(ldconfig -p 2>/dev/null | grep -m1 "$l" | sed 's/.*=> //')
    echo "  $l -> ${f:-not in the loader cache}"
done
ls /usr/local/cuda/lib64 2>/dev/null | grep -E '^lib(cublas|cublasLt|nvrtc|cusolver|cudart)\.so\.[0-9]+$' | sed 's/^/  present: /'

rows=()
row() {
    rows+=("| $1 | $2 | $3 |")
    echo "row: | $1 | $2 | $3 |"
}
# Skips the rest of a section when fewer than $1 seconds are left.
fits() {
    if [ "$(left)" -lt "$1" ]; then
        row "$2" skipped "$(left) s left of the budget"
        return 1
    fi
}

# Each test binary listed in $1, its rows labelled with $2.
test_group() {
    local t r
    for t in $(cat "$here/$1" 2>/dev/null); do
        fits 70 "tests $t$2" || continue
        if timeout 60 "$bin/$t" --test-threads=1 >"$out/$t.log" 2>&1; then
            r=$(grep -E '^test result' "$out/$t.log" | tail -1)
            row "tests $t$2" pass "${r#test result: }"
        else
            row "tests $t$2" FAIL "$(grep -E 'FAILED|panicked' "$out/$t.log" | head -3 | tr '\n' ' ')"
        fi
    done
}
test_group tests.txt ""
test_group tests13.txt " (CUDA 13 API)"

example() {
    local name=$1
    shift
    local log="$out/ex-${name// /_}.log"
    fits 70 "example $name" || return 0
    if timeout 60 "$@" >"$log" 2>&1; then
        row "example $name" pass "$(grep -hE '^(OK|gpu:|cholesky:.*GFlop|factorization)' "$log" | tr '\n' ' ' | cut -c1-300)"
        grep -E '^\[starling\]' "$log" | grep -vE 'worker ([3-9]|1[0-9])' | head -12
    else
        row "example $name" FAIL "$(tail -3 "$log" | tr '\n' ' ' | cut -c1-300)"
    fi
}
example "stencil5 2 16 16 2" "$bin/stencil5" 2 16 16 2 --gpu
example "cholesky 1 512 128" "$bin/cholesky" 1 512 128 --gpu
example "cholesky 2 512 128" "$bin/cholesky" 2 512 128 --gpu
example "cholesky 1 4096 512 check" "$bin/cholesky" 1 4096 512 --gpu
example "cholesky 2 16384 2048" "$bin/cholesky" 2 16384 2048 --gpu --no-check
example "cholesky (CUDA 13 API) 1 1024 256" "$bin/cholesky-cuda13" 1 1024 256 --gpu

# Issue 21: the GPU and the CPU workers together (`dmda`, models in a fresh folder: the
# first run calibrates them) against the GPU alone (`prio`: every task on the device).
# Targets: at n = 8192, dmda ≥ 1.2× the GPU alone; at n = 16384 and 32768, dmda ≥ the GPU
# alone. Each run has 60 s (the host's check is off: --no-check). The example's time holds
# the first use of the device (library handles): the benchmark's section 3 compares the
# two warm, at n = 8192 and 32768.
models=$(mktemp -d)
together() {
    example "cholesky 1 $* gpu alone" "$bin/cholesky" 1 "$@" --gpu --no-check
    for run in calibrate measure; do
        example "cholesky 1 $* dmda ($run)" env STARLING_SCHED=dmda STARLING_HOME="$models" STARLING_SCHED_STATS=1 \
            "$bin/cholesky" 1 "$@" --gpu --no-check
    done
}
together 8192 1024

# A CUDA install with only the versioned library files (pip wheels, a runtime-only
# install): the loader sees links named libX.so.N only, no loader cache. The CUDA 13 API
# build must run; the CUDA 12 one must stop, naming the library it cannot load.
only=$(mktemp -d)
for f in /usr/local/cuda/lib64/lib*.so.[0-9]*; do
    b=$(basename "$f")
    [[ $b =~ ^lib[A-Za-z_]+\.so\.[0-9]+$ ]] && ln -sf "$(readlink -f "$f")" "$only/$b"
done
ldso=$(ls /lib64/ld-linux-x86-64.so.2 2>/dev/null || ls /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
drv=$(dirname "$(ldconfig -p | grep -m1 'libcuda.so.1 ' | sed 's/.*=> //')")
path="$only:$drv:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64"
echo "versioned-only: $(ls "$only" | tr '\n' ' ')"
if timeout 60 "$ldso" --inhibit-cache --library-path "$path" "$bin/cholesky-cuda13" 1 1024 256 --gpu >"$out/ex-v13.log" 2>&1; then
    row "versioned libraries only, CUDA 13 API build" pass "$(grep -hE '^(OK|gpu:)' "$out/ex-v13.log" | tr '\n' ' ' | cut -c1-200)"
else
    row "versioned libraries only, CUDA 13 API build" FAIL "$(tail -3 "$out/ex-v13.log" | tr '\n' ' ' | cut -c1-300)"
fi
if timeout 60 "$ldso" --inhibit-cache --library-path "$path" "$bin/cholesky" 1 1024 256 --gpu >"$out/ex-v12.log" 2>&1; then
    row "versioned libraries only, CUDA 12 API build" FAIL "ran although it cannot load libX.so.13: $(grep -hE '^(OK|gpu:)' "$out/ex-v12.log" | tr '\n' ' ' | cut -c1-200)"
else
    row "versioned libraries only, CUDA 12 API build" pass "stops: $(grep -m1 -iE 'cublas|nvrtc|cusolver|library' "$out/ex-v12.log" | cut -c1-250)"
fi

if STARLING_NCUDA=0 timeout 60 "$bin/cholesky" 1 256 64 --gpu >"$out/ex-disabled.log" 2>&1; then
    row "STARLING_NCUDA=0 --gpu" FAIL "exited 0"
else
    row "STARLING_NCUDA=0 --gpu" pass "$(tail -1 "$out/ex-disabled.log" | cut -c1-120)"
fi

echo "== benches/gpu.rs"
if fits 40 "benches/gpu.rs"; then
    STARLING_GPU_BENCH_REPS=${STARLING_GPU_BENCH_REPS:-5} STARLING_GPU_BENCH_RANKS=${STARLING_GPU_BENCH_RANKS:-1,2} timeout $(($(left) - 10)) "$bin/bench-gpu" --bench | tee "$out/bench.log"
fi

# Where two ranks sharing the device lose time at tiles of 1024 (the benchmark's 2-rank
# rows, where in-process ranks share the cores: 8 workers each on 16 cores): the
# benchmark's 1- and 2-rank runs at n = 16384 with every core for each rank (as before
# `share_cores`), with 2 CPU workers per rank, with a window of 64 tasks, and traced
# (Perfetto / chrome://tracing: the 2-rank run's trace is the last written).
diagnose() {
    local name=$1
    shift
    fits 40 "diagnosis $name" || return 0
    echo "== diagnosis: $name"
    env STARLING_GPU_BENCH_STAGING=0 STARLING_GPU_BENCH_N=16384 STARLING_GPU_BENCH_NB=1024 \
        STARLING_GPU_BENCH_RANKS=1,2 STARLING_GPU_BENCH_TOGETHER= "$@" \
        timeout 60 "$bin/bench-gpu" --bench 2>&1 | grep -E '^\| 16384' | sed "s/^/$name: /"
}
diagnose "no core sharing" STARLING_SHARE_CORES=0
diagnose "2 workers" STARLING_NCPU=2
diagnose "window 64" STARLING_CUDA_WINDOW=64
diagnose "traced" STARLING_TRACE="$out/trace-warm/"

echo
echo "## device check"
echo "| check | result | detail |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
grep -E '^\| (staging|n \||together|---|[0-9])' "$out/bench.log" 2>/dev/null

#!/usr/bin/env bash
# stencil5 and cholesky with --gpu (the facade's `cuda` feature). On a machine with a CUDA
# device they run their codelets' CUDA implementations and check their results as on the
# CPU (exit 0). Elsewhere each must stop at once with the reason ("--gpu: no CUDA driver",
# "--gpu: no CUDA device", "--gpu: CUDA devices are disabled"): counted as passed, and
# said so. Anything else (a panic, a wrong result, an unclear message) fails.
# Ends with one `test result:` line, counted by scripts/test.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

cargo build --quiet --release --features cuda --example stencil5 --example cholesky || {
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored"
    exit 1
}
passed=0
failed=0
run() {
    local out rc reason
    out=$("$@" 2>&1)
    rc=$?
    reason=$(grep -oE -- '--gpu: (no CUDA driver|no CUDA device|CUDA devices are disabled).*' <<<"$out" | head -1)
    if [ "$rc" -eq 0 ]; then
        echo "ok: $*"
        grep -E '^(OK|gpu:|factorization:)' <<<"$out" | sed 's/^/    /'
        passed=$((passed + 1))
    elif [ "$rc" -ne 0 ] && [ -n "$reason" ]; then
        echo "ok (skipped: ${reason#--gpu: }): $*"
        passed=$((passed + 1))
    else
        echo "FAILED (exit $rc): $*"
        tail -n 20 <<<"$out"
        failed=$((failed + 1))
    fi
}
run target/release/examples/stencil5 2 16 16 2 --gpu
run target/release/examples/cholesky 1 512 128 --gpu
run target/release/examples/cholesky 2 512 128 --gpu
STARLING_NCUDA=0 run target/release/examples/cholesky 1 256 64 --gpu
status=ok
[ "$failed" -eq 0 ] || status=FAILED
echo "test result: $status. $passed passed; $failed failed; 0 ignored"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# Starling's whole test suite: the README's test command, and all that `.ci/run` calls.
#
# On a fresh Debian machine with Rust this is all the set-up: it installs what is missing
# (Open MPI and libclang from apt, the two bare-metal targets from rustup), then runs the
# lints, the no_std builds of the core, every test, and the MPI tests under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step names itself and the disk space left, so that a run that fills the disk says
# where.
step() { printf '\n== %s (%s free)\n' "$*" "$(df -h --output=avail . 2>/dev/null | tail -n 1 | tr -d ' ')"; }

# --- system packages (Open MPI for the MPI tests, libclang for rsmpi's bindgen, a C++
# compiler for libFuzzer) ------------------------------------------------------------------
missing=()
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || missing+=(libclang-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v c++ >/dev/null 2>&1 || missing+=(g++)   # libfuzzer-sys builds libFuzzer (fuzz/)
# MPICH beside Open MPI, for tests/mpi/mpich.sh; Open MPI stays the default `mpicc` and
# `mpirun` (Debian ranks it first).
command -v mpicc.mpich >/dev/null 2>&1 || missing+=(mpich libmpich-dev)
if [ ${#missing[@]} -gt 0 ]; then
    step "apt-get install ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    for attempt in 1 2 3; do
        if $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
            break
        fi
        [ "$attempt" -eq 3 ] && { echo "apt-get failed three times" >&2; exit 1; }
        sleep 10   # another apt may hold the dpkg lock
    done
fi

# --- Rust components -----------------------------------------------------------------
step "rustup: targets and components"
rustup target add thumbv7em-none-eabihf riscv32imac-unknown-none-elf
rustup component add clippy rustfmt

# Open MPI as root, and more ranks than the 2 cores of CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STARLING_NCPU="${STARLING_NCPU:-1}"   # one worker per rank on 2 cores

# Disk: a whole run builds the workspace in five configurations (debug, release, loom,
# miri, MPICH) and the fuzz targets. With incremental caches and full debug info that
# came to 14 GiB, more than a CI machine had left (a run failed with "No space left on
# device"). No incremental cache (a one-shot run never reuses it) and line tables only
# (backtraces keep their files and lines) bring it to a few GiB; the fuzzer's build is a
# scratch directory, removed after its smoke run.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only

# --- lints ----------------------------------------------------------------------------
step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p starling-core --all-targets --features defmt -- -D warnings
cargo clippy -p starling-core --all-targets --features embedded-hal,defmt -- -D warnings
step "rustdoc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
RUSTDOCFLAGS="-D warnings" cargo doc -p starling --no-deps --quiet --features mpi
RUSTDOCFLAGS="-D warnings" cargo doc -p starling-core -p starling-std --no-deps --quiet --features starling-core/embedded-hal,starling-std/embedded-hal

# --- the core is no_std and allocation-free: build it for two bare-metal targets ------
step "no_std builds of starling-core"
cargo build -p starling-core --target thumbv7em-none-eabihf
cargo build -p starling-core --target thumbv7em-none-eabihf --features defmt
cargo build -p starling-core --target riscv32imac-unknown-none-elf
# ... and so is its embedded link over an embedded-hal-nb serial port.
cargo build -p starling-core --target thumbv7em-none-eabihf --features embedded-hal
cargo build -p starling-core --target thumbv7em-none-eabihf --features embedded-hal,defmt
cargo build -p starling-core --target riscv32imac-unknown-none-elf --features embedded-hal

# --- tests ----------------------------------------------------------------------------
step "cargo test (unit, property, agreement, delivery, doc tests)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
step "benchmarks, each run once as a test"
cargo test -p starling-core --bench core
cargo test -p starling --bench runtime
cargo test -p starling --bench insert

step "loom: the dependency queue, request completions, lazy handles, and the progression thread's inbox, wake-up, caller-driven progress, posted sends (multiple-send) and quiescence witness under every interleaving (bounded)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p starling-std --release --lib loom 2>&1 | tee -a "$log"

# --- fuzz targets (docs/verification.md) ------------------------------------------------
# The fuzz crate has its own workspace; its test replays every checked-in corpus file of
# every target through the target's function: no fuzzer needed.
step "fuzz targets over their checked-in corpus (fuzz/corpus)"
cargo fmt --manifest-path fuzz/Cargo.toml --check
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings
cargo test --manifest-path fuzz/Cargo.toml 2>&1 | tee -a "$log"
if command -v cargo-fuzz >/dev/null 2>&1; then
    step "fuzz smoke: each target under libFuzzer for 15 s (cargo-fuzz is installed)"
    smoke=$(mktemp -d)
    cargo fuzz build -s none --target-dir "$smoke/target"
    for t in envelope matcher engine_sim admission_sim planner; do
        cp -r "fuzz/corpus/$t" "$smoke/$t"
        if ! cargo fuzz run "$t" "$smoke/$t" -s none --target-dir "$smoke/target" -- -max_total_time=15 >"$smoke/$t.log" 2>&1; then
            tail -40 "$smoke/$t.log"
            exit 1
        fi
        echo "$t: $(grep -E '^#[0-9]+.*DONE' "$smoke/$t.log")"
    done
    rm -rf "$smoke"
fi

# --- miri over the core (nightly only) ---------------------------------------------------
# Every test of starling-core, property tests with one case each and short sequences
# (the tests shrink themselves under cfg(miri)); proptest reads the working directory, so
# isolation is off. Skipped when no nightly toolchain is installed.
if rustup run nightly rustc --version >/dev/null 2>&1; then
    step "miri: the core's tests (nightly)"
    if rustup component add miri rust-src --toolchain nightly; then
        # About 3 minutes on an idle 2-core machine. A run cut by the timeout (a slow or
        # busy machine) is reported, not failed; undefined behaviour or a failing test is.
        run_miri() {
            set +e
            MIRIFLAGS=-Zmiri-disable-isolation timeout 600 cargo +nightly miri test "$@" 2>&1 | tee -a "$log"
            local rc=${PIPESTATUS[0]}
            set -e
            if [ "$rc" -eq 124 ]; then
                echo "miri: cut after 10 minutes (slow machine), not counted as a failure"
            elif [ "$rc" -ne 0 ]; then
                exit "$rc"
            fi
        }
        PROPTEST_CASES=1 run_miri -p starling-core
        run_miri -p starling-mpi --lib lent
    else
        echo "miri is not available for this nightly: skipped"
    fi
else
    echo "no nightly toolchain: miri skipped"
fi

step "the main job (README): the ring on the in-process cluster, and on the simulator"
cargo run --quiet --example ring -- 4 200
cargo run --quiet --example ring -- 2 200 sync
cargo run --quiet --example sim_ring

step "the ring over a byte stream: two boards (the core's embedded link), a rank and a board"
cargo run --quiet --example serial_ring -- 200 boards
cargo run --quiet --example serial_ring -- 100 noisy
cargo run --quiet --example serial_ring -- 100 rank

step "the insert-task examples: stencil5 and cholesky check their results"
cargo run --quiet --release --example stencil5 -- 4 32 32 3
cargo run --quiet --release --example cholesky -- 2 512 128

# --- MPI -------------------------------------------------------------------------------
# The facade built with its `mpi` feature (`starling::mpi` assembles a rank around
# starling-mpi's transport): its unit tests, its MPI doc examples (built, not run), and
# the point-to-point MPI jobs (mpirun -n 2 and -n 4: tests/mpi_p2p.rs launches itself
# under mpirun). Then the examples under mpirun: tests/mpi/ring.sh (every ring variant),
# tests/mpi/examples.sh (every example on 2 and 4 processes, its result lines compared
# with the in-process run's), and tests/mpi/mpich.sh (the MPI rank built against MPICH,
# its point-to-point jobs under MPICH's launcher).
step "MPI: clippy with the mpi feature; tests under mpirun"
cargo clippy -p starling --features mpi --all-targets -- -D warnings
cargo test -p starling --features mpi --lib --test mpi_p2p 2>&1 | tee -a "$log"
cargo test -p starling --features mpi --doc mpi 2>&1 | tee -a "$log"
grep -E "^mpi_p2p: " "$log" || true
shopt -s nullglob
# Each script ends with a `test result:` line (one test per job), counted in the total.
for t in tests/mpi/*.sh; do
    echo "-- $t"
    bash "$t" 2>&1 | tee -a "$log"
done

# --- CUDA ------------------------------------------------------------------------------
# starling-gpu's own tests ran with `cargo test` above (tests that need a device print
# "skipped: no CUDA device" without one). Here: the facade built with its `cuda` feature,
# and stencil5/cholesky with --gpu (tests/gpu/examples.sh: their checks on a GPU, the
# clear refusal elsewhere).
step "CUDA: clippy with the cuda feature; the examples with --gpu"
cargo clippy -p starling --features cuda --all-targets -- -D warnings
for t in tests/gpu/*.sh; do
    echo "-- $t"
    bash "$t" 2>&1 | tee -a "$log"
done

step "all checks passed"
# One plain closing line with the totals of every cargo test binary above.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"

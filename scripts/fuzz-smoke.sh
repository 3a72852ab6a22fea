#!/usr/bin/env bash
# Fuzz smoke test (DESIGN.md, style rule 5): builds every cargo-fuzz target
# in fuzz/ and runs each for FUZZ_SECONDS (default 20) from the committed
# seeds (fuzz/seeds/<target>) plus whatever corpus earlier runs left in
# fuzz/corpus/<target> (ignored by git). Fails on the first crash, leak or
# timeout; the reproducer lands in fuzz/artifacts/<target>/ and replays with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# or, on stable, by feeding its bytes to diodon_proto::fuzzing::<target>
# (compiled only with the crate feature `fuzzing`, which fuzz/Cargo.toml and
# the crates' own tests enable).
#
# Installs what it needs: the nightly toolchain (minimal profile) and
# cargo-fuzz, if absent. Env: FUZZ_SECONDS, FUZZ_TARGETS (space-separated
# subset), FUZZ_JOBS (parallel libFuzzer workers per target, default 1).
set -euo pipefail

seconds="${FUZZ_SECONDS:-20}"
jobs="${FUZZ_JOBS:-1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz-smoke: installing the nightly toolchain" >&2
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --help >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

targets="${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}"
echo "fuzz-smoke: building: $(echo $targets)" >&2
cargo +nightly fuzz build

summary=()
status=0
for target in $targets; do
    corpus="corpus/$target"
    mkdir -p "$corpus" "artifacts/$target"
    if [ -d "seeds/$target" ]; then
        cp -n "seeds/$target"/* "$corpus"/ 2>/dev/null || true
    fi
    log="artifacts/$target/smoke.log"
    echo "fuzz-smoke: running $target for ${seconds}s" >&2
    if cargo +nightly fuzz run "$target" "$corpus" -- \
        -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" \
        -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
        grep -E 'panicked|ERROR|SUMMARY|Test unit written|^Base64' "$log" >&2 || tail -n 30 "$log" >&2
    fi
    [ "$jobs" -gt 1 ] && cat fuzz-*.log >>"$log" 2>/dev/null && rm -f fuzz-*.log
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
    rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{s += $2} END {print s + 0}')
    summary+=("$(printf '%-16s %-6s %12s execs %10s exec/s' "$target" "$result" "$execs" "$rate")")
done

printf '%s\n' "fuzz-smoke summary (${seconds}s per target):" "${summary[@]}"
exit "$status"

#!/usr/bin/env bash
# bench-repeat.sh — what the carousel's repeat pass of small files costs, both
# sides, across the software diode (issue: directory sync, "repeat passes cost
# the receiver nothing but the link"; PROTOCOL.md § 5.6 repeat bundles).
#
#   files (N × 1–4 KB, on disk) ─► diodon sync --once --passes 1   pass 1
#                                ─► diodon sync --once --passes 2   pass 2 only
#                                   (same state database: every file is a repeat)
#   per pass: the sender's time, CPU, datagrams and wire bytes; the receiver's
#   CPU seconds (from /proc), and at the end its socket drops, files verified
#   and files recognised as present.
#
# Usage: scripts/bench-repeat.sh [--files N] [--rate RATE] [--runs R]
#                                [--baseline GIT-REV] [--no-record]
#
# Defaults: 100,000 files, 300 Mbit/s, 2 runs. --baseline REV builds that
# revision (a git worktree under /var/tmp) and alternates its runs with this
# version's. Each run starts from an empty receiver folder and state database,
# after `sync` and dropping the page cache, so the runs see the same
# filesystem. Writes a table to stdout and (unless --no-record) to
# results/sync-bench/DATE-repeat.md. Needs root (network namespaces).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
FILES=100000
RATE=300mbit
RUNS=2
BASELINE=
RECORD=yes
CMDLINE="scripts/bench-repeat.sh $*"
while [[ $# -gt 0 ]]; do
    case $1 in
    --files) FILES=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --baseline) BASELINE=${2:?}; shift 2 ;;
    --no-record) RECORD=no; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-repeat: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-repeat: must run as root" >&2; exit 1; }

(cd "$ROOT" && cargo build --release -q -p diodon --bin diodon)
declare -A BINS=([this]="$TARGET/release/diodon")
LABELS=(this)
if [[ -n $BASELINE ]]; then
    BASE_REV=$(git -C "$ROOT" rev-parse --short "$BASELINE")
    BASE_DIR=/var/tmp/diodon-baseline-$BASE_REV
    [[ -d $BASE_DIR ]] || git -C "$ROOT" worktree add --detach -q "$BASE_DIR" "$BASELINE"
    echo "bench-repeat: building baseline $BASE_REV in $BASE_DIR" >&2
    (cd "$BASE_DIR" && CARGO_TARGET_DIR="$BASE_DIR/target" cargo build --release -q -p diodon --bin diodon)
    BINS["base $BASE_REV"]="$BASE_DIR/target/release/diodon"
    LABELS=("base $BASE_REV" this)
fi

export DIODON_TB=brp$$
TB="$ROOT/scripts/testbed.sh"
WORK=$(mktemp -d /var/tmp/diodon-bench-repeat.XXXXXX)
RX_PID=
cleanup() {
    [[ -n $RX_PID ]] && kill "$RX_PID" 2>/dev/null && wait "$RX_PID" 2>/dev/null
    "$TB" down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "bench-repeat: writing $FILES files of 1–4 KB" >&2
python3 - "$WORK/src/many" "$FILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = f"{root}/d{i % 200:03}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}", "wb") as f:
        f.write(os.urandom(1024 + (i * 37) % 3072))
EOF

# CPU seconds (user + system) of a process so far.
cpu_s() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }

# One pass: sync --once --passes $2 with binary $1; prints the sender's JSON.
pass() {
    ip netns exec "$DIODON_TB-tx" "$1" sync "$WORK/src/many" --to 10.77.0.2:7700 \
        --state "$WORK/state.sqlite" --once --passes "$2" --settle 0 --rate "$RATE" \
        --in-flight 64 --json 2>>"$WORK/sync.log"
}

ROWS=()
for run in $(seq 1 "$RUNS"); do
    for label in "${LABELS[@]}"; do
        bin=${BINS[$label]}
        "$TB" down >/dev/null 2>&1 || true
        "$TB" up >/dev/null
        rm -rf "$WORK/out" "$WORK"/state.sqlite*
        sync
        echo 3 >/proc/sys/vm/drop_caches
        ip netns exec "$DIODON_TB-rx" "$bin" recv --listen 10.77.0.2:7700 --out "$WORK/out" \
            --rate 1gbit --no-fsync --json >"$WORK/recv.json" 2>"$WORK/recv.log" &
        RX_PID=$!
        sleep 1
        rx=$(pgrep -P "$RX_PID" diodon || echo "$RX_PID")
        c0=$(cpu_s "$rx")
        pass "$bin" 1 >"$WORK/pass1.json"
        c1=$(cpu_s "$rx")
        pass "$bin" 2 >"$WORK/pass2.json"
        sleep 2
        c2=$(cpu_s "$rx")
        kill -INT "$RX_PID"
        wait "$RX_PID" || true
        RX_PID=
        for p in 1 2; do
            [[ $p == 1 ]] && span="$c0 $c1" || span="$c1 $c2"
            ROWS+=("$(python3 - "$WORK/pass$p.json" "$WORK/recv.json" "$label" "$run" "$p" $span <<'EOF'
import json, sys
s, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
label, run, p = sys.argv[3:6]
rx_cpu = float(sys.argv[7]) - float(sys.argv[6])
c = s["send"]["core"]
end = f'{r["mirror"]["verified"]:,} / {r["mirror"]["present"]:,} / {r["socket"]["dropped_packets"]:,}' if p == "2" else ""
print(f'| {label} | {run} | {p} | {s["send"]["duration_s"]:.1f} | {s["send"]["cpu_s"]:.2f} | {rx_cpu:.2f} '
      f'| {c["datagrams_sent"]:,} | {c["wire_bytes"] / 1e6:,.0f} | {s["sync"]["bundles"]:,} | {end} |')
EOF
)")
        done
        echo "${ROWS[-1]}" >&2
    done
done

DATE=$(date -u +%Y-%m-%dT%H%MZ)
REV=$(git -C "$ROOT" describe --always --dirty)
TABLE=$(
    echo "\`$CMDLINE\` — $(nproc) vCPU $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | xargs), kernel $(uname -r); built from $REV; $FILES files of 1–4 KB at $RATE"
    echo
    echo "| version | run | pass | sender s | sender CPU s | receiver CPU s | datagrams | wire MB | bundles | verified / present / socket drops (both passes) |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
echo "$TABLE"
if [[ $RECORD == yes ]]; then
    mkdir -p "$ROOT/results/sync-bench"
    echo "$TABLE" >"$ROOT/results/sync-bench/$DATE-repeat.md"
    echo "bench-repeat: wrote results/sync-bench/$DATE-repeat.md" >&2
fi

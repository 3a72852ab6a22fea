#!/usr/bin/env bash
# bench-instructions.sh — user-space instructions per side, this version against an
# older one, counted by valgrind (callgrind). Instruction counts do not depend on the
# machine's load, so this A/B holds on a shared two-core machine where CPU seconds
# swing by ±20 % (scripts/bench-link.sh measures the time; this measures the work).
#
#   sender:   valgrind diodon send --rate unlimited FILE  ==>  diodon-blast sink (loopback)
#   receiver: diodon send --rate RATE FILE  ==>  valgrind diodon recv --once --out DIR
#
# Usage: scripts/bench-instructions.sh [--baseline GIT-REV] [--size BYTES] [--mtu N]
#                                      [--send-args "ARGS"]
# Defaults: baseline a3c1d2c (the last version before the restructuring), 40 MB random
# file, MTU 1500, no extra sender arguments ("--block 64" gives this version the
# baseline's block size). Kernel work (syscalls, copies in the kernel) is not counted.
# Needs valgrind; builds with cargo (CARGO_TARGET_DIR honoured).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BASELINE=a3c1d2c
SIZE=40000000
MTU=1500
SEND_ARGS=
while [[ $# -gt 0 ]]; do
    case $1 in
    --baseline) BASELINE=${2:?}; shift 2 ;;
    --size) SIZE=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --send-args) SEND_ARGS=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-instructions: unknown option $1" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "bench-instructions: needs valgrind (apt install valgrind)" >&2; exit 1; }

(cd "$ROOT" && cargo build --release -q -p diodon --bins)
THIS="$TARGET/release/diodon"
BLAST="$TARGET/release/diodon-blast"
LABEL=$(git -C "$ROOT" rev-parse --short "$BASELINE")
BASE_DIR=/var/tmp/diodon-baseline-$LABEL
[[ -d $BASE_DIR ]] || git -C "$ROOT" worktree add --detach -q "$BASE_DIR" "$BASELINE"
(cd "$BASE_DIR" && CARGO_TARGET_DIR="$BASE_DIR/target" cargo build --release -q -p diodon --bin diodon)
BASE="$BASE_DIR/target/release/diodon"

WORK=$(mktemp -d /var/tmp/diodon-instr.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
head -c "$SIZE" /dev/urandom >"$WORK/file.bin"

free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Versions before the sandbox have no --no-sandbox; valgrind cannot run under seccomp.
sandbox_off() { "$1" "$2" --help | grep -q -- --no-sandbox && echo --no-sandbox || true; }
collected() { grep -o 'Collected : [0-9]*' "$1" | grep -o '[0-9]*$'; }

# count_send BIN: instructions of one sender run.
count_send() {
    local bin=$1 port
    port=$(free_port)
    "$BLAST" sink "127.0.0.1:$port" 30000 >/dev/null &
    local sink=$!
    PIDS+=("$sink")
    sleep 0.3
    # shellcheck disable=SC2086,SC2046 # word splitting on purpose
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" send $(sandbox_off "$bin" send) \
        --to "127.0.0.1:$port" --rate unlimited --repair 10 --mtu "$MTU" $SEND_ARGS "$WORK/file.bin" \
        >/dev/null 2>"$WORK/send.vg"
    kill "$sink" 2>/dev/null || true
    wait "$sink" 2>/dev/null || true
    collected "$WORK/send.vg"
}

# count_recv BIN: instructions of one receiver run (the sender paced so the
# receiver under valgrind keeps up; a drop would change the work).
count_recv() {
    local bin=$1 port
    port=$(free_port)
    rm -rf "$WORK/out"
    # shellcheck disable=SC2046
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" recv $(sandbox_off "$bin" recv) \
        --listen "127.0.0.1:$port" --once --no-fsync --mtu "$MTU" --out "$WORK/out" \
        >/dev/null 2>"$WORK/recv.vg" &
    local rx=$!
    PIDS+=("$rx")
    sleep 2
    # shellcheck disable=SC2086
    "$THIS" send --to "127.0.0.1:$port" --rate 20mbit --repair 10 --mtu "$MTU" $SEND_ARGS \
        "$WORK/file.bin" >/dev/null 2>&1
    wait "$rx" || true
    cmp -s "$WORK/file.bin" "$WORK/out/file.bin" || { echo "bench-instructions: receiver output differs" >&2; exit 1; }
    collected "$WORK/recv.vg"
}

s_this=$(count_send "$THIS")
s_base=$(count_send "$BASE")
r_this=$(count_recv "$THIS")
r_base=$(count_recv "$BASE")
python3 - "$SIZE" "$MTU" "$LABEL" "$s_this" "$s_base" "$r_this" "$r_base" "$SEND_ARGS" <<'EOF'
import sys
size, mtu, label = int(sys.argv[1]), sys.argv[2], sys.argv[3]
st, sb, rt, rb = map(int, sys.argv[4:8])
extra = sys.argv[8]
print(f"user-space instructions, {size} bytes, MTU {mtu}{', sender ' + extra if extra else ''}:")
print("| side | this | base " + label + " | this / base | this, instructions per byte |")
print("|---|---|---|---|---|")
for side, t, b in (("send", st, sb), ("recv", rt, rb)):
    print(f"| {side} | {t:,} | {b:,} | {t / b:.3f} | {t / size:.2f} |")
EOF

#!/usr/bin/env bash
# demo.sh — send a generated random file across the software diode and verify it.
#
#   build (release) → testbed up → 100 MB random file → diodon recv (rx namespace)
#   → diodon send (tx namespace, paced, FEC) → summaries, BLAKE3 verdict,
#   sha256sum of input and output, enforcement counters → testbed down
#
# Usage: scripts/demo.sh            (as root, or through sudo, which it asks for)
# Environment: SIZE_MB (100), RATE (1gbit), REPAIR (10), MTU (1500), LOSS (% random
# loss on the link, default none), DIODON_TB (testbed name, default "demo"),
# CARGO_TARGET_DIR (default target). Exits non-zero if anything failed.
set -euo pipefail

cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
    # Network namespaces need root: ask sudo when there is one.
    command -v sudo >/dev/null 2>&1 || { echo "demo: must run as root (network namespaces); there is no sudo here" >&2; exit 1; }
    exec sudo --preserve-env=SIZE_MB,RATE,REPAIR,MTU,LOSS,DIODON_TB,CARGO_TARGET_DIR "$0" "$@"
fi
export DIODON_TB=${DIODON_TB:-demo}
SIZE_MB=${SIZE_MB:-100}
RATE=${RATE:-1gbit}
REPAIR=${REPAIR:-10}
MTU=${MTU:-1500}
LOSS=${LOSS:-}
PORT=7700

# Installs Rust and the namespace tools when missing (fresh Debian machine).
# shellcheck disable=SC1091
source scripts/setup.sh
TARGET=${CARGO_TARGET_DIR:-target}
echo "== building (release)"
cargo build --release -p diodon
BIN=$(realpath "$TARGET/release/diodon")

WORK=$(mktemp -d /tmp/diodon-demo.XXXXXX)
RX_PID=""
cleanup() {
    [[ -n $RX_PID ]] && kill "$RX_PID" 2>/dev/null || true
    scripts/testbed.sh down || true
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "== testbed up"
scripts/testbed.sh up --mtu "$MTU" ${LOSS:+--loss "$LOSS"}

# Count any UDP the receiver namespace tries to put on the link (the guard's
# egress counter also sees the kernel's own IPv6 MLD/RS chatter).
scripts/testbed.sh exec rx nft -f - <<'NFT'
table inet diodon_udp_guard {
    counter udp_out {}
    chain output {
        type filter hook output priority -10; policy accept;
        oifname "rx0" meta l4proto udp counter name "udp_out"
    }
}
NFT

echo "== generating ${SIZE_MB} MB of random data"
mkdir -p "$WORK/in" "$WORK/out"
head -c $((SIZE_MB * 1000 * 1000)) /dev/urandom >"$WORK/in/demo.bin"

echo "== receiver: diodon recv --listen 10.77.0.2:$PORT --out $WORK/out --once --rate $RATE --mtu $MTU"
scripts/testbed.sh exec rx "$BIN" recv --listen "10.77.0.2:$PORT" --out "$WORK/out" --once \
    --rate "$RATE" --mtu "$MTU" 2>"$WORK/recv.log" &
RX_PID=$!
sleep 0.5

echo "== sender: diodon send --to 10.77.0.2:$PORT --rate $RATE --repair $REPAIR --mtu $MTU demo.bin"
send_rc=0
scripts/testbed.sh exec tx "$BIN" send --to "10.77.0.2:$PORT" --rate "$RATE" --repair "$REPAIR" \
    --mtu "$MTU" "$WORK/in/demo.bin" || send_rc=$?

recv_rc=0
wait "$RX_PID" || recv_rc=$?
RX_PID=""
echo "== receiver summary"
sed -n '/^diodon recv:/,$p' "$WORK/recv.log"

echo "== sha256sum"
sha256sum "$WORK/in/demo.bin" "$WORK/out/demo.bin" 2>&1 || true
in_sum=$(sha256sum <"$WORK/in/demo.bin" | cut -d' ' -f1)
out_sum=$( [[ -f $WORK/out/demo.bin ]] && sha256sum <"$WORK/out/demo.bin" | cut -d' ' -f1 || echo missing)

echo "== enforcement counters (the receiver must put no UDP on the link)"
scripts/testbed.sh status | grep '^counter' || true
egress=$(scripts/testbed.sh exec rx nft list counter inet diodon_udp_guard udp_out | awk '$1 == "packets" {print $2}')
echo "counter rx udp_out packets ${egress:-?}"

fail=0
[[ $send_rc -eq 0 ]] || { echo "demo: sender exited $send_rc" >&2; fail=1; }
[[ $recv_rc -eq 0 ]] || { echo "demo: receiver exited $recv_rc" >&2; fail=1; }
[[ $in_sum == "$out_sum" ]] || { echo "demo: SHA-256 differs ($in_sum vs $out_sum)" >&2; fail=1; }
[[ ${egress:-x} == 0 ]] || { echo "demo: the receiver namespace tried to send ${egress:-?} UDP packets" >&2; fail=1; }
if [[ $fail -eq 0 ]]; then
    echo "demo: OK — ${SIZE_MB} MB delivered and verified (BLAKE3 by diodon, SHA-256 identical)"
fi
exit $fail

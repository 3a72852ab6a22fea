#!/usr/bin/env bash
# bench-tunnel.sh — NODROP Fig. 3/4 on this machine: loss and throughput of a
# TUN reader against the TUN queue length (txqueuelen), for
#   naive   a one-packet-per-read reader that writes each packet out at once
#           (diodon-lab relay --tun: read one, write one, like a classic VPN loop)
#   diodon  diodon tunnel send (reader threads that only read, validate and
#           queue; the FEC pipeline behind them) across the software diode to
#           diodon recv --tun
# A local sender (diodon-blast: sendmsg + UDP GSO, unpaced) floods the TUN as
# fast as it can; the kernel segments into PAYLOAD-byte datagrams before the TUN.
#
#   testbed.sh up ─► NAME-tx: blast ─► route 10.99/16 dev dtx ─► TUN dtx (txqueuelen Q) ─► reader
#   offered = datagrams the blaster sent; lost = dtx tx_dropped (the kernel's count);
#   throughput = (offered − lost) × PAYLOAD / seconds
#
# Usage: scripts/bench-tunnel.sh [--queues "1 5 10 25 50 100 500 1000"] [--seconds 2]
#                                [--payload 1000] [--out results/tunnel-fig4]
# Writes OUT/fig4.csv (reader,qlen,offered,lost,loss_pct,throughput_mbps), draws it as
# OUT/loss.png and OUT/throughput.png (diodon-lab plot-fig4) and prints a
# table. Needs root. The machine is shared: numbers move with other load.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
QUEUES="1 5 10 25 50 100 500 1000"
SECS=2
PAYLOAD=1000
OUT=$ROOT/results/tunnel-fig4
while [[ $# -gt 0 ]]; do
    case $1 in
    --queues) QUEUES=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --payload) PAYLOAD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 1 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-tunnel: needs root" >&2; exit 1; }

(cd "$ROOT" && cargo build --release -q -p diodon -p diodon-lab --bins)
BIN=$TARGET/release
export DIODON_TB=dbt$$
TB=$ROOT/scripts/testbed.sh
TX=$DIODON_TB-tx RX=$DIODON_TB-rx
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    bash "$TB" down >/dev/null 2>&1 || true
}
trap cleanup EXIT

wait_dev() { # ns dev
    for _ in $(seq 100); do ip -n "$1" link show "$2" >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "bench-tunnel: $2 did not appear in $1" >&2; return 1
}

tx_dropped() { ip -n "$TX" -s -j link show dtx | sed -n 's/.*"tx":{[^}]*"dropped":\([0-9]*\).*/\1/p'; }

point() { # reader qlen
    local reader=$1 q=$2
    bash "$TB" up >/dev/null
    pids=()
    if [[ $reader == naive ]]; then
        "$BIN/diodon-lab" relay --tun dtx --ns-a "$TX" --ns-b "$RX" >/dev/null 2>&1 &
        pids+=($!)
        wait_dev "$TX" dtx
        wait_dev "$RX" dtx
        ip -n "$RX" link set dtx up
    else
        ip netns exec "$RX" "$BIN/diodon" recv --listen 10.77.0.2:7700 --tun drx --rate 1gbit >/dev/null 2>&1 &
        pids+=($!)
        ip netns exec "$TX" "$BIN/diodon" tunnel send --tun dtx --to 10.77.0.2:7700 --rate unlimited \
            --no-probe >/dev/null 2>&1 &
        pids+=($!)
        wait_dev "$TX" dtx
    fi
    ip -n "$TX" link set dtx txqueuelen "$q" up
    ip -n "$TX" addr add 10.88.0.1/24 dev dtx
    ip -n "$TX" route add 10.99.0.0/16 dev dtx
    sleep 0.3
    local d0 d1 blast offered
    d0=$(tx_dropped)
    blast=$(ip netns exec "$TX" "$BIN/diodon-blast" send 10.99.0.2:9 "$PAYLOAD" "$SECS")
    sleep 0.3
    d1=$(tx_dropped)
    offered=$(sed -n 's/.*"datagrams":\([0-9]*\).*/\1/p' <<<"$blast")
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    pids=()
    bash "$TB" down >/dev/null
    local lost=$((d1 - d0))
    awk -v r="$reader" -v q="$q" -v o="$offered" -v l="$lost" -v s="$SECS" -v p="$PAYLOAD" 'BEGIN {
        printf "%s,%d,%d,%d,%.2f,%.1f\n", r, q, o, l, (o ? 100 * l / o : 0), (o - l) * p * 8 / s / 1e6 }'
}

mkdir -p "$OUT"
csv=$OUT/fig4.csv
echo "reader,qlen,offered,lost,loss_pct,throughput_mbps" >"$csv"
for q in $QUEUES; do
    for reader in naive diodon; do
        point "$reader" "$q" | tee -a "$csv"
    done
done
echo
echo "| txqueuelen | naive: Mbit/s read | naive: lost % | Diodon: Mbit/s read | Diodon: lost % |"
echo "|---|---|---|---|---|"
awk -F, 'NR > 1 { if ($1 == "naive") { n[$2] = $6 " | " $5 } else { printf "| %s | %s | %s | %s |\n", $2, n[$2], $6, $5 } }' "$csv"
"$BIN/diodon-lab" plot-fig4 --csv "$csv"

#!/usr/bin/env bash
# bench-deltat.sh — Delta-t vs Linux TCP under delay and loss (delta-t thesis, chapter 5).
#
#   ${TB}-tx (sender)                                          ${TB}-rx (receiver)
#   dt0 10.78.0.1 ──IP──▶ diodon-lab relay --tun dt0 (delay RTT/2 each way,  ──IP──▶ dt0 10.78.0.2
#                 ◀──IP── loss on the data direction only, seeded)      ◀──IP──
#   (the namespaces come from scripts/testbed.sh up --bidirectional: veth, no one-way guard)
#
# This kernel has no sch_netem, so delay and loss are applied by a user-space
# relay between two TUN devices: every IP packet of either protocol crosses the
# same impaired link (TCP and Delta-t-over-UDP alike). As in the thesis (netem
# on one interface), loss hits only the sender→receiver direction; the delay is
# split evenly so the round trip equals the nominal RTT.
#
# Both transports run the same application (`diodon deltat send/recv`, with and
# without --tcp): 12-byte header, the file, a BLAKE3 digest, a verdict byte back.
# Throughput = file size / (first byte written → verdict read at the sender).
#
# TCP keeps the Linux defaults (SACK, window scaling, receive buffer
# auto-tuning, RACK/TLP); the thesis turned window scaling, buffer auto-tuning,
# SACK, DSACK and F-RTO off to match its Delta-t; we don't, because the goal is
# to compare with TCP as deployed. Congestion control is compared like for like:
# Delta-t CUBIC against TCP CUBIC (Linux's built-in default) and Delta-t BBR
# against TCP BBR (the default this machine's kernel is configured with), set
# per socket with TCP_CONGESTION (`deltat send/recv --tcp-congestion`).
#
# Usage: scripts/bench-deltat.sh [--quick]
# Environment: DIODON_TB (default dtbench), BIN (default: build target/release/diodon),
#   SIZE1_MB (scenario 1, default 5), SIZE_LOSS_MB (scenarios 2 and 3, default 2),
#   TIMEOUT (seconds per transfer, default 240), OUT (CSV, default bench-deltat.csv),
#   RUNS (transfers per protocol and point, default 1; the table gives their mean,
#   "fail" if any failed), SCENARIOS (default "1 2 3"), S1_RTT, S2_RTT, S3_LOSS
#   (the points of each scenario, space-separated).
# Needs root. Prints CSV rows and a Markdown table.
set -euo pipefail

cd "$(dirname "$0")/.."
export DIODON_TB="${DIODON_TB:-dtbench}"
TB=$DIODON_TB
NS_TX="$TB-tx"
NS_RX="$TB-rx"
SIZE1_MB=${SIZE1_MB:-5}
SIZE_LOSS_MB=${SIZE_LOSS_MB:-2}
TIMEOUT=${TIMEOUT:-240}
RUNS=${RUNS:-1}
SCENARIOS=${SCENARIOS:-1 2 3}
OUT=${OUT:-bench-deltat.csv}
QUICK=no
[[ ${1:-} == --quick ]] && QUICK=yes

[[ $(id -u) -eq 0 ]] || { echo "bench-deltat: must run as root" >&2; exit 1; }

if [[ -z ${BIN:-} ]]; then
    cargo build --release -q -p diodon -p diodon-lab
    BIN="${CARGO_TARGET_DIR:-target}/release/diodon"
fi
BIN=$(realpath "$BIN")
# The impairment relay is a lab instrument: the diodon-lab binary next to diodon.
LAB=${LAB:-$(dirname "$BIN")/diodon-lab}

WORK=$(mktemp -d)
RELAY_PID=""
cleanup() {
    if [[ -n $RELAY_PID ]]; then
        kill -INT "$RELAY_PID" 2>/dev/null || true
        wait "$RELAY_PID" 2>/dev/null || true
    fi
    scripts/testbed.sh down || true
    rm -rf "$WORK"
}
trap cleanup EXIT

scripts/testbed.sh up --bidirectional >/dev/null

head -c $((SIZE1_MB * 1000000)) /dev/urandom >"$WORK/s1.bin"
head -c $((SIZE_LOSS_MB * 1000000)) /dev/urandom >"$WORK/loss.bin"

relay_start() { # rtt_ms loss_pct seed
    local half
    half=$(awk -v r="$1" 'BEGIN { printf "%.3fms", r / 2 }')
    "$LAB" relay --tun dt0 --ns-a "$NS_TX" --ns-b "$NS_RX" --delay "$half" \
        --loss "$2" --reverse-loss 0 --seed "$3" 2>>"$WORK/relay.log" &
    RELAY_PID=$!
    local i
    for i in $(seq 50); do
        if ip -n "$NS_TX" link show dt0 >/dev/null 2>&1 && ip -n "$NS_RX" link show dt0 >/dev/null 2>&1; then
            break
        fi
        sleep 0.1
    done
    ip -n "$NS_TX" addr add 10.78.0.1 peer 10.78.0.2 dev dt0
    ip -n "$NS_RX" addr add 10.78.0.2 peer 10.78.0.1 dev dt0
    ip -n "$NS_TX" link set dt0 up
    ip -n "$NS_RX" link set dt0 up
}

relay_stop() {
    kill -INT "$RELAY_PID"
    wait "$RELAY_PID" || true
    RELAY_PID=""
}

PORT=9500
# transfer proto(deltat|tcp) cc(cubic|bbr) file -> prints Mbit/s, or "fail"
transfer() {
    local proto=$1 cc=$2 file=$3 flag
    if [[ $proto == tcp ]]; then
        flag="--tcp --tcp-congestion=$cc"
    else
        flag="--congestion=$cc"
    fi
    PORT=$((PORT + 1))
    timeout "$((TIMEOUT + 20))" ip netns exec "$NS_RX" "$BIN" deltat recv $flag --timeout "$TIMEOUT" \
        --listen "10.78.0.2:$PORT" --out "$WORK/out.bin" >"$WORK/recv.json" 2>"$WORK/recv.log" &
    local rpid=$!
    sleep 0.3
    local line rc=0
    line=$(timeout "$TIMEOUT" ip netns exec "$NS_TX" "$BIN" deltat send $flag --timeout "$TIMEOUT" \
        "$file" --to "10.78.0.2:$PORT" 2>"$WORK/send.log") || rc=$?
    wait "$rpid" || rc=$((rc ? rc : 10))
    if [[ $rc -eq 0 ]] && cmp -s "$file" "$WORK/out.bin" && [[ $line == *'"verified":true'* ]]; then
        sed -E 's/.*"mbit_s":([0-9.]+).*/\1/' <<<"$line"
    else
        echo fail
        # Say why on the bench's stderr: exit codes, both sides' last words.
        {
            echo "bench-deltat: $proto/$cc transfer failed (rc $rc): send: $line"
            tail -n 3 "$WORK/send.log" "$WORK/recv.log" "$WORK/recv.json"
        } >&2
    fi
    rm -f "$WORK/out.bin"
}

# mean of the transfers of one protocol at one point ("fail" if any failed)
mean_of() {
    awk '{ if ($1 == "fail") bad = 1; else { s += $1; n++ } }
         END { if (bad || n == 0) print "fail"; else printf "%.3f", s / n }'
}

# repeated proto cc file -> mean Mbit/s over RUNS transfers
repeated() {
    local i
    for i in $(seq "$RUNS"); do
        transfer "$1" "$2" "$3"
    done | mean_of
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "fail" || b == "fail" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}

echo "scenario,rtt_ms,loss_pct,size_mb,deltat_cubic_mbit_s,tcp_cubic_mbit_s,ratio_cubic,deltat_bbr_mbit_s,tcp_bbr_mbit_s,ratio_bbr" >"$OUT"
ROWS=()
point() { # scenario rtt loss file size_mb
    local sc=$1 rtt=$2 loss=$3 file=$4 size=$5 seed=$((1000 + ${#ROWS[@]}))
    relay_start "$rtt" "$loss" "$seed"
    local dc tc db tb rc rb
    dc=$(repeated deltat cubic "$file")
    tc=$(repeated tcp cubic "$file")
    db=$(repeated deltat bbr "$file")
    tb=$(repeated tcp bbr "$file")
    relay_stop
    rc=$(ratio "$dc" "$tc")
    rb=$(ratio "$db" "$tb")
    echo "$sc,$rtt,$loss,$size,$dc,$tc,$rc,$db,$tb,$rb" | tee -a "$OUT"
    ROWS+=("| $sc | $rtt | $loss | $size | $dc | $tc | **$rc** | $db | $tb | **$rb** |")
}

if [[ $QUICK == yes ]]; then
    S1_RTT=${S1_RTT:-50 200}; S2_RTT=${S2_RTT:-50}; S3_LOSS=${S3_LOSS:-0 20}
else
    S1_RTT=${S1_RTT:-50 100 200 300 400 500}; S2_RTT=${S2_RTT:-50 100 200}; S3_LOSS=${S3_LOSS:-0 1 2 5 10 20}
fi
for sc in $SCENARIOS; do
    case $sc in
        1) for rtt in $S1_RTT; do point 1 "$rtt" 0 "$WORK/s1.bin" "$SIZE1_MB"; done ;;
        2) for rtt in $S2_RTT; do point 2 "$rtt" 5 "$WORK/loss.bin" "$SIZE_LOSS_MB"; done ;;
        3) for loss in $S3_LOSS; do point 3 50 "$loss" "$WORK/loss.bin" "$SIZE_LOSS_MB"; done ;;
        *) echo "bench-deltat: unknown scenario $sc" >&2; exit 2 ;;
    esac
done

echo
echo "| scenario | RTT ms | loss % | MB | Delta-t CUBIC Mbit/s | TCP CUBIC Mbit/s | ratio | Delta-t BBR Mbit/s | TCP BBR Mbit/s | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "relay counters (per point, forward = data direction):"
grep 'relay forward' "$WORK/relay.log" | sed 's/^diodon-lab: /  /'

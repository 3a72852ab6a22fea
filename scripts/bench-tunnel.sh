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
#                                [--payload 1000] [--out results/tunnel-fig4] [--pin]
#        scripts/bench-tunnel.sh --video [--queues 25] [--seconds 10] [--loss "0 1"]
# Writes OUT/fig4.csv (reader,qlen,offered,lost,loss_pct,throughput_mbps), draws it as
# OUT/loss.png and OUT/throughput.png (diodon-lab plot-fig4) and prints a
# table. Needs root. The machine is shared: numbers move with other load.
#
# Three readers: naive, diodon (unpaced), and diodon-shaped: diodon tunnel
# send --rate SHAPED_RATE (--shaped-rate, default 400mbit) --shape auto, the
# shaper in front of the TUN holding what the ring cannot. Its blaster uses
# the kernel's default send buffer (the others force 4 MiB), below the
# shaper's limit, so it blocks: its offered load falls to what passes; lost
# includes the shaper's own drops.
#
# --pin puts each side on its own core (taskset): the blaster and the reader
# (and Diodon's sender) on CPU 0, the far side (naive: none; Diodon: the
# receiver) on CPU 1, so the comparison of readers is not decided by who
# gets the second core.
#
# --video: the paper's video case. diodon-lab stream sends 1316-byte
# datagrams (7 × 188-byte TS packets) at 25 Mbit/s into the TUN, once evenly
# spaced and once as 25 frames a second (each frame's 95 datagrams back to
# back, like an encoder), to a listener on the far side; for each TUN queue
# length, link loss (--loss, percent, of the software diode) and reader:
# sent, received, lost (and where: TUN tx_dropped, Diodon's queue), one-way
# latency min/p50/p99/max from timestamps in the payload (both namespaces read
# one clock). Diodon paces the link at 100 Mbit/s. Writes OUT/video.csv.
#
# --goodput [--size BYTES] [--mtus "1500 9000"]: the tunnel's throughput across
# the software diode as a ratio to Diodon's own file goodput in the same run.
# Per MTU: a random file (default 500 MB) sent unpaced with 10 % repair
# (verified goodput, CPU per side), then diodon-blast flooding MTU-sized UDP
# datagrams into the TUN for --seconds (default 5) with the tunnel unpaced,
# and again with the tunnel paced at the file's goodput and --shape auto (the
# flood is held back instead of dropped). Tunnel goodput = UDP payload that
# reached a sink on the far side; CPU s/GB per side = the tunnel processes'
# cpu_s over those bytes (the flooding application's own CPU is not counted).
# Writes OUT/goodput.csv.
#
# KEEP_LOGS=1 keeps each Fig. 4 point's sender summary, the TUN's qdisc
# statistics (tc -s) and the namespace's nstat counters in OUT.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
QUEUES="1 5 10 25 50 100 500 1000"
SECS=2
PAYLOAD=1000
OUT=$ROOT/results/tunnel-fig4
VIDEO=0
GOODPUT=0
SIZE=500000000
MTUS="1500 9000"
PIN=0
SHAPED_RATE=400mbit
LOSSES="0 1"
while [[ $# -gt 0 ]]; do
    case $1 in
    --video) VIDEO=1; QUEUES=25; SECS=10; shift ;;
    --goodput) GOODPUT=1; SECS=5; shift ;;
    --size) SIZE=$2; shift 2 ;;
    --mtus) MTUS=$2; shift 2 ;;
    --pin) PIN=1; shift ;;
    --shaped-rate) SHAPED_RATE=$2; shift 2 ;;
    --loss) LOSSES=$2; shift 2 ;;
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

# cpu SIDE: with --pin, the command prefix that puts the sending side on CPU 0
# and the far side on CPU 1 (a prefix, not a function around the command, so
# that $! is the program's own PID and killing it ends it).
cpu() {
    if [[ $PIN == 1 ]]; then
        if [[ $1 == tx ]]; then echo "taskset -c 0"; else echo "taskset -c 1"; fi
    fi
}

tx_dropped() { ip -n "$TX" -s -j link show dtx | sed -n 's/.*"tx":{[^}]*"dropped":\([0-9]*\).*/\1/p'; }

point() { # reader qlen
    local reader=$1 q=$2
    bash "$TB" up >/dev/null
    pids=()
    if [[ $reader == naive ]]; then
        $(cpu tx) "$BIN/diodon-lab" relay --tun dtx --ns-a "$TX" --ns-b "$RX" >/dev/null 2>&1 &
        pids+=($!)
        wait_dev "$TX" dtx
        wait_dev "$RX" dtx
        ip -n "$RX" link set dtx up
    else
        local pace=(--rate unlimited)
        [[ $reader == diodon-shaped ]] && pace=(--rate "$SHAPED_RATE" --shape auto)
        $(cpu rx) ip netns exec "$RX" "$BIN/diodon" recv --listen 10.77.0.2:7700 --tun drx --rate 1gbit >/dev/null 2>&1 &
        pids+=($!)
        $(cpu tx) ip netns exec "$TX" "$BIN/diodon" tunnel send --tun dtx --to 10.77.0.2:7700 "${pace[@]}" \
            --txqueuelen "$q" --no-probe --json >"$OUT/send-$reader-$q.json" 2>/dev/null &
        pids+=($!)
        wait_dev "$TX" dtx
    fi
    ip -n "$TX" link set dtx txqueuelen "$q" up
    ip -n "$TX" addr add 10.88.0.1/24 dev dtx
    ip -n "$TX" route add 10.99.0.0/16 dev dtx
    sleep 0.3
    local d0 d1 blast offered
    d0=$(tx_dropped)
    # The shaped reader's flood comes from an ordinary socket (the kernel's
    # default send buffer, below the shaper's limit), so it can be held back.
    local sndbuf=$((4 << 20))
    [[ $reader == diodon-shaped ]] && sndbuf=0
    blast=$($(cpu tx) ip netns exec "$TX" "$BIN/diodon-blast" send 10.99.0.2:9 "$PAYLOAD" "$SECS" "$sndbuf")
    sleep 0.3
    d1=$(tx_dropped)
    [[ -n ${KEEP_LOGS:-} ]] && ip netns exec "$TX" tc -s qdisc show dev dtx >"$OUT/qdisc-$reader-$q.txt" 2>&1
    [[ -n ${KEEP_LOGS:-} ]] && ip netns exec "$TX" nstat -az >"$OUT/nstat-$reader-$q.txt" 2>&1
    offered=$(sed -n 's/.*"datagrams":\([0-9]*\).*/\1/p' <<<"$blast")
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    pids=()
    bash "$TB" down >/dev/null
    local lost=$((d1 - d0))
    if [[ $reader != naive ]]; then
        # The shaper's drops are losses too (past its limit); unshaped: 0.
        lost=$((lost + $(json_num shaper_dropped "$(tail -1 "$OUT/send-$reader-$q.json")")))
        [[ -n ${KEEP_LOGS:-} ]] || rm -f "$OUT/send-$reader-$q.json"
    fi
    awk -v r="$reader" -v q="$q" -v o="$offered" -v l="$lost" -v s="$SECS" -v p="$PAYLOAD" 'BEGIN {
        printf "%s,%d,%d,%d,%.2f,%.1f\n", r, q, o, l, (o ? 100 * l / o : 0), (o - l) * p * 8 / s / 1e6 }'
}

json_num() { # KEY JSON: the number, 0 if absent
    local v
    v=$(sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2" | head -1)
    echo "${v:-0}"
}

# video_point READER QLEN LOSS FPS: one video run; prints a CSV row.
# READER: naive, diodon, or diodon-shaped (tunnel send --shape auto).
video_point() {
    local reader=$1 q=$2 loss=$3 fps=$4
    local shape=()
    [[ $reader == diodon-shaped ]] && shape=(--shape auto)
    local up=(up)
    [[ $loss != 0 ]] && up+=(--loss "$loss")
    bash "$TB" "${up[@]}" >/dev/null
    pids=()
    local txlog rxlog
    mkdir -p "$OUT/logs"
    txlog=$OUT/logs/video-$reader-q$q-loss$loss-fps$fps.send.json
    rxlog=$OUT/logs/video-$reader-q$q-loss$loss-fps$fps.recv.json
    : >"$txlog"; : >"$rxlog"
    if [[ $reader == naive ]]; then
        $(cpu tx) "$BIN/diodon-lab" relay --tun dtx --ns-a "$TX" --ns-b "$RX" >/dev/null 2>&1 &
        pids+=($!)
        wait_dev "$TX" dtx
        wait_dev "$RX" dtx
        ip -n "$RX" link set dtx up
        ip -n "$RX" addr add 10.99.0.2/32 dev dtx
        ip -n "$RX" route add 10.88.0.0/24 dev dtx
    else
        $(cpu rx) ip netns exec "$RX" "$BIN/diodon" recv --listen 10.77.0.2:7700 --tun drx \
            --rate 100mbit --json >"$rxlog" 2>/dev/null &
        pids+=($!)
        wait_dev "$RX" drx
        $(cpu tx) ip netns exec "$TX" "$BIN/diodon" tunnel send --tun dtx --to 10.77.0.2:7700 \
            --rate 100mbit --no-probe --txqueuelen "$q" --json "${shape[@]}" >"$txlog" 2>/dev/null &
        pids+=($!)
        wait_dev "$TX" dtx
        ip -n "$RX" addr add 10.99.0.2/32 dev drx
        ip -n "$RX" route add 10.88.0.0/24 dev drx
    fi
    ip -n "$TX" link set dtx txqueuelen "$q" up
    ip -n "$TX" addr add 10.88.0.1/24 dev dtx
    ip -n "$TX" route add 10.99.0.0/16 dev dtx
    sleep 0.3
    local d0 d1 got sent
    d0=$(tx_dropped)
    $(cpu rx) ip netns exec "$RX" "$BIN/diodon-lab" stream recv --listen 10.99.0.2:5004 \
        --idle-ms 1500 >"$rxlog.stream" &
    local listener=$!
    sleep 0.2
    sent=$($(cpu tx) ip netns exec "$TX" "$BIN/diodon-lab" stream send --to 10.99.0.2:5004 \
        --mbit 25 --payload 1316 --seconds "$SECS" --fps "$fps")
    wait "$listener" || true
    ip netns exec "$TX" tc -s qdisc show dev dtx >"${txlog%.send.json}.qdisc.txt" 2>&1 || true
    got=$(cat "$rxlog.stream")
    d1=$(tx_dropped)
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    pids=()
    bash "$TB" down >/dev/null
    local queue_drops=0 shaper_drops=0
    if [[ $reader != naive ]]; then
        queue_drops=$(( $(json_num dropped_tail "$(cat "$txlog")") + $(json_num dropped_head "$(cat "$txlog")") ))
        shaper_drops=$(json_num shaper_dropped "$(cat "$txlog")")
    fi
    rm -f "$rxlog.stream"
    local n r
    n=$(json_num sent "$sent")
    r=$(json_num received "$got")
    echo "$reader,$q,$loss,$fps,$n,$r,$((n - r)),$((d1 - d0)),$shaper_drops,$queue_drops,$(json_num socket_dropped "$got"),$(json_num duplicates "$got"),$(json_num latency_ms_min "$got"),$(json_num latency_ms_p50 "$got"),$(json_num latency_ms_p99 "$got"),$(json_num latency_ms_max "$got")"
}

# goodput_file MTU: prints "goodput_mbps,send_cpu_s,recv_cpu_s,verified".
goodput_file() {
    local mtu=$1 work=$2
    bash "$TB" up --mtu "$mtu" >/dev/null
    rm -rf "$work/out"
    ip netns exec "$RX" "$BIN/diodon" recv --listen 10.77.0.2:7700 --once --json --rate unlimited \
        --mtu "$mtu" --out "$work/out" >"$work/recv.json" 2>/dev/null &
    local rpid=$!
    sleep 0.5
    ip netns exec "$TX" "$BIN/diodon" send --to 10.77.0.2:7700 --json --rate unlimited --repair 10 \
        --mtu "$mtu" "$work/random.bin" >"$work/send.json" 2>/dev/null || true
    wait "$rpid" || true
    bash "$TB" down >/dev/null
    local ok=no
    cmp -s "$work/random.bin" "$work/out/random.bin" && ok=yes
    rm -rf "$work/out"
    echo "$(json_num goodput_mbps "$(tail -1 "$work/recv.json")"),$(json_num cpu_s "$(tail -1 "$work/send.json")"),$(json_num cpu_s "$(tail -1 "$work/recv.json")"),$ok"
}

# goodput_tunnel MTU RATE: prints "sink_mbps,sink_bytes,send_cpu_s,recv_cpu_s,tun_drops,shaper_drops".
goodput_tunnel() {
    local mtu=$1 rate=$2 work=$3
    local shape=()
    [[ $rate != unlimited ]] && shape=(--shape auto)
    bash "$TB" up --mtu "$mtu" >/dev/null
    $(cpu rx) ip netns exec "$RX" "$BIN/diodon" recv --listen 10.77.0.2:7700 --tun drx --json \
        --rate 1gbit --mtu "$mtu" --tun-mtu "$mtu" >"$work/recv.json" 2>/dev/null &
    local rpid=$!
    wait_dev "$RX" drx
    $(cpu tx) ip netns exec "$TX" "$BIN/diodon" tunnel send --tun dtx --to 10.77.0.2:7700 --json \
        --rate "$rate" --mtu "$mtu" --tun-mtu "$mtu" --txqueuelen 1000 --no-probe "${shape[@]}" \
        >"$work/send.json" 2>/dev/null &
    local spid=$!
    wait_dev "$TX" dtx
    ip -n "$RX" addr add 10.99.0.2/32 dev drx
    ip -n "$RX" route add 10.88.0.0/24 dev drx
    ip -n "$TX" addr add 10.88.0.1/24 dev dtx
    ip -n "$TX" route add 10.99.0.0/16 dev dtx
    $(cpu rx) ip netns exec "$RX" "$BIN/diodon-blast" sink 10.99.0.2:9 2000 >"$work/sink.json" &
    local kpid=$!
    sleep 0.3
    $(cpu tx) ip netns exec "$TX" "$BIN/diodon-blast" send 10.99.0.2:9 "$((mtu - 28))" "$SECS" >/dev/null
    wait "$kpid" || true
    kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
    kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true
    bash "$TB" down >/dev/null
    local sink send recv
    sink=$(cat "$work/sink.json") send=$(tail -1 "$work/send.json") recv=$(tail -1 "$work/recv.json")
    echo "$(json_num mbps "$sink"),$(json_num bytes "$sink"),$(json_num cpu_s "$send"),$(json_num cpu_s "$recv"),$(json_num tun_tx_dropped "$send"),$(json_num shaper_dropped "$send")"
}

mkdir -p "$OUT"
if [[ $GOODPUT == 1 ]]; then
    work=$(mktemp -d /var/tmp/diodon-bench-tunnel.XXXXXX)
    trap 'cleanup; rm -rf "$work"' EXIT
    head -c "$SIZE" /dev/urandom >"$work/random.bin"
    csv=$OUT/goodput.csv
    echo "mtu,what,goodput_mbps,ratio_to_file,send_cpu_s_per_gb,recv_cpu_s_per_gb,tun_drops,shaper_drops,verified" >"$csv"
    for mtu in $MTUS; do
        IFS=, read -r fg fs fr fok <<<"$(goodput_file "$mtu" "$work")"
        awk -v m="$mtu" -v g="$fg" -v s="$fs" -v r="$fr" -v b="$SIZE" -v ok="$fok" \
            'BEGIN { printf "%s,file,%.0f,1.00,%.2f,%.2f,,,%s\n", m, g, s / b * 1e9, r / b * 1e9, ok }' | tee -a "$csv"
        paced=$(awk -v g="$fg" 'BEGIN { printf "%dmbit", g * 1.1 }')
        for rate in unlimited "$paced"; do
            IFS=, read -r tg tb ts tr td tq <<<"$(goodput_tunnel "$mtu" "$rate" "$work")"
            awk -v m="$mtu" -v w="tunnel $rate${rate/unlimited/}" -v g="$tg" -v f="$fg" -v b="$tb" -v s="$ts" -v r="$tr" -v d="$td" -v q="$tq" \
                'BEGIN { printf "%s,%s,%.0f,%.2f,%.2f,%.2f,%s,%s,\n", m, (w ~ /unlimited/ ? "tunnel unpaced" : "tunnel paced + shaped"), g, (f ? g / f : 0), (b ? s / b * 1e9 : 0), (b ? r / b * 1e9 : 0), d, q }' | tee -a "$csv"
        done
    done
    echo
    echo "| MTU | what | goodput Mbit/s | ratio to file | send CPU s/GB | recv CPU s/GB | TUN drops | shaper drops | verified |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$csv"
    exit 0
fi
if [[ $VIDEO == 1 ]]; then
    csv=$OUT/video.csv
    echo "reader,qlen,link_loss_pct,fps,sent,received,lost,tun_tx_dropped,shaper_dropped,queue_dropped,listener_socket_dropped,duplicates,lat_min_ms,lat_p50_ms,lat_p99_ms,lat_max_ms" >"$csv"
    for q in $QUEUES; do
        for fps in 0 25; do
            video_point naive "$q" 0 "$fps" | tee -a "$csv"
            for loss in $LOSSES; do
                for reader in diodon diodon-shaped; do
                    video_point "$reader" "$q" "$loss" "$fps" | tee -a "$csv"
                done
            done
        done
    done
    echo
    echo "| reader | txqueuelen | link loss % | sending | sent | lost | TUN drops | shaper drops | one-way latency p50 / p99 / max (ms) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n", $1, $2, $3, ($4 == 0 ? "evenly" : $4 " frames/s"), $5, $7, $8, $9, $14, $15, $16 }' "$csv"
    exit 0
fi
csv=$OUT/fig4.csv
echo "reader,qlen,offered,lost,loss_pct,throughput_mbps" >"$csv"
for q in $QUEUES; do
    for reader in naive diodon diodon-shaped; do
        point "$reader" "$q" | tee -a "$csv"
    done
done
echo
echo "| txqueuelen | naive: Mbit/s read | naive: lost % | Diodon: Mbit/s read | Diodon: lost % | Diodon + shaper ($SHAPED_RATE): Mbit/s read | lost % |"
echo "|---|---|---|---|---|---|---|"
awk -F, 'NR > 1 { if ($1 == "naive") { n[$2] = $6 " | " $5 } else if ($1 == "diodon") { d[$2] = $6 " | " $5 } else { printf "| %s | %s | %s | %s | %s |\n", $2, n[$2], d[$2], $6, $5 } }' "$csv"
"$BIN/diodon-lab" plot-fig4 --csv "$csv"

#!/usr/bin/env bash
# bench-tap.sh — the tap against the dpdk-prefilter thesis's Tables 4.1–4.3,
# and its throughput per core, on veth pairs in a network namespace.
#
#   namespace: tcpreplay ─► gen0 ══veth══ cap0 ─► diodon tap ─► enc0 ══veth══ agt0 ─► diodon agent
#                                                                 ─► TAP tapX ─► tcpdump (the "application")
#   Tables 4.1–4.3: 10^4, 5·10^4, 10^5 frames of 574 bytes at 10^5 frames/s,
#     sources 10.0.0.0/28 ─► 10.0.1.1, with 0, 1 and the thesis's 16 rules
#     (results/tap/rules/{none,thesis-1,thesis-16}.acl); rows: received,
#     processed, sent, agent received, application, and the three drop rates.
#   Throughput: random flows at full speed (tcpreplay --topspeed), 64–1518-byte
#     frames (with FCS) × 0, 16, 1,000, 10,000 rules × 1, 4, 16 agents; frames
#     per CPU-second of the tap (user + system) and per wall second, next to the
#     capture path's ceiling measured the same way (diodon tap --capture-only).
#   Results: results/tap/RUN/{tables.md,throughput.csv,throughput.md,machine.txt}
#   and a section appended to BENCHMARKS.md (unless --no-record).
#
# Usage: scripts/bench-tap.sh [--tables-only | --throughput-only] [--frames N]
#                             [--sizes "64 512 1518"] [--no-record]
# Needs root, tcpreplay and tcpdump (DIODON_SETUP=tests scripts/setup.sh installs them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TABLES=yes
THROUGHPUT=yes
RECORD=yes
FRAMES=300000
SIZES="64 128 256 512 1024 1518"
CMDLINE="scripts/bench-tap.sh${*:+ $*}"
while [[ $# -gt 0 ]]; do
    case $1 in
    --tables-only) THROUGHPUT=no; shift ;;
    --throughput-only) TABLES=no; shift ;;
    --frames) FRAMES=${2:?}; shift 2 ;;
    --sizes) SIZES=${2:?}; shift 2 ;;
    --no-record) RECORD=no; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-tap: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-tap: must run as root" >&2; exit 1; }
for t in tcpreplay tcpdump jq; do
    command -v $t >/dev/null || { echo "bench-tap: $t missing (apt-get install $t)" >&2; exit 1; }
done

(cd "$ROOT" && cargo build --release -q -p diodon -p diodon-lab)
BIN=$TARGET/release/diodon
LAB=$TARGET/release/diodon-lab
NS=diodon-benchtap-$$
RUN=$(date -u +%Y-%m-%dT%H%M%SZ)
OUT=$ROOT/results/tap/$RUN
WORK=$(mktemp -d /var/tmp/diodon-benchtap.XXXXXX)
mkdir -p "$OUT"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# (Background processes are started with `ip netns exec` directly, not
# through this function, so that $! is their own pid: ip execs them.)
nsx() { ip netns exec "$NS" "$@"; }
ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" link add gen0 type veth peer name cap0
ip -n "$NS" link add enc0 type veth peer name agt0
for i in gen0 cap0 enc0 agt0; do
    nsx sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1"
    ip -n "$NS" link set "$i" up
    nsx ethtool -K "$i" gro off lro off >/dev/null 2>&1 || true
done
# The encapsulated frame is 14 bytes longer than the original (the thesis's MTU note).
ip -n "$NS" link set enc0 mtu 1600
ip -n "$NS" link set agt0 mtu 1600
AMAC=$(nsx cat /sys/class/net/agt0/address)

{
    echo "run: $RUN"
    echo "command: $CMDLINE"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD)"
    echo "kernel: $(uname -r)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') × $(nproc)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "tcpreplay: $(tcpreplay --version 2>&1 | head -1)"
} >"$OUT/machine.txt"

# stop PID: SIGINT, wait; the JSON summary is the last line of its stdout file.
stop() { kill -INT "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
j() { tail -n 1 "$1" | jq -r "$2"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "0.00 %"; else printf "%.2f %%\n", 100 * a / b }'; }

tables() {
    local md=$OUT/tables.md
    echo "# Tables 4.1–4.3 on veth ($RUN)" >"$md"
    for acl in none thesis-1 thesis-16; do
        local mix=thesis title
        [[ $acl == thesis-16 ]] && mix=thesis16
        case $acl in
        none) title="Table 4.1 — no ACL" ;;
        thesis-1) title="Table 4.2 — one ACL" ;;
        thesis-16) title="Table 4.3 — 16 ACLs" ;;
        esac
        local cols=() rows=()
        for count in 10000 50000 100000; do
            "$LAB" trace --out "$WORK/t.pcap" --mix "$mix" --count "$count" --size 574 --rate 100000
            ip netns exec "$NS" "$BIN" agent --if agt0 --tap-out tapx --marked-only --json >"$WORK/agent.json" 2>"$WORK/agent.err" &
            local agent=$!
            PIDS+=("$agent")
            sleep 0.5
            ip netns exec "$NS" tcpdump -i tapx -Q in -s 0 -w /dev/null 2>"$WORK/tcpdump.err" &
            local dump=$!
            PIDS+=("$dump")
            ip netns exec "$NS" "$BIN" tap --if cap0 --rules "$ROOT/results/tap/rules/$acl.acl" --agent "ids0=$AMAC" \
                --encap-if enc0 --json >"$WORK/tap.json" 2>"$WORK/tap.err" &
            local tap=$!
            PIDS+=("$tap")
            sleep 1
            nsx tcpreplay -q -K -i gen0 --pps 100000 "$WORK/t.pcap" >"$WORK/replay.txt" 2>&1
            sleep 1
            stop "$tap"
            sleep 0.5
            stop "$dump"
            stop "$agent"
            local captured drops sent arecv app
            captured=$(j "$WORK/tap.json" .counters.captured)
            drops=$(j "$WORK/tap.json" '.counters.ring_drops + .counters.runts + .counters.oversize')
            sent=$(j "$WORK/tap.json" .counters.encap_sent)
            arecv=$(j "$WORK/agent.json" '.counters.captured + .counters.ring_drops')
            app=$(grep -oE '^[0-9]+ packets received by filter' "$WORK/tcpdump.err" | cut -d' ' -f1)
            local kdrop
            kdrop=$(grep -oE '^[0-9]+ packets dropped by kernel' "$WORK/tcpdump.err" | cut -d' ' -f1)
            local received=$((captured + $(j "$WORK/tap.json" .counters.ring_drops)))
            local pps
            pps=$(grep -oE '[0-9.]+ pps' "$WORK/replay.txt" | head -1 | cut -d' ' -f1)
            cols+=("$count")
            rows+=("$count|${pps:-?}|$received|$captured|$sent|$arecv|${app:-?}|$(pct "$drops" "$received")|$(pct $((sent - arecv)) "$sent")|$(pct $((arecv - ${app:-0} + ${kdrop:-0})) "$arecv")")
            echo "bench-tap: $acl $count: received $received processed $captured sent $sent agent $arecv app ${app:-?}" >&2
        done
        {
            echo
            echo "## $title"
            echo
            printf '| total frames generated |'; for r in "${rows[@]}"; do printf ' %s |' "$(cut -d'|' -f1 <<<"$r")"; done; echo
            printf '|---|'; for _ in "${rows[@]}"; do printf -- '---|'; done; echo
            local i name
            i=2
            for name in "replayed at (frames/s, tcpreplay)" "received (kernel → tap)" "processed (tap)" "sent (encapsulated)" "agent received" "application (tcpdump on the agent's TAP)" "pre-filter drop rate" "transfer drop rate" "agent drop rate"; do
                printf '| %s |' "$name"
                for r in "${rows[@]}"; do printf ' %s |' "$(cut -d'|' -f$i <<<"$r")"; done
                echo
                i=$((i + 1))
            done
        } >>"$md"
    done
    cat "$md"
}

# A rule file of N block-list rules that the random trace does not match.
rules_file() {
    local n=$1 f=$WORK/rules-$1.acl
    if [[ $n -eq 16 ]]; then
        cp "$ROOT/results/tap/rules/thesis-16.acl" "$f"
    else
        awk -v n="$n" 'BEGIN {
            print "default allow"
            srand(7)
            for (i = 0; i < n; i++) {
                a = int(rand() * 200) + 11; b = int(rand() * 256); c = int(rand() * 256); d = int(rand() * 256)
                if (i % 2) printf "deny dst 100.%d.%d.0/24\n", b, c
                else if (i % 5 == 0) printf "deny src 100.%d.%d.%d proto tcp dport %d\n", b, c, d, int(rand() * 1024)
                else printf "deny src 100.%d.%d.%d\n", b, c, d
            }
        }' >"$f"
    fi
    echo "$f"
}

# One throughput run: prints "captured ring_drops cpu_s wall_s".
tp_run() {
    local trace=$1 rules=$2 agents=$3 extra=$4
    local args=()
    for ((i = 0; i < agents; i++)); do args+=(--agent "ids$i=02:00:00:00:10:$(printf %02x "$i")"); done
    ip netns exec "$NS" "$BIN" tap --if cap0 --rules "$rules" --encap-if enc0 --json $extra "${args[@]}" >"$WORK/tp.json" 2>"$WORK/tp.err" &
    local tap=$!
    PIDS+=("$tap")
    sleep 1
    nsx tcpreplay -q -K -i gen0 --topspeed --loop 3 "$trace" >"$WORK/replay.txt" 2>&1
    sleep 0.5
    stop "$tap"
    echo "$(j "$WORK/tp.json" .counters.captured) $(j "$WORK/tp.json" .counters.ring_drops) $(j "$WORK/tp.json" .cpu_s) $(j "$WORK/tp.json" .duration_s)"
}

throughput() {
    local csv=$OUT/throughput.csv md=$OUT/throughput.md
    echo "frame_bytes,rules,agents,mode,captured,ring_drops,cpu_s,frames_per_cpu_s,ratio_to_ceiling" >"$csv"
    for size in $SIZES; do
        local len=$((size - 4)) # the trace holds frames without their 4-byte FCS
        "$LAB" trace --out "$WORK/r.pcap" --mix random --flows 10000 --count "$FRAMES" --size "$len" --rate 1000000
        read -r cap drops cpu _ <<<"$(tp_run "$WORK/r.pcap" "$ROOT/results/tap/rules/none.acl" 1 --capture-only)"
        local ceiling
        ceiling=$(awk -v c="$cap" -v s="$cpu" 'BEGIN { printf "%.0f", (s > 0) ? c / s : 0 }')
        echo "$size,0,1,capture-only,$cap,$drops,$cpu,$ceiling,1.00" >>"$csv"
        echo "bench-tap: $size B capture only: $cap frames, $drops ring drops, $cpu s CPU = $ceiling frames/CPU-s" >&2
        for spec in "0 4" "16 4" "1000 4" "10000 4" "1000 1" "1000 16"; do
            read -r n agents <<<"$spec"
            read -r cap drops cpu _ <<<"$(tp_run "$WORK/r.pcap" "$(rules_file "$n")" "$agents" "")"
            local per
            per=$(awk -v c="$cap" -v s="$cpu" 'BEGIN { printf "%.0f", (s > 0) ? c / s : 0 }')
            echo "$size,$n,$agents,tap,$cap,$drops,$cpu,$per,$(awk -v a="$per" -v b="$ceiling" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')" >>"$csv"
            echo "bench-tap: $size B, $n rules, $agents agents: $cap frames, $drops ring drops, $cpu s CPU = $per frames/CPU-s" >&2
        done
    done
    {
        echo "# Throughput per core ($RUN)"
        echo
        echo "Frames per CPU-second of the tap process (user + system), full-speed replay"
        echo "(tcpreplay --topspeed, $FRAMES random-flow frames × 3 loops), encapsulated output"
        echo "to a veth; ratio to the capture-only ceiling of the same frame size."
        echo
        echo "| frame (with FCS) | capture only | 0 rules, 4 agents | 16 rules, 4 | 1,000 rules, 4 | 10,000 rules, 4 | 1,000 rules, 1 agent | 1,000 rules, 16 agents |"
        echo "|---|---|---|---|---|---|---|---|"
        for size in $SIZES; do
            printf '| %s B |' "$size"
            awk -F, -v s="$size" '$1 == s { if ($4 == "capture-only") printf " %d/s |", $8; else printf " %d/s (%s) |", $8, $9 }' "$csv"
            echo
        done
        echo
        echo "Ring drops per run are in throughput.csv (the replay outruns one core: what the"
        echo "ring could not hold was counted, and the rate above is over the frames processed)."
    } >"$md"
    cat "$md"
}

[[ $TABLES == yes ]] && tables
[[ $THROUGHPUT == yes ]] && throughput
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"

if [[ $RECORD == yes ]]; then
    {
        echo
        echo "## The tap on veth ($RUN)"
        echo
        echo "\`$CMDLINE\` — $(grep '^cpu:' "$OUT/machine.txt" | cut -d' ' -f2-), load $(grep '^load before' "$OUT/machine.txt" | cut -d' ' -f3-); results/tap/$RUN/."
        [[ -f $OUT/tables.md ]] && tail -n +2 "$OUT/tables.md"
        [[ -f $OUT/throughput.md ]] && tail -n +2 "$OUT/throughput.md"
    } >>"$ROOT/BENCHMARKS.md"
fi
echo "bench-tap: results in $OUT" >&2

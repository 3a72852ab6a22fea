#!/usr/bin/env bash
# bench-link.sh — end-to-end benchmark across the software diode (testbed.sh).
#
#   for MTU in 1500 9000:
#     testbed.sh up --mtu MTU
#     raw ceiling:  diodon-blast send (sendmsg + GSO, unpaced) ==> diodon-blast sink (recvmmsg + GRO)
#                   = UDP payload Mbit/s the sink received (iperf3 cannot run over a diode:
#                     its control connection needs a return path)
#     Diodon:       diodon send --rate unlimited --repair 10 FILE ==> diodon recv --out
#                   = verified goodput (file bytes / first datagram .. verdict), CPU s per GB
#                     per side (the summaries' cpu_s), receiver socket drops, verdict + SHA-256
#     testbed.sh down
#   print a table and append it to BENCHMARKS.md (unless --no-record)
#
# Usage: scripts/bench-link.sh [--size BYTES] [--mtus "1500 9000"] [--blast-seconds N] [--no-record]
# Defaults: 1 GB (1000000000 bytes) random file, MTU 1500 and 9000, 5 s blast.
# Needs root (network namespaces). Builds with cargo (CARGO_TARGET_DIR honoured).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SIZE=1000000000
MTUS="1500 9000"
BLAST_SECS=5
RECORD=yes
REPAIR=10
CMDLINE="scripts/bench-link.sh${*:+ $*}"
export DIODON_TB=${DIODON_TB:-bench}
TB="$ROOT/scripts/testbed.sh"
RX_IP=10.77.0.2

while [[ $# -gt 0 ]]; do
    case $1 in
    --size) SIZE=${2:?}; shift 2 ;;
    --mtus) MTUS=${2:?}; shift 2 ;;
    --blast-seconds) BLAST_SECS=${2:?}; shift 2 ;;
    --no-record) RECORD=no; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-link: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-link: must run as root" >&2; exit 1; }

(cd "$ROOT" && cargo build --release -q -p diodon --bins)
BIN="$TARGET/release/diodon"
BLAST="$TARGET/release/diodon-blast"

WORK=$(mktemp -d /var/tmp/diodon-bench.XXXXXX)
cleanup() {
    "$TB" down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "bench-link: generating $SIZE random bytes" >&2
head -c "$SIZE" /dev/urandom >"$WORK/random.bin"
SHA=$(sha256sum "$WORK/random.bin" | cut -d' ' -f1)

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
ROWS=()
for mtu in $MTUS; do
    "$TB" up --mtu "$mtu" >&2
    payload=$((mtu - 28))

    echo "bench-link: MTU $mtu raw ceiling ($BLAST_SECS s blast, $payload-byte datagrams)" >&2
    "$TB" exec rx "$BLAST" sink "$RX_IP:7799" >"$WORK/sink.json" &
    sink_pid=$!
    sleep 0.5
    "$TB" exec tx "$BLAST" send "$RX_IP:7799" "$payload" "$BLAST_SECS" >"$WORK/blast.json"
    wait "$sink_pid"

    echo "bench-link: MTU $mtu Diodon, unlimited rate, $REPAIR % repair" >&2
    rm -rf "$WORK/out"
    "$TB" exec rx "$BIN" recv --listen "$RX_IP:7700" --once --json --rate unlimited --mtu "$mtu" \
        --out "$WORK/out" >"$WORK/recv.json" 2>"$WORK/recv.log" &
    recv_pid=$!
    sleep 0.5
    "$TB" exec tx "$BIN" send --to "$RX_IP:7700" --json --rate unlimited --repair "$REPAIR" \
        --mtu "$mtu" "$WORK/random.bin" >"$WORK/send.json" 2>"$WORK/send.log" || true
    wait "$recv_pid" || true
    got=$(sha256sum "$WORK/out/random.bin" 2>/dev/null | cut -d' ' -f1 || true)
    [[ $got == "$SHA" ]] && sha_ok=identical || sha_ok=DIFFERENT
    guard=$("$TB" status | awk '$1 == "counter" && $2 == "rx" && $3 == "egress_dropped" {print $5}')

    ROWS+=("$(python3 - "$mtu" "$WORK" "$sha_ok" "$SIZE" "$guard" <<'EOF'
import json, sys
mtu, work, sha_ok, size, guard = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def last_json(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}
sink, blast = last_json(f"{work}/sink.json"), last_json(f"{work}/blast.json")
rx, tx = last_json(f"{work}/recv.json"), last_json(f"{work}/send.json")
gb = size / 1e9
ceiling = sink.get("mbps", 0.0)
good = rx.get("goodput_mbps", 0.0)
verdict = "verified" if rx.get("channels_complete") == 1 and rx.get("channels_failed") == 0 else "FAILED"
ratio = good / ceiling * 100 if ceiling else 0.0
print("|".join(str(x) for x in [
    mtu, f"{blast.get('mbps', 0):.0f}", f"{ceiling:.0f}", sink.get("socket_drops", "?"),
    f"{good:.0f}", f"{ratio:.0f} %", f"{tx.get('cpu_s', 0) / gb:.2f}", f"{rx.get('cpu_s', 0) / gb:.2f}",
    rx.get("socket", {}).get("drops", "?"), rx.get("core", {}).get("missing", "?"),
    rx.get("core", {}).get("recovered_symbols", "?"),
    f"{verdict}, {sha_ok}", guard or "?",
]))
EOF
)")
    "$TB" down
done

HEADER="| MTU | blast sent Mbit/s | raw ceiling (received) Mbit/s | sink drops | Diodon verified goodput Mbit/s | goodput / ceiling | send CPU s/GB | recv CPU s/GB | recv socket drops | missing | recovered | file | rx egress dropped (guard) |"
SEP="|---|---|---|---|---|---|---|---|---|---|---|---|---|"
TABLE="$HEADER"$'\n'"$SEP"
for r in "${ROWS[@]}"; do
    TABLE+=$'\n'"| ${r//|/ | } |"
done
echo
echo "$TABLE"

if [[ $RECORD == yes ]]; then
    BENCH="$ROOT/BENCHMARKS.md"
    HEADING="## End-to-end across the software diode (scripts/bench-link.sh)"
    [[ -f $BENCH ]] || printf '# Benchmarks\n' >"$BENCH"
    grep -qxF "$HEADING" "$BENCH" || printf '\n%s\n\nRaw ceiling: `diodon-blast` (sendmsg + UDP GSO, unpaced) into a recvmmsg + GRO sink with a 256 MiB buffer, UDP payload Mbit/s received. Diodon: a random file sent at unlimited rate with 10 %% repair, verified goodput from the receiver'"'"'s summary (file bytes from first datagram to verdict, fsync included); CPU from each process'"'"'s summary. Sender and receiver share the cores.\n' "$HEADING" >>"$BENCH"
    {
        echo
        echo "### $(date -u '+%Y-%m-%d %H:%M UTC') — $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
        echo
        echo "Command: \`$CMDLINE\` (file $SIZE bytes, blast ${BLAST_SECS} s; load average before the run: $LOAD)"
        echo
        echo "$TABLE"
    } >>"$BENCH"
    echo "bench-link: appended to BENCHMARKS.md" >&2
fi

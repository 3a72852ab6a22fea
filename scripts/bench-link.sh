#!/usr/bin/env bash
# bench-link.sh — end-to-end benchmark across the software diode (testbed.sh).
#
#   for MTU in 1500 9000:
#     testbed.sh up --mtu MTU
#     raw ceiling:  diodon-blast send (sendmsg + GSO, unpaced) ==> diodon-blast sink (recvmmsg + GRO)
#                   = UDP payload Mbit/s the sink received (iperf3 cannot run over a diode:
#                     its control connection needs a return path)
#     Diodon:       diodon send --rate RATE --repair 10 FILE ==> diodon recv --rate RATE --out
#                   = verified goodput (file bytes / first datagram .. verdict), CPU s per GB
#                     per side (the summaries' cpu_s), receiver socket drops, verdict + SHA-256
#                   after one warm-up transfer that is not counted: on this project's machine
#                   the first transfer after the blast often ran slow (receiver up to 3x the
#                   CPU per GB, most of it writing the file), and with versions alternating
#                   it was always this version's first run
#     testbed.sh down
#     verifying floor: diodon-blast send-file (read the file as Diodon's reader does,
#                   BLAKE3, send every byte once and REPAIR % again; no FEC, no check)
#                   ==> diodon-blast sink = the send CPU per file GB no verifying sender
#                   can go below on this link (the send targets are read against it)
#   print a table and append it to BENCHMARKS.md (unless --no-record)
#
# Usage: scripts/bench-link.sh [--size BYTES] [--mtus "1500 9000"] [--blast-seconds N] [--runs N]
#                              [--loss PCT [--loss-burst LEN]] [--rate RATE]
#                              [--baseline GIT-REV] [--send-args "ARGS"] [--integrity MODE]
#                              [--cores shared|pinned|split] [--perf DIR] [--no-record]
# Defaults: 1 GB (1000000000 bytes) random file, MTU 1500 and 9000, 5 s blast, 1 run.
# --baseline REV builds that revision (a git worktree under /var/tmp) and runs its
# Diodon alternately with this one on the same testbed, then prints the medians
# and the ratio this / baseline (the "no slower than before" check).
# --send-args "ARGS" adds ARGS to every sender's command line, both versions' (e.g.
# "--block 64" runs this version with the baseline's block size, so the A/B measures the
# code and not the change of defaults).
# --integrity crc|mac|encrypt: what every datagram carries, both sides and both versions:
# the CRC32C (default), the keyed MAC (a fresh random key file for the run, --key-file) or
# encryption (the same key file and --encrypt). The ceiling has no tag at all.
# --rate RATE paces both versions' senders (and sizes the receivers' buffers) at RATE,
# e.g. "1gbit": what the receiver costs on a link it is not saturated by. Default unlimited.
# --loss PCT drops PCT % of the link's datagrams at random (testbed.sh --loss), the
# ceiling's as well as Diodon's; with --loss-burst LEN in bursts of LEN consecutive
# datagrams (a receive-ring overflow, a lost GSO super-packet).
# --cores shared (default): both sides float over both cores; a veth runs the receiving
# side's kernel input inside the sender's sendmsg, on the sender's clock.
# --cores pinned: the sender (and the blaster) on core 0, the receiver (and the sink) on
# core 1 (taskset): one core per side; the receiving side's kernel input still on core 0.
# --cores split: as pinned, and the receiving namespace's IP/UDP input steered to core 1
# (RPS on rx0): two hosts of one core each. On this project's VM, steering together with
# the --loss rule cost core 1 about 3.5 s/GB more at MTU 1500 and capped the sink near
# 1.8 Gbit/s: read split figures with that in mind (BENCHMARKS.md, 2026-11-27).
# Every run also reports each core's busy time from /proc/stat (every task, softirq
# included): nothing the kernel does off the processes' clocks is left out.
# --perf DIR profiles this version's first run per MTU on both sides (perf record, 999 Hz,
# call graphs) and writes DIR/mtuM-{send,recv}.txt: the share of each thread and of each
# function (kernel and user space), the profile that explains a CPU figure. Sampling costs
# both sides a few per cent; read the CPU columns of a --perf run with that in mind.
# Exit status 1 when a transfer failed or its output differs.
# Needs root (network namespaces). Builds with cargo (CARGO_TARGET_DIR honoured).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SIZE=1000000000
MTUS="1500 9000"
BLAST_SECS=5
RECORD=yes
REPAIR=10
RATE=unlimited
RUNS=1
BASELINE=
SEND_ARGS=
PERF_DIR=
LOSS_ARGS=()
INTEGRITY=crc
CORES=shared
BASE_BIN=
BASE_LABEL=
STATUS=0
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
    --perf) PERF_DIR=${2:?}; shift 2 ;;
    --runs) RUNS=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --baseline) BASELINE=${2:?}; shift 2 ;;
    --send-args) SEND_ARGS=${2:?}; shift 2 ;;
    --integrity) INTEGRITY=${2:?}; shift 2 ;;
    --cores) CORES=${2:?}; shift 2 ;;
    --loss) LOSS_ARGS+=(--loss "${2:?}"); shift 2 ;;
    --loss-burst) LOSS_ARGS+=(--loss-burst "${2:?}"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-link: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-link: must run as root" >&2; exit 1; }
TX_PIN=()
RX_PIN=()
case $CORES in
shared) ;;
pinned | split)
    [[ $(nproc) -ge 2 ]] || { echo "bench-link: --cores $CORES needs two cores, this machine has $(nproc)" >&2; exit 2; }
    command -v taskset >/dev/null || { echo "bench-link: --cores $CORES needs taskset (apt install util-linux)" >&2; exit 2; }
    TX_PIN=(taskset -c 0)
    RX_PIN=(taskset -c 1)
    ;;
*) echo "bench-link: --cores is shared, pinned or split, not $CORES" >&2; exit 2 ;;
esac
# Busy ticks of cores 0 and 1 (user, nice, system, irq, softirq; not idle, iowait or steal).
core_ticks() {
    awk '$1 == "cpu0" || $1 == "cpu1" { printf "%d ", $2 + $3 + $4 + $7 + $8 }' /proc/stat
}
TICKS_PER_S=$(getconf CLK_TCK)

(cd "$ROOT" && cargo build --release -q -p diodon --bins)
BIN="$TARGET/release/diodon"
BLAST="$TARGET/release/diodon-blast"
if [[ -n $BASELINE ]]; then
    BASE_LABEL=$(git -C "$ROOT" rev-parse --short "$BASELINE")
    BASE_DIR=/var/tmp/diodon-baseline-$BASE_LABEL
    [[ -d $BASE_DIR ]] || git -C "$ROOT" worktree add --detach -q "$BASE_DIR" "$BASELINE"
    echo "bench-link: building baseline $BASE_LABEL in $BASE_DIR" >&2
    (cd "$BASE_DIR" && CARGO_TARGET_DIR="$BASE_DIR/target" cargo build --release -q -p diodon --bin diodon)
    BASE_BIN="$BASE_DIR/target/release/diodon"
    BASE_LABEL="base $BASE_LABEL"
fi

if [[ -n $PERF_DIR ]]; then
    command -v perf >/dev/null || { echo "bench-link: --perf needs perf (apt install linux-perf)" >&2; exit 2; }
    mkdir -p "$PERF_DIR"
fi
WORK=$(mktemp -d /var/tmp/diodon-bench.XXXXXX)
cleanup() {
    "$TB" down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
KEY_ARGS=()
case $INTEGRITY in
crc) ;;
mac | encrypt)
    (umask 077 && head -c 32 /dev/urandom >"$WORK/link.key")
    KEY_ARGS=(--key-file "$WORK/link.key")
    [[ $INTEGRITY == encrypt ]] && KEY_ARGS+=(--encrypt)
    ;;
*) echo "bench-link: --integrity is crc, mac or encrypt, not $INTEGRITY" >&2; exit 2 ;;
esac

echo "bench-link: generating $SIZE random bytes" >&2
head -c "$SIZE" /dev/urandom >"$WORK/random.bin"
SHA=$(sha256sum "$WORK/random.bin" | cut -d' ' -f1)

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
# run_diodon LABEL BIN MTU RUN: one verified transfer; appends a JSON line to $RESULTS.
run_diodon() {
    local label=$1 bin=$2 mtu=$3 run=$4
    echo "bench-link: MTU $mtu $label run $run: $RATE rate, $REPAIR % repair, $INTEGRITY${SEND_ARGS:+, $SEND_ARGS}" >&2
    rm -rf "$WORK/out"
    # Profiled: this version's first run per MTU (--perf).
    local perf_rx=() perf_tx=()
    if [[ -n $PERF_DIR && $label == this && $run == 1 ]]; then
        perf_rx=(perf record -q -F 999 -g -o "$PERF_DIR/mtu$mtu-recv.data" --)
        perf_tx=(perf record -q -F 999 -g -o "$PERF_DIR/mtu$mtu-send.data" --)
    fi
    local ticks_before ticks_after
    ticks_before=$(core_ticks)
    "$TB" exec rx "${RX_PIN[@]}" "${perf_rx[@]}" "$bin" recv --listen "$RX_IP:7700" --once --json --rate "$RATE" --mtu "$mtu" \
        "${KEY_ARGS[@]}" --out "$WORK/out" >"$WORK/recv.json" 2>"$WORK/recv.log" &
    local recv_pid=$!
    sleep 0.5
    # shellcheck disable=SC2086 # SEND_ARGS is split into words on purpose
    "$TB" exec tx "${TX_PIN[@]}" "${perf_tx[@]}" "$bin" send --to "$RX_IP:7700" --json --rate "$RATE" --repair "$REPAIR" \
        --mtu "$mtu" "${KEY_ARGS[@]}" $SEND_ARGS "$WORK/random.bin" >"$WORK/send.json" 2>"$WORK/send.log" || true
    wait "$recv_pid" || true
    ticks_after=$(core_ticks)
    if [[ ${#perf_tx[@]} -gt 0 ]]; then
        local side
        for side in send recv; do
            {
                echo "# $side, MTU $mtu: share of samples per thread, then per function (self time)"
                perf report -i "$PERF_DIR/mtu$mtu-$side.data" --no-children --sort comm -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$'
                echo
                perf report -i "$PERF_DIR/mtu$mtu-$side.data" --no-children --sort dso,sym --percent-limit 0.5 -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$'
            } >"$PERF_DIR/mtu$mtu-$side.txt"
        done
    fi
    [[ $label == warm-up ]] && return 0
    local got sha_ok guard
    got=$(sha256sum "$WORK/out/random.bin" 2>/dev/null | cut -d' ' -f1 || true)
    [[ $got == "$SHA" ]] && sha_ok=identical || sha_ok=DIFFERENT
    guard=$("$TB" status | awk '$1 == "counter" && $2 == "rx" && $3 == "egress_dropped" {print $5}')
    python3 - "$label" "$mtu" "$run" "$WORK" "$sha_ok" "${guard:-}" "$ticks_before" "$ticks_after" "$TICKS_PER_S" >>"$RESULTS" <<'EOF'
import json, sys
label, mtu, run, work, sha_ok, guard = sys.argv[1:7]
before, after = ([int(x) for x in a.split()] for a in sys.argv[7:9])
core_s = [(b - a) / int(sys.argv[9]) for a, b in zip(before, after)]
def last_json(path):
    try:
        lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    except OSError:
        return {}
    return json.loads(lines[-1]) if lines else {}
rx, tx = last_json(f"{work}/recv.json"), last_json(f"{work}/send.json")
# Summaries of earlier versions kept these counters at the top level.
core = rx.get("core", rx)
print(json.dumps({
    "kind": "diodon", "label": label, "mtu": int(mtu), "run": int(run),
    "goodput_mbps": rx.get("goodput_mbps", 0.0),
    "send_cpu_s": tx.get("cpu_s", 0.0), "recv_cpu_s": rx.get("cpu_s", 0.0),
    # Kernel packets (a GRO super-packet counts once); older summaries said "drops".
    "socket_drops": rx.get("socket", {}).get("dropped_packets", rx.get("socket", {}).get("drops", rx.get("socket_drops"))),
    "missing": core.get("missing"),
    "recovered": core.get("recovered_symbols", core.get("recovered")),
    "verified": rx.get("channels_complete") == 1 and rx.get("channels_failed") == 0,
    "sha": sha_ok, "guard": guard or None, "core_s": core_s,
}))
EOF
}

for mtu in $MTUS; do
    "$TB" up --mtu "$mtu" "${LOSS_ARGS[@]}" >&2
    payload=$((mtu - 28))
    if [[ $CORES == split ]]; then
        # The receiving host's kernel input on the receiver's core.
        "$TB" exec rx sh -c 'echo 2 >/sys/class/net/rx0/queues/rx-0/rps_cpus'
        [[ $("$TB" exec rx cat /sys/class/net/rx0/queues/rx-0/rps_cpus) =~ ^0*2$ ]] ||
            { echo "bench-link: could not steer rx0's input to core 1 (RPS)" >&2; exit 1; }
    fi

    echo "bench-link: MTU $mtu raw ceiling ($BLAST_SECS s blast, $payload-byte datagrams)" >&2
    blast_before=$(core_ticks)
    "$TB" exec rx "${RX_PIN[@]}" "$BLAST" sink "$RX_IP:7799" >"$WORK/sink.json" &
    sink_pid=$!
    sleep 0.5
    "$TB" exec tx "${TX_PIN[@]}" "$BLAST" send "$RX_IP:7799" "$payload" "$BLAST_SECS" >"$WORK/blast.json"
    wait "$sink_pid"
    blast_after=$(core_ticks)
    python3 - "$mtu" "$WORK" "$blast_before" "$blast_after" "$TICKS_PER_S" >>"$RESULTS" <<'EOF'
import json, sys
mtu, work = sys.argv[1:3]
before, after = ([int(x) for x in a.split()] for a in sys.argv[3:5])
core_s = [(b - a) / int(sys.argv[5]) for a, b in zip(before, after)]
def last_json(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}
sink, blast = last_json(f"{work}/sink.json"), last_json(f"{work}/blast.json")
# CPU seconds per GB of payload the blaster and the sink spent: the kernel's
# per-packet work on this link with no per-byte work of Diodon's (the floor).
def per_gb(side):
    b = side.get("bytes", 0)
    return side["cpu_s"] / (b / 1e9) if b and "cpu_s" in side else None
print(json.dumps({"kind": "ceiling", "mtu": int(mtu), "sent_mbps": blast.get("mbps", 0.0),
                  "mbps": sink.get("mbps", 0.0), "drops": sink.get("socket_drops"),
                  "send_floor": per_gb(blast), "recv_floor": per_gb(sink),
                  # Each core's busy seconds over the blast: core 0 per GB the blaster
                  # sent, core 1 per GB the sink received (with --cores shared both
                  # cores carry both sides).
                  "core_floor": [c / (side.get("bytes", 0) / 1e9) if side.get("bytes") else None
                                 for c, side in zip(core_s, (blast, sink))]}))
EOF

    echo "bench-link: MTU $mtu verifying floor (read, BLAKE3, send with $REPAIR % more)" >&2
    "$TB" exec rx "${RX_PIN[@]}" "$BLAST" sink "$RX_IP:7799" >"$WORK/sink.json" &
    sink_pid=$!
    sleep 0.5
    "$TB" exec tx "${TX_PIN[@]}" "$BLAST" send-file "$RX_IP:7799" "$payload" "$WORK/random.bin" "$REPAIR" >"$WORK/send-file.json"
    wait "$sink_pid"
    python3 - "$mtu" "$WORK" >>"$RESULTS" <<'EOF'
import json, sys
mtu, work = sys.argv[1:3]
lines = [l for l in open(f"{work}/send-file.json").read().splitlines() if l.startswith("{")]
f = json.loads(lines[-1]) if lines else {}
gb = f.get("file_bytes", 0) / 1e9
print(json.dumps({"kind": "verifying_floor", "mtu": int(mtu),
                  "send_floor": f["cpu_s"] / gb if gb and "cpu_s" in f else None}))
EOF

    run_diodon warm-up "$BIN" "$mtu" 0
    # Runs of this version and of the baseline alternate, so both see the same machine.
    for run in $(seq 1 "$RUNS"); do
        run_diodon this "$BIN" "$mtu" "$run"
        if [[ -n $BASE_BIN ]]; then
            run_diodon "$BASE_LABEL" "$BASE_BIN" "$mtu" "$run"
        fi
    done
    "$TB" down
done

TABLE=$(python3 - "$RESULTS" "$SIZE" "$BASE_LABEL" <<'EOF'
import json, statistics, sys
path, size, base_label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(path)]
gb = size / 1e9
ceilings = {r["mtu"]: r for r in rows if r["kind"] == "ceiling"}
verifying = {r["mtu"]: r.get("send_floor") for r in rows if r["kind"] == "verifying_floor"}
runs = [r for r in rows if r["kind"] == "diodon"]
out = ["| MTU | version | run | raw ceiling (received) Mbit/s | Diodon verified goodput Mbit/s | goodput / ceiling | send CPU s/GB | recv CPU s/GB | core 0 / core 1 busy s/GB (every task) | floor send / recv CPU s/GB (blast / sink) | verifying sender's floor s/GB (read + BLAKE3 + send) | floor core 0 / core 1 | recv socket drops (kernel packets) | missing | recovered | file | rx egress dropped (guard) |",
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
def floor(mtu):
    c = ceilings.get(mtu, {})
    f = [c.get("send_floor"), c.get("recv_floor")]
    return " / ".join("?" if x is None else f"{x:.2f}" for x in f)
def pair(xs):
    return " / ".join("?" if x is None else f"{x:.2f}" for x in (xs or [None, None]))
def core_floor(mtu):
    return pair(ceilings.get(mtu, {}).get("core_floor"))
def cores(r):
    return pair([c / gb for c in r["core_s"]] if r.get("core_s") else None)
for r in runs:
    c = ceilings.get(r["mtu"], {}).get("mbps", 0.0)
    ratio = r["goodput_mbps"] / c * 100 if c else 0.0
    verdict = "verified" if r["verified"] else "FAILED"
    out.append("| " + " | ".join(str(x) for x in [
        r["mtu"], r["label"], r["run"], f"{c:.0f}", f"{r['goodput_mbps']:.0f}", f"{ratio:.0f} %",
        f"{r['send_cpu_s'] / gb:.2f}", f"{r['recv_cpu_s'] / gb:.2f}", cores(r), floor(r["mtu"]),
        "?" if verifying.get(r["mtu"]) is None else f"{verifying[r['mtu']]:.2f}", core_floor(r["mtu"]),
        r["socket_drops"], r["missing"],
        r["recovered"], f"{verdict}, {r['sha']}", r["guard"] or "?"]) + " |")
labels = [l for l in ("this", base_label) if l and any(r["label"] == l for r in runs)]
if len(labels) == 2:
    out += ["", f"Medians per MTU, this version against {base_label} (same run, alternating):", "",
            "| MTU | goodput this / base Mbit/s | ratio | send CPU s/GB this / base | recv CPU s/GB this / base | core 0 busy s/GB this / base | core 1 busy s/GB this / base |",
            "|---|---|---|---|---|---|---|"]
    for mtu in sorted({r["mtu"] for r in runs}):
        med = {l: {k: statistics.median(r[k] for r in runs if r["mtu"] == mtu and r["label"] == l)
                   for k in ("goodput_mbps", "send_cpu_s", "recv_cpu_s")} for l in labels}
        for l in labels:
            for i in (0, 1):
                med[l][f"core{i}"] = statistics.median(r["core_s"][i] for r in runs if r["mtu"] == mtu and r["label"] == l)
        a, b = med["this"], med[base_label]
        ratio = a["goodput_mbps"] / b["goodput_mbps"] if b["goodput_mbps"] else 0.0
        out.append(f"| {mtu} | {a['goodput_mbps']:.0f} / {b['goodput_mbps']:.0f} | {ratio:.2f} | "
                   f"{a['send_cpu_s'] / gb:.2f} / {b['send_cpu_s'] / gb:.2f} | {a['recv_cpu_s'] / gb:.2f} / {b['recv_cpu_s'] / gb:.2f} | "
                   f"{a['core0'] / gb:.2f} / {b['core0'] / gb:.2f} | {a['core1'] / gb:.2f} / {b['core1'] / gb:.2f} |")
print("\n".join(out))
EOF
)
echo
echo "$TABLE"
if grep -q "FAILED\|DIFFERENT" <<<"$TABLE"; then
    echo "bench-link: a transfer failed or its output differs" >&2
    STATUS=1
fi

if [[ $RECORD == yes ]]; then
    BENCH="$ROOT/BENCHMARKS.md"
    HEADING="## End-to-end across the software diode (scripts/bench-link.sh)"
    [[ -f $BENCH ]] || printf '# Benchmarks\n' >"$BENCH"
    grep -qxF "$HEADING" "$BENCH" || printf '\n%s\n\nRaw ceiling: `diodon-blast` (sendmsg + UDP GSO, unpaced) into a recvmmsg + GRO sink with a 256 MiB buffer, UDP payload Mbit/s received. Diodon: a random file sent at unlimited rate (or --rate) with 10 %% repair, verified goodput from the receiver'"'"'s summary (file bytes from first datagram to verdict, fsync included); CPU from each process'"'"'s summary. Sender and receiver share the cores.\n' "$HEADING" >>"$BENCH"
    ENTRY=$(
        echo
        echo "### $(date -u '+%Y-%m-%d %H:%M UTC') — $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
        echo
        echo "Command: \`$CMDLINE\` (file $SIZE bytes, blast ${BLAST_SECS} s, $RUNS run(s), cores $CORES; load average before the run: $LOAD)"
        echo
        echo "$TABLE"
    )
    # The entry goes at the end of this benchmark's own section (before the
    # next "## " heading), not at the end of the file.
    python3 - "$BENCH" "$HEADING" "$ENTRY" <<'EOF'
import sys
path, heading, entry = sys.argv[1:4]
lines = open(path).read().rstrip("\n").split("\n")
start = lines.index(heading)
end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
while end > start + 1 and lines[end - 1] == "":
    end -= 1
lines[end:end] = entry.split("\n")
open(path, "w").write("\n".join(lines) + "\n")
EOF
    echo "bench-link: added to BENCHMARKS.md, at the end of its section" >&2
fi
exit "$STATUS"

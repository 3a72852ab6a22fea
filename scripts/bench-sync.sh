#!/usr/bin/env bash
# bench-sync.sh — the AROWBftp file-transfer table, reproduced with diodon sync
# across the software diode (testbed.sh), on disk (not tmpfs), one profile at a time:
#
#   profile   file size            layout (scaled from the note's)
#   10KB      10,240 B             folders of up to 64,000 files, a nested level
#   60KB      61,440 B             folders of up to 64,000 files
#   100MB     104,857,600 B        one folder
#   500MB     524,288,000 B        one folder
#   mix       70 % of the bytes in 10 KB files, 20 % in 100 MB, 10 % in 500 MB
#
#   for each: generate the tree (random bytes) ─► testbed up ─► diodon recv --out (rx)
#             ─► diodon sync --once --passes 1 --rate 600mbit (tx)
#             ─► from the receiver's audit log: total time, first and last file
#                available (from the start of the sync), net rate (file bytes / total
#                time), files verified (CFR); peak RSS of both sides (VmHWM, polled)
#             ─► remove both trees
#   then a scan-only run over --scan-files empty files on a loop-mounted ext4 image
#   (its own inodes: the shared root filesystem is not filled): time and peak RSS.
#
# Usage: scripts/bench-sync.sh [--total BYTES] [--profiles "10KB 60KB 100MB 500MB mix"]
#                              [--scan-files N] [--repair PCT] [--mtu N] [--dir DIR] [--no-record]
#                              [--sync-args "ARGS"]   (more arguments for diodon sync, e.g. "--bundle 0")
#                              [--fresh-fs]   (both trees on a new ext4 image, see below)
#                              [--perf DIR]   (profile both sides of every profile, see below)
# --fresh-fs: the source and the received tree live on an ext4 filesystem made
# for the run (mkfs.ext4 defaults: journal, 256-byte inodes) in a file under
# --dir, loop-mounted. A root filesystem without a journal, on which many files
# were deleted in the last 30 s (the tree of the previous profile), makes
# ext4 check every free inode it considers against its deletion time
# (recently_deleted), which can take most of a small-file receiver's CPU.
# --perf DIR: both sides run under perf record (999 Hz, call graphs); per profile,
# DIR/<profile>-{sync,recv}.txt hold the share of each thread and of each function
# (self time). perf costs both sides a few per cent of CPU.
# The receiver runs with --no-fsync (one fsync per file would make the small-file
# profiles measure the disk's sync latency, not the transfer).
# Defaults: 2 GB per profile (the note uses 100 GB), repair 5 %, MTU 1500,
# 10,000,000 files for the scan, work under /var/tmp. Writes the table and
# both sides' JSON summaries to results/sync-bench/ (unless --no-record).
# Needs root (network namespaces, mount). Builds with cargo (CARGO_TARGET_DIR honoured).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TOTAL=2000000000
PROFILES="10KB 60KB 100MB 500MB mix"
SCAN_FILES=10000000
REPAIR=5
MTU=1500
WORK=/var/tmp/diodon-bench-sync
RECORD=yes
RATE=600mbit
SYNC_ARGS=""
FRESH_FS=no
PERF_DIR=
CMDLINE="scripts/bench-sync.sh${*:+ $*}"
export DIODON_TB=${DIODON_TB:-bsync}
TB="$ROOT/scripts/testbed.sh"

while [[ $# -gt 0 ]]; do
    case $1 in
    --total) TOTAL=${2:?}; shift 2 ;;
    --profiles) PROFILES=${2?}; shift 2 ;;
    --scan-files) SCAN_FILES=${2:?}; shift 2 ;;
    --repair) REPAIR=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --dir) WORK=${2:?}; shift 2 ;;
    --no-record) RECORD=no; shift ;;
    --sync-args) SYNC_ARGS=${2?}; shift 2 ;;
    --fresh-fs) FRESH_FS=yes; shift ;;
    --perf) PERF_DIR=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-sync: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-sync: must run as root" >&2; exit 1; }
(cd "$ROOT" && cargo build --release -q -p diodon --bins)
if [[ -n $PERF_DIR ]]; then
    command -v perf >/dev/null || { echo "bench-sync: --perf needs perf (apt install linux-perf)" >&2; exit 2; }
    mkdir -p "$PERF_DIR"
    PERF_DIR=$(cd "$PERF_DIR" && pwd)
fi
BIN="$TARGET/release/diodon"
REV=$(git -C "$ROOT" rev-parse --short HEAD)
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
mkdir -p "$WORK"
ROWS=()
MNT=""
FS_MNT=""
cleanup() {
    bash "$TB" down >/dev/null 2>&1 || true
    if [[ -n $MNT ]]; then umount "$MNT" 2>/dev/null || true; fi
    if [[ -n $FS_MNT ]]; then umount "$FS_MNT" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# gen PROFILE DIR: the tree of one profile, TOTAL bytes.
gen() {
    python3 - "$1" "$2" "$TOTAL" <<'EOF'
import os, sys
profile, root, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
K10, K60, M100, M500 = 10240, 61440, 104857600, 524288000
def files(size, count, sub, per_dir=64000, nested=False):
    for i in range(count):
        d = os.path.join(root, sub, "d%03d" % (i // per_dir))
        if nested and (i // per_dir) % 2 == 1:
            d = os.path.join(root, sub, "nested", "d%03d" % (i // per_dir))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%07d" % i), "wb") as f:
            left = size
            while left:
                n = min(left, 1 << 22)
                f.write(os.urandom(n))
                left -= n
plan = {
    "10KB": [(K10, total // K10, "k10", True)],
    "60KB": [(K60, total // K60, "k60", False)],
    "100MB": [(M100, max(1, total // M100), "m100", False)],
    "500MB": [(M500, max(1, total // M500), "m500", False)],
    "mix": [(K10, total * 7 // 10 // K10, "k10", True),
            (M100, max(1, total * 2 // 10 // M100), "m100", False),
            (M500, max(1, total // 10 // M500), "m500", False)],
}[profile]
n = 0
for size, count, sub, nested in plan:
    files(size, count, sub, nested=nested)
    n += count
print(n)
EOF
}

# peak RSS (KiB) of PID, polled until it exits; written to FILE. Under
# --perf, PID is perf's and the process measured is its child.
watch_rss() {
    local pid=$1 out=$2 peak=0 v child
    if [[ -n $PERF_DIR ]]; then
        for _ in $(seq 100); do
            child=$(pgrep -P "$pid" | head -n 1 || true)
            [[ -n $child ]] && break
            sleep 0.05
        done
        [[ -n $child ]] && pid=$child
    fi
    while [[ -d /proc/$pid ]]; do
        v=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        [[ -n $v && $v -gt $peak ]] && peak=$v
        sleep 0.2
    done
    echo "$peak" >"$out"
}

for P in $PROFILES; do
    TREES=$WORK
    if [[ $FRESH_FS == yes ]]; then
        FS_MNT="$WORK/fs"
        mkdir -p "$FS_MNT"
        rm -f "$WORK/fs.img"
        # Sparse. Both trees (10 KB files take 12 KiB each) plus the inode
        # tables of one inode per 4 KiB (256 bytes each): 2.6 × TOTAL + 3 GB.
        truncate -s $((TOTAL * 26 / 10 + 3000000000)) "$WORK/fs.img"
        # One inode per 4 KiB: the 10 KB profile needs two per file (source, copy).
        mkfs.ext4 -q -F -i 4096 "$WORK/fs.img"
        mount -o loop "$WORK/fs.img" "$FS_MNT"
        TREES=$FS_MNT
    fi
    SRC="$TREES/src/$P" OUT="$TREES/out" STATE="$WORK/state-$P.sqlite"
    rm -rf "$TREES/src" "$OUT" "$STATE"*
    mkdir -p "$SRC"
    echo "bench-sync: $P: generating $TOTAL bytes" >&2
    COUNT=$(gen "$P" "$SRC")
    BYTES=$(du -sb "$SRC" | awk '{print $1}')
    # The new tree at rest: its dirty pages written back before the clock
    # starts (else the first seconds of the sync compete with the writeback
    # of up to TOTAL bytes, which a tree that had been there would not).
    sync
    bash "$TB" up --mtu "$MTU" >/dev/null
    perf_rx=() perf_tx=()
    if [[ -n $PERF_DIR ]]; then
        perf_rx=(perf record -q -F 999 -g -o "$PERF_DIR/$P-recv.data" --)
        perf_tx=(perf record -q -F 999 -g -o "$PERF_DIR/$P-sync.data" --)
    fi
    ip netns exec "$DIODON_TB-rx" "${perf_rx[@]}" "$BIN" recv --listen 10.77.0.2:7700 --out "$OUT" --rate "$RATE" --mtu "$MTU" --no-fsync \
        --json >"$WORK/recv.json" 2>"$WORK/recv.log" &
    RX=$!
    watch_rss "$RX" "$WORK/rx.rss" &
    for _ in $(seq 50); do ip netns exec "$DIODON_TB-rx" grep -q ':1E14 ' /proc/net/udp && break; sleep 0.1; done
    T0=$(date +%s%3N)
    ip netns exec "$DIODON_TB-tx" "${perf_tx[@]}" "$BIN" sync "$SRC" --to 10.77.0.2:7700 --state "$STATE" --once --passes 1 \
        --settle 0 --rate "$RATE" --repair "$REPAIR" --mtu "$MTU" $SYNC_ARGS --json >"$WORK/sync.json" 2>"$WORK/sync.log" &
    TX=$!
    watch_rss "$TX" "$WORK/tx.rss" &
    wait "$TX" || echo "bench-sync: $P: sync exited $?" >&2
    # The receiver may still be placing the last files: stop it once its
    # audit log has not grown for 3 s (at most 120 s).
    prev=-1
    for _ in $(seq 120); do
        now=$(cat "$OUT"/.diodon-audit.jsonl* 2>/dev/null | wc -c)
        if [[ $now -eq $prev ]]; then break; fi
        prev=$now
        sleep 3
    done
    # Under --perf, the receiver is perf's child: stop it, and perf follows.
    RX_MAIN=$RX
    if [[ -n $PERF_DIR ]]; then RX_MAIN=$(pgrep -P "$RX" | head -n 1 || echo "$RX"); fi
    kill "$RX_MAIN" 2>/dev/null || true
    wait "$RX" 2>/dev/null || true
    wait
    bash "$TB" down >/dev/null
    if [[ -n $PERF_DIR ]]; then
        for side in sync recv; do
            {
                echo "# $side, profile $P: share of samples per thread, then per function (self time)"
                perf report -i "$PERF_DIR/$P-$side.data" --no-children --sort comm -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$'
                echo
                perf report -i "$PERF_DIR/$P-$side.data" --no-children --sort dso,sym --percent-limit 0.5 -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$'
            } >"$PERF_DIR/$P-$side.txt"
        done
    fi
    ROW=$(python3 - "$OUT" "$T0" "$BYTES" "$COUNT" "$(cat "$WORK/tx.rss")" "$(cat "$WORK/rx.rss")" "$P" "$WORK" <<'EOF'
import glob, json, sys
out, t0, nbytes, count, txr, rxr, p, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8]
def cpu(path, side):
    try:
        for line in open(path):
            if line.startswith("{"):
                doc = json.loads(line)
                return (doc.get("send", doc) or {}).get("cpu_s", 0) if side == "tx" else doc.get("cpu_s", 0)
    except (OSError, ValueError):
        pass
    return 0
cpu_tx, cpu_rx = cpu(work + "/sync.json", "tx"), cpu(work + "/recv.json", "rx")
# The audit log and its rotated files.
v = [json.loads(l) for path in glob.glob(out + "/.diodon-audit.jsonl*") for l in open(path) if '"verdict":"verified"' in l]
first = min(r["verified_ms"] for r in v) - t0 if v else 0
last = max(r["verified_ms"] for r in v) - t0 if v else 0
# Net rate: the bytes of the files verified (not of those sent).
rate = sum(r["size"] for r in v) * 8 / (last / 1000) / 1e6 if last else 0
gb = nbytes / 1e9
print(f"| {p} | {count:,} | {gb:.2f} GB | {last/1000:.1f} s | {first/1000:.2f} s | {last/1000:.1f} s | {rate:.0f} Mbit/s ({rate/6:.0f} %) | {cpu_tx/gb:.1f} / {cpu_rx/gb:.1f} | {txr/1024:.0f} MiB | {rxr/1024:.0f} MiB | {len(v)}/{count} ({100*len(v)/max(count,1):.2f} %) |")
EOF
)
    echo "$ROW"
    ROWS+=("$ROW")
    # Both sides' JSON summaries (counters, CPU) beside the table.
    if [[ $RECORD == yes ]]; then
        mkdir -p "$ROOT/results/sync-bench"
        cp "$WORK/sync.json" "$ROOT/results/sync-bench/$STAMP-$P-sync.json" 2>/dev/null || true
        tail -n 1 "$WORK/recv.json" >"$ROOT/results/sync-bench/$STAMP-$P-recv.json" 2>/dev/null || true
    fi
    rm -rf "$TREES/src" "$OUT" "$STATE"*
    if [[ $FRESH_FS == yes ]]; then
        umount "$FS_MNT"
        rm -f "$WORK/fs.img"
        FS_MNT=""
    fi
done

SCAN_ROW=""
if [[ $SCAN_FILES -gt 0 ]]; then
    IMG="$WORK/scan.img" MNT="$WORK/scan"
    mkdir -p "$MNT"
    # Sparse: ext4 holds at most one inode per block, so the image has a block
    # per file (4 KiB) and room beside; only what is written takes disk.
    truncate -s $(((SCAN_FILES + 400000) * 4096 + 2000000000)) "$IMG"
    mkfs.ext4 -q -N $((SCAN_FILES + 200000)) -I 128 -b 4096 "$IMG"
    mount -o loop "$IMG" "$MNT"
    echo "bench-sync: scan: creating $SCAN_FILES empty files" >&2
    python3 - "$MNT/tree" "$SCAN_FILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    if i % 64000 == 0:
        d = os.path.join(root, "d%04d" % (i // 64000))
        os.makedirs(d)
    os.close(os.open(os.path.join(d, "f%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
EOF
    "$BIN" sync "$MNT/tree" --state "$WORK/scan.sqlite" --scan-only --json >"$WORK/scan1.json" 2>/dev/null
    "$BIN" sync "$MNT/tree" --state "$WORK/scan.sqlite" --scan-only --json >"$WORK/scan2.json" 2>/dev/null
    SCAN_ROW=$(python3 - "$WORK/scan1.json" "$WORK/scan2.json" "$(du -sb "$WORK/scan.sqlite" | awk '{print $1}')" <<'EOF'
import json, sys
a, b = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
db = int(sys.argv[3])
print(f"| {a['files']:,} | {a['dirs']:,} | {a['ms']/1000:.0f} s ({a['files']/(a['ms']/1000):,.0f} files/s) | {a['peak_rss_kib']/1024:.0f} MiB | {b['ms']/1000:.0f} s | {b['peak_rss_kib']/1024:.0f} MiB | {db/1e9:.2f} GB |")
EOF
)
    echo "$SCAN_ROW"
    umount "$MNT"; MNT=""
fi

TABLE=$(
    echo "| profile | files | bytes | total time | first file available | last file available | net rate (of 600 Mbit/s) | CPU s/GB sender / receiver | peak RSS sender | peak RSS receiver | verified (CFR) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    if [[ -n $SCAN_ROW ]]; then
        echo
        echo "| scan-only: files | directories | first scan (all new) | peak RSS | rescan (unchanged) | peak RSS | state database |"
        echo "|---|---|---|---|---|---|---|"
        echo "$SCAN_ROW"
    fi
)
echo "$TABLE"
if [[ $RECORD == yes ]]; then
    DATE=$STAMP
    mkdir -p "$ROOT/results/sync-bench"
    {
        echo "# bench-sync $DATE"
        echo
        echo "\`$CMDLINE\` — $(nproc) vCPU $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), load after: $(cut -d' ' -f1-3 /proc/loadavg); built from $REV"
        echo
        echo "$TABLE"
    } >"$ROOT/results/sync-bench/$DATE.md"
    echo "bench-sync: wrote results/sync-bench/$DATE.md" >&2
fi

#!/usr/bin/env bash
# bench-kafka.sh — a Kafka topic across the software diode (issue 22): records/s and
# MB/s end to end, as a ratio to what the near broker accepts from a local producer
# in the same run, with CPU per GB of record payload on each side.
#
#   testbed.sh up [--loss PCT]; kafka.sh start: near broker in NAME-tx, far broker in
#   NAME-rx (both 127.0.0.1:9092 inside their namespace)
#   for each record size S (a row; N records of S bytes):
#     topic kafka-bench-S, 6 partitions, created on both brokers
#     local ceiling:  Kafka's ProducerPerformance (tx ns, acks=all, unthrottled) writes the
#                     N records into the near topic = records/s the broker accepts
#                     (these records are what the diode then carries; the near topic
#                     must then hold exactly N)
#     Diodon:         diodon recv --kafka (rx ns, far broker) and diodon send --kafka
#                     --topic kafka-bench-S (tx ns, a fresh consumer group); the clock runs
#                     from the sender's start until the far topic holds N records (sum of
#                     its partitions' end offsets, polled every 100 ms); 2 s later the far
#                     topic must still hold exactly N (else the row FAILS)
#                     = records/s, MB/s (payload, 10^6), ratio to the local producer, CPU s
#                     per GB of payload of sender and receiver (utime + stime from
#                     /proc/PID/stat, start to done), and each process's and broker's
#                     CPU as a share of one core over the same span
#     with --links 2, then again over two links: a second veth pair (10.78.0.1 ->
#                     10.78.0.2, same MTU, static neighbours, no guard and no loss),
#                     one diodon send --to 10.77.0.2:7700 --to 10.78.0.2:7700, one
#                     diodon recv per link producing into the same far topic
#                     (two-kafka-bench-S, --topic-prefix two-) = the aggregate records/s
#                     as a ratio to the one-link run of the same row, CPU s/GB of the
#                     sender and of both receivers together
#   print the table(s); write them to results/kafka-bench/<UTC timestamp>.md (unless --no-record)
#
# Usage: scripts/bench-kafka.sh [--sizes "100 1000 100000"] [--records "N N N"] [--bytes BYTES]
#                               [--rate RATE] [--mtu N] [--loss PCT] [--timeout SECONDS] [--stall SECONDS]
#                               [--links 1|2] [--dir DIR] [--no-record]
# --records gives one record count per size (in the order of --sizes); --bytes instead
# gives the payload per row (N = BYTES / S). --loss PCT drops PCT % of the link's
# datagrams at random (testbed.sh --loss). Defaults: 100 B, 1 KB and 100 KB records,
# 2,000,000 / 1,000,000 / 20,000 of them (0.2 / 1 / 2 GB; 20-60 s per row on 2 vCPUs),
# link rate 2gbit on both sides (so the pacing is not the limit; a receiver slower
# than the link overflows its socket, and the row fails with counted gaps), MTU 1500,
# no loss, 600 s per row at most, a row fails once the far topic has not grown for
# 60 s (--stall); broker data and logs under /var/tmp/diodon-bench-kafka (--dir),
# removed at the end, as are the brokers, diodon processes and testbed it started.
# --links 2 (with --rate for each link, e.g. 300mbit, and without --loss) adds the
# two-link run per row.
# Exit status 1 when a row failed (a count differs, a process died, a stall, a timeout);
# a failed row's sender and receiver logs are kept as
# results/kafka-bench/<stamp>-<size>-{send,recv}.log (unless --no-record).
# Needs root (network namespaces), java and the Kafka jars (scripts/kafka.sh fetch).
# Builds with cargo (CARGO_TARGET_DIR honoured).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SIZES="100 1000 100000"
RECORDS=""
BYTES=""
RATE=2gbit
MTU=1500
LOSS=""
TIMEOUT=600
STALL=60
WORK=/var/tmp/diodon-bench-kafka
RECORD=yes
PARTITIONS=6
BROKER=127.0.0.1:9092
RX_IP=10.77.0.2
RX2_IP=10.78.0.2
LINKS=1
CMDLINE=scripts/bench-kafka.sh
[[ $# -eq 0 ]] || CMDLINE+=$(printf ' %q' "$@")
export DIODON_TB=${DIODON_TB:-bkafka}
TB="$ROOT/scripts/testbed.sh"
KAFKA="$ROOT/scripts/kafka.sh"
NS_TX="$DIODON_TB-tx"
NS_RX="$DIODON_TB-rx"

while [[ $# -gt 0 ]]; do
    case $1 in
    --sizes) SIZES=${2:?}; shift 2 ;;
    --records) RECORDS=${2:?}; shift 2 ;;
    --bytes) BYTES=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --loss) LOSS=${2:?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --stall) STALL=${2:?}; shift 2 ;;
    --dir) WORK=${2:?}; shift 2 ;;
    --links) LINKS=${2:?}; shift 2 ;;
    --no-record) RECORD=no; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-kafka: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "bench-kafka: must run as root (it builds network namespaces)" >&2; exit 1; }
[[ $LINKS == 1 || $LINKS == 2 ]] || { echo "bench-kafka: --links is 1 or 2" >&2; exit 2; }
[[ $LINKS == 1 || -z $LOSS ]] || { echo "bench-kafka: --links 2 runs without --loss (the second link has no loss rule)" >&2; exit 2; }
read -r -a SIZE_LIST <<<"$SIZES"
COUNT_LIST=()
if [[ -n $RECORDS ]]; then
    read -r -a COUNT_LIST <<<"$RECORDS"
    [[ ${#COUNT_LIST[@]} -eq ${#SIZE_LIST[@]} ]] ||
        { echo "bench-kafka: --records needs one count per size (${#SIZE_LIST[@]})" >&2; exit 2; }
else
    for s in "${SIZE_LIST[@]}"; do
        if [[ -n $BYTES ]]; then
            COUNT_LIST+=($((BYTES / s)))
        else
            case $s in
            100) COUNT_LIST+=(2000000) ;;
            1000) COUNT_LIST+=(1000000) ;;
            100000) COUNT_LIST+=(20000) ;;
            *) COUNT_LIST+=($((1000000000 / s))) ;;
            esac
        fi
    done
fi

(cd "$ROOT" && cargo build --release -q -p diodon --bins)
BIN="$TARGET/release/diodon"
CP=$("$KAFKA" classpath)
REV=$(git -C "$ROOT" describe --always --dirty --abbrev=7)  # -dirty: uncommitted changes were built in
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
HZ=$(getconf CLK_TCK)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# Everything this run starts, stopped by PID on the way out (error, Ctrl-C or done).
NEAR_PID="" FAR_PID="" SEND_PID="" RECV_PID="" RECV2_PID="" WAIT_PID="" PERF_PID=""
TB_UP=no
STATUS=0
# shellcheck disable=SC2317 # reached through the EXIT trap
cleanup() {
    local pid
    for pid in $SEND_PID $RECV_PID $RECV2_PID $WAIT_PID $PERF_PID; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    # A broker whose start was interrupted has only written its pid file.
    [[ -n $NEAR_PID || ! -f $WORK/near/broker.pid ]] || NEAR_PID=$(cat "$WORK/near/broker.pid")
    [[ -n $FAR_PID || ! -f $WORK/far/broker.pid ]] || FAR_PID=$(cat "$WORK/far/broker.pid")
    for pid in $NEAR_PID $FAR_PID; do
        "$KAFKA" stop --pid "$pid" >/dev/null 2>&1 || true
    done
    [[ $TB_UP == no ]] || bash "$TB" down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "$WORK"
mkdir -p "$WORK"

# A small Kafka client (kafka-clients from kafka.sh's classpath): creates a topic,
# counts a topic's records (sum of end offsets), or waits until a topic holds N.
mkdir -p "$WORK/helper"
cat >"$WORK/helper/BenchKafka.java" <<'EOF'
import java.util.*;
import java.util.stream.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

// create BROKER TOPIC PARTITIONS | count BROKER TOPIC | wait BROKER TOPIC N TIMEOUT_S STALL_S
public class BenchKafka {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[1]);
        String topic = a[2];
        if (a[0].equals("create")) {
            try (Admin admin = Admin.create(p)) {
                admin.createTopics(List.of(new NewTopic(topic, Integer.parseInt(a[3]), (short) 1))).all().get();
            }
            return;
        }
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = c.partitionsFor(topic).stream()
                .map(i -> new TopicPartition(topic, i.partition())).collect(Collectors.toList());
            if (a[0].equals("count")) {
                System.out.println(count(c, tps));
                return;
            }
            long n = Long.parseLong(a[3]);
            long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a[4]);
            long have = count(c, tps);
            System.out.println("ready " + have);
            System.out.flush();
            long stall = 1000L * Long.parseLong(a[5]);
            long lastProgress = 0, lastHave = have, lastChange = System.currentTimeMillis();
            while (true) {
                have = count(c, tps);
                long now = System.currentTimeMillis();
                if (have != lastHave) {
                    lastHave = have;
                    lastChange = now;
                }
                if (have >= n) {
                    System.out.println("done " + now + " " + have);
                    System.out.flush();
                    Thread.sleep(2000);
                    System.out.println("final " + count(c, tps));
                    return;
                }
                if (now > deadline || now - lastChange > stall) {
                    System.out.println((now > deadline ? "timeout " : "stalled ") + now + " " + have);
                    System.exit(1);
                }
                if (now - lastProgress >= 5000) {
                    System.out.println("progress " + now + " " + have);
                    System.out.flush();
                    lastProgress = now;
                }
                Thread.sleep(100);
            }
        }
    }

    static long count(KafkaConsumer<byte[], byte[]> c, List<TopicPartition> tps) {
        Map<TopicPartition, Long> end = c.endOffsets(tps);
        Map<TopicPartition, Long> begin = c.beginningOffsets(tps);
        long sum = 0;
        for (TopicPartition tp : tps) sum += end.get(tp) - begin.get(tp);
        return sum;
    }
}
EOF
javac -nowarn -cp "$CP" -d "$WORK/helper" "$WORK/helper/BenchKafka.java"
JAVA_SMALL=(java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$WORK/helper:$CP")
helper() { # helper NS ARGS...
    local ns=$1
    shift
    ip netns exec "$ns" "${JAVA_SMALL[@]}" BenchKafka "$@"
}

# cpu_ticks PID: utime + stime of the whole process (all its threads) so far.
cpu_ticks() {
    sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0
}

# rcvbuf_errors NS: UDP datagrams the namespace's sockets dropped for a full buffer.
rcvbuf_errors() {
    ip netns exec "$1" cat /proc/net/snmp | awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "RcvbufErrors") c = i; h = 1 } else print $c }'
}

# threads PID SECONDS: the threads of PID that used at least 5 % of one core over
# SECONDS (their whole CPU time so far, so PID should have started at the clock's start).
threads() {
    local pid=$1 secs=$2 t
    for t in /proc/"$pid"/task/*; do
        echo "$(sed 's/^.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}') $(cat "$t/comm" 2>/dev/null)"
    done | awk -v hz="$HZ" -v s="$secs" '{ pct[$2] += $1 * 100 / hz / s } END { for (n in pct) print int(pct[n]), n }' |
        sort -rn | awk '$1 >= 5 {printf "%s%s %d %%", sep, $2, $1; sep=", "} END { if (!sep) printf "none" }'
}

loss_args=()
[[ -z $LOSS ]] || loss_args=(--loss "$LOSS")
echo "bench-kafka: testbed $DIODON_TB up (MTU $MTU${LOSS:+, loss $LOSS %})" >&2
TB_UP=yes
bash "$TB" up --mtu "$MTU" "${loss_args[@]}" >/dev/null
if [[ $LINKS == 2 ]]; then
    # The second link: like the testbed's (static neighbours, GSO segmented before
    # the veth), deleted with the namespaces.
    ip link add tx1 netns "$NS_TX" address 02:78:00:00:00:01 mtu "$MTU" type veth \
        peer name rx1 netns "$NS_RX" address 02:78:00:00:00:02 mtu "$MTU"
    ip -n "$NS_TX" addr add 10.78.0.1/24 dev tx1
    ip -n "$NS_RX" addr add "$RX2_IP/24" dev rx1
    ip -n "$NS_TX" link set tx1 up
    ip -n "$NS_RX" link set rx1 up
    ip -n "$NS_TX" neigh replace "$RX2_IP" lladdr 02:78:00:00:00:02 dev tx1 nud permanent
    ip -n "$NS_RX" neigh replace 10.78.0.1 lladdr 02:78:00:00:00:01 dev rx1 nud permanent
    ip netns exec "$NS_TX" ethtool -K tx1 tx-udp-segmentation off
fi
echo "bench-kafka: starting the near (tx) and far (rx) brokers" >&2
NEAR_PID=$("$KAFKA" start --netns "$NS_TX" --listen "$BROKER" --dir "$WORK/near")
FAR_PID=$("$KAFKA" start --netns "$NS_RX" --listen "$BROKER" --dir "$WORK/far")

# diodon_run LINKS FAR_TOPIC TAG: one Diodon run of the row's N records of S bytes
# over LINKS links into FAR_TOPIC of the far broker; sets T0, T1 (empty: not done),
# SEND_CPU, RECV_CPU (all receivers), NEAR_CPU, FAR_CPU, DROPS, FINAL, RUN_OK and the
# thread summaries; logs go to $WORK/{send,recv,recv2}-TAG.log.
diodon_run() {
    local links=$1 far_topic=$2 tag=$3 prefix="" to=(--to "$RX_IP:7700") pid
    RUN_OK=yes
    [[ $far_topic == "$TOPIC" ]] || prefix=${far_topic%"$TOPIC"}
    ip netns exec "$NS_RX" "$BIN" recv --listen "$RX_IP:7700" --kafka "$BROKER" ${prefix:+--topic-prefix "$prefix"} \
        --rate "$RATE" --mtu "$MTU" >"$WORK/recv-$tag.out" 2>"$WORK/recv-$tag.log" &
    RECV_PID=$!
    if [[ $links == 2 ]]; then
        ip netns exec "$NS_RX" "$BIN" recv --listen "$RX2_IP:7700" --kafka "$BROKER" ${prefix:+--topic-prefix "$prefix"} \
            --rate "$RATE" --mtu "$MTU" >"$WORK/recv2-$tag.out" 2>"$WORK/recv2-$tag.log" &
        RECV2_PID=$!
        to+=(--to "$RX2_IP:7700")
    fi
    for _ in $(seq 100); do ip netns exec "$NS_RX" grep -q ':1E14 ' /proc/net/udp && break; sleep 0.1; done
    # Not through helper(): started directly (ip netns exec execs), $! is the JVM itself.
    ip netns exec "$NS_RX" "${JAVA_SMALL[@]}" BenchKafka wait "$BROKER" "$far_topic" "$N" "$TIMEOUT" "$STALL" >"$WORK/wait-$tag.out" 2>"$WORK/wait-$tag.log" &
    WAIT_PID=$!
    for _ in $(seq 300); do grep -q '^ready' "$WORK/wait-$tag.out" && break; sleep 0.1; done
    grep -q '^ready' "$WORK/wait-$tag.out" || { cat "$WORK/wait-$tag.log" >&2; echo "bench-kafka: the far topic cannot be polled" >&2; exit 1; }
    echo "bench-kafka: $S B: diodon send --kafka ==> diodon recv --kafka at $RATE over $links link(s)" >&2
    NEAR_CPU0=$(cpu_ticks "$NEAR_PID") FAR_CPU0=$(cpu_ticks "$FAR_PID") DROPS0=$(rcvbuf_errors "$NS_RX")
    T0=$(date +%s%3N)
    ip netns exec "$NS_TX" "$BIN" send "${to[@]}" --kafka "$BROKER" --topic "$TOPIC" \
        --group "kafka-bench-$S-$STAMP-$tag" --rate "$RATE" --mtu "$MTU" \
        >"$WORK/send-$tag.out" 2>"$WORK/send-$tag.log" &
    SEND_PID=$!
    while ! grep -q '^done\|^timeout\|^stalled' "$WORK/wait-$tag.out"; do
        if ! kill -0 "$SEND_PID" 2>/dev/null || ! kill -0 "$RECV_PID" 2>/dev/null || ! kill -0 "$WAIT_PID" 2>/dev/null ||
            { [[ -n $RECV2_PID ]] && ! kill -0 "$RECV2_PID" 2>/dev/null; }; then
            echo "bench-kafka: $S B: a process ended early (send, recv or the poller)" >&2
            break
        fi
        sleep 0.1
    done
    SEND_CPU=$(cpu_ticks "$SEND_PID") RECV_CPU=$(cpu_ticks "$RECV_PID")
    [[ -z $RECV2_PID ]] || RECV_CPU=$((RECV_CPU + $(cpu_ticks "$RECV2_PID")))
    SECS=$((($(date +%s%3N) - T0 + 999) / 1000))
    DROPS=$(($(rcvbuf_errors "$NS_RX") - DROPS0))
    SEND_THREADS=$(threads "$SEND_PID" "$SECS")
    RECV_THREADS=$(threads "$RECV_PID" "$SECS")
    NEAR_CPU=$(($(cpu_ticks "$NEAR_PID") - NEAR_CPU0)) FAR_CPU=$(($(cpu_ticks "$FAR_PID") - FAR_CPU0))
    T1=$(awk '/^done/ {print $2}' "$WORK/wait-$tag.out")
    grep -q '^done' "$WORK/wait-$tag.out" || kill "$WAIT_PID" 2>/dev/null || true
    wait "$WAIT_PID" || RUN_OK=no
    WAIT_PID=""
    FINAL=$(awk '/^final/ {print $2}' "$WORK/wait-$tag.out")
    for pid in $SEND_PID $RECV_PID $RECV2_PID; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    SEND_PID="" RECV_PID="" RECV2_PID=""
    if [[ -z $T1 || $FINAL != "$N" ]]; then
        RUN_OK=no
        if [[ -n $FINAL ]]; then
            echo "bench-kafka: $S B ($links link(s)): FAILED: the far topic holds $FINAL records, not $N" >&2
        else
            FINAL=$(awk '/^(stalled|timeout)/ {print $3}' "$WORK/wait-$tag.out")
            echo "bench-kafka: $S B ($links link(s)): FAILED: the far topic holds ${FINAL:-?} of $N records ($(awk '/^(stalled|timeout)/ {print $1}' "$WORK/wait-$tag.out" | sed "s/stalled/no growth for $STALL s/;s/timeout/$TIMEOUT s timeout/"))" >&2
        fi
        for f in send recv recv2; do
            [[ -f $WORK/$f-$tag.log ]] || continue
            echo "--- $f:" >&2
            grep -v '^ *verified ' "$WORK/$f-$tag.log" | tail -n 15 >&2
            if [[ $RECORD == yes ]]; then
                mkdir -p "$ROOT/results/kafka-bench"
                cp "$WORK/$f-$tag.log" "$ROOT/results/kafka-bench/$STAMP-$tag-$f.log"
            fi
        done
        STATUS=1
    fi
}

ROWS=()
TWO_ROWS=()
DETAILS=()
for i in "${!SIZE_LIST[@]}"; do
    S=${SIZE_LIST[$i]} N=${COUNT_LIST[$i]}
    TOPIC=kafka-bench-$S
    ROW_OK=yes
    echo "bench-kafka: $S B × $N records: topic $TOPIC ($PARTITIONS partitions) on both brokers" >&2
    helper "$NS_TX" create "$BROKER" "$TOPIC" "$PARTITIONS"
    helper "$NS_RX" create "$BROKER" "$TOPIC" "$PARTITIONS"

    # 1. The local ceiling, which also fills the near topic.
    echo "bench-kafka: $S B: local producer (ProducerPerformance, acks=all)" >&2
    ip netns exec "$NS_TX" java -Xmx512m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP" \
        org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$N" --record-size "$S" \
        --throughput -1 --producer-props bootstrap.servers="$BROKER" acks=all \
        >"$WORK/perf-$S.log" 2>&1 &
    PERF_PID=$!
    wait "$PERF_PID" || { echo "bench-kafka: $S B: ProducerPerformance exited $?" >&2; tail -n 20 "$WORK/perf-$S.log" >&2; exit 1; }
    PERF_PID=""
    PERF_LINE=$(grep 'records sent' "$WORK/perf-$S.log" | tail -n 1)
    LOCAL_RPS=$(sed -E 's/^.* records sent, ([0-9.]+) records\/sec.*$/\1/' <<<"$PERF_LINE")
    NEAR_COUNT=$(helper "$NS_TX" count "$BROKER" "$TOPIC")
    [[ $NEAR_COUNT -eq $N ]] || { echo "bench-kafka: $S B: the near topic holds $NEAR_COUNT records, not $N" >&2; exit 1; }
    echo "bench-kafka: $S B: local producer $PERF_LINE" >&2

    # 2. Diodon end to end.
    diodon_run 1 "$TOPIC" "$S"
    ROW_OK=$RUN_OK
    ROW=$(python3 - "$S" "$N" "$LOCAL_RPS" "$T0" "${T1:-0}" "$SEND_CPU" "$RECV_CPU" "$NEAR_CPU" "$FAR_CPU" "$HZ" "$ROW_OK" "${FINAL:-?}" "$DROPS" <<'EOF'
import sys
s, n, local_rps, t0, t1, scpu, rcpu, ncpu, fcpu, hz = (float(x) for x in sys.argv[1:11])
ok, final, drops = sys.argv[11], sys.argv[12], int(sys.argv[13])
gb = s * n / 1e9
wall = (t1 - t0) / 1000
def share(ticks): return f"{100 * ticks / hz / wall:.0f}" if wall > 0 else "?"
if ok == "yes" and wall > 0:
    rps = n / wall
    print(f"| {s:,.0f} B | {n:,.0f} | {local_rps:,.0f} rec/s ({local_rps * s / 1e6:.1f} MB/s) | {wall:.1f} s | "
          f"{rps:,.0f} | {rps * s / 1e6:.1f} | {rps / local_rps:.2f} | {scpu / hz / gb:.1f} | {rcpu / hz / gb:.1f} | "
          f"{share(scpu)} / {share(rcpu)} / {share(ncpu)} / {share(fcpu)} % | {drops:,} | {int(final):,} |")
else:
    print(f"| {s:,.0f} B | {n:,.0f} | {local_rps:,.0f} rec/s ({local_rps * s / 1e6:.1f} MB/s) | FAILED | | | | | | | {drops:,} | {final} of {n:,.0f} |")
EOF
)
    echo "$ROW"
    ROWS+=("$ROW")
    DETAILS+=("- $S B: local producer: \`$PERF_LINE\`; threads at ≥ 5 % of a core over the Diodon run (same-name threads added up): sender: $SEND_THREADS; receiver: $RECV_THREADS")
    DETAILS+=("  - sender's summary: $(grep -E 'kafka: [0-9]+ records' "$WORK/send-$S.log" | tail -n 1 | sed 's/^ *//')")
    DETAILS+=("  - receiver's summary: $(grep -E 'kafka: [0-9]+ records' "$WORK/recv-$S.log" | tail -n 1 | sed 's/^ *//')")
    if [[ $LINKS == 2 ]]; then
        ONE_T0=$T0 ONE_T1=${T1:-0}
        helper "$NS_RX" create "$BROKER" "two-$TOPIC" "$PARTITIONS"
        diodon_run 2 "two-$TOPIC" "$S-two"
        TWO=$(python3 - "$S" "$N" "$ONE_T0" "$ONE_T1" "$ROW_OK" "$T0" "${T1:-0}" "$RUN_OK" "$SEND_CPU" "$RECV_CPU" "$HZ" "${FINAL:-?}" "$DROPS" <<'EOF'
import sys
s, n, t0a, t1a = (float(x) for x in sys.argv[1:5])
ok_one = sys.argv[5]
t0b, t1b = float(sys.argv[6]), float(sys.argv[7])
ok_two = sys.argv[8]
scpu, rcpu, hz = (float(x) for x in sys.argv[9:12])
final, drops = sys.argv[12], int(sys.argv[13])
gb = s * n / 1e9
one, two = (t1a - t0a) / 1000, (t1b - t0b) / 1000
if ok_one == "yes" and ok_two == "yes" and one > 0 and two > 0:
    r1, r2 = n / one, n / two
    print(f"| {s:,.0f} B | {n:,.0f} | {one:.1f} s, {r1:,.0f} rec/s ({r1 * s / 1e6:.1f} MB/s) | {two:.1f} s | "
          f"{r2:,.0f} | {r2 * s / 1e6:.1f} | {r2 / r1:.2f} | {scpu / hz / gb:.1f} | {rcpu / hz / gb:.1f} | {drops:,} | {int(final):,} |")
else:
    first = "FAILED" if ok_one != "yes" else f"{one:.1f} s"
    print(f"| {s:,.0f} B | {n:,.0f} | {first} | FAILED | | | | | | {drops:,} | {final} of {n:,.0f} |")
EOF
)
        echo "$TWO"
        TWO_ROWS+=("$TWO")
        DETAILS+=("  - two links: sender's summary: $(grep -E '^ *link to ' "$WORK/send-$S-two.log" | sed 's/^ *//' | tr '\n' ';' | sed 's/;$//')")
        DETAILS+=("  - two links: receivers' summaries: $(grep -hE 'kafka: [0-9]+ records' "$WORK/recv-$S-two.log" "$WORK/recv2-$S-two.log" | sed 's/^ *//' | tr '\n' ';' | sed 's/;$//')")
    fi
done

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
TABLE=$(
    echo "| record size | records | local producer (ceiling) | Diodon time | Diodon records/s | Diodon MB/s | ratio to local producer | CPU s/GB sender | CPU s/GB receiver | CPU of one core: sender / receiver / near broker / far broker | rx socket drops | far records |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
)
echo "$TABLE"
TWO_TABLE=""
if [[ $LINKS == 2 ]]; then
    TWO_TABLE=$(
        echo "| record size | records | one link | two links: time | two links: records/s | two links: MB/s | aggregate ratio to one link | CPU s/GB sender | CPU s/GB both receivers | rx socket drops | far records |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|"
        printf '%s\n' "${TWO_ROWS[@]}"
    )
    echo
    echo "$TWO_TABLE"
fi
printf '%s\n' "${DETAILS[@]}" >&2
if [[ $RECORD == yes ]]; then
    mkdir -p "$ROOT/results/kafka-bench"
    {
        echo "# bench-kafka $STAMP"
        echo
        echo "\`$CMDLINE\` — $(nproc) vCPU $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r); link rate $RATE, MTU $MTU, loss ${LOSS:-0} %, $PARTITIONS partitions; load average before: $LOAD_BEFORE, after: $LOAD_AFTER; built from $REV"
        echo
        echo "$TABLE"
        echo
        if [[ -n $TWO_TABLE ]]; then
            echo "Two links (\`--to\` twice, one receiver per link, one far topic), each paced at $RATE:"
            echo
            echo "$TWO_TABLE"
            echo
        fi
        printf '%s\n' "${DETAILS[@]}"
    } >"$ROOT/results/kafka-bench/$STAMP.md"
    echo "bench-kafka: wrote results/kafka-bench/$STAMP.md" >&2
fi
exit "$STATUS"

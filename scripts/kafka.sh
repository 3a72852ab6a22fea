#!/usr/bin/env bash
# kafka.sh — a real Apache Kafka broker for Diodon's Kafka tests and benchmark
# (issue 22): fetched from Maven Central with the ordinary Maven client, run
# as a single-node KRaft broker (broker and controller in one JVM), inside a
# network namespace or on loopback.
#
#   fetch                    mvn copies kafka_2.13 + kafka-tools (with their runtime
#                            dependencies) into $CACHE/$VERSION/lib; a second run does nothing
#   classpath                prints the cached classpath (fetch first)
#   start [--netns NS] --listen ADDR:PORT --dir DIR [--again]
#                            writes DIR/server.properties, formats DIR/data, starts
#                            kafka.Kafka (inside NS when given), waits until ADDR:PORT
#                            accepts, prints the broker's PID (also in DIR/broker.pid);
#                            its output goes to DIR/broker.log. The controller listens
#                            on ADDR:PORT+1. With --again, DIR holds a broker stopped
#                            before: it starts with its data (topics, records,
#                            offsets, producer ids) kept, nothing written or formatted.
#   stop --pid PID           TERM to that broker only (checked to be kafka.Kafka), waits,
#                            KILL after DIODON_KAFKA_STOP_SECONDS (default 30)
#
# Environment: DIODON_KAFKA_VERSION (default 4.1.1), DIODON_KAFKA_CACHE (default
# /var/cache/diodon-kafka), DIODON_KAFKA_HEAP (default 512m),
# DIODON_KAFKA_START_SECONDS (default 90). Needs java (17+) and mvn; start with
# --netns needs root.
set -euo pipefail

VERSION="${DIODON_KAFKA_VERSION:-4.1.1}"
CACHE="${DIODON_KAFKA_CACHE:-/var/cache/diodon-kafka}"
LIB="$CACHE/$VERSION/lib"
HEAP="${DIODON_KAFKA_HEAP:-512m}"
# slf4j-simple gives the broker a log (to DIR/broker.log); without a binding it
# would run silent, and a broker that fails to start would not say why.
SLF4J_VERSION=2.0.17

die() {
    echo "kafka.sh: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

fetch() {
    if [[ -f "$LIB/.complete" ]]; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven)"
    local work
    work=$(mktemp -d)
    # A throwaway pom whose only purpose is to name what to copy.
    cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>diodon</groupId><artifactId>kafka-fetch</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>$SLF4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
    echo "kafka.sh: fetching Kafka $VERSION into $LIB" >&2
    rm -rf "$LIB"
    mkdir -p "$LIB"
    if ! mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$LIB" >"$work/mvn.log" 2>&1; then
        cat "$work/mvn.log" >&2
        rm -rf "$work"
        die "mvn could not fetch Kafka $VERSION"
    fi
    rm -rf "$work"
    [[ -f "$LIB/kafka_2.13-$VERSION.jar" ]] || die "fetch left no kafka_2.13-$VERSION.jar in $LIB"
    touch "$LIB/.complete"
}

classpath() {
    [[ -f "$LIB/.complete" ]] || die "Kafka $VERSION is not fetched (run: $0 fetch)"
    local jars=("$LIB"/*.jar)
    local IFS=:
    echo "${jars[*]}"
}

# Runs "$@" inside the namespace $netns, or here when it is empty.
in_netns() {
    if [[ -n "$netns" ]]; then
        ip netns exec "$netns" "$@"
    else
        "$@"
    fi
}

# A random Kafka cluster id: 16 bytes, URL-safe base64 without padding.
cluster_id() {
    # Base64url of 16 random bytes; one starting with '-' would be read as
    # an option by kafka-storage's argument parser, so draw again.
    local id
    while :; do
        id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        [[ $id != -* ]] && break
    done
    printf '%s' "$id"
}

# write_config DIR ADDR PORT CONTROLLER_PORT: DIR/server.properties of a
# single-node KRaft broker (broker and controller in one JVM).
write_config() {
    local dir=$1 addr=$2 port=$3 controller_port=$4
    cat >"$dir/server.properties" <<EOF
# Written by scripts/kafka.sh: a single-node KRaft broker for Diodon's tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$addr:$controller_port
listeners=PLAINTEXT://$addr:$port,CONTROLLER://$addr:$controller_port
advertised.listeners=PLAINTEXT://$addr:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
}

start() {
    local netns="" listen="" dir="" again=no
    while (($#)); do
        case "$1" in
        --netns) netns="${2:?}"; shift 2 ;;
        --listen) listen="${2:?}"; shift 2 ;;
        --dir) dir="${2:?}"; shift 2 ;;
        --again) again=yes; shift ;;
        *) die "start: unknown argument $1" ;;
        esac
    done
    [[ -n "$listen" && -n "$dir" ]] || die "start needs --listen ADDR:PORT and --dir DIR"
    local addr="${listen%:*}" port="${listen##*:}"
    [[ "$port" =~ ^[0-9]+$ && "$port" -lt 65535 ]] || die "start: bad port in $listen"
    local controller_port=$((port + 1))
    local cp
    cp=$(classpath)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    local java_opts=(-Xmx"$HEAP" -Xms"$HEAP" -XX:+UseG1GC -Djava.awt.headless=true
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dorg.slf4j.simpleLogger.showDateTime=true)
    if [[ $again == yes ]]; then
        [[ -d "$dir/data" && -f "$dir/server.properties" ]] ||
            die "start --again: $dir holds no broker started before (no data or server.properties)"
        grep -qxF "listeners=PLAINTEXT://$addr:$port,CONTROLLER://$addr:$controller_port" "$dir/server.properties" ||
            die "start --again: $dir's broker listened elsewhere than $listen"
    else
        [[ ! -e "$dir/data" ]] || die "start: $dir/data exists (one broker per fresh directory; --again starts a stopped one)"
        write_config "$dir" "$addr" "$port" "$controller_port"
        java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format \
            --cluster-id "$(cluster_id)" --config "$dir/server.properties" >"$dir/format.log" 2>&1 ||
            { cat "$dir/format.log" >&2; die "start: formatting $dir/data failed"; }
    fi

    # Started directly (not through a function, which would fork a subshell) and
    # ip netns exec execs in place, so $! is the JVM itself.
    local prefix=()
    [[ -z "$netns" ]] || prefix=(ip netns exec "$netns")
    "${prefix[@]}" java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$dir/server.properties" \
        >>"$dir/broker.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/broker.pid"

    local deadline=$((SECONDS + ${DIODON_KAFKA_START_SECONDS:-90}))
    local probe_addr="${addr#[}"
    probe_addr="${probe_addr%]}"
    until in_netns bash -c "exec 3<>/dev/tcp/$probe_addr/$port" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$dir/broker.log" >&2
            die "start: the broker exited before accepting on $listen"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 30 "$dir/broker.log" >&2
            stop --pid "$pid"
            die "start: $listen did not accept within ${DIODON_KAFKA_START_SECONDS:-90} s"
        fi
        sleep 0.2
    done
    echo "$pid"
}

stop() {
    local pid=""
    while (($#)); do
        case "$1" in
        --pid) pid="${2:?}"; shift 2 ;;
        *) die "stop: unknown argument $1" ;;
        esac
    done
    [[ "$pid" =~ ^[0-9]+$ ]] || die "stop needs --pid PID"
    [[ -r "/proc/$pid/cmdline" ]] || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kafka\.Kafka' ||
        die "stop: PID $pid is not a Kafka broker; left alone"
    kill -TERM "$pid" 2>/dev/null || return 0
    local deadline=$((SECONDS + ${DIODON_KAFKA_STOP_SECONDS:-30}))
    while [[ -e "/proc/$pid" ]] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            echo "kafka.sh: broker $pid ignored TERM; KILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    # Reap it when it is our own child (start and stop in one shell).
    wait "$pid" 2>/dev/null || true
}

cmd="${1:-}"
shift || true
case "$cmd" in
fetch) fetch "$@" ;;
classpath) classpath "$@" ;;
start) start "$@" ;;
stop) stop "$@" ;;
*) usage ;;
esac

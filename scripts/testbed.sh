#!/usr/bin/env bash
# testbed.sh — a data diode in software (thesis §4.2.2, DESIGN.md "Testing on real kernels").
#
#   ${DIODON_TB}-tx                                   ${DIODON_TB}-rx
#   tx0 10.77.0.1/24 fd77::1/64  ====== veth ======>  rx0 10.77.0.2/24 fd77::2/64
#   [tbf --rate]                                      [numgen loss --loss]
#   nft: drop+count everything arriving on tx0        nft: drop+count everything leaving rx0
#   static neighbours both ways (no ARP / ND needed)
#   tx0: tx-udp-segmentation off (datagrams cross one by one, as on a wire)
#
# Usage:
#   scripts/testbed.sh up [--mtu N] [--loss PCT [--loss-burst LEN]] [--rate RATE] [--burst SIZE]
#                         [--bidirectional]
#   scripts/testbed.sh down
#   scripts/testbed.sh status [--json]
#   scripts/testbed.sh exec tx|rx CMD [ARGS...]
#
# --bidirectional (for Delta-t and TCP, which need a return path) skips the
# one-way guard tables; --loss then drops PCT % of ingress on BOTH ends
# (table "diodon_loss": counters ingress_accepted, loss_dropped per side).
#
# Environment: DIODON_TB (default "dd") names the testbed, so several can coexist:
# namespaces "${DIODON_TB}-tx" and "${DIODON_TB}-rx". Needs root.
#
# nftables (table "diodon_guard", family netdev, named counters):
#   rx: egress_dropped (everything rx0 would send), ingress_accepted, loss_dropped
#   tx: ingress_dropped (everything arriving on tx0), egress_sent
# If the kernel lacks the netdev egress hook, the rx guard falls back to an
# inet output chain (locally generated packets; the sender then sees EPERM).
#
# --loss PCT drops PCT % of rx ingress UDP at random (nft numgen; this kernel has no
# sch_netem), in steps of 0.01 %. With --loss-burst LEN the same share is lost in
# bursts of LEN consecutive datagrams instead (a receive-ring overflow, a lost GSO
# super-packet): LEN of every LEN × 100 / PCT, counted from the first (numgen inc). --rate adds a tbf qdisc on tx0; its burst
# (default 256kb) must exceed a GSO super-packet (64 KiB) or tbf segments it and
# may drop parts without telling the sender.
#
# A veth forwards a UDP GSO super-packet (up to 64 datagrams) as one skb, so
# the loss rule would drop ~32 datagrams at once. A real NIC (or the kernel,
# for one without USO) segments before the wire: "up" turns tx0's
# tx-udp-segmentation off (ethtool), so the sender's stack segments in
# software after the qdisc and the rx namespace sees every datagram alone.
set -euo pipefail

TB="${DIODON_TB:-dd}"
NS_TX="${TB}-tx"
NS_RX="${TB}-rx"
IF_TX=tx0
IF_RX=rx0
MAC_TX=02:77:00:00:00:01
MAC_RX=02:77:00:00:00:02
IP4_TX=10.77.0.1
IP4_RX=10.77.0.2
IP6_TX=fd77::1
IP6_RX=fd77::2
TABLE=diodon_guard

die() {
    echo "testbed: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

[[ "$TB" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "DIODON_TB='$TB': use 1-40 of [A-Za-z0-9_.-]"

need_tools() {
    [[ $(id -u) -eq 0 ]] || die "must run as root"
    if ! command -v ip >/dev/null || ! command -v nft >/dev/null || ! command -v tc >/dev/null ||
        ! command -v ethtool >/dev/null; then
        command -v apt-get >/dev/null || die "ip/nft/tc/ethtool missing and no apt-get to install iproute2 nftables ethtool"
        echo "testbed: installing iproute2 nftables ethtool" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y iproute2 nftables ethtool >&2
    fi
}

ns_exists() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qx -- "$1"
}

in_ns() {
    local ns=$1
    shift
    ip netns exec "$ns" "$@"
}

cmd_down() {
    need_tools
    local ns
    for ns in "$NS_TX" "$NS_RX"; do
        # Deleting a namespace destroys its veth end, qdiscs and nft tables.
        if ns_exists "$ns"; then
            ip netns del "$ns"
        fi
    done
}

# percent (e.g. 0.5) -> threshold out of 10000 (e.g. 50)
loss_threshold() {
    awk -v p="$1" 'BEGIN {
        if (p !~ /^[0-9]+(\.[0-9]+)?$/ || p + 0 > 100) exit 1
        printf "%d", p * 100 + 0.5
    }' || die "--loss '$1': expected a percentage 0..100"
}

rx_guard() {
    local loss_rule=$1
    cat <<EOF
table netdev $TABLE {
    counter egress_dropped {}
    counter ingress_accepted {}
    counter loss_dropped {}
    chain ingress {
        type filter hook ingress device "$IF_RX" priority 0; policy accept;
        $loss_rule
        counter name "ingress_accepted"
    }
    chain egress {
        type filter hook egress device "$IF_RX" priority 0; policy accept;
        counter name "egress_dropped" drop
    }
}
EOF
}

rx_guard_fallback() {
    local loss_rule=$1
    cat <<EOF
table netdev $TABLE {
    counter ingress_accepted {}
    counter loss_dropped {}
    chain ingress {
        type filter hook ingress device "$IF_RX" priority 0; policy accept;
        $loss_rule
        counter name "ingress_accepted"
    }
}
table inet $TABLE {
    counter egress_dropped {}
    chain output {
        type filter hook output priority 0; policy accept;
        oifname "$IF_RX" counter name "egress_dropped" drop
    }
}
EOF
}

tx_guard() {
    local with_egress=$1
    echo "table netdev $TABLE {"
    echo "    counter ingress_dropped {}"
    echo "    counter egress_sent {}"
    echo "    chain ingress {"
    echo "        type filter hook ingress device \"$IF_TX\" priority 0; policy accept;"
    echo "        counter name \"ingress_dropped\" drop"
    echo "    }"
    if [[ $with_egress == yes ]]; then
        echo "    chain egress {"
        echo "        type filter hook egress device \"$IF_TX\" priority 0; policy accept;"
        echo "        counter name \"egress_sent\""
        echo "    }"
    fi
    echo "}"
}

# --bidirectional: no guard, only the (optional) random loss on ingress.
bidir_loss() {
    local ns=$1 ifc=$2 loss_rule=$3
    in_ns "$ns" nft -f - <<EOF
table netdev diodon_loss {
    counter ingress_accepted {}
    counter loss_dropped {}
    chain ingress {
        type filter hook ingress device "$ifc" priority 0; policy accept;
        $loss_rule
        counter name "ingress_accepted"
    }
}
EOF
}

cmd_up() {
    local mtu=1500 loss="" loss_burst="" rate="" burst=256kb bidir=no
    while [[ $# -gt 0 ]]; do
        case $1 in
        --mtu) mtu=${2:?--mtu needs a value}; shift 2 ;;
        --loss) loss=${2:?--loss needs a value}; shift 2 ;;
        --loss-burst) loss_burst=${2:?--loss-burst needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --burst) burst=${2:?--burst needs a value}; shift 2 ;;
        --bidirectional) bidir=yes; shift ;;
        -h | --help) usage 0 ;;
        *) die "up: unknown option '$1'" ;;
        esac
    done
    [[ "$mtu" =~ ^[0-9]+$ && $mtu -ge 1280 && $mtu -le 65535 ]] || die "--mtu '$mtu': expected 1280..65535"
    local loss_rule=""
    if [[ -n $loss ]]; then
        local n
        n=$(loss_threshold "$loss")
        # UDP only (IP fragments included: they carry protocol UDP), so the
        # counter is exact for the traffic under test and stray IPv6
        # neighbour discovery on the veth never lands in it.
        loss_rule="meta l4proto udp numgen random mod 10000 < $n counter name \"loss_dropped\" drop"
        if [[ -n $loss_burst ]]; then
            [[ $loss_burst =~ ^[0-9]+$ && $loss_burst -ge 1 ]] || die "--loss-burst '$loss_burst': expected a number of datagrams"
            ((n > 0)) || die "--loss-burst needs a --loss above 0"
            local period=$(((loss_burst * 10000 + n / 2) / n))
            loss_rule="meta l4proto udp numgen inc mod $period < $loss_burst counter name \"loss_dropped\" drop"
        fi
    elif [[ -n $loss_burst ]]; then
        die "--loss-burst needs --loss PCT (the share lost in bursts)"
    fi
    need_tools
    cmd_down
    trap 'echo "testbed: up failed, tearing down" >&2; cmd_down' ERR

    ip netns add "$NS_TX"
    ip netns add "$NS_RX"
    ip link add "$IF_TX" netns "$NS_TX" address "$MAC_TX" mtu "$mtu" type veth \
        peer name "$IF_RX" netns "$NS_RX" address "$MAC_RX" mtu "$mtu"

    local ns ifc ip4 ip6 peer4 peer6 peermac
    for side in tx rx; do
        if [[ $side == tx ]]; then
            ns=$NS_TX ifc=$IF_TX ip4=$IP4_TX ip6=$IP6_TX peer4=$IP4_RX peer6=$IP6_RX peermac=$MAC_RX
        else
            ns=$NS_RX ifc=$IF_RX ip4=$IP4_RX ip6=$IP6_RX peer4=$IP4_TX peer6=$IP6_TX peermac=$MAC_TX
        fi
        in_ns "$ns" sysctl -q -w "net.ipv6.conf.$ifc.accept_ra=0" "net.ipv6.conf.$ifc.router_solicitations=0"
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$ip4/24" dev "$ifc"
        ip -n "$ns" addr add "$ip6/64" dev "$ifc" nodad
        ip -n "$ns" link set "$ifc" up
        # A one-way link cannot answer ARP / neighbour solicitations.
        ip -n "$ns" neigh replace "$peer4" lladdr "$peermac" dev "$ifc" nud permanent
        ip -n "$ns" neigh replace "$peer6" lladdr "$peermac" dev "$ifc" nud permanent
    done

    # Segment GSO super-packets before the link (see the header).
    in_ns "$NS_TX" ethtool -K "$IF_TX" tx-udp-segmentation off
    [[ $(in_ns "$NS_TX" ethtool -k "$IF_TX" | awk '$1 == "tx-udp-segmentation:" {print $2}') == off ]] ||
        die "could not turn tx-udp-segmentation off on $IF_TX"

    local egress=yes
    if [[ $bidir == yes ]]; then
        bidir_loss "$NS_TX" "$IF_TX" "$loss_rule"
        bidir_loss "$NS_RX" "$IF_RX" "$loss_rule"
    elif ! rx_guard "$loss_rule" | in_ns "$NS_RX" nft -f - 2>/dev/null; then
        echo "testbed: no netdev egress hook; rx guard uses an inet output chain" >&2
        egress=no
        rx_guard_fallback "$loss_rule" | in_ns "$NS_RX" nft -f -
    fi
    [[ $bidir == yes ]] || tx_guard "$egress" | in_ns "$NS_TX" nft -f -

    if [[ -n $rate ]]; then
        in_ns "$NS_TX" tc qdisc replace dev "$IF_TX" root tbf rate "$rate" burst "$burst" latency 50ms
    fi
    trap - ERR
    local arrow="==>"
    [[ $bidir == yes ]] && arrow="<=>"
    echo "testbed $TB up: $NS_TX/$IF_TX $IP4_TX $arrow $NS_RX/$IF_RX $IP4_RX (mtu $mtu${loss:+, loss $loss %}${loss_burst:+ in bursts of $loss_burst}${rate:+, rate $rate})"
}

# "side name packets bytes" lines for every named counter of the guard tables.
counters() {
    local side ns
    for side in tx rx; do
        [[ $side == tx ]] && ns=$NS_TX || ns=$NS_RX
        in_ns "$ns" nft list counters 2>/dev/null | awk -v side="$side" -v t="$TABLE" '
            /^table / { intable = ($3 == t) }
            intable && $1 == "counter" { name = $2 }
            intable && $1 == "packets" && name != "" { print side, name, $2, $4; name = "" }'
    done
}

link_field() { # ns ifc field  (mtu | mac)
    local out
    out=$(ip -n "$1" -o link show dev "$2")
    case $3 in
    mtu) awk '{for (i = 1; i < NF; i++) if ($i == "mtu") print $(i + 1)}' <<<"$out" ;;
    mac) awk '{for (i = 1; i < NF; i++) if ($i == "link/ether") print $(i + 1)}' <<<"$out" ;;
    esac
}

addrs() { # ns ifc
    ip -n "$1" -o addr show dev "$2" | awk '$3 == "inet" || ($3 == "inet6" && $4 !~ /^fe80/) {print $4}' | paste -sd' ' -
}

cmd_status() {
    local json=no
    [[ ${1:-} == --json ]] && json=yes
    need_tools
    if ! ns_exists "$NS_TX" || ! ns_exists "$NS_RX"; then
        if [[ $json == yes ]]; then
            printf '{"testbed":"%s","up":false}\n' "$TB"
        else
            echo "testbed $TB: down"
        fi
        return 0
    fi
    local side ns ifc qdisc
    if [[ $json == no ]]; then
        echo "testbed $TB: up"
        for side in tx rx; do
            [[ $side == tx ]] && ns=$NS_TX ifc=$IF_TX || { ns=$NS_RX ifc=$IF_RX; }
            qdisc=$(ip netns exec "$ns" tc qdisc show dev "$ifc" | head -n1)
            echo "ns $side $ns if $ifc mtu $(link_field "$ns" "$ifc" mtu) mac $(link_field "$ns" "$ifc" mac) addr $(addrs "$ns" "$ifc")"
            echo "qdisc $side $qdisc"
        done
        counters | awk '{printf "counter %s %s packets %s bytes %s\n", $1, $2, $3, $4}'
        return 0
    fi
    printf '{"testbed":"%s","up":true,"namespaces":[' "$TB"
    local first=1
    for side in tx rx; do
        [[ $side == tx ]] && ns=$NS_TX ifc=$IF_TX || { ns=$NS_RX ifc=$IF_RX; }
        [[ $first == 1 ]] || printf ','
        first=0
        printf '{"side":"%s","name":"%s","interface":"%s","mtu":%s,"mac":"%s","addresses":[%s]}' \
            "$side" "$ns" "$ifc" "$(link_field "$ns" "$ifc" mtu)" "$(link_field "$ns" "$ifc" mac)" \
            "$(addrs "$ns" "$ifc" | awk '{for (i = 1; i <= NF; i++) printf "%s\"%s\"", (i > 1 ? "," : ""), $i}')"
    done
    printf '],"counters":['
    counters | awk 'BEGIN {n = 0} {printf "%s{\"side\":\"%s\",\"name\":\"%s\",\"packets\":%s,\"bytes\":%s}", (n++ ? "," : ""), $1, $2, $3, $4}'
    printf ']}\n'
}

cmd_exec() {
    local side=${1:-}
    shift || true
    [[ $# -gt 0 ]] || die "exec: usage: exec tx|rx CMD [ARGS...]"
    case $side in
    tx) exec ip netns exec "$NS_TX" "$@" ;;
    rx) exec ip netns exec "$NS_RX" "$@" ;;
    *) die "exec: side must be tx or rx, not '$side'" ;;
    esac
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) shift; cmd_down ;;
status) shift; cmd_status "$@" ;;
exec) shift; cmd_exec "$@" ;;
-h | --help | help) usage 0 ;;
*) usage 1 >&2 ;;
esac

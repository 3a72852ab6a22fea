#!/usr/bin/env bash
# setup.sh — installs what Diodon's build, tests and demo need on a fresh
# Debian machine: a Rust toolchain (rustup, stable, with rustfmt and clippy)
# and, when run as root, the system tools the software diode uses
# (iproute2, nftables, ethtool) — all the demo needs. With
# DIODON_SETUP=tests (scripts/test.sh and scripts/package.sh set it) also
# what the tests use: what the trial harness compares against
# (netcat-openbsd, pydiode in a venv) and the tap's tests use (tcpreplay,
# tcpdump, softflowd, nfdump, python3-scapy) and the package's checks use
# (systemd-analyze, man) and the dashboard's test uses (chromium), and
# for the Kafka tests a JRE and Maven, with which it fetches the Kafka
# broker into its cache (scripts/kafka.sh fetch). The Kafka client
# (rdkafka) builds librdkafka from source: cmake, and libcurl's headers,
# which librdkafka 2.12 includes even when built without curl.
# Idempotent: installs only what is missing.
# Source it (`. scripts/setup.sh`) to get cargo on PATH in the calling shell.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1 && [[ -f "$HOME/.cargo/env" ]]; then
    # shellcheck disable=SC1091
    source "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: installing Rust (rustup, stable)" >&2
    if ! command -v curl >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
        apt-get update -qq && apt-get install -y -qq curl ca-certificates >/dev/null
    fi
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    # shellcheck disable=SC1091
    source "$HOME/.cargo/env"
fi
if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi

if [[ $(id -u) -eq 0 ]]; then
    missing=()
    # What the software diode and the build need (the demo needs no more).
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v nft >/dev/null 2>&1 || missing+=(nftables)
    command -v ethtool >/dev/null 2>&1 || missing+=(ethtool)
    command -v cc >/dev/null 2>&1 || missing+=(build-essential)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    # The Kafka client: rdkafka's cmake-build compiles librdkafka.
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    compgen -G '/usr/include/*/curl/curl.h' >/dev/null || [[ -f /usr/include/curl/curl.h ]] ||
        missing+=(libcurl4-openssl-dev)
    if [[ ${DIODON_SETUP:-} == tests ]]; then
        # The trial harness compares against OpenBSD netcat and labels its plots.
        command -v nc.openbsd >/dev/null 2>&1 || missing+=(netcat-openbsd)
        [[ -d /usr/share/fonts/truetype/dejavu ]] || missing+=(fonts-dejavu-core)
        # The tap's end-to-end tests and benchmark: replay traces, capture, a
        # flow exporter and its collector, scapy for hand-made traces.
        command -v tcpreplay >/dev/null 2>&1 || missing+=(tcpreplay)
        command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
        command -v softflowd >/dev/null 2>&1 || missing+=(softflowd)
        command -v nfcapd >/dev/null 2>&1 || missing+=(nfdump)
        command -v bridge >/dev/null 2>&1 || missing+=(iproute2)
        command -v jq >/dev/null 2>&1 || missing+=(jq)
        /usr/bin/python3 -c 'import scapy' >/dev/null 2>&1 || missing+=(python3-scapy)
        # The package's checks: unit verification and the man pages it names.
        command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
        command -v man >/dev/null 2>&1 || missing+=(man-db)
        # The dashboard's test renders the page in a real headless browser.
        command -v chromium >/dev/null 2>&1 || missing+=(chromium)
        # The Kafka tests run a real broker (scripts/kafka.sh): Java 17+
        # and the Maven client that fetches it from Maven Central.
        command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
        command -v mvn >/dev/null 2>&1 || missing+=(maven)
    fi
    if ((${#missing[@]})); then
        echo "setup: apt-get install ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if [[ ${DIODON_SETUP:-} == tests ]]; then
        # ... and the trial harness against pydiode (PyPI, redundancy 1 and 2).
        "$(dirname "${BASH_SOURCE[0]}")/install-pydiode.sh" ||
            echo "setup: WARNING: pydiode could not be installed; trial tests with pydiode will fail under CI" >&2
        # ... and the Kafka broker the Kafka tests start (a no-op once cached).
        "$(dirname "${BASH_SOURCE[0]}")/kafka.sh" fetch ||
            echo "setup: WARNING: Kafka could not be fetched; the Kafka tests will fail under CI" >&2
    fi
fi

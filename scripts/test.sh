#!/usr/bin/env bash
# test.sh — the test command: installs what is missing (scripts/setup.sh),
# then runs every test of the workspace. As root the integration tests build
# real software diodes in network namespaces; without root they skip with a
# message (with CI=true they fail instead of skipping).
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests' tools too (trial peers, tap tools, chromium, systemd-analyze).
export DIODON_SETUP=tests
# shellcheck disable=SC1091
source scripts/setup.sh
exec cargo test --workspace "$@"

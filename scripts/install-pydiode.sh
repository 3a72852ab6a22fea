#!/usr/bin/env bash
# install-pydiode.sh — installs pydiode (PyPI, pinned) for the trial
# harness's comparison runs: a virtual environment in $PYDIODE_VENV
# (default /opt/diodon-pydiode) and a `pydiode` link in /usr/local/bin, so
# `ip netns exec NS pydiode ...` finds it. Needs root. Idempotent: does
# nothing when `pydiode` already runs. Installs python3 and python3-venv
# with apt-get when no Python with the venv module is there.
set -euo pipefail

PYDIODE_VERSION=${PYDIODE_VERSION:-1.0.0}
VENV=${PYDIODE_VENV:-/opt/diodon-pydiode}

if command -v pydiode >/dev/null 2>&1 && pydiode --help >/dev/null 2>&1; then
    exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "install-pydiode: must run as root" >&2; exit 1; }

py=$(command -v python3 || true)
if [[ -z $py ]] || ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "install-pydiode: apt-get install python3 python3-venv" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
    py=/usr/bin/python3
fi
echo "install-pydiode: pydiode $PYDIODE_VERSION into $VENV" >&2
"$py" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "pydiode==$PYDIODE_VERSION"
ln -sf "$VENV/bin/pydiode" /usr/local/bin/pydiode
pydiode --help >/dev/null

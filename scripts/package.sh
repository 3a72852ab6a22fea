#!/usr/bin/env bash
# package.sh — builds the Debian package of the `diodon` command
# (target/debian/diodon_VERSION_ARCH.deb) and checks it: the files it must
# install are in it, and its systemd units verify against the binary and
# man pages it ships. Installs cargo-deb if missing.
#
#   scripts/package.sh            # build and check
#   dpkg -i target/debian/diodon_*.deb
#
# Then: cp /usr/share/doc/diodon/examples/recv.toml.example /etc/diodon/NAME.toml,
# edit it, `systemctl enable --now diodon-recv@NAME`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests' tools too (trial peers, tap tools, chromium, systemd-analyze).
export DIODON_SETUP=tests
# shellcheck disable=SC1091
source scripts/setup.sh
CARGO_DEB_VERSION=3.8.0

if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "package: installing cargo-deb $CARGO_DEB_VERSION" >&2
    cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi

target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --release -p diodon
assets="$target/release/assets"
rm -rf "$assets" && mkdir -p "$assets/completions"
"$target/release/diodon" man "$assets/man1"
gzip -9n "$assets"/man1/*.1
"$target/release/diodon" completions bash >"$assets/completions/diodon"
"$target/release/diodon" completions zsh >"$assets/completions/_diodon"
"$target/release/diodon" completions fish >"$assets/completions/diodon.fish"

cargo deb -p diodon --no-build
deb=$(ls -t "$target"/debian/diodon_*.deb | head -n1)
echo "package: $deb"

# What it must hold.
contents=$(dpkg-deb --contents "$deb" | awk '{print $NF}')
missing=0
for want in ./usr/bin/diodon \
    ./lib/systemd/system/diodon-recv@.service ./lib/systemd/system/diodon-send@.service \
    ./lib/systemd/system/diodon-sync@.service ./usr/share/man/man1/diodon-sync.1.gz \
    ./usr/share/man/man1/diodon.1.gz ./usr/share/man/man1/diodon-recv.1.gz \
    ./usr/share/man/man1/diodon-send.1.gz ./usr/share/man/man1/diodon-tunnel-send.1.gz \
    ./usr/share/bash-completion/completions/diodon ./usr/share/zsh/vendor-completions/_diodon \
    ./usr/share/fish/vendor_completions.d/diodon.fish \
    ./usr/share/doc/diodon/examples/recv.toml.example ./usr/share/doc/diodon/README.md; do
    if ! grep -qxF "$want" <<<"$contents"; then
        echo "package: MISSING $want" >&2
        missing=1
    fi
done
[[ $missing -eq 0 ]] || exit 1
dpkg-deb --field "$deb" Package Version Architecture Depends

# Unpacked, the units verify against the binary and man pages in the package.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/diodon" --version
for unit in "$root"/lib/systemd/system/*@.service; do
    inst="$root/$(basename "${unit/@.service/@pkg.service}")"
    sed "s|/usr/bin/diodon|$root/usr/bin/diodon|" "$unit" >"$inst"
    out=$(MANPATH="$root/usr/share/man" systemd-analyze verify --man=yes "$inst" 2>&1) || {
        echo "$out" >&2
        exit 1
    }
    if [[ -n $out ]]; then
        echo "package: $(basename "$unit"): $out" >&2
        exit 1
    fi
    systemd-analyze security --offline=true --no-pager "$inst" | tail -n1
done
echo "package: OK"

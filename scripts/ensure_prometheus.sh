#!/usr/bin/env bash
# Make sure a Prometheus server binary is at hand, from Debian's package (tests/reput scrapes a
# running reput job with a real Prometheus). Idempotent: uses `prometheus` on PATH, or the one
# unpacked before into .cache/prometheus/. Otherwise downloads Debian's package and unpacks it
# there (nothing installed, no service started); refreshing stale package lists needs root.
# Prints the binary's path on success.
set -euo pipefail
cd "$(dirname "$0")/.."
unpacked=.cache/prometheus/usr/bin/prometheus
if command -v prometheus >/dev/null 2>&1; then
    command -v prometheus
    exit 0
fi
if [[ -x "$unpacked" ]]; then
    echo "$PWD/$unpacked"
    exit 0
fi
download=.cache/prometheus-deb
rm -rf "$download" && mkdir -p "$download"
fetch() { (cd "$download" && apt-get download -q prometheus >&2); }
# A candidate since replaced on the mirror answers 404: refresh the lists once and try again.
if ! fetch; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "ensure_prometheus: cannot download Debian's prometheus package; as root run:" \
            "apt-get update" >&2
        exit 1
    fi
    apt-get update -q >&2
    fetch
fi
tmp=.cache/prometheus.tmp.$$
rm -rf "$tmp"
trap 'rm -rf "$tmp" "$download"' EXIT
dpkg-deb -x "$download"/prometheus_*.deb "$tmp"
rm -rf .cache/prometheus
mv "$tmp" .cache/prometheus
echo "$PWD/$unpacked"

#!/usr/bin/env bash
# Make sure a headless Chromium and its WebDriver are installed, from Debian's packages
# (tests/dashboard drives the dashboard in a real browser). Idempotent: does nothing when
# both are on PATH. Installing needs root (apt-get); a non-root user gets the command to run.
# Prints the two paths on success, one per line: chromium, then chromedriver.
set -euo pipefail

find_browser() { command -v chromium || command -v chromium-browser || true; }
find_driver() { command -v chromedriver || true; }

if [[ -z "$(find_browser)" || -z "$(find_driver)" ]]; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "ensure_chromium: chromium or chromedriver missing; run as root:" \
            "apt-get install -y --no-install-recommends chromium chromium-driver" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_install() { apt-get install -y -q --no-install-recommends chromium chromium-driver >&2; }
    # The package lists may be missing or stale (a candidate that was since replaced on the
    # mirror answers 404): refresh them once and try again.
    if ! apt_install; then
        apt-get update -q >&2
        apt_install
    fi
fi
browser="$(find_browser)"
driver="$(find_driver)"
if [[ -z "$browser" || -z "$driver" ]]; then
    echo "ensure_chromium: installed, but chromium or chromedriver is still not on PATH" >&2
    exit 1
fi
echo "$browser"
echo "$driver"

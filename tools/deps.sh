#!/usr/bin/env bash
# Installs, from Debian's archive, whatever the build and tests need and this
# machine lacks. Safe to run again: it does nothing when everything is present.
#
#   tools/deps.sh            build + test dependencies, and the position-
#                            independent Abseil libbfc_alloc.so links in
#                            (tools/absl-pic.sh, built once per version)
#   tools/deps.sh --browser  also Chromium (the viewer's browser test)
#   tools/deps.sh --clang    also clang's sanitizer/fuzzer runtimes
set -euo pipefail

packages=(cmake g++ make libabsl-dev dpkg-dev libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev zlib1g-dev pkg-config)
for arg in "$@"; do
  case "$arg" in
    --browser) packages+=(chromium) ;;
    --clang) packages+=(clang libclang-rt-14-dev) ;;
    *) echo "deps.sh: unknown option '$arg' (accepted: --browser, --clang)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps.sh: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Abseil that libbfc_alloc.so carries inside (only for the plain build
# deps; the --clang / --browser calls add packages only).
if [ $# -eq 0 ]; then
  bash "$(dirname "$0")/absl-pic.sh"
fi

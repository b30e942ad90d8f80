#!/usr/bin/env bash
# For a machine without network (the GPU machine): downloads, here, the Debian
# packages lowbit builds against that such a machine may lack (PCRE2's headers and
# library; cpp-httplib, nlohmann-json and OpenSSL's headers for lowbit serve), into
# .deps/debs. On the offline machine, `scripts/offline-deps.sh unpack`
# extracts them into .deps/root (never into /) and prints the CMAKE_PREFIX_PATH to
# pass; scripts/gpu-check.sh does that by itself when pcre2.h is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libcpp-httplib-dev libcpp-httplib0.11 nlohmann-json3-dev libssl-dev)
if [ "${1:-download}" = unpack ]; then
  mkdir -p .deps/root
  for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
  echo "$PWD/.deps/root/usr"
  exit 0
fi
mkdir -p .deps/debs
(cd .deps/debs && apt-get download "${packages[@]}")
ls .deps/debs

#!/bin/sh
# Installs the Debian packages moefast needs to build and test, when missing.
# As root it runs apt-get; otherwise it names the packages and stops.
set -u
# `deps.sh test` adds what only the tests need: Open MPI (tests/cli_mpi.sh;
# the MPI build of the CLI is on when its development files are there).
need="gcc make pkg-config libpcre2-dev libjansson-dev libssl-dev libmicrohttpd-dev libcurl4-openssl-dev"
[ "${1:-}" = test ] && need="$need libopenmpi-dev openmpi-bin"
missing=""
for p in $need; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ]; then
  echo "deps: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq $missing >/dev/null || {
    echo "deps: apt-get install$missing failed" >&2; exit 1; }
else
  echo "deps: missing Debian packages:$missing" >&2
  echo "deps: run as root:  apt-get install$missing" >&2
  exit 1
fi

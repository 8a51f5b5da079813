#!/usr/bin/env bash
# lab/stress/storm.sh: a connection storm against `kdart serve --max-clients 32` (manual runs; not part of
# the tests or CI).  Builds storm.c next to this script into a temporary folder, starts the built service
# (build/kdart, or $KDART_BIN) on a socket in that folder, waits until it answers, runs the storm and
# prints the service's counters before stopping it.
#   usage: lab/stress/storm.sh [SECONDS=60] [LOOPS=8] [MAX_CLIENTS=32]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
seconds=${1:-60} loops=${2:-8} max=${3:-32}
kdart="${KDART_BIN:-$root/build/kdart}"
tmp="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
cc -O2 -std=c11 -pthread -o "$tmp/storm" "$root/lab/stress/storm.c"
export KDART_CACHE_DIR="$tmp/cache" KDART_KERNEL_DIR="$root/kernel_src"
sock="$tmp/kdart.sock"
echo "storm.sh: $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, $(uname -r); $("$kdart" --version 2>&1 | head -1)"
echo "storm.sh: kdart serve --socket SOCK -j1 --max-clients $max"
"$kdart" serve --socket "$sock" -j1 --max-clients "$max" 2>"$tmp/serve.err" &
pid=$!
"$tmp/storm" --socket "$sock" --wait-ready
rc=0
"$tmp/storm" --socket "$sock" --pid "$pid" --loops "$loops" --seconds "$seconds" || rc=$?
echo "storm.sh: the service's counters after the storm:"
"$kdart" serve --status --socket "$sock" | grep -E '^(clients|connections|rejected|requests|errors)=' | sed 's/^/  /'
"$kdart" serve --stop --socket "$sock" --timeout 30
wait "$pid"
pid=""
echo "storm.sh: storm exit $rc (0: every ping answered OK and a request served after)"
exit $rc

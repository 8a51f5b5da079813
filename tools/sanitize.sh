#!/usr/bin/env bash
# tools/sanitize.sh: builds kdart with AddressSanitizer and
# UndefinedBehaviorSanitizer (KDART_SANITIZE=address,undefined) in
# build-sanitize/ (or $KDART_BUILD_DIR) and runs the CPU test suites there
# (ctest label "cpu"); extra arguments go to ctest, e.g.
#   tools/sanitize.sh -E test_compile     # skip the NVRTC compile suite
#   tools/sanitize.sh -R test_cli         # one suite
# A finding fails the run: undefined behaviour halts the process that met
# it (halt_on_error) as an address error does, and the CLI that test_cli
# and test_service start inherits the same settings.  Leaks are checked at
# every process's exit.
#
# NVRTC and nvJitLink are closed-source libraries, not instrumented;
# tests/lsan.supp is where a leak inside them would be suppressed (by their
# names, never kdart's); today it needs no entry.
#
# For ThreadSanitizer, configure with -DKDART_SANITIZE=thread and run with
# TSAN_OPTIONS=suppressions=tests/tsan.supp (see that file).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bdir="${KDART_BUILD_DIR:-$root/build-sanitize}"
KDART_BUILD_DIR="$bdir" KDART_CMAKE_ARGS="-DKDART_SANITIZE=address,undefined ${KDART_CMAKE_ARGS:-}" \
    "$root/tools/build.sh"
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# abort_on_error: a report ends in SIGABRT, which ctest and the suites'
# child-status checks see as a failure however the process was started.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
(cd "$bdir" && ctest -L cpu --output-on-failure --timeout 3000 -j2 "$@")

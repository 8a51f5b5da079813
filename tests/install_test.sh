#!/usr/bin/env bash
# tests/install_test.sh SOURCE_DIR BUILD_DIR: the C install as a user meets it.
#
# Installs the build into a temporary prefix, builds examples/embed against
# it through find_package (shared and static) and through pkg-config, moves
# the prefix, and checks that everything still runs from the new place:
# the library finds its kernels relative to itself (and never in the source
# or build tree), KDART_KERNEL_DIR still overrides, the installed CLI sees
# the example's entry, the header compiles with the installed include
# directory alone, and the build tree's library keeps reading the source
# tree.  Needs no GPU.  Each check prints one "ok"/"FAIL" line; the last
# line counts them.
set -uo pipefail
src="$(cd "$1" && pwd)"
build="$(cd "$2" && pwd)"
# A sanitizer build's library needs the sanitizer's runtime in every program
# that links it: that is no install a user gets, so skip (ctest code 77).
if grep -q '^KDART_SANITIZE:STRING=.' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "skipped: $build is a sanitizer build"
    exit 77
fi
tmp="$(mktemp -d /tmp/kdart-install.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cuda="${CUDA_HOME:-/usr/local/cuda}"
export KDART_CACHE_DIR="$tmp/cache"
unset KDART_KERNEL_DIR KDART_SERVICE KDART_ARCH
passed=0 failed=0
check() { # check NAME COMMAND...: runs COMMAND; `has` checks read the last other command's output
    local name="$1"
    shift
    if "$@" >"$tmp/cur" 2>&1; then
        echo "ok    $name"
        passed=$((passed + 1))
    else
        echo "FAIL  $name"
        sed 's/^/      /' "$tmp/cur" | tail -20
        [ "$1" = has ] && sed 's/^/      | /' "$tmp/last" | tail -20
        failed=$((failed + 1))
    fi
    [ "$1" = has ] || mv "$tmp/cur" "$tmp/last"
}
has() { grep -q -- "$1" "$tmp/last"; }

check "cmake --install into a fresh prefix" cmake --install "$build" --prefix "$tmp/p1"
for f in include/kdart.h include/dlpack/dlpack.h lib/libkdart.so lib/libkdart.a lib/cmake/kdart/kdartConfig.cmake \
    lib/pkgconfig/kdart.pc lib/pkgconfig/kdart-static.pc share/kdart/kernel_src/bwd_intra.cuh bin/kdart share/doc/kdart/LICENSE; do
    check "installed $f" test -e "$tmp/p1/$f"
done
check "SONAME is versioned" bash -c "readelf -d '$tmp/p1/lib/libkdart.so' | grep -q 'SONAME.*libkdart.so.[0-9]'"
check "nothing installed names the source or build tree" \
    bash -c "! grep -rIl -e '$src' -e '$build' '$tmp/p1' --exclude-dir=doc"

# The header needs nothing but the installed include directory.
printf '#include <kdart.h>\nint main(void) { return KDART_VERSION_MAJOR < 0; }\n' >"$tmp/hdr.c"
check "kdart.h compiles with -I PREFIX/include" cc -std=c11 -H -I"$tmp/p1/include" -c "$tmp/hdr.c" -o "$tmp/hdr.o"
check "  ... taking dlpack.h from the prefix" has "^\.* $tmp/p1/include/dlpack/dlpack.h"

check "examples/embed configures with find_package (shared)" \
    cmake -S "$src/examples/embed" -B "$tmp/eb" -DCMAKE_PREFIX_PATH="$tmp/p1"
check "examples/embed builds (shared)" cmake --build "$tmp/eb"
check "examples/embed configures with find_package (static)" \
    cmake -S "$src/examples/embed" -B "$tmp/es" -DCMAKE_PREFIX_PATH="$tmp/p1" -DKDART_EMBED_STATIC=ON
check "examples/embed builds (static)" cmake --build "$tmp/es"
check "pkg-config finds kdart" env PKG_CONFIG_PATH="$tmp/p1/lib/pkgconfig" pkg-config --exists --print-errors kdart
check "examples/embed builds with pkg-config" bash -c "cc -std=c11 '$src/examples/embed/embed.c' -o '$tmp/ep' \
    \$(PKG_CONFIG_PATH='$tmp/p1/lib/pkgconfig' pkg-config --cflags --libs kdart)"
check "examples/embed builds with pkg-config kdart-static" bash -c "cc -std=c11 '$src/examples/embed/embed.c' \
    -o '$tmp/eps' \$(PKG_CONFIG_PATH='$tmp/p1/lib/pkgconfig' pkg-config --cflags --libs kdart-static)"
check "  ... and needs no libkdart.so" bash -c "! readelf -d '$tmp/eps' | grep -q 'NEEDED.*libkdart'"

# Move the prefix: nothing may still point at p1.
mv "$tmp/p1" "$tmp/p2"
p2="$tmp/p2"
lib="$p2/lib:$cuda/lib64"
check "embed (shared) runs from the moved prefix" env LD_LIBRARY_PATH="$lib" "$tmp/eb/kdart_embed"
check "  ... and read the moved prefix's kernels" has "kernel dir $p2/share/kdart/kernel_src"
check "  ... and compiled for sm_100a" has "prepared   bwd_intra"
check "embed (pkg-config) runs from the moved prefix" env LD_LIBRARY_PATH="$lib" "$tmp/ep"
check "  ... and hit the cache" has "from cache"
check "embed (pkg-config kdart-static) runs with KDART_KERNEL_DIR" \
    env KDART_KERNEL_DIR="$p2/share/kdart/kernel_src" LD_LIBRARY_PATH="$cuda/lib64" "$tmp/eps"
check "  ... and hit the cache" has "from cache"
check "the moved CLI lists the entry" "$p2/bin/kdart" ls
check "  ... one bwd_intra sm_100a entry" has "bwd_intra .*sm_100a"
check "the moved CLI reads the moved kernels" "$p2/bin/kdart" stats
check "  ... kernel dir" has "kernel dir *$p2/share/kdart/kernel_src"
check "KDART_KERNEL_DIR overrides the installed kernels" \
    bash -c "! env KDART_KERNEL_DIR='$tmp/nowhere' LD_LIBRARY_PATH='$lib' '$tmp/eb/kdart_embed' bwd_intra K=64 sm_100a"
check "  ... and says where it looked" has "$tmp/nowhere"
check "embed (static) runs with KDART_KERNEL_DIR" \
    env KDART_KERNEL_DIR="$p2/share/kdart/kernel_src" "$tmp/es/kdart_embed" bwd_dhu K=64 sm_100a
check "the build tree's CLI reads the source tree" "$build/kdart" stats
check "  ... kernel dir" has "kernel dir *$src/kernel_src"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

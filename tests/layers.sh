#!/usr/bin/env bash
# tests/layers.sh: checks that the library's layers point one way
# (docs/design.md, "Layers"): every #include of a kdart header, in every
# source file of a layer, names a header of that layer or of one it may
# stand on.  The build's include paths already keep the store from seeing
# the core; this check also covers what a shared include path would let
# through (the core naming the service) and the programs above the
# library (the CLI, the check harness, the Python extension), which may
# use only the public header.
#
# Usage: layers.sh [SOURCE_ROOT].  Exits 0 when every include is allowed,
# 1 with one line per violation otherwise.
set -u
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root" || exit 2

# Where each header lives, by file name: an include names a header by its
# file name (the include path finds the folder), so the name says whose it is.
header_dirs="runtime/include runtime/base cache runtime/core runtime/service kernel_src tests/check tests/ref"
declare -A owner
for d in $header_dirs; do
  for f in "$d"/*; do
    case "$f" in *.h | *.cuh | *.inc) ;; *) continue ;; esac
    name="${f##*/}"
    if [ -n "${owner[$name]:-}" ]; then
      echo "layers.sh: header name $name is in both ${owner[$name]} and $d: includes of it are ambiguous"
      exit 1
    fi
    owner[$name]=$d
  done
done

bad=0
# rule "FILES" "ALLOWED FOLDERS": FILES is a find(1) start point and name
# pattern; each of its files may include kdart headers only from ALLOWED.
rule() {
  local where="$1" allowed=" $2 " files n=0
  files=$(find $where -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) 2>/dev/null | sort)
  for f in $files; do
    n=$((n + 1))
    # "#  include <x>" or "x": the name after the last slash
    while IFS=: read -r line inc; do
      name="${inc##*/}"
      dir="${owner[$name]:-}"
      [ -z "$dir" ] && continue # libc, SQLite, libuv, CUDA, Check, dlpack
      case "$allowed" in *" $dir "*) continue ;; esac
      echo "$f:$line: includes $inc, a header of $dir (allowed here: $2)"
      bad=1
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" |
             sed -E 's/^([0-9]+):[^<"]*[<"]([^>"]*)[>"].*/\1:\2/')
  done
  if [ "$n" -eq 0 ]; then
    echo "layers.sh: no sources at $where: the tree moved; update this check"
    bad=1
  fi
}

pub=runtime/include
# The library, bottom up.
rule runtime/base "runtime/base $pub"
rule cache "cache runtime/base $pub"
rule runtime/core "runtime/core cache runtime/base kernel_src $pub"
rule runtime/service "runtime/service runtime/core cache runtime/base $pub"
rule runtime/open.c "runtime/service runtime/core cache runtime/base $pub"
# Above the library: the public header (and the kernels' launch ABI and
# the float64 reference for the check harness).
rule tests/check "tests/check tests/ref kernel_src $pub"
rule tools "tests/check $pub"
rule python "$pub"

if [ "$bad" -ne 0 ]; then
  echo "layers.sh: includes break the layering (docs/design.md, \"Layers\")"
  exit 1
fi
echo "layers.sh: every include points down"

#!/usr/bin/env bash
# lab/calls/2026-12-05-n.sh (OUT set; carry build-cta1 = exp/cta1's build with its probe trees in
# build-cta1/probes/NAME/k; about 2 minutes warm): where the one-CTA fused kernel's time goes: the fused
# kernel in the bare whole call at B2 T8192 H32 (whole_ab.py's profile) for the full intra terms, without the
# diagonal block, without the blocks off the diagonal, without dg's suffix sums, and without all three.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
for n in full nodiag nooff nofold none; do
  KDART_KERNEL_DIR=$R/build/probes/$n/k KDART_CACHE_DIR=/tmp/cp$n PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/whole_ab.py b2_t8192_h32 2>&1 | grep -E "bare (C|profile)" | sed "s|^|$n |"
done | tee $O/probes.txt; el

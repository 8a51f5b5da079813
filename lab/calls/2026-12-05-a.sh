#!/usr/bin/env bash
# lab/calls/2026-12-05-a.sh (OUT set; carry build-gpu as build, .whl): where fused-post's time goes.  The
# experiment's kernels with parts of the post step cut (results wrong on purpose: timing only), whole_ab at
# B2 T8192 H32: full, no post work at all (the POST template alone), no finish (the head's last-CTA sums),
# no dq/dk rows.
set -u
. lab/calls/common.sh
patch -s -p1 < lab/experiments/fused-post/fused_post.diff || { echo "diff does not apply"; exit 3; }
for v in full noop nofinish nodqk; do rm -rf /tmp/v_$v && cp -a kernel_src /tmp/v_$v; done
sed -i 's/    const kdart_bwd_post_params &q = p.post;/    const kdart_bwd_post_params \&q = p.post;\n    if (p.T >= 0) return;/' /tmp/v_noop/wy_dqkg.cuh
sed -i 's/    finish(q, hv, p.rows, tickets, s_part, s_last, rows);/    (void)tickets;/' /tmp/v_nofinish/wy_dqkg.cuh
sed -i 's/        dqk_rows<IO, C, true>(q, [01], hv, rows);//' /tmp/v_nodqk/wy_dqkg.cuh
grep -c "p.T >= 0) return" /tmp/v_noop/wy_dqkg.cuh; grep -c "(void)tickets" /tmp/v_nofinish/wy_dqkg.cuh; grep -c "dqk_rows<IO, C, true>(q" /tmp/v_nodqk/wy_dqkg.cuh
export KDART_LIBRARY=$R/build/libkdart.so
for i in 1 2; do
  for v in full noop nofinish nodqk; do
    KDART_KERNEL_DIR=/tmp/v_$v KDART_CACHE_DIR=/tmp/cv_$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
      timeout 100 python3 lab/calls/whole_ab.py b2_t8192_h32 2>&1 | grep -E "bare C call|bare profile" | sed "s|^|$v |"
  done
done | tee $O/ab.txt; el

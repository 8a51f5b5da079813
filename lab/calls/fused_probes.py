# lab/calls/fused_probes.py: timing probes of the fused wy_dqkg + bwd_intra kernel (results WRONG on purpose;
# never tests, only wy_intra_bench's fused column).  Usage: fused_probes.py SRC OUTROOT: copies kernel SRC to
# OUTROOT/{p1,p2,p3}/k and edits them.
#   p1: the value tiles (do, dv, v_new) copied only in the first K block (the others compute on stale
#       tiles): what reading them once per chunk could save (the 512-thread K-block-pair structure).
#   p2: no fp32 round trip of dq, dk, dg between the wy part and the intra part (the wy part does not store
#       them, the intra part reads zeros and prefetches nothing): what keeping them on chip could save.
#   p3: both.
#   p4: the intra part's phase B (cross-block terms, tf32 mma) skipped (behind a test the compiler cannot
#       fold: p.T == -7): what phase B costs.
#   p5: the intra part's phase C (the diagonal blocks, SIMT) skipped the same way.
#   p7: p2's first half: the wy part does not store dq, dk, dg (the intra part reads what is there).
#   p8: p2's second half: the intra part reads zeros for dq_in, dk_in, dg_in and prefetches nothing (the wy
#       part stores them).
#   p9: (landed on main, so no longer made here) the wy part's first stores of dq, dk, dg, dA, dAqk with an
#       L2 evict_last policy (they are read back within microseconds; up to 264 CTAs x 96 KB = 25 MB in
#       flight, half the L2): whether the round trip's lines reach DRAM today.
#   p10: (results right; measured: no better at B2, slower on the packed row) the intra part reads the round
#       trip back with an evict_first policy (on top of p9, which is main's now).
#   p11: (results right; measured: +4%) phase C makes each diagonal exp2 twice, the row side's Aq, Ak from
#       one and the column side's Ct from the other, as a kernel with the intra terms in the wy part's
#       fragment layout would have to (the row and column sides of one E on different lanes): what doubling
#       phase C's MUFU work costs today's kernel.  The second argument has a zero the compiler cannot see
#       added (p.T == -7 ? 1 : 0), so that ptxas cannot merge the two; volatile alone did not stop it.
#   p6: (a candidate, results right) the fused body's phase B prefetch of dq_in, dk_in, dg_in left out: the
#       wy part has just written those lines, so they are in L2 already.
import shutil
import sys


def edit(path, pairs):
    s = open(path).read()
    for a, b in pairs:
        assert a in s, (path, a)
        s = s.replace(a, b)
    open(path, "w").write(s)


def p1(d):
    pairs = [("mbar_expect(bar, (kb == 0 ? 6u : 5u) * Tr::kTile);", "mbar_expect(bar, (kb == 0 ? 6u : 2u) * Tr::kTile);")]
    for i in range(3):
        a = "tma_tile<3>(d0 + %d * Tr::kTile, &p.tm[%d], x, y, z, bar, again);" % (i, i)
        pairs.append((a, "if (kb == 0) " + a))
    for i, n in enumerate(["dout", "dv", "v_new"]):
        a = "load_tile<TAIL>(st + %d * 4096, io(p.%s) + ov" % (i, n)
        pairs.append((a, "if (kb == 0) " + a))
    edit(d + "/wy_dqkg.cuh", pairs)


def p7(d):
    edit(d + "/wy_dqkg.cuh", [
        ("st2<TAIL, !INTRA>(p.dq + oK", "if (!INTRA) st2<TAIL, !INTRA>(p.dq + oK"),
        ("st2<TAIL, !INTRA>(p.dk + oK", "if (!INTRA) st2<TAIL, !INTRA>(p.dk + oK"),
        ("if (r != last) st2<TAIL, !INTRA>(p.dg", "if (r != last && !INTRA) st2<TAIL, !INTRA>(p.dg"),
        ("p.dg[oK + last * strG + cg] = sLast[tid] + dgk;", "if (!INTRA) p.dg[oK + last * strG + cg] = sLast[tid] + dgk;")])


def p8(d):
    edit(d + "/bwd_intra.cuh", [
        ("{ return CG ? __ldcg(g) : __ldg(g); }", "{ return CG ? 0.f : __ldg(g); }"),
        ("    return CG ? __ldcg(v) : __ldg(v);", "    return CG ? make_float4(0.f, 0.f, 0.f, 0.f) : __ldg(v);")])
    p6(d)


def p10(d):
    edit(d + "/bwd_intra.cuh", [
        ("template <bool CG = false> __device__ __forceinline__ float ldg1(const float *g) { return CG ? __ldcg(g) : __ldg(g); }",
         "template <bool CG = false> __device__ __forceinline__ float ldg1(const float *g) { if (!CG) return __ldg(g); float x; asm volatile(\"{ .reg .b64 pl; "
         "createpolicy.fractional.L2::evict_first.b64 pl, 1.0; ld.global.cg.L2::cache_hint.f32 %0, [%1], pl; }\" "
         ": \"=f\"(x) : \"l\"(g)); return x; }"),
        ("    return CG ? __ldcg(v) : __ldg(v);",
         "    if (!CG) return __ldg(v); float4 x; asm volatile(\"{ .reg .b64 pl; createpolicy.fractional.L2::evict_first.b64 pl, 1.0; ld.global.cg.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, "
         "[%4], pl; }\" : \"=f\"(x.x), \"=f\"(x.y), \"=f\"(x.z), \"=f\"(x.w) : \"l\"(g)); return x;")])


def p2(d):
    p7(d)
    p8(d)


def skip_phase(d, title):
    edit(d + "/bwd_intra_body.inc", [("/* ---------------- %s ---------------- */\n        {" % title,
                                      "/* ---------------- %s ---------------- */\n        if (p.T == -7) {" % title)])


def p6(d):
    edit(d + "/bwd_intra_body.inc", [
        ("the loads phase A waits for: 2.5% at K = 128, 1% at K = 64. */\n            {",
         "the loads phase A waits for: 2.5% at K = 128, 1% at K = 64. */\n            if constexpr (!FUSED) {")])


def p4(d):
    skip_phase(d, "phase B: cross-block terms, tf32 mma.sync")


def p5(d):
    skip_phase(d, "phase C: diagonal blocks + per-row outputs")


def p11(d):
    edit(d + "/bwd_intra_body.inc", [
        ("""                        const float e = ex2(gr - gs[s]);
                        const float a1 = aqrow[s ^ dasw(r)] * e;
                        const float a2 = akrow[s ^ dasw(r)] * e;
                        const float kv = unpack_io<IO>(ksp[s >> 1], s & 1);
                        aq = fmaf(a1, kv, aq);
                        ak = fmaf(a2, kv, ak);
                        ct[s] = fmaf(a1, qr, ct[s]);
                        ct[s] = fmaf(a2, bkr, ct[s]);""",
         """                        float e, e2;
                        asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(gr - gs[s]));
                        asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(e2) : "f"((gr - gs[s]) + (p.T == -7 ? 1.f : 0.f)));
                        const float a1 = aqrow[s ^ dasw(r)] * e;
                        const float a2 = akrow[s ^ dasw(r)] * e;
                        const float kv = unpack_io<IO>(ksp[s >> 1], s & 1);
                        aq = fmaf(a1, kv, aq);
                        ak = fmaf(a2, kv, ak);
                        ct[s] = fmaf(aqrow[s ^ dasw(r)] * e2, qr, ct[s]);
                        ct[s] = fmaf(akrow[s ^ dasw(r)] * e2, bkr, ct[s]);""")])


if __name__ == "__main__":
    src, root = sys.argv[1], sys.argv[2]
    probes = (("p1", [p1]), ("p2", [p2]), ("p3", [p1, p2]), ("p4", [p4]), ("p5", [p5]), ("p6", [p6]),
              ("p7", [p7]), ("p8", [p8]), ("p10", [p10]), ("p11", [p11]))
    for name, fs in probes:
        d = "%s/%s/k" % (root, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        for f in fs:
            f(d)

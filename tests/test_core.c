/*
 * test_core.c: the parts of kdart that need neither a compiler run nor a
 * GPU: the status table, SHA-256, the kernel registry and spec parsing,
 * arch strings, option handling in kdart_open, the source loader and its
 * file seam, the remote-prepare hook, per-thread error messages, and
 * allocation-failure injection on kdart_open.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kda_check.h"
#include "rt.h"
#include "testlib.h"

START_TEST(status_table) {
    /* Every code has a distinct name and a message; unknown codes too. */
    int codes[] = {
#define XX(name, value, msg) value,
        KDART_ERRNO_MAP(XX)
#undef XX
    };
    int n = (int)(sizeof codes / sizeof codes[0]);
    for (int i = 0; i < n; i++) {
        ck_assert_int_le(codes[i], 0);
        ck_assert_str_ne(kdart_strerror(codes[i]), "unknown status");
        for (int j = 0; j < i; j++) {
            ck_assert_int_ne(codes[i], codes[j]);
            ck_assert_str_ne(kdart_errname(codes[i]), kdart_errname(codes[j]));
        }
    }
    ck_assert_str_eq(kdart_errname(KDART_ESTRIDE), "ESTRIDE");
    ck_assert_str_eq(kdart_strerror(12345), "unknown status");
    ck_assert_str_eq(kdart_errname(-999), "EUNKNOWN");
    ck_assert_int_eq(KDART_OK, 0);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", KDART_VERSION_MAJOR, KDART_VERSION_MINOR, KDART_VERSION_PATCH);
    ck_assert_str_eq(kdart_version(), v);
    ck_assert_int_eq(KDART_VERSION_HEX, (KDART_VERSION_MAJOR << 16) | (KDART_VERSION_MINOR << 8) | KDART_VERSION_PATCH);
}
END_TEST

START_TEST(sha256_vectors) {
    char hex[65];
    kdart__sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    kdart__sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    kdart__sha256_hex(m, strlen(m), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* One million 'a', fed in uneven pieces to exercise the block buffer. */
    kdart__sha256 c;
    kdart__sha256_init(&c);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    while (left) {
        size_t take = left < sizeof a ? left : sizeof a;
        kdart__sha256_update(&c, a, take);
        left -= take;
    }
    unsigned char d[32];
    kdart__sha256_final(&c, d);
    ck_assert_int_eq(d[0], 0xcd);
    ck_assert_int_eq(d[31], 0xd0);
}
END_TEST

START_TEST(registry_specs) {
    ck_assert_int_eq(kdart_kernel_count(), 8);
    ck_assert_ptr_null(kdart_kernel_name(8));
    ck_assert_ptr_null(kdart_kernel_name(-1));
    ck_assert_int_eq(kdart_spec_count("bwd_intra"), 192);
    ck_assert_int_eq(kdart_spec_count("bwd_dhu"), 144);
    ck_assert_int_eq(kdart_spec_count("chunk_rcumsum"), 3);
    ck_assert_int_eq(kdart_spec_count("wy_dqkg"), 768);
    ck_assert_int_eq(kdart_spec_count("recompute_wu"), 32);
    ck_assert_int_eq(kdart_spec_count("bwd_dav"), 8);
    ck_assert_int_eq(kdart_spec_count("fwd_h"), 96);
    ck_assert_int_eq(kdart_spec_count("bwd_post"), 16);
    ck_assert_int_eq(kdart_spec_count("nope"), KDART_EKERNEL);
    /* every kernel's units fit the handle's slot table (an overrun there corrupts the status words),
     * and its parameters their tables (a value past KDART__MAX_VALUES is only a compiler warning) */
    for (int k = 0; k < kdart_kernel_count(); k++) {
        ck_assert_int_le(kdart_spec_count(kdart_kernel_name(k)), KDART__MAX_SPECS);
        ck_assert_int_le(kdart__kernel_at(k)->nparams, KDART__MAX_PARAMS);
        for (int i = 0; i < kdart__kernel_at(k)->nparams; i++) {
            const kdart__param *q = &kdart__kernel_at(k)->params[i];
            ck_assert(q->nvalues >= 1 && q->nvalues <= KDART__MAX_VALUES);
            ck_assert(q->dflt >= 0 && q->dflt < q->nvalues);
            for (int v = 0; v < q->nvalues; v++) ck_assert(q->values[v] != NULL && q->targs[v] != NULL);
        }
    }
    ck_assert_str_eq(kdart_kernel_params("bwd_intra"), "io={bf16,fp16} fold_dg={0,1} emit_bf16={0,1} K={64,128,256} varlen={0,1} tail={0,1} beta={io,f32}");
    ck_assert_str_eq(kdart_kernel_params("bwd_dhu"), "io={bf16,fp16} K={64,128,192,256} BV={16,32,64} varlen={0,1} tail={0,1,2}");
    ck_assert_str_eq(kdart_kernel_params("wy_dqkg"), "io={bf16,fp16} K={64,128,256} varlen={0,1} tail={0,1} beta={io,f32} svf={0,1} dAqk={0,1} intra={0,1} post={0,1}");
    ck_assert_str_eq(kdart_kernel_params("recompute_wu"), "io={bf16,fp16} varlen={0,1} tail={0,1} beta={io,f32} gate={0,1}");
    ck_assert_str_eq(kdart_kernel_params("bwd_dav"), "io={bf16,fp16} varlen={0,1} tail={0,1}");
    ck_assert_str_eq(kdart_kernel_params("fwd_h"), "io={bf16,fp16} K={64,128,256} BV={32,64} varlen={0,1} tail={0,1} uv={0,1}");
    char buf[128];
    /* Every index round-trips through its canonical text. */
    for (int k = 0; k < kdart_kernel_count(); k++) {
        const char *name = kdart_kernel_name(k);
        for (int i = 0; i < kdart_spec_count(name); i++) {
            char canon[128];
            ck_assert_int_gt(kdart_spec_at(name, i, buf, sizeof buf), 0);
            ck_assert_int_gt(kdart_spec_canonical(name, buf, canon, sizeof canon), 0);
            ck_assert_str_eq(buf, canon);
        }
    }
    ck_assert_int_gt(kdart_spec_canonical("bwd_intra", " K=64 , io=fp16", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=fp16,fold_dg=0,emit_bf16=0,K=64,varlen=0,tail=0,beta=io");
    ck_assert_int_gt(kdart_spec_canonical("bwd_intra", "tail=1,varlen=1,K=256", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,fold_dg=0,emit_bf16=0,K=256,varlen=1,tail=1,beta=io");
    ck_assert_int_gt(kdart_spec_canonical("bwd_intra", "beta=f32,io=fp16", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=fp16,fold_dg=0,emit_bf16=0,K=128,varlen=0,tail=0,beta=f32");
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "beta=bf16", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "tail=2", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_gt(kdart_spec_canonical("bwd_dhu", "", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=128,BV=64,varlen=0,tail=0");
    ck_assert_int_gt(kdart_spec_canonical("bwd_dhu", "BV=16,K=64", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,BV=16,varlen=0,tail=0");
    ck_assert_int_gt(kdart_spec_canonical("bwd_dhu", "varlen=1", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=128,BV=64,varlen=1,tail=0");
    ck_assert_int_gt(kdart_spec_canonical("bwd_dhu", "tail=1", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=128,BV=64,varlen=0,tail=1");
    /* the varlen specializations (a status word each), wherever varlen sits */
    for (int k = 0; k < kdart_kernel_count(); k++)
        for (int i = 0; i < kdart_spec_count(kdart_kernel_name(k)); i++) {
            ck_assert_int_gt(kdart_spec_at(kdart_kernel_name(k), i, buf, sizeof buf), 0);
            ck_assert_int_eq(kdart__spec_is_varlen(k, i), strstr(buf, "varlen=1") != NULL);
        }
    /* the default prewarm set: natives (beta=f32 ones only with fold_dg=1 emit_bf16=0), bf16 fold_dg=1
     * emit_bf16=0 intra tails (varlen, either beta), bf16 K=128 dhu tails, bf16 K=192 dhu natives only;
     * no stubs */
    int n_intra = 0, n_dhu = 0;
    for (int i = 0; i < kdart_spec_count("bwd_intra"); i++) {
        kdart_spec_at("bwd_intra", i, buf, sizeof buf);
        const int kdart_fla = strstr(buf, "fold_dg=1,emit_bf16=0,") != NULL;
        int want = (strstr(buf, "tail=0") && (strstr(buf, "beta=io") || kdart_fla)) ||
                   (strstr(buf, "io=bf16,") && kdart_fla && strstr(buf, "varlen=1,tail=1"));
        ck_assert_int_eq(kdart_spec_prewarmed("bwd_intra", i), want);
        n_intra += want;
    }
    for (int i = 0; i < kdart_spec_count("bwd_dhu"); i++) {
        kdart_spec_at("bwd_dhu", i, buf, sizeof buf);
        /* (no stubs: every bwd_dhu spec is a kernel since its K tiles 192 and 256 took BV 64) */
        int want = strstr(buf, "K=192,") ? strstr(buf, "io=bf16,") && strstr(buf, "tail=0")
                                         : strstr(buf, "tail=0") || strstr(buf, "io=bf16,K=128,");
        ck_assert_int_eq(kdart_spec_prewarmed("bwd_dhu", i), want);
        n_dhu += want;
    }
    ck_assert_int_eq(n_intra, 66);
    ck_assert_int_eq(n_dhu, 54);
    /* wy_dqkg: the natives with the K-first state, and bf16 with fp32 beta for the V-first state and the tails;
     * with dAqk the natives of the K tiles 64 and 128 with fp32 beta and the K-first state, with intra too (which
     * needs dAqk); post (the last step's gate part, with intra) on those in bf16 */
    int n_wy = 0;
    for (int i = 0; i < kdart_spec_count("wy_dqkg"); i++) {
        kdart_spec_at("wy_dqkg", i, buf, sizeof buf);
        const int post = strstr(buf, "post=1") != NULL;
        int want = strstr(buf, "intra=1") && strstr(buf, "dAqk=0") ? 0
                   : post && !(strstr(buf, "io=bf16,") && strstr(buf, "intra=1")) ? 0
                   : strstr(buf, "dAqk=1") ? strstr(buf, "tail=0") && strstr(buf, "svf=0") && strstr(buf, "beta=f32") &&
                                               !strstr(buf, "K=256")
                                         : (strstr(buf, "tail=0") && strstr(buf, "svf=0")) ||
                                               (strstr(buf, "io=bf16,") && strstr(buf, "beta=f32"));
        ck_assert_int_eq(kdart_spec_prewarmed("wy_dqkg", i), want);
        n_wy += want;
    }
    ck_assert_int_eq(n_wy, 62);
    /* bwd_dav: bf16, every varlen and tail (kdart.fla's standalone dAv is the unfused calls: odd V, packed) */
    for (int i = 0; i < kdart_spec_count("bwd_dav"); i++) {
        kdart_spec_at("bwd_dav", i, buf, sizeof buf);
        ck_assert_int_eq(kdart_spec_prewarmed("bwd_dav", i), strstr(buf, "io=bf16,") != NULL);
    }
    /* fwd_h: bf16, every native specialization and the tails at the K tile 128, with u given or made */
    int n_fwdh = 0;
    for (int i = 0; i < kdart_spec_count("fwd_h"); i++) {
        kdart_spec_at("fwd_h", i, buf, sizeof buf);
        const int want = strstr(buf, "io=bf16,") && (strstr(buf, "tail=0,") || strstr(buf, "K=128,"));
        ck_assert_int_eq(kdart_spec_prewarmed("fwd_h", i), want);
        n_fwdh += want;
    }
    ck_assert_int_eq(n_fwdh, 32);
    ck_assert_int_eq(kdart_spec_prewarmed("chunk_rcumsum", 2), 1);
    ck_assert_int_eq(kdart_spec_prewarmed("bwd_dhu", 144), KDART_EINVAL);
    ck_assert_int_eq(kdart_spec_prewarmed("nope", 0), KDART_EKERNEL);
    ck_assert_int_eq(kdart_spec_canonical("bwd_dhu", "BV=48", buf, sizeof buf), KDART_ESPEC);
    /* bwd_dhu's tile choice on a 132-SM H200: the measured-best tile of every
     * row of the standard table (docs/performance.md) */
    ck_assert_int_eq(kdart__dhu_pick_bv(16, 16, 256, 128, 132), 64); /* prod8192: 8 waves of 64 */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 96, 128, 128, 132), 32);  /* 2 waves of 64 vs 3 of 32 */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 32, 128, 128, 132), 32);  /* 64 of 64 -> 128 of 32 */
    ck_assert_int_eq(kdart__dhu_pick_bv(4, 32, 128, 128, 132), 64);  /* 2 waves of 64 vs 4 of 32 */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 16, 128, 128, 132), 16);  /* 32 of 64 -> 128 of 16 */
    ck_assert_int_eq(kdart__dhu_pick_bv(2, 32, 64, 64, 132), 32);    /* the K = 64 row */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 64, 128, 132), 16);    /* tiny: narrowest */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 64, 128, 1), 64);      /* one SM: widest */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 64, 128, 0), 64);      /* no SM count: as one */
    /* the K tiles 192 and 256 take BV 64 as two warpgroups; a partial last V tile counts as a CTA */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 64, 192, 1), 64);
    ck_assert_int_eq(kdart__dhu_pick_bv(2, 16, 192, 160, 132), 64);  /* 96 of 64: one wave, 160 of 32 two */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 64, 256, 1), 64);
    ck_assert_int_eq(kdart__dhu_pick_bv(2, 16, 256, 256, 132), 64);  /* 128 of 64: one wave */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 16, 256, 256, 132), 32);  /* 64 of 64 -> 128 of 32 */
    ck_assert_int_eq(kdart__dhu_pick_bv(4, 16, 256, 256, 132), 64);  /* 2 waves of 64 vs 4 of 32 */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 4, 256, 256, 132), 16);   /* one wave at every tile: narrowest */
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 100, 100, 1), 64);     /* 2 CTAs of 64 on one SM */
    ck_assert_int_eq(kdart__k_tile(1), 64);
    ck_assert_int_eq(kdart__k_tile(65), 128);
    ck_assert_int_eq(kdart__k_tile(129), 256);
    ck_assert_int_eq(kdart__k_tile(257), -1);
    /* bwd_dhu's K tiles add 192 (129..192) */
    ck_assert_int_eq(kdart__dhu_k_tile(1), 64);
    ck_assert_int_eq(kdart__dhu_k_tile(128), 128);
    ck_assert_int_eq(kdart__dhu_k_tile(129), 192);
    ck_assert_int_eq(kdart__dhu_k_tile(192), 192);
    ck_assert_int_eq(kdart__dhu_k_tile(193), 256);
    ck_assert_int_eq(kdart__dhu_k_tile(0), -1);
    ck_assert_int_eq(kdart__dhu_k_tile(257), -1);
    ck_assert_int_eq(kdart__dhu_k_index(192), 2);
    ck_assert_int_eq(kdart__dhu_k_index(256), 3);
    ck_assert_int_eq(kdart__dhu_pick_bv(1, 1, 64, 160, 1), 64);
    ck_assert_int_eq(kdart__dhu_bv_index(32), 1);
    ck_assert_int_eq(kdart__dhu_bv_index(48), -1);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "K=96", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "io=fp32", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "color=red", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "K", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "K=64,K=128", buf, sizeof buf), KDART_ESPEC);
    ck_assert_int_eq(kdart_spec_canonical("bwd_intra", "K=64", buf, 4), KDART_EINVAL);
    ck_assert_int_eq(kdart_spec_at("bwd_intra", 192, buf, sizeof buf), KDART_EINVAL);
    ck_assert_int_eq(kdart_spec_at("bwd_intra", 0, NULL, 0), KDART_ENULL);
}
END_TEST

/* kda_check's every-spec shapes (selftest, test_gpu's every-spec and
 * sanitizer loops): for each spec, the head dim (and for bwd_dhu V and the
 * layout) it derives are ones for which the stages' rules (K tile; bwd_intra
 * tail = K below the tile, then varlen = 1; bwd_dhu tail 1 = K below the tile
 * or V % BV != 0, else tail 2 = state_v_first) pick that very spec;
 * bwd_intra's stubs are skipped. */
START_TEST(check_spec_shapes) {
    char buf[128];
    int launched = 0;
    for (int i = 0; i < kdart_spec_count("bwd_intra"); i++) {
        kdart_spec_at("bwd_intra", i, buf, sizeof buf);
        const int tail = strstr(buf, "tail=1") != NULL, varlen = strstr(buf, "varlen=1") != NULL;
        ck_assert_int_eq(kc_spec_tail(buf), tail);
        ck_assert_int_eq(kc_intra_spec_launchable(buf), !(tail && !varlen));
        if (!kc_intra_spec_launchable(buf)) continue;
        const int K = kc_intra_spec_k(buf);
        ck_assert_int_eq(kdart__k_tile(K), kc_spec_k(buf));
        ck_assert_int_eq(K != kdart__k_tile(K), tail);
        launched++;
    }
    ck_assert_int_eq(launched, 144); /* 192 less the 48 varlen=0,tail=1 stubs */
    launched = 0;
    for (int i = 0; i < kdart_spec_count("bwd_dhu"); i++) {
        kdart_spec_at("bwd_dhu", i, buf, sizeof buf);
        const int tail = strstr(buf, "tail=1") ? 1 : strstr(buf, "tail=2") ? 2 : 0, bv = kc_spec_bv(buf);
        for (int variant = 0; variant < 3; variant++)
            for (int v0 = 64; v0 <= 512; v0 += 64) {
                int K, V = v0, svf;
                kc_dhu_spec_dims(buf, variant, &K, &V, &svf);
                ck_assert_int_eq(kdart__dhu_k_tile(K), kc_spec_k(buf));
                ck_assert(V >= 1 && V <= 512);
                ck_assert_int_eq(K != kdart__dhu_k_tile(K) || V % bv != 0 ? 1 : svf ? 2 : 0, tail);
            }
        launched++;
    }
    ck_assert_int_eq(launched, 144); /* every one */
}
END_TEST

START_TEST(arch_strings) {
    ck_assert_int_eq(kdart__arch_check("sm_90a"), KDART_OK);
    ck_assert_int_eq(kdart__arch_check("sm_100a"), KDART_OK);
    ck_assert_int_eq(kdart__arch_check("sm_90"), KDART_OK);
    ck_assert_int_eq(kdart__arch_check("sm_120f"), KDART_OK);
    ck_assert_int_eq(kdart__arch_check("sm_75"), KDART_EARCH);
    ck_assert_int_eq(kdart__arch_check("sm_80"), KDART_EARCH); /* the kernels need sm_90+ */
    ck_assert_int_eq(kdart__arch_check("compute_90"), KDART_EARCH);
    ck_assert_int_eq(kdart__arch_check("sm_9"), KDART_EARCH);
    ck_assert_int_eq(kdart__arch_check("sm_90ab"), KDART_EARCH);
    ck_assert_int_eq(kdart__arch_check("sm_90a -O0"), KDART_EARCH);
    ck_assert_int_eq(kdart__arch_check(NULL), KDART_EARCH);
    ck_assert_int_eq(kdart__arch_check("sm_090a"), KDART_EARCH); /* a second spelling of sm_90a, another cache key */
}
END_TEST

START_TEST(open_options) {
    kdart_rt *rt = NULL;
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = "";
    o.arch = "sm_75";
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_EARCH);
    ck_assert_ptr_null(rt);
    o.arch = NULL;
    o.struct_size = 8;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_EINVAL);
    ck_assert_int_eq(kdart_open(NULL, NULL), KDART_ENULL);
    kdart_options_init(&o);
    o.cache_path = "";
    o.n_ro_cache_paths = 1;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_ENULL);
    /* A handle-less or closed handle is refused, never dereferenced. */
    ck_assert_int_eq(kdart_prepare(NULL, "bwd_intra", "", NULL, 0, NULL), KDART_EMISUSE);
    kdart_close(NULL);
}
END_TEST

START_TEST(env_overrides) {
    char dir[256];
    test_tmpdir(dir, sizeof dir);
    setenv("KDART_CACHE_DIR", dir, 1);
    setenv("KDART_ARCH", "sm_100a", 1);
    setenv("KDART_CACHE_MAX_BYTES", "3M", 1);
    kdart_rt *rt = NULL;
    ck_assert_int_eq(kdart_open(&rt, NULL), KDART_OK);
    kdart_rt_info info;
    ck_assert_int_eq(kdart_info(rt, &info), KDART_OK);
    char want[512];
    snprintf(want, sizeof want, "%s/kdart.db", dir);
    ck_assert_str_eq(info.cache_path, want);
    ck_assert_str_eq(info.default_arch, "sm_100a");
    ck_assert_int_eq(info.cache_max_bytes, 3 << 20);
    ck_assert_int_eq(info.cache_writable, 1);
    ck_assert_int_eq(info.nvrtc_major, 13);
    ck_assert_ptr_nonnull(strstr(info.nvrtc_build, "CL-"));
    kdart_close(rt);
    /* KDART_OPEN_NO_ENV ignores all of them. */
    kdart_options o;
    kdart_options_init(&o);
    o.flags = KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA;
    o.cache_path = "";
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
    ck_assert_int_eq(kdart_info(rt, &info), KDART_OK);
    ck_assert_str_eq(info.cache_path, "");
    ck_assert_str_eq(info.default_arch, "sm_100a");
    ck_assert_int_eq(info.cuda_available, 0);
    kdart_close(rt);
    unsetenv("KDART_ARCH");
    unsetenv("KDART_CACHE_DIR");
    unsetenv("KDART_CACHE_MAX_BYTES");
    test_rmtree(dir);
}
END_TEST

/* Sizes as people write them: one parser for KDART_CACHE_MAX_BYTES and
 * `kdart gc --max-bytes`, exact, refusing what it cannot read. */
START_TEST(parse_bytes) {
    static const struct {
        const char *text;
        int ok;
        int64_t want;
    } cases[] = {
        {"1T", 1, (int64_t)1 << 40}, {"1G", 1, (int64_t)1 << 30}, {"512K", 1, 512 << 10}, {"0", 1, 0},
        {"3M", 1, 3 << 20}, {"1.5G", 1, (int64_t)3 << 29}, {"2GiB", 1, (int64_t)2 << 30}, {"64kb", 1, 64 << 10},
        {"100B", 1, 100}, {"9223372036854775807", 1, INT64_MAX}, {"8191P", 0, 0}, {"-5", 0, 0},
        {"abc", 0, 0}, {"inf", 0, 0}, {"nan", 0, 0}, {"1e30", 0, 0}, {"", 0, 0}, {"12Kx", 0, 0},
        {"12 K", 0, 0}, {" 12", 0, 0}, {"99999999999T", 0, 0}, {"9223372036854775808", 0, 0},
        {"8388608T", 0, 0}, {"1.5", 0, 0}, {"1.", 0, 0}, {".5G", 0, 0}, {"1.1234567G", 0, 0},
        {"1Ki", 0, 0}, {"+5", 0, 0}, {"0x10", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t v = -7;
        int rc = kdart_parse_bytes(cases[i].text, &v);
        ck_assert_msg(rc == (cases[i].ok ? KDART_OK : KDART_EINVAL), "'%s': %d", cases[i].text, rc);
        ck_assert_msg(v == (cases[i].ok ? cases[i].want : -7), "'%s': %lld", cases[i].text, (long long)v);
    }
    ck_assert_int_eq(kdart_parse_bytes(NULL, &(int64_t){0}), KDART_ENULL);
    int64_t n;
    ck_assert_int_eq(kdart__parse_count("600000", INT64_MAX, &n), KDART_OK);
    ck_assert_int_eq(n, 600000);
    ck_assert_int_eq(kdart__parse_count("10", 9, &n), KDART_EINVAL);
    ck_assert_int_eq(kdart__parse_count("99999999999999999999", INT64_MAX, &n), KDART_EINVAL);
    ck_assert_int_eq(kdart__parse_count("5s", INT64_MAX, &n), KDART_EINVAL);
    ck_assert_int_eq(kdart__parse_count("-1", INT64_MAX, &n), KDART_EINVAL);
    ck_assert_int_eq(kdart__parse_count("", INT64_MAX, &n), KDART_EINVAL);
}
END_TEST

/* A handle that reads the environment (test_open's does not). */
static kdart_rt *env_open(test_log *log) {
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = "";
    o.kernel_dir = TEST_KERNEL_DIR;
    o.flags = KDART_OPEN_NO_CUDA;
    if (log) {
        memset(log, 0, sizeof *log);
        o.log = test_log_fn;
        o.log_user = log;
    }
    kdart_rt *rt = NULL;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
    return rt;
}

/* A numeric variable that does not read is refused with a warning naming
 * it and its value, and the default used; so is an unknown KDART_LOG. */
/* Without a log callback, warnings reach stderr ("kdart: warning: ..."): a refused setting is never
 * silent in a program that embeds kdart; KDART_LOG=off silences it. */
START_TEST(default_log_to_stderr) {
    char path[] = "/tmp/kdart-stderr-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    setenv("KDART_CACHE_MAX_BYTES", "abc", 1);
    for (int off = 0; off < 2; off++) {
        if (off) setenv("KDART_LOG", "off", 1);
        kdart_options o;
        kdart_options_init(&o);
        o.cache_path = "";
        o.flags = KDART_OPEN_NO_CUDA;
        kdart_rt *rt = NULL;
        ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
        kdart_close(rt);
    }
    unsetenv("KDART_LOG");
    unsetenv("KDART_CACHE_MAX_BYTES");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[4096] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = 0;
    const char *hit = strstr(buf, "kdart: warning: KDART_CACHE_MAX_BYTES=abc ignored");
    ck_assert_msg(hit != NULL, "stderr lacks the warning:\n%s", buf);
    ck_assert_msg(strstr(hit + strlen("kdart: warning: KDART_CACHE_MAX_BYTES=abc"), "KDART_CACHE_MAX_BYTES=abc") == NULL,
                  "KDART_LOG=off still printed:\n%s", buf);
}
END_TEST

START_TEST(env_bad_values) {
    static const char *const bad[] = {"1e30", "inf", "nan", "abc", "-5", "1T1", "99999999999T", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        test_log log;
        setenv("KDART_CACHE_MAX_BYTES", bad[i], 1);
        kdart_rt *rt = env_open(&log);
        kdart_rt_info info;
        ck_assert_int_eq(kdart_info(rt, &info), KDART_OK);
        ck_assert_int_eq(info.cache_max_bytes, (int64_t)2 << 30);
        if (bad[i][0]) { /* an empty variable counts as unset */
            ck_assert_int_eq(log.count[KDART_LOG_WARN], 1);
            ck_assert_ptr_nonnull(strstr(log.last[KDART_LOG_WARN], "KDART_CACHE_MAX_BYTES"));
            ck_assert_ptr_nonnull(strstr(log.last[KDART_LOG_WARN], bad[i]));
        }
        kdart_close(rt);
    }
    /* The good ones, and 0: no budget. */
    static const struct { const char *text; int64_t want; } good[] = {
        {"1T", (int64_t)1 << 40}, {"512K", 512 << 10}, {"0", -1}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("KDART_CACHE_MAX_BYTES", good[i].text, 1);
        kdart_rt *rt = env_open(NULL);
        kdart_rt_info info;
        ck_assert_int_eq(kdart_info(rt, &info), KDART_OK);
        ck_assert_int_eq(info.cache_max_bytes, good[i].want);
        kdart_close(rt);
    }
    unsetenv("KDART_CACHE_MAX_BYTES");

    /* KDART_LEASE_WAIT_MS, read at the first prepare that needs it. */
    static const char *const waits[] = {"abc", "-5", "1e3", "10s"};
    for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++) {
        test_log log;
        setenv("KDART_LEASE_WAIT_MS", waits[i], 1);
        kdart_rt *rt = env_open(&log);
        int64_t v;
        ck_assert_int_eq(kdart__env_number(rt, "KDART_LEASE_WAIT_MS", 0, 0, INT64_MAX, &v), 0);
        ck_assert_int_eq(log.count[KDART_LOG_WARN], 1);
        ck_assert_ptr_nonnull(strstr(log.last[KDART_LOG_WARN], "KDART_LEASE_WAIT_MS"));
        kdart_close(rt);
    }
    setenv("KDART_LEASE_WAIT_MS", "250", 1);
    kdart_rt *rt = env_open(NULL);
    int64_t v = 0;
    ck_assert_int_eq(kdart__env_number(rt, "KDART_LEASE_WAIT_MS", 0, 0, INT64_MAX, &v), 1);
    ck_assert_int_eq(v, 250);
    kdart_close(rt);
    unsetenv("KDART_LEASE_WAIT_MS");

    test_log log;
    setenv("KDART_LOG", "verbose", 1);
    rt = env_open(&log);
    ck_assert_int_eq(log.count[KDART_LOG_WARN], 1);
    ck_assert_ptr_nonnull(strstr(log.last[KDART_LOG_WARN], "KDART_LOG=verbose"));
    kdart_close(rt);
    setenv("KDART_LOG", "info", 1);
    rt = env_open(&log);
    ck_assert_int_eq(log.count[KDART_LOG_WARN], 0);
    kdart_close(rt);
    unsetenv("KDART_LOG");
}
END_TEST

/* Every warning a handle logs, one per line (test_log keeps the last). */
static char warnings[8192];
static void collect_warnings(void *user, int level, const char *msg) {
    (void)user;
    if (level != KDART_LOG_WARN) return;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
}

/* A handle that reads the environment, its warnings in `warnings`. */
static kdart_rt *env_open_flags(const char *cache_path, uint32_t flags) {
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = cache_path;
    o.kernel_dir = TEST_KERNEL_DIR;
    o.flags = flags;
    o.log = collect_warnings;
    warnings[0] = 0;
    kdart_rt *rt = NULL;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
    return rt;
}

#define EXPECT_WARNED(text) ck_assert_msg(strstr(warnings, (text)) != NULL, "no warning with '%s' in:\n%s", (text), warnings)

static int refuse_compile(void *user, const kdart__compile_in *in, kdart__compile_out *out);

/* The switches (KDART_DISABLE_CUDA, KDART_CHECK, KDART_FUSE_DAV; KDART_FUSE_POST 0 to 2) take exactly 0 or 1,
 * and a refused value is said with the values allowed; KDART_OPEN_NO_ENV ignores KDART_DISABLE_CUDA as every
 * other variable; a value outside a variable's range is refused, never
 * replaced in silence; KDART_LEASE_WAIT_MS takes all of 0..2^63-1, as the
 * README says. */
START_TEST(env_switches_and_ranges) {
    /* First, before anything in this process loads (or fails to load)
     * libcuda: a NO_ENV handle must not see KDART_DISABLE_CUDA. */
    setenv("KDART_DISABLE_CUDA", "1", 1);
    setenv("KDART_CHECK", "1", 1);
    kdart_rt *rt = env_open_flags("", KDART_OPEN_NO_ENV);
    ck_assert_uint_eq(rt->flags, KDART_OPEN_NO_ENV);
    const kdart__cuda *cu;
    if (kdart__cuda_get(rt, &cu) != KDART_OK)
        ck_assert_msg(!strstr(kdart_last_error(rt), "KDART_DISABLE_CUDA"), "%s", kdart_last_error(rt));
    kdart_close(rt);
    /* Read, it disables CUDA for this handle and says so. */
    rt = env_open_flags("", 0);
    ck_assert_uint_eq(rt->flags, KDART_OPEN_NO_CUDA | KDART_OPEN_CHECK);
    ck_assert_int_eq(kdart__cuda_get(rt, &cu), KDART_ENOCUDA);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "KDART_DISABLE_CUDA=1"));
    ck_assert_str_eq(warnings, "");
    kdart_close(rt);
    setenv("KDART_DISABLE_CUDA", "0", 1);
    setenv("KDART_CHECK", "0", 1);
    rt = env_open_flags("", 0);
    ck_assert_uint_eq(rt->flags, 0);
    ck_assert_str_eq(warnings, "");
    kdart_close(rt);
    unsetenv("KDART_CHECK");

    static const char *const bad[] = {"10", "1junk", "yes", "true", "2", "-1", " 1"};
    static const char *const names[] = {"KDART_DISABLE_CUDA", "KDART_CHECK"};
    for (size_t v = 0; v < 2; v++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            setenv(names[v], bad[i], 1);
            rt = env_open_flags("", 0);
            ck_assert_uint_eq(rt->flags, 0);
            char want[128];
            snprintf(want, sizeof want, "%s=%s ignored: not 0 or 1", names[v], bad[i]);
            EXPECT_WARNED(want);
            kdart_close(rt);
            unsetenv(names[v]);
        }

    /* The whole backward's fusion switches: all on by default (KDART_FUSE_POST: 2, dq and dk too), less with
     * a smaller number, any other value said and ignored. */
    static const char *const fuse[] = {"KDART_FUSE_POST", "KDART_FUSE_DAV"};
    for (size_t v = 0; v < 2; v++) {
        static const char *const vals[] = {NULL, "0", "1", "3", "off"};
        const int want_on[] = {v ? 1 : 2, 0, 1, v ? 1 : 2, v ? 1 : 2};
        for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
            if (vals[i]) setenv(fuse[v], vals[i], 1);
            rt = env_open_flags("", 0);
            ck_assert_int_eq(v ? rt->fuse_dav : rt->fuse_post, want_on[i]);
            if (i >= 3) {
                char want[128];
                snprintf(want, sizeof want, "%s=%s ignored: not %s", fuse[v], vals[i],
                         v ? "0 or 1" : "a whole number from 0 to 2");
                EXPECT_WARNED(want);
            } else {
                ck_assert_str_eq(warnings, "");
            }
            kdart_close(rt);
            unsetenv(fuse[v]);
        }
    }

    /* The numeric ones say their range. */
    char dir[256], db[512];
    test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/kdart.db", dir);
    setenv("KDART_SERVICE", "/nonexistent/kdart.sock", 1);
    setenv("KDART_SERVICE_TIMEOUT", "0", 1);
    setenv("KDART_LEASE_WAIT_MS", "9223372036854775807", 1);
    rt = env_open_flags(db, KDART_OPEN_NO_CUDA);
    rt->compile = refuse_compile; /* the prepare asks the service, then leases, then compiles */
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, NULL),
                     KDART_ECOMPILE);
    EXPECT_WARNED("KDART_SERVICE_TIMEOUT=0 ignored: not a whole number from 1 to 2000000");
    ck_assert_msg(!strstr(warnings, "KDART_LEASE_WAIT_MS"), "%s", warnings);
    ck_assert_int_eq(rt->lease_wait_ms, INT64_MAX);
    kdart_close(rt);
    unsetenv("KDART_SERVICE");
    unsetenv("KDART_SERVICE_TIMEOUT");
    unsetenv("KDART_LEASE_WAIT_MS");
    test_rmtree(dir);
}
END_TEST

/* A bad KDART_ARCH does not stop kdart_open (listing or verifying a cache
 * compiles nothing); it is warned about, and a prepare or kdart_why for
 * the default arch refuses it naming the variable.  An explicit arch still
 * works, and a bad options.arch is still the caller's error. */
START_TEST(env_bad_arch) {
    setenv("KDART_ARCH", "garbage", 1);
    kdart_rt *rt = env_open_flags("", KDART_OPEN_NO_CUDA);
    EXPECT_WARNED("KDART_ARCH: 'garbage' is not a target architecture");
    rt->compile = refuse_compile;
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=64", NULL, KDART_PREPARE_NO_LOAD, NULL), KDART_EARCH);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "KDART_ARCH: 'garbage'"));
    char *text = NULL;
    ck_assert_int_eq(kdart_why(rt, "chunk_rcumsum", "K=64", NULL, &text), KDART_EARCH);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "KDART_ARCH"));
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, NULL),
                     KDART_ECOMPILE);
    /* An arch of the caller's own is not blamed on the variable. */
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_80", KDART_PREPARE_NO_LOAD, NULL), KDART_EARCH);
    ck_assert_ptr_null(strstr(kdart_last_error(rt), "KDART_ARCH"));
    kdart_close(rt);
    unsetenv("KDART_ARCH");

    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = "";
    o.flags = KDART_OPEN_NO_CUDA;
    o.arch = "garbage";
    rt = NULL;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_EARCH);
    ck_assert_ptr_null(rt);
}
END_TEST

/* The source loader follows quoted includes and refuses escapes. */
START_TEST(sources_closure) {
    char dir[256], kd[512], path[1024];
    test_tmpdir(dir, sizeof dir);
    test_copy_kernels(dir, kd, sizeof kd);
    kdart_rt *rt = test_open("", kd, NULL);
    ck_assert_ptr_nonnull(rt);
    kdart__sources s;
    ck_assert_int_eq(kdart__sources_load(rt, "chunk_rcumsum.cuh", &s), KDART_OK);
    ck_assert_int_eq(s.nfiles, 3); /* chunk_rcumsum.cuh, kdart_common.cuh, kda_params.h */
    ck_assert_str_eq(s.files[0].name, "chunk_rcumsum.cuh");
    kdart__sources_free(&s);
    snprintf(path, sizeof path, "%s/evil.cuh", kd);
    test_write_file(path, "#include \"../../etc/passwd\"\n");
    ck_assert_int_eq(kdart__sources_load(rt, "evil.cuh", &s), KDART_ESOURCE);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "relative"));
    test_write_file(path, "#include \"missing.cuh\"\n");
    ck_assert_int_eq(kdart__sources_load(rt, "evil.cuh", &s), KDART_ESOURCE);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "missing.cuh"));
    /* A cycle terminates. */
    test_write_file(path, "#include \"evil.cuh\"\n#include \"kda_params.h\"\n");
    ck_assert_int_eq(kdart__sources_load(rt, "evil.cuh", &s), KDART_OK);
    ck_assert_int_eq(s.nfiles, 2);
    kdart__sources_free(&s);
    kdart_close(rt);
    test_rmtree(dir);
}
END_TEST

/* A symlink in the kernel directory cannot bring in a file from outside
 * it (the file's real path must stay inside); one pointing inside works. */
START_TEST(symlink_escape) {
    char dir[256], kd[512], path[1024], outside[1024], target[1024];
    test_tmpdir(dir, sizeof dir);
    test_copy_kernels(dir, kd, sizeof kd);
    snprintf(outside, sizeof outside, "%s/outside.cuh", dir);
    test_write_file(outside, "#error \"outside the kernel directory\"\n");
    snprintf(path, sizeof path, "%s/link.cuh", kd);
    ck_assert_int_eq(symlink(outside, path), 0);
    snprintf(path, sizeof path, "%s/evil.cuh", kd);
    test_write_file(path, "#include \"link.cuh\"\n");
    kdart_rt *rt = test_open("", kd, NULL);
    ck_assert_ptr_nonnull(rt);
    kdart__sources s;
    ck_assert_int_eq(kdart__sources_load(rt, "evil.cuh", &s), KDART_ESOURCE);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "link.cuh"));
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "outside"));
    ck_assert_int_eq(kdart__sources_load(rt, "link.cuh", &s), KDART_ESOURCE);
    /* A directory symlink on the way counts too. */
    snprintf(path, sizeof path, "%s/sub", kd);
    ck_assert_int_eq(symlink(dir, path), 0);
    ck_assert_int_eq(kdart__sources_load(rt, "sub/outside.cuh", &s), KDART_ESOURCE);
    /* Inside: an alias of a real kernel file loads. */
    snprintf(path, sizeof path, "%s/alias.cuh", kd);
    snprintf(target, sizeof target, "%s/chunk_rcumsum.cuh", kd);
    ck_assert_int_eq(symlink(target, path), 0);
    ck_assert_int_eq(kdart__sources_load(rt, "alias.cuh", &s), KDART_OK);
    ck_assert_int_eq(s.nfiles, 3);
    kdart__sources_free(&s);
    kdart_close(rt);
    /* The kernel directory itself may be reached through a symlink. */
    snprintf(path, sizeof path, "%s/kd_link", dir);
    ck_assert_int_eq(symlink(kd, path), 0);
    rt = test_open("", path, NULL);
    ck_assert_int_eq(kdart__sources_load(rt, "chunk_rcumsum.cuh", &s), KDART_OK);
    kdart__sources_free(&s);
    ck_assert_int_eq(kdart__sources_load(rt, "evil.cuh", &s), KDART_ESOURCE);
    kdart_close(rt);
    test_rmtree(dir);
}
END_TEST

static int fail_read(const char *path, char **text, size_t *size) {
    (void)path;
    (void)text;
    (void)size;
    return KDART_EIO;
}

/* The file seam: an unreadable source is ESOURCE with the path named, and
 * prepare compiles nothing. */
START_TEST(unreadable_source) {
    kdart_rt *rt = test_open("", NULL, NULL);
    kdart__read_file = fail_read;
    int rc = kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, NULL);
    kdart__read_file = kdart__read_file_default;
    ck_assert_int_eq(rc, KDART_ESOURCE);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "chunk_rcumsum.cuh"));
    kdart_close(rt);
    /* A kernel directory that does not exist: open works and warns, the
     * prepare says which file is missing. */
    test_log log;
    rt = test_open("", "/nonexistent/kernel_src", &log);
    ck_assert_ptr_nonnull(rt);
    ck_assert_int_eq(log.count[KDART_LOG_WARN], 1);
    ck_assert_int_eq(kdart_prepare(rt, "bwd_dhu", "", "sm_90a", KDART_PREPARE_NO_LOAD, NULL), KDART_ESOURCE);
    ck_assert_int_eq(kdart_prepare(rt, "bwd_dhu", "K=32", "sm_90a", 0, NULL), KDART_ESPEC);
    ck_assert_int_eq(kdart_prepare(rt, "bwd_dhu", "", "sm_61", 0, NULL), KDART_EARCH);
    ck_assert_int_eq(kdart_prepare(rt, "nope", "", "sm_90a", 0, NULL), KDART_EKERNEL);
    ck_assert_int_eq(kdart_prepare(rt, NULL, "", "sm_90a", 0, NULL), KDART_ENULL);
    kdart_close(rt);
}
END_TEST

/* Releases a reader stuck in open() on a FIFO (by opening its other end)
 * after 3 s, so that a loader that would wait forever fails the test in
 * bounded time rather than hanging it. */
typedef struct fifo_release {
    const char *path;
    atomic_int stop;
} fifo_release;

static void *release_fifo(void *p) {
    fifo_release *r = p;
    for (int i = 0; i < 300 && !atomic_load(&r->stop); i++) usleep(10000);
    while (!atomic_load(&r->stop)) {
        int fd = open(r->path, O_WRONLY | O_NONBLOCK);
        if (fd >= 0) close(fd);
        usleep(10000);
    }
    return NULL;
}

/* ESOURCE within a second, the message naming the file and what it is. */
static void expect_refused(kdart_rt *rt, const char *kernel, const char *spec, const char *name, const char *what) {
    double t0 = kdart__now_ms();
    int rc = kdart_prepare(rt, kernel, spec, "sm_90a", KDART_PREPARE_NO_LOAD, NULL);
    double ms = kdart__now_ms() - t0;
    const char *msg = kdart_last_error(rt);
    ck_assert_msg(rc == KDART_ESOURCE, "%s: %s (%s)", name, kdart_errname(rc), msg);
    ck_assert_msg(ms < 1000, "%s: refused after %.0f ms", name, ms);
    ck_assert_msg(strstr(msg, name) && strstr(msg, what), "'%s' lacks '%s' or '%s'", msg, name, what);
}

/* What is not a regular file is refused at once and unread: a FIFO (whose
 * open would wait for a writer forever), a directory named like a source,
 * a character device, and a symlink to one outside the kernel directory. */
START_TEST(odd_sources) {
    char dir[256], kd[512], path[1024];
    test_tmpdir(dir, sizeof dir);
    test_copy_kernels(dir, kd, sizeof kd);
    kdart_rt *rt = test_open("", kd, NULL);
    rt->compile = refuse_compile;

    snprintf(path, sizeof path, "%s/chunk_rcumsum.cuh", kd);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    fifo_release rel = {path, 0};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, release_fifo, &rel), 0);
    expect_refused(rt, "chunk_rcumsum", "K=64", "chunk_rcumsum.cuh", "is a FIFO, not a regular file");
    atomic_store(&rel.stop, 1);
    pthread_join(th, NULL);

    snprintf(path, sizeof path, "%s/bwd_dhu_scan.inc", kd);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    expect_refused(rt, "bwd_dhu", "", "bwd_dhu_scan.inc, included from bwd_dhu.cuh", "is a directory");

    snprintf(path, sizeof path, "%s/bwd_intra.cuh", kd);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(symlink("/dev/zero", path), 0);
    expect_refused(rt, "bwd_intra", "", "bwd_intra.cuh", "outside the kernel directory");
    /* The device itself inside the directory, where the system lets us
     * make one (root, a mount without nodev). */
    ck_assert_int_eq(unlink(path), 0);
    if (mknod(path, S_IFCHR | 0644, makedev(1, 5)) == 0)
        expect_refused(rt, "bwd_intra", "", "bwd_intra.cuh", "is a character device");
    kdart_close(rt);
    test_rmtree(dir);
}
END_TEST

/* Sources are read without the handle's lock: a slow or stuck file system
 * stalls only the thread that reads. */
static kdart_rt *seam_rt;
static int seam_locked;
static int lock_probe_read(const char *path, char **text, size_t *size) {
    if (pthread_mutex_trylock(&seam_rt->lock) == 0)
        pthread_mutex_unlock(&seam_rt->lock);
    else
        seam_locked = 1;
    return kdart__read_file_default(path, text, size);
}

START_TEST(sources_read_unlocked) {
    seam_rt = test_open("", NULL, NULL);
    seam_rt->compile = refuse_compile;
    seam_locked = 0;
    kdart__read_file = lock_probe_read;
    int rc = kdart_prepare(seam_rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, NULL);
    int rc_default = kdart_prepare(seam_rt, "chunk_rcumsum", "K=64", NULL, KDART_PREPARE_NO_LOAD, NULL);
    kdart__read_file = kdart__read_file_default;
    ck_assert_int_eq(rc, KDART_ECOMPILE);
    ck_assert_int_eq(rc_default, KDART_ECOMPILE);
    ck_assert_int_eq(seam_locked, 0);
    kdart_close(seam_rt);
}
END_TEST

/* The remote-prepare hook (rt.h): kdart_open installs the service client's
 * on a handle that reads the environment and none on a KDART_OPEN_NO_ENV
 * one; the core calls whatever hook a handle has, once per miss, with
 * rt->lock held, before compiling itself when the hook cannot help. */
typedef struct hook_calls {
    int calls, locked;
    char kernel[32], key[65];
} hook_calls;

static int count_remote(void *ctx, kdart_rt *rt, const char *kernel, const char *spec, const char *arch,
                        uint32_t flags, const char *key) {
    hook_calls *h = ctx;
    h->calls++;
    h->locked = pthread_mutex_trylock(&rt->lock) == EBUSY;
    snprintf(h->kernel, sizeof h->kernel, "%s", kernel);
    snprintf(h->key, sizeof h->key, "%s", key);
    return KDART_ENOENT;
}

static int refuse_compile(void *user, const kdart__compile_in *in, kdart__compile_out *out) {
    memset(out, 0, sizeof *out);
    out->log = kdart__strdup("kdart_unit.cu(1): error: not compiled in this test");
    return KDART_ECOMPILE;
}

START_TEST(remote_prepare_hook) {
    kdart_rt *rt = test_open("", NULL, NULL);
    ck_assert_ptr_null(rt->remote_prepare);
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = "";
    o.kernel_dir = TEST_KERNEL_DIR;
    kdart_rt *env_rt = NULL;
    ck_assert_int_eq(kdart_open(&env_rt, &o), KDART_OK);
    ck_assert_ptr_nonnull(env_rt->remote_prepare);
    kdart_close(env_rt);

    hook_calls h = {0};
    rt->remote_prepare = count_remote;
    rt->remote_ctx = &h;
    rt->compile = refuse_compile;
    kdart_prepared p;
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, &p), KDART_ECOMPILE);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_int_eq(h.locked, 1);
    ck_assert_str_eq(h.kernel, "chunk_rcumsum");
    ck_assert_str_eq(h.key, p.key);
    kdart_close(rt);
}
END_TEST

typedef struct err_thread_arg {
    kdart_rt *rt;
    int ok;
} err_thread_arg;

static void *err_thread(void *p) {
    err_thread_arg *a = p;
    /* A failure on this thread must not show on the main thread. */
    kdart_prepare(a->rt, "bwd_dhu", "K=32", "sm_90a", 0, NULL);
    a->ok = strstr(kdart_last_error(a->rt), "K=32") != NULL;
    return NULL;
}

START_TEST(per_thread_errors) {
    kdart_rt *rt = test_open("", NULL, NULL);
    ck_assert_int_eq(kdart_prepare(rt, "nope", "", "sm_90a", 0, NULL), KDART_EKERNEL);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "nope"));
    err_thread_arg a = {rt, 0};
    pthread_t th;
    pthread_create(&th, NULL, err_thread, &a);
    pthread_join(th, NULL);
    ck_assert_int_eq(a.ok, 1);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "nope"));
    kdart_close(rt);
}
END_TEST

/* Fails the n-th allocation of kdart_open for every n until it succeeds;
 * each failure must be ENOMEM and leave nothing allocated. */
START_TEST(open_alloc_failures) {
    char dir[256], db[512];
    test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/kdart.db", dir);
    const char *ro[] = {db};
    long base = kdart__alloc_live();
    int n, successes = 0, fired = 1;
    for (n = 1; n < 2000 && fired; n++) {
        kdart_options o;
        kdart_options_init(&o);
        o.cache_path = db;
        o.ro_cache_paths = ro;
        o.n_ro_cache_paths = 1;
        o.flags = KDART_OPEN_NO_ENV;
        kdart_rt *rt = NULL;
        kdart__alloc_fail_at(n);
        int rc = kdart_open(&rt, &o);
        fired = kdart__alloc_fail_at(0) == 0;
        if (rc == KDART_OK) {
            successes++;
            kdart_close(rt);
        } else {
            ck_assert_int_eq(rc, KDART_ENOMEM);
            ck_assert_ptr_null(rt);
        }
        ck_assert_int_eq(kdart__alloc_live(), base);
    }
    ck_assert_int_eq(fired, 0);
    ck_assert_int_ge(successes, 1);
    printf("open_alloc_failures: %d allocation failure points checked, no leaks\n", n - 2);
    test_rmtree(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, status_table);
    tcase_add_test(tc, sha256_vectors);
    tcase_add_test(tc, registry_specs);
    tcase_add_test(tc, check_spec_shapes);
    tcase_add_test(tc, arch_strings);
    tcase_add_test(tc, open_options);
    tcase_add_test(tc, env_overrides);
    tcase_add_test(tc, parse_bytes);
    tcase_add_test(tc, default_log_to_stderr);
    tcase_add_test(tc, env_bad_values);
    tcase_add_test(tc, env_switches_and_ranges);
    tcase_add_test(tc, env_bad_arch);
    tcase_add_test(tc, sources_closure);
    tcase_add_test(tc, symlink_escape);
    tcase_add_test(tc, unreadable_source);
    tcase_add_test(tc, odd_sources);
    tcase_add_test(tc, sources_read_unlocked);
    tcase_add_test(tc, remote_prepare_hook);
    tcase_add_test(tc, per_thread_errors);
    tcase_add_test(tc, open_alloc_failures);
    suite_add_tcase(s, tc);
    return test_run(s);
}

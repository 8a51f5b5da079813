/*
 * embed.c: kdart embedded in a C program, through an installed kdart.
 *
 * With no arguments it opens a runtime (default cache, the installed
 * kernel sources), prepares one specialization of bwd_intra for sm_100a
 * into the cache without loading it (so it needs no GPU), prints where
 * everything came from, and exits 0.  `kdart_embed KERNEL SPEC ARCH`
 * prepares another one.  Exit status 1 and kdart's message on failure.
 */
#include <stdio.h>

#include <kdart.h>

int main(int argc, char **argv) {
    const char *kernel = argc > 1 ? argv[1] : "bwd_intra";
    const char *spec = argc > 2 ? argv[2] : "io=bf16,fold_dg=0,emit_bf16=0,K=128";
    const char *arch = argc > 3 ? argv[3] : "sm_100a";

    kdart_options opts;
    kdart_options_init(&opts);
    opts.flags = KDART_OPEN_NO_CUDA; /* compile and inspect only */
    kdart_rt *rt;
    int rc = kdart_open(&rt, &opts);
    if (rc != KDART_OK) {
        fprintf(stderr, "kdart_embed: kdart_open: %s\n", kdart_strerror(rc));
        return 1;
    }
    kdart_rt_info info;
    if (kdart_info(rt, &info) == KDART_OK)
        printf("kdart %s (header %s)\nkernel dir %s\ncache      %s\n", kdart_version(), KDART_VERSION_STRING,
               info.kernel_dir, info.cache_path[0] ? info.cache_path : "(in memory)");

    kdart_prepared p;
    rc = kdart_prepare(rt, kernel, spec, arch, KDART_PREPARE_NO_LOAD, &p);
    if (rc != KDART_OK) {
        fprintf(stderr, "kdart_embed: %s\n", kdart_last_error(rt));
        kdart_close(rt);
        return 1;
    }
    static const char *const from[] = {"memory", "cache", "read-only cache", "compile"};
    printf("prepared   %s %s %s\nkey        %s (from %s, %.0f ms)\n", kernel, spec, arch, p.key,
           p.source >= 0 && p.source < 4 ? from[p.source] : "?", p.compile_ms);
    kdart_close(rt);
    return 0;
}

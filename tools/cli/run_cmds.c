/*
 * run_cmds.c: the commands that run the kernels on the GPU: `kdart
 * selftest` (every specialization against the float64 reference) and
 * `kdart bench` (time, bytes moved and bandwidth against the copy ceiling).
 *
 * Both go through kda_check.h, the check harness the GPU test suite uses
 * too, so that what a user runs on a new machine is what the tests ran.
 * Without a GPU they exit 3 and say why, before opening anything.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kda_check.h"

/* Loads the GPU for kda_check and opens the runtime with CUDA. */
static int open_gpu(cli *c) {
    char why[256];
    if (kc_init(why, sizeof why) != 0) {
        cli_error(c, "needs a GPU: %s", why);
        return EXIT_MISSING;
    }
    return cli_open(c, 1);
}

typedef struct selftest_opts {
    const char *kernel; /* only this kernel's specializations, else every kernel's */
} selftest_opts;

static int run_selftest(cli *c, const void *opts, int nargs, char **args) {
    const selftest_opts *o = opts;
    static const char *const checked[] = {"bwd_intra", "bwd_dhu", "wy_dqkg", "recompute_wu", "bwd_dav", "fwd_h",
                                          "bwd_post"};
    int known = !o->kernel;
    for (size_t i = 0; !known && i < sizeof checked / sizeof checked[0]; i++) known = strcmp(o->kernel, checked[i]) == 0;
    if (!known)
        return cli_usage(c, "--kernel takes bwd_intra, bwd_dhu, wy_dqkg, recompute_wu, bwd_dav, fwd_h or bwd_post (the "
                            "kernels with a float64 check), not '%s'", o->kernel);
    int rc = open_gpu(c);
    if (rc != EXIT_OK) return rc;
    return kc_selftest(c->rt, stdout, o->kernel) == 0 ? EXIT_OK : EXIT_FAIL;
}

static const cli_option selftest_options[] = {
    {"kernel", 0, CLI_STRING, "NAME", offsetof(selftest_opts, kernel), 0, 0, CLI_NONEMPTY,
     "only this kernel's specializations (bwd_intra, bwd_dhu, wy_dqkg, recompute_wu, bwd_dav, fwd_h or bwd_post)"},
    {NULL},
};

CLI_COMMAND(selftest, "run every kernel on the GPU against the float64 reference",
    CLI_OPTIONS(selftest_options, selftest_opts, NULL),
    .about = "Runs every specialization of bwd_intra, bwd_dhu, wy_dqkg, recompute_wu, bwd_dav,\n"
             "fwd_h and bwd_post once on fresh random inputs and prints each output's error\n"
             "against the float64 reference and the time per call.  A tail specialization\n"
             "runs with the shape that selects it (a head dim 4 below its K tile; bwd_dhu also\n"
             "a partial last V tile or the V-first state; wy_dqkg also V = 100; recompute_wu\n"
             "K = 100, V = 72; bwd_dav and fwd_h V = 100; bwd_post K = 63).  What the cache\n"
             "lacks is compiled on first use, one at a time: 'kdart prewarm --all' first\n"
             "compiles them on every core.\n",
    .exits = "Exit status: 0 all pass, 1 otherwise, 3 without a GPU.\n");

typedef struct bench_opts {
    const char *shape, *io;
    int fold_dg, emit_bf16, reps;
} bench_opts;

static int run_bench(cli *c, const void *opts, int nargs, char **args) {
    const bench_opts *o = opts;
    if (strcmp(o->io, "bf16") != 0 && strcmp(o->io, "fp16") != 0) return cli_usage(c, "--io is bf16 or fp16");
    kc_shape one = {"custom", 0, 0, 0, 0, 0, 0, o->fold_dg, o->emit_bf16};
    if (o->shape && (sscanf(o->shape, "%d,%d,%d,%d,%d,%d", &one.B, &one.T, &one.H, &one.HV, &one.K, &one.V) != 6 ||
                     one.B < 1 || one.T < 64 || one.H < 1 || one.HV < 1 || one.K < 1 || one.V < 1))
        return cli_usage(c, "--shape wants B,T,H,HV,K,V (e.g. 16,8192,16,16,128,256)");
    int rc = open_gpu(c);
    if (rc != EXIT_OK) return rc;
    double ceiling = kc_copy_ceiling();
    printf("copy ceiling (1 GiB device-to-device, read+write): %.0f GB/s\n", ceiling);
    double kus = 0, rus = 0;
    if (kc_launch_overhead(c->rt, &kus, &rus) == 0)
        printf("host time per launch: kdart %.2f us, raw cuLaunchKernel %.2f us, overhead %.2f us\n", kus, rus,
               kus - rus);
    rc = kc_bench(c->rt, o->shape ? &one : kc_standard_shapes, o->shape ? 1 : kc_n_standard, o->io[0] == 'f', o->reps,
                  ceiling, stdout);
    return rc == 0 ? EXIT_OK : EXIT_FAIL;
}

#define B(field) offsetof(bench_opts, field)
static const cli_option bench_options[] = {
    {"shape", 0, CLI_STRING, "B,T,H,HV,K,V", B(shape), 0, 0, 0,
     "one shape instead of the standard table (fla's benchmark rows and prod8192)"},
    {"io", 0, CLI_STRING, "bf16|fp16", B(io), 0, 0, 0, "the inputs' and outputs' type (default bf16)"},
    {"fold-dg", 0, CLI_FLAG, NULL, B(fold_dg), 0, 0, 0,
     "with --shape: bwd_intra folds dg (bwd_dhu and wy_dqkg are then skipped)"},
    {"emit-bf16", 0, CLI_FLAG, NULL, B(emit_bf16), 0, 0, 0,
     "with --shape: bwd_intra emits bf16 (bwd_dhu and wy_dqkg are then skipped)"},
    {"reps", 0, CLI_INT, "N", B(reps), 1, 64, 0, "launches timed per stage; the median is shown (default 20)"},
    {NULL},
};

static const bench_opts bench_defaults = {.io = "bf16", .reps = 20};

CLI_COMMAND(bench, "time the kernels: ms, GB/s and share of the copy ceiling (GPU)",
    CLI_OPTIONS(bench_options, bench_opts, &bench_defaults),
    .about = "Prints the median of N launches (CUDA events, rotating input sets), the\n"
             "bytes each stage must move, achieved GB/s and the share of the device\n"
             "copy bandwidth measured in the same run, and the host time per launch of\n"
             "kdart against a raw cuLaunchKernel.\n",
    .exits = "Exit status: 0 ok, 1 a stage failed, 2 usage, 3 without a GPU.\n");

/*
 * prewarm.c: `kdart prewarm`, which compiles the registered
 * specializations into the cache ahead of time, and `kdart kernels`, which
 * lists what is registered.
 *
 * Prewarming is what a container build or a job's first step runs so that
 * no training process pays for NVRTC: it compiles (without loading
 * anything on a GPU) the default set of every kernel, or the kernels and
 * specs asked for, for each target, on N threads sharing one runtime
 * handle, or sends the requests to the node's compile service.  One
 * progress line per entry goes to stderr, a summary to stdout.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "cli.h"

#define SPEC_MAX 256   /* longest canonical spec text we accept */
#define MAX_ARCHES 32
#define MAX_JOBS 256

typedef struct prewarm_opts {
    const char *arch; /* --arch LIST, comma-separated */
    cli_list kernels, specs;
    int all; /* not only the default set (kdart_spec_prewarmed) */
    int jobs;
    int force;
    const char *service; /* the compile service's socket, else NULL */
    int json;            /* the summary as one JSON object on stdout */
} prewarm_opts;

typedef struct prewarm_task {
    const char *kernel; /* from the registry (static storage) */
    char spec[SPEC_MAX];
    const char *arch; /* points into the --arch list copy, or the runtime's info */
} prewarm_task;

/* Shared by the worker threads of one prewarm run. */
typedef struct prewarm_run {
    kdart_rt *rt;
    prewarm_task *tasks;
    int ntasks;
    atomic_int next;      /* index of the next task to claim */
    pthread_mutex_t lock; /* guards the counts below and keeps progress lines in order */
    int done, compiled, hits, failed, unstored;
    int writable; /* the runtime's cache can be written (kdart_info) */
    double t0;
    uint32_t flags; /* KDART_PREPARE_* for every task */
    int quiet;
    const char *service; /* --service: the compile service's socket, else NULL */
} prewarm_run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Prepares one task, locally or through the service.  kdart_last_error is
 * per thread, so the detail is read here, before another call. */
static int prepare_task(prewarm_run *run, const prewarm_task *t, kdart_prepared *p, char *detail, size_t n) {
    int rc;
    memset(p, 0, sizeof *p);
    detail[0] = '\0';
    if (!run->service) {
        rc = kdart_prepare(run->rt, t->kernel, t->spec, t->arch, run->flags, p);
        if (rc != KDART_OK) cli_describe_failure(detail, n, rc, kdart_last_error(run->rt));
        return rc;
    }
    /* The service compiles into its cache and answers; no timeout: a
     * prewarm waits as long as the compiles take. */
    kdart_service_result res;
    rc = kdart_service_prepare(run->service, t->kernel, t->spec, t->arch[0] ? t->arch : NULL,
                               run->flags & KDART_PREPARE_FORCE, 0, &res);
    if (rc != KDART_OK) {
        snprintf(detail, n, "service %.200s: %s: %.1500s", run->service, kdart_errname(rc), res.message);
    } else if ((rc = res.status) != KDART_OK) {
        cli_describe_failure(detail, n, rc, res.message);
    } else {
        p->source = res.source;
        p->compile_ms = res.compile_ms;
    }
    return rc;
}

/* A compiler log spans lines: indent the continuation lines, so that the
 * whole message prints with one call and a log message from another thread
 * cannot land in the middle of it. */
static void indent_detail(char *msg, size_t n, char *detail) {
    size_t m = 0, len = strlen(detail);
    while (len > 0 && isspace((unsigned char)detail[len - 1])) detail[--len] = '\0';
    for (const char *s = detail; *s && m + 6 < n; s++) {
        msg[m++] = *s;
        if (*s == '\n' && s[1] != '\n') memcpy(msg + m, "    ", 4), m += 4;
    }
    msg[m] = '\0';
}

static void prewarm_one(prewarm_run *run, const prewarm_task *t) {
    kdart_prepared p;
    char detail[2048];
    double t1 = now_s();
    int rc = prepare_task(run, t, &p, detail, sizeof detail);
    double took = now_s() - t1;
    /* A compile is only worth its time if the cache kept it: ask the cache
     * (a read-only or full one, or none, keeps nothing; the service stores
     * into its own cache itself). */
    int kept = 1;
    if (rc == KDART_OK && p.source == KDART_FROM_COMPILE && !run->service) {
        kdart_entry *e = NULL;
        kept = run->writable && kdart_cache_get(run->rt, p.key, &e) == KDART_OK;
        kdart_entry_free(e);
    }
    const char *arch = t->arch[0] ? t->arch : "(default)";

    pthread_mutex_lock(&run->lock);
    int n = ++run->done;
    int width = snprintf(NULL, 0, "%d", run->ntasks);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "[%*d/%d %6.1fs]", width, n, run->ntasks, now_s() - run->t0);
    if (rc != KDART_OK) {
        run->failed++;
        char msg[4096];
        indent_detail(msg, sizeof msg, detail);
        fprintf(stderr, "%s %s %s %s  FAILED: %s\n", prefix, t->kernel, t->spec, arch, msg);
    } else if (p.source == KDART_FROM_COMPILE) {
        run->compiled++;
        run->unstored += !kept;
        if (!run->quiet)
            fprintf(stderr, "%s %s %s %s  compiled %.1fs%s\n", prefix, t->kernel, t->spec, arch,
                    p.compile_ms > 0 ? p.compile_ms / 1000.0 : took, kept ? "" : ", NOT STORED");
    } else {
        run->hits++;
        if (!run->quiet)
            fprintf(stderr, "%s %s %s %s  hit%s\n", prefix, t->kernel, t->spec, arch,
                    p.source == KDART_FROM_RO_CACHE ? " (read-only cache)" : "");
    }
    pthread_mutex_unlock(&run->lock);
}

static void *prewarm_worker(void *arg) {
    prewarm_run *run = arg;
    int i;
    while ((i = atomic_fetch_add(&run->next, 1)) < run->ntasks) prewarm_one(run, &run->tasks[i]);
    return NULL;
}

/* Splits the --arch list (into buf, in place) and checks each target;
 * duplicates are dropped.  EXIT_OK or EXIT_USAGE (said why). */
static int split_arches(const cli *c, const char *list, char *buf, size_t n, const char **arches, int *narches) {
    *narches = 0;
    if (strlen(list) >= n) return cli_usage(c, "--arch list too long");
    strcpy(buf, list);
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (cli_check_arch(c, tok) != EXIT_OK) return EXIT_USAGE;
        int dup = 0;
        for (int a = 0; a < *narches; a++) dup |= strcmp(arches[a], tok) == 0;
        if (dup) continue;
        if (*narches == MAX_ARCHES) return cli_usage(c, "too many architectures");
        arches[(*narches)++] = tok;
    }
    return *narches ? EXIT_OK : cli_usage(c, "--arch needs at least one architecture");
}

/* Canonical spec texts, so that a --spec typo is a usage error up front. */
static int canonical_specs(const cli *c, const prewarm_opts *o, char (*canon)[SPEC_MAX]) {
    for (int s = 0; s < o->specs.n; s++) {
        if (kdart_spec_canonical(o->kernels.v[0], o->specs.v[s], canon[s], SPEC_MAX) < 0) {
            cli_error(c, "'%s' is not a specialization of %s, whose parameters are: %s", o->specs.v[s],
                      o->kernels.v[0], kdart_kernel_params(o->kernels.v[0]));
            return EXIT_USAGE;
        }
    }
    return EXIT_OK;
}

/* Where the compiles happen: the service (pinged, so that nobody listening
 * fails at once) or a runtime opened here.  Without --arch, the target is
 * the service's default ("" on the wire) or the runtime's. */
static int prewarm_target(cli *c, const prewarm_opts *o, const char **arches, int *narches, kdart_rt_info *info,
                          int *writable) {
    *writable = 1;
    if (o->service) {
        char *pong = NULL;
        int ex = cli_service_ask(c, o->service, "kdart-proto=1\nop=ping\n", 10000, &pong);
        free(pong);
        if (ex == EXIT_OK && *narches == 0) arches[(*narches)++] = "";
        return ex;
    }
    /* Without --arch the default comes from the device, so load CUDA. */
    int rc = cli_open(c, o->arch == NULL);
    if (rc != EXIT_OK) return rc;
    int st = kdart_info(c->rt, info);
    if (st != KDART_OK) return cli_fail(c, st, "cannot read the runtime's settings");
    if (*narches == 0) {
        /* The default is KDART_ARCH's when that is set (this tool reads
         * the environment), else the device's: a bad one names its origin.
         * Without either (a CPU node building the cache for GPU nodes), both
         * targets the kernels are built for: Hopper's and Blackwell's. */
        char why[512];
        const char *env = getenv("KDART_ARCH");
        if (!(env && env[0]) && !info->cuda_available) {
            arches[(*narches)++] = "sm_90a";
            arches[(*narches)++] = "sm_100a";
        } else {
            if (kdart_arch_supported(info->default_arch, why, sizeof why) != KDART_OK)
                return cli_usage(c, "%s%s", env && env[0] ? "KDART_ARCH: " : "", why);
            arches[(*narches)++] = info->default_arch;
        }
    }
    *writable = info->cache_writable;
    /* Prewarming into memory is wasted work; say so, but do it anyway: the
     * run still shows which specializations compile. */
    if (!info->cache_writable && !c->g.quiet)
        cli_error(c, "warning: no writable cache%s%s; compiled entries will not be kept",
                  info->cache_path[0] ? " at " : "", info->cache_path);
    return EXIT_OK;
}

static int wanted(const prewarm_opts *o, const char *kernel) {
    int yes = o->kernels.n == 0;
    for (int j = 0; j < o->kernels.n; j++) yes |= strcmp(o->kernels.v[j], kernel) == 0;
    return yes;
}

/* The task list: kernel, then spec, then arch.  Returns the count, or -1
 * when out of memory. */
static int make_tasks(const prewarm_opts *o, char (*canon)[SPEC_MAX], const char **arches, int narches,
                      prewarm_task **out) {
    int most = 0;
    for (int k = 0; k < kdart_kernel_count(); k++)
        if (wanted(o, kdart_kernel_name(k)))
            most += (o->specs.n ? o->specs.n : kdart_spec_count(kdart_kernel_name(k))) * narches;
    prewarm_task *tasks = calloc(most ? (size_t)most : 1, sizeof *tasks);
    if (!(*out = tasks)) return -1;
    int n = 0;
    for (int k = 0; k < kdart_kernel_count(); k++) {
        const char *name = kdart_kernel_name(k);
        if (!wanted(o, name)) continue;
        int nsp = o->specs.n ? o->specs.n : kdart_spec_count(name);
        for (int s = 0; s < nsp; s++) {
            char spec[SPEC_MAX];
            if (o->specs.n)
                snprintf(spec, sizeof spec, "%s", canon[s]);
            else if (!o->all && kdart_spec_prewarmed(name, s) != 1)
                continue; /* compiled on first use */
            else if (kdart_spec_at(name, s, spec, sizeof spec) < 0)
                continue; /* cannot happen for s < kdart_spec_count */
            for (int a = 0; a < narches; a++) {
                tasks[n].kernel = name;
                snprintf(tasks[n].spec, sizeof tasks[n].spec, "%s", spec);
                tasks[n].arch = arches[a];
                n++;
            }
        }
    }
    return n;
}

/* Runs the tasks on `jobs` threads (the calling one included); returns how
 * many threads ran. */
static int run_tasks(prewarm_run *run, int jobs) {
    if (jobs <= 0) { /* the default: one per online CPU (compiles are CPU-bound and independent) */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = cpus < 1 ? 1 : cpus > MAX_JOBS ? MAX_JOBS : (int)cpus;
    }
    if (jobs > run->ntasks) jobs = run->ntasks > 0 ? run->ntasks : 1;
    pthread_t threads[MAX_JOBS];
    int started = 0;
    /* A thread that cannot start just means fewer workers, never a failed prewarm. */
    for (; started < jobs - 1; started++)
        if (pthread_create(&threads[started], NULL, prewarm_worker, run) != 0) break;
    prewarm_worker(run);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
    return started + 1;
}

static int run_prewarm(cli *c, const void *opts, int nargs, char **args) {
    const prewarm_opts *o = opts;
    for (int k = 0; k < o->kernels.n; k++)
        if (cli_check_kernel(c, o->kernels.v[k]) != EXIT_OK) return EXIT_NOTFOUND;
    if (o->specs.n > 0 && o->kernels.n != 1) return cli_usage(c, "--spec needs exactly one --kernel");
    if (o->all && (o->specs.n > 0 || o->service)) return cli_usage(c, "--all goes with neither --spec nor --service");

    char arch_buf[512];
    const char *arches[MAX_ARCHES];
    int narches = 0;
    if (o->arch && split_arches(c, o->arch, arch_buf, sizeof arch_buf, arches, &narches) != EXIT_OK)
        return EXIT_USAGE;
    char canon[CLI_LIST_MAX][SPEC_MAX];
    if (canonical_specs(c, o, canon) != EXIT_OK) return EXIT_USAGE;
    kdart_rt_info info; /* holds the default arch the tasks may point to */
    int writable;
    int rc = prewarm_target(c, o, arches, &narches, &info, &writable);
    if (rc != EXIT_OK) return rc;

    prewarm_run run;
    memset(&run, 0, sizeof run);
    run.ntasks = make_tasks(o, canon, arches, narches, &run.tasks);
    if (run.ntasks < 0) return cli_fail(c, KDART_ENOMEM, "prewarm");
    run.rt = c->rt;
    atomic_init(&run.next, 0);
    pthread_mutex_init(&run.lock, NULL);
    run.quiet = c->g.quiet;
    run.flags = KDART_PREPARE_NO_LOAD | (o->force ? KDART_PREPARE_FORCE : 0);
    run.service = o->service;
    run.writable = writable;
    run.t0 = now_s();
    int threads = run_tasks(&run, o->jobs);
    pthread_mutex_destroy(&run.lock);
    free(run.tasks);

    int n = run.ntasks;
    if (o->json) {
        printf("{\"entries\": %d, \"compiled\": %d, \"hits\": %d, \"failed\": %d, \"unstored\": %d, "
               "\"seconds\": %.3f, \"jobs\": %d, \"archs\": [",
               n, run.compiled, run.hits, run.failed, run.unstored, now_s() - run.t0, threads);
        for (int a = 0; a < narches; a++) {
            fputs(a ? ", " : "", stdout);
            cli_json_string(stdout, arches[a][0] ? arches[a] : "(the service's default)");
        }
        fputs("]}\n", stdout);
    } else if (!c->g.quiet) {
        printf("prewarm: %d entr%s: %d compiled, %d hits, %d failed in %.1fs (%d job%s)\n", n, n == 1 ? "y" : "ies",
               run.compiled, run.hits, run.failed, now_s() - run.t0, threads, threads > 1 ? "s" : "");
    }
    if (run.failed) return EXIT_FAIL;
    if (run.unstored) {
        cli_error(c, "%d compiled entr%s not stored in the cache (see the warnings above); exit status %d",
                  run.unstored, run.unstored == 1 ? "y was" : "ies were", EXIT_NOTSTORED);
        return EXIT_NOTSTORED;
    }
    return EXIT_OK;
}

#define P(field) offsetof(prewarm_opts, field)
static const cli_option prewarm_options[] = {
    {"arch", 0, CLI_STRING, "LIST", P(arch), 0, 0, 0,
     "comma-separated targets, e.g. sm_90a,sm_100a (default: KDART_ARCH, else the local GPU's, else both "
     "sm_90a and sm_100a)"},
    {"kernel", 0, CLI_LIST, "NAME", P(kernels), 0, 16, 0, "only this kernel (repeatable; see 'kdart kernels')"},
    {"spec", 0, CLI_LIST, "SPEC", P(specs), 0, CLI_LIST_MAX, 0,
     "only this specialization of the one --kernel, e.g. K=64 or io=bf16,fold_dg=0,emit_bf16=0,K=128 "
     "(repeatable; omitted parameters take their defaults)"},
    {"all", 0, CLI_FLAG, NULL, P(all), 0, 0, 0,
     "every specialization, the stubs that are never launched included (not with --spec or --service)"},
    {"jobs", 'j', CLI_INT, "N", P(jobs), 1, MAX_JOBS, 0, "compile with N threads (default: one per CPU)"},
    {"force", 0, CLI_FLAG, NULL, P(force), 0, 0, 0,
     "recompile even what the cache holds (including recorded failures) and replace the entries"},
    {"service", 0, CLI_STRING, "SOCKET", P(service), 0, 0, CLI_NONEMPTY,
     "send the requests to the compile service listening on SOCKET ('kdart serve'), which compiles them into "
     "its cache; --jobs requests are in flight at once.  Without --arch the service's default target is used"},
    {"json", 0, CLI_FLAG, NULL, P(json), 0, 0, 0,
     "the summary as one JSON object on stdout (entries, compiled, hits, failed, unstored, seconds, jobs, archs)"},
    {NULL},
};

static const prewarm_opts prewarm_defaults = {.jobs = 0}; /* 0: one per online CPU (run_tasks) */

CLI_COMMAND(prewarm, "compile the registered specializations into the cache",
    CLI_OPTIONS(prewarm_options, prewarm_opts, &prewarm_defaults),
    .about = "Compiles (or finds in the cache) the default set of specializations of every\n"
             "registered kernel for each target architecture, without loading anything on a\n"
             "GPU: every native one (tail=0) and the most used tail ones (see kdart.h,\n"
             "kdart_spec_prewarmed); the other tail specializations compile on first use.\n"
             "One progress line per entry goes to stderr; a summary goes to stdout.\n",
    .exits = "Exit status: 0 all entries ok (compiled ones stored), 1 some failed (or the\n"
             "service is full), 2 usage, 4 unknown kernel or no service at SOCKET,\n"
             "6 none failed but compiled entries could not be stored (no writable cache:\n"
             "read-only directory or mount, full disk, unusable file).\n");

/* ------------------------------------------------------------- kernels */

typedef struct kernels_opts {
    int args;
} kernels_opts;

/* One line per argument of a kernel's operation, from kdart_op_arg. */
static void print_args(const char *name) {
    static const char *const kinds[] = {"", "in", "out", "seqs", "int", "float"};
    kdart_op_arg_info a;
    int n = kdart_op_arg(name, 0, &a);
    if (n <= 0) {
        printf("    (no operation of its own)\n");
        return;
    }
    for (int i = 0; i < n && kdart_op_arg(name, i, &a) > 0; i++) {
        char dt[48], dims[48] = "";
        snprintf(dt, sizeof dt, "%s%s", a.dtype ? a.dtype : "", a.flag ? a.flag : "");
        if (a.dims) snprintf(dims, sizeof dims, "[%s]", a.dims);
        char line[160];
        int len = snprintf(line, sizeof line, "    %-14s %-5s %-18s %s%s", a.name, kinds[a.kind], dt, dims,
                           a.optional ? " (optional)" : "");
        while (len > 0 && len < (int)sizeof line && line[len - 1] == ' ') line[--len] = 0;
        printf("%s\n", line);
    }
}

static int run_kernels(cli *c, const void *opts, int nargs, char **args) {
    (void)c, (void)nargs, (void)args;
    const kernels_opts *o = opts;
    for (int i = 0; i < kdart_kernel_count(); i++) {
        const char *name = kdart_kernel_name(i);
        const char *params = kdart_kernel_params(name);
        printf("%-16s %3d specs  %s\n", name, kdart_spec_count(name), params ? params : "");
        if (o->args) print_args(name);
    }
    return EXIT_OK;
}

#define K(field) offsetof(kernels_opts, field)
static const cli_option kernels_options[] = {
    {"args", 0, CLI_FLAG, NULL, K(args), 0, 0, 0,
     "also each operation's arguments (kdart_op_arg): name, kind, dtype and dims"},
    {NULL},
};
#undef K

static const kernels_opts kernels_defaults = {0};

CLI_COMMAND(kernels, "list the registered kernels and their parameters",
    CLI_OPTIONS(kernels_options, kernels_opts, &kernels_defaults),
    .about = "One line per registered kernel: its name, its number of specializations\n"
             "and the values each parameter takes; with --args, the arguments of its\n"
             "operation as the checks read them.\n");

/*
 * kdart.c: the `kdart` command-line tool.
 *
 * What it is for: operating a kdart compile cache from a shell.  Prewarm it
 * (compile every registered specialization for the target architectures,
 * e.g. while building a container image, so that no job pays for NVRTC at
 * run time), look inside it (ls, show, sass, export, stats), keep it healthy
 * (verify, gc), and explain a cache miss (why).
 *
 * DESIGN.  The tool is a client of the public API in kdart.h and nothing
 * else: whatever it can do, an embedding application can do too, and the
 * tool cannot depend on the runtime's internals.  Commands live in one table
 * (name, handler, one-line summary, usage text) from which both `--help` and
 * dispatch are produced, so adding a command is one function plus one row.
 *
 * Global options (--cache, --ro-cache, --kernel-dir, --quiet, -v) may come
 * before or after the command name; they are pulled out of argv first and
 * the rest is handed to the command.  Commands that only read the cache open
 * the runtime with KDART_OPEN_NO_CUDA, so they never initialize a driver
 * and behave the same on machines without a GPU.
 *
 * Output conventions: results on stdout (tables, JSON, disassembly);
 * progress, warnings and errors on stderr, each prefixed with "kdart".
 * The exit codes are listed in EXIT_* below and in `kdart --help`.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kdart.h>

#include "kda_check.h" /* kdart selftest: runs the kernels against the float64 reference */

extern char **environ;

/* Exit codes.  Scripts depend on these: never renumber. */
enum {
    EXIT_OK = 0,        /* success */
    EXIT_FAIL = 1,      /* the operation failed: compile failure, damage found, I/O error */
    EXIT_USAGE = 2,     /* bad command line */
    EXIT_MISSING = 3,   /* a needed external tool or the GPU is missing */
    EXIT_NOTFOUND = 4,  /* unknown key, kernel or file */
    EXIT_AMBIGUOUS = 5, /* a key prefix matches more than one entry */
    EXIT_NOTSTORED = 6, /* prewarm: compiled, but the cache did not keep it */
};

#define MAX_RO_CACHES 16
#define SPEC_MAX 256 /* longest canonical spec text we accept */

/* Everything the command line decided, plus the runtime once opened.
 * One instance lives in main(); commands receive a pointer to it. */
typedef struct cli {
    kdart_options opts;                  /* handed to kdart_open */
    const char *ro_paths[MAX_RO_CACHES]; /* --ro-cache, in the order given */
    int quiet;                           /* --quiet: errors only */
    int verbose;                         /* -v: INFO, -vv: DEBUG log messages */
    const char *cmd_name;                /* for messages: "kdart ls: ..." */
    kdart_rt *rt;                        /* opened by cli_open, closed in main */
} cli;

typedef struct command command;
typedef int (*command_fn)(cli *c, const command *self, int argc, char **argv);

struct command {
    const char *name;
    command_fn run;      /* argv[0] is the command name */
    const char *summary; /* one line for `kdart --help` */
    const char *usage;   /* synopsis and options for `kdart CMD --help` */
};

static const command *find_command(const char *name);
static void print_top_help(FILE *f);

/* ------------------------------------------------------------ messages */

static void errorf(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void errorf(const cli *c, const char *fmt, ...) {
    va_list ap;
    char msg[4096];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c && c->cmd_name)
        fprintf(stderr, "kdart %s: %s\n", c->cmd_name, msg);
    else
        fprintf(stderr, "kdart: %s\n", msg);
}

/* Which exit code a library status deserves.  Bad arguments that only the
 * library can judge (a malformed spec or arch) count as usage errors. */
static int exit_for_status(int status) {
    switch (status) {
    case KDART_OK: return EXIT_OK;
    case KDART_EINVAL:
    case KDART_ESPEC:
    case KDART_EARCH: return EXIT_USAGE;
    case KDART_ENOENT:
    case KDART_EKERNEL: return EXIT_NOTFOUND;
    case KDART_EAMBIGUOUS: return EXIT_AMBIGUOUS;
    case KDART_ENOCUDA:
    case KDART_ENODEVICE: return EXIT_MISSING;
    default: return EXIT_FAIL;
    }
}

/* Describes a failure as "ENAME: detail" (the runtime's own messages
 * already start with the code's name), or "message (ENAME)" when the
 * runtime left no detail. */
static void describe_failure(char *buf, size_t n, int status, const char *detail) {
    const char *name = kdart_errname(status);
    size_t nl = strlen(name);
    if (!detail || !detail[0])
        snprintf(buf, n, "%s (%s)", kdart_strerror(status), name);
    else if (strncmp(detail, name, nl) == 0 && detail[nl] == ':')
        snprintf(buf, n, "%s", detail);
    else
        snprintf(buf, n, "%s: %s", name, detail);
}

/* Reports a failed library call as "kdart CMD: what: ENAME: detail" and
 * returns the matching exit code. */
static int fail_status(cli *c, int status, const char *what) {
    char msg[2048];
    describe_failure(msg, sizeof msg, status, c->rt ? kdart_last_error(c->rt) : "");
    errorf(c, "%s: %s", what, msg);
    return exit_for_status(status);
}

/* The library's log callback.  It is called from whichever thread logs
 * (prewarm workers included); one fprintf per message keeps lines whole. */
static void log_to_stderr(void *user, int level, const char *message) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    (void)user;
    fprintf(stderr, "kdart: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], message);
}

/* ------------------------------------------------------------ helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "2026-11-29 07:45:17 +0000" in local time; "-" for 0 (never). */
static const char *format_time(int64_t t, char *buf, size_t n, int compact) {
    if (t <= 0) {
        snprintf(buf, n, "-");
        return buf;
    }
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm) || strftime(buf, n, compact ? "%Y-%m-%dT%H:%M" : "%Y-%m-%d %H:%M:%S %z", &tm) == 0)
        snprintf(buf, n, "%" PRId64, t);
    return buf;
}

/* "512B", "12.3K", "4.0M": binary units, short enough for a table column. */
static const char *format_size(int64_t bytes, char *buf, size_t n) {
    static const char units[] = "BKMGTP";
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) v /= 1024.0, u++;
    if (u == 0)
        snprintf(buf, n, "%" PRId64 "B", bytes);
    else
        snprintf(buf, n, "%.1f%c", v, units[u]);
    return buf;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

/* Matches option `name` at argv[*i] as "--name VALUE" or "--name=VALUE".
 * Returns 1 and sets *value (advancing *i past a separate value), 0 when
 * argv[*i] is another option, -1 (message printed) when the value is
 * missing. */
static int opt_value(const cli *c, int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        errorf(c, "option %s needs a value", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

/* Prints a usage error with a pointer to the command's help; returns 2. */
static int usage_error(const cli *c, const command *self, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int usage_error(const cli *c, const command *self, const char *fmt, ...) {
    va_list ap;
    char msg[512];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    errorf(c, "%s (see 'kdart %s --help')", msg, self->name);
    return EXIT_USAGE;
}

static int unknown_arg(const cli *c, const command *self, const char *arg) {
    return arg[0] == '-' ? usage_error(c, self, "unknown option '%s'", arg)
                         : usage_error(c, self, "unexpected argument '%s'", arg);
}

/* Opens the runtime with the command line's options.  Commands that never
 * need the GPU pass need_cuda = 0 so that libcuda is not even loaded. */
static int cli_open(cli *c, int need_cuda) {
    kdart_options o = c->opts;
    if (!need_cuda) o.flags |= KDART_OPEN_NO_CUDA;
    int rc = kdart_open(&c->rt, &o);
    if (rc != KDART_OK) {
        c->rt = NULL;
        errorf(c, "cannot open the kdart runtime: %s (%s)", kdart_strerror(rc), kdart_errname(rc));
        return exit_for_status(rc);
    }
    return EXIT_OK;
}

/* ---------------------------------------------------------------- JSON */

/* Writes s as a JSON string literal: quotes, backslashes and control
 * characters escaped; bytes that are not valid UTF-8 (a compiler log can
 * contain anything) become U+FFFD so that the output always parses. */
static void json_string(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned char ch = *p;
        if (ch == '"' || ch == '\\') {
            fputc('\\', f);
            fputc(ch, f);
            p++;
        } else if (ch < 0x20 || ch == 0x7f) {
            switch (ch) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            default: fprintf(f, "\\u%04x", ch); break;
            }
            p++;
        } else if (ch < 0x80) {
            fputc(ch, f);
            p++;
        } else {
            /* Length of a well-formed UTF-8 sequence starting here, or 0. */
            int len = ch >= 0xc2 && ch <= 0xdf ? 2 : ch >= 0xe0 && ch <= 0xef ? 3 : ch >= 0xf0 && ch <= 0xf4 ? 4 : 0;
            for (int k = 1; k < len; k++)
                if ((p[k] & 0xc0) != 0x80) len = 0;
            if (len == 3 && ((ch == 0xe0 && p[1] < 0xa0) || (ch == 0xed && p[1] > 0x9f))) len = 0;
            if (len == 4 && ((ch == 0xf0 && p[1] < 0x90) || (ch == 0xf4 && p[1] > 0x8f))) len = 0;
            if (len) {
                fwrite(p, 1, (size_t)len, f);
                p += len;
            } else {
                fputs("\\ufffd", f);
                p++;
            }
        }
    }
    fputc('"', f);
}

/* Writes "name=value" lines as a JSON array of strings (lossless: the
 * manifest and report may repeat a name). */
static void json_lines(FILE *f, const char *text) {
    fputc('[', f);
    int first = 1;
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 0) {
            char *line = strndup(p, n);
            if (!first) fputs(", ", f);
            json_string(f, line ? line : "");
            free(line);
            first = 0;
        }
        p += n + (nl ? 1 : 0);
    }
    fputc(']', f);
}

/* Prints each line of text indented, skipping empty lines. */
static void print_indented(FILE *f, const char *text, const char *indent) {
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 0) fprintf(f, "%s%.*s\n", indent, (int)n, p);
        p += n + (nl ? 1 : 0);
    }
}

static const char *tier_name(int tier, char *buf, size_t n) {
    if (tier == 0)
        snprintf(buf, n, "rw");
    else
        snprintf(buf, n, "ro%d", tier);
    return buf;
}

/* Looks a key prefix up; prints the standard message when it fails. */
static int get_entry(cli *c, const char *prefix, kdart_entry **out) {
    int rc = kdart_cache_get(c->rt, prefix, out);
    if (rc == KDART_OK) return EXIT_OK;
    *out = NULL;
    if (rc == KDART_ENOENT) {
        errorf(c, "no cache entry has a key starting with '%s'", prefix);
        return EXIT_NOTFOUND;
    }
    if (rc == KDART_EAMBIGUOUS) {
        errorf(c, "key prefix '%s' matches more than one entry; give more digits", prefix);
        return EXIT_AMBIGUOUS;
    }
    if (rc == KDART_EINVAL) {
        errorf(c, "'%s' is not a key: keys are hexadecimal (see 'kdart ls')", prefix);
        return EXIT_USAGE;
    }
    return fail_status(c, rc, "cache lookup failed");
}

/* ------------------------------------------------ the compile service */

/* A field of a reply payload ("" when absent), copied into buf. */
static const char *reply_field(const char *reply, const char *key, char *buf, size_t n) {
    size_t kl = strlen(key);
    buf[0] = '\0';
    for (const char *p = reply; p && *p;) {
        size_t len = strcspn(p, "\n");
        if (len > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            snprintf(buf, n, "%.*s", (int)(len - kl - 1), p + kl + 1);
            break;
        }
        p += len + (p[len] == '\n');
    }
    return buf;
}

/* Reports a client call's transport failure with the client's own words
 * (kdart_service_error: "cannot connect to PATH: Permission denied", a
 * foreign uid), not only the status's generic text; returns the exit code:
 * 4 when nobody listens at path, 1 otherwise. */
static int service_failed(cli *c, const char *path, int st, const char *doing) {
    const char *why = kdart_service_error();
    if (st == KDART_ENOENT || st == KDART_EAGAIN) {
        errorf(c, "no compile service at %s (%s; %s)", path, st == KDART_ENOENT ? "no such socket" : "nobody listens",
               why[0] ? why : kdart_strerror(st));
        return EXIT_NOTFOUND;
    }
    errorf(c, "%s the compile service at %s failed: %s (%s)", doing, path, why[0] ? why : kdart_strerror(st),
           kdart_errname(st));
    return EXIT_FAIL;
}

/* Sends one raw request to the service at path (prewarm --service's ping,
 * serve --status).  EXIT_OK with *reply (free it) when the service answered
 * OK; otherwise says on stderr which it was, nobody listening (no socket,
 * or a stale one: exit 4), a full service (its EAGAIN reply: exit 1) or
 * another failure, and returns the exit code. */
static int service_ask(cli *c, const char *path, const char *request, int timeout_ms, char **reply) {
    char *r = NULL;
    *reply = NULL;
    int st = kdart_service_request(path, request, &r, timeout_ms);
    if (st != KDART_OK) return service_failed(c, path, st, "asking");
    char sbuf[32], nbuf[32], mbuf[1024];
    int status = atoi(reply_field(r, "status", sbuf, sizeof sbuf));
    if (status == KDART_EAGAIN)
        errorf(c, "the service is full (%s clients) on %s; try again later",
               reply_field(r, "clients", nbuf, sizeof nbuf), path);
    else if (status != KDART_OK)
        errorf(c, "the service at %s answered %s: %s", path, kdart_errname(status),
               reply_field(r, "message", mbuf, sizeof mbuf));
    if (status != KDART_OK) {
        free(r);
        return status == KDART_EAGAIN ? EXIT_FAIL : exit_for_status(status);
    }
    *reply = r;
    return EXIT_OK;
}

/* ----------------------------------------------------------- prewarm */

typedef struct prewarm_task {
    const char *kernel; /* from the registry (static storage) */
    char spec[SPEC_MAX];
    const char *arch; /* points into the --arch list copy */
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

static void prewarm_one(prewarm_run *run, const prewarm_task *t) {
    kdart_prepared p;
    memset(&p, 0, sizeof p);
    double t1 = now_s();
    int rc;
    /* kdart_last_error is per thread, so read it here, before another call. */
    char detail[2048] = "";
    if (run->service) {
        /* The service compiles into its cache and answers; no timeout: a
         * prewarm waits as long as the compiles take. */
        kdart_service_result res;
        rc = kdart_service_prepare(run->service, t->kernel, t->spec, t->arch[0] ? t->arch : NULL,
                                   run->flags & KDART_PREPARE_FORCE, 0, &res);
        if (rc != KDART_OK) {
            snprintf(detail, sizeof detail, "service %.200s: %s: %.1500s", run->service, kdart_errname(rc), res.message);
        } else if ((rc = res.status) != KDART_OK) {
            describe_failure(detail, sizeof detail, rc, res.message);
        } else {
            p.source = res.source;
            p.compile_ms = res.compile_ms;
        }
    } else {
        rc = kdart_prepare(run->rt, t->kernel, t->spec, t->arch, run->flags, &p);
        if (rc != KDART_OK) describe_failure(detail, sizeof detail, rc, kdart_last_error(run->rt));
    }
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

    pthread_mutex_lock(&run->lock);
    int n = ++run->done;
    int width = snprintf(NULL, 0, "%d", run->ntasks);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "[%*d/%d %6.1fs]", width, n, run->ntasks, now_s() - run->t0);
    if (rc != KDART_OK) {
        run->failed++;
        /* A compiler log spans lines: indent the continuation lines, and
         * print the whole message with one call so that a log message from
         * another thread cannot land in the middle of it. */
        char msg[4096];
        size_t m = 0, len = strlen(detail);
        while (len > 0 && isspace((unsigned char)detail[len - 1])) detail[--len] = '\0';
        for (const char *s = detail; *s && m + 6 < sizeof msg; s++) {
            msg[m++] = *s;
            if (*s == '\n' && s[1] != '\n') memcpy(msg + m, "    ", 4), m += 4;
        }
        msg[m] = '\0';
        fprintf(stderr, "%s %s %s %s  FAILED: %s\n", prefix, t->kernel, t->spec, t->arch[0] ? t->arch : "(default)",
                msg);
    } else if (p.source == KDART_FROM_COMPILE) {
        run->compiled++;
        run->unstored += !kept;
        if (!run->quiet)
            fprintf(stderr, "%s %s %s %s  compiled %.1fs%s\n", prefix, t->kernel, t->spec,
                    t->arch[0] ? t->arch : "(default)", p.compile_ms > 0 ? p.compile_ms / 1000.0 : took,
                    kept ? "" : ", NOT STORED");
    } else {
        run->hits++;
        if (!run->quiet)
            fprintf(stderr, "%s %s %s %s  hit%s\n", prefix, t->kernel, t->spec, t->arch[0] ? t->arch : "(default)",
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

static int kernel_known(const char *name) {
    for (int i = 0; i < kdart_kernel_count(); i++)
        if (strcmp(kdart_kernel_name(i), name) == 0) return 1;
    return 0;
}

static void list_kernels(FILE *f) {
    for (int i = 0; i < kdart_kernel_count(); i++) fprintf(f, "%s%s", i ? ", " : "", kdart_kernel_name(i));
    fputc('\n', f);
}

/* Checks a target up front (the runtime's own rule: well formed, sm_90 or
 * newer, known to NVRTC), so that a bad one fails once, with its reason,
 * rather than once per specialization; a usage error (exit 2). */
static int arch_refused(const cli *c, const command *self, const char *arch) {
    char why[512];
    if (kdart_arch_supported(arch, why, sizeof why) == KDART_OK) return 0;
    return usage_error(c, self, "%s", why);
}

static int cmd_prewarm(cli *c, const command *self, int argc, char **argv) {
    const char *arch_list = NULL;
    const char *kernels[16];
    int nkernels = 0;
    const char *specs[64];
    int nspecs = 0;
    int jobs = 1;
    uint32_t flags = KDART_PREPARE_NO_LOAD;
    const char *service = NULL;
    int writable = 1;
    int all = 0; /* --all: not only the default set (kdart_spec_prewarmed) */

    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if ((m = opt_value(c, argc, argv, &i, "--arch", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            arch_list = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--kernel", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (nkernels == (int)(sizeof kernels / sizeof kernels[0]))
                return usage_error(c, self, "too many --kernel options");
            kernels[nkernels++] = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--spec", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (nspecs == (int)(sizeof specs / sizeof specs[0])) return usage_error(c, self, "too many --spec options");
            specs[nspecs++] = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--jobs", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (parse_int(v, 1, 256, &jobs) != 0) return usage_error(c, self, "--jobs wants 1..256, not '%s'", v);
        } else if ((m = opt_value(c, argc, argv, &i, "--service", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!v[0]) return usage_error(c, self, "--service wants a socket path");
            service = v;
        } else if (strcmp(argv[i], "--force") == 0) {
            flags |= KDART_PREPARE_FORCE;
        } else if (strcmp(argv[i], "--all") == 0) {
            all = 1;
        } else if (strncmp(argv[i], "-j", 2) == 0 && argv[i][2]) {
            if (parse_int(argv[i] + 2, 1, 256, &jobs) != 0)
                return usage_error(c, self, "--jobs wants 1..256, not '%s'", argv[i] + 2);
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    for (int k = 0; k < nkernels; k++) {
        if (!kernel_known(kernels[k])) {
            errorf(c, "unknown kernel '%s'; registered kernels are:", kernels[k]);
            list_kernels(stderr);
            return EXIT_NOTFOUND;
        }
    }
    if (nspecs > 0 && nkernels != 1) return usage_error(c, self, "--spec needs exactly one --kernel");
    if (all && (nspecs > 0 || service)) return usage_error(c, self, "--all goes with neither --spec nor --service");

    /* The arch list: a private copy split in place at the commas. */
    char arch_buf[512];
    const char *arches[32];
    int narches = 0;
    if (arch_list) {
        if (strlen(arch_list) >= sizeof arch_buf) return usage_error(c, self, "--arch list too long");
        strcpy(arch_buf, arch_list);
        for (char *save = NULL, *tok = strtok_r(arch_buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            if (arch_refused(c, self, tok)) return EXIT_USAGE;
            int dup = 0;
            for (int a = 0; a < narches; a++) dup |= strcmp(arches[a], tok) == 0;
            if (dup) continue;
            if (narches == (int)(sizeof arches / sizeof arches[0]))
                return usage_error(c, self, "too many architectures");
            arches[narches++] = tok;
        }
        if (narches == 0) return usage_error(c, self, "--arch needs at least one architecture");
    }

    /* Canonical spec texts, so a --spec typo is a usage error up front. */
    char(*canon)[SPEC_MAX] = nspecs ? calloc((size_t)nspecs, SPEC_MAX) : NULL;
    if (nspecs && !canon) return fail_status(c, KDART_ENOMEM, "prewarm");
    for (int s = 0; s < nspecs; s++) {
        int st = kdart_spec_canonical(kernels[0], specs[s], canon[s], SPEC_MAX);
        if (st < 0) {
            errorf(c, "'%s' is not a specialization of %s, whose parameters are: %s", specs[s], kernels[0],
                   kdart_kernel_params(kernels[0]));
            free(canon);
            return EXIT_USAGE;
        }
    }

    if (service) {
        /* The service compiles, into its cache; without --arch, for its
         * default target ("" on the wire).  Fail at once if nobody answers. */
        char *pong = NULL;
        int ex = service_ask(c, service, "kdart-proto=1\nop=ping\n", 10000, &pong);
        free(pong);
        if (ex != EXIT_OK) {
            free(canon);
            return ex;
        }
        if (narches == 0) arches[narches++] = "";
    } else {
        /* Without --arch the default comes from the device, so load CUDA. */
        int rc = cli_open(c, arch_list == NULL);
        kdart_rt_info info;
        int st = rc == EXIT_OK ? kdart_info(c->rt, &info) : KDART_OK;
        if (rc != EXIT_OK || st != KDART_OK) {
            free(canon);
            return rc != EXIT_OK ? rc : fail_status(c, st, "cannot read the runtime's settings");
        }
        if (narches == 0 && arch_refused(c, self, info.default_arch)) { /* KDART_ARCH */
            free(canon);
            return EXIT_USAGE;
        }
        if (narches == 0) arches[narches++] = info.default_arch;
        writable = info.cache_writable;
        /* Prewarming into memory is wasted work; say so, but do it anyway:
         * the run still shows which specializations compile. */
        if (!info.cache_writable && !c->quiet)
            errorf(c, "warning: no writable cache%s%s; compiled entries will not be kept",
                   info.cache_path[0] ? " at " : "", info.cache_path);
    }

    /* Build the task list: kernel, then spec, then arch. */
    int ntasks = 0;
    for (int k = 0; k < kdart_kernel_count(); k++) {
        const char *name = kdart_kernel_name(k);
        int wanted = nkernels == 0;
        for (int j = 0; j < nkernels; j++) wanted |= strcmp(kernels[j], name) == 0;
        if (wanted) ntasks += (nspecs ? nspecs : kdart_spec_count(name)) * narches; /* (at most) */
    }
    prewarm_task *tasks = calloc(ntasks ? (size_t)ntasks : 1, sizeof *tasks);
    if (!tasks) {
        free(canon);
        return fail_status(c, KDART_ENOMEM, "prewarm");
    }
    int n = 0;
    for (int k = 0; k < kdart_kernel_count(); k++) {
        const char *name = kdart_kernel_name(k);
        int wanted = nkernels == 0;
        for (int j = 0; j < nkernels; j++) wanted |= strcmp(kernels[j], name) == 0;
        if (!wanted) continue;
        int nsp = nspecs ? nspecs : kdart_spec_count(name);
        for (int s = 0; s < nsp; s++) {
            char spec[SPEC_MAX];
            if (nspecs)
                snprintf(spec, sizeof spec, "%s", canon[s]);
            else if (!all && kdart_spec_prewarmed(name, s) != 1)
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
    free(canon);

    prewarm_run run;
    memset(&run, 0, sizeof run);
    run.rt = c->rt;
    run.tasks = tasks;
    run.ntasks = n;
    atomic_init(&run.next, 0);
    pthread_mutex_init(&run.lock, NULL);
    run.quiet = c->quiet;
    run.flags = flags;
    run.service = service;
    run.writable = writable;
    run.t0 = now_s();

    if (jobs > n) jobs = n > 0 ? n : 1;
    pthread_t threads[256];
    int started = 0;
    for (; started < jobs - 1; started++) {
        /* The calling thread is worker number `jobs`; a thread that cannot
         * start just means fewer workers, never a failed prewarm. */
        if (pthread_create(&threads[started], NULL, prewarm_worker, &run) != 0) break;
    }
    prewarm_worker(&run);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
    pthread_mutex_destroy(&run.lock);
    free(tasks);

    printf("prewarm: %d entr%s: %d compiled, %d hits, %d failed in %.1fs (%d job%s)\n", n, n == 1 ? "y" : "ies",
           run.compiled, run.hits, run.failed, now_s() - run.t0, started + 1, started ? "s" : "");
    if (run.failed) return EXIT_FAIL;
    if (run.unstored) {
        errorf(c, "%d compiled entr%s not stored in the cache (see the warnings above); exit status %d",
               run.unstored, run.unstored == 1 ? "y was" : "ies were", EXIT_NOTSTORED);
        return EXIT_NOTSTORED;
    }
    return EXIT_OK;
}

/* ---------------------------------------------------------------- ls */

typedef struct ls_row {
    char key[65];
    char *kernel, *spec, *arch;
    int failed, tier;
    size_t size;
    double compile_ms;
    int64_t created, last_used, hits;
} ls_row;

typedef struct ls_rows {
    ls_row *v;
    size_t n, cap;
    int oom;
    const char *kernel, *arch; /* --kernel, --arch: only such rows (NULL: all) */
} ls_rows;

/* kdart_cache_list callback: the entry lives only during the call, so copy. */
static int ls_collect(void *user, const kdart_entry *e) {
    ls_rows *rows = user;
    if (rows->kernel && strcmp(rows->kernel, e->kernel ? e->kernel : "") != 0) return 0;
    if (rows->arch && strcmp(rows->arch, e->arch ? e->arch : "") != 0) return 0;
    if (rows->n == rows->cap) {
        size_t cap = rows->cap ? rows->cap * 2 : 64;
        ls_row *v = realloc(rows->v, cap * sizeof *v);
        if (!v) {
            rows->oom = 1;
            return 1;
        }
        rows->v = v;
        rows->cap = cap;
    }
    ls_row *r = &rows->v[rows->n];
    memset(r, 0, sizeof *r);
    memcpy(r->key, e->key, sizeof r->key);
    r->key[64] = '\0';
    r->kernel = strdup(e->kernel ? e->kernel : "");
    r->spec = strdup(e->spec ? e->spec : "");
    r->arch = strdup(e->arch ? e->arch : "");
    if (!r->kernel || !r->spec || !r->arch) {
        free(r->kernel), free(r->spec), free(r->arch);
        rows->oom = 1;
        return 1;
    }
    r->failed = e->failed;
    r->tier = e->tier;
    r->size = e->cubin_size;
    r->compile_ms = e->compile_ms;
    r->created = e->created;
    r->last_used = e->last_used;
    r->hits = e->hits;
    rows->n++;
    return 0;
}

static int ls_order(const void *pa, const void *pb) {
    const ls_row *a = pa, *b = pb;
    int d = strcmp(a->kernel, b->kernel);
    if (!d) d = strcmp(a->spec, b->spec);
    if (!d) d = strcmp(a->arch, b->arch);
    if (!d) d = a->tier - b->tier;
    return d;
}

static int cmd_ls(cli *c, const command *self, int argc, char **argv) {
    int json = 0;
    ls_rows rows = {0};
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if ((m = opt_value(c, argc, argv, &i, "--kernel", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!kernel_known(v)) {
                errorf(c, "unknown kernel '%s'; the kernels are:", v);
                list_kernels(stderr);
                return EXIT_NOTFOUND;
            }
            rows.kernel = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--arch", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (arch_refused(c, self, v)) return EXIT_USAGE;
            rows.arch = v;
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;

    int st = kdart_cache_list(c->rt, ls_collect, &rows);
    if (rows.oom) st = KDART_ENOMEM;
    if (st != KDART_OK) {
        rc = fail_status(c, st, "cannot list the cache");
        goto out;
    }
    qsort(rows.v, rows.n, sizeof *rows.v, ls_order);

    char t1[40], sz[32], tier[16];
    if (json) {
        fputs("[", stdout);
        for (size_t i = 0; i < rows.n; i++) {
            const ls_row *r = &rows.v[i];
            fputs(i ? ",\n  {" : "\n  {", stdout);
            fputs("\"key\": ", stdout), json_string(stdout, r->key);
            fputs(", \"kernel\": ", stdout), json_string(stdout, r->kernel);
            fputs(", \"spec\": ", stdout), json_string(stdout, r->spec);
            fputs(", \"arch\": ", stdout), json_string(stdout, r->arch);
            printf(", \"status\": \"%s\", \"tier\": %d, \"cubin_size\": %zu, \"compile_ms\": %.3f",
                   r->failed ? "failed" : "ok", r->tier, r->size, r->compile_ms);
            printf(", \"hits\": %" PRId64 ", \"created\": %" PRId64 ", \"last_used\": %" PRId64 "}", r->hits,
                   r->created, r->last_used);
        }
        fputs(rows.n ? "\n]\n" : "]\n", stdout);
        goto out;
    }
    if (rows.n == 0) {
        if (!c->quiet) errorf(c, rows.kernel || rows.arch ? "no entry matches" : "the cache has no entries");
        goto out;
    }
    int wk = 6, ws = 4, wa = 4; /* widths of KERNEL, SPEC, ARCH */
    for (size_t i = 0; i < rows.n; i++) {
        int l;
        if ((l = (int)strlen(rows.v[i].kernel)) > wk) wk = l;
        if ((l = (int)strlen(rows.v[i].spec)) > ws) ws = l;
        if ((l = (int)strlen(rows.v[i].arch)) > wa) wa = l;
    }
    printf("%-12s  %-*s  %-*s  %-*s  %7s  %10s  %6s  %-16s  %-6s  %s\n", "KEY", wk, "KERNEL", ws, "SPEC", wa, "ARCH",
           "SIZE", "COMPILE_MS", "HITS", "LAST_USED", "STATUS", "TIER");
    for (size_t i = 0; i < rows.n; i++) {
        const ls_row *r = &rows.v[i];
        printf("%-12.12s  %-*s  %-*s  %-*s  %7s  %10.0f  %6" PRId64 "  %-16s  %-6s  %s\n", r->key, wk, r->kernel, ws,
               r->spec, wa, r->arch, format_size((int64_t)r->size, sz, sizeof sz), r->compile_ms, r->hits,
               format_time(r->last_used, t1, sizeof t1, 1), r->failed ? "FAILED" : "ok",
               tier_name(r->tier, tier, sizeof tier));
    }
out:
    for (size_t i = 0; i < rows.n; i++) free(rows.v[i].kernel), free(rows.v[i].spec), free(rows.v[i].arch);
    free(rows.v);
    return rc;
}

/* -------------------------------------------------------------- show */

/* Parses "KEY" plus the flags in `allowed` ("--json", "-o FILE").  Shared
 * by show, sass and export, which all take one key prefix. */
typedef struct key_args {
    const char *key;
    int json;
    const char *output;
} key_args;

enum { KA_JSON = 1, KA_OUTPUT = 2 };

/* Returns -1 when help was printed (exit 0), else an exit code. */
static int parse_key_args(cli *c, const command *self, int argc, char **argv, int allowed, key_args *ka) {
    memset(ka, 0, sizeof *ka);
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return -1;
        } else if ((allowed & KA_JSON) && strcmp(argv[i], "--json") == 0) {
            ka->json = 1;
        } else if ((allowed & KA_OUTPUT) && (m = opt_value(c, argc, argv, &i, "--output", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            ka->output = v;
        } else if ((allowed & KA_OUTPUT) && (m = opt_value(c, argc, argv, &i, "-o", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            ka->output = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return unknown_arg(c, self, argv[i]);
        } else if (!ka->key) {
            ka->key = argv[i];
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    if (!ka->key || !ka->key[0]) return usage_error(c, self, "missing KEY (a key or a unique prefix, see 'kdart ls')");
    if ((allowed & KA_OUTPUT) && !ka->output) return usage_error(c, self, "missing -o FILE");
    return EXIT_OK;
}

static void show_text(const kdart_entry *e) {
    char t[64], sz[32], tier[16];
    printf("key          %s\n", e->key);
    printf("kernel       %s\n", e->kernel ? e->kernel : "");
    printf("spec         %s\n", e->spec ? e->spec : "");
    printf("arch         %s\n", e->arch ? e->arch : "");
    printf("status       %s\n", e->failed ? "FAILED (a recorded compile failure; see the log)" : "ok");
    printf("tier         %s\n", tier_name(e->tier, tier, sizeof tier));
    printf("cubin        %zu bytes (%s)\n", e->cubin_size, format_size((int64_t)e->cubin_size, sz, sizeof sz));
    if (e->cubin_sha256 && e->cubin_sha256[0]) printf("cubin sha256 %s\n", e->cubin_sha256);
    printf("compile      %.1f ms\n", e->compile_ms);
    printf("created      %s\n", format_time(e->created, t, sizeof t, 0));
    printf("last used    %s\n", format_time(e->last_used, t, sizeof t, 0));
    printf("hits         %" PRId64 "\n", e->hits);
    printf("\nmanifest (everything in the key):\n");
    print_indented(stdout, e->manifest, "  ");
    printf("\nreport:\n");
    print_indented(stdout, e->report, "  ");
    printf("\nlog:\n");
    if (e->log && e->log[0])
        print_indented(stdout, e->log, "  ");
    else
        printf("  (empty)\n");
}

static void show_json(const kdart_entry *e) {
    fputs("{\"key\": ", stdout), json_string(stdout, e->key);
    fputs(",\n \"kernel\": ", stdout), json_string(stdout, e->kernel);
    fputs(",\n \"spec\": ", stdout), json_string(stdout, e->spec);
    fputs(",\n \"arch\": ", stdout), json_string(stdout, e->arch);
    printf(",\n \"status\": \"%s\",\n \"tier\": %d,\n \"cubin_size\": %zu", e->failed ? "failed" : "ok", e->tier,
           e->cubin_size);
    fputs(",\n \"cubin_sha256\": ", stdout), json_string(stdout, e->cubin_sha256);
    printf(",\n \"compile_ms\": %.3f,\n \"created\": %" PRId64 ",\n \"last_used\": %" PRId64 ",\n \"hits\": %" PRId64,
           e->compile_ms, e->created, e->last_used, e->hits);
    fputs(",\n \"manifest\": ", stdout), json_lines(stdout, e->manifest);
    fputs(",\n \"report\": ", stdout), json_lines(stdout, e->report);
    fputs(",\n \"log\": ", stdout), json_string(stdout, e->log ? e->log : "");
    fputs("}\n", stdout);
}

static int cmd_show(cli *c, const command *self, int argc, char **argv) {
    key_args ka;
    int rc = parse_key_args(c, self, argc, argv, KA_JSON, &ka);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    if ((rc = cli_open(c, 0)) != EXIT_OK) return rc;
    kdart_entry *e;
    if ((rc = get_entry(c, ka.key, &e)) != EXIT_OK) return rc;
    if (ka.json)
        show_json(e);
    else
        show_text(e);
    kdart_entry_free(e);
    return EXIT_OK;
}

/* ------------------------------------------------------- sass, export */

/* Writes the whole buffer; 0 on success, else errno is set. */
static int write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Finds an executable: every $PATH directory, then $CUDA_HOME/bin, then
 * /usr/local/cuda/bin (where the toolkit lives when it is not on PATH). */
static int find_tool(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    const char *cuda_home = getenv("CUDA_HOME");
    char dirs[8192];
    snprintf(dirs, sizeof dirs, "%s:%s%s:/usr/local/cuda/bin", path ? path : "",
             cuda_home && cuda_home[0] ? cuda_home : "", cuda_home && cuda_home[0] ? "/bin" : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        struct stat st;
        snprintf(out, n, "%s/%s", d, name);
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return 1;
    }
    return 0;
}

/* Refuses entries that hold no cubin (recorded compile failures). */
static int entry_has_cubin(cli *c, const kdart_entry *e) {
    if (e->failed || !e->cubin || e->cubin_size == 0) {
        errorf(c,
               "entry %.12s (%s %s %s) is a recorded compile failure and has no cubin; 'kdart show %.12s' "
               "prints its log",
               e->key, e->kernel, e->spec, e->arch, e->key);
        return 0;
    }
    return 1;
}

static int cmd_sass(cli *c, const command *self, int argc, char **argv) {
    key_args ka;
    int rc = parse_key_args(c, self, argc, argv, 0, &ka);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    if ((rc = cli_open(c, 0)) != EXIT_OK) return rc;
    kdart_entry *e;
    if ((rc = get_entry(c, ka.key, &e)) != EXIT_OK) return rc;
    if (!entry_has_cubin(c, e)) {
        kdart_entry_free(e);
        return EXIT_FAIL;
    }

    /* nvdisasm reads a bare cubin directly; cuobjdump is the fallback. */
    char tool[4096];
    char *tool_argv[4];
    if (find_tool("nvdisasm", tool, sizeof tool)) {
        tool_argv[0] = tool, tool_argv[1] = "-c";
    } else if (find_tool("cuobjdump", tool, sizeof tool)) {
        tool_argv[0] = tool, tool_argv[1] = "-sass";
    } else {
        errorf(c,
               "neither nvdisasm nor cuobjdump was found on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin; "
               "'kdart export %.12s -o FILE' writes the cubin for disassembly elsewhere",
               e->key);
        kdart_entry_free(e);
        return EXIT_MISSING;
    }

    const char *tmpdir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/kdart-%.12s-XXXXXX.cubin", tmpdir && tmpdir[0] ? tmpdir : "/tmp", e->key);
    int fd = mkstemps(path, 6);
    if (fd < 0) {
        errorf(c, "cannot create a temporary file %s: %s", path, strerror(errno));
        kdart_entry_free(e);
        return EXIT_FAIL;
    }
    int werr = write_all(fd, e->cubin, e->cubin_size) != 0 ? errno : 0;
    if (close(fd) != 0 && !werr) werr = errno;
    kdart_entry_free(e);
    if (werr) {
        errorf(c, "cannot write %s: %s", path, strerror(werr));
        unlink(path);
        return EXIT_FAIL;
    }
    tool_argv[2] = path;
    tool_argv[3] = NULL;

    fflush(stdout); /* our output so far must precede the tool's */
    pid_t pid;
    int err = posix_spawn(&pid, tool, NULL, NULL, tool_argv, environ);
    int status = 0;
    if (err == 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    unlink(path);
    if (err != 0) {
        errorf(c, "cannot run %s: %s", tool, strerror(err));
        return EXIT_MISSING;
    }
    /* SIGPIPE: whoever reads our stdout (`kdart sass KEY | head`) stopped
     * reading, which is what they asked for, not a failure. */
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) return EXIT_OK;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errorf(c, "%s failed (%s %d)", tool, WIFEXITED(status) ? "exit status" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

static int cmd_export(cli *c, const command *self, int argc, char **argv) {
    key_args ka;
    int rc = parse_key_args(c, self, argc, argv, KA_OUTPUT, &ka);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    if ((rc = cli_open(c, 0)) != EXIT_OK) return rc;
    kdart_entry *e;
    if ((rc = get_entry(c, ka.key, &e)) != EXIT_OK) return rc;
    if (!entry_has_cubin(c, e)) {
        kdart_entry_free(e);
        return EXIT_FAIL;
    }
    rc = EXIT_OK;
    if (strcmp(ka.output, "-") == 0) {
        if (isatty(STDOUT_FILENO)) {
            errorf(c, "refusing to write a binary cubin to a terminal; redirect stdout or give -o FILE");
            rc = EXIT_USAGE;
        } else if (fwrite(e->cubin, 1, e->cubin_size, stdout) != e->cubin_size || fflush(stdout) != 0) {
            errorf(c, "cannot write to stdout: %s", strerror(errno));
            rc = EXIT_FAIL;
        }
    } else {
        FILE *f = fopen(ka.output, "wb");
        if (!f) {
            errorf(c, "cannot create %s: %s", ka.output, strerror(errno));
            rc = EXIT_FAIL;
        } else {
            int ok = fwrite(e->cubin, 1, e->cubin_size, f) == e->cubin_size;
            int err = errno;
            if (fclose(f) != 0 && ok) ok = 0, err = errno;
            if (!ok) {
                errorf(c, "cannot write %s: %s", ka.output, strerror(err));
                rc = EXIT_FAIL;
            } else if (!c->quiet) {
                fprintf(stderr, "kdart export: wrote %zu bytes (%s %s %s) to %s\n", e->cubin_size, e->kernel, e->spec,
                        e->arch, ka.output);
            }
        }
    }
    kdart_entry_free(e);
    return rc;
}

/* ------------------------------------------------- verify, gc, stats */

/* For commands that take no arguments but --help (and maybe --json). */
static int parse_no_args(cli *c, const command *self, int argc, char **argv, int *json) {
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return -1;
        } else if (json && strcmp(argv[i], "--json") == 0) {
            *json = 1;
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    return EXIT_OK;
}

/* parse_no_args, then cli_open: -1 after --help, else an exit status. */
static int open_no_args(cli *c, const command *self, int argc, char **argv) {
    int rc = parse_no_args(c, self, argc, argv, NULL);
    return rc != EXIT_OK ? rc : cli_open(c, 0);
}

static int cmd_verify(cli *c, const command *self, int argc, char **argv) {
    int rc = open_no_args(c, self, argc, argv);
    if (rc != EXIT_OK) return rc < 0 ? EXIT_OK : rc;
    int64_t checked = 0, damaged = 0;
    int st = kdart_cache_verify(c->rt, &checked, &damaged);
    if (st != KDART_OK && st != KDART_ECORRUPT) return fail_status(c, st, "verify failed");
    if (st == KDART_ECORRUPT) errorf(c, "%s", kdart_last_error(c->rt)); /* what was wrong, what was done */
    printf("checked %" PRId64 " entr%s, %" PRId64 " damaged%s\n", checked, checked == 1 ? "y" : "ies", damaged,
           damaged ? " (quarantined; they will be recompiled on next use)" : "");
    return damaged || st == KDART_ECORRUPT ? EXIT_FAIL : EXIT_OK;
}

static int cmd_gc(cli *c, const command *self, int argc, char **argv) {
    const char *max = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if ((m = opt_value(c, argc, argv, &i, "--max-bytes", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            max = v;
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    if (!max) return usage_error(c, self, "missing --max-bytes N");
    int64_t max_bytes;
    if (kdart_parse_bytes(max, &max_bytes) != KDART_OK) /* as KDART_CACHE_MAX_BYTES reads it */
        return usage_error(c, self, "--max-bytes wants a size like 512M or 2G, not '%s'", max);
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;
    int64_t evicted = 0, freed = 0;
    int st = kdart_cache_gc(c->rt, max_bytes, &evicted, &freed);
    if (st != KDART_OK) return fail_status(c, st, "gc failed");
    char sz[32];
    printf("evicted %" PRId64 " entr%s, freed %" PRId64 " bytes (%s)\n", evicted, evicted == 1 ? "y" : "ies", freed,
           format_size(freed, sz, sizeof sz));
    return EXIT_OK;
}

static int cmd_rm(cli *c, const command *self, int argc, char **argv) {
    int nkeys = 0;
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return unknown_arg(c, self, argv[i]);
        }
        nkeys++;
    }
    if (!nkeys) return usage_error(c, self, "missing KEY (a key or a unique prefix, see 'kdart ls')");
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;
    /* Every key is tried; the exit status is the first failure's. */
    for (int i = 1; i < argc; i++) {
        char key[65];
        int st = kdart_cache_remove(c->rt, argv[i], key);
        int e = st == KDART_OK ? EXIT_OK : fail_status(c, st, "cannot remove");
        if (st == KDART_OK && !c->quiet) printf("removed %s\n", key);
        if (rc == EXIT_OK) rc = e;
    }
    return rc;
}

static int cmd_clear(cli *c, const command *self, int argc, char **argv) {
    int rc = open_no_args(c, self, argc, argv);
    if (rc != EXIT_OK) return rc < 0 ? EXIT_OK : rc;
    int64_t removed = 0;
    int st = kdart_cache_clear(c->rt, &removed);
    if (st != KDART_OK) return fail_status(c, st, "clear failed");
    printf("removed %" PRId64 " entr%s\n", removed, removed == 1 ? "y" : "ies");
    return EXIT_OK;
}

static int cmd_stats(cli *c, const command *self, int argc, char **argv) {
    int json = 0;
    int rc = parse_no_args(c, self, argc, argv, &json);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    /* CUDA is loaded here on purpose: "is CUDA available" is a question
     * stats answers. */
    if ((rc = cli_open(c, 1)) != EXIT_OK) return rc;
    kdart_rt_info info;
    int st = kdart_info(c->rt, &info);
    if (st != KDART_OK) return fail_status(c, st, "cannot read the runtime's settings");
    /* Without a disk cache (":memory:", or one that could not be opened,
     * which the runtime has already warned about) there are no totals to
     * show, and that is not an error of `stats`. */
    kdart_cache_stats cs;
    memset(&cs, 0, sizeof cs);
    int have_cache = info.cache_path && info.cache_path[0];
    int st2 = have_cache ? kdart_cache_stats_get(c->rt, &cs) : KDART_OK;
    if (st2 != KDART_OK && !json) fail_status(c, st2, "cannot read cache statistics");

    if (json) {
        fputs("{\"version\": ", stdout), json_string(stdout, kdart_version());
        fputs(",\n \"cache_path\": ", stdout), json_string(stdout, info.cache_path);
        printf(",\n \"cache_writable\": %s", info.cache_writable ? "true" : "false");
        fputs(",\n \"ro_cache_paths\": [", stdout);
        for (size_t i = 0; i < c->opts.n_ro_cache_paths; i++) {
            if (i) fputs(", ", stdout);
            json_string(stdout, c->ro_paths[i]);
        }
        fputs("]", stdout);
        fputs(",\n \"kernel_dir\": ", stdout), json_string(stdout, info.kernel_dir);
        fputs(",\n \"default_arch\": ", stdout), json_string(stdout, info.default_arch);
        printf(",\n \"nvrtc_version\": \"%d.%d\"", info.nvrtc_major, info.nvrtc_minor);
        fputs(",\n \"nvrtc_build\": ", stdout), json_string(stdout, info.nvrtc_build);
        printf(",\n \"nvjitlink_version\": \"%d.%d\"", info.nvjitlink_major, info.nvjitlink_minor);
        printf(",\n \"cuda_available\": %s", info.cuda_available ? "true" : "false");
        printf(",\n \"cache_max_bytes\": %" PRId64, info.cache_max_bytes);
        if (have_cache && st2 == KDART_OK)
            printf(",\n \"entries\": %" PRId64 ",\n \"failed_entries\": %" PRId64 ",\n \"quarantined\": %" PRId64
                   ",\n \"bytes\": %" PRId64 ",\n \"hits\": %" PRId64 ",\n \"misses\": %" PRId64
                   ",\n \"compile_ms_total\": %.3f",
                   cs.entries, cs.failed_entries, cs.quarantined, cs.bytes, cs.hits, cs.misses, cs.compile_ms_total);
        fputs("}\n", stdout);
        return st2 == KDART_OK ? EXIT_OK : exit_for_status(st2);
    }

    char sz[32], sz2[32];
    printf("kdart            %s\n", kdart_version());
    if (have_cache)
        printf("cache path       %s (%s)\n", info.cache_path, info.cache_writable ? "writable" : "read-only");
    else
        printf("cache path       none: compiling in memory\n");
    for (size_t i = 0; i < c->opts.n_ro_cache_paths; i++)
        printf("read-only cache  %s (tier ro%zu)\n", c->ro_paths[i], i + 1);
    printf("kernel dir       %s\n", info.kernel_dir ? info.kernel_dir : "");
    printf("default arch     %s\n", info.default_arch ? info.default_arch : "");
    printf("NVRTC            %d.%d (%s)\n", info.nvrtc_major, info.nvrtc_minor,
           info.nvrtc_build ? info.nvrtc_build : "?");
    printf("nvJitLink        %d.%d\n", info.nvjitlink_major, info.nvjitlink_minor);
    printf("CUDA             %s\n", info.cuda_available ? "available" : "not available (no driver or no device)");
    if (have_cache && st2 == KDART_OK) {
        printf("entries          %" PRId64 " (%" PRId64 " failed compiles, %" PRId64 " quarantined)\n", cs.entries,
               cs.failed_entries, cs.quarantined);
        printf("cubin bytes      %" PRId64 " (%s) of %s allowed\n", cs.bytes, format_size(cs.bytes, sz, sizeof sz),
               cs.max_bytes < 0 ? "unlimited"
                                : format_size(cs.max_bytes ? cs.max_bytes : info.cache_max_bytes, sz2, sizeof sz2));
        printf("hits             %" PRId64 "\n", cs.hits);
        if (cs.misses >= 0)
            printf("misses           %" PRId64 " (prepares that found no entry and compiled)\n", cs.misses);
        else
            printf("misses           unknown (the counter could not be read)\n");
        printf("compile time     %.1f s in total\n", cs.compile_ms_total / 1000.0);
    }
    return st2 == KDART_OK ? EXIT_OK : exit_for_status(st2);
}

/* ---------------------------------------------------------------- why */

static int cmd_why(cli *c, const command *self, int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    const char *arch = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if ((m = opt_value(c, argc, argv, &i, "--arch", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            arch = v;
        } else if (argv[i][0] == '-' || npos == 2) {
            return unknown_arg(c, self, argv[i]);
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos < 1) return usage_error(c, self, "missing KERNEL");
    if (!kernel_known(pos[0])) {
        errorf(c, "unknown kernel '%s'; registered kernels are:", pos[0]);
        list_kernels(stderr);
        return EXIT_NOTFOUND;
    }
    if (arch && arch_refused(c, self, arch)) return EXIT_USAGE;
    /* Without --arch the answer is about the device's default target. */
    int rc = cli_open(c, arch == NULL);
    if (rc != EXIT_OK) return rc;
    char *text = NULL;
    int st = kdart_why(c->rt, pos[0], pos[1] ? pos[1] : "", arch, &text);
    if (st != KDART_OK) {
        free(text);
        if (st == KDART_ESPEC)
            errorf(c, "'%s' is not a specialization of %s, whose parameters are: %s", pos[1] ? pos[1] : "", pos[0],
                   kdart_kernel_params(pos[0]));
        return st == KDART_ESPEC ? EXIT_USAGE : fail_status(c, st, "why failed");
    }
    fputs(text ? text : "", stdout);
    if (text && text[0] && text[strlen(text) - 1] != '\n') fputc('\n', stdout);
    free(text);
    return EXIT_OK;
}

/* -------------------------------------------------------------- serve */

static void serve_ready(void *user, const char *socket_path) {
    const cli *c = user;
    if (!c->quiet) errorf(c, "listening on %s (pid %ld)", socket_path, (long)getpid());
}

static int cmd_serve(cli *c, const command *self, int argc, char **argv) {
    const char *socket_path = NULL;
    int jobs = 0, max_clients = 0, stop = 0, status = 0;
    double timeout_s = 0, idle_s = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if ((m = opt_value(c, argc, argv, &i, "--socket", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            socket_path = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--jobs", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (parse_int(v, 1, 1024, &jobs) != 0) return usage_error(c, self, "--jobs wants 1..1024, not '%s'", v);
        } else if (strncmp(argv[i], "-j", 2) == 0 && argv[i][2]) {
            if (parse_int(argv[i] + 2, 1, 1024, &jobs) != 0)
                return usage_error(c, self, "--jobs wants 1..1024, not '%s'", argv[i] + 2);
        } else if ((m = opt_value(c, argc, argv, &i, "--max-clients", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (parse_int(v, 1, 1 << 20, &max_clients) != 0)
                return usage_error(c, self, "--max-clients wants a positive number, not '%s'", v);
        } else if ((m = opt_value(c, argc, argv, &i, "--timeout", &v)) != 0) {
            char *end;
            if (m < 0) return EXIT_USAGE;
            timeout_s = strtod(v, &end);
            if (end == v || *end || !(timeout_s > 0) || timeout_s > 1e6)
                return usage_error(c, self, "--timeout wants seconds, not '%s'", v);
        } else if ((m = opt_value(c, argc, argv, &i, "--idle-timeout", &v)) != 0) {
            char *end;
            if (m < 0) return EXIT_USAGE;
            idle_s = strtod(v, &end);
            if (end == v || *end || !(idle_s >= 0.001) || idle_s > 86400)
                return usage_error(c, self, "--idle-timeout wants seconds (0.001 to 86400), not '%s'", v);
        } else if (strcmp(argv[i], "--stop") == 0) {
            stop = 1;
        } else if (strcmp(argv[i], "--status") == 0) {
            status = 1;
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    if (!socket_path || !socket_path[0]) return usage_error(c, self, "missing --socket PATH");
    if (stop && status) return usage_error(c, self, "--stop and --status exclude each other");
    if (stop || status) {
        int timeout_ms = (int)((timeout_s > 0 ? timeout_s : stop ? 600 : 10) * 1000);
        if (status) {
            /* Exit 0 only when the service answered OK: a full one answers EAGAIN. */
            char *reply = NULL;
            int ex = service_ask(c, socket_path, "kdart-proto=1\nop=stats\n", timeout_ms, &reply);
            if (ex == EXIT_OK) fputs(reply, stdout);
            free(reply);
            return ex;
        }
        int st = kdart_serve_stop_request(socket_path, timeout_ms);
        if (st == KDART_OK) {
            if (!c->quiet) errorf(c, "the service on %s has stopped", socket_path);
            return EXIT_OK;
        }
        if (st == KDART_EAGAIN) {
            /* Nobody listens, or a full service answered EAGAIN: a ping
             * tells them apart (and says which). */
            char *pong = NULL;
            int ex = service_ask(c, socket_path, "kdart-proto=1\nop=ping\n", timeout_ms, &pong);
            free(pong);
            if (ex != EXIT_OK) return ex;
        }
        return service_failed(c, socket_path, st, "stopping");
    }
    /* The service resolves its default arch from the local GPU, as prewarm does. */
    int rc = cli_open(c, 1);
    if (rc != EXIT_OK) return rc;
    kdart_serve_options so;
    kdart_serve_options_init(&so);
    so.jobs = jobs;
    so.max_clients = max_clients;
    so.idle_timeout_ms = (int)(idle_s * 1000 + 0.5);
    so.ready = serve_ready;
    so.ready_user = c;
    int st = kdart_serve(c->rt, socket_path, &so);
    if (st != KDART_OK) return fail_status(c, st, "cannot serve");
    if (!c->quiet) errorf(c, "stopped; %s removed", socket_path);
    return EXIT_OK;
}

/* ------------------------------------------------------ kernels, help */

static int cmd_kernels(cli *c, const command *self, int argc, char **argv) {
    int rc = parse_no_args(c, self, argc, argv, NULL);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    for (int i = 0; i < kdart_kernel_count(); i++) {
        const char *name = kdart_kernel_name(i);
        const char *params = kdart_kernel_params(name);
        printf("%-16s %3d specs  %s\n", name, kdart_spec_count(name), params ? params : "");
    }
    return EXIT_OK;
}

/* Needs a GPU and the kernels' reference tests; the command exists now so
 * that scripts and help text are stable. */
static int cmd_selftest(cli *c, const command *self, int argc, char **argv) {
    int rc = parse_no_args(c, self, argc, argv, NULL);
    if (rc < 0) return EXIT_OK;
    if (rc != EXIT_OK) return rc;
    char why[256];
    if (kc_init(why, sizeof why) != 0) {
        errorf(c, "needs a GPU: %s", why);
        return EXIT_MISSING;
    }
    if ((rc = cli_open(c, 1)) != EXIT_OK) return rc;
    /* kda_check launches both kernels on fresh random inputs through the
     * public API and compares with the float64 reference. */
    return kc_selftest(c->rt, stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* kdart bench: the kernels' time, bytes and bandwidth against the copy
 * ceiling measured in the same run, on the standard table or one shape,
 * and the host overhead of a kdart launch over a raw cuLaunchKernel. */
static int cmd_bench(cli *c, const command *self, int argc, char **argv) {
    const char *shape = NULL, *io = "bf16", *reps_s = "20";
    int fold = 0, emit = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (is_help(argv[i])) {
            fputs(self->usage, stdout);
            return EXIT_OK;
        } else if ((m = opt_value(c, argc, argv, &i, "--shape", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            shape = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--io", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            io = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--reps", &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            reps_s = v;
        } else if (strcmp(argv[i], "--fold-dg") == 0) {
            fold = 1;
        } else if (strcmp(argv[i], "--emit-bf16") == 0) {
            emit = 1;
        } else {
            return unknown_arg(c, self, argv[i]);
        }
    }
    if (strcmp(io, "bf16") != 0 && strcmp(io, "fp16") != 0) return usage_error(c, self, "--io is bf16 or fp16");
    int reps = atoi(reps_s);
    if (reps < 1 || reps > 64) return usage_error(c, self, "--reps wants 1..64");
    kc_shape one = {"custom", 0, 0, 0, 0, 0, 0, fold, emit};
    if (shape && (sscanf(shape, "%d,%d,%d,%d,%d,%d", &one.B, &one.T, &one.H, &one.HV, &one.K, &one.V) != 6 ||
                  one.B < 1 || one.T < 64 || one.H < 1 || one.HV < 1 || one.K < 1 || one.V < 1))
        return usage_error(c, self, "--shape wants B,T,H,HV,K,V (e.g. 16,8192,16,16,128,256)");
    char why[256];
    if (kc_init(why, sizeof why) != 0) {
        errorf(c, "needs a GPU: %s", why);
        return EXIT_MISSING;
    }
    int rc = cli_open(c, 1);
    if (rc != EXIT_OK) return rc;
    double ceiling = kc_copy_ceiling();
    printf("copy ceiling (1 GiB device-to-device, read+write): %.0f GB/s\n", ceiling);
    double kus = 0, rus = 0;
    if (kc_launch_overhead(c->rt, &kus, &rus) == 0)
        printf("host time per launch: kdart %.2f us, raw cuLaunchKernel %.2f us, overhead %.2f us\n", kus, rus,
               kus - rus);
    rc = kc_bench(c->rt, shape ? &one : kc_standard_shapes, shape ? 1 : kc_n_standard, io[0] == 'f', reps, ceiling,
                  stdout);
    return rc == 0 ? EXIT_OK : EXIT_FAIL;
}

static int cmd_help(cli *c, const command *self, int argc, char **argv) {
    if (argc < 2) {
        print_top_help(stdout);
        return EXIT_OK;
    }
    if (is_help(argv[1])) {
        fputs(self->usage, stdout);
        return EXIT_OK;
    }
    const command *cmd = find_command(argv[1]);
    if (!cmd) {
        errorf(c, "unknown command '%s' (see 'kdart --help')", argv[1]);
        return EXIT_USAGE;
    }
    fputs(cmd->usage, stdout);
    return EXIT_OK;
}

/* ------------------------------------------------------ the table */

static const command commands[] = {
    {"prewarm", cmd_prewarm, "compile the registered specializations into the cache",
     "usage: kdart prewarm [--arch LIST] [--kernel NAME]... [--spec SPEC]... [--all] [--jobs N]\n"
     "                     [--force] [--service SOCKET]\n"
     "\n"
     "Compiles (or finds in the cache) the default set of specializations of every\n"
     "registered kernel for each target architecture, without loading anything on a\n"
     "GPU: every native one (tail=0) and the most used tail ones (see kdart.h,\n"
     "kdart_spec_prewarmed); the other tail specializations compile on first use.\n"
     "One progress line per entry goes to stderr; a summary goes to stdout.\n"
     "\n"
     "  --arch LIST     comma-separated targets, e.g. sm_90a,sm_100a (default: the\n"
     "                  runtime's default: KDART_ARCH, else the local GPU's, else sm_100a)\n"
     "  --kernel NAME   only this kernel (repeatable; see 'kdart kernels')\n"
     "  --spec SPEC     only this specialization of the one --kernel, e.g. K=64 or\n"
     "                  io=bf16,fold_dg=0,emit_bf16=0,K=128 (repeatable; omitted\n"
     "                  parameters take their defaults)\n"
     "  --all           every specialization, the stubs that are never launched\n"
     "                  included (not with --spec or --service)\n"
     "  --jobs N, -jN   compile with N threads (default 1)\n"
     "  --force         recompile even what the cache holds (including recorded\n"
     "                  failures) and replace the entries\n"
     "\n"
     "  --service SOCKET  send the requests to the compile service listening on\n"
     "                  SOCKET ('kdart serve'), which compiles them into its cache;\n"
     "                  --jobs requests are in flight at once.  Without --arch the\n"
     "                  service's default target is used\n"
     "\n"
     "Exit status: 0 all entries ok (compiled ones stored), 1 some failed (or the\n"
     "service is full), 2 usage, 4 unknown kernel or no service at SOCKET,\n"
     "6 none failed but compiled entries could not be stored (no writable cache:\n"
     "read-only directory or mount, full disk, unusable file).\n"},
    {"ls", cmd_ls, "list cache entries",
     "usage: kdart ls [--kernel NAME] [--arch ARCH] [--json]\n"
     "\n"
     "One line per entry of the writable cache and every --ro-cache:\n"
     "KEY (first 12 hex digits), KERNEL, SPEC, ARCH, SIZE (cubin), COMPILE_MS,\n"
     "HITS, LAST_USED (local time), STATUS (ok, or FAILED for a recorded compile\n"
     "failure) and TIER (rw: the writable cache; roN: the N-th --ro-cache).\n"
     "\n"
     "  --kernel NAME   only this kernel's entries (see 'kdart kernels')\n"
     "  --arch ARCH     only entries for this target, e.g. sm_90a\n"
     "  --json          a JSON array of objects with the full key and raw numbers\n"
     "\n"
     "Exit status: 0 ok (also when nothing matches), 2 usage, 4 unknown kernel.\n"},
    {"show", cmd_show, "print everything about one entry",
     "usage: kdart show KEY [--json]\n"
     "\n"
     "KEY is a full key or a unique prefix of one.  Prints the key, kernel, spec,\n"
     "arch, status, sizes, compile time, times and hits, the manifest (every\n"
     "line that went into the key), the report (registers, spills, stack, shared\n"
     "and constant memory per kernel) and the compiler and linker logs.\n"
     "\n"
     "  --json   the same as one JSON object\n"
     "\n"
     "Exit status: 0 found, 4 no such key, 5 the prefix is ambiguous.\n"},
    {"sass", cmd_sass, "disassemble an entry's cubin (nvdisasm or cuobjdump)",
     "usage: kdart sass KEY\n"
     "\n"
     "Writes the entry's cubin to a temporary file and runs 'nvdisasm -c' on it,\n"
     "or 'cuobjdump -sass' when nvdisasm is missing.  Both are looked for on PATH,\n"
     "in $CUDA_HOME/bin and in /usr/local/cuda/bin.\n"
     "\n"
     "Exit status: 0 ok, 1 the tool failed, 3 no disassembler found, 4 no such\n"
     "key, 5 ambiguous prefix.\n"},
    {"export", cmd_export, "write an entry's cubin to a file",
     "usage: kdart export KEY -o FILE\n"
     "\n"
     "Writes the raw cubin (an ELF file that cuobjdump and nvdisasm read).\n"
     "\n"
     "  -o, --output FILE   where to write it; '-' for stdout (not a terminal)\n"},
    {"verify", cmd_verify, "check the cache's integrity and every cubin's checksum",
     "usage: kdart verify\n"
     "\n"
     "Runs SQLite's integrity check and compares every cubin with its stored\n"
     "SHA-256.  Damaged entries are quarantined (they are recompiled when next\n"
     "needed); damaged indexes are rebuilt; damage in the file's pages that\n"
     "cannot be rebuilt is healed by salvaging every entry that can still be\n"
     "read into a fresh file (the damaged one is moved aside as\n"
     "kdart.db.corrupt-TIME-PID).  What was wrong and what was done goes to\n"
     "stderr.\n"
     "\n"
     "Exit status: 0 clean, 1 damage found (and repaired: the next run is clean).\n"},
    {"gc", cmd_gc, "evict least recently used entries down to a size",
     "usage: kdart gc --max-bytes N\n"
     "\n"
     "Evicts least recently used entries until the cubins in the writable cache\n"
     "take at most N bytes.  N takes a binary suffix: K, M, G, T (512M, 2G, 1.5GiB;\n"
     "read as KDART_CACHE_MAX_BYTES is).\n"
     "--max-bytes 0 evicts every entry that holds a cubin.\n"},
    {"rm", cmd_rm, "remove entries from the writable cache",
     "usage: kdart rm KEY...\n"
     "\n"
     "Removes each entry whose key starts with KEY (a full key or a unique\n"
     "prefix, see 'kdart ls') from the writable cache; read-only caches are\n"
     "never changed.  The next prepare of a removed specialization compiles it.\n"
     "\n"
     "Exit status: 0 all removed, 1 the cache failed, 4 no such key (in the\n"
     "writable cache), 5 an ambiguous prefix; every KEY is tried, the status is\n"
     "the first failure's.\n"},
    {"clear", cmd_clear, "remove every entry from the writable cache",
     "usage: kdart clear\n"
     "\n"
     "Removes every entry, including recorded compile failures and quarantined\n"
     "rows, from the writable cache in one transaction.  Read-only caches are\n"
     "never changed.\n"
     "\n"
     "Exit status: 0 ok, 1 the cache failed or there is no writable cache.\n"},
    {"stats", cmd_stats, "cache statistics and the runtime's settings",
     "usage: kdart stats [--json]\n"
     "\n"
     "Prints the cache path and whether it is writable, the read-only caches,\n"
     "the kernel source directory, the default architecture, the NVRTC and\n"
     "nvJitLink versions, whether CUDA is available, and the cache's entry,\n"
     "byte, hit, miss and compile-time totals (hits: entries served from the\n"
     "cache; misses: prepares that found no entry and compiled).\n"},
    {"why", cmd_why, "explain the key of a specialization and how the cache differs",
     "usage: kdart why KERNEL [SPEC] [--arch A]\n"
     "\n"
     "Prints the manifest that (KERNEL, SPEC, A) would be keyed by and how the\n"
     "nearest cached entries differ from it, field by field: the answer to\n"
     "\"why did this compile again?\".  SPEC defaults to the kernel's default\n"
     "specialization; A to the runtime's default architecture.\n"
     "\n"
     "Exit status: 0 ok, 2 bad spec or arch, 4 unknown kernel.\n"},
    {"serve", cmd_serve, "run the node's compile service on a Unix socket",
     "usage: kdart serve --socket PATH [--jobs N] [--max-clients N] [--idle-timeout S]\n"
     "       kdart serve --stop --socket PATH [--timeout S]\n"
     "       kdart serve --status --socket PATH\n"
     "\n"
     "Runs the compile service: clients on this node (the library, when its\n"
     "environment has KDART_SERVICE=PATH, and 'kdart prewarm --service PATH')\n"
     "send it prepare requests; it compiles each key once, with N worker threads,\n"
     "into the cache given by --cache / KDART_CACHE_DIR, which its clients read.\n"
     "The socket is created with mode 0600 and never listens on a network.  A\n"
     "stale socket file at PATH is replaced; a live service there is an error.\n"
     "SIGTERM, SIGINT or 'kdart serve --stop' stop it cleanly: queued requests\n"
     "are canceled, compiles in flight finish, the socket file is removed.\n"
     "Protocol: docs/protocol.md.\n"
     "\n"
     "  --socket PATH      the Unix domain socket (at most 107 bytes)\n"
     "  --jobs N, -jN      compile worker threads (default: the number of CPUs)\n"
     "  --max-clients N    connections at once (default 1024); more are refused\n"
     "                     with EAGAIN ('the service is full')\n"
     "  --idle-timeout S   close a connection that sends no complete request for S\n"
     "                     seconds after it connected or was last answered\n"
     "                     (default 10; one waiting for its compiles is not idle)\n"
     "  --stop             ask the service on PATH to stop, and wait until it has\n"
     "  --timeout S        how long --stop waits (default 600 s)\n"
     "  --status           print the service's counters (key=value lines)\n"
     "\n"
     "Exit status: 0 stopped cleanly (or --stop/--status answered OK), 1 failure\n"
     "(another service already listens on PATH, the socket cannot be created,\n"
     "--status: the service is full or did not answer OK), 2 usage (also: PATH\n"
     "exists and is not a socket, or is too long), 4 no service at PATH (--stop,\n"
     "--status).\n"},
    {"kernels", cmd_kernels, "list the registered kernels and their parameters",
     "usage: kdart kernels\n"
     "\n"
     "One line per registered kernel: its name, its number of specializations\n"
     "and the values each parameter takes.\n"},
    {"selftest", cmd_selftest, "run every kernel on the GPU against the float64 reference",
     "usage: kdart selftest\n"
     "\n"
     "Runs every specialization of bwd_intra and bwd_dhu once on fresh random\n"
     "inputs and prints each output's error against the float64 reference and\n"
     "the time per call.  A tail=1 specialization runs with the shape that\n"
     "selects it (a head dim 4 below its K tile; bwd_dhu also a partial last V\n"
     "tile or the V-first state).  Exit 0 when all pass, 1 otherwise, 3\n"
     "without a GPU.\n"},
    {"bench", cmd_bench, "time the kernels: ms, GB/s and share of the copy ceiling (GPU)",
     "usage: kdart bench [--shape B,T,H,HV,K,V] [--io bf16|fp16] [--fold-dg] [--emit-bf16] [--reps N]\n"
     "  Without --shape: the standard table (fla's benchmark rows and prod8192).\n"
     "  Prints the median of N launches (CUDA events, rotating input sets), the\n"
     "  bytes each stage must move, achieved GB/s and the share of the device\n"
     "  copy bandwidth measured in the same run, and the host time per launch of\n"
     "  kdart against a raw cuLaunchKernel.  Exit 3 without a GPU.\n"},
    {"help", cmd_help, "help on a command", "usage: kdart help [COMMAND]\n"},
};

static const command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void print_top_help(FILE *f) {
    fputs("usage: kdart [GLOBAL OPTIONS] COMMAND [ARGS]\n"
          "\n"
          "Operates the kdart compile cache: the cubins that the kdart runtime\n"
          "JIT-compiles (NVRTC + nvJitLink) for the KDA backward kernels.\n"
          "\n"
          "Commands:\n",
          f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Global options (before or after the command):\n"
          "  --cache PATH       the writable cache file (default: $KDART_CACHE_DIR/kdart.db,\n"
          "                     else $XDG_CACHE_HOME/kdart/kdart.db, else ~/.cache/kdart/kdart.db)\n"
          "  --ro-cache PATH    a read-only cache searched after it (repeatable, in order)\n"
          "  --kernel-dir DIR   where the kernel sources are (default: $KDART_KERNEL_DIR,\n"
          "                     else the installed kernel_src)\n"
          "  -q, --quiet        print errors only\n"
          "  -v, --verbose      log the runtime's INFO messages to stderr (-vv: DEBUG)\n"
          "  -h, --help         this text; 'kdart COMMAND --help' for a command's\n"
          "  -V, --version      print the version\n"
          "\n"
          "Exit status:\n"
          "  0  success\n"
          "  1  the operation failed (a compile failed, damage found, I/O error)\n"
          "  2  usage error (bad command line, spec or architecture)\n"
          "  3  a needed external tool or the GPU is missing\n"
          "  4  not found (unknown key, unknown kernel)\n"
          "  5  ambiguous key prefix\n"
          "  6  prewarm: compiled, but the cache could not store the entries\n",
          f);
}

/* ---------------------------------------------------------------- main */

/* Pulls the global options out of argv (anywhere before a "--", which is
 * dropped), leaving the command and its own arguments, in order, in
 * rest[].  Returns the new count, or -1 after printing a usage error. */
static int take_global_options(cli *c, int argc, char **argv, char **rest) {
    int n = 0, literal = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (literal) {
            rest[n++] = argv[i];
        } else if (strcmp(argv[i], "--") == 0) {
            literal = 1; /* what follows is the command's, even "--cache" */
        } else if ((m = opt_value(c, argc, argv, &i, "--cache", &v)) != 0) {
            if (m < 0) return -1;
            c->opts.cache_path = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--ro-cache", &v)) != 0) {
            if (m < 0) return -1;
            if (c->opts.n_ro_cache_paths == MAX_RO_CACHES) {
                errorf(c, "at most %d --ro-cache options", MAX_RO_CACHES);
                return -1;
            }
            c->ro_paths[c->opts.n_ro_cache_paths++] = v;
        } else if ((m = opt_value(c, argc, argv, &i, "--kernel-dir", &v)) != 0) {
            if (m < 0) return -1;
            c->opts.kernel_dir = v;
        } else if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
            c->quiet = 1;
        } else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) {
            c->verbose++;
        } else if (strcmp(argv[i], "-vv") == 0) {
            c->verbose += 2;
        } else {
            rest[n++] = argv[i];
        }
    }
    rest[n] = NULL;
    return n;
}

int main(int argc, char **argv) {
    cli c;
    memset(&c, 0, sizeof c);
    kdart_options_init(&c.opts);
    c.opts.ro_cache_paths = c.ro_paths;

    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) {
        fprintf(stderr, "kdart: out of memory\n");
        return EXIT_FAIL;
    }
    int n = take_global_options(&c, argc, argv, rest);
    if (n < 0) {
        free(rest);
        return EXIT_USAGE;
    }

    /* The library never prints; the tool shows its warnings (a cache that
     * cannot be opened, a missing kernel dir) unless --quiet. */
    c.opts.log = log_to_stderr;
    c.opts.log_level = c.quiet          ? KDART_LOG_ERROR
                       : c.verbose >= 2 ? KDART_LOG_DEBUG
                       : c.verbose == 1 ? KDART_LOG_INFO
                                        : KDART_LOG_WARN;

    int rc;
    if (n == 0) {
        fprintf(stderr, "usage: kdart [GLOBAL OPTIONS] COMMAND [ARGS]; 'kdart --help' lists the commands\n");
        rc = EXIT_USAGE;
    } else if (is_help(rest[0])) {
        print_top_help(stdout);
        rc = EXIT_OK;
    } else if (strcmp(rest[0], "--version") == 0 || strcmp(rest[0], "-V") == 0) {
        printf("kdart %s\n", kdart_version());
        rc = EXIT_OK;
    } else {
        const command *cmd = find_command(rest[0]);
        if (!cmd) {
            errorf(&c,
                   rest[0][0] == '-' ? "unknown option '%s' (see 'kdart --help')"
                                     : "unknown command '%s' (see 'kdart --help')",
                   rest[0]);
            rc = EXIT_USAGE;
        } else {
            c.cmd_name = cmd->name;
            rc = cmd->run(&c, cmd, n, rest);
        }
    }
    kdart_close(c.rt);
    free(rest);

    /* A full disk or a closed pipe must not pass for success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kdart: error writing to stdout: %s\n", strerror(errno));
        if (rc == EXIT_OK) rc = EXIT_FAIL;
    }
    return rc;
}

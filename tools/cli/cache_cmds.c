/*
 * cache_cmds.c: the commands that look inside the compile cache and keep
 * it healthy: ls, show, sass, export, verify, gc, rm, clear (stats and why:
 * report_cmds.c).
 *
 * None of them compiles or launches anything, so all but stats (which
 * reports whether CUDA is available) and why (whose default target comes
 * from the device) open the runtime without CUDA and work on machines with
 * no GPU.  Their JSON output (ls, show, stats --json) is what scripts
 * parse: keys and number formats are kept stable.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

#define MISSING_KEY "missing KEY (a key or a unique prefix, see 'kdart ls')"
/* The operand of show, sass and export: one key or key prefix. */
#define ONE_KEY .operands = "KEY", .min_args = 1, .max_args = 1, .missing = MISSING_KEY

/* -------------------------------------------------------------- output */

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

/* "rw" for the writable cache, "ro" for it when it could only be opened
 * read-only (a read-only mount, a full disk, file locks that fail), "roN"
 * for the N-th --ro-cache. */
static const char *tier_name(int tier, int writable, char *buf, size_t n) {
    if (tier == 0)
        snprintf(buf, n, "%s", writable ? "rw" : "ro");
    else
        snprintf(buf, n, "ro%d", tier);
    return buf;
}

/* Whether tier 0, the cache, is writable (it may have been opened
 * read-only); as kdart_info says, 1 if it cannot say. */
static int cache_writable(cli *c) {
    kdart_rt_info info;
    return kdart_info(c->rt, &info) != KDART_OK || info.cache_writable;
}

/* Writes the report's "name=value" lines as one JSON object, numbers as
 * numbers ("registers": 128); a name that comes back is kept as the first
 * value's (the report names each figure once). */
static void json_report(FILE *f, const char *text) {
    fputc('{', f);
    int first = 1;
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (eq && eq > p) {
            char name[128], value[512];
            snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
            snprintf(value, sizeof value, "%.*s", (int)(n - (size_t)(eq - p) - 1), eq + 1);
            /* seen before? (a short report: a linear look back is enough) */
            int seen = 0;
            for (const char *q = text; q < p && !seen;) {
                const char *qn = strchr(q, '\n');
                size_t qlen = qn ? (size_t)(qn - q) : strlen(q);
                seen = qlen > strlen(name) && strncmp(q, name, strlen(name)) == 0 && q[strlen(name)] == '=';
                q += qlen + (qn ? 1 : 0);
            }
            if (!seen) {
                char *end;
                strtod(value, &end);
                fputs(first ? "" : ", ", f);
                cli_json_string(f, name);
                fputs(": ", f);
                if (value[0] && *end == 0 && strspn(value, "0123456789.-+eE") == strlen(value)) fputs(value, f);
                else cli_json_string(f, value);
                first = 0;
            }
        }
        p += n + (nl ? 1 : 0);
    }
    fputc('}', f);
}

static void indented_line(void *user, const char *line, size_t n) {
    printf("%s%.*s\n", (const char *)user, (int)n, line);
}

/* ------------------------------------------------------------- entries */

/* Looks a key prefix up; prints the standard message when it fails. */
static int get_entry(cli *c, const char *prefix, kdart_entry **out) {
    int rc = kdart_cache_get(c->rt, prefix, out);
    if (rc == KDART_OK) return EXIT_OK;
    *out = NULL;
    if (rc == KDART_ENOENT) {
        cli_error(c, "no cache entry has a key starting with '%s'", prefix);
        return EXIT_NOTFOUND;
    }
    if (rc == KDART_EAMBIGUOUS) {
        cli_error(c, "key prefix '%s' matches more than one entry; give more digits", prefix);
        return EXIT_AMBIGUOUS;
    }
    if (rc == KDART_EINVAL) {
        cli_error(c, "'%s' is not a key: keys are hexadecimal (see 'kdart ls')", prefix);
        return EXIT_USAGE;
    }
    return cli_fail(c, rc, "cache lookup failed");
}

/* Opens the cache without CUDA and looks up the entry KEY names; with
 * need_cubin, refuses entries that hold none (recorded compile failures). */
static int open_entry(cli *c, const char *key, int need_cubin, kdart_entry **e) {
    *e = NULL;
    if (!key[0]) return cli_usage(c, MISSING_KEY);
    int rc = cli_open(c, 0);
    if (rc == EXIT_OK) rc = get_entry(c, key, e);
    if (rc != EXIT_OK || !need_cubin) return rc;
    if ((*e)->failed || !(*e)->cubin || (*e)->cubin_size == 0) {
        cli_error(c,
                  "entry %.12s (%s %s %s) is a recorded compile failure and has no cubin; 'kdart show %.12s' "
                  "prints its log",
                  (*e)->key, (*e)->kernel, (*e)->spec, (*e)->arch, (*e)->key);
        kdart_entry_free(*e);
        *e = NULL;
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------ ls */

typedef struct ls_opts {
    const char *kernel, *arch; /* only such rows (NULL: all) */
    int json;
} ls_opts;

/* The listed entries, copied: the list's own live only during its callback.
 * The copies own their strings; list fills no blobs, logs or manifests. */
typedef struct ls_rows {
    kdart_entry *v;
    size_t n, cap;
    int oom;
    const ls_opts *filter;
} ls_rows;

static void ls_free(ls_rows *rows) {
    for (size_t i = 0; i < rows->n; i++)
        free((void *)rows->v[i].kernel), free((void *)rows->v[i].spec), free((void *)rows->v[i].arch);
    free(rows->v);
}

static int ls_collect(void *user, const kdart_entry *e) {
    ls_rows *rows = user;
    if (rows->filter->kernel && strcmp(rows->filter->kernel, e->kernel ? e->kernel : "") != 0) return 0;
    if (rows->filter->arch && strcmp(rows->filter->arch, e->arch ? e->arch : "") != 0) return 0;
    if (rows->n == rows->cap) {
        size_t cap = rows->cap ? rows->cap * 2 : 64;
        kdart_entry *v = realloc(rows->v, cap * sizeof *v);
        if (!v) {
            rows->oom = 1;
            return 1;
        }
        rows->v = v;
        rows->cap = cap;
    }
    kdart_entry *r = &rows->v[rows->n];
    *r = *e;
    r->key[64] = '\0';
    r->manifest = r->report = r->log = r->cubin_sha256 = NULL;
    r->cubin = NULL;
    r->kernel = strdup(e->kernel ? e->kernel : "");
    r->spec = strdup(e->spec ? e->spec : "");
    r->arch = strdup(e->arch ? e->arch : "");
    rows->n++;
    if (!r->kernel || !r->spec || !r->arch) rows->oom = 1; /* ls_free frees what was copied */
    return rows->oom;
}

static int ls_order(const void *pa, const void *pb) {
    const kdart_entry *a = pa, *b = pb;
    int d = strcmp(a->kernel, b->kernel);
    if (!d) d = strcmp(a->spec, b->spec);
    if (!d) d = strcmp(a->arch, b->arch);
    if (!d) d = a->tier - b->tier;
    return d;
}

static void ls_json(const ls_rows *rows) {
    fputs("[", stdout);
    for (size_t i = 0; i < rows->n; i++) {
        const kdart_entry *r = &rows->v[i];
        fputs(i ? ",\n  {" : "\n  {", stdout);
        fputs("\"key\": ", stdout), cli_json_string(stdout, r->key);
        fputs(", \"kernel\": ", stdout), cli_json_string(stdout, r->kernel);
        fputs(", \"spec\": ", stdout), cli_json_string(stdout, r->spec);
        fputs(", \"arch\": ", stdout), cli_json_string(stdout, r->arch);
        printf(", \"status\": \"%s\", \"tier\": %d, \"cubin_size\": %zu, \"compile_ms\": %.3f",
               r->failed ? "failed" : "ok", r->tier, r->cubin_size, r->compile_ms);
        printf(", \"hits\": %" PRId64 ", \"created\": %" PRId64 ", \"last_used\": %" PRId64 "}", r->hits, r->created,
               r->last_used);
    }
    fputs(rows->n ? "\n]\n" : "]\n", stdout);
}

static void ls_table(const ls_rows *rows, int writable) {
    char t1[40], sz[32], tier[16];
    int wk = 6, ws = 4, wa = 4; /* widths of KERNEL, SPEC, ARCH */
    for (size_t i = 0; i < rows->n; i++) {
        int l;
        if ((l = (int)strlen(rows->v[i].kernel)) > wk) wk = l;
        if ((l = (int)strlen(rows->v[i].spec)) > ws) ws = l;
        if ((l = (int)strlen(rows->v[i].arch)) > wa) wa = l;
    }
    printf("%-12s  %-*s  %-*s  %-*s  %7s  %10s  %6s  %-16s  %-6s  %s\n", "KEY", wk, "KERNEL", ws, "SPEC", wa, "ARCH",
           "SIZE", "COMPILE_MS", "HITS", "LAST_USED", "STATUS", "TIER");
    for (size_t i = 0; i < rows->n; i++) {
        const kdart_entry *r = &rows->v[i];
        printf("%-12.12s  %-*s  %-*s  %-*s  %7s  %10.0f  %6" PRId64 "  %-16s  %-6s  %s\n", r->key, wk, r->kernel, ws,
               r->spec, wa, r->arch, cli_format_size((int64_t)r->cubin_size, sz, sizeof sz), r->compile_ms, r->hits,
               format_time(r->last_used, t1, sizeof t1, 1), r->failed ? "FAILED" : "ok",
               tier_name(r->tier, writable, tier, sizeof tier));
    }
}

static int run_ls(cli *c, const void *opts, int nargs, char **args) {
    const ls_opts *o = opts;
    ls_rows rows = {.filter = o};
    if (o->kernel && cli_check_kernel(c, o->kernel) != EXIT_OK) return EXIT_NOTFOUND;
    if (o->arch && cli_check_arch(c, o->arch) != EXIT_OK) return EXIT_USAGE;
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;

    int st = kdart_cache_list(c->rt, ls_collect, &rows);
    if (rows.oom) st = KDART_ENOMEM;
    if (st != KDART_OK) {
        rc = cli_fail(c, st, "cannot list the cache");
    } else {
        /* Guarded: with no entry rows.v is NULL, and qsort's pointer must be
         * valid even for zero elements (C11 7.22.5). */
        if (rows.n > 1) qsort(rows.v, rows.n, sizeof *rows.v, ls_order);
        if (o->json)
            ls_json(&rows);
        else if (rows.n > 0)
            ls_table(&rows, cache_writable(c));
        else if (!c->g.quiet)
            cli_error(c, o->kernel || o->arch ? "no entry matches" : "the cache has no entries");
    }
    ls_free(&rows);
    return rc;
}

static const cli_option ls_options[] = {
    {"kernel", 0, CLI_STRING, "NAME", offsetof(ls_opts, kernel), 0, 0, 0,
     "only this kernel's entries (see 'kdart kernels')"},
    {"arch", 0, CLI_STRING, "ARCH", offsetof(ls_opts, arch), 0, 0, 0, "only entries for this target, e.g. sm_90a"},
    {"json", 0, CLI_FLAG, NULL, offsetof(ls_opts, json), 0, 0, 0,
     "a JSON array of objects with the full key and raw numbers"},
    {NULL},
};

CLI_COMMAND(ls, "list cache entries",
    .no_create = 1,
    CLI_OPTIONS(ls_options, ls_opts, NULL),
    .about = "One line per entry of the writable cache and every --ro-cache:\n"
             "KEY (first 12 hex digits), KERNEL, SPEC, ARCH, SIZE (cubin), COMPILE_MS,\n"
             "HITS, LAST_USED (local time), STATUS (ok, or FAILED for a recorded compile\n"
             "failure) and TIER (rw: the writable cache; ro: the same cache when it could\n"
             "only be opened read-only; roN: the N-th --ro-cache).\n",
    .exits = "Exit status: 0 ok (also when nothing matches), 2 usage, 4 unknown kernel.\n");

/* ---------------------------------------------------------------- show */

typedef struct json_opts {
    int json;
} json_opts;

static const cli_option json_options[] = {
    {"json", 0, CLI_FLAG, NULL, offsetof(json_opts, json), 0, 0, 0, "the same as one JSON object"},
    {NULL},
};

static void show_text(const kdart_entry *e, int writable) {
    char t[64], sz[32], tier[16];
    printf("key          %s\n", e->key);
    printf("kernel       %s\n", e->kernel ? e->kernel : "");
    printf("spec         %s\n", e->spec ? e->spec : "");
    printf("arch         %s\n", e->arch ? e->arch : "");
    printf("status       %s\n", e->failed ? "FAILED (a recorded compile failure; see the log)" : "ok");
    printf("tier         %s\n", tier_name(e->tier, writable, tier, sizeof tier));
    printf("cubin        %zu bytes (%s)\n", e->cubin_size, cli_format_size((int64_t)e->cubin_size, sz, sizeof sz));
    if (e->cubin_sha256 && e->cubin_sha256[0]) printf("cubin sha256 %s\n", e->cubin_sha256);
    printf("compile      %.1f ms\n", e->compile_ms);
    printf("created      %s\n", format_time(e->created, t, sizeof t, 0));
    printf("last used    %s\n", format_time(e->last_used, t, sizeof t, 0));
    printf("hits         %" PRId64 "\n", e->hits);
    printf("\nmanifest (everything in the key):\n");
    cli_each_line(e->manifest, indented_line, "  ");
    printf("\nreport:\n");
    cli_each_line(e->report, indented_line, "  ");
    printf("\nlog:\n");
    if (e->log && e->log[0])
        cli_each_line(e->log, indented_line, "  ");
    else
        printf("  (empty)\n");
}

static void show_json(const kdart_entry *e) {
    fputs("{\"key\": ", stdout), cli_json_string(stdout, e->key);
    fputs(",\n \"kernel\": ", stdout), cli_json_string(stdout, e->kernel);
    fputs(",\n \"spec\": ", stdout), cli_json_string(stdout, e->spec);
    fputs(",\n \"arch\": ", stdout), cli_json_string(stdout, e->arch);
    printf(",\n \"status\": \"%s\",\n \"tier\": %d,\n \"cubin_size\": %zu", e->failed ? "failed" : "ok", e->tier,
           e->cubin_size);
    fputs(",\n \"cubin_sha256\": ", stdout), cli_json_string(stdout, e->cubin_sha256);
    printf(",\n \"compile_ms\": %.3f,\n \"created\": %" PRId64 ",\n \"last_used\": %" PRId64 ",\n \"hits\": %" PRId64,
           e->compile_ms, e->created, e->last_used, e->hits);
    fputs(",\n \"manifest\": ", stdout), cli_json_lines(stdout, e->manifest);
    fputs(",\n \"report\": ", stdout), json_report(stdout, e->report);
    fputs(",\n \"log\": ", stdout), cli_json_string(stdout, e->log ? e->log : "");
    fputs("}\n", stdout);
}

static int run_show(cli *c, const void *opts, int nargs, char **args) {
    const json_opts *o = opts;
    kdart_entry *e;
    int rc = open_entry(c, args[0], 0, &e);
    if (rc != EXIT_OK) return rc;
    if (o->json)
        show_json(e);
    else
        show_text(e, cache_writable(c));
    kdart_entry_free(e);
    return EXIT_OK;
}

CLI_COMMAND(show, "print everything about one entry",
    .no_create = 1,
    CLI_OPTIONS(json_options, json_opts, NULL),
    ONE_KEY,
    .about = "KEY is a full key or a unique prefix of one.  Prints the key, kernel, spec,\n"
             "arch, status, sizes, compile time, times and hits, the manifest (every\n"
             "line that went into the key), the report (registers, spills, stack, shared\n"
             "and constant memory per kernel) and the compiler and linker logs.\n",
    .exits = "Exit status: 0 found, 4 no such key, 5 the prefix is ambiguous.\n");

/* -------------------------------------------------------- sass, export */

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

/* Runs tool_argv (its file at tool_argv[0]) to completion, our stdout so
 * far first; EXIT_OK when it succeeded. */
static int run_tool(cli *c, char **tool_argv) {
    fflush(stdout);
    pid_t pid;
    int err = posix_spawn(&pid, tool_argv[0], NULL, NULL, tool_argv, environ);
    int status = 0;
    if (err == 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    if (err != 0) {
        cli_error(c, "cannot run %s: %s", tool_argv[0], strerror(err));
        return EXIT_MISSING;
    }
    /* SIGPIPE: whoever reads our stdout (`kdart sass KEY | head`) stopped
     * reading, which is what they asked for, not a failure. */
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) return EXIT_OK;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        cli_error(c, "%s failed (%s %d)", tool_argv[0], WIFEXITED(status) ? "exit status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

static int run_sass(cli *c, const void *opts, int nargs, char **args) {
    kdart_entry *e;
    int rc = open_entry(c, args[0], 1, &e);
    if (rc != EXIT_OK) return rc;

    /* nvdisasm reads a bare cubin directly; cuobjdump is the fallback. */
    char tool[4096];
    char *tool_argv[4] = {tool, NULL, NULL, NULL};
    if (find_tool("nvdisasm", tool, sizeof tool)) {
        tool_argv[1] = "-c";
    } else if (find_tool("cuobjdump", tool, sizeof tool)) {
        tool_argv[1] = "-sass";
    } else {
        cli_error(c,
                  "neither nvdisasm nor cuobjdump was found on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin "
                  "(without the CUDA toolkit, 'pip install nvidia-cuda-nvdisasm' has one, in nvidia/cu13/bin); "
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
        cli_error(c, "cannot create a temporary file %s: %s", path, strerror(errno));
        kdart_entry_free(e);
        return EXIT_FAIL;
    }
    int werr = write_all(fd, e->cubin, e->cubin_size) != 0 ? errno : 0;
    if (close(fd) != 0 && !werr) werr = errno;
    kdart_entry_free(e);
    if (werr) {
        cli_error(c, "cannot write %s: %s", path, strerror(werr));
        unlink(path);
        return EXIT_FAIL;
    }
    tool_argv[2] = path;
    rc = run_tool(c, tool_argv);
    unlink(path);
    return rc;
}

CLI_COMMAND(sass, "disassemble an entry's cubin (nvdisasm or cuobjdump)",
    .no_create = 1,
    ONE_KEY,
    .about = "Writes the entry's cubin to a temporary file and runs 'nvdisasm -c' on it,\n"
             "or 'cuobjdump -sass' when nvdisasm is missing.  Both are looked for on PATH,\n"
             "in $CUDA_HOME/bin and in /usr/local/cuda/bin.\n",
    .exits = "Exit status: 0 ok, 1 the tool failed, 3 no disassembler found, 4 no such\n"
             "key, 5 ambiguous prefix.\n");

typedef struct export_opts {
    const char *output;
} export_opts;

/* Writes the cubin to path; EXIT_OK or EXIT_FAIL (said why). */
static int write_file(cli *c, const kdart_entry *e, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        cli_error(c, "cannot create %s: %s", path, strerror(errno));
        return EXIT_FAIL;
    }
    int ok = fwrite(e->cubin, 1, e->cubin_size, f) == e->cubin_size;
    int err = errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (!ok) {
        cli_error(c, "cannot write %s: %s", path, strerror(err));
        return EXIT_FAIL;
    }
    if (!c->g.quiet)
        fprintf(stderr, "kdart export: wrote %zu bytes (%s %s %s) to %s\n", e->cubin_size, e->kernel, e->spec, e->arch,
                path);
    return EXIT_OK;
}

static int run_export(cli *c, const void *opts, int nargs, char **args) {
    const export_opts *o = opts;
    kdart_entry *e;
    int rc = open_entry(c, args[0], 1, &e);
    if (rc != EXIT_OK) return rc;
    if (strcmp(o->output, "-") != 0) {
        rc = write_file(c, e, o->output);
    } else if (isatty(STDOUT_FILENO)) {
        cli_error(c, "refusing to write a binary cubin to a terminal; redirect stdout or give -o FILE");
        rc = EXIT_USAGE;
    } else if (fwrite(e->cubin, 1, e->cubin_size, stdout) != e->cubin_size || fflush(stdout) != 0) {
        cli_error(c, "cannot write to stdout: %s", strerror(errno));
        rc = EXIT_FAIL;
    }
    kdart_entry_free(e);
    return rc;
}

static const cli_option export_options[] = {
    {"output", 'o', CLI_STRING, "FILE", offsetof(export_opts, output), 0, 0, CLI_REQUIRED,
     "where to write it; '-' for stdout (not a terminal)"},
    {NULL},
};

CLI_COMMAND(export, "write an entry's cubin to a file",
    .no_create = 1,
    CLI_OPTIONS(export_options, export_opts, NULL),
    ONE_KEY,
    .about = "Writes the raw cubin (an ELF file that cuobjdump and nvdisasm read).\n",
    .exits = "Exit status: 0 written, 1 a recorded compile failure (no cubin) or a write\n"
             "error, 2 usage (also: stdout is a terminal), 4 no such key, 5 ambiguous prefix.\n");

/* ------------------------------------------------- verify, gc, rm, clear */

static int run_verify(cli *c, const void *opts, int nargs, char **args) {
    const json_opts *o = opts;
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;
    int64_t checked = 0, damaged = 0;
    int st = KDART_OK;
    if (!cli_cache_absent(c, "nothing to do")) {
        st = kdart_cache_verify(c->rt, &checked, &damaged);
        if (st != KDART_OK && st != KDART_ECORRUPT) return cli_fail(c, st, "verify failed");
        if (st == KDART_ECORRUPT) cli_error(c, "%s", kdart_last_error(c->rt)); /* what was wrong, what was done */
    }
    if (o->json)
        printf("{\"checked\": %" PRId64 ", \"damaged\": %" PRId64 ", \"ok\": %s}\n", checked, damaged,
               damaged || st == KDART_ECORRUPT ? "false" : "true");
    else
        printf("checked %" PRId64 " entr%s, %" PRId64 " damaged%s\n", checked, checked == 1 ? "y" : "ies", damaged,
               damaged ? " (quarantined or lost; they will be recompiled on next use)" : "");
    return damaged || st == KDART_ECORRUPT ? EXIT_FAIL : EXIT_OK;
}

CLI_COMMAND(verify, "check the cache's integrity and every cubin's checksum",
    .no_create = 1,
    CLI_OPTIONS(json_options, json_opts, NULL),
    .about = "Runs SQLite's integrity check and compares every cubin with its stored\n"
             "SHA-256.  Damaged entries are quarantined (they are recompiled when next\n"
             "needed); damaged indexes are rebuilt; damage in the file's pages that\n"
             "cannot be rebuilt is healed in place with every entry that can still be\n"
             "read, from every page of the file (a copy of the damaged file is kept as\n"
             "kdart.db.corrupt-TIME-PID).  A file too damaged to open (its header or\n"
             "first page) is healed the same way when the cache is opened, and verify\n"
             "reports it.  What was wrong and what was done goes to stderr; \"checked\"\n"
             "counts every entry found, \"damaged\" those quarantined or lost.\n",
    .exits = "Exit status: 0 clean, 1 damage found (and repaired: the next run is clean).\n");

typedef struct gc_opts {
    int64_t max_bytes; /* -1: not given */
    int64_t older_than; /* seconds; -1: not given */
    int keep, forget;
} gc_opts;

static int run_gc(cli *c, const void *opts, int nargs, char **args) {
    const gc_opts *o = opts;
    if (o->max_bytes < 0 && o->older_than < 0 && !o->forget)
        return cli_usage(c, "gc needs --max-bytes N or --older-than AGE (or both), or --forget");
    if (o->keep && o->max_bytes <= 0)
        return cli_usage(c, "--keep needs --max-bytes N with N > 0 (the limit to keep)");
    if (o->keep && o->forget) return cli_usage(c, "--keep and --forget contradict each other");
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;
    if (o->keep || o->forget) { /* before the absent-cache check: keeping a limit creates the cache */
        int st = kdart_cache_set_max_bytes(c->rt, o->keep ? o->max_bytes : 0);
        if (st != KDART_OK) return cli_fail(c, st, "cannot keep the limit");
        if (o->max_bytes < 0 && o->older_than < 0) {
            if (!c->g.quiet) printf("forgot the cache's size limit (the default applies)\n");
            return EXIT_OK;
        }
    }
    if (cli_cache_absent(c, "nothing to do")) {
        printf("evicted 0 entries, freed 0 bytes (0B)\n");
        return EXIT_OK;
    }
    int64_t evicted = 0, freed = 0, e2 = 0, f2 = 0;
    int st = o->older_than >= 0 ? kdart_cache_gc_age(c->rt, o->older_than, &evicted, &freed) : KDART_OK;
    if (st == KDART_OK && o->max_bytes >= 0) st = kdart_cache_gc(c->rt, o->max_bytes, &e2, &f2);
    if (st != KDART_OK) return cli_fail(c, st, "gc failed");
    evicted += e2, freed += f2;
    char sz[32];
    printf("evicted %" PRId64 " entr%s, freed %" PRId64 " bytes (%s)\n", evicted, evicted == 1 ? "y" : "ies", freed,
           cli_format_size(freed, sz, sizeof sz));
    if (o->keep && !c->g.quiet) printf("kept %s as the cache's size limit\n", cli_format_size(o->max_bytes, sz, sizeof sz));
    return EXIT_OK;
}

static const cli_option gc_options[] = {
    {"max-bytes", 0, CLI_BYTES, "N", offsetof(gc_opts, max_bytes), 0, 0, 0,
     "the most bytes of cubins to keep; 0 evicts every entry that holds a cubin"},
    {"older-than", 0, CLI_AGE, "AGE", offsetof(gc_opts, older_than), 0, 0, 0,
     "evict the entries not used for AGE (45s, 90m, 12h, 30d), recorded failures too"},
    {"keep", 0, CLI_FLAG, NULL, offsetof(gc_opts, keep), 0, 0, 0,
     "also keep N in the cache file as its size limit, for every later process that sets none itself "
     "(kdart_options.cache_max_bytes, KDART_CACHE_MAX_BYTES)"},
    {"forget", 0, CLI_FLAG, NULL, offsetof(gc_opts, forget), 0, 0, 0,
     "forget a limit kept with --keep: the default (2 GiB) applies again"},
    {NULL},
};

static const gc_opts gc_defaults = {-1, -1, 0, 0};

CLI_COMMAND(gc, "evict least recently used entries down to a size, or by age",
    .no_create = 1,
    CLI_OPTIONS(gc_options, gc_opts, &gc_defaults),
    .about = "Evicts least recently used entries until the cubins in the writable cache\n"
             "take at most N bytes, and (--older-than) the entries unused for AGE.  N takes\n"
             "a binary suffix: K, M, G, T (512M, 2G, 1.5GiB; read as KDART_CACHE_MAX_BYTES\n"
             "is).  With --keep, N stays in the cache file as its limit (kdart stats shows\n"
             "the limit in force and where it came from).\n",
    .exits = "Exit status: 0 ok, 1 the cache failed, 2 usage.\n");

static int run_rm(cli *c, const void *opts, int nargs, char **args) {
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;
    if (cli_cache_absent(c, "no entry to remove in the writable cache")) return EXIT_NOTFOUND;
    /* Every key is tried; the exit status is the first failure's. */
    for (int i = 0; i < nargs; i++) {
        char key[65];
        int st = kdart_cache_remove(c->rt, args[i], key);
        int e = st == KDART_OK ? EXIT_OK : cli_fail(c, st, "cannot remove");
        if (st == KDART_OK && !c->g.quiet) printf("removed %s\n", key);
        if (rc == EXIT_OK) rc = e;
    }
    return rc;
}

CLI_COMMAND(rm, "remove entries from the writable cache",
    .no_create = 1,
    .operands = "KEY...",
    .min_args = 1,
    .max_args = -1,
    .missing = MISSING_KEY,
    .about = "Removes each entry whose key starts with KEY (a full key or a unique\n"
             "prefix, see 'kdart ls') from the writable cache; read-only caches are\n"
             "never changed.  The next prepare of a removed specialization compiles it.\n",
    .exits = "Exit status: 0 all removed, 1 the cache failed, 4 no such key (in the\n"
             "writable cache), 5 an ambiguous prefix; every KEY is tried, the status is\n"
             "the first failure's.\n");

static int run_clear(cli *c, const void *opts, int nargs, char **args) {
    int rc = cli_open(c, 0);
    if (rc != EXIT_OK) return rc;
    if (cli_cache_absent(c, "nothing to do")) {
        printf("removed 0 entries\n");
        return EXIT_OK;
    }
    int64_t removed = 0;
    int st = kdart_cache_clear(c->rt, &removed);
    if (st != KDART_OK) return cli_fail(c, st, "clear failed");
    printf("removed %" PRId64 " entr%s\n", removed, removed == 1 ? "y" : "ies");
    return EXIT_OK;
}

CLI_COMMAND(clear, "remove every entry from the writable cache",
    .no_create = 1,
    .about = "Removes every entry, including recorded compile failures and quarantined\n"
             "rows, from the writable cache in one transaction.  Read-only caches are\n"
             "never changed.\n",
    .exits = "Exit status: 0 ok, 1 the cache failed or there is no writable cache.\n");

/*
 * test_cli.c: the `kdart` command-line tool, tested as a user runs it.
 *
 * Every test runs the built binary (KDART_TEST_CLI) as a subprocess with
 * stdout and stderr captured to files, and checks exit codes and output.
 * Nothing touches the user's cache: each test gets its own mkdtemp
 * directory, passed as KDART_CACHE_DIR, and every inherited KDART_*
 * variable is dropped from the child's environment.
 *
 * Compiling is the slow part, so the "cache" test case prewarms one seed
 * cache once (chunk_rcumsum, the cheapest registered kernel, both specs,
 * sm_90a) in an unchecked fixture, and each test starts from a copy of it.
 * No GPU is needed: prewarm compiles without loading, and on a machine
 * with no libcuda the CLI must still work (stats says CUDA is missing).
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base.h"
#include "testlib.h"

#ifndef KDART_TEST_CLI
#error "KDART_TEST_CLI (path of the built kdart binary) must be defined"
#endif
#ifndef KDART_TEST_SOURCE_DIR
#error "KDART_TEST_SOURCE_DIR must be defined"
#endif

extern char **environ;

/* The seed cache, built once per test case in the parent process. */
static char seed_dir[PATH_MAX];
static int seed_ok;
/* This test's directory (set up in the forked child by the fixture). */
static char test_dir[PATH_MAX];
/* Extra "NAME=value" strings for the next child's environment (or NULL). */
static const char *const *extra_env;

typedef struct run_result {
    int status; /* exit code, or 128 + signal */
    char *out;  /* stdout, NUL-terminated */
    char *err;  /* stderr, NUL-terminated */
} run_result;

static void run_free(run_result *r) {
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

static char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (size) *size = n;
    return buf;
}

static int env_is_dropped(const char *e) { return strncmp(e, "KDART_", 6) == 0; }

/* Runs kdart with the given arguments (NULL-terminated) against the cache
 * directory `dir`, capturing stdout and stderr. */
static void run_in(run_result *r, const char *dir, const char *arg, ...) {
    const char *argv[64];
    int argc = 0;
    argv[argc++] = KDART_TEST_CLI;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && argc < 63; a = va_arg(ap, const char *)) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    /* Environment: the parent's minus KDART_*, plus the cache and kernel
     * directories, plus whatever the test asked for (which wins). */
    size_t nenv = 0;
    while (environ[nenv]) nenv++;
    const char **envp = calloc(nenv + 24, sizeof *envp);
    ck_assert_ptr_nonnull(envp);
    size_t m = 0;
    for (size_t i = 0; i < nenv; i++) {
        if (env_is_dropped(environ[i])) continue;
        int overridden = 0;
        for (const char *const *x = extra_env; x && *x; x++) {
            size_t nl = strcspn(*x, "=");
            if (strncmp(environ[i], *x, nl + 1) == 0) overridden = 1;
        }
        if (!overridden) envp[m++] = environ[i];
    }
    char cache_env[PATH_MAX + 32], kdir_env[PATH_MAX + 32];
    snprintf(cache_env, sizeof cache_env, "KDART_CACHE_DIR=%s", dir);
    snprintf(kdir_env, sizeof kdir_env, "KDART_KERNEL_DIR=%s/kernel_src", KDART_TEST_SOURCE_DIR);
    envp[m++] = cache_env;
    envp[m++] = kdir_env;
    for (const char *const *x = extra_env; x && *x && m < nenv + 22; x++) envp[m++] = *x;
    envp[m] = NULL;

    char out_path[PATH_MAX + 16], err_path[PATH_MAX + 16];
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int err = posix_spawn(&pid, KDART_TEST_CLI, &fa, NULL, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    ck_assert_msg(err == 0, "cannot run %s: %s", KDART_TEST_CLI, strerror(err));
    int status;
    while (waitpid(pid, &status, 0) < 0) ck_assert_int_eq(errno, EINTR);
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = slurp(out_path, NULL);
    r->err = slurp(err_path, NULL);
    ck_assert_ptr_nonnull(r->out);
    ck_assert_ptr_nonnull(r->err);
}

/* The same, in this test's own directory. */
#define RUN(r, ...) run_in((r), test_dir, __VA_ARGS__, (const char *)NULL)

/* Asserts an exit status and shows the child's output when it is wrong. */
#define EXPECT_STATUS(r, want)                                                                                         \
    ck_assert_msg((r)->status == (want), "exit status %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s", (r)->status, \
                  (want), (r)->out, (r)->err)
#define EXPECT_IN(hay, needle) ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' not in:\n%s", (needle), (hay))
/* Runs kdart and checks its exit status and that needle is in its stdout or stderr (which: out or err). */
#define RUN_EXPECT(want, which, needle, ...)                                                                           \
    do {                                                                                                               \
        run_result re_;                                                                                                \
        RUN(&re_, __VA_ARGS__);                                                                                        \
        EXPECT_STATUS(&re_, want);                                                                                     \
        EXPECT_IN(re_.which, needle);                                                                                  \
        run_free(&re_);                                                                                                \
    } while (0)
/* Runs kdart and checks only its exit status. */
#define RUN_STATUS(want, ...)                                                                                          \
    do {                                                                                                               \
        run_result rs_;                                                                                                \
        RUN(&rs_, __VA_ARGS__);                                                                                        \
        EXPECT_STATUS(&rs_, want);                                                                                     \
        run_free(&rs_);                                                                                                \
    } while (0)
#define EXPECT_NOT_IN(hay, needle) ck_assert_msg(strstr((hay), (needle)) == NULL, "'%s' in:\n%s", (needle), (hay))

static int count_substr(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* -------------------------------------------------- a tiny JSON checker */

/* Returns the position after one JSON value starting at p, or NULL if the
 * text is not valid JSON (RFC 8259 grammar; no depth limit needed here). */
static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static const char *json_value(const char *p);

static const char *json_str(const char *p) {
    if (*p++ != '"') return NULL;
    while (*p != '"') {
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20) return NULL; /* also the end of the text */
        if (ch == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
                p += 5;
                continue;
            }
            if (!*p || !strchr("\"\\/bfnrt", *p)) return NULL;
        }
        p++;
    }
    return p + 1;
}

static const char *json_num(const char *p) {
    if (*p == '-') p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9') p++;
    else
        return NULL;
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    return p;
}

static const char *json_value(const char *p) {
    p = json_ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = json_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (object) {
                if (!(p = json_str(json_ws(p)))) return NULL;
                p = json_ws(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = json_value(p))) return NULL;
            p = json_ws(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    if (*p == '"') return json_str(p);
    if (strncmp(p, "true", 4) == 0) return p + 4;
    if (strncmp(p, "false", 5) == 0) return p + 5;
    if (strncmp(p, "null", 4) == 0) return p + 4;
    return json_num(p);
}

/* 1 if text is exactly one JSON value starting with `first` ('[' or '{'). */
static int json_valid(const char *text, char first) {
    const char *p = json_ws(text);
    if (*p != first) return 0;
    p = json_value(p);
    return p && *json_ws(p) == '\0';
}

/* ------------------------------------------------------------ fixtures */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tree(const char *dir) {
    if (dir[0]) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void make_temp_dir(char *out, const char *tag) {
    const char *tmp = getenv("TMPDIR");
    snprintf(out, PATH_MAX, "%s/kdart-cli-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", tag);
    ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp %s: %s", out, strerror(errno));
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *data = slurp(from, &n);
    if (!data) return; /* optional files (-wal, -shm) may be absent */
    FILE *f = fopen(to, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(data);
}

static void test_dir_setup(void) { make_temp_dir(test_dir, "test"); }

static void test_dir_teardown(void) { rm_tree(test_dir); }

/* Copies the seed cache (the database and any WAL files) into test_dir. */
static void use_seed(void) {
    ck_assert_msg(seed_ok, "the seed prewarm failed; see the output above");
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char from[PATH_MAX + 32], to[PATH_MAX + 32];
        snprintf(from, sizeof from, "%s/kdart.db%s", seed_dir, suffixes[i]);
        snprintf(to, sizeof to, "%s/kdart.db%s", test_dir, suffixes[i]);
        copy_file(from, to);
    }
}

static void seed_setup(void) {
    make_temp_dir(seed_dir, "seed");
    run_result r;
    run_in(&r, seed_dir, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a", (const char *)NULL);
    seed_ok = r.status == 0;
    if (!seed_ok) fprintf(stderr, "seed prewarm exited %d\n--- stdout:\n%s\n--- stderr:\n%s\n", r.status, r.out, r.err);
    run_free(&r);
}

static void seed_teardown(void) { rm_tree(seed_dir); }

/* The first full key in `ls --json` output (and, if key2 is given, the
 * second), so tests can address entries. */
static void keys_from_ls(char key1[65], char key2[65]) {
    run_result r;
    RUN(&r, "ls", "--json");
    EXPECT_STATUS(&r, 0);
    const char *p = strstr(r.out, "\"key\": \"");
    ck_assert_msg(p != NULL, "no key in ls --json:\n%s", r.out);
    memcpy(key1, p + 8, 64);
    key1[64] = '\0';
    if (key2) {
        p = strstr(p + 8, "\"key\": \"");
        ck_assert_msg(p != NULL, "only one key in ls --json:\n%s", r.out);
        memcpy(key2, p + 8, 64);
        key2[64] = '\0';
    }
    ck_assert_uint_eq(strspn(key1, "0123456789abcdef"), 64);
    run_free(&r);
}

/* ----------------------------------------------------- usage, no cache */

static const char *const command_names[] = {"prewarm", "ls",  "show",    "sass",     "export", "verify", "gc", "rm",
                                            "clear",   "stats", "why", "kernels", "selftest", "bench",  "help"};

START_TEST(test_top_help) {
    run_result r;
    RUN(&r, "--help");
    EXPECT_STATUS(&r, 0);
    for (size_t i = 0; i < sizeof command_names / sizeof command_names[0]; i++) EXPECT_IN(r.out, command_names[i]);
    EXPECT_IN(r.out, "Exit status");
    EXPECT_IN(r.out, "ambiguous");
    EXPECT_IN(r.out, "--ro-cache");
    run_free(&r);

    RUN(&r, "--version");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(strncmp(r.out, "kdart ", 6) == 0, "version output: %s", r.out);
    run_free(&r);

    RUN_EXPECT(0, out, "--max-bytes", "help", "gc");
}
END_TEST

START_TEST(test_command_help) {
    /* Every command has --help, and it exits 0 without touching a cache. */
    for (size_t i = 0; i < sizeof command_names / sizeof command_names[0]; i++) {
        run_result r;
        RUN(&r, command_names[i], "--help");
        EXPECT_STATUS(&r, 0);
        EXPECT_IN(r.out, "usage: kdart");
        EXPECT_IN(r.out, command_names[i]);
        run_free(&r);
    }
    char db[PATH_MAX + 16];
    snprintf(db, sizeof db, "%s/kdart.db", test_dir);
    ck_assert_msg(access(db, F_OK) != 0, "--help created a cache file");
}
END_TEST

START_TEST(test_usage_errors) {
    run_result r;
    RUN_EXPECT(2, err, "unknown command", "frobnicate");

    RUN_EXPECT(2, err, "--bogus", "ls", "--bogus");

    run_in(&r, test_dir, (const char *)NULL); /* no command at all */
    EXPECT_STATUS(&r, 2);
    run_free(&r);

    RUN_EXPECT(2, err, "--max-bytes", "gc");

    RUN_STATUS(2, "gc", "--max-bytes", "12Q");

    RUN_STATUS(2, "show");

    RUN_EXPECT(2, err, "-o", "export", "abcdef");

    RUN_STATUS(2, "prewarm", "--jobs", "0");

    RUN_STATUS(2, "prewarm", "--arch", "hopper");

    RUN_STATUS(2, "prewarm", "--kernel", "chunk_rcumsum", "--spec", "K=96", "--arch", "sm_90a");

    RUN_STATUS(2, "--cache");
}
END_TEST

/* Every command's options, as scripts and the README use them: NAME= takes
 * a value, NAME is a flag.  `kdart CMD --help` (written from the command's
 * option table) must list each one, and the parser must refuse each value
 * option given without its value. */
static const struct {
    const char *command;
    const char *options;
} command_options[] = {
    {"prewarm", "arch= kernel= spec= all jobs= force service= json"},
    {"ls", "kernel= arch= json"},
    {"show", "json"},
    {"sass", ""},
    {"export", "output="},
    {"verify", "json"},
    {"gc", "max-bytes= older-than= keep forget"},
    {"rm", ""},
    {"clear", ""},
    {"stats", "json zero"},
    {"why", "arch= json"},
    {"serve", "socket= jobs= max-clients= idle-timeout= stop timeout= status"},
    {"kernels", ""},
    {"selftest", "kernel="},
    {"bench", "shape= io= fold-dg emit-bf16 reps="},
    {"help", ""},
};

START_TEST(test_help_lists_options) {
    for (size_t i = 0; i < sizeof command_options / sizeof command_options[0]; i++) {
        run_result r, h;
        RUN(&r, command_options[i].command, "--help");
        EXPECT_STATUS(&r, 0);
        EXPECT_IN(r.out, "-h, --help");
        EXPECT_IN(r.out, "Options:");
        char opts[256];
        snprintf(opts, sizeof opts, "%s", command_options[i].options);
        for (char *save = NULL, *o = strtok_r(opts, " ", &save); o; o = strtok_r(NULL, " ", &save)) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%.*s", (int)strcspn(o, "="), o);
            EXPECT_IN(r.out, flag);
        }
        /* `kdart help CMD` prints the same text. */
        RUN(&h, "help", command_options[i].command);
        EXPECT_STATUS(&h, 0);
        ck_assert_str_eq(h.out, r.out);
        run_free(&h);
        run_free(&r);
    }
}
END_TEST

START_TEST(test_option_parser) {
    /* A value option at the end of the line: exit 2, naming the option. */
    for (size_t i = 0; i < sizeof command_options / sizeof command_options[0]; i++) {
        char opts[256];
        snprintf(opts, sizeof opts, "%s", command_options[i].options);
        for (char *save = NULL, *o = strtok_r(opts, " ", &save); o; o = strtok_r(NULL, " ", &save)) {
            size_t n = strcspn(o, "=");
            if (o[n] != '=') continue;
            char flag[64], msg[96];
            snprintf(flag, sizeof flag, "--%.*s", (int)n, o);
            snprintf(msg, sizeof msg, "option %s needs a value", flag);
            RUN_EXPECT(2, err, msg, command_options[i].command, flag);
        }
        /* An option no table has: exit 2, naming it. */
        RUN_EXPECT(2, err, "unknown option '--no-such-option'", command_options[i].command, "--no-such-option");
    }
    RUN_EXPECT(2, err, "option --cache needs a value", "ls", "--cache");
    RUN_EXPECT(2, err, "option -o needs a value", "export", "abcdef", "-o");
    RUN_EXPECT(2, err, "option --json takes no value", "ls", "--json=yes");
    RUN_EXPECT(2, err, "unknown option '-x'", "stats", "-x");
    RUN_EXPECT(2, err, "unexpected argument 'b'", "show", "a", "b");
    RUN_EXPECT(2, err, "unexpected argument 'extra'", "kernels", "extra");
    /* Values: range, attached short form, a missing required option. */
    RUN_EXPECT(2, err, "-j wants 1..256, not '0'", "prewarm", "-j0");
    RUN_EXPECT(2, err, "--reps wants 1..64, not 'many'", "bench", "--reps=many");
    RUN_EXPECT(2, err, "--idle-timeout wants seconds", "serve", "--socket", "s", "--idle-timeout", "0");
    RUN_EXPECT(2, err, "option --socket needs a value", "serve", "--socket=");
    RUN_EXPECT(2, err, "missing --socket PATH", "serve", "--stop");
    /* Global flags bundled, and anywhere on the line; "--" ends the global
     * options, so what follows is the command's. */
    RUN_EXPECT(0, out, "chunk_rcumsum", "kernels", "-qv");
    RUN_EXPECT(0, out, "chunk_rcumsum", "-q", "kernels", "-v");
    RUN_EXPECT(2, err, "unknown option '--quiet'", "kernels", "--", "--quiet");
}
END_TEST

/* A target the kernels or NVRTC do not support fails once, up front, with
 * its reason and exit 2: never once per specialization, never compiled
 * (sm_89 used to fail each of the 34 specializations, sm_97a to compile
 * and record each as a failed entry). */
START_TEST(test_unsupported_arch) {
    run_result r;
    RUN(&r, "prewarm", "--arch", "sm_89");
    EXPECT_STATUS(&r, 2);
    ck_assert_msg(count_substr(r.err, "needs sm_90 or newer") == 1, "not printed exactly once:\n%s", r.err);
    run_free(&r);

    RUN(&r, "why", "chunk_rcumsum", "K=64", "--arch", "sm_75");
    EXPECT_STATUS(&r, 2);
    ck_assert_msg(count_substr(r.err, "needs sm_90 or newer") == 1, "not printed exactly once:\n%s", r.err);
    run_free(&r);

    static const char *const unknown[] = {"sm_97a", "sm_98a", "sm_999"};
    for (int i = 0; i < 3; i++) {
        char list[64];
        snprintf(list, sizeof list, "sm_90a,%s", unknown[i]);
        RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", list);
        EXPECT_STATUS(&r, 2);
        ck_assert_msg(count_substr(r.err, unknown[i]) == 1 && strstr(r.err, "NVRTC"), "%s", r.err);
        run_free(&r);
    }
    RUN(&r, "ls");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(!strstr(r.out, "sm_9") && !strstr(r.out, "sm_8"), "entries were recorded:\n%s", r.out);
    run_free(&r);
}
END_TEST

START_TEST(test_unknown_kernel) {
    run_result r;
    RUN(&r, "prewarm", "--kernel", "no_such_kernel", "--arch", "sm_90a");
    EXPECT_STATUS(&r, 4);
    EXPECT_IN(r.err, "chunk_rcumsum"); /* lists the registered kernels */
    run_free(&r);

    RUN_STATUS(4, "why", "no_such_kernel", "K=64", "--arch", "sm_90a");
}
END_TEST

START_TEST(test_kernels) {
    run_result r;
    RUN(&r, "kernels");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "chunk_rcumsum");
    EXPECT_IN(r.out, "bwd_intra");
    EXPECT_IN(r.out, "bwd_dhu");
    EXPECT_IN(r.out, "K={64,128,256}");
    EXPECT_IN(r.out, "K={64,128,192,256}"); /* bwd_dhu's K tiles */
    run_free(&r);
}
END_TEST

START_TEST(test_selftest_placeholder) {
    /* Without a GPU: exit 3 and say why; with one: every kernel passes. */
    run_result r;
    RUN(&r, "selftest");
    if (r.status == 3) {
        EXPECT_IN(r.err, "needs a GPU");
    } else {
        EXPECT_STATUS(&r, 0);
        EXPECT_IN(r.out, "selftest: 0 failure(s)");
    }
    run_free(&r);
    /* --kernel names one kernel with an operation, checked before any GPU is looked for */
    RUN_EXPECT(2, err, "--kernel takes bwd_intra, bwd_dhu, wy_dqkg, recompute_wu, bwd_dav, fwd_h or bwd_post",
               "selftest", "--kernel", "chunk_rcumsum");
}
END_TEST

START_TEST(test_stats) {
    run_result r;
    RUN(&r, "stats");
    EXPECT_STATUS(&r, 0);
    char db[PATH_MAX + 16];
    snprintf(db, sizeof db, "%s/kdart.db", test_dir);
    EXPECT_IN(r.out, db);
    EXPECT_IN(r.out, "not created yet"); /* stats never creates the cache it reports on */
    EXPECT_IN(r.out, "NVRTC");
    EXPECT_IN(r.out, "nvJitLink");
    /* The CLI must work with no driver at all, and say so.  Whether there
     * is one is judged as the runtime judges it: can libcuda.so.1 be
     * loaded (the GPU machine keeps it outside /usr/lib/x86_64-linux-gnu). */
    void *libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (libcuda) dlclose(libcuda);
    if (!libcuda) {
        const char *line = strstr(r.out, "\nCUDA ");
        ck_assert_msg(line != NULL, "no CUDA line in:\n%s", r.out);
        size_t len = strcspn(line + 1, "\n");
        ck_assert_msg(memmem(line + 1, len, "not available", 13) != NULL, "CUDA said available:\n%s", r.out);
    }
    run_free(&r);

    RUN(&r, "stats", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '{'), "stats --json is not a JSON object:\n%s", r.out);
    EXPECT_IN(r.out, "\"cache_path\"");
    EXPECT_IN(r.out, "\"cuda_available\"");
    run_free(&r);

    /* --cache after the command, and a --ro-cache: both reported. */
    char other[PATH_MAX + 16], ro[PATH_MAX + 16];
    snprintf(other, sizeof other, "%s/other.db", test_dir);
    snprintf(ro, sizeof ro, "%s/ro.db", test_dir);
    RUN(&r, "stats", "--cache", other, "--ro-cache", ro);
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, other);
    EXPECT_IN(r.out, ro);
    run_free(&r);
}
END_TEST

/* ------------------------------------------------- with a seeded cache */

START_TEST(test_prewarm_then_hits) {
    /* In a fresh directory (not the seed): compile, then hit. */
    run_result r;
    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.err, "compiled");
    EXPECT_IN(r.err, "[1/3");
    EXPECT_IN(r.err, "chunk_rcumsum K=64 sm_90a");
    EXPECT_IN(r.out, "3 compiled, 0 hits, 0 failed");
    run_free(&r);

    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a", "--jobs", "2");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.err, "hit");
    EXPECT_IN(r.out, "0 compiled, 3 hits, 0 failed");
    run_free(&r);

    /* --force recompiles what the cache holds. */
    RUN_EXPECT(0, out, "3 compiled, 0 hits, 0 failed", "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a", "--force");

    /* --quiet prints errors only: no progress lines, no summary; the exit status says how it went. */
    RUN(&r, "--quiet", "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(strstr(r.err, "hit") == NULL, "--quiet still printed progress:\n%s", r.err);
    ck_assert_msg(r.out[0] == 0, "--quiet still printed:\n%s", r.out);
    run_free(&r);

    /* --json: the summary as one object; the default is one job per CPU. */
    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '{'), "prewarm --json is not a JSON object:\n%s", r.out);
    EXPECT_IN(r.out, "\"entries\": 3, \"compiled\": 0, \"hits\": 3, \"failed\": 0");
    EXPECT_IN(r.out, "\"archs\": [\"sm_90a\"]");
    char jobs[32];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(jobs, sizeof jobs, "\"jobs\": %ld,", cpus < 3 ? cpus : 3); /* (never more jobs than entries) */
    EXPECT_IN(r.out, jobs);
    run_free(&r);

    /* Without --arch (and KDART_ARCH) on a machine without a GPU: both targets, Hopper's and
     * Blackwell's, so a CPU node's cache serves either kind of GPU node. */
    const char *env_arch = getenv("KDART_ARCH");
    RUN(&r, "stats");
    const int no_gpu = strstr(r.out, "not available") != NULL;
    run_free(&r);
    if (no_gpu && !(env_arch && env_arch[0])) {
        RUN(&r, "prewarm", "--kernel", "chunk_rcumsum");
        EXPECT_STATUS(&r, 0);
        EXPECT_IN(r.out, "prewarm: 6 entries: 3 compiled, 3 hits");
        EXPECT_IN(r.err, "chunk_rcumsum K=64 sm_100a");
        run_free(&r);
    }
}
END_TEST

/* Compiled entries the cache cannot keep are not a success: exit 6.  A
 * read-only cache (chattr +i, which stops root too) still serves its hits
 * to ls and prewarm. */
START_TEST(test_prewarm_not_stored) {
    char bad[PATH_MAX + 32], file[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s/file", test_dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/kdart.db", file); /* under a regular file: no cache at all */
    run_result r;
    RUN(&r, "--cache", bad, "prewarm", "--kernel", "chunk_rcumsum", "--spec", "K=64", "--arch", "sm_90a");
    EXPECT_STATUS(&r, 6);
    EXPECT_IN(r.err, "NOT STORED");
    EXPECT_IN(r.err, "not stored in the cache");
    EXPECT_IN(r.out, "1 compiled, 0 hits, 0 failed");
    run_free(&r);
    RUN(&r, "prewarm", "--help");
    EXPECT_IN(r.out, "6 none failed but compiled entries");
    run_free(&r);

    use_seed();
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "chattr +i '%s' 2>/dev/null", test_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_prewarm_not_stored: chattr +i not available; read-only part skipped\n");
        return;
    }
    RUN(&r, "ls");
    int ls_status = r.status;
    char *ls_out = strdup(r.out);
    run_free(&r);
    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
    int hits_status = r.status;
    char *hits_out = strdup(r.out);
    run_free(&r);
    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a", "--force");
    snprintf(cmd, sizeof cmd, "chattr -i '%s'", test_dir);
    ck_assert_int_eq(system(cmd), 0);
    EXPECT_STATUS(&r, 6);
    EXPECT_IN(r.out, "3 compiled");
    run_free(&r);
    ck_assert_msg(ls_status == 0 && count_substr(ls_out, "chunk_rcumsum") == 3, "ls %d:\n%s", ls_status, ls_out);
    ck_assert_msg(hits_status == 0 && strstr(hits_out, "0 compiled, 3 hits"), "prewarm %d:\n%s", hits_status,
                  hits_out);
    free(ls_out);
    free(hits_out);
}
END_TEST

START_TEST(test_prewarm_parallel) {
    /* Two architectures, one spec, two threads sharing one handle. */
    run_result r;
    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--spec", "K=128", "--arch", "sm_90a,sm_100a", "-j2");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.err, "chunk_rcumsum K=128 sm_90a");
    EXPECT_IN(r.err, "chunk_rcumsum K=128 sm_100a");
    EXPECT_IN(r.out, "2 compiled, 0 hits, 0 failed");
    run_free(&r);

    RUN(&r, "ls");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "sm_100a");
    ck_assert_int_eq(count_substr(r.out, "chunk_rcumsum"), 2);
    run_free(&r);
}
END_TEST

/* A kernel directory whose chunk_rcumsum does not compile: prewarm fails
 * with the compiler's message, the failure is recorded (and still fails
 * the next run), and the entry has a log but no cubin. */
START_TEST(test_compile_failure) {
    char kdir[PATH_MAX + 16], from[PATH_MAX + 64], to[PATH_MAX + 64];
    snprintf(kdir, sizeof kdir, "%s/kernels", test_dir);
    ck_assert_int_eq(mkdir(kdir, 0755), 0);
    static const char *const files[] = {"chunk_rcumsum.cuh", "kda_params.h", "kdart_common.cuh"};
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/kernel_src/%s", KDART_TEST_SOURCE_DIR, files[i]);
        snprintf(to, sizeof to, "%s/%s", kdir, files[i]);
        copy_file(from, to);
    }
    snprintf(to, sizeof to, "%s/chunk_rcumsum.cuh", kdir);
    FILE *f = fopen(to, "a");
    ck_assert_ptr_nonnull(f);
    fputs("\nthis is not C++ @@@;\n", f);
    ck_assert_int_eq(fclose(f), 0);

    run_result r;
    for (int pass = 0; pass < 2; pass++) {
        RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--spec", "K=64", "--arch", "sm_90a", "--kernel-dir", kdir);
        EXPECT_STATUS(&r, 1);
        EXPECT_IN(r.err, "FAILED");
        EXPECT_IN(r.err, "ECOMPILE");
        EXPECT_IN(r.err, "error");
        EXPECT_IN(r.out, "0 compiled, 0 hits, 1 failed");
        run_free(&r);
    }

    RUN_EXPECT(0, out, "FAILED", "ls");

    char key[65];
    keys_from_ls(key, NULL);
    RUN(&r, "show", key);
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "FAILED");
    EXPECT_IN(r.out, "this is not C++"); /* the compiler log is kept */
    run_free(&r);

    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s/failed.cubin", test_dir);
    RUN_EXPECT(1, err, "no cubin", "export", key, "-o", out);
}
END_TEST

START_TEST(test_ls) {
    use_seed();
    run_result r;
    RUN(&r, "ls");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "KEY");
    EXPECT_IN(r.out, "K=64");
    EXPECT_IN(r.out, "K=128");
    EXPECT_IN(r.out, "sm_90a");
    EXPECT_IN(r.out, " ok ");
    EXPECT_IN(r.out, " rw");
    ck_assert_int_eq(count_substr(r.out, "chunk_rcumsum"), 3);
    run_free(&r);

    RUN(&r, "ls", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '['), "ls --json is not a JSON array:\n%s", r.out);
    ck_assert_int_eq(count_substr(r.out, "\"key\": "), 3);
    EXPECT_IN(r.out, "\"kernel\": \"chunk_rcumsum\"");
    EXPECT_IN(r.out, "\"spec\": \"K=64\"");
    EXPECT_IN(r.out, "\"arch\": \"sm_90a\"");
    EXPECT_IN(r.out, "\"status\": \"ok\"");
    EXPECT_IN(r.out, "\"cubin_size\": ");
    run_free(&r);

    /* The same file as a read-only cache under an empty writable one. */
    char seed_db[PATH_MAX + 16], empty_db[PATH_MAX + 16];
    snprintf(seed_db, sizeof seed_db, "%s/kdart.db", test_dir);
    snprintf(empty_db, sizeof empty_db, "%s/empty.db", test_dir);
    RUN(&r, "--cache", empty_db, "--ro-cache", seed_db, "ls");
    EXPECT_STATUS(&r, 0);
    ck_assert_int_eq(count_substr(r.out, " ro1"), 3);
    run_free(&r);
}
END_TEST

START_TEST(test_show) {
    use_seed();
    char key1[65], key2[65];
    keys_from_ls(key1, key2);
    char prefix[13];
    snprintf(prefix, sizeof prefix, "%.12s", key1);

    run_result r;
    RUN(&r, "show", prefix);
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, key1);
    EXPECT_IN(r.out, "chunk_rcumsum");
    EXPECT_IN(r.out, "manifest");
    EXPECT_IN(r.out, "arch=sm_90a");
    EXPECT_IN(r.out, "kernel=chunk_rcumsum");
    EXPECT_IN(r.out, "report:");
    EXPECT_IN(r.out, "log:");
    run_free(&r);

    RUN(&r, "show", key1, "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '{'), "show --json is not a JSON object:\n%s", r.out);
    EXPECT_IN(r.out, key1);
    EXPECT_IN(r.out, "\"manifest\": [");
    EXPECT_IN(r.out, "\"report\": {\"registers\": "); /* an object, numbers as numbers */
    EXPECT_IN(r.out, "\"spill_store_bytes\": 0");
    EXPECT_IN(r.out, "\"log\": ");
    run_free(&r);

    RUN_EXPECT(4, err, "deadbeef", "show", "deadbeefdeadbeefdeadbeef");

    /* An ambiguous prefix: the two keys' common prefix, when they have one. */
    size_t common = 0;
    while (common < 64 && key1[common] == key2[common]) common++;
    if (common > 0) {
        char amb[65];
        snprintf(amb, sizeof amb, "%.*s", (int)common, key1);
        RUN_STATUS(5, "show", amb);
    }
}
END_TEST

START_TEST(test_export) {
    use_seed();
    char key[65];
    keys_from_ls(key, NULL);
    char prefix[13], file[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%.12s", key);
    snprintf(file, sizeof file, "%s/out.cubin", test_dir);

    RUN_STATUS(0, "export", prefix, "-o", file);
    size_t n;
    char *data = slurp(file, &n);
    ck_assert_ptr_nonnull(data);
    ck_assert_uint_gt(n, 64);
    ck_assert_msg(memcmp(data,
                         "\x7f"
                         "ELF",
                         4) == 0,
                  "exported file is not ELF");
    free(data);

    RUN_STATUS(4, "export", "deadbeefdeadbeef", "-o", file);
}
END_TEST

/* 1 if `name` is an executable in dir. */
static int tool_in(const char *dir, const char *name) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, X_OK) == 0;
}

START_TEST(test_sass) {
    use_seed();
    char key[65];
    keys_from_ls(key, NULL);
    char prefix[13];
    snprintf(prefix, sizeof prefix, "%.12s", key);

    /* A PATH without the toolkit: the CLI must still look in
     * /usr/local/cuda/bin, so what it finds depends only on that. */
    static const char *const env[] = {"PATH=/usr/bin:/bin", "CUDA_HOME=", NULL};
    extra_env = env;
    int have = tool_in("/usr/local/cuda/bin", "nvdisasm") || tool_in("/usr/local/cuda/bin", "cuobjdump") ||
               tool_in("/usr/bin", "nvdisasm") || tool_in("/usr/bin", "cuobjdump") || tool_in("/bin", "nvdisasm") ||
               tool_in("/bin", "cuobjdump");
    run_result r;
    RUN(&r, "sass", prefix);
    extra_env = NULL;
    if (have) {
        EXPECT_STATUS(&r, 0);
        ck_assert_msg(strlen(r.out) > 0, "sass printed nothing; stderr:\n%s", r.err);
    } else {
        EXPECT_STATUS(&r, 3);
        EXPECT_IN(r.err, "nvdisasm");
        EXPECT_IN(r.err, "/usr/local/cuda/bin");
        EXPECT_IN(r.err, "pip install nvidia-cuda-nvdisasm"); /* where to get one without the toolkit */
    }
    run_free(&r);

    RUN_STATUS(4, "sass", "deadbeefdeadbeef");
}
END_TEST

/* Overwrites every cubin blob in the cache file with zeros, behind the
 * runtime's back. */
static void corrupt_blobs(void) {
    char db_path[PATH_MAX + 16];
    snprintf(db_path, sizeof db_path, "%s/kdart.db", test_dir);
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL);
    ck_assert_msg(rc == SQLITE_OK, "open %s: %s", db_path, db ? sqlite3_errmsg(db) : "?");
    char *msg = NULL;
    rc = sqlite3_exec(db, "UPDATE entries SET cubin = zeroblob(length(cubin)) WHERE cubin IS NOT NULL", NULL, NULL,
                      &msg);
    ck_assert_msg(rc == SQLITE_OK, "corrupting: %s", msg ? msg : "?");
    ck_assert_int_gt(sqlite3_changes(db), 0);
    sqlite3_free(msg);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}

START_TEST(test_verify) {
    use_seed();
    RUN_EXPECT(0, out, "checked 3 entries, 0 damaged", "verify");
    RUN_EXPECT(0, out, "{\"checked\": 3, \"damaged\": 0, \"ok\": true}", "verify", "--json");

    corrupt_blobs();
    RUN_EXPECT(1, out, "3 damaged", "verify");

    /* Damaged rows were quarantined: a second pass finds the cache clean,
     * and stats counts them. */
    RUN_STATUS(0, "verify");
    RUN_EXPECT(0, out, "3 quarantined", "stats");
}
END_TEST

START_TEST(test_gc) {
    use_seed();
    run_result r;
    RUN_EXPECT(0, out, "evicted 0 entries", "gc", "--max-bytes", "1G");

    RUN_EXPECT(0, out, "evicted 3 entries", "gc", "--max-bytes=0");

    RUN(&r, "ls");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(strstr(r.out, "chunk_rcumsum") == NULL, "entries left after gc:\n%s", r.out);
    run_free(&r);

    RUN(&r, "ls", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '['), "ls --json on an empty cache:\n%s", r.out);
    ck_assert_msg(strstr(r.out, "\"key\"") == NULL, "entries left after gc:\n%s", r.out);
    run_free(&r);
}
END_TEST

START_TEST(test_why) {
    use_seed();
    run_result r;
    /* Cached for sm_90a only: the nearest entry differs in the arch. */
    RUN(&r, "why", "chunk_rcumsum", "K=128", "--arch", "sm_100a");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "miss");
    EXPECT_IN(r.out, "arch: entry has sm_90a, request needs sm_100a");
    /* the fields counted as listed: arch and the two option lines that carry it */
    EXPECT_IN(r.out, "differs in 3 fields:");
    run_free(&r);

    RUN(&r, "why", "chunk_rcumsum", "K=128", "--arch", "sm_100a", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '{'), "why --json is not a JSON object:\n%s", r.out);
    EXPECT_IN(r.out, "\"hit\": false");
    EXPECT_IN(r.out, "\"differences\": [\"arch: entry has sm_90a, request needs sm_100a\"");
    EXPECT_IN(r.out, "\"manifest\": [\"arch=sm_100a\"");
    run_free(&r);

    RUN_EXPECT(0, out, "hit", "why", "chunk_rcumsum", "K=128", "--arch", "sm_90a");
    RUN_EXPECT(0, out, "\"hit\": true", "why", "chunk_rcumsum", "K=128", "--arch", "sm_90a", "--json");
    /* a target without the 'a' suffix is taken, with a word */
    RUN_EXPECT(0, err, "warning: sm_90 has no arch-specific instructions", "why", "chunk_rcumsum", "K=128",
               "--arch", "sm_90");

    RUN_STATUS(2, "why", "chunk_rcumsum", "K=96", "--arch", "sm_90a");
}
END_TEST

START_TEST(test_why_spec) {
    /* Only K=64 prewarmed (and -v after the command shows the runtime's
     * log): asking about K=128 names the spec field. */
    run_result r;
    RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--spec", "K=64", "--arch", "sm_90a", "-v");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "1 compiled");
    EXPECT_IN(r.err, "kdart: info: "); /* -v passes the runtime's INFO log through */
    run_free(&r);

    RUN(&r, "why", "chunk_rcumsum", "K=128", "--arch", "sm_90a");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "miss");
    EXPECT_IN(r.out, "spec.K: entry has 64, request needs 128");
    run_free(&r);
}
END_TEST

/* ------------------------------------------------ ls filters, rm, clear */

START_TEST(test_ls_filters) {
    use_seed();
    run_result r;
    RUN(&r, "ls", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
    EXPECT_STATUS(&r, 0);
    ck_assert_int_eq(count_substr(r.out, "chunk_rcumsum"), 3);
    run_free(&r);

    /* Filters that match nothing: exit 0, nothing listed, said on stderr. */
    RUN(&r, "ls", "--kernel", "bwd_intra");
    EXPECT_STATUS(&r, 0);
    ck_assert_int_eq(count_substr(r.out, "chunk_rcumsum"), 0);
    EXPECT_IN(r.err, "no entry matches");
    run_free(&r);
    RUN(&r, "ls", "--arch", "sm_100a", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '['), "ls --json is not a JSON array:\n%s", r.out);
    ck_assert_int_eq(count_substr(r.out, "\"key\": "), 0);
    run_free(&r);

    RUN_EXPECT(4, err, "unknown kernel", "ls", "--kernel", "no_such_kernel");
    RUN_STATUS(2, "ls", "--arch", "x86");
    RUN_STATUS(2, "ls", "--kernel");
}
END_TEST

START_TEST(test_rm) {
    use_seed();
    char key1[65], key2[65];
    keys_from_ls(key1, key2);
    char prefix[13];
    snprintf(prefix, sizeof prefix, "%.12s", key1);
    run_result r;

    RUN_STATUS(2, "rm");
    RUN_STATUS(2, "rm", "not-hex");

    /* One real key and one unknown: the real one goes, the status is 4. */
    RUN(&r, "rm", prefix, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    EXPECT_STATUS(&r, 4);
    EXPECT_IN(r.out, key1);
    EXPECT_IN(r.err, "0123456789abcdef");
    run_free(&r);
    RUN(&r, "ls", "--json");
    EXPECT_STATUS(&r, 0);
    EXPECT_NOT_IN(r.out, key1);
    EXPECT_IN(r.out, key2);
    run_free(&r);
    RUN_STATUS(4, "show", prefix);
    RUN_STATUS(4, "rm", prefix);

    /* An entry only in a read-only cache is never removed. */
    char seed_db[PATH_MAX + 16], empty_db[PATH_MAX + 16];
    snprintf(seed_db, sizeof seed_db, "%s/kdart.db", test_dir);
    snprintf(empty_db, sizeof empty_db, "%s/empty.db", test_dir);
    RUN_EXPECT(4, err, "writable cache", "--cache", empty_db, "--ro-cache", seed_db, "rm", key2);
    RUN_STATUS(0, "show", key2);

    /* The removed specialization compiles again on the next prewarm. */
    RUN_EXPECT(0, out, "1 compiled, 2 hits", "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
}
END_TEST

START_TEST(test_clear) {
    use_seed();
    RUN_STATUS(2, "clear", "extra");
    RUN_EXPECT(0, out, "removed 3 entries", "clear");
    RUN_EXPECT(0, out, "entries          0 ", "stats");
    RUN_EXPECT(0, out, "removed 0 entries", "clear");
    RUN_STATUS(1, "--cache", ":memory:", "clear");
}
END_TEST

/* The seed's prewarm missed three times (K = 64, 128, 256); a second prewarm hits all. */
START_TEST(test_stats_hits_misses) {
    use_seed();
    run_result r;
    RUN_STATUS(0, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
    RUN(&r, "stats");
    EXPECT_STATUS(&r, 0);
    EXPECT_IN(r.out, "hits             3\n");
    EXPECT_IN(r.out, "misses           3 (lookups that found no entry in any cache)");
    run_free(&r);
    RUN_STATUS(0, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a", "--force");
    RUN(&r, "stats", "--json");
    EXPECT_STATUS(&r, 0);
    ck_assert_msg(json_valid(r.out, '{'), "stats --json is not a JSON object:\n%s", r.out);
    EXPECT_IN(r.out, "\"hits\": 0,");   /* the rebuilt rows start afresh */
    EXPECT_IN(r.out, "\"misses\": 3,"); /* a forced rebuild is no miss */
    run_free(&r);
}
END_TEST

/* One integer from the test's cache file. */
static int64_t db_int(const char *sql) {
    char db_path[PATH_MAX + 16];
    snprintf(db_path, sizeof db_path, "%s/kdart.db", test_dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    int64_t v = -1;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

/* Overwrites page `page` of the cache file (from byte `from` of it on)
 * with bytes that are no b-tree. */
static void damage_page(int64_t page, int64_t from) {
    char db_path[PATH_MAX + 16];
    snprintf(db_path, sizeof db_path, "%s/kdart.db", test_dir);
    int64_t psize = db_int("PRAGMA page_size");
    unsigned char junk[65536];
    for (int64_t i = 0; i < psize; i++) junk[i] = (unsigned char)(i * 131 + 7);
    int fd = open(db_path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, junk, (size_t)(psize - from), (page - 1) * psize + from), psize - from);
    close(fd);
}

/* verify finds the damage once (exit 1, found in its stdout or stderr),
 * and the next verify finds the cache clean (clean in its stdout). */
static void verify_heals(const char *found, const char *clean) {
    run_result r;
    RUN(&r, "verify");
    EXPECT_STATUS(&r, 1);
    ck_assert_msg(strstr(r.out, found) || strstr(r.err, found), "'%s' not in:\n%s\n%s", found, r.out, r.err);
    run_free(&r);
    RUN_EXPECT(0, out, clean, "verify");
}

/* Page 1 (the schema) damaged: verify salvages every entry, says so and
 * exits 1; the next verify is clean and counts them all. */
START_TEST(test_verify_page1) {
    use_seed();
    damage_page(1, 100);
    verify_heals("salvaged", "checked 3 entries, 0 damaged");
    RUN_EXPECT(0, out, "0 compiled, 3 hits", "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
}
END_TEST

/* Every page of the entries table (its root and, below an interior root,
 * its leaves) damaged: verify counts the entries it lost instead of
 * "checked 0 entries". */
START_TEST(test_verify_counts_lost) {
    use_seed();
    char db_path[PATH_MAX + 16];
    snprintf(db_path, sizeof db_path, "%s/kdart.db", test_dir);
    int64_t root = db_int("SELECT rootpage FROM sqlite_master WHERE name = 'entries'");
    int64_t psize = db_int("PRAGMA page_size");
    unsigned char page[65536];
    int fd = open(db_path, O_RDONLY);
    ck_assert_int_eq(pread(fd, page, (size_t)psize, (root - 1) * psize), psize);
    close(fd);
    if (page[0] == 0x05) { /* interior: the children are the cells' left pointers and the right pointer */
        unsigned n = (unsigned)page[3] << 8 | page[4];
        for (unsigned i = 0; i <= n; i++) {
            const unsigned char *p = page + 8;
            if (i < n) p = page + ((unsigned)page[12 + 2 * i] << 8 | page[13 + 2 * i]);
            damage_page((int64_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3], 0);
        }
    }
    damage_page(root, 0);
    verify_heals("checked 3 entries, 3 damaged", "checked 0 entries, 0 damaged");
}
END_TEST

/* File locks that fail (ENOLCK, as on NFS without lockd): the cache is
 * read read-only without stalls, every entry hits, and ls and show say
 * the tier is read-only. */
START_TEST(test_lock_failure) {
    use_seed();
    char key1[65];
    keys_from_ls(key1, NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int rc = test_deny_locks();
        if (rc) _exit(rc);
        double t0 = kdart__now_ms();
        run_result r;
        RUN(&r, "ls");
        EXPECT_STATUS(&r, 0);
        EXPECT_IN(r.out, " ro\n");
        EXPECT_NOT_IN(r.out, " rw");
        run_free(&r);
        RUN_EXPECT(0, out, "tier         ro\n", "show", key1);
        RUN(&r, "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
        EXPECT_STATUS(&r, 0);
        EXPECT_IN(r.out, "0 compiled, 3 hits");
        EXPECT_IN(r.err, "lock");
        run_free(&r);
        double ms = kdart__now_ms() - t0;
        printf("test_lock_failure: ls, show and prewarm in %.0f ms\n", ms);
        fflush(stdout);
        _exit(ms < 5000 ? 0 : 10);
    }
    int status;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc == 77) printf("test_lock_failure: seccomp not available here; skipped\n");
    fflush(stdout);
    ck_assert_msg(rc == 0 || rc == 77, "child status %d (10: stalled)", rc);
}
END_TEST

/* A well-formed key that no cache holds: exit 4, however the caches are set up. */
START_TEST(test_show_absent_key) {
    static const char key[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    run_result r;
    RUN(&r, "show", key); /* no cache file yet */
    EXPECT_STATUS(&r, 4);
    EXPECT_IN(r.err, "no cache entry");
    run_free(&r);
    RUN_STATUS(4, "--cache", ":memory:", "show", key);
    RUN(&r, "show", key, "--json");
    EXPECT_STATUS(&r, 4);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
}
END_TEST

/* Caches with no entry at all (a path that is not a cache file, a cache
 * not yet created): nothing to list, sort or print, and no undefined
 * behaviour on the way (qsort of no rows). */
START_TEST(test_empty_caches) {
    RUN_EXPECT(0, err, "the cache has no entries", "--cache", "/dev/null", "ls");
    RUN_EXPECT(0, out, "[]", "--cache", "/dev/null", "ls", "--json");
    RUN_EXPECT(0, err, "the cache has no entries", "ls");
}
END_TEST

/* A command that only reads (or removes from) a cache never creates one: a --cache in a directory that
 * does not exist stays that way, and the commands answer as for an empty cache. */
START_TEST(test_missing_cache_not_created) {
    char missing[PATH_MAX + 32], parent[PATH_MAX + 16];
    snprintf(parent, sizeof parent, "%s/no-such-dir", test_dir);
    snprintf(missing, sizeof missing, "%s/sub/x.db", parent);
    RUN_EXPECT(0, err, "the cache has no entries", "--cache", missing, "ls");
    RUN_EXPECT(0, out, "not created yet", "--cache", missing, "stats");
    RUN_STATUS(0, "--cache", missing, "verify");
    RUN_STATUS(0, "--cache", missing, "gc", "--max-bytes", "0");
    RUN_STATUS(0, "--cache", missing, "clear");
    RUN_STATUS(4, "--cache", missing, "rm", "abcdef");
    RUN_EXPECT(0, out, "miss", "--cache", missing, "why", "chunk_rcumsum", "K=64", "--arch", "sm_90a");
    struct stat st;
    ck_assert_msg(stat(parent, &st) != 0, "a reading command created %s", parent);
    /* prewarm creates it */
    RUN_STATUS(0, "--cache", missing, "prewarm", "--kernel", "chunk_rcumsum", "--spec", "K=64", "--arch", "sm_90a");
    ck_assert_int_eq(stat(missing, &st), 0);
}
END_TEST

/* A bad KDART_ARCH fails only what compiles for the default arch, and the
 * message names the variable; listing and checking a cache work. */
START_TEST(test_bad_env_arch) {
    static const char *const env[] = {"KDART_ARCH=garbage", NULL};
    extra_env = env;
    RUN_EXPECT(0, err, "warning: KDART_ARCH: 'garbage' is not a target architecture", "ls");
    RUN_STATUS(0, "verify");
    RUN_STATUS(0, "stats");
    RUN_EXPECT(2, err, "kdart prewarm: KDART_ARCH: 'garbage'", "-q", "prewarm", "--kernel", "chunk_rcumsum");
    RUN_EXPECT(2, err, "EARCH: KDART_ARCH: 'garbage'", "-q", "why", "chunk_rcumsum", "K=64");
    /* well formed but older than Hopper: named as the variable's too */
    static const char *const env89[] = {"KDART_ARCH=sm_89", NULL};
    extra_env = env89;
    RUN_EXPECT(2, err, "kdart prewarm: KDART_ARCH: sm_89 is not supported", "-q", "prewarm", "--kernel",
               "chunk_rcumsum");
    RUN_EXPECT(2, err, "EARCH: KDART_ARCH: sm_89", "-q", "why", "chunk_rcumsum", "K=64");
    extra_env = NULL;
}
END_TEST

/* The cache controls people know from ccache: eviction by age, a size limit kept in the cache file, zeroed
 * statistics; and stats naming where each setting came from. */
START_TEST(test_gc_age_limit_zero) {
    RUN_STATUS(0, "-q", "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a");
    RUN_STATUS(0, "-q", "prewarm", "--kernel", "chunk_rcumsum", "--arch", "sm_90a"); /* 3 hits */
    RUN_EXPECT(0, out, "hits             3", "stats");
    RUN_EXPECT(0, out, "statistics zeroed", "stats", "--zero");
    RUN_EXPECT(0, out, "hits             0", "stats");
    RUN_EXPECT(0, out, "misses           0", "stats");
    RUN_EXPECT(0, out, "entries          3", "stats"); /* the entries stay */
    /* the limit: default, kept in the file, overridden by the variable, back to none */
    RUN_EXPECT(0, out, "cache_max_bytes 2147483648  (default (2 GiB))", "stats");
    RUN_EXPECT(0, out, "kept 512.0M as the cache's size limit", "gc", "--max-bytes", "512M", "--keep");
    RUN_EXPECT(0, out, "cache_max_bytes 536870912  (the cache file", "stats");
    RUN_EXPECT(0, out, "\"origin\": \"the cache file", "stats", "--json");
    static const char *const env[] = {"KDART_CACHE_MAX_BYTES=1G", NULL};
    extra_env = env;
    RUN_EXPECT(0, out, "cache_max_bytes 1073741824  (KDART_CACHE_MAX_BYTES)", "stats");
    extra_env = NULL;
    RUN_EXPECT(0, out, "cache_path ", "stats");
    RUN_EXPECT(0, out, "forgot the cache's size limit", "gc", "--forget");
    RUN_EXPECT(0, out, "cache_max_bytes 2147483648  (default (2 GiB))", "stats");
    static const char *const nolimit[] = {"KDART_CACHE_MAX_BYTES=0", NULL};
    extra_env = nolimit;
    RUN_EXPECT(0, out, "cache_max_bytes none (no limit)  (KDART_CACHE_MAX_BYTES)", "stats");
    extra_env = NULL;
    /* by age: nothing is a day old; everything is older than now once a second has passed */
    RUN_EXPECT(0, out, "evicted 0 entries", "gc", "--older-than", "1d");
    sleep(1);
    RUN_EXPECT(0, out, "evicted 3 entries", "gc", "--older-than", "0s");
    RUN_EXPECT(2, err, "gc needs --max-bytes N or --older-than AGE", "gc");
    RUN_EXPECT(2, err, "--keep needs --max-bytes N with N > 0", "gc", "--max-bytes", "0", "--keep");
    RUN_EXPECT(2, err, "wants a duration like 45s", "gc", "--older-than", "3w");
    RUN_EXPECT(2, err, "--keep needs --max-bytes", "gc", "--older-than", "1d", "--keep");
}
END_TEST

static Suite *cli_suite(void) {
    Suite *s = suite_create("cli");

    TCase *usage = tcase_create("usage");
    tcase_add_checked_fixture(usage, test_dir_setup, test_dir_teardown);
    tcase_set_timeout(usage, 600);
    tcase_add_test(usage, test_top_help);
    tcase_add_test(usage, test_command_help);
    tcase_add_test(usage, test_usage_errors);
    tcase_add_test(usage, test_unknown_kernel);
    tcase_add_test(usage, test_unsupported_arch);
    tcase_add_test(usage, test_kernels);
    tcase_add_test(usage, test_selftest_placeholder);
    tcase_add_test(usage, test_stats);
    tcase_add_test(usage, test_show_absent_key);
    tcase_add_test(usage, test_empty_caches);
    tcase_add_test(usage, test_missing_cache_not_created);
    tcase_add_test(usage, test_bad_env_arch);
    tcase_add_test(usage, test_help_lists_options);
    tcase_add_test(usage, test_option_parser);
    suite_add_tcase(s, usage);

    TCase *cache = tcase_create("cache");
    tcase_add_unchecked_fixture(cache, seed_setup, seed_teardown);
    tcase_add_checked_fixture(cache, test_dir_setup, test_dir_teardown);
    tcase_set_timeout(cache, 600);
    tcase_add_test(cache, test_prewarm_then_hits);
    tcase_add_test(cache, test_prewarm_parallel);
    tcase_add_test(cache, test_prewarm_not_stored);
    tcase_add_test(cache, test_compile_failure);
    tcase_add_test(cache, test_ls);
    tcase_add_test(cache, test_show);
    tcase_add_test(cache, test_export);
    tcase_add_test(cache, test_sass);
    tcase_add_test(cache, test_verify);
    tcase_add_test(cache, test_gc);
    tcase_add_test(cache, test_why);
    tcase_add_test(cache, test_why_spec);
    tcase_add_test(cache, test_ls_filters);
    tcase_add_test(cache, test_rm);
    tcase_add_test(cache, test_clear);
    tcase_add_test(cache, test_gc_age_limit_zero);
    tcase_add_test(cache, test_stats_hits_misses);
    tcase_add_test(cache, test_verify_page1);
    tcase_add_test(cache, test_verify_counts_lost);
    tcase_add_test(cache, test_lock_failure);
    suite_add_tcase(s, cache);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(cli_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

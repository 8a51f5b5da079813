/*
 * main.c: the `kdart` command-line tool's entry point: the table of
 * commands, the global options, the exit codes, dispatch, and the helpers
 * every command uses to report.
 *
 * What the tool is for: operating a kdart compile cache from a shell.
 * Prewarm it (compile every registered specialization for the target
 * architectures, e.g. while building a container image, so that no job pays
 * for NVRTC at run time), look inside it (ls, show, sass, export, stats),
 * keep it healthy (verify, gc), explain a cache miss (why), and run the
 * node's compile service (serve).
 *
 * Global options (--cache, --ro-cache, --kernel-dir, --quiet, -v) may come
 * before or after the command name: a first pass takes them out of argv,
 * and what is left goes to the command, whose own table the generic parser
 * reads into the command's options struct.  Commands that only read the
 * cache open the runtime with KDART_OPEN_NO_CUDA, so they never initialize
 * a driver and behave the same on machines without a GPU.
 *
 * Output conventions: results on stdout (tables, JSON, disassembly);
 * progress, warnings and errors on stderr, each prefixed with "kdart".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int run_help(cli *c, const void *opts, int nargs, char **args);

static const cli_command cli_cmd_help = {
    .name = "help",
    .summary = "help on a command",
    .run = run_help,
    .operands = "[COMMAND]",
    .max_args = 1,
    .about = "Prints the help of COMMAND, or without one the list of commands.\n",
};

/* The order of `kdart --help`. */
static const cli_command *const commands[] = {
    &cli_cmd_prewarm, &cli_cmd_ls,    &cli_cmd_show, &cli_cmd_sass,  &cli_cmd_export,  &cli_cmd_verify,
    &cli_cmd_gc,      &cli_cmd_rm,    &cli_cmd_clear, &cli_cmd_stats, &cli_cmd_why,    &cli_cmd_serve,
    &cli_cmd_kernels, &cli_cmd_selftest, &cli_cmd_bench, &cli_cmd_help,
};

#define G(field) offsetof(cli_globals, field)
static const cli_option global_options[] = {
    {"cache", 0, CLI_STRING, "PATH", G(cache), 0, 0, 0,
     "the writable cache file (default: $KDART_CACHE_DIR/kdart.db, else $XDG_CACHE_HOME/kdart/kdart.db, "
     "else ~/.cache/kdart/kdart.db)"},
    {"ro-cache", 0, CLI_LIST, "PATH", G(ro_cache), 0, 16, 0,
     "a read-only cache searched after it (repeatable, in order)"},
    {"kernel-dir", 0, CLI_STRING, "DIR", G(kernel_dir), 0, 0, 0,
     "where the kernel sources are (default: $KDART_KERNEL_DIR, else the installed kernel_src)"},
    {"quiet", 'q', CLI_FLAG, NULL, G(quiet), 0, 0, 0, "print errors only"},
    {"verbose", 'v', CLI_COUNT, NULL, G(verbose), 0, 0, 0,
     "log the runtime's INFO messages to stderr (-vv: DEBUG)"},
    /* Acted on only in place of a command: `kdart CMD --help` is the command's. */
    {"help", 'h', CLI_ACTION, NULL, 0, 0, 0, 0, "this text; 'kdart COMMAND --help' for a command's"},
    {"version", 'V', CLI_ACTION, NULL, 0, 0, 0, 0, "print the version"},
    {NULL},
};

static const struct {
    int code;
    const char *meaning;
} exit_codes[] = {
    {EXIT_OK, "success"},
    {EXIT_FAIL, "the operation failed (a compile failed, damage found, I/O error)"},
    {EXIT_USAGE, "usage error (bad command line, spec or architecture)"},
    {EXIT_MISSING, "a needed external tool or the GPU is missing"},
    {EXIT_NOTFOUND, "not found (unknown key, unknown kernel)"},
    {EXIT_AMBIGUOUS, "ambiguous key prefix"},
    {EXIT_NOTSTORED, "prewarm: compiled, but the cache could not store the entries"},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------ messages */

/* Bad arguments that only the library can judge (a malformed spec or arch)
 * count as usage errors. */
int cli_exit_for_status(int status) {
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

/* The runtime's own messages already start with the code's name, so the
 * name is added only where the detail lacks it. */
void cli_describe_failure(char *buf, size_t n, int status, const char *detail) {
    const char *name = kdart_errname(status);
    size_t nl = strlen(name);
    if (!detail || !detail[0])
        snprintf(buf, n, "%s (%s)", kdart_strerror(status), name);
    else if (strncmp(detail, name, nl) == 0 && detail[nl] == ':')
        snprintf(buf, n, "%s", detail);
    else
        snprintf(buf, n, "%s: %s", name, detail);
}

int cli_fail(cli *c, int status, const char *what) {
    char msg[2048];
    cli_describe_failure(msg, sizeof msg, status, c->rt ? kdart_last_error(c->rt) : "");
    cli_error(c, "%s: %s", what, msg);
    return cli_exit_for_status(status);
}

/* The library's log callback.  It is called from whichever thread logs
 * (prewarm workers included); one fprintf per message keeps lines whole. */
static void log_to_stderr(void *user, int level, const char *message) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    (void)user;
    fprintf(stderr, "kdart: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], message);
}

/* ------------------------------------------------------------- helpers */

int cli_open(cli *c, int need_cuda) {
    kdart_options o = c->opts;
    if (!need_cuda) o.flags |= KDART_OPEN_NO_CUDA;
    if (c->no_create) o.flags |= KDART_OPEN_NO_CREATE;
    int rc = kdart_open(&c->rt, &o);
    if (rc != KDART_OK) {
        c->rt = NULL;
        cli_error(c, "cannot open the kdart runtime: %s (%s)", kdart_strerror(rc), kdart_errname(rc));
        return cli_exit_for_status(rc);
    }
    return EXIT_OK;
}

int cli_check_kernel(const cli *c, const char *name) {
    for (int i = 0; i < kdart_kernel_count(); i++)
        if (strcmp(kdart_kernel_name(i), name) == 0) return EXIT_OK;
    cli_error(c, "unknown kernel '%s'; registered kernels are:", name);
    for (int i = 0; i < kdart_kernel_count(); i++) fprintf(stderr, "%s%s", i ? ", " : "", kdart_kernel_name(i));
    fputc('\n', stderr);
    return EXIT_NOTFOUND;
}

/* The runtime's own rule (well formed, sm_90 or newer, known to NVRTC),
 * checked up front so that a bad target fails once, with its reason,
 * rather than once per specialization. */
int cli_check_arch(const cli *c, const char *arch) {
    char why[512];
    if (kdart_arch_supported(arch, why, sizeof why) != KDART_OK) return cli_usage(c, "%s", why);
    /* sm_90 (no suffix) compiles, but without Hopper's arch-specific instructions: bwd_dhu then takes
     * its mma.sync path instead of wgmma.  Say so once: a GPU of that family runs sm_90a code. */
    size_t n = strlen(arch);
    if (!c->g.quiet && n && arch[n - 1] != 'a' && arch[n - 1] != 'f')
        cli_error(c, "warning: %s has no arch-specific instructions: kdart's kernels are built and measured for "
                     "the 'a' targets (sm_90a, sm_100a); on %s bwd_dhu runs without wgmma", arch, arch);
    return EXIT_OK;
}

/* ---------------------------------------------------------------- help */

static const cli_command *find_command(const char *name) {
    for (size_t i = 0; i < COUNT(commands); i++)
        if (strcmp(commands[i]->name, name) == 0) return commands[i];
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
    for (size_t i = 0; i < COUNT(commands); i++) fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fputs("\nGlobal options (before or after the command):\n", f);
    cli_print_options(f, global_options);
    fputs("\nExit status:\n", f);
    for (size_t i = 0; i < COUNT(exit_codes); i++) fprintf(f, "  %d  %s\n", exit_codes[i].code, exit_codes[i].meaning);
}

static int run_help(cli *c, const void *opts, int nargs, char **args) {
    if (nargs == 0) {
        print_top_help(stdout);
        return EXIT_OK;
    }
    const cli_command *cmd = find_command(args[0]);
    if (!cmd) {
        cli_error(c, "unknown command '%s' (see 'kdart --help')", args[0]);
        return EXIT_USAGE;
    }
    cli_print_help(stdout, cmd);
    return EXIT_OK;
}

/* ---------------------------------------------------------------- main */

/* Parses the command's arguments into a fresh copy of its options struct
 * and runs it. */
static int dispatch(cli *c, const cli_command *cmd, int argc, char **argv) {
    void *opts = calloc(1, cmd->opts_size ? cmd->opts_size : 1);
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int nargs = 0, rc;
    if (!opts || !args) {
        cli_error(c, "out of memory");
        rc = EXIT_FAIL;
    } else {
        if (cmd->defaults) memcpy(opts, cmd->defaults, cmd->opts_size);
        c->cmd = cmd;
        c->no_create = cmd->no_create;
        rc = cli_parse(c, cmd, argc, argv, opts, args, &nargs);
        if (rc == CLI_HELP) {
            cli_print_help(stdout, cmd);
            rc = EXIT_OK;
        } else if (rc == EXIT_OK) {
            rc = cmd->run(c, opts, nargs, args);
        }
    }
    free(args);
    free(opts);
    return rc;
}

int main(int argc, char **argv) {
    cli c;
    memset(&c, 0, sizeof c);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) {
        fprintf(stderr, "kdart: out of memory\n");
        return EXIT_FAIL;
    }
    int n = cli_take_options(&c, global_options, argc, argv, &c.g, rest);
    if (n < 0) {
        free(rest);
        return EXIT_USAGE;
    }

    kdart_options_init(&c.opts);
    c.opts.cache_path = c.g.cache;
    c.opts.ro_cache_paths = c.g.ro_cache.v;
    c.opts.n_ro_cache_paths = (size_t)c.g.ro_cache.n;
    c.opts.kernel_dir = c.g.kernel_dir;
    /* The library never prints; the tool shows its warnings (a cache that
     * cannot be opened, a missing kernel dir) unless --quiet. */
    c.opts.log = log_to_stderr;
    c.opts.log_level = c.g.quiet          ? KDART_LOG_ERROR
                       : c.g.verbose >= 2 ? KDART_LOG_DEBUG
                       : c.g.verbose == 1 ? KDART_LOG_INFO
                                          : KDART_LOG_WARN;

    /* The first word left is the command, or one of the actions of the
     * global table (--help, --version) standing in its place. */
    const cli_option *action = n > 0 ? cli_lookup(global_options, rest[0]) : NULL;
    const cli_command *cmd = n > 0 ? find_command(rest[0]) : NULL;
    int rc;
    if (n == 0) {
        fprintf(stderr, "usage: kdart [GLOBAL OPTIONS] COMMAND [ARGS]; 'kdart --help' lists the commands\n");
        rc = EXIT_USAGE;
    } else if (action && strcmp(action->name, "help") == 0) {
        print_top_help(stdout);
        rc = EXIT_OK;
    } else if (action && strcmp(action->name, "version") == 0) {
        printf("kdart %s\n", kdart_version());
        rc = EXIT_OK;
    } else if (!cmd) {
        rc = rest[0][0] == '-' ? cli_usage(&c, "unknown option '%s'", rest[0])
                               : cli_usage(&c, "unknown command '%s'", rest[0]);
    } else {
        rc = dispatch(&c, cmd, n, rest);
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

/*
 * cli.h: what the source files of the `kdart` command-line tool share.
 *
 * The tool is a table of commands (main.c).  Each command is one
 * cli_command: its name, a one-line summary, its handler, its option table
 * and its help prose.  One generic parser (options.c) reads a command line
 * against an option table into the command's own options struct, and the
 * same tables produce `--help`, so an option is declared in exactly one
 * row.  The commands live in one file per group: cache_cmds.c (inspect and
 * maintain the cache), report_cmds.c (stats, why), prewarm.c (prewarm,
 * kernels), run_cmds.c (selftest and bench, on the GPU) and serve_cmd.c
 * (the compile service); options.c also holds the output helpers they share.
 *
 * Everything declared here is private to the tool.  The tool itself is a
 * client of the public API (kdart.h) and nothing else, apart from
 * kda_check.h for selftest and bench: whatever it does, an embedding
 * application can do too.
 */
#ifndef KDART_CLI_H
#define KDART_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kdart.h>

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

/* What the parser returns for "-h"/"--help": not an exit code, the
 * dispatcher prints the command's help and exits 0. */
#define CLI_HELP (-1)

/* The kinds of option: whether it takes a value, and how the value is
 * checked and stored in the options struct. */
typedef enum cli_arg {
    CLI_FLAG,    /* no value; sets an int to 1 */
    CLI_COUNT,   /* no value; adds 1 to an int each time given (-v, -vv) */
    CLI_ACTION,  /* no value; acted on where it stands (kdart --help), never stored */
    CLI_STRING,  /* const char *; the last one given wins */
    CLI_LIST,    /* cli_list; every one given, in order, at most `hi` of them */
    CLI_INT,     /* int in lo..hi */
    CLI_SECONDS, /* double in lo..hi */
    CLI_BYTES,   /* int64_t; a size as KDART_CACHE_MAX_BYTES reads it (512M, 2G) */
    CLI_AGE,     /* int64_t seconds; a duration: 45s, 90m, 12h, 30d (a bare number: seconds) */
} cli_arg;

/* cli_option.flags */
enum {
    CLI_REQUIRED = 1, /* the command cannot run without it */
    CLI_NONEMPTY = 2, /* an empty value ("--socket=") is refused */
};

/* One row of an option table.  A table ends with a row whose name is NULL. */
typedef struct cli_option {
    const char *name; /* long name, without the "--" */
    char letter;      /* short name ('j' for -j), or 0 */
    cli_arg arg;
    const char *meta; /* the value's name in help ("N", "PATH"); NULL without a value */
    size_t offset;    /* where the value goes in the command's options struct */
    double lo, hi;    /* CLI_INT, CLI_SECONDS: the accepted range; CLI_LIST: most values */
    unsigned flags;   /* CLI_REQUIRED, CLI_NONEMPTY */
    const char *help; /* what it does, for --help (wrapped there to fit the terminal) */
} cli_option;

#define CLI_LIST_MAX 64

/* A repeatable option's values, in the order given. */
typedef struct cli_list {
    const char *v[CLI_LIST_MAX];
    int n;
} cli_list;

/* The global options: they may stand before or after the command name. */
typedef struct cli_globals {
    const char *cache;      /* --cache: the writable cache file */
    cli_list ro_cache;      /* --ro-cache, in the order given */
    const char *kernel_dir; /* --kernel-dir */
    int quiet;              /* --quiet: errors only */
    int verbose;            /* -v: INFO, -vv: DEBUG log messages */
} cli_globals;

typedef struct cli_command cli_command;

/* Everything the command line decided, plus the runtime once opened.  One
 * instance lives in main(); handlers receive a pointer to it. */
typedef struct cli {
    cli_globals g;
    kdart_options opts;     /* handed to kdart_open */
    const cli_command *cmd; /* the command running, for messages: "kdart ls: ..." */
    kdart_rt *rt;           /* opened by cli_open, closed in main */
    int no_create;          /* the command's no_create: cli_open adds KDART_OPEN_NO_CREATE */
} cli;

/* A command's handler: opts is its options struct as the parser filled it,
 * args its operands (the arguments that are not options), in order. */
typedef int (*cli_handler)(cli *c, const void *opts, int nargs, char **args);

struct cli_command {
    const char *name;
    const char *summary; /* one line for `kdart --help` */
    cli_handler run;
    const cli_option *options; /* NULL: none but --help */
    size_t opts_size;          /* size of the struct the table's offsets point into */
    const void *defaults;      /* its starting values; NULL: all zero */
    const char *operands;      /* the operands as the synopsis shows them ("KEY..."), or NULL */
    int min_args, max_args;    /* how many operands; max_args -1: any number */
    const char *missing;       /* the message when fewer than min_args are given */
    const char *synopsis;      /* usage lines, where the generated one would mislead; else NULL */
    const char *about;         /* help: what the command does, before the options */
    const char *exits;         /* help: its exit statuses, after the options */
    int no_create;             /* 1: never creates a missing cache (it reads, or removes from, one) */
};

/* A cli_command's option table, the options struct it fills and the
 * struct's starting values (NULL: all zero). */
#define CLI_OPTIONS(table, type, start) .options = (table), .opts_size = sizeof(type), .defaults = (start)

/* Defines cli_cmd_NAME, whose handler is run_NAME; the rest of the
 * cli_command's fields follow as designated initializers. */
#define CLI_COMMAND(NAME, SUMMARY, ...) \
    const cli_command cli_cmd_##NAME = {.name = #NAME, .summary = SUMMARY, .run = run_##NAME, __VA_ARGS__}

/* The commands, defined beside their handlers (CLI_COMMAND). */
extern const cli_command cli_cmd_prewarm, cli_cmd_kernels;
extern const cli_command cli_cmd_ls, cli_cmd_show, cli_cmd_sass, cli_cmd_export, cli_cmd_verify, cli_cmd_gc,
    cli_cmd_rm, cli_cmd_clear, cli_cmd_stats, cli_cmd_why;
extern const cli_command cli_cmd_serve;
extern const cli_command cli_cmd_selftest, cli_cmd_bench;

/* ------------------------------------------------------- main.c */

/* "kdart CMD: message" (or "kdart: message" before a command is known) on stderr. */
void cli_error(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cli_error plus a pointer to the help text; returns EXIT_USAGE. */
int cli_usage(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Which exit code a library status deserves. */
int cli_exit_for_status(int status);
/* "ENAME: detail", or "message (ENAME)" when the runtime left no detail. */
void cli_describe_failure(char *buf, size_t n, int status, const char *detail);
/* Reports a failed library call as "kdart CMD: what: ENAME: detail"; returns its exit code. */
int cli_fail(cli *c, int status, const char *what);
/* Opens c->rt with the command line's options; need_cuda 0 never loads libcuda. */
int cli_open(cli *c, int need_cuda);
/* Writes s as a JSON string literal (escaped; invalid UTF-8 as U+FFFD); NULL as null. */
void cli_json_string(FILE *f, const char *s);
/* "512B", "12.3K", "4.0M": binary units, into buf. */
const char *cli_format_size(int64_t bytes, char *buf, size_t n);
/* Calls fn on each non-empty line of text; writes "name=value" lines as a JSON array of strings. */
void cli_each_line(const char *text, void (*fn)(void *user, const char *line, size_t n), void *user);
void cli_json_lines(FILE *f, const char *text);
/* 1 when the writable cache the command was pointed at does not exist (a command that never creates
 * one then has nothing to do), with a note saying what. */
int cli_cache_absent(cli *c, const char *what);
/* EXIT_OK for a registered kernel; else says so, lists them, EXIT_NOTFOUND. */
int cli_check_kernel(const cli *c, const char *name);
/* EXIT_OK for a target the runtime accepts; else its reason, EXIT_USAGE. */
int cli_check_arch(const cli *c, const char *arch);

/* ---------------------------------------------------- options.c */

/* Reads argv[1..argc) against cmd's table into opts (already holding the
 * defaults) and its operands into args (room for argc).  Returns EXIT_OK,
 * CLI_HELP, or EXIT_USAGE after saying what was wrong. */
int cli_parse(cli *c, const cli_command *cmd, int argc, char **argv, void *opts, char **args, int *nargs);
/* Takes the options of `table` from anywhere in argv[1..argc) (up to a
 * "--", which is dropped) into opts, leaving every other argument, in
 * order, in rest (room for argc); CLI_ACTION rows are left there too.
 * Returns how many it left, or -1 after a usage error. */
int cli_take_options(cli *c, const cli_option *table, int argc, char **argv, void *opts, char **rest);
/* The row that token ("--name" or "-x") names exactly, or NULL. */
const cli_option *cli_lookup(const cli_option *table, const char *token);
/* The table as "  -x, --name META   help" lines. */
void cli_print_options(FILE *f, const cli_option *table);
/* `kdart CMD --help`: usage, about, options, exit statuses. */
void cli_print_help(FILE *f, const cli_command *cmd);

/* -------------------------------------------------- serve_cmd.c */

/* Sends one raw request to the compile service at path.  EXIT_OK with
 * *reply (free it) when it answered OK; else says why on stderr and
 * returns the exit code (4: nobody listens, 1: full or failed). */
int cli_service_ask(cli *c, const char *path, const char *request, int timeout_ms, char **reply);

#endif

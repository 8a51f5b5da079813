/*
 * options.c: the command line read against option tables, and the help
 * text written from the same tables.
 *
 * Every command declares its options once, as rows of a cli_option table
 * (long name, short letter, kind of value, help sentence, and where the
 * value goes in the command's options struct).  This file is the one
 * parser that reads argv against such a table and the one writer of the
 * help that lists them, so what `--help` promises is what the parser
 * accepts.  The model is curl's tool_getparam.c (a table of long name,
 * letter and argument kind read by one parser) and tool_help.c.
 *
 * Accepted: "--name VALUE", "--name=VALUE", "-x VALUE", "-xVALUE" (also
 * "-x=VALUE"), bundled short flags ("-vv", "-qv"), operands between the
 * options, and "--", after which everything is an operand.
 *
 * At its end, the small output helpers every group of commands shares
 * (JSON strings and line lists, sizes, the missing-cache note, the error
 * and usage lines), so that a command's file holds only its command.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define HELP_WIDTH 79 /* columns the help text is wrapped to */
#define LABEL_MAX 26  /* a longer "-x, --name META" puts its help on the next line */

/* Every command takes -h/--help; the parser answers it, so the tables do
 * not repeat it, but the help lists it like any other row. */
static const cli_option help_row[] = {
    {"help", 'h', CLI_ACTION, NULL, 0, 0, 0, 0, "print this text and exit"},
    {NULL},
};

static int takes_value(const cli_option *o) { return o->arg >= CLI_STRING; }

static const cli_option *find_long(const cli_option *t, const char *name, size_t len) {
    for (; t && t->name; t++)
        if (strlen(t->name) == len && strncmp(t->name, name, len) == 0) return t;
    return NULL;
}

static const cli_option *find_letter(const cli_option *t, char letter) {
    for (; t && t->name; t++)
        if (t->letter && t->letter == letter) return t;
    return NULL;
}

const cli_option *cli_lookup(const cli_option *table, const char *token) {
    if (token[0] != '-') return NULL;
    if (token[1] == '-') return token[2] ? find_long(table, token + 2, strlen(token + 2)) : NULL;
    return token[1] && !token[2] ? find_letter(table, token[1]) : NULL;
}

static int is_help(const char *token) { return strcmp(token, "--help") == 0 || strcmp(token, "-h") == 0; }

/* One pass over argv against one table. */
typedef struct reader {
    cli *c;
    const cli_option *table;
    void *opts;     /* the struct the table's offsets point into */
    uint64_t given; /* bit k: row k was given (for CLI_REQUIRED; rows past 64 are never required) */
    int argc;
    char **argv;
} reader;

/* Checks value against o's kind and stores it.  `as` is the option as the
 * user spelled it ("-j" or "--jobs"), so that messages quote it. */
static int store(reader *r, const cli_option *o, const char *as, const char *value) {
    const cli *c = r->c;
    char *at = (char *)r->opts + o->offset;
    char *end;
    if (o - r->table < 64) r->given |= (uint64_t)1 << (o - r->table); /* tables are far shorter */
    if (takes_value(o) && (o->flags & CLI_NONEMPTY) && !value[0]) return cli_usage(c, "option %s needs a value", as);
    switch (o->arg) {
    case CLI_FLAG: *(int *)at = 1; break;
    case CLI_COUNT: ++*(int *)at; break;
    case CLI_ACTION: break;
    case CLI_STRING: *(const char **)at = value; break;
    case CLI_LIST: {
        cli_list *l = (cli_list *)at;
        if (l->n >= (int)o->hi || l->n >= CLI_LIST_MAX) return cli_usage(c, "at most %d %s options", (int)o->hi, as);
        l->v[l->n++] = value;
        break;
    }
    case CLI_INT: {
        errno = 0;
        long v = strtol(value, &end, 10);
        if (errno || end == value || *end || v < o->lo || v > o->hi)
            return cli_usage(c, "%s wants %.0f..%.0f, not '%s'", as, o->lo, o->hi, value);
        *(int *)at = (int)v;
        break;
    }
    case CLI_SECONDS: {
        double v = strtod(value, &end);
        if (end == value || *end || !(v >= o->lo && v <= o->hi))
            return cli_usage(c, "%s wants seconds (%g to %g), not '%s'", as, o->lo, o->hi, value);
        *(double *)at = v;
        break;
    }
    case CLI_BYTES:
        if (kdart_parse_bytes(value, (int64_t *)at) != KDART_OK)
            return cli_usage(c, "%s wants a size like 512M or 2G, not '%s'", as, value);
        break;
    case CLI_AGE: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        long long unit = !*end ? 1 : !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600
                       : !strcmp(end, "d") ? 86400 : 0;
        if (errno || end == value || value[0] == '-' || !unit || v > INT64_MAX / unit)
            return cli_usage(c, "%s wants a duration like 45s, 90m, 12h or 30d, not '%s'", as, value);
        *(int64_t *)at = (int64_t)(v * unit);
        break;
    }
    }
    return EXIT_OK;
}

/* Stores the value of option o at argv[*i]: `inline_value` when the token
 * carried one, else the next argument (consumed). */
static int store_value(reader *r, const cli_option *o, const char *as, const char *inline_value, int *i) {
    if (inline_value) return store(r, o, as, inline_value);
    if (*i + 1 >= r->argc) return cli_usage(r->c, "option %s needs a value", as);
    return store(r, o, as, r->argv[++*i]);
}

/* "--name" or "--name=VALUE" at argv[*i]; o is its row. */
static int take_long(reader *r, const cli_option *o, int *i) {
    const char *eq = strchr(r->argv[*i], '=');
    char as[64];
    snprintf(as, sizeof as, "--%s", o->name);
    if (takes_value(o)) return store_value(r, o, as, eq ? eq + 1 : NULL, i);
    return eq ? cli_usage(r->c, "option %s takes no value", as) : store(r, o, as, NULL);
}

/* 1 when the table knows every letter of the bundle "-xyz" (looking no
 * further than a letter that takes the rest of the token as its value). */
static int bundle_known(const cli_option *t, const char *token) {
    for (const char *p = token + 1; *p; p++) {
        const cli_option *o = find_letter(t, *p);
        if (!o || o->arg == CLI_ACTION) return 0;
        if (takes_value(o)) break;
    }
    return 1;
}

/* The bundle "-xyz" at argv[*i], every letter known. */
static int take_letters(reader *r, int *i) {
    for (const char *p = r->argv[*i] + 1; *p; p++) {
        const cli_option *o = find_letter(r->table, *p);
        char as[3] = {'-', *p, '\0'};
        if (takes_value(o)) return store_value(r, o, as, p[1] == '=' ? p + 2 : p[1] ? p + 1 : NULL, i);
        if (store(r, o, as, NULL) != EXIT_OK) return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Reads argv[1..argc) against r's table.  What the table does not know
 * goes to rest[] when `pass` is set (main's first pass, which takes the
 * global options from anywhere and leaves everything else, unknown options
 * included, to the command); otherwise an unknown option is an error and
 * rest[] collects the operands.  Returns EXIT_OK, CLI_HELP or EXIT_USAGE;
 * *n is the count left in rest[]. */
static int read_argv(reader *r, int pass, char **rest, int *n) {
    *n = 0;
    for (int i = 1; i < r->argc; i++) {
        const char *a = r->argv[i];
        if (strcmp(a, "--") == 0) {
            while (++i < r->argc) rest[(*n)++] = r->argv[i];
            break;
        }
        if (!pass && is_help(a)) return CLI_HELP;
        if (a[0] != '-' || a[1] == '\0') {
            rest[(*n)++] = r->argv[i]; /* an operand ("-" included: stdout, a file) */
            continue;
        }
        const cli_option *o = NULL;
        if (a[1] == '-')
            o = find_long(r->table, a + 2, strcspn(a + 2, "="));
        else if (bundle_known(r->table, a))
            o = find_letter(r->table, a[1]);
        if (o && o->arg == CLI_ACTION) o = NULL; /* acted on by the caller, where it stands */
        if (!o && pass) {
            rest[(*n)++] = r->argv[i];
            continue;
        }
        /* A long option is named without its value, a bundle whole. */
        if (!o) return cli_usage(r->c, "unknown option '%.*s'", (int)(a[1] == '-' ? strcspn(a, "=") : strlen(a)), a);
        int rc = a[1] == '-' ? take_long(r, o, &i) : take_letters(r, &i);
        if (rc != EXIT_OK) return rc;
    }
    return EXIT_OK;
}

int cli_take_options(cli *c, const cli_option *table, int argc, char **argv, void *opts, char **rest) {
    reader r = {c, table, opts, 0, argc, argv};
    int n;
    int rc = read_argv(&r, 1, rest, &n);
    rest[n] = NULL;
    return rc == EXIT_OK ? n : -1;
}

/* "--name META" ("--name" for an option without a value). */
static int long_form(char *buf, size_t n, const cli_option *o) {
    return snprintf(buf, n, "--%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
}

/* A required option as messages and the synopsis name it: "-o FILE" where
 * it has a letter, else "--name META". */
static int short_form(char *buf, size_t n, const cli_option *o) {
    if (!o->letter) return long_form(buf, n, o);
    return snprintf(buf, n, "-%c%s%s", o->letter, o->meta ? " " : "", o->meta ? o->meta : "");
}

int cli_parse(cli *c, const cli_command *cmd, int argc, char **argv, void *opts, char **args, int *nargs) {
    reader r = {c, cmd->options, opts, 0, argc, argv};
    int rc = read_argv(&r, 0, args, nargs);
    if (rc != EXIT_OK) return rc;
    if (cmd->max_args >= 0 && *nargs > cmd->max_args)
        return cli_usage(c, "unexpected argument '%s'", args[cmd->max_args]);
    if (*nargs < cmd->min_args) return cli_usage(c, "%s", cmd->missing ? cmd->missing : "missing arguments");
    for (const cli_option *o = cmd->options; o && o->name; o++) {
        if ((o->flags & CLI_REQUIRED) && !(r.given & ((uint64_t)1 << (o - cmd->options)))) {
            char what[96];
            short_form(what, sizeof what, o);
            return cli_usage(c, "missing %s", what);
        }
    }
    return EXIT_OK;
}

/* ---------------------------------------------------------------- help */

/* Writes one word (len bytes of w) at column *col, first breaking the line
 * (and indenting to `indent`) when it would run past HELP_WIDTH. */
static void put_word(FILE *f, int *col, int indent, const char *w, int len) {
    if (*col > indent && *col + 1 + len > HELP_WIDTH) {
        fprintf(f, "\n%*s", indent, "");
        *col = indent;
    } else if (*col > indent) {
        fputc(' ', f);
        (*col)++;
    }
    fprintf(f, "%.*s", len, w);
    *col += len;
}

/* Writes text word by word from column *col, wrapping to `indent`. */
static void put_text(FILE *f, int *col, int indent, const char *text) {
    for (const char *p = text; *p;) {
        p += strspn(p, " ");
        int len = (int)strcspn(p, " ");
        if (len) put_word(f, col, indent, p, len);
        p += len;
    }
}

/* "-x, --name META", or "    --name META" for an option without a letter,
 * so that the long names line up. */
static int label(char *buf, size_t n, const cli_option *o) {
    int k = o->letter ? snprintf(buf, n, "-%c, ", o->letter) : snprintf(buf, n, "    ");
    return k + long_form(buf + k, n - (size_t)k, o);
}

static int label_width(const cli_option *t, int w) {
    char buf[128];
    for (; t && t->name; t++) {
        int len = label(buf, sizeof buf, t);
        if (len > w && len <= LABEL_MAX) w = len;
    }
    return w;
}

static void print_rows(FILE *f, const cli_option *t, int width) {
    for (; t && t->name; t++) {
        char buf[128];
        int len = label(buf, sizeof buf, t);
        fprintf(f, "  %s", buf);
        int col = 2 + len;
        if (len > width) {
            fputc('\n', f);
            col = 0;
        }
        fprintf(f, "%*s", 2 + 2 + width - col, "");
        col = 4 + width;
        put_text(f, &col, col, t->help);
        fputc('\n', f);
    }
}

void cli_print_options(FILE *f, const cli_option *table) { print_rows(f, table, label_width(table, 0)); }

/* "usage: kdart NAME OPERANDS [--opt META]... -x META", wrapped. */
static void print_synopsis(FILE *f, const cli_command *cmd) {
    int col = fprintf(f, "usage: kdart %s", cmd->name);
    if (cmd->operands || (cmd->options && cmd->options->name)) col += fprintf(f, " ");
    int indent = col;
    if (cmd->operands) put_text(f, &col, indent, cmd->operands);
    for (const cli_option *o = cmd->options; o && o->name; o++) {
        char form[96], item[112];
        int len;
        if (o->flags & CLI_REQUIRED) {
            len = short_form(item, sizeof item, o);
        } else {
            long_form(form, sizeof form, o);
            len = snprintf(item, sizeof item, "[%s]%s", form, o->arg == CLI_LIST ? "..." : "");
        }
        put_word(f, &col, indent, item, len);
    }
    fputc('\n', f);
}

void cli_print_help(FILE *f, const cli_command *cmd) {
    if (cmd->synopsis)
        fputs(cmd->synopsis, f);
    else
        print_synopsis(f, cmd);
    if (cmd->about) fprintf(f, "\n%s", cmd->about);
    /* One column for the command's rows and the help row. */
    int width = label_width(help_row, label_width(cmd->options, 0));
    fputs("\nOptions:\n", f);
    print_rows(f, cmd->options, width);
    print_rows(f, help_row, width);
    fputs("  (and the global options: see 'kdart --help')\n", f);
    if (cmd->exits) fprintf(f, "\n%s", cmd->exits);
}

/* Writes s as a JSON string literal: quotes, backslashes and control
 * characters escaped; bytes that are not valid UTF-8 (a compiler log can
 * contain anything) become U+FFFD so that the output always parses. */
void cli_json_string(FILE *f, const char *s) {
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

/* "512B", "12.3K", "4.0M": binary units, short enough for a table column. */
const char *cli_format_size(int64_t bytes, char *buf, size_t n) {
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

/* Calls fn on each non-empty line of text (not NUL-terminated: n bytes). */
void cli_each_line(const char *text, void (*fn)(void *user, const char *line, size_t n), void *user) {
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 0) fn(user, p, n);
        p += n + (nl ? 1 : 0);
    }
}

typedef struct json_lines_state {
    FILE *f;
    int first;
} json_lines_state;

static void json_line(void *user, const char *line, size_t n) {
    json_lines_state *s = user;
    char *copy = strndup(line, n);
    if (!s->first) fputs(", ", s->f);
    cli_json_string(s->f, copy ? copy : "");
    free(copy);
    s->first = 0;
}

/* Writes "name=value" lines as a JSON array of strings (lossless: the
 * manifest and report may repeat a name). */
void cli_json_lines(FILE *f, const char *text) {
    json_lines_state s = {f, 1};
    fputc('[', f);
    cli_each_line(text, json_line, &s);
    fputc(']', f);
}

/* 1 when the writable cache this command was pointed at does not exist (a
 * command that never creates one then has nothing to do), with a note. */
int cli_cache_absent(cli *c, const char *what) {
    kdart_rt_info info;
    if (kdart_info(c->rt, &info) != KDART_OK || !info.cache_path || !info.cache_path[0] ||
        access(info.cache_path, F_OK) == 0)
        return 0;
    if (!c->g.quiet || strcmp(what, "nothing to do") != 0)
        cli_error(c, "no writable cache at %s: %s", info.cache_path, what);
    return 1;
}

/* ------------------------------------------------------------ messages */

/* Every command's error lines: "kdart CMD: what", and for a usage error a
 * pointer to the help. */
static void verror(const cli *c, const char *suffix, const char *fmt, va_list ap) {
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (c && c->cmd)
        fprintf(stderr, "kdart %s: %s%s\n", c->cmd->name, msg, suffix);
    else
        fprintf(stderr, "kdart: %s%s\n", msg, suffix);
}

void cli_error(const cli *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(c, "", fmt, ap);
    va_end(ap);
}

int cli_usage(const cli *c, const char *fmt, ...) {
    char see[96];
    if (c && c->cmd)
        snprintf(see, sizeof see, " (see 'kdart %s --help')", c->cmd->name);
    else
        snprintf(see, sizeof see, " (see 'kdart --help')");
    va_list ap;
    va_start(ap, fmt);
    verror(c, see, fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

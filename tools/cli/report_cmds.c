/*
 * report_cmds.c: the commands that report rather than change: stats (the
 * cache's totals and every setting with where its value came from) and why
 * (what key a specialization has and how the cache differs from it).
 * Their JSON (stats --json, why --json) is what scripts parse: keys kept
 * stable.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* --------------------------------------------------------------- stats */

/* Where a setting came from, in the CLI's words: the options it fills from
 * its own flags are named as the flags. */
static const char *origin_word(const char *origin) {
    if (strcmp(origin, "kdart_options.cache_path") == 0) return "--cache";
    if (strcmp(origin, "kdart_options.kernel_dir") == 0) return "--kernel-dir";
    return origin;
}

/* Each of the runtime's settings (kdart_setting): name, value, origin. */
static void settings_out(const cli *c, int json) {
    const char *name, *value, *origin;
    for (int i = 0; kdart_setting(c->rt, i, &name, &value, &origin) == KDART_OK; i++) {
        if (json) {
            fputs(i ? ",\n  " : "\n  ", stdout);
            fputs("{\"name\": ", stdout), cli_json_string(stdout, name);
            fputs(", \"value\": ", stdout), cli_json_string(stdout, value);
            fputs(", \"origin\": ", stdout), cli_json_string(stdout, origin_word(origin));
            fputs("}", stdout);
        } else {
            if (i == 0) printf("settings         (value, and where it came from)\n");
            printf("  %-15s %s  (%s)\n", name, value, origin_word(origin));
        }
    }
}

static void stats_json(const cli *c, const kdart_rt_info *info, const kdart_cache_stats *cs) {
    fputs("{\"version\": ", stdout), cli_json_string(stdout, kdart_version());
    fputs(",\n \"cache_path\": ", stdout), cli_json_string(stdout, info->cache_path);
    printf(",\n \"cache_writable\": %s", info->cache_writable ? "true" : "false");
    fputs(",\n \"ro_cache_paths\": [", stdout);
    for (int i = 0; i < c->g.ro_cache.n; i++) {
        if (i) fputs(", ", stdout);
        cli_json_string(stdout, c->g.ro_cache.v[i]);
    }
    fputs("]", stdout);
    fputs(",\n \"kernel_dir\": ", stdout), cli_json_string(stdout, info->kernel_dir);
    fputs(",\n \"default_arch\": ", stdout), cli_json_string(stdout, info->default_arch);
    printf(",\n \"nvrtc_version\": \"%d.%d\"", info->nvrtc_major, info->nvrtc_minor);
    fputs(",\n \"nvrtc_build\": ", stdout), cli_json_string(stdout, info->nvrtc_build);
    printf(",\n \"nvjitlink_version\": \"%d.%d\"", info->nvjitlink_major, info->nvjitlink_minor);
    printf(",\n \"cuda_available\": %s", info->cuda_available ? "true" : "false");
    printf(",\n \"cache_max_bytes\": %" PRId64, info->cache_max_bytes);
    fputs(",\n \"settings\": [", stdout);
    settings_out(c, 1);
    fputs("]", stdout);
    if (cs)
        printf(",\n \"entries\": %" PRId64 ",\n \"failed_entries\": %" PRId64 ",\n \"quarantined\": %" PRId64
               ",\n \"bytes\": %" PRId64 ",\n \"hits\": %" PRId64 ",\n \"misses\": %" PRId64
               ",\n \"compile_ms_total\": %.3f",
               cs->entries, cs->failed_entries, cs->quarantined, cs->bytes, cs->hits, cs->misses, cs->compile_ms_total);
    fputs("}\n", stdout);
}

static void stats_text(const cli *c, const kdart_rt_info *info, const kdart_cache_stats *cs) {
    char sz[32], sz2[32];
    printf("kdart            %s\n", kdart_version());
    if (info->cache_path && info->cache_path[0] && access(info->cache_path, F_OK) != 0)
        printf("cache path       %s (not created yet: the first prewarm or compile creates it)\n", info->cache_path);
    else if (info->cache_path && info->cache_path[0])
        printf("cache path       %s (%s)\n", info->cache_path, info->cache_writable ? "writable" : "read-only");
    else
        printf("cache path       none: compiling in memory\n");
    for (int i = 0; i < c->g.ro_cache.n; i++) printf("read-only cache  %s (tier ro%d)\n", c->g.ro_cache.v[i], i + 1);
    printf("kernel dir       %s\n", info->kernel_dir ? info->kernel_dir : "");
    printf("default arch     %s\n", info->default_arch ? info->default_arch : "");
    printf("NVRTC            %d.%d (%s)\n", info->nvrtc_major, info->nvrtc_minor,
           info->nvrtc_build ? info->nvrtc_build : "?");
    printf("nvJitLink        %d.%d\n", info->nvjitlink_major, info->nvjitlink_minor);
    printf("CUDA             %s\n", info->cuda_available ? "available" : "not available (no driver or no device)");
    settings_out(c, 0);
    if (!cs) return;
    printf("entries          %" PRId64 " (%" PRId64 " failed compiles, %" PRId64 " quarantined)\n", cs->entries,
           cs->failed_entries, cs->quarantined);
    printf("cubin bytes      %" PRId64 " (%s) of %s allowed\n", cs->bytes, cli_format_size(cs->bytes, sz, sizeof sz),
           cs->max_bytes < 0 ? "unlimited"
                             : cli_format_size(cs->max_bytes ? cs->max_bytes : info->cache_max_bytes, sz2, sizeof sz2));
    printf("hits             %" PRId64 "\n", cs->hits);
    if (cs->misses >= 0)
        printf("misses           %" PRId64 " (lookups that found no entry in any cache)\n", cs->misses);
    else
        printf("misses           unknown (the counter could not be read)\n");
    printf("compile time     %.1f s in total\n", cs->compile_ms_total / 1000.0);
}

typedef struct stats_opts {
    int json, zero;
} stats_opts;

static int run_stats(cli *c, const void *opts, int nargs, char **args) {
    const stats_opts *o = opts;
    /* CUDA is loaded here on purpose: "is CUDA available" is a question
     * stats answers. */
    int rc = cli_open(c, 1);
    if (rc != EXIT_OK) return rc;
    kdart_rt_info info;
    int st = kdart_info(c->rt, &info);
    if (st != KDART_OK) return cli_fail(c, st, "cannot read the runtime's settings");
    /* Without a disk cache (":memory:", or one that could not be opened,
     * which the runtime has already warned about) there are no totals to
     * show, and that is not an error of `stats`. */
    kdart_cache_stats cs;
    memset(&cs, 0, sizeof cs);
    int have_cache = info.cache_path && info.cache_path[0] && access(info.cache_path, F_OK) == 0;
    int st2 = have_cache ? kdart_cache_stats_get(c->rt, &cs) : KDART_OK;
    if (st2 != KDART_OK && !o->json) cli_fail(c, st2, "cannot read cache statistics");
    const kdart_cache_stats *shown = have_cache && st2 == KDART_OK ? &cs : NULL;
    if (o->json)
        stats_json(c, &info, shown);
    else
        stats_text(c, &info, shown);
    if (st2 == KDART_OK && o->zero && have_cache) { /* after showing them, as ccache -z */
        int st3 = kdart_cache_zero_stats(c->rt);
        if (st3 != KDART_OK) return cli_fail(c, st3, "cannot zero the statistics");
        if (!c->g.quiet && !o->json) printf("statistics zeroed (hits and misses)\n");
    }
    return st2 == KDART_OK ? EXIT_OK : cli_exit_for_status(st2);
}

static const cli_option stats_options[] = {
    {"json", 0, CLI_FLAG, NULL, offsetof(stats_opts, json), 0, 0, 0, "the same as one JSON object, with raw numbers"},
    {"zero", 0, CLI_FLAG, NULL, offsetof(stats_opts, zero), 0, 0, 0,
     "then zero the cache's hit and miss counts (the entries stay)"},
    {NULL},
};

CLI_COMMAND(stats, "cache statistics and the runtime's settings",
    .no_create = 1,
    CLI_OPTIONS(stats_options, stats_opts, NULL),
    .about = "Prints the cache path and whether it is writable, the read-only caches,\n"
             "the kernel source directory, the default architecture, the NVRTC and\n"
             "nvJitLink versions, whether CUDA is available, and the cache's entry,\n"
             "byte, hit, miss and compile-time totals (hits: entries served from the\n"
             "cache; misses: lookups that found no entry in any cache, whether this\n"
             "process then compiled it, the compile service did, or another process\n"
             "did while this one waited for it), and each setting with where its value\n"
             "came from (a flag, a variable, the cache file, the local GPU, a default).\n",
    .exits = "Exit status: 0 ok, 1 the cache's totals could not be read.\n");

/* ----------------------------------------------------------------- why */

typedef struct why_opts {
    const char *arch;
    int json;
} why_opts;

/* kdart_why's text as one JSON object: request, key, status ("hit" or
 * "miss") with its line, the differences from the nearest entry, and the
 * manifest's lines. */
static void why_json(const char *text) {
    char request[512] = "", key[80] = "", status[512] = "";
    const char *diffs = NULL, *manifest = NULL;
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 9 && strncmp(p, "request: ", 9) == 0) snprintf(request, sizeof request, "%.*s", (int)n - 9, p + 9);
        else if (n > 9 && strncmp(p, "key:     ", 9) == 0) snprintf(key, sizeof key, "%.*s", (int)n - 9, p + 9);
        else if (n > 9 && strncmp(p, "status:  ", 9) == 0) {
            snprintf(status, sizeof status, "%.*s", (int)n - 9, p + 9);
            if (nl) diffs = nl + 1;
        } else if (n == 9 && strncmp(p, "manifest:", 9) == 0) manifest = nl ? nl + 1 : "";
        p += n + (nl ? 1 : 0);
    }
    fputs("{\"request\": ", stdout), cli_json_string(stdout, request);
    fputs(", \"key\": ", stdout), cli_json_string(stdout, key);
    printf(", \"hit\": %s, \"status\": ", strncmp(status, "hit", 3) == 0 ? "true" : "false");
    cli_json_string(stdout, status);
    fputs(",\n \"differences\": [", stdout);
    for (const char *p = diffs; p && strncmp(p, "  ", 2) == 0;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p + 2, n - 2);
        if (p != diffs) fputs(", ", stdout);
        cli_json_string(stdout, line ? line : "");
        free(line);
        p += n + (nl ? 1 : 0);
    }
    fputs("],\n \"manifest\": ", stdout), cli_json_lines(stdout, manifest ? manifest : "");
    fputs("}\n", stdout);
}

static int run_why(cli *c, const void *opts, int nargs, char **args) {
    const why_opts *o = opts;
    const char *kernel = args[0], *spec = nargs > 1 ? args[1] : "";
    if (cli_check_kernel(c, kernel) != EXIT_OK) return EXIT_NOTFOUND;
    if (o->arch && cli_check_arch(c, o->arch) != EXIT_OK) return EXIT_USAGE;
    /* Without --arch the answer is about the device's default target. */
    int rc = cli_open(c, o->arch == NULL);
    if (rc != EXIT_OK) return rc;
    char *text = NULL;
    int st = kdart_why(c->rt, kernel, spec, o->arch, &text);
    if (st != KDART_OK) {
        free(text);
        if (st != KDART_ESPEC) return cli_fail(c, st, "why failed");
        cli_error(c, "'%s' is not a specialization of %s, whose parameters are: %s", spec, kernel,
                  kdart_kernel_params(kernel));
        return EXIT_USAGE;
    }
    if (o->json) {
        why_json(text);
    } else {
        fputs(text ? text : "", stdout);
        if (text && text[0] && text[strlen(text) - 1] != '\n') fputc('\n', stdout);
    }
    free(text);
    return EXIT_OK;
}

static const cli_option why_options[] = {
    {"arch", 0, CLI_STRING, "A", offsetof(why_opts, arch), 0, 0, 0,
     "the target to ask about (default: the runtime's default architecture)"},
    {"json", 0, CLI_FLAG, NULL, offsetof(why_opts, json), 0, 0, 0,
     "the answer as one JSON object: request, key, hit, status, differences, manifest"},
    {NULL},
};

CLI_COMMAND(why, "explain the key of a specialization and how the cache differs",
    .no_create = 1,
    CLI_OPTIONS(why_options, why_opts, NULL),
    .operands = "KERNEL [SPEC]",
    .min_args = 1,
    .max_args = 2,
    .missing = "missing KERNEL",
    .about = "Prints the manifest that (KERNEL, SPEC, A) would be keyed by and how the\n"
             "nearest cached entries differ from it, field by field: the answer to\n"
             "\"why did this compile again?\".  SPEC defaults to the kernel's default\n"
             "specialization.\n",
    .exits = "Exit status: 0 ok, 2 bad spec or arch, 4 unknown kernel.\n");

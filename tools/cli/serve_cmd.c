/*
 * serve_cmd.c: `kdart serve`, which runs the node's compile service on a
 * Unix socket, asks a running one for its counters (--status) or to stop
 * (--stop), and the client helper that prewarm --service shares.
 *
 * The service itself is the library's (kdart_serve): this file only turns
 * the command line into its options and its answers into messages and
 * exit codes.  What a client may be told apart is: nobody listens at the
 * socket (exit 4), the service is full (its EAGAIN reply, exit 1; --stop
 * asks again for a while first), or it answered with another failure.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

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
        cli_error(c, "no compile service at %s (%s; %s)", path,
                  st == KDART_ENOENT ? "no such socket" : "nobody listens", why[0] ? why : kdart_strerror(st));
        return EXIT_NOTFOUND;
    }
    cli_error(c, "%s the compile service at %s failed: %s (%s)", doing, path, why[0] ? why : kdart_strerror(st),
              kdart_errname(st));
    return EXIT_FAIL;
}

int cli_service_ask(cli *c, const char *path, const char *request, int timeout_ms, char **reply) {
    char *r = NULL;
    *reply = NULL;
    int st = kdart_service_request(path, request, &r, timeout_ms);
    if (st != KDART_OK) return service_failed(c, path, st, "asking");
    char sbuf[32], nbuf[32], mbuf[1024];
    int status = atoi(reply_field(r, "status", sbuf, sizeof sbuf));
    if (status == KDART_OK) {
        *reply = r;
        return EXIT_OK;
    }
    if (status == KDART_EAGAIN)
        cli_error(c, "the service is full (%s clients) on %s; try again later",
                  reply_field(r, "clients", nbuf, sizeof nbuf), path);
    else
        cli_error(c, "the service at %s answered %s: %s", path, kdart_errname(status),
                  reply_field(r, "message", mbuf, sizeof mbuf));
    free(r);
    return status == KDART_EAGAIN ? EXIT_FAIL : cli_exit_for_status(status);
}

typedef struct serve_opts {
    const char *socket;
    int jobs, max_clients;
    double idle_s, timeout_s;
    int stop, status;
} serve_opts;

static void serve_ready(void *user, const char *socket_path) {
    const cli *c = user;
    if (!c->g.quiet) cli_error(c, "listening on %s (pid %ld)", socket_path, (long)getpid());
}

/* --status: exit 0 only when the service answered OK (a full one answers EAGAIN). */
static int serve_status(cli *c, const char *path, int timeout_ms) {
    char *reply = NULL;
    int ex = cli_service_ask(c, path, "kdart-proto=1\nop=stats\n", timeout_ms, &reply);
    if (ex == EXIT_OK) fputs(reply, stdout);
    free(reply);
    return ex;
}

static double clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* How often --stop asks a full service, at most (within --timeout), and
 * the pause between two asks: doubling up to the last, so that a slot
 * freed at once is caught at once and a busy service is not hammered
 * (about 9 s of pauses in all). */
#define STOP_TRIES 40
#define STOP_PAUSE_FIRST_MS 5
#define STOP_PAUSE_MAX_MS 250

/* --stop.  A full service refuses the stop request with EAGAIN, which
 * kdart_serve_stop_request also returns when nobody listens; whether a
 * reply came at all tells them apart: a ping is answered (OK, or itself
 * "full") only where a service runs.  A full service is asked again, with
 * a growing pause, until it takes the stop, STOP_TRIES asks are spent or
 * the timeout passes (then exit 1: it has not stopped); nobody listening
 * is exit 4 at once. */
static int serve_stop(cli *c, const char *path, int timeout_ms) {
    double t0 = clock_ms(), deadline = t0 + timeout_ms;
    int pause_ms = STOP_PAUSE_FIRST_MS, tries = 0;
    char clients[32] = "?";
    for (;;) {
        double left = deadline - clock_ms();
        int st = kdart_serve_stop_request(path, left < 1 ? 1 : (int)left);
        tries++;
        if (st == KDART_OK) {
            if (!c->g.quiet)
                cli_error(c, "the service on %s has stopped%s", path, tries > 1 ? " (it was full at first)" : "");
            return EXIT_OK;
        }
        if (st != KDART_EAGAIN) return service_failed(c, path, st, "stopping");
        char *pong = NULL;
        left = deadline - clock_ms();
        int pt = kdart_service_request(path, "kdart-proto=1\nop=ping\n", &pong, left < 1 ? 1 : (int)left);
        if (pt != KDART_OK) return service_failed(c, path, pt, "stopping"); /* nobody listens: exit 4 */
        if (reply_field(pong, "clients", clients, sizeof clients)[0] == '\0') snprintf(clients, sizeof clients, "?");
        free(pong);
        if (tries >= STOP_TRIES || clock_ms() + pause_ms >= deadline) break;
        struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        pause_ms = pause_ms * 2 > STOP_PAUSE_MAX_MS ? STOP_PAUSE_MAX_MS : pause_ms * 2;
    }
    cli_error(c, "the service on %s is full (%s clients) and refused the stop request %d times in %.1f s; it has not "
                 "stopped (try again later, or send it SIGTERM)",
              path, clients, tries, (clock_ms() - t0) / 1000);
    return EXIT_FAIL;
}

static int run_serve(cli *c, const void *opts, int nargs, char **args) {
    const serve_opts *o = opts;
    if (o->stop && o->status) return cli_usage(c, "--stop and --status exclude each other");
    if (o->stop || o->status) {
        int timeout_ms = (int)((o->timeout_s > 0 ? o->timeout_s : o->stop ? 600 : 10) * 1000);
        return o->status ? serve_status(c, o->socket, timeout_ms) : serve_stop(c, o->socket, timeout_ms);
    }
    /* The service resolves its default arch from the local GPU, as prewarm does. */
    int rc = cli_open(c, 1);
    if (rc != EXIT_OK) return rc;
    kdart_serve_options so;
    kdart_serve_options_init(&so);
    so.jobs = o->jobs;
    so.max_clients = o->max_clients;
    so.idle_timeout_ms = (int)(o->idle_s * 1000 + 0.5);
    so.ready = serve_ready;
    so.ready_user = c;
    int st = kdart_serve(c->rt, o->socket, &so);
    if (st != KDART_OK) return cli_fail(c, st, "cannot serve");
    if (!c->g.quiet) cli_error(c, "stopped; %s removed", o->socket);
    return EXIT_OK;
}

#define S(field) offsetof(serve_opts, field)
static const cli_option serve_options[] = {
    {"socket", 0, CLI_STRING, "PATH", S(socket), 0, 0, CLI_REQUIRED | CLI_NONEMPTY,
     "the Unix domain socket (at most 107 bytes)"},
    {"jobs", 'j', CLI_INT, "N", S(jobs), 1, 1024, 0, "compile worker threads (default: the number of CPUs)"},
    {"max-clients", 0, CLI_INT, "N", S(max_clients), 1, 1 << 20, 0,
     "connections at once (default 1024); more are refused with EAGAIN ('the service is full')"},
    {"idle-timeout", 0, CLI_SECONDS, "S", S(idle_s), 0.001, 86400, 0,
     "close a connection that sends no complete request for S seconds after it connected or was last answered "
     "(default 10; one waiting for its compiles is not idle)"},
    {"stop", 0, CLI_FLAG, NULL, S(stop), 0, 0, 0, "ask the service on PATH to stop, and wait until it has"},
    {"timeout", 0, CLI_SECONDS, "S", S(timeout_s), 0.001, 1e6, 0,
     "how many seconds --stop (default 600) or --status (default 10) waits"},
    {"status", 0, CLI_FLAG, NULL, S(status), 0, 0, 0, "print the service's counters (key=value lines)"},
    {NULL},
};

CLI_COMMAND(serve, "run the node's compile service on a Unix socket",
    CLI_OPTIONS(serve_options, serve_opts, NULL),
    /* Three modes, which one generated line would run together. */
    .synopsis = "usage: kdart serve --socket PATH [--jobs N] [--max-clients N] [--idle-timeout S]\n"
                "       kdart serve --stop --socket PATH [--timeout S]\n"
                "       kdart serve --status --socket PATH [--timeout S]\n",
    .about = "Runs the compile service: clients on this node (the library, when its\n"
             "environment has KDART_SERVICE=PATH, and 'kdart prewarm --service PATH')\n"
             "send it prepare requests; it compiles each key once, with N worker threads,\n"
             "into the cache given by --cache / KDART_CACHE_DIR, which its clients read.\n"
             "The socket is created with mode 0600 and never listens on a network.  A\n"
             "stale socket file at PATH is replaced; a live service there is an error.\n"
             "SIGTERM, SIGINT or 'kdart serve --stop' stop it cleanly: queued requests\n"
             "are canceled, compiles in flight finish, the socket file is removed.\n"
             "Protocol: docs/protocol.md.\n",
    .exits = "Exit status: 0 stopped cleanly (or --stop/--status answered OK), 1 failure\n"
             "(another service already listens on PATH, the socket cannot be created,\n"
             "--status: the service is full or did not answer OK, --stop: the service\n"
             "stayed full through 40 asks in about 9 s, or --timeout, and has not\n"
             "stopped), 2 usage (also: PATH exists and is not a socket, or is too\n"
             "long), 4 no service at PATH (--stop, --status).\n");

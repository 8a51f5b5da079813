/*
 * storm.c: a connection storm against a running `kdart serve` (built and
 * run by storm.sh next to it; standalone, it speaks the wire protocol of
 * docs/protocol.md itself so that it needs nothing of kdart's).
 *
 * LOOPS threads connect and close at once, as fast as they can, for
 * SECONDS; meanwhile one pinger asks for a ping every PING_MS (retrying a
 * "full" answer for up to a second, as a client would) and a sampler
 * prints, once a second, the connect rate and the service's VmHWM/VmRSS
 * (from /proc/PID/status).  At the end: the totals, whether the service
 * serves a request once the storm is over, and VmHWM idle vs peak.
 *
 * usage: storm --socket PATH --pid PID [--loops 8] [--seconds 60] [--ping-ms 500]
 *        storm --socket PATH --wait-ready     (returns once a ping is answered OK)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_un sa;
static atomic_int stop_flag;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleep_ms(int ms) { (void)poll(NULL, 0, ms); }

/* "VmHWM" or "VmRSS" of pid, KiB; -1 when unreadable. */
static long vm_kb(long pid, const char *what) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    size_t n = strlen(what);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, what, n) == 0 && line[n] == ':') kb = atol(line + n + 1);
    fclose(f);
    return kb;
}

/* One ping on a fresh connection: 0 status OK, 1 "full" (EAGAIN reply),
 * 2 refused or no answer within timeout_ms. */
static int ping_once(int timeout_ms) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 2;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return 2;
    }
    static const char req[] = "\0\0\0\x16kdart-proto=1\nop=ping\n";
    (void)!send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
    char buf[1024];
    size_t got = 0;
    double t0 = now_ms();
    while (got < sizeof buf - 1) {
        int left = timeout_ms - (int)(now_ms() - t0);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
        if (got >= 4) {
            size_t n = (size_t)(unsigned char)buf[2] << 8 | (unsigned char)buf[3];
            if (got >= 4 + n) break;
        }
    }
    close(fd);
    buf[got] = 0;
    const char *s = got > 4 ? strstr(buf + 4, "\nstatus=") : NULL;
    if (!s) return 2;
    return atoi(s + 8) == 0 ? 0 : 1;
}

/* A ping as a patient client makes it: "full" retried every 5 ms for up
 * to budget_ms.  Returns 0 (answered OK), 1 (still full), 2 (no answer). */
static int ping_patient(int budget_ms, int *attempts) {
    double t0 = now_ms();
    int r;
    *attempts = 0;
    do {
        ++*attempts;
        r = ping_once(budget_ms);
        if (r != 1) break;
        sleep_ms(5);
    } while (now_ms() - t0 < budget_ms);
    return r;
}

typedef struct {
    _Atomic long connects, failed;
} loop_stat;

static void *loop_main(void *p) {
    loop_stat *s = p;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            atomic_fetch_add_explicit(&s->failed, 1, memory_order_relaxed);
            continue;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            atomic_fetch_add_explicit(&s->connects, 1, memory_order_relaxed);
        else
            atomic_fetch_add_explicit(&s->failed, 1, memory_order_relaxed);
        close(fd);
    }
    return NULL;
}

typedef struct {
    int every_ms;
    long sent, ok, full, lost, ok_first;
    double worst_ms;
} pinger;

static void *ping_main(void *p) {
    pinger *g = p;
    while (!atomic_load(&stop_flag)) {
        double t0 = now_ms();
        int attempts;
        int r = ping_patient(1000, &attempts);
        double ms = now_ms() - t0;
        g->sent++;
        if (r == 0) {
            g->ok++;
            if (attempts == 1) g->ok_first++;
            if (ms > g->worst_ms) g->worst_ms = ms;
        } else if (r == 1) {
            g->full++;
        } else {
            g->lost++;
        }
        int rest = g->every_ms - (int)ms;
        if (rest > 0) sleep_ms(rest);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    long pid = 0;
    int loops = 8, seconds = 60, ping_ms = 500, wait_ready = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--wait-ready") == 0) wait_ready = 1;
        else if (v && strcmp(a, "--socket") == 0) path = v, i++;
        else if (v && strcmp(a, "--pid") == 0) pid = atol(v), i++;
        else if (v && strcmp(a, "--loops") == 0) loops = atoi(v), i++;
        else if (v && strcmp(a, "--seconds") == 0) seconds = atoi(v), i++;
        else if (v && strcmp(a, "--ping-ms") == 0) ping_ms = atoi(v), i++;
        else {
            fprintf(stderr, "usage: storm --socket PATH --pid PID [--loops N] [--seconds S] [--ping-ms MS]\n"
                            "       storm --socket PATH --wait-ready\n");
            return 2;
        }
    }
    if (!path || strlen(path) >= sizeof sa.sun_path || loops < 1 || loops > 256 || seconds < 1 || ping_ms < 1) {
        fprintf(stderr, "storm: bad arguments\n");
        return 2;
    }
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    if (wait_ready) {
        for (double t0 = now_ms(); now_ms() - t0 < 30000; sleep_ms(20))
            if (ping_once(2000) == 0) return 0;
        fprintf(stderr, "storm: no service answered on %s\n", path);
        return 1;
    }
    if (pid <= 0) {
        fprintf(stderr, "storm: --pid of the service is needed\n");
        return 2;
    }

    long idle_hwm = vm_kb(pid, "VmHWM"), idle_rss = vm_kb(pid, "VmRSS");
    printf("storm: %s, service pid %ld, %d loops of connect/close for %d s, a ping every %d ms\n", path, pid, loops,
           seconds, ping_ms);
    printf("storm: idle: VmHWM %ld KiB, VmRSS %ld KiB\n", idle_hwm, idle_rss);
    fflush(stdout);

    loop_stat *st = calloc((size_t)loops, sizeof *st);
    pthread_t *th = calloc((size_t)loops, sizeof *th);
    pinger g = {ping_ms, 0, 0, 0, 0, 0, 0};
    pthread_t pt;
    double t0 = now_ms();
    for (int i = 0; i < loops; i++) pthread_create(&th[i], NULL, loop_main, &st[i]);
    pthread_create(&pt, NULL, ping_main, &g);

    long last = 0, peak_hwm = idle_hwm, peak_rss = idle_rss, best_rate = 0;
    for (int s = 1; s <= seconds; s++) {
        double due = t0 + s * 1000.0;
        while (now_ms() < due) sleep_ms((int)(due - now_ms()) + 1);
        long total = 0, failed = 0;
        for (int i = 0; i < loops; i++) total += atomic_load(&st[i].connects), failed += atomic_load(&st[i].failed);
        long hwm = vm_kb(pid, "VmHWM"), rss = vm_kb(pid, "VmRSS");
        if (hwm > peak_hwm) peak_hwm = hwm;
        if (rss > peak_rss) peak_rss = rss;
        if (total - last > best_rate) best_rate = total - last;
        printf("storm: t=%2ds %7ld connects/s (%ld in all, %ld failed to connect), VmHWM %ld KiB, VmRSS %ld KiB, "
               "pings ok %ld of %ld\n",
               s, total - last, total, failed, hwm, rss, g.ok, g.sent);
        fflush(stdout);
        last = total;
        if (hwm < 0) break; /* the service is gone */
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < loops; i++) pthread_join(th[i], NULL);
    pthread_join(pt, NULL);
    double took = (now_ms() - t0) / 1000.0;
    long total = 0, failed = 0;
    for (int i = 0; i < loops; i++) total += st[i].connects, failed += st[i].failed;

    sleep_ms(200);
    int attempts;
    double a0 = now_ms();
    int after = ping_patient(5000, &attempts);
    double after_ms = now_ms() - a0;
    long end_hwm = vm_kb(pid, "VmHWM"), end_rss = vm_kb(pid, "VmRSS");
    if (end_hwm > peak_hwm) peak_hwm = end_hwm;
    printf("storm: %ld connects in %.1f s = %.0f connects/s on average (best second %ld), %ld failed to connect\n",
           total, took, total / took, best_rate, failed);
    printf("storm: pings during the storm: %ld sent, %ld answered OK (%ld at the first try, slowest %.0f ms), "
           "%ld still full after 1 s of retries, %ld unanswered\n",
           g.sent, g.ok, g.ok_first, g.worst_ms, g.full, g.lost);
    printf("storm: after the storm: ping %s in %.0f ms (%d attempts)\n",
           after == 0 ? "answered OK" : after == 1 ? "still FULL" : "NOT answered", after_ms, attempts);
    printf("storm: VmHWM idle %ld KiB, peak %ld KiB (%.2fx); VmRSS idle %ld KiB, peak %ld KiB, at the end %ld KiB\n",
           idle_hwm, peak_hwm, idle_hwm > 0 ? (double)peak_hwm / idle_hwm : 0.0, idle_rss, peak_rss, end_rss);
    free(st);
    free(th);
    return after == 0 && g.ok == g.sent && g.sent > 0 ? 0 : 1;
}

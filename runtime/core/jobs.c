/*
 * jobs.c: background compiles (kdart_prepare_async, kdart_job_cancel) and
 * the shutdown of the handle's threads (kdart__threads_stop).
 *
 * DESIGN.  A job is a kdart_prepare call run on one of the handle's
 * compile workers: at most rt->compile_threads pthreads, started one at a
 * time when a job is queued and no worker is idle, taking jobs from one
 * FIFO queue.  Not libuv's uv_queue_work pool: that pool (4 threads by
 * default) also serves the loop's file system and DNS requests, and
 * compiles of up to 30 s each would starve them.
 *
 * Completion is posted to a libuv loop, where the callback runs:
 *   - a caller's loop: each job owns a uv_async_t, initialized by
 *     kdart_prepare_async on the loop's thread (the only place libuv
 *     allows it); the worker calls uv_async_send (thread-safe), the loop
 *     runs the callback, then closes the handle, and the close callback
 *     frees the job.  The job needs nothing of the handle by then, so a
 *     callback may run after kdart_close returned.
 *   - kdart's own loop (loop == NULL): one loop and one uv_async_t, both
 *     created before its thread starts; workers append finished jobs to a
 *     list under the queue lock and wake the loop, which drains the list.
 *
 * States: QUEUED -> RUNNING (a worker took it) -> DONE, or QUEUED -> DONE
 * (cancelled).  Both transitions out of QUEUED happen under jobs->lock, so
 * a job is delivered exactly once.  The DONE store is a release and the
 * loop reads it with acquire, which is what makes status, info and message
 * (written by the worker) visible to the callback.
 *
 * Shutdown (kdart_close -> kdart__threads_stop): mark stopping (a prepare
 * polling another process's lease gives up with ECANCELED), take the queue
 * and deliver every queued job as KDART_ECANCELED, join the workers (each
 * finishes its running job and delivers it), stop kdart's own loop once
 * its list is drained, then stop the lease heartbeat.
 *
 * Locks: jobs->lock guards the queue, the worker counts and the own loop's
 * list; it is never held together with rt->lock (a worker releases it
 * before calling kdart__prepare).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "rt.h"

enum { JOB_QUEUED = 0, JOB_RUNNING = 1, JOB_DONE = 2 };

struct kdart_job {
    kdart_job *next;          /* in the queue, then in the own loop's list */
    kdart__jobs *jobs;        /* for cancel, while the job is queued */
    int kernel;
    int vals[KDART__MAX_PARAMS];
    char arch[16];            /* "" for the handle's default */
    uint32_t flags;
    kdart_prepare_cb cb;
    void *user;
    int own;                  /* posted to kdart's own loop */
    uv_async_t async;         /* a caller's loop: this job's wake-up */
    _Atomic int state;        /* JOB_* */
    int status;
    kdart_prepared info;
    char *msg;                /* failure message, kdart_job_error */
};

struct kdart__jobs {
    pthread_mutex_t lock;
    pthread_cond_t work;      /* workers wait here for jobs */
    kdart_job *head, *tail;   /* the FIFO queue */
    int queued;
    int nthreads, idle, max_threads;
    pthread_t *threads;
    int closing;
    kdart_rt *rt;
    /* kdart's own loop, for callers without one */
    int own_started;
    int own_stop;
    uv_loop_t loop;
    uv_async_t wake;
    pthread_t loop_thread;
    kdart_job *done_head, *done_tail;
};

/* ------------------------------------------------------------ delivery */

static void job_free(kdart_job *j) {
    kdart__free(j->msg);
    kdart__free(j);
}

static void job_closed(uv_handle_t *h) { job_free(h->data); }

/* A caller's loop: the job's own async handle fired. */
static void job_async_cb(uv_async_t *h) {
    kdart_job *j = h->data;
    if (atomic_load_explicit(&j->state, memory_order_acquire) != JOB_DONE) return;
    j->cb(j->user, j->status, &j->info);
    uv_close((uv_handle_t *)&j->async, job_closed);
}

/* Posts a job whose state is DONE to its loop.  The job may be freed by
 * the loop thread as soon as this returns (or, for a caller's loop, as
 * soon as uv_async_send has set its flag), so nothing reads it after. */
static void deliver(kdart__jobs *js, kdart_job *j, int own) {
    if (!own) {
        uv_async_send(&j->async);
        return;
    }
    pthread_mutex_lock(&js->lock);
    j->next = NULL;
    if (js->done_tail) js->done_tail->next = j;
    else js->done_head = j;
    js->done_tail = j;
    pthread_mutex_unlock(&js->lock);
    uv_async_send(&js->wake);
}

/* kdart's own loop: runs the callbacks of finished jobs, and stops when
 * asked to and nothing is left. */
static void own_wake_cb(uv_async_t *h) {
    kdart__jobs *js = h->data;
    int stop = 0;
    for (;;) {
        pthread_mutex_lock(&js->lock);
        kdart_job *j = js->done_head;
        if (j) {
            js->done_head = j->next;
            if (!js->done_head) js->done_tail = NULL;
        } else {
            stop = js->own_stop;
        }
        pthread_mutex_unlock(&js->lock);
        if (!j) break;
        if (atomic_load_explicit(&j->state, memory_order_acquire) == JOB_DONE) j->cb(j->user, j->status, &j->info);
        job_free(j);
    }
    if (stop) uv_close((uv_handle_t *)&js->wake, NULL);
}

static void *own_loop_main(void *arg) {
    kdart__jobs *js = arg;
    uv_run(&js->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* Starts kdart's own loop and its thread.  Under js->lock. */
static int own_loop_start(kdart_rt *rt, kdart__jobs *js) {
    if (js->own_started) return KDART_OK;
    int e = uv_loop_init(&js->loop);
    if (e) return kdart__err(rt, KDART_ENOMEM, "starting kdart's uv loop: %s", uv_strerror(e));
    if ((e = uv_async_init(&js->loop, &js->wake, own_wake_cb)) != 0) {
        uv_loop_close(&js->loop);
        return kdart__err(rt, KDART_ENOMEM, "starting kdart's uv loop: %s", uv_strerror(e));
    }
    js->wake.data = js;
    if (pthread_create(&js->loop_thread, NULL, own_loop_main, js) != 0) {
        uv_close((uv_handle_t *)&js->wake, NULL);
        uv_run(&js->loop, UV_RUN_DEFAULT);
        uv_loop_close(&js->loop);
        return kdart__err(rt, KDART_ENOMEM, "starting kdart's uv loop thread");
    }
    js->own_started = 1;
    return KDART_OK;
}

/* ------------------------------------------------------------- workers */

static void run_job(kdart_rt *rt, kdart__jobs *js, kdart_job *j) {
    int own = j->own;
    int rc = kdart__prepare(rt, j->kernel, j->vals, j->arch[0] ? j->arch : NULL, j->flags, &j->info, NULL);
    j->status = rc;
    if (rc != KDART_OK) j->msg = kdart__strdup(kdart_last_error(rt));
    atomic_store_explicit(&j->state, JOB_DONE, memory_order_release);
    deliver(js, j, own);
}

static void *worker_main(void *arg) {
    kdart__jobs *js = arg;
    pthread_mutex_lock(&js->lock);
    for (;;) {
        while (!js->head && !js->closing) {
            js->idle++;
            pthread_cond_wait(&js->work, &js->lock);
            js->idle--;
        }
        if (js->closing) break; /* what is still queued, close cancels */
        kdart_job *j = js->head;
        js->head = j->next;
        if (!js->head) js->tail = NULL;
        js->queued--;
        atomic_store_explicit(&j->state, JOB_RUNNING, memory_order_relaxed);
        pthread_mutex_unlock(&js->lock);
        run_job(js->rt, js, j);
        pthread_mutex_lock(&js->lock);
    }
    pthread_mutex_unlock(&js->lock);
    return NULL;
}

/* The handle's job state, created on first use.  Takes rt->lock. */
static int jobs_get(kdart_rt *rt, kdart__jobs **out) {
    int rc = KDART_OK;
    pthread_mutex_lock(&rt->lock);
    if (!rt->jobs) {
        kdart__jobs *js = kdart__calloc(1, sizeof *js);
        int max = rt->compile_threads > 0 ? rt->compile_threads : 1;
        if (js) js->threads = kdart__calloc((size_t)max, sizeof *js->threads);
        if (!js || !js->threads) {
            if (js) kdart__free(js);
            rc = kdart__err(rt, KDART_ENOMEM, "creating the compile queue");
        } else if (pthread_mutex_init(&js->lock, NULL) != 0) {
            kdart__free(js->threads);
            kdart__free(js);
            rc = kdart__err(rt, KDART_ENOMEM, "creating the compile queue");
        } else if (pthread_cond_init(&js->work, NULL) != 0) {
            pthread_mutex_destroy(&js->lock);
            kdart__free(js->threads);
            kdart__free(js);
            rc = kdart__err(rt, KDART_ENOMEM, "creating the compile queue");
        } else {
            js->max_threads = max;
            js->rt = rt;
            rt->jobs = js;
        }
    }
    *out = rt->jobs;
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

/* ------------------------------------------------------------------ API */

int kdart_prepare_async(kdart_rt *rt, const char *kernel, const char *spec, const char *arch, uint32_t flags,
                        uv_loop_t *loop, kdart_prepare_cb cb, void *user, kdart_job **job_out) {
    KDART__CHECK_RT(rt);
    if (job_out) *job_out = NULL;
    if (!cb) return kdart__err(rt, KDART_ENULL, "callback is NULL");
    const kdart__kernel *k;
    int vals[KDART__MAX_PARAMS];
    int rc = kdart__kernel_spec(rt, kernel, spec, &k, vals);
    if (rc) return rc;
    char why[512]; /* a supported arch ("sm_100a") fits the job's arch[] */
    if (arch && kdart__arch_supported(arch, why, sizeof why) != KDART_OK) return kdart__err(rt, KDART_EARCH, "%s", why);
    if (atomic_load(&rt->stopping)) return kdart__err(rt, KDART_ECANCELED, "the runtime is closing");
    kdart__jobs *js;
    if ((rc = jobs_get(rt, &js))) return rc;

    kdart_job *j = kdart__calloc(1, sizeof *j);
    if (!j) return kdart__err(rt, KDART_ENOMEM, "queuing a compile");
    j->jobs = js;
    j->kernel = kdart__kernel_index(k);
    memcpy(j->vals, vals, sizeof j->vals);
    if (arch) snprintf(j->arch, sizeof j->arch, "%s", arch);
    j->flags = flags;
    j->cb = cb;
    j->user = user;
    j->own = loop == NULL;
    atomic_init(&j->state, JOB_QUEUED);

    pthread_mutex_lock(&js->lock);
    if (js->closing) {
        pthread_mutex_unlock(&js->lock);
        kdart__free(j);
        return kdart__err(rt, KDART_ECANCELED, "the runtime is closing");
    }
    /* Everything that can fail comes before the job is visible: a job
     * that is queued always gets its callback. */
    if (j->own && (rc = own_loop_start(rt, js)) != KDART_OK) goto fail;
    if (js->queued + 1 > js->idle && js->nthreads < js->max_threads) {
        if (pthread_create(&js->threads[js->nthreads], NULL, worker_main, js) == 0)
            js->nthreads++;
        else if (js->nthreads == 0) {
            rc = kdart__err(rt, KDART_ENOMEM, "cannot start a compile worker thread");
            goto fail;
        }
        /* else: the workers we have will get to it */
    }
    if (!j->own) {
        int e = uv_async_init(loop, &j->async, job_async_cb);
        if (e) {
            rc = kdart__err(rt, KDART_EINVAL, "uv_async_init on the caller's loop: %s", uv_strerror(e));
            goto fail;
        }
        j->async.data = j;
    }
    if (js->tail) js->tail->next = j;
    else js->head = j;
    js->tail = j;
    js->queued++;
    pthread_cond_signal(&js->work);
    pthread_mutex_unlock(&js->lock);
    if (job_out) *job_out = j;
    return KDART_OK;
fail:
    pthread_mutex_unlock(&js->lock);
    kdart__free(j);
    return rc;
}

int kdart_job_cancel(kdart_job *j) {
    if (!j) return KDART_ENULL;
    if (atomic_load_explicit(&j->state, memory_order_acquire) != JOB_QUEUED) return KDART_EAGAIN;
    kdart__jobs *js = j->jobs;
    pthread_mutex_lock(&js->lock);
    if (atomic_load_explicit(&j->state, memory_order_relaxed) != JOB_QUEUED) {
        pthread_mutex_unlock(&js->lock);
        return KDART_EAGAIN;
    }
    kdart_job *prev = NULL;
    for (kdart_job *p = js->head; p; prev = p, p = p->next)
        if (p == j) {
            if (prev) prev->next = j->next;
            else js->head = j->next;
            if (js->tail == j) js->tail = prev;
            js->queued--;
            break;
        }
    int own = j->own;
    j->status = KDART_ECANCELED;
    memset(&j->info, 0, sizeof j->info);
    atomic_store_explicit(&j->state, JOB_DONE, memory_order_release);
    pthread_mutex_unlock(&js->lock);
    deliver(js, j, own);
    return KDART_OK;
}

const char *kdart_job_error(const kdart_job *job) { return job && job->msg ? job->msg : ""; }

/* ------------------------------------------------------------ shutdown */

void kdart__threads_stop(kdart_rt *rt) {
    atomic_store(&rt->stopping, 1);
    kdart__jobs *js = rt->jobs;
    if (js) {
        pthread_mutex_lock(&js->lock);
        js->closing = 1;
        kdart_job *cancelled = js->head;
        js->head = js->tail = NULL;
        js->queued = 0;
        for (kdart_job *j = cancelled; j; j = j->next) {
            j->status = KDART_ECANCELED;
            memset(&j->info, 0, sizeof j->info);
        }
        pthread_cond_broadcast(&js->work);
        pthread_mutex_unlock(&js->lock);
        for (kdart_job *j = cancelled, *next; j; j = next) {
            next = j->next;
            int own = j->own;
            atomic_store_explicit(&j->state, JOB_DONE, memory_order_release);
            deliver(js, j, own);
        }
        for (int i = 0; i < js->nthreads; i++) pthread_join(js->threads[i], NULL);
        if (js->own_started) {
            pthread_mutex_lock(&js->lock);
            js->own_stop = 1;
            pthread_mutex_unlock(&js->lock);
            uv_async_send(&js->wake);
            pthread_join(js->loop_thread, NULL);
            uv_loop_close(&js->loop);
        }
        pthread_cond_destroy(&js->work);
        pthread_mutex_destroy(&js->lock);
        kdart__free(js->threads);
        kdart__free(js);
        rt->jobs = NULL;
    }
    kdart__heartbeat_stop(rt);
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqctl top: a live view of the pools and workqueues with per-second
 * rates, from one Snapshot request per refresh (the pools and the queues'
 * statistics at one instant, with cmwqd's clock).  And stats
 * --format=openmetrics|prometheus, from the same request. */

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmwqctl.h"
#include "cmwqctl-json.h"
#include "cmwqctl-metrics.h"
#include "cmwqctl-print.h"
#include "cmwqctl-util.h"
#include "request.h"
#include "util.h"

#define TOP_DEFAULT_INTERVAL_USEC 1000000u      /* wq_monitor.py's default */
#define TOP_MIN_INTERVAL_USEC 1000u

static int call_snapshot(Context *ctx, Cmwq__Response **ret) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        int r;

        r = ctx_call(ctx, request_empty(&req, CMWQ__REQUEST__BODY_SNAPSHOT), &resp);
        if (r != 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                return daemon_refused(resp);
        if (resp->body_case != CMWQ__RESPONSE__BODY_SNAPSHOT)
                return unexpected_reply();
        *ret = TAKE_PTR(resp);
        return 0;
}

/* Writes the metrics to @path as a reader never sees half of them: into a
 * new file beside it (a name node_exporter's textfile collector skips, as
 * it reads only *.prom), renamed over @path once complete. */
static int metrics_write_file(const Cmwq__SnapshotReply *snap, MetricsFormat format, const char *path) {
        _cleanup_(freep) char *tmp = NULL;
        FILE *f;
        int fd;

        if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0) {
                tmp = NULL;
                return fail_oom();
        }
        fd = mkstemp(tmp);
        if (fd < 0)
                return fail(CTL_EXIT_REFUSED, "cannot create a file beside %s: %s", path, strerror(errno));
        /* As any exporter's output: readable by the collector's user. */
        if (fchmod(fd, 0644) < 0 || !(f = fdopen(fd, "w"))) {
                int e = errno;

                close(fd);
                (void) unlink(tmp);
                return fail(CTL_EXIT_REFUSED, "cannot write %s: %s", tmp, strerror(e));
        }
        metrics_write(snap, format, f);
        if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) < 0) {
                int e = errno ?: EIO;

                fclose(f);
                (void) unlink(tmp);
                return fail(CTL_EXIT_REFUSED, "cannot write %s: %s", tmp, strerror(e));
        }
        if (fclose(f) != 0 || rename(tmp, path) < 0) {
                int e = errno;

                (void) unlink(tmp);
                return fail(CTL_EXIT_REFUSED, "cannot write %s: %s", path, strerror(e));
        }
        return CTL_EXIT_OK;
}

int stats_metrics(Context *ctx, const char *format, const char *output) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        MetricsFormat f;
        int r;

        if (strcmp(format, "openmetrics") == 0)
                f = METRICS_OPENMETRICS;
        else if (strcmp(format, "prometheus") == 0)
                f = METRICS_PROMETHEUS;
        else
                return usage_error("stats: invalid --format value '%s' (table, json, openmetrics or prometheus)",
                                   format);
        r = call_snapshot(ctx, &resp);
        if (r != 0)
                return r;
        if (output)
                return metrics_write_file(resp->snapshot, f, output);
        metrics_write(resp->snapshot, f, stdout);
        return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig) {
        (void) sig;
        top_stop = 1;
}

/* cur - prev per second; a counter that went back (cmwqd restarted) counts
 * from 0. */
static double rate(uint64_t cur, uint64_t prev, double seconds) {
        if (seconds <= 0)
                return 0;
        return (double) (cur >= prev ? cur - prev : cur) / seconds;
}

static int table_add_rate(Table *t, double v) {
        return table_addf(t, "%.1f", v);
}

static const Cmwq__PoolInfo *find_pool(const Cmwq__SnapshotReply *s, const Cmwq__PoolInfo *p) {
        for (size_t i = 0; s && i < s->n_pools; i++)
                if (s->pools[i]->cpu == p->cpu && s->pools[i]->highpri == p->highpri)
                        return s->pools[i];
        return NULL;
}

static const Cmwq__WorkqueueStats *find_queue(const Cmwq__SnapshotReply *s, const Cmwq__WorkqueueStats *q) {
        for (size_t i = 0; s && i < s->n_workqueues; i++)
                if (strcmp(s->workqueues[i]->name, q->name) == 0 &&
                    s->workqueues[i]->owner_uid == q->owner_uid)
                        return s->workqueues[i];
        return NULL;
}

/* On a terminal, a pool with no worker, nothing pending and no event since
 * the last refresh takes no line: a machine with many CPUs shows the ones
 * at work. */
static bool pool_empty(const Cmwq__PoolInfo *p, const Cmwq__PoolInfo *o) {
        return p->workers == 0 && p->pending == 0 && p->callback_threads == 0 && p->started == o->started &&
               p->sleeps == o->sleeps && p->wakes == o->wakes && p->contended == o->contended;
}

static int top_pools(const Cmwq__SnapshotReply *cur, const Cmwq__SnapshotReply *prev, double dt, bool all,
                     FILE *f) {
        static const TableColumn columns[] = {
                { "CPU", false },
                { "PRIO", false },
                { "WORKERS", true },
                { "BUSY", true },
                { "RUNNING", true },
                { "BLOCKED", true },
                { "IDLE", true },
                { "PENDING", true },
                { "CB-THR", true },
                { "started/s", true },
                { "CMW/s", true },
                { "sleeps/s", true },
                { "wakes/s", true },
                { "contended/s", true },
        };
        _cleanup_(table_freep) Table *t = NULL;
        size_t hidden = 0;

        if (table_new(columns, ELEMENTSOF(columns), &t) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < cur->n_pools; i++) {
                const Cmwq__PoolInfo *p = cur->pools[i];
                const Cmwq__PoolInfo *o = find_pool(prev, p);
                static const Cmwq__PoolInfo zero = CMWQ__POOL_INFO__INIT;

                if (!o)
                        o = &zero;
                if (!all && pool_empty(p, o)) {
                        hidden++;
                        continue;
                }
                if ((p->cpu < 0 ? table_add(t, "unbound") : table_addf(t, "%" PRIi32, p->cpu)) < 0 ||
                    table_add(t, p->highpri ? "highpri" : "normal") < 0 ||
                    table_addf(t, "%" PRIu32, p->workers) < 0 ||
                    table_addf(t, "%" PRIu32, p->busy) < 0 ||
                    table_addf(t, "%" PRIu32, p->running) < 0 ||
                    table_addf(t, "%" PRIu32, p->blocked) < 0 ||
                    table_addf(t, "%" PRIu32, p->idle) < 0 ||
                    table_addf(t, "%" PRIu64, p->pending) < 0 ||
                    table_addf(t, "%" PRIu32, p->callback_threads) < 0 ||
                    table_add_rate(t, rate(p->started, o->started, dt)) < 0 ||
                    table_add_rate(t, rate(p->cm_wakeups, o->cm_wakeups, dt)) < 0 ||
                    table_add_rate(t, rate(p->sleeps, o->sleeps, dt)) < 0 ||
                    table_add_rate(t, rate(p->wakes, o->wakes, dt)) < 0 ||
                    table_add_rate(t, rate(p->contended, o->contended, dt)) < 0)
                        return -ENOMEM;
        }
        table_print(t, f);
        if (hidden > 0)
                fprintf(f, "(%zu pool%s without workers or events not shown)\n", hidden, hidden == 1 ? "" : "s");
        return 0;
}

static int top_queues(const Cmwq__SnapshotReply *cur, const Cmwq__SnapshotReply *prev, double dt, FILE *f) {
        /* wq_monitor.py's columns (total and infl as they are, the others
         * per second), then cmwqd's. */
        static const TableColumn columns[] = {
                { "WORKQUEUE", false },
                { "total", true },
                { "infl", true },
                { "started/s", true },
                { "done/s", true },
                { "CPU%", true },
                { "CPUitsv/s", true },
                { "CMW/s", true },
                { "mayday/s", true },
                { "rescued/s", true },
                { "stalls/s", true },
        };
        _cleanup_(table_freep) Table *t = NULL;

        if (table_new(columns, ELEMENTSOF(columns), &t) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < cur->n_workqueues; i++) {
                const Cmwq__WorkqueueStats *q = cur->workqueues[i];
                const Cmwq__WorkqueueStats *o = find_queue(prev, q);
                static const Cmwq__WorkqueueStats zero = CMWQ__WORKQUEUE_STATS__INIT;
                bool unbound = q->flags & (CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND | CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED);
                bool rescuer = q->flags & CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM;

                if (!o)
                        o = &zero;
                if (table_add(t, q->name) < 0 ||
                    table_addf(t, "%" PRIu64, q->total) < 0 ||
                    table_addf(t, "%" PRIu64, q->in_flight) < 0 ||
                    table_add_rate(t, rate(q->total, o->total, dt)) < 0 ||
                    table_add_rate(t, rate(q->completed, o->completed, dt)) < 0 ||
                    /* CPU seconds per second, in percent of one CPU */
                    table_add_rate(t, rate(q->cpu_usec, o->cpu_usec, dt) / 10000.0) < 0 ||
                    (unbound ? table_add(t, "-") : table_add_rate(t, rate(q->cpu_intensive, o->cpu_intensive, dt))) < 0 ||
                    (unbound ? table_add(t, "-") : table_add_rate(t, rate(q->cm_wakeups, o->cm_wakeups, dt))) < 0 ||
                    table_add_rate(t, rate(q->mayday, o->mayday, dt)) < 0 ||
                    (rescuer ? table_add_rate(t, rate(q->rescued, o->rescued, dt)) : table_add(t, "-")) < 0 ||
                    table_add_rate(t, rate(q->watchdog, o->watchdog, dt)) < 0)
                        return -ENOMEM;
        }
        table_print(t, f);
        return 0;
}

static int top_show(Context *ctx, const Cmwq__SnapshotReply *cur, const Cmwq__SnapshotReply *prev,
                    bool plain, FILE *f) {
        double dt = (double) (cur->monotonic_usec - prev->monotonic_usec) / 1e6;
        char when[32];
        time_t now = time(NULL);
        struct tm tm;

        if (!localtime_r(&now, &tm) || strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm) == 0)
                snprintf(when, sizeof(when), "@%lld", (long long) now);
        if (!plain)
                fputs("\033[H\033[2J", f);      /* home, clear the screen */
        fprintf(f, "%s  cmwqd at %s, rates over %.2fs\n\n", when, ctx->socket_path, dt);
        if (top_pools(cur, prev, dt, plain, f) < 0)
                return -ENOMEM;
        fputc('\n', f);
        if (top_queues(cur, prev, dt, f) < 0)
                return -ENOMEM;
        if (plain)
                fputc('\n', f);
        return 0;
}

/* --json: one object per refresh, on one line (JSON lines), with what the
 * tables show; rates per second under names ending in _per_s. */
static void top_json(const Cmwq__SnapshotReply *cur, const Cmwq__SnapshotReply *prev, double dt, FILE *f) {
        static const Cmwq__PoolInfo zero_pool = CMWQ__POOL_INFO__INIT;
        static const Cmwq__WorkqueueStats zero_queue = CMWQ__WORKQUEUE_STATS__INIT;
        struct timespec now;
        JsonWriter w;

        clock_gettime(CLOCK_REALTIME, &now);
        json_init(&w, f);
        json_object_begin(&w);
        json_kv_uint(&w, "time_usec", (uint64_t) now.tv_sec * 1000000 + (uint64_t) now.tv_nsec / 1000);
        json_kv_double(&w, "interval", dt);
        json_key(&w, "pools");
        json_array_begin(&w);
        for (size_t i = 0; i < cur->n_pools; i++) {
                const Cmwq__PoolInfo *p = cur->pools[i];
                const Cmwq__PoolInfo *o = find_pool(prev, p) ?: &zero_pool;

                json_object_begin(&w);
                json_kv_int(&w, "cpu", p->cpu);
                json_kv_bool(&w, "unbound", p->cpu < 0);
                json_kv_bool(&w, "highpri", p->highpri);
                json_kv_uint(&w, "workers", p->workers);
                json_kv_uint(&w, "busy", p->busy);
                json_kv_uint(&w, "running", p->running);
                json_kv_uint(&w, "blocked", p->blocked);
                json_kv_uint(&w, "idle", p->idle);
                json_kv_uint(&w, "pending", p->pending);
                json_kv_uint(&w, "callback_threads", p->callback_threads);
                json_kv_double(&w, "started_per_s", rate(p->started, o->started, dt));
                json_kv_double(&w, "cm_wakeups_per_s", rate(p->cm_wakeups, o->cm_wakeups, dt));
                json_kv_double(&w, "sleeps_per_s", rate(p->sleeps, o->sleeps, dt));
                json_kv_double(&w, "wakes_per_s", rate(p->wakes, o->wakes, dt));
                json_kv_double(&w, "contended_per_s", rate(p->contended, o->contended, dt));
                json_object_end(&w);
        }
        json_array_end(&w);
        json_key(&w, "workqueues");
        json_array_begin(&w);
        for (size_t i = 0; i < cur->n_workqueues; i++) {
                const Cmwq__WorkqueueStats *q = cur->workqueues[i];
                const Cmwq__WorkqueueStats *o = find_queue(prev, q) ?: &zero_queue;

                json_object_begin(&w);
                json_kv_string(&w, "name", q->name);
                if (q->has_owner_uid)
                        json_kv_uint(&w, "owner_uid", q->owner_uid);
                json_kv_uint(&w, "total", q->total);
                json_kv_uint(&w, "in_flight", q->in_flight);
                json_kv_double(&w, "started_per_s", rate(q->total, o->total, dt));
                json_kv_double(&w, "completed_per_s", rate(q->completed, o->completed, dt));
                json_kv_double(&w, "cpu_seconds_per_s", rate(q->cpu_usec, o->cpu_usec, dt) / 1e6);
                json_kv_double(&w, "cpu_intensive_per_s", rate(q->cpu_intensive, o->cpu_intensive, dt));
                json_kv_double(&w, "cm_wakeups_per_s", rate(q->cm_wakeups, o->cm_wakeups, dt));
                json_kv_double(&w, "mayday_per_s", rate(q->mayday, o->mayday, dt));
                json_kv_double(&w, "rescued_per_s", rate(q->rescued, o->rescued, dt));
                json_kv_double(&w, "stalls_per_s", rate(q->watchdog, o->watchdog, dt));
                json_object_end(&w);
        }
        json_array_end(&w);
        json_object_end(&w);
        (void) json_finish(&w);
}

int verb_top(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *prev = NULL;
        struct sigaction sa = { .sa_handler = top_on_signal };
        uint64_t interval = TOP_DEFAULT_INTERVAL_USEC, iterations = 0;
        bool plain = a->opt[OPT_PLAIN] || !isatty(STDOUT_FILENO);
        struct timespec next;
        int r;

        if (a->opt[OPT_INTERVAL]) {
                r = parse_seconds_option(verb->name, "interval", a->opt[OPT_INTERVAL], UINT64_MAX, &interval);
                if (r != 0)
                        return r;
                if (interval < TOP_MIN_INTERVAL_USEC)
                        return usage_error("top: --interval must be at least 0.001 seconds");
        }
        if (a->opt[OPT_ITERATIONS] && (parse_uint64(a->opt[OPT_ITERATIONS], &iterations) < 0 || iterations == 0))
                return usage_error("top: invalid --iterations value '%s' (a positive number)", a->opt[OPT_ITERATIONS]);

        /* Ctrl-C (or SIGTERM) ends the loop between refreshes and cuts a
         * wait short; without SA_RESTART the sleep returns at once. */
        sigemptyset(&sa.sa_mask);
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);

        r = call_snapshot(ctx, &prev);
        if (r != 0)
                return r;
        clock_gettime(CLOCK_MONOTONIC, &next);
        for (uint64_t n = 0; !top_stop && (iterations == 0 || n < iterations); n++) {
                _cleanup_(response_freep) Cmwq__Response *cur = NULL;

                /* Absolute deadlines: the refreshes do not drift by what
                 * each one takes. */
                next.tv_sec += (time_t) (interval / 1000000);
                next.tv_nsec += (long) (interval % 1000000) * 1000;
                if (next.tv_nsec >= 1000000000) {
                        next.tv_sec++;
                        next.tv_nsec -= 1000000000;
                }
                while (!top_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
                        ;
                if (top_stop)
                        break;

                r = call_snapshot(ctx, &cur);
                if (r != 0)
                        return r;
                if (ctx->json)
                        top_json(cur->snapshot, prev->snapshot,
                                 (double) (cur->snapshot->monotonic_usec - prev->snapshot->monotonic_usec) / 1e6,
                                 stdout);
                else if (top_show(ctx, cur->snapshot, prev->snapshot, plain, stdout) < 0)
                        return fail_oom();
                if (fflush(stdout) != 0 || ferror(stdout))
                        return fail(CTL_EXIT_REFUSED, "cannot write output: %s", strerror(errno ?: EIO));
                response_freep(&prev);
                prev = TAKE_PTR(cur);
        }
        return CTL_EXIT_OK;
}

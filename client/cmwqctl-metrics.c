/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqd's counters as Prometheus/OpenMetrics text (cmwqctl-metrics.h).
 *
 * The two formats differ in three places: OpenMetrics names a counter's
 * family without the "_total" its samples carry and Prometheus 0.0.4 names
 * it with; only OpenMetrics has "# UNIT" lines and the closing "# EOF"; and
 * OpenMetrics also escapes '"' in HELP text. */

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "cmwqctl-metrics.h"

enum scope { SCOPE_QUEUE, SCOPE_POOL };

enum metric {
        /* per workqueue: the wq_monitor.py columns, then cmwqd's own */
        M_WQ_STARTED,
        M_WQ_COMPLETED,
        M_WQ_IN_FLIGHT,
        M_WQ_CPU,
        M_WQ_CPU_INTENSIVE,
        M_WQ_CM_WAKEUPS,
        M_WQ_MAYDAY,
        M_WQ_RESCUED,
        M_WQ_REQUEUED,
        M_WQ_FAILED,
        M_WQ_TIMED_OUT,
        M_WQ_STALLS,
        /* per pool */
        M_POOL_WORKERS,
        M_POOL_BUSY,
        M_POOL_RUNNING,
        M_POOL_BLOCKED,
        M_POOL_IDLE,
        M_POOL_PENDING,
        M_POOL_CALLBACK_THREADS,
        M_POOL_STARTED,
        M_POOL_SLEEPS,
        M_POOL_WAKES,
        M_POOL_CM_WAKEUPS,
        M_POOL_CONTENDED,
        M_POOL_CALLBACKS,
};

struct family {
        enum metric id;
        enum scope scope;
        const char *name;       /* without "_total" */
        bool counter;           /* else gauge */
        const char *unit;       /* NULL: none; else the name ends with "_" unit */
        const char *help;
};

static const struct family families[] = {
        { M_WQ_STARTED, SCOPE_QUEUE, "cmwq_workqueue_started", true, NULL,
          "Work items started (wq_monitor total)" },
        { M_WQ_COMPLETED, SCOPE_QUEUE, "cmwq_workqueue_completed", true, NULL,
          "Work item processes that ended, requeued ones included" },
        { M_WQ_IN_FLIGHT, SCOPE_QUEUE, "cmwq_workqueue_in_flight", false, NULL,
          "Work items queued or running now (wq_monitor infl)" },
        { M_WQ_CPU, SCOPE_QUEUE, "cmwq_workqueue_cpu_seconds", true, "seconds",
          "CPU time of the work items that ended (wq_monitor CPUtime)" },
        { M_WQ_CPU_INTENSIVE, SCOPE_QUEUE, "cmwq_workqueue_cpu_intensive", true, NULL,
          "Work items that ran past the CPU-intensive threshold (wq_monitor CPUitsv)" },
        { M_WQ_CM_WAKEUPS, SCOPE_QUEUE, "cmwq_workqueue_cm_wakeups", true, NULL,
          "Work items started because a running worker blocked (wq_monitor CMW)" },
        { M_WQ_MAYDAY, SCOPE_QUEUE, "cmwq_workqueue_mayday", true, NULL,
          "Times a worker could not be created for a work item (wq_monitor mayday)" },
        { M_WQ_RESCUED, SCOPE_QUEUE, "cmwq_workqueue_rescued", true, NULL,
          "Work items run by the rescuer (wq_monitor rescued)" },
        { M_WQ_REQUEUED, SCOPE_QUEUE, "cmwq_workqueue_requeued", true, NULL,
          "Work items that exited 75 (EX_TEMPFAIL) and were requeued" },
        { M_WQ_FAILED, SCOPE_QUEUE, "cmwq_workqueue_failed", true, NULL,
          "Work items that could not be started" },
        { M_WQ_TIMED_OUT, SCOPE_QUEUE, "cmwq_workqueue_timed_out", true, NULL,
          "Work items stopped by their timeout" },
        { M_WQ_STALLS, SCOPE_QUEUE, "cmwq_workqueue_stalls", true, NULL,
          "Stalls reported by the watchdog of a pool this queue's items waited on" },
        { M_POOL_WORKERS, SCOPE_POOL, "cmwq_pool_workers", false, NULL,
          "Workers of the pool" },
        { M_POOL_BUSY, SCOPE_POOL, "cmwq_pool_busy", false, NULL,
          "Workers executing a work item" },
        { M_POOL_RUNNING, SCOPE_POOL, "cmwq_pool_running", false, NULL,
          "Workers counted as running by concurrency management (nr_running)" },
        { M_POOL_BLOCKED, SCOPE_POOL, "cmwq_pool_blocked", false, NULL,
          "Busy workers seen blocked" },
        { M_POOL_IDLE, SCOPE_POOL, "cmwq_pool_idle", false, NULL,
          "Idle workers" },
        { M_POOL_PENDING, SCOPE_POOL, "cmwq_pool_pending", false, NULL,
          "Work items on the pool's worklist" },
        { M_POOL_CALLBACK_THREADS, SCOPE_POOL, "cmwq_pool_callback_threads", false, NULL,
          "libcmwq-client worker threads of the pool" },
        { M_POOL_STARTED, SCOPE_POOL, "cmwq_pool_started", true, NULL,
          "Work started on the pool: exec items and callback grants" },
        { M_POOL_SLEEPS, SCOPE_POOL, "cmwq_pool_sleeps", true, NULL,
          "Workers running work seen blocking" },
        { M_POOL_WAKES, SCOPE_POOL, "cmwq_pool_wakes", true, NULL,
          "Blocked workers seen running again" },
        { M_POOL_CM_WAKEUPS, SCOPE_POOL, "cmwq_pool_cm_wakeups", true, NULL,
          "Work started because the last running worker blocked" },
        { M_POOL_CONTENDED, SCOPE_POOL, "cmwq_pool_contended", true, NULL,
          "Work queued that had to wait for the CPU" },
        { M_POOL_CALLBACKS, SCOPE_POOL, "cmwq_pool_callbacks", true, NULL,
          "Callbacks that libcmwq-client threads of the pool returned from" },
};

/* HELP text: backslash and newline escaped; OpenMetrics also escapes '"'. */
static void write_help(FILE *f, const char *s, MetricsFormat format) {
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else if (*s == '"' && format == METRICS_OPENMETRICS)
                        fputs("\\\"", f);
                else
                        fputc(*s, f);
        }
}

/* A label value: backslash, double quote and newline escaped (both
 * formats).  Other bytes go as they are: both formats are UTF-8, and a
 * queue name is ASCII (cmwqd(8)). */
static void write_label_value(FILE *f, const char *s) {
        fputc('"', f);
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '"')
                        fputs("\\\"", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
        fputc('"', f);
}

/* The value of @id for a queue, as text; false if the daemon did not say. */
static bool queue_value(const Cmwq__WorkqueueStats *s, enum metric id, char *buf, size_t size) {
        uint64_t v;

        switch (id) {
        case M_WQ_STARTED:       v = s->total; break;
        case M_WQ_COMPLETED:     if (!s->has_completed) return false; v = s->completed; break;
        case M_WQ_IN_FLIGHT:     v = s->in_flight; break;
        case M_WQ_CPU:
                snprintf(buf, size, "%" PRIu64 ".%06" PRIu64, s->cpu_usec / 1000000, s->cpu_usec % 1000000);
                return true;
        case M_WQ_CPU_INTENSIVE: v = s->cpu_intensive; break;
        case M_WQ_CM_WAKEUPS:    v = s->cm_wakeups; break;
        case M_WQ_MAYDAY:        v = s->mayday; break;
        case M_WQ_RESCUED:       v = s->rescued; break;
        case M_WQ_REQUEUED:      if (!s->has_requeued) return false; v = s->requeued; break;
        case M_WQ_FAILED:        if (!s->has_failed) return false; v = s->failed; break;
        case M_WQ_TIMED_OUT:     if (!s->has_timed_out) return false; v = s->timed_out; break;
        case M_WQ_STALLS:        if (!s->has_watchdog) return false; v = s->watchdog; break;
        default:
                return false;
        }
        snprintf(buf, size, "%" PRIu64, v);
        return true;
}

static bool pool_value(const Cmwq__PoolInfo *p, enum metric id, char *buf, size_t size) {
        uint64_t v;

        switch (id) {
        case M_POOL_WORKERS:          v = p->workers; break;
        case M_POOL_BUSY:             if (!p->has_busy) return false; v = p->busy; break;
        case M_POOL_RUNNING:          v = p->running; break;
        case M_POOL_BLOCKED:          if (!p->has_blocked) return false; v = p->blocked; break;
        case M_POOL_IDLE:             v = p->idle; break;
        case M_POOL_PENDING:          v = p->pending; break;
        case M_POOL_CALLBACK_THREADS: if (!p->has_callback_threads) return false; v = p->callback_threads; break;
        case M_POOL_STARTED:          if (!p->has_started) return false; v = p->started; break;
        case M_POOL_SLEEPS:           if (!p->has_sleeps) return false; v = p->sleeps; break;
        case M_POOL_WAKES:            if (!p->has_wakes) return false; v = p->wakes; break;
        case M_POOL_CM_WAKEUPS:       if (!p->has_cm_wakeups) return false; v = p->cm_wakeups; break;
        case M_POOL_CONTENDED:        if (!p->has_contended) return false; v = p->contended; break;
        case M_POOL_CALLBACKS:        if (!p->has_callbacks) return false; v = p->callbacks; break;
        default:
                return false;
        }
        snprintf(buf, size, "%" PRIu64, v);
        return true;
}

static void write_sample_name(FILE *f, const struct family *fam) {
        fputs(fam->name, f);
        if (fam->counter)
                fputs("_total", f);
}

static void write_family(FILE *f, const struct family *fam, const Cmwq__SnapshotReply *snap,
                         MetricsFormat format) {
        const char *suffix = fam->counter && format == METRICS_PROMETHEUS ? "_total" : "";
        char value[64];

        fprintf(f, "# HELP %s%s ", fam->name, suffix);
        write_help(f, fam->help, format);
        fprintf(f, "\n# TYPE %s%s %s\n", fam->name, suffix, fam->counter ? "counter" : "gauge");
        if (fam->unit && format == METRICS_OPENMETRICS)
                fprintf(f, "# UNIT %s %s\n", fam->name, fam->unit);

        if (fam->scope == SCOPE_QUEUE) {
                for (size_t i = 0; i < snap->n_workqueues; i++) {
                        const Cmwq__WorkqueueStats *s = snap->workqueues[i];

                        if (!queue_value(s, fam->id, value, sizeof(value)))
                                continue;
                        write_sample_name(f, fam);
                        fputs("{workqueue=", f);
                        write_label_value(f, s->name);
                        if (s->has_owner_uid)
                                fprintf(f, ",uid=\"%" PRIu32 "\"", s->owner_uid);
                        fprintf(f, "} %s\n", value);
                }
                return;
        }

        for (size_t i = 0; i < snap->n_pools; i++) {
                const Cmwq__PoolInfo *p = snap->pools[i];

                if (!pool_value(p, fam->id, value, sizeof(value)))
                        continue;
                write_sample_name(f, fam);
                if (p->cpu < 0)
                        fputs("{cpu=\"unbound\"", f);
                else
                        fprintf(f, "{cpu=\"%" PRIi32 "\"", p->cpu);
                fprintf(f, ",priority=\"%s\"} %s\n", p->highpri ? "highpri" : "normal", value);
        }
}

void metrics_write(const Cmwq__SnapshotReply *snap, MetricsFormat format, FILE *f) {
        for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
                write_family(f, &families[i], snap, format);
        if (format == METRICS_OPENMETRICS)
                fputs("# EOF\n", f);
}

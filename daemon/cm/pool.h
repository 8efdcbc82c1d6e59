/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Worker pools and concurrency management, after the kernel's
 * kernel/workqueue.c.  A pool serves one CPU at one priority (or no CPU:
 * unbound).  It knows work only as struct pool_work and starts it through
 * pool_work_ops.execute; what a worker really is (an exec child, a client's
 * callback thread) is the caller's business.
 *
 * The accounting is the kernel's:
 *  - nr_running counts workers that execute a work item and are neither
 *    blocked nor CPU-intensive.
 *  - A bound pool starts work only while nr_running is 0; when the last
 *    running worker blocks with work pending, another starts at once (a
 *    concurrency-management wake-up).  A worker whose blocked item wakes up
 *    counts again, and a worker that finishes while others run goes idle
 *    instead of taking more (no excess concurrency).
 *  - CPU-intensive work does not count; a work item that uses
 *    pool_cpu_intensive_thresh_usec of CPU time without blocking (counted
 *    from its start or its last wake-up) is marked CPU-intensive on the
 *    fly.
 *  - Unbound pools are not concurrency managed: they start whatever is on
 *    their worklist (max_active is enforced before work gets there).
 *  - A work item never runs on two workers at once: work whose identity is
 *    executing is parked behind that worker (the kernel's "scheduled" list).
 *  - Idle workers beyond two are reaped after pool_idle_timeout_usec, keeping
 *    the kernel's 1:4 idle-to-busy ratio; no timer is armed once that holds.
 *
 * The pool is pure bookkeeping: with a NULL event base it arms no timers,
 * which is how the unit tests drive it with synthetic block/wake events.
 */

#include <stdbool.h>
#include <stdint.h>

#include "list.h"

struct event;
struct event_base;
struct pool;
struct worker;
struct pool_work;

/* Counters the pool updates on behalf of the work's workqueue (wq_monitor.py). */
struct pool_work_stats {
        uint64_t started;
        uint64_t cpu_intensive;         /* CPUitsv: marked CPU-intensive while running */
        uint64_t cm_wakeups;            /* CMW: started because a running worker blocked */
        uint64_t mayday;                /* worker creation failed */
        uint64_t rescued;
};

struct pool_work_ops {
        /* Begin executing @work on @worker: return 0 once it runs, or a negative
         * errno if the worker could not be created (fork refused, ...); the work
         * then goes back to the head of the worklist and is retried later. */
        int (*execute)(struct worker *worker, struct pool_work *work);
        /* Optional: the counters of @work's workqueue; without it nothing
         * is counted.  (Asked, not kept in the work: a million pending
         * items each save the pointer.) */
        struct pool_work_stats *(*stats)(struct pool_work *work);
        /* Optional: whether @work's workqueue is CPU_INTENSIVE, so that
         * the work never counts toward its pool's concurrency. */
        bool (*queue_cpu_intensive)(const struct pool_work *work);
        /* Optional: CPU time (µs) the worker's current execution has used so
         * far, or POOL_CPU_UNKNOWN.  Without it, CPU-intensive marking goes by
         * the time the worker has been running (not blocked). */
        uint64_t (*cpu_usec)(struct worker *worker);
        /* Optional, for an execution that runs several work items in turn
         * (a client's callback thread under one grant): the value cpu_usec()
         * had when the item running now started, or POOL_CPU_UNKNOWN.  The
         * CPU-intensive threshold is per work item: it counts from the later
         * of this and the worker's last start or wake-up (the kernel's
         * current_at, set by process_one_work() and on wake-up).  Read only
         * when the threshold timer fires. */
        uint64_t (*item_start_cpu_usec)(struct worker *worker);
        /* Optional: @worker stops counting toward its pool's concurrency
         * (the threshold, or its queue's CPU_INTENSIVE flag), before the
         * pool starts more work.  An execution of several items must end
         * after the current one, so that the next item counts again (the
         * kernel clears WORKER_CPU_INTENSIVE after each item). */
        void (*cpu_intensive)(struct worker *worker);
        /* Optional: make @work quick to start later, e.g. create its process
         * now and let it wait (the kernel keeps an idle worker ready for
         * the same reason).  Called for the first work on a bound pool's
         * worklist that has to wait for its turn, again whenever that is so
         * (it must be idempotent); its failure only means a slower start. */
        void (*prepare)(struct pool_work *work);
        /* Optional: @work leaves the pool without having started (cancel,
         * freeze, shutdown): give back what prepare() took. */
        void (*unprepare)(struct pool_work *work);
        /* Optional: whether @work can start although a worker could not be
         * created for the work ahead of it (its queue has a rescuer ready):
         * it is then tried out of turn, as the kernel's rescuer takes its
         * queue's work from a pool in mayday. */
        bool (*rescuable)(struct pool_work *work);
        /* Optional: a few words for the logs on what @worker is doing, for
         * work that is not an item (the watchdog names who holds a pool). */
        void (*describe)(struct worker *worker, char *buf, size_t size);
        /* Optional: bring what the pool knows of @worker's executor up to
         * date before the pool decides on its behalf from a timer (the
         * CPU-intensive threshold): a client's callback thread may have
         * given its CPU back, or its pool may want the next, without
         * waking the daemon for it.  May end @worker's current work. */
        void (*sync)(struct worker *worker);
        /* Optional, on a bound pool: @worker holds its work but is blocked,
         * and the pool is about to start other work.  An executor that
         * only sits on it (a client's callback thread lingering after its
         * last item, proto/shm.h) ends it now; one that is about to run
         * again counts running again.  Returns whether either happened:
         * the pool then decides again. */
        bool (*reclaim)(struct worker *worker);
};

#define POOL_CPU_UNKNOWN UINT64_MAX

struct pool_work {
        struct list_head entry;         /* pool worklist or a worker's scheduled list */
        const struct pool_work_ops *ops;
        const void *identity;           /* same identity never runs twice at once */
};

static inline bool pool_work_cpu_intensive(const struct pool_work *work) {
        return work->ops->queue_cpu_intensive && work->ops->queue_cpu_intensive(work);
}

enum {
        WORKER_BLOCKED = 1 << 0,
        WORKER_CPU_INTENSIVE = 1 << 1,
};

struct worker {
        struct pool *pool;
        struct list_head entry;         /* pool idle_list or busy_list */
        struct pool_work *current;
        struct list_head scheduled;     /* parked behind current (same identity) */
        unsigned flags;
        uint64_t last_active_usec;      /* CLOCK_MONOTONIC, when it went idle */
        struct event *intensive_timer;
        uint64_t cpu_baseline_usec;     /* worker_cpu_usec() when it last started counting
                                         * (see also item_start_cpu_usec) */
        void *userdata;                 /* the executor's state for current */
};

/* What the pool did since the daemon started, for `cmwqctl --json pools`
 * (where the time goes, issue 11): one increment where it happens. */
struct pool_counters {
        uint64_t started;               /* work started: exec items, callback grants */
        uint64_t sleeps;                /* a worker running work seen blocking */
        uint64_t wakes;                 /* a blocked worker seen running again */
        uint64_t cm_wakeups;            /* work started because a running worker blocked */
        uint64_t contended;             /* work queued that had to wait (holders asked to yield) */
};

struct pool {
        int cpu;                        /* -1: unbound */
        bool highpri;
        struct event_base *base;        /* NULL: no timers (unit tests) */
        struct list_head worklist;
        struct list_head idle_list;     /* most recently idle first */
        struct list_head busy_list;
        unsigned nr_workers;
        unsigned nr_idle;
        unsigned nr_running;
        unsigned nr_blocked;
        uint64_t nr_pending;            /* length of worklist */
        /* libcmwq-client worker threads on this pool (callback/callback.c), and the
         * callbacks they returned from, as their clients' completion
         * records say (counted at each grant's end; for display only). */
        unsigned nr_callback_threads;
        uint64_t callbacks_returned;
        struct pool_counters counters;
        uint64_t last_progress_usec;    /* CLOCK_MONOTONIC, for the watchdog */
        uint64_t watchdog_since_usec;   /* core/watchdog.c's: work waiting since; 0: none */
        uint64_t watchdog_reported_usec;        /* core/watchdog.c's: the stall last reported */
        unsigned claim_window;          /* core/item.c's: starts claimed ahead on disk, at most */
        struct event *idle_timer;
        struct event *retry_timer;
        unsigned retry_backoff_ms;
        /* Optional: told when @work was queued and could not start at once,
         * so that an executor holding the CPU with a run of items (a
         * client's callback worker) can be asked to yield it. */
        void (*contended)(struct pool *p, struct pool_work *work, void *userdata);
        void *contended_userdata;
        /* Optional: told when the pool becomes busy (a worker counted
         * running, or work pending: a block would matter) and idle again,
         * so that blocking detection can watch the CPU closely only then. */
        void (*busy_changed)(struct pool *p, bool busy, void *userdata);
        void *busy_userdata;
        bool busy;
};

extern uint64_t pool_cpu_intensive_thresh_usec;    /* default 10 ms, as the kernel */
extern uint64_t pool_idle_timeout_usec;            /* default 300 s, as the kernel */

int pool_init(struct pool *p, struct event_base *base, int cpu, bool highpri);
/* Frees idle workers and timers; the pool must have no busy worker. */
void pool_done(struct pool *p);

static inline bool pool_is_unbound(const struct pool *p) {
        return p->cpu < 0;
}

/* Appends @work to the worklist and starts workers as concurrency allows. */
void pool_queue_work(struct pool *p, struct pool_work *work);
/* Takes back @work if it has not started: true if it was pending. */
bool pool_cancel_pending(struct pool *p, struct pool_work *work);
/* Starts workers while the rules allow; called after anything that can. */
void pool_kick(struct pool *p);

/* Events from the executor of a worker's current work. */
void pool_worker_sleeping(struct worker *w);
void pool_worker_running(struct worker *w);
void pool_worker_done(struct worker *w);
/* @w's current work stops counting toward the pool's concurrency, as
 * CPU_INTENSIVE work does (a no-op if it does not count now). */
void pool_worker_cpu_intensive(struct worker *w);

/* Whether @w counts toward its pool's concurrency level. */
static inline bool worker_counts_running(const struct worker *w) {
        return w->current && !(w->flags & (WORKER_BLOCKED | WORKER_CPU_INTENSIVE));
}

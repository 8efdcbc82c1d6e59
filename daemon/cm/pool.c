/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <time.h>

#include "cm/pool.h"
#include "pool-policy.h"
#include "util.h"

uint64_t pool_cpu_intensive_thresh_usec = 10 * USEC_PER_MSEC;
uint64_t pool_idle_timeout_usec = POOL_POLICY_IDLE_TIMEOUT_USEC;

static void pool_idle_timer_fired(evutil_socket_t fd, short what, void *userdata);
static void pool_retry_timer_fired(evutil_socket_t fd, short what, void *userdata);
static void worker_intensive_timer_fired(evutil_socket_t fd, short what, void *userdata);

int pool_init(struct pool *p, struct event_base *base, int cpu, bool highpri) {
        *p = (struct pool) {
                .cpu = cpu,
                .highpri = highpri,
                .base = base,
                .last_progress_usec = now_usec(CLOCK_MONOTONIC),
                .retry_backoff_ms = POOL_POLICY_RETRY_MIN_MS,
        };
        list_init(&p->worklist);
        list_init(&p->idle_list);
        list_init(&p->busy_list);

        if (base) {
                p->idle_timer = evtimer_new(base, pool_idle_timer_fired, p);
                p->retry_timer = evtimer_new(base, pool_retry_timer_fired, p);
                if (!p->idle_timer || !p->retry_timer) {
                        pool_done(p);
                        return -ENOMEM;
                }
        }
        return 0;
}

static struct worker *worker_free(struct worker *w) {
        if (!w)
                return NULL;
        if (w->intensive_timer)
                event_free(w->intensive_timer);
        free(w);
        return NULL;
}

static void worker_destroy(struct worker *w) {
        struct pool *p = w->pool;

        list_del_init(&w->entry);
        p->nr_workers--;
        p->nr_idle--;
        worker_free(w);
}

void pool_done(struct pool *p) {
        struct worker *w, *n;

        list_for_each_entry_safe(w, n, &p->idle_list, entry)
                worker_destroy(w);
        if (p->idle_timer)
                event_free(p->idle_timer);
        if (p->retry_timer)
                event_free(p->retry_timer);
        p->idle_timer = p->retry_timer = NULL;
}

static bool too_many_workers(const struct pool *p) {
        return pool_policy_too_many_idle(p->nr_idle, p->nr_workers - p->nr_idle);
}

static void arm_timer(struct event *ev, uint64_t usec) {
        struct timeval tv = timeval_from_usec(usec);

        if (ev)
                evtimer_add(ev, &tv);
}

static void pool_idle_timer_fired(evutil_socket_t fd, short what, void *userdata) {
        struct pool *p = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        while (too_many_workers(p)) {
                /* The idle list is most-recent first: the tail has idled longest. */
                struct worker *w = list_entry(p->idle_list.prev, struct worker, entry);
                uint64_t expires = w->last_active_usec + pool_idle_timeout_usec;

                if (expires > now) {
                        arm_timer(p->idle_timer, expires - now);
                        return;
                }
                worker_destroy(w);
        }
}

static void worker_enter_idle(struct worker *w) {
        struct pool *p = w->pool;

        w->current = NULL;
        w->flags = 0;
        w->userdata = NULL;
        w->last_active_usec = now_usec(CLOCK_MONOTONIC);
        list_del_init(&w->entry);
        list_add(&w->entry, &p->idle_list);
        p->nr_idle++;

        if (too_many_workers(p) && p->idle_timer && !evtimer_pending(p->idle_timer, NULL))
                arm_timer(p->idle_timer, pool_idle_timeout_usec);
}

static struct worker *pool_get_worker(struct pool *p) {
        struct worker *w;

        if (!list_empty(&p->idle_list)) {
                w = list_first_entry(&p->idle_list, struct worker, entry);
                list_del_init(&w->entry);
                p->nr_idle--;
                return w;
        }

        w = calloc(1, sizeof(*w));
        if (!w)
                return NULL;
        w->pool = p;
        list_init(&w->entry);
        list_init(&w->scheduled);
        if (p->base && !pool_is_unbound(p)) {
                w->intensive_timer = evtimer_new(p->base, worker_intensive_timer_fired, w);
                if (!w->intensive_timer)
                        return worker_free(w);
        }
        p->nr_workers++;
        return w;
}

/* CPU time the worker's current execution has used, if the executor can
 * tell; POOL_CPU_UNKNOWN otherwise. */
static uint64_t worker_cpu_usec(struct worker *w) {
        if (!w->current || !w->current->ops->cpu_usec)
                return POOL_CPU_UNKNOWN;
        return w->current->ops->cpu_usec(w);
}

static void pool_note_busy(struct pool *p) {
        bool busy = p->nr_running > 0 || p->nr_pending > 0;

        if (busy == p->busy)
                return;
        p->busy = busy;
        if (p->busy_changed)
                p->busy_changed(p, busy, p->busy_userdata);
}

static void worker_start_counting(struct worker *w) {
        w->pool->nr_running++;
        /* A work item that keeps its CPU this long stops holding the pool.
         * Like the kernel, count CPU time since it last woke up, so that an
         * item that merely waits for the CPU is not marked. */
        if (w->intensive_timer) {
                w->cpu_baseline_usec = worker_cpu_usec(w);
                arm_timer(w->intensive_timer, pool_cpu_intensive_thresh_usec);
        }
        pool_note_busy(w->pool);
}

static void worker_stop_counting(struct worker *w) {
        w->pool->nr_running--;
        if (w->intensive_timer)
                evtimer_del(w->intensive_timer);
        pool_note_busy(w->pool);
}

static bool need_more_worker(const struct pool *p) {
        if (list_empty(&p->worklist))
                return false;
        return pool_is_unbound(p) || p->nr_running == 0;
}

static struct worker *find_worker_executing(struct pool *p, const void *identity) {
        struct worker *w;

        if (!identity)
                return NULL;
        list_for_each_entry(w, &p->busy_list, entry)
                if (w->current && w->current->identity == identity)
                        return w;
        return NULL;
}

/* Where @work's counters go: its workqueue's, or nowhere. */
static struct pool_work_stats *work_stats(struct pool_work *work) {
        static struct pool_work_stats uncounted;

        return work->ops->stats ? work->ops->stats(work) : &uncounted;
}

/* Returns 0 when @work runs on @w, or the executor's negative errno. */
static int worker_execute(struct worker *w, struct pool_work *work) {
        struct pool *p = w->pool;
        int r;

        w->current = work;
        w->flags = pool_work_cpu_intensive(work) ? WORKER_CPU_INTENSIVE : 0;
        list_del_init(&w->entry);
        list_add_tail(&w->entry, &p->busy_list);
        if (worker_counts_running(w))
                worker_start_counting(w);

        r = work->ops->execute(w, work);
        if (r < 0) {
                if (worker_counts_running(w))
                        worker_stop_counting(w);
                worker_enter_idle(w);
                return r;
        }

        work_stats(work)->started++;
        p->counters.started++;
        p->last_progress_usec = now_usec(CLOCK_MONOTONIC);
        return 0;
}

static void pool_schedule_retry(struct pool *p) {
        if (!p->retry_timer || evtimer_pending(p->retry_timer, NULL))
                return;
        arm_timer(p->retry_timer, (uint64_t) p->retry_backoff_ms * USEC_PER_MSEC);
        if (p->retry_backoff_ms < POOL_POLICY_RETRY_MAX_MS)
                p->retry_backoff_ms *= 2;
}

static void pool_retry_timer_fired(evutil_socket_t fd, short what, void *userdata) {
        pool_kick(userdata);
}

/* Work that waits on a bound pool for its turn waits ready to go: when the
 * running worker blocks or ends, starting it is then only a release.  Only
 * the first: the next one gets ready while that one runs.  Unbound pools
 * start whatever reaches them. */
static void pool_prepare_next(struct pool *p) {
        struct pool_work *next;

        if (pool_is_unbound(p) || list_empty(&p->worklist))
                return;
        next = list_first_entry(&p->worklist, struct pool_work, entry);
        if (next->ops->prepare)
                next->ops->prepare(next);
}

/* Workers cannot be created: starts the first work on the worklist that
 * has a rescuer ready (not parked: its identity is not executing). */
static bool pool_rescue_one(struct pool *p) {
        struct pool_work *work;
        struct worker *w;

        list_for_each_entry(work, &p->worklist, entry) {
                if (!work->ops->rescuable || !work->ops->rescuable(work) || find_worker_executing(p, work->identity))
                        continue;
                w = pool_get_worker(p);
                if (!w)
                        return false;
                list_del_init(&work->entry);
                p->nr_pending--;
                if (worker_execute(w, work) < 0) {
                        list_add(&work->entry, &p->worklist);
                        p->nr_pending++;
                        return false;
                }
                return true;
        }
        return false;
}

/* Bound pools, before other work starts: the blocked workers that only sit
 * on their work give it up (pool_work_ops.reclaim).  Returns whether the
 * pool changed; the caller then looks again, as the busy list may have. */
static bool pool_reclaim_blocked(struct pool *p) {
        struct worker *w;

        if (pool_is_unbound(p))
                return false;
        list_for_each_entry(w, &p->busy_list, entry)
                if ((w->flags & WORKER_BLOCKED) && w->current && w->current->ops->reclaim &&
                    w->current->ops->reclaim(w))
                        return true;
        return false;
}

void pool_kick(struct pool *p) {
        while (need_more_worker(p)) {
                struct pool_work *work;
                struct worker *w;
                int r;

                if (pool_reclaim_blocked(p))
                        continue;
                work = list_first_entry(&p->worklist, struct pool_work, entry);
                list_del_init(&work->entry);
                p->nr_pending--;

                /* Non-reentrancy: park it behind the worker already running it. */
                w = find_worker_executing(p, work->identity);
                if (w) {
                        list_add_tail(&work->entry, &w->scheduled);
                        continue;
                }

                w = pool_get_worker(p);
                r = w ? worker_execute(w, work) : -ENOMEM;
                if (r < 0) {
                        /* Worker creation failed: keep the order and try again later. */
                        list_add(&work->entry, &p->worklist);
                        p->nr_pending++;
                        work_stats(work)->mayday++;
                        pool_schedule_retry(p);
                        if (pool_rescue_one(p))
                                continue;
                        pool_note_busy(p);
                        return;
                }
                p->retry_backoff_ms = POOL_POLICY_RETRY_MIN_MS;
        }
        pool_prepare_next(p);
        pool_note_busy(p);
}

void pool_queue_work(struct pool *p, struct pool_work *work) {
        list_add_tail(&work->entry, &p->worklist);
        p->nr_pending++;
        pool_kick(p);
        if (p->contended && list_linked(&work->entry) && !list_empty(&p->worklist)) {
                p->counters.contended++;
                p->contended(p, work, p->contended_userdata);
        }
}

bool pool_cancel_pending(struct pool *p, struct pool_work *work) {
        struct worker *w;

        if (!list_linked(&work->entry))
                return false;

        /* Either on the worklist or parked on a busy worker's scheduled list. */
        list_for_each_entry(w, &p->busy_list, entry) {
                struct pool_work *s;
                list_for_each_entry(s, &w->scheduled, entry)
                        if (s == work) {
                                list_del_init(&work->entry);
                                goto taken;
                        }
        }
        list_del_init(&work->entry);
        p->nr_pending--;
        pool_note_busy(p);
taken:
        if (work->ops->unprepare)
                work->ops->unprepare(work);
        return true;
}

void pool_worker_sleeping(struct worker *w) {
        struct pool *p = w->pool;

        if (!w->current || (w->flags & WORKER_BLOCKED))
                return;

        bool counted = worker_counts_running(w);
        w->flags |= WORKER_BLOCKED;
        p->nr_blocked++;
        p->counters.sleeps++;
        if (!counted)
                return;

        worker_stop_counting(w);
        /* Unbound pools are not concurrency managed: a block changes nothing
         * there (the kernel's WORKER_UNBOUND is a NOT_RUNNING flag). */
        if (!pool_is_unbound(p) && need_more_worker(p)) {
                work_stats(w->current)->cm_wakeups++;
                p->counters.cm_wakeups++;
                pool_kick(p);
        }
}

void pool_worker_running(struct worker *w) {
        if (!w->current || !(w->flags & WORKER_BLOCKED))
                return;

        w->flags &= ~WORKER_BLOCKED;
        w->pool->nr_blocked--;
        w->pool->counters.wakes++;
        if (worker_counts_running(w))
                worker_start_counting(w);
}

/* Where the threshold counts from: the worker's last start or wake-up, or
 * the start of the item it runs now if that came later (an execution
 * running several items).  Never later than @cpu, the CPU time now. */
static uint64_t worker_item_baseline(struct worker *w, uint64_t cpu) {
        uint64_t base = w->cpu_baseline_usec, item;

        if (base == POOL_CPU_UNKNOWN || !w->current->ops->item_start_cpu_usec)
                return base;
        item = w->current->ops->item_start_cpu_usec(w);
        if (item != POOL_CPU_UNKNOWN && item > base)
                base = item;
        return base < cpu ? base : cpu;
}

static void worker_intensive_timer_fired(evutil_socket_t fd, short what, void *userdata) {
        struct worker *w = userdata;
        uint64_t cpu, base;

        if (w->current && w->current->ops->sync)
                w->current->ops->sync(w);
        if (!worker_counts_running(w))
                return;

        cpu = worker_cpu_usec(w);
        if (cpu != POOL_CPU_UNKNOWN && w->cpu_baseline_usec != POOL_CPU_UNKNOWN) {
                base = worker_item_baseline(w, cpu);
                if (cpu - base < pool_cpu_intensive_thresh_usec) {
                        /* Runnable but not on the CPU all that time, or a
                         * later item started meanwhile: look again when
                         * the item could have used up the threshold. */
                        arm_timer(w->intensive_timer, pool_cpu_intensive_thresh_usec - (cpu - base));
                        return;
                }
        }

        pool_worker_cpu_intensive(w);
}

void pool_worker_cpu_intensive(struct worker *w) {
        struct pool *p = w->pool;

        if (!worker_counts_running(w))
                return;
        worker_stop_counting(w);
        w->flags |= WORKER_CPU_INTENSIVE;
        work_stats(w->current)->cpu_intensive++;
        /* Before the pool starts more: an executor of several items ends
         * its run after this one, and must know before the next worker
         * starts beside it. */
        if (w->current->ops->cpu_intensive)
                w->current->ops->cpu_intensive(w);
        if (need_more_worker(p)) {
                work_stats(w->current)->cm_wakeups++;
                pool_kick(p);
        }
}

void pool_worker_done(struct worker *w) {
        struct pool *p = w->pool;
        struct pool_work *next;

        if (worker_counts_running(w))
                worker_stop_counting(w);
        if (w->flags & WORKER_BLOCKED)
                p->nr_blocked--;
        p->last_progress_usec = now_usec(CLOCK_MONOTONIC);

        /* Work parked behind this one was already taken off the worklist: it
         * runs next on this worker, as the kernel's process_scheduled_works(). */
        if (!list_empty(&w->scheduled)) {
                next = list_first_entry(&w->scheduled, struct pool_work, entry);
                list_del_init(&next->entry);
                w->current = NULL;
                if (worker_execute(w, next) >= 0) {
                        /* @next may not count (CPU-intensive) where the
                         * finished work did: kick, as process_one_work(). */
                        pool_kick(p);
                        return;
                }

                /* Could not start it: everything parked goes back to the head
                 * of the worklist, in order, and is retried like any work. */
                work_stats(next)->mayday++;
                list_add(&next->entry, &w->scheduled);
                while (!list_empty(&w->scheduled)) {
                        struct pool_work *last = list_entry(w->scheduled.prev, struct pool_work, entry);
                        list_del_init(&last->entry);
                        list_add(&last->entry, &p->worklist);
                        p->nr_pending++;
                }
                pool_note_busy(p);
                pool_schedule_retry(p);
                return;         /* worker_execute() already put @w on the idle list */
        }

        worker_enter_idle(w);
        pool_kick(p);
}

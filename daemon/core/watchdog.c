/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The watchdog (the kernel's workqueue lockup detector): a pool that has work
 * waiting and makes no forward progress for the threshold is logged once,
 * with the item that holds it, and counted in the waiting queue's stats.
 *
 * "Work waiting" on a pool is work on its worklist, or items of a queue on
 * that pool held back by max_active (an ordered queue behind its head, a
 * CPU-intensive queue with max_active items running): concurrency management
 * starts the next item whenever one blocks, so a pool stalls only when its
 * items neither finish nor let the next start, or when no worker can be
 * created.  Items of frozen queues are waiting on purpose and do not count.
 * "Progress" is an item of the pool starting or ending (cm/pool.c's
 * last_progress_usec).
 *
 * One timer for the whole core, armed when work is queued and none is armed;
 * while work waits it looks again at the earliest deadline (at the latest
 * every threshold); with nothing waiting it is not re-armed, so an idle
 * daemon is never woken up.
 */
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/param.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "util.h"

static void watchdog_arm(struct core *c, uint64_t usec) {
        struct timeval tv = timeval_from_usec(usec);

        evtimer_add(c->watchdog_timer, &tv);
}

void core_watchdog_kick(struct core *c, struct pool *p) {
        if (!c->watchdog_timer)
                return;
        if (!p->watchdog_since_usec)
                p->watchdog_since_usec = now_usec(CLOCK_MONOTONIC);
        if (!evtimer_pending(c->watchdog_timer, NULL))
                watchdog_arm(c, c->config.watchdog_usec);
}

/* The pwq of @p with items held back by max_active, or NULL.  Frozen queues
 * are skipped: they wait on purpose. */
static struct pwq *watchdog_first_inactive(struct core *c, struct pool *p) {
        struct workqueue *wq;

        list_for_each_entry(wq, &c->workqueues, entry) {
                if (wq->frozen)
                        continue;
                for (size_t k = 0; k < wq->n_pwqs; k++)
                        if (wq->pwqs[k].pool == p && !list_empty(&wq->pwqs[k].inactive))
                                return &wq->pwqs[k];
        }
        return NULL;
}

/* The item that has been running longest on @p (of @pwq only, if given). */
static struct item *watchdog_oldest_running(struct pool *p, const struct pwq *pwq) {
        struct item *oldest = NULL;
        struct worker *w;

        list_for_each_entry(w, &p->busy_list, entry) {
                struct item *i = item_from_work(w->current);

                if (!i || !item_proc(i) || (pwq && i->pwq != pwq))
                        continue;
                if (!oldest || i->run->started_usec < oldest->run->started_usec)
                        oldest = i;
        }
        return oldest;
}

static void watchdog_describe_pool(const struct pool *p, char *buf, size_t size) {
        if (pool_is_unbound(p))
                snprintf(buf, size, "the unbound%s pool", p->highpri ? " high-priority" : "");
        else
                snprintf(buf, size, "the%s pool of CPU %d", p->highpri ? " high-priority" : "", p->cpu);
}

/* A busy worker of @p that is not an item (a client's callback thread). */
static void watchdog_describe_holder(struct pool *p, char *buf, size_t size) {
        struct worker *w;

        snprintf(buf, size, "clients' callbacks");
        list_for_each_entry(w, &p->busy_list, entry)
                if (w->current && w->current->ops->describe) {
                        w->current->ops->describe(w, buf, size);
                        return;
                }
}

/* The pool's name in the journal's CMWQ_POOL=: cpu0, cpu0-highpri, unbound, unbound-highpri. */
static void watchdog_pool_field(const struct pool *p, char *buf, size_t size) {
        if (pool_is_unbound(p))
                snprintf(buf, size, "unbound%s", p->highpri ? "-highpri" : "");
        else
                snprintf(buf, size, "cpu%d%s", p->cpu, p->highpri ? "-highpri" : "");
}

static void watchdog_report(struct core *c, struct pool *p, uint64_t stalled_usec) {
        struct item *waiting = NULL, *holder;
        struct pool_work *work;
        struct pwq *pwq = NULL;
        char pool_name[64], who[256], pool_field[32];
        struct log_fields f = {};

        /* Who waits: the first item on the worklist, else the first queue
         * held back. */
        list_for_each_entry(work, &p->worklist, entry)
                if ((waiting = item_from_work(work)))
                        break;
        if (!waiting && (pwq = watchdog_first_inactive(c, p)))
                waiting = list_first_entry(&pwq->inactive, struct item, work.entry);
        holder = watchdog_oldest_running(p, pwq);
        watchdog_describe_holder(p, who, sizeof(who));

        watchdog_describe_pool(p, pool_name, sizeof(pool_name));
        /* The line is about the pool, and the queue and item that wait. */
        watchdog_pool_field(p, pool_field, sizeof(pool_field));
        if (waiting)
                f = *LOG_FIELDS_ITEM(waiting);
        f.pool = pool_field;
        f.has_cpu = !pool_is_unbound(p);
        f.cpu = (unsigned) p->cpu;
        if (!waiting)
                /* Only clients' callbacks wait: they are not counted per queue. */
                log_fields_errno(LOG_WARNING, 0, &f,
                                 "Watchdog: %s has had callbacks waiting and made no progress for %" PRIu64 " s: "
                                 "%s holds it", pool_name, stalled_usec / USEC_PER_SEC, who);
        else if (holder)
                log_fields_errno(LOG_WARNING, 0, &f,
                                 "Watchdog: %s has had work waiting and made no progress for %" PRIu64 " s: "
                                 "item %" PRIu64 " of workqueue %s (%s) holds it, running for %" PRIu64 " s; "
                                 "item %" PRIu64 " of workqueue %s waits",
                                 pool_name, stalled_usec / USEC_PER_SEC, holder->id, item_wq_name(holder),
                                 holder->argv[0], (now_usec(CLOCK_REALTIME) - item_ran(holder)->started_usec) / USEC_PER_SEC,
                                 waiting->id, item_wq_name(waiting));
        else if (!list_empty(&p->busy_list)) {
                log_fields_errno(LOG_WARNING, 0, &f,
                                 "Watchdog: %s has had work waiting and made no progress for %" PRIu64 " s: "
                                 "%s holds it; item %" PRIu64 " of workqueue %s waits",
                                 pool_name, stalled_usec / USEC_PER_SEC, who, waiting->id, item_wq_name(waiting));
        }
        else
                log_fields_errno(LOG_WARNING, 0, &f,
                                 "Watchdog: %s has had work waiting and made no progress for %" PRIu64 " s: "
                                 "item %" PRIu64 " of workqueue %s (%s) cannot be started, queued %" PRIu64 " s ago",
                                 pool_name, stalled_usec / USEC_PER_SEC, waiting->id, item_wq_name(waiting),
                                 waiting->argv[0], (now_usec(CLOCK_REALTIME) - waiting->queued_usec) / USEC_PER_SEC);
        if (waiting && waiting->wq)
                waiting->wq->stats.watchdog++;
}

static void watchdog_check_pool(struct core *c, struct pool *p, uint64_t now, uint64_t *next) {
        uint64_t threshold = c->config.watchdog_usec, start, deadline;

        if (list_empty(&p->worklist) && !watchdog_first_inactive(c, p)) {
                p->watchdog_since_usec = 0;
                return;
        }
        if (!p->watchdog_since_usec)
                p->watchdog_since_usec = now;
        start = MAX(p->last_progress_usec, p->watchdog_since_usec);
        if (p->watchdog_reported_usec == start) {
                /* Reported: look again in case it moves and stalls anew. */
                *next = MIN(*next, now + threshold);
                return;
        }
        deadline = start + threshold;
        if (deadline > now) {
                *next = MIN(*next, deadline);
                return;
        }
        watchdog_report(c, p, now - start);
        p->watchdog_reported_usec = start;
        *next = MIN(*next, now + threshold);
}

static void watchdog_timer_fired(evutil_socket_t fd, short what, void *userdata) {
        struct core *c = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC), next = UINT64_MAX;

        for (size_t n = 0; n < core_nr_pools(c); n++)
                watchdog_check_pool(c, core_pool_at(c, n), now, &next);
        if (next != UINT64_MAX)
                watchdog_arm(c, next - now);
}

int core_watchdog_init(struct core *c) {
        if (!c->base || c->config.watchdog_usec == WATCHDOG_DISABLED)
                return 0;
        c->watchdog_timer = evtimer_new(c->base, watchdog_timer_fired, c);
        return c->watchdog_timer ? 0 : -ENOMEM;
}

void core_watchdog_done(struct core *c) {
        if (c->watchdog_timer)
                event_free(c->watchdog_timer);
        c->watchdog_timer = NULL;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client: the library's pools of worker threads, after the kernel's
 * worker pools.
 *
 * A pool per CPU and priority for the bound queues, one per priority for the
 * unbound ones (struct client_work's pools).  A pool starts, wakes or asks
 * cmwqd for a worker while it has an item it may start (work_pool_kick());
 * a worker waits for its grant (bound) or its start (unbound), takes items
 * back to back, honouring max_active, freezing and non-reentrancy, runs
 * them (run_one()), and ends once the pool has too many idle threads (the
 * kernel's too_many_workers()).  The state of the items themselves and the
 * API that queues them are client-work.c's, how a bound worker talks to
 * cmwqd is work-shm.c's: this file is what runs the callbacks.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pool-policy.h"
#include "work-internal.h"

__thread struct work_thread *work_self;

/* The thread that may push @p's demand lazily: the calling worker thread
 * if it holds @p's CPU itself, so that the daemon acts on the demand only
 * when it stops holding it, which it sees at once -- unless it runs on a
 * grant it lingered on (cmwqd may not know it runs). */
static const struct work_thread *demand_lazy_for(const struct work_pool *p) {
        return work_self && work_self->pool == p && work_self->state == THREAD_GRANTED && !work_self->resumed
                       ? work_self
                       : NULL;
}

static void *work_thread_main(void *userdata);

/* A high-priority pool's thread runs at the kernel's HIGHPRI_NICE_LEVEL
 * (POOL_POLICY_HIGHPRI_NICE), or as close to it as this process may go (RLIMIT_NICE): never at
 * more priority than the process could take itself. */
static void thread_raise_priority(void) {
        struct rlimit rl;
        int nice = POOL_POLICY_HIGHPRI_NICE;

        if (setpriority(PRIO_PROCESS, 0, nice) == 0)
                return;
        if (getrlimit(RLIMIT_NICE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur <= 20)
                return;
        nice = 20 - (int) (rl.rlim_cur > 40 ? 40 : rl.rlim_cur);
        (void) setpriority(PRIO_PROCESS, 0, nice);
}

void thread_free(struct work_thread *t) {
        pthread_cond_destroy(&t->cond);
        pthread_mutex_destroy(&t->lock);
        free(t);
}

/* Joins the reaped threads that have returned and frees their slots.  Work
 * lock held: they take it no more once they are on the list. */
static void threads_collect_exited(struct client_work *cw) {
        for (struct work_thread **pt = &cw->exited; *pt;) {
                struct work_thread *t = *pt;

                if (!__atomic_load_n(&t->exited, __ATOMIC_ACQUIRE)) {
                        pt = &t->next;
                        continue;
                }
                *pt = t->next;
                pthread_join(t->thread, NULL);
                cw->threads[t->slot] = NULL;
                cw->nr_live--;
                thread_free(t);
        }
}

static struct work_thread *thread_new(struct client_work *cw, struct work_pool *p) {
        struct work_thread *t;
        pthread_attr_t attr;
        pthread_condattr_t ca;
        int r;

        threads_collect_exited(cw);
        if (cw->nr_live >= WORK_THREADS_MAX)
                return NULL;
        t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        t->cw = cw;
        t->pool = p;
        t->state = THREAD_STARTING;
        t->credits_wait = -1;
        wlist_init(&t->scheduled);
        pthread_mutex_init(&t->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);       /* for the idle timeout */
        pthread_cond_init(&t->cond, &ca);
        pthread_condattr_destroy(&ca);

        pthread_attr_init(&attr);
        if (p->cpu >= 0) {
                /* Bound workers run on their CPU only, from the start. */
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(p->cpu, &set);
                pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
        }
        r = pthread_create(&t->thread, &attr, work_thread_main, t);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                thread_free(t);
                return NULL;
        }
        t->next = p->threads;
        p->threads = t;
        p->nr_threads++;
        cw->nr_live++;
        return t;
}

/* Items of @wq running on threads of @p (a bound queue's items on one CPU
 * all go to one pool: its priority's). */
static unsigned work_pool_active_of(const struct work_pool *p, const struct cmwq_workqueue *wq) {
        unsigned n = 0;

        for (const struct work_thread *t = p->threads; t; t = t->next)
                if (t->current && t->current_wq == wq)
                        n++;
        return n;
}

/* Items of @wq waiting in unbound @p that could start but for max_active,
 * counted up to @cap. */
static unsigned work_pool_queued_of(const struct work_pool *p, const struct cmwq_workqueue *wq, unsigned cap) {
        unsigned n = 0;

        if (wq_frozen(wq))
                return 0;
        for (const struct cmwq_work *w = p->pending._next; w != &p->pending && n < cap; w = w->_next)
                if (w->_wq == wq)
                        n++;
        return n;
}

/* Brings unbound @wq's credits (entry @e) in line with what it runs and
 * could start: asks for what it could use, gives back what it holds beyond
 * that and beyond cmwqd's limit, but never what its running callbacks use.
 * Work lock held. */
static void work_credits_settle(struct client_work *cw, struct work_pool *p, struct cmwq_workqueue *wq, int e) {
        unsigned max = wq_max_active(wq);
        unsigned active = wq->cb_active, held = work_credits_held(cw, e), limit = work_credits_limit(cw, e);
        unsigned want = active >= max ? active : active + work_pool_queued_of(p, wq, max - active);
        unsigned keep = want < limit ? want : limit;

        if (keep < active)
                keep = active;
        work_credits_tell(cw, e, want, held > keep ? held - keep : 0);
}

/* Every credits entry of @p's queues, settled: a thread of @p found
 * nothing to run.  Returns whether cmwqd has yet to read what one of them
 * said last: a grant made on what it said before may cross it, and nobody
 * would give that back, so the caller looks again a little later. */
static bool work_credits_settle_pool(struct client_work *cw, struct work_pool *p) {
        uint32_t head = __atomic_load_n(&cw->shm->sq_head, __ATOMIC_ACQUIRE);
        bool unread = false;

        for (unsigned e = 0; e < CMWQ_SHM_CREDIT_QUEUES; e++) {
                struct cmwq_workqueue *wq = cw->credits[e].wq;

                if (!wq || work_pool_for(cw, wq, -1) != p)
                        continue;
                work_credits_settle(cw, p, wq, (int) e);
                if ((int32_t) (cw->credits[e].told_tail - head) > 0)
                        unread = true;
        }
        return unread;
}

/* Whether unbound @p has more threads than its queues' credits could run
 * at once, with POOL_POLICY_IDLE_KEEP idle ones to spare, while other
 * clients want the credits too (cmwqd limits each client to its fair part
 * then): an idle thread beyond what it holds waits for nothing.  Kept for
 * the idle timeout, each process's threads would stay at the most it ever
 * ran, and across processes they would add up past the max_active that
 * bounds what runs (issue 11).  Without contention the usual policy holds.
 * Only where cmwqd deals credits, and not while an item of a queue without
 * them (refused, or past the entries) waits: those are counted by this
 * process alone.  Work lock held. */
static bool work_unbound_too_many(const struct client_work *cw, const struct work_pool *p) {
        unsigned usable = POOL_POLICY_IDLE_KEEP;
        bool contended = false;

        if (!cw->has_credits || p->nr_idle <= POOL_POLICY_IDLE_KEEP)
                return false;
        for (unsigned e = 0; e < CMWQ_SHM_CREDIT_QUEUES; e++) {
                const struct cmwq_workqueue *wq = cw->credits[e].wq;
                unsigned held, limit;

                if (!wq || work_pool_for(cw, wq, -1) != p)
                        continue;
                limit = work_credits_limit(cw, (int) e);
                if (limit > 0 && limit < wq_max_active(wq))     /* 0: not told yet */
                        contended = true;
                held = work_credits_held(cw, (int) e);
                usable += held > wq->cb_active ? held : wq->cb_active;
        }
        if (!contended)
                return false;
        for (const struct work_thread *t = p->threads; t; t = t->next)
                if (t->current && t->current_wq->cb_credits <= 0)
                        usable++;
        for (const struct cmwq_work *w = p->pending._next; w != &p->pending; w = w->_next)
                if (w->_wq->cb_credits <= 0)
                        return false;
        return p->nr_threads > usable;
}

/* How many callbacks of unbound @wq may run at once in this process: its
 * max_active, and no more than the credits it holds where cmwqd deals
 * them.  Short of credits, it asks for more, and a thread is to wait for
 * them (cw->credits_short). */
static unsigned work_unbound_allowed(struct client_work *cw, struct work_pool *p, struct cmwq_workqueue *wq,
                                     unsigned max) {
        int e = work_credits_entry(cw, wq);
        unsigned held;

        if (e < 0)
                return max;
        if (__atomic_load_n(&cw->shm->credits[e].refused, __ATOMIC_ACQUIRE)) {
                wq->cb_credits = -1;
                cw->credits[e].wq = NULL;
                return max;
        }
        held = work_credits_held(cw, e);
        if (wq->cb_active < held || wq->cb_active >= max)
                return held < max ? held : max;
        work_credits_settle(cw, p, wq, e);
        if (!cw->credits[e].waiter)
                cw->credits_short |= UINT64_C(1) << e;
        return held;
}

static bool work_unbound_may_start(struct client_work *cw, struct work_pool *p, struct cmwq_workqueue *wq) {
        return wq->cb_active < work_unbound_allowed(cw, p, wq, wq_max_active(wq));
}

/* The next item @p may start, FIFO, honouring max_active: per queue for
 * unbound (across every client, with credits), per queue and CPU for bound
 * (as the kernel's per-pwq limit).
 *
 * Bound, enforced here, not in the daemon: the daemon grants a thread its
 * CPU, not an item, and never sees the items; and max_active of a client's
 * queue only limits that client's own items -- what protects the other
 * clients (the CPU's concurrency level) is the daemon's grants, which this
 * does not touch. */
static struct cmwq_work *work_pool_next(struct client_work *cw, struct work_pool *p) {
        /* What lets an item start is its queue's alone: a queue that can
         * start nothing is asked once per scan, not once per item (a
         * backlog of one queue short of credits made this quadratic). */
        uint64_t scan = ++cw->next_scan;

        for (struct cmwq_work *w = p->pending._next; w != &p->pending; w = w->_next) {
                struct cmwq_workqueue *wq = w->_wq;
                unsigned max = wq_max_active(wq);

                if (wq->cb_blocked_scan == scan)
                        continue;
                if (wq_frozen(wq) ||
                    (p->cpu < 0 && wq->cb_active >= work_unbound_allowed(cw, p, wq, max)) ||
                    (p->cpu >= 0 && work_pool_active_of(p, wq) >= max)) {
                        wq->cb_blocked_scan = scan;
                        continue;
                }
                return w;
        }
        return NULL;
}

/* An idle thread of unbound @p waits for each entry short of credits, and
 * runs its items once cmwqd grants them; with no idle thread, one is made
 * (it finds nothing to run, goes idle, and is picked then).  Work lock held. */
static void work_credits_wait(struct client_work *cw, struct work_pool *p) {
        struct work_thread *t;

        for (unsigned e = 0; e < CMWQ_SHM_CREDIT_QUEUES; e++) {
                struct work_credits *cr = &cw->credits[e];

                if (!(cw->credits_short & (UINT64_C(1) << e)))
                        continue;
                if (!cr->wq || cr->waiter) {
                        cw->credits_short &= ~(UINT64_C(1) << e);
                        continue;
                }
                if (work_pool_for(cw, cr->wq, -1) != p)
                        continue;
                if (!work_pool_queued_of(p, cr->wq, 1)) {
                        /* Taken, cancelled or frozen since: a waiter would
                         * sleep until a grant nobody asked for. */
                        cw->credits_short &= ~(UINT64_C(1) << e);
                        continue;
                }
                for (t = p->threads; t; t = t->next)
                        if (t->state == THREAD_IDLE)
                                break;
                if (!t) {
                        if (p->nr_threads < WORK_UNBOUND_THREADS_MAX && !p->demanding) {
                                p->demanding = true;
                                if (!thread_new(cw, p))
                                        p->demanding = false;
                        }
                        return;
                }
                cw->credits_short &= ~(UINT64_C(1) << e);
                cr->waiter = t;
                t->state = THREAD_DEMANDING;
                p->nr_idle--;
                pthread_mutex_lock(&t->lock);
                /* Granted since it was found short: it wakes at once.  One
                 * read: a grant between two would be slept through. */
                uint32_t granted = work_credits_granted(cw, (int) e);

                t->credits_seen = cr->wq->cb_active < granted - cr->returned ? granted - 1 : granted;
                t->credits_wait = (int) e;
                pthread_cond_signal(&t->cond);
                pthread_mutex_unlock(&t->lock);
        }
}

/* Bound @p needs a thread and has none idle: an idle thread of another
 * CPU's pool of its priority goes to @p rather than a new one being made,
 * taken from the pool that has the most idle.  Also from one with work
 * waiting (its idle threads wait their turn to demand, one at a time):
 * spared those, a process whose items wait on every CPU moved no thread
 * at all (tests/bench/README.md, session 15).  The kernel keeps each
 * pool's workers; a process's CPUs reach their peaks of callbacks blocked
 * at once at different times, and kept per CPU its threads would be the
 * sum of those peaks.  The thread sleeps on: pinned to @p's CPU from here,
 * it demands that CPU (CMWQ_SHM_OP_MOVE) and wakes with the grant.  Work
 * lock held; false: nothing to take (or cmwqd takes no moves). */
static bool work_pool_take_idle(struct client_work *cw, struct work_pool *p) {
        struct work_thread **from_link = NULL, *t;
        struct work_pool *from = NULL;
        unsigned most = 0;
        cpu_set_t set;

        if (!cw->can_move || p->cpu > (int) CMWQ_SHM_MOVE_CPU_MAX)
                return false;
        for (unsigned cpu = 0; cpu < cw->nr_cpus; cpu++) {
                struct work_pool *q = &cw->pools[cpu * 2 + p->highpri];
                struct work_thread **first = NULL;
                unsigned idle = 0;

                if (q == p)
                        continue;
                for (struct work_thread **pt = &q->threads; *pt; pt = &(*pt)->next)
                        if ((*pt)->state == THREAD_IDLE && idle++ == 0)
                                first = pt;
                if (idle > most) {
                        most = idle;
                        from_link = first;
                        from = q;
                }
        }
        if (!from)
                return false;
        t = *from_link;
        CPU_ZERO(&set);
        CPU_SET(p->cpu, &set);
        if (sched_setaffinity(t->tid, sizeof(set), &set) < 0)
                return false;
        *from_link = t->next;
        from->nr_threads--;
        t->pool = p;
        t->next = p->threads;
        p->threads = t;
        p->nr_threads++;
        t->state = THREAD_DEMANDING;
        work_ring_push(cw, CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(t->slot, p->cpu), demand_lazy_for(p));
        return true;
}

/* Starts or asks for workers while @p has work.  Work lock held. */
void work_pool_kick(struct client_work *cw, struct work_pool *p) {
        struct work_thread *t;

        if (cw->stopping || cw->dead)
                return;
        if (!work_pool_next(cw, p)) {
                if (p->cpu < 0 && cw->credits_short)
                        work_credits_wait(cw, p);
                return;
        }

        if (p->cpu < 0) {
                /* A thread between two items takes the next itself (it
                 * looks under this lock before it goes idle): another is
                 * woken or made only when every other one runs an item.
                 * Without this a flood of short items grows a crowd of
                 * threads that then queue for the work lock.  Each thread
                 * that takes an item kicks again, so a burst of blocking
                 * items still gets a thread each, one after the other. */
                for (t = p->threads; t; t = t->next)
                        if (t != work_self && t->state == THREAD_GRANTED && !t->current)
                                return;
                if (p->nr_idle > 0) {
                        for (t = p->threads; t; t = t->next)
                                if (t->state == THREAD_IDLE) {
                                        t->state = THREAD_GRANTED;
                                        p->nr_idle--;
                                        pthread_mutex_lock(&t->lock);
                                        t->grant = true;
                                        pthread_cond_signal(&t->cond);
                                        pthread_mutex_unlock(&t->lock);
                                        return;
                                }
                }
                if (p->nr_threads < WORK_UNBOUND_THREADS_MAX && !p->demanding) {
                        p->demanding = true;    /* one start at a time */
                        if (!thread_new(cw, p))
                                p->demanding = false;
                }
                return;
        }

        /* The kernel's idle worker: the thread that kept its grant runs the
         * work at once, without asking cmwqd.  Taken already, it runs every
         * item the pool has; revoked, it asks for the CPU itself once woken. */
        t = p->lingering;
        if (t && t != work_self) {
                uint32_t *word = &cw->shm->slots[t->slot].linger;
                uint32_t was = CMWQ_SHM_LINGER_IDLE;

                if (__atomic_compare_exchange_n(word, &was, CMWQ_SHM_LINGER_TAKEN, false, __ATOMIC_SEQ_CST,
                                                __ATOMIC_ACQUIRE) ||
                    was != CMWQ_SHM_LINGER_TAKEN)
                        work_futex_wake_all(word);
                return;
        }

        if (p->demanding)
                return;
        for (t = p->threads; t; t = t->next)
                if (t->state == THREAD_IDLE) {
                        t->state = THREAD_DEMANDING;
                        p->demanding = true;
                        work_ring_push(cw, CMWQ_SHM_OP_DEMAND, t->slot, demand_lazy_for(p));
                        return;
                }
        p->demanding = true;
        /* Even while cmwqd refuses new threads: a moved one is not new. */
        if (work_pool_take_idle(cw, p))
                return;
        if (p->retry_usec > mono_usec()) {
                p->demanding = false;
                return;         /* the timer thread kicks it then */
        }
        p->retry_usec = 0;
        if (!thread_new(cw, p))
                p->demanding = false;
}

/* Runs @w on @t.  Work lock held; dropped around the function. */
static void run_one(struct client_work *cw, struct work_thread *t, struct cmwq_work *w) {
        struct cmwq_workqueue *wq = w->_wq;

        w->_state &= ~WORK_PENDING;
        w->_state |= WORK_RUNNING;
        inflight_del(w);
        w->_running = t;
        w->_nr_started++;
        wq->cb_active++;
        t->current = w;
        t->current_wq = wq;
        t->current_seq = w->_queued_seq;
        pthread_mutex_unlock(&cw->lock);

        /* The completion records cmwqd reads: this thread's alone. */
        if (t->pool->cpu >= 0) {
                thread_report_run_start(cw, t);
                __atomic_add_fetch(&cw->shm->slots[t->slot].started, 1, __ATOMIC_RELEASE);
        }
        w->func(w);
        pthread_mutex_lock(&cw->lock);

        if (t->pool->cpu >= 0)
                __atomic_add_fetch(&cw->shm->slots[t->slot].finished, 1, __ATOMIC_RELAXED);
        t->current = NULL;
        wq->cb_active--;
        if (wq->cb_credits > 0)
                work_credits_settle(cw, work_pool_for(cw, wq, -1), wq, wq->cb_credits - 1);
        if (wq_frozen(wq))
                work_freeze_answer_locked(cw);
        w->_nr_finished++;
        w->_running = NULL;
        w->_state &= ~WORK_RUNNING;
        t->current_wq = NULL;
        flushers_instance_done(cw, wq, t->current_seq);
        /* Only for a thread that waits on this item or on the queue's
         * emptiness: a flush of the queue is told above, once. */
        if (cw->nr_done_waiters > 0)
                pthread_cond_broadcast(&cw->done);
}

/* Items parked behind @t's last item go back to the head of their own
 * pools, in order, when their queue is frozen (@all: every one): they wait
 * there.  Their own: an item of a bound queue parked behind an unbound
 * thread, or the other way round, waits under its own queue's rules (an
 * unbound pool asks credits for its queues; a bound one is its CPU's). */
static void thread_unpark(struct client_work *cw, struct work_thread *t, bool all) {
        for (struct cmwq_work *w = t->scheduled._prev, *prev; w != &t->scheduled; w = prev) {
                struct work_pool *own = work_pool_for(cw, w->_wq, w->_cpu);

                prev = w->_prev;
                if (!all && !wq_frozen(w->_wq))
                        continue;
                wlist_del(w);
                wlist_add_tail(w, own->pending._next);
                /* @t's own pool is kicked when @t is done with it. */
                if (own != t->pool)
                        work_pool_kick(cw, own);
        }
}

/* Takes the next item for @t: its parked ones first, then its pool's.
 * Non-reentrancy: an item running elsewhere is parked behind that thread. */
static struct cmwq_work *thread_take(struct work_thread *t) {
        struct cmwq_work *w;

        for (;;) {
                if (!wlist_empty(&t->scheduled)) {
                        w = t->scheduled._next;
                        wlist_del(w);
                        return w;
                }
                w = work_pool_next(t->cw, t->pool);
                if (!w)
                        return NULL;
                wlist_del(w);
                if (w->_running && w->_running != t) {
                        wlist_add_tail(w, &((struct work_thread *) w->_running)->scheduled);
                        continue;
                }
                return w;
        }
}

static bool thread_stopped(struct work_thread *t) {
        return __atomic_load_n(&t->stop, __ATOMIC_ACQUIRE);
}

/* Too many idle threads in @p for what it runs (the kernel's
 * too_many_workers()).  Work lock held. */
static bool work_pool_too_many_idle(const struct work_pool *p) {
        unsigned idle = 0, busy = 0;

        for (const struct work_thread *t = p->threads; t; t = t->next)
                if (t->state == THREAD_IDLE)
                        idle++;
                else if (t->state != THREAD_DEAD)
                        busy++;
        return pool_policy_too_many_idle(idle, busy);
}

enum thread_wait {
        THREAD_WAIT_GRANTED,
        THREAD_WAIT_STOPPED,
        THREAD_WAIT_TIMED_OUT,          /* idle for the idle timeout */
        THREAD_WAIT_RECHECK,            /* unbound: time to look at its pool's credits again */
};

/* Waits for the daemon's next grant in the thread's slot (bound), or to be
 * started (unbound), or for a stop.  An idle thread of a pool that has more
 * than the threads it always keeps waits at most the idle timeout, then
 * looks whether it is one too many; in a pool down to those, threads wait
 * without a timeout, so that an idle client is not woken up.  Work lock
 * held, dropped meanwhile. */
static enum thread_wait thread_wait_grant(struct client_work *cw, struct work_thread *t) {
        bool timed = t->state == THREAD_IDLE && t->pool->nr_threads > POOL_POLICY_IDLE_KEEP;
        uint64_t deadline = timed ? mono_usec() + cw->idle_timeout_usec : 0;
        /* Its pool gave credits back or asked, and cmwqd has not read it:
         * a grant may cross it (work_credits_settle_pool()). */
        bool recheck = t->state == THREAD_IDLE && t->credits_recheck, idle_timed = timed;
        uint64_t recheck_at = recheck ? mono_usec() + WORK_CREDITS_RECHECK_USEC : 0;
        enum thread_wait r = THREAD_WAIT_GRANTED;
        bool bound = t->pool->cpu >= 0;         /* once unlocked, t->pool may change (to a bound one) */

        pthread_mutex_unlock(&cw->lock);
        if (bound) {
                uint32_t *word = &cw->shm->slots[t->slot].grant;

                for (;;) {
                        uint32_t g = __atomic_load_n(word, __ATOMIC_ACQUIRE);
                        struct timespec left;
                        uint64_t now;

                        if (thread_stopped(t))
                                break;
                        if (g != t->seen_grant) {
                                t->seen_grant = g;
                                thread_report_grant(cw, t);
                                break;
                        }
                        if (!timed) {
                                work_futex_wait(word, g, NULL);
                                continue;
                        }
                        now = mono_usec();
                        if (now >= deadline) {
                                r = THREAD_WAIT_TIMED_OUT;
                                break;
                        }
                        left = timespec_from_usec(deadline - now);
                        work_futex_wait(word, g, &left);
                }
        } else {
                struct timespec until = timespec_from_usec(recheck && (!timed || recheck_at < deadline) ? recheck_at
                                                                                                   : deadline);

                if (recheck) {
                        timed = true;
                        t->credits_recheck = false;
                }
                pthread_mutex_lock(&t->lock);
                while (!t->grant && !t->stop && r != THREAD_WAIT_TIMED_OUT)
                        if (t->credits_wait >= 0) {
                                /* cmwqd grants credits on the entry's word. */
                                const struct cmwq_shm_credits *cr = &cw->shm->credits[t->credits_wait];
                                uint32_t seen = t->credits_seen;

                                /* A tick, not forever: a stop or a forgotten
                                 * queue wakes it without moving the word. */
                                const struct timespec tick = { 0, 100 * 1000 * 1000 };

                                pthread_mutex_unlock(&t->lock);
                                if (__atomic_load_n(&cr->granted, __ATOMIC_ACQUIRE) == seen &&
                                    !__atomic_load_n(&cr->refused, __ATOMIC_ACQUIRE))
                                        work_futex_wait((uint32_t *) &cr->granted, seen, &tick);
                                pthread_mutex_lock(&t->lock);
                                if (__atomic_load_n(&cr->granted, __ATOMIC_ACQUIRE) != seen ||
                                    __atomic_load_n(&cr->refused, __ATOMIC_ACQUIRE))
                                        t->grant = true;
                        } else if (!timed)
                                pthread_cond_wait(&t->cond, &t->lock);
                        else if (pthread_cond_timedwait(&t->cond, &t->lock, &until) == ETIMEDOUT)
                                r = THREAD_WAIT_TIMED_OUT;
                if (t->grant) {
                        t->grant = false;
                        r = THREAD_WAIT_GRANTED;
                } else if (r == THREAD_WAIT_TIMED_OUT && recheck && (!idle_timed || mono_usec() < deadline))
                        r = THREAD_WAIT_RECHECK;
                pthread_mutex_unlock(&t->lock);
        }
        if (thread_stopped(t))
                r = THREAD_WAIT_STOPPED;
        pthread_mutex_lock(&cw->lock);
        return r;
}

enum linger_end {
        LINGER_NOT,             /* it did not linger, or no longer: its grant goes back as usual */
        LINGER_TAKEN,           /* woken for an item of its pool: it runs it on the same grant */
        LINGER_REVOKED,         /* cmwqd took the grant back for other work on its CPU */
};

/* After its last item, bound @t keeps its grant up to cw->linger_usec,
 * asleep on its slot's linger word (proto/shm.h), so that the next item of
 * its pool starts on it at once (work_pool_kick()).  Not when asked to
 * yield, when other work ran on the CPU during this grant (cmwqd said so
 * in the word), or when another thread of the pool lingers already.  Work
 * lock held, dropped meanwhile. */
static enum linger_end thread_linger(struct client_work *cw, struct work_thread *t) {
        struct work_pool *p = t->pool;
        uint32_t *word = &cw->shm->slots[t->slot].linger;
        uint32_t was = CMWQ_SHM_LINGER_NONE;
        uint64_t deadline;

        if (!cw->linger_usec || p->lingering || cw->stopping || !wlist_empty(&t->scheduled) ||
            thread_yield_asked(cw, t))
                return LINGER_NOT;
        /* From NONE, or from TAKEN that cmwqd has not looked at: either way
         * nothing else started on the CPU during this grant. */
        if (!__atomic_compare_exchange_n(word, &was, CMWQ_SHM_LINGER_IDLE, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE) &&
            (was != CMWQ_SHM_LINGER_TAKEN ||
             !__atomic_compare_exchange_n(word, &was, CMWQ_SHM_LINGER_IDLE, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)))
                return LINGER_NOT;
        p->lingering = t;
        pthread_mutex_unlock(&cw->lock);

        deadline = mono_usec() + cw->linger_usec;
        for (;;) {
                uint64_t now = mono_usec();
                struct timespec left;

                if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != CMWQ_SHM_LINGER_IDLE || thread_stopped(t) ||
                    now >= deadline)
                        break;
                left = timespec_from_usec(deadline - now);
                work_futex_wait(word, CMWQ_SHM_LINGER_IDLE, &left);
        }

        pthread_mutex_lock(&cw->lock);
        p->lingering = NULL;
        was = CMWQ_SHM_LINGER_IDLE;
        if (__atomic_compare_exchange_n(word, &was, CMWQ_SHM_LINGER_NONE, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
                return LINGER_NOT;      /* nothing came */
        /* TAKEN stays until cmwqd looks: it tells that this thread runs
         * although its switches may not have been read.  BARRED, cmwqd
         * looked before it ran: the items are still this thread's. */
        if (was == CMWQ_SHM_LINGER_TAKEN || was == CMWQ_SHM_LINGER_BARRED)
                return LINGER_TAKEN;
        return was == CMWQ_SHM_LINGER_REVOKED ? LINGER_REVOKED : LINGER_NOT;
}

/* Takes @t out of its pool onto the list of threads to join.  Work lock held. */
static void thread_retire(struct client_work *cw, struct work_thread *t) {
        struct work_pool *p = t->pool;

        for (struct work_thread **pt = &p->threads; *pt; pt = &(*pt)->next)
                if (*pt == t) {
                        *pt = t->next;
                        break;
                }
        p->nr_threads--;
        if (p->cpu < 0 && t->state == THREAD_IDLE)
                p->nr_idle--;
        t->state = THREAD_DEAD;
        t->next = cw->exited;
        cw->exited = t;
}

/* Ends @t, idle past the idle timeout: out of its pool now (nothing will
 * pick it), its slot given back to the daemon, then joined and freed by
 * the next thread_new() or at disconnect.  Work lock held; returns without
 * it, and the thread must then return. */
static void thread_reap(struct client_work *cw, struct work_thread *t) {
        struct work_pool *p = t->pool;

        thread_retire(cw, t);
        pthread_mutex_unlock(&cw->lock);

        /* Its IDLE is in the ring before this request: the daemon reads
         * the ring first. */
        if (p->cpu >= 0)
                (void) thread_unregister(cw, t);
        __atomic_store_n(&t->exited, true, __ATOMIC_RELEASE);
}

/* Tells @t to end, whether it waits on its condition or on its slot. */
void thread_stop(struct client_work *cw, struct work_thread *t) {
        pthread_mutex_lock(&t->lock);
        __atomic_store_n(&t->stop, true, __ATOMIC_RELEASE);
        pthread_cond_signal(&t->cond);
        /* Waiting for credits, it sleeps on the entry's word. */
        if (t->credits_wait >= 0 && cw->shm)
                work_futex_wake_all(&cw->shm->credits[t->credits_wait].granted);
        pthread_mutex_unlock(&t->lock);
        /* Only a thread in the table has its slot. */
        if (t->pool->cpu >= 0 && cw->shm && __atomic_load_n(&t->has_slot, __ATOMIC_ACQUIRE)) {
                /* Our own page: moving the word makes a late FUTEX_WAIT
                 * return at once; no grant matters any more. */
                uint32_t *word = &cw->shm->slots[t->slot].grant;

                __atomic_add_fetch(word, 1, __ATOMIC_RELEASE);
                work_futex_wake_all(word);
                /* Lingering, it sleeps on this one. */
                work_futex_wake_all(&cw->shm->slots[t->slot].linger);
        }
}

/* Whether the item parked first behind @t is of an unbound queue whose
 * credits do not let it start now (whichever kind of thread @t is). */
static bool thread_parked_over_credits(struct client_work *cw, const struct work_thread *t) {
        struct cmwq_workqueue *wq;

        if (wlist_empty(&t->scheduled))
                return false;
        wq = t->scheduled._next->_wq;
        return wq_unbound(wq) && !work_unbound_may_start(cw, work_pool_for(cw, wq, -1), wq);
}

/* Ends idle unbound @t if its pool has threads to spare under contention
 * (work_unbound_too_many()).  Not while disconnecting (the stop joins
 * every thread in the pools), nor while @t is to look at its credits again
 * (cmwqd may yet grant on what it said before, and nobody else would give
 * that back): it ends after that look.  Work lock held; returns true
 * without it, and @t must then return. */
static bool thread_spare_ended(struct client_work *cw, struct work_thread *t) {
        struct work_pool *p = t->pool;

        if (cw->stopping || t->credits_recheck || t->state != THREAD_IDLE || !work_unbound_too_many(cw, p))
                return false;
        /* Unless a kick finds it work after all: then it runs that. */
        work_pool_kick(cw, p);
        if (t->state != THREAD_IDLE)
                return false;
        thread_reap(cw, t);
        return true;
}

static void *work_thread_main(void *userdata) {
        struct work_thread *t = userdata;
        struct client_work *cw = t->cw;
        struct work_pool *p = t->pool;
        bool bound = p->cpu >= 0;

        work_self = t;
        t->tid = (pid_t) syscall(SYS_gettid);
        if (p->highpri)
                thread_raise_priority();        /* on Linux, of this thread alone */

        pthread_mutex_lock(&cw->lock);
        /* The lowest free slot: there is one, thread_new() counted us. */
        threads_collect_exited(cw);
        for (t->slot = 0; t->slot < WORK_THREADS_MAX && cw->threads[t->slot]; t->slot++)
                ;
        if (t->slot == WORK_THREADS_MAX) {
                t->state = THREAD_DEAD;
                p->demanding = false;
                pthread_mutex_unlock(&cw->lock);
                return NULL;
        }
        cw->threads[t->slot] = t;
        if (t->slot >= cw->nr_slots)
                cw->nr_slots = t->slot + 1;
        __atomic_store_n(&t->has_slot, true, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&cw->lock);

        if (bound && thread_register(cw, t) < 0) {
                /* Refused (a limit of cmwqd's, most likely): the pool's work
                 * waits for its threads that are registered, and another is
                 * tried after a back-off (the timer thread kicks it). */
                pthread_mutex_lock(&cw->lock);
                p->demanding = false;
                p->retry_ms = p->retry_ms ? (p->retry_ms * 2 < POOL_POLICY_RETRY_MAX_MS ? p->retry_ms * 2
                                                                                   : POOL_POLICY_RETRY_MAX_MS)
                                          : POOL_POLICY_RETRY_MIN_MS;
                p->retry_usec = mono_usec() + p->retry_ms * USEC_PER_MSEC;
                work_timer_wake_locked(cw);
                thread_retire(cw, t);
                __atomic_store_n(&t->exited, true, __ATOMIC_RELEASE);
                pthread_mutex_unlock(&cw->lock);
                return NULL;
        }

        pthread_mutex_lock(&cw->lock);
        if (bound)
                p->retry_ms = 0;
        p->demanding = false;
        if (bound) {
                t->state = THREAD_IDLE;
                work_pool_kick(cw, p);       /* this thread demands if work waits */
        } else {
                /* Started for work: take it at once. */
                t->state = THREAD_GRANTED;
                pthread_mutex_lock(&t->lock);
                t->grant = true;
                pthread_mutex_unlock(&t->lock);
        }

        for (;;) {
                enum thread_wait waited = thread_wait_grant(cw, t);
                struct cmwq_work *w;

                if (waited == THREAD_WAIT_STOPPED || cw->stopping)
                        break;
                /* Idle and bound, it may have gone to another CPU's pool
                 * meanwhile (work_pool_take_idle()). */
                p = t->pool;
                if (waited == THREAD_WAIT_RECHECK) {
                        if (t->state == THREAD_IDLE) {
                                t->credits_recheck = work_credits_settle_pool(cw, p);
                                if (thread_spare_ended(cw, t))
                                        return NULL;
                        }
                        continue;
                }
                if (waited == THREAD_WAIT_TIMED_OUT) {
                        if (t->state == THREAD_IDLE && work_pool_too_many_idle(p)) {
                                thread_reap(cw, t);
                                return NULL;
                        }
                        continue;       /* picked meanwhile, or needed again */
                }

                if (bound) {
                        t->state = THREAD_GRANTED;
                        p->demanding = false;
                } else if (t->credits_wait >= 0) {
                        /* Credits came: it runs what they let start. */
                        cw->credits[t->credits_wait].waiter = NULL;
                        pthread_mutex_lock(&t->lock);
                        t->credits_wait = -1;
                        pthread_mutex_unlock(&t->lock);
                        t->state = THREAD_GRANTED;
                }

        run_items:
                for (;;) {
                        if (cw->stopping)
                                break;
                        thread_unpark(cw, t, false);
                        w = NULL;
                        if (bound && thread_yield_asked(cw, t))
                                /* Other work waits for the CPU, or cmwqd
                                 * stopped counting this grant (a callback
                                 * past the CPU-intensive threshold): no
                                 * further item may run on it, not even one
                                 * parked behind the last (it waits at the
                                 * head of the pool, its twin has ended), so
                                 * that the next counts again, from its own
                                 * start, under a new grant. */
                                thread_unpark(cw, t, true);
                        else if (thread_parked_over_credits(cw, t)) {
                                /* Over its queue's credits: it waits in its
                                 * pool as any item, and is counted there. */
                                thread_unpark(cw, t, true);
                                w = thread_take(t);
                        } else if (!wlist_empty(&t->scheduled)) {
                                /* Parked behind our last item: ours to run. */
                                w = t->scheduled._next;
                                wlist_del(w);
                        } else
                                w = thread_take(t);
                        if (!w)
                                break;
                        /* Keep one demand out while more waits. */
                        work_pool_kick(cw, p);
                        if (bound && (w->_wq->flags & CMWQ_WQ_CPU_INTENSIVE)) {
                                /* It must not hold back the CPU's other
                                 * work: the daemon stops counting this
                                 * grant, which is then given back after
                                 * the item, so that no further item runs
                                 * uncounted on it. */
                                work_ring_push(cw, CMWQ_SHM_OP_INTENSIVE, t->slot, NULL);
                                run_one(cw, t, w);
                                /* Parked behind it: first in line again. */
                                thread_unpark(cw, t, true);
                                break;
                        }
                        run_one(cw, t, w);
                }

                if (bound) {
                        enum linger_end l = thread_linger(cw, t);

                        if (l == LINGER_TAKEN) {
                                t->resumed = true;
                                goto run_items;
                        }
                        t->resumed = false;
                        t->state = THREAD_IDLE;
                        /* Lazy: it waits for its next grant right after,
                         * asleep.  A revoked grant is cmwqd's already. */
                        if (l == LINGER_NOT)
                                work_ring_push(cw, CMWQ_SHM_OP_IDLE, t->slot, t);
                } else {
                        t->state = THREAD_IDLE;
                        p->nr_idle++;
                        /* Credits nothing here can use go back. */
                        if (cw->has_credits)
                                t->credits_recheck = work_credits_settle_pool(cw, p);
                        if (thread_spare_ended(cw, t))
                                return NULL;
                        if (t->state != THREAD_IDLE)
                                continue;       /* its kick found it work */
                }
                work_pool_kick(cw, p);
        }
        t->state = THREAD_DEAD;
        pthread_mutex_unlock(&cw->lock);
        return NULL;
}

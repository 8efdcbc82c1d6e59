/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client: callback work.
 *
 * The kernel's work-item state machine runs here, in the client, under one
 * lock (the work lock): pending lists per CPU pool, non-reentrancy, flush,
 * cancel, delayed work.  What the daemon decides is *when* a worker thread
 * may run on its CPU: each bound worker thread is registered with cmwqd in a
 * slot of the memory shared with it (proto/shm.h), asks for a grant when its
 * pool has work ("demand", an entry in the shared submission ring), sleeps
 * on its slot's futex until the daemon grants it, and once granted runs
 * items back to back until its pool is empty or the daemon asks it to yield
 * (other work waits for that CPU), then gives the grant back ("idle").  No
 * socket message is involved.  The daemon sees it block and wake through
 * perf on its thread id and counts it in the CPU's pool like any worker, so
 * exec items and the callbacks of all clients share the CPU's concurrency
 * level.
 *
 * A pool keeps one demand outstanding while it has pending items: if the
 * granted thread blocks, the daemon starts that demand at once (a
 * concurrency-management wake-up) and a second thread takes the next item.
 *
 * Unbound queues are not concurrency managed (in the kernel neither): their
 * items run on local pools of threads (normal and high priority) without
 * asking the daemon, at most max_active of one queue at once.
 *
 * What concerns only this client's own items is kept here, where the items
 * are: max_active (per CPU for bound queues) and freezing (the daemon says
 * which queues are frozen; their items stay pending).  What protects the
 * other clients -- the CPU's concurrency level -- is the daemon's grants.
 *
 * Lock order: work lock -> connection lock -> a thread's own lock.  Grants
 * come through the shared memory, not the socket; the connection's reader
 * only records freeze notices under the connection lock
 * (client_work_freeze()) and leaves kicking the pools, which takes the work
 * lock, to the manager thread.
 *
 * The module is in three files under that one lock, sharing
 * work-internal.h: this one (the items' state, set-up and tear-down, the
 * manager and timer threads, the cmwq_*work*() API), work-pool.c (the
 * pools and their worker threads) and work-shm.c (the shared-memory
 * protocol's client side).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "pool-policy.h"
#include "work-internal.h"

void client_workqueue_init(struct cmwq_workqueue *wq) {
        wq->inflight._inext = wq->inflight._iprev = &wq->inflight;
}

/* ---- the manager (reader) and the timer ---------------------------------- */

/* @w, pending, will not run: it counts as done, for its queue's flushes
 * too.  Work lock held. */
static void drop_pending_locked(struct client_work *cw, struct cmwq_work *w) {
        wlist_del(w);
        w->_state &= ~WORK_PENDING;
        w->_nr_started++;
        w->_nr_finished++;
        inflight_del(w);
        flushers_instance_done(cw, w->_wq, w->_queued_seq);
}

/* Drops every pending item, and every item parked behind a running one:
 * they will not run.  What waits for them (a flush, a cancel) is woken and
 * finds them done.  Work lock held. */
static void work_drop_pending_locked(struct client_work *cw) {
        for (unsigned i = 0; i < cw->nr_pools; i++) {
                struct work_pool *p = &cw->pools[i];

                while (!wlist_empty(&p->pending)) {
                        drop_pending_locked(cw, p->pending._next);
                }
                for (struct work_thread *t = p->threads; t; t = t->next)
                        while (!wlist_empty(&t->scheduled))
                                drop_pending_locked(cw, t->scheduled._next);
        }
        pthread_cond_broadcast(&cw->done);
}

/* Nothing will grant the pending items any more. */
static void work_connection_lost(struct client_work *cw, int error) {
        pthread_mutex_lock(&cw->lock);
        cw->dead = error;
        work_drop_pending_locked(cw);
        for (unsigned i = 0; i < cw->nr_pools; i++)
                if (cw->pools[i].cpu >= 0)      /* unbound threads need no daemon */
                        for (struct work_thread *t = cw->pools[i].threads; t; t = t->next)
                                thread_stop(cw, t);
        pthread_cond_broadcast(&cw->timer_cond);
        pthread_mutex_unlock(&cw->lock);
}

static void *manager_main(void *userdata) {
        struct client_work *cw = userdata;
        struct cmwq *c = cw->c;
        int dead;

        client_read_forever(c);
        pthread_mutex_lock(&c->lock);
        dead = c->dead;
        pthread_mutex_unlock(&c->lock);
        if (dead < 0)
                work_connection_lost(cw, dead);
        return NULL;
}

static void queue_locked(struct client_work *cw, struct cmwq_workqueue *wq, struct cmwq_work *w, int cpu);
static void timer_fire_locked(struct client_work *cw, struct cmwq_delayed_work *dw);
static void *timer_main(void *userdata);

/* Tells the timer thread that the earliest deadline may have moved, and
 * starts it the first time there is one: a client that never queues
 * delayed work, nor is refused a thread, runs without it (one thread less
 * in each process on the machine).  If it cannot be started now, the next
 * call tries again.  Work lock held. */
void work_timer_wake_locked(struct client_work *cw) {
        if (!cw->timer_started && !cw->stopping &&
            pthread_create(&cw->timer, NULL, timer_main, cw) == 0)
                cw->timer_started = true;
        pthread_cond_broadcast(&cw->timer_cond);
}

static void *timer_main(void *userdata) {
        struct client_work *cw = userdata;

        pthread_mutex_lock(&cw->lock);
        while (!cw->stopping) {
                struct cmwq_delayed_work *dw = cw->timers._tnext;
                uint64_t now = mono_usec(), next = UINT64_MAX;

                /* Pools whose back-off after a refused thread is over. */
                for (unsigned i = 0; i < cw->nr_cpus * 2; i++) {
                        struct work_pool *p = &cw->pools[i];

                        if (!p->retry_usec)
                                continue;
                        if (p->retry_usec <= now) {
                                p->retry_usec = 0;
                                work_pool_kick(cw, p);
                        } else if (p->retry_usec < next)
                                next = p->retry_usec;
                }
                if (dw != &cw->timers && dw->_expires < next)
                        next = dw->_expires;
                if (next == UINT64_MAX) {
                        pthread_cond_wait(&cw->timer_cond, &cw->lock);
                        continue;
                }
                if (next > now) {
                        struct timespec ts = timespec_from_usec(next);

                        pthread_cond_timedwait(&cw->timer_cond, &cw->lock, &ts);
                        continue;
                }
                if (dw == &cw->timers || dw->_expires > now)
                        continue;
                timer_fire_locked(cw, dw);
        }
        pthread_mutex_unlock(&cw->lock);
        return NULL;
}

/* ---- set-up and tear-down ------------------------------------------------- */

/* $@name: seconds, a decimal number, more than 0 (or 0 too, with
 * @zero_ok); @dflt when unset or malformed. */
static uint64_t env_seconds_usec(const char *name, uint64_t dflt, bool zero_ok) {
        const char *v = getenv(name);
        char *end;
        double secs;

        if (!v || !*v)
                return dflt;
        errno = 0;
        secs = strtod(v, &end);
        if (errno || *end || !(secs > 0 || (zero_ok && secs == 0)) || secs > 1e9)
                return dflt;
        if (secs == 0)
                return 0;
        return (uint64_t) (secs * USEC_PER_SEC) ?: 1;
}

static int work_get(struct cmwq *c, struct client_work **ret) {
        struct client_work *cw;
        pthread_condattr_t ca;
        long n;
        int r = 0;

        cw = __atomic_load_n(&c->work, __ATOMIC_ACQUIRE);
        if (cw) {
                *ret = cw;
                return 0;
        }

        pthread_mutex_lock(&c->work_init_lock);
        if (c->work)
                goto done;
        cw = calloc(1, sizeof(*cw));
        n = sysconf(_SC_NPROCESSORS_CONF);
        if (!cw || n <= 0) {
                free(cw);
                r = client_error(-ENOMEM, "out of memory");
                goto done;
        }
        cw->c = c;
        cw->nr_cpus = (unsigned) n;
        cw->nr_pools = cw->nr_cpus * 2 + 2;
        cw->pools = calloc(cw->nr_pools, sizeof(*cw->pools));
        if (!cw->pools) {
                free(cw);
                r = client_error(-ENOMEM, "out of memory");
                goto done;
        }
        for (unsigned i = 0; i < cw->nr_pools; i++) {
                cw->pools[i].cpu = i < cw->nr_cpus * 2 ? (int) (i / 2) : -1;
                cw->pools[i].highpri = i % 2;
                wlist_init(&cw->pools[i].pending);
        }
        cw->timers._tnext = cw->timers._tprev = &cw->timers;
        pthread_mutex_init(&cw->lock, NULL);
        pthread_cond_init(&cw->done, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&cw->timer_cond, &ca);
        pthread_condattr_destroy(&ca);
        cw->doorbell = -1;
        cw->idle_timeout_usec = env_seconds_usec("CMWQ_IDLE_TIMEOUT", POOL_POLICY_IDLE_TIMEOUT_USEC, false);
        r = work_attach(cw);
        /* Only where cmwqd takes a lingering grant back. */
        if (r >= 0 && (cw->shm->features & CMWQ_SHM_FEATURE_LINGER))
                cw->linger_usec = env_seconds_usec("CMWQ_LINGER", WORK_LINGER_USEC, true);
        if (r < 0) {
                free(cw->cpu_map);
                pthread_cond_destroy(&cw->timer_cond);
                pthread_cond_destroy(&cw->done);
                pthread_mutex_destroy(&cw->lock);
                free(cw->pools);
                free(cw);
                goto done;
        }

        /* Published before the threads start: the reader looks it up. */
        __atomic_store_n(&c->work, cw, __ATOMIC_RELEASE);
        if (pthread_create(&cw->manager, NULL, manager_main, cw) == 0)
                cw->manager_started = true;
        else
                r = client_error(-EAGAIN, "cannot start the library's threads");
done:
        if (r >= 0)
                *ret = c->work;
        pthread_mutex_unlock(&c->work_init_lock);
        return r;
}

void client_work_stop(struct cmwq *c) {
        struct client_work *cw = c->work;
        struct work_thread *all = NULL;

        pthread_mutex_lock(&cw->lock);
        cw->stopping = true;
        /* Pending items are dropped, as the header says; a running callback
         * that waits for one (a flush) must not keep the join below waiting
         * for ever. */
        work_drop_pending_locked(cw);
        pthread_cond_broadcast(&cw->timer_cond);
        for (unsigned i = 0; i < cw->nr_slots; i++)
                if (cw->threads[i])
                        thread_stop(cw, cw->threads[i]);
        pthread_mutex_unlock(&cw->lock);

        /* Reaped ones may still be unregistering: the reader is needed. */
        for (struct work_thread *t = cw->exited, *n; t; t = n) {
                n = t->next;
                pthread_join(t->thread, NULL);
                thread_free(t);
        }
        cw->exited = NULL;

        /* Threads created but not yet in the table are on their pool's list. */
        for (unsigned i = 0; i < cw->nr_pools; i++) {
                struct work_pool *p = &cw->pools[i];

                for (struct work_thread *t = p->threads, *n; t; t = n) {
                        n = t->next;
                        /* Racing a thread that registers: tell it again. */
                        thread_stop(cw, t);
                        pthread_join(t->thread, NULL);
                        t->next = all;
                        all = t;
                }
                p->threads = NULL;
        }

        client_wake_reader(c);
        if (cw->manager_started)
                pthread_join(cw->manager, NULL);
        if (cw->timer_started)
                pthread_join(cw->timer, NULL);

        while (all) {
                struct work_thread *t = all;

                all = t->next;
                thread_free(t);
        }
        pthread_cond_destroy(&cw->timer_cond);
        pthread_cond_destroy(&cw->done);
        pthread_mutex_destroy(&cw->lock);
        munmap(cw->shm, sizeof(*cw->shm));
        close(cw->doorbell);
        free(cw->cpu_map);
        free(cw->pools);
        free(cw);
        c->work = NULL;
}

/* ---- the API -------------------------------------------------------------- */

struct work_pool *work_pool_for(const struct client_work *cw, const struct cmwq_workqueue *wq, int cpu) {
        unsigned highpri = (wq->flags & CMWQ_WQ_HIGHPRI) ? 1 : 0;

        if (wq->flags & CMWQ_WQ_UNBOUND)
                return &cw->pools[cw->nr_cpus * 2 + highpri];
        return &cw->pools[cpu * 2 + highpri];
}

static void queue_locked(struct client_work *cw, struct cmwq_workqueue *wq, struct cmwq_work *w, int cpu) {
        struct work_pool *p;

        if (cpu < 0 || (unsigned) cpu >= cw->nr_cpus)
                cpu = sched_getcpu();
        if (cpu < 0 || (unsigned) cpu >= cw->nr_cpus)
                cpu = 0;
        cpu = (int) cw->cpu_map[cpu];
        p = work_pool_for(cw, wq, cpu);

        w->_state |= WORK_PENDING;
        w->_wq = wq;
        w->_conn = wq->c;
        w->_cpu = cpu;
        w->_queued_seq = ++wq->cb_seq;
        w->_nr_queued++;
        inflight_add(wq, w);
        /* Behind what was queued before, even when it runs now: the
         * kernel's __queue_work() puts a running item at the tail of the
         * worklist too, and an ordered queue runs A, B, A for "A, B, A
         * queued while A runs".  Non-reentrancy is thread_take()'s: a
         * thread that takes it while it still runs parks it behind the
         * thread running it (the kernel's assign_work()). */
        wlist_add_tail(w, &p->pending);
        work_pool_kick(cw, p);
}

/* Whether the caller may queue on @wq now (draining, and destroying, let
 * only its own items queue, as the kernel's chained work). */
static bool may_queue(struct cmwq_workqueue *wq, struct cmwq_work *w) {
        if (w->_state & (WORK_PENDING | WORK_TIMER | WORK_CANCELING))
                return false;
        if ((__atomic_load_n(&wq->cb_draining, __ATOMIC_ACQUIRE) > 0 || wq->cb_destroyed) &&
            !(work_self && work_self->current && work_self->current_wq == wq))
                return false;
        return true;
}

/* The connection is gone, or going: the reader saw it end (c->dead) a moment
 * before the manager drops the pending work (cw->dead).  A call that comes
 * after another one reported the loss must not queue what would only be
 * dropped unrun. */
static int work_conn_error(struct client_work *cw) {
        return cw->dead ? cw->dead : __atomic_load_n(&cw->c->dead, __ATOMIC_ACQUIRE);
}

static bool work_conn_dead(struct client_work *cw) {
        return work_conn_error(cw) < 0;
}

/* The work state of @wq's connection, to queue @work on @wq; NULL when
 * either is missing, @work has no function or the state cannot be set up. */
static struct client_work *work_to_queue(struct cmwq_workqueue *wq, const struct cmwq_work *work) {
        struct client_work *cw;

        if (!wq || !work || !work->func || work_get(wq->c, &cw) < 0)
                return NULL;
        return cw;
}

bool cmwq_queue_work_on(int cpu, struct cmwq_workqueue *wq, struct cmwq_work *work) {
        struct client_work *cw = work_to_queue(wq, work);
        bool queued = false;

        if (!cw)
                return false;
        if (cpu < -1 || (cpu >= 0 && (unsigned) cpu >= cw->nr_cpus))
                return false;
        pthread_mutex_lock(&cw->lock);
        if (!work_conn_dead(cw) && !cw->stopping && may_queue(wq, work)) {
                queue_locked(cw, wq, work, cpu);
                queued = true;
        }
        pthread_mutex_unlock(&cw->lock);
        return queued;
}

bool cmwq_queue_work(struct cmwq_workqueue *wq, struct cmwq_work *work) {
        return cmwq_queue_work_on(-1, wq, work);
}

static void timer_add_locked(struct client_work *cw, struct cmwq_workqueue *wq, struct cmwq_delayed_work *dw,
                             uint64_t delay_usec) {
        struct cmwq_delayed_work *pos;
        uint64_t now = mono_usec();

        dw->_twq = wq;
        dw->_tcpu = sched_getcpu();
        /* Not before its time: a delay past the clock's end is never. */
        dw->_expires = delay_usec > UINT64_MAX - now ? UINT64_MAX : now + delay_usec;
        dw->work._state |= WORK_TIMER;
        dw->work._wq = wq;
        dw->work._conn = wq->c;
        for (pos = cw->timers._tnext; pos != &cw->timers && pos->_expires <= dw->_expires; pos = pos->_tnext)
                ;
        dw->_tnext = pos;
        dw->_tprev = pos->_tprev;
        pos->_tprev->_tnext = dw;
        pos->_tprev = dw;
        work_timer_wake_locked(cw);
}

static bool queue_delayed_locked(struct client_work *cw, struct cmwq_workqueue *wq, struct cmwq_delayed_work *dw,
                                 uint64_t delay_usec) {
        if (work_conn_dead(cw) || cw->stopping || !may_queue(wq, &dw->work))
                return false;
        /* Its own items queue delayed work on a queue being destroyed: no
         * timer may outlive the queue, so it runs now, as the destroy
         * does with the delayed work it found (see
         * client_workqueue_destroy_callbacks()). */
        if (delay_usec == 0 || wq->cb_destroyed)
                queue_locked(cw, wq, &dw->work, -1);
        else
                timer_add_locked(cw, wq, dw, delay_usec);
        return true;
}

bool cmwq_queue_delayed_work(struct cmwq_workqueue *wq, struct cmwq_delayed_work *dwork, uint64_t delay_usec) {
        struct client_work *cw = work_to_queue(wq, dwork ? &dwork->work : NULL);
        bool queued;

        if (!cw)
                return false;
        pthread_mutex_lock(&cw->lock);
        queued = queue_delayed_locked(cw, wq, dwork, delay_usec);
        pthread_mutex_unlock(&cw->lock);
        return queued;
}

/* Takes a pending (queued or timed) instance back; it counts as done. */
static bool cancel_locked(struct client_work *cw, struct cmwq_work *w) {
        if (w->_state & WORK_TIMER)
                timers_del(cmwq_to_delayed_work(w));
        else if (w->_state & WORK_PENDING) {
                wlist_del(w);
                w->_state &= ~WORK_PENDING;
                inflight_del(w);
                flushers_instance_done(cw, w->_wq, w->_queued_seq);
        } else
                return false;
        w->_nr_started++;
        w->_nr_finished++;
        pthread_cond_broadcast(&cw->done);
        return true;
}

/* @dw's timer is over, or a flush or destroy cuts it short: it is queued
 * now, or dropped (counted as done, like a cancel) once nothing would run
 * it.  Work lock held. */
static void timer_fire_locked(struct client_work *cw, struct cmwq_delayed_work *dw) {
        if (work_conn_dead(cw) || cw->stopping) {
                (void) cancel_locked(cw, &dw->work);
                return;
        }
        timers_del(dw);
        queue_locked(cw, dw->_twq, &dw->work, dw->_tcpu);
}

bool cmwq_mod_delayed_work(struct cmwq_workqueue *wq, struct cmwq_delayed_work *dwork, uint64_t delay_usec) {
        struct client_work *cw = work_to_queue(wq, dwork ? &dwork->work : NULL);
        bool was;

        if (!cw)
                return false;
        pthread_mutex_lock(&cw->lock);
        if (dwork->work._state & WORK_CANCELING)
                was = false;
        else {
                was = cancel_locked(cw, &dwork->work);
                (void) queue_delayed_locked(cw, wq, dwork, delay_usec);
        }
        pthread_mutex_unlock(&cw->lock);
        return was;
}

/* The callback state of the connection a work item was queued on (the
 * connection, not the queue: the queue may have been destroyed since). */
static struct client_work *work_of(const struct cmwq_work *w) {
        if (!w || !w->_conn)
                return NULL;
        return __atomic_load_n(&w->_conn->work, __ATOMIC_ACQUIRE);
}

bool cmwq_cancel_work(struct cmwq_work *work) {
        struct client_work *cw = work_of(work);
        bool was;

        if (!cw)
                return false;
        pthread_mutex_lock(&cw->lock);
        was = cancel_locked(cw, work);
        pthread_mutex_unlock(&cw->lock);
        return was;
}

bool cmwq_cancel_delayed_work(struct cmwq_delayed_work *dwork) {
        return cmwq_cancel_work(&dwork->work);
}

int cmwq_cancel_work_sync(struct cmwq_work *work) {
        struct client_work *cw = work_of(work);
        bool was;
        int r;

        if (!cw)
                return 0;
        pthread_mutex_lock(&cw->lock);
        work->_state |= WORK_CANCELING;
        was = cancel_locked(cw, work);
        cw->nr_done_waiters++;
        while (work->_state & WORK_RUNNING)
                pthread_cond_wait(&cw->done, &cw->lock);
        cw->nr_done_waiters--;
        /* Queued again by its own function while we waited? */
        (void) cancel_locked(cw, work);
        work->_state &= ~WORK_CANCELING;
        r = cw->dead ? client_lost_error(cw->c, cw->dead) : was;
        pthread_mutex_unlock(&cw->lock);
        return r;
}

int cmwq_cancel_delayed_work_sync(struct cmwq_delayed_work *dwork) {
        return cmwq_cancel_work_sync(&dwork->work);
}

/* With the work lock held (and still held on return). */
static int flush_work_locked(struct client_work *cw, struct cmwq_work *work) {
        uint64_t target;

        if (work->_state & (WORK_PENDING | WORK_TIMER))
                target = work->_nr_started + 1;         /* the pending instance */
        else if (work->_state & WORK_RUNNING)
                target = work->_nr_started;
        else if (work_conn_dead(cw))
                /* Idle now, perhaps because its last queueing was dropped
                 * with the connection: "nothing to wait for" would claim
                 * it ran. */
                return client_lost_error(cw->c, work_conn_error(cw));
        else if (cw->stopping)
                return client_lost_error(cw->c, -ECONNRESET);   /* the same, dropped by cmwq_disconnect() */
        else
                return 0;
        cw->nr_done_waiters++;
        /* Once the connection is lost or being closed (cmwq_disconnect()
         * from another thread, this one a running callback), nothing that
         * is not running will run. */
        while (work->_nr_finished < target && !((cw->dead || cw->stopping) && !(work->_state & WORK_RUNNING)))
                pthread_cond_wait(&cw->done, &cw->lock);
        cw->nr_done_waiters--;
        /* Instances dropped with the connection count as finished, but
         * they did not run: say so. */
        if (cw->dead)
                return client_lost_error(cw->c, cw->dead);
        return cw->stopping ? client_lost_error(cw->c, -ECONNRESET) : 1;
}

int cmwq_flush_work(struct cmwq_work *work) {
        struct client_work *cw = work_of(work);
        int r;

        if (!cw)
                return 0;
        pthread_mutex_lock(&cw->lock);
        r = flush_work_locked(cw, work);
        pthread_mutex_unlock(&cw->lock);
        return r;
}

int cmwq_flush_delayed_work(struct cmwq_delayed_work *dwork) {
        struct client_work *cw = work_of(&dwork->work);
        int r;

        if (!cw)
                return 0;
        pthread_mutex_lock(&cw->lock);
        if (dwork->work._state & WORK_TIMER)
                timer_fire_locked(cw, dwork);
        r = flush_work_locked(cw, &dwork->work);
        pthread_mutex_unlock(&cw->lock);
        return r;
}

bool cmwq_work_pending(const struct cmwq_work *work) {
        struct client_work *cw = work_of(work);
        bool pending;

        if (!cw)
                return false;
        pthread_mutex_lock(&cw->lock);
        pending = work->_state & (WORK_PENDING | WORK_TIMER);
        pthread_mutex_unlock(&cw->lock);
        return pending;
}

bool cmwq_delayed_work_pending(const struct cmwq_delayed_work *dwork) {
        return cmwq_work_pending(&dwork->work);
}

/* The instances of @wq queued up to @seq that have not finished: a pending
 * one, a running one, or both for an item queued again while it runs (on
 * this queue or another). */
static uint64_t flush_count(struct client_work *cw, struct cmwq_workqueue *wq, uint64_t seq) {
        uint64_t n = 0;

        for (struct cmwq_work *w = wq->inflight._inext; w != &wq->inflight; w = w->_inext)
                if (w->_queued_seq <= seq)
                        n++;
        for (unsigned i = 0; i < cw->nr_pools; i++)
                for (const struct work_thread *t = cw->pools[i].threads; t; t = t->next)
                        if (t->current && t->current_wq == wq && t->current_seq <= seq)
                                n++;
        return n;
}

/* Whether @wq has an instance pending or running. */
static bool wq_busy(const struct cmwq_workqueue *wq) {
        return wq->inflight._inext != &wq->inflight || wq->cb_active > 0;
}

/* The end of a flush or destroy of @wq, as one of cw->nr_done_waiters:
 * running items finish even on a lost connection, so it waits for them
 * then; drops the work lock.  0, or the error of the lost connection. */
static int wait_running_unlock(struct client_work *cw, struct cmwq_workqueue *wq) {
        int r = 0;

        while (cw->dead && wq->cb_active > 0)
                pthread_cond_wait(&cw->done, &cw->lock);
        cw->nr_done_waiters--;
        if (cw->dead)
                r = client_lost_error(cw->c, cw->dead);
        else if (cw->stopping)
                r = client_lost_error(cw->c, -ECONNRESET);      /* pending ones were dropped */
        pthread_mutex_unlock(&cw->lock);
        return r;
}

/* Whether the calling thread is a callback that a wait for @wq would wait
 * for: one of @wq's (its running instance counts), or one whose own item
 * is queued on @wq again (that instance runs after it, on its thread:
 * thread_take()).  Work lock held. */
static bool wq_waits_for_caller(const struct cmwq_workqueue *wq) {
        const struct work_thread *t = work_self;

        if (!t || !t->current)
                return false;
        return t->current_wq == wq || ((t->current->_state & WORK_PENDING) && t->current->_wq == wq);
}

static int waits_for_caller_error(struct client_work *cw, const struct cmwq_workqueue *wq) {
        pthread_mutex_unlock(&cw->lock);
        return client_error(-EDEADLK, "%s would wait for the calling work item", wq->name);
}

int client_workqueue_flush_callbacks(struct cmwq_workqueue *wq, bool drain) {
        struct client_work *cw = __atomic_load_n(&wq->c->work, __ATOMIC_ACQUIRE);

        if (!cw)
                return 0;       /* no callback was ever queued */
        pthread_mutex_lock(&cw->lock);
        if (wq_waits_for_caller(wq))
                return waits_for_caller_error(cw, wq);
        if (drain) {
                cw->nr_done_waiters++;
                while (wq_busy(wq) && !cw->dead)
                        pthread_cond_wait(&cw->done, &cw->lock);
                cw->nr_done_waiters--;
        } else {
                struct client_flusher f = { .next = wq->cb_flushers, .seq = wq->cb_seq };

                f.remaining = flush_count(cw, wq, f.seq);
                wq->cb_flushers = &f;
                while (f.remaining > 0 && !cw->dead)
                        pthread_cond_wait(&cw->done, &cw->lock);
                for (struct client_flusher **pf = &wq->cb_flushers; *pf; pf = &(*pf)->next)
                        if (*pf == &f) {
                                *pf = f.next;
                                break;
                        }
        }
        cw->nr_done_waiters++;
        return wait_running_unlock(cw, wq);
}

/* Begins (@hold) or ends a drain of @wq: queueing of callbacks on it is
 * then its own items' only.  Atomic: the work state may not exist yet. */
void client_workqueue_drain_hold(struct cmwq_workqueue *wq, bool hold) {
        if (hold)
                __atomic_add_fetch(&wq->cb_draining, 1, __ATOMIC_RELEASE);
        else
                __atomic_sub_fetch(&wq->cb_draining, 1, __ATOMIC_RELEASE);
}

/* Delayed work of @wq waiting for its timer is queued now, as by
 * cmwq_flush_delayed_work(), or dropped (counted as done, like a cancel)
 * when the connection is lost.  Work lock held. */
static void fire_timers_of(struct client_work *cw, struct cmwq_workqueue *wq) {
        struct cmwq_delayed_work *dw, *next;

        for (dw = cw->timers._tnext; dw != &cw->timers; dw = next) {
                next = dw->_tnext;
                if (dw->_twq == wq)
                        timer_fire_locked(cw, dw);
        }
}

/* The library's part of destroying @wq, before its handle is freed: as the
 * kernel's destroy_workqueue() it drains, and delayed work waiting for its
 * timer runs now (as if flushed) rather than later through a freed handle;
 * delayed work the queue's own items queue on it meanwhile runs at once
 * too (queue_delayed_locked()).  Afterwards nothing can be queued on it,
 * and neither the timer list nor a pending list holds one of its items. */
int client_workqueue_destroy_callbacks(struct cmwq_workqueue *wq) {
        struct client_work *cw = __atomic_load_n(&wq->c->work, __ATOMIC_ACQUIRE);

        if (!cw)
                return 0;       /* no callback was ever queued */
        pthread_mutex_lock(&cw->lock);
        if (wq_waits_for_caller(wq))
                return waits_for_caller_error(cw, wq);
        wq->cb_destroyed = true;
        fire_timers_of(cw, wq);
        cw->nr_done_waiters++;
        while (wq_busy(wq) && !cw->dead)
                pthread_cond_wait(&cw->done, &cw->lock);
        /* What is still pending was dropped with the connection. */
        return wait_running_unlock(cw, wq);
}

void client_workqueue_set_max_active(struct cmwq_workqueue *wq, unsigned max_active) {
        struct client_work *cw = __atomic_load_n(&wq->c->work, __ATOMIC_ACQUIRE);

        if (!cw) {
                wq->max_active = max_active;
                return;
        }
        pthread_mutex_lock(&cw->lock);
        wq->max_active = max_active;
        pthread_mutex_unlock(&cw->lock);
        /* A higher limit may let waiting items start. */
        client_work_kick(wq->c);
}

void client_work_kick(struct cmwq *c) {
        struct client_work *cw = __atomic_load_n(&c->work, __ATOMIC_ACQUIRE);

        if (!cw)
                return;
        pthread_mutex_lock(&cw->lock);
        work_freeze_answer_locked(cw);
        for (unsigned i = 0; i < cw->nr_pools; i++)
                work_pool_kick(cw, &cw->pools[i]);
        pthread_cond_broadcast(&cw->done);
        pthread_mutex_unlock(&cw->lock);
}

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
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "pool-policy.h"
#include "shm.h"
#include "util.h"

#define WORK_PENDING (1u << 0)          /* on a pending or scheduled list */
#define WORK_TIMER (1u << 1)            /* delayed: on the timer list */
#define WORK_RUNNING (1u << 2)
#define WORK_CANCELING (1u << 3)
#define WORK_INFLIGHT (1u << 4)         /* on its queue's in-flight list */

#define WORK_THREADS_MAX CMWQ_SHM_SLOTS        /* a thread's index is its slot */
#define WORK_UNBOUND_THREADS_MAX 512u
/* The pools' idle threads and the back-off after cmwqd refused a thread
 * follow the kernel's policy (pool-policy.h), as cmwqd's own pools do;
 * $CMWQ_IDLE_TIMEOUT overrides the idle timeout. */

enum thread_state {
        THREAD_STARTING,                /* created for a demand, registering */
        THREAD_IDLE,
        THREAD_DEMANDING,
        THREAD_GRANTED,
        THREAD_DEAD,
};

struct work_pool;

struct work_thread {
        struct client_work *cw;
        struct work_pool *pool;
        pthread_t thread;
        pid_t tid;
        unsigned slot;                  /* its index in cw->threads and its control block */
        bool has_slot;                  /* in the table (atomic) */
        bool exited;                    /* reaped: its function has returned (atomic) */
        uint32_t seen_grant;            /* the last grant it took (bound) */
        /* Bound: its CPU time (ns) when it took its current grant, and
         * CLOCK_MONOTONIC when it last reported its CPU time in its slot. */
        uint64_t grant_cpu_ns;
        uint64_t cpu_read_usec;
        enum thread_state state;        /* work lock */
        struct cmwq_work scheduled;     /* sentinel: parked behind current */
        struct cmwq_work *current;
        struct work_thread *next;       /* pool's threads */
        /* Its own lock: how an unbound thread is started and any thread stopped. */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool grant;
        bool stop;                      /* also read without the lock (atomic) */
};

struct work_pool {
        int cpu;                        /* -1: unbound */
        bool highpri;
        struct cmwq_work pending;       /* sentinel */
        struct work_thread *threads;
        unsigned nr_threads;
        unsigned nr_idle;               /* unbound */
        bool demanding;                 /* a thread demands (or starts to) */
        /* cmwqd refused a thread (a limit): none is made before this
         * (CLOCK_MONOTONIC), and the wait doubles each time. */
        uint64_t retry_usec;
        unsigned retry_ms;
};

struct client_work {
        struct cmwq *c;
        pthread_mutex_t lock;
        pthread_cond_t done;            /* an item finished or was cancelled */
        unsigned nr_cpus;
        /* [cpu * 2 + highpri] for the bound pools, then the unbound ones
         * ([nr_cpus * 2 + highpri]): a high-priority queue's items run on
         * threads at the raised priority whether it is bound or not, as the
         * kernel's high-priority unbound pools. */
        struct work_pool *pools;
        unsigned nr_pools;
        struct work_thread *threads[WORK_THREADS_MAX];  /* by slot; NULL: free */
        unsigned nr_slots;              /* the table's high-water mark */
        unsigned nr_live;               /* threads made and not yet collected */
        struct work_thread *exited;     /* reaped, to be joined (their slots held till then) */
        uint64_t idle_timeout_usec;
        struct cmwq_shm *shm;           /* shared with cmwqd */
        int doorbell;                   /* eventfd cmwqd listens on */
        uint32_t sq_tail;               /* ours: entries added to the ring */
        uint32_t freeze_answered;       /* the last freeze notice answered */
        unsigned *cpu_map;              /* [cpu]: the CPU whose pool runs its work */
        pthread_t manager;
        bool manager_started;
        pthread_t timer;
        bool timer_started;
        pthread_cond_t timer_cond;
        struct cmwq_delayed_work timers;        /* sentinel, by expiry */
        /* Threads waiting on done for something else than a flush of a
         * queue (an item's flush or cancel, a drain): a finished item wakes
         * them.  Flushes of queues are counted (struct client_flusher). */
        unsigned nr_done_waiters;
        bool stopping;
        int dead;
};

static __thread struct work_thread *work_self;

static uint64_t mono_usec(void) {
        return now_usec(CLOCK_MONOTONIC);
}

/* The calling thread's CPU time (ns); only differences of it reach cmwqd,
 * whose clock of it has another origin. */
static uint64_t thread_cpu_ns(void) {
        struct timespec ts;

        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
                return 0;       /* "none reported": counted from the grant */
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* ---- lists of work items (circular, through a sentinel) ------------------ */

static void wlist_init(struct cmwq_work *h) {
        h->_next = h->_prev = h;
}

static bool wlist_empty(const struct cmwq_work *h) {
        return h->_next == h;
}

static void wlist_add_tail(struct cmwq_work *w, struct cmwq_work *h) {
        w->_prev = h->_prev;
        w->_next = h;
        h->_prev->_next = w;
        h->_prev = w;
}

static void wlist_del(struct cmwq_work *w) {
        w->_prev->_next = w->_next;
        w->_next->_prev = w->_prev;
        w->_next = w->_prev = NULL;
}

static void inflight_add(struct cmwq_workqueue *wq, struct cmwq_work *w) {
        if (w->_state & WORK_INFLIGHT)
                return;
        w->_state |= WORK_INFLIGHT;
        w->_iprev = wq->inflight._iprev;
        w->_inext = &wq->inflight;
        wq->inflight._iprev->_inext = w;
        wq->inflight._iprev = w;
}

static void inflight_del_if_idle(struct cmwq_work *w) {
        if (!(w->_state & WORK_INFLIGHT) || (w->_state & (WORK_PENDING | WORK_RUNNING)))
                return;
        w->_state &= ~WORK_INFLIGHT;
        w->_iprev->_inext = w->_inext;
        w->_inext->_iprev = w->_iprev;
        w->_inext = w->_iprev = NULL;
}

/* A thread in cmwq_flush_workqueue(): it waits for the instances of its
 * queue queued up to @seq, @remaining of which have not finished (the
 * kernel's flush colours, one per waiting thread).  Counting them, rather
 * than looking at the queue whenever any item finishes, wakes it once
 * instead of once per item. */
struct client_flusher {
        struct client_flusher *next;
        uint64_t seq;
        uint64_t remaining;
};

/* An instance of @wq queued as the @seq-th has finished or was taken back:
 * the flushers waiting for it have one less to wait for.  Work lock held. */
static void flushers_instance_done(struct client_work *cw, struct cmwq_workqueue *wq, uint64_t seq) {
        for (struct client_flusher *f = wq->cb_flushers; f; f = f->next)
                if (seq <= f->seq && f->remaining > 0 && --f->remaining == 0)
                        pthread_cond_broadcast(&cw->done);
}

void client_workqueue_init(struct cmwq_workqueue *wq) {
        wq->inflight._inext = wq->inflight._iprev = &wq->inflight;
}

static void timers_del(struct cmwq_delayed_work *dw) {
        dw->_tprev->_tnext = dw->_tnext;
        dw->_tnext->_tprev = dw->_tprev;
        dw->_tnext = dw->_tprev = NULL;
        dw->work._state &= ~WORK_TIMER;
}

/* ---- talking to the daemon ------------------------------------------------ */

static void futex_wake_all(uint32_t *word) {
        /* Not FUTEX_PRIVATE: the daemon wakes the same word in its mapping. */
        (void) syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(uint32_t *word, uint32_t val, const struct timespec *timeout) {
        (void) syscall(SYS_futex, word, FUTEX_WAIT, val, timeout, NULL, 0);
}

/* Tells the daemon what a bound thread does: an entry in the submission
 * ring, and the doorbell only if the daemon sleeps (need_wakeup), so that a
 * burst of entries costs it one wake-up.  A @lazy entry rings no doorbell
 * at all where the daemon allows it for the @lazy thread (proto/shm.h,
 * lazy_doorbell): it matters only once that thread switches out, and the
 * daemon reads the ring before it acts on that.  Work lock held: one
 * producer. */
static void ring_push(struct client_work *cw, enum cmwq_shm_op op, unsigned slot, const struct work_thread *lazy) {
        struct cmwq_shm *shm = cw->shm;
        uint32_t tail = cw->sq_tail;

        /* Never full with a live daemon (at most three entries per thread,
         * see proto/shm.h); a stuck one gets the doorbell until it reads. */
        while (tail - __atomic_load_n(&shm->sq_head, __ATOMIC_ACQUIRE) >= CMWQ_SHM_RING) {
                if (cw->dead || __atomic_load_n(&cw->c->dead, __ATOMIC_RELAXED))
                        return;
                (void) eventfd_write(cw->doorbell, 1);
                usleep(1000);
        }
        __atomic_store_n(&shm->sq[tail & (CMWQ_SHM_RING - 1)], CMWQ_SHM_ENTRY(op, slot), __ATOMIC_RELAXED);
        cw->sq_tail = tail + 1;
        __atomic_store_n(&shm->sq_tail, cw->sq_tail, __ATOMIC_SEQ_CST);
        if (lazy && __atomic_load_n(&shm->slots[lazy->slot].lazy_doorbell, __ATOMIC_ACQUIRE) == 1)
                return;
        if (__atomic_load_n(&shm->need_wakeup, __ATOMIC_SEQ_CST) &&
            __atomic_exchange_n(&shm->need_wakeup, 0, __ATOMIC_SEQ_CST))
                (void) eventfd_write(cw->doorbell, 1);
}

/* The thread that may push @p's demand lazily: the calling worker thread
 * if it holds @p's CPU itself, so that the daemon acts on the demand only
 * when it stops holding it, which it sees at once. */
static const struct work_thread *demand_lazy_for(const struct work_pool *p) {
        return work_self && work_self->pool == p && work_self->state == THREAD_GRANTED ? work_self : NULL;
}

/* Freezing is the daemon's decision, but only the library sees the items:
 * it keeps those of a frozen queue from starting.  That concerns this
 * client's own items only; nothing of other clients depends on it. */
void client_work_freeze(struct cmwq *c, const char *name, bool frozen, uint32_t seq) {
        struct cmwq_workqueue *wq;

        list_for_each_entry(wq, &c->workqueues, entry)
                if (strcmp(wq->name, name) == 0)
                        __atomic_store_n(&wq->cb_frozen, frozen, __ATOMIC_RELEASE);
        for (unsigned i = 0; i < CLIENT_NR_SYSTEM_QUEUES; i++)
                if (c->system[i].name && strcmp(c->system[i].name, name) == 0)
                        __atomic_store_n(&c->system[i].cb_frozen, frozen, __ATOMIC_RELEASE);
        if (frozen && seq)
                __atomic_store_n(&c->freeze_notice, seq, __ATOMIC_RELEASE);
        if (!frozen || seq) {
                /* Kicking the pools and answering the freeze take the work
                 * lock, which must not be taken under the connection's:
                 * the manager does it. */
                c->work_kick = true;
                pthread_cond_broadcast(&c->cond);
        }
}

static bool wq_frozen(const struct cmwq_workqueue *wq) {
        return __atomic_load_n(&wq->cb_frozen, __ATOMIC_ACQUIRE);
}

/* Answers the daemon's last freeze notice once no callback of a frozen
 * queue runs: its freeze waits for that.  Work lock held: no thread starts
 * or ends an item meanwhile, and none starts one of a frozen queue. */
static void freeze_answer_locked(struct client_work *cw) {
        uint32_t notice = __atomic_load_n(&cw->c->freeze_notice, __ATOMIC_ACQUIRE);

        if (notice == 0 || notice == cw->freeze_answered || !cw->shm)
                return;
        for (unsigned i = 0; i < cw->nr_slots; i++) {
                struct cmwq_work *w = cw->threads[i] ? cw->threads[i]->current : NULL;

                if (w && wq_frozen(w->_wq))
                        return;         /* answered when it returns */
        }
        ring_push(cw, CMWQ_SHM_OP_FREEZE_ACK, notice & CMWQ_SHM_SEQ_MASK, NULL);
        cw->freeze_answered = notice;
}

/* ---- threads -------------------------------------------------------------- */

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

static void thread_free(struct work_thread *t) {
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
                if (t->current && t->current->_wq == wq)
                        n++;
        return n;
}

/* The next item @p may start, FIFO, honouring max_active: per queue for
 * unbound, per queue and CPU for bound (as the kernel's per-pwq limit).
 *
 * Enforced here, not in the daemon: the daemon grants a thread its CPU, not
 * an item, and never sees the items; and max_active of a client's queue
 * only limits that client's own items -- what protects the other clients
 * (the CPU's concurrency level) is the daemon's grants, which this does not
 * touch. */
static struct cmwq_work *work_pool_next(struct work_pool *p) {
        for (struct cmwq_work *w = p->pending._next; w != &p->pending; w = w->_next) {
                struct cmwq_workqueue *wq = w->_wq;

                unsigned max = wq->max_active ? wq->max_active : CMWQ_DFL_ACTIVE;

                if (wq_frozen(wq))
                        continue;
                if (p->cpu < 0 && wq->cb_active >= max)
                        continue;
                if (p->cpu >= 0 && work_pool_active_of(p, wq) >= max)
                        continue;
                return w;
        }
        return NULL;
}

/* Starts or asks for workers while @p has work.  Work lock held. */
static void work_pool_kick(struct client_work *cw, struct work_pool *p) {
        struct work_thread *t;

        if (cw->stopping || cw->dead || !work_pool_next(p))
                return;

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

        if (p->demanding)
                return;
        for (t = p->threads; t; t = t->next)
                if (t->state == THREAD_IDLE) {
                        t->state = THREAD_DEMANDING;
                        p->demanding = true;
                        ring_push(cw, CMWQ_SHM_OP_DEMAND, t->slot, demand_lazy_for(p));
                        return;
                }
        if (p->retry_usec > mono_usec())
                return;         /* the timer thread kicks it then */
        p->retry_usec = 0;
        p->demanding = true;
        if (!thread_new(cw, p))
                p->demanding = false;
}

/* The thread's CPU clock is read at most once per this much wall time. */
#define WORK_CPU_READ_PERIOD_USEC 1000u

/* @t took a new grant: its callbacks' starts are reported relative to
 * now (proto/shm.h, run_cpu_ns), and nothing reported under the last
 * grant stands.  One CPU clock read per grant. */
static void thread_report_grant(struct client_work *cw, struct work_thread *t) {
        t->grant_cpu_ns = thread_cpu_ns();
        t->cpu_read_usec = mono_usec();
        __atomic_store_n(&cw->shm->slots[t->slot].run_cpu_ns, 0, __ATOMIC_RELAXED);
}

/* Tells cmwqd where the callback @t starts now counts its CPU time from:
 * the CPU time @t used under its grant so far.  The CPU-intensive
 * threshold is per callback, measured from its start (the kernel's
 * process_one_work() sets current_at), not from the grant, so that short
 * callbacks never add up to it however many of them one grant runs.
 * Reading the thread's CPU clock is a system call (about 1.4 us on a VM),
 * too dear for every callback: it is read again only once
 * WORK_CPU_READ_PERIOD_USEC have passed since the last read (a vDSO clock
 * read, tens of ns, decides).  The reported start is then at most 1 ms of
 * this thread's CPU time before the real one: a callback is marked at no
 * less than 9 ms of its own CPU time, and callbacks well short of 10 ms
 * never are.  The daemon reads it only when its threshold timer fires.
 * Outside the work lock: the slot is this thread's. */
static void thread_report_run_start(struct client_work *cw, struct work_thread *t) {
        uint64_t now = mono_usec(), cpu;

        if (now - t->cpu_read_usec < WORK_CPU_READ_PERIOD_USEC)
                return;         /* the last report stands: at most 1 ms old */
        t->cpu_read_usec = now;
        cpu = thread_cpu_ns();
        __atomic_store_n(&cw->shm->slots[t->slot].run_cpu_ns, cpu > t->grant_cpu_ns ? cpu - t->grant_cpu_ns : 0,
                         __ATOMIC_RELAXED);
}

/* Runs @w on @t.  Work lock held; dropped around the function. */
static void run_one(struct client_work *cw, struct work_thread *t, struct cmwq_work *w) {
        struct cmwq_workqueue *wq = w->_wq;

        w->_state &= ~WORK_PENDING;
        w->_state |= WORK_RUNNING;
        w->_running = t;
        w->_running_seq = w->_queued_seq;
        w->_nr_started++;
        wq->cb_active++;
        t->current = w;
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
        if (wq_frozen(wq))
                freeze_answer_locked(cw);
        w->_nr_finished++;
        w->_running = NULL;
        w->_state &= ~WORK_RUNNING;
        inflight_del_if_idle(w);
        flushers_instance_done(cw, wq, w->_running_seq);
        /* Only for a thread that waits on this item or on the queue's
         * emptiness: a flush of the queue is told above, once. */
        if (cw->nr_done_waiters > 0)
                pthread_cond_broadcast(&cw->done);
}

/* Items parked behind @t's last item go back to the head of its pool, in
 * order, when their queue is frozen (@all: every one): they wait there. */
static void thread_unpark(struct work_thread *t, bool all) {
        for (struct cmwq_work *w = t->scheduled._prev, *prev; w != &t->scheduled; w = prev) {
                prev = w->_prev;
                if (!all && !wq_frozen(w->_wq))
                        continue;
                wlist_del(w);
                wlist_add_tail(w, t->pool->pending._next);
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
                w = work_pool_next(t->pool);
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
        enum thread_wait r = THREAD_WAIT_GRANTED;

        pthread_mutex_unlock(&cw->lock);
        if (t->pool->cpu >= 0) {
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
                                futex_wait(word, g, NULL);
                                continue;
                        }
                        now = mono_usec();
                        if (now >= deadline) {
                                r = THREAD_WAIT_TIMED_OUT;
                                break;
                        }
                        left = timespec_from_usec(deadline - now);
                        futex_wait(word, g, &left);
                }
        } else {
                struct timespec until = timespec_from_usec(deadline);

                pthread_mutex_lock(&t->lock);
                while (!t->grant && !t->stop && r != THREAD_WAIT_TIMED_OUT)
                        if (!timed)
                                pthread_cond_wait(&t->cond, &t->lock);
                        else if (pthread_cond_timedwait(&t->cond, &t->lock, &until) == ETIMEDOUT)
                                r = THREAD_WAIT_TIMED_OUT;
                if (t->grant) {
                        t->grant = false;
                        r = THREAD_WAIT_GRANTED;
                }
                pthread_mutex_unlock(&t->lock);
        }
        if (thread_stopped(t))
                r = THREAD_WAIT_STOPPED;
        pthread_mutex_lock(&cw->lock);
        return r;
}

static int thread_unregister(struct client_work *cw, struct work_thread *t);
static void timer_wake_locked(struct client_work *cw);

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
static void thread_stop(struct client_work *cw, struct work_thread *t) {
        pthread_mutex_lock(&t->lock);
        __atomic_store_n(&t->stop, true, __ATOMIC_RELEASE);
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->lock);
        /* Only a thread in the table has its slot. */
        if (t->pool->cpu >= 0 && cw->shm && __atomic_load_n(&t->has_slot, __ATOMIC_ACQUIRE)) {
                /* Our own page: moving the word makes a late FUTEX_WAIT
                 * return at once; no grant matters any more. */
                uint32_t *word = &cw->shm->slots[t->slot].grant;

                __atomic_add_fetch(word, 1, __ATOMIC_RELEASE);
                futex_wake_all(word);
        }
}

/* The daemon asked for this grant back: others wait for the CPU. */
static bool thread_yield_asked(struct client_work *cw, struct work_thread *t) {
        return __atomic_load_n(&cw->shm->slots[t->slot].yield, __ATOMIC_ACQUIRE) == t->seen_grant;
}

static int thread_register(struct client_work *cw, struct work_thread *t) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackWorker reg = CMWQ__CALLBACK_WORKER__INIT;

        reg.tid = (uint32_t) t->tid;
        reg.slot = t->slot;
        reg.cpu = (uint32_t) t->pool->cpu;
        reg.has_highpri = true;
        reg.highpri = t->pool->highpri;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_REGISTER;
        req.callback_register = &reg;
        return client_call_simple(cw->c, &req, "cannot register a callback worker thread");
}

static int thread_unregister(struct client_work *cw, struct work_thread *t) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackWorkerTid unreg = CMWQ__CALLBACK_WORKER_TID__INIT;

        unreg.tid = (uint32_t) t->tid;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_UNREGISTER;
        req.callback_unregister = &unreg;
        return client_call_simple(cw->c, &req, "cannot unregister a callback worker thread");
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
                timer_wake_locked(cw);
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
                }

                for (;;) {
                        if (cw->stopping)
                                break;
                        thread_unpark(t, false);
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
                                thread_unpark(t, true);
                        else if (!wlist_empty(&t->scheduled)) {
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
                                ring_push(cw, CMWQ_SHM_OP_INTENSIVE, t->slot, NULL);
                                run_one(cw, t, w);
                                /* Parked behind it: first in line again. */
                                thread_unpark(t, true);
                                break;
                        }
                        run_one(cw, t, w);
                }

                t->state = THREAD_IDLE;
                /* Lazy: it waits for its next grant right after, asleep. */
                if (bound)
                        ring_push(cw, CMWQ_SHM_OP_IDLE, t->slot, t);
                else
                        p->nr_idle++;
                work_pool_kick(cw, p);
        }
        t->state = THREAD_DEAD;
        pthread_mutex_unlock(&cw->lock);
        return NULL;
}

/* ---- the manager (reader) and the timer ---------------------------------- */

/* Drops every pending item: nothing will grant them any more. */
static void work_connection_lost(struct client_work *cw, int error) {
        pthread_mutex_lock(&cw->lock);
        cw->dead = error;
        for (unsigned i = 0; i < cw->nr_pools; i++) {
                struct work_pool *p = &cw->pools[i];

                while (!wlist_empty(&p->pending)) {
                        struct cmwq_work *w = p->pending._next;

                        wlist_del(w);
                        w->_state &= ~WORK_PENDING;
                        w->_nr_started++;
                        w->_nr_finished++;
                        inflight_del_if_idle(w);
                }
                for (struct work_thread *t = p->threads; t; t = t->next) {
                        while (!wlist_empty(&t->scheduled)) {
                                struct cmwq_work *w = t->scheduled._next;

                                wlist_del(w);
                                w->_state &= ~WORK_PENDING;
                                w->_nr_started++;
                                w->_nr_finished++;
                                inflight_del_if_idle(w);
                        }
                        if (p->cpu >= 0)        /* unbound threads need no daemon */
                                thread_stop(cw, t);
                }
        }
        pthread_cond_broadcast(&cw->done);
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
static void *timer_main(void *userdata);

/* Tells the timer thread that the earliest deadline may have moved, and
 * starts it the first time there is one: a client that never queues
 * delayed work, nor is refused a thread, runs without it (one thread less
 * in each process on the machine).  If it cannot be started now, the next
 * call tries again.  Work lock held. */
static void timer_wake_locked(struct client_work *cw) {
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
                timers_del(dw);
                if (cw->dead) {
                        dw->work._nr_started++;
                        dw->work._nr_finished++;
                        pthread_cond_broadcast(&cw->done);
                        continue;
                }
                queue_locked(cw, dw->_twq, &dw->work, dw->_tcpu);
        }
        pthread_mutex_unlock(&cw->lock);
        return NULL;
}

/* ---- set-up and tear-down ------------------------------------------------- */

/* $CMWQ_IDLE_TIMEOUT: seconds (a decimal number, more than 0). */
static uint64_t idle_timeout_usec(void) {
        const char *v = getenv("CMWQ_IDLE_TIMEOUT");
        char *end;
        double secs;

        if (!v || !*v)
                return POOL_POLICY_IDLE_TIMEOUT_USEC;
        errno = 0;
        secs = strtod(v, &end);
        if (errno || *end || !(secs > 0) || secs > 1e9)
                return POOL_POLICY_IDLE_TIMEOUT_USEC;
        return (uint64_t) (secs * USEC_PER_SEC) ?: 1;
}

/* Each CPU's work goes to a CPU cmwqd has a pool for: itself, or one of
 * those (a thread registered on another would be refused). */
static int work_map_cpus(struct client_work *cw, const Cmwq__CallbackAttached *a) {
        size_t n = 0;

        cw->cpu_map = calloc(cw->nr_cpus, sizeof(*cw->cpu_map));
        if (!cw->cpu_map)
                return client_error(-ENOMEM, "out of memory");
        for (size_t i = 0; i < a->n_cpus; i++)
                if (a->cpus[i] < cw->nr_cpus)
                        a->cpus[n++] = a->cpus[i];
        if (n == 0)
                return client_error(-EPROTO, "cmwqd has no pool on any CPU of this machine");
        for (unsigned cpu = 0; cpu < cw->nr_cpus; cpu++)
                cw->cpu_map[cpu] = a->cpus[cpu % n];
        for (size_t i = 0; i < n; i++)
                cw->cpu_map[a->cpus[i]] = a->cpus[i];
        return 0;
}

/* Asks cmwqd for the memory it shares with us and its doorbell
 * (proto/shm.h), passed with its answer, and maps it. */
static int work_attach(struct client_work *cw) {
        _cleanup_(closep) int memfd = -1, doorbell = -1;
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackAttach attach = CMWQ__CALLBACK_ATTACH__INIT;
        Cmwq__Response *resp = NULL;
        struct cmwq_shm *shm;
        struct stat st;
        int fds[2], n, r;

        attach.layout_version = CMWQ_SHM_VERSION;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_ATTACH;
        req.callback_attach = &attach;
        r = client_call(cw->c, &req, &resp);
        if (r < 0)
                return r;
        n = client_take_fds(cw->c, fds, 2);
        if (n > 0)
                memfd = fds[0];
        if (n > 1)
                doorbell = fds[1];
        if (resp->error != CMWQ__ERROR__OK)
                r = client_response_error(resp, "cmwqd refused to share memory");
        else if (resp->body_case != CMWQ__RESPONSE__BODY_CALLBACK_ATTACHED || n != 2)
                r = client_error(-EPROTO, "cmwqd answered without the shared memory");
        else
                r = work_map_cpus(cw, resp->callback_attached);
        cmwq__response__free_unpacked(resp, NULL);
        if (r < 0)
                return r;

        if (fstat(memfd, &st) < 0 || st.st_size != (off_t) sizeof(*shm))
                return client_error(-EPROTO, "the shared memory from cmwqd has not the size of this library's layout");
        shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (shm == MAP_FAILED)
                return client_error(-errno, "cannot map the memory shared with cmwqd: %s", strerror(errno));
        if (shm->magic != CMWQ_SHM_MAGIC || shm->version != CMWQ_SHM_VERSION) {
                munmap(shm, sizeof(*shm));
                return client_error(-EPROTO, "the shared memory from cmwqd has another layout");
        }
        cw->shm = shm;
        cw->doorbell = TAKE_FD(doorbell);
        return 0;
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
        cw->idle_timeout_usec = idle_timeout_usec();
        r = work_attach(cw);
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

static struct work_pool *work_pool_for(struct client_work *cw, struct cmwq_workqueue *wq, int cpu) {
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
        if ((wq->cb_draining || wq->cb_destroyed) &&
            !(work_self && work_self->current && work_self->current->_wq == wq))
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

bool cmwq_queue_work_on(int cpu, struct cmwq_workqueue *wq, struct cmwq_work *work) {
        struct client_work *cw;
        bool queued = false;

        if (!wq || !work || !work->func || work_get(wq->c, &cw) < 0)
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

        dw->_twq = wq;
        dw->_tcpu = sched_getcpu();
        dw->_expires = mono_usec() + delay_usec;
        dw->work._state |= WORK_TIMER;
        dw->work._wq = wq;
        dw->work._conn = wq->c;
        for (pos = cw->timers._tnext; pos != &cw->timers && pos->_expires <= dw->_expires; pos = pos->_tnext)
                ;
        dw->_tnext = pos;
        dw->_tprev = pos->_tprev;
        pos->_tprev->_tnext = dw;
        pos->_tprev = dw;
        timer_wake_locked(cw);
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
        struct client_work *cw;
        bool queued;

        if (!wq || !dwork || !dwork->work.func || work_get(wq->c, &cw) < 0)
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
                inflight_del_if_idle(w);
                flushers_instance_done(cw, w->_wq, w->_queued_seq);
        } else
                return false;
        w->_nr_started++;
        w->_nr_finished++;
        pthread_cond_broadcast(&cw->done);
        return true;
}

bool cmwq_mod_delayed_work(struct cmwq_workqueue *wq, struct cmwq_delayed_work *dwork, uint64_t delay_usec) {
        struct client_work *cw;
        bool was;

        if (!wq || !dwork || !dwork->work.func || work_get(wq->c, &cw) < 0)
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
        else
                return 0;
        cw->nr_done_waiters++;
        while (work->_nr_finished < target && !(cw->dead && !(work->_state & WORK_RUNNING)))
                pthread_cond_wait(&cw->done, &cw->lock);
        cw->nr_done_waiters--;
        /* Instances dropped with the connection count as finished, but
         * they did not run: say so. */
        return !cw->dead ? 1 : client_lost_error(cw->c, cw->dead);
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
        if (dwork->work._state & WORK_TIMER) {
                timers_del(dwork);
                queue_locked(cw, dwork->_twq, &dwork->work, dwork->_tcpu);
        }
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

/* Whether an item queued up to @seq is still pending or running on @wq. */
/* The instances of @wq queued up to @seq that have not finished: a pending
 * one, a running one, or both for an item queued again while it runs. */
static uint64_t flush_count(struct cmwq_workqueue *wq, uint64_t seq) {
        uint64_t n = 0;

        for (struct cmwq_work *w = wq->inflight._inext; w != &wq->inflight; w = w->_inext) {
                if ((w->_state & WORK_PENDING) && w->_queued_seq <= seq)
                        n++;
                if ((w->_state & WORK_RUNNING) && w->_running_seq <= seq)
                        n++;
        }
        return n;
}

int client_workqueue_flush_callbacks(struct cmwq_workqueue *wq, bool drain) {
        struct client_work *cw = __atomic_load_n(&wq->c->work, __ATOMIC_ACQUIRE);
        int r = 0;

        if (!cw)
                return 0;       /* no callback was ever queued */
        pthread_mutex_lock(&cw->lock);
        if (drain) {
                wq->cb_draining = true;
                cw->nr_done_waiters++;
                while (wq->inflight._inext != &wq->inflight && !cw->dead)
                        pthread_cond_wait(&cw->done, &cw->lock);
                cw->nr_done_waiters--;
                wq->cb_draining = false;
        } else {
                struct client_flusher f = { .next = wq->cb_flushers, .seq = wq->cb_seq };

                f.remaining = flush_count(wq, f.seq);
                wq->cb_flushers = &f;
                while (f.remaining > 0 && !cw->dead)
                        pthread_cond_wait(&cw->done, &cw->lock);
                for (struct client_flusher **pf = &wq->cb_flushers; *pf; pf = &(*pf)->next)
                        if (*pf == &f) {
                                *pf = f.next;
                                break;
                        }
        }
        /* Running items finish even on a lost connection; wait for them. */
        cw->nr_done_waiters++;
        while (cw->dead && wq->cb_active > 0)
                pthread_cond_wait(&cw->done, &cw->lock);
        cw->nr_done_waiters--;
        if (cw->dead)
                r = client_lost_error(cw->c, cw->dead);
        pthread_mutex_unlock(&cw->lock);
        return r;
}

/* Delayed work of @wq waiting for its timer is queued now, as by
 * cmwq_flush_delayed_work(), or dropped (counted as done, like a cancel)
 * when the connection is lost.  Work lock held. */
static void fire_timers_of(struct client_work *cw, struct cmwq_workqueue *wq) {
        struct cmwq_delayed_work *dw, *next;

        for (dw = cw->timers._tnext; dw != &cw->timers; dw = next) {
                next = dw->_tnext;
                if (dw->_twq != wq)
                        continue;
                if (cw->dead)
                        (void) cancel_locked(cw, &dw->work);
                else {
                        timers_del(dw);
                        queue_locked(cw, wq, &dw->work, dw->_tcpu);
                }
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
        int r = 0;

        if (!cw)
                return 0;       /* no callback was ever queued */
        pthread_mutex_lock(&cw->lock);
        wq->cb_destroyed = true;
        fire_timers_of(cw, wq);
        cw->nr_done_waiters++;
        while (wq->inflight._inext != &wq->inflight && !cw->dead)
                pthread_cond_wait(&cw->done, &cw->lock);
        /* Running items finish even on a lost connection; wait for them.
         * What is still pending was dropped with the connection. */
        while (cw->dead && wq->cb_active > 0)
                pthread_cond_wait(&cw->done, &cw->lock);
        cw->nr_done_waiters--;
        if (cw->dead)
                r = client_lost_error(cw->c, cw->dead);
        pthread_mutex_unlock(&cw->lock);
        return r;
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
        freeze_answer_locked(cw);
        for (unsigned i = 0; i < cw->nr_pools; i++)
                work_pool_kick(cw, &cw->pools[i]);
        pthread_cond_broadcast(&cw->done);
        pthread_mutex_unlock(&cw->lock);
}

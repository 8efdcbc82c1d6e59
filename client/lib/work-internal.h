/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Inside libcmwq-client's callback work: what its three files share.
 *
 * client-work.c (the work-item state machine, set-up, the manager and timer
 * threads, the cmwq_*work*() API), work-pool.c (the library's pools and their
 * worker threads) and work-shm.c (the shared-memory protocol's client side)
 * are one module under one lock, the work lock (cw->lock): the structures
 * below, the work-item lists every part walks, and the calls each part makes
 * into another.  Nothing outside those three files includes this header;
 * the rest of the library knows callback work through client.h.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "client.h"
#include "shm.h"
#include "util.h"


#define WORK_PENDING (1u << 0)          /* on a pending or scheduled list */
#define WORK_TIMER (1u << 1)            /* delayed: on the timer list */
#define WORK_RUNNING (1u << 2)
#define WORK_CANCELING (1u << 3)
#define WORK_INFLIGHT (1u << 4)         /* pending: on its queue's in-flight list */

#define WORK_THREADS_MAX CMWQ_SHM_SLOTS        /* a thread's index is its slot */
#define WORK_UNBOUND_THREADS_MAX 512u
/* The pools' idle threads and the back-off after cmwqd refused a thread
 * follow the kernel's policy (pool-policy.h), as cmwqd's own pools do;
 * $CMWQ_IDLE_TIMEOUT overrides the idle timeout. */

/* How long a bound thread keeps its grant after its last item, asleep, for
 * its process's next item on that CPU (proto/shm.h, enum cmwq_shm_linger):
 * $CMWQ_LINGER overrides it, in seconds, 0 for never. */
#define WORK_LINGER_USEC (10 * USEC_PER_MSEC)

/* How soon an idle unbound thread looks again at credits it gave back
 * while cmwqd had yet to read that. */
#define WORK_CREDITS_RECHECK_USEC (2 * USEC_PER_MSEC)

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
        /* Runs on a grant it lingered on: cmwqd counts it blocked until it
         * reads its switches, so it watches the CPU no closer for it, and
         * entries that wait for its next switch-out would wait on. */
        bool resumed;
        /* Bound: its CPU time (ns) when it took its current grant, and
         * CLOCK_MONOTONIC when it last reported its CPU time in its slot. */
        uint64_t grant_cpu_ns;
        uint64_t cpu_read_usec;
        /* Unbound, THREAD_DEMANDING: the credits entry it waits on for a
         * grant, and the entry's granted word when it began; -1: none. */
        int credits_wait;
        uint32_t credits_seen;
        /* Unbound, idle: look at the pool's credits again soon (work-pool.c). */
        bool credits_recheck;
        enum thread_state state;        /* work lock */
        struct cmwq_work scheduled;     /* sentinel: parked behind current */
        struct cmwq_work *current;
        /* The queue @current runs for, and its place there (the kernel's
         * worker->current_pwq): not current->_wq, which names the queue of
         * its next instance once it is queued again, maybe on another. */
        struct cmwq_workqueue *current_wq;
        uint64_t current_seq;
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
        struct work_thread *lingering;  /* bound: keeps its grant, asleep, for the next item */
        /* cmwqd refused a thread (a limit): none is made before this
         * (CLOCK_MONOTONIC), and the wait doubles each time. */
        uint64_t retry_usec;
        unsigned retry_ms;
};

/* An unbound queue's credits (proto/shm.h, struct cmwq_shm_credits): its
 * part of the queue's max_active, which holds across every client. */
struct work_credits {
        struct cmwq_workqueue *wq;      /* the handle it counts for; NULL: free, for a handle of its name */
        uint32_t returned;              /* ours: given back so far */
        uint32_t want;                  /* as last written */
        uint32_t told_tail;             /* our ring's tail after its last CREDITS */
        struct work_thread *waiter;     /* waits for granted to move; NULL: none */
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
        uint64_t linger_usec;           /* 0: threads give their grant back at once */
        uint64_t next_scan;             /* work_pool_next()'s scans so far */
        bool has_credits;               /* cmwqd deals unbound queues' credits */
        bool can_move;                  /* cmwqd takes CMWQ_SHM_OP_MOVE */
        struct work_credits credits[CMWQ_SHM_CREDIT_QUEUES];
        /* Entries an item waits for credits of, and no thread waits on yet. */
        uint64_t credits_short;
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


/* The worker thread the caller is, or NULL (work-pool.c). */
extern __thread struct work_thread *work_self;

static inline uint64_t mono_usec(void) {
        return now_usec(CLOCK_MONOTONIC);
}

/* ---- lists of work items (circular, through a sentinel) ------------------ */

static inline void wlist_init(struct cmwq_work *h) {
        h->_next = h->_prev = h;
}

static inline bool wlist_empty(const struct cmwq_work *h) {
        return h->_next == h;
}

static inline void wlist_add_tail(struct cmwq_work *w, struct cmwq_work *h) {
        w->_prev = h->_prev;
        w->_next = h;
        h->_prev->_next = w;
        h->_prev = w;
}

static inline void wlist_del(struct cmwq_work *w) {
        w->_prev->_next = w->_next;
        w->_next->_prev = w->_prev;
        w->_next = w->_prev = NULL;
}

/* A queue's in-flight list holds its pending instances; its running ones
 * are its threads' (current_wq).  An item is pending on one queue at most,
 * so one link will do, even while it runs for another queue. */
static inline void inflight_add(struct cmwq_workqueue *wq, struct cmwq_work *w) {
        w->_state |= WORK_INFLIGHT;
        w->_iprev = wq->inflight._iprev;
        w->_inext = &wq->inflight;
        wq->inflight._iprev->_inext = w;
        wq->inflight._iprev = w;
}

/* @w is no longer pending: it starts, or is taken back or dropped. */
static inline void inflight_del(struct cmwq_work *w) {
        if (!(w->_state & WORK_INFLIGHT))
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
static inline void flushers_instance_done(struct client_work *cw, struct cmwq_workqueue *wq, uint64_t seq) {
        for (struct client_flusher *f = wq->cb_flushers; f; f = f->next)
                if (seq <= f->seq && f->remaining > 0 && --f->remaining == 0)
                        pthread_cond_broadcast(&cw->done);
}

static inline void timers_del(struct cmwq_delayed_work *dw) {
        dw->_tprev->_tnext = dw->_tnext;
        dw->_tnext->_tprev = dw->_tprev;
        dw->_tnext = dw->_tprev = NULL;
        dw->work._state &= ~WORK_TIMER;
}

static inline unsigned wq_max_active(const struct cmwq_workqueue *wq) {
        return wq->max_active ? wq->max_active : CMWQ_DFL_ACTIVE;
}

static inline bool wq_unbound(const struct cmwq_workqueue *wq) {
        return wq->flags & CMWQ_WQ_UNBOUND;
}

static inline bool wq_frozen(const struct cmwq_workqueue *wq) {
        return __atomic_load_n(&wq->cb_frozen, __ATOMIC_ACQUIRE);
}

/* ---- work-shm.c: the shared-memory protocol ------------------------------- */

/* Maps the memory cmwqd shares with @cw and takes its doorbell. */
int work_attach(struct client_work *cw);
void work_futex_wake_all(uint32_t *word);
void work_futex_wait(uint32_t *word, uint32_t val, const struct timespec *timeout);
/* An entry in the submission ring (@arg: a thread's slot, or what @op
 * takes); @lazy: the thread whose entry may ring no doorbell.  Work lock
 * held. */
void work_ring_push(struct client_work *cw, enum cmwq_shm_op op, unsigned arg, const struct work_thread *lazy);
/* Answers the daemon's last freeze notice once no callback of a frozen queue
 * runs.  Work lock held. */
void work_freeze_answer_locked(struct client_work *cw);
/* @t took a new grant; the callback @t starts now. */
void thread_report_grant(struct client_work *cw, struct work_thread *t);
void thread_report_run_start(struct client_work *cw, struct work_thread *t);
bool thread_yield_asked(struct client_work *cw, struct work_thread *t);
/* @t's slot, registered with cmwqd and given back. */
int thread_register(struct client_work *cw, struct work_thread *t);
int thread_unregister(struct client_work *cw, struct work_thread *t);

/* Unbound: @wq's credits entry, named on first use; -1 when cmwqd deals
 * none for it (the client counts its own callbacks only). */
int work_credits_entry(struct client_work *cw, struct cmwq_workqueue *wq);
/* The credits entry @e holds now (granted - returned). */
unsigned work_credits_held(const struct client_work *cw, int e);
/* What entry @e may keep (cmwqd's limit). */
unsigned work_credits_limit(const struct client_work *cw, int e);
uint32_t work_credits_granted(const struct client_work *cw, int e);
/* Tells cmwqd what @e could use now (@want) and gives @back credits back. */
void work_credits_tell(struct client_work *cw, int e, unsigned want, unsigned back);

/* ---- work-pool.c: the pools and their threads ----------------------------- */

/* Starts or asks for workers while @p has work.  Work lock held. */
void work_pool_kick(struct client_work *cw, struct work_pool *p);
/* Tells @t to end, whether it waits on its condition or on its slot. */
void thread_stop(struct client_work *cw, struct work_thread *t);
void thread_free(struct work_thread *t);

/* ---- client-work.c -------------------------------------------------------- */

/* The pool that runs @wq's items queued for @cpu (ignored for an unbound queue). */
struct work_pool *work_pool_for(const struct client_work *cw, const struct cmwq_workqueue *wq, int cpu);
/* The timer thread: the earliest deadline may have moved.  Work lock held. */
void work_timer_wake_locked(struct client_work *cw);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit tests for daemon/cm/pool.c: the pool is driven with synthetic events
 * (block, wake, done, kick) through a mock executor, and every test asserts
 * what the kernel's workqueue semantics say a user would observe.  After
 * every event the pool's counters are checked against its lists.
 */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "cm/pool.h"
#include "util.h"

/* ------------------------------------------------------------------------ */
/* mock executor */

struct twork {
        struct pool_work pw;
        const char *name;
        struct worker *worker;          /* where it last started */
        unsigned nr_started;
        bool executing;                 /* started and not yet reported done */
        bool prepared;                  /* by mock_prepare(), not yet started or given back */
        bool started_prepared;          /* it was prepared when it last started */
        unsigned nr_prepare, nr_unprepare;
        struct pool_work_stats *stats;  /* its workqueue's, as the pool counts them */
        bool cpu_intensive;             /* its workqueue is CPU_INTENSIVE */
};

#define MOCK_LOG_MAX 64

static struct {
        unsigned fail;                  /* fail this many coming executes; UINT_MAX: all */
        bool failed;                    /* the last execute failed: work may wait for a kick */
        unsigned nr_calls;
        unsigned nr_started;
        struct twork *log[MOCK_LOG_MAX]; /* in order of start */
} mock;

static uint64_t default_thresh_usec, default_idle_timeout_usec;

static int mock_execute(struct worker *w, struct pool_work *pw) {
        struct twork *t = container_of(pw, struct twork, pw);

        mock.nr_calls++;
        ck_assert_msg(!t->executing, "%s started while it was executing", t->name);
        ck_assert_ptr_nonnull(w);
        if (mock.fail > 0) {
                if (mock.fail != UINT_MAX)
                        mock.fail--;
                mock.failed = true;
                return -EAGAIN;
        }
        ck_assert_uint_lt(mock.nr_started, MOCK_LOG_MAX);
        mock.failed = false;
        mock.log[mock.nr_started++] = t;
        t->worker = w;
        t->nr_started++;
        t->executing = true;
        t->started_prepared = t->prepared;
        t->prepared = false;
        w->userdata = t;
        return 0;
}

static struct pool_work_stats *mock_stats(struct pool_work *pw) {
        return container_of(pw, struct twork, pw)->stats;
}

static bool mock_queue_cpu_intensive(const struct pool_work *pw) {
        return container_of(pw, struct twork, pw)->cpu_intensive;
}

static const struct pool_work_ops mock_ops = {
        .execute = mock_execute,
        .stats = mock_stats,
        .queue_cpu_intensive = mock_queue_cpu_intensive,
};

static void mock_prepare(struct pool_work *pw) {
        struct twork *t = container_of(pw, struct twork, pw);

        ck_assert_msg(!t->executing, "%s prepared while it was executing", t->name);
        t->nr_prepare++;
        t->prepared = true;
}

static void mock_unprepare(struct pool_work *pw) {
        struct twork *t = container_of(pw, struct twork, pw);

        ck_assert_msg(!t->executing, "%s given back while it was executing", t->name);
        t->nr_unprepare++;
        t->prepared = false;
}

/* An executor that makes work ready ahead, as exec items do. */
static const struct pool_work_ops mock_prep_ops = {
        .execute = mock_execute,
        .stats = mock_stats,
        .queue_cpu_intensive = mock_queue_cpu_intensive,
        .prepare = mock_prepare,
        .unprepare = mock_unprepare,
};

/* @identity NULL: the work is its own identity. */
static void twork_init(struct twork *t, const char *name, const void *identity,
                       struct pool_work_stats *stats, bool cpu_intensive) {
        *t = (struct twork) {
                .pw = {
                        .ops = &mock_ops,
                        .identity = identity ? identity : t,
                },
                .name = name,
                .stats = stats,
                .cpu_intensive = cpu_intensive,
        };
        list_init(&t->pw.entry);
}

static void setup(void) {
        memset(&mock, 0, sizeof(mock));
        pool_cpu_intensive_thresh_usec = default_thresh_usec;
        pool_idle_timeout_usec = default_idle_timeout_usec;
}

/* ------------------------------------------------------------------------ */
/* invariants, checked after every event */

#define INV(cond) ck_assert_msg(cond, "line %d: invariant '%s' broken", line, #cond)

static void check_pool_at(const struct pool *p, int line) {
        const struct worker *w, *v;
        const struct pool_work *s;
        unsigned nr_idle = 0, nr_busy = 0, nr_running = 0, nr_blocked = 0;
        bool timers = p->base && !pool_is_unbound(p);

        list_for_each_entry(w, &p->idle_list, entry) {
                nr_idle++;
                INV(w->pool == p);
                INV(!w->current);
                INV(w->flags == 0);
                INV(list_empty(&w->scheduled));
                INV(!w->userdata);
                INV(!!w->intensive_timer == timers);
                INV(!w->intensive_timer || !evtimer_pending(w->intensive_timer, NULL));
        }

        list_for_each_entry(w, &p->busy_list, entry) {
                const struct twork *t;

                nr_busy++;
                INV(w->pool == p);
                INV(w->current);
                t = container_of(w->current, struct twork, pw);
                INV(t->executing);
                INV(t->worker == w);
                INV(!list_linked(&w->current->entry));
                if (worker_counts_running(w))
                        nr_running++;
                if (w->flags & WORKER_BLOCKED)
                        nr_blocked++;
                if (pool_work_cpu_intensive(w->current))
                        INV(w->flags & WORKER_CPU_INTENSIVE);
                /* The CPU-intensive timer runs exactly while the worker counts. */
                INV(!!w->intensive_timer == timers);
                if (w->intensive_timer)
                        INV(!!evtimer_pending(w->intensive_timer, NULL) == worker_counts_running(w));
                /* Parked work has the identity of what it waits behind. */
                list_for_each_entry(s, &w->scheduled, entry)
                        INV(s->identity == w->current->identity);
                /* Non-reentrancy: no identity executes on two workers. */
                list_for_each_entry(v, &p->busy_list, entry)
                        if (v != w)
                                INV(v->current->identity != w->current->identity);
        }

        INV(p->nr_idle == nr_idle);
        INV(p->nr_workers == nr_idle + nr_busy);
        INV(p->nr_running == nr_running);
        INV(p->nr_blocked == nr_blocked);
        INV(p->nr_pending == list_count(&p->worklist));
        list_for_each_entry(s, &p->worklist, entry)
                INV(!container_of(s, struct twork, pw)->executing);

        /* Work conservation: unless the executor just refused a worker, the
         * pool never holds work it is allowed to start. */
        if (!mock.failed)
                INV(list_empty(&p->worklist) || (!pool_is_unbound(p) && p->nr_running > 0));
}

#define check_pool(p) check_pool_at((p), __LINE__)

/* Synthetic events, each followed by the invariant check. */
#define QUEUE(p, t) do {                                                      \
                pool_queue_work((p), &(t)->pw);                               \
                check_pool(p);                                                \
        } while (0)
#define KICK(p) do {                                                          \
                pool_kick(p);                                                 \
                check_pool(p);                                                \
        } while (0)
#define SLEEP(p, t) do {                                                      \
                ck_assert_msg((t)->executing, "%s is not executing", (t)->name); \
                pool_worker_sleeping((t)->worker);                            \
                check_pool(p);                                                \
        } while (0)
#define WAKE(p, t) do {                                                       \
                ck_assert_msg((t)->executing, "%s is not executing", (t)->name); \
                pool_worker_running((t)->worker);                             \
                check_pool(p);                                                \
        } while (0)
#define DONE(p, t) do {                                                       \
                ck_assert_msg((t)->executing, "%s is not executing", (t)->name); \
                (t)->executing = false;                                       \
                pool_worker_done((t)->worker);                                \
                check_pool(p);                                                \
        } while (0)
#define CANCEL(p, t) ({                                                       \
                bool _r = pool_cancel_pending((p), &(t)->pw);                 \
                check_pool(p);                                                \
                _r;                                                           \
        })

static bool first_pending_is(const struct pool *p, const struct twork *t) {
        return !list_empty(&p->worklist) && p->worklist.next == &t->pw.entry;
}

/* ------------------------------------------------------------------------ */
/* event loop helpers (timer tests only) */

#define GENEROUS_USEC (10 * USEC_PER_SEC)

static bool deadline_passed;

static void deadline_fired(evutil_socket_t fd, short what, void *userdata) {
        deadline_passed = true;
}

static struct event *arm_deadline(struct event_base *base, uint64_t usec) {
        struct timeval tv = timeval_from_usec(usec);
        struct event *ev = evtimer_new(base, deadline_fired, NULL);

        ck_assert_ptr_nonnull(ev);
        deadline_passed = false;
        ck_assert_int_eq(evtimer_add(ev, &tv), 0);
        return ev;
}

/* Runs @base until @cond holds or a generous deadline passes; checks the pool
 * after every loop iteration.  Evaluates to whether @cond holds. */
#define RUN_UNTIL(base, p, cond) ({                                           \
                struct event *_dl = arm_deadline((base), GENEROUS_USEC);      \
                while (!(cond) && !deadline_passed) {                         \
                        ck_assert_int_ge(event_base_loop((base), EVLOOP_ONCE), 0); \
                        check_pool(p);                                        \
                }                                                             \
                event_free(_dl);                                              \
                (cond);                                                       \
        })

/* Runs @base for @usec, checking the pool after every loop iteration. */
#define RUN_FOR(base, p, usec) do {                                           \
                struct event *_dl = arm_deadline((base), (usec));             \
                while (!deadline_passed) {                                    \
                        ck_assert_int_ge(event_base_loop((base), EVLOOP_ONCE), 0); \
                        check_pool(p);                                        \
                }                                                             \
                event_free(_dl);                                              \
        } while (0)

/* Nothing armed: the event loop would have nothing to wake up for. */
static void assert_no_events(struct event_base *base) {
        ck_assert_int_eq(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED), 0);
        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
}

/* ------------------------------------------------------------------------ */
/* concurrency management */

START_TEST(test_bound_one_at_a_time) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b, c;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        twork_init(&c, "c", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);
        check_pool(&p);

        QUEUE(&p, &a);
        QUEUE(&p, &b);
        QUEUE(&p, &c);
        /* Exactly one starts. */
        ck_assert(a.executing);
        ck_assert_uint_eq(mock.nr_calls, 1);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert_uint_eq(p.nr_pending, 2);
        ck_assert(first_pending_is(&p, &b));

        /* Nothing starts while one runs. */
        KICK(&p);
        ck_assert_uint_eq(mock.nr_calls, 1);
        ck_assert_uint_eq(st.cm_wakeups, 0);

        /* It blocks: the next starts at once, as a concurrency-management wake-up. */
        SLEEP(&p, &a);
        ck_assert(b.executing);
        ck_assert_uint_eq(c.nr_started, 0);
        ck_assert_ptr_ne(b.worker, a.worker);
        ck_assert_uint_eq(st.cm_wakeups, 1);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert_uint_eq(p.nr_blocked, 1);
        ck_assert_uint_eq(p.nr_pending, 1);

        /* Blocking that one starts the third. */
        SLEEP(&p, &b);
        ck_assert(c.executing);
        ck_assert_uint_eq(st.cm_wakeups, 2);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert_uint_eq(p.nr_blocked, 2);
        ck_assert_uint_eq(p.nr_pending, 0);
        ck_assert_uint_eq(p.nr_workers, 3);

        /* Blocking the last one with nothing pending is no wake-up. */
        SLEEP(&p, &c);
        ck_assert_uint_eq(st.cm_wakeups, 2);
        ck_assert_uint_eq(p.nr_running, 0);

        /* Started in queueing order. */
        ck_assert_uint_eq(mock.nr_started, 3);
        ck_assert_ptr_eq(mock.log[0], &a);
        ck_assert_ptr_eq(mock.log[1], &b);
        ck_assert_ptr_eq(mock.log[2], &c);
        ck_assert_uint_eq(st.started, 3);

        WAKE(&p, &a);
        WAKE(&p, &b);
        WAKE(&p, &c);
        ck_assert_uint_eq(p.nr_running, 3);
        ck_assert_uint_eq(p.nr_blocked, 0);
        DONE(&p, &a);
        DONE(&p, &b);
        DONE(&p, &c);
        ck_assert_uint_eq(p.nr_running, 0);
        ck_assert_uint_eq(p.nr_idle, 3);
        ck_assert_uint_eq(st.started, 3);
        ck_assert_uint_eq(st.mayday, 0);
        pool_done(&p);
}
END_TEST

/* pool_work_ops.reclaim: before other work starts on a bound pool, a
 * blocked worker's executor may give its work up (a callback thread
 * lingering on its grant) or count running again (one its client woke). */
static enum { RECLAIM_KEEP, RECLAIM_GIVE_UP, RECLAIM_RUNS } reclaim_answer;
static unsigned nr_reclaims;

static bool mock_reclaim(struct worker *w) {
        struct twork *t = w->userdata;

        nr_reclaims++;
        switch (reclaim_answer) {
        case RECLAIM_GIVE_UP:
                reclaim_answer = RECLAIM_KEEP;
                t->executing = false;
                pool_worker_done(w);
                return true;
        case RECLAIM_RUNS:
                reclaim_answer = RECLAIM_KEEP;
                pool_worker_running(w);
                return true;
        default:
                return false;
        }
}

static const struct pool_work_ops mock_reclaim_ops = {
        .execute = mock_execute,
        .stats = mock_stats,
        .queue_cpu_intensive = mock_queue_cpu_intensive,
        .reclaim = mock_reclaim,
};

START_TEST(test_blocked_worker_reclaimed_before_a_start) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b, c;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        twork_init(&c, "c", NULL, &st, false);
        a.pw.ops = &mock_reclaim_ops;
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);
        nr_reclaims = 0;

        /* Nothing blocked, nothing asked. */
        QUEUE(&p, &a);
        ck_assert(a.executing);
        ck_assert_uint_eq(nr_reclaims, 0);

        /* a blocks and keeps its work: b starts, after a was asked. */
        reclaim_answer = RECLAIM_KEEP;
        SLEEP(&p, &a);
        QUEUE(&p, &b);
        ck_assert(b.executing);
        ck_assert_uint_ge(nr_reclaims, 1);
        DONE(&p, &b);

        /* a, blocked, turns out to run again: c waits for it. */
        reclaim_answer = RECLAIM_RUNS;
        QUEUE(&p, &c);
        ck_assert(!c.executing);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert_uint_eq(p.nr_blocked, 0);
        ck_assert_uint_eq(p.nr_pending, 1);

        /* It blocks again and gives its work up: c starts, on a's worker. */
        reclaim_answer = RECLAIM_GIVE_UP;
        SLEEP(&p, &a);
        ck_assert(c.executing);
        ck_assert(!a.executing);
        ck_assert_uint_eq(p.nr_blocked, 0);
        ck_assert_uint_eq(p.nr_running, 1);
        DONE(&p, &c);
        ck_assert_uint_eq(p.nr_running, 0);
        pool_done(&p);
}
END_TEST

/* Unbound pools start what they have: nothing is asked. */
START_TEST(test_unbound_never_reclaims) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        a.pw.ops = &mock_reclaim_ops;
        ck_assert_int_eq(pool_init(&p, NULL, -1, false), 0);
        nr_reclaims = 0;
        reclaim_answer = RECLAIM_GIVE_UP;
        QUEUE(&p, &a);
        SLEEP(&p, &a);
        QUEUE(&p, &b);
        ck_assert(a.executing && b.executing);
        ck_assert_uint_eq(nr_reclaims, 0);
        reclaim_answer = RECLAIM_KEEP;
        WAKE(&p, &a);
        DONE(&p, &a);
        DONE(&p, &b);
        pool_done(&p);
}
END_TEST

START_TEST(test_bound_finish_takes_next) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b;
        struct worker *w;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        QUEUE(&p, &a);
        QUEUE(&p, &b);
        w = a.worker;
        ck_assert_uint_eq(b.nr_started, 0);

        /* The worker that finishes keeps working: no second worker, no CM wake-up. */
        DONE(&p, &a);
        ck_assert(b.executing);
        ck_assert_ptr_eq(b.worker, w);
        ck_assert_uint_eq(p.nr_workers, 1);
        ck_assert_uint_eq(st.cm_wakeups, 0);
        DONE(&p, &b);
        ck_assert_uint_eq(p.nr_idle, 1);
        pool_done(&p);
}
END_TEST

START_TEST(test_duplicate_events_ignored) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        QUEUE(&p, &a);
        /* A wake-up for a worker that is not blocked changes nothing. */
        WAKE(&p, &a);
        ck_assert_uint_eq(p.nr_running, 1);
        SLEEP(&p, &a);
        SLEEP(&p, &a);
        ck_assert_uint_eq(p.nr_blocked, 1);
        ck_assert_uint_eq(p.nr_running, 0);
        QUEUE(&p, &b);
        ck_assert(b.executing);
        WAKE(&p, &a);
        WAKE(&p, &a);
        ck_assert_uint_eq(p.nr_blocked, 0);
        ck_assert_uint_eq(p.nr_running, 2);
        DONE(&p, &a);
        DONE(&p, &b);
        pool_done(&p);
}
END_TEST

START_TEST(test_excess_concurrency) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b, c;
        struct worker *wa, *wb;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        twork_init(&c, "c", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        QUEUE(&p, &a);
        QUEUE(&p, &b);
        QUEUE(&p, &c);
        SLEEP(&p, &a);
        ck_assert(b.executing);
        wa = a.worker;
        wb = b.worker;

        /* a wakes while b runs: two run at once. */
        WAKE(&p, &a);
        ck_assert_uint_eq(p.nr_running, 2);
        ck_assert_uint_eq(c.nr_started, 0);

        /* b finishes first: it goes idle rather than take c. */
        DONE(&p, &b);
        ck_assert_uint_eq(c.nr_started, 0);
        ck_assert_uint_eq(p.nr_pending, 1);
        ck_assert_uint_eq(p.nr_idle, 1);
        ck_assert_uint_eq(p.nr_running, 1);

        /* a finishes, nothing runs: c starts, on the most recently idle worker. */
        DONE(&p, &a);
        ck_assert(c.executing);
        ck_assert_ptr_eq(c.worker, wa);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert_uint_eq(p.nr_idle, 1);
        ck_assert_ptr_eq(list_first_entry(&p.idle_list, struct worker, entry), wb);
        ck_assert_uint_eq(p.nr_workers, 2);
        ck_assert_uint_eq(st.cm_wakeups, 1);
        DONE(&p, &c);
        pool_done(&p);
}
END_TEST

START_TEST(test_cpu_intensive_does_not_count) {
        struct pool p;
        struct pool_work_stats st = { 0 }, hog = { 0 };
        struct twork a, b, c, d, e;

        twork_init(&a, "a", NULL, &hog, true);
        twork_init(&b, "b", NULL, &hog, true);
        twork_init(&c, "c", NULL, &hog, true);
        twork_init(&d, "d", NULL, &st, false);
        twork_init(&e, "e", NULL, &hog, true);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        /* CPU-intensive work does not hold the pool: they start back to back. */
        QUEUE(&p, &a);
        QUEUE(&p, &b);
        QUEUE(&p, &c);
        ck_assert(a.executing && b.executing && c.executing);
        ck_assert_uint_eq(p.nr_running, 0);
        ck_assert_uint_eq(p.nr_workers, 3);

        /* ... nor does a normal work item wait for it. */
        QUEUE(&p, &d);
        ck_assert(d.executing);
        ck_assert_uint_eq(p.nr_running, 1);

        /* But a CPU-intensive item still waits for a running normal one (the
         * kernel's need_more_worker() looks at nr_running only). */
        QUEUE(&p, &e);
        ck_assert_uint_eq(e.nr_started, 0);

        /* A CPU-intensive worker blocking is no concurrency event. */
        SLEEP(&p, &a);
        ck_assert_uint_eq(p.nr_blocked, 1);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert_uint_eq(e.nr_started, 0);
        ck_assert_uint_eq(hog.cm_wakeups + st.cm_wakeups, 0);
        WAKE(&p, &a);
        ck_assert_uint_eq(p.nr_running, 1);

        SLEEP(&p, &d);
        ck_assert(e.executing);
        ck_assert_uint_eq(st.cm_wakeups, 1);
        ck_assert_uint_eq(hog.cpu_intensive, 0);        /* flagged by the queue, not detected */

        WAKE(&p, &d);
        DONE(&p, &a);
        DONE(&p, &b);
        DONE(&p, &c);
        DONE(&p, &d);
        DONE(&p, &e);
        ck_assert_uint_eq(p.nr_idle, 5);
        pool_done(&p);
}
END_TEST

START_TEST(test_unbound_starts_everything) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork t[5];

        ck_assert_int_eq(pool_init(&p, NULL, -1, false), 0);
        for (unsigned i = 0; i < ELEMENTSOF(t); i++) {
                twork_init(&t[i], "t", NULL, &st, false);
                QUEUE(&p, &t[i]);
        }
        for (unsigned i = 0; i < ELEMENTSOF(t); i++) {
                ck_assert(t[i].executing);
                ck_assert_ptr_eq(mock.log[i], &t[i]);
        }
        ck_assert_uint_eq(p.nr_workers, 5);
        ck_assert_uint_eq(p.nr_pending, 0);

        SLEEP(&p, &t[0]);
        WAKE(&p, &t[0]);
        ck_assert_uint_eq(st.cm_wakeups, 0);
        for (unsigned i = 0; i < ELEMENTSOF(t); i++)
                DONE(&p, &t[i]);
        ck_assert_uint_eq(p.nr_idle, 5);
        pool_done(&p);
}
END_TEST

START_TEST(test_unbound_block_is_no_cm_wakeup) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork x, a;

        twork_init(&x, "x", NULL, &st, false);
        twork_init(&a, "a", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, -1, false), 0);

        QUEUE(&p, &x);
        /* a waits only because no worker could be had. */
        mock.fail = UINT_MAX;
        QUEUE(&p, &a);
        ck_assert_uint_eq(a.nr_started, 0);
        ck_assert_uint_eq(p.nr_pending, 1);

        /* Unbound pools are not concurrency managed: a block is no CM wake-up. */
        SLEEP(&p, &x);
        ck_assert_uint_eq(st.cm_wakeups, 0);

        mock.fail = 0;
        KICK(&p);
        ck_assert(a.executing);
        WAKE(&p, &x);
        DONE(&p, &x);
        DONE(&p, &a);
        ck_assert_uint_eq(st.cm_wakeups, 0);
        pool_done(&p);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* non-reentrancy */

START_TEST(test_non_reentrant_bound) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork c, a1, a2, b;
        struct worker *w;
        int x = 0;  /* an identity */

        twork_init(&c, "c", NULL, &st, false);
        twork_init(&a1, "a1", &x, &st, false);
        twork_init(&a2, "a2", &x, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        /* One idle worker to begin with. */
        QUEUE(&p, &c);
        DONE(&p, &c);
        ck_assert_uint_eq(p.nr_idle, 1);

        QUEUE(&p, &a1);
        w = a1.worker;
        QUEUE(&p, &a2);
        QUEUE(&p, &b);
        ck_assert_uint_eq(p.nr_pending, 2);

        /* a1 blocks: a2 must not start next to it, b starts instead. */
        SLEEP(&p, &a1);
        ck_assert_uint_eq(a2.nr_started, 0);
        ck_assert(b.executing);
        ck_assert_uint_eq(p.nr_pending, 0);
        ck_assert_uint_eq(list_count(&w->scheduled), 1);

        /* b is done: a worker is free and nothing runs, a2 still waits for a1. */
        DONE(&p, &b);
        ck_assert_uint_eq(p.nr_running, 0);
        ck_assert_uint_eq(p.nr_idle, 1);
        KICK(&p);
        ck_assert_uint_eq(a2.nr_started, 0);

        /* a1 is done: a2 runs on the same worker. */
        WAKE(&p, &a1);
        DONE(&p, &a1);
        ck_assert(a2.executing);
        ck_assert_ptr_eq(a2.worker, w);
        ck_assert_uint_eq(p.nr_running, 1);
        DONE(&p, &a2);
        ck_assert_uint_eq(p.nr_workers, 2);
        ck_assert_uint_eq(p.nr_idle, 2);
        pool_done(&p);
}
END_TEST

START_TEST(test_non_reentrant_unbound) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a1, a2, a3, b;
        struct worker *w;
        int x = 0;  /* an identity */

        twork_init(&a1, "a1", &x, &st, false);
        twork_init(&a2, "a2", &x, &st, false);
        twork_init(&a3, "a3", &x, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, -1, false), 0);

        QUEUE(&p, &a1);
        QUEUE(&p, &a2);
        QUEUE(&p, &a3);
        QUEUE(&p, &b);
        w = a1.worker;
        ck_assert(a1.executing && b.executing);
        ck_assert_uint_eq(a2.nr_started + a3.nr_started, 0);
        ck_assert_uint_eq(p.nr_workers, 2);
        ck_assert_uint_eq(list_count(&w->scheduled), 2);

        /* One after the other on the same worker, in order. */
        DONE(&p, &a1);
        ck_assert(a2.executing);
        ck_assert_ptr_eq(a2.worker, w);
        ck_assert_uint_eq(a3.nr_started, 0);
        DONE(&p, &a2);
        ck_assert(a3.executing);
        ck_assert_ptr_eq(a3.worker, w);
        DONE(&p, &a3);
        DONE(&p, &b);
        ck_assert_ptr_eq(mock.log[0], &a1);
        ck_assert_ptr_eq(mock.log[1], &b);
        ck_assert_ptr_eq(mock.log[2], &a2);
        ck_assert_ptr_eq(mock.log[3], &a3);
        pool_done(&p);
}
END_TEST

START_TEST(test_parked_cpu_intensive_kicks) {
        struct pool p;
        struct pool_work_stats st = { 0 }, hog = { 0 };
        struct twork a1, a2, b;
        int x = 0;  /* an identity */

        /* The same work item queued on a normal and on a CPU-intensive queue. */
        twork_init(&a1, "a1", &x, &st, false);
        twork_init(&a2, "a2", &x, &hog, true);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        QUEUE(&p, &a1);
        SLEEP(&p, &a1);
        QUEUE(&p, &a2);                 /* parked behind a1 */
        ck_assert_uint_eq(a2.nr_started, 0);
        ck_assert_uint_eq(p.nr_pending, 0);
        WAKE(&p, &a1);
        QUEUE(&p, &b);                  /* waits: a1 runs */
        ck_assert_uint_eq(b.nr_started, 0);

        /* a1 done: a2 runs next on its worker but does not count, so nothing
         * runs any more and b must start (the kernel's process_one_work()
         * kicks the pool after taking any work item). */
        DONE(&p, &a1);
        ck_assert(a2.executing);
        ck_assert(b.executing);
        ck_assert_uint_eq(p.nr_running, 1);
        DONE(&p, &a2);
        DONE(&p, &b);
        pool_done(&p);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* worker creation failure */

START_TEST(test_creation_failure_bound) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        mock.fail = UINT_MAX;
        QUEUE(&p, &a);
        ck_assert_uint_eq(mock.nr_calls, 1);
        ck_assert_uint_eq(st.mayday, 1);
        QUEUE(&p, &b);
        /* Nothing lost, nothing started, a still first. */
        ck_assert_uint_eq(mock.nr_started, 0);
        ck_assert_uint_eq(st.started, 0);
        ck_assert_uint_eq(p.nr_pending, 2);
        ck_assert(first_pending_is(&p, &a));
        ck_assert_uint_ge(st.mayday, 1);
        ck_assert_uint_eq(p.nr_running, 0);

        /* The executor succeeds again: a later kick starts a, and only a. */
        mock.fail = 0;
        KICK(&p);
        ck_assert(a.executing);
        ck_assert_uint_eq(b.nr_started, 0);
        ck_assert_ptr_eq(mock.log[0], &a);
        ck_assert_uint_eq(st.started, 1);

        DONE(&p, &a);
        ck_assert(b.executing);
        DONE(&p, &b);
        pool_done(&p);
}
END_TEST

START_TEST(test_creation_failure_unbound_keeps_order) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork t[3];
        struct pool_work *pw;
        unsigned i = 0;

        ck_assert_int_eq(pool_init(&p, NULL, -1, false), 0);
        mock.fail = UINT_MAX;
        for (i = 0; i < ELEMENTSOF(t); i++) {
                twork_init(&t[i], "t", NULL, &st, false);
                QUEUE(&p, &t[i]);
        }
        ck_assert_uint_eq(mock.nr_started, 0);
        ck_assert_uint_eq(st.mayday, 3);
        i = 0;
        list_for_each_entry(pw, &p.worklist, entry)
                ck_assert_ptr_eq(pw, &t[i++].pw);
        ck_assert_uint_eq(i, 3);

        /* The first attempt fails again, then everything starts in order. */
        mock.fail = 1;
        KICK(&p);
        ck_assert_uint_eq(mock.nr_started, 0);
        ck_assert(first_pending_is(&p, &t[0]));
        mock.fail = 0;
        KICK(&p);
        for (i = 0; i < ELEMENTSOF(t); i++) {
                ck_assert(t[i].executing);
                ck_assert_ptr_eq(mock.log[i], &t[i]);
        }
        for (i = 0; i < ELEMENTSOF(t); i++)
                DONE(&p, &t[i]);
        pool_done(&p);
}
END_TEST

START_TEST(test_creation_failure_parked) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a1, a2, b, c;
        int x = 0;  /* an identity */

        twork_init(&a1, "a1", &x, &st, false);
        twork_init(&a2, "a2", &x, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        twork_init(&c, "c", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        QUEUE(&p, &a1);
        QUEUE(&p, &a2);
        QUEUE(&p, &b);
        SLEEP(&p, &a1);                 /* a2 parked, b runs */
        ck_assert(b.executing);
        ck_assert_uint_eq(a2.nr_started, 0);
        QUEUE(&p, &c);                  /* waits: b runs */
        WAKE(&p, &a1);

        /* a1 done, but a2 cannot be started: it goes back to the worklist,
         * ahead of c, which was queued after it. */
        mock.fail = 1;
        DONE(&p, &a1);
        ck_assert_uint_eq(a2.nr_started, 0);
        ck_assert_uint_eq(st.mayday, 1);
        ck_assert_uint_eq(p.nr_pending, 2);
        ck_assert(first_pending_is(&p, &a2));

        /* b done: a2 starts first. */
        DONE(&p, &b);
        ck_assert(a2.executing);
        ck_assert_uint_eq(c.nr_started, 0);
        DONE(&p, &a2);
        ck_assert(c.executing);
        DONE(&p, &c);
        pool_done(&p);
}
END_TEST

START_TEST(test_creation_failure_retried_by_timer) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a;

        ck_assert_ptr_nonnull(base);
        twork_init(&a, "a", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, base, 0, false), 0);

        mock.fail = 2;
        QUEUE(&p, &a);
        ck_assert_uint_eq(a.nr_started, 0);
        ck_assert(evtimer_pending(p.retry_timer, NULL));

        /* Nobody kicks: the pool retries on its own. */
        ck_assert(RUN_UNTIL(base, &p, a.executing));
        ck_assert_uint_eq(st.mayday, 2);
        ck_assert_uint_eq(mock.nr_calls, 3);
        DONE(&p, &a);
        assert_no_events(base);
        pool_done(&p);
        event_base_free(base);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* cancel */

START_TEST(test_cancel_pending) {
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, a2, b, c;
        int x = 0;  /* an identity */

        twork_init(&a, "a", &x, &st, false);
        twork_init(&a2, "a2", &x, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        twork_init(&c, "c", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);

        QUEUE(&p, &a);
        QUEUE(&p, &a2);
        QUEUE(&p, &b);
        QUEUE(&p, &c);

        /* Pending: taken back once. */
        ck_assert(CANCEL(&p, &b));
        ck_assert_uint_eq(p.nr_pending, 2);
        ck_assert(!CANCEL(&p, &b));
        /* Started: not taken back. */
        ck_assert(!CANCEL(&p, &a));
        ck_assert(a.executing);

        /* a blocks: a2 is parked behind it, c starts. */
        SLEEP(&p, &a);
        ck_assert(c.executing);
        ck_assert_uint_eq(a2.nr_started, 0);
        ck_assert_uint_eq(list_count(&a.worker->scheduled), 1);
        /* Parked: taken back too. */
        ck_assert(CANCEL(&p, &a2));
        ck_assert(list_empty(&a.worker->scheduled));
        ck_assert_uint_eq(p.nr_pending, 0);
        ck_assert(!CANCEL(&p, &c));

        WAKE(&p, &a);
        DONE(&p, &a);
        DONE(&p, &c);
        ck_assert_uint_eq(a2.nr_started + b.nr_started, 0);
        ck_assert_uint_eq(mock.nr_started, 2);
        /* Finished: nothing to take back. */
        ck_assert(!CANCEL(&p, &a));

        /* A cancelled item can be queued again. */
        QUEUE(&p, &b);
        ck_assert(b.executing);
        DONE(&p, &b);
        ck_assert_uint_eq(st.started, 3);
        pool_done(&p);
}
END_TEST

/* Work waiting for its turn on a bound pool is made ready ahead, one at a
 * time (the first pending), and given back when it leaves unstarted; unbound
 * pools and work that starts at once are never prepared. */
START_TEST(test_prepare_next) {
        struct pool p, u;
        struct pool_work_stats st = { 0 };
        struct twork a, b, c, d, x, y;

        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        twork_init(&c, "c", NULL, &st, false);
        twork_init(&d, "d", NULL, &st, false);
        twork_init(&x, "x", NULL, &st, false);
        twork_init(&y, "y", NULL, &st, false);
        a.pw.ops = b.pw.ops = c.pw.ops = d.pw.ops = x.pw.ops = y.pw.ops = &mock_prep_ops;
        ck_assert_int_eq(pool_init(&p, NULL, 0, false), 0);
        ck_assert_int_eq(pool_init(&u, NULL, -1, false), 0);

        /* Started at once: never prepared. */
        QUEUE(&p, &a);
        ck_assert(a.executing);
        ck_assert_uint_eq(a.nr_prepare, 0);
        ck_assert(!a.started_prepared);

        /* Waiting: the first one is prepared, the others not yet. */
        QUEUE(&p, &b);
        QUEUE(&p, &c);
        ck_assert(b.prepared);
        ck_assert(!c.prepared);
        ck_assert_uint_eq(c.nr_prepare, 0);

        /* a blocks: b starts from its prepared state, c is prepared now. */
        SLEEP(&p, &a);
        ck_assert(b.executing);
        ck_assert(b.started_prepared);
        ck_assert(c.prepared);

        /* Cancelled while prepared: given back, once. */
        QUEUE(&p, &d);
        ck_assert(!d.prepared);
        ck_assert(CANCEL(&p, &c));
        ck_assert(!c.prepared);
        ck_assert_uint_eq(c.nr_unprepare, 1);
        /* d is first now: prepared at the next chance to start work. */
        KICK(&p);
        ck_assert(d.prepared);

        /* Nothing pending: nothing prepared. */
        DONE(&p, &b);
        ck_assert(d.executing);
        ck_assert(d.started_prepared);
        DONE(&p, &d);
        WAKE(&p, &a);
        DONE(&p, &a);
        ck_assert_uint_eq(c.nr_started, 0);
        ck_assert_uint_eq(a.nr_unprepare + b.nr_unprepare + d.nr_unprepare, 0);

        /* Unbound: whatever is queued starts, nothing is prepared. */
        QUEUE(&u, &x);
        QUEUE(&u, &y);
        ck_assert(x.executing && y.executing);
        ck_assert_uint_eq(x.nr_prepare + y.nr_prepare, 0);
        DONE(&u, &x);
        DONE(&u, &y);
        pool_done(&p);
        pool_done(&u);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* automatic CPU-intensive marking (real timers) */

START_TEST(test_cpu_intensive_marking) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b;

        ck_assert_ptr_nonnull(base);
        pool_cpu_intensive_thresh_usec = 2000;
        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, base, 0, false), 0);

        QUEUE(&p, &a);
        QUEUE(&p, &b);
        ck_assert_uint_eq(b.nr_started, 0);

        /* a keeps its CPU past the threshold: it stops holding the pool. */
        ck_assert(RUN_UNTIL(base, &p, b.executing));
        ck_assert_uint_eq(st.cpu_intensive, 1);
        ck_assert(a.worker->flags & WORKER_CPU_INTENSIVE);
        ck_assert(!(b.worker->flags & WORKER_CPU_INTENSIVE));
        ck_assert_uint_eq(st.cm_wakeups, 1);
        ck_assert_uint_eq(p.nr_running, 1);

        /* A marked worker stays marked across block and wake-up. */
        SLEEP(&p, &a);
        WAKE(&p, &a);
        ck_assert_uint_eq(p.nr_running, 1);
        ck_assert(a.worker->flags & WORKER_CPU_INTENSIVE);

        /* b hogs too: marked as well, with nothing pending no wake-up. */
        ck_assert(RUN_UNTIL(base, &p, st.cpu_intensive == 2));
        ck_assert_uint_eq(st.cm_wakeups, 1);
        ck_assert_uint_eq(p.nr_running, 0);
        DONE(&p, &a);
        DONE(&p, &b);
        assert_no_events(base);
        pool_done(&p);
        event_base_free(base);
}
END_TEST

START_TEST(test_blocked_never_marked) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a;

        ck_assert_ptr_nonnull(base);
        pool_cpu_intensive_thresh_usec = 2000;
        twork_init(&a, "a", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, base, 0, false), 0);

        QUEUE(&p, &a);
        SLEEP(&p, &a);
        /* Blocked for twenty times the threshold: not CPU-intensive. */
        RUN_FOR(base, &p, 20 * pool_cpu_intensive_thresh_usec);
        ck_assert_uint_eq(st.cpu_intensive, 0);
        ck_assert(!(a.worker->flags & WORKER_CPU_INTENSIVE));

        /* Woken, it runs on and gets marked. */
        WAKE(&p, &a);
        ck_assert(RUN_UNTIL(base, &p, st.cpu_intensive == 1));
        ck_assert(a.worker->flags & WORKER_CPU_INTENSIVE);
        ck_assert_uint_eq(st.cm_wakeups, 0);
        DONE(&p, &a);
        assert_no_events(base);
        pool_done(&p);
        event_base_free(base);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* idle workers (real timers) */

START_TEST(test_no_timer_when_quiet) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork a, b;

        ck_assert_ptr_nonnull(base);
        twork_init(&a, "a", NULL, &st, false);
        twork_init(&b, "b", NULL, &st, false);
        ck_assert_int_eq(pool_init(&p, base, _i ? 0 : -1, false), 0);
        assert_no_events(base);

        QUEUE(&p, &a);
        QUEUE(&p, &b);
        SLEEP(&p, &a);
        WAKE(&p, &a);
        DONE(&p, &a);
        DONE(&p, &b);
        /* A couple of idle workers are kept without any timer. */
        ck_assert_uint_eq(p.nr_idle, 2);
        assert_no_events(base);
        pool_done(&p);
        event_base_free(base);
}
END_TEST

START_TEST(test_idle_reaping) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork t[8];

        ck_assert_ptr_nonnull(base);
        pool_idle_timeout_usec = 20 * USEC_PER_MSEC;
        /* Unbound, or bound with CPU-intensive work: eight busy at once. */
        ck_assert_int_eq(pool_init(&p, base, _i ? 0 : -1, false), 0);
        for (unsigned i = 0; i < ELEMENTSOF(t); i++) {
                twork_init(&t[i], "t", NULL, &st, true);
                QUEUE(&p, &t[i]);
                ck_assert(t[i].executing);
        }
        ck_assert_uint_eq(p.nr_workers, 8);
        for (unsigned i = 0; i < ELEMENTSOF(t); i++)
                DONE(&p, &t[i]);
        ck_assert_uint_eq(p.nr_idle, 8);
        ck_assert(evtimer_pending(p.idle_timer, NULL));

        /* Nothing busy: two idle workers are kept, the most recently used. */
        ck_assert(RUN_UNTIL(base, &p, p.nr_idle == 2));
        ck_assert_uint_eq(p.nr_workers, 2);
        ck_assert_ptr_eq(list_first_entry(&p.idle_list, struct worker, entry), t[7].worker);
        ck_assert_ptr_eq(list_entry(p.idle_list.prev, struct worker, entry), t[6].worker);

        /* And then the pool makes no wake-ups at all. */
        ck_assert(!evtimer_pending(p.idle_timer, NULL));
        assert_no_events(base);
        ck_assert_uint_eq(p.nr_idle, 2);
        pool_done(&p);
        event_base_free(base);
}
END_TEST

START_TEST(test_idle_ratio) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork t[13];
        struct worker *w;
        unsigned i;

        ck_assert_ptr_nonnull(base);
        pool_idle_timeout_usec = 20 * USEC_PER_MSEC;
        ck_assert_int_eq(pool_init(&p, base, -1, false), 0);
        for (i = 0; i < ELEMENTSOF(t); i++) {
                twork_init(&t[i], "t", NULL, &st, false);
                QUEUE(&p, &t[i]);
        }
        ck_assert_uint_eq(p.nr_workers, 13);
        for (i = 0; i < 8; i++)
                DONE(&p, &t[i]);

        /* Five busy: 2 + one per four busy -> (3 - 2) * 4 < 5, three are kept. */
        ck_assert(RUN_UNTIL(base, &p, p.nr_idle == 3));
        ck_assert(!evtimer_pending(p.idle_timer, NULL));
        ck_assert_uint_eq(p.nr_workers, 8);
        /* The oldest idle workers went first. */
        i = 7;
        list_for_each_entry(w, &p.idle_list, entry)
                ck_assert_ptr_eq(w, t[i--].worker);

        /* Four busy: (3 - 2) * 4 >= 4, the third idle worker goes too. */
        DONE(&p, &t[8]);
        ck_assert_uint_eq(p.nr_idle, 4);
        ck_assert(RUN_UNTIL(base, &p, p.nr_idle == 2));
        ck_assert(!evtimer_pending(p.idle_timer, NULL));
        ck_assert_uint_eq(p.nr_workers, 6);
        ck_assert_ptr_eq(list_first_entry(&p.idle_list, struct worker, entry), t[8].worker);
        ck_assert_ptr_eq(list_entry(p.idle_list.prev, struct worker, entry), t[7].worker);

        /* The rest finish: down to two. */
        for (i = 9; i < ELEMENTSOF(t); i++)
                DONE(&p, &t[i]);
        ck_assert_uint_eq(p.nr_idle, 6);
        ck_assert(RUN_UNTIL(base, &p, p.nr_idle == 2));
        ck_assert_uint_eq(p.nr_workers, 2);
        assert_no_events(base);
        pool_done(&p);
        event_base_free(base);
}
END_TEST

START_TEST(test_idle_workers_reused_before_timeout) {
        struct event_base *base = event_base_new();
        struct pool p;
        struct pool_work_stats st = { 0 };
        struct twork t[8];
        unsigned i;

        ck_assert_ptr_nonnull(base);
        pool_idle_timeout_usec = 3600 * USEC_PER_SEC;
        ck_assert_int_eq(pool_init(&p, base, -1, false), 0);
        for (i = 0; i < ELEMENTSOF(t); i++) {
                twork_init(&t[i], "t", NULL, &st, false);
                QUEUE(&p, &t[i]);
        }
        for (i = 0; i < ELEMENTSOF(t); i++)
                DONE(&p, &t[i]);
        ck_assert(evtimer_pending(p.idle_timer, NULL));
        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        check_pool(&p);
        ck_assert_uint_eq(p.nr_idle, 8);

        /* Idle workers are used again rather than new ones created. */
        for (i = 0; i < ELEMENTSOF(t); i++)
                QUEUE(&p, &t[i]);
        ck_assert_uint_eq(p.nr_workers, 8);
        ck_assert_uint_eq(p.nr_idle, 0);
        for (i = 0; i < ELEMENTSOF(t); i++)
                DONE(&p, &t[i]);
        ck_assert_uint_eq(p.nr_workers, 8);
        /* Freed with the idle timer still armed. */
        pool_done(&p);
        event_base_free(base);
}
END_TEST

/* ------------------------------------------------------------------------ */

int main(void) {
        Suite *s = suite_create("pool");
        TCase *tc_cm = tcase_create("concurrency");
        TCase *tc_nr = tcase_create("non-reentrancy");
        TCase *tc_fail = tcase_create("creation-failure");
        TCase *tc_timers = tcase_create("timers");
        SRunner *sr;
        int failed;

        default_thresh_usec = pool_cpu_intensive_thresh_usec;
        default_idle_timeout_usec = pool_idle_timeout_usec;

        tcase_add_checked_fixture(tc_cm, setup, NULL);
        tcase_add_test(tc_cm, test_bound_one_at_a_time);
        tcase_add_test(tc_cm, test_bound_finish_takes_next);
        tcase_add_test(tc_cm, test_blocked_worker_reclaimed_before_a_start);
        tcase_add_test(tc_cm, test_unbound_never_reclaims);
        tcase_add_test(tc_cm, test_duplicate_events_ignored);
        tcase_add_test(tc_cm, test_excess_concurrency);
        tcase_add_test(tc_cm, test_cpu_intensive_does_not_count);
        tcase_add_test(tc_cm, test_unbound_starts_everything);
        tcase_add_test(tc_cm, test_unbound_block_is_no_cm_wakeup);
        tcase_add_test(tc_cm, test_cancel_pending);
        tcase_add_test(tc_cm, test_prepare_next);
        suite_add_tcase(s, tc_cm);

        tcase_add_checked_fixture(tc_nr, setup, NULL);
        tcase_add_test(tc_nr, test_non_reentrant_bound);
        tcase_add_test(tc_nr, test_non_reentrant_unbound);
        tcase_add_test(tc_nr, test_parked_cpu_intensive_kicks);
        suite_add_tcase(s, tc_nr);

        tcase_add_checked_fixture(tc_fail, setup, NULL);
        tcase_add_test(tc_fail, test_creation_failure_bound);
        tcase_add_test(tc_fail, test_creation_failure_unbound_keeps_order);
        tcase_add_test(tc_fail, test_creation_failure_parked);
        tcase_add_test(tc_fail, test_creation_failure_retried_by_timer);
        suite_add_tcase(s, tc_fail);

        tcase_add_checked_fixture(tc_timers, setup, NULL);
        tcase_add_test(tc_timers, test_cpu_intensive_marking);
        tcase_add_test(tc_timers, test_blocked_never_marked);
        tcase_add_loop_test(tc_timers, test_no_timer_when_quiet, 0, 2);
        tcase_add_loop_test(tc_timers, test_idle_reaping, 0, 2);
        tcase_add_test(tc_timers, test_idle_ratio);
        tcase_add_test(tc_timers, test_idle_workers_reused_before_timeout);
        suite_add_tcase(s, tc_timers);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

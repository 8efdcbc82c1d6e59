/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An unbound workqueue's max_active holds for its callback work across every
 * client process of the daemon, as Linux (>= 6.9) enforces an unbound
 * queue's limit system-wide: several processes opening the same queue share
 * its max_active, an ordered queue runs one callback at a time whoever queued
 * it, and a client killed while it holds a share gives it back. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#include "client-helpers.h"
#include "harness.h"

#define MAX_KIDS 4
#define MAX_ITEMS 32
#define SEC_NS 1000000000LL

static struct cmwqd d;

/* ---- what the processes share ---------------------------------------------
 * Made before fork() (MAP_SHARED | MAP_ANONYMOUS), read and written with the
 * __atomic builtins only. */
struct shared {
        int queue_ready;                /* the parent allocated the queue */
        int ready;                      /* children connected, queue opened */
        int go;                         /* the parent lets them queue */
        int running;                    /* callbacks of the queue running now, all processes */
        int max_running;                /* the most seen at once */
        int total;                      /* callbacks run, all processes */
        int done[MAX_KIDS];             /* callbacks run, per child */
        int out_of_order[MAX_KIDS];     /* a child's item ran before one it queued earlier */

        /* test_a_client_that_dies_holding_its_share_gives_it_back */
        int a_running;                  /* A's callback runs (and holds the share) */
        int go_b;
        int b_queued;                   /* B queued its first item */
        int a_killed;                   /* set before the SIGKILL of A */
        int b1_started;
        int b1_started_before_kill;     /* B's first item started while A was alive */
        int b2_started;

        /* test_a_second_process_gets_its_part_while_the_first_has_a_backlog */
        int fair_b_started;             /* B's first callback runs */
        int fair_b_done;                /* B's callbacks run */
        int fair_a_started;             /* A's first callback started */
        int fair_b_done_at_a_start;     /* fair_b_done when it did (-1 before) */
        int fair_a_done;                /* A's callbacks run */

        /* test_a_process_lets_idle_threads_go_while_another_wants_its_credits */
        int idle_a_running;             /* A's callbacks running now */
        int idle_a_done;
        int idle_b_done;
        int idle_a_peak;                /* A's threads once it ran IDLE_MAX_ACTIVE at once */
        int idle_a_least;               /* A's fewest threads after B came, while A still had a backlog */
        int idle_go_b;

        char err[MAX_KIDS][256];        /* why a child gave up */
};

static struct shared *sh;

/* The children of the current test, so that a failure (or the teardown, when
 * Check does not fork) leaves none behind. */
static pid_t kids[MAX_KIDS];
static int kid_status[MAX_KIDS];
static int nr_kids;

static void kill_kids(void) {
        for (int i = 0; i < nr_kids; i++)
                if (kids[i] > 0) {
                        kill(kids[i], SIGKILL);
                        waitpid(kids[i], &kid_status[i], 0);
                        kids[i] = 0;
                }
}

static void setup(void) {
        nr_kids = 0;
        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(sh, MAP_FAILED);
        memset(sh, 0, sizeof(*sh));
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        kill_kids();
        cmwqd_stop(&d);
        munmap(sh, sizeof(*sh));
}

static int load(const int *p) {
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static void store(int *p, int v) {
        __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

/* ---- in the children: no Check assertions, _exit() only ------------------- */

static void child_error(int who, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(sh->err[who], sizeof(sh->err[who]), fmt, ap);
        va_end(ap);
}

/* Waits (up to 60 s) for *@flag to reach @at_least. */
static bool child_wait(const int *flag, int at_least) {
        for (int64_t deadline = mono_ns() + 60 * SEC_NS; load(flag) < at_least;) {
                if (mono_ns() > deadline)
                        return false;
                usleep(1000);
        }
        return true;
}

/* Forks child @who, which runs @fn(who) and _exit()s with what it returns.
 * It dies with the test's process (Check's fork mode ends it at once on a
 * failure, without the teardown). */
static void fork_kid(int who, int (*fn)(int who)) {
        pid_t parent = getpid();
        pid_t pid;

        ck_assert_int_lt(who, MAX_KIDS);
        pid = test_fork();
        if (pid == 0) {
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                        _exit(100);
                _exit(fn(who));
        }
        kids[who] = pid;
        nr_kids = who + 1 > nr_kids ? who + 1 : nr_kids;
}

/* A child's connection to the daemon of the test and the queue the parent
 * made, once the parent says it is there. */
static struct cmwq_workqueue *child_open(int who, const char *name, struct cmwq **ret) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;

        if (!child_wait(&sh->queue_ready, 1)) {
                child_error(who, "the parent did not allocate %s within 60 s", name);
                return NULL;
        }
        c = cmwq_connect(d.socket);
        if (!c) {
                child_error(who, "cmwq_connect(%s): %s", d.socket, cmwq_last_error());
                return NULL;
        }
        wq = cmwq_open_workqueue(c, name);
        if (!wq) {
                child_error(who, "cmwq_open_workqueue(%s): %s", name, cmwq_last_error());
                cmwq_disconnect(c);
                return NULL;
        }
        *ret = c;
        return wq;
}

/* A callback that counts how many of the queue's callbacks run at once, in
 * every process, and blocks a moment (an unbound queue's max_active counts
 * the items executing, blocked or not). */
struct counted_item {
        struct cmwq_work work;
        int who;
        int index;
};

static int last_index = -1;             /* per child: the last of its items that ran */

static void counted_fn(struct cmwq_work *w) {
        struct counted_item *it = cmwq_container_of(w, struct counted_item, work);
        int now = __atomic_add_fetch(&sh->running, 1, __ATOMIC_SEQ_CST);
        int max = load(&sh->max_running);

        while (now > max && !__atomic_compare_exchange_n(&sh->max_running, &max, now, false, __ATOMIC_SEQ_CST,
                                                         __ATOMIC_SEQ_CST))
                ;
        /* Items queued one after the other from one thread on an ordered
         * (or max_active 1) queue: one at a time, in order; not checked for
         * others, whose items may run side by side. */
        if (__atomic_exchange_n(&last_index, it->index, __ATOMIC_SEQ_CST) != it->index - 1)
                __atomic_store_n(&sh->out_of_order[it->who], 1, __ATOMIC_SEQ_CST);
        usleep(5000);
        __atomic_sub_fetch(&sh->running, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&sh->done[it->who], 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&sh->total, 1, __ATOMIC_SEQ_CST);
}

static const char *counted_queue;
static int counted_items;

/* Connects, opens the queue, waits for the others, queues its items, flushes
 * the queue, and exits 0 if every item of its own ran. */
static int counted_child(int who) {
        struct counted_item items[MAX_ITEMS];
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int r;

        wq = child_open(who, counted_queue, &c);
        if (!wq)
                return 2;
        __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
        if (!child_wait(&sh->go, 1)) {
                child_error(who, "the parent did not say go within 60 s");
                return 3;
        }
        for (int i = 0; i < counted_items; i++) {
                items[i] = (struct counted_item) { .who = who, .index = i };
                CMWQ_WORK_INIT(&items[i].work, counted_fn);
                if (!cmwq_queue_work(wq, &items[i].work)) {
                        child_error(who, "cmwq_queue_work of item %d returned false: %s", i, cmwq_last_error());
                        return 4;
                }
        }
        r = cmwq_flush_workqueue(wq);
        if (r < 0) {
                child_error(who, "cmwq_flush_workqueue: %s (%s)", strerror(-r), cmwq_last_error());
                return 5;
        }
        if (load(&sh->done[who]) != counted_items) {
                child_error(who, "%d of its %d items had run when cmwq_flush_workqueue() returned",
                            load(&sh->done[who]), counted_items);
                return 6;
        }
        cmwq_disconnect(c);
        return 0;
}

/* ---- in the parent ---------------------------------------------------------- */

static const char *kid_error(int who) {
        return sh->err[who][0] ? sh->err[who] : "(no message)";
}

/* Waits (up to @timeout_s) for *@flag to reach @at_least; fails the test,
 * with what the children said, if it does not or if a child ends first. */
static void parent_wait(const int *flag, int at_least, int timeout_s, const char *what) {
        for (int64_t deadline = mono_ns() + timeout_s * SEC_NS; load(flag) < at_least;) {
                for (int i = 0; i < nr_kids; i++) {
                        int status;

                        if (kids[i] > 0 && waitpid(kids[i], &status, WNOHANG) == kids[i]) {
                                kids[i] = 0;
                                kill_kids();
                                ck_abort_msg("waiting for %s: child %d ended (status 0x%x): %s", what, i,
                                             (unsigned) status, kid_error(i));
                        }
                }
                if (mono_ns() > deadline) {
                        kill_kids();
                        ck_abort_msg("waiting for %s: not within %d s (at %d of %d)", what, timeout_s, load(flag),
                                     at_least);
                }
                usleep(1000);
        }
}

/* Waits (up to @timeout_s in all) for every child to exit; on timeout
 * returns false, having killed them if @kill_on_timeout.  Their statuses go
 * to kid_status[]. */
static bool wait_kids(int timeout_s, bool kill_on_timeout) {
        int64_t deadline = mono_ns() + timeout_s * SEC_NS;

        for (;;) {
                bool left = false;

                for (int i = 0; i < nr_kids; i++)
                        if (kids[i] > 0) {
                                if (waitpid(kids[i], &kid_status[i], WNOHANG) == kids[i])
                                        kids[i] = 0;
                                else
                                        left = true;
                        }
                if (!left)
                        return true;
                if (mono_ns() > deadline) {
                        if (kill_on_timeout)
                                kill_kids();
                        return false;
                }
                usleep(5000);
        }
}

/* What `cmwqctl ARG` says (for a failure message), or why it said nothing
 * within 10 s: the daemon may be the one stuck. */
static const char *daemon_says(const char *arg) {
        static char buf[1600];
        struct ctl_async a;
        struct ctl_result r;

        ctl_start(&d, &a, (const char *const[]) { arg, NULL });
        if (!ctl_finish(&a, 10000, &r)) {
                kill(a.pid, SIGKILL);
                waitpid(a.pid, NULL, 0);
                snprintf(buf, sizeof(buf), "(cmwqctl %s did not answer within 10 s)", arg);
                return buf;
        }
        snprintf(buf, sizeof(buf), "%s%s", r.out ? r.out : "", r.err ? r.err : "");
        ctl_result_free(&r);
        return buf;
}

static void assert_kids_exited_0(void) {
        for (int i = 0; i < nr_kids; i++)
                ck_assert_msg(WIFEXITED(kid_status[i]) && WEXITSTATUS(kid_status[i]) == 0,
                              "child %d ended with status 0x%x: %s", i, (unsigned) kid_status[i], kid_error(i));
}

/* @n children, forked before anybody connects, each queue @items items on
 * the queue the parent allocates with @alloc; returns the parent's
 * connection and queue, kept until the children are done. */
static void run_counted(int n, int items, const char *name, struct cmwq_workqueue *(*alloc)(struct cmwq *c),
                        struct cmwq **ret_c, struct cmwq_workqueue **ret_wq) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;

        counted_queue = name;
        counted_items = items;
        for (int who = 0; who < n; who++)
                fork_kid(who, counted_child);

        /* The queue is the parent's: it lives as long as this connection. */
        c = connect_ok(&d);
        wq = alloc(c);
        if (!wq) {
                kill_kids();
                ck_abort_msg("alloc %s: %s", name, cmwq_last_error());
        }
        store(&sh->queue_ready, 1);
        /* All connected with the queue open: they queue at the same time. */
        parent_wait(&sh->ready, n, 60, "the children to connect and open the queue");
        store(&sh->go, 1);

        if (!wait_kids(60, true))
                ck_abort_msg("the children did not finish their %d items each within 60 s (%d of %d ran in all, "
                             "at most %d at once): killed", items, load(&sh->total), n * items,
                             load(&sh->max_running));
        assert_kids_exited_0();
        *ret_c = c;
        *ret_wq = wq;
}

static struct cmwq_workqueue *alloc_shared_ub(struct cmwq *c) {
        return cmwq_alloc_workqueue(c, "shared-ub", CMWQ_WQ_UNBOUND, 2);
}

START_TEST(test_unbound_max_active_holds_across_processes) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int max;

        run_counted(3, 20, "shared-ub", alloc_shared_ub, &c, &wq);
        ck_assert_int_eq(load(&sh->total), 60);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(load(&sh->done[i]), 20);
        max = load(&sh->max_running);
        ck_assert_msg(max <= 2, "at most 2 callbacks of the queue may run at once across processes, saw %d", max);
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        cmwq_disconnect(c);
}
END_TEST

static struct cmwq_workqueue *alloc_shared_ord(struct cmwq *c) {
        return cmwq_alloc_ordered_workqueue(c, "shared-ord", 0);
}

START_TEST(test_ordered_queue_runs_one_at_a_time_across_processes) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int max;

        run_counted(2, 10, "shared-ord", alloc_shared_ord, &c, &wq);
        ck_assert_int_eq(load(&sh->total), 20);
        for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(load(&sh->done[i]), 10);
                ck_assert_msg(!load(&sh->out_of_order[i]),
                              "child %d's items did not run in the order it queued them", i);
        }
        max = load(&sh->max_running);
        ck_assert_msg(max <= 1, "an ordered queue runs one callback at a time across processes, saw %d at once",
                      max);
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        cmwq_disconnect(c);
}
END_TEST

/* ---- a client killed while it holds the queue's only slot ------------------ */

#define DEAD_QUEUE "shared-dead"

static void blocker_fn(struct cmwq_work *w) {
        (void) w;
        store(&sh->a_running, 1);
        for (;;)
                pause();
}

/* A: takes the queue's only slot and keeps it until it is killed. */
static int holder_child(int who) {
        struct cmwq_workqueue *wq;
        struct cmwq_work w;
        struct cmwq *c;

        wq = child_open(who, DEAD_QUEUE, &c);
        if (!wq)
                return 2;
        CMWQ_WORK_INIT(&w, blocker_fn);
        if (!cmwq_queue_work(wq, &w)) {
                child_error(who, "cmwq_queue_work returned false: %s", cmwq_last_error());
                return 4;
        }
        for (;;)
                pause();
}

static void b1_fn(struct cmwq_work *w) {
        (void) w;
        if (!load(&sh->a_killed))
                store(&sh->b1_started_before_kill, 1);
        store(&sh->b1_started, 1);
}

static void b2_fn(struct cmwq_work *w) {
        (void) w;
        store(&sh->b2_started, 1);
}

/* B: queues one item while A holds the slot (it waits for A's share), and
 * one more once that ran. */
static int waiter_child(int who) {
        struct cmwq_workqueue *wq;
        struct cmwq_work w1, w2;
        struct cmwq *c;
        int r;

        if (!child_wait(&sh->go_b, 1)) {
                child_error(who, "the parent did not say go within 60 s");
                return 3;
        }
        wq = child_open(who, DEAD_QUEUE, &c);
        if (!wq)
                return 2;
        CMWQ_WORK_INIT(&w1, b1_fn);
        CMWQ_WORK_INIT(&w2, b2_fn);
        if (!cmwq_queue_work(wq, &w1)) {
                child_error(who, "cmwq_queue_work of the first item returned false: %s", cmwq_last_error());
                return 4;
        }
        store(&sh->b_queued, 1);
        r = cmwq_flush_work(&w1);
        if (r < 0) {
                child_error(who, "cmwq_flush_work of the first item: %s (%s)", strerror(-r), cmwq_last_error());
                return 5;
        }
        if (!cmwq_queue_work(wq, &w2)) {
                child_error(who, "cmwq_queue_work of the second item returned false: %s", cmwq_last_error());
                return 6;
        }
        r = cmwq_flush_work(&w2);
        if (r < 0) {
                child_error(who, "cmwq_flush_work of the second item: %s (%s)", strerror(-r), cmwq_last_error());
                return 7;
        }
        cmwq_disconnect(c);
        return 0;
}

START_TEST(test_a_client_that_dies_holding_its_share_gives_it_back) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int status;

        fork_kid(0, holder_child);
        fork_kid(1, waiter_child);
        c = connect_ok(&d);
        wq = cmwq_alloc_workqueue(c, DEAD_QUEUE, CMWQ_WQ_UNBOUND, 1);
        if (!wq) {
                kill_kids();
                ck_abort_msg("alloc %s: %s", DEAD_QUEUE, cmwq_last_error());
        }
        store(&sh->queue_ready, 1);
        parent_wait(&sh->a_running, 1, 30, "client A's callback to run");

        /* B's first item is queued while A's callback holds the only slot. */
        store(&sh->go_b, 1);
        parent_wait(&sh->b_queued, 1, 30, "client B to queue its item");

        /* B's item must not start while A lives.  Give it a chance to
         * show that it would (2 s, which decide nothing when it waits as it
         * should: it cannot start before the kill anyway). */
        for (int64_t until = mono_ns() + 2 * SEC_NS; !load(&sh->b1_started) && mono_ns() < until;)
                usleep(1000);

        /* Marked before the kill: whatever B's item sees after this, A may
         * already be gone. */
        store(&sh->a_killed, 1);
        ck_assert_int_eq(kill(kids[0], SIGKILL), 0);
        ck_assert_int_eq(waitpid(kids[0], &status, 0), kids[0]);
        kids[0] = 0;
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                      "client A ended with status 0x%x before it was killed: %s", (unsigned) status, kid_error(0));

        if (!wait_kids(30, false)) {
                /* What the daemon says while B still waits. */
                char *list = strdup(daemon_says("list"));

                kill_kids();
                ck_assert_msg(load(&sh->b1_started),
                              "client B's item, queued while client A's callback held the queue's only slot "
                              "(max_active 1), did not run within 30 s after A was killed: the dead client's "
                              "share was not given back; cmwqctl list:\n%s", list);
                ck_assert_msg(load(&sh->b2_started),
                              "client B's second item, queued after its first had run (%s A was killed), did not "
                              "run within 30 s: the queue's only slot (A's share, or that of B's first item) was "
                              "not given back; cmwqctl list:\n%s",
                              load(&sh->b1_started_before_kill) ? "before" : "after", list);
                ck_abort_msg("client B did not exit within 30 s though both its items ran: %s", kid_error(1));
        }
        ck_assert_msg(WIFEXITED(kid_status[1]) && WEXITSTATUS(kid_status[1]) == 0,
                      "client B ended with status 0x%x: %s", (unsigned) kid_status[1], kid_error(1));
        ck_assert(load(&sh->b1_started) && load(&sh->b2_started));
        ck_assert_msg(!load(&sh->b1_started_before_kill),
                      "client B's item ran while client A's callback held the queue's only slot "
                      "(max_active 1 across processes)");
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        cmwq_disconnect(c);
}
END_TEST

/* ---- a second process while the first has a backlog ---------------------- */

#define FAIR_QUEUE "shared-fair"
#define FAIR_MAX_ACTIVE 4
#define FAIR_B_ITEMS 400
#define FAIR_A_ITEMS 5

/* One callback of the queue starts, in whichever process: counted in
 * sh->running and sh->max_running, as counted_fn() does. */
static void fair_enter(void) {
        int now = __atomic_add_fetch(&sh->running, 1, __ATOMIC_SEQ_CST);
        int max = load(&sh->max_running);

        while (now > max && !__atomic_compare_exchange_n(&sh->max_running, &max, now, false, __ATOMIC_SEQ_CST,
                                                         __ATOMIC_SEQ_CST))
                ;
}

/* It returns: no longer running, one more of *@done. */
static void fair_leave(int *done) {
        __atomic_sub_fetch(&sh->running, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
}

static void fair_b_fn(struct cmwq_work *w) {
        (void) w;
        fair_enter();
        store(&sh->fair_b_started, 1);
        usleep(5000);
        fair_leave(&sh->fair_b_done);
}

static void fair_a_fn(struct cmwq_work *w) {
        (void) w;
        fair_enter();
        if (!__atomic_exchange_n(&sh->fair_a_started, 1, __ATOMIC_SEQ_CST))
                store(&sh->fair_b_done_at_a_start, load(&sh->fair_b_done));
        usleep(5000);
        fair_leave(&sh->fair_a_done);
}

/* Queues @n items of @fn on @wq: 0, or what the child exits with. */
static int queue_all(int who, struct cmwq_workqueue *wq, struct cmwq_work *works, int n,
                     void (*fn)(struct cmwq_work *)) {
        for (int i = 0; i < n; i++) {
                CMWQ_WORK_INIT(&works[i], fn);
                if (!cmwq_queue_work(wq, &works[i])) {
                        child_error(who, "cmwq_queue_work of item %d returned false: %s", i, cmwq_last_error());
                        return 4;
                }
        }
        return 0;
}

/* Flushes @wq: 0, or what the child exits with. */
static int flush_all(int who, struct cmwq_workqueue *wq) {
        int r = cmwq_flush_workqueue(wq);

        if (r < 0) {
                child_error(who, "cmwq_flush_workqueue: %s (%s)", strerror(-r), cmwq_last_error());
                return 5;
        }
        return 0;
}

/* Once *@after is set (NULL: at once; @late says what did not happen
 * otherwise), opens @queue, queues @n items of @fn, flushes the queue,
 * checks that all @n ran (*@done) and disconnects; returns what the child
 * exits with. */
static int child_run_items(int who, const int *after, const char *late, const char *queue,
                           struct cmwq_work *works, int n, void (*fn)(struct cmwq_work *), const int *done) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int r;

        if (after && !child_wait(after, 1)) {
                child_error(who, "%s within 60 s", late);
                return 3;
        }
        wq = child_open(who, queue, &c);
        if (!wq)
                return 2;
        r = queue_all(who, wq, works, n, fn);
        if (r == 0)
                r = flush_all(who, wq);
        if (r == 0 && load(done) != n) {
                child_error(who, "%d of its %d items had run when cmwq_flush_workqueue() returned", load(done), n);
                r = 6;
        }
        if (r == 0)
                cmwq_disconnect(c);
        return r;
}

/* B: a backlog of FAIR_B_ITEMS items, queued at once. */
static int fair_b_child(int who) {
        static struct cmwq_work works[FAIR_B_ITEMS];

        return child_run_items(who, NULL, NULL, FAIR_QUEUE, works, FAIR_B_ITEMS, fair_b_fn, &sh->fair_b_done);
}

/* A: opens the queue once B's first callback ran (B holds every credit and
 * wants more), and queues a few items. */
static int fair_a_child(int who) {
        struct cmwq_work works[FAIR_A_ITEMS];

        return child_run_items(who, &sh->fair_b_started, "the first client's first callback did not run",
                               FAIR_QUEUE, works, FAIR_A_ITEMS, fair_a_fn, &sh->fair_a_done);
}

START_TEST(test_a_second_process_gets_its_part_while_the_first_has_a_backlog) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int max, at_start;

        store(&sh->fair_b_done_at_a_start, -1);
        fork_kid(0, fair_b_child);
        fork_kid(1, fair_a_child);

        /* The queue is the parent's: it lives as long as this connection. */
        c = connect_ok(&d);
        wq = cmwq_alloc_workqueue(c, FAIR_QUEUE, CMWQ_WQ_UNBOUND, FAIR_MAX_ACTIVE);
        if (!wq) {
                kill_kids();
                ck_abort_msg("alloc %s: %s", FAIR_QUEUE, cmwq_last_error());
        }
        store(&sh->queue_ready, 1);

        /* 400 items of 5 ms, 4 at a time: 0.5 s when all goes well. */
        if (!wait_kids(120, true))
                ck_abort_msg("the clients did not finish within 120 s (the first ran %d of its %d items, the "
                             "second %d of its %d, at most %d at once): killed", load(&sh->fair_b_done),
                             FAIR_B_ITEMS, load(&sh->fair_a_done), FAIR_A_ITEMS, load(&sh->max_running));
        assert_kids_exited_0();
        ck_assert_int_eq(load(&sh->fair_a_done), FAIR_A_ITEMS);
        ck_assert_int_eq(load(&sh->fair_b_done), FAIR_B_ITEMS);
        max = load(&sh->max_running);
        ck_assert_msg(max <= FAIR_MAX_ACTIVE,
                      "at most %d callbacks of the queue may run at once across processes, saw %d",
                      FAIR_MAX_ACTIVE, max);
        at_start = load(&sh->fair_b_done_at_a_start);
        ck_assert_int_ge(at_start, 0);
        ck_assert_msg(at_start < 300,
                      "a second process waited for the first one's backlog: its first callback started only after "
                      "%d of the first's %d (max_active %d must be shared while both want more)",
                      at_start, FAIR_B_ITEMS, FAIR_MAX_ACTIVE);
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        cmwq_disconnect(c);
}
END_TEST

/* ---- threads beyond a process's part ------------------------------------ */

#define IDLE_QUEUE "shared-idle"
#define IDLE_MAX_ACTIVE 16
#define IDLE_ITEMS 160
/* A's backlog: while it lasts, both processes want more than their part.
 * Long enough that on a loaded machine B's first callbacks (it connects,
 * queues and is given credits meanwhile) end well before it does: with
 * 160 the window was about 150 ms, and once B ended none within it. */
#define IDLE_A_ITEMS 480

static int threads_of_self(void) {
        char line[128];
        int n = -1;
        FILE *f = fopen("/proc/self/status", "re");

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Threads: %d", &n) == 1)
                        break;
        fclose(f);
        return n;
}

static void idle_a_fn(struct cmwq_work *w) {
        (void) w;
        fair_enter();
        __atomic_add_fetch(&sh->idle_a_running, 1, __ATOMIC_SEQ_CST);
        usleep(20000);
        __atomic_sub_fetch(&sh->idle_a_running, 1, __ATOMIC_SEQ_CST);
        fair_leave(&sh->idle_a_done);
}

static void idle_b_fn(struct cmwq_work *w) {
        (void) w;
        fair_enter();
        usleep(20000);
        fair_leave(&sh->idle_b_done);
}

/* A: a backlog that alone fills max_active; once it runs that many at once
 * it lets B come, and watches its own threads while it still has a
 * backlog of its own. */
static int idle_a_child(int who) {
        static struct cmwq_work works[IDLE_A_ITEMS];
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int r, least;

        wq = child_open(who, IDLE_QUEUE, &c);
        if (!wq)
                return 2;
        r = queue_all(who, wq, works, IDLE_A_ITEMS, idle_a_fn);
        if (r != 0)
                return r;
        if (!child_wait(&sh->idle_a_running, IDLE_MAX_ACTIVE)) {
                child_error(who, "never ran %d callbacks at once alone (%d done)", IDLE_MAX_ACTIVE,
                            load(&sh->idle_a_done));
                return 3;
        }
        store(&sh->idle_a_peak, threads_of_self());
        store(&sh->idle_go_b, 1);
        least = load(&sh->idle_a_peak);
        /* While a quarter of A's backlog is left, both want more than their
         * part: each is limited to half. */
        while (load(&sh->idle_a_done) < IDLE_A_ITEMS * 3 / 4) {
                int n = threads_of_self();

                if (load(&sh->idle_b_done) > 0 && n > 0 && n < least)
                        least = n;
                usleep(2000);
        }
        store(&sh->idle_a_least, least);
        r = flush_all(who, wq);
        if (r == 0)
                cmwq_disconnect(c);
        return r;
}

static int idle_b_child(int who) {
        static struct cmwq_work works[IDLE_ITEMS];

        return child_run_items(who, &sh->idle_go_b, "the first client did not fill the queue", IDLE_QUEUE, works,
                               IDLE_ITEMS, idle_b_fn, &sh->idle_b_done);
}

/* A process that ran the whole of a queue's max_active alone, and then has
 * to share it, ends the threads its part no longer lets run rather than
 * keeping them for the idle timeout (5 minutes): across processes, the
 * threads stay near what max_active lets run at once. */
START_TEST(test_a_process_lets_idle_threads_go_while_another_wants_its_credits) {
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int peak, least;

        fork_kid(0, idle_a_child);
        fork_kid(1, idle_b_child);
        c = connect_ok(&d);
        wq = cmwq_alloc_workqueue(c, IDLE_QUEUE, CMWQ_WQ_UNBOUND, IDLE_MAX_ACTIVE);
        if (!wq) {
                kill_kids();
                ck_abort_msg("alloc %s: %s", IDLE_QUEUE, cmwq_last_error());
        }
        store(&sh->queue_ready, 1);
        if (!wait_kids(120, true))
                ck_abort_msg("the clients did not finish within 120 s (%d of %d and %d of 160 items)",
                             load(&sh->idle_a_done), IDLE_A_ITEMS, load(&sh->idle_b_done));
        assert_kids_exited_0();
        ck_assert_int_eq(load(&sh->idle_a_done), IDLE_A_ITEMS);
        ck_assert_int_eq(load(&sh->idle_b_done), IDLE_ITEMS);
        ck_assert_int_le(load(&sh->max_running), IDLE_MAX_ACTIVE);
        peak = load(&sh->idle_a_peak);
        least = load(&sh->idle_a_least);
        ck_assert_int_gt(peak, IDLE_MAX_ACTIVE);
        /* Half of 16 runs now: 8 threads are idle, of which 2 are kept. */
        ck_assert_msg(peak - least >= 3,
                      "the first process had %d threads running %d callbacks alone, and still %d while the "
                      "second took its part of max_active %d",
                      peak, IDLE_MAX_ACTIVE, least, IDLE_MAX_ACTIVE);
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        cmwq_disconnect(c);
}
END_TEST

int main(void) {
        Suite *s = suite_create("unbound-shared");
        TCase *tc = tcase_create("unbound-shared");
        SRunner *sr;
        int failed;

        signal(SIGPIPE, SIG_IGN);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 150);
        tcase_add_test(tc, test_unbound_max_active_holds_across_processes);
        tcase_add_test(tc, test_ordered_queue_runs_one_at_a_time_across_processes);
        tcase_add_test(tc, test_a_client_that_dies_holding_its_share_gives_it_back);
        tcase_add_test(tc, test_a_second_process_gets_its_part_while_the_first_has_a_backlog);
        tcase_add_test(tc, test_a_process_lets_idle_threads_go_while_another_wants_its_credits);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

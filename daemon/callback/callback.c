/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Callback work: client worker threads as pool workers, see callback/callback.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "callback/callback-credits.h"
#include "callback/callback-shm.h"
#include "callback/callback.h"
#include "util.h"

/* A line about a client's worker thread: CMWQ_CPU= in the journal. */
#define log_callback(w, ...) \
        log_fields_errno(LOG_DEBUG, 0, &(const struct log_fields) { .has_cpu = (w)->pool->cpu >= 0, \
                                                                    .cpu = (unsigned) (w)->pool->cpu }, \
                         __VA_ARGS__)

struct callback_registry {
        struct core *core;
        struct list_head clients;
};

struct callback_client {
        struct callback_registry *registry;
        struct list_head entry;
        pid_t pid;
        int pidfd;                      /* the process that connected; -1: none */
        const struct core_caller *caller;
        struct callback_shm *shm;
        struct callback_credits *credits;       /* of unbound queues; NULL once let go */
        callback_freeze_fn freeze;
        callback_broken_fn broken;
        void *userdata;
        struct list_head workers;
        unsigned nr_workers;
        struct callback_worker *slots[CMWQ_SHM_SLOTS];
        struct list_head holds;         /* struct callback_hold: freezes it has not answered */
        uint32_t freeze_seq;            /* the last freeze notice's number */
        bool grant_taken;               /* it says when a thread took a grant (taken_ns) */
        bool is_broken;                 /* broke its shared memory: nothing it says there counts */
        bool limit_logged;              /* a thread was refused for the per-user limit */
        struct pool_work_stats stats;
};

struct callback_worker {
        struct callback_client *client;
        struct list_head entry;
        pid_t tid;
        unsigned slot;                  /* its control block in the shared region */
        uint32_t grant_seq;             /* grants so far: ours, not the region's */
        struct pool *pool;
        struct pool_work work;          /* the demand: queued while it waits */
        struct worker *granted;         /* the pool's worker while it holds a grant */
        struct sleepwatch_target *target;
        bool yield_sent;
        bool lazy_allowed;              /* perf watches it: it may skip the doorbell (proto/shm.h) */
        bool lazy_doorbell;             /* what its slot's lazy_doorbell says */
        uint64_t granted_usec;          /* CLOCK_MONOTONIC, while granted */
        uint64_t granted_finished;      /* its completion record then */
        uint64_t counted_finished;      /* its completion record, as last added to the pool's count */
        struct user_usage *usage;       /* its uid's, counting it; NULL for root */
        struct event *yield_timer;      /* asked to yield: how long it may take */
        uint64_t yield_asked_usec;      /* CLOCK_MONOTONIC, when it was asked to yield */
        uint64_t yield_cpu_usec;        /* its CPU time then */
        uint64_t granted_cpu_usec;      /* its CPU time (our clock) at the grant, or POOL_CPU_UNKNOWN */
        uint64_t yield_item_start_usec; /* its reported callback start then (callback_item_start_cpu_usec()) */
};

static int callback_execute(struct worker *pw, struct pool_work *work);
static uint64_t callback_cpu_usec(struct worker *pw);
static uint64_t callback_item_start_cpu_usec(struct worker *pw);
static void callback_cpu_intensive(struct worker *pw);
static void callback_describe(struct worker *pw, char *buf, size_t size);
static void callback_sync(struct worker *pw);

static bool callback_reclaim(struct worker *pw);
static struct pool_work_stats *callback_stats(struct pool_work *work);

static const struct pool_work_ops callback_ops = {
        .reclaim = callback_reclaim,
        .execute = callback_execute,
        .stats = callback_stats,
        .cpu_usec = callback_cpu_usec,
        .item_start_cpu_usec = callback_item_start_cpu_usec,
        .cpu_intensive = callback_cpu_intensive,
        .describe = callback_describe,
        .sync = callback_sync,
};

/* Reads what @w's client pushed to its ring without ringing the doorbell
 * (proto/shm.h, lazy_doorbell): entries that matter once @w's thread stops
 * holding its CPU, which is what the caller is about to act on. */
static void callback_worker_sync(struct callback_worker *w) {
        /* Its switches first: with the idle sentinels they may wait unread,
         * and whether it runs and its CPU time (callback_cpu_usec()) come
         * from them.  A preemption not read yet would count as CPU time. */
        sleepwatch_catch_up(core_sleepwatch(w->client->registry->core));
        (void) callback_shm_drain(w->client->shm);
}

static void callback_sync(struct worker *pw) {
        struct callback_worker *w = pw->userdata;

        if (w)
                callback_worker_sync(w);
}

static struct pool_work_stats *callback_stats(struct pool_work *work) {
        return &container_of(work, struct callback_worker, work)->client->stats;
}

/* When @w's thread took its current grant, by its client's word: only its
 * own blocks can be taken for its wait by a lie (proto/shm.h). */
static uint64_t callback_wait_end(struct sleepwatch_target *t, void *userdata) {
        struct callback_worker *w = userdata;

        return w->client->is_broken ? 0 : callback_shm_grant_taken_ns(w->client->shm, w->slot, w->grant_seq);
}

/* A thread may leave entries unrung for cmwqd to find at its next switch
 * (proto/shm.h, lazy_doorbell) only while that switch comes soon and is
 * read within a few ms:
 *  - while its CPU is watched (sleepwatch_cpu_watched()).  Its
 *    CPU goes unwatched once nothing there counts running and nothing
 *    waits, and a granted thread that blocked may then wake, push a demand
 *    for its CPU and give its grant back without anyone reading it; its
 *    client's work for that CPU would wait for the next request that
 *    happens to read the ring;
 *  - while its grant counts: a CPU-intensive one may run on without a
 *    switch for as long as its item runs, and a demand it leaves for its
 *    CPU -- work it queued there, which may start at once -- would wait
 *    that long. */
static void callback_worker_update_lazy(struct callback_worker *w) {
        bool lazy = w->lazy_allowed && w->granted && !(w->granted->flags & WORKER_CPU_INTENSIVE) &&
                    sleepwatch_cpu_watched(core_sleepwatch(w->client->registry->core), w->pool->cpu);

        if (lazy == w->lazy_doorbell)
                return;
        w->lazy_doorbell = lazy;
        callback_shm_set_lazy_doorbell(w->client->shm, w->slot, lazy);
}

static int callback_execute(struct worker *pw, struct pool_work *work) {
        struct callback_worker *w = container_of(work, struct callback_worker, work);

        pw->userdata = w;
        w->granted = pw;
        w->yield_sent = false;
        w->granted_usec = now_usec(CLOCK_MONOTONIC);
        callback_shm_records(w->client->shm, w->slot, &(uint64_t) { 0 }, &w->granted_finished);
        /* The pool took its CPU-time baseline before it knew the thread:
         * take it now, so that the CPU-intensive threshold counts CPU time,
         * not the wall time.  Each callback the grant runs counts from its
         * own start (callback_item_start_cpu_usec()). */
        pw->cpu_baseline_usec = callback_cpu_usec(pw);
        w->granted_cpu_usec = pw->cpu_baseline_usec;
        /* It waits for this grant asleep; from now on it runs. */
        sleepwatch_target_assume_running(w->target);
        callback_worker_update_lazy(w);
        log_callback(w, "callback: thread %d (PID %d) granted CPU %d", (int) w->tid, (int) w->client->pid,
                     w->pool->cpu);
        /* A thread that demanded its CPU may still have been on its way
         * into the wait for this grant: its switch-out into that wait,
         * stamped after the line above, is no work blocking.  Its client
         * says when it took the grant (callback_wait_end()).  If the
         * wake-up found nobody waiting, the thread sees the grant without
         * sleeping, and every switch-out from here on is its work's. */
        if (callback_shm_grant(w->client->shm, w->slot, ++w->grant_seq) && w->client->grant_taken)
                sleepwatch_target_waking(w->target, callback_wait_end);
        return 0;
}

/* From the client's completion records, which it may have scribbled on:
 * words for a log, nothing decided by them. */
static void callback_describe(struct worker *pw, char *buf, size_t size) {
        struct callback_worker *w = pw->userdata;
        uint64_t started, finished;

        if (!w) {
                snprintf(buf, size, "a client's callback thread");
                return;
        }
        callback_shm_records(w->client->shm, w->slot, &started, &finished);
        snprintf(buf, size,
                 "callback thread %d of PID %d (UID %u), granted %" PRIu64 " s ago, %" PRIu64
                 " callbacks returned since, %s",
                 (int) w->tid, (int) w->client->pid, (unsigned) w->client->caller->uid,
                 (now_usec(CLOCK_MONOTONIC) - w->granted_usec) / USEC_PER_SEC, finished - w->granted_finished,
                 started == finished + 1 ? "one running now" : "none running now");
}

/* CPU time of the thread (not of one item: a grant runs many; see
 * callback_item_start_cpu_usec()), from the sleep detector, which watches
 * the thread anyway: with perf, from its switch records, no system call. */
static uint64_t callback_cpu_usec(struct worker *pw) {
        struct callback_worker *w = pw->userdata;

        return w ? sleepwatch_target_cpu_usec(w->target) : POOL_CPU_UNKNOWN;
}

/* The thread's CPU time when its current callback started, on our clock:
 * its time at the grant plus what its client reports it used under the
 * grant before that callback (proto/shm.h; 0 from a client that reports
 * nothing: the grant).  The pool counts the CPU-intensive threshold from
 * there, per callback, as the kernel per work item.  A memory read, only
 * when the pool's threshold timer fires; cm/pool.c bounds it by the grant's
 * (or the last wake-up's) baseline and by the CPU time now, so a client
 * can only make its own thread count sooner or later within that. */
static uint64_t callback_reported_start_usec(struct callback_worker *w) {
        uint64_t ns = callback_shm_run_cpu_ns(w->client->shm, w->slot);

        if (w->granted_cpu_usec == POOL_CPU_UNKNOWN)
                return POOL_CPU_UNKNOWN;
        return w->granted_cpu_usec + ns / 1000;        /* no overflow: ns / 1000 < 2^54 */
}

/* Once the thread was asked to yield, what it reported then: an honest
 * thread starts no callback after the request, and one that will not
 * yield cannot stay counted by claiming fresh starts while others wait. */
static uint64_t callback_item_start_cpu_usec(struct worker *pw) {
        struct callback_worker *w = pw->userdata;

        if (!w)
                return POOL_CPU_UNKNOWN;
        return w->yield_sent ? w->yield_item_start_usec : callback_reported_start_usec(w);
}

static void callback_worker_ask_yield(struct callback_worker *w);

/* The pool stopped counting the thread (a callback past the threshold, its
 * queue's CPU_INTENSIVE flag, or starved while asked to yield): it gives
 * the grant back after its current callback, so that the next one counts
 * again under a new grant -- the kernel clears WORKER_CPU_INTENSIVE after
 * each item -- instead of running uncounted beside the workers started
 * meanwhile. */
static void callback_cpu_intensive(struct worker *pw) {
        struct callback_worker *w = pw->userdata;

        if (!w || w->granted != pw)
                return;
        callback_worker_update_lazy(w);
        if (!w->yield_sent)
                callback_worker_ask_yield(w);
}

/* A granted thread asked to yield that keeps its grant, and got less than
 * 1/CALLBACK_STARVED_SHARE of a CPU since it was asked, stops counting
 * toward its pool once CALLBACK_STARVED_USEC have passed: one that the
 * scheduler keeps from running (its own SCHED_IDLE spinners, its cgroup's
 * quota) never reaches the CPU-intensive threshold, and would hold the
 * CPU's other work back.  One that runs, only slowly because the machine
 * is loaded, is left to that threshold, as the kernel leaves it: wall time
 * says nothing of what a work item does with its CPU.  The window is long
 * enough for the scheduler to have given a thread on a crowded run queue
 * its turns (a SCHED_IDLE thread behind one spinner gets about 1/340 of
 * the CPU; a normal one among 16 runnable tasks on 2 CPUs, 1/8).  Even so
 * the share alone cannot tell starved from loaded: with autogroups a busy
 * machine's CPU is split between sessions first, and a normal thread of a
 * session with spinners of its own on that CPU got nothing for 20-30 ms and
 * 1/45 of the CPU over 64 ms at load 15.  So only a thread kept from running
 * by its own settings (SCHED_IDLE, a positive nice value, a cgroup with a
 * CPU quota) stops counting; a normal one waits for its turn as any task of
 * that CPU does, and starting other work beside it would only oversubscribe
 * the CPU when it is busiest.
 *
 * First, though, a thread that hardly ran may not be waiting for the CPU at
 * all: one granted while its client keeps it blocked somewhere other than
 * its slot's futex (in a signal handler, say) never takes the grant's
 * wake-up and so never writes a switch record, yet counts running from the
 * grant on.  /proc tells (sleepwatch_target_recheck()): asleep, it counts
 * as blocked, as any worker that blocks, and the CPU's other work starts. */
#define CALLBACK_YIELD_CHECK_USEC (2 * pool_cpu_intensive_thresh_usec)
#define CALLBACK_STARVED_USEC (10 * CALLBACK_YIELD_CHECK_USEC)
#define CALLBACK_STARVED_SHARE 32

static void callback_yield_timer_arm(struct callback_worker *w) {
        struct timeval tv = timeval_from_usec(CALLBACK_YIELD_CHECK_USEC);

        evtimer_add(w->yield_timer, &tv);
}

/* Whether the cgroup v2 cgroup of thread @tid of @pid, or one above it, has
 * a CPU quota (cpu.max other than "max"). */
static bool callback_thread_cgroup_has_quota(pid_t pid, pid_t tid) {
        char path[PATH_MAX + 64], line[PATH_MAX], *slash;
        bool found = false;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/cgroup", (int) pid, (int) tid);
        f = fopen(path, "re");
        if (!f)
                return false;
        while (!found && fgets(line, sizeof(line), f))
                found = strncmp(line, "0::/", 4) == 0;
        fclose(f);
        if (!found)
                return false;
        line[strcspn(line, "\n")] = 0;
        for (char *dir = line + 3; dir[1];) {
                char quota[32] = "";

                snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.max", dir);
                f = fopen(path, "re");
                if (f) {
                        bool limited = fscanf(f, "%31s", quota) == 1 && strcmp(quota, "max") != 0;

                        fclose(f);
                        if (limited)
                                return true;
                }
                slash = strrchr(dir, '/');
                if (slash == dir)
                        break;
                *slash = 0;
        }
        return false;
}

/* Why the scheduler gives @w's thread less than a normal thread, by the
 * thread's own settings or its cgroup's; NULL if it does not. */
static const char *callback_thread_runs_below_normal(const struct callback_worker *w, char *buf, size_t size) {
        int policy, nice;

        policy = sched_getscheduler(w->tid);
        if (policy >= 0 && (policy & ~SCHED_RESET_ON_FORK) == SCHED_IDLE)
                return "it runs SCHED_IDLE";
        errno = 0;
        nice = getpriority(PRIO_PROCESS, (id_t) w->tid);       /* the thread's, on Linux */
        if (errno == 0 && nice > 0) {
                snprintf(buf, size, "it runs at nice %d", nice);
                return buf;
        }
        if (callback_thread_cgroup_has_quota(w->client->pid, w->tid))
                return "its cgroup has a CPU quota";
        return NULL;
}

static void callback_yield_overdue(evutil_socket_t fd, short what, void *userdata) {
        struct callback_worker *w = userdata;
        uint64_t cpu, waited;
        const char *why;
        char buf[64];

        callback_worker_sync(w);
        if (!w->granted || !worker_counts_running(w->granted))
                return;
        cpu = callback_cpu_usec(w->granted);
        waited = now_usec(CLOCK_MONOTONIC) - w->yield_asked_usec;
        if (waited < CALLBACK_STARVED_USEC ||
            (cpu != POOL_CPU_UNKNOWN && w->yield_cpu_usec != POOL_CPU_UNKNOWN &&
             cpu - w->yield_cpu_usec >= waited / CALLBACK_STARVED_SHARE)) {
                callback_yield_timer_arm(w);
                return;
        }
        /* Hardly ran: asleep, by its own doing, or only because other load
         * has the CPU (then it waits for its turn like any task of that
         * CPU). */
        sleepwatch_target_recheck(w->target);
        if (!w->granted || !worker_counts_running(w->granted)) {
                log_callback(w, "callback: thread %d (PID %d) has not yielded CPU %d in %" PRIu64
                             " ms and is asleep without having run: it counts as blocked",
                             (int) w->tid, (int) w->client->pid, w->pool->cpu, waited / USEC_PER_MSEC);
                return;
        }
        why = cpu == POOL_CPU_UNKNOWN ? "its CPU time cannot be read" : callback_thread_runs_below_normal(w, buf, sizeof(buf));
        if (!why) {
                callback_yield_timer_arm(w);
                return;
        }
        log_callback(w, "callback: thread %d (PID %d) has not yielded CPU %d in %" PRIu64
                     " ms and hardly ran meanwhile (%s): it stops counting there",
                     (int) w->tid, (int) w->client->pid, w->pool->cpu, waited / USEC_PER_MSEC, why);
        pool_worker_cpu_intensive(w->granted);
}

static void callback_worker_ask_yield(struct callback_worker *w) {
        w->yield_sent = true;
        callback_shm_yield(w->client->shm, w->slot, w->grant_seq);
        w->yield_asked_usec = now_usec(CLOCK_MONOTONIC);
        w->yield_cpu_usec = callback_cpu_usec(w->granted);
        w->yield_item_start_usec = callback_reported_start_usec(w);
        callback_yield_timer_arm(w);
}

static void callback_sleep_changed(struct sleepwatch_target *t, bool running, void *userdata) {
        struct callback_worker *w = userdata;

        /* What it pushed without ringing before it switched out was read
         * before this (callback_switches_seen()). */
        if (!w->granted)
                return;         /* waiting for a grant: that is not work blocking */
        log_callback(w, "callback: thread %d (PID %d) %s", (int) w->tid, (int) w->client->pid,
                     running ? "runs again" : "blocked");
        if (!running) {
                pool_worker_sleeping(w->granted);
                return;
        }
        pool_worker_running(w->granted);
        /* Woke up to find others running: like the kernel's keep_working(),
         * finish this item and go idle rather than take more, so that the
         * CPU is not oversubscribed and no new thread is needed. */
        if (worker_counts_running(w->granted) && w->pool->nr_running > 1 && !w->yield_sent)
                callback_worker_ask_yield(w);
}

/* Other work waits for @p: threads of other clients holding it yield. */
static void callback_pool_contended(struct pool *p, struct pool_work *work, void *userdata) {
        struct callback_registry *r = userdata;
        struct callback_client *owner = NULL, *c;
        struct callback_worker *w;

        if (work->ops == &callback_ops)
                owner = container_of(work, struct callback_worker, work)->client;

        list_for_each_entry(c, &r->clients, entry) {
                if (c == owner)
                        continue;       /* its own next demand: the thread keeps going */
                list_for_each_entry(w, &c->workers, entry)
                        if (w->pool == p && w->granted && !w->yield_sent && worker_counts_running(w->granted)) {
                                log_callback(w, "callback: thread %d (PID %d) asked to yield CPU %d", (int) w->tid,
                                             (int) c->pid, p->cpu);
                                callback_worker_ask_yield(w);
                        }
        }
}

/* Tells @c that @wq was frozen or thawed, under the name it knows.  Until
 * it answers a freeze, @c holds it: its callbacks of @wq may still run. */
static void callback_client_tell_freeze(struct callback_client *c, struct workqueue *wq) {
        char name[CORE_WORKQUEUE_NAME_MAX];
        struct core_workqueue_info info;
        struct callback_hold *h = NULL;
        uint32_t seq = 0;

        /* Its answer could not come: its connection is ending. */
        if (c->is_broken || !workqueue_visible_to(wq, c->caller))
                return;
        core_workqueue_info(wq, &info);
        core_workqueue_name_for(&info, c->caller, name, sizeof(name));
        if (info.frozen) {
                c->freeze_seq = (c->freeze_seq + 1) & CMWQ_SHM_SEQ_MASK;
                if (c->freeze_seq == 0)
                        c->freeze_seq = 1;
                seq = c->freeze_seq;
                h = calloc(1, sizeof(*h));
                if (h) {
                        h->pid = c->pid;
                        h->seq = seq;
                        list_add_tail(&h->owner_entry, &c->holds);
                        workqueue_callback_hold_add(wq, h);
                } else
                        log_queue(LOG_WARNING, &info,
                                  "Out of memory: the freeze of %s does not wait for PID %d's callbacks", info.name,
                                  (int) c->pid);
        }
        c->freeze(name, info.frozen, seq, c->userdata);
}

static int callback_client_tell_frozen(struct workqueue *wq, const struct core_workqueue_info *info, void *userdata) {
        if (info->frozen)
                callback_client_tell_freeze(userdata, wq);
        return 0;
}

/* Whether notice @seq was sent no later than @acked (both modulo 2^24). */
static bool freeze_seq_answered(uint32_t seq, uint32_t acked) {
        return ((acked - seq) & CMWQ_SHM_SEQ_MASK) < (CMWQ_SHM_SEQ_MASK + 1) / 2;
}

/* @c says that no callback of a frozen queue runs, as of notice @acked.
 * Taken on its word: a client that answers early lets only its own
 * callbacks run into the freeze. */
static void callback_client_freeze_answered(struct callback_client *c, uint32_t acked) {
        struct callback_hold *h, *n;
        bool freed = false;

        list_for_each_entry_safe(h, n, &c->holds, owner_entry)
                if (freeze_seq_answered(h->seq, acked)) {
                        struct core_workqueue_info info;

                        core_workqueue_info(h->wq, &info);
                        log_queue(LOG_DEBUG, &info, "callback: PID %d has no callback of %s running any more",
                                  (int) c->pid, info.name);
                        workqueue_callback_hold_free(h);
                        freed = true;
                }
        /* Only then: a client repeating its answer costs no walk of the queues. */
        if (freed)
                core_check_freezers(c->registry->core);
}

static void callback_freeze_changed(struct workqueue *wq, void *userdata) {
        struct callback_registry *r = userdata;
        struct callback_client *c;

        list_for_each_entry(c, &r->clients, entry)
                callback_client_tell_freeze(c, wq);
}

/* The threads of any client may have switched: what they pushed to their
 * rings without ringing (their IDLE, their pools' next demands) is read
 * before cmwqd acts on their switches (proto/shm.h, lazy_doorbell). */
static void callback_switches_seen(void *userdata) {
        struct callback_registry *r = userdata;
        struct callback_client *c;

        list_for_each_entry(c, &r->clients, entry)
                (void) callback_shm_drain(c->shm);
}

static void callback_worker_count(struct callback_worker *w);

/* Every granted thread's callbacks so far (a lingering one holds its grant
 * after its last item). */
static void callback_count_all(void *userdata) {
        struct callback_registry *r = userdata;
        struct callback_client *c;
        struct callback_worker *w;

        list_for_each_entry(c, &r->clients, entry)
                list_for_each_entry(w, &c->workers, entry)
                        if (w->granted)
                                callback_worker_count(w);
}

/* The granted threads of @cpu's pools may skip the doorbell, or no longer
 * (callback_worker_update_lazy()). */
static void callback_cpu_watch_changed(int cpu, void *userdata) {
        struct callback_registry *r = userdata;

        for (int highpri = 0; highpri < 2; highpri++) {
                struct pool *p = core_pool_for(r->core, cpu, highpri);
                struct worker *pw;

                list_for_each_entry(pw, &p->busy_list, entry)
                        /* Not yet callback_execute()'s: it sets its own. */
                        if (pw->current && pw->current->ops == &callback_ops && pw->userdata)
                                callback_worker_update_lazy(pw->userdata);
        }
}

static const struct core_callback_hooks callback_hooks = {
        .freeze_changed = callback_freeze_changed,
        .pool_contended = callback_pool_contended,
        .switches_seen = callback_switches_seen,
        .count_callbacks = callback_count_all,
        .cpu_watch_changed = callback_cpu_watch_changed,
};

int callback_registry_new(struct core *core, struct callback_registry **ret) {
        struct callback_registry *r = calloc(1, sizeof(*r));

        if (!r)
                return -ENOMEM;
        r->core = core;
        list_init(&r->clients);
        core_set_callback_hooks(core, &callback_hooks, r);
        *ret = r;
        return 0;
}

struct callback_registry *callback_registry_free(struct callback_registry *r) {
        if (!r)
                return NULL;
        while (!list_empty(&r->clients))
                callback_client_free(list_first_entry(&r->clients, struct callback_client, entry));
        core_set_callback_hooks(r->core, NULL, NULL);
        free(r);
        return NULL;
}

static int callback_shm_op(enum cmwq_shm_op op, unsigned slot, void *userdata);

static void callback_worker_release(struct callback_worker *w);

/* @c's threads hold and wait for no CPU any more, and no freeze waits for
 * its answer.  Demands first, so that no grant given back starts another of
 * its threads. */
static void callback_client_let_go(struct callback_client *c) {
        struct callback_worker *w;

        list_for_each_entry(w, &c->workers, entry)
                if (!w->granted)
                        callback_worker_release(w);
        list_for_each_entry(w, &c->workers, entry)
                callback_worker_release(w);
        if (!list_empty(&c->holds)) {
                while (!list_empty(&c->holds))
                        workqueue_callback_hold_free(list_first_entry(&c->holds, struct callback_hold, owner_entry));
                core_check_freezers(c->registry->core);
        }
        /* Its part of unbound queues' max_active goes to others. */
        c->credits = callback_credits_free(c->credits);
}

static void callback_shm_broken(const char *why, void *userdata) {
        struct callback_client *c = userdata;

        log_warning("Client PID %d broke the memory it shares with cmwqd: %s", (int) c->pid, why);
        c->is_broken = true;
        /* Now, not once its connection is freed, which waits until it took
         * its unread replies.  Its answer to a freeze could only come
         * through the ring: what its threads still run, they run outside
         * cmwq's management. */
        callback_client_let_go(c);
        c->broken(why, c->userdata);
}

static void callback_credits_broken(const char *why, void *userdata) {
        struct callback_client *c = userdata;

        callback_shm_break(c->shm, why);
}

/* Whether @pid reads the CLOCK_MONOTONIC we and perf's records read: its
 * time namespace (CRIU, some containers) may shift it by any offset, and
 * its taken_ns would then say nothing we can compare. */
static bool callback_client_shares_our_clock(pid_t pid) {
        struct stat ours, theirs;
        char path[64];

        if (stat("/proc/self/ns/time", &ours) < 0)
                return errno == ENOENT;         /* a kernel without time namespaces */
        snprintf(path, sizeof(path), "/proc/%d/ns/time", (int) pid);
        return stat(path, &theirs) == 0 && theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino;
}

int callback_client_new(struct callback_registry *r, const struct core_caller *caller, int pidfd, unsigned flags,
                        callback_freeze_fn freeze, callback_broken_fn broken, void *userdata,
                        struct callback_client **ret, int *ret_memfd, int *ret_eventfd, struct core_error *e) {
        _cleanup_(closep) int owned_pidfd = pidfd;
        struct callback_client *c;
        pid_t pid = caller->pid;
        int k;

        if (pid <= 0)
                return core_error_set(e, -EINVAL, "the client's PID is unknown");
        c = calloc(1, sizeof(*c));
        if (!c)
                return core_error_set(e, -ENOMEM, "out of memory");
        k = callback_shm_new(core_event_base(r->core), core_sleepwatch(r->core), pid,
                             flags & CALLBACK_CLIENT_CREDITS, callback_shm_op, callback_shm_broken, c, &c->shm,
                             ret_memfd, ret_eventfd, e);
        if (k < 0) {
                free(c);
                return k;
        }
        c->registry = r;
        c->pid = pid;
        c->pidfd = TAKE_FD(owned_pidfd);
        c->grant_taken = (flags & CALLBACK_CLIENT_GRANT_TAKEN) && callback_client_shares_our_clock(pid);
        c->caller = caller;
        c->freeze = freeze;
        c->broken = broken;
        c->userdata = userdata;
        c->credits = callback_credits_new(r->core, caller, c->shm, callback_credits_broken, c);
        if (!c->credits) {
                callback_shm_free(c->shm);
                free(c);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        list_init(&c->workers);
        list_init(&c->holds);
        list_add_tail(&c->entry, &r->clients);
        /* Before any grant: no callback of a frozen queue may start. */
        (void) core_for_each_workqueue(r->core, NULL, callback_client_tell_frozen, c);
        log_debug("callback: PID %d has its shared memory", (int) pid);
        *ret = c;
        return 0;
}

/* Adds the callbacks @w returned since the last look to its pool's count.
 * The record is the client's: one that goes backwards or leaps is not
 * believed, and it never counts for more than the client's own threads. */
#define CALLBACK_COUNT_LEAP_MAX (UINT64_C(1) << 32)

static void callback_worker_count(struct callback_worker *w) {
        uint64_t started, finished;

        callback_shm_records(w->client->shm, w->slot, &started, &finished);
        if (finished >= w->counted_finished && finished - w->counted_finished <= CALLBACK_COUNT_LEAP_MAX)
                w->pool->callbacks_returned += finished - w->counted_finished;
        w->counted_finished = finished;
}

/* Gives back the grant or withdraws the demand. */
static void callback_worker_release(struct callback_worker *w) {
        struct worker *pw = w->granted;

        callback_worker_count(w);
        evtimer_del(w->yield_timer);
        if (pw) {
                log_callback(w, "callback: thread %d (PID %d) gives CPU %d back%s", (int) w->tid, (int) w->client->pid,
                             w->pool->cpu, pw->flags & WORKER_CPU_INTENSIVE ? " (was CPU-intensive)" : "");
                w->granted = NULL;
                pw->userdata = NULL;
                pool_worker_done(pw);
        } else if (list_linked(&w->work.entry))
                pool_cancel_pending(w->pool, &w->work);
}

/* The pool is about to start other work on this thread's CPU while the
 * thread holds its grant, blocked (pool_work_ops.reclaim).  Lingering idle
 * on the grant (proto/shm.h), it gives it back now.  Woken by its client to
 * run items on it (TAKEN), it counts running again if /proc says it is
 * runnable -- its switches may not have been read, or reported, yet -- and
 * as blocked if not, in an item or kept asleep by its client.  Blocked in
 * an item, it may not linger on this grant any more. */
static bool callback_reclaim(struct worker *pw) {
        struct callback_worker *w = pw->userdata;
        bool runs;

        if (!w || w->client->is_broken)
                return false;
        switch (callback_shm_linger_revoke(w->client->shm, w->slot)) {
        case CMWQ_SHM_LINGER_IDLE:
                log_callback(w, "callback: thread %d (PID %d) lingered on CPU %d: its grant goes back for other work",
                             (int) w->tid, (int) w->client->pid, w->pool->cpu);
                callback_worker_release(w);
                return true;
        case CMWQ_SHM_LINGER_TAKEN:
                runs = sleepwatch_thread_runnable(w->client->pid, w->tid);
                callback_shm_linger_settle(w->client->shm, w->slot, runs);
                if (runs) {
                        /* Records of before now no longer count. */
                        sleepwatch_target_assume_running(w->target);
                        pool_worker_running(pw);
                        return true;
                }
                break;
        default:
                break;
        }
        return false;
}

static void callback_worker_free(struct callback_worker *w) {
        callback_worker_release(w);
        event_free(w->yield_timer);
        sleepwatch_target_free(w->target);
        w->pool->nr_callback_threads--;
        if (w->usage) {
                w->usage->nr_callback_threads--;
                user_usage_put(core_users(w->client->registry->core), w->usage);
        }
        w->client->slots[w->slot] = NULL;
        list_del_init(&w->entry);
        w->client->nr_workers--;
        free(w);
}

struct callback_client *callback_client_free(struct callback_client *c) {
        if (!c)
                return NULL;
        /* Gone: none of its callbacks runs any more. */
        callback_client_let_go(c);
        while (!list_empty(&c->workers))
                callback_worker_free(list_first_entry(&c->workers, struct callback_worker, entry));
        callback_shm_free(c->shm);
        if (c->pidfd >= 0)
                close(c->pidfd);
        list_del_init(&c->entry);
        free(c);
        return NULL;
}

static struct callback_worker *callback_worker_find(struct callback_client *c, pid_t tid) {
        struct callback_worker *w;

        list_for_each_entry(w, &c->workers, entry)
                if (w->tid == tid)
                        return w;
        return NULL;
}

/* Whether the process that connected still lives, and so still has the pid
 * c->pid: nothing else can have it then.  Without a pidfd (a kernel before
 * 5.3) the pid is believed, as it was before pidfds. */
static bool callback_client_alive(const struct callback_client *c) {
        if (c->pidfd < 0)
                return true;
        return syscall(SYS_pidfd_send_signal, c->pidfd, 0, NULL, 0) == 0 || errno == EPERM;
}

/* Whether @tid is a thread of @pid (as the daemon sees the client). */
static bool thread_of(pid_t pid, pid_t tid) {
        char path[64];
        struct stat st;

        snprintf(path, sizeof(path), "/proc/%d/task/%d", (int) pid, (int) tid);
        return stat(path, &st) == 0;
}

int callback_worker_register(struct callback_client *c, pid_t tid, unsigned slot, unsigned cpu, bool highpri,
                             struct core_error *e) {
        struct core *core = c->registry->core;
        const struct limits *limits = &core_get_config(core)->limits;
        struct user_usage *usage = NULL;
        struct callback_worker *w;
        int r;

        if (tid <= 0 || !thread_of(c->pid, tid))
                return core_error_set(e, -EINVAL, "thread %d is not a thread of the client (PID %d)", (int) tid,
                                      (int) c->pid);
        if (callback_worker_find(c, tid))
                return core_error_set(e, -EEXIST, "thread %d is registered already", (int) tid);
        if (slot >= CMWQ_SHM_SLOTS)
                return core_error_set(e, -EINVAL, "slot %u is out of range (%u slots)", slot, CMWQ_SHM_SLOTS);
        if (c->slots[slot])
                return core_error_set(e, -EEXIST, "slot %u is taken by thread %d", slot, (int) c->slots[slot]->tid);
        if (!core_cpu_allowed(core, cpu))
                return core_error_set(e, -EINVAL, "CPU %u is offline or outside cmwqd's CPU set", cpu);
        if (c->nr_workers >= CALLBACK_WORKERS_MAX)
                return core_error_set(e, -ENOSPC, "a client may have at most %u callback worker threads",
                                      CALLBACK_WORKERS_MAX);
        if (!caller_is_privileged(c->caller)) {
                usage = user_usage_get(core_users(core), c->caller->uid);
                if (!usage)
                        return core_error_set(e, -ENOMEM, "out of memory");
                if (usage->nr_callback_threads >= limits->value[LIMIT_CALLBACK_THREADS]) {
                        user_usage_put(core_users(core), usage);
                        r = limit_refuse(limits, LIMIT_CALLBACK_THREADS, c->caller->uid, e);
                        /* Once per client: the library retries with a back-off. */
                        if (!c->limit_logged)
                                log_warning("Client PID %d: %s; its callbacks wait for the threads it has",
                                            (int) c->pid, e ? e->message : "per-user limit 'callback-threads'");
                        c->limit_logged = true;
                        return r;
                }
        }

        w = calloc(1, sizeof(*w));
        if (!w) {
                user_usage_put(core_users(core), usage);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        w->client = c;
        w->tid = tid;
        w->slot = slot;
        w->pool = core_pool_for(core, (int) cpu, highpri);
        list_init(&w->work.entry);
        w->yield_timer = evtimer_new(core_event_base(core), callback_yield_overdue, w);
        if (!w->yield_timer) {
                user_usage_put(core_users(core), usage);
                free(w);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        w->work.ops = &callback_ops;
        w->work.identity = w;

        r = sleepwatch_watch_thread(core_sleepwatch(core), c->pid, tid, callback_sleep_changed, w, &w->target);
        if (r < 0) {
                user_usage_put(core_users(core), usage);
                event_free(w->yield_timer);
                free(w);
                return core_error_set(e, r, "cannot watch thread %d: %s", (int) tid, strerror(-r));
        }
        /* The connection may outlive the process that made it (a child
         * keeps it), and its pid may be another process's by now: the
         * thread found above, and watched now, is the client's only if that
         * process still lives after both. */
        if (!callback_client_alive(c)) {
                w->target = sleepwatch_target_free(w->target);
                user_usage_put(core_users(core), usage);
                event_free(w->yield_timer);
                free(w);
                return core_error_set(e, -ESRCH, "the process that connected (PID %d) has exited: thread %d is not "
                                      "its", (int) c->pid, (int) tid);
        }
        list_add_tail(&w->entry, &c->workers);
        c->slots[slot] = w;
        c->nr_workers++;
        if (usage) {
                usage->nr_callback_threads++;
                w->usage = usage;
        }
        w->pool->nr_callback_threads++;
        /* A slot freed by a thread that ended: the new one starts afresh. */
        callback_shm_reset_slot(c->shm, slot);
        w->lazy_allowed = sleepwatch_target_is_perf(w->target);
        /* Whatever the slot says now was not run on this pool's watch. */
        callback_shm_records(c->shm, slot, &(uint64_t) { 0 }, &w->counted_finished);
        log_debug("callback: PID %d registered worker thread %d on CPU %u%s", (int) c->pid, (int) tid, cpu,
                  highpri ? " (highpri)" : "");
        return 0;
}

static int callback_worker_get(struct callback_client *c, pid_t tid, struct callback_worker **ret,
                               struct core_error *e) {
        struct callback_worker *w = callback_worker_find(c, tid);

        if (!w)
                return core_error_set(e, -ENOENT, "thread %d is not a registered worker", (int) tid);
        *ret = w;
        return 0;
}

int callback_worker_unregister(struct callback_client *c, pid_t tid, struct core_error *e) {
        struct callback_worker *w = NULL;
        int r;

        r = callback_worker_get(c, tid, &w, e);
        if (r < 0)
                return r;
        callback_worker_free(w);
        return 0;
}

/* The thread has work: queue its demand (a no-op if queued or granted). */
static void callback_worker_demand(struct callback_worker *w) {
        if (w->granted || list_linked(&w->work.entry))
                return;
        log_callback(w, "callback: thread %d (PID %d) demands CPU %d (%u running there)", (int) w->tid,
                     (int) w->client->pid, w->pool->cpu, w->pool->nr_running);
        pool_queue_work(w->pool, &w->work);
}

/* Taken on the client's word: it cannot hold back anyone by it, only let
 * others start, as its own threads outside cmwq would. */
static void callback_worker_intensive(struct callback_worker *w) {
        if (!w->granted)
                return;         /* gave it back already, or never had it: nothing to stop counting */
        log_callback(w, "callback: thread %d (PID %d) runs CPU-intensive work on CPU %d", (int) w->tid,
                     (int) w->client->pid, w->pool->cpu);
        pool_worker_cpu_intensive(w->granted);
}

/* Idle @w, pinned to @cpu by its client now, demands that CPU: it goes to
 * that CPU's pool of its priority (CMWQ_SHM_OP_MOVE).  What it had on its
 * old one goes back first.  Its sleep detection and its slot stay as
 * they are: both follow the thread.  -EINVAL: no pool on @cpu. */
static int callback_worker_move(struct callback_worker *w, unsigned cpu) {
        struct core *core = w->client->registry->core;

        if (!core_cpu_allowed(core, cpu))
                return -EINVAL;
        callback_worker_release(w);
        w->pool->nr_callback_threads--;
        w->pool = core_pool_for(core, (int) cpu, w->pool->highpri);
        w->pool->nr_callback_threads++;
        log_callback(w, "callback: thread %d (PID %d) moves to CPU %u", (int) w->tid, (int) w->client->pid, cpu);
        callback_worker_demand(w);
        return 0;
}

static int callback_shm_op(enum cmwq_shm_op op, unsigned arg, void *userdata) {
        struct callback_client *c = userdata;
        struct callback_worker *w;

        if (op == CMWQ_SHM_OP_FREEZE_ACK) {
                callback_client_freeze_answered(c, arg);
                return 0;
        }
        if (op == CMWQ_SHM_OP_CREDITS) {
                if (c->credits)
                        callback_credits_changed(c->credits, arg);
                return 0;
        }
        w = c->slots[op == CMWQ_SHM_OP_MOVE ? CMWQ_SHM_MOVE_SLOT(arg) : arg];
        if (!w)
                return -ENOENT;
        switch (op) {
        case CMWQ_SHM_OP_MOVE:
                return callback_worker_move(w, CMWQ_SHM_MOVE_CPU(arg));
        case CMWQ_SHM_OP_DEMAND:
                callback_worker_demand(w);
                break;
        case CMWQ_SHM_OP_INTENSIVE:
                callback_worker_intensive(w);
                break;
        case CMWQ_SHM_OP_IDLE:
                callback_worker_release(w);
                break;
        case CMWQ_SHM_OP_FREEZE_ACK:
        case CMWQ_SHM_OP_CREDITS:
                break;
        }
        return 0;
}

int callback_client_sync(struct callback_client *c) {
        return callback_shm_drain(c->shm);
}

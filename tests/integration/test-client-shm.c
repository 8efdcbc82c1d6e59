/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * "A client that scribbles on its shared memory harms only itself"
 * (proto/shm.h), against a real cmwqd: a libcmwq-client process finds its
 * own mapping of the memory it shares with the daemon and writes over it,
 * then rings the doorbell.  A user would check that the daemon lives on and
 * keeps serving everyone else (another library client's callbacks, cmwqctl's
 * exec work, a callback that holds its CPU meanwhile, a freeze), that the
 * scribbler's connection is ended (its calls fail, none hangs), that its log
 * says why, and that nothing of the scribbler stays in the daemon (its fds).
 * And a client that fills its ring with valid entries as fast as it can
 * (DEMAND/IDLE pairs in a loop) gets a budget: cmwqd spends a bounded share
 * of a CPU on it and serves everyone else meanwhile.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#include "client-helpers.h"
#include "harness.h"
#include "shm.h"

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

/* As a system's cmwqd logs: not every entry of a ring at debug level. */
static void setup_info(void) {
        cmwqd_start(&d, (const char *const[]) { "--log-level", "info", NULL });
}

static void teardown(void) {
        cmwqd_stop(&d);
}

/* Lines of the daemon's log that contain @what. */
static int log_count(const char *what) {
        char *log = read_file(d.log);
        int n = 0;

        ck_assert_ptr_nonnull(log);
        for (const char *p = strstr(log, what); p; p = strstr(p + 1, what))
                n++;
        free(log);
        return n;
}

/* ---- the scribbler (a child process) ------------------------------------ */

enum scribble {
        SCRIBBLE_RANDOM,                /* random bytes over the whole region */
        SCRIBBLE_TAIL_AHEAD,            /* sq_tail far ahead of sq_head */
        SCRIBBLE_BAD_OP,                /* an entry with an op no version has */
        SCRIBBLE_SLOT_OUT_OF_RANGE,     /* an entry naming slot CMWQ_SHM_SLOTS */
        SCRIBBLE_UNREGISTERED_SLOT,     /* an entry naming a slot no thread has */
        SCRIBBLE_MOVE_NO_POOL,          /* a thread moved to a CPU cmwqd has no pool on */
};

/* Its exit status: 0 when every check held. */
enum {
        SCRIBBLER_OK,
        SCRIBBLER_NO_CONNECTION = 10,
        SCRIBBLER_NO_CALLBACK,
        SCRIBBLER_NO_REGION,
        SCRIBBLER_NOT_ENDED,
        SCRIBBLER_QUEUED_AFTER_END,
        SCRIBBLER_FLUSHED_AFTER_END,
        SCRIBBLER_NO_REASON,
};

static atomic_int scribbler_runs;

static void scribbler_fn(struct cmwq_work *w) {
        (void) w;
        atomic_fetch_add(&scribbler_runs, 1);
}

/* Our own mapping of the memfd the library shares with cmwqd. */
static struct cmwq_shm *find_region(void) {
        char line[512];
        void *found = NULL;
        FILE *f = fopen("/proc/self/maps", "re");

        if (!f)
                return NULL;
        while (!found && fgets(line, sizeof(line), f)) {
                unsigned long start, end;
                char perms[8];

                if (!strstr(line, "/memfd:cmwq-callbacks") ||
                    sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3)
                        continue;
                if (end - start >= sizeof(struct cmwq_shm) && perms[0] == 'r' && perms[1] == 'w' && perms[3] == 's')
                        found = (void *) start;
        }
        fclose(f);
        return found;
}

/* The library's doorbell is one of its eventfds: write 1 to each. */
static void ring_doorbells(void) {
        struct dirent *de;
        DIR *dir = opendir("/proc/self/fd");

        if (!dir)
                return;
        while ((de = readdir(dir))) {
                char path[300], target[64];
                ssize_t n;

                snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
                n = readlink(path, target, sizeof(target) - 1);
                if (n < 0)
                        continue;
                target[n] = '\0';
                if (strcmp(target, "anon_inode:[eventfd]") == 0)
                        (void) eventfd_write(atoi(de->d_name), 1);
        }
        closedir(dir);
}

/* Until the daemon has read all the library wrote (its last worker going
 * idle), so that what we write next is not overwritten by it. */
static void wait_ring_quiet(struct cmwq_shm *shm) {
        for (int stable = 0, waited = 0; stable < 10 && waited < 1000; waited++) {
                uint32_t tail = __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE);

                usleep(10000);
                if (tail == __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE) &&
                    tail == __atomic_load_n(&shm->sq_head, __ATOMIC_ACQUIRE))
                        stable++;
                else
                        stable = 0;
        }
}

/* Appends @entry as the library would, but where no well-behaved one would. */
static void push_entry(struct cmwq_shm *shm, uint32_t entry) {
        uint32_t tail = __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE);

        __atomic_store_n(&shm->sq[tail & (CMWQ_SHM_RING - 1)], entry, __ATOMIC_RELAXED);
        __atomic_store_n(&shm->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

static void scribble(struct cmwq_shm *shm, enum scribble how) {
        uint64_t x = 0x9e3779b97f4a7c15ull;

        switch (how) {
        case SCRIBBLE_RANDOM:
                for (size_t i = 0; i < sizeof(*shm) / sizeof(uint64_t); i++) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        ((uint64_t *) shm)[i] = x;
                }
                break;
        case SCRIBBLE_TAIL_AHEAD:
                __atomic_store_n(&shm->sq_tail, __atomic_load_n(&shm->sq_head, __ATOMIC_ACQUIRE) + 100000,
                                 __ATOMIC_RELEASE);
                break;
        case SCRIBBLE_BAD_OP:
                push_entry(shm, CMWQ_SHM_ENTRY(0x7f, 0));
                break;
        case SCRIBBLE_SLOT_OUT_OF_RANGE:
                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_DEMAND, CMWQ_SHM_SLOTS));
                break;
        case SCRIBBLE_UNREGISTERED_SLOT:
                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_DEMAND, CMWQ_SHM_SLOTS - 1));
                break;
        case SCRIBBLE_MOVE_NO_POOL:
                /* Slot 0 is a thread of ours (a callback on every CPU ran). */
                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(0, 9999)));
                break;
        }
}

/* Runs in the child: attach (a callback on every CPU), scribble, ring, and
 * check that the connection ends and every later call fails at once.  One
 * callback on @gate_queue is running (held at its gate) meanwhile.  Writes
 * "r" to @report_fd once that runs and, after a byte from @go_fd (if not
 * -1), "s" once it scribbled. */
static int scribbler_main(enum scribble how, enum cmwq_system_queue gate_queue, int report_fd, int go_fd) {
        struct cmwq *c;
        struct cmwq_workqueue *wq;
        struct cmwq_work w;
        struct gated_work g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        struct cmwq_shm *shm;
        int waited, r;

        /* A hang is a failure too: the parent sees SIGALRM. */
        alarm(60);
        c = cmwq_connect(d.socket);
        if (!c)
                return SCRIBBLER_NO_CONNECTION;
        wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        CMWQ_WORK_INIT(&w, scribbler_fn);
        for (int cpu = 0; cpu < nr_cpus(); cpu++)
                if (!cmwq_queue_work_on(cpu, wq, &w) || cmwq_flush_work(&w) < 0)
                        return SCRIBBLER_NO_CALLBACK;
        if (atomic_load(&scribbler_runs) != nr_cpus())
                return SCRIBBLER_NO_CALLBACK;
        /* One item running (held at its gate) and queued again behind
         * itself: its flush has something to wait for. */
        CMWQ_WORK_INIT(&g.work, gated_fn);
        if (!cmwq_queue_work_on(0, cmwq_system_workqueue(c, gate_queue), &g.work))
                return SCRIBBLER_NO_CALLBACK;
        while (atomic_load(&g.started) < 1)
                usleep(1000);
        if (!cmwq_queue_work_on(0, cmwq_system_workqueue(c, gate_queue), &g.work))
                return SCRIBBLER_NO_CALLBACK;
        shm = find_region();
        if (!shm)
                return SCRIBBLER_NO_REGION;
        (void) !write(report_fd, "r", 1);
        if (go_fd >= 0) {
                char ch;

                (void) !read(go_fd, &ch, 1);
        }

        wait_ring_quiet(shm);
        scribble(shm, how);
        ring_doorbells();
        (void) !write(report_fd, "s", 1);

        /* The daemon ends the connection: a request on the socket fails. */
        for (waited = 0; waited < 2000; waited++) {
                struct cmwq_workqueue *probe = cmwq_open_workqueue(c, "system");

                if (!probe)
                        break;
                usleep(10000);
        }
        if (waited == 2000)
                return SCRIBBLER_NOT_ENDED;

        /* The running item ends.  The one queued behind it may still run on
         * the thread that held the CPU (if the library had not yet seen the
         * end when it took it), or is dropped: either way its flush returns,
         * an error (the connection is lost), or 1 only if it did run. */
        pthread_mutex_lock(&g.lock);
        g.open = true;
        pthread_cond_broadcast(&g.cond);
        pthread_mutex_unlock(&g.lock);
        r = cmwq_flush_work(&g.work);
        if (r == 0 || (r == 1 && atomic_load(&g.finished) != 2)) {
                fprintf(stderr, "scribbler: cmwq_flush_work of a queued item: %d, %d runs\n", r,
                        atomic_load(&g.finished));
                return SCRIBBLER_FLUSHED_AFTER_END;
        }

        /* And every call after: none queues, none waits, each says the
         * connection is lost. */
        if (cmwq_queue_work_on(0, wq, &w) || cmwq_queue_work(wq, &w))
                return SCRIBBLER_QUEUED_AFTER_END;
        if (cmwq_flush_workqueue(wq) >= 0 || cmwq_drain_workqueue(wq) >= 0 || cmwq_flush_work(&w) >= 0) {
                fprintf(stderr, "scribbler: cmwq_flush_workqueue %d, cmwq_drain_workqueue %d, cmwq_flush_work %d\n",
                        cmwq_flush_workqueue(wq), cmwq_drain_workqueue(wq), cmwq_flush_work(&w));
                return SCRIBBLER_FLUSHED_AFTER_END;
        }
        /* The user is told why, in the daemon's words. */
        if (!strstr(cmwq_last_error(), "cmwqd ended the connection: the shared memory is broken: ")) {
                fprintf(stderr, "scribbler: cmwq_last_error() after the end: %s\n", cmwq_last_error());
                return SCRIBBLER_NO_REASON;
        }
        cmwq_disconnect(c);
        return SCRIBBLER_OK;
}

struct scribbler {
        pid_t pid;
        int report_fd;
        int go_fd;              /* -1: it scribbles at once */
};

static void scribbler_start_full(struct scribbler *sc, enum scribble how, enum cmwq_system_queue gate_queue,
                                 bool wait_for_go) {
        int report[2], go[2] = { -1, -1 };

        ck_assert_int_eq(pipe(report), 0);
        if (wait_for_go)
                ck_assert_int_eq(pipe(go), 0);
        sc->pid = test_fork();
        if (sc->pid == 0) {
                close(report[0]);
                if (go[1] >= 0)
                        close(go[1]);
                _exit(scribbler_main(how, gate_queue, report[1], go[0]));
        }
        close(report[1]);
        if (go[0] >= 0)
                close(go[0]);
        sc->report_fd = report[0];
        sc->go_fd = go[1];
}

/* Waits for the scribbler's next step ('r': its callback runs; 's': it
 * scribbled); false if it exited before. */
static bool scribbler_reached(struct scribbler *sc, char step) {
        char ch;

        while (read(sc->report_fd, &ch, 1) == 1)
                if (ch == step)
                        return true;
        return false;
}

static void scribbler_go(struct scribbler *sc) {
        ck_assert_int_eq(write(sc->go_fd, "g", 1), 1);
        close(sc->go_fd);
        sc->go_fd = -1;
}

static pid_t scribbler_start(enum scribble how, int *ret_report_fd) {
        struct scribbler sc;

        scribbler_start_full(&sc, how, CMWQ_SYSTEM, false);
        *ret_report_fd = sc.report_fd;
        return sc.pid;
}

/* Waits for the scribbler to have scribbled (false if it exited before). */
static bool scribbler_scribbled(int report_fd) {
        struct scribbler sc = { .report_fd = report_fd };
        bool done = scribbler_reached(&sc, 's');

        close(report_fd);
        return done;
}

static void scribbler_finish(pid_t p) {
        int status;

        ck_assert_int_eq(waitpid(p, &status, 0), p);
        ck_assert_msg(WIFEXITED(status), "the scribbler was killed by signal %d%s", WTERMSIG(status),
                      WTERMSIG(status) == SIGALRM ? " (a library call hung)" : "");
        ck_assert_msg(WEXITSTATUS(status) == SCRIBBLER_OK, "the scribbler failed with status %d",
                      WEXITSTATUS(status));
}

/* ---- the well-behaved client: this process ------------------------------ */

struct counted_work {
        struct cmwq_work work;
        atomic_int runs;
};

static void counted_fn(struct cmwq_work *w) {
        atomic_fetch_add(&cmwq_container_of(w, struct counted_work, work)->runs, 1);
}

/* A callback on every CPU runs, as before. */
static void callbacks_still_run(struct cmwq *c) {
        struct counted_work cw = {};

        CMWQ_WORK_INIT(&cw.work, counted_fn);
        for (int cpu = 0; cpu < nr_cpus(); cpu++) {
                ck_assert(cmwq_queue_work_on(cpu, cmwq_system_workqueue(c, CMWQ_SYSTEM), &cw.work));
                ck_assert_int_ge(cmwq_flush_work(&cw.work), 0);
                ck_assert_int_eq(atomic_load(&cw.runs), cpu + 1);
        }
}

static void exec_work_still_runs(void) {
        char *out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/echo", "still-serving");

        ck_assert_msg(strstr(out, "still-serving"), "cmwqctl submit --wait: %s", out);
        free(out);
}

static void daemon_alive(void) {
        ck_assert_msg(kill(d.pid, 0) == 0, "cmwqd (PID %d) is gone", (int) d.pid);
        ck_assert_int_eq(waitpid(d.pid, NULL, WNOHANG), 0);
}

/* The daemon's fds come back to @baseline (the scribbler's connection, its
 * doorbell and its threads' watches closed). */
static void fds_back_to(int baseline) {
        int now = count_fds(d.pid);

        for (int waited = 0; now != baseline && waited < 1000; waited++) {
                usleep(10000);
                now = count_fds(d.pid);
        }
        ck_assert_msg(now == baseline, "cmwqd has %d fds, %d before the scribbler", now, baseline);
}

/* One scribbler breaking its region @how, with a well-behaved client (this
 * process) and cmwqctl around it; @why: what the log must say. */
static void one_scribbler(struct cmwq *c, enum scribble how, const char *why) {
        char line[256];
        int report_fd, baseline, broke_before = log_count("broke the memory it shares with cmwqd"), why_before;
        pid_t p;

        snprintf(line, sizeof(line), "broke the memory it shares with cmwqd: %s", why);
        why_before = log_count(line);

        baseline = count_fds(d.pid);
        p = scribbler_start(how, &report_fd);
        ck_assert_msg(scribbler_scribbled(report_fd), "the scribbler did not get to scribble");

        /* While it is being thrown out and after. */
        callbacks_still_run(c);
        exec_work_still_runs();
        scribbler_finish(p);
        daemon_alive();
        callbacks_still_run(c);
        exec_work_still_runs();

        ck_assert_int_eq(log_count("broke the memory it shares with cmwqd"), broke_before + 1);
        ck_assert_msg(log_count(line) == why_before + 1, "the log does not say \"%s\"", line);
        fds_back_to(baseline);
}

START_TEST(test_random_bytes_over_the_region_end_only_that_client) {
        struct cmwq *c = connect_ok(&d);

        /* Our own region and workers first: the baseline has them. */
        callbacks_still_run(c);
        one_scribbler(c, SCRIBBLE_RANDOM, "its submission ring holds more entries than it has room for");
        cmwq_disconnect(c);
}
END_TEST

START_TEST(test_each_broken_ring_ends_only_that_client) {
        static const struct {
                enum scribble how;
                const char *why;
        } cases[] = {
                { SCRIBBLE_TAIL_AHEAD, "its submission ring holds more entries than it has room for" },
                { SCRIBBLE_BAD_OP, "an entry of its submission ring has an unknown op" },
                { SCRIBBLE_SLOT_OUT_OF_RANGE, "an entry of its submission ring names a slot out of range" },
                { SCRIBBLE_UNREGISTERED_SLOT,
                  "an entry of its submission ring names a slot with no registered thread" },
                { SCRIBBLE_MOVE_NO_POOL, "an entry of its submission ring moves a thread to a CPU cmwqd has no pool on" },
        };
        struct cmwq *c = connect_ok(&d);

        callbacks_still_run(c);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                one_scribbler(c, cases[i].how, cases[i].why);
        cmwq_disconnect(c);
}
END_TEST

/* ---- a well-behaved client holding its CPU meanwhile --------------------- */

/* Busy workers in all of the daemon's pools (cmwqctl's JSON). */
START_TEST(test_a_granted_thread_of_another_client_keeps_its_cpu) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        struct gated_work g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        struct counted_work after = {};
        int report_fd, baseline;
        pid_t p;

        callbacks_still_run(c);
        baseline = count_fds(d.pid);
        /* Granted CPU 0, and holding it (asleep, so that others run too). */
        CMWQ_WORK_INIT(&g.work, gated_fn);
        ck_assert(cmwq_queue_work_on(0, wq, &g.work));
        wait_until(&g.started, 1);

        /* The scribbler has threads on every CPU, CPU 0 too. */
        p = scribbler_start(SCRIBBLE_RANDOM, &report_fd);
        ck_assert_msg(scribbler_scribbled(report_fd), "the scribbler did not get to scribble");
        scribbler_finish(p);
        daemon_alive();

        /* Ours still runs on CPU 0, and ends normally. */
        ck_assert_int_eq(atomic_load(&g.finished), 0);
        ck_assert(!cmwq_work_pending(&g.work));
        pthread_mutex_lock(&g.lock);
        g.open = true;
        pthread_cond_broadcast(&g.cond);
        pthread_mutex_unlock(&g.lock);
        ck_assert_int_ge(cmwq_flush_work(&g.work), 0);
        ck_assert_int_eq(atomic_load(&g.finished), 1);

        /* CPU 0 is granted again, to us. */
        CMWQ_WORK_INIT(&after.work, counted_fn);
        ck_assert(cmwq_queue_work_on(0, wq, &after.work));
        ck_assert_int_ge(cmwq_flush_work(&after.work), 0);
        ck_assert_int_eq(atomic_load(&after.runs), 1);
        ck_assert_int_ge(cmwq_flush_workqueue(wq), 0);

        /* Nobody holds a CPU any more: not our threads, gone idle, and not
         * the scribbler's. */
        for (int waited = 0; pools_busy(&d) != 0; waited++) {
                ck_assert_msg(waited < 100, "cmwqd's pools still have busy workers");
                usleep(100000);
        }
        fds_back_to(baseline);
        cmwq_disconnect(c);
}
END_TEST

START_TEST(test_a_freeze_does_not_wait_for_a_scribbler) {
        struct scribbler sc;
        struct ctl_async fa;
        struct ctl_result r;

        /* Its callback of system_freezable runs when the freeze begins: the
         * freeze waits for it, as for any client's. */
        scribbler_start_full(&sc, SCRIBBLE_SLOT_OUT_OF_RANGE, CMWQ_SYSTEM_FREEZABLE, true);
        ck_assert_msg(scribbler_reached(&sc, 'r'), "the scribbler's callback did not run");
        CTL_START(&d, &fa, "freeze", "system_freezable", "--timeout", "60");
        ck_assert_msg(!ctl_finish(&fa, 300, &r), "the freeze ended while a callback ran: %d %s", r.status, r.err);

        /* Once it broke its ring, its answer cannot come: nothing waits for it. */
        scribbler_go(&sc);
        ck_assert_msg(scribbler_reached(&sc, 's'), "the scribbler did not get to scribble");
        close(sc.report_fd);
        ck_assert_msg(ctl_finish(&fa, 30000, &r), "the freeze still waits for the scribbler");
        ck_assert_msg(r.status == 0, "freeze: %d %s", r.status, r.err);
        ctl_result_free(&r);
        scribbler_finish(sc.pid);
        daemon_alive();
        free(CTL_OK(&d, "thaw", "system_freezable"));
}
END_TEST

/* Another client queueing and flushing on every CPU the whole time. */
struct hammer {
        struct cmwq *c;
        atomic_bool stop;
        atomic_int rounds;
        atomic_int failures;
};

static void *hammer_main(void *userdata) {
        struct hammer *h = userdata;
        struct counted_work w = {};

        CMWQ_WORK_INIT(&w.work, counted_fn);
        while (!atomic_load(&h->stop)) {
                for (int cpu = 0; cpu < nr_cpus(); cpu++)
                        if (!cmwq_queue_work_on(cpu, cmwq_system_workqueue(h->c, CMWQ_SYSTEM), &w.work) ||
                            cmwq_flush_work(&w.work) < 0)
                                atomic_fetch_add(&h->failures, 1);
                atomic_fetch_add(&h->rounds, 1);
        }
        return NULL;
}

START_TEST(test_a_busy_client_is_not_disturbed_by_a_scribbler) {
        struct hammer h = { .c = connect_ok(&d) };
        pthread_t t;
        int report_fd, rounds;
        pid_t p;

        ck_assert_int_eq(pthread_create(&t, NULL, hammer_main, &h), 0);
        wait_until(&h.rounds, 1);
        p = scribbler_start(SCRIBBLE_RANDOM, &report_fd);
        ck_assert_msg(scribbler_scribbled(report_fd), "the scribbler did not get to scribble");
        scribbler_finish(p);
        /* It goes on after too. */
        rounds = atomic_load(&h.rounds);
        wait_until(&h.rounds, rounds + 5);
        atomic_store(&h.stop, true);
        pthread_join(t, NULL);
        ck_assert_int_eq(atomic_load(&h.failures), 0);
        daemon_alive();
        cmwq_disconnect(h.c);
}
END_TEST

/* ---- a client filling its ring with valid entries as fast as it can ------ */

/* Shared with the flooder (a child process). */
struct flood {
        atomic_uint pushed;     /* entries it appended */
        bool moves;             /* MOVEs of its thread between CPUs, not DEMAND/IDLE pairs */
};

/* Its exit status if it cannot start: it floods until killed. */
enum {
        FLOODER_NO_CONNECTION = 10,
        FLOODER_NO_CALLBACK,
        FLOODER_NO_REGION,
};

/* The library's eventfds (its doorbell among them). */
static int list_eventfds(int *fds, int max) {
        struct dirent *de;
        DIR *dir = opendir("/proc/self/fd");
        int n = 0;

        if (!dir)
                return 0;
        while (n < max && (de = readdir(dir))) {
                char path[300], target[64];
                ssize_t len;

                snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
                len = readlink(path, target, sizeof(target) - 1);
                if (len < 0)
                        continue;
                target[len] = '\0';
                if (strcmp(target, "anon_inode:[eventfd]") == 0 && atoi(de->d_name) != dirfd(dir))
                        fds[n++] = atoi(de->d_name);
        }
        closedir(dir);
        return n;
}

/* Runs in the child: a callback on every CPU (slot 0 is a registered
 * thread's, CPU 0's), one held on CPU 0, then DEMAND/IDLE pairs for slot 0 as fast as the ring takes
 * them, ringing the doorbell whenever the daemon asks for it, until
 * killed. */
static int flooder_main(struct flood *f, int report_fd) {
        struct cmwq *c;
        struct cmwq_workqueue *wq;
        struct cmwq_work w;
        struct cmwq_shm *shm;
        struct gated_work g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        int fds[16], nr_fds;

        alarm(120);
        c = cmwq_connect(d.socket);
        if (!c)
                return FLOODER_NO_CONNECTION;
        wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        CMWQ_WORK_INIT(&w, scribbler_fn);
        for (int cpu = 0; cpu < nr_cpus(); cpu++)
                if (!cmwq_queue_work_on(cpu, wq, &w) || cmwq_flush_work(&w) < 0)
                        return FLOODER_NO_CALLBACK;
        /* Its thread of slot 0 (CPU 0's) held in a callback for good: the
         * library pushes nothing more (it keeps its own copy of sq_tail, so
         * an entry of its own would go over ours and break the ring). */
        CMWQ_WORK_INIT(&g.work, gated_fn);
        if (!cmwq_queue_work_on(0, wq, &g.work))
                return FLOODER_NO_CALLBACK;
        while (atomic_load(&g.started) < 1)
                usleep(1000);
        shm = find_region();
        if (!shm)
                return FLOODER_NO_REGION;
        nr_fds = list_eventfds(fds, 16);
        wait_ring_quiet(shm);
        (void) !write(report_fd, "r", 1);

        for (;;) {
                uint32_t tail = __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE);

                /* Room left for what the library's own threads push. */
                if (tail - __atomic_load_n(&shm->sq_head, __ATOMIC_ACQUIRE) <= CMWQ_SHM_RING / 2) {
                        if (f->moves) {
                                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(0, 1 % nr_cpus())));
                                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(0, 0)));
                        } else {
                                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_DEMAND, 0));
                                push_entry(shm, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_IDLE, 0));
                        }
                        atomic_fetch_add(&f->pushed, 2);
                }
                if (__atomic_load_n(&shm->need_wakeup, __ATOMIC_SEQ_CST) &&
                    __atomic_exchange_n(&shm->need_wakeup, 0, __ATOMIC_SEQ_CST))
                        for (int i = 0; i < nr_fds; i++)
                                (void) eventfd_write(fds[i], 1);
        }
}

/* cmwqd's CPU time (user and system), in seconds. */
static double daemon_cpu_seconds(void) {
        char *stat, *p;
        unsigned long utime, stime;
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) d.pid);
        stat = read_file(path);
        ck_assert_ptr_nonnull(stat);
        p = strrchr(stat, ')');
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime), 2);
        free(stat);
        return (double) (utime + stime) / (double) sysconf(_SC_CLK_TCK);
}

static double monotonic_seconds(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* A flood of DEMAND/IDLE pairs (1 each of the budget), or of MOVEs (2
 * each: one gives back and demands): read at the budget's rate. */
static void flood_and_check(bool moves) {
        struct flood *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        struct cmwq *c = connect_ok(&d);
        double t0, t1, cpu0, cpu1, rate = moves ? 50000 / 2 : 50000;
        unsigned pushed;
        int report[2], status;
        pid_t p;
        char ch;

        ck_assert_ptr_ne(f, MAP_FAILED);
        f->moves = moves;
        callbacks_still_run(c);
        ck_assert_int_eq(pipe(report), 0);
        p = test_fork();
        if (p == 0) {
                close(report[0]);
                _exit(flooder_main(f, report[1]));
        }
        close(report[1]);
        ck_assert_msg(read(report[0], &ch, 1) == 1, "the flooder did not get to flood");
        close(report[0]);
        /* Past the burst of a ring's worth: on its budget from now on. */
        while (atomic_load(&f->pushed) < 4 * CMWQ_SHM_RING)
                usleep(1000);

        /* Over 3 s of its flood, cmwqd spends a bounded share of a CPU on
         * it (about all of one without a budget; a loaded machine gives it
         * less, not more)... */
        t0 = monotonic_seconds();
        cpu0 = daemon_cpu_seconds();
        pushed = atomic_load(&f->pushed);
        while (monotonic_seconds() - t0 < 3.0)
                usleep(50000);
        cpu1 = daemon_cpu_seconds();
        pushed = atomic_load(&f->pushed) - pushed;
        t1 = monotonic_seconds();
        fprintf(stderr, "cmwqd used %.2f s of CPU in %.2f s of a client's flood (%u entries read)\n", cpu1 - cpu0,
                t1 - t0, pushed);
        ck_assert_msg(cpu1 - cpu0 < 0.6 * (t1 - t0), "cmwqd used %.2f s of CPU in %.2f s of a client's flood",
                      cpu1 - cpu0, t1 - t0);
        /* Its ring is read at its budget, 50,000 entries a second (cmwqd(8)),
         * whatever CPU cmwqd could have spent on it (the flooder pushes only
         * where the daemon has read: within half a ring of it). */
        ck_assert_msg(pushed < 1.5 * rate * (t1 - t0) + CMWQ_SHM_RING,
                      "cmwqd read %u entries of a client's ring in %.2f s", pushed, t1 - t0);

        /* ...and serves everyone else while it goes on. */
        pushed = atomic_load(&f->pushed);
        exec_work_still_runs();
        callbacks_still_run(c);
        ck_assert_msg(atomic_load(&f->pushed) > pushed, "the flooder stopped flooding");

        /* It was slowed down, not thrown out: still flooding (its own
         * callbacks are its business: its entries raced its threads'). */
        ck_assert_msg(waitpid(p, &status, WNOHANG) == 0, "the flooder ended with status 0x%x", status);
        ck_assert_int_eq(kill(p, SIGKILL), 0);
        ck_assert_int_eq(waitpid(p, &status, 0), p);
        ck_assert_int_eq(log_count("broke the memory it shares with cmwqd"), 0);
        ck_assert_int_eq(log_count("exceeded its budget of"), 1);
        daemon_alive();
        callbacks_still_run(c);
        cmwq_disconnect(c);
        munmap(f, sizeof(*f));
}

START_TEST(test_a_client_flooding_its_ring_only_slows_itself) {
        flood_and_check(false);
}
END_TEST

START_TEST(test_a_client_flooding_its_ring_with_moves_only_slows_itself) {
        flood_and_check(true);
}
END_TEST

int main(void) {
        Suite *s = suite_create("client-shm");
        TCase *tc = tcase_create("client-shm");
        SRunner *sr;
        int failed;

        signal(SIGPIPE, SIG_IGN);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_random_bytes_over_the_region_end_only_that_client);
        tcase_add_test(tc, test_each_broken_ring_ends_only_that_client);
        tcase_add_test(tc, test_a_granted_thread_of_another_client_keeps_its_cpu);
        tcase_add_test(tc, test_a_busy_client_is_not_disturbed_by_a_scribbler);
        tcase_add_test(tc, test_a_freeze_does_not_wait_for_a_scribbler);
        suite_add_tcase(s, tc);
        tc = tcase_create("client-shm-flood");
        tcase_add_checked_fixture(tc, setup_info, teardown);
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, test_a_client_flooding_its_ring_only_slows_itself);
        tcase_add_test(tc, test_a_client_flooding_its_ring_with_moves_only_slows_itself);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

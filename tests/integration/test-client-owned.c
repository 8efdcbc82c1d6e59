/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Workqueues made with libcmwq-client's cmwq_alloc_workqueue() live as long
 * as the connection that made them, against a real cmwqd: a client killed
 * with SIGKILL, a clean cmwq_disconnect(), a persistent queue of cmwqctl
 * beside them, and a daemon restarted (SIGTERM, SIGKILL) while such a queue
 * exists.  What is checked is what an admin sees: cmwqctl list, the items'
 * own marks, the daemon's fds.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#include "client-helpers.h"
#include "harness.h"

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

#define ARGV(...) ((const char *const[]) { __VA_ARGS__, NULL })

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
}

/* The JSON object of queue @name in "cmwqctl --json list", or NULL when it
 * is not listed (free it).  Each object starts with its name and holds no
 * nested object, so it runs from there to the next '}'. */
static char *listed(const char *name) {
        char *out = CTL_OK(&d, "--json", "list"), pat[128], *p, *end, *obj = NULL;

        snprintf(pat, sizeof(pat), "\"name\":\"%s\"", name);
        p = strstr(out, pat);
        if (p) {
                end = strchr(p, '}');
                ck_assert_ptr_nonnull(end);
                obj = strndup(p, (size_t) (end - p));
        }
        free(out);
        return obj;
}

static bool listed_with(const char *name, const char *field) {
        char *obj = listed(name);
        bool r = obj && strstr(obj, field);

        free(obj);
        return r;
}

static int nr_queues(void) {
        char *out = CTL_OK(&d, "--json", "list");
        int n = 0;

        for (const char *p = strstr(out, "\"name\":"); p; p = strstr(p + 1, "\"name\":"))
                n++;
        free(out);
        return n;
}

/* Waits until the daemon has seen the end of @name's connection; fails if
 * the queue went meanwhile (the callers give it items that wait at a gate). */
static void wait_owner_gone(const char *name) {
        for (int waited = 0;; waited += 20) {
                char *obj = listed(name);

                ck_assert_msg(obj, "workqueue %s went before its items had run", name);
                if (strstr(obj, "\"owner_gone\":true")) {
                        ck_assert_msg(strstr(obj, "\"draining\":true"), "not draining: %s", obj);
                        free(obj);
                        return;
                }
                ck_assert_msg(waited < 60000, "the daemon never saw the connection end: %s", obj);
                free(obj);
                sleep_ms(20);
        }
}

/* Waits (up to 60 s, items included) until @name is no longer listed. */
static void wait_gone(const char *name) {
        for (int waited = 0;; waited += 50) {
                char *obj = listed(name);

                if (!obj)
                        return;
                ck_assert_msg(waited < 60000, "workqueue %s is still there: %s", name, obj);
                free(obj);
                sleep_ms(50);
        }
}

/* The daemon's fds settle once the items' pipes and pidfds are closed.  At
 * most as many as before, not exactly: the count before may include the fd
 * of a cmwqctl connection the daemon had not yet seen end. */
static void assert_fds_back_to(int before) {
        int now = -1;

        for (int waited = 0; waited < 60000; waited += 50) {
                now = count_fds(d.pid);
                if (now <= before)
                        return;
                sleep_ms(50);
        }
        ck_assert_msg(now <= before, "the daemon had %d fds, now %d", before, now);
}

/* A shell command that waits until the file @gate exists. */
static const char *until_exists(const char *gate, char *buf, size_t size) {
        snprintf(buf, size, "until [ -e '%s' ]; do sleep 0.05; done", gate);
        return buf;
}

static void open_file_gate(const char *gate) {
        FILE *f = fopen(gate, "w");

        ck_assert_ptr_nonnull(f);
        fclose(f);
}

/* Each item appends its number to @marks after the shell command @before:
 * proof it ran. */
static void exec_mark(struct cmwq_workqueue *wq, const char *marks, int n, const char *before, uint64_t *ret_id) {
        char cmd[1200];
        int r;

        snprintf(cmd, sizeof(cmd), "%s; echo %d >> %s", before, n, marks);
        r = cmwq_exec(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) }, ret_id);
        if (r != 0) {
                fprintf(stderr, "cmwq_exec: %d %s\n", r, cmwq_last_error());
                _exit(3);
        }
}

/*
 * A child process connects, allocates @name (unbound, one item at a time, so
 * that one runs while the others wait) and queues @n items on it, each
 * writing a mark after the shell command @before; it also queues one item on the persistent
 * queue @persistent (may be NULL).  Returns its pid once everything is
 * accepted; the child then waits to be killed.
 */
static pid_t start_owner(const char *name, const char *marks, int n, const char *before, const char *persistent) {
        int pipefd[2];
        char ch;
        pid_t p;

        ck_assert_int_eq(pipe(pipefd), 0);
        p = test_fork();
        if (p == 0) {
                struct cmwq *c = cmwq_connect(d.socket);
                struct cmwq_workqueue *wq;

                close(pipefd[0]);
                if (!c)
                        _exit(2);
                wq = cmwq_alloc_workqueue(c, name, CMWQ_WQ_UNBOUND, 1);
                if (!wq) {
                        fprintf(stderr, "alloc %s: %s\n", name, cmwq_last_error());
                        _exit(2);
                }
                for (int i = 0; i < n; i++)
                        exec_mark(wq, marks, i, before, NULL);
                if (persistent) {
                        struct cmwq_workqueue *pq = cmwq_open_workqueue(c, persistent);

                        if (!pq)
                                _exit(2);
                        exec_mark(pq, marks, 100, "true", NULL);
                }
                (void) !write(pipefd[1], "x", 1);
                for (;;)
                        pause();
        }
        close(pipefd[1]);
        ck_assert_msg(read(pipefd[0], &ch, 1) == 1, "the client child failed before it was ready");
        close(pipefd[0]);
        return p;
}

static void kill_and_reap(pid_t p) {
        int status;

        ck_assert_int_eq(kill(p, SIGKILL), 0);
        ck_assert_int_eq(waitpid(p, &status, 0), p);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* SIGKILL of the client: its queue refuses new work, runs what it accepted,
 * then is gone; the daemon is left with what it had before. */
START_TEST(test_sigkill_of_the_client_drains_then_removes_its_queue) {
        char marks[400], warm[400], field[64], gate[400], wait_gate[600];
        int fds_before, queues_before;
        struct ctl_result r;
        pid_t p;

        test_path(&d, "marks", marks, sizeof(marks));
        test_path(&d, "warm", warm, sizeof(warm));
        test_path(&d, "gate", gate, sizeof(gate));

        /* Once, so that the daemon's one-time allocations are made. */
        p = start_owner("owned", warm, 1, "true", NULL);
        kill_and_reap(p);
        wait_gone("owned");
        ck_assert_int_eq(count_lines(warm), 1);
        fds_before = count_fds(d.pid);
        queues_before = nr_queues();

        p = start_owner("owned", marks, 3, until_exists(gate, wait_gate, sizeof(wait_gate)), NULL);
        /* While the client lives, the listing says whose connection it is. */
        snprintf(field, sizeof(field), "\"owner_pid\":%d", (int) p);
        ck_assert_msg(listed_with("owned", field), "no owner_pid %d in the listing", (int) p);
        ck_assert(listed_with("owned", "\"owner_gone\":false"));
        ck_assert_int_eq(nr_queues(), queues_before + 1);
        {
                char *table = CTL_OK(&d, "list"), want[64];

                snprintf(want, sizeof(want), "connection of pid %d", (int) p);
                ck_assert_msg(strstr(table, want), "list: %s", table);
                ck_assert_msg(!strstr(table, "closed connection"), "list: %s", table);
                free(table);
        }

        kill_and_reap(p);

        /* The daemon sees the connection end: the queue drains (its items
         * wait at a gate meanwhile). */
        wait_owner_gone("owned");
        {
                char *table = CTL_OK(&d, "list"), want[64];

                snprintf(want, sizeof(want), "closed connection of pid %d", (int) p);
                ck_assert_msg(strstr(table, want), "list: %s", table);
                free(table);
        }
        /* New work is refused meanwhile, also from another connection. */
        CTL(&d, &r, "submit", "owned", "--", "/bin/true");
        ck_assert_int_eq(r.status, 1);
        ck_assert_msg(strstr(r.err, "destroyed"), "submit said: %s", r.err);
        ctl_result_free(&r);

        open_file_gate(gate);
        wait_gone("owned");
        /* Gone only after every item it accepted had run. */
        ck_assert_int_eq(count_lines(marks), 3);
        ck_assert_int_eq(nr_queues(), queues_before);
        assert_fds_back_to(fds_before);

        /* The name is free again. */
        free(CTL_OK(&d, "create", "owned"));
        free(CTL_OK(&d, "destroy", "owned"));
}
END_TEST

/* cmwq_disconnect() ends the connection too; a queue from cmwqctl, used by
 * the same client, stays; the name is taken until the old queue is gone. */
START_TEST(test_disconnect_removes_allocated_queues_not_persistent_ones) {
        char marks[400], gate[400], wait_gate[600];
        struct cmwq *c, *c2;
        struct cmwq_workqueue *wq, *ord, *pq;
        uint64_t id = 0;
        char idbuf[32], *out;
        int queues_before = nr_queues();

        test_path(&d, "marks", marks, sizeof(marks));
        test_path(&d, "gate", gate, sizeof(gate));
        until_exists(gate, wait_gate, sizeof(wait_gate));
        free(CTL_OK(&d, "create", "persistent"));

        c = connect_ok(&d);
        wq = cmwq_alloc_workqueue(c, "mine", CMWQ_WQ_UNBOUND, 1);
        ck_assert_msg(wq, "alloc: %s", cmwq_last_error());
        ord = cmwq_alloc_ordered_workqueue(c, "mine-ordered", 0);
        ck_assert_msg(ord, "alloc ordered: %s", cmwq_last_error());
        pq = cmwq_open_workqueue(c, "persistent");
        ck_assert_msg(pq, "open: %s", cmwq_last_error());
        exec_mark(wq, marks, 1, wait_gate, NULL);
        exec_mark(wq, marks, 2, wait_gate, NULL);
        exec_mark(pq, marks, 3, "true", &id);
        ck_assert(listed_with("mine", "\"owner_pid\":"));
        ck_assert(listed_with("mine-ordered", "\"owner_pid\":"));
        ck_assert(!listed_with("persistent", "\"owner_pid\":"));
        cmwq_disconnect(c);

        /* The empty ordered queue goes at once; the other drains. */
        wait_gone("mine-ordered");
        wait_owner_gone("mine");
        c2 = connect_ok(&d);
        errno = 0;
        ck_assert_ptr_null(cmwq_alloc_workqueue(c2, "mine", 0, 0));
        ck_assert_int_eq(errno, EEXIST);
        ck_assert_msg(strstr(cmwq_last_error(), "has ended"), "message: %s", cmwq_last_error());
        open_file_gate(gate);
        wait_gone("mine");

        /* The persistent queue and its item outlive the client. */
        ck_assert(listed_with("persistent", "\"owner_uid\":"));
        snprintf(idbuf, sizeof(idbuf), "%" PRIu64, id);
        free(CTL_OK(&d, "wait", idbuf));
        ck_assert_int_eq(count_lines(marks), 3);
        ck_assert_int_eq(nr_queues(), queues_before + 1);

        /* A new connection takes the name again; destroying it by hand
         * still works, and so does disconnecting after that. */
        wq = cmwq_alloc_workqueue(c2, "mine", 0, 0);
        ck_assert_msg(wq, "alloc again: %s", cmwq_last_error());
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        ck_assert(!listed_with("mine", "\"name\""));
        cmwq_disconnect(c2);

        out = listed("persistent");
        ck_assert_ptr_nonnull(out);
        free(out);
        free(CTL_OK(&d, "destroy", "persistent"));
        ck_assert_int_eq(nr_queues(), queues_before);
}
END_TEST

/* A client killed while its queue has work, and a persistent queue it used:
 * the persistent one stays with its item done. */
START_TEST(test_persistent_queue_survives_a_killed_client) {
        char marks[400];
        pid_t p;

        test_path(&d, "marks", marks, sizeof(marks));
        free(CTL_OK(&d, "create", "kept", "--unbound"));
        p = start_owner("temporary", marks, 1, "sleep 0.5", "kept");
        kill_and_reap(p);
        wait_gone("temporary");
        ck_assert(listed_with("kept", "\"name\""));
        ck_assert(wait_for_lines(marks, 2, 30000));
        free(CTL_OK(&d, "destroy", "kept"));
}
END_TEST

/*
 * The daemon restarted while a client's queues exist: no connection survives
 * a restart, so after it the queues are gone, once what they had accepted is
 * dealt with (queued items run; the one that was running is interrupted, the
 * default policy), and they stay gone across a further restart.
 */
static void restart_with_owned_queues(bool crash) {
        char marks[400], idbuf[32], *out;
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *busy, *empty;
        uint64_t first = 0;
        int queues_before = nr_queues();

        test_path(&d, "marks", marks, sizeof(marks));
        busy = cmwq_alloc_workqueue(c, "busy", CMWQ_WQ_UNBOUND, 1);
        ck_assert_msg(busy, "alloc: %s", cmwq_last_error());
        empty = cmwq_alloc_workqueue(c, "empty", 0, 0);
        ck_assert_msg(empty, "alloc: %s", cmwq_last_error());
        exec_mark(busy, marks, 0, "sleep 60", &first);  /* running at the restart */
        exec_mark(busy, marks, 1, "true", NULL);        /* waiting behind it */
        exec_mark(busy, marks, 2, "true", NULL);
        for (int waited = 0; !listed_with("busy", "\"running\":1"); waited += 20) {
                ck_assert_msg(waited < 10000, "the first item never started");
                sleep_ms(20);
        }

        if (crash)
                cmwqd_kill(&d);
        else
                cmwqd_terminate(&d);
        cmwq_disconnect(c);
        cmwqd_launch(&d, NULL);

        wait_gone("empty");
        wait_gone("busy");
        ck_assert_int_eq(nr_queues(), queues_before);
        /* The waiting items ran, the running one was interrupted. */
        ck_assert_int_eq(count_lines(marks), 2);
        out = read_file(marks);
        ck_assert_msg(!strstr(out, "0\n"), "marks: %s", out);
        free(out);
        snprintf(idbuf, sizeof(idbuf), "%" PRIu64, first);
        out = CTL_OK(&d, "show", idbuf);
        ck_assert_msg(strstr(out, "interrupted"), "show: %s", out);
        free(out);

        /* Their end is in the log: a further restart does not bring them back. */
        cmwqd_terminate(&d);
        cmwqd_launch(&d, NULL);
        ck_assert(!listed_with("busy", "\"name\""));
        ck_assert(!listed_with("empty", "\"name\""));
        ck_assert_int_eq(nr_queues(), queues_before);
        out = read_file(d.log);
        ck_assert_msg(!strstr(out, "does not exist"), "log: %s", out);
        free(out);
}

START_TEST(test_sigterm_restart_ends_owned_queues) {
        restart_with_owned_queues(false);
}
END_TEST

START_TEST(test_sigkill_restart_ends_owned_queues) {
        restart_with_owned_queues(true);
}
END_TEST

int main(void) {
        Suite *s = suite_create("client-owned");
        TCase *tc = tcase_create("client-owned");
        SRunner *sr;
        int failed;

        signal(SIGPIPE, SIG_IGN);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_sigkill_of_the_client_drains_then_removes_its_queue);
        tcase_add_test(tc, test_disconnect_removes_allocated_queues_not_persistent_ones);
        tcase_add_test(tc, test_persistent_queue_survives_a_killed_client);
        tcase_add_test(tc, test_sigterm_restart_ends_owned_queues);
        tcase_add_test(tc, test_sigkill_restart_ends_owned_queues);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libcmwq-client against a real cmwqd: connection, workqueues, exec work,
 * event-loop integration, and a daemon that goes away under a waiting call. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* Runs @argv on @wq and waits; fails the test unless it could. */
static struct cmwq_exec_result *run_ok(struct cmwq_workqueue *wq, const struct cmwq_exec_args *a) {
        struct cmwq_exec_result *res = NULL;
        int r = cmwq_exec_sync(wq, a, &res);

        ck_assert_msg(r == 0, "cmwq_exec_sync: %d %s", r, cmwq_last_error());
        return res;
}

START_TEST(test_connect_finds_the_daemon) {
        char missing[400];
        struct cmwq *c;

        /* $CMWQ_SOCKET first. */
        setenv("CMWQ_SOCKET", d.socket, 1);
        c = cmwq_connect(NULL);
        ck_assert_msg(c, "via $CMWQ_SOCKET: %s", cmwq_last_error());
        cmwq_disconnect(c);

        /* Then the user instance in $XDG_RUNTIME_DIR (the harness's socket is
         * named as a user instance's). */
        unsetenv("CMWQ_SOCKET");
        setenv("XDG_RUNTIME_DIR", d.dir, 1);
        c = cmwq_connect(NULL);
        ck_assert_msg(c, "via $XDG_RUNTIME_DIR: %s", cmwq_last_error());
        cmwq_disconnect(c);

        /* None runs: a clear code and a message naming what was tried. */
        snprintf(missing, sizeof(missing), "%s/nobody-here.sock", d.dir);
        setenv("CMWQ_SOCKET", missing, 1);
        errno = 0;
        c = cmwq_connect(NULL);
        ck_assert_ptr_null(c);
        ck_assert_int_eq(errno, ECONNREFUSED);
        ck_assert_msg(strstr(cmwq_last_error(), "no cmwqd is running"), "message: %s", cmwq_last_error());
        ck_assert_msg(strstr(cmwq_last_error(), missing), "message: %s", cmwq_last_error());

        /* No $CMWQ_SOCKET, an empty runtime dir: the system socket is tried too. */
        unsetenv("CMWQ_SOCKET");
        setenv("XDG_RUNTIME_DIR", "/nonexistent-cmwq-test", 1);
        if (access("/run/cmwqd/cmwqd.sock", F_OK) != 0) {
                c = cmwq_connect(NULL);
                ck_assert_ptr_null(c);
                ck_assert_int_eq(errno, ECONNREFUSED);
                ck_assert_msg(strstr(cmwq_last_error(), "/run/cmwqd/cmwqd.sock"), "message: %s",
                              cmwq_last_error());
        }
}
END_TEST

START_TEST(test_workqueue_lifecycle) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq, *ord, *other, *sys;
        char *out;

        wq = cmwq_alloc_workqueue(c, "libtest", CMWQ_WQ_HIGHPRI, 3);
        ck_assert_msg(wq, "alloc: %s", cmwq_last_error());
        ck_assert_str_eq(cmwq_workqueue_name(wq), "libtest");

        errno = 0;
        ck_assert_ptr_null(cmwq_alloc_workqueue(c, "libtest", 0, 0));
        ck_assert_int_eq(errno, EEXIST);
        ck_assert_msg(strstr(cmwq_last_error(), "exist"), "message: %s", cmwq_last_error());
        ck_assert_ptr_null(cmwq_alloc_workqueue(c, "bad name", 0, 0));
        ck_assert_int_eq(errno, EINVAL);
        ck_assert_ptr_null(cmwq_alloc_workqueue(c, "toomany", 0, CMWQ_MAX_ACTIVE + 1));
        ck_assert_int_eq(errno, EINVAL);

        ord = cmwq_alloc_ordered_workqueue(c, "libtest-ordered", 0);
        ck_assert_msg(ord, "alloc ordered: %s", cmwq_last_error());

        out = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(out, "\"libtest\""), "list: %s", out);
        ck_assert_msg(strstr(out, "\"libtest-ordered\""), "list: %s", out);
        free(out);

        ck_assert_int_eq(cmwq_workqueue_set_max_active(wq, 7), 0);
        out = CTL_OK(&d, "list");
        ck_assert_msg(strstr(out, "libtest"), "list: %s", out);
        free(out);
        ck_assert_int_eq(cmwq_workqueue_set_max_active(wq, CMWQ_MAX_ACTIVE + 1), -EINVAL);

        /* A queue made elsewhere, and the built-in ones. */
        free(CTL_OK(&d, "create", "from-ctl"));
        other = cmwq_open_workqueue(c, "from-ctl");
        ck_assert_msg(other, "open: %s", cmwq_last_error());
        ck_assert_ptr_null(cmwq_open_workqueue(c, "no-such-queue"));
        ck_assert_int_eq(errno, ENOENT);
        sys = cmwq_system_workqueue(c, CMWQ_SYSTEM_UNBOUND);
        ck_assert_str_eq(cmwq_workqueue_name(sys), "system_unbound");
        ck_assert_ptr_null(cmwq_system_workqueue(c, (enum cmwq_system_queue) 99));
        ck_assert_int_eq(cmwq_destroy_workqueue(sys), -EPERM);

        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        ck_assert_int_eq(cmwq_destroy_workqueue(ord), 0);
        ck_assert_int_eq(cmwq_destroy_workqueue(other), 0);
        out = CTL_OK(&d, "--json", "list");
        ck_assert_msg(!strstr(out, "\"libtest\"") && !strstr(out, "from-ctl"), "still listed: %s", out);
        free(out);
        cmwq_disconnect(c);
}
END_TEST

START_TEST(test_exec_sync_argv_env_cwd_stdin) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        struct cmwq_exec_result *res;
        static const char payload[] = "from stdin\n";

        res = run_ok(wq, &(struct cmwq_exec_args) {
                .argv = ARGV("/bin/sh", "-c", "cat; echo \"$MARK\"; pwd; echo oops >&2; exit 3"),
                .envp = ARGV("MARK=marked", "PATH=/usr/bin:/bin"),
                .cwd = d.dir,
                .stdin_data = payload,
                .stdin_len = strlen(payload),
        });
        ck_assert_int_eq(res->state, CMWQ_EXEC_FINISHED);
        ck_assert(res->exited);
        ck_assert_int_eq(res->exit_status, 3);
        ck_assert_int_eq(res->signal, 0);
        char expect[600];
        snprintf(expect, sizeof(expect), "from stdin\nmarked\n%s\n", d.dir);
        ck_assert_str_eq(res->out, expect);
        ck_assert_uint_eq(res->out_len, strlen(expect));
        ck_assert_str_eq(res->err, "oops\n");
        ck_assert_uint_gt(res->id, 0);
        cmwq_exec_result_free(res);

        /* Defaults: our environment and our directory. */
        setenv("CMWQ_LIB_MARK", "inherited", 1);
        ck_assert_int_eq(chdir(d.dir), 0);
        res = run_ok(wq, &(struct cmwq_exec_args) {
                .argv = ARGV("/bin/sh", "-c", "echo $CMWQ_LIB_MARK; pwd"),
        });
        snprintf(expect, sizeof(expect), "inherited\n%s\n", d.dir);
        ck_assert_str_eq(res->out, expect);
        cmwq_exec_result_free(res);

        /* A program that cannot start. */
        res = run_ok(wq, &(struct cmwq_exec_args) { .argv = ARGV("/nonexistent/program") });
        ck_assert_int_eq(res->state, CMWQ_EXEC_FAILED);
        ck_assert_ptr_nonnull(res->error);
        cmwq_exec_result_free(res);

        ck_assert_int_eq(cmwq_exec_sync(wq, &(struct cmwq_exec_args) { .argv = NULL }, &res), -EINVAL);
        /* A CPU past int32 was the wire's -1, "the caller's": it ran unpinned. */
        ck_assert_int_eq(cmwq_exec_sync(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/true"), .pin_cpu = true,
                                                                      .cpu = 0xffffffffu }, &res),
                         -EINVAL);
        ck_assert_int_eq(cmwq_exec_sync(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/true"), .stdin_len = 10 },
                                        &res),
                         -EINVAL);
        cmwq_disconnect(c);
}
END_TEST

START_TEST(test_exec_on_cpu_key_timeout) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        struct cmwq_exec_result *res;
        uint64_t id1, id2;

        res = run_ok(wq, &(struct cmwq_exec_args) {
                .argv = ARGV("/bin/sh", "-c", "awk '{print $39}' /proc/self/stat"),
                .pin_cpu = true,
                .cpu = 0,
        });
        ck_assert_str_eq(res->out, "0\n");
        cmwq_exec_result_free(res);

        /* A key that is pending (for an hour): no second item. */
        ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) {
                                 .argv = ARGV("/bin/true"), .key = "k", .delay_usec = 3600ULL * 1000000 }, &id1), 0);
        ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) {
                                 .argv = ARGV("/bin/true"), .key = "k", .delay_usec = 3600ULL * 1000000 }, &id2), 1);
        ck_assert_uint_eq(id1, id2);
        ck_assert_int_eq(cmwq_exec_cancel(c, id1), 0);
        ck_assert_int_eq(cmwq_exec_wait(c, id1, &res), 0);
        ck_assert_int_eq(res->state, CMWQ_EXEC_CANCELLED);
        cmwq_exec_result_free(res);

        res = run_ok(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sleep", "30"), .timeout_usec = 200000 });
        ck_assert(res->timed_out);
        ck_assert_int_ne(res->signal, 0);
        cmwq_exec_result_free(res);
        cmwq_disconnect(c);
}
END_TEST

START_TEST(test_exec_cancel_running_waits_for_it) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        struct cmwq_exec_result *res;
        char started[400];
        uint64_t id;

        test_path(&d, "started", started, sizeof(started));
        ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) {
                                 .argv = ARGV("/bin/sh", "-c", "echo x > \"$1\"; exec sleep 30", "sh", started) },
                         &id), 0);
        ck_assert(wait_for_lines(started, 1, 10000));
        ck_assert_int_eq(cmwq_exec_cancel(c, id), 0);
        /* Cancelled means ended: waiting now returns at once. */
        ck_assert_int_eq(cmwq_exec_wait(c, id, &res), 0);
        ck_assert_int_eq(res->state, CMWQ_EXEC_CANCELLED);
        cmwq_exec_result_free(res);
        ck_assert_int_eq(cmwq_exec_cancel(c, id), 0);

        /* An item that ran to its end is not cancelled any more. */
        res = run_ok(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/true") });
        ck_assert_int_eq(cmwq_exec_cancel(c, res->id), 1);
        cmwq_exec_result_free(res);
        ck_assert_int_eq(cmwq_exec_cancel(c, 999999), -ENOENT);
        cmwq_disconnect(c);
}
END_TEST

struct done_log {
        int calls;
        int error;
        int exit_status;
        char out[64];
        uint64_t id;
};

static void on_done(struct cmwq *c, uint64_t id, int error, const struct cmwq_exec_result *r, void *userdata) {
        struct done_log *l = userdata;

        l->calls++;
        l->error = error;
        l->id = id;
        if (r) {
                l->exit_status = r->exit_status;
                snprintf(l->out, sizeof(l->out), "%s", r->out);
        }
}

/* Drives @c from a poll loop, as a libevent or GLib service would, until
 * @until callbacks ran or @timeout_ms passed.  Returns the last
 * cmwq_process() result. */
static int drive(struct cmwq *c, int *counter, int until, int timeout_ms) {
        int r = 0;

        for (int waited = 0; *counter < until && waited < timeout_ms; waited += 50) {
                struct pollfd pfd = { .fd = cmwq_get_fd(c), .events = POLLIN };

                if (poll(&pfd, 1, 50) > 0) {
                        r = cmwq_process(c);
                        if (r < 0)
                                return r;
                }
        }
        return r;
}

START_TEST(test_exec_async_from_an_event_loop) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_system_workqueue(c, CMWQ_SYSTEM_UNBOUND);
        struct done_log logs[5] = {};
        uint64_t ids[5];
        int total = 0;

        for (int i = 0; i < 5; i++) {
                char cmd[64];

                snprintf(cmd, sizeof(cmd), "echo item%d; exit %d", i, i);
                ck_assert_int_eq(cmwq_exec_async(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) },
                                                 on_done, &logs[i], &ids[i]), 0);
        }
        /* Nothing runs a callback but cmwq_process(). */
        for (int i = 0; i < 5; i++)
                ck_assert_int_eq(logs[i].calls, 0);

        for (int waited = 0; waited < 20000; waited += 50) {
                struct pollfd pfd = { .fd = cmwq_get_fd(c), .events = POLLIN };

                total = 0;
                for (int i = 0; i < 5; i++)
                        total += logs[i].calls;
                if (total == 5)
                        break;
                if (poll(&pfd, 1, 50) > 0)
                        ck_assert_int_ge(cmwq_process(c), 0);
        }
        ck_assert_int_eq(total, 5);
        for (int i = 0; i < 5; i++) {
                char expect[16];

                snprintf(expect, sizeof(expect), "item%d\n", i);
                ck_assert_int_eq(logs[i].calls, 1);
                ck_assert_int_eq(logs[i].error, 0);
                ck_assert_int_eq(logs[i].exit_status, i);
                ck_assert_str_eq(logs[i].out, expect);
                ck_assert_uint_eq(logs[i].id, ids[i]);
        }
        /* Idle: the fd does not poll readable. */
        struct pollfd pfd = { .fd = cmwq_get_fd(c), .events = POLLIN };
        ck_assert_int_eq(poll(&pfd, 1, 100), 0);
        cmwq_disconnect(c);
}
END_TEST

START_TEST(test_flush_and_destroy_wait_for_queued_items) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_alloc_workqueue(c, "flushme", CMWQ_WQ_UNBOUND, 2);
        char marks[400], cmd[600];

        ck_assert_ptr_nonnull(wq);
        test_path(&d, "marks", marks, sizeof(marks));
        snprintf(cmd, sizeof(cmd), "sleep 0.3; echo done >> %s", marks);
        for (int i = 0; i < 4; i++)
                ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) }, NULL), 0);
        ck_assert_int_eq(cmwq_flush_workqueue(wq), 0);
        ck_assert_int_eq(count_lines(marks), 4);

        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) }, NULL), 0);
        ck_assert_int_eq(cmwq_drain_workqueue(wq), 0);
        ck_assert_int_eq(count_lines(marks), 7);

        /* Destroy drains first. */
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) }, NULL), 0);
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        ck_assert_int_eq(count_lines(marks), 10);
        cmwq_disconnect(c);
}
END_TEST

/* A drain holds for the whole call, as the kernel's __WQ_DRAINING: while
 * cmwqd drains the queue's exec items, a callback queued from outside is
 * refused too.  It was accepted once the callbacks' part was over, and the
 * drain could return with it pending. */
static void drain_noop(struct cmwq_work *w) {
        (void) w;
}

struct drainer {
        struct cmwq_workqueue *wq;
        int r;
};

static void *drainer_main(void *userdata) {
        struct drainer *dr = userdata;

        __atomic_store_n(&dr->r, cmwq_drain_workqueue(dr->wq), __ATOMIC_RELEASE);
        return NULL;
}

/* Whether cmwqd says workqueue @name drains. */
static bool daemon_drains(const char *name) {
        char *out = CTL_OK(&d, "--json", "list"), key[200];
        const char *obj, *end;
        bool draining;

        snprintf(key, sizeof(key), "\"name\":\"%s\"", name);
        obj = strstr(out, key);
        ck_assert_msg(obj, "%s is not listed: %s", name, out);
        end = strchr(obj, '}');
        draining = end && memmem(obj, (size_t) (end - obj), "\"draining\":true", 15);
        free(out);
        return draining;
}

START_TEST(test_a_drain_refuses_outside_callbacks_while_exec_items_drain) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_alloc_workqueue(c, "drained-both", 0, 0);
        struct drainer dr = { .wq = wq, .r = 1 };
        struct cmwq_work w;
        char gate[400], cmd[600];
        pthread_t th;

        ck_assert_ptr_nonnull(wq);
        test_path(&d, "drain.gate", gate, sizeof(gate));
        snprintf(cmd, sizeof(cmd), "while [ ! -e %s ]; do sleep 0.02; done", gate);
        ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) }, NULL), 0);
        CMWQ_WORK_INIT(&w, drain_noop);
        ck_assert(cmwq_queue_work(wq, &w));
        ck_assert_int_ge(cmwq_flush_work(&w), 0);
        ck_assert_int_eq(pthread_create(&th, NULL, drainer_main, &dr), 0);
        for (int waited = 0; !daemon_drains("drained-both"); waited += 20) {
                ck_assert_msg(waited < 30000, "cmwqd never drained the queue");
                usleep(20000);
        }
        ck_assert_msg(!cmwq_queue_work(wq, &w), "a callback from outside was queued during the drain");
        ck_assert_int_eq(__atomic_load_n(&dr.r, __ATOMIC_ACQUIRE), 1);       /* still draining */
        FILE *f = fopen(gate, "w");

        ck_assert_ptr_nonnull(f);
        fclose(f);
        pthread_join(th, NULL);
        ck_assert_int_eq(dr.r, 0);
        ck_assert(!cmwq_work_pending(&w));
        /* Over: queueing is back. */
        ck_assert(cmwq_queue_work(wq, &w));
        ck_assert_int_eq(cmwq_destroy_workqueue(wq), 0);
        cmwq_disconnect(c);
}
END_TEST

struct sync_thread {
        struct cmwq_workqueue *wq;
        int index;
        int r;
        int exit_status;
};

static void *sync_thread_main(void *userdata) {
        struct sync_thread *t = userdata;
        struct cmwq_exec_result *res = NULL;
        char cmd[32];

        snprintf(cmd, sizeof(cmd), "exit %d", t->index);
        t->r = cmwq_exec_sync(t->wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sh", "-c", cmd) }, &res);
        if (t->r == 0)
                t->exit_status = res->exit_status;
        cmwq_exec_result_free(res);
        return NULL;
}

START_TEST(test_many_threads_share_a_connection) {
        struct cmwq *c = connect_ok(&d);
        struct sync_thread t[8];
        pthread_t th[8];

        for (int i = 0; i < 8; i++) {
                t[i] = (struct sync_thread) { .wq = cmwq_system_workqueue(c, CMWQ_SYSTEM_UNBOUND), .index = i + 1 };
                ck_assert_int_eq(pthread_create(&th[i], NULL, sync_thread_main, &t[i]), 0);
        }
        for (int i = 0; i < 8; i++) {
                pthread_join(th[i], NULL);
                ck_assert_msg(t[i].r == 0, "thread %d: %d", i, t[i].r);
                ck_assert_int_eq(t[i].exit_status, i + 1);
        }
        cmwq_disconnect(c);
}
END_TEST

struct waiting_thread {
        struct cmwq_workqueue *wq;
        int r;
};

static void *waiting_thread_main(void *userdata) {
        struct waiting_thread *t = userdata;
        struct cmwq_exec_result *res = NULL;

        t->r = cmwq_exec_sync(t->wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sleep", "20") }, &res);
        cmwq_exec_result_free(res);
        return NULL;
}

START_TEST(test_daemon_death_ends_waiting_calls_then_reconnect) {
        struct cmwq *c = connect_ok(&d);
        struct cmwq_workqueue *wq = cmwq_system_workqueue(c, CMWQ_SYSTEM_UNBOUND);
        struct waiting_thread t = { .wq = wq, .r = 1 };
        struct done_log log = {};
        pthread_t th;
        char *out;
        int status, r;

        ck_assert_int_eq(cmwq_exec_async(wq, &(struct cmwq_exec_args) { .argv = ARGV("/bin/sleep", "20") },
                                         on_done, &log, NULL), 0);
        ck_assert_int_eq(pthread_create(&th, NULL, waiting_thread_main, &t), 0);
        /* Both items run (so both calls are really waiting). */
        for (int waited = 0; waited < 10000; waited += 50) {
                out = CTL_OK(&d, "--json", "list");
                bool both = strstr(out, "\"running\": 2") || strstr(out, "\"running\":2");
                free(out);
                if (both)
                        break;
                usleep(50000);
        }

        kill(d.pid, SIGKILL);
        waitpid(d.pid, &status, 0);
        d.pid = 0;
        /* The killed daemon's directory goes; the new one has its own. */
        char rm[300];
        snprintf(rm, sizeof(rm), "rm -rf '%s'", d.dir);
        ck_assert_int_eq(system(rm), 0);

        pthread_join(th, NULL);
        ck_assert_int_lt(t.r, 0);
        r = drive(c, &log.calls, 1, 10000);
        ck_assert_int_eq(log.calls, 1);
        ck_assert_int_lt(log.error, 0);
        ck_assert_int_lt(r, 0);
        /* Every later call fails at once. */
        ck_assert_int_lt(cmwq_flush_workqueue(wq), 0);
        ck_assert_msg(strstr(cmwq_last_error(), "lost"), "message: %s", cmwq_last_error());
        cmwq_disconnect(c);

        /* A new daemon: connecting again just works. */
        cmwqd_start(&d, NULL);
        c = connect_ok(&d);
        struct cmwq_exec_result *res = run_ok(cmwq_system_workqueue(c, CMWQ_SYSTEM),
                                              &(struct cmwq_exec_args) { .argv = ARGV("/bin/echo", "again") });
        ck_assert_str_eq(res->out, "again\n");
        cmwq_exec_result_free(res);
        cmwq_disconnect(c);
}
END_TEST

/* The library exports its API and nothing of the code linked into it. */
START_TEST(test_exports_only_cmwq_symbols) {
        ck_assert_ptr_nonnull(dlsym(RTLD_DEFAULT, "cmwq_connect"));
        ck_assert_ptr_nonnull(dlsym(RTLD_DEFAULT, "cmwq_exec_async"));
        ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "conn_call"));
        ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "frame_parse"));
        ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "client_call"));
        ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "cmwq__request__pack"));
}
END_TEST

/* A NULL connection or queue -- an allocation that failed, not checked --
 * is refused with the header's error, and a NULL work item is an idle one:
 * not a crash of the caller (libcmwq-client(3), Conventions). */
START_TEST(test_null_handles_are_refused) {
        struct cmwq_exec_result *res = NULL;
        struct cmwq_work w;
        uint64_t id;

        CMWQ_WORK_INIT(&w, NULL);
        ck_assert_int_eq(cmwq_get_fd(NULL), -EINVAL);
        ck_assert_int_eq(cmwq_process(NULL), -EINVAL);
        ck_assert_ptr_null(cmwq_workqueue_name(NULL));
        ck_assert_ptr_null(cmwq_alloc_workqueue(NULL, "q", 0, 0));
        ck_assert_ptr_null(cmwq_open_workqueue(NULL, "q"));
        ck_assert_ptr_null(cmwq_system_workqueue(NULL, CMWQ_SYSTEM));
        ck_assert_int_eq(cmwq_workqueue_set_max_active(NULL, 1), -EINVAL);
        ck_assert_int_eq(cmwq_flush_workqueue(NULL), -EINVAL);
        ck_assert_int_eq(cmwq_drain_workqueue(NULL), -EINVAL);
        ck_assert_int_eq(cmwq_destroy_workqueue(NULL), -EINVAL);
        ck_assert(!cmwq_queue_work(NULL, &w));
        ck_assert(!cmwq_queue_work_on(0, NULL, &w));
        /* A NULL work item is an idle one. */
        ck_assert(!cmwq_cancel_work(NULL));
        ck_assert_int_eq(cmwq_cancel_work_sync(NULL), 0);
        ck_assert_int_eq(cmwq_flush_work(NULL), 0);
        ck_assert(!cmwq_work_pending(NULL));
        ck_assert_int_eq(cmwq_exec(NULL, NULL, &id), -EINVAL);
        ck_assert_int_eq(cmwq_exec_sync(NULL, NULL, &res), -EINVAL);
        ck_assert_int_eq(cmwq_exec_wait(NULL, 1, &res), -EINVAL);
        ck_assert_int_eq(cmwq_exec_cancel(NULL, 1), -EINVAL);
        cmwq_disconnect(NULL);
}
END_TEST

/* Item @id as cmwqctl shows it, and as --json shows it: neither may claim an
 * exit status or a signal for an interrupted item. */
static void assert_shown_interrupted(const char *id) {
        char *text = CTL_OK(&d, "show", id);

        ck_assert_msg(strstr(text, "state:         interrupted\n"), "show %s said:\n%s", id, text);
        ck_assert_msg(!strstr(text, "exit status:") && !strstr(text, "signal:"), "show %s said:\n%s", id, text);
        free(text);
        text = CTL_OK(&d, "--json", "show", id);
        ck_assert_msg(strstr(text, "\"state\":\"interrupted\""), "show --json %s said: %s", id, text);
        ck_assert_msg(!strstr(text, "\"exit_status\"") && !strstr(text, "\"signal\""), "show --json %s said: %s", id,
                      text);
        free(text);
}

/* Issue 12, item 7: an item running when cmwqd dies is interrupted (the
 * default policy, drop).  Killed work must not look successful: no "exit
 * status: 0", and through the library a state of the header's enum with
 * exited false, so that "exited and status 0" is never true for it. */
START_TEST(test_an_interrupted_item_has_no_exit_status) {
        struct cmwq_exec_result *res = NULL;
        struct cmwq_workqueue *wq;
        struct ctl_result r;
        struct cmwq *c;
        char started[400], id_text[32];
        uint64_t id;

        test_path(&d, "started", started, sizeof(started));
        c = connect_ok(&d);
        wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        ck_assert_int_eq(cmwq_exec(wq, &(struct cmwq_exec_args) {
                                 .argv = ARGV("/bin/sh", "-c", "echo x > \"$1\"; exec sleep 60", "sh", started) },
                         &id), 0);
        ck_assert(wait_for_lines(started, 1, 10000));
        cmwq_disconnect(c);
        snprintf(id_text, sizeof(id_text), "%llu", (unsigned long long) id);

        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);
        assert_shown_interrupted(id_text);
        CTL(&d, &r, "wait", id_text);
        ck_assert_msg(r.status == 125, "wait: exit %d (want 125), %s", r.status, r.err);
        ctl_result_free(&r);

        c = connect_ok(&d);
        ck_assert_int_eq(cmwq_exec_wait(c, id, &res), 0);
        ck_assert_int_eq(res->state, CMWQ_EXEC_INTERRUPTED);
        ck_assert_msg(!res->exited, "an interrupted item 'exited' with status %d", res->exit_status);
        ck_assert_int_eq(res->signal, 0);
        cmwq_exec_result_free(res);
        cmwq_disconnect(c);

        /* Likewise from the history the state log keeps. */
        cmwqd_terminate(&d);
        cmwqd_launch(&d, NULL);
        assert_shown_interrupted(id_text);
}
END_TEST

int main(void) {
        Suite *s = suite_create("client");
        TCase *tc = tcase_create("client");
        SRunner *sr;
        int failed;

        signal(SIGPIPE, SIG_IGN);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_exports_only_cmwq_symbols);
        tcase_add_test(tc, test_connect_finds_the_daemon);
        tcase_add_test(tc, test_workqueue_lifecycle);
        tcase_add_test(tc, test_exec_sync_argv_env_cwd_stdin);
        tcase_add_test(tc, test_exec_on_cpu_key_timeout);
        tcase_add_test(tc, test_exec_cancel_running_waits_for_it);
        tcase_add_test(tc, test_exec_async_from_an_event_loop);
        tcase_add_test(tc, test_flush_and_destroy_wait_for_queued_items);
        tcase_add_test(tc, test_a_drain_refuses_outside_callbacks_while_exec_items_drain);
        tcase_add_test(tc, test_many_threads_share_a_connection);
        tcase_add_test(tc, test_daemon_death_ends_waiting_calls_then_reconnect);
        tcase_add_test(tc, test_an_interrupted_item_has_no_exit_status);
        tcase_add_test(tc, test_null_handles_are_refused);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

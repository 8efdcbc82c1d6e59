/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Per-user limits (cmwqd --limit NAME=VALUE, cmwqd(8) LIMITS): one user
 * flooding the daemon is refused with an error that names the limit, while
 * other users and root go on being served; per-item sizes and the per-user
 * history bound what the daemon keeps.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#include "harness.h"

#define USER_UID 65534
#define OTHER_UID 1             /* "daemon": items need a user database entry */

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, (const char *const[]) {
                "--limit", "pending-items=20", "--limit", "queued-bytes=256K", "--limit", "workqueues=2",
                "--limit", "history=3", "--limit", "output-bytes=1000", "--limit", "item-args-bytes=64K",
                "--limit", "callback-threads=2", NULL });
}

static void teardown(void) {
        cmwqd_stop(&d);
}

static char *ctl_as_ok(uid_t uid, const char *const *args) {
        struct ctl_result r;
        size_t n;

        ctl_run(&d, uid, &r, args);
        ck_assert_msg(r.status == 0, "cmwqctl %s ... as uid %d exited %d: %s", args[0], (int) uid, r.status, r.err);
        free(r.err);
        n = strlen(r.out);
        if (n > 0 && r.out[n - 1] == '\n')
                r.out[n - 1] = 0;
        return r.out;
}
#define CTL_AS_OK(uid, ...) ctl_as_ok(uid, (const char *const[]) { __VA_ARGS__, NULL })

/* Refused over a limit: exit 1, exactly the one line @line on stderr,
 * nothing on stdout. */
static void assert_limit(const struct ctl_result *r, const char *line, const char *what) {
        char want[256];

        snprintf(want, sizeof(want), "cmwqctl: %s\n", line);
        ck_assert_msg(r->status == 1, "%s: exit %d (want 1), stderr '%s'", what, r->status, r->err);
        ck_assert_msg(strcmp(r->err, want) == 0, "%s: stderr '%s', want '%s'", what, r->err, want);
        ck_assert_msg(r->out[0] == 0, "%s: stdout '%s'", what, r->out);
}

static void write_bytes(const char *path, size_t n) {
        char *buf = malloc(n);
        int fd;

        ck_assert_ptr_nonnull(buf);
        memset(buf, 'p', n);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, buf, n), (ssize_t) n);
        close(fd);
        free(buf);
}

START_TEST(test_flood_from_one_user) {
        struct ctl_result r;
        char *ids[20], *out;
        int n;

        /* uid 65534 queues work that stays pending until it is refused. */
        for (n = 0; n < 40; n++) {
                CTL_AS(&d, USER_UID, &r, "submit", "system", "--delay", "600", "--", "/bin/true");
                if (r.status != 0)
                        break;
                ck_assert_int_lt(n, 20);
                ids[n] = strndup(r.out, strcspn(r.out, "\n"));
                ctl_result_free(&r);
        }
        ck_assert_int_eq(n, 20);
        assert_limit(&r, "per-user limit 'pending-items' (20) reached for uid 65534", "the 21st item");
        ctl_result_free(&r);
        /* Also on a queue of its own, and with --wait. */
        free(CTL_AS_OK(USER_UID, "create", "mine"));
        CTL_AS(&d, USER_UID, &r, "submit", "mine", "--wait", "--", "/bin/true");
        assert_limit(&r, "per-user limit 'pending-items' (20) reached for uid 65534", "submit --wait");
        ctl_result_free(&r);

        /* Everybody else is served, and gets results. */
        out = CTL_AS_OK(OTHER_UID, "submit", "system", "--wait", "--", "/bin/sh", "-c", "echo served $(id -u)");
        ck_assert_str_eq(out, "served 1");
        free(out);
        out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", "echo served $(id -u)");
        ck_assert_str_eq(out, "served 0");
        free(out);
        /* Root has no per-user item limit. */
        for (int k = 0; k < 25; k++)
                free(CTL_OK(&d, "submit", "system", "--delay", "600", "--", "/bin/true"));

        /* One finished (cancelled): room for one more, not two. */
        free(CTL_AS_OK(USER_UID, "cancel", ids[0]));
        free(CTL_AS_OK(USER_UID, "submit", "system", "--delay", "600", "--", "/bin/true"));
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--", "/bin/true");
        assert_limit(&r, "per-user limit 'pending-items' (20) reached for uid 65534", "after one cancel");
        ctl_result_free(&r);
        for (int k = 0; k < 20; k++)
                free(ids[k]);
}
END_TEST

START_TEST(test_queued_bytes_per_user) {
        char payload[400];
        struct ctl_result r;
        int n;

        /* 100 KiB payloads against 256 KiB: two fit, the third does not. */
        test_path(&d, "payload", payload, sizeof(payload));
        write_bytes(payload, 100 * 1024);
        for (n = 0; n < 5; n++) {
                CTL_AS(&d, USER_UID, &r, "submit", "system", "--delay", "600", "--stdin", payload, "--", "/bin/cat");
                if (r.status != 0)
                        break;
                ctl_result_free(&r);
        }
        ck_assert_int_eq(n, 2);
        assert_limit(&r, "per-user limit 'queued-bytes' (262144) reached for uid 65534", "the third payload");
        ctl_result_free(&r);

        /* Another user's bytes are its own. */
        CTL_AS(&d, OTHER_UID, &r, "submit", "system", "--stdin", payload, "--wait", "--", "/usr/bin/wc", "-c");
        ck_assert_msg(r.status == 0 && strcmp(r.out, "102400\n") == 0, "uid 1: exit %d, '%s' '%s'", r.status, r.out,
                      r.err);
        ctl_result_free(&r);
}
END_TEST

START_TEST(test_workqueues_per_user) {
        struct ctl_result r;

        free(CTL_AS_OK(USER_UID, "create", "q1"));
        free(CTL_AS_OK(USER_UID, "create", "q2"));
        CTL_AS(&d, USER_UID, &r, "create", "q3");
        assert_limit(&r, "per-user limit 'workqueues' (2) reached for uid 65534", "a third queue");
        ctl_result_free(&r);

        /* Others are not affected, root has no such limit. */
        free(CTL_AS_OK(OTHER_UID, "create", "q1"));
        for (int k = 0; k < 3; k++) {
                char name[16];

                snprintf(name, sizeof(name), "root%d", k);
                free(CTL_OK(&d, "create", name));
        }

        /* A destroyed queue gives its slot back. */
        free(CTL_AS_OK(USER_UID, "destroy", "q1"));
        free(CTL_AS_OK(USER_UID, "create", "q3"));
}
END_TEST

START_TEST(test_item_sizes_and_output) {
        struct ctl_result r;
        char *big, *out;

        big = malloc(70 * 1024);
        ck_assert_ptr_nonnull(big);
        memset(big, 'a', 70 * 1024 - 1);
        big[70 * 1024 - 1] = 0;
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--", "/bin/echo", big);
        ck_assert_msg(r.status == 1 && strstr(r.err, "over the limit 'item-args-bytes' (65536)") &&
                              strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                      "a 70 KiB argument: exit %d, '%s'", r.status, r.err);
        ctl_result_free(&r);
        free(big);

        /* Output kept: output-bytes per stream, flagged truncated. */
        out = CTL_AS_OK(USER_UID, "submit", "system", "--wait", "--", "/bin/sh", "-c",
                        "head -c 5000 /dev/zero | tr '\\0' o");
        ck_assert_uint_eq(strlen(out), 1000);
        free(out);
        CTL_AS(&d, USER_UID, &r, "--json", "submit", "system", "--wait", "--", "/bin/sh", "-c",
               "head -c 5000 /dev/zero | tr '\\0' o");
        ck_assert_msg(r.status == 0 && strstr(r.out, "\"stdout_truncated\":true"), "--json: %s", r.out);
        ctl_result_free(&r);
}
END_TEST

/* Each user's history is its own: one user's stream of finished items does
 * not push another user's results out. */
START_TEST(test_history_per_user) {
        char *theirs, *first = NULL, *out;
        struct ctl_result r;

        theirs = CTL_AS_OK(OTHER_UID, "submit", "system", "--", "/bin/echo", "kept");
        free(CTL_AS_OK(OTHER_UID, "wait", theirs));
        for (int k = 0; k < 6; k++) {
                char *id = CTL_AS_OK(USER_UID, "submit", "system", "--", "/bin/true");

                free(CTL_AS_OK(USER_UID, "wait", id));
                if (k == 0)
                        first = id;
                else
                        free(id);
        }
        out = CTL_AS_OK(OTHER_UID, "wait", theirs);
        ck_assert_str_eq(out, "kept");
        free(out);
        CTL_AS(&d, USER_UID, &r, "show", first);
        ck_assert_msg(r.status == 1 && strstr(r.err, "kept for the last 3 per user"), "exit %d, %s", r.status, r.err);
        ctl_result_free(&r);
        free(theirs);
        free(first);
}
END_TEST

struct blocking_work {
        struct cmwq_work work;
        atomic_int *ran;
};

static void blocking_fn(struct cmwq_work *w) {
        struct blocking_work *b = cmwq_container_of(w, struct blocking_work, work);
        struct timespec t = { 0, 200 * 1000000L };

        nanosleep(&t, NULL);
        atomic_fetch_add(b->ran, 1);
}

/* The child: uid 65534 queues 6 callbacks that block on CPU 0, each of
 * which would get a thread of its own; once all have run it says so on
 * @done_fd and keeps its connection (and threads) until @go_fd has a byte
 * or is closed; exits 0. */
static int callback_threads_child(const char *socket, int done_fd, int go_fd) {
        struct blocking_work works[6];
        atomic_int ran = 0;
        struct cmwq *c;
        struct cmwq_workqueue *wq;

        if (setgroups(0, NULL) < 0 || setgid(USER_UID) < 0 || setuid(USER_UID) < 0)
                return 10;
        c = cmwq_connect(socket);
        if (!c)
                return 11;
        wq = cmwq_system_workqueue(c, CMWQ_SYSTEM);
        for (int i = 0; i < 6; i++) {
                works[i].ran = &ran;
                CMWQ_WORK_INIT(&works[i].work, blocking_fn);
                if (!cmwq_queue_work_on(0, wq, &works[i].work))
                        return 12;
        }
        if (cmwq_flush_workqueue(wq) < 0)
                return 13;
        (void) !write(done_fd, "d", 1);
        (void) !read(go_fd, &(char) { 0 }, 1);
        cmwq_disconnect(c);
        return atomic_load(&ran) == 6 ? 0 : 14;
}

/* callback-threads: a user's library threads registered with cmwqd (each
 * costs it a perf fd).  Over the limit a thread is refused; the work waits
 * for the threads the user has (the library tries again with a back-off),
 * and all of it runs. */
START_TEST(test_callback_threads_per_user) {
        int status, most = 0, done[2], go[2];
        bool finished = false;
        pid_t pid;

        ck_assert_int_eq(pipe2(done, O_CLOEXEC | O_NONBLOCK), 0);
        ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
        pid = test_fork();
        if (pid == 0) {
                close(done[0]);
                close(go[1]);
                _exit(callback_threads_child(d.socket, done[1], go[0]));
        }
        close(done[1]);
        close(go[0]);
        /* Sampled while the work runs, and once more after all of it ran
         * (its threads are still registered then, however fast or slow
         * the machine was meanwhile). */
        for (bool last = false; !last;) {
                struct ctl_result r = {};
                char ch;
                int n;

                last = finished;
                ck_assert_int_eq(CTL(&d, &r, "--json", "pools"), 0);
                n = (int) json_sum(r.out, "callback_threads");
                ctl_result_free(&r);
                if (n > most)
                        most = n;
                if (!finished) {
                        ssize_t got = read(done[0], &ch, 1);

                        finished = got >= 0;    /* a byte, or EOF: the child failed early */
                        if (!finished)
                                usleep(20000);
                }
        }
        close(go[1]);
        close(done[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client failed: status 0x%x", status);
        ck_assert_msg(most <= 2, "uid %d had %d callback threads at once, over its limit 2", USER_UID, most);
        ck_assert_msg(most >= 1, "no callback thread seen");
        char *log = read_file(d.log);
        ck_assert_msg(strstr(log, "per-user limit 'callback-threads' (2) reached for uid 65534"), "log: %s", log);
        free(log);
}
END_TEST

/* ---- One user's connection flood (issue 12) ---- */

#define FLOODERS 5
#define FLOOD_CONNECTIONS 900   /* each: 4500 in all, more than the 4096 slots */

struct flood {
        atomic_int ready;       /* flooders that had all their connections open once */
        atomic_long reopened;   /* connections the daemon closed, opened again */
        atomic_bool stop;
};

/* Holds FLOOD_CONNECTIONS connections to @path that never send a byte, and
 * opens each again as soon as the daemon closes it, until told to stop. */
static void flooder(const char *path, struct flood *f, uid_t uid) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct pollfd pfd[FLOOD_CONNECTIONS];
        bool all_open = false;

        if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                _exit(1);
        /* Set after the uid change, which clears it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(300);
        if (strlen(path) >= sizeof(sa.sun_path))
                _exit(3);
        memcpy(sa.sun_path, path, strlen(path) + 1);
        for (int k = 0; k < FLOOD_CONNECTIONS; k++)
                pfd[k] = (struct pollfd) { .fd = -1, .events = POLLIN };

        while (!atomic_load(&f->stop) && getppid() != 1) {
                bool missing = false;

                for (int k = 0; k < FLOOD_CONNECTIONS; k++) {
                        if (pfd[k].fd >= 0)
                                continue;
                        pfd[k].fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                        if (pfd[k].fd < 0)
                                _exit(2);
                        if (connect(pfd[k].fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                                /* The daemon's backlog is full: later. */
                                close(pfd[k].fd);
                                pfd[k].fd = -1;
                                missing = true;
                        }
                }
                if (!missing && !all_open) {
                        all_open = true;
                        atomic_fetch_add(&f->ready, 1);
                }
                if (poll(pfd, FLOOD_CONNECTIONS, missing ? 1 : 50) <= 0)
                        continue;
                for (int k = 0; k < FLOOD_CONNECTIONS; k++) {
                        char buf[512];
                        ssize_t n;

                        if (pfd[k].fd < 0 || !pfd[k].revents)
                                continue;
                        n = read(pfd[k].fd, buf, sizeof(buf));
                        if (n > 0 || (n < 0 && errno == EAGAIN))
                                continue;
                        close(pfd[k].fd);
                        pfd[k].fd = -1;
                        atomic_fetch_add(&f->reopened, 1);
                }
        }
        _exit(0);
}

static int count_matching_lines(const char *path, const char *a, const char *b) {
        char *s = read_file(path), *line = s, *end;
        int n = 0;

        for (; *line; line = end + 1) {
                end = strchrnul(line, '\n');
                char saved = *end;
                *end = 0;
                if (strstr(line, a) && (!b || strstr(line, b)))
                        n++;
                *end = saved;
                if (!saved)
                        break;
        }
        free(s);
        return n;
}

/* Issue 12: uid 65534 holds 4500 connections that never say Hello (more
 * than the daemon's 4096 slots) and opens each again as soon as it is
 * closed.  Root and another user connect and submit all the while; the
 * refusals cost the daemon no slot and one log line per interval. */
START_TEST(test_connection_flood_from_one_user) {
        enum { ROUNDS = 5, REFUSALS = 3000 };
        struct flood *f;
        pid_t pids[FLOODERS];
        long before, during;
        int lines_before, lines_after, status, allowed;
        struct timespec t0, t1;
        char *log;

        f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(f, MAP_FAILED);
        memset(f, 0, sizeof(*f));
        lines_before = count_lines(d.log);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int k = 0; k < FLOODERS; k++) {
                pids[k] = test_fork();
                if (pids[k] == 0)
                        flooder(d.socket, f, USER_UID);
        }
        for (int waited = 0; atomic_load(&f->ready) < FLOODERS; waited += 10) {
                ck_assert_msg(waited < 60000, "the flooders did not get their connections open");
                usleep(10000);
        }

        /* The flood goes on while root and uid 1 are served. */
        before = atomic_load(&f->reopened);
        for (int k = 0; k < ROUNDS; k++) {
                char *out;

                out = CTL_AS_OK(OTHER_UID, "submit", "system", "--wait", "--", "/bin/sh", "-c", "id -u");
                ck_assert_str_eq(out, "1");
                free(out);
                out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", "id -u");
                ck_assert_str_eq(out, "0");
                free(out);
                free(CTL_AS_OK(OTHER_UID, "list"));
        }
        during = atomic_load(&f->reopened) - before;
        ck_assert_msg(during > 0, "the flood stopped while the others were served");
        /* A flood of a few thousand refusals, then stop. */
        for (int waited = 0; atomic_load(&f->reopened) < REFUSALS; waited += 10) {
                ck_assert_msg(waited < 60000, "only %ld connections refused", atomic_load(&f->reopened));
                usleep(10000);
        }
        atomic_store(&f->stop, true);
        for (int k = 0; k < FLOODERS; k++) {
                ck_assert_int_eq(waitpid(pids[k], &status, 0), pids[k]);
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "flooder %d: status 0x%x", k, status);
        }

        /* Refused once in the log, told why ... */
        log = read_file(d.log);
        ck_assert_msg(strstr(log, "Refusing client pid") &&
                              strstr(log, "per-user limit 'connections' (64) reached for uid 65534"),
                      "the refusal is not logged");
        free(log);
        /* ... and not for every one of them: the lines about uid 65534
         * above debug level are a handful per 10 s interval of the rate
         * limit (the refusal, then the count of those suppressed), not
         * thousands.  How many intervals the flood lasted depends on the
         * machine (slow under a sanitizer and load), so count them. */
        clock_gettime(CLOCK_MONOTONIC, &t1);
        allowed = 2 * ((int) (t1.tv_sec - t0.tv_sec) / 10 + 2) + 4;
        lines_after = count_lines(d.log);
        ck_assert_msg(count_matching_lines(d.log, "uid 65534", "cmwqd[info]") +
                                      count_matching_lines(d.log, "uid 65534", "cmwqd[warning]") <=
                              allowed,
                      "%d lines about uid 65534 (%d above debug, %d allowed in %ld s) for %ld refusals",
                      count_matching_lines(d.log, "uid 65534", NULL),
                      count_matching_lines(d.log, "uid 65534", "cmwqd[info]") +
                              count_matching_lines(d.log, "uid 65534", "cmwqd[warning]"),
                      allowed, (long) (t1.tv_sec - t0.tv_sec), atomic_load(&f->reopened));
        ck_assert_msg(lines_after - lines_before < 1000, "the log grew by %d lines for %ld refusals",
                      lines_after - lines_before, atomic_load(&f->reopened));
        /* The rest are counted, and the count is logged once the interval
         * (10 s) is over. */
        for (int waited = 0; count_matching_lines(d.log, "Suppressed ", "reached for uid 65534") == 0;
             waited += 100) {
                ck_assert_msg(waited < 30000, "no count of the suppressed refusals in the log");
                usleep(100000);
        }
        munmap(f, sizeof(*f));
}
END_TEST

/* Five users each hold 900 connections (their limit is 1000 here): 4500
 * unprivileged connections wanted, more than the table's 4096 slots.  The
 * slots kept for root let it in all the while. */
START_TEST(test_connection_flood_from_many_users_leaves_room_for_root) {
        struct flood *f;
        pid_t pids[FLOODERS];
        int status, fds;

        cmwqd_stop(&d);
        cmwqd_start(&d, (const char *const[]) { "--limit", "connections=1000", NULL });
        f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(f, MAP_FAILED);
        memset(f, 0, sizeof(*f));
        for (int k = 0; k < FLOODERS; k++) {
                pids[k] = test_fork();
                if (pids[k] == 0)
                        flooder(d.socket, f, (uid_t) (USER_UID - 2 - k));
        }
        for (int waited = 0; atomic_load(&f->ready) < FLOODERS || atomic_load(&f->reopened) < 500; waited += 10) {
                ck_assert_msg(waited < 60000, "the flooders did not get their connections open (%ld refused)",
                              atomic_load(&f->reopened));
                usleep(10000);
        }

        for (int k = 0; k < 5; k++) {
                char *out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", "id -u");

                ck_assert_str_eq(out, "0");
                free(out);
        }
        /* The daemon holds at most its table's worth of connections. */
        fds = count_fds(d.pid);
        ck_assert_msg(fds < (int) 4096 + 100, "cmwqd holds %d fds", fds);
        atomic_store(&f->stop, true);
        for (int k = 0; k < FLOODERS; k++) {
                ck_assert_int_eq(waitpid(pids[k], &status, 0), pids[k]);
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "flooder %d: status 0x%x", k, status);
        }
        ck_assert_msg(count_matching_lines(d.log, "cmwqd serves as many clients as it takes (4032)", NULL) > 0,
                      "no refusal for a full table logged");
        munmap(f, sizeof(*f));
}
END_TEST

/* cmwqd --limit: bad names and values are usage errors (exit 2). */
static int run_cmwqd(const char *const *args, char **ret_err) {
        const char *argv[16];
        int pipefd[2], n = 0, status;
        char path[64];
        pid_t pid;

        argv[n++] = getenv("CMWQD");
        for (; *args && n < 15; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
        pid = test_fork();
        if (pid == 0) {
                dup2(pipefd[1], STDERR_FILENO);
                dup2(pipefd[1], STDOUT_FILENO);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        close(pipefd[1]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", pipefd[0]);
        *ret_err = read_file(path);
        close(pipefd[0]);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(test_limit_option_errors) {
        static const struct {
                const char *arg;
                const char *says;
        } cases[] = {
                { "bogus=1", "unknown limit 'bogus'" },
                { "pending-items", "needs NAME=VALUE" },
                { "pending-items=0", "invalid value '0' for limit 'pending-items'" },
                { "pending-items=-1", "invalid value '-1'" },
                { "pending-items=12x", "invalid value '12x'" },
                { "pending-items=1K", "invalid value '1K'" },
                { "output-bytes=2G", "invalid value '2G' for limit 'output-bytes'" },
        };
        char *err;

        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                int status = run_cmwqd((const char *const[]) { "--limit", cases[k].arg, "--socket", "/nonexistent/s",
                                                               NULL },
                                       &err);
                ck_assert_msg(status == 2 && strstr(err, cases[k].says), "--limit %s: exit %d, '%s'", cases[k].arg,
                              status, err);
                free(err);
        }
        ck_assert_int_eq(run_cmwqd((const char *const[]) { "--help", NULL }, &err), 0);
        ck_assert_msg(strstr(err, "--limit NAME=VALUE"), "--help: %s", err);
        free(err);
}
END_TEST

static void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

/* How many delayed items uid 65534 may queue on @daemon before a refusal
 * naming pending-items; at most 10. */
static int pending_items_allowed(struct cmwqd *daemon) {
        struct ctl_result r;
        int n;

        for (n = 0; n <= 10; n++) {
                CTL_AS(daemon, USER_UID, &r, "submit", "system", "--delay", "600", "--", "/bin/true");
                if (r.status != 0)
                        break;
                ctl_result_free(&r);
        }
        ck_assert_msg(n <= 10 && strstr(r.err, "per-user limit 'pending-items'"), "after %d: exit %d, %s", n, r.status,
                      r.err);
        ctl_result_free(&r);
        return n;
}

/* cmwqd.conf(5): [Limits] as --limit; the command line wins; a bad line
 * keeps the daemon from starting, naming file and line. */
START_TEST(test_config_file) {
        char conf[400], *err;
        struct cmwqd c;

        test_path(&d, "cmwqd.conf", conf, sizeof(conf));
        write_text(conf, "# limits for the test\n\n[Limits]\n  pending-items = 2\nqueued-bytes=1M\n");
        cmwqd_start(&c, (const char *const[]) { "--config", conf, NULL });
        ck_assert_int_eq(pending_items_allowed(&c), 2);
        cmwqd_stop(&c);
        cmwqd_start(&c, (const char *const[]) { "--config", conf, "--limit", "pending-items=3", NULL });
        ck_assert_int_eq(pending_items_allowed(&c), 3);
        cmwqd_stop(&c);

        static const struct {
                const char *text;
                const char *says;
        } bad[] = {
                { "[Limits]\npending-items=2\nbogus=1\n", ":3: unknown limit 'bogus'" },
                { "[Limits]\npending-items=none\n", ":2: invalid value 'none' for limit 'pending-items'" },
                { "[Other]\npending-items=2\n", ":1: unknown section [Other]" },
                { "pending-items=2\n", ":1: expected NAME=VALUE in a [Limits] section" },
                { "[Limits]\npending-items\n", ":2: expected NAME=VALUE" },
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
                int status;

                write_text(conf, bad[k].text);
                status = run_cmwqd((const char *const[]) { "--config", conf, "--socket", "/nonexistent/s", NULL }, &err);
                ck_assert_msg(status == 1 && strstr(err, conf) && strstr(err, bad[k].says), "'%s': exit %d, '%s'",
                              bad[k].text, status, err);
                free(err);
        }
        ck_assert_int_eq(run_cmwqd((const char *const[]) { "--config", "/nonexistent/cmwqd.conf", "--socket",
                                                           "/nonexistent/s", NULL },
                                   &err),
                         1);
        ck_assert_msg(strstr(err, "cannot read /nonexistent/cmwqd.conf"), "%s", err);
        free(err);
}
END_TEST

/* "probe forks 50" on system_unbound as @uid (-1: root): how many children
 * it could make. */
static int forks_made(struct cmwqd *td, uid_t uid) {
        struct ctl_result r;
        int n;

        ctl_run(td, uid, &r, (const char *const[]) { "submit", "system_unbound", "--wait", "--", td->probe, "forks",
                                                     "50", NULL });
        ck_assert_msg(r.status == 0, "probe forks as uid %d: exit %d, %s", (int) uid, r.status, r.err);
        n = atoi(r.out);
        ctl_result_free(&r);
        return n;
}

/* A fork bomb in an item stops at item-tasks, and one user's items together
 * at user-tasks, so that other users' items can still make processes. */
START_TEST(test_item_and_user_task_limits) {
        struct cmwqd td;
        struct ctl_result r;
        char log[400], script[600], *holder;
        int fd, n;

        cmwqd_start(&td, (const char *const[]) { "--limit", "item-tasks=8", "--limit", "user-tasks=12", NULL });

        /* Root's item too: itself and 7 children. */
        ck_assert_int_eq(forks_made(&td, (uid_t) -1), 7);
        ck_assert_int_eq(forks_made(&td, USER_UID), 7);

        /* uid 65534 holds 6 tasks in one item: its next item gets 5. */
        test_path(&td, "holder.log", log, sizeof(log));
        fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fchmod(fd, 0666), 0);
        close(fd);
        snprintf(script, sizeof(script),
                 "sleep 60 & sleep 60 & sleep 60 & sleep 60 & sleep 60 & echo up >%s; wait", log);
        ck_assert_int_eq(CTL_AS(&td, USER_UID, &r, "submit", "system_unbound", "--", "/bin/sh", "-c", script), 0);
        holder = strndup(r.out, strcspn(r.out, "\n"));
        ctl_result_free(&r);
        ck_assert_msg(wait_for_lines(log, 1, 10000), "the holder did not start");

        n = forks_made(&td, USER_UID);
        ck_assert_msg(n <= 5, "uid 65534's second item made %d processes beside its first item's 6, "
                              "over user-tasks=12", n);
        /* Everybody else is not held by uid 65534's tasks. */
        ck_assert_int_eq(forks_made(&td, OTHER_UID), 7);
        ck_assert_int_eq(forks_made(&td, (uid_t) -1), 7);

        ck_assert_int_eq(CTL_AS(&td, USER_UID, &r, "cancel", holder), 0);
        ctl_result_free(&r);
        free(holder);
        cmwqd_stop(&td);
}
END_TEST

int main(void) {
        Suite *s = suite_create("limits");
        TCase *tc = tcase_create("limits");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_flood_from_one_user);
        tcase_add_test(tc, test_queued_bytes_per_user);
        tcase_add_test(tc, test_workqueues_per_user);
        tcase_add_test(tc, test_item_sizes_and_output);
        tcase_add_test(tc, test_history_per_user);
        tcase_add_test(tc, test_callback_threads_per_user);
        tcase_add_test(tc, test_connection_flood_from_one_user);
        tcase_add_test(tc, test_connection_flood_from_many_users_leaves_room_for_root);
        tcase_add_test(tc, test_limit_option_errors);
        tcase_add_test(tc, test_config_file);
        tcase_add_test(tc, test_item_and_user_task_limits);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

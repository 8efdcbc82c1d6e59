/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const char *env_or_fail(const char *name) {
        const char *v = getenv(name);

        ck_assert_msg(v && v[0], "$%s is not set: run the tests through 'make check'", name);
        return v;
}

static void copy_executable(const char *from, const char *to) {
        char buf[65536];
        int in, out;
        ssize_t n;

        in = open(from, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(in >= 0, "cannot open %s: %s", from, strerror(errno));
        out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        ck_assert_msg(out >= 0, "cannot create %s: %s", to, strerror(errno));
        while ((n = read(in, buf, sizeof(buf))) > 0)
                ck_assert_int_eq(write(out, buf, n), n);
        close(in);
        close(out);
}

static bool socket_accepts(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd, r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return false;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        r = connect(fd, (struct sockaddr *) &sa, sizeof(sa));
        close(fd);
        return r == 0;
}

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
}

void cmwqd_start(struct cmwqd *d, const char *const *extra_args) {
        memset(d, 0, sizeof(*d));
        snprintf(d->dir, sizeof(d->dir), "/tmp/cmwq-test-XXXXXX");
        ck_assert_msg(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
        /* Other uids must reach the socket and run the copied tools. */
        ck_assert_int_eq(chmod(d->dir, 0755), 0);
        snprintf(d->socket, sizeof(d->socket), "%s/cmwqd.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/cmwqd.log", d->dir);
        snprintf(d->ctl, sizeof(d->ctl), "%s/cmwqctl", d->dir);
        snprintf(d->probe, sizeof(d->probe), "%s/probe", d->dir);
        copy_executable(env_or_fail("CMWQCTL"), d->ctl);
        copy_executable(env_or_fail("CMWQ_PROBE"), d->probe);
        snprintf(d->state_dir, sizeof(d->state_dir), "%s/state", d->dir);
        cmwqd_launch(d, extra_args);
}

void cmwqd_launch(struct cmwqd *d, const char *const *extra_args) {
        const char *argv[32];
        int n = 0, fd;

        /* $CMWQD_WRAPPER (a test's confine, tests/integration/confine.c) runs it. */
        if (getenv("CMWQD_WRAPPER") && *getenv("CMWQD_WRAPPER"))
                argv[n++] = getenv("CMWQD_WRAPPER");
        argv[n++] = env_or_fail("CMWQD");
        argv[n++] = "--socket";
        argv[n++] = d->socket;
        argv[n++] = "--log-level";
        argv[n++] = "debug";
        /* Not whatever configuration the machine has. */
        argv[n++] = "--config";
        argv[n++] = "/dev/null";
        argv[n++] = "--state-dir";
        argv[n++] = d->state_dir;
        for (; extra_args && *extra_args && n < 30; extra_args++)
                argv[n++] = *extra_args;
        argv[n] = NULL;

        d->pid = test_fork();
        if (d->pid == 0) {
                /* A relaunch adds to the log of the daemons before it. */
                fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(126);
                /* Never the host's logind: a test that wants a system bus
                 * sets up its own and says where. */
                if (!getenv("DBUS_SYSTEM_BUS_ADDRESS"))
                        setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/cmwq-test/system_bus_socket", 1);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }

        for (int waited = 0; !socket_accepts(d->socket); waited += 20) {
                int status;

                ck_assert_msg(waitpid(d->pid, &status, WNOHANG) == 0, "cmwqd exited at start-up; log:\n%s",
                              read_file(d->log));
                ck_assert_msg(waited < 15000, "cmwqd did not listen within 15 s");
                sleep_ms(20);
        }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        (void) remove(path);
        return 0;
}

void cmwqd_kill(struct cmwqd *d) {
        int status;

        ck_assert_int_gt(d->pid, 0);
        ck_assert_int_eq(kill(d->pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(d->pid, &status, 0), d->pid);
        d->pid = 0;
}

void cmwqd_stop(struct cmwqd *d) {
        cmwqd_terminate(d);
        /* Passed: nothing to look at later.  A failing test keeps its
         * directory (socket, log, item output) for inspection. */
        (void) nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void cmwqd_terminate(struct cmwqd *d) {
        int status = 0;
        pid_t r = 0;

        if (d->pid <= 0)
                return;
        ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
        for (int waited = 0; waited < 15000 && (r = waitpid(d->pid, &status, WNOHANG)) == 0; waited += 20)
                sleep_ms(20);
        if (r == 0) {
                kill(d->pid, SIGKILL);
                waitpid(d->pid, &status, 0);
                ck_abort_msg("cmwqd did not stop within 15 s of SIGTERM");
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "cmwqd did not exit cleanly (status 0x%x); log:\n%s", status, read_file(d->log));
        d->pid = 0;

        /* In a sanitizer build, a report in the log fails the test even if
         * the daemon (or a child it forked) went on. */
        char *log = read_file(d->log);
        bool sanitizer_report = strstr(log, "ERROR: AddressSanitizer") || strstr(log, "ERROR: LeakSanitizer") ||
                                strstr(log, "runtime error:");
        ck_assert_msg(!sanitizer_report, "a sanitizer reported an error in cmwqd; log:\n%s", log);
        free(log);
}

static void append(char **buf, size_t *len, const char *data, size_t n) {
        *buf = realloc(*buf, *len + n + 1);
        ck_assert_ptr_nonnull(*buf);
        memcpy(*buf + *len, data, n);
        *len += n;
        (*buf)[*len] = 0;
}

int ctl_run(const struct cmwqd *d, uid_t uid, struct ctl_result *r, const char *const *args) {
        const char *argv[64];
        int out[2], err[2], n = 0, status;
        size_t out_len = 0, err_len = 0;
        pid_t pid;

        argv[n++] = d->ctl;
        argv[n++] = "--socket";
        argv[n++] = d->socket;
        for (; *args && n < 63; args++)
                argv[n++] = *args;
        argv[n] = NULL;

        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
        pid = test_fork();
        if (pid == 0) {
                dup2(out[1], STDOUT_FILENO);
                dup2(err[1], STDERR_FILENO);
                if (uid != (uid_t) -1) {
                        if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                                _exit(126);
                        if (chdir(d->dir) < 0)
                                _exit(126);
                }
                unsetenv("CMWQ_SOCKET");
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        close(out[1]);
        close(err[1]);

        r->out = calloc(1, 1);
        r->err = calloc(1, 1);
        struct pollfd fds[2] = { { .fd = out[0], .events = POLLIN }, { .fd = err[0], .events = POLLIN } };
        for (int open_fds = 2; open_fds > 0;) {
                char buf[4096];

                ck_assert_int_ge(poll(fds, 2, -1), 0);
                for (int k = 0; k < 2; k++) {
                        ssize_t got;

                        if (fds[k].fd < 0 || !fds[k].revents)
                                continue;
                        got = read(fds[k].fd, buf, sizeof(buf));
                        if (got <= 0) {
                                close(fds[k].fd);
                                fds[k].fd = -1;
                                open_fds--;
                                continue;
                        }
                        if (k == 0)
                                append(&r->out, &out_len, buf, got);
                        else
                                append(&r->err, &err_len, buf, got);
                }
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return r->status;
}

void ctl_result_free(struct ctl_result *r) {
        free(r->out);
        free(r->err);
        r->out = r->err = NULL;
}

char *ctl_ok(const struct cmwqd *d, const char *const *args) {
        struct ctl_result r;
        size_t n;

        ctl_run(d, (uid_t) -1, &r, args);
        ck_assert_msg(r.status == 0, "cmwqctl %s ... exited %d: %s", args[0], r.status, r.err);
        free(r.err);
        n = strlen(r.out);
        if (n > 0 && r.out[n - 1] == '\n')
                r.out[n - 1] = 0;
        return r.out;
}

char *read_file(const char *path) {
        char *buf = calloc(1, 1);
        size_t len = 0;
        char chunk[4096];
        ssize_t n;
        int fd;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return buf;
        while ((n = read(fd, chunk, sizeof(chunk))) > 0)
                append(&buf, &len, chunk, n);
        close(fd);
        return buf;
}

int count_fds(pid_t pid) {
        char path[64];
        struct dirent *de;
        DIR *dir;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        dir = opendir(path);
        ck_assert_ptr_nonnull(dir);
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

long json_sum(const char *json, const char *key) {
        char pat[64];
        long sum = 0;

        snprintf(pat, sizeof(pat), "\"%s\":", key);
        for (const char *p = strstr(json, pat); p; p = strstr(p + 1, pat))
                sum += strtol(p + strlen(pat), NULL, 10);
        return sum;
}

pid_t test_fork(void) {
        pid_t pid = fork();

        if (pid < 0)
                ck_abort_msg("fork: %s", strerror(errno));
        return pid;
}

char *submit_marker_item(const struct cmwqd *d, const char *marker, const char *delay) {
        char *id;

        if (marker)
                setenv("CMWQ_TEST_MARKER", marker, 1);
        else
                unsetenv("CMWQ_TEST_MARKER");
        id = CTL_OK(d, "submit", "system", "--delay", delay, "--", "/bin/sh", "-c", "echo \"[$CMWQ_TEST_MARKER]\"");
        unsetenv("CMWQ_TEST_MARKER");
        return id;
}

void assert_marker_item_printed(const struct cmwqd *d, const char *id, const char *marker) {
        struct ctl_result r;
        char want[64];

        snprintf(want, sizeof(want), "[%s]\n", marker ? marker : "");
        CTL(d, &r, "wait", id);
        ck_assert_msg(r.status == 0, "wait %s: status %d, stderr %s", id, r.status, r.err);
        ck_assert_msg(strcmp(r.out, want) == 0, "item %s printed '%s', not '%s'", id, r.out, want);
        ctl_result_free(&r);
}

void test_path(const struct cmwqd *d, const char *name, char *buf, size_t size) {
        snprintf(buf, size, "%s/%s", d->dir, name);
        unlink(buf);
}

int count_lines(const char *path) {
        char *s = read_file(path);
        int n = 0;

        for (char *p = s; *p; p++)
                n += *p == '\n';
        free(s);
        return n;
}

bool wait_for_lines(const char *path, int lines, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 10) {
                if (count_lines(path) >= lines)
                        return true;
                sleep_ms(10);
        }
        return false;
}

int read_spans(const char *path, struct span *spans, int max) {
        char *s = read_file(path), *save = NULL;
        int n = 0;

        for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char tag[32], what[16];
                long long ts;
                int cpu, k;

                if (sscanf(line, "%31s %15s %lld %d", tag, what, &ts, &cpu) != 4)
                        continue;
                for (k = 0; k < n; k++)
                        if (strcmp(spans[k].tag, tag) == 0)
                                break;
                if (k == n) {
                        if (n == max)
                                continue;
                        memset(&spans[n], 0, sizeof(spans[n]));
                        snprintf(spans[n].tag, sizeof(spans[n].tag), "%s", tag);
                        n++;
                }
                if (strcmp(what, "start") == 0) {
                        spans[k].start = ts;
                        spans[k].cpu = cpu;
                } else if (strcmp(what, "end") == 0)
                        spans[k].end = ts;
        }
        free(s);

        int complete = 0;
        for (int k = 0; k < n; k++)
                if (spans[k].start && spans[k].end)
                        spans[complete++] = spans[k];
        return complete;
}

int max_overlap(const struct span *spans, int n) {
        int best = 0;

        /* The overlap peaks at some span's start. */
        for (int k = 0; k < n; k++) {
                int at = 0;
                for (int j = 0; j < n; j++)
                        if (spans[j].start <= spans[k].start && spans[j].end > spans[k].start)
                                at++;
                if (at > best)
                        best = at;
        }
        return best;
}

const struct span *find_span(const struct span *spans, int n, const char *tag) {
        for (int k = 0; k < n; k++)
                if (strcmp(spans[k].tag, tag) == 0)
                        return &spans[k];
        return NULL;
}

int64_t mono_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ctl_start(const struct cmwqd *d, struct ctl_async *a, const char *const *args) {
        static unsigned counter;
        const char *argv[64];
        int n = 0;

        memset(a, 0, sizeof(*a));
        argv[n++] = d->ctl;
        argv[n++] = "--socket";
        argv[n++] = d->socket;
        for (; *args && n < 63; args++)
                argv[n++] = *args;
        argv[n] = NULL;

        counter++;
        snprintf(a->out_path, sizeof(a->out_path), "%s/ctl-async-%d-%u.out", d->dir, (int) getpid(), counter);
        snprintf(a->err_path, sizeof(a->err_path), "%s/ctl-async-%d-%u.err", d->dir, (int) getpid(), counter);

        a->started_ns = mono_ns();
        a->pid = test_fork();
        if (a->pid == 0) {
                int out = open(a->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                int err = open(a->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

                if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)
                        _exit(126);
                unsetenv("CMWQ_SOCKET");
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
}

bool ctl_finish(struct ctl_async *a, int timeout_ms, struct ctl_result *r) {
        int status = 0;
        pid_t k;

        ck_assert_int_gt(a->pid, 0);
        for (int waited = 0;; waited += 5) {
                k = waitpid(a->pid, &status, WNOHANG);
                ck_assert_int_ge(k, 0);
                if (k == a->pid)
                        break;
                if (waited >= timeout_ms)
                        return false;
                sleep_ms(5);
        }
        a->ended_ns = mono_ns();
        a->pid = 0;
        r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        r->out = read_file(a->out_path);
        r->err = read_file(a->err_path);
        return true;
}

void file_gate_close(const struct cmwqd *d, struct file_gate *g, const char *name) {
        test_path(d, name, g->path, sizeof(g->path));
        g->fd = open(g->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        ck_assert_msg(g->fd >= 0, "%s: %s", g->path, strerror(errno));
        /* Items of other users open it too. */
        ck_assert_int_eq(fchmod(g->fd, 0644), 0);
        ck_assert_int_eq(flock(g->fd, LOCK_EX), 0);
}

void file_gate_open(struct file_gate *g) {
        if (g->fd < 0)
                return;
        ck_assert_int_eq(flock(g->fd, LOCK_UN), 0);
        close(g->fd);
        g->fd = -1;
}

int count_probe_lines(const char *path, const char *what) {
        char *s = read_file(path), *save = NULL;
        int n = 0;

        for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char tag[32], w[16];

                if (sscanf(line, "%31s %15s", tag, w) == 2 && strcmp(w, what) == 0)
                        n++;
        }
        free(s);
        return n;
}

bool wait_for_probe_lines(const char *path, const char *what, int n, int timeout_ms) {
        for (int64_t deadline = mono_ns() + (int64_t) timeout_ms * 1000000; count_probe_lines(path, what) < n;) {
                if (mono_ns() > deadline)
                        return false;
                sleep_ms(10);
        }
        return true;
}

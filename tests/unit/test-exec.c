/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "exec.h"
#include "util.h"

/* Generous: the machine running this may be small and busy. */
#define TEST_TIMEOUT_SEC 120
#define NOBODY 65534

struct run {
        struct event_base *base;
        struct exec_proc *proc;
        struct exec_result r;           /* a copy; out/err taken over */
        unsigned n_done;
        struct event *poll;             /* optional helper timer, removed when done */
        uint64_t done_mono_usec;
        bool killed_by_test;
};

static gid_t test_groups[NGROUPS_MAX];

static void on_done(struct exec_proc *p, struct exec_result *r, void *userdata) {
        struct run *run = userdata;

        ck_assert_ptr_eq(p, run->proc);
        run->r = *r;
        r->out = NULL;
        r->err = NULL;
        run->n_done++;
        run->proc = NULL;
        run->done_mono_usec = now_usec(CLOCK_MONOTONIC);
        if (run->poll)
                event_del(run->poll);
}

/* A spec running as ourselves, with our own groups, so no credential change
 * is needed even when the test does not run as root. */
static struct exec_spec spec_self(const char *program, char *const *argv, char *const *envp) {
        int n = getgroups(ELEMENTSOF(test_groups), test_groups);

        ck_assert_int_ge(n, 0);
        return (struct exec_spec) {
                .program = program,
                .argv = argv,
                .envp = envp,
                .uid = getuid(),
                .gid = getgid(),
                .groups = test_groups,
                .n_groups = (size_t) n,
                .cpu = -1,
        };
}

static void run_begin(struct run *run, const struct exec_spec *spec) {
        *run = (struct run) {};
        run->base = event_base_new();
        ck_assert_ptr_nonnull(run->base);
        ck_assert_int_eq(exec_start(run->base, NULL, spec, on_done, NULL, run, &run->proc), 0);
        ck_assert_ptr_nonnull(run->proc);
        ck_assert_int_gt(exec_proc_pid(run->proc), 0);
}

static void run_finish(struct run *run) {
        /* Returns once no event is left: the item's are gone after done. */
        ck_assert_int_ge(event_base_dispatch(run->base), 0);
        ck_assert_uint_eq(run->n_done, 1);
        if (run->poll)
                event_free(run->poll);
        event_base_free(run->base);
        run->base = NULL;
        run->poll = NULL;
}

static void run_spec(struct run *run, const struct exec_spec *spec) {
        run_begin(run, spec);
        run_finish(run);
}

static void run_clear(struct run *run) {
        free(run->r.out);
        free(run->r.err);
        run->r.out = run->r.err = NULL;
}

static void assert_buf(const char *buf, size_t len, const char *expected) {
        size_t n = strlen(expected);

        ck_assert_msg(len == n && (n == 0 || memcmp(buf, expected, n) == 0),
                      "expected \"%s\", got \"%.*s\"", expected, (int) len, buf ? buf : "");
}

static void assert_success(const struct run *run) {
        ck_assert_int_eq(run->r.exec_errno, 0);
        ck_assert_int_eq(run->r.signal, 0);
        ck_assert_int_eq(run->r.exit_status, 0);
        ck_assert(!run->r.timed_out);
        ck_assert(!run->r.killed);
}

static unsigned count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        unsigned n = 0;

        ck_assert_ptr_nonnull(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static bool skip_unless_root(const char *what) {
        if (geteuid() == 0)
                return false;
        fprintf(stderr, "SKIP %s: needs root to change uid (CI runs as root)\n", what);
        return true;
}

static char *make_temp_dir(mode_t mode) {
        char tmpl[] = "/tmp/cmwq-test-exec-XXXXXX";
        char *d = mkdtemp(tmpl), *real;

        ck_assert_ptr_nonnull(d);
        ck_assert_int_eq(chmod(d, mode), 0);
        real = realpath(d, NULL);
        ck_assert_ptr_nonnull(real);
        return real;
}

static char *path_join(const char *dir, const char *name) {
        char *p;

        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        return p;
}

static void write_file(const char *path, const char *content, mode_t mode) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, content, strlen(content)), (ssize_t) strlen(content));
        ck_assert_int_eq(close(fd), 0);
        ck_assert_int_eq(chmod(path, mode), 0);
}

/* ------------------------------------------------------------------------ */

START_TEST(test_echo_stdout) {
        char *argv[] = { "echo", "hello", "world", NULL };
        struct exec_spec spec = spec_self("/bin/echo", argv, NULL);
        struct run run;

        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "hello world\n");
        ck_assert_uint_eq(run.r.err_len, 0);
        ck_assert(!run.r.out_truncated);
        ck_assert_uint_gt(run.r.started_usec, 0);
        ck_assert_uint_ge(run.r.finished_usec, run.r.started_usec);
        run_clear(&run);
}
END_TEST

START_TEST(test_stderr_separate) {
        char *argv[] = { "sh", "-c", "echo out; echo err >&2; echo out2", NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;

        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "out\nout2\n");
        assert_buf(run.r.err, run.r.err_len, "err\n");
        run_clear(&run);
}
END_TEST

START_TEST(test_exit_status) {
        char *argv[] = { "sh", "-c", "exit 3", NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;

        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, 0);
        ck_assert_int_eq(run.r.signal, 0);
        ck_assert_int_eq(run.r.exit_status, 3);
        run_clear(&run);
}
END_TEST

START_TEST(test_killed_by_signal) {
        char *argv[] = { "sh", "-c", "kill -TERM $$; sleep 60", NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;

        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, 0);
        ck_assert_int_eq(run.r.signal, SIGTERM);
        ck_assert(!run.r.killed);
        ck_assert(!run.r.timed_out);
        run_clear(&run);
}
END_TEST

START_TEST(test_payload_stdin) {
        char *argv[] = { "cat", NULL };
        struct exec_spec spec = spec_self("/bin/cat", argv, NULL);
        const char payload[] = "payload on stdin\n";
        struct run run;

        spec.payload = payload;
        spec.payload_len = strlen(payload);
        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, payload);
        run_clear(&run);

        /* No payload: /dev/null, so cat ends at once. */
        spec.payload = NULL;
        spec.payload_len = 0;
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_uint_eq(run.r.out_len, 0);
        run_clear(&run);

        /* An empty payload is an empty file. */
        spec.payload = "";
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_uint_eq(run.r.out_len, 0);
        run_clear(&run);
}
END_TEST

START_TEST(test_payload_large_truncated) {
        char *argv[] = { "cat", NULL };
        struct exec_spec spec = spec_self("/bin/cat", argv, NULL);
        size_t len = 200 * 1024;
        char *payload = malloc(len);
        struct run run;

        ck_assert_ptr_nonnull(payload);
        for (size_t i = 0; i < len; i++)
                payload[i] = (char) ('a' + (i * 7 + i / 4096) % 26);
        spec.payload = payload;
        spec.payload_len = len;

        /* Default limit: the first 64 KiB kept, the rest read and dropped
         * (cat does not die of SIGPIPE, it finishes normally). */
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_uint_eq(run.r.out_len, EXEC_OUTPUT_LIMIT_DEFAULT);
        ck_assert(run.r.out_truncated);
        ck_assert(memcmp(run.r.out, payload, EXEC_OUTPUT_LIMIT_DEFAULT) == 0);
        ck_assert(!run.r.err_truncated);
        run_clear(&run);

        /* A larger limit keeps all of it. */
        spec.output_limit = 300 * 1024;
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_uint_eq(run.r.out_len, len);
        ck_assert(!run.r.out_truncated);
        ck_assert(memcmp(run.r.out, payload, len) == 0);
        run_clear(&run);

        /* Exactly at the limit is not truncated. */
        spec.output_limit = len;
        run_spec(&run, &spec);
        ck_assert_uint_eq(run.r.out_len, len);
        ck_assert(!run.r.out_truncated);
        run_clear(&run);

        /* The limit applies to stderr too. */
        {
                char *argv2[] = { "sh", "-c", "cat >&2", NULL };
                struct exec_spec spec2 = spec_self("/bin/sh", argv2, NULL);

                spec2.payload = payload;
                spec2.payload_len = len;
                spec2.output_limit = 1000;
                run_spec(&run, &spec2);
                assert_success(&run);
                ck_assert_uint_eq(run.r.out_len, 0);
                ck_assert_uint_eq(run.r.err_len, 1000);
                ck_assert(run.r.err_truncated);
                ck_assert(memcmp(run.r.err, payload, 1000) == 0);
                run_clear(&run);
        }
        free(payload);
}
END_TEST

START_TEST(test_environment) {
        char *argv[] = { "env", NULL };
        char *envp[] = { "FOO=bar", NULL };
        struct exec_spec spec = spec_self("/usr/bin/env", argv, envp);
        struct run run;

        ck_assert_int_eq(setenv("CMWQ_TEST_MUST_NOT_LEAK", "1", 1), 0);
        run_spec(&run, &spec);
        assert_success(&run);
        /* Exactly what was given: nothing of the test's own environment. */
        assert_buf(run.r.out, run.r.out_len, "FOO=bar\n");
        run_clear(&run);

        /* No environment at all. */
        spec.envp = NULL;
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_uint_eq(run.r.out_len, 0);
        run_clear(&run);
}
END_TEST

START_TEST(test_cwd) {
        char *argv[] = { "pwd", NULL };
        struct exec_spec spec = spec_self("/bin/pwd", argv, NULL);
        char *dir = make_temp_dir(0755), *expected;
        struct run run;

        spec.cwd = dir;
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_int_ge(asprintf(&expected, "%s\n", dir), 0);
        assert_buf(run.r.out, run.r.out_len, expected);
        run_clear(&run);
        free(expected);

        /* Default: the root directory. */
        spec.cwd = NULL;
        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "/\n");
        run_clear(&run);

        /* A directory that does not exist fails before exec, and says why. */
        expected = path_join(dir, "missing");
        spec.cwd = expected;
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, ENOENT);
        ck_assert_int_eq(run.r.exit_status, 127);
        ck_assert_uint_eq(run.r.out_len, 0);
        run_clear(&run);
        free(expected);

        ck_assert_int_eq(rmdir(dir), 0);
        free(dir);
}
END_TEST

START_TEST(test_nonexistent_program) {
        char *argv[] = { "nope", NULL };
        struct exec_spec spec = spec_self("/nonexistent/cmwq-no-such-program", argv, NULL);
        struct run run;

        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, ENOENT);
        ck_assert_int_eq(run.r.signal, 0);
        ck_assert_int_eq(run.r.exit_status, 127);
        run_clear(&run);

        /* Not executable: EACCES. */
        spec.program = "/etc/passwd";
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, EACCES);
        run_clear(&run);
}
END_TEST

START_TEST(test_invalid_spec) {
        char *argv[] = { "x", NULL };
        struct exec_spec spec = spec_self("./relative", argv, NULL);
        struct event_base *base = event_base_new();
        struct exec_proc *p = NULL;

        ck_assert_int_eq(exec_start(base, NULL, &spec, on_done, NULL, NULL, &p), -EINVAL);
        spec.program = "/bin/true";
        spec.cwd = "relative/dir";
        ck_assert_int_eq(exec_start(base, NULL, &spec, on_done, NULL, NULL, &p), -EINVAL);
        spec.cwd = NULL;
        spec.argv = NULL;
        ck_assert_int_eq(exec_start(base, NULL, &spec, on_done, NULL, NULL, &p), -EINVAL);
        spec.argv = argv;
        spec.cpu = CPU_SETSIZE;
        ck_assert_int_eq(exec_start(base, NULL, &spec, on_done, NULL, NULL, &p), -EINVAL);
        ck_assert_ptr_null(p);
        event_base_free(base);
}
END_TEST

START_TEST(test_bare_name_uses_envp_path) {
        char *dir = make_temp_dir(0755);
        char *script = path_join(dir, "cmwq-test-hello"), *path_var;
        char *argv[] = { "cmwq-test-hello", "arg", NULL };
        char *envp[] = { NULL, NULL };
        struct exec_spec spec = spec_self("cmwq-test-hello", argv, envp);
        struct run run;

        write_file(script, "#!/bin/sh\necho \"hello from PATH $1\"\n", 0755);
        ck_assert_int_ge(asprintf(&path_var, "PATH=/nonexistent:%s", dir), 0);
        envp[0] = path_var;
        /* Our own PATH has it too: it must not be the one used. */
        ck_assert_int_eq(setenv("PATH", dir, 1), 0);

        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "hello from PATH arg\n");
        run_clear(&run);

        envp[0] = "PATH=/nonexistent";
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, ENOENT);
        ck_assert_int_eq(run.r.exit_status, 127);
        run_clear(&run);

        /* A common command by bare name. */
        {
                char *argv2[] = { "echo", "hi", NULL };
                char *envp2[] = { "PATH=/usr/bin:/bin", NULL };
                struct exec_spec spec2 = spec_self("echo", argv2, envp2);

                run_spec(&run, &spec2);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "hi\n");
                run_clear(&run);
        }

        ck_assert_int_eq(unlink(script), 0);
        ck_assert_int_eq(rmdir(dir), 0);
        free(path_var);
        free(script);
        free(dir);
}
END_TEST

START_TEST(test_resolve_program) {
        char *d1 = make_temp_dir(0755), *d2 = make_temp_dir(0755);
        char *plug = path_join(d2, "plug"), *shadow = path_join(d1, "isdir"), *plug2 = path_join(d2, "isdir");
        char *dirs[] = { d1, d2, NULL };
        char *path = (char *) 0x1;
        struct run run;

        write_file(plug, "#!/bin/sh\necho plugin ran\n", 0755);
        write_file(plug2, "#!/bin/sh\necho second\n", 0755);
        ck_assert_int_eq(mkdir(shadow, 0755), 0);

        ck_assert_int_eq(exec_resolve_program("plug", dirs, &path), 0);
        ck_assert_str_eq(path, plug);
        {
                char *argv[] = { "plug", NULL };
                struct exec_spec spec = spec_self(path, argv, NULL);

                run_spec(&run, &spec);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "plugin ran\n");
                run_clear(&run);
        }
        free(path);

        /* A directory of that name is not a plugin: the next dir's file is. */
        ck_assert_int_eq(exec_resolve_program("isdir", dirs, &path), 0);
        ck_assert_str_eq(path, plug2);
        free(path);

        /* Not found anywhere: NULL, for the PATH lookup. */
        path = (char *) 0x1;
        ck_assert_int_eq(exec_resolve_program("missing", dirs, &path), 0);
        ck_assert_ptr_null(path);
        path = (char *) 0x1;
        ck_assert_int_eq(exec_resolve_program("plug", NULL, &path), 0);
        ck_assert_ptr_null(path);

        /* Absolute: as it is, even if it does not exist. */
        ck_assert_int_eq(exec_resolve_program("/usr/bin/whatever", dirs, &path), 0);
        ck_assert_str_eq(path, "/usr/bin/whatever");
        free(path);

        /* Relative with a slash, or empty: refused. */
        path = (char *) 0x1;
        ck_assert_int_eq(exec_resolve_program("a/b", dirs, &path), -EINVAL);
        ck_assert_int_eq(exec_resolve_program("../plug", dirs, &path), -EINVAL);
        ck_assert_int_eq(exec_resolve_program("", dirs, &path), -EINVAL);
        ck_assert_ptr_eq(path, (char *) 0x1);

        ck_assert_int_eq(unlink(plug), 0);
        ck_assert_int_eq(unlink(plug2), 0);
        ck_assert_int_eq(rmdir(shadow), 0);
        ck_assert_int_eq(rmdir(d1), 0);
        ck_assert_int_eq(rmdir(d2), 0);
        free(plug);
        free(plug2);
        free(shadow);
        free(d1);
        free(d2);
}
END_TEST

START_TEST(test_cpu_pinning) {
        char *argv[] = { "grep", "Cpus_allowed_list", "/proc/self/status", NULL };
        struct exec_spec spec = spec_self("/bin/grep", argv, NULL);
        cpu_set_t set;
        struct run run;
        unsigned n = 0;

        ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
        for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; cpu++) {
                char expected[64];

                if (!CPU_ISSET(cpu, &set))
                        continue;
                n++;
                spec.cpu = cpu;
                run_spec(&run, &spec);
                assert_success(&run);
                snprintf(expected, sizeof(expected), "Cpus_allowed_list:\t%d\n", cpu);
                assert_buf(run.r.out, run.r.out_len, expected);
                run_clear(&run);
        }
        ck_assert_uint_gt(n, 0);

        /* A CPU that does not exist is a setup failure, reported as such. */
        spec.cpu = CPU_SETSIZE - 1;
        if (!CPU_ISSET(spec.cpu, &set)) {
                run_spec(&run, &spec);
                ck_assert_int_eq(run.r.exec_errno, EINVAL);
                ck_assert_int_eq(run.r.exit_status, 127);
                run_clear(&run);
        }
}
END_TEST

START_TEST(test_nice) {
        char *argv[] = { "sh", "-c", "cut -d' ' -f19 /proc/self/stat", NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;

        spec.nice = 7;
        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "7\n");
        run_clear(&run);
}
END_TEST

/* Processes whose process group is @pgid and whose name is @comm. */
static unsigned count_group(pid_t pgid, const char *comm) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        unsigned n = 0;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d))) {
                char path[300], buf[512], *open_paren, *close_paren;
                int pgrp = 0;
                ssize_t k;
                int fd;

                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;
                buf[k] = 0;
                open_paren = strchr(buf, '(');
                close_paren = strrchr(buf, ')');
                if (!open_paren || !close_paren)
                        continue;
                /* ") S ppid pgrp" */
                if (sscanf(close_paren + 1, " %*c %*d %d", &pgrp) != 1 || pgrp != pgid)
                        continue;
                *close_paren = 0;
                if (strcmp(open_paren + 1, comm) == 0)
                        n++;
        }
        closedir(d);
        return n;
}

static void on_poll_pgroup(evutil_socket_t fd, short what, void *userdata) {
        struct run *run = userdata;

        if (!run->proc || run->killed_by_test)
                return;
        /* Both sleeps started (dash may have exec'd the second one in place
         * of the shell): kill the item. */
        if (count_group(exec_proc_pid(run->proc), "sleep") >= 2) {
                run->killed_by_test = true;
                exec_proc_kill(run->proc);
                /* Again: harmless. */
                exec_proc_kill(run->proc);
        }
}

START_TEST(test_pgroup_kill) {
        char *argv[] = { "sh", "-c", "sleep 100 & sleep 100; echo never", NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct timeval tv = { .tv_usec = 20 * 1000 };
        uint64_t t0, deadline;
        struct run run;
        pid_t pgid;

        /* Orphaned members of the group come to us, so we can reap them
         * whatever our pid 1 does. */
        ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);

        run_begin(&run, &spec);
        pgid = exec_proc_pid(run.proc);
        run.poll = event_new(run.base, -1, EV_PERSIST, on_poll_pgroup, &run);
        ck_assert_ptr_nonnull(run.poll);
        ck_assert_int_eq(event_add(run.poll, &tv), 0);
        t0 = now_usec(CLOCK_MONOTONIC);
        run_finish(&run);

        ck_assert(run.killed_by_test);
        ck_assert(run.r.killed);
        ck_assert(!run.r.timed_out);
        ck_assert_int_eq(run.r.signal, SIGKILL);
        ck_assert_uint_eq(run.r.out_len, 0);
        ck_assert_uint_lt(run.done_mono_usec - t0, 60 * USEC_PER_SEC);

        /* The background sleep was killed with the group. */
        deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;
        for (;;) {
                while (waitpid(-1, NULL, WNOHANG) > 0)
                        ;
                if (kill(-pgid, 0) < 0) {
                        ck_assert_int_eq(errno, ESRCH);
                        break;
                }
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < deadline, "process group %d still alive", (int) pgid);
                usleep(10 * 1000);
        }
        run_clear(&run);
}
END_TEST

START_TEST(test_timeout) {
        char *argv[] = { "sleep", "60", NULL };
        struct exec_spec spec = spec_self("/bin/sleep", argv, NULL);
        struct run run;
        uint64_t t0;

        spec.timeout_usec = 200 * USEC_PER_MSEC;
        t0 = now_usec(CLOCK_MONOTONIC);
        run_spec(&run, &spec);
        /* Well before sleep's own end. */
        ck_assert_uint_lt(run.done_mono_usec - t0, 30 * USEC_PER_SEC);
        ck_assert(run.r.timed_out);
        ck_assert(!run.r.killed);
        ck_assert_int_eq(run.r.signal, SIGKILL);
        ck_assert_int_eq(run.r.exec_errno, 0);
        run_clear(&run);

        /* A timeout that does not expire changes nothing. */
        {
                char *argv2[] = { "true", NULL };
                struct exec_spec spec2 = spec_self("/bin/true", argv2, NULL);

                spec2.timeout_usec = 600 * USEC_PER_SEC;
                run_spec(&run, &spec2);
                assert_success(&run);
                run_clear(&run);
        }
}
END_TEST

START_TEST(test_run_as_nobody) {
        char *argv[] = { "id", NULL };
        struct exec_spec spec = spec_self("/usr/bin/id", argv, NULL);
        struct run run;

        if (skip_unless_root("test_run_as_nobody"))
                return;

        spec.uid = NOBODY;
        spec.gid = NOBODY;
        spec.groups = NULL;
        spec.n_groups = 0;

        {
                char *a[] = { "id", "-u", NULL };

                spec.argv = a;
                run_spec(&run, &spec);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "65534\n");
                run_clear(&run);
        }
        {
                char *a[] = { "id", "-g", NULL };

                spec.argv = a;
                run_spec(&run, &spec);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "65534\n");
                run_clear(&run);
        }
        {
                /* No supplementary groups: root's are gone. */
                char *a[] = { "sh", "-c", "id -G; grep '^CapEff:' /proc/self/status", NULL };

                spec.program = "/bin/sh";
                spec.argv = a;
                run_spec(&run, &spec);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "65534\nCapEff:\t0000000000000000\n");
                run_clear(&run);
        }
        {
                /* Supplementary groups as given. */
                static const gid_t groups[] = { 4242, 4343 };
                char *a[] = { "id", "-G", NULL };

                spec.program = "/usr/bin/id";
                spec.argv = a;
                spec.groups = groups;
                spec.n_groups = ELEMENTSOF(groups);
                run_spec(&run, &spec);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "65534 4242 4343\n");
                run_clear(&run);
        }
}
END_TEST

START_TEST(test_nobody_cannot_write_root_file) {
        char *dir, *file, buf[64];
        char *argv[] = { "sh", "-c", "echo x > \"$0\"", NULL, NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;
        ssize_t n;
        int fd;

        if (skip_unless_root("test_nobody_cannot_write_root_file"))
                return;

        dir = make_temp_dir(0755);
        file = path_join(dir, "root-owned");
        write_file(file, "orig\n", 0644);
        argv[3] = file;

        spec.uid = NOBODY;
        spec.gid = NOBODY;
        spec.groups = NULL;
        spec.n_groups = 0;
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, 0);
        ck_assert_int_eq(run.r.signal, 0);
        ck_assert_int_ne(run.r.exit_status, 0);
        run_clear(&run);

        fd = open(file, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        n = read(fd, buf, sizeof(buf));
        close(fd);
        assert_buf(buf, n < 0 ? 0 : (size_t) n, "orig\n");

        /* The same as root works: the failure was the uid. */
        spec.uid = getuid();
        spec.gid = getgid();
        spec.groups = test_groups;
        spec.n_groups = (size_t) getgroups(ELEMENTSOF(test_groups), test_groups);
        run_spec(&run, &spec);
        assert_success(&run);
        run_clear(&run);

        ck_assert_int_eq(unlink(file), 0);
        ck_assert_int_eq(rmdir(dir), 0);
        free(file);
        free(dir);
}
END_TEST

START_TEST(test_chdir_eacces) {
        char *argv[] = { "pwd", NULL };
        struct exec_spec spec = spec_self("/bin/pwd", argv, NULL);
        struct run run;
        char *dir;

        if (skip_unless_root("test_chdir_eacces"))
                return;

        dir = make_temp_dir(0700);
        spec.cwd = dir;
        spec.uid = NOBODY;
        spec.gid = NOBODY;
        spec.groups = NULL;
        spec.n_groups = 0;
        run_spec(&run, &spec);
        /* chdir() happens as the user, not as root. */
        ck_assert_int_eq(run.r.exec_errno, EACCES);
        ck_assert_int_eq(run.r.exit_status, 127);
        ck_assert_uint_eq(run.r.out_len, 0);
        run_clear(&run);

        ck_assert_int_eq(rmdir(dir), 0);
        free(dir);
}
END_TEST

START_TEST(test_child_state_reset) {
        char *argv[] = { "grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status", NULL };
        struct exec_spec spec = spec_self("/bin/grep", argv, NULL);
        struct run run;
        sigset_t block;

        /* The daemon ignores SIGPIPE and may block signals: not the item. */
        signal(SIGPIPE, SIG_IGN);
        /* Whoever started us may have left glibc's reserved signals (32, 33)
         * ignored, which glibc's sigaction() cannot undo: do that here, so
         * the test does not depend on how it was started. */
#if defined(__x86_64__) || defined(__aarch64__)
        /* struct kernel_sigaction starts with the handler there */
        for (int sig = 32; sig <= 33; sig++) {
                unsigned long ign[8] = { (unsigned long) SIG_IGN };

                ck_assert_int_eq(syscall(SYS_rt_sigaction, sig, ign, NULL, (size_t) (_NSIG / 8)), 0);
        }
#endif
        sigemptyset(&block);
        sigaddset(&block, SIGUSR1);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &block, NULL), 0);

        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
        run_clear(&run);

        /* Our own mask is back as it was. */
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, NULL, &block), 0);
        ck_assert(sigismember(&block, SIGUSR1));
        ck_assert(!sigismember(&block, SIGTERM));
}
END_TEST

START_TEST(test_fds_closed) {
        char *argv[] = { "ls", "/proc/self/fd", NULL };
        struct exec_spec spec = spec_self("/bin/ls", argv, NULL);
        struct run run;
        int leak;

        /* An fd without close-on-exec, as a careless library might leave. */
        leak = open("/dev/null", O_RDONLY);
        ck_assert_int_ge(leak, 0);
        ck_assert_int_ge(dup2(leak, 77), 0);

        run_spec(&run, &spec);
        assert_success(&run);
        /* 3 is ls's own directory fd. */
        assert_buf(run.r.out, run.r.out_len, "0\n1\n2\n3\n");
        run_clear(&run);

        /* Also when our own 0..2 are closed, so that the pipes land there. */
        {
                int saved0 = fcntl(0, F_DUPFD_CLOEXEC, 100);
                int saved1 = fcntl(1, F_DUPFD_CLOEXEC, 100);
                int saved2 = fcntl(2, F_DUPFD_CLOEXEC, 100);
                char *argv2[] = { "sh", "-c", "cat; echo err >&2; ls /proc/self/fd", NULL };
                struct exec_spec spec2 = spec_self("/bin/sh", argv2, NULL);

                close(0);
                close(1);
                close(2);
                spec2.payload = "in\n";
                spec2.payload_len = 3;
                run_spec(&run, &spec2);
                dup2(saved0, 0);
                dup2(saved1, 1);
                dup2(saved2, 2);
                close(saved0);
                close(saved1);
                close(saved2);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, "in\n0\n1\n2\n3\n");
                assert_buf(run.r.err, run.r.err_len, "err\n");
                run_clear(&run);
        }
        close(leak);
        close(77);
}
END_TEST

START_TEST(test_no_fd_leak) {
        char *argv[] = { "echo", "x", NULL };
        struct exec_spec spec = spec_self("/bin/echo", argv, NULL);
        unsigned before;
        struct run run;

        /* The first run may open things for good (libevent's base). */
        run_spec(&run, &spec);
        run_clear(&run);
        before = count_fds();
        for (int i = 0; i < 20; i++) {
                spec.payload = (i & 1) ? "p" : NULL;
                spec.payload_len = (i & 1) ? 1 : 0;
                run_spec(&run, &spec);
                assert_success(&run);
                run_clear(&run);
        }
        {
                /* Failing ones too. */
                struct exec_spec bad = spec_self("/nonexistent", argv, NULL);

                run_spec(&run, &bad);
                ck_assert_int_eq(run.r.exec_errno, ENOENT);
                run_clear(&run);
        }
        ck_assert_uint_eq(count_fds(), before);
}
END_TEST

static void on_done_fail(struct exec_proc *p, struct exec_result *r, void *userdata) {
        ck_abort_msg("done called for an abandoned item");
}

START_TEST(test_abandon) {
        char *argv[] = { "sleep", "100", NULL };
        struct exec_spec spec = spec_self("/bin/sleep", argv, NULL);
        struct event_base *base = event_base_new();
        struct exec_proc *p = NULL;
        uint64_t deadline;
        unsigned before;
        pid_t pid;
        int status;

        ck_assert_ptr_nonnull(base);
        before = count_fds();
        ck_assert_int_eq(exec_start(base, NULL, &spec, on_done_fail, NULL, NULL, &p), 0);
        pid = exec_proc_pid(p);
        ck_assert_ptr_null(exec_proc_abandon(p));
        ck_assert_ptr_null(exec_proc_abandon(NULL));
        ck_assert_uint_eq(count_fds(), before);
        /* Nothing left for the loop: returns at once, no callback. */
        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);

        /* It was killed; reap it if exec could not yet. */
        deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;
        for (;;) {
                pid_t k = waitpid(pid, &status, WNOHANG);

                if (k == pid) {
                        ck_assert(WIFSIGNALED(status));
                        ck_assert_int_eq(WTERMSIG(status), SIGKILL);
                        break;
                }
                if (k < 0) {
                        ck_assert_int_eq(errno, ECHILD);    /* exec reaped it */
                        break;
                }
                ck_assert(now_usec(CLOCK_MONOTONIC) < deadline);
                usleep(10 * 1000);
        }
        event_base_free(base);
}
END_TEST

static void on_done_many(struct exec_proc *p, struct exec_result *r, void *userdata) {
        unsigned *bits = userdata;
        char buf[16] = {};
        unsigned i;

        ck_assert_int_eq(r->exit_status, 0);
        ck_assert_uint_gt(r->out_len, 0);
        ck_assert_uint_lt(r->out_len, sizeof(buf));
        memcpy(buf, r->out, r->out_len);
        ck_assert_int_eq(sscanf(buf, "%u", &i), 1);
        ck_assert_uint_lt(i, 16);
        ck_assert(!(*bits & (1u << i)));
        *bits |= 1u << i;
}

START_TEST(test_many_concurrent) {
        struct event_base *base = event_base_new();
        unsigned bits = 0;

        for (unsigned i = 0; i < 16; i++) {
                char n[16];
                char *argv[] = { "sh", "-c", "sleep 0.$(($0 % 3)); echo $0", n, NULL };
                struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
                struct exec_proc *p;

                snprintf(n, sizeof(n), "%u", i);
                ck_assert_int_eq(exec_start(base, NULL, &spec, on_done_many, NULL, &bits, &p), 0);
        }
        ck_assert_int_ge(event_base_dispatch(base), 0);
        ck_assert_uint_eq(bits, 0xffff);
        event_base_free(base);
}
END_TEST

int main(void) {
        Suite *s = suite_create("exec");
        TCase *tc = tcase_create("exec");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, TEST_TIMEOUT_SEC);
        tcase_add_test(tc, test_echo_stdout);
        tcase_add_test(tc, test_stderr_separate);
        tcase_add_test(tc, test_exit_status);
        tcase_add_test(tc, test_killed_by_signal);
        tcase_add_test(tc, test_payload_stdin);
        tcase_add_test(tc, test_payload_large_truncated);
        tcase_add_test(tc, test_environment);
        tcase_add_test(tc, test_cwd);
        tcase_add_test(tc, test_nonexistent_program);
        tcase_add_test(tc, test_invalid_spec);
        tcase_add_test(tc, test_bare_name_uses_envp_path);
        tcase_add_test(tc, test_resolve_program);
        tcase_add_test(tc, test_cpu_pinning);
        tcase_add_test(tc, test_nice);
        tcase_add_test(tc, test_pgroup_kill);
        tcase_add_test(tc, test_timeout);
        tcase_add_test(tc, test_run_as_nobody);
        tcase_add_test(tc, test_nobody_cannot_write_root_file);
        tcase_add_test(tc, test_chdir_eacces);
        tcase_add_test(tc, test_child_state_reset);
        tcase_add_test(tc, test_fds_closed);
        tcase_add_test(tc, test_no_fd_leak);
        tcase_add_test(tc, test_abandon);
        tcase_add_test(tc, test_many_concurrent);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "exec/cgroup.h"
#include "exec/exec.h"
#include "exec/exec-internal.h"     /* exec_spawner_fd() */
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

/* A spec running as ourselves, so no credential change is needed even when
 * the test does not run as root. */
static struct exec_spec spec_self(const char *program, char *const *argv, char *const *envp) {
        return (struct exec_spec) {
                .program = program,
                .argv = argv,
                .envp = envp,
                .uid = getuid(),
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

/* As cmwqd does at start-up: the spawner's socket is then already open when
 * a test counts its fds (it stays open for the whole process). */
static void setup_spawner(void) {
        ck_assert_int_eq(exec_spawner_start(), 0);
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

        /* A directory that does not exist fails before exec, and says it was the directory. */
        expected = path_join(dir, "missing");
        spec.cwd = expected;
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, EXEC_ERRNO_IN_CWD | ENOENT);
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

        /* An unbound item after bound ones may run on every CPU we may:
         * the spawner, which made the bound ones on their CPUs, let go. */
        {
                char line[256], expected[300];
                FILE *f = fopen("/proc/self/status", "re");

                ck_assert_ptr_nonnull(f);
                expected[0] = 0;
                while (fgets(line, sizeof(line), f))
                        if (strncmp(line, "Cpus_allowed_list:", 18) == 0)
                                snprintf(expected, sizeof(expected), "%s", line);
                fclose(f);
                ck_assert_str_ne(expected, "");
                spec.cpu = -1;
                run_spec(&run, &spec);
                assert_success(&run);
                assert_buf(run.r.out, run.r.out_len, expected);
                run_clear(&run);
        }

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

/* cmwqd's loop is pinned to one CPU for a moment at a time (the idle
 * sentinels' kicks): a spawner (or rescuer) forked then, and an unbound item
 * it makes, still run on every CPU the daemon had. */
START_TEST(test_an_unbound_item_forked_while_pinned_runs_on_every_cpu) {
        char *argv[] = { "grep", "Cpus_allowed_list", "/proc/self/status", NULL };
        struct exec_spec spec = spec_self("/bin/grep", argv, NULL);
        char line[256], expected[300] = "";
        cpu_set_t all, one;
        struct run run;
        FILE *f;

        ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
        if (CPU_COUNT(&all) < 2)
                ck_abort_msg("this test needs 2 CPUs");
        f = fopen("/proc/self/status", "re");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "Cpus_allowed_list:", 18) == 0)
                        snprintf(expected, sizeof(expected), "%s", line);
        fclose(f);
        ck_assert_str_ne(expected, "");

        CPU_ZERO(&one);
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
                if (CPU_ISSET(cpu, &all)) {
                        CPU_SET(cpu, &one);
                        break;
                }
        ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
        exec_spawner_stop();
        ck_assert_int_eq(exec_spawner_start(), 0);
        spec.cpu = -1;
        run_spec(&run, &spec);
        ck_assert_int_eq(sched_setaffinity(0, sizeof(all), &all), 0);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, expected);
        run_clear(&run);
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
                /* A uid with no entry in the user database: its groups are
                 * unknown, so nothing runs as it. */
                char *a[] = { "id", NULL };

                ck_assert_msg(!getpwuid(65533), "uid 65533 has a passwd entry here");
                spec.uid = 65533;
                spec.program = "/usr/bin/id";
                spec.argv = a;
                run_spec(&run, &spec);
                ck_assert_int_eq(run.r.exec_errno, EXEC_ERRNO_NO_USER);
                ck_assert_int_eq(run.r.exit_status, 127);
                ck_assert_uint_eq(run.r.out_len, 0);
                ck_assert_str_eq(exec_strerror(run.r.exec_errno),
                                 "the submitting uid has no entry in the user database, so its groups are unknown");
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
        run_spec(&run, &spec);
        /* chdir() happens as the user, not as root. */
        ck_assert_int_eq(run.r.exec_errno, EXEC_ERRNO_IN_CWD | EACCES);
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

        /* A spawner forked now inherits all of that; its children do not
         * reset signals again (exec_child.signals_default), so the
         * spawner must have. */
        exec_spawner_stop();
        ck_assert_int_eq(exec_spawner_start(), 0);

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

/* Whether @path exists yet. */
static bool file_exists(const char *path) {
        struct stat st;

        return stat(path, &st) == 0;
}

/* A prepared item does nothing of its own until exec_go(): its program has
 * not run, no callback comes and its timeout does not count; after go it
 * runs as exec_start() would have run it, stamped at go. */
START_TEST(test_prepare_then_go) {
        char *dir = make_temp_dir(0755), *mark = path_join(dir, "ran");
        char *argv[] = { "sh", "-c", "touch \"$0\"; echo ok; exec sleep 600", mark, NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run = {};
        uint64_t t_go, t_go_mono;

        /* Shorter than the wait before go below: it counts from go only.
         * The item runs until the timeout stops it, so that only lower
         * bounds of time are checked. */
        spec.timeout_usec = 1 * USEC_PER_SEC;
        run.base = event_base_new();
        ck_assert_ptr_nonnull(run.base);
        ck_assert_int_eq(exec_prepare(run.base, NULL, &spec, on_done, NULL, &run, &run.proc), 0);
        ck_assert_int_gt(exec_proc_pid(run.proc), 0);
        ck_assert_uint_eq(exec_proc_started_usec(run.proc), 0);

        /* Nothing for the loop yet, and nothing runs. */
        ck_assert_int_eq(event_base_loop(run.base, EVLOOP_NONBLOCK), 1);
        usleep(1200 * 1000);
        ck_assert_int_eq(event_base_loop(run.base, EVLOOP_NONBLOCK), 1);
        ck_assert_uint_eq(run.n_done, 0);
        ck_assert(!file_exists(mark));

        t_go = now_usec(CLOCK_REALTIME);
        t_go_mono = now_usec(CLOCK_MONOTONIC);
        ck_assert_int_eq(exec_go(run.proc), 0);
        ck_assert_uint_ge(exec_proc_started_usec(run.proc), t_go);
        ck_assert_int_eq(exec_go(run.proc), -EINVAL);   /* once */
        run_finish(&run);
        /* Stopped by its timeout a full second after go, not at once (as
         * a timeout counted from the prepare would have, before it ran). */
        ck_assert_int_eq(run.r.exec_errno, 0);
        ck_assert(run.r.timed_out);
        ck_assert_uint_ge(run.done_mono_usec - t_go_mono, spec.timeout_usec);
        assert_buf(run.r.out, run.r.out_len, "ok\n");
        ck_assert_uint_ge(run.r.started_usec, t_go);
        ck_assert(file_exists(mark));
        run_clear(&run);

        ck_assert_int_eq(unlink(mark), 0);
        ck_assert_int_eq(rmdir(dir), 0);
        free(mark);
        free(dir);
}
END_TEST

/* A prepared item that is not to run is gone after exec_proc_discard():
 * never ran, reaped, no fd left, no callback. */
START_TEST(test_prepare_discard) {
        char *dir = make_temp_dir(0755), *mark = path_join(dir, "ran");
        char *argv[] = { "touch", mark, NULL };
        struct exec_spec spec = spec_self("/usr/bin/touch", argv, NULL);
        struct event_base *base = event_base_new();
        struct exec_proc *p = NULL;
        unsigned before;
        pid_t pid;

        ck_assert_ptr_nonnull(base);
        before = count_fds();
        ck_assert_int_eq(exec_prepare(base, NULL, &spec, on_done_fail, NULL, NULL, &p), 0);
        pid = exec_proc_pid(p);
        ck_assert_int_eq(kill(pid, 0), 0);
        ck_assert_ptr_null(exec_proc_discard(p));
        ck_assert_ptr_null(exec_proc_discard(NULL));
        /* Reaped already: not even a zombie. */
        ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), -1);
        ck_assert_int_eq(errno, ECHILD);
        ck_assert_uint_eq(count_fds(), before);
        ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
        usleep(100 * 1000);
        ck_assert(!file_exists(mark));

        event_base_free(base);
        ck_assert_int_eq(rmdir(dir), 0);
        free(mark);
        free(dir);
}
END_TEST

/* Made ahead (spec->ahead): exec_prepare() returns before the spawner has
 * told the pid, which the loop reads as it comes; several made ahead get
 * each its own process (the replies come in the order of the requests),
 * and each runs its own program once it goes. */
START_TEST(test_prepare_ahead) {
        enum { N = 3 };
        struct run runs[N] = {};
        char *argv[N][4];
        char num[N][8];
        struct event_base *base = event_base_new();
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 10 * USEC_PER_SEC;

        ck_assert_ptr_nonnull(base);
        for (int k = 0; k < N; k++) {
                struct exec_spec spec;

                snprintf(num[k], sizeof(num[k]), "%d", k);
                argv[k][0] = "echo";
                argv[k][1] = num[k];
                argv[k][2] = NULL;
                spec = spec_self("/bin/echo", argv[k], NULL);
                spec.ahead = true;
                runs[k].base = base;
                ck_assert_int_eq(exec_prepare(base, NULL, &spec, on_done, NULL, &runs[k], &runs[k].proc), 0);
        }
        /* The loop reads the replies; nothing of the items' runs. */
        while (exec_proc_pid(runs[N - 1].proc) <= 0) {
                ck_assert(now_usec(CLOCK_MONOTONIC) < deadline);
                (void) event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
                usleep(1000);
        }
        for (int k = 0; k < N; k++) {
                ck_assert_int_eq(exec_proc_ready(runs[k].proc), 0);
                ck_assert_int_gt(exec_proc_pid(runs[k].proc), 0);
                for (int j = 0; j < k; j++)
                        ck_assert_int_ne(exec_proc_pid(runs[k].proc), exec_proc_pid(runs[j].proc));
                ck_assert_uint_eq(runs[k].n_done, 0);
        }
        for (int k = N - 1; k >= 0; k--)
                ck_assert_int_eq(exec_go(runs[k].proc), 0);
        /* Returns once no event is left: every item's is gone after done. */
        ck_assert_int_ge(event_base_dispatch(base), 0);
        for (int k = 0; k < N; k++) {
                char want[8];

                ck_assert_uint_eq(runs[k].n_done, 1);
                assert_success(&runs[k]);
                snprintf(want, sizeof(want), "%d\n", k);
                assert_buf(runs[k].r.out, runs[k].r.out_len, want);
                run_clear(&runs[k]);
        }
        exec_spawner_shutdown();
        event_base_free(base);
}
END_TEST

/* The pid of our child named @comm, or -1. */
static pid_t find_child_named(const char *comm) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        pid_t found = -1;

        ck_assert_ptr_nonnull(d);
        while (found < 0 && (de = readdir(d))) {
                char path[300], buf[512], name[64];
                int pid, ppid;
                FILE *f;

                snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%d (%63[^)]) %*c %d", &pid, name, &ppid) == 3 &&
                    ppid == getpid() && strcmp(name, comm) == 0)
                        found = pid;
                fclose(f);
        }
        closedir(d);
        return found;
}

/* The spawner dies with replies written and not read: they still reach
 * their processes, the next one made ahead gets a new spawner, all three
 * run, and no child is left unreaped. */
START_TEST(test_prepare_ahead_spawner_dies) {
        enum { N = 3 };
        struct run runs[N] = {};
        char *argv[] = { "true", NULL };
        struct event_base *base = event_base_new();
        struct exec_spec spec = spec_self("/bin/true", argv, NULL);
        pid_t spawner;

        ck_assert_ptr_nonnull(base);
        ck_assert_int_eq(exec_spawner_start(), 0);
        /* Named by itself once it runs: on a loaded machine, a moment. */
        for (int waited = 0; (spawner = find_child_named("cmwqd-spawner")) < 0 && waited < 1000; waited++)
                usleep(10 * 1000);
        ck_assert_int_gt(spawner, 0);
        spec.ahead = true;
        for (int k = 0; k < N - 1; k++) {
                runs[k].base = base;
                ck_assert_int_eq(exec_prepare(base, NULL, &spec, on_done, NULL, &runs[k], &runs[k].proc), 0);
        }
        /* Both replies written before it dies (the first may have been
         * read already, by the second exec_prepare()). */
        for (int waited = 0;; waited++) {
                int n = 0, due = 0;

                for (int k = 0; k < N - 1; k++)
                        due += exec_proc_pid(runs[k].proc) <= 0;
                ck_assert_int_eq(ioctl(exec_spawner_fd(), FIONREAD, &n), 0);
                if (n >= due * (int) sizeof(int32_t))
                        break;
                ck_assert_msg(waited < 1000, "the spawner did not reply in 10 s");
                usleep(10 * 1000);
        }
        ck_assert_int_eq(kill(spawner, SIGKILL), 0);
        usleep(100 * 1000);
        runs[N - 1].base = base;
        ck_assert_int_eq(exec_prepare(base, NULL, &spec, on_done, NULL, &runs[N - 1], &runs[N - 1].proc), 0);
        for (int k = 0; k < N; k++) {
                ck_assert_int_eq(exec_proc_ready(runs[k].proc), 0);
                ck_assert_int_eq(exec_go(runs[k].proc), 0);
        }
        ck_assert_int_ge(event_base_dispatch(base), 0);
        for (int k = 0; k < N; k++) {
                ck_assert_uint_eq(runs[k].n_done, 1);
                assert_success(&runs[k]);
                run_clear(&runs[k]);
        }
        /* The dead spawner was reaped; only the new one is left. */
        ck_assert_int_eq(waitpid(spawner, NULL, WNOHANG), -1);
        ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), 0);
        exec_spawner_shutdown();
        event_base_free(base);
}
END_TEST

/* Made ahead and given back before the spawner's reply: once the reply
 * comes (here: read first by an exec_start() after it, whose own reply
 * comes behind it), its process is killed and reaped, never having run;
 * the item started after it runs; no fd and no zombie is left. */
START_TEST(test_prepare_ahead_discard_before_reply) {
        char *dir = make_temp_dir(0755), *mark = path_join(dir, "ran");
        char *touch_argv[] = { "touch", mark, NULL };
        char *echo_argv[] = { "echo", "second", NULL };
        struct exec_spec ahead = spec_self("/usr/bin/touch", touch_argv, NULL);
        struct exec_spec now = spec_self("/bin/echo", echo_argv, NULL);
        struct exec_proc *p = NULL;
        struct run run = {};
        unsigned before;

        ck_assert_int_eq(exec_spawner_start(), 0);
        before = count_fds();
        run.base = event_base_new();
        ck_assert_ptr_nonnull(run.base);
        ahead.ahead = true;
        ck_assert_int_eq(exec_prepare(run.base, NULL, &ahead, on_done_fail, NULL, NULL, &p), 0);
        ck_assert_ptr_null(exec_proc_discard(p));
        ck_assert_int_eq(exec_start(run.base, NULL, &now, on_done, NULL, &run, &run.proc), 0);
        run_finish(&run);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "second\n");
        /* Nothing of ours has ended unreaped (the spawner runs on). */
        ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), 0);
        usleep(100 * 1000);
        ck_assert(!file_exists(mark));
        run_clear(&run);
        ck_assert_uint_eq(count_fds(), before);
        exec_spawner_shutdown();
        ck_assert_int_eq(rmdir(dir), 0);
        free(mark);
        free(dir);
}
END_TEST

/* Prepared as another user: the credentials are dropped while it waits,
 * a set-up failure (a cwd the user may not enter) shows once it goes, as
 * with exec_start(). */
START_TEST(test_prepare_as_nobody) {
        char *argv[] = { "id", "-u", NULL };
        struct exec_spec spec = spec_self("/usr/bin/id", argv, NULL);
        struct run run = {};
        char *dir;

        if (skip_unless_root("test_prepare_as_nobody"))
                return;

        spec.uid = NOBODY;
        run.base = event_base_new();
        ck_assert_ptr_nonnull(run.base);
        ck_assert_int_eq(exec_prepare(run.base, NULL, &spec, on_done, NULL, &run, &run.proc), 0);
        usleep(100 * 1000);
        ck_assert_int_eq(exec_go(run.proc), 0);
        run_finish(&run);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "65534\n");
        run_clear(&run);

        dir = make_temp_dir(0700);
        spec.cwd = dir;
        run = (struct run) {};
        run.base = event_base_new();
        ck_assert_ptr_nonnull(run.base);
        ck_assert_int_eq(exec_prepare(run.base, NULL, &spec, on_done, NULL, &run, &run.proc), 0);
        usleep(100 * 1000);
        ck_assert_uint_eq(run.n_done, 0);
        ck_assert_int_eq(exec_go(run.proc), 0);
        run_finish(&run);
        ck_assert_int_eq(run.r.exec_errno, EXEC_ERRNO_IN_CWD | EACCES);
        ck_assert_int_eq(run.r.exit_status, 127);
        run_clear(&run);
        ck_assert_int_eq(rmdir(dir), 0);
        free(dir);
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

/* ------------------------------------------------------------------------
 * cgroup containment */

START_TEST(test_cgroup_find_own_dir) {
        static const char hybrid[] =
                "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
                "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
                "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
                "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        static const char unified[] =
                "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 master:2 - cgroup2 cgroup2 "
                "rw,nsdelegate,memory_recursiveprot\n";
        /* A container's view: only its own part of the hierarchy is mounted. */
        static const char container[] =
                "600 500 0:30 /lxc/c1 /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
        static const char escaped[] =
                "70 22 0:40 / /mnt/cg\\040v2 rw,relatime - cgroup2 none rw\n";
        static const char v1_only[] =
                "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
        char *dir = NULL;

        ck_assert_int_eq(cgroup_find_own_dir(hybrid, "9:name=systemd:/\n1:cpu:/\n0::/\n", &dir), 0);
        ck_assert_str_eq(dir, "/sys/fs/cgroup/unified");
        free(dir);
        ck_assert_int_eq(cgroup_find_own_dir(hybrid, "1:cpu:/x\n0::/x/y\n", &dir), 0);
        ck_assert_str_eq(dir, "/sys/fs/cgroup/unified/x/y");
        free(dir);

        ck_assert_int_eq(cgroup_find_own_dir(unified, "0::/system.slice/cmwqd.service\n", &dir), 0);
        ck_assert_str_eq(dir, "/sys/fs/cgroup/system.slice/cmwqd.service");
        free(dir);
        /* The last line need not end in a newline. */
        ck_assert_int_eq(cgroup_find_own_dir(unified, "0::/", &dir), 0);
        ck_assert_str_eq(dir, "/sys/fs/cgroup");
        free(dir);

        ck_assert_int_eq(cgroup_find_own_dir(container, "0::/lxc/c1/app\n", &dir), 0);
        ck_assert_str_eq(dir, "/sys/fs/cgroup/app");
        free(dir);
        ck_assert_int_eq(cgroup_find_own_dir(container, "0::/lxc/c1\n", &dir), 0);
        ck_assert_str_eq(dir, "/sys/fs/cgroup");
        free(dir);

        ck_assert_int_eq(cgroup_find_own_dir(escaped, "0::/a\n", &dir), 0);
        ck_assert_str_eq(dir, "/mnt/cg v2/a");
        free(dir);

        dir = (char *) 0x1;
        /* Outside the mounted part ("/lxc/c10" is not under "/lxc/c1"). */
        ck_assert_int_eq(cgroup_find_own_dir(container, "0::/lxc/c10\n", &dir), -EOPNOTSUPP);
        ck_assert_int_eq(cgroup_find_own_dir(container, "0::/other\n", &dir), -EOPNOTSUPP);
        /* cgroup v1 only: neither a "0::" line nor a cgroup2 mount. */
        ck_assert_int_eq(cgroup_find_own_dir(v1_only, "1:cpu:/\n", &dir), -EOPNOTSUPP);
        ck_assert_int_eq(cgroup_find_own_dir(v1_only, "1:cpu:/\n0::/\n", &dir), -EOPNOTSUPP);
        ck_assert_int_eq(cgroup_find_own_dir(hybrid, "1:cpu:/\n", &dir), -EOPNOTSUPP);
        ck_assert_int_eq(cgroup_find_own_dir("", "", &dir), -EOPNOTSUPP);
        ck_assert_ptr_eq(dir, (char *) 0x1);
}
END_TEST

/* Our own cgroup root, or NULL (and a printed reason) where cgroup v2 cannot
 * be had.  CI runs as root on a machine where it can. */
static struct cgroup_root *cgroups_or_skip(const char *what) {
        struct cgroup_root *root = NULL;
        int r;

        r = cgroup_root_new(&root);
        if (r < 0) {
                fprintf(stderr, "SKIP %s: cgroup v2 not usable here: %s\n", what, strerror(-r));
                return NULL;
        }
        ck_assert_ptr_nonnull(root);
        ck_assert_ptr_nonnull(cgroup_root_path(root));
        /* Orphans come to us, so that we can reap them. */
        ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
        return root;
}

/* Live (not zombie) processes with an argument exactly @marker; the pid of
 * one of them in *ret_pid. */
static unsigned count_marker(const char *marker, pid_t *ret_pid) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        unsigned n = 0;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d))) {
                char path[300], buf[4096];
                ssize_t k;
                int fd;

                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;       /* a zombie has no command line */
                buf[k] = 0;
                /* Only the sleep itself: "setsid sleep MARKER" carries the
                 * marker too, before it has left the process group. */
                const char *base = strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf;
                if (strcmp(base, "sleep") != 0)
                        continue;
                for (char *a = buf; a < buf + k; a += strlen(a) + 1)
                        if (strcmp(a, marker) == 0) {
                                n++;
                                if (ret_pid)
                                        *ret_pid = (pid_t) atoi(de->d_name);
                                break;
                        }
        }
        closedir(d);
        return n;
}

static void reap_orphans(void) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
}

/* Item cgroups left in the root's directory. */
static unsigned count_item_cgroups(const struct cgroup_root *root) {
        DIR *d = opendir(cgroup_root_path(root));
        struct dirent *de;
        unsigned n = 0;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)))
                if (strncmp(de->d_name, "item-", 5) == 0)
                        n++;
        closedir(d);
        return n;
}

/* Sleep durations that are unique to this test process: "1000.1<pid>". */
static void make_marker(char *buf, size_t size, unsigned which) {
        snprintf(buf, size, "1000.%u%d", which, (int) getpid());
}

/* Our own v2 cgroup, as /proc/self/cgroup says ("/" or "/a/b"). */
static char *own_cgroup(void) {
        char buf[4096], *p, *line;
        FILE *f = fopen("/proc/self/cgroup", "re");

        ck_assert_ptr_nonnull(f);
        while ((line = fgets(buf, sizeof(buf), f)))
                if (strncmp(line, "0::", 3) == 0)
                        break;
        fclose(f);
        ck_assert_ptr_nonnull(line);
        line[strcspn(line, "\n")] = 0;
        p = strdup(line + 3);
        ck_assert_ptr_nonnull(p);
        return p;
}

struct marker_kill {
        struct run *run;
        const char *a, *b;
        bool by_timeout;                /* only watch, the timeout kills */
        bool seen;
};

static void on_poll_markers(evutil_socket_t fd, short what, void *userdata) {
        struct marker_kill *mk = userdata;

        if (!mk->run->proc || mk->seen)
                return;
        if (count_marker(mk->a, NULL) == 0 || count_marker(mk->b, NULL) == 0)
                return;
        mk->seen = true;
        if (!mk->by_timeout) {
                mk->run->killed_by_test = true;
                exec_proc_kill(mk->run->proc);
        }
}

/* Runs "setsid sleep A & sleep B" and, once both sleep, kills it (or lets
 * its timeout do that). */
static void run_escape(struct run *run, struct cgroup_root *root, const char *a, const char *b,
                       uint64_t timeout_usec) {
        char *script, *argv[] = { "sh", "-c", NULL, NULL };
        struct exec_spec spec;
        struct timeval tv = { .tv_usec = 10 * 1000 };
        struct marker_kill mk = { .a = a, .b = b, .by_timeout = timeout_usec > 0 };

        ck_assert_int_ge(asprintf(&script, "setsid sleep %s & sleep %s; echo never", a, b), 0);
        argv[2] = script;
        spec = spec_self("/bin/sh", argv, NULL);
        spec.cgroups = root;
        spec.timeout_usec = timeout_usec;

        run_begin(run, &spec);
        mk.run = run;
        run->poll = event_new(run->base, -1, EV_PERSIST, on_poll_markers, &mk);
        ck_assert_ptr_nonnull(run->poll);
        ck_assert_int_eq(event_add(run->poll, &tv), 0);
        run_finish(run);
        ck_assert_msg(mk.seen, "the sleeps never both ran");
        ck_assert_int_eq(run->r.signal, SIGKILL);
        ck_assert_uint_eq(run->r.out_len, 0);
        free(script);
}

START_TEST(test_cgroup_membership) {
        struct cgroup_root *root = cgroups_or_skip("test_cgroup_membership");
        char *argv[] = { "grep", "^0::", "/proc/self/cgroup", NULL };
        struct exec_spec spec = spec_self("/bin/grep", argv, NULL);
        char *own, *prefix, *first;
        const char *subtree;
        struct run run;

        if (!root)
                return;
        own = own_cgroup();
        subtree = strrchr(cgroup_root_path(root), '/');
        ck_assert_ptr_nonnull(subtree);
        ck_assert_int_ge(asprintf(&prefix, "0::%s%s/item-", strcmp(own, "/") == 0 ? "" : own, subtree), 0);

        spec.cgroups = root;
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_msg(run.r.out_len > strlen(prefix) && memcmp(run.r.out, prefix, strlen(prefix)) == 0 &&
                      run.r.out[run.r.out_len - 1] == '\n',
                      "expected \"%s<n>\", got \"%.*s\"", prefix, (int) run.r.out_len, run.r.out);
        first = strndup(run.r.out, run.r.out_len);
        run_clear(&run);
        /* Removed once the item ended. */
        ck_assert_uint_eq(count_item_cgroups(root), 0);

        /* Each item its own. */
        run_spec(&run, &spec);
        assert_success(&run);
        ck_assert_uint_gt(run.r.out_len, strlen(prefix));
        ck_assert(memcmp(run.r.out, prefix, strlen(prefix)) == 0);
        ck_assert_msg(run.r.out_len != strlen(first) || memcmp(run.r.out, first, run.r.out_len) != 0,
                      "two items shared %s", first);
        run_clear(&run);
        ck_assert_uint_eq(count_item_cgroups(root), 0);

        /* Without a root, the daemon's own cgroup, as before. */
        spec.cgroups = NULL;
        run_spec(&run, &spec);
        assert_success(&run);
        {
                char *expected;

                ck_assert_int_ge(asprintf(&expected, "0::%s\n", own), 0);
                assert_buf(run.r.out, run.r.out_len, expected);
                free(expected);
        }
        run_clear(&run);

        /* An item that fails before execve() still has its cgroup removed. */
        spec.cgroups = root;
        spec.program = "/nonexistent/cmwq-no-such-program";
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, ENOENT);
        run_clear(&run);
        ck_assert_uint_eq(count_item_cgroups(root), 0);

        /* The subtree goes with the root. */
        {
                char *path = strdup(cgroup_root_path(root));

                ck_assert_ptr_null(cgroup_root_free(root));
                ck_assert_int_eq(access(path, F_OK), -1);
                ck_assert_int_eq(errno, ENOENT);
                free(path);
        }
        ck_assert_ptr_null(cgroup_root_free(NULL));
        free(first);
        free(prefix);
        free(own);
}
END_TEST

START_TEST(test_cgroup_user_cannot_leave) {
        struct cgroup_root *root;
        char *argv[] = { "sh", "-c", NULL, NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        char *own, *script;
        struct run run;

        if (skip_unless_root("test_cgroup_user_cannot_leave"))
                return;
        root = cgroups_or_skip("test_cgroup_user_cannot_leave");
        if (!root)
                return;
        own = own_cgroup();
        /* Into the daemon's cgroup, or the subtree: both refused. */
        ck_assert_int_ge(asprintf(&script,
                                  "echo $$ > %s/../cgroup.procs || echo refused1; "
                                  "echo $$ > %s/cgroup.procs || echo refused2; "
                                  "echo 1 > %s/cgroup.kill 2>/dev/null || echo refused3; "
                                  "grep -c '^0::.*/item-' /proc/self/cgroup",
                                  cgroup_root_path(root), cgroup_root_path(root), cgroup_root_path(root)),
                         0);
        argv[2] = script;
        spec.uid = NOBODY;
        spec.cgroups = root;
        run_spec(&run, &spec);
        ck_assert_int_eq(run.r.exec_errno, 0);
        assert_buf(run.r.out, run.r.out_len, "refused1\nrefused2\nrefused3\n1\n");
        run_clear(&run);
        ck_assert_uint_eq(count_item_cgroups(root), 0);
        cgroup_root_free(root);
        free(script);
        free(own);
}
END_TEST

START_TEST(test_cgroup_kill_escaped) {
        struct cgroup_root *root = cgroups_or_skip("test_cgroup_kill_escaped");
        char a[32], b[32];
        struct run run;
        pid_t pid = 0;

        if (!root)
                return;
        make_marker(a, sizeof(a), 1);
        make_marker(b, sizeof(b), 2);

        /* First without a cgroup, to show what the test is about: the
         * setsid()ed sleep leaves the process group and survives. */
        run_escape(&run, NULL, a, b, 0);
        ck_assert(run.r.killed);
        run_clear(&run);
        ck_assert_uint_eq(count_marker(a, &pid), 1);
        ck_assert_int_gt(pid, 0);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        while (count_marker(a, NULL) > 0)
                usleep(1000);
        reap_orphans();

        /* With one, nothing is left: done follows the kill, and the loop
         * returns only once the cgroup is empty and removed. */
        run_escape(&run, root, a, b, 0);
        ck_assert(run.killed_by_test);
        ck_assert(run.r.killed);
        ck_assert(!run.r.timed_out);
        run_clear(&run);
        ck_assert_uint_eq(count_marker(a, NULL), 0);
        ck_assert_uint_eq(count_marker(b, NULL), 0);
        ck_assert_uint_eq(count_item_cgroups(root), 0);
        reap_orphans();
        cgroup_root_free(root);
}
END_TEST

START_TEST(test_cgroup_timeout) {
        struct cgroup_root *root = cgroups_or_skip("test_cgroup_timeout");
        char a[32], b[32];
        struct run run;

        if (!root)
                return;
        make_marker(a, sizeof(a), 3);
        make_marker(b, sizeof(b), 4);
        run_escape(&run, root, a, b, 500 * USEC_PER_MSEC);
        ck_assert(run.r.timed_out);
        ck_assert(!run.r.killed);
        run_clear(&run);
        ck_assert_uint_eq(count_marker(a, NULL), 0);
        ck_assert_uint_eq(count_marker(b, NULL), 0);
        ck_assert_uint_eq(count_item_cgroups(root), 0);
        reap_orphans();
        cgroup_root_free(root);
}
END_TEST

START_TEST(test_cgroup_end_kills_leftovers) {
        struct cgroup_root *root = cgroups_or_skip("test_cgroup_end_kills_leftovers");
        char a[32], *script, *argv[] = { "sh", "-c", NULL, NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;

        if (!root)
                return;
        make_marker(a, sizeof(a), 5);
        /* The item ends normally, leaving a daemon of its own behind. */
        ck_assert_int_ge(asprintf(&script, "setsid sleep %s & sleep 0.3; echo ended", a), 0);
        argv[2] = script;
        spec.cgroups = root;
        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "ended\n");
        run_clear(&run);
        ck_assert_uint_eq(count_marker(a, NULL), 0);
        ck_assert_uint_eq(count_item_cgroups(root), 0);
        reap_orphans();
        cgroup_root_free(root);
        free(script);
}
END_TEST

START_TEST(test_cgroup_cpu_of_orphans) {
        struct cgroup_root *root = cgroups_or_skip("test_cgroup_cpu_of_orphans");
        /* The burner is orphaned at once (the subshell exits), so the item
         * never waits for it; cat ends when the burner closes the pipe. */
        char *argv[] = { "sh", "-c",
                         "(setsid sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo burnt' &) | cat",
                         NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        struct run run;
        uint64_t without;

        if (!root)
                return;
        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "burnt\n");
        without = run.r.cpu_usec;
        run_clear(&run);
        reap_orphans();

        spec.cgroups = root;
        run_spec(&run, &spec);
        assert_success(&run);
        assert_buf(run.r.out, run.r.out_len, "burnt\n");
        /* The burner's time counts (rusage alone would miss it). */
        ck_assert_msg(run.r.cpu_usec >= 50 * USEC_PER_MSEC && run.r.cpu_usec > without,
                      "cpu_usec %" PRIu64 " with a cgroup, %" PRIu64 " without", run.r.cpu_usec, without);
        run_clear(&run);
        reap_orphans();
        cgroup_root_free(root);
}
END_TEST

START_TEST(test_cgroup_abandon) {
        struct cgroup_root *root;
        char a[32], b[32], *script, *path, *argv[] = { "sh", "-c", NULL, NULL };
        struct exec_spec spec = spec_self("/bin/sh", argv, NULL);
        unsigned before = count_fds();
        struct event_base *base = event_base_new();
        struct exec_proc *p = NULL;
        uint64_t deadline;

        ck_assert_ptr_nonnull(base);
        root = cgroups_or_skip("test_cgroup_abandon");
        if (!root) {
                event_base_free(base);
                return;
        }
        make_marker(a, sizeof(a), 6);
        make_marker(b, sizeof(b), 7);
        ck_assert_int_ge(asprintf(&script, "setsid sleep %s & sleep %s", a, b), 0);
        argv[2] = script;
        spec.cgroups = root;
        ck_assert_int_eq(exec_start(base, NULL, &spec, on_done_fail, NULL, NULL, &p), 0);
        deadline = now_usec(CLOCK_MONOTONIC) + 30 * USEC_PER_SEC;
        while (count_marker(a, NULL) == 0 || count_marker(b, NULL) == 0) {
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < deadline, "the sleeps never both ran");
                usleep(10 * 1000);
        }

        /* Shutdown: items abandoned, then the root freed (before the loop)
         * kills and removes everything. */
        ck_assert_ptr_null(exec_proc_abandon(p));
        path = strdup(cgroup_root_path(root));
        ck_assert_ptr_null(cgroup_root_free(root));
        ck_assert_uint_eq(count_marker(a, NULL), 0);
        ck_assert_uint_eq(count_marker(b, NULL), 0);
        ck_assert_int_eq(access(path, F_OK), -1);
        ck_assert_int_eq(errno, ENOENT);
        event_base_free(base);
        reap_orphans();
        ck_assert_uint_eq(count_fds(), before);
        free(path);
        free(script);
}
END_TEST

START_TEST(test_cgroup_no_fd_leak) {
        struct cgroup_root *root = cgroups_or_skip("test_cgroup_no_fd_leak");
        char *argv[] = { "echo", "x", NULL };
        struct exec_spec spec = spec_self("/bin/echo", argv, NULL);
        char a[32], b[32];
        unsigned before;
        struct run run;

        if (!root)
                return;
        spec.cgroups = root;
        run_spec(&run, &spec);
        run_clear(&run);
        before = count_fds();
        for (int i = 0; i < 10; i++) {
                run_spec(&run, &spec);
                assert_success(&run);
                run_clear(&run);
        }
        /* Killed ones, whose cgroups are removed from the loop. */
        make_marker(a, sizeof(a), 8);
        make_marker(b, sizeof(b), 9);
        for (int i = 0; i < 3; i++) {
                run_escape(&run, root, a, b, 0);
                run_clear(&run);
        }
        reap_orphans();
        ck_assert_uint_eq(count_fds(), before);
        ck_assert_uint_eq(count_item_cgroups(root), 0);
        cgroup_root_free(root);
}
END_TEST

START_TEST(test_cgroup_stale_swept) {
        struct cgroup_root *root;
        char *own_dir, *stale, *stale_item, *procs;
        const char *slash;
        pid_t dead, victim;
        int status;

        /* Where our subtree would be, hence a stale one of a dead daemon. */
        root = cgroups_or_skip("test_cgroup_stale_swept");
        if (!root)
                return;
        slash = strrchr(cgroup_root_path(root), '/');
        own_dir = strndup(cgroup_root_path(root), (size_t) (slash - cgroup_root_path(root)));
        cgroup_root_free(root);

        dead = fork();
        ck_assert_int_ge(dead, 0);
        if (dead == 0)
                _exit(0);
        ck_assert_int_eq(waitpid(dead, NULL, 0), dead);

        ck_assert_int_ge(asprintf(&stale, "%s/cmwq-items-%d", own_dir, (int) dead), 0);
        ck_assert_int_ge(asprintf(&stale_item, "%s/item-0", stale), 0);
        ck_assert_int_ge(asprintf(&procs, "%s/cgroup.procs", stale_item), 0);
        ck_assert_int_eq(mkdir(stale, 0755), 0);
        ck_assert_int_eq(mkdir(stale_item, 0755), 0);

        /* An item the dead daemon left running. */
        victim = fork();
        ck_assert_int_ge(victim, 0);
        if (victim == 0) {
                int fd = open(procs, O_WRONLY | O_CLOEXEC);

                if (fd < 0 || write(fd, "0", 1) != 1)
                        _exit(1);
                for (;;)
                        pause();
        }
        while (access(procs, F_OK) == 0) {
                char buf[64] = {};
                int fd = open(procs, O_RDONLY | O_CLOEXEC);

                ck_assert_int_ge(fd, 0);
                ck_assert_int_ge(read(fd, buf, sizeof(buf) - 1), 0);
                close(fd);
                if (atoi(buf) == victim)
                        break;
                usleep(1000);
        }

        root = cgroups_or_skip("test_cgroup_stale_swept");
        ck_assert_ptr_nonnull(root);
        ck_assert_int_eq(waitpid(victim, &status, 0), victim);
        ck_assert(WIFSIGNALED(status));
        ck_assert_int_eq(WTERMSIG(status), SIGKILL);
        /* Not waited for at start: what was still dying is removed by the
         * next start.  Do that part by hand. */
        (void) rmdir(stale_item);
        (void) rmdir(stale);
        cgroup_root_free(root);

        /* An empty stale subtree is removed at once.  A daemon of a test
         * running in parallel in the same cgroup sweeps it too, possibly
         * between the two mkdir()s: then make it again. */
        for (int tries = 0;; tries++) {
                ck_assert_msg(mkdir(stale, 0755) == 0 || errno == EEXIST, "mkdir %s: %m", stale);
                if (mkdir(stale_item, 0755) == 0)
                        break;
                ck_assert_msg(errno == ENOENT && tries < 100, "mkdir %s: %m", stale_item);
        }
        root = cgroups_or_skip("test_cgroup_stale_swept");
        ck_assert_ptr_nonnull(root);
        ck_assert_int_eq(access(stale, F_OK), -1);
        ck_assert_int_eq(errno, ENOENT);
        cgroup_root_free(root);

        free(procs);
        free(stale_item);
        free(stale);
        free(own_dir);
}
END_TEST

/* The first child of @parent named @comm (from /proc/PID/stat), or 0. */
static pid_t find_child(pid_t parent, const char *comm) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        pid_t found = 0;

        ck_assert_ptr_nonnull(d);
        while (!found && (de = readdir(d))) {
                char path[300], buf[512], *open_paren, *close_paren;
                int ppid = 0;
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
                if (sscanf(close_paren + 1, " %*c %d", &ppid) != 1 || ppid != parent)
                        continue;
                *close_paren = 0;
                if (strcmp(open_paren + 1, comm) == 0)
                        found = atoi(de->d_name);
        }
        closedir(d);
        return found;
}

/* Gone, or a zombie nobody reaps yet. */
static bool process_gone(pid_t pid) {
        char path[64], buf[512], *close_paren;
        ssize_t k;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return true;
        k = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (k <= 0)
                return true;
        buf[k] = 0;
        close_paren = strrchr(buf, ')');
        return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* The spawner keeps none of its owner's fds (here a pipe that is not even
 * close-on-exec), and dies with its owner.  The owner is a fork of a process
 * that already has a spawner (the fixture's): it must start its own. */
START_TEST(test_spawner_hygiene) {
        uint64_t deadline;
        pid_t owner, sp = 0;
        int pfd[2], n = 0, status;
        char path[64];
        struct dirent *de;
        DIR *d;

        ck_assert_int_eq(pipe(pfd), 0);
        owner = fork();
        ck_assert_int_ge(owner, 0);
        if (owner == 0) {
                if (exec_spawner_start() < 0)
                        _exit(1);
                for (;;)
                        pause();
        }

        deadline = now_usec(CLOCK_MONOTONIC) + 10 * USEC_PER_SEC;
        while (!(sp = find_child(owner, "cmwqd-spawner"))) {
                ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC), deadline);
                usleep(1000);
        }

        /* Its fds above 2: the socket to its owner, nothing else (it may
         * still be closing them: give it a moment). */
        snprintf(path, sizeof(path), "/proc/%d/fd", (int) sp);
        for (;;) {
                n = 0;
                d = opendir(path);
                ck_assert_ptr_nonnull(d);
                while ((de = readdir(d)))
                        if (de->d_name[0] != '.' && atoi(de->d_name) > 2)
                                n++;
                closedir(d);
                if (n == 1 || now_usec(CLOCK_MONOTONIC) > deadline)
                        break;
                usleep(1000);
        }
        ck_assert_int_eq(n, 1);

        ck_assert_int_eq(kill(owner, SIGKILL), 0);
        ck_assert_int_eq(waitpid(owner, &status, 0), owner);
        deadline = now_usec(CLOCK_MONOTONIC) + 10 * USEC_PER_SEC;
        while (!process_gone(sp)) {
                ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC), deadline);
                usleep(1000);
        }
        close(pfd[0]);
        close(pfd[1]);
}
END_TEST

int main(void) {
        Suite *s = suite_create("exec");
        TCase *tc = tcase_create("exec");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup_spawner, NULL);
        tcase_set_timeout(tc, TEST_TIMEOUT_SEC);
        tcase_add_test(tc, test_spawner_hygiene);
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
        tcase_add_test(tc, test_an_unbound_item_forked_while_pinned_runs_on_every_cpu);
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
        tcase_add_test(tc, test_prepare_then_go);
        tcase_add_test(tc, test_prepare_discard);
        tcase_add_test(tc, test_prepare_ahead);
        tcase_add_test(tc, test_prepare_ahead_discard_before_reply);
        tcase_add_test(tc, test_prepare_ahead_spawner_dies);
        tcase_add_test(tc, test_prepare_as_nobody);
        tcase_add_test(tc, test_many_concurrent);
        suite_add_tcase(s, tc);

        tc = tcase_create("cgroup");
        tcase_add_checked_fixture(tc, setup_spawner, NULL);
        tcase_set_timeout(tc, TEST_TIMEOUT_SEC);
        tcase_add_test(tc, test_cgroup_find_own_dir);
        tcase_add_test(tc, test_cgroup_membership);
        tcase_add_test(tc, test_cgroup_user_cannot_leave);
        tcase_add_test(tc, test_cgroup_kill_escaped);
        tcase_add_test(tc, test_cgroup_timeout);
        tcase_add_test(tc, test_cgroup_end_kills_leftovers);
        tcase_add_test(tc, test_cgroup_cpu_of_orphans);
        tcase_add_test(tc, test_cgroup_abandon);
        tcase_add_test(tc, test_cgroup_no_fd_leak);
        tcase_add_test(tc, test_cgroup_stale_swept);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

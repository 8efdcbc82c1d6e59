/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cmwqd where the machine refuses it something (issue 5): no new process
 * (a pids cgroup at its pids.max): retries with back-off, MEM_RECLAIM queues
 * through their rescuer; no perf_event_open(): the /proc sampler.  Both refusals are
 * real, made by the kernel for the test daemon alone: it starts through
 * tests/integration/confine.c inside a cgroup of its own, or under a
 * seccomp filter.  Needs root and the pids controller (cgroup v2, or the v1
 * pids hierarchy); without it the test fails and says so.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct cmwqd d;

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
}

static bool log_says(const char *what) {
        char *log = read_file(d.log);
        bool found = strstr(log, what) != NULL;

        free(log);
        return found;
}

static void write_file(const char *path, const char *value) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);

        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        ck_assert_msg(write(fd, value, strlen(value)) == (ssize_t) strlen(value), "write '%s' to %s: %s", value,
                      path, strerror(errno));
        close(fd);
}

static bool contains_word(const char *text, const char *word) {
        size_t n = strlen(word);

        for (const char *p = text; (p = strstr(p, word)); p += n)
                if ((p == text || p[-1] == ' ' || p[-1] == '\n') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
                        return true;
        return false;
}

/* A cgroup of the pids controller for the daemon: under the cgroup v2 root
 * (pids enabled there), else in the v1 pids hierarchy. */
static void pids_cgroup_make(char *dir, size_t size) {
        char path[512], *controllers;
        static const char *const stale[] = { "/sys/fs/cgroup/cmwq-test-*", "/sys/fs/cgroup/pids/cmwq-test-*" };

        /* Left by an earlier run that failed half-way (rmdir fails if busy). */
        for (size_t n = 0; n < 2; n++) {
                glob_t old;

                if (glob(stale[n], 0, NULL, &old) != 0)
                        continue;
                for (size_t k = 0; k < old.gl_pathc; k++)
                        (void) rmdir(old.gl_pathv[k]);
                globfree(&old);
        }

        if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
                controllers = read_file("/sys/fs/cgroup/cgroup.controllers");
                if (contains_word(controllers, "pids")) {
                        free(controllers);
                        /* Already enabled under systemd; harmless if so. */
                        write_file("/sys/fs/cgroup/cgroup.subtree_control", "+pids");
                        snprintf(dir, size, "/sys/fs/cgroup/cmwq-test-%d", (int) getpid());
                        ck_assert_msg(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));
                        return;
                }
                free(controllers);
        }
        snprintf(path, sizeof(path), "/sys/fs/cgroup/pids/cgroup.procs");
        ck_assert_msg(access(path, F_OK) == 0,
                      "no pids controller here (neither cgroup v2 with pids nor /sys/fs/cgroup/pids): "
                      "this test cannot make process creation fail");
        snprintf(dir, size, "/sys/fs/cgroup/pids/cmwq-test-%d", (int) getpid());
        ck_assert_msg(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));
}

static void pids_cgroup_remove(const char *dir) {
        /* The daemon is gone; its last processes may take a moment. */
        for (int k = 0; k < 100 && rmdir(dir) < 0 && errno == EBUSY; k++)
                sleep_ms(50);
}

/* Counter @key of queue @name in "cmwqctl --json stats". */
static long stats_counter(const char *name, const char *key) {
        char *out = CTL_OK(&d, "--json", "stats"), pat[128], *obj, *end, *v;
        long n = -1;

        snprintf(pat, sizeof(pat), "\"name\":\"%s\"", name);
        obj = strstr(out, pat);
        ck_assert_msg(obj, "no %s in stats: %s", name, out);
        end = strchr(obj, '}');
        snprintf(pat, sizeof(pat), "\"%s\":", key);
        v = strstr(obj, pat);
        if (v && v < end)
                n = strtol(v + strlen(pat), NULL, 10);
        free(out);
        return n;
}

static char *item_state(const char *id) {
        char *out = CTL_OK(&d, "--json", "show", id), *s = strstr(out, "\"state\":\""), *r;

        ck_assert_msg(s, "show said: %s", out);
        s += strlen("\"state\":\"");
        r = strndup(s, strcspn(s, "\""));
        free(out);
        return r;
}

/* Process creation refused (pids.max reached): the item stays pending, the
 * pool retries with back-off and counts each failure as mayday; once
 * processes may be created again, it runs, and the counting stops. */
START_TEST(test_fork_refused_retries_with_backoff) {
        char cg[256], path[320], *current, *id, *state;
        struct ctl_result r;
        long mayday, mayday2;

        pids_cgroup_make(cg, sizeof(cg));
        setenv("CMWQD_WRAPPER", getenv("CMWQ_CONFINE"), 1);
        setenv("CMWQ_CONFINE_CGROUP", cg, 1);
        cmwqd_start(&d, NULL);
        unsetenv("CMWQD_WRAPPER");
        unsetenv("CMWQ_CONFINE_CGROUP");

        free(CTL_OK(&d, "create", "plain"));
        /* What the daemon has now (itself, its spawner, their threads) is all
         * it may have. */
        snprintf(path, sizeof(path), "%s/pids.current", cg);
        current = read_file(path);
        snprintf(path, sizeof(path), "%s/pids.max", cg);
        write_file(path, current);
        free(current);

        id = CTL_OK(&d, "submit", "plain", "--", "/bin/echo", "ran");
        sleep_ms(2000);
        state = item_state(id);
        ck_assert_msg(strcmp(state, "pending") == 0, "the item is %s with no process to be had", state);
        free(state);
        mayday = stats_counter("plain", "mayday");
        /* Back-off from 10 ms, doubling to 1 s: a handful of tries in 2 s,
         * not hundreds. */
        ck_assert_msg(mayday >= 2 && mayday <= 20, "mayday is %ld after 2 s of refused forks", mayday);
        ck_assert_msg(log_says("Failed to start item"), "the failure was not logged");

        write_file(path, "max");
        CTL(&d, &r, "wait", id);
        ck_assert_msg(r.status == 0, "wait exited %d: %s", r.status, r.err);
        ck_assert_str_eq(r.out, "ran\n");
        ctl_result_free(&r);
        mayday = stats_counter("plain", "mayday");
        sleep_ms(1500);
        mayday2 = stats_counter("plain", "mayday");
        ck_assert_int_eq(mayday, mayday2);
        ck_assert_int_eq(stats_counter("plain", "total"), 1);

        free(id);
        cmwqd_stop(&d);
        pids_cgroup_remove(cg);
}
END_TEST

/* The same refusal, and a MEM_RECLAIM queue: its rescuer (a process the
 * daemon made with the queue, so already counted) runs the item; after each
 * rescue, the daemon makes a new rescuer as soon as a process has ended, so
 * the queue goes on making progress, where the plain queue's item waits. */
START_TEST(test_mem_reclaim_progresses_through_its_rescuer) {
        char cg[256], path[320], *current, *plain, expect[16];
        struct ctl_result r;
        long rescued;

        pids_cgroup_make(cg, sizeof(cg));
        setenv("CMWQD_WRAPPER", getenv("CMWQ_CONFINE"), 1);
        setenv("CMWQ_CONFINE_CGROUP", cg, 1);
        cmwqd_start(&d, NULL);
        unsetenv("CMWQD_WRAPPER");
        unsetenv("CMWQ_CONFINE_CGROUP");

        free(CTL_OK(&d, "create", "plain"));
        free(CTL_OK(&d, "create", "reclaim", "--mem-reclaim"));
        snprintf(path, sizeof(path), "%s/pids.current", cg);
        current = read_file(path);
        snprintf(path, sizeof(path), "%s/pids.max", cg);
        write_file(path, current);
        free(current);

        /* Without a rescuer: no progress. */
        plain = CTL_OK(&d, "submit", "plain", "--", "/bin/echo", "plain");
        sleep_ms(1500);
        current = item_state(plain);
        ck_assert_msg(strcmp(current, "pending") == 0, "the plain item is %s", current);
        free(current);
        ck_assert_msg(stats_counter("plain", "mayday") > 0, "no mayday on the plain queue");
        ck_assert_int_eq(stats_counter("plain", "rescued"), 0);

        /* With one: every item runs, the first through the rescuer (nothing
         * else could be had then).  That first one is the rescuer itself,
         * forked from cmwqd, which ignores SIGPIPE: it must have come with
         * every signal at its default and none blocked. */
        CTL(&d, &r, "submit", "reclaim", "--wait", "--", "/bin/grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status");
        ck_assert_msg(r.status == 0, "the rescued item: exit %d: %s", r.status, r.err);
        ck_assert_str_eq(r.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
        ctl_result_free(&r);
        for (int k = 1; k <= 3; k++) {
                char word[8];

                snprintf(word, sizeof(word), "r%d", k);
                snprintf(expect, sizeof(expect), "r%d\n", k);
                CTL(&d, &r, "submit", "reclaim", "--wait", "--", "/bin/echo", word);
                ck_assert_msg(r.status == 0, "item %d of the MEM_RECLAIM queue: exit %d: %s", k, r.status, r.err);
                ck_assert_str_eq(r.out, expect);
                ctl_result_free(&r);
        }
        /* The first had no other way; a later one may have found the pid
         * of a finished one free before the new rescuer took it. */
        rescued = stats_counter("reclaim", "rescued");
        ck_assert_msg(rescued >= 1 && rescued <= 4, "rescued %ld", rescued);
        ck_assert_msg(stats_counter("reclaim", "mayday") >= rescued, "mayday %ld", stats_counter("reclaim", "mayday"));
        ck_assert_int_eq(stats_counter("reclaim", "total"), 4);
        ck_assert_msg(log_says("its rescuer runs it"), "the rescue was not logged");

        /* (The plain item may have had the pid of a finished one meanwhile.) */

        write_file(path, "max");
        CTL(&d, &r, "wait", plain);
        ck_assert_msg(r.status == 0, "wait exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        free(plain);
        cmwqd_stop(&d);
        pids_cgroup_remove(cg);
}
END_TEST

/* perf_event_open() refused: the daemon says so once, samples /proc, and
 * concurrency management still works: a sleeping item lets the next one on
 * its CPU run. */
START_TEST(test_perf_refused_falls_back_to_proc) {
        struct ctl_result r;
        char *a, *state;

        setenv("CMWQD_WRAPPER", getenv("CMWQ_CONFINE"), 1);
        setenv("CMWQ_CONFINE_NO_PERF", "1", 1);
        cmwqd_start(&d, NULL);
        unsetenv("CMWQD_WRAPPER");
        unsetenv("CMWQ_CONFINE_NO_PERF");

        ck_assert_msg(log_says("perf_event_open() is not available here; detecting blocked items by sampling /proc"),
                      "no fallback message; log:\n%s", read_file(d.log));
        /* Logged once everything is set up, which is after the socket
         * already accepts: give it time on a busy machine. */
        for (int waited = 0; !log_says("sleep detector proc"); waited += 20) {
                ck_assert_msg(waited < 30000, "not on the proc detector; log:\n%s", read_file(d.log));
                sleep_ms(20);
        }

        a = CTL_OK(&d, "submit", "system", "--cpu", "0", "--", "/bin/sleep", "20");
        CTL(&d, &r, "submit", "system", "--cpu", "0", "--wait", "--", "/bin/echo", "next");
        ck_assert_msg(r.status == 0, "submit --wait exited %d: %s", r.status, r.err);
        ck_assert_str_eq(r.out, "next\n");
        ctl_result_free(&r);
        state = item_state(a);
        ck_assert_msg(strcmp(state, "running") == 0, "the sleeping item is %s", state);
        free(state);
        free(CTL_OK(&d, "cancel", a));
        free(a);
        cmwqd_stop(&d);
}
END_TEST

/* A second cmwqd in another PID namespace, on the same cgroup: it cannot
 * see our daemon's pid, and once took its item cgroups for a dead
 * daemon's: it killed our running item and removed our subtree, and every
 * item after failed to start.  Each daemon holds its subtree locked. */
START_TEST(test_a_daemon_in_another_pid_namespace_leaves_our_items_alone) {
        struct cmwqd other;
        char wrapper[400], *id, *state;
        struct stat st;
        FILE *f;

        cmwqd_start(&d, NULL);
        ck_assert_msg(log_says("Items get their own cgroup under "), "no cgroup v2 subtree here; log:\n%s",
                      read_file(d.log));
        id = CTL_OK(&d, "submit", "system", "--", "/bin/sleep", "60");
        for (int waited = 0;; waited += 20) {
                state = item_state(id);
                if (strcmp(state, "running") == 0)
                        break;
                ck_assert_msg(waited < 20000, "the item is %s", state);
                free(state);
                sleep_ms(20);
        }
        free(state);

        test_path(&d, "other-pid-namespace", wrapper, sizeof(wrapper));
        f = fopen(wrapper, "w");
        ck_assert_ptr_nonnull(f);
        fputs("#!/bin/sh\nexec unshare --pid --fork --mount-proc --kill-child \"$@\"\n", f);
        fclose(f);
        ck_assert_int_eq(chmod(wrapper, 0755), 0);
        setenv("CMWQD_WRAPPER", wrapper, 1);
        cmwqd_start(&other, NULL);
        unsetenv("CMWQD_WRAPPER");
        {
                char *log = read_file(other.log);

                ck_assert_msg(strstr(log, "Items get their own cgroup under ") || strstr(log, "cgroup v2 not usable"),
                              "the other daemon did not get to its cgroups; log:\n%s", log);
                free(log);
        }

        state = item_state(id);
        ck_assert_msg(strcmp(state, "running") == 0, "our item is %s after the other daemon started", state);
        free(state);
        {
                char *log = read_file(d.log), *want = strstr(log, "Items get their own cgroup under ");
                char path[300] = "";

                ck_assert_ptr_nonnull(want);
                sscanf(want + strlen("Items get their own cgroup under "), "%299s", path);
                ck_assert_msg(stat(path, &st) == 0, "our subtree %s is gone: %s", path, strerror(errno));
                free(log);
        }
        free(CTL_OK(&d, "cancel", id));
        free(id);
        cmwqd_kill(&other);
        cmwqd_stop(&d);
}
END_TEST

int main(void) {
        Suite *s = suite_create("degraded");
        TCase *tc = tcase_create("degraded");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_fork_refused_retries_with_backoff);
        tcase_add_test(tc, test_mem_reclaim_progresses_through_its_rescuer);
        tcase_add_test(tc, test_perf_refused_falls_back_to_proc);
        tcase_add_test(tc, test_a_daemon_in_another_pid_namespace_leaves_our_items_alone);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

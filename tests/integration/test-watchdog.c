/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The watchdog (doc/design.md §3.9): a pool with work waiting and no
 * progress for --watchdog-threshold is logged once, naming the item that
 * holds it, and counted in "cmwqctl stats".  Stalls are made as a user
 * would make them: an ordered queue whose head hangs, a CPU-intensive queue
 * at max_active.
 * A blocked item alone is no stall: concurrency management starts the next.
 * The threshold is 1 s; every wait for the daemon is given 20 s.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct cmwqd d;

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
}

/* Lines of the daemon's log that contain @what. */
static int log_count(const char *what) {
        char *log = read_file(d.log), *p;
        int n = 0;

        for (p = log; (p = strstr(p, what)); p++)
                n++;
        free(log);
        return n;
}

static bool wait_for_log(const char *what, int n, int timeout_ms) {
        for (int waited = 0; waited < timeout_ms; waited += 50) {
                if (log_count(what) >= n)
                        return true;
                sleep_ms(50);
        }
        return log_count(what) >= n;
}

/* The "watchdog" counter of queue @name in "cmwqctl --json stats", -1 if absent. */
static long stats_watchdog(const char *name) {
        char *out = CTL_OK(&d, "--json", "stats"), key[128], *obj, *end, *w;
        long n = -1;

        snprintf(key, sizeof(key), "\"name\":\"%s\"", name);
        obj = strstr(out, key);
        ck_assert_msg(obj, "no %s in stats: %s", name, out);
        end = strchr(obj, '}');
        w = strstr(obj, "\"watchdog\":");
        if (w && w < end)
                n = strtol(w + strlen("\"watchdog\":"), NULL, 10);
        free(out);
        return n;
}

static const char *const threshold_1s[] = { "--watchdog-threshold", "1", NULL };

START_TEST(test_hung_ordered_head_logged_once_and_counted) {
        char *a, *b, *c, *line, *out, *log;

        cmwqd_start(&d, threshold_1s);
        free(CTL_OK(&d, "create", "wd", "--ordered"));
        a = CTL_OK(&d, "submit", "wd", "--", "/bin/sleep", "600");
        b = CTL_OK(&d, "submit", "wd", "--", "/bin/sleep", "600");
        c = CTL_OK(&d, "submit", "wd", "--", "/bin/true");

        ck_assert_msg(wait_for_log("Watchdog:", 1, 20000), "no watchdog report; log:\n%s", read_file(d.log));
        /* Several thresholds later: still the one report for the one stall. */
        sleep_ms(3500);
        ck_assert_int_eq(log_count("Watchdog:"), 1);
        log = read_file(d.log);
        line = strstr(log, "Watchdog:");
        ck_assert_ptr_nonnull(line);
        *strchrnul(line, '\n') = 0;
        char holder[64], waiter[64];
        snprintf(holder, sizeof(holder), "item %s of workqueue wd (/bin/sleep) holds it", a);
        snprintf(waiter, sizeof(waiter), "item %s of workqueue wd waits", b);
        ck_assert_msg(strstr(line, holder) && strstr(line, waiter) && strstr(line, "running for "),
                      "the report does not name the holder and the waiter: %s", line);
        free(log);
        ck_assert_int_eq(stats_watchdog("wd"), 1);
        ck_assert_int_eq(stats_watchdog("system"), 0);
        out = CTL_OK(&d, "stats");
        ck_assert_msg(strstr(out, "stalls"), "no stalls column: %s", out);
        free(out);

        /* Progress (the head goes, the next one starts) ends that stall; the
         * next hung head with work behind it is a new one. */
        free(CTL_OK(&d, "cancel", a));
        ck_assert_msg(wait_for_log("Watchdog:", 2, 20000), "the second stall was not reported");
        log = read_file(d.log);
        line = strstr(strstr(log, "Watchdog:") + 1, "Watchdog:");
        snprintf(holder, sizeof(holder), "item %s of workqueue wd (/bin/sleep) holds it", b);
        ck_assert_msg(strstr(line, holder), "the second report: %s", line);
        free(log);
        ck_assert_int_eq(stats_watchdog("wd"), 2);

        /* Nothing waits once the hung one is gone: no more reports. */
        free(CTL_OK(&d, "cancel", b));
        free(CTL_OK(&d, "flush", "wd"));
        sleep_ms(2500);
        ck_assert_int_eq(log_count("Watchdog:"), 2);
        free(a);
        free(b);
        free(c);
        cmwqd_stop(&d);
}
END_TEST

/* Two CPU-intensive items at max_active 2 on CPU 0 that never end, and one
 * waiting: a stall.  Items of the same queue that only block do not stall
 * the pool's other queues: the system queue on CPU 0 keeps running. */
START_TEST(test_cpu_intensive_at_max_active) {
        char *out;

        cmwqd_start(&d, threshold_1s);
        free(CTL_OK(&d, "create", "ci", "--cpu-intensive", "--max-active", "2"));
        for (int k = 0; k < 3; k++)
                free(CTL_OK(&d, "submit", "ci", "--cpu", "0", "--", "/bin/sleep", "600"));
        out = CTL_OK(&d, "submit", "system", "--cpu", "0", "--wait", "--", "/bin/echo", "still-served");
        ck_assert_str_eq(out, "still-served");
        free(out);

        ck_assert_msg(wait_for_log("Watchdog: the pool of CPU 0", 1, 20000), "no report; log:\n%s",
                      read_file(d.log));
        ck_assert_int_eq(stats_watchdog("ci"), 1);
        ck_assert_int_eq(stats_watchdog("system"), 0);
        cmwqd_stop(&d);
}
END_TEST

START_TEST(test_zero_disables) {
        static const char *const off[] = { "--watchdog-threshold", "0", NULL };

        cmwqd_start(&d, off);
        free(CTL_OK(&d, "create", "wd", "--ordered"));
        free(CTL_OK(&d, "submit", "wd", "--", "/bin/sleep", "600"));
        free(CTL_OK(&d, "submit", "wd", "--", "/bin/true"));
        sleep_ms(3000);
        ck_assert_int_eq(log_count("Watchdog:"), 0);
        ck_assert_int_eq(stats_watchdog("wd"), 0);
        cmwqd_stop(&d);
}
END_TEST

START_TEST(test_bad_threshold_refused) {
        static const char *const bad[][2] = { { "--watchdog-threshold", "-1" }, { "--watchdog-threshold", "soon" },
                                              { "--watchdog-threshold", "1e9" } };
        char cmd[512];

        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
                snprintf(cmd, sizeof(cmd), "'%s' %s %s --socket /nonexistent/x.sock 2>/dev/null", getenv("CMWQD"),
                         bad[k][0], bad[k][1]);
                int status = system(cmd);
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s %s: status %d", bad[k][0],
                              bad[k][1], status);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("watchdog");
        TCase *tc = tcase_create("watchdog");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_hung_ordered_head_logged_once_and_counted);
        tcase_add_test(tc, test_cpu_intensive_at_max_active);
        tcase_add_test(tc, test_zero_disables);
        tcase_add_test(tc, test_bad_threshold_refused);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

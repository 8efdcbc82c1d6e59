/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What an administrator watches: "cmwqctl top" while work runs, and the
 * counters as OpenMetrics text (stats --format=openmetrics), checked
 * against the format's rules (tests/unit/openmetrics-lint.h). */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../unit/openmetrics-lint.h"
#include "harness.h"

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

/* The fields of the first line of @out that starts with @first (a word),
 * split at blanks into @f; the number found. */
static int row_fields(const char *out, const char *first, char f[][32], int max) {
        size_t len = strlen(first);

        for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
                int n = 0;

                if (strncmp(p, first, len) != 0 || (p[len] != ' ' && p[len] != '\n'))
                        continue;
                while (n < max && *p && *p != '\n') {
                        size_t k = strcspn(p, " \n");

                        if (k > 0) {
                                snprintf(f[n++], 32, "%.*s", (int) k, p);
                                p += k;
                        }
                        p += strspn(p, " ");
                }
                return n;
        }
        return 0;
}

START_TEST(test_top_plain_shows_pools_and_rates_while_items_run) {
        enum { N = 40 };
        char log[400], tag[16], f[12][32];
        bool seen_rate = false, seen_infl = false, seen_plain = false;
        struct file_gate gate;
        int64_t deadline;

        /* One at a time, 50 ms each: about 2 s of items starting and ending
         * one after another, once the first, gated one lets them (however
         * long submitting them took). */
        free(CTL_OK(&d, "create", "seq", "--ordered"));
        test_path(&d, "probe.log", log, sizeof(log));
        file_gate_close(&d, &gate, "gate");
        free(CTL_OK(&d, "submit", "seq", "--", d.probe, "wait", gate.path, log, "gate"));
        for (int i = 0; i < N; i++) {
                snprintf(tag, sizeof(tag), "t%d", i);
                free(CTL_OK(&d, "submit", "seq", "--", d.probe, "sleep", "50", log, tag));
        }
        file_gate_open(&gate);
        deadline = mono_ns() + 90 * 1000000000LL;

        /* Short tops one after another, until one saw seq's items start or
         * they have all ended. */
        while (!(seen_rate && seen_infl && seen_plain) && mono_ns() < deadline) {
                bool done = count_probe_lines(log, "end") == N + 1;
                bool plain = !seen_plain;
                struct ctl_result r;
                int n;

                /* stdout is a file: plain without being asked, once with --plain */
                if (plain)
                        CTL(&d, &r, "top", "--plain", "--iterations", "2", "--interval", "0.2");
                else
                        CTL(&d, &r, "top", "--iterations", "2", "--interval", "0.2");
                ck_assert_msg(r.status == 0, "top exited %d: %s", r.status, r.err);
                ck_assert_msg(!strchr(r.out, '\033'), "screen control in plain output:\n%s", r.out);
                /* two refreshes, each with its header and both tables */
                ck_assert_msg(strstr(r.out, "rates over") && strstr(strstr(r.out, "rates over") + 1, "rates over"),
                              "not two refreshes:\n%s", r.out);
                n = row_fields(r.out, "0", f, 12);
                ck_assert_msg(n == 12 && strcmp(f[1], "normal") == 0, "no pool line of CPU 0:\n%s", r.out);
                ck_assert_msg(row_fields(r.out, "unbound", f, 12) >= 12, "no unbound pool line:\n%s", r.out);
                n = row_fields(r.out, "seq", f, 12);
                ck_assert_msg(n == 11, "no row of seq (%d fields):\n%s", n, r.out);
                if (!seen_plain)
                        seen_plain = true;
                /* a later refresh wins over the first: look at every seq row */
                for (const char *p = r.out; (p = strstr(p, "\nseq ")); p++) {
                        n = row_fields(p + 1, "seq", f, 12);
                        ck_assert_int_eq(n, 11);
                        seen_infl = seen_infl || atoi(f[2]) > 0;
                        seen_rate = seen_rate || (atof(f[3]) > 0 && atof(f[4]) >= 0);
                }
                ctl_result_free(&r);
                if (done)
                        break;
        }
        ck_assert_msg(seen_rate, "no refresh showed seq's items starting while %d ran one after another", N);
        ck_assert_msg(seen_infl, "no refresh showed seq's items in flight");
        free(CTL_OK(&d, "flush", "seq"));
}
END_TEST

START_TEST(test_top_json_is_one_object_per_refresh) {
        char *out = CTL_OK(&d, "--json", "top", "--iterations", "3", "--interval", "0.1");
        int lines = 1;

        for (const char *p = out; (p = strchr(p, '\n')); p++)
                lines++;
        ck_assert_msg(lines == 3, "%d lines:\n%s", lines, out);
        for (const char *p = out; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
                ck_assert_msg(strncmp(p, "{\"time_usec\":", 13) == 0, "%s", out);
                ck_assert_msg(strstr(p, "\"pools\":[{\"cpu\":0,") && strstr(p, "\"name\":\"system\""), "%s", out);
                ck_assert_msg(strstr(p, "\"started_per_s\":0.000"), "%s", out);
        }
        free(out);
}
END_TEST

START_TEST(test_top_refuses_bad_options) {
        static const char *const bad[][2] = {
                { "--interval", "0" },
                { "--interval", "x" },
                { "--iterations", "0" },
                { "--iterations", "-1" },
        };
        struct ctl_result r;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                CTL(&d, &r, "top", bad[i][0], bad[i][1]);
                ck_assert_msg(r.status == 2, "top %s %s exited %d", bad[i][0], bad[i][1], r.status);
                ck_assert_msg(strstr(r.err, bad[i][0]), "stderr: %s", r.err);
                ctl_result_free(&r);
        }
        CTL(&d, &r, "top", "extra");
        ck_assert_int_eq(r.status, 2);
        ctl_result_free(&r);
}
END_TEST

static void assert_lints(const char *text) {
        char err[256] = "";

        ck_assert_msg(openmetrics_lint(text, err, sizeof(err)) == 0, "%s in:\n%s", err, text);
}

START_TEST(test_openmetrics_of_a_real_daemon) {
        char path[400], *out;
        struct ctl_result r;
        struct stat st;
        struct dirent *de;
        DIR *dir;

        free(CTL_OK(&d, "create", "mine"));
        free(CTL_OK(&d, "submit", "mine", "--wait", "--", "/bin/true"));
        free(CTL_OK(&d, "submit", "mine", "--wait", "--", "/bin/true"));
        CTL_AS(&d, 65534, &r, "create", "theirs");
        ck_assert_msg(r.status == 0, "%s", r.err);
        ctl_result_free(&r);
        CTL_AS(&d, 65534, &r, "submit", "theirs", "--wait", "--", "/bin/true");
        ck_assert_msg(r.status == 0, "%s", r.err);
        ctl_result_free(&r);

        out = CTL_OK(&d, "stats", "--format=openmetrics");
        /* CTL_OK took the last newline */
        {
                size_t n = strlen(out);
                char *text = malloc(n + 2);

                ck_assert_ptr_nonnull(text);
                memcpy(text, out, n);
                memcpy(text + n, "\n", 2);
                assert_lints(text);
                free(text);
        }
        ck_assert_msg(strstr(out, "\ncmwq_workqueue_started_total{workqueue=\"mine\",uid=\"0\"} 2\n"), "%s", out);
        ck_assert_msg(strstr(out, "\ncmwq_workqueue_completed_total{workqueue=\"mine\",uid=\"0\"} 2\n"), "%s", out);
        ck_assert_msg(strstr(out, "\ncmwq_workqueue_started_total{workqueue=\"theirs\",uid=\"65534\"} 1\n"), "%s",
                      out);
        ck_assert_msg(strstr(out, "\ncmwq_pool_workers{cpu=\"0\",priority=\"normal\"} "), "%s", out);
        ck_assert_msg(strstr(out, "\ncmwq_pool_busy{cpu=\"unbound\",priority=\"highpri\"} 0\n"), "%s", out);
        ck_assert_msg(strlen(out) >= 5 && strcmp(out + strlen(out) - 5, "# EOF") == 0, "%s", out);
        free(out);

        /* Another user sees their own queues and the built-in ones. */
        CTL_AS(&d, 65534, &r, "stats", "--format=openmetrics");
        ck_assert_int_eq(r.status, 0);
        assert_lints(r.out);
        ck_assert_msg(strstr(r.out, "{workqueue=\"theirs\",uid=\"65534\"}"), "%s", r.out);
        ck_assert_msg(strstr(r.out, "{workqueue=\"system\",uid=\"0\"}"), "%s", r.out);
        ck_assert_msg(!strstr(r.out, "\"mine\""), "root's queue shown to another user:\n%s", r.out);
        ctl_result_free(&r);

        /* --output: the file, complete, readable by a collector, and nothing
         * left beside it. */
        test_path(&d, "cmwq.prom", path, sizeof(path));
        free(CTL_OK(&d, "stats", "--format=openmetrics", "--output", path));
        out = read_file(path);
        assert_lints(out);
        free(out);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0644);
        dir = opendir(d.dir);
        ck_assert_ptr_nonnull(dir);
        while ((de = readdir(dir)))
                ck_assert_msg(!strstr(de->d_name, ".tmp."), "left behind: %s", de->d_name);
        closedir(dir);

        /* The table takes each queue's flags from the statistics: the
         * columns that do not apply to it are '-'. */
        out = CTL_OK(&d, "stats");
        {
                char f[9][32];

                ck_assert_int_eq(row_fields(out, "system_unbound", f, 9), 9);
                ck_assert_msg(strcmp(f[4], "-") == 0 && strcmp(f[7], "-") == 0, "%s", out);
                ck_assert_int_eq(row_fields(out, "mine", f, 9), 9);
                /* A number: whether a /bin/true counted as CPU-intensive
                 * depends on the machine (time a VM's host takes counts
                 * as the item's CPU where it reports no steal). */
                ck_assert_msg(strcmp(f[1], "2") == 0 && f[4][0] && strspn(f[4], "0123456789") == strlen(f[4]),
                              "%s", out);
        }
        free(out);

        CTL(&d, &r, "stats", "--format=yaml");
        ck_assert_int_eq(r.status, 2);
        ctl_result_free(&r);
}
END_TEST

int main(void) {
        Suite *s = suite_create("top");
        TCase *tc = tcase_create("top");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_top_plain_shows_pools_and_rates_while_items_run);
        tcase_add_test(tc, test_top_json_is_one_object_per_refresh);
        tcase_add_test(tc, test_top_refuses_bad_options);
        tcase_add_test(tc, test_openmetrics_of_a_real_daemon);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

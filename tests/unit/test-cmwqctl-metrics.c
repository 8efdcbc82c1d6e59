/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* "cmwqctl stats --format=openmetrics|prometheus" as text (metrics_write()),
 * and the checker of the OpenMetrics rules that the integration test runs
 * on a real cmwqd's output: it must refuse each kind of mistake. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmwqctl-metrics.h"
#include "openmetrics-lint.h"

/* Two queues of one name (two owners) and one whose name needs every
 * escape; a bound and an unbound pool. */
static char *write_snapshot(MetricsFormat format) {
        static Cmwq__WorkqueueStats q[3];
        static Cmwq__PoolInfo p[2];
        Cmwq__WorkqueueStats *qs[3] = { &q[0], &q[1], &q[2] };
        Cmwq__PoolInfo *ps[2] = { &p[0], &p[1] };
        Cmwq__SnapshotReply snap = CMWQ__SNAPSHOT_REPLY__INIT;
        char *buf = NULL;
        size_t len = 0;
        FILE *f;

        for (int i = 0; i < 3; i++) {
                cmwq__workqueue_stats__init(&q[i]);
                q[i].total = 10 + (uint64_t) i;
                q[i].in_flight = 1;
                q[i].cpu_usec = 1500000;        /* 1.5 s */
                q[i].has_owner_uid = true;
                q[i].owner_uid = 1000 + (uint32_t) i;
                q[i].has_completed = true;
                q[i].completed = 9;
                q[i].has_watchdog = true;
                q[i].watchdog = 2;
        }
        q[0].name = (char *) "build";
        q[1].name = (char *) "build";
        q[2].name = (char *) "a\"b\\c\nd";
        for (int i = 0; i < 2; i++) {
                cmwq__pool_info__init(&p[i]);
                p[i].workers = 3;
                p[i].has_busy = true;
                p[i].busy = 2;
                p[i].has_started = true;
                p[i].started = 42;
        }
        p[0].cpu = 1;
        p[1].cpu = -1;
        p[1].highpri = true;
        snap.n_workqueues = 3;
        snap.workqueues = qs;
        snap.n_pools = 2;
        snap.pools = ps;

        f = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(f);
        metrics_write(&snap, format, f);
        ck_assert_int_eq(fclose(f), 0);
        return buf;
}

START_TEST(test_openmetrics_output_follows_the_rules) {
        char *text = write_snapshot(METRICS_OPENMETRICS), err[256] = "";
        size_t n = strlen(text);

        ck_assert_msg(openmetrics_lint(text, err, sizeof(err)) == 0, "%s\n%s", err, text);
        ck_assert(n > 6 && strcmp(text + n - 6, "# EOF\n") == 0);
        ck_assert_ptr_nonnull(strstr(text, "# TYPE cmwq_workqueue_started counter\n"));
        ck_assert_ptr_nonnull(strstr(text, "\ncmwq_workqueue_started_total{workqueue=\"build\",uid=\"1000\"} 10\n"));
        ck_assert_ptr_nonnull(strstr(text, "\ncmwq_workqueue_started_total{workqueue=\"build\",uid=\"1001\"} 11\n"));
        ck_assert_ptr_nonnull(strstr(text, "{workqueue=\"a\\\"b\\\\c\\nd\",uid=\"1002\"} 12\n"));
        ck_assert_ptr_nonnull(strstr(text, "# UNIT cmwq_workqueue_cpu_seconds seconds\n"));
        ck_assert_ptr_nonnull(strstr(text, "cmwq_workqueue_cpu_seconds_total{workqueue=\"build\",uid=\"1000\"} 1.500000\n"));
        ck_assert_ptr_nonnull(strstr(text, "cmwq_workqueue_stalls_total{workqueue=\"build\",uid=\"1000\"} 2\n"));
        ck_assert_ptr_nonnull(strstr(text, "\ncmwq_pool_busy{cpu=\"1\",priority=\"normal\"} 2\n"));
        ck_assert_ptr_nonnull(strstr(text, "\ncmwq_pool_started_total{cpu=\"unbound\",priority=\"highpri\"} 42\n"));
        free(text);
}
END_TEST

START_TEST(test_prometheus_output_names_counters_with_total) {
        char *text = write_snapshot(METRICS_PROMETHEUS);

        ck_assert_ptr_nonnull(strstr(text, "# TYPE cmwq_workqueue_started_total counter\n"));
        ck_assert_ptr_nonnull(strstr(text, "# TYPE cmwq_pool_busy gauge\n"));
        ck_assert_ptr_null(strstr(text, "# UNIT"));
        ck_assert_ptr_null(strstr(text, "# EOF"));
        free(text);
}
END_TEST

static const struct {
        const char *text;
        const char *why;        /* in the checker's message */
} bad_texts[] = {
        { "a 1\n", "no '# EOF'" },
        { "a 1\n# EOF\nb 2\n", "after '# EOF'" },
        { "a 1\n\n# EOF\n", "empty line" },
        { "a 1\n# EOF", "without a newline" },
        { "# a comment\n# EOF\n", "a comment other than" },
        { "# TYPE x_total counter\nx_total_total 1\n# EOF\n", "ends in _total" },
        { "# TYPE x counter\nx 1\n# EOF\n", "does not belong" },
        { "# TYPE x gauge\n# TYPE x gauge\nx 1\n# EOF\n", "second TYPE" },
        { "# HELP x a\n# HELP x b\nx 1\n# EOF\n", "second HELP" },
        { "# HELP x a\\tb\nx 1\n# EOF\n", "invalid escape in HELP" },
        { "# TYPE x nonsense\n# EOF\n", "unknown type" },
        { "# TYPE x_bytes gauge\n# UNIT x_bytes seconds\nx_bytes 1\n# EOF\n", "does not end with its unit" },
        { "x 1\n# TYPE x gauge\n# EOF\n", "after its samples" },
        { "x{a=\"1\"} 1\ny 2\nx{a=\"2\"} 3\n# EOF\n", "appears again" },
        { "x{a=\"1\",b=\"2\"} 1\nx{b=\"2\",a=\"1\"} 1\n# EOF\n", "twice" },
        { "x{a=\"1\",a=\"2\"} 1\n# EOF\n", "label 'a' twice" },
        { "x{a=\"\\t\"} 1\n# EOF\n", "invalid escape" },
        { "x{a=1} 1\n# EOF\n", "not quoted" },
        { "x{a=\"1\",} 1\n# EOF\n", "expected ','" },
        { "x{1a=\"1\"} 1\n# EOF\n", "invalid label name" },
        { "1x 1\n# EOF\n", "invalid metric name" },
        { "x  1\n# EOF\n", "invalid value" },
        { "x one\n# EOF\n", "invalid value" },
        { "# TYPE x counter\nx_total -1\n# EOF\n", "has value" },
};

START_TEST(test_lint_refuses_each_mistake) {
        char err[256] = "";

        ck_assert_msg(openmetrics_lint(bad_texts[_i].text, err, sizeof(err)) < 0, "accepted: %s",
                      bad_texts[_i].text);
        ck_assert_msg(strstr(err, bad_texts[_i].why), "for %s: expected '%s', got '%s'", bad_texts[_i].text,
                      bad_texts[_i].why, err);
}
END_TEST

START_TEST(test_lint_accepts_the_specifications_examples) {
        static const char *const good[] = {
                "# EOF\n",
                "# HELP x A \\\"quoted\\\" help\\n\n# TYPE x gauge\nx{a=\"\\\\\"} 1.5e3 1600000000.5\n# EOF\n",
                "# TYPE c counter\n# UNIT c_seconds seconds\n# EOF\n",
                "# TYPE c_seconds counter\n# UNIT c_seconds seconds\nc_seconds_total 0.5\nc_seconds_created 1\n# EOF\n",
                "x +Inf\ny NaN\n# EOF\n",
        };
        char err[256];

        /* A family may have no sample; an empty exposition is "# EOF". */
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
                ck_assert_msg(openmetrics_lint(good[i], err, sizeof(err)) == 0, "%s: %s", good[i], err);
}
END_TEST

int main(void) {
        Suite *s = suite_create("cmwqctl-metrics");
        TCase *tc = tcase_create("metrics");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_openmetrics_output_follows_the_rules);
        tcase_add_test(tc, test_prometheus_output_names_counters_with_total);
        tcase_add_loop_test(tc, test_lint_refuses_each_mistake, 0, (int) (sizeof(bad_texts) / sizeof(bad_texts[0])));
        tcase_add_test(tc, test_lint_accepts_the_specifications_examples);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

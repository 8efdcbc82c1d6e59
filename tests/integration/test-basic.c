/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The shell user's first steps: create, submit, wait, show, list, destroy. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

START_TEST(test_submit_wait_prints_output_and_exit_status) {
        struct ctl_result r;

        CTL(&d, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c", "echo hello; echo oops >&2; exit 7");
        ck_assert_int_eq(r.status, 7);
        ck_assert_str_eq(r.out, "hello\n");
        ck_assert_msg(strstr(r.err, "oops\n"), "stderr was: %s", r.err);
        ctl_result_free(&r);
}
END_TEST

START_TEST(test_submit_prints_id_then_wait_and_show) {
        struct ctl_result r;
        char *id, *shown;

        id = CTL_OK(&d, "submit", "system", "--", "/bin/echo", "from-the-queue");
        ck_assert_msg(strtoull(id, NULL, 10) > 0, "submit printed '%s', not an id", id);

        CTL(&d, &r, "wait", id);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, "from-the-queue\n");
        ctl_result_free(&r);

        shown = CTL_OK(&d, "show", id);
        ck_assert_msg(strstr(shown, "finished"), "show said: %s", shown);
        ck_assert_msg(strstr(shown, "/bin/echo"), "show said: %s", shown);
        free(shown);
        free(id);
}
END_TEST

START_TEST(test_create_list_destroy) {
        struct ctl_result r;
        char *out;

        free(CTL_OK(&d, "create", "mine", "--max-active", "3"));
        out = CTL_OK(&d, "list");
        ck_assert_msg(strstr(out, "mine"), "list said: %s", out);
        ck_assert_msg(strstr(out, "system_unbound"), "the built-in queues are missing: %s", out);
        free(out);

        out = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(out, "\"mine\""), "list --json said: %s", out);
        ck_assert_msg(out[0] == '[' || out[0] == '{', "not JSON: %s", out);
        free(out);

        CTL(&d, &r, "create", "mine");
        ck_assert_int_eq(r.status, 1);
        ck_assert_msg(strstr(r.err, "already exists"), "stderr: %s", r.err);
        ctl_result_free(&r);

        free(CTL_OK(&d, "destroy", "mine"));
        out = CTL_OK(&d, "list");
        ck_assert_msg(!strstr(out, "mine "), "destroyed queue still listed: %s", out);
        free(out);
}
END_TEST

START_TEST(test_unknown_queue_is_one_clear_line) {
        struct ctl_result r;

        CTL(&d, &r, "submit", "no-such-queue", "--", "/bin/true");
        ck_assert_int_eq(r.status, 1);
        ck_assert_msg(strstr(r.err, "no-such-queue"), "stderr: %s", r.err);
        ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "more than one line: %s", r.err);
        ctl_result_free(&r);
}
END_TEST

START_TEST(test_pools_and_stats) {
        char *out;

        free(CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/true"));
        out = CTL_OK(&d, "pools");
        ck_assert_msg(strstr(out, "unbound"), "pools said: %s", out);
        free(out);
        out = CTL_OK(&d, "--json", "stats");
        ck_assert_msg(strstr(out, "\"system\""), "stats said: %s", out);
        free(out);
}
END_TEST

START_TEST(test_stdin_payload_and_environment) {
        char path[400], *out;
        FILE *f;

        test_path(&d, "payload", path, sizeof(path));
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("line one\nline two\n", f);
        fclose(f);

        out = CTL_OK(&d, "submit", "system", "--stdin", path, "--wait", "--", "/bin/cat");
        ck_assert_str_eq(out, "line one\nline two");
        free(out);

        setenv("CMWQ_TEST_MARKER", "marker-value", 1);
        out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", "echo $CMWQ_TEST_MARKER");
        ck_assert_str_eq(out, "marker-value");
        free(out);
}
END_TEST

/* Items pending at the same time, some with the same environment and some
 * not (cmwqd keeps one copy of each environment): each runs with the
 * environment it was submitted with. */
START_TEST(test_items_pending_together_run_with_their_own_environments) {
        static const char *const markers[] = { "one", "one", "two", NULL, "one" };
        char *ids[5];

        for (size_t k = 0; k < 5; k++)
                ids[k] = submit_marker_item(&d, markers[k], "1");
        for (size_t k = 0; k < 5; k++) {
                assert_marker_item_printed(&d, ids[k], markers[k]);
                free(ids[k]);
        }
}
END_TEST

START_TEST(test_cwd_is_the_submitters) {
        char *out;

        ck_assert_int_eq(chdir(d.dir), 0);
        out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/pwd");
        ck_assert_str_eq(out, d.dir);
        free(out);
}
END_TEST

START_TEST(test_exec_failure_reported) {
        struct ctl_result r;

        CTL(&d, &r, "submit", "system", "--wait", "--", "/nonexistent/program");
        ck_assert_int_eq(r.status, 127);
        ck_assert_msg(strstr(r.err, "No such file"), "stderr: %s", r.err);
        ctl_result_free(&r);
}
END_TEST

/* cmwqd started from a shell gets SIGHUP when the terminal closes: it
 * says so in its log and goes on serving, its running item with it.
 * Before, it died without a word and left the item running unwatched. */
START_TEST(test_sighup_is_ignored) {
        char *id, *out, *log = NULL;
        int waited;

        id = CTL_OK(&d, "submit", "system", "--", "/bin/sleep", "60");
        for (waited = 0;; waited += 20) {
                out = CTL_OK(&d, "show", id);
                if (strstr(out, "state:         running")) {
                        free(out);
                        break;
                }
                free(out);
                ck_assert_msg(waited < 15000, "item %s did not start", id);
                usleep(20000);
        }

        ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
        for (waited = 0; !log || !strstr(log, "Received SIGHUP: ignored"); waited += 20) {
                free(log);
                ck_assert_msg(waited < 15000, "cmwqd did not log the SIGHUP");
                usleep(20000);
                log = read_file(d.log);
        }
        free(log);
        out = CTL_OK(&d, "show", id);
        ck_assert_msg(strstr(out, "state:         running"), "after SIGHUP: %s", out);
        free(out);
        free(CTL_OK(&d, "cancel", id));
        free(id);
}
END_TEST

static long context_switches(pid_t pid) {
        char path[64], *status, *p;
        long total = 0;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        status = read_file(path);
        for (p = status; (p = strstr(p, "ctxt_switches:")); p++)
                total += strtol(p + strlen("ctxt_switches:"), NULL, 10);
        free(status);
        return total;
}

/* The daemon's state letter (R, S, ...) from /proc/PID/stat. */
static char proc_state(pid_t pid) {
        char path[64], *stat, *p, state;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        stat = read_file(path);
        p = strrchr(stat, ')');
        state = p && p[1] == ' ' ? p[2] : '?';
        free(stat);
        return state;
}

START_TEST(test_idle_daemon_never_wakes_up) {
        long before, after;

        /* Let it finish start-up and a first client: asleep, and no switch
         * for half a second (on a loaded machine it may take a while to
         * get there), then watch it idle. */
        free(CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/true"));
        for (int waited = 0;; waited++) {
                before = context_switches(d.pid);
                usleep(500 * 1000);
                if (proc_state(d.pid) == 'S' && context_switches(d.pid) == before)
                        break;
                ck_assert_msg(waited < 120, "cmwqd never settled: it keeps waking up");
        }
        before = context_switches(d.pid);
        usleep(2 * 1000 * 1000);
        after = context_switches(d.pid);
        ck_assert_msg(after == before, "an idle cmwqd woke up %ld times in 2 s", after - before);
}
END_TEST

START_TEST(test_plugin_found_in_plugin_dir) {
        struct cmwqd pd;
        char plugins[400], script[500], *out;
        FILE *f;

        snprintf(plugins, sizeof(plugins), "%s/plugins", d.dir);
        ck_assert_int_eq(mkdir(plugins, 0755), 0);
        snprintf(script, sizeof(script), "%s/hello-plugin", plugins);
        f = fopen(script, "w");
        ck_assert_ptr_nonnull(f);
        fputs("#!/bin/sh\necho plugin says $1\n", f);
        fclose(f);
        ck_assert_int_eq(chmod(script, 0755), 0);

        cmwqd_start(&pd, (const char *const[]) { "--plugin-dir", plugins, NULL });
        out = CTL_OK(&pd, "submit", "system", "--wait", "--", "hello-plugin", "hi");
        ck_assert_str_eq(out, "plugin says hi");
        free(out);
        cmwqd_stop(&pd);
}
END_TEST

int main(void) {
        Suite *s = suite_create("basic");
        TCase *tc = tcase_create("basic");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_submit_wait_prints_output_and_exit_status);
        tcase_add_test(tc, test_submit_prints_id_then_wait_and_show);
        tcase_add_test(tc, test_create_list_destroy);
        tcase_add_test(tc, test_unknown_queue_is_one_clear_line);
        tcase_add_test(tc, test_pools_and_stats);
        tcase_add_test(tc, test_stdin_payload_and_environment);
        tcase_add_test(tc, test_items_pending_together_run_with_their_own_environments);
        tcase_add_test(tc, test_cwd_is_the_submitters);
        tcase_add_test(tc, test_exec_failure_reported);
        tcase_add_test(tc, test_sighup_is_ignored);
        tcase_add_test(tc, test_idle_daemon_never_wakes_up);
        tcase_add_test(tc, test_plugin_found_in_plugin_dir);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

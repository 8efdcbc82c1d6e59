/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Load, the small version of the benchmark (tests/bench/cmwq-load.c, run
 * with 1,000 x 100 by "make bench"): 100 concurrent clients, each with a
 * connection of its own, submit 20 items each and flush, twice.  Every item
 * runs exactly once, and cmwqd holds as many fds afterwards as before.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

START_TEST(test_concurrent_clients_lose_nothing) {
        const char *tool = getenv("CMWQ_LOAD");
        char pid[16], out_path[400], cmd[2048], *out;
        struct cmwqd d;
        int status;

        ck_assert_msg(tool && tool[0], "$CMWQ_LOAD is not set: run the tests through 'make check'");
        cmwqd_start(&d, NULL);
        snprintf(pid, sizeof(pid), "%d", (int) d.pid);
        test_path(&d, "load.out", out_path, sizeof(out_path));
        snprintf(cmd, sizeof(cmd), "'%s' clients '%s' %s 100 20 '%s' 2 > '%s' 2>&1", tool, d.socket, pid, d.dir,
                 out_path);
        status = system(cmd);
        out = read_file(out_path);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "cmwq-load failed (status 0x%x):\n%s", status,
                      out);
        /* What it checked, as a person reads it. */
        ck_assert_msg(strstr(out, " round 2: ") && strstr(out, "items: 2000 ran, lost 0, ran twice 0, garbled 0"),
                      "%s", out);
        fprintf(stderr, "%s", out);
        free(out);
        cmwqd_stop(&d);
}
END_TEST

int main(void) {
        Suite *s = suite_create("load");
        TCase *tc = tcase_create("load");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_concurrent_clients_lose_nothing);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit tests for daemon/core/item-env.c: items that carry the same
 * environment share one copy, equal only when every string is, and the
 * last item to let go frees it.  (An end-to-end check that each item still
 * runs with its own environment is in tests/integration/test-basic.)
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/item-env.h"

static char *env_a[] = { "PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8", NULL };
static char *env_b[] = { "PATH=/usr/bin:/bin", "HOME=/home/b", "LANG=C.UTF-8", NULL };

static void assert_strv_equal(char **got, char *const *want, size_t n) {
        for (size_t k = 0; k < n; k++)
                ck_assert_str_eq(got[k], want[k]);
        ck_assert_ptr_null(got[n]);
}

START_TEST(test_same_environment_is_kept_once) {
        struct item_env_table t;
        struct item_env *e1, *e2, *e3;
        char *copy[] = { strdup(env_a[0]), strdup(env_a[1]), strdup(env_a[2]), NULL };

        item_env_table_init(&t);
        ck_assert_int_eq(item_env_get(&t, env_a, 3, &e1), 0);
        /* Equal strings at other addresses: the same copy. */
        ck_assert_int_eq(item_env_get(&t, copy, 3, &e2), 0);
        ck_assert_ptr_eq(e1, e2);
        /* One string differs: another copy. */
        ck_assert_int_eq(item_env_get(&t, env_b, 3, &e3), 0);
        ck_assert_ptr_ne(e1, e3);
        /* A prefix of it is not it either. */
        ck_assert_int_eq(item_env_get(&t, env_a, 2, &e2), 0);
        ck_assert_ptr_ne(e1, e2);

        assert_strv_equal(item_env_strv(e1), env_a, 3);
        assert_strv_equal(item_env_strv(e3), env_b, 3);
        assert_strv_equal(item_env_strv(e2), env_a, 2);
        ck_assert_uint_eq(item_env_bytes(e1), strlen(env_a[0]) + strlen(env_a[1]) + strlen(env_a[2]) + 3);

        item_env_put(&t, e2);
        item_env_put(&t, e3);
        item_env_put(&t, e1);
        /* e1 was got twice: still there, and still found. */
        ck_assert_int_eq(item_env_get(&t, env_a, 3, &e2), 0);
        ck_assert_ptr_eq(e1, e2);
        assert_strv_equal(item_env_strv(e2), env_a, 3);
        item_env_put(&t, e2);
        item_env_put(&t, e1);
        item_env_table_done(&t);
        for (size_t k = 0; k < 3; k++)
                free(copy[k]);
}
END_TEST

START_TEST(test_empty_environment_is_no_allocation) {
        struct item_env_table t;
        struct item_env *e = (struct item_env *) &t;

        item_env_table_init(&t);
        ck_assert_int_eq(item_env_get(&t, NULL, 0, &e), 0);
        ck_assert_ptr_null(e);
        ck_assert_ptr_null(item_env_strv(e)[0]);
        ck_assert_uint_eq(item_env_bytes(e), 0);
        item_env_put(&t, e);
        item_env_table_done(&t);
}
END_TEST

/* Many distinct environments (each item of a script that sets a counter
 * in its environment): each found again, each freed when its last
 * reference goes, whatever the chains look like. */
START_TEST(test_many_distinct_environments) {
        enum { N = 5000 };
        struct item_env_table t;
        static struct item_env *got[N], *again[N];
        char buf[64];

        item_env_table_init(&t);
        for (int k = 0; k < N; k++) {
                char *env[] = { "PATH=/bin", buf, NULL };

                snprintf(buf, sizeof(buf), "N=%d", k);
                ck_assert_int_eq(item_env_get(&t, env, 2, &got[k]), 0);
        }
        for (int k = 0; k < N; k++) {
                char *env[] = { "PATH=/bin", buf, NULL };

                snprintf(buf, sizeof(buf), "N=%d", k);
                ck_assert_int_eq(item_env_get(&t, env, 2, &again[k]), 0);
                ck_assert_str_eq(item_env_strv(again[k])[1], buf);
        }
        /* A chain full of others may have left some private: found again
         * they are equal copies, not the same one; most are the same. */
        {
                int same = 0;

                for (int k = 0; k < N; k++)
                        same += got[k] == again[k];
                ck_assert_int_gt(same, N * 9 / 10);
        }
        for (int k = 0; k < N; k++) {
                item_env_put(&t, got[k]);
                item_env_put(&t, again[k]);
        }
        ck_assert_uint_eq(t.n, 0);
        item_env_table_done(&t);
}
END_TEST

static Suite *item_env_suite(void) {
        Suite *s = suite_create("item-env");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_same_environment_is_kept_once);
        tcase_add_test(tc, test_empty_environment_is_no_allocation);
        tcase_add_test(tc, test_many_distinct_environments);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(item_env_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqctl's pure helpers: the JSON writer and escaper, the argument
 * parsers, the exit status of an item. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmwqctl-json.h"
#include "cmwqctl-util.h"

/* Escape @n bytes and return the JSON text (caller frees). */
static char *escape(const void *p, size_t n) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        ck_assert_ptr_nonnull(f);
        json_write_escaped(f, p, n);
        ck_assert_int_eq(fclose(f), 0);
        return buf;
}

#define ASSERT_ESCAPE(in, expected)                                     \
        do {                                                            \
                char *_s = escape(in, sizeof(in) - 1);                  \
                ck_assert_str_eq(_s, expected);                         \
                free(_s);                                               \
        } while (0)

START_TEST(test_escape_ascii) {
        ASSERT_ESCAPE("", "\"\"");
        ASSERT_ESCAPE("plain text", "\"plain text\"");
        ASSERT_ESCAPE("q\"b\\s/", "\"q\\\"b\\\\s/\"");
        ASSERT_ESCAPE("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
        ASSERT_ESCAPE("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
        /* NUL in the middle is data, not the end */
        ASSERT_ESCAPE("a\0b", "\"a\\u0000b\"");
}
END_TEST

START_TEST(test_escape_utf8) {
        /* valid sequences of every length pass through */
        ASSERT_ESCAPE("\xc3\xa9", "\"\xc3\xa9\"");                     /* é */
        ASSERT_ESCAPE("\xe2\x82\xac", "\"\xe2\x82\xac\"");             /* € */
        ASSERT_ESCAPE("\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\"");     /* U+1F600 */
        ASSERT_ESCAPE("\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\"");     /* U+10FFFF */

        /* every invalid byte becomes U+FFFD, the rest survives */
        ASSERT_ESCAPE("\xff", "\"\\ufffd\"");
        ASSERT_ESCAPE("a\x80z", "\"a\\ufffdz\"");                       /* stray continuation */
        ASSERT_ESCAPE("\xc3", "\"\\ufffd\"");                           /* cut short at the end */
        ASSERT_ESCAPE("\xc3z", "\"\\ufffdz\"");                         /* cut short */
        ASSERT_ESCAPE("\xc0\xaf", "\"\\ufffd\\ufffd\"");                /* overlong '/' */
        ASSERT_ESCAPE("\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"");     /* overlong */
        ASSERT_ESCAPE("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");     /* surrogate D800 */
        ASSERT_ESCAPE("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  /* > U+10FFFF */
        ASSERT_ESCAPE("\xf5\x80", "\"\\ufffd\\ufffd\"");
        ASSERT_ESCAPE("\xe2\x82", "\"\\ufffd\\ufffd\"");                /* 3-byte cut short */

        ck_assert(utf8_is_valid("\xc3\xa9 ok", 5));
        ck_assert(!utf8_is_valid("\xc3", 1));
        ck_assert(utf8_is_valid("", 0));
}
END_TEST

/* Every byte value, alone and in pairs, gives text a strict reader would
 * accept: only printable ASCII, escapes, and well-formed UTF-8. */
START_TEST(test_escape_all_bytes_valid) {
        for (unsigned a = 0; a < 256; a++)
                for (unsigned b = 0; b < 256; b += 17) {
                        uint8_t in[2] = { (uint8_t) a, (uint8_t) b };
                        char *s = escape(in, sizeof(in));
                        size_t n = strlen(s);

                        ck_assert_uint_ge(n, 2);
                        ck_assert(s[0] == '"' && s[n - 1] == '"');
                        ck_assert(utf8_is_valid(s, n));
                        for (size_t i = 1; i < n - 1; i++) {
                                unsigned char c = (unsigned char) s[i];

                                ck_assert_uint_ge(c, 0x20);
                                ck_assert_uint_ne(c, 0x7f);
                                if (c == '"')
                                        ck_abort_msg("unescaped quote for %02x %02x: %s", a, b, s);
                                if (c == '\\') {
                                        ck_assert_ptr_nonnull(strchr("\"\\bfnrtu", s[i + 1]));
                                        i++;
                                }
                        }
                        free(s);
                }
}
END_TEST

START_TEST(test_writer) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        JsonWriter w;

        json_init(&w, f);
        json_object_begin(&w);
        json_kv_uint(&w, "a", 18446744073709551615u);
        json_kv_int(&w, "b", -5);
        json_key(&w, "c");
        json_array_begin(&w);
        json_array_end(&w);
        json_key(&w, "d");
        json_array_begin(&w);
        json_bool(&w, true);
        json_null(&w);
        json_string(&w, NULL);
        json_object_begin(&w);
        json_object_end(&w);
        json_string_len(&w, "x\ny", 3);
        json_array_end(&w);
        json_key(&w, "e\"");
        json_base64(&w, "any carnal pleasure", 19);
        json_key(&w, "f");
        json_base64(&w, "ab", 2);
        json_key(&w, "g");
        json_base64(&w, "", 0);
        json_object_end(&w);
        ck_assert_int_eq(json_finish(&w), 0);
        fclose(f);

        ck_assert_str_eq(buf, "{\"a\":18446744073709551615,\"b\":-5,\"c\":[],"
                              "\"d\":[true,null,null,{},\"x\\ny\"],"
                              "\"e\\\"\":\"YW55IGNhcm5hbCBwbGVhc3VyZQ==\",\"f\":\"YWI=\",\"g\":\"\"}\n");
        free(buf);
}
END_TEST

START_TEST(test_parse_seconds) {
        uint64_t u = 0;

        ck_assert_int_eq(parse_seconds_usec("0", &u), 0);
        ck_assert_uint_eq(u, 0);
        ck_assert_int_eq(parse_seconds_usec("2", &u), 0);
        ck_assert_uint_eq(u, 2000000);
        ck_assert_int_eq(parse_seconds_usec("0.5", &u), 0);
        ck_assert_uint_eq(u, 500000);
        ck_assert_int_eq(parse_seconds_usec(".25", &u), 0);
        ck_assert_uint_eq(u, 250000);
        ck_assert_int_eq(parse_seconds_usec("3.", &u), 0);
        ck_assert_uint_eq(u, 3000000);
        ck_assert_int_eq(parse_seconds_usec("1.0000019", &u), 0);
        ck_assert_uint_eq(u, 1000001);
        ck_assert_int_eq(parse_seconds_usec("18446744073709", &u), 0);
        ck_assert_uint_eq(u, 18446744073709000000u);

        u = 77;
        for (const char *const *s = (const char *const[]) {
                     "", ".", "-1", "+1", "-0.5", " 1", "1 ", "1s", "1e3", "0x10", "inf", "nan", "1.2.3", "1,5",
                     NULL }; *s; s++)
                ck_assert_msg(parse_seconds_usec(*s, &u) == -EINVAL, "'%s' accepted", *s);
        ck_assert_int_eq(parse_seconds_usec("18446744073710", &u), -ERANGE);
        ck_assert_int_eq(parse_seconds_usec("18446744073709.999999", &u), -ERANGE);
        ck_assert_int_eq(parse_seconds_usec("99999999999999999999999", &u), -ERANGE);
        ck_assert_uint_eq(u, 77);       /* untouched on failure */
}
END_TEST

START_TEST(test_parse_numbers) {
        uint64_t u;
        uint32_t v;
        int32_t c;

        ck_assert_int_eq(parse_uint64("18446744073709551615", &u), 0);
        ck_assert_uint_eq(u, UINT64_MAX);
        ck_assert_int_eq(parse_uint64("18446744073709551616", &u), -ERANGE);
        ck_assert_int_eq(parse_uint64("", &u), -EINVAL);
        ck_assert_int_eq(parse_uint64("-1", &u), -EINVAL);
        ck_assert_int_eq(parse_uint64("1x", &u), -EINVAL);
        ck_assert_int_eq(parse_uint32("4294967295", &v), 0);
        ck_assert_uint_eq(v, UINT32_MAX);
        ck_assert_int_eq(parse_uint32("4294967296", &v), -ERANGE);
        ck_assert_int_eq(parse_cpu("0", &c), 0);
        ck_assert_int_eq(c, 0);
        ck_assert_int_eq(parse_cpu("2147483648", &c), -ERANGE);
        ck_assert_int_eq(parse_cpu("-1", &c), -EINVAL);
        ck_assert_int_eq(parse_cpu("0.5", &c), -EINVAL);
}
END_TEST

START_TEST(test_program_make_absolute) {
        static const struct {
                const char *program, *cwd, *expected;
        } cases[] = {
                { "/bin/true", "/home/u", "/bin/true" },
                { "true", "/home/u", "true" },
                { "./run.sh", "/home/u", "/home/u/run.sh" },
                { ".//./run.sh", "/home/u", "/home/u/run.sh" },
                { "bin/x", "/home/u", "/home/u/bin/x" },
                { "../x", "/home/u", "/home/u/../x" },
                { "bin/x", "/", "/bin/x" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char *p = program_make_absolute(cases[i].program, cases[i].cwd);

                ck_assert_str_eq(p, cases[i].expected);
                free(p);
        }
}
END_TEST

START_TEST(test_item_exit_code) {
        Cmwq__ItemInfo i = CMWQ__ITEM_INFO__INIT;

        i.state = CMWQ__ITEM_STATE__STATE_RUNNING;
        ck_assert_int_eq(item_exit_code(&i), -EAGAIN);
        i.state = CMWQ__ITEM_STATE__STATE_PENDING;
        ck_assert_int_eq(item_exit_code(&i), -EAGAIN);

        i.state = CMWQ__ITEM_STATE__STATE_FINISHED;
        ck_assert_int_eq(item_exit_code(&i), 0);
        i.has_exit_status = true;
        i.exit_status = 42;
        ck_assert_int_eq(item_exit_code(&i), 42);
        i.exit_status = 0;
        i.has_signal = true;
        i.signal = SIGTERM;
        ck_assert_int_eq(item_exit_code(&i), 128 + SIGTERM);
        i.has_timed_out = true;
        i.timed_out = true;
        ck_assert_int_eq(item_exit_code(&i), CTL_EXIT_ITEM_TIMED_OUT);

        i.state = CMWQ__ITEM_STATE__STATE_CANCELLED;
        ck_assert_int_eq(item_exit_code(&i), CTL_EXIT_ITEM_CANCELLED);
        i.state = CMWQ__ITEM_STATE__STATE_FAILED;
        ck_assert_int_eq(item_exit_code(&i), CTL_EXIT_ITEM_NOT_STARTED);
}
END_TEST

START_TEST(test_flags_to_string) {
        char buf[128];

        ck_assert_str_eq(workqueue_flags_to_string(0, buf, sizeof(buf)), "-");
        ck_assert_str_eq(workqueue_flags_to_string(CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND |
                                                   CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED, buf, sizeof(buf)),
                         "unbound,ordered");
        ck_assert_str_eq(workqueue_flags_to_string(CMWQ__WORKQUEUE_FLAG__FLAG_HIGHPRI | 0x100, buf, sizeof(buf)),
                         "highpri,0x100");
        ck_assert_str_eq(workqueue_flag_to_string(CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM), "mem_reclaim");
        ck_assert_ptr_null(workqueue_flag_to_string(8));
        /* a short buffer is cut, not overrun */
        ck_assert_str_eq(workqueue_flags_to_string(CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND |
                                                   CMWQ__WORKQUEUE_FLAG__FLAG_FREEZABLE, buf, 10), "unbound,f");
}
END_TEST

START_TEST(test_shell_quote) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "plain/path-1.0", "plain/path-1.0" },
                { "", "''" },
                { "a b", "'a b'" },
                { "it's", "'it'\\''s'" },
                { "$HOME", "'$HOME'" },
                { "a\nb", "$'a\\nb'" },
                { "x\x01'", "$'x\\x01\\''" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char *buf = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&buf, &len);

                fputs_shell_quoted(f, cases[i].in);
                fclose(f);
                ck_assert_str_eq(buf, cases[i].out);
                free(buf);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("cmwqctl-util");
        TCase *tc = tcase_create("cmwqctl-util");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_escape_ascii);
        tcase_add_test(tc, test_escape_utf8);
        tcase_add_test(tc, test_escape_all_bytes_valid);
        tcase_add_test(tc, test_writer);
        tcase_add_test(tc, test_parse_seconds);
        tcase_add_test(tc, test_parse_numbers);
        tcase_add_test(tc, test_program_make_absolute);
        tcase_add_test(tc, test_item_exit_code);
        tcase_add_test(tc, test_flags_to_string);
        tcase_add_test(tc, test_shell_quote);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

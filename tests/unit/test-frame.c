/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "frame.h"

START_TEST(test_header_roundtrip) {
        uint8_t buf[CMWQ_FRAME_HEADER_SIZE + 300] = { 0 };
        uint32_t len = 0;
        size_t frame_len = 0;

        frame_header_encode(buf, 300);
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), 1);
        ck_assert_uint_eq(len, 300);
        ck_assert_uint_eq(frame_len, CMWQ_FRAME_HEADER_SIZE + 300);
}
END_TEST

START_TEST(test_split_frame_needs_more) {
        uint8_t buf[CMWQ_FRAME_HEADER_SIZE + 10];
        uint32_t len = 7777;
        size_t frame_len = 7777;

        frame_header_encode(buf, 10);
        /* Every prefix shorter than the whole frame asks for more and leaves the outputs alone. */
        for (size_t avail = 0; avail < sizeof(buf); avail++) {
                ck_assert_int_eq(frame_parse(buf, avail, CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), 0);
                ck_assert_uint_eq(len, 7777);
        }
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), 1);
}
END_TEST

START_TEST(test_empty_payload_is_a_frame) {
        uint8_t buf[CMWQ_FRAME_HEADER_SIZE];
        uint32_t len = 1;
        size_t frame_len = 0;

        frame_header_encode(buf, 0);
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), 1);
        ck_assert_uint_eq(len, 0);
        ck_assert_uint_eq(frame_len, CMWQ_FRAME_HEADER_SIZE);
}
END_TEST

START_TEST(test_oversized_refused_before_payload) {
        uint8_t buf[CMWQ_FRAME_HEADER_SIZE];
        uint32_t len = 0;
        size_t frame_len = 0;

        /* Only the header is there: the size is judged before any payload arrives. */
        frame_header_encode(buf, CMWQ_FRAME_MAX_PAYLOAD + 1);
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), -EMSGSIZE);
        frame_header_encode(buf, UINT32_MAX);
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), -EMSGSIZE);
        frame_header_encode(buf, 100);
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), 99, &len, &frame_len), -EMSGSIZE);
}
END_TEST

START_TEST(test_two_frames_back_to_back) {
        uint8_t buf[2 * CMWQ_FRAME_HEADER_SIZE + 5 + 3];
        uint32_t len;
        size_t frame_len;

        frame_header_encode(buf, 5);
        memset(buf + 4, 'a', 5);
        frame_header_encode(buf + 9, 3);
        memset(buf + 13, 'b', 3);
        ck_assert_int_eq(frame_parse(buf, sizeof(buf), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), 1);
        ck_assert_uint_eq(len, 5);
        ck_assert_int_eq(frame_parse(buf + frame_len, sizeof(buf) - frame_len, CMWQ_FRAME_MAX_PAYLOAD,
                                     &len, &frame_len), 1);
        ck_assert_uint_eq(len, 3);
}
END_TEST

int main(void) {
        Suite *s = suite_create("frame");
        TCase *tc = tcase_create("frame");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_header_roundtrip);
        tcase_add_test(tc, test_split_frame_needs_more);
        tcase_add_test(tc, test_empty_payload_is_a_frame);
        tcase_add_test(tc, test_oversized_refused_before_payload);
        tcase_add_test(tc, test_two_frames_back_to_back);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

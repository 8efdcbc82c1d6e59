/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The durable log's record format and its reading back (daemon/store/format.c),
 * and daemon/store/store.c on a real file: a torn end is cut off, the rest replayed. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/format.h"
#include "store/store.h"

/* A log image: the magic and @n ItemStarted records with ids 1..n; the
 * offsets where each record starts go to @starts. */
static void build_log(struct store_buf *b, int n, size_t *starts) {
        *b = (struct store_buf) {};
        ck_assert_int_eq(store_buf_reserve(b, STORE_MAGIC_SIZE), 0);
        memcpy(b->data, STORE_MAGIC, STORE_MAGIC_SIZE);
        b->len = STORE_MAGIC_SIZE;
        for (int k = 0; k < n; k++) {
                CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
                CmwqStore__ItemStarted st = CMWQ_STORE__ITEM_STARTED__INIT;

                st.id = (uint64_t) k + 1;
                st.has_started_usec = true;
                st.started_usec = 1000000u * (uint64_t) k;
                rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_STARTED;
                rec.item_started = &st;
                if (starts)
                        starts[k] = b->len;
                ck_assert_int_eq(store_record_append(b, &rec), 0);
        }
}

struct seen {
        uint64_t ids[64];
        int n;
        int stop_after;
};

static int collect(const CmwqStore__Record *rec, void *userdata) {
        struct seen *s = userdata;

        ck_assert_int_eq(rec->body_case, CMWQ_STORE__RECORD__BODY_ITEM_STARTED);
        s->ids[s->n++] = rec->item_started->id;
        return s->stop_after && s->n == s->stop_after ? 1 : 0;
}

START_TEST(test_crc32_is_zlibs) {
        /* The standard check value of CRC-32/ISO-HDLC (zlib, Ethernet). */
        ck_assert_uint_eq(store_crc32(0, "123456789", 9), 0xCBF43926u);
        ck_assert_uint_eq(store_crc32(0, "", 0), 0);
        /* Chained in two parts, the same. */
        ck_assert_uint_eq(store_crc32(store_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}
END_TEST

START_TEST(test_records_read_back_in_order) {
        struct store_buf b;
        struct seen s = {};
        size_t valid;

        build_log(&b, 10, NULL);
        ck_assert_int_eq(store_scan(b.data, b.len, collect, &s, &valid), 10);
        ck_assert_uint_eq(valid, b.len);
        for (int k = 0; k < 10; k++)
                ck_assert_uint_eq(s.ids[k], (uint64_t) k + 1);
        store_buf_done(&b);
}
END_TEST

START_TEST(test_every_cut_inside_the_last_record_keeps_the_others) {
        size_t starts[6], valid;
        struct store_buf b;

        build_log(&b, 6, starts);
        for (size_t cut = starts[5]; cut < b.len; cut++) {
                struct seen s = {};

                ck_assert_int_eq(store_scan(b.data, cut, collect, &s, &valid), 5);
                ck_assert_uint_eq(valid, starts[5]);
                ck_assert_uint_eq(s.ids[4], 5);
        }
        store_buf_done(&b);
}
END_TEST

START_TEST(test_garbage_after_the_records_is_ignored) {
        struct store_buf b;
        size_t valid, whole;

        build_log(&b, 4, NULL);
        whole = b.len;
        ck_assert_int_eq(store_buf_reserve(&b, 4096), 0);
        srand(42);
        for (int round = 0; round < 200; round++) {
                size_t extra = 1 + (size_t) rand() % 4096;

                for (size_t k = 0; k < extra; k++)
                        b.data[whole + k] = (uint8_t) rand();
                ck_assert_int_eq(store_scan(b.data, whole + extra, NULL, NULL, &valid), 4);
                ck_assert_uint_eq(valid, whole);
        }
        /* A header that claims more than the limit is damage, not a wait. */
        memset(b.data + whole, 0xff, 8);
        ck_assert_int_eq(store_scan(b.data, whole + 8 + 100, NULL, NULL, &valid), 4);
        ck_assert_uint_eq(valid, whole);
        store_buf_done(&b);
}
END_TEST

START_TEST(test_a_flipped_bit_stops_the_replay_there) {
        size_t starts[5], valid;
        struct store_buf b;
        struct seen s = {};

        build_log(&b, 5, starts);
        b.data[starts[2] + STORE_RECORD_HEADER_SIZE + 1] ^= 0x10;
        ck_assert_int_eq(store_scan(b.data, b.len, collect, &s, &valid), 2);
        ck_assert_uint_eq(valid, starts[2]);
        store_buf_done(&b);
}
END_TEST

START_TEST(test_not_a_log) {
        size_t valid = 99;

        ck_assert_int_eq(store_scan((const uint8_t *) "CMWQLOG2........", 16, NULL, NULL, &valid), -EBADMSG);
        ck_assert_int_eq(store_scan((const uint8_t *) "", 0, NULL, NULL, &valid), -EBADMSG);
        /* Just the magic: an empty log. */
        ck_assert_int_eq(store_scan((const uint8_t *) STORE_MAGIC, STORE_MAGIC_SIZE, NULL, NULL, &valid), 0);
        ck_assert_uint_eq(valid, STORE_MAGIC_SIZE);
}
END_TEST

START_TEST(test_callback_can_stop) {
        struct store_buf b;
        struct seen s = { .stop_after = 3 };
        size_t valid, starts[5];

        build_log(&b, 5, starts);
        ck_assert_int_eq(store_scan(b.data, b.len, collect, &s, &valid), 3);
        ck_assert_uint_eq(valid, starts[3]);
        store_buf_done(&b);
}
END_TEST

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        (void) remove(path);
        return 0;
}

/* store_open() on a real file with a torn end: replays what is whole and
 * tells it; the directory is created 0700. */
START_TEST(test_store_open_replays_a_torn_file) {
        char dir[] = "/tmp/cmwq-store-unit-XXXXXX", sub[128], path[160];
        struct store_buf b;
        struct store *s = NULL;
        struct seen seen = {};
        struct stat st;
        size_t starts[3];
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sub, sizeof(sub), "%s/a/state", dir);
        build_log(&b, 3, starts);

        /* A new directory and log. */
        ck_assert_int_eq(store_open(sub, collect, &seen, &s), 0);
        ck_assert_int_eq(seen.n, 0);
        s = store_free(s);
        ck_assert_int_eq(stat(sub, &st), 0);
        ck_assert_uint_eq(st.st_mode & 0777, 0700);

        snprintf(path, sizeof(path), "%s/%s", sub, STORE_LOG_NAME);
        fd = open(path, O_WRONLY | O_TRUNC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, b.data, b.len - 3), (ssize_t) (b.len - 3));
        close(fd);
        ck_assert_int_eq(store_open(sub, collect, &seen, &s), 0);
        ck_assert_int_eq(seen.n, 2);
        ck_assert_uint_eq(seen.ids[1], 2);
        s = store_free(s);

        /* Something else in its place is refused, not overwritten. */
        fd = open(path, O_WRONLY | O_TRUNC);
        ck_assert_int_eq(write(fd, "hello, world\n", 13), 13);
        close(fd);
        ck_assert_int_eq(store_open(sub, NULL, NULL, &s), -EBADMSG);
        ck_assert_ptr_null(s);

        store_buf_done(&b);
        (void) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

int main(void) {
        Suite *s = suite_create("store");
        TCase *tc = tcase_create("store");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_crc32_is_zlibs);
        tcase_add_test(tc, test_records_read_back_in_order);
        tcase_add_test(tc, test_every_cut_inside_the_last_record_keeps_the_others);
        tcase_add_test(tc, test_garbage_after_the_records_is_ignored);
        tcase_add_test(tc, test_a_flipped_bit_stops_the_replay_there);
        tcase_add_test(tc, test_not_a_log);
        tcase_add_test(tc, test_callback_can_stop);
        tcase_add_test(tc, test_store_open_replays_a_torn_file);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

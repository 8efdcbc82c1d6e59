/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Compaction of the durable log from the log (daemon/store/compact.c): what
 * the new log keeps of an old one, written on a memfd and read back.  The
 * replay of both into a running cmwqd is test-store's (integration). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store/compact.h"
#include "store/format.h"
#include "store/store.h"

struct log {
        struct store_buf b;
};

static void log_init(struct log *l) {
        l->b = (struct store_buf) {};
        ck_assert_int_eq(store_buf_reserve(&l->b, STORE_MAGIC_SIZE), 0);
        memcpy(l->b.data, STORE_MAGIC, STORE_MAGIC_SIZE);
        l->b.len = STORE_MAGIC_SIZE;
}

static void add(struct log *l, CmwqStore__Record *rec) {
        ck_assert_int_eq(store_record_append(&l->b, rec), 0);
}

static void add_queue(struct log *l, const char *name, uint32_t max_active) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Workqueue w = CMWQ_STORE__WORKQUEUE__INIT;

        w.name = (char *) name;
        w.max_active = max_active;
        w.owner = 1000;
        rec.body_case = CMWQ_STORE__RECORD__BODY_WORKQUEUE;
        rec.workqueue = &w;
        add(l, &rec);
}

static void add_destroyed(struct log *l, const char *name) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__WorkqueueDestroyed d = CMWQ_STORE__WORKQUEUE_DESTROYED__INIT;

        d.name = (char *) name;
        d.has_owner = true;
        d.owner = 1000;
        rec.body_case = CMWQ_STORE__RECORD__BODY_WORKQUEUE_DESTROYED;
        rec.workqueue_destroyed = &d;
        add(l, &rec);
}

static void add_env(struct log *l, uint64_t id) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Environment e = CMWQ_STORE__ENVIRONMENT__INIT;
        char *env[] = { "A=1" };

        e.id = id;
        e.env = env;
        e.n_env = 1;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ENVIRONMENT;
        rec.environment = &e;
        add(l, &rec);
}

static void add_item(struct log *l, uint64_t id, const char *queue, uint64_t env_id) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemQueued q = CMWQ_STORE__ITEM_QUEUED__INIT;
        char *argv[] = { "/bin/true" }, *env[] = { "B=2" };
        uint8_t payload[] = "input";

        q.id = id;
        q.workqueue = (char *) queue;
        q.has_workqueue_owner = true;
        q.workqueue_owner = 1000;
        q.argv = argv;
        q.n_argv = 1;
        if (env_id) {
                q.has_env_id = true;
                q.env_id = env_id;
        } else {
                q.env = env;
                q.n_env = 1;
        }
        q.has_payload = true;
        q.payload = (ProtobufCBinaryData) { sizeof(payload), payload };
        q.uid = 1000;
        q.gid = 1000;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_QUEUED;
        rec.item_queued = &q;
        add(l, &rec);
}

static void add_started(struct log *l, uint64_t id) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemStarted st = CMWQ_STORE__ITEM_STARTED__INIT;

        st.id = id;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_STARTED;
        rec.item_started = &st;
        add(l, &rec);
}

static void add_result(struct log *l, uint64_t id) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemResult res = CMWQ_STORE__ITEM_RESULT__INIT;

        res.id = id;
        res.state = 3;
        res.has_exit_status = true;
        res.exit_status = (int32_t) id;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_RESULT;
        rec.item_result = &res;
        add(l, &rec);
}

static void add_history(struct log *l, uint64_t id) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemHistory h = CMWQ_STORE__ITEM_HISTORY__INIT;
        CmwqStore__ItemQueued q = CMWQ_STORE__ITEM_QUEUED__INIT;
        CmwqStore__ItemResult res = CMWQ_STORE__ITEM_RESULT__INIT;
        char *argv[] = { "/bin/false" };

        q.id = id;
        q.workqueue = "gone";
        q.argv = argv;
        q.n_argv = 1;
        res.id = id;
        res.state = 3;
        h.item = &q;
        h.result = &res;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_HISTORY;
        rec.item_history = &h;
        add(l, &rec);
}

static int memfd_with(const void *data, size_t len) {
        int fd = memfd_create("log", MFD_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, len), (ssize_t) len);
        return fd;
}

/* What the records say, one word each: "N12" the Header's next id, "W:a/3"
 * a queue and its max_active, "E8" an Environment, "Q2:e" an ItemQueued
 * naming an environment ("Q2" one carrying its own), "S2" an ItemStarted,
 * "H1:exit" an ItemHistory whose result has an exit status. */

static int describe(const CmwqStore__Record *rec, void *userdata) {
        char *text = userdata, word[64];

        switch (rec->body_case) {
        case CMWQ_STORE__RECORD__BODY_HEADER:
                snprintf(word, sizeof(word), "N%llu", (unsigned long long) rec->header->next_id);
                break;
        case CMWQ_STORE__RECORD__BODY_WORKQUEUE:
                snprintf(word, sizeof(word), "W:%s/%u", rec->workqueue->name, rec->workqueue->max_active);
                break;
        case CMWQ_STORE__RECORD__BODY_ENVIRONMENT:
                snprintf(word, sizeof(word), "E%llu", (unsigned long long) rec->environment->id);
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_QUEUED:
                snprintf(word, sizeof(word), "Q%llu%s", (unsigned long long) rec->item_queued->id,
                         rec->item_queued->has_env_id ? ":e" : "");
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_STARTED:
                snprintf(word, sizeof(word), "S%llu", (unsigned long long) rec->item_started->id);
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_HISTORY: {
                const CmwqStore__ItemQueued *q = rec->item_history->item;

                /* A finished item keeps neither environment nor input. */
                snprintf(word, sizeof(word), "H%llu%s%s%s", (unsigned long long) q->id,
                         q->n_env || q->has_env_id ? ":env" : "", q->has_payload ? ":payload" : "",
                         rec->item_history->result->has_exit_status ? ":exit" : "");
                break;
        }
        default:
                snprintf(word, sizeof(word), "?%d", (int) rec->body_case);
        }
        if (*text)
                strcat(text, " ");
        strcat(text, word);
        return 0;
}

/* Compacts @l with @history (ids) and next id @next_id; the new log's
 * records described into @text.  Returns store_compact_log()'s result. */
static int compact(struct log *l, const uint64_t *history, size_t n_history, uint64_t next_id, bool cancel,
                   char *text) {
        struct store_compact_plan plan = { .next_id = next_id };
        struct store_writer w = { .fd = memfd_create("new", MFD_CLOEXEC) };
        atomic_bool cancelled = cancel;
        int in = memfd_with(l->b.data, l->b.len), r;
        struct store_buf out = {};
        size_t valid;
        off_t size;

        ck_assert_int_ge(w.fd, 0);
        plan.history = malloc((n_history + 1) * sizeof(uint64_t));
        if (n_history > 0)
                memcpy(plan.history, history, n_history * sizeof(uint64_t));
        plan.n_history = n_history;
        ck_assert_int_eq(write(w.fd, STORE_MAGIC, STORE_MAGIC_SIZE), STORE_MAGIC_SIZE);
        r = store_compact_log(in, l->b.len, &plan, &w, &cancelled);
        ck_assert_int_eq(write(w.fd, w.buf.data, w.buf.len), (ssize_t) w.buf.len);
        size = lseek(w.fd, 0, SEEK_END);
        ck_assert_int_eq(store_buf_reserve(&out, (size_t) size), 0);
        ck_assert_int_eq(pread(w.fd, out.data, (size_t) size, 0), size);
        out.len = (size_t) size;
        text[0] = 0;
        ck_assert_int_ge(store_scan(out.data, out.len, describe, text, &valid), 0);
        ck_assert_uint_eq(valid, out.len);
        store_buf_done(&out);
        store_buf_done(&w.buf);
        store_compact_plan_done(&plan);
        close(w.fd);
        close(in);
        return r;
}

/* Every kind of record, and what becomes of it. */
START_TEST(test_compaction_keeps_what_the_replay_would_have) {
        /* 3 was never retired (the replay drops its result): not in the
         * new log whatever the plan says. */
        const uint64_t history[] = { 9, 1, 6, 3 };
        char text[1024];
        struct log l;

        log_init(&l);
        add_queue(&l, "a", 1);
        add_queue(&l, "b", 1);
        add_env(&l, 7);
        add_env(&l, 8);
        add_history(&l, 6);             /* in the history: kept */
        add_history(&l, 10);            /* no longer: gone */
        add_item(&l, 1, "a", 7);        /* ends, in the history */
        add_item(&l, 2, "a", 8);        /* runs */
        add_item(&l, 3, "b", 0);        /* its queue is destroyed */
        add_item(&l, 12, "b", 0);       /* so is this one's */
        add_item(&l, 4, "a", 7);        /* ends, no longer in the history */
        add_started(&l, 2);
        add_started(&l, 4);
        add_result(&l, 1);
        add_result(&l, 4);
        add_destroyed(&l, "b");
        add_queue(&l, "b", 2);          /* the same name again: a new queue */
        add_item(&l, 5, "b", 0);
        add_queue(&l, "a", 4);          /* changed: its last record counts */
        add_item(&l, 11, "nowhere", 0); /* the replay drops it */
        add_result(&l, 3);              /* of an item gone with its queue */

        ck_assert_int_eq(compact(&l, history, 4, 12, false, text), 0);
        /* Environment 7 is named by no live item; 8 is written before the
         * item that names it. */
        ck_assert_str_eq(text, "N13 W:a/4 W:b/2 H6 E8 Q2:e S2 H1:exit Q5");
        store_buf_done(&l.b);
}
END_TEST

/* The Header's next id: the plan's, or past every id the log holds. */
START_TEST(test_next_id_never_goes_back) {
        char text[1024];
        struct log l;

        log_init(&l);
        add_queue(&l, "a", 1);
        add_item(&l, 41, "a", 0);
        ck_assert_int_eq(compact(&l, NULL, 0, 5, false, text), 0);
        ck_assert_str_eq(text, "N42 W:a/1 Q41");
        ck_assert_int_eq(compact(&l, NULL, 0, 100, false, text), 0);
        ck_assert_str_eq(text, "N100 W:a/1 Q41");
        store_buf_done(&l.b);
}
END_TEST

/* A log the compaction cannot read whole is not compacted: a record that
 * does not check out, or one that runs past the end it was given. */
START_TEST(test_a_damaged_log_is_not_compacted) {
        char text[1024];
        struct log l;
        size_t len;

        log_init(&l);
        add_queue(&l, "a", 1);
        add_item(&l, 1, "a", 0);
        len = l.b.len;
        add_item(&l, 2, "a", 0);
        l.b.data[len + 20] ^= 0x40;
        ck_assert_int_eq(compact(&l, NULL, 0, 1, false, text), -EBADMSG);
        l.b.data[len + 20] ^= 0x40;
        l.b.len -= 3;
        ck_assert_int_eq(compact(&l, NULL, 0, 1, false, text), -EBADMSG);
        store_buf_done(&l.b);
}
END_TEST

/* A compaction told to stop (the daemon stops) gives up. */
START_TEST(test_a_cancelled_compaction_gives_up) {
        char text[1024];
        struct log l;

        log_init(&l);
        add_queue(&l, "a", 1);
        for (uint64_t id = 1; id <= 10000; id++)
                add_item(&l, id, "a", 0);
        ck_assert_int_eq(compact(&l, NULL, 0, 1, true, text), -ECANCELED);
        store_buf_done(&l.b);
}
END_TEST

static Suite *compact_suite(void) {
        Suite *s = suite_create("compact");
        TCase *tc = tcase_create("compact");

        tcase_add_test(tc, test_compaction_keeps_what_the_replay_would_have);
        tcase_add_test(tc, test_next_id_never_goes_back);
        tcase_add_test(tc, test_a_damaged_log_is_not_compacted);
        tcase_add_test(tc, test_a_cancelled_compaction_gives_up);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(compact_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

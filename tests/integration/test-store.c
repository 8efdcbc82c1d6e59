/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Durable queues: what a real cmwqd keeps across SIGTERM and SIGKILL, a torn
 * end of its log, a compaction, and a crash in the middle of a stream of
 * submissions or of starts.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
}

static char *show(const char *id) {
        return CTL_OK(&d, "show", id);
}

static void assert_state(const char *id, const char *state) {
        char *out = show(id), want[64];

        snprintf(want, sizeof(want), "state:         %s\n", state);
        ck_assert_msg(strstr(out, want), "item %s is not %s; show said:\n%s", id, state, out);
        free(out);
}

static void log_path(char *buf, size_t size) {
        snprintf(buf, size, "%s/log", d.state_dir);
}

/* Submits @n items with @payload to @queue and cancels each: @n records of
 * its size in the log, and nothing pending. */
static void churn(const char *queue, const char *payload, int n) {
        for (int k = 0; k < n; k++) {
                char *id = CTL_OK(&d, "submit", queue, "--delay", "3600", "--stdin", payload, "--", "/bin/true");

                free(CTL_OK(&d, "cancel", id));
                free(id);
        }
}

/* cmwqd says a compaction was installed once its loop hears of it from
 * the commit thread, just after the new log took the old one's name. */
static void assert_compaction_logged(void) {
        char *text = NULL;

        for (int waited = 0; waited < 10000; waited += 20) {
                free(text);
                text = read_file(d.log);
                if (strstr(text, "Compacted the state log"))
                        break;
                sleep_ms(20);
        }
        ck_assert_msg(strstr(text, "Compacted the state log"), "no compaction finished:\n%.2000s", text);
        free(text);
}

/* A stopped (SIGTERM) daemon keeps its queues, pending items (in order, with
 * their ids), delayed items and history; ids go on increasing. */
START_TEST(test_sigterm_keeps_queues_items_and_history) {
        char out[400], cmd[600];
        char *done, *blocker, *p[3], *delayed, *keyed, *text, *next;
        struct ctl_result r;

        test_path(&d, "order", out, sizeof(out));
        free(CTL_OK(&d, "create", "work", "--ordered"));
        done = CTL_OK(&d, "submit", "work", "--", "/bin/echo", "kept in the history");
        CTL(&d, &r, "wait", done);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);

        blocker = CTL_OK(&d, "submit", "work", "--", "/bin/sleep", "60");
        for (int k = 0; k < 3; k++) {
                snprintf(cmd, sizeof(cmd), "echo %d >> %s", k, out);
                p[k] = CTL_OK(&d, "submit", "work", "--", "/bin/sh", "-c", cmd);
        }
        delayed = CTL_OK(&d, "submit", "work", "--delay", "3600", "--", "/bin/true");
        keyed = CTL_OK(&d, "submit", "system", "--key", "nightly", "--delay", "3600", "--", "/bin/true");
        assert_state(p[0], "inactive");

        cmwqd_terminate(&d);

        /* Every user's arguments, environment and output: root's eyes only. */
        {
                struct stat st;
                char logp[400];

                ck_assert_int_eq(stat(d.state_dir, &st), 0);
                ck_assert_uint_eq(st.st_mode & 07777, 0700);
                log_path(logp, sizeof(logp));
                ck_assert_int_eq(stat(logp, &st), 0);
                ck_assert_uint_eq(st.st_mode & 07777, 0600);
        }
        cmwqd_launch(&d, NULL);

        text = CTL_OK(&d, "list");
        ck_assert_msg(strstr(text, "work"), "the workqueue is gone: %s", text);
        free(text);

        /* The history, with its output. */
        CTL(&d, &r, "wait", done);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, "kept in the history\n");
        ctl_result_free(&r);

        /* It was running: interrupted (the default policy is drop). */
        assert_state(blocker, "interrupted");
        CTL(&d, &r, "wait", blocker);
        ck_assert_int_eq(r.status, 125);
        ctl_result_free(&r);

        for (int k = 0; k < 3; k++) {
                CTL(&d, &r, "wait", p[k]);
                ck_assert_int_eq(r.status, 0);
                ctl_result_free(&r);
        }
        text = read_file(out);
        ck_assert_str_eq(text, "0\n1\n2\n");
        free(text);
        assert_state(delayed, "delayed");

        /* The key is still pending: the same submission is the same item. */
        text = CTL_OK(&d, "submit", "system", "--key", "nightly", "--delay", "3600", "--", "/bin/true");
        ck_assert_str_eq(text, keyed);
        free(text);
        free(keyed);

        next = CTL_OK(&d, "submit", "work", "--", "/bin/true");
        ck_assert_msg(strtoull(next, NULL, 10) > strtoull(delayed, NULL, 10),
                      "id %s after a restart is not above %s", next, delayed);
        free(next);
        free(done);
        free(blocker);
        free(delayed);
        for (int k = 0; k < 3; k++)
                free(p[k]);
}
END_TEST

/* SIGKILL: running items are rerun on a queue that asks for it, reported
 * interrupted on one that does not; pending and delayed items run. */
START_TEST(test_sigkill_interrupts_and_reruns_per_policy) {
        char rerun_log[400], drop_log[400], after[400], cmd[1200];
        char *rerun, *drop, *pending, *delayed, *text;
        struct ctl_result r;

        test_path(&d, "rerun.log", rerun_log, sizeof(rerun_log));
        test_path(&d, "drop.log", drop_log, sizeof(drop_log));
        test_path(&d, "after.log", after, sizeof(after));
        free(CTL_OK(&d, "create", "again", "--ordered", "--on-interrupt", "rerun"));
        free(CTL_OK(&d, "create", "once", "--ordered", "--on-interrupt", "drop"));
        text = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(text, "\"name\":\"again\"") && strstr(text, "\"on_interrupt\":\"rerun\""),
                      "list --json said: %s", text);
        free(text);

        /* The first run is killed with the daemon, the second ends by itself. */
        snprintf(cmd, sizeof(cmd), "echo run >> %s; sleep $(( $(wc -l < %s) == 1 ? 60 : 0 ))", rerun_log, rerun_log);
        rerun = CTL_OK(&d, "submit", "again", "--", "/bin/sh", "-c", cmd);
        snprintf(cmd, sizeof(cmd), "echo run >> %s; sleep 60", drop_log);
        drop = CTL_OK(&d, "submit", "once", "--", "/bin/sh", "-c", cmd);
        snprintf(cmd, sizeof(cmd), "echo pending >> %s", after);
        pending = CTL_OK(&d, "submit", "once", "--", "/bin/sh", "-c", cmd);
        snprintf(cmd, sizeof(cmd), "echo delayed >> %s", after);
        delayed = CTL_OK(&d, "submit", "system", "--delay", "1", "--", "/bin/sh", "-c", cmd);
        ck_assert(wait_for_lines(rerun_log, 1, 10000));
        ck_assert(wait_for_lines(drop_log, 1, 10000));

        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);

        CTL(&d, &r, "wait", rerun);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        ck_assert_int_eq(count_lines(rerun_log), 2);
        text = show(rerun);
        ck_assert_msg(strstr(text, "finished") && strstr(text, "interrupted:   1\n"), "show said:\n%s", text);
        free(text);

        assert_state(drop, "interrupted");
        /* 125, as for a cancelled item, but not said to be one: nobody
         * cancelled it. */
        CTL(&d, &r, "wait", drop);
        ck_assert_msg(r.status == 125 && strstr(r.err, "was interrupted") && !strstr(r.err, "cancelled"),
                      "wait of an interrupted item: exit %d, %s", r.status, r.err);
        ctl_result_free(&r);
        CTL(&d, &r, "wait", pending);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        CTL(&d, &r, "wait", delayed);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        ck_assert_int_eq(count_lines(drop_log), 1);
        text = read_file(after);
        ck_assert_msg(strstr(text, "pending\n") && strstr(text, "delayed\n"), "ran: %s", text);
        free(text);
        free(rerun);
        free(drop);
        free(pending);
        free(delayed);
}
END_TEST

static uint32_t le32(const unsigned char *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static void write_file(const char *path, const char *data, size_t len) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, len), (ssize_t) len);
        close(fd);
}

/* A file of 512 KiB in the test's directory, its path in @path: an item's
 * input that makes a record of that size. */
static void big_payload(char *path, size_t size) {
        char *big = malloc(512 * 1024);

        test_path(&d, "payload", path, size);
        memset(big, 'x', 512 * 1024);
        write_file(path, big, 512 * 1024);
        free(big);
}

static size_t file_size(const char *path) {
        struct stat st;

        ck_assert_int_eq(stat(path, &st), 0);
        return (size_t) st.st_size;
}

/* Whether item @id is known to the daemon. */
static bool item_exists(const char *id) {
        struct ctl_result r;
        bool found;

        CTL(&d, &r, "show", id);
        found = r.status == 0;
        ck_assert_msg(found || strstr(r.err, "no work item"), "show %s: %s", id, r.err);
        ctl_result_free(&r);
        return found;
}

/* A log cut anywhere inside its last record, or with garbage after it, gives
 * back every record before the damage. */
START_TEST(test_torn_tail_keeps_complete_records) {
        enum { N = 5 };
        char logp[400], *ids[N], *image;
        size_t len, off, last = 0;

        free(CTL_OK(&d, "create", "torn"));
        for (int k = 0; k < N; k++)
                ids[k] = CTL_OK(&d, "submit", "torn", "--delay", "3600", "--", "/bin/echo", "item");
        cmwqd_kill(&d);

        log_path(logp, sizeof(logp));
        image = read_file(logp);        /* binary: use the size, not strlen() */
        len = file_size(logp);
        ck_assert_int_gt(len, 8);
        ck_assert(memcmp(image, "CMWQLOG1", 8) == 0);
        for (off = 8; off + 8 <= len; off += 8 + le32((unsigned char *) image + off))
                last = off;
        ck_assert_uint_eq(off, len);    /* the records fill the file exactly */

        srand((unsigned) time(NULL));
        for (int round = 0; round < 4; round++) {
                size_t end = len, cut = last + 1 + (size_t) rand() % (len - last - 1);

                if (round == 0)
                        cut = last + 3;         /* inside the frame header */
                write_file(logp, image, cut);
                cmwqd_launch(&d, NULL);
                for (int k = 0; k < N - 1; k++)
                        ck_assert_msg(item_exists(ids[k]), "item %s lost after a cut at %zu of %zu", ids[k], cut,
                                      end);
                ck_assert_msg(!item_exists(ids[N - 1]), "a torn record was taken as whole (cut at %zu)", cut);
                assert_state(ids[0], "delayed");
                cmwqd_kill(&d);
        }

        /* Whole records, then garbage. */
        {
                char *garbage = malloc(len + 100);

                memcpy(garbage, image, len);
                for (int k = 0; k < 100; k++)
                        garbage[len + k] = (char) rand();
                write_file(logp, garbage, len + 100);
                free(garbage);
        }
        cmwqd_launch(&d, NULL);
        for (int k = 0; k < N; k++)
                ck_assert_msg(item_exists(ids[k]), "item %s lost with garbage after the log", ids[k]);
        {
                char *log = read_file(d.log);
                ck_assert_msg(strstr(log, "a record torn by a crash") || strstr(log, "is damaged"),
                              "the damage was not logged");
                free(log);
        }
        for (int k = 0; k < N; k++)
                free(ids[k]);
        free(image);
}
END_TEST

/* A record damaged before the log's end -- a flipped byte, not a crash --
 * loses what comes after it to cmwqd (a record does not check out, and
 * what follows cannot be trusted), but not to the administrator: the log
 * is kept aside, byte for byte, before the snapshot at start replaces it,
 * and the error says so.  And the ids given out after the damage are not
 * given again: 'cmwqctl wait ID' of a lost item must not report another
 * item.  Three kinds of damage to the record before the last: its payload
 * (the length fits, the checksum does not), its length made to run past
 * the end (once taken for a crash's torn tail: the last record was lost
 * without a word and its id given again), and a length no record can
 * have. */
START_TEST(test_a_damaged_record_keeps_the_log_aside_and_no_id_again) {
        enum { N = 4 };
        static const struct { size_t at; unsigned char bit; const char *what; } damage[] = {
                { 8, 0x5a, "a payload byte" },
                { 2, 0x01, "the length, past the end" },
                { 3, 0x40, "the length, past any record's" },
        };

        for (size_t round = 0; round < sizeof(damage) / sizeof(damage[0]); round++) {
                char logp[400], kept[700], queue[32], *ids[N], *image, *log, *after, *name, *copy;
                size_t len, off, n_records = 0, offsets[256];
                struct dirent *de;
                DIR *dir;

                snprintf(queue, sizeof(queue), "dmg%zu", round);
                free(CTL_OK(&d, "create", queue));
                for (int k = 0; k < N; k++)
                        ids[k] = CTL_OK(&d, "submit", queue, "--delay", "3600", "--", "/bin/true");
                cmwqd_kill(&d);

                log_path(logp, sizeof(logp));
                image = read_file(logp);
                len = file_size(logp);
                for (off = 8; off + 8 <= len && n_records < 256; off += 8 + le32((unsigned char *) image + off))
                        offsets[n_records++] = off;
                ck_assert_uint_eq(off, len);
                ck_assert_uint_ge(n_records, 3);
                image[offsets[n_records - 2] + damage[round].at] ^= (char) damage[round].bit;
                write_file(logp, image, len);

                struct stat before;
                size_t seen = stat(d.log, &before) == 0 ? (size_t) before.st_size : 0;

                cmwqd_launch(&d, NULL);
                log = read_file(d.log);
                {
                        /* This start's lines only. */
                        const char *now = strlen(log) >= seen ? log + seen : log;

                        ck_assert_msg(strstr(now, "is damaged") && strstr(now, "The damaged log is kept as"),
                                      "damage to %s was not logged as such:\n%s", damage[round].what, now);
                }
                free(log);
                ck_assert_msg(!item_exists(ids[N - 1]), "a record after the damage was taken");

                dir = opendir(d.state_dir);
                ck_assert_ptr_nonnull(dir);
                name = NULL;
                while ((de = readdir(dir)))
                        if (strncmp(de->d_name, "log.damaged.", 12) == 0)
                                name = strdup(de->d_name);
                closedir(dir);
                ck_assert_msg(name, "no copy of the log damaged in %s in %s", damage[round].what, d.state_dir);
                snprintf(kept, sizeof(kept), "%s/%s", d.state_dir, name);
                ck_assert_uint_eq(file_size(kept), len);
                copy = read_file(kept);
                ck_assert_msg(memcmp(copy, image, len) == 0, "the copy kept is not the damaged log");
                free(copy);
                ck_assert_int_eq(unlink(kept), 0);      /* the next round's is the only one */
                free(name);

                after = CTL_OK(&d, "submit", queue, "--delay", "3600", "--", "/bin/true");
                ck_assert_msg(strtoull(after, NULL, 10) > strtoull(ids[N - 1], NULL, 10),
                              "id %s given again after damage to %s (the last before it was %s)", after,
                              damage[round].what, ids[N - 1]);
                free(after);
                for (int k = 0; k < N; k++)
                        free(ids[k]);
                free(image);
        }
}
END_TEST

/* Compaction: the log shrinks to the live state, which survives a crash. */
START_TEST(test_compaction_keeps_everything) {
        char payload[400], logp[400], *kept, *hist, *text;
        struct ctl_result r;
        size_t before;

        big_payload(payload, sizeof(payload));
        log_path(logp, sizeof(logp));

        free(CTL_OK(&d, "create", "big", "--max-active", "7"));
        hist = CTL_OK(&d, "submit", "big", "--stdin", payload, "--", "/usr/bin/wc", "-c");
        CTL(&d, &r, "wait", hist);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        kept = CTL_OK(&d, "submit", "big", "--delay", "3600", "--stdin", payload, "--", "/usr/bin/wc", "-c");

        /* 12 payloads of 512 KiB go through the log; one stays live. */
        churn("big", payload, 12);
        before = file_size(logp);
        for (int waited = 0; waited < 10000 && file_size(logp) > 3u * 1024 * 1024; waited += 20)
                sleep_ms(20);
        ck_assert_msg(file_size(logp) < 3u * 1024 * 1024, "the log was not compacted: %zu bytes (was %zu)",
                      file_size(logp), before);
        text = read_file(d.log);
        ck_assert_msg(strstr(text, "Compacting the state log"), "no compaction in the log");
        free(text);

        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);
        text = CTL_OK(&d, "list");
        ck_assert_msg(strstr(text, "big"), "the queue is gone: %s", text);
        free(text);
        CTL(&d, &r, "wait", hist);
        ck_assert_int_eq(r.status, 0);
        ck_assert_msg(strstr(r.out, "524288"), "history output: %s", r.out);
        ctl_result_free(&r);
        assert_state(kept, "delayed");
        free(CTL_OK(&d, "set-max-active", "big", "3"));
        text = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(text, "\"name\":\"big\",\"flags\":[],\"flags_value\":0,\"max_active\":3"), "list: %s",
                      text);
        free(text);
        free(hist);
        free(kept);
}
END_TEST

/* What a compaction keeps, seen after a SIGKILL: a queue destroyed and
 * made again under its name is the new one (the old one's item is only in
 * the history); an item that was running comes back interrupted, never
 * pending (its start is in the new log: a drop queue's item runs at most
 * once); one that had ended is in the history with its state. */
START_TEST(test_compaction_keeps_starts_and_forgets_destroyed_queues) {
        char payload[400], logp[400], *cancelled, *again, *running, *text;

        big_payload(payload, sizeof(payload));
        log_path(logp, sizeof(logp));

        free(CTL_OK(&d, "create", "q"));
        cancelled = CTL_OK(&d, "submit", "q", "--delay", "3600", "--", "/bin/true");
        free(CTL_OK(&d, "cancel", cancelled));
        free(CTL_OK(&d, "destroy", "q"));
        free(CTL_OK(&d, "create", "q", "--max-active", "5"));
        again = CTL_OK(&d, "submit", "q", "--delay", "3600", "--", "/bin/true");
        free(CTL_OK(&d, "create", "once", "--on-interrupt", "drop"));
        running = CTL_OK(&d, "submit", "once", "--", "/bin/sleep", "60");
        for (int waited = 0; waited < 10000; waited += 20) {
                char *out = show(running);
                bool started = strstr(out, "state:         running\n");

                free(out);
                if (started)
                        break;
                sleep_ms(20);
        }
        assert_state(running, "running");

        churn("system", payload, 12);
        for (int waited = 0; waited < 10000 && file_size(logp) > 3u * 1024 * 1024; waited += 20)
                sleep_ms(20);
        ck_assert_msg(file_size(logp) < 3u * 1024 * 1024, "the log was not compacted: %zu bytes", file_size(logp));
        assert_compaction_logged();

        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);
        assert_state(cancelled, "cancelled");
        assert_state(again, "delayed");
        assert_state(running, "interrupted");
        text = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(text, "\"name\":\"q\",\"flags\":[],\"flags_value\":0,\"max_active\":5"), "list: %s",
                      text);
        ck_assert_msg(strstr(text, "\"pending\":1"), "not one item on q: %s", text);
        free(text);
        free(cancelled);
        free(again);
        free(running);
}
END_TEST

/* Items keep the environment they were submitted with across a SIGKILL,
 * before and after a compaction; one environment that many items carry is
 * written to the log once, not once per item. */
START_TEST(test_environments_come_back_after_kill_and_compaction) {
        enum { N_BIG = 20, BIG = 100 * 1024 };
        static const char *const before_markers[] = { "one", "one", "two", NULL };
        static const char *const after_markers[] = { "one", "three" };
        char payload[400], logp[400], *ids[6], *big_ids[N_BIG], *big, *text;
        size_t n = 0, log_before, log_after;

        log_path(logp, sizeof(logp));
        test_path(&d, "payload", payload, sizeof(payload));
        big = malloc(512 * 1024);
        memset(big, 'x', 512 * 1024);
        write_file(payload, big, 512 * 1024);

        /* Delayed, so that they are pending at the kill; each prints its
         * marker when it runs. */
        for (size_t k = 0; k < 4; k++, n++)
                ids[n] = submit_marker_item(&d, before_markers[k], "8");

        /* 20 items pending together whose environment holds 100 KiB:
         * about 100 KiB of log, not 2 MiB. */
        memset(big, 'e', BIG);
        big[BIG] = 0;
        setenv("CMWQ_TEST_BIG", big, 1);
        log_before = file_size(logp);
        for (int k = 0; k < N_BIG; k++)
                big_ids[k] = CTL_OK(&d, "submit", "system", "--delay", "3600", "--", "/bin/true");
        log_after = file_size(logp);
        unsetenv("CMWQ_TEST_BIG");
        ck_assert_msg(log_after - log_before < 5u * BIG, "%d items with one %d-byte environment took %zu bytes of log",
                      N_BIG, BIG, log_after - log_before);
        for (int k = 0; k < N_BIG; k++) {
                free(CTL_OK(&d, "cancel", big_ids[k]));
                free(big_ids[k]);
        }

        /* A compaction: the snapshot holds the environments the items name. */
        churn("system", payload, 12);
        for (int waited = 0; waited < 10000 && file_size(logp) > 3u * 1024 * 1024; waited += 20)
                sleep_ms(20);
        ck_assert_msg(file_size(logp) < 3u * 1024 * 1024, "the log was not compacted: %zu bytes", file_size(logp));

        /* After it: one environment the log had before, one new. */
        for (size_t k = 0; k < 2; k++, n++)
                ids[n] = submit_marker_item(&d, after_markers[k], "8");

        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);
        for (size_t k = 0; k < n; k++) {
                assert_marker_item_printed(&d, ids[k], k < 4 ? before_markers[k] : after_markers[k - 4]);
                free(ids[k]);
        }
        text = read_file(d.log);
        ck_assert_msg(!strstr(text, "does not hold"), "an environment was missing: %s", text);
        free(text);
        free(big);
}
END_TEST

struct acked {
        long k;
        unsigned long long id;
};

static int read_acked(const char *path, struct acked *a, int max) {
        char *s = read_file(path), *line, *save = NULL, *end;
        int n = 0;

        /* Only whole lines: the submitter may have been stopped mid-write. */
        end = strrchr(s, '\n');
        if (end)
                end[1] = 0;
        else
                s[0] = 0;
        for (line = strtok_r(s, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save))
                if (sscanf(line, "%ld %llu", &a[n].k, &a[n].id) == 2)
                        n++;
        free(s);
        return n;
}

/* A client submits without pause, noting each id it is given; cmwqd is
 * SIGKILLed at random moments.  Every acknowledged item is there after the
 * restarts, once.  On the default (drop) queue it ran exactly once, or,
 * interrupted, at most once; on the rerun queue (odd submissions) it
 * finished, having run at least once. */
START_TEST(test_crash_during_submission_stream) {
        enum { MAX = 20000 };
        char acked[400], runs[400], script[4096];
        struct acked *a = calloc(MAX, sizeof(*a));
        int *ran;
        pid_t submitter;
        int n, status, interrupted = 0;
        char *text;

        test_path(&d, "acked", acked, sizeof(acked));
        test_path(&d, "runs", runs, sizeof(runs));
        free(CTL_OK(&d, "create", "stream"));
        free(CTL_OK(&d, "create", "stream-rerun", "--on-interrupt", "rerun"));
        snprintf(script, sizeof(script),
                 "k=0; while :; do k=$((k+1)); q=stream; [ $((k %% 2)) = 1 ] && q=stream-rerun; "
                 "id=$(%s --socket %s submit $q -- /bin/sh -c 'echo $0 >> %s' $k 2>/dev/null) && "
                 "echo \"$k $id\" >> %s; done",
                 d.ctl, d.socket, runs, acked);
        submitter = test_fork();
        if (submitter == 0) {
                execl("/bin/sh", "sh", "-c", script, (char *) NULL);
                _exit(127);
        }

        srand((unsigned) time(NULL) ^ (unsigned) getpid());
        for (int round = 0; round < 5; round++) {
                /* Some acknowledgements from this daemon, then a random moment. */
                int before = count_lines(acked);

                ck_assert_msg(wait_for_lines(acked, before + 5, 60000), "the submitter makes no progress");
                sleep_ms(rand() % 500);
                cmwqd_kill(&d);
                sleep_ms(rand() % 100);
                cmwqd_launch(&d, NULL);
        }
        sleep_ms(300);
        kill(submitter, SIGKILL);
        waitpid(submitter, &status, 0);
        free(CTL_OK(&d, "flush", "stream"));
        free(CTL_OK(&d, "flush", "stream-rerun"));

        n = read_acked(acked, a, MAX);
        ck_assert_msg(n > 20, "only %d submissions were acknowledged", n);
        ran = calloc((size_t) a[n - 1].k + 2, sizeof(int));
        {
                char *s = read_file(runs), *save = NULL;

                for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                        long k = atol(line);

                        if (k > 0 && k <= a[n - 1].k + 1)
                                ran[k]++;
                }
                free(s);
        }
        for (int i = 0; i < n; i++) {
                char id[32], *out;

                if (i > 0)
                        ck_assert_msg(a[i].id > a[i - 1].id, "id %llu acknowledged after %llu", a[i].id, a[i - 1].id);
                snprintf(id, sizeof(id), "%llu", a[i].id);
                out = show(id);
                if (a[i].k % 2 == 1) {
                        ck_assert_msg(strstr(out, "state:         finished\n"), "rerun item %s:\n%s", id, out);
                        ck_assert_msg(ran[a[i].k] >= 1, "rerun item %s never ran", id);
                } else if (strstr(out, "state:         interrupted\n")) {
                        interrupted++;
                        ck_assert_msg(ran[a[i].k] <= 1, "interrupted item %s ran %d times", id, ran[a[i].k]);
                } else {
                        ck_assert_msg(strstr(out, "state:         finished\n"), "item %s:\n%s", id, out);
                        ck_assert_msg(ran[a[i].k] == 1, "item %s (submission %ld) ran %d times", id, a[i].k,
                                      ran[a[i].k]);
                }
                /* Its own command, not another submission's. */
                char want[32];
                snprintf(want, sizeof(want), "' %ld\n", a[i].k);
                ck_assert_msg(strstr(out, want), "item %s is not submission %ld:\n%s", id, a[i].k, out);
                free(out);
        }
        text = read_file(d.log);
        fprintf(stderr, "# crash stream: %d acknowledged submissions over 5 SIGKILLs, %d interrupted\n", n,
                interrupted);
        free(text);
        free(ran);
        free(a);
}
END_TEST

/* How often each submission k (1..@max_k) ran, by the lines of @runs. */
static int *count_runs(const char *runs, long max_k) {
        int *ran = calloc((size_t) max_k + 2, sizeof(int));
        char *s = read_file(runs), *save = NULL;

        ck_assert_ptr_nonnull(ran);
        for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                long k = atol(line);

                if (k > 0 && k <= max_k + 1)
                        ran[k]++;
        }
        free(s);
        return ran;
}

/* Starts cmwqd again on @d's state with a slow fdatasync() (slow-sync.c):
 * records wait in its memory while each sync runs. */
static void launch_slow_sync(void) {
        const char *asan = getenv("ASAN_OPTIONS"), *lib = getenv("CMWQ_SLOW_SYNC");
        char *saved = asan ? strdup(asan) : NULL, opts[512];

        ck_assert_msg(lib, "$CMWQ_SLOW_SYNC is not set (make check sets it)");

        /* The preloaded library comes before the sanitizers' runtime. */
        snprintf(opts, sizeof(opts), "%s%sverify_asan_link_order=0", asan ? asan : "", asan ? ":" : "");
        ck_assert_int_eq(setenv("ASAN_OPTIONS", opts, 1), 0);
        ck_assert_int_eq(setenv("LD_PRELOAD", lib, 1), 0);
        cmwqd_launch(&d, NULL);
        unsetenv("LD_PRELOAD");
        if (saved)
                setenv("ASAN_OPTIONS", saved, 1);
        else
                unsetenv("ASAN_OPTIONS");
        free(saved);

        /* It is loaded, or the test would prove less than it says. */
        {
                char maps_path[64], *maps;

                snprintf(maps_path, sizeof(maps_path), "/proc/%d/maps", (int) d.pid);
                maps = read_file(maps_path);
                ck_assert_msg(strstr(maps, "slow-sync"), "cmwqd did not load %s", lib);
                free(maps);
        }
}

/* Whether @path reaches @lines lines within @timeout_ms; looks every
 * millisecond, to act right after an item wrote its line. */
static bool lines_reach(const char *path, int lines, int timeout_ms) {
        int64_t deadline = mono_ns() + (int64_t) timeout_ms * 1000000;

        while (count_lines(path) < lines) {
                if (mono_ns() > deadline)
                        return false;
                sleep_ms(1);
        }
        return true;
}

/* cmwqd is SIGKILLed at random moments while the items of a drop queue
 * start one after another: each burst is queued behind a freeze and then
 * thawed, so that the pools start them back to back and claim their starts
 * ahead (doc/design.md, section 3.11).  Its fdatasync() is slow, so that
 * records wait for the disk while items start (a SIGKILL loses only what
 * was not written yet).  No item has run twice, and every acknowledged
 * item is accounted for: finished having run once, or interrupted having
 * run at most once. */
START_TEST(test_crash_while_items_start) {
        enum { MAX = 20000, BURST = 24, ROUNDS = 12 };
        char acked[400], runs[400], script[4096];
        struct acked *a = calloc(MAX, sizeof(*a));
        int *ran, n, status, interrupted = 0, never_ran = 0;
        pid_t submitter;

        test_path(&d, "acked", acked, sizeof(acked));
        test_path(&d, "runs", runs, sizeof(runs));
        free(CTL_OK(&d, "create", "starts", "--freezable"));
        cmwqd_terminate(&d);
        launch_slow_sync();
        snprintf(script, sizeof(script),
                 "ctl() { %s --socket %s \"$@\" 2>/dev/null; }; k=0; "
                 "while :; do ctl freeze starts >/dev/null; b=0; "
                 "while [ $b -lt %d ]; do b=$((b+1)); k=$((k+1)); "
                 "id=$(ctl submit starts -- /bin/sh -c 'echo $0 >> %s' $k) && echo \"$k $id\" >> %s; done; "
                 "ctl thaw starts >/dev/null; done",
                 d.ctl, d.socket, (int) BURST, runs, acked);
        submitter = test_fork();
        if (submitter == 0) {
                execl("/bin/sh", "sh", "-c", script, (char *) NULL);
                _exit(127);
        }

        srand((unsigned) time(NULL) ^ (unsigned) getpid());
        for (int round = 0; round < ROUNDS; round++) {
                /* Items of this daemon start; the kill comes right after
                 * one of them ran (while the next ones start and their
                 * records may still be on the way to the disk), or, every
                 * other round, at a random moment after that. */
                int before = count_lines(runs);

                ck_assert_msg(lines_reach(runs, before + 1 + rand() % (BURST / 2), 60000), "no item starts");
                if (round % 2)
                        sleep_ms(rand() % 100);
                cmwqd_kill(&d);
                sleep_ms(rand() % 50);
                launch_slow_sync();
        }
        kill(submitter, SIGKILL);
        waitpid(submitter, &status, 0);
        /* Freezing is not kept across a restart; the submitter may have
         * frozen this daemon's queue last. */
        free(CTL_OK(&d, "thaw", "starts"));
        free(CTL_OK(&d, "flush", "starts"));

        n = read_acked(acked, a, MAX);
        ck_assert_msg(n > BURST, "only %d submissions were acknowledged", n);
        ran = count_runs(runs, a[n - 1].k);
        for (int i = 0; i < n; i++) {
                char id[32], want[32], *out;

                snprintf(id, sizeof(id), "%llu", a[i].id);
                out = show(id);
                if (strstr(out, "state:         interrupted\n")) {
                        interrupted++;
                        never_ran += ran[a[i].k] == 0;
                        ck_assert_msg(ran[a[i].k] <= 1, "interrupted item %s ran %d times", id, ran[a[i].k]);
                } else {
                        ck_assert_msg(strstr(out, "state:         finished\n"), "item %s:\n%s", id, out);
                        ck_assert_msg(ran[a[i].k] == 1, "item %s (submission %ld) ran %d times", id, a[i].k,
                                      ran[a[i].k]);
                }
                snprintf(want, sizeof(want), "' %ld\n", a[i].k);
                ck_assert_msg(strstr(out, want), "item %s is not submission %ld:\n%s", id, a[i].k, out);
                free(out);
        }
        /* No submission that was not acknowledged ran twice either. */
        for (long k = 1; k <= a[n - 1].k + 1; k++)
                ck_assert_msg(ran[k] <= 1, "submission %ld ran %d times", k, ran[k]);
        fprintf(stderr, "# crash while starting: %d acknowledged items over %d SIGKILLs, %d interrupted, "
                        "%d of them claimed but not started\n", n, (int) ROUNDS, interrupted, never_ran);
        free(ran);
        free(a);
}
END_TEST

/* Items whose starts were claimed ahead but had not started when cmwqd
 * stopped (SIGTERM) come back pending and run: only the item that was
 * running is reported interrupted. */
START_TEST(test_stop_gives_back_claimed_starts) {
        enum { N = 6 };
        char ran[400], cmd[600], *ids[N];
        struct ctl_result r;

        test_path(&d, "ran", ran, sizeof(ran));
        free(CTL_OK(&d, "create", "line", "--ordered", "--freezable"));
        /* All queued before the first starts: it claims the next ones. */
        free(CTL_OK(&d, "freeze", "line"));
        for (int k = 0; k < N; k++) {
                snprintf(cmd, sizeof(cmd), "echo %d >> %s%s", k, ran, k == 0 ? "; exec sleep 60" : "");
                ids[k] = CTL_OK(&d, "submit", "line", "--", "/bin/sh", "-c", cmd);
        }
        free(CTL_OK(&d, "thaw", "line"));
        ck_assert(wait_for_lines(ran, 1, 10000));

        cmwqd_terminate(&d);
        cmwqd_launch(&d, NULL);

        assert_state(ids[0], "interrupted");
        for (int k = 1; k < N; k++) {
                CTL(&d, &r, "wait", ids[k]);
                ck_assert_msg(r.status == 0, "item %d: status %d, %s", k, r.status, r.err);
                ctl_result_free(&r);
        }
        {
                char *text = read_file(ran), want[64] = "";

                for (int k = 0; k < N; k++)
                        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%d\n", k);
                ck_assert_str_eq(text, want);
                free(text);
        }
        for (int k = 0; k < N; k++)
                free(ids[k]);
}
END_TEST

/* Queue names are per user: two users' queues of one name come back as
 * theirs, with their items, and the user's usage is counted again (the
 * item can be cancelled and the queue destroyed by its owner). */
START_TEST(test_per_user_queues_come_back_as_theirs) {
        struct ctl_result r;
        char *root_item, *user_item, *text;

        free(CTL_OK(&d, "create", "mine", "--on-interrupt", "rerun"));
        CTL_AS(&d, 65534, &r, "create", "mine");
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        root_item = CTL_OK(&d, "submit", "mine", "--delay", "3600", "--", "/bin/true");
        CTL_AS(&d, 65534, &r, "submit", "mine", "--delay", "3600", "--", "/bin/true");
        ck_assert_int_eq(r.status, 0);
        user_item = strndup(r.out, strcspn(r.out, "\n"));
        ctl_result_free(&r);

        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);

        CTL_AS(&d, 65534, &r, "--json", "list");
        ck_assert_int_eq(r.status, 0);
        ck_assert_msg(strstr(r.out, "\"name\":\"mine\"") && strstr(r.out, "\"owner_uid\":65534") &&
                      strstr(r.out, "\"on_interrupt\":\"drop\""), "uid 65534's list: %s", r.out);
        ctl_result_free(&r);
        text = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(text, "\"on_interrupt\":\"rerun\""), "root's queue lost its policy: %s", text);
        free(text);

        CTL_AS(&d, 65534, &r, "show", root_item);
        ck_assert_int_ne(r.status, 0);
        ctl_result_free(&r);
        CTL_AS(&d, 65534, &r, "cancel", user_item);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        CTL_AS(&d, 65534, &r, "destroy", "mine");
        ck_assert_msg(r.status == 0, "uid 65534 cannot destroy its restored queue: %s", r.err);
        ctl_result_free(&r);
        assert_state(root_item, "delayed");
        free(root_item);
        free(user_item);
}
END_TEST

/* --no-store: nothing is written, nothing comes back; a --state-dir given
 * as well (the harness always gives one) is said not to be used. */
START_TEST(test_no_store_keeps_nothing) {
        const char *const args[] = { "--no-store", NULL };
        struct cmwqd nd;
        struct stat st;
        char *text;

        cmwqd_start(&nd, args);
        free(CTL_OK(&nd, "create", "fleeting"));
        free(CTL_OK(&nd, "submit", "fleeting", "--delay", "3600", "--", "/bin/true"));
        cmwqd_terminate(&nd);
        ck_assert_int_ne(stat(nd.state_dir, &st), 0);
        text = read_file(nd.log);
        ck_assert_msg(strstr(text, "--no-store: the state directory") && strstr(text, "is not used"),
                      "no word of the unused --state-dir:\n%s", text);
        free(text);
        cmwqd_launch(&nd, args);
        text = CTL_OK(&nd, "list");
        ck_assert_msg(!strstr(text, "fleeting"), "a --no-store daemon kept a queue: %s", text);
        free(text);
        cmwqd_stop(&nd);
}
END_TEST

/* ---- a full state directory ---------------------------------------------- */

/* A small tmpfs for a daemon's --state-dir: in *@mnt (size 1 MiB). */
static void small_tmpfs(char *mnt, size_t size) {
        snprintf(mnt, size, "/tmp/cmwq-full-XXXXXX");
        ck_assert_msg(mkdtemp(mnt), "mkdtemp: %s", strerror(errno));
        ck_assert_msg(mount("cmwq-test", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0700") == 0,
                      "cannot mount a tmpfs on %s: %s", mnt, strerror(errno));
}

static void small_tmpfs_remove(const char *mnt) {
        (void) umount2(mnt, MNT_DETACH);
        (void) rmdir(mnt);
}

/* Fills the file system of @dir to the last byte with @dir/filler. */
static void fill(const char *dir) {
        static char block[4096];
        char path[400];
        size_t sizes[] = { sizeof(block), 512, 1 };
        int fd;

        snprintf(path, sizeof(path), "%s/filler", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
                while (write(fd, block, sizes[k]) == (ssize_t) sizes[k])
                        ;
        ck_assert_int_eq(errno, ENOSPC);
        close(fd);
}

static void unfill(const char *dir) {
        char path[400];

        snprintf(path, sizeof(path), "%s/filler", dir);
        ck_assert_int_eq(unlink(path), 0);
}

static int cmwqd_start_refused(const char *socket, const char *state_dir, const char *log_path);

/* Fails unless the request failed at once, with the full state directory
 * named. */
static void assert_full_error(struct ctl_result *r, const char *mnt, const char *what) {
        char want[400];

        snprintf(want, sizeof(want), "the state directory %s is full", mnt);
        ck_assert_msg(r->status != 0 && strstr(r->err, want), "%s on a full state directory: status %d, stderr: %s",
                      what, r->status, r->err);
        ctl_result_free(r);
}

/* A full state directory: every change is refused at once, naming it, a
 * flood of them fills nothing, reads are served; with room again changes
 * are accepted and kept; and a daemon starts on a full disk, serving what
 * it has. */
START_TEST(test_full_state_dir_refuses_changes_and_recovers) {
        char mnt[64], *log, *text;
        const char *args[] = { "--state-dir", mnt, NULL };
        struct ctl_result r;
        struct cmwqd fd_;
        int64_t deadline;

        small_tmpfs(mnt, sizeof(mnt));
        cmwqd_start(&fd_, args);
        free(CTL_OK(&fd_, "create", "before"));

        fill(mnt);
        /* The first change may still be written (into the room the log
         * keeps ahead of it); from the second on they are refused. */
        CTL(&fd_, &r, "create", "first");
        ctl_result_free(&r);
        for (int k = 0; k < 20; k++) {
                char name[32];

                snprintf(name, sizeof(name), "flood%d", k);
                CTL(&fd_, &r, "create", name);
                assert_full_error(&r, mnt, "create");
                CTL(&fd_, &r, "destroy", "before");
                assert_full_error(&r, mnt, "destroy");
        }
        CTL(&fd_, &r, "submit", "system", "--", "/bin/true");
        assert_full_error(&r, mnt, "submit");
        CTL(&fd_, &r, "set-max-active", "before", "3");
        assert_full_error(&r, mnt, "set-max-active");
        text = CTL_OK(&fd_, "list");
        ck_assert_msg(strstr(text, "before"), "list on a full state directory: %s", text);
        free(text);

        /* Room again: changes are accepted (the store looks once a second). */
        unfill(mnt);
        deadline = mono_ns() + 30 * INT64_C(1000000000);
        while (CTL(&fd_, &r, "create", "after") != 0 && mono_ns() < deadline) {
                ctl_result_free(&r);
                sleep_ms(100);
        }
        ck_assert_msg(r.status == 0, "no change accepted after room came back: %s", r.err);
        ctl_result_free(&r);
        free(CTL_OK(&fd_, "submit", "after", "--wait", "--", "/bin/true"));

        /* A start on a full disk: up, serving what it has, saying so. */
        cmwqd_terminate(&fd_);
        fill(mnt);
        cmwqd_launch(&fd_, args);
        text = CTL_OK(&fd_, "list");
        ck_assert_msg(strstr(text, "before") && strstr(text, "after"), "queues lost in a start on a full disk: %s",
                      text);
        free(text);
        CTL(&fd_, &r, "create", "again");
        assert_full_error(&r, mnt, "create after a start on a full disk");
        log = read_file(fd_.log);
        ck_assert_msg(strstr(log, "is full"), "the log does not say the state directory is full:\n%s", log);
        free(log);

        unfill(mnt);
        deadline = mono_ns() + 30 * INT64_C(1000000000);
        while (CTL(&fd_, &r, "create", "again") != 0 && mono_ns() < deadline) {
                ctl_result_free(&r);
                sleep_ms(100);
        }
        ck_assert_msg(r.status == 0, "no change accepted after room came back: %s", r.err);
        ctl_result_free(&r);
        cmwqd_stop(&fd_);

        /* A damaged log on a full disk: no start, and the log is not cut
         * (it was cut to the damage, and a copy half-written). */
        {
                char logp[400], sock[400], refused_log[400], *image, *after;
                size_t len, off, last = 0, before_last = 0;

                snprintf(logp, sizeof(logp), "%s/log", mnt);
                image = read_file(logp);
                len = file_size(logp);
                for (off = 8; off + 8 <= len; off += 8 + le32((unsigned char *) image + off)) {
                        before_last = last;
                        last = off;
                }
                ck_assert_uint_gt(before_last, 0);
                image[before_last + 8] ^= 0x5a;
                write_file(logp, image, len);
                fill(mnt);
                test_path(&d, "refused.sock", sock, sizeof(sock));
                test_path(&d, "refused.log", refused_log, sizeof(refused_log));
                ck_assert_int_ne(cmwqd_start_refused(sock, mnt, refused_log), 0);
                log = read_file(refused_log);
                ck_assert_msg(strstr(log, "is full and its log damaged"), "the refusal does not say why:\n%s", log);
                free(log);
                ck_assert_uint_eq(file_size(logp), len);
                after = read_file(logp);
                ck_assert_msg(memcmp(after, image, len) == 0, "the damaged log was changed");
                free(after);
                free(image);
                unfill(mnt);
        }
        small_tmpfs_remove(mnt);
}
END_TEST

/* The process that cmwqd's compaction thread, under
 * CMWQD_TEST_STOP_COMPACTION, waits for once the new log is written and
 * before it is installed: a child of that thread, stopped until the test
 * continues or kills it.  0 when there is none yet. */
static pid_t stopped_compaction_child(void) {
        char path[384], buf[4096], stat[512];
        pid_t found = 0;
        struct dirent *task;
        DIR *tasks;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/task", (int) d.pid);
        tasks = opendir(path);
        if (!tasks)
                return 0;
        while (!found && (task = readdir(tasks))) {
                if (task->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int) d.pid, task->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (!fgets(buf, sizeof(buf), f))
                        buf[0] = 0;
                fclose(f);
                for (char *save = NULL, *tok = strtok_r(buf, " \n", &save); tok && !found;
                     tok = strtok_r(NULL, " \n", &save)) {
                        char *st;

                        snprintf(path, sizeof(path), "/proc/%s/stat", tok);
                        f = fopen(path, "re");
                        if (!f)
                                continue;
                        if (fgets(stat, sizeof(stat), f) && (st = strrchr(stat, ')')) && st[1] == ' ' &&
                            st[2] == 'T')
                                found = (pid_t) atoi(tok);
                        fclose(f);
                }
        }
        closedir(tasks);
        return found;
}

/* Grows the log with big payloads (submitted and cancelled) until a
 * compaction has written the new log and waits (stopped_compaction_child()). */
static pid_t grow_until_compaction_stops(const char *payload) {
        for (int k = 0; k < 200; k++) {
                pid_t child = stopped_compaction_child();

                if (child > 0)
                        return child;
                churn("cq", payload, 1);
        }
        for (int waited = 0; waited < 60000; waited += 20) {
                pid_t child = stopped_compaction_child();

                if (child > 0)
                        return child;
                sleep_ms(20);
        }
        ck_abort_msg("no compaction started");
        return 0;
}

/* The directory's sync fails once, right after a compaction renamed its new
 * log over the old one (slow-sync.c, CMWQ_FAIL_DIR_FSYNC): the new file is
 * the log all the same, so what is acknowledged after must go into it.
 * After a SIGKILL every acknowledged item is there, once. */
START_TEST(test_compaction_dir_sync_failure_loses_nothing) {
        enum { N = 10 };
        char payload[400], logp[400], *ids[N + 1], *text, want[64];
        size_t before;

        big_payload(payload, sizeof(payload));
        log_path(logp, sizeof(logp));

        /* The first directory sync is the start's new log, the second the
         * compaction's. */
        cmwqd_kill(&d);
        setenv("CMWQ_FAIL_DIR_FSYNC", "2", 1);
        setenv("CMWQ_SLOW_SYNC_MS", "0", 1);
        launch_slow_sync();
        unsetenv("CMWQ_FAIL_DIR_FSYNC");
        unsetenv("CMWQ_SLOW_SYNC_MS");
        free(CTL_OK(&d, "create", "cq"));
        ids[0] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "before");
        churn("cq", payload, 12);
        before = file_size(logp);
        for (int waited = 0; waited < 10000 && file_size(logp) > 3u * 1024 * 1024; waited += 20)
                sleep_ms(20);
        ck_assert_msg(file_size(logp) < 3u * 1024 * 1024, "the log was not compacted: %zu bytes (was %zu)",
                      file_size(logp), before);
        text = read_file(d.log);
        ck_assert_msg(strstr(text, "Input/output error"), "the directory's sync did not fail:\n%s", text);
        free(text);

        for (int k = 1; k <= N; k++)
                ids[k] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "after");
        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);

        for (int k = 0; k <= N; k++) {
                assert_state(ids[k], "delayed");
                free(ids[k]);
        }
        text = CTL_OK(&d, "--json", "list");
        snprintf(want, sizeof(want), "\"pending\":%d", N + 1);
        ck_assert_msg(strstr(text, want), "not %d items on the queue: %s", N + 1, text);
        free(text);
}
END_TEST

/* How many compactions cmwqd has begun so far. */
static int compactions_begun(void) {
        char *text = read_file(d.log);
        int n = 0;

        for (const char *p = text; (p = strstr(p, "Compacting the state log")); p++)
                n++;
        free(text);
        return n;
}

/* Whether cmwqd logs @what within 10 s. */
static bool daemon_logged(const char *what) {
        bool found = false;

        for (int waited = 0; waited < 10000 && !found; waited += 20) {
                char *text = read_file(d.log);

                found = strstr(text, what);
                free(text);
                if (!found)
                        sleep_ms(20);
        }
        return found;
}

/* A compaction whose new log cannot be renamed over the old one (EIO,
 * once): the old log goes on, and the daemon's count of its bytes with
 * it, for the next compaction reads the log up to that count.  That one
 * succeeds, and after a SIGKILL every item acknowledged before, between
 * and after is there. */
START_TEST(test_a_compaction_that_cannot_be_installed_loses_nothing_later) {
        enum { N = 8 };
        char payload[400], logp[400], *ids[3 * N], *text, want[64];
        int n = 0;

        big_payload(payload, sizeof(payload));
        log_path(logp, sizeof(logp));

        cmwqd_kill(&d);
        setenv("CMWQ_FAIL_COMPACT_RENAME", "1", 1);
        setenv("CMWQ_SLOW_SYNC_MS", "0", 1);
        launch_slow_sync();
        unsetenv("CMWQ_FAIL_COMPACT_RENAME");
        unsetenv("CMWQ_SLOW_SYNC_MS");
        free(CTL_OK(&d, "create", "cq"));
        for (int k = 0; k < N; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "before");
        churn("cq", payload, 12);
        ck_assert_msg(daemon_logged("Cannot compact the state log"), "the first compaction did not fail");

        /* Past twice the log's size then: a second compaction, which
         * must read all of the old log (the log shrinks to a few items). */
        for (int k = 0; k < N; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "between");
        for (int k = 0; k < 40 && compactions_begun() < 2; k++)
                churn("cq", payload, 1);
        ck_assert_int_ge(compactions_begun(), 2);
        for (int waited = 0; waited < 10000 && file_size(logp) > 1024 * 1024; waited += 20)
                sleep_ms(20);
        ck_assert_msg(file_size(logp) < 1024 * 1024, "the second compaction did not shrink the log: %zu bytes",
                      file_size(logp));
        assert_compaction_logged();
        for (int k = 0; k < N; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "after");
        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);

        for (int k = 0; k < n; k++) {
                assert_state(ids[k], "delayed");
                free(ids[k]);
        }
        text = CTL_OK(&d, "--json", "list");
        snprintf(want, sizeof(want), "\"pending\":%d", n);
        ck_assert_msg(strstr(text, want), "not %d items on the queue: %s", n, text);
        free(text);
}
END_TEST

/* A compaction that ends with a big tail (what was appended while it ran)
 * and a slow install (every sync 200 ms): the log grows past the point of
 * the next compaction before the new log has its name.  The next one must
 * wait for that: begun earlier, it read the old log and truncated the
 * new one under its name, and after a SIGKILL the log held two records.
 * Every compaction stops before its install (CMWQD_TEST_STOP_COMPACTION)
 * until continued here. */
START_TEST(test_a_compaction_waits_until_the_last_is_installed) {
        enum { N = 6 };
        char payload[400], logp[400], compactp[420], *ids[3 * N], *text, want[64];
        int n = 0;
        pid_t child;

        big_payload(payload, sizeof(payload));
        log_path(logp, sizeof(logp));
        snprintf(compactp, sizeof(compactp), "%s.compact", logp);

        cmwqd_kill(&d);
        setenv("CMWQD_TEST_STOP_COMPACTION", "1", 1);
        setenv("CMWQ_SLOW_SYNC_MS", "200", 1);
        launch_slow_sync();
        unsetenv("CMWQD_TEST_STOP_COMPACTION");
        unsetenv("CMWQ_SLOW_SYNC_MS");
        free(CTL_OK(&d, "create", "cq"));
        for (int k = 0; k < N; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "before");
        child = grow_until_compaction_stops(payload);
        /* The tail alone is past twice what the new log will be. */
        churn("cq", payload, 10);
        for (int k = 0; k < N; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "during");
        kill(child, SIGCONT);
        /* While the install syncs: appends that would start the next one. */
        churn("cq", payload, 4);
        for (int k = 0; k < N; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "after");
        for (int waited = 0; waited < 30000; waited += 20) {
                pid_t next = stopped_compaction_child();

                if (next > 0)
                        kill(next, SIGCONT);
                else if (access(compactp, F_OK) < 0)
                        break;
                sleep_ms(20);
        }
        ck_assert_msg(access(compactp, F_OK) < 0, "a compaction did not finish");
        assert_compaction_logged();
        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);

        for (int k = 0; k < n; k++) {
                assert_state(ids[k], "delayed");
                free(ids[k]);
        }
        text = CTL_OK(&d, "--json", "list");
        snprintf(want, sizeof(want), "\"pending\":%d", n);
        ck_assert_msg(strstr(text, want), "not %d items on the queue: %s", n, text);
        free(text);
}
END_TEST

/* SIGKILL while a compaction runs outside the loop (its thread holds the new
 * log, written and not yet installed), and again after one finished: every
 * item acknowledged before, and while it ran, is there once, in order. */
START_TEST(test_crash_during_background_compaction) {
        enum { PER_ROUND = 10 };
        char payload[400], logp[400], compactp[420], *ids[4 * PER_ROUND], *text;
        int n = 0;
        pid_t child;

        big_payload(payload, sizeof(payload));
        log_path(logp, sizeof(logp));
        snprintf(compactp, sizeof(compactp), "%s.compact", logp);

        cmwqd_kill(&d);
        setenv("CMWQD_TEST_STOP_COMPACTION", "1", 1);
        cmwqd_launch(&d, NULL);
        unsetenv("CMWQD_TEST_STOP_COMPACTION");
        free(CTL_OK(&d, "create", "cq"));
        for (int k = 0; k < PER_ROUND; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "before");

        /* Round 1: killed while the snapshot waits to be installed. */
        child = grow_until_compaction_stops(payload);
        ck_assert_msg(access(compactp, F_OK) == 0, "no %s while the compaction runs", compactp);
        for (int k = 0; k < PER_ROUND; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "during");
        text = CTL_OK(&d, "list");      /* served meanwhile */
        free(text);
        cmwqd_kill(&d);
        /* The process the thread waited for dies with the daemon. */
        for (int waited = 0; waited < 10000 && kill(child, 0) == 0; waited += 20)
                sleep_ms(20);
        ck_assert_msg(kill(child, 0) < 0, "the compaction child %d outlived cmwqd", (int) child);

        /* Round 2: the compaction is let finish, then a crash. */
        setenv("CMWQD_TEST_STOP_COMPACTION", "1", 1);
        cmwqd_launch(&d, NULL);
        unsetenv("CMWQD_TEST_STOP_COMPACTION");
        ck_assert_msg(access(compactp, F_OK) < 0, "%s was left from the interrupted compaction", compactp);
        for (int k = 0; k < PER_ROUND; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "after");
        child = grow_until_compaction_stops(payload);
        for (int k = 0; k < PER_ROUND; k++)
                ids[n++] = CTL_OK(&d, "submit", "cq", "--delay", "3600", "--", "/bin/echo", "during2");
        kill(child, SIGCONT);
        for (int waited = 0; waited < 30000 && access(compactp, F_OK) == 0; waited += 20)
                sleep_ms(20);
        ck_assert_msg(access(compactp, F_OK) < 0, "the compaction did not finish");
        assert_compaction_logged();
        cmwqd_kill(&d);
        cmwqd_launch(&d, NULL);

        text = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(text, "\"name\":\"cq\""), "the queue is gone: %s", text);
        free(text);
        for (int k = 0; k < n; k++) {
                assert_state(ids[k], "delayed");
                if (k > 0)
                        ck_assert_msg(strtoull(ids[k], NULL, 10) > strtoull(ids[k - 1], NULL, 10),
                                      "id %s after %s", ids[k], ids[k - 1]);
        }
        for (int k = 0; k < n; k++)
                free(ids[k]);
        /* Once each: as many delayed items on the queue as were acknowledged. */
        text = CTL_OK(&d, "--json", "list");
        {
                char want[64];

                snprintf(want, sizeof(want), "\"pending\":%d", n);
                ck_assert_msg(strstr(text, want), "not %d items on the queue: %s", n, text);
        }
        free(text);
}
END_TEST

/* Runs cmwqd on @socket and @state_dir, its stderr to @log_path, expecting
 * it to exit at start-up: its exit status.  Fails the test if it is still
 * running after 15 s. */
static int cmwqd_start_refused(const char *socket, const char *state_dir, const char *log_path) {
        int status = 0;
        pid_t p = test_fork();

        if (p == 0) {
                int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(126);
                setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/cmwq-test/system_bus_socket", 1);
                execl(getenv("CMWQD"), getenv("CMWQD"), "--socket", socket, "--config", "/dev/null", "--state-dir",
                      state_dir, (char *) NULL);
                _exit(127);
        }
        for (int waited = 0; waitpid(p, &status, WNOHANG) == 0; waited += 20) {
                if (waited >= 15000) {
                        kill(p, SIGKILL);
                        waitpid(p, &status, 0);
                        ck_abort_msg("cmwqd ran where it should have refused to; its log:\n%s", read_file(log_path));
                }
                sleep_ms(20);
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* cmwqd started a second time on a state directory in use (by mistake,
 * on another socket) refuses to start and says which daemon has it; the
 * first one's log stays the log: what it acknowledges afterwards is there
 * after its restart, under the same id.  Before, the second replaced the
 * log the first went on appending to (a deleted file), and both ran the
 * recovered items. */
START_TEST(test_a_second_daemon_on_the_state_dir_refuses_to_start) {
        char second_socket[400], second_log[400], logp[400], lockp[400], pid[32], *err, *lock, *id;
        struct stat before, after;

        log_path(logp, sizeof(logp));
        ck_assert_int_eq(stat(logp, &before), 0);
        snprintf(second_socket, sizeof(second_socket), "%s/second.sock", d.dir);
        snprintf(second_log, sizeof(second_log), "%s/second.log", d.dir);

        ck_assert_int_eq(cmwqd_start_refused(second_socket, d.state_dir, second_log), 1);
        err = read_file(second_log);
        snprintf(pid, sizeof(pid), "(process %d)", (int) d.pid);
        ck_assert_msg(strstr(err, "is in use by another cmwqd") && strstr(err, pid),
                      "the second cmwqd did not say the state directory is in use by %d:\n%s", (int) d.pid, err);
        free(err);
        snprintf(lockp, sizeof(lockp), "%s/lock", d.state_dir);
        lock = read_file(lockp);
        ck_assert_int_eq(atoi(lock), d.pid);
        free(lock);

        /* The first daemon's log is untouched and still the log. */
        ck_assert_int_eq(stat(logp, &after), 0);
        ck_assert_uint_eq(after.st_ino, before.st_ino);
        id = CTL_OK(&d, "submit", "system", "--delay", "3600", "--", "/bin/true");
        cmwqd_terminate(&d);
        cmwqd_launch(&d, NULL);
        assert_state(id, "delayed");
        free(id);
}
END_TEST

/* The log holds every user's arguments, environment and output, and root
 * writes and renames files there: cmwqd keeps no state in a directory
 * others may write (where a symlink could make it overwrite any file) or
 * that is not its own, and says why.  Made right again, it starts with its
 * state. */
START_TEST(test_a_state_dir_others_may_write_is_refused) {
        char refused_log[400], *err, *id;

        id = CTL_OK(&d, "submit", "system", "--delay", "3600", "--", "/bin/true");
        cmwqd_terminate(&d);
        snprintf(refused_log, sizeof(refused_log), "%s/refused.log", d.dir);

        ck_assert_int_eq(chmod(d.state_dir, 0777), 0);
        ck_assert_int_eq(cmwqd_start_refused(d.socket, d.state_dir, refused_log), 1);
        err = read_file(refused_log);
        ck_assert_msg(strstr(err, "may be written by others (mode 0777)"), "cmwqd did not say why:\n%s", err);
        free(err);

        ck_assert_int_eq(chmod(d.state_dir, 0700), 0);
        ck_assert_int_eq(chown(d.state_dir, 65534, 65534), 0);
        ck_assert_int_eq(cmwqd_start_refused(d.socket, d.state_dir, refused_log), 1);
        err = read_file(refused_log);
        ck_assert_msg(strstr(err, "belongs to uid 65534"), "cmwqd did not say why:\n%s", err);
        free(err);

        ck_assert_int_eq(chown(d.state_dir, 0, 0), 0);
        cmwqd_launch(&d, NULL);
        assert_state(id, "delayed");
        free(id);
}
END_TEST

int main(void) {
        Suite *s = suite_create("store");
        TCase *tc = tcase_create("store");
        TCase *tf = tcase_create("failures");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        /* test_crash_while_items_start restarts cmwqd twelve times, each
         * time waiting for items to run: about 62 s in the ASan build under
         * two busy loops, and once past 120 s on a machine busier still. */
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, test_sigterm_keeps_queues_items_and_history);
        tcase_add_test(tc, test_sigkill_interrupts_and_reruns_per_policy);
        tcase_add_test(tc, test_torn_tail_keeps_complete_records);
        tcase_add_test(tc, test_a_damaged_record_keeps_the_log_aside_and_no_id_again);
        tcase_add_test(tc, test_compaction_keeps_everything);
        tcase_add_test(tc, test_environments_come_back_after_kill_and_compaction);
        tcase_add_test(tc, test_compaction_keeps_starts_and_forgets_destroyed_queues);
        tcase_add_test(tc, test_crash_during_submission_stream);
        tcase_add_test(tc, test_crash_while_items_start);
        tcase_add_test(tc, test_stop_gives_back_claimed_starts);
        tcase_add_test(tc, test_crash_during_background_compaction);
        tcase_add_test(tc, test_no_store_keeps_nothing);
        tcase_add_test(tc, test_per_user_queues_come_back_as_theirs);
        tcase_add_test(tc, test_full_state_dir_refuses_changes_and_recovers);
        tcase_add_test(tc, test_a_second_daemon_on_the_state_dir_refuses_to_start);
        tcase_add_test(tc, test_a_state_dir_others_may_write_is_refused);
        suite_add_tcase(s, tc);
        /* The disk fails under a compaction. */
        tcase_add_checked_fixture(tf, setup, teardown);
        tcase_set_timeout(tf, 120);
        tcase_add_test(tf, test_compaction_dir_sync_failure_loses_nothing);
        tcase_add_test(tf, test_a_compaction_that_cannot_be_installed_loses_nothing_later);
        tcase_add_test(tf, test_a_compaction_waits_until_the_last_is_installed);
        suite_add_tcase(s, tf);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

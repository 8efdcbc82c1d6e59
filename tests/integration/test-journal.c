/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The journal fields of cmwqd's log lines (CMWQ_QUEUE=, CMWQ_ITEM=,
 * CMWQ_UID=, CMWQ_CPU=, CMWQ_POOL=): what "journalctl CMWQ_QUEUE=build"
 * filters on.
 *
 * No journald is needed: a test that needs the journal makes a private
 * mount namespace with a tmpfs on /run and listens on
 * /run/systemd/journal/socket itself, where sd_journal_send() writes; a
 * thread reads every datagram (journald's native protocol) as journald
 * would, so that the sender never blocks on a full socket.  Then cmwqd runs
 * with $JOURNAL_STREAM set, as systemd starts it, and the lines it sends are
 * looked at field by field.  That needs root (CI runs as root); without it
 * those tests say SKIP and pass.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
/* Builds a struct item and a struct workqueue for log_item()/log_queue():
 * the core's own header, which only the core and its tests include. */
#include "core/core-internal.h"
#include "harness.h"

/* ------------------------------------------------------------------------ */
/* the field builder */

START_TEST(test_fields_of_an_item) {
        char f[LOG_FIELDS_MAX][LOG_FIELD_SIZE];
        struct item_extras x = { .wq_name = (char *) "build" };
        struct item i = { .id = 42, .extras = &x, .uid = 1000, .cpu = 1 };

        ck_assert_uint_eq(log_fields_format(LOG_FIELDS_ITEM(&i), f), 4);
        ck_assert_str_eq(f[0], "CMWQ_QUEUE=build");
        ck_assert_str_eq(f[1], "CMWQ_ITEM=42");
        ck_assert_str_eq(f[2], "CMWQ_UID=1000");
        ck_assert_str_eq(f[3], "CMWQ_CPU=1");

        /* An item of an unbound queue runs on no particular CPU. */
        i.cpu = -1;
        ck_assert_uint_eq(log_fields_format(LOG_FIELDS_ITEM(&i), f), 3);
        ck_assert_str_eq(f[2], "CMWQ_UID=1000");
}
END_TEST

START_TEST(test_fields_of_a_queue) {
        char f[LOG_FIELDS_MAX][LOG_FIELD_SIZE];
        struct workqueue wq = { .name = (char *) "system", .owner = 0 };

        /* uid 0 is a uid like any other: root's queue says so. */
        ck_assert_uint_eq(log_fields_format(LOG_FIELDS_QUEUE(&wq), f), 2);
        ck_assert_str_eq(f[0], "CMWQ_QUEUE=system");
        ck_assert_str_eq(f[1], "CMWQ_UID=0");
}
END_TEST

START_TEST(test_fields_of_a_pool) {
        char f[LOG_FIELDS_MAX][LOG_FIELD_SIZE];
        struct log_fields pool = { .pool = "cpu0-highpri", .has_cpu = true, .cpu = 0 };

        ck_assert_uint_eq(log_fields_format(&pool, f), 2);
        ck_assert_str_eq(f[0], "CMWQ_CPU=0");
        ck_assert_str_eq(f[1], "CMWQ_POOL=cpu0-highpri");
}
END_TEST

START_TEST(test_no_fields) {
        char f[LOG_FIELDS_MAX][LOG_FIELD_SIZE];

        ck_assert_uint_eq(log_fields_format(NULL, f), 0);
        ck_assert_uint_eq(log_fields_format(&(const struct log_fields) {}, f), 0);
}
END_TEST

START_TEST(test_long_value_is_cut) {
        char f[LOG_FIELDS_MAX + 1][LOG_FIELD_SIZE], name[300];

        memset(name, 'a', sizeof(name) - 1);
        name[sizeof(name) - 1] = 0;
        memset(f[LOG_FIELDS_MAX], 'Z', LOG_FIELD_SIZE);
        ck_assert_uint_eq(log_fields_format(&(const struct log_fields) { .queue = name }, f), 1);
        ck_assert_uint_eq(strlen(f[0]), LOG_FIELD_SIZE - 1);
        ck_assert(strncmp(f[0], "CMWQ_QUEUE=aaaa", 15) == 0);
        /* Nothing written past the slots. */
        ck_assert_int_eq(f[LOG_FIELDS_MAX][0], 'Z');
}
END_TEST

/* ------------------------------------------------------------------------ */
/* a stand-in journal */

#define JOURNAL_MAX 4096

static struct {
        int fd;
        pthread_t thread;
        pthread_mutex_t lock;
        char *entries[JOURNAL_MAX];     /* each "FIELD=value\n..." */
        unsigned n;
} journal = { .fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

/* One datagram of the native protocol as "FIELD=value" lines: a field is
 * "FIELD=value\n", or "FIELD\n", a little-endian 64-bit length, the value
 * and "\n" when the value has a newline in it. */
static char *journal_decode(const char *d, size_t len) {
        char *out = malloc(2 * len + 2), *o = out;
        size_t p = 0;

        ck_assert_ptr_nonnull(out);
        while (p < len) {
                const char *nl = memchr(d + p, '\n', len - p), *eq = memchr(d + p, '=', len - p);
                size_t end = nl ? (size_t) (nl - d) : len;

                if (eq && eq < d + end) {
                        memcpy(o, d + p, end - p);
                        o += end - p;
                        *o++ = '\n';
                        p = end + 1;
                } else {
                        uint64_t n = 0;

                        memcpy(o, d + p, end - p);
                        o += end - p;
                        *o++ = '=';
                        p = end + 1;
                        ck_assert_uint_le(p + 8, len);
                        for (int k = 7; k >= 0; k--)
                                n = n << 8 | (unsigned char) d[p + (size_t) k];
                        p += 8;
                        ck_assert_uint_le(p + n, len);
                        for (uint64_t k = 0; k < n; k++)
                                *o++ = d[p + k] == '\n' ? ' ' : d[p + k];
                        *o++ = '\n';
                        p += n + 1;
                }
        }
        *o = 0;
        return out;
}

static void *journal_reader(void *arg) {
        static char buf[256 * 1024];

        for (;;) {
                ssize_t n = recv(journal.fd, buf, sizeof(buf), 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return NULL;
                char *e = journal_decode(buf, (size_t) n);
                pthread_mutex_lock(&journal.lock);
                if (journal.n < JOURNAL_MAX)
                        journal.entries[journal.n++] = e;
                else
                        free(e);
                pthread_mutex_unlock(&journal.lock);
        }
}

/* A private /run with a journal socket that this process reads.  False
 * (and SKIP on stderr) where that cannot be made: not root. */
static bool journal_start(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = "/run/systemd/journal/socket" };

        if (geteuid() != 0) {
                fprintf(stderr, "SKIP: a stand-in journal needs root for a private /run (CI runs as root)\n");
                return false;
        }
        ck_assert_msg(unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS): %s", strerror(errno));
        ck_assert_int_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        ck_assert_msg(mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") == 0, "mount /run: %s",
                      strerror(errno));
        ck_assert_int_eq(mkdir("/run/systemd", 0755), 0);
        ck_assert_int_eq(mkdir("/run/systemd/journal", 0755), 0);
        journal.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(journal.fd, 0);
        ck_assert_int_eq(bind(journal.fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(chmod(sa.sun_path, 0666), 0);
        ck_assert_int_eq(pthread_create(&journal.thread, NULL, journal_reader, NULL), 0);
        /* What systemd sets for a service whose stderr goes to the journal. */
        setenv("JOURNAL_STREAM", "8:12345", 1);
        return true;
}

/* The first entry with all of @fields ("FIELD=value" each, NULL-ended;
 * "FIELD=value*" for a value that starts so) as lines, waiting up to
 * @timeout_ms for it; a copy (free it) or NULL. */
static char *journal_find(int timeout_ms, const char *const *fields) {
        for (int waited = 0;; waited += 20) {
                char *found = NULL;

                pthread_mutex_lock(&journal.lock);
                for (unsigned k = 0; k < journal.n && !found; k++) {
                        bool all = true;

                        for (const char *const *f = fields; *f && all; f++) {
                                char line[512];
                                size_t n = strlen(*f);
                                bool prefix = n > 0 && (*f)[n - 1] == '*';

                                /* Each line of the entry, "\nFIELD=value\n" with the first line's "\n" added. */
                                snprintf(line, sizeof(line), "\n%.*s%s", (int) (prefix ? n - 1 : n), *f,
                                         prefix ? "" : "\n");
                                all = strncmp(journal.entries[k], line + 1, strlen(line + 1)) == 0 ||
                                      strstr(journal.entries[k], line);
                        }
                        if (all)
                                found = strdup(journal.entries[k]);
                }
                pthread_mutex_unlock(&journal.lock);
                if (found || waited >= timeout_ms)
                        return found;
                nanosleep(&(struct timespec) { 0, 20 * 1000000 }, NULL);
        }
}

#define JOURNAL_FIND(timeout_ms, ...) journal_find(timeout_ms, (const char *const[]) { __VA_ARGS__, NULL })

static char *journal_dump(void) {
        size_t len = 0;
        char *all = NULL;

        pthread_mutex_lock(&journal.lock);
        for (unsigned k = 0; k < journal.n; k++) {
                size_t n = strlen(journal.entries[k]);

                all = realloc(all, len + n + 2);
                ck_assert_ptr_nonnull(all);
                memcpy(all + len, journal.entries[k], n);
                len += n;
                all[len++] = '\n';
        }
        pthread_mutex_unlock(&journal.lock);
        if (!all)
                return strdup("(nothing)");
        all[len] = 0;
        return all;
}

/* ------------------------------------------------------------------------ */
/* log.c into the journal, and on stderr */

START_TEST(test_line_about_an_item_in_the_journal) {
        struct item_extras x = { .wq_name = (char *) "build" };
        struct item i = { .id = 7, .extras = &x, .uid = 1000, .cpu = 0 };
        char *e;

        if (!journal_start())
                return;
        log_setup(LOG_INFO);
        log_item_errno(LOG_WARNING, -ENOENT, &i, "Failed to start item %" PRIu64 ": %m", i.id);
        log_item(LOG_DEBUG, &i, "below the level: never sent");

        e = JOURNAL_FIND(10000, "MESSAGE=Failed to start item 7: No such file or directory", "PRIORITY=4",
                         "ERRNO=2", "SYSLOG_IDENTIFIER=cmwqd", "CMWQ_QUEUE=build", "CMWQ_ITEM=7", "CMWQ_UID=1000",
                         "CMWQ_CPU=0");
        ck_assert_msg(e, "not in the journal as wanted:\n%s", journal_dump());
        free(e);
        /* A plain line has none of the fields. */
        log_info("A line about nothing in particular");
        e = JOURNAL_FIND(10000, "MESSAGE=A line about nothing in particular");
        ck_assert_msg(e, "not in the journal:\n%s", journal_dump());
        ck_assert_msg(!strstr(e, "CMWQ_"), "a plain line has fields: %s", e);
        free(e);
        ck_assert_ptr_null(JOURNAL_FIND(0, "MESSAGE=below the level: never sent"));
}
END_TEST

START_TEST(test_line_about_an_item_on_stderr) {
        struct item_extras x = { .wq_name = (char *) "build" };
        struct item i = { .id = 7, .extras = &x, .uid = 1000, .cpu = 0 };
        char path[] = "/tmp/cmwq-test-journal-XXXXXX", *out;
        int fd = mkstemp(path);

        ck_assert_int_ge(fd, 0);
        unsetenv("JOURNAL_STREAM");
        ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
        log_setup(LOG_INFO);
        log_item_errno(LOG_WARNING, -ENOENT, &i, "Failed to start item %" PRIu64 ": %m", i.id);
        log_info("Froze all freezable workqueues");
        out = read_file(path);
        unlink(path);
        /* The same lines as ever: the fields are the journal's only. */
        ck_assert_str_eq(out, "cmwqd[warning]: Failed to start item 7: No such file or directory\n"
                              "cmwqd[info]: Froze all freezable workqueues\n");
        free(out);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* cmwqd's own lines */

START_TEST(test_daemon_lines_about_queues_and_items) {
        struct cmwqd d;
        char *id, want[64], *e;

        if (!journal_start())
                return;
        cmwqd_start(&d, NULL);

        free(CTL_OK(&d, "create", "build"));
        id = CTL_OK(&d, "submit", "build", "--cpu", "0", "--", "/bin/true");
        free(CTL_OK(&d, "wait", id));
        snprintf(want, sizeof(want), "CMWQ_ITEM=%s", id);

        e = JOURNAL_FIND(15000, "CMWQ_QUEUE=build", "CMWQ_UID=0", "SYSLOG_IDENTIFIER=cmwqd",
                         "MESSAGE=Created workqueue build *");
        ck_assert_msg(e, "no line about the queue with its fields:\n%s", journal_dump());
        free(e);
        e = JOURNAL_FIND(15000, "CMWQ_QUEUE=build", want, "CMWQ_UID=0", "CMWQ_CPU=0", "PRIORITY=7",
                         "MESSAGE=Queued item *");
        ck_assert_msg(e, "no queueing line with the item's fields:\n%s", journal_dump());
        free(e);
        snprintf(want, sizeof(want), "MESSAGE=Item %s of workqueue build finished: exit status 0", id);
        e = JOURNAL_FIND(15000, "CMWQ_QUEUE=build", want, "CMWQ_UID=0", "CMWQ_CPU=0");
        ck_assert_msg(e, "no line about the item's end:\n%s", journal_dump());
        free(e);
        /* A line about the daemon is about no queue. */
        e = JOURNAL_FIND(15000, "SYSLOG_IDENTIFIER=cmwqd", "PRIORITY=6",
                         "MESSAGE=cmwqd " PACKAGE_VERSION " listening on *");
        ck_assert_msg(e, "no start-up line:\n%s", journal_dump());
        ck_assert_msg(!strstr(e, "CMWQ_"), "the start-up line has fields: %s", e);
        free(e);
        free(id);
        cmwqd_stop(&d);
}
END_TEST

int main(void) {
        Suite *s = suite_create("journal");
        TCase *fields = tcase_create("fields"), *log = tcase_create("log"), *daemon = tcase_create("daemon");
        SRunner *sr;
        int failed;

        tcase_add_test(fields, test_fields_of_an_item);
        tcase_add_test(fields, test_fields_of_a_queue);
        tcase_add_test(fields, test_fields_of_a_pool);
        tcase_add_test(fields, test_no_fields);
        tcase_add_test(fields, test_long_value_is_cut);
        suite_add_tcase(s, fields);
        tcase_add_test(log, test_line_about_an_item_in_the_journal);
        tcase_add_test(log, test_line_about_an_item_on_stderr);
        suite_add_tcase(s, log);
        tcase_set_timeout(daemon, 120);
        tcase_add_test(daemon, test_daemon_lines_about_queues_and_items);
        suite_add_tcase(s, daemon);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

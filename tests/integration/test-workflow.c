/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What a shell user checks of the workqueue semantics (doc/design.md §3.7,
 * §3.8): flush, drain, cancel, delayed items, work keys,
 * EX_TEMPFAIL requeues, --timeout, output capture, freeze/thaw, destroy and
 * refused values.  Every race is given seconds on its long side, so that a
 * busy two-CPU machine does not make these flaky.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define SEC INT64_C(1000000000)
#define MSEC INT64_C(1000000)

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

/* The timestamp of the first "TAG WHAT <ns> <cpu>" line of @log, 0 if none. */
static int64_t probe_ts(const char *log, const char *tag, const char *what) {
        char *s = read_file(log), *save = NULL;
        int64_t found = 0;

        for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char t[64], w[16];
                long long ts;

                if (sscanf(line, "%63s %15s %lld", t, w, &ts) == 3 && strcmp(t, tag) == 0 && strcmp(w, what) == 0) {
                        found = ts;
                        break;
                }
        }
        free(s);
        return found;
}

static int probe_count(const char *log, const char *tag, const char *what) {
        char *s = read_file(log), *save = NULL;
        int n = 0;

        for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char t[64], w[16];

                if (sscanf(line, "%63s %15s", t, w) == 2 && strcmp(t, tag) == 0 && strcmp(w, what) == 0)
                        n++;
        }
        free(s);
        return n;
}

static bool wait_for_probe(const char *log, const char *tag, const char *what, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 10) {
                if (probe_ts(log, tag, what))
                        return true;
                sleep_ms(10);
        }
        return false;
}

/* The value of "key":"..." in a one-line JSON object (first occurrence). */
static char *json_string_field(const char *json, const char *key) {
        char pat[64];
        const char *p, *e;

        snprintf(pat, sizeof(pat), "\"%s\":\"", key);
        p = strstr(json, pat);
        if (!p)
                return strdup("");
        p += strlen(pat);
        e = strchr(p, '"');
        return strndup(p, e ? (size_t) (e - p) : strlen(p));
}

static char *item_state(const char *id) {
        char *json = CTL_OK(&d, "--json", "show", id), *state;

        state = json_string_field(json, "state");
        free(json);
        return state;
}

#define ck_assert_state(id, expected)                                                                   \
        do {                                                                                            \
                char *_s = item_state(id);                                                              \
                ck_assert_msg(strcmp(_s, expected) == 0, "item %s is %s, expected %s", id, _s, expected); \
                free(_s);                                                                               \
        } while (0)

/* The JSON object of workqueue @name in "list --json", or NULL. */
static char *list_entry(const char *name) {
        char *json = CTL_OK(&d, "--json", "list"), pat[128], *p, *e, *r = NULL;

        snprintf(pat, sizeof(pat), "{\"name\":\"%s\",", name);
        p = strstr(json, pat);
        if (p) {
                e = strchr(p, '}');
                r = strndup(p, e ? (size_t) (e - p + 1) : strlen(p));
        }
        free(json);
        return r;
}

static bool queue_flag_is(const char *name, const char *field, bool value) {
        char *entry = list_entry(name), pat[64];
        bool r;

        snprintf(pat, sizeof(pat), "\"%s\":%s", field, value ? "true" : "false");
        r = entry && strstr(entry, pat);
        free(entry);
        return r;
}

static bool wait_until_draining(const char *name, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 20) {
                if (queue_flag_is(name, "draining", true))
                        return true;
                sleep_ms(20);
        }
        return false;
}

/* How many processes have @arg as one of their arguments. */
static int procs_with_arg(const char *arg) {
        DIR *dir = opendir("/proc");
        struct dirent *de;
        int n = 0;

        ck_assert_ptr_nonnull(dir);
        while ((de = readdir(dir))) {
                char path[300], buf[4096];
                ssize_t len;
                int fd;

                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                len = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (len <= 0)
                        continue;       /* gone, or a zombie */
                buf[len] = 0;
                for (char *p = buf; p < buf + len; p += strlen(p) + 1)
                        if (strcmp(p, arg) == 0) {
                                n++;
                                break;
                        }
        }
        closedir(dir);
        return n;
}

static bool wait_no_procs_with_arg(const char *arg, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 20) {
                if (procs_with_arg(arg) == 0)
                        return true;
                sleep_ms(20);
        }
        return false;
}

/* Waits up to @timeout_ms for the daemon's log to say @what. */
static bool wait_in_log(const char *what, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 10) {
                char *log = read_file(d.log);
                bool found = strstr(log, what) != NULL;

                free(log);
                if (found)
                        return true;
                sleep_ms(10);
        }
        return false;
}

/* flush waits for the items queued before it, not for those queued after.
 * A and B wait at gates: A's opens once B is queued, B's at the end. */
START_TEST(test_flush_waits_for_earlier_items_only) {
        struct ctl_async flush;
        struct ctl_result r;
        struct file_gate ga, gb;
        char log[400], *a, *b;
        int64_t a_end;

        test_path(&d, "flush.log", log, sizeof(log));
        file_gate_close(&d, &ga, "flush-a.gate");
        file_gate_close(&d, &gb, "flush-b.gate");
        free(CTL_OK(&d, "create", "fq", "--unbound"));

        a = CTL_OK(&d, "submit", "fq", "--", d.probe, "wait", ga.path, log, "A");
        ck_assert_msg(wait_for_probe(log, "A", "start", 60000), "A did not start");

        CTL_START(&d, &flush, "flush", "fq");
        /* The daemon has the flush before B is queued. */
        ck_assert_msg(wait_in_log("Flush of fq waits", 60000), "cmwqd did not get the flush; log:\n%s",
                      read_file(d.log));

        b = CTL_OK(&d, "submit", "fq", "--", d.probe, "wait", gb.path, log, "B");
        ck_assert_msg(!ctl_finish(&flush, 0, &r), "flush returned while A still ran: %d %s", r.status, r.err);
        file_gate_open(&ga);
        ck_assert_msg(ctl_finish(&flush, 60000, &r), "flush did not return within 60 s of A's end");
        ck_assert_msg(r.status == 0, "flush exited %d: %s", r.status, r.err);
        ctl_result_free(&r);

        /* When flush returned: A had ended, B had not. */
        a_end = probe_ts(log, "A", "end");
        ck_assert_msg(a_end > 0, "flush returned before A ended");
        ck_assert_msg(a_end > flush.started_ns, "precondition: A ended before the flush was even sent");
        ck_assert_msg(a_end <= flush.ended_ns, "flush returned at %lld, before A ended at %lld",
                      (long long) flush.ended_ns, (long long) a_end);
        ck_assert_msg(probe_ts(log, "B", "end") == 0, "flush waited for B, which was queued after it");
        ck_assert_msg(wait_for_probe(log, "B", "start", 60000), "B did not start");

        free(CTL_OK(&d, "cancel", b));
        file_gate_open(&gb);
        free(a);
        free(b);
}
END_TEST

/* drain waits for an item that requeues itself; new work is refused meanwhile. */
START_TEST(test_drain_waits_for_requeues_and_refuses_new_work) {
        struct ctl_async drain;
        struct ctl_result r;
        struct file_gate g;
        char slog[400], tlog[400], *s, *t, *json;

        test_path(&d, "drain-s.log", slog, sizeof(slog));
        test_path(&d, "drain-t.log", tlog, sizeof(tlog));
        file_gate_close(&d, &g, "drain.gate");
        free(CTL_OK(&d, "create", "dq", "--unbound", "--max-active", "1"));

        /* S holds the queue (at its gate), so that the drain surely starts
         * before T first runs. */
        s = CTL_OK(&d, "submit", "dq", "--", d.probe, "wait", g.path, slog, "S");
        ck_assert_msg(wait_for_probe(slog, "S", "start", 60000), "S did not start");
        t = CTL_OK(&d, "submit", "dq", "--", d.probe, "tempfail", tlog, "T", "3");

        CTL_START(&d, &drain, "drain", "dq");
        ck_assert_msg(wait_until_draining("dq", 60000), "dq was never reported draining");

        CTL(&d, &r, "submit", "dq", "--", "/bin/true");
        ck_assert_msg(r.status == 1, "submit while draining exited %d: %s", r.status, r.err);
        ck_assert_msg(strstr(r.err, "drain"), "refusal does not mention draining: %s", r.err);
        ck_assert_msg(strncmp(r.err, "cmwqctl:", 8) == 0, "stderr: %s", r.err);
        ctl_result_free(&r);

        file_gate_open(&g);
        ck_assert_msg(ctl_finish(&drain, 60000, &r), "drain did not return within 60 s");
        ck_assert_msg(r.status == 0, "drain exited %d: %s", r.status, r.err);
        ctl_result_free(&r);

        /* It returned only after T's third (successful) run. */
        ck_assert_int_eq(probe_count(tlog, "T", "run"), 3);
        ck_assert_state(t, "finished");
        json = CTL_OK(&d, "--json", "show", t);
        ck_assert_msg(strstr(json, "\"requeues\":2"), "show --json: %s", json);
        ck_assert_msg(strstr(json, "\"exit_status\":0"), "show --json: %s", json);
        free(json);
        ck_assert_state(s, "finished");
        ck_assert_msg(queue_flag_is("dq", "draining", false), "dq still draining after drain returned");

        /* Once drained, the queue takes work again. */
        free(CTL_OK(&d, "submit", "dq", "--wait", "--", "/bin/true"));
        free(s);
        free(t);
}
END_TEST

/* cancel of a pending item and of a running one. */
START_TEST(test_cancel_pending_and_running) {
        struct ctl_result r;
        char llog[400], plog[400], *l, *p, *s;
        int64_t t0;

        test_path(&d, "cancel-l.log", llog, sizeof(llog));
        test_path(&d, "cancel-p.log", plog, sizeof(plog));
        free(CTL_OK(&d, "create", "cq", "--unbound", "--max-active", "1"));

        /* L is a process tree: a probe in the background and one in the
         * foreground of a shell, all in the item's process group. */
        l = CTL_OK(&d, "submit", "cq", "--", "/bin/sh", "-c", "\"$0\" sleep 30000 \"$1\" L1 & \"$0\" sleep 30000 \"$1\" L2; wait",
                   d.probe, llog);
        ck_assert_msg(wait_for_probe(llog, "L1", "start", 10000), "L1 did not start");
        ck_assert_msg(wait_for_probe(llog, "L2", "start", 10000), "L2 did not start");
        ck_assert_int_eq(procs_with_arg(llog), 3);

        /* P waits behind L (max_active 1). */
        p = CTL_OK(&d, "submit", "cq", "--", d.probe, "sleep", "10", plog, "P");
        s = item_state(p);
        ck_assert_msg(strcmp(s, "inactive") == 0 || strcmp(s, "pending") == 0, "P is %s", s);
        free(s);
        free(CTL_OK(&d, "cancel", p));
        ck_assert_state(p, "cancelled");
        CTL(&d, &r, "wait", p);
        ck_assert_int_eq(r.status, 125);
        ctl_result_free(&r);

        /* The running one: cancel returns once it has ended. */
        t0 = mono_ns();
        CTL(&d, &r, "cancel", l);
        ck_assert_msg(r.status == 0, "cancel exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        /* Killed, not waited for (it would sleep 30 s): not even near that. */
        ck_assert_msg(mono_ns() - t0 < 20 * SEC, "cancel of a running item took %lld ms",
                      (long long) ((mono_ns() - t0) / MSEC));
        ck_assert_state(l, "cancelled");
        CTL(&d, &r, "wait", l);
        ck_assert_msg(r.status == 125, "wait exited %d: %s", r.status, r.err);
        ck_assert_msg(strstr(r.err, "cancelled"), "stderr: %s", r.err);
        ctl_result_free(&r);
        ck_assert_msg(wait_no_procs_with_arg(llog, 30000), "%d processes of the cancelled item remain",
                      procs_with_arg(llog));

        /* Neither the cancelled tree nor the cancelled pending item goes on. */
        sleep_ms(1000);
        ck_assert_int_eq(probe_count(llog, "L1", "end"), 0);
        ck_assert_int_eq(probe_count(llog, "L2", "end"), 0);
        ck_assert_msg(count_lines(plog) == 0, "the cancelled pending item ran");
        free(l);
        free(p);
}
END_TEST

/* --delay: not started before the delay, shown as delayed, cancellable. */
START_TEST(test_delayed_items) {
        struct ctl_result r;
        char xlog[400], ylog[400], *x, *y, *shown;
        int64_t t0, t1, start;

        test_path(&d, "delay-x.log", xlog, sizeof(xlog));
        test_path(&d, "delay-y.log", ylog, sizeof(ylog));

        t0 = mono_ns();
        x = CTL_OK(&d, "submit", "system", "--delay", "1", "--", d.probe, "sleep", "10", xlog, "X");
        shown = CTL_OK(&d, "show", x);
        ck_assert_msg(strstr(shown, "delayed"), "show of a delayed item said: %s", shown);
        free(shown);

        t1 = mono_ns();
        y = CTL_OK(&d, "submit", "system", "--delay", "2", "--", d.probe, "sleep", "10", ylog, "Y");
        ck_assert_state(y, "delayed");
        free(CTL_OK(&d, "cancel", y));
        ck_assert_state(y, "cancelled");
        CTL(&d, &r, "wait", y);
        ck_assert_int_eq(r.status, 125);
        ctl_result_free(&r);

        CTL(&d, &r, "wait", x);
        ck_assert_msg(r.status == 0, "wait exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        start = probe_ts(xlog, "X", "start");
        ck_assert_msg(start > 0, "X did not run");
        ck_assert_msg(start - t0 >= 1 * SEC, "X started %lld ms after submission, before its 1 s delay",
                      (long long) ((start - t0) / MSEC));
        ck_assert_msg(start - t0 < 60 * SEC, "X started only %lld ms after submission",
                      (long long) ((start - t0) / MSEC));

        /* Well past Y's due time: it never ran. */
        while (mono_ns() < t1 + 3 * SEC)
                sleep_ms(50);
        ck_assert_msg(count_lines(ylog) == 0, "the cancelled delayed item ran");
        free(x);
        free(y);
}
END_TEST

/* --key: a key that is pending is not queued again; once run, it can be. */
START_TEST(test_work_key) {
        struct ctl_async waiter;
        struct ctl_result r;
        char blog[400], klog[400], *b, *k1, *k3, expect[64];

        test_path(&d, "key-b.log", blog, sizeof(blog));
        test_path(&d, "key-k.log", klog, sizeof(klog));
        free(CTL_OK(&d, "create", "kq", "--unbound", "--max-active", "1"));

        b = CTL_OK(&d, "submit", "kq", "--", d.probe, "sleep", "30000", blog, "B");
        ck_assert_msg(wait_for_probe(blog, "B", "start", 10000), "B did not start");

        k1 = CTL_OK(&d, "submit", "kq", "--key", "K", "--", d.probe, "sleep", "10", klog, "K");
        ck_assert_state(k1, "inactive");
        CTL(&d, &r, "submit", "kq", "--key", "K", "--", d.probe, "sleep", "10", klog, "K");
        ck_assert_msg(r.status == 0, "second submit exited %d: %s", r.status, r.err);
        snprintf(expect, sizeof(expect), "%s\n", k1);
        ck_assert_str_eq(r.out, expect);
        ck_assert_msg(strstr(r.err, "already pending"), "stderr: %s", r.err);
        ctl_result_free(&r);
        /* With --wait: the pending item's result, and the note says whose
         * (before, the result came as if the command given had run).  B
         * goes once cmwqd has the waiting submission (its debug log). */
        CTL_START(&d, &waiter, "submit", "kq", "--key", "K", "--wait", "--", "/bin/echo", "not run");
        snprintf(expect, sizeof(expect), "Client pid %d waits for item %s,", (int) waiter.pid, k1);
        for (int waited = 0;; waited += 20) {
                char *log = read_file(d.log);
                bool parked = strstr(log, expect);

                free(log);
                if (parked)
                        break;
                ck_assert_msg(waited < 30000, "cmwqd did not log '%s'", expect);
                sleep_ms(20);
        }

        free(CTL_OK(&d, "cancel", b));
        ck_assert_msg(ctl_finish(&waiter, 30000, &r), "submit --key --wait did not end");
        ck_assert_msg(r.status == 0, "submit --key --wait exited %d: %s", r.status, r.err);
        snprintf(expect, sizeof(expect), "already pending as item %s", k1);
        ck_assert_msg(strstr(r.err, expect), "submit --key --wait did not say the key was pending: %s", r.err);
        ck_assert_msg(!strstr(r.out, "not run"), "the command given ran: %s", r.out);
        ctl_result_free(&r);
        CTL(&d, &r, "wait", k1);
        ck_assert_msg(r.status == 0, "wait exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        sleep_ms(500);
        ck_assert_int_eq(probe_count(klog, "K", "start"), 1);

        /* It ran: the key is free again. */
        k3 = CTL_OK(&d, "submit", "kq", "--key", "K", "--", d.probe, "sleep", "10", klog, "K");
        ck_assert_msg(strcmp(k3, k1) != 0, "the key was still taken by finished item %s", k1);
        CTL(&d, &r, "wait", k3);
        ck_assert_msg(r.status == 0, "wait exited %d: %s", r.status, r.err);
        ck_assert_msg(!strstr(r.err, "already pending"), "stderr: %s", r.err);
        ctl_result_free(&r);
        ck_assert_int_eq(probe_count(klog, "K", "start"), 2);
        free(b);
        free(k1);
        free(k3);
}
END_TEST

/* Exit code 75 requeues the item until it succeeds. */
START_TEST(test_tempfail_requeues) {
        struct ctl_result r;
        char log[400], *id, *json;

        test_path(&d, "tempfail.log", log, sizeof(log));
        id = CTL_OK(&d, "submit", "system", "--", d.probe, "tempfail", log, "T", "3");
        CTL(&d, &r, "wait", id);
        ck_assert_msg(r.status == 0, "wait exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        ck_assert_int_eq(probe_count(log, "T", "run"), 3);

        json = CTL_OK(&d, "--json", "show", id);
        ck_assert_msg(strstr(json, "\"state\":\"finished\""), "show --json: %s", json);
        ck_assert_msg(strstr(json, "\"requeues\":2"), "show --json: %s", json);
        ck_assert_msg(strstr(json, "\"exit_status\":0"), "show --json: %s", json);
        free(json);

        sleep_ms(1000);
        ck_assert_msg(probe_count(log, "T", "run") == 3, "it ran again after succeeding");
        free(id);
}
END_TEST

/* --timeout stops the whole process tree and is reported as such. */
START_TEST(test_timeout_kills_process_tree) {
        struct ctl_result r;
        char marker[32], script[128], *id, *shown, *json;
        int64_t t0;

        snprintf(marker, sizeof(marker), "30.%d", (int) getpid());
        snprintf(script, sizeof(script), "sleep %s & echo started; sleep %s", marker, marker);

        t0 = mono_ns();
        /* 2 s: under load, sh may take a good part of a second to echo. */
        id = CTL_OK(&d, "submit", "system", "--timeout", "2", "--", "/bin/sh", "-c", script);
        CTL(&d, &r, "wait", id);
        ck_assert_msg(r.status == 124, "wait exited %d: %s", r.status, r.err);
        ck_assert_msg(strstr(r.err, "timed out"), "stderr: %s", r.err);
        ck_assert_msg(strstr(r.out, "started"), "the background sleep was not started: %s", r.out);
        ctl_result_free(&r);
        ck_assert_msg(mono_ns() - t0 < 20 * SEC, "a 2 s timeout took %lld ms (the item sleeps 30 s)",
                      (long long) ((mono_ns() - t0) / MSEC));

        shown = CTL_OK(&d, "show", id);
        ck_assert_msg(strstr(shown, "timed out:"), "show said: %s", shown);
        free(shown);
        json = CTL_OK(&d, "--json", "show", id);
        ck_assert_msg(strstr(json, "\"timed_out\":true"), "show --json: %s", json);
        free(json);

        ck_assert_msg(wait_no_procs_with_arg(marker, 30000), "%d 'sleep %s' of the timed-out item remain",
                      procs_with_arg(marker), marker);
        free(id);
}
END_TEST

/* stdout and stderr are captured apart; output past 64 KiB is cut and said so. */
START_TEST(test_output_capture) {
        struct ctl_result r;
        char *id, *shown, *json;
        size_t n;

        CTL(&d, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c", "echo to-out; echo to-err >&2");
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, "to-out\n");
        ck_assert_msg(strstr(r.err, "to-err\n") && !strstr(r.err, "to-out"), "stderr: %s", r.err);
        ck_assert_msg(!strstr(r.err, "truncated"), "stderr: %s", r.err);
        ctl_result_free(&r);

        id = CTL_OK(&d, "submit", "system", "--", "/bin/sh", "-c",
                    "head -c 100000 /dev/zero | tr '\\000' x; echo small >&2");
        CTL(&d, &r, "wait", id);
        ck_assert_int_eq(r.status, 0);
        n = strlen(r.out);
        ck_assert_msg(n == 64 * 1024, "got %zu bytes of stdout, expected 64 KiB", n);
        ck_assert_msg(strspn(r.out, "x") == n, "stdout is not the item's");
        ck_assert_msg(strstr(r.err, "small\n"), "stderr: %s", r.err);
        ck_assert_msg(strstr(r.err, "stdout was truncated"), "stderr: %s", r.err);
        ck_assert_msg(!strstr(r.err, "stderr was truncated"), "stderr: %s", r.err);
        ctl_result_free(&r);

        shown = CTL_OK(&d, "show", id);
        ck_assert_msg(strstr(shown, "65536 bytes (truncated)"), "show did not report the truncation");
        free(shown);
        json = CTL_OK(&d, "--json", "show", id);
        ck_assert_msg(strstr(json, "\"stdout_truncated\":true"), "show --json lacks stdout_truncated");
        ck_assert_msg(strstr(json, "\"stderr\":\"small\\n\""), "show --json lacks stderr");
        ck_assert_msg(strstr(json, "\"stderr_truncated\":false"), "show --json lacks stderr_truncated");
        free(json);
        free(id);
}
END_TEST

/* freeze lets the running item finish and starts nothing; thaw resumes in order. */
/* A freeze bounded by --timeout while an item keeps running: it says which
 * item held it, and the queue stays frozen until thawed. */
START_TEST(test_freeze_timeout_names_the_holder) {
        struct ctl_result r;
        char *id, *out;

        free(CTL_OK(&d, "create", "hq", "--freezable"));
        id = CTL_OK(&d, "submit", "hq", "--", "/bin/sleep", "30.4711");
        /* Running, so that the freeze has something to wait for. */
        for (int64_t deadline = mono_ns() + 60 * SEC;;) {
                char *state = item_state(id);
                bool running = strcmp(state, "running") == 0;

                free(state);
                if (running)
                        break;
                ck_assert_msg(mono_ns() < deadline, "the item did not start within 60 s");
                sleep_ms(20);
        }
        CTL(&d, &r, "freeze", "hq", "--timeout", "0.3");
        ck_assert_msg(r.status == 1, "freeze exited %d: %s", r.status, r.err);
        ck_assert_msg(strstr(r.err, "timed out") && strstr(r.err, "30.4711"), "stderr: %s", r.err);
        ctl_result_free(&r);

        CTL(&d, &r, "--json", "freeze", "hq", "--timeout", "0.3");
        ck_assert_msg(strstr(r.out, "\"holding\"") && strstr(r.out, "30.4711"), "stdout: %s", r.out);
        ctl_result_free(&r);

        out = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(out, "\"frozen\":true"), "list: %s", out);
        free(out);
        free(CTL_OK(&d, "thaw", "hq"));
        free(CTL_OK(&d, "cancel", id));
        free(id);
}
END_TEST

/* Two freezes with their own timeouts (a suspend's and a short one from the
 * shell): the short one times out alone, the long one keeps waiting for the
 * running item and ends when it does. */
START_TEST(test_freeze_timeouts_are_per_caller) {
        struct ctl_async long_freeze;
        struct ctl_result r;
        char gate[512], started[512], cmd[1200], *id;
        FILE *f;

        test_path(&d, "gate", gate, sizeof(gate));
        test_path(&d, "started", started, sizeof(started));
        snprintf(cmd, sizeof(cmd), "echo up > '%s'; while [ ! -e '%s' ]; do sleep 0.05; done", started, gate);
        free(CTL_OK(&d, "create", "pq", "--freezable"));
        id = CTL_OK(&d, "submit", "pq", "--", "/bin/sh", "-c", cmd);
        ck_assert_msg(wait_for_lines(started, 1, 30000), "the item did not start");

        CTL_START(&d, &long_freeze, "freeze", "pq", "--timeout", "60");
        CTL(&d, &r, "freeze", "pq", "--timeout", "0.3");
        ck_assert_msg(r.status == 1 && strstr(r.err, "timed out"), "short freeze: %d %s", r.status, r.err);
        ctl_result_free(&r);

        /* The short timeout must not have ended the long freeze. */
        ck_assert_msg(!ctl_finish(&long_freeze, 500, &r), "the long freeze ended with the short one");

        f = fopen(gate, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        ck_assert_msg(ctl_finish(&long_freeze, 30000, &r), "the long freeze did not end with the item");
        ck_assert_msg(r.status == 0, "long freeze exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        free(CTL_OK(&d, "thaw", "pq"));
        free(id);
}
END_TEST

START_TEST(test_freeze_and_thaw) {
        struct ctl_async other;
        struct ctl_result r;
        char log[400], nlog[400], *rid, *p[3], *f, *json;
        struct span spans[8];
        struct ctl_async freeze;
        struct file_gate g;
        int64_t t_freeze, t_frozen, r_end;
        int n;

        test_path(&d, "freeze.log", log, sizeof(log));
        test_path(&d, "freeze-n.log", nlog, sizeof(nlog));
        file_gate_close(&d, &g, "freeze.gate");
        free(CTL_OK(&d, "create", "fz", "--freezable", "--unbound", "--max-active", "1"));

        rid = CTL_OK(&d, "submit", "fz", "--", d.probe, "wait", g.path, log, "R");
        ck_assert_msg(wait_for_probe(log, "R", "start", 60000), "R did not start");
        for (int k = 0; k < 3; k++) {
                char tag[8];

                snprintf(tag, sizeof(tag), "P%d", k + 1);
                p[k] = CTL_OK(&d, "submit", "fz", "--", d.probe, "sleep", "200", log, tag);
        }

        /* The freeze waits for R, which ends once the daemon has frozen fz. */
        t_freeze = mono_ns();
        CTL_START(&d, &freeze, "freeze", "fz");
        ck_assert_msg(wait_in_log("Froze fz", 60000), "cmwqd did not get the freeze; log:\n%s", read_file(d.log));
        ck_assert_msg(!ctl_finish(&freeze, 0, &r), "freeze returned while R still ran: %d %s", r.status, r.err);
        file_gate_open(&g);
        ck_assert_msg(ctl_finish(&freeze, 60000, &r), "freeze did not return within 60 s of R's end");
        t_frozen = freeze.ended_ns;
        ck_assert_msg(r.status == 0, "freeze exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        r_end = probe_ts(log, "R", "end");
        ck_assert_msg(r_end > 0, "freeze returned while R still ran");
        ck_assert_msg(r_end > t_freeze, "precondition: R ended before freeze was sent");
        ck_assert_msg(r_end <= t_frozen, "freeze returned before R ended");
        ck_assert_msg(queue_flag_is("fz", "frozen", true), "fz is not listed frozen");

        /* Frozen: the pending items stay put. */
        sleep_ms(1000);
        for (int k = 0; k < 3; k++) {
                char tag[8];

                snprintf(tag, sizeof(tag), "P%d", k + 1);
                ck_assert_msg(probe_count(log, tag, "start") == 0, "%s started while frozen", tag);
                ck_assert_state(p[k], "inactive");
        }

        free(CTL_OK(&d, "thaw", "fz"));
        CTL(&d, &r, "wait", p[2]);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        n = read_spans(log, spans, 8);
        ck_assert_int_eq(n, 4);
        const struct span *s1 = find_span(spans, n, "P1"), *s2 = find_span(spans, n, "P2"),
                          *s3 = find_span(spans, n, "P3");
        ck_assert_msg(s1 && s2 && s3, "not all of P1-P3 ran");
        ck_assert_msg(s1->start > t_frozen, "P1 started before the thaw");
        ck_assert_msg(s1->end <= s2->start && s2->end <= s3->start, "P1-P3 did not run one by one in order");

        /* Freezing everything holds fz, not the non-freezable "system". */
        free(CTL_OK(&d, "freeze"));
        f = CTL_OK(&d, "submit", "fz", "--", d.probe, "sleep", "10", log, "F");
        CTL_START(&d, &other, "submit", "system", "--wait", "--", d.probe, "sleep", "10", nlog, "N");
        ck_assert_msg(ctl_finish(&other, 60000, &r), "an item of non-freezable 'system' did not run while frozen");
        ck_assert_msg(r.status == 0, "submit --wait exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        ck_assert_int_eq(probe_count(nlog, "N", "end"), 1);
        json = list_entry("system");
        ck_assert_msg(json && strstr(json, "\"frozen\":false"), "system: %s", json);
        free(json);

        sleep_ms(1000);
        ck_assert_msg(probe_count(log, "F", "start") == 0, "F started while everything was frozen");
        ck_assert_state(f, "inactive");
        free(CTL_OK(&d, "thaw"));
        CTL(&d, &r, "wait", f);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);
        ck_assert_msg(queue_flag_is("fz", "frozen", false), "fz still frozen after thaw");

        free(rid);
        for (int k = 0; k < 3; k++)
                free(p[k]);
        free(f);
}
END_TEST

/* destroy drains first; built-in queues cannot be destroyed. */
START_TEST(test_destroy_drains_then_removes) {
        struct ctl_async destroy;
        struct ctl_result r;
        struct file_gate g;
        char log[400], *rid, *p1, *p2, *list;

        test_path(&d, "destroy.log", log, sizeof(log));
        file_gate_close(&d, &g, "destroy.gate");
        free(CTL_OK(&d, "create", "dz", "--unbound", "--max-active", "1"));
        rid = CTL_OK(&d, "submit", "dz", "--", d.probe, "wait", g.path, log, "R");
        ck_assert_msg(wait_for_probe(log, "R", "start", 60000), "R did not start");
        p1 = CTL_OK(&d, "submit", "dz", "--", d.probe, "sleep", "100", log, "P1");
        p2 = CTL_OK(&d, "submit", "dz", "--", d.probe, "sleep", "100", log, "P2");

        CTL_START(&d, &destroy, "destroy", "dz");
        ck_assert_msg(wait_until_draining("dz", 60000), "dz was never reported draining");
        CTL(&d, &r, "submit", "dz", "--", "/bin/true");
        ck_assert_msg(r.status == 1, "submit while destroying exited %d: %s", r.status, r.err);
        ctl_result_free(&r);

        file_gate_open(&g);
        ck_assert_msg(ctl_finish(&destroy, 60000, &r), "destroy did not return within 60 s of R's end");
        ck_assert_msg(r.status == 0, "destroy exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        ck_assert_int_eq(probe_count(log, "R", "end"), 1);
        ck_assert_int_eq(probe_count(log, "P1", "end"), 1);
        ck_assert_int_eq(probe_count(log, "P2", "end"), 1);
        ck_assert_state(p2, "finished");

        list = CTL_OK(&d, "--json", "list");
        ck_assert_msg(!strstr(list, "\"name\":\"dz\""), "destroyed queue still listed: %s", list);
        free(list);
        CTL(&d, &r, "submit", "dz", "--", "/bin/true");
        ck_assert_int_eq(r.status, 1);
        ctl_result_free(&r);

        CTL(&d, &r, "destroy", "system");
        ck_assert_msg(r.status == 1, "destroy system exited %d: %s", r.status, r.err);
        ck_assert_msg(strstr(r.err, "built-in"), "stderr: %s", r.err);
        ctl_result_free(&r);
        list = CTL_OK(&d, "list");
        ck_assert_msg(strstr(list, "system "), "system is gone: %s", list);
        free(list);
        free(rid);
        free(p1);
        free(p2);
}
END_TEST

/* max_active above the kernel's limit (512) is refused, exit 1 ("invalid
 * value", cmwqctl(1) EXIT STATUS). */
START_TEST(test_set_max_active_out_of_range_refused) {
        struct ctl_result r;
        char *entry;

        free(CTL_OK(&d, "create", "mq", "--max-active", "4"));
        CTL(&d, &r, "set-max-active", "mq", "513");
        /* Out of the documented range: a usage error, caught before asking cmwqd. */
        ck_assert_msg(r.status == 2, "set-max-active 513 exited %d: %s", r.status, r.err);
        ck_assert_msg(strncmp(r.err, "cmwqctl:", 8) == 0 && strstr(r.err, "512"), "stderr: %s", r.err);
        ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "more than one line: %s", r.err);
        ctl_result_free(&r);
        entry = list_entry("mq");
        ck_assert_msg(entry && strstr(entry, "\"max_active\":4"), "mq: %s", entry);
        free(entry);

        free(CTL_OK(&d, "set-max-active", "mq", "512"));
        entry = list_entry("mq");
        ck_assert_msg(entry && strstr(entry, "\"max_active\":512"), "mq: %s", entry);
        free(entry);
}
END_TEST

/* Bad names and an out-of-range max_active at create are refused with one
 * clear line, and nothing is created. */
START_TEST(test_create_bad_values_refused) {
        struct ctl_result r;
        char *list;

        /* Outside their documented ranges: usage errors (exit 2, cmwqctl(1)),
         * judged by cmwqctl before it connects. */
        CTL(&d, &r, "create", "bad/name");
        ck_assert_msg(r.status == 2, "create bad/name exited %d: %s", r.status, r.err);
        ck_assert_msg(strncmp(r.err, "cmwqctl:", 8) == 0 && strstr(r.err, "NAME"), "stderr: %s", r.err);
        ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "more than one line: %s", r.err);
        ctl_result_free(&r);
        CTL(&d, &r, "create", "has space");
        ck_assert_msg(r.status == 2, "create 'has space' exited %d: %s", r.status, r.err);
        ctl_result_free(&r);

        CTL(&d, &r, "create", "mq2", "--max-active", "513");
        ck_assert_msg(r.status == 2, "create --max-active 513 exited %d: %s", r.status, r.err);
        ck_assert_msg(strncmp(r.err, "cmwqctl:", 8) == 0 && strstr(r.err, "512"), "stderr: %s", r.err);
        ctl_result_free(&r);

        list = CTL_OK(&d, "--json", "list");
        ck_assert_msg(!strstr(list, "bad/name") && !strstr(list, "has space") && !strstr(list, "\"mq2\""),
                      "a refused queue was created: %s", list);
        free(list);
}
END_TEST

int main(void) {
        Suite *s = suite_create("workflow");
        TCase *tc = tcase_create("workflow");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_flush_waits_for_earlier_items_only);
        tcase_add_test(tc, test_drain_waits_for_requeues_and_refuses_new_work);
        tcase_add_test(tc, test_cancel_pending_and_running);
        tcase_add_test(tc, test_delayed_items);
        tcase_add_test(tc, test_work_key);
        tcase_add_test(tc, test_tempfail_requeues);
        tcase_add_test(tc, test_timeout_kills_process_tree);
        tcase_add_test(tc, test_output_capture);
        tcase_add_test(tc, test_freeze_and_thaw);
        tcase_add_test(tc, test_freeze_timeout_names_the_holder);
        tcase_add_test(tc, test_freeze_timeouts_are_per_caller);
        tcase_add_test(tc, test_destroy_drains_then_removes);
        tcase_add_test(tc, test_set_max_active_out_of_range_refused);
        tcase_add_test(tc, test_create_bad_values_refused);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

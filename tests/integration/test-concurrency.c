/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Concurrency management, the workqueue flags and max_active, observed
 * through the CLOCK_MONOTONIC timestamps the probe items write
 * (doc/design.md §3.1 to §3.4).
 *
 * Every test runs three times, once per sleep detector (TCase "perf", with
 * the idle sentinels of the default: records read when a busy CPU is about
 * to idle, and TCase "proc") and once with perf and --no-idle-sentinels
 * (TCase "perf-eager": records read at every switch), each with a fresh
 * daemon.  The tests assert properties -- how many
 * items overlapped, in which order they ran, which pool ran them -- and never
 * timings: an item that must still run while others start waits at a gate
 * (a file the test holds locked: "probe wait" blocks on it, "probe
 * spin-until" computes until it opens) that the test opens once it has seen
 * what it waits for, so a loaded machine only makes a test slower.
 *
 * Where a property needs several items to be pending at the same moment
 * (rather than trickling in at cmwqctl's pace), the queue is FREEZABLE: it is
 * frozen, the items are queued, and the thaw releases them all at once.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define MAX_SPANS 32
/* Only for what must happen eventually: a failing test waits this long. */
#define START_TIMEOUT_MS 60000

static struct cmwqd d;

/* Waits up to 60 s for the daemon's log to say @what. */
static bool log_says(const char *what) {
        for (int waited = 0; waited <= 60000; waited += 10) {
                char *log = read_file(d.log);
                bool found = strstr(log, what) != NULL;

                free(log);
                if (found)
                        return true;
                usleep(10000);
        }
        return false;
}

/* Starts cmwqd with @args and checks that its log says @what: cmwqd falls
 * back to the proc sampler where perf_event_open() is refused (for the whole
 * daemon, or per item), and to reading every record where the sentinels
 * cannot start; each TCase must really run what it names. */
static void start_checked(const char *const *args, const char *what) {
        char *log;

        cmwqd_start(&d, args);
        if (log_says(what))
                return;
        /* A failed checked setup skips the teardown: stop the daemon here. */
        log = read_file(d.log);
        kill(d.pid, SIGKILL);
        waitpid(d.pid, NULL, 0);
        ck_abort_msg("cmwqd's log does not say \"%s\" here; log:\n%s", what, log);
}

static void setup_perf(void) {
        start_checked((const char *const[]) { "--sleep-detector", "perf", NULL },
                      "when a busy CPU is about to idle (idle sentinels)");
}

static void setup_perf_eager(void) {
        start_checked((const char *const[]) { "--sleep-detector", "perf", "--no-idle-sentinels", NULL },
                      "at every switch (--no-idle-sentinels)");
}

static void setup_proc(void) {
        start_checked((const char *const[]) { "--sleep-detector", "proc", NULL }, "sleep detector proc");
}

static void teardown_perf(void) {
        char *log;

        cmwqd_stop(&d);
        log = read_file(d.log);
        ck_assert_msg(!strstr(log, "sampling /proc instead"), "perf was refused for an item; log:\n%s", log);
        free(log);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

/* ---- helpers ------------------------------------------------------------ */

/* Queues "probe MODE MS LOG TAG" on @queue (on CPU @cpu unless it is < 0)
 * and returns the item's id (free it). */
static char *submit_probe(const char *queue, int cpu, const char *mode, int ms, const char *log, const char *tag) {
        char cpu_s[16], ms_s[16];

        snprintf(cpu_s, sizeof(cpu_s), "%d", cpu);
        snprintf(ms_s, sizeof(ms_s), "%d", ms);
        if (cpu < 0)
                return CTL_OK(&d, "submit", queue, "--", d.probe, mode, ms_s, log, tag);
        return CTL_OK(&d, "submit", queue, "--cpu", cpu_s, "--", d.probe, mode, ms_s, log, tag);
}

static void submit_probe_n(const char *queue, int cpu, const char *mode, int ms, const char *log, int n) {
        for (int k = 0; k < n; k++) {
                char tag[16];

                snprintf(tag, sizeof(tag), "i%d", k);
                free(submit_probe(queue, cpu, mode, ms, log, tag));
        }
}

/* Queues "probe MODE GATE LOG TAG" (MODE "wait" or "spin-until") on @queue
 * (on CPU @cpu unless it is < 0) and returns the item's id (free it). */
static char *submit_gated(const char *queue, int cpu, const char *mode, const struct file_gate *g, const char *log,
                          const char *tag) {
        char cpu_s[16];

        snprintf(cpu_s, sizeof(cpu_s), "%d", cpu);
        if (cpu < 0)
                return CTL_OK(&d, "submit", queue, "--", d.probe, mode, g->path, log, tag);
        return CTL_OK(&d, "submit", queue, "--cpu", cpu_s, "--", d.probe, mode, g->path, log, tag);
}

/* @n of them, tagged i0, i1, ...; their ids into @ids unless it is NULL. */
static void submit_gated_n(const char *queue, int cpu, const char *mode, const struct file_gate *g, const char *log,
                           int n, char **ids) {
        for (int k = 0; k < n; k++) {
                char tag[16], *id;

                snprintf(tag, sizeof(tag), "i%d", k);
                id = submit_gated(queue, cpu, mode, g, log, tag);
                if (ids)
                        ids[k] = id;
                else
                        free(id);
        }
}

/* Waits (START_TIMEOUT_MS) for @n "WHAT" lines in @log, or fails with @why. */
static void wait_lines_or_fail(const char *log, const char *what, int n, const char *why) {
        if (!wait_for_probe_lines(log, what, n, START_TIMEOUT_MS))
                ck_abort_msg("%s (%d of %d '%s' lines in %d s); log:\n%s", why, count_probe_lines(log, what), n, what,
                             START_TIMEOUT_MS / 1000, read_file(log));
}

static void flush(const char *queue) {
        free(CTL_OK(&d, "flush", queue));
}

/* Reads the log's spans and fails unless there are exactly @expected. */
static int spans_of(const char *log, struct span *spans, int expected) {
        int n = read_spans(log, spans, MAX_SPANS);
        char *text;

        if (n != expected) {
                text = read_file(log);
                ck_abort_msg("%d of %d items ran to completion; log:\n%s", n, expected, text);
        }
        return n;
}

static void assert_all_on_cpu(const char *log, const struct span *spans, int n, int cpu) {
        for (int k = 0; k < n; k++)
                ck_assert_msg(spans[k].cpu == cpu, "%s started on CPU %d, not %d; log:\n%s", spans[k].tag,
                              spans[k].cpu, cpu, read_file(log));
}

static int cmp_start(const void *a, const void *b) {
        const struct span *x = a, *y = b;

        return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * Minimal readers for cmwqctl's --json output: arrays of flat objects
 * (list, pools, stats) and flat objects (show).  Values are looked up by key
 * inside one object, so the key order does not matter.
 */

/* The raw value of "@key": in [@obj, @end), or NULL. */
static const char *json_value(const char *obj, const char *end, const char *key) {
        char pattern[64];
        const char *p;
        size_t len;

        len = (size_t) snprintf(pattern, sizeof(pattern), "\"%s\":", key);
        p = strstr(obj, pattern);
        if (!p || p + len > end)
                return NULL;
        return p + len;
}

static long long json_int(const char *obj, const char *end, const char *key) {
        const char *v = json_value(obj, end, key);

        ck_assert_msg(v, "no \"%s\" in %.*s", key, (int) (end - obj), obj);
        return strtoll(v, NULL, 10);
}

static bool json_bool(const char *obj, const char *end, const char *key) {
        const char *v = json_value(obj, end, key);

        ck_assert_msg(v && (strncmp(v, "true", 4) == 0 || strncmp(v, "false", 5) == 0), "no boolean \"%s\" in %.*s",
                      key, (int) (end - obj), obj);
        return v[0] == 't';
}

static bool json_str_is(const char *obj, const char *end, const char *key, const char *want) {
        const char *v = json_value(obj, end, key);
        size_t len = strlen(want);

        return v && v[0] == '"' && v + 1 + len < end && strncmp(v + 1, want, len) == 0 && v[1 + len] == '"';
}

/* The next flat object of a JSON array from *@cursor: [*obj, *end). */
static bool json_next_object(const char **cursor, const char **obj, const char **end) {
        const char *o = strchr(*cursor, '{'), *e;

        if (!o)
                return false;
        e = strchr(o, '}');
        ck_assert_msg(e, "unterminated object: %s", o);
        *obj = o;
        *end = e;
        *cursor = e + 1;
        return true;
}

/* A counter of workqueue @queue from "cmwqctl --json stats". */
static long long stat_of(const char *queue, const char *key) {
        char *json = CTL_OK(&d, "--json", "stats");
        const char *cursor = json, *obj, *end;
        long long v;

        while (json_next_object(&cursor, &obj, &end))
                if (json_str_is(obj, end, "name", queue)) {
                        v = json_int(obj, end, key);
                        free(json);
                        return v;
                }
        ck_abort_msg("workqueue %s is not in stats: %s", queue, json);
        return -1;
}

/* A column of the bound pool of @cpu from "cmwqctl --json pools". */
static long long pool_of(const char *pools, int cpu, bool highpri, const char *key) {
        const char *cursor = pools, *obj, *end;

        while (json_next_object(&cursor, &obj, &end))
                if (!json_bool(obj, end, "unbound") && json_int(obj, end, "cpu") == cpu &&
                    json_bool(obj, end, "highpri") == highpri)
                        return json_int(obj, end, key);
        ck_abort_msg("no %s pool for CPU %d in: %s", highpri ? "highpri" : "normal", cpu, pools);
        return -1;
}

/* "cpu_intensive" of item @id from "cmwqctl --json show". */
static bool item_cpu_intensive(const char *id) {
        char *json = CTL_OK(&d, "--json", "show", id);
        bool v = json_bool(json, json + strlen(json), "cpu_intensive");

        free(json);
        return v;
}

/* ---- concurrency management --------------------------------------------- */

/* Blocking items on one CPU: each one's block starts the next at once, so
 * all of them are blocked at the same time although the pool lets only one
 * run (none ends before all have started: they wait at a gate). */
START_TEST(test_blocking_items_progress_together) {
        const int n = 6;
        struct span spans[MAX_SPANS];
        struct file_gate g;
        char log[400];

        test_path(&d, "blocking.log", log, sizeof(log));
        file_gate_close(&d, &g, "blocking.gate");
        free(CTL_OK(&d, "create", "q", "--freezable"));
        free(CTL_OK(&d, "freeze", "q"));
        submit_gated_n("q", 0, "wait", &g, log, n, NULL);
        free(CTL_OK(&d, "thaw", "q"));
        wait_lines_or_fail(log, "start", n, "blocked items did not let the next ones start");
        file_gate_open(&g);
        flush("q");

        spans_of(log, spans, n);
        assert_all_on_cpu(log, spans, n, 0);
        ck_assert_msg(max_overlap(spans, n) == n, "max overlap %d, want %d; log:\n%s", max_overlap(spans, n), n,
                      read_file(log));
        /* All were pending at the thaw and all ran at once, so each of the
         * other n-1 was started by a concurrency-management wake-up. */
        ck_assert_int_ge(stat_of("q", "cm_wakeups"), n - 1);
        ck_assert_int_eq(stat_of("q", "total"), n);
}
END_TEST

/* Short CPU-bound items on one CPU: they never block, so the pool runs them
 * strictly one after the other, in queueing order. */
START_TEST(test_cpu_bound_items_take_turns) {
        const int n = 8;
        struct span spans[MAX_SPANS];
        char log[400];

        test_path(&d, "spin.log", log, sizeof(log));
        free(CTL_OK(&d, "create", "q", "--freezable"));
        free(CTL_OK(&d, "freeze", "q"));
        submit_probe_n("q", 0, "burn", 3, log, n);
        free(CTL_OK(&d, "thaw", "q"));
        flush("q");

        spans_of(log, spans, n);
        assert_all_on_cpu(log, spans, n, 0);
        /* 3 ms is far below the 10 ms CPU-intensive threshold: none may have
         * been let go early. */
        ck_assert_msg(stat_of("q", "cpu_intensive") == 0, "a 3 ms item was marked CPU-intensive");
        /* An item that did block (on a busy machine, a page fault that had
         * to wait as its process started) rightly let the next one start;
         * cmwqd counts each such start.  Only unexplained overlap is wrong,
         * and the order is the queue's only when nothing was let in early
         * (an item that blocked before its "start" line logs it late). */
        long long woken = stat_of("q", "cm_wakeups");

        ck_assert_msg(max_overlap(spans, n) <= 1 + woken,
                      "CPU-bound items on one CPU overlapped (max %d, %lld let in by a block); log:\n%s",
                      max_overlap(spans, n), woken, read_file(log));
        if (woken > 0) {
                fprintf(stderr, "note: %lld of the items blocked and let the next start; order not checked\n", woken);
                return;
        }
        qsort(spans, n, sizeof(spans[0]), cmp_start);
        for (int k = 0; k < n; k++) {
                char tag[16];

                snprintf(tag, sizeof(tag), "i%d", k);
                ck_assert_msg(strcmp(spans[k].tag, tag) == 0, "item %d to start was %s; log:\n%s", k, spans[k].tag,
                              read_file(log));
        }
}
END_TEST

/* WQ_CPU_INTENSIVE: items do not count toward the concurrency level, so
 * CPU-bound ones on one CPU all run at once -- and, not being counted, never
 * show up as CPU-intensive violations.  They compute until all have
 * started. */
START_TEST(test_cpu_intensive_queue_items_overlap) {
        const int n = 4;
        struct span spans[MAX_SPANS];
        struct file_gate g;
        char log[400];

        test_path(&d, "intensive.log", log, sizeof(log));
        file_gate_close(&d, &g, "intensive.gate");
        free(CTL_OK(&d, "create", "q", "--cpu-intensive", "--freezable"));
        free(CTL_OK(&d, "freeze", "q"));
        submit_gated_n("q", 0, "spin-until", &g, log, n, NULL);
        free(CTL_OK(&d, "thaw", "q"));
        wait_lines_or_fail(log, "up", n, "CPU_INTENSIVE items did not all start while the first computed");
        file_gate_open(&g);
        flush("q");

        spans_of(log, spans, n);
        assert_all_on_cpu(log, spans, n, 0);
        ck_assert_msg(max_overlap(spans, n) == n, "CPU_INTENSIVE items overlapped only %d at most; log:\n%s",
                      max_overlap(spans, n), read_file(log));
        ck_assert_int_eq(stat_of("q", "cpu_intensive"), 0);
}
END_TEST

/* A normal item that keeps its CPU past 10 ms is marked CPU-intensive and
 * stops holding its pool: the next item on that CPU starts while it runs. */
START_TEST(test_cpu_hog_is_marked_intensive) {
        struct span spans[MAX_SPANS];
        const struct span *hog, *next;
        struct file_gate g;
        char log[400], *hog_id, *next_id;

        test_path(&d, "hog.log", log, sizeof(log));
        file_gate_close(&d, &g, "hog.gate");
        free(CTL_OK(&d, "create", "q"));
        hog_id = submit_gated("q", 0, "spin-until", &g, log, "hog");
        wait_lines_or_fail(log, "up", 1, "the hog did not start");
        next_id = submit_probe("q", 0, "burn", 3, log, "next");
        /* The hog computes until the next item has run. */
        wait_lines_or_fail(log, "end", 1, "the item behind a CPU hog waited for it");
        file_gate_open(&g);
        flush("q");

        spans_of(log, spans, 2);
        hog = find_span(spans, 2, "hog");
        next = find_span(spans, 2, "next");
        ck_assert_ptr_nonnull(hog);
        ck_assert_ptr_nonnull(next);
        ck_assert_int_eq(hog->cpu, 0);
        ck_assert_int_eq(next->cpu, 0);
        ck_assert_msg(next->start < hog->end, "the item behind a CPU hog waited for it to end; log:\n%s",
                      read_file(log));
        ck_assert_int_ge(stat_of("q", "cpu_intensive"), 1);
        ck_assert_msg(item_cpu_intensive(hog_id), "the hog is not shown as cpu_intensive");
        ck_assert_msg(!item_cpu_intensive(next_id), "a 3 ms item is shown as cpu_intensive");
        free(hog_id);
        free(next_id);
}
END_TEST

/* The state of item @id ("running", "finished", ...), as "cmwqctl --json
 * show" tells root. */
static bool item_state_is(const char *id, const char *state) {
        char *json = CTL_OK(&d, "--json", "show", id);
        bool v = json_str_is(json, json + strlen(json), "state", state);

        free(json);
        return v;
}

/* An item whose main process waits while its child computes is computing:
 * blocking detection sees the child run, so the CPU-intensive check must
 * count the child's CPU time too.  Otherwise the item holds its CPU's pool
 * forever, and one such item per CPU from any user stops every bound queue
 * of every user.  uid 65534's item holds CPU 0 of "system"; root's
 * /bin/true on CPU 0 must still run (well before the spinner, which never
 * ends by itself), and the spinner shows as CPU-intensive. */
START_TEST(test_waiting_parent_of_spinning_child_releases_pool) {
        char log[400], script[512], *spin_id, *true_id, *pools;
        struct ctl_result r = {};
        int64_t deadline;
        bool done;
        int fd;

        test_path(&d, "spin-child.log", log, sizeof(log));
        /* Made here: the daemon's directory is root's, the item is nobody's. */
        fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fchmod(fd, 0666), 0);
        close(fd);
        snprintf(script, sizeof(script), "while :; do :; done & echo started >%s; wait", log);
        ck_assert_int_eq(CTL_AS(&d, 65534, &r, "submit", "system", "--cpu", "0", "--", "/bin/sh", "-c", script), 0);
        spin_id = strndup(r.out, strcspn(r.out, "\n"));
        ctl_result_free(&r);
        ck_assert_msg(wait_for_lines(log, 1, START_TIMEOUT_MS), "the spinner did not start: %s",
                      CTL_OK(&d, "show", spin_id));

        true_id = CTL_OK(&d, "submit", "system", "--cpu", "0", "--", "/bin/true");
        deadline = mono_ns() + 30 * INT64_C(1000000000);
        while (!(done = item_state_is(true_id, "finished")) && mono_ns() < deadline)
                usleep(20000);
        ck_assert_msg(done, "root's /bin/true on CPU 0 did not run within 30 s behind uid 65534's "
                            "waiting shell with a spinning child");
        ck_assert_msg(item_state_is(spin_id, "running"), "the spinner is no longer running");

        ck_assert_int_ge(stat_of("system", "cpu_intensive"), 1);
        /* Still running, but no longer holding the pool. */
        pools = CTL_OK(&d, "--json", "pools");
        ck_assert_msg(pool_of(pools, 0, false, "running") == 0, "CPU 0's pool still counts a running item: %s",
                      pools);
        free(pools);

        ck_assert_int_eq(CTL_AS(&d, 65534, &r, "cancel", spin_id), 0);
        ctl_result_free(&r);
        for (int waited = 0; waited < 10000 && item_state_is(spin_id, "running"); waited += 20)
                usleep(20000);
        ck_assert_msg(!item_state_is(spin_id, "running"), "the cancelled spinner still runs");
        ck_assert_msg(item_cpu_intensive(spin_id), "the spinner is not shown as cpu_intensive");
        free(spin_id);
        free(true_id);
}
END_TEST

/* ---- HIGHPRI ------------------------------------------------------------ */

/* A highpri queue's items run in the CPU's highpri pool, not its normal one. */
START_TEST(test_highpri_runs_in_highpri_pool) {
        struct file_gate g;
        char log[400], *pools;

        test_path(&d, "highpri-pool.log", log, sizeof(log));
        file_gate_close(&d, &g, "highpri-pool.gate");
        free(CTL_OK(&d, "create", "hq", "--highpri"));
        free(submit_gated("hq", 0, "wait", &g, log, "hp"));
        wait_lines_or_fail(log, "start", 1, "the highpri item did not start");

        pools = CTL_OK(&d, "--json", "pools");
        ck_assert_msg(pool_of(pools, 0, true, "busy") == 1, "CPU 0's highpri pool is not running the item: %s",
                      pools);
        ck_assert_msg(pool_of(pools, 0, true, "workers") >= 1, "pools: %s", pools);
        ck_assert_msg(pool_of(pools, 0, false, "busy") == 0, "CPU 0's normal pool runs something: %s", pools);
        free(pools);
        file_gate_open(&g);
        flush("hq");
}
END_TEST

/* The highpri pool is separate: an item on a normal pool's CPU does not hold
 * back a highpri item on that CPU. */
START_TEST(test_highpri_not_held_by_normal_pool) {
        struct span spans[MAX_SPANS];
        const struct span *hog, *hp;
        struct file_gate g;
        char log[400];

        test_path(&d, "highpri.log", log, sizeof(log));
        file_gate_close(&d, &g, "highpri.gate");
        free(CTL_OK(&d, "create", "nq"));
        free(CTL_OK(&d, "create", "hq", "--highpri"));
        free(submit_gated("nq", 0, "spin-until", &g, log, "hog"));
        wait_lines_or_fail(log, "up", 1, "the hog did not start");
        free(submit_probe("hq", 0, "sleep", 10, log, "hp"));
        /* The hog computes until the highpri item has run. */
        wait_lines_or_fail(log, "end", 1, "the highpri item waited for a normal item that computes");
        file_gate_open(&g);
        flush("hq");
        flush("nq");

        spans_of(log, spans, 2);
        hog = find_span(spans, 2, "hog");
        hp = find_span(spans, 2, "hp");
        ck_assert_ptr_nonnull(hog);
        ck_assert_ptr_nonnull(hp);
        ck_assert_int_eq(hp->cpu, 0);
        ck_assert_msg(hp->start < hog->end, "the highpri item waited for a normal item to end; log:\n%s",
                      read_file(log));
}
END_TEST

/* Highpri items submitted by root run at nice -20, normal ones at 0. */
START_TEST(test_highpri_runs_at_nice_minus_20) {
        char *out;

        free(CTL_OK(&d, "create", "hq", "--highpri"));
        out = CTL_OK(&d, "submit", "hq", "--cpu", "0", "--wait", "--", "/bin/sh", "-c",
                     "cut -d' ' -f19 /proc/self/stat");
        ck_assert_str_eq(out, "-20");
        free(out);

        free(CTL_OK(&d, "create", "nq"));
        out = CTL_OK(&d, "submit", "nq", "--cpu", "0", "--wait", "--", "/bin/sh", "-c",
                     "cut -d' ' -f19 /proc/self/stat");
        ck_assert_str_eq(out, "0");
        free(out);
}
END_TEST

/* ---- max_active --------------------------------------------------------- */

/* The items of @ids from @first on wait for max_active: "inactive". */
static void assert_inactive(char **ids, int first, int n) {
        for (int k = first; k < n; k++) {
                char *shown = CTL_OK(&d, "--json", "show", ids[k]);

                ck_assert_msg(json_str_is(shown, shown + strlen(shown), "state", "inactive"),
                              "item i%d is not waiting for max_active: %s", k, shown);
                free(shown);
        }
}

/* Bound: max_active is per CPU.  Blocking items would all run (see above);
 * the limit keeps them at 2 while the first ones block, the rest wait and
 * run later. */
START_TEST(test_max_active_bound) {
        const int n = 6;
        struct span spans[MAX_SPANS];
        struct file_gate g;
        char log[400], *ids[6];

        test_path(&d, "max-active.log", log, sizeof(log));
        file_gate_close(&d, &g, "max-active.gate");
        free(CTL_OK(&d, "create", "q", "--max-active", "2", "--freezable"));
        free(CTL_OK(&d, "freeze", "q"));
        submit_gated_n("q", 0, "wait", &g, log, n, ids);
        free(CTL_OK(&d, "thaw", "q"));
        wait_lines_or_fail(log, "start", 2, "two items of a max_active 2 queue did not start");
        assert_inactive(ids, 2, n);
        file_gate_open(&g);
        flush("q");
        for (int k = 0; k < n; k++)
                free(ids[k]);

        spans_of(log, spans, n);
        assert_all_on_cpu(log, spans, n, 0);
        ck_assert_msg(max_overlap(spans, n) == 2, "max overlap %d with max_active 2; log:\n%s", max_overlap(spans, n),
                      read_file(log));
}
END_TEST

/* Unbound: max_active is the total. */
START_TEST(test_max_active_unbound) {
        const int n = 8;
        struct span spans[MAX_SPANS];
        struct file_gate g;
        char log[400], *ids[8];

        test_path(&d, "max-active-unbound.log", log, sizeof(log));
        file_gate_close(&d, &g, "max-active-unbound.gate");
        free(CTL_OK(&d, "create", "q", "--unbound", "--max-active", "3", "--freezable"));
        free(CTL_OK(&d, "freeze", "q"));
        submit_gated_n("q", -1, "wait", &g, log, n, ids);
        free(CTL_OK(&d, "thaw", "q"));
        wait_lines_or_fail(log, "start", 3, "three items of a max_active 3 queue did not start");
        assert_inactive(ids, 3, n);
        file_gate_open(&g);
        flush("q");
        for (int k = 0; k < n; k++)
                free(ids[k]);

        spans_of(log, spans, n);
        ck_assert_msg(max_overlap(spans, n) == 3, "max overlap %d with max_active 3; log:\n%s", max_overlap(spans, n),
                      read_file(log));
}
END_TEST

/* Raising max_active starts the items that waited for it at once. */
START_TEST(test_set_max_active_releases_waiting) {
        struct span spans[MAX_SPANS];
        const struct span *a, *b, *c;
        struct file_gate g;
        char log[400], *b_id, *shown;

        test_path(&d, "set-max-active.log", log, sizeof(log));
        file_gate_close(&d, &g, "set-max-active.gate");
        free(CTL_OK(&d, "create", "q", "--max-active", "1"));
        free(submit_gated("q", 0, "wait", &g, log, "a"));
        b_id = submit_gated("q", 0, "wait", &g, log, "b");
        free(submit_gated("q", 0, "wait", &g, log, "c"));
        wait_lines_or_fail(log, "start", 1, "the first item did not start");

        shown = CTL_OK(&d, "--json", "show", b_id);
        ck_assert_msg(json_str_is(shown, shown + strlen(shown), "state", "inactive"),
                      "with max_active 1 the second item is not waiting: %s", shown);
        free(shown);
        free(b_id);

        free(CTL_OK(&d, "set-max-active", "q", "3"));
        /* All three run while the first still blocks. */
        wait_lines_or_fail(log, "start", 3, "raising max_active did not start the waiting items");
        file_gate_open(&g);
        flush("q");

        spans_of(log, spans, 3);
        a = find_span(spans, 3, "a");
        b = find_span(spans, 3, "b");
        c = find_span(spans, 3, "c");
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        ck_assert_ptr_nonnull(c);
        ck_assert_msg(b->start < a->end && c->start < a->end,
                      "raising max_active did not start the waiting items; log:\n%s", read_file(log));
        ck_assert_int_eq(max_overlap(spans, 3), 3);
}
END_TEST

/* ---- UNBOUND and ORDERED ------------------------------------------------ */

/* Unbound pools are not concurrency managed: CPU-bound items that never
 * block all start as long as max_active allows. */
START_TEST(test_unbound_cpu_bound_items_all_run) {
        const int n = 6;
        struct span spans[MAX_SPANS];
        struct file_gate g;
        char log[400];

        test_path(&d, "unbound.log", log, sizeof(log));
        file_gate_close(&d, &g, "unbound.gate");
        free(CTL_OK(&d, "create", "q", "--unbound", "--freezable"));
        free(CTL_OK(&d, "freeze", "q"));
        submit_gated_n("q", -1, "spin-until", &g, log, n, NULL);
        free(CTL_OK(&d, "thaw", "q"));
        wait_lines_or_fail(log, "up", n, "unbound CPU-bound items did not all start while the first computed");
        file_gate_open(&g);
        flush("q");

        spans_of(log, spans, n);
        ck_assert_msg(max_overlap(spans, n) == n, "unbound CPU-bound items overlapped only %d at most; log:\n%s",
                      max_overlap(spans, n), read_file(log));
        /* Not concurrency managed: none had to be let go as CPU-intensive. */
        ck_assert_int_eq(stat_of("q", "cpu_intensive"), 0);
}
END_TEST

/* Ordered: one at a time, strictly in queueing order, whatever their
 * lengths.  The first item is long so that the others queue behind it. */
START_TEST(test_ordered_fifo_one_at_a_time) {
        static const int lengths[] = { 300, 10, 50, 5, 30, 20 };
        const int n = (int) (sizeof(lengths) / sizeof(lengths[0]));
        struct span spans[MAX_SPANS];
        char log[400];

        test_path(&d, "ordered.log", log, sizeof(log));
        free(CTL_OK(&d, "create", "q", "--ordered"));
        for (int k = 0; k < n; k++) {
                char tag[16];

                snprintf(tag, sizeof(tag), "i%d", k);
                free(submit_probe("q", -1, "sleep", lengths[k], log, tag));
        }
        flush("q");

        spans_of(log, spans, n);
        qsort(spans, n, sizeof(spans[0]), cmp_start);
        for (int k = 0; k < n; k++) {
                char tag[16];

                snprintf(tag, sizeof(tag), "i%d", k);
                ck_assert_msg(strcmp(spans[k].tag, tag) == 0, "item %d to start was %s; log:\n%s", k, spans[k].tag,
                              read_file(log));
                ck_assert_msg(k == 0 || spans[k].start >= spans[k - 1].end, "%s started before %s ended; log:\n%s",
                              spans[k].tag, spans[k - 1].tag, read_file(log));
        }
}
END_TEST

/* ---- --cpu -------------------------------------------------------------- */

START_TEST(test_cpu_option_pins) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        char *out;

        if (cpus < 2) {
                printf("# test_cpu_option_pins: skipped, only %ld CPU online\n", cpus);
                return;
        }
        out = CTL_OK(&d, "submit", "system", "--cpu", "1", "--wait", "--", d.probe, "cpu");
        ck_assert_str_eq(out, "1");
        free(out);
        out = CTL_OK(&d, "submit", "system", "--cpu", "0", "--wait", "--", d.probe, "cpu");
        ck_assert_str_eq(out, "0");
        free(out);
}
END_TEST

static TCase *tcase_for_detector(const char *name, void (*setup)(void), void (*teardown_fn)(void)) {
        TCase *tc = tcase_create(name);

        tcase_add_checked_fixture(tc, setup, teardown_fn);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_blocking_items_progress_together);
        tcase_add_test(tc, test_cpu_bound_items_take_turns);
        tcase_add_test(tc, test_cpu_intensive_queue_items_overlap);
        tcase_add_test(tc, test_cpu_hog_is_marked_intensive);
        tcase_add_test(tc, test_waiting_parent_of_spinning_child_releases_pool);
        tcase_add_test(tc, test_highpri_runs_in_highpri_pool);
        tcase_add_test(tc, test_highpri_not_held_by_normal_pool);
        tcase_add_test(tc, test_highpri_runs_at_nice_minus_20);
        tcase_add_test(tc, test_max_active_bound);
        tcase_add_test(tc, test_max_active_unbound);
        tcase_add_test(tc, test_set_max_active_releases_waiting);
        tcase_add_test(tc, test_unbound_cpu_bound_items_all_run);
        tcase_add_test(tc, test_ordered_fifo_one_at_a_time);
        tcase_add_test(tc, test_cpu_option_pins);
        return tc;
}

int main(void) {
        Suite *s = suite_create("concurrency");
        SRunner *sr;
        int failed;

        suite_add_tcase(s, tcase_for_detector("perf", setup_perf, teardown_perf));
        suite_add_tcase(s, tcase_for_detector("proc", setup_proc, teardown));
        suite_add_tcase(s, tcase_for_detector("perf-eager", setup_perf_eager, teardown_perf));

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

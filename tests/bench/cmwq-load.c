/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cmwq load: many concurrent clients against a running cmwqd (started by
 * tests/bench/run.sh, or by the integration test test-load).
 *
 *   cmwq-load clients SOCKET PID CLIENTS ITEMS DIR [ROUNDS [QUEUE]]
 *       CLIENTS threads, each with a connection of its own, all connected
 *       at once; each submits ITEMS items to QUEUE (default "system") and
 *       flushes it.  Each item appends its tag ("cC-iI") to one file in DIR
 *       (with O_APPEND, one write per line).  Afterwards every tag must be
 *       in the file exactly once, and cmwqd (PID) must hold as many fds as
 *       before.  Its RSS is printed before and after each round.  Exit 0
 *       when nothing was lost, duplicated or leaked, 1 otherwise.
 *   cmwq-load pending SOCKET PID N
 *       Freezes system_freezable and submits N /bin/true items to it
 *       (pipelined, on one connection), so that they all stay pending;
 *       prints cmwqd's RSS and peak RSS and the bytes per pending item.
 *       The items are left pending: stop the daemon afterwards.
 *       Each item carries one environment entry (PATH); with
 *       CMWQ_LOAD_ENV=self, this process's whole environment instead, as
 *       `cmwqctl submit` sends it.
 *       Run by another user than root (who may not freeze), the items are
 *       delayed by an hour on "system" instead, and a refusal over a
 *       per-user limit ends the flood: printed with the figures.
 *   cmwq-load pending SOCKET PID N STATEDIR
 *       The same, then a compaction of the state log (STATEDIR/log) with
 *       the N items pending (root only): cmwqd's peak RSS is reset
 *       (clear_refs), items with 256 KiB payloads are submitted and
 *       cancelled until the log is past twice its last snapshot, and
 *       small ones are submitted (and cancelled) until the log has been
 *       replaced, and 300 ms more.  Meanwhile another connection asks for
 *       the list of queues every 5 ms (cmwqctl list) on a fixed schedule: a reply's
 *       latency counts from when the request was due, so a stalled loop
 *       counts with every request it held back.  Prints the list latency
 *       (p50, p99, max), the submissions acknowledged while the compaction
 *       ran and in the 300 ms after it (when the old log is freed), and
 *       the peak memory against the steady RSS: cmwqd's VmHWM
 *       plus the peak private memory of any process it forked meanwhile.
 *       Every reply waits until the records appended before it are on disk
 *       (a list reply too): with CMWQ_LOAD_QUIET=1 nothing is submitted
 *       while the compaction runs, which leaves the loop's own latency.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "frame.h"

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...) {
        va_list ap;

        fputs("cmwq-load: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        exit(2);
}

static double now_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

static int count_fds(pid_t pid) {
        char path[64];
        struct dirent *de;
        DIR *dir;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        dir = opendir(path);
        if (!dir)
                die("cannot open %s: %m", path);
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

/* A "Vm...:" field of /proc/PID/status, in KiB. */
static long status_kib(pid_t pid, const char *field) {
        char path[64], line[256];
        size_t n = strlen(field);
        long v = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        f = fopen(path, "re");
        if (!f)
                die("cannot open %s: %m", path);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, field, n) == 0 && line[n] == ':') {
                        v = atol(line + n + 1);
                        break;
                }
        fclose(f);
        return v;
}

static struct conn *connect_daemon(const char *path) {
        struct conn *c;
        int r;

        if (conn_new(&c) < 0)
                die("out of memory");
        r = conn_connect(c, path, "cmwq-load");
        if (r < 0) {
                fprintf(stderr, "cmwq-load: cannot connect to %s: %s%s%s\n", path, strerror(-r),
                        conn_last_error(c) ? ": " : "", conn_last_error(c) ? conn_last_error(c) : "");
                conn_close(c);
                return NULL;
        }
        return c;
}

/* ---- clients ---- */

static const char *opt_socket, *opt_queue = "system";
static char log_path[4096];
static int opt_items;
static pthread_barrier_t connected, go;
static atomic_int failures;

struct client {
        pthread_t thread;
        int index;
};

static bool call_ok(struct conn *c, Cmwq__Request *req, const char *what, int client) {
        Cmwq__Response *resp = NULL;
        int r = conn_call(c, req, &resp);

        if (r < 0 || resp->error != CMWQ__ERROR__OK) {
                fprintf(stderr, "cmwq-load: client %d: %s failed: %s\n", client, what,
                        r < 0 ? strerror(-r) : resp->message ? resp->message : conn_error_to_string(resp->error));
                if (resp)
                        cmwq__response__free_unpacked(resp, NULL);
                return false;
        }
        cmwq__response__free_unpacked(resp, NULL);
        return true;
}

static void *client_run(void *userdata) {
        static char *env[] = { (char *) "PATH=/usr/bin:/bin", NULL };
        struct client *cl = userdata;
        struct conn *c = connect_daemon(opt_socket);
        bool ok = c != NULL;
        char tag[32];

        /* Every client holds its connection before any submits. */
        pthread_barrier_wait(&connected);
        pthread_barrier_wait(&go);
        for (int i = 0; ok && i < opt_items; i++) {
                char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) "echo \"$0\" >> \"$1\"", tag, log_path,
                                 NULL };
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__Submit s = CMWQ__SUBMIT__INIT;

                snprintf(tag, sizeof(tag), "c%d-i%d", cl->index, i);
                s.workqueue = (char *) opt_queue;
                s.n_argv = 5;
                s.argv = argv;
                s.n_env = 1;
                s.env = env;
                s.cwd = (char *) "/";
                req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
                req.submit = &s;
                ok = call_ok(c, &req, "submit", cl->index);
        }
        if (ok) {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__WorkqueueName name = CMWQ__WORKQUEUE_NAME__INIT;

                name.name = (char *) opt_queue;
                req.body_case = CMWQ__REQUEST__BODY_FLUSH;
                req.flush = &name;
                ok = call_ok(c, &req, "flush", cl->index);
        }
        if (!ok)
                atomic_fetch_add(&failures, 1);
        conn_close(c);
        return NULL;
}

/* Every tag exactly once: returns the number of problems, printed. */
static int verify_log(int clients, int items) {
        uint8_t *seen = calloc((size_t) clients * items, 1);
        char line[64];
        int lost = 0, dup = 0, bad = 0;
        FILE *f = fopen(log_path, "re");

        if (!seen)
                die("out of memory");
        if (!f)
                die("cannot open %s: %m", log_path);
        while (fgets(line, sizeof(line), f)) {
                int c, i;

                if (sscanf(line, "c%d-i%d", &c, &i) != 2 || c < 0 || c >= clients || i < 0 || i >= items) {
                        bad++;
                        continue;
                }
                if (seen[(size_t) c * items + i]++)
                        dup++;
        }
        fclose(f);
        for (size_t k = 0; k < (size_t) clients * items; k++)
                lost += !seen[k];
        free(seen);
        printf("  items: %d ran, lost %d, ran twice %d, garbled %d\n", clients * items - lost, lost, dup, bad);
        return lost + dup + bad;
}

static int cmd_clients(int argc, char **argv) {
        int clients, rounds = 1, problems = 0, fds0, fds_peak;
        const char *dir;
        pthread_attr_t attr;
        long rss0;
        pid_t pid;

        if (argc < 7)
                die("usage: cmwq-load clients SOCKET PID CLIENTS ITEMS DIR [ROUNDS [QUEUE]]");
        opt_socket = argv[2];
        pid = atoi(argv[3]);
        clients = atoi(argv[4]);
        opt_items = atoi(argv[5]);
        dir = argv[6];
        if (argc > 7)
                rounds = atoi(argv[7]);
        if (argc > 8)
                opt_queue = argv[8];
        if (pid <= 0 || clients <= 0 || opt_items <= 0 || rounds <= 0)
                die("bad arguments");

        /* A client that just left (the caller's check that the daemon is
         * up) may still hold its fd for a moment: wait until it is stable. */
        fds0 = count_fds(pid);
        for (int same = 0, waited = 0; same < 5 && waited < 5000; waited += 20) {
                int now;

                usleep(20000);
                now = count_fds(pid);
                same = now == fds0 ? same + 1 : 0;
                fds0 = now;
        }
        rss0 = status_kib(pid, "VmRSS");
        printf("cmwq-load: %d clients x %d items on '%s', %d round(s)\n", clients, opt_items, opt_queue, rounds);
        printf("  cmwqd before: %d fds, RSS %ld KiB\n", fds0, rss0);

        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        for (int round = 1; round <= rounds; round++) {
                struct client *cl = calloc((size_t) clients, sizeof(*cl));
                double t0, t1;
                int fds = -1;

                if (!cl)
                        die("out of memory");
                snprintf(log_path, sizeof(log_path), "%s/cmwq-load-round-%d.log", dir, round);
                if (unlink(log_path) < 0 && errno != ENOENT)
                        die("cannot remove %s: %m", log_path);
                pthread_barrier_init(&connected, NULL, (unsigned) clients + 1);
                pthread_barrier_init(&go, NULL, (unsigned) clients + 1);
                atomic_store(&failures, 0);
                for (int k = 0; k < clients; k++) {
                        cl[k].index = k;
                        if (pthread_create(&cl[k].thread, &attr, client_run, &cl[k]) != 0)
                                die("cannot start client thread %d", k);
                }
                pthread_barrier_wait(&connected);
                fds_peak = count_fds(pid);
                t0 = now_s();
                pthread_barrier_wait(&go);
                for (int k = 0; k < clients; k++)
                        pthread_join(cl[k].thread, NULL);
                t1 = now_s();
                pthread_barrier_destroy(&connected);
                pthread_barrier_destroy(&go);
                free(cl);

                printf(" round %d: %.1f s, %.0f items/s; %d fds with all clients connected; %d client(s) failed\n",
                       round, t1 - t0, clients * opt_items / (t1 - t0), fds_peak, atomic_load(&failures));
                problems += atomic_load(&failures);
                problems += verify_log(clients, opt_items);

                /* The daemon closes a connection when it sees the EOF. */
                for (int waited = 0; waited < 10000; waited += 20) {
                        fds = count_fds(pid);
                        if (fds <= fds0)
                                break;
                        usleep(20000);
                }
                printf("  cmwqd after: %d fds (before: %d), RSS %ld KiB (before: %ld), peak %ld KiB\n", fds, fds0,
                       status_kib(pid, "VmRSS"), rss0, status_kib(pid, "VmHWM"));
                if (fds > fds0) {
                        printf("  FD LEAK: %d fds more than before\n", fds - fds0);
                        problems++;
                }
        }
        printf("cmwq-load: %s\n", problems ? "FAILED" : "ok");
        return problems ? 1 : 0;
}

/* ---- pending ---- */

#define POLL_INTERVAL_S 0.005
/* How long submissions and the list go on after the log is replaced. */
#define AFTER_MS 300
#define AFTER_S (AFTER_MS / 1000.0)

struct poller {
        pthread_t thread;
        const char *socket;
        atomic_bool stop;
        double *due, *latency;          /* seconds, CLOCK_MONOTONIC */
        size_t n, cap;
};

static void sleep_until(double t) {
        double d = t - now_s();

        if (d > 0) {
                struct timespec ts = { (time_t) d, (long) ((d - (double) (time_t) d) * 1e9) };
                nanosleep(&ts, NULL);
        }
}

/* Asks for the list of queues every POLL_INTERVAL_S, on schedule. */
static void *poller_run(void *userdata) {
        struct poller *p = userdata;
        struct conn *c = connect_daemon(p->socket);
        double t0 = now_s();

        if (!c)
                die("poller cannot connect");
        for (size_t k = 0; !atomic_load(&p->stop); k++) {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__Empty empty = CMWQ__EMPTY__INIT;
                double due = t0 + (double) k * POLL_INTERVAL_S;

                sleep_until(due);
                req.body_case = CMWQ__REQUEST__BODY_LIST;
                req.list = &empty;
                if (!call_ok(c, &req, "list", -1))
                        die("list failed");
                if (p->n == p->cap) {
                        p->cap = p->cap ? 2 * p->cap : 65536;
                        p->due = realloc(p->due, p->cap * sizeof(double));
                        p->latency = realloc(p->latency, p->cap * sizeof(double));
                        if (!p->due || !p->latency)
                                die("out of memory");
                }
                p->due[p->n] = due;
                p->latency[p->n++] = now_s() - due;
        }
        conn_close(c);
        return NULL;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;

        return x < y ? -1 : x > y;
}

/* The private memory (KiB) of @pid's children that are not in @old. */
static long new_children_private_kib(pid_t pid, const char *old) {
        char path[128], buf[4096], line[256];
        long total = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int) pid, (int) pid);
        f = fopen(path, "re");
        if (!f || !fgets(buf, sizeof(buf), f)) {
                if (f)
                        fclose(f);
                return 0;
        }
        fclose(f);
        for (char *save = NULL, *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
                char needle[32];

                snprintf(needle, sizeof(needle), " %s ", tok);
                if (strstr(old, needle))
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/smaps_rollup", tok);
                f = fopen(path, "re");
                if (!f)
                        continue;
                while (fgets(line, sizeof(line), f))
                        if (strncmp(line, "Private_Clean:", 14) == 0 || strncmp(line, "Private_Dirty:", 14) == 0)
                                total += atol(strchr(line, ':') + 1);
                fclose(f);
        }
        return total;
}

static uint64_t submit_one(struct conn *c, const char *queue, const void *payload, size_t len, double *ret_s) {
        static char *env[] = { (char *) "PATH=/usr/bin:/bin", NULL };
        static char *true_argv[] = { (char *) "/bin/true", NULL };
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Submit sub = CMWQ__SUBMIT__INIT;
        Cmwq__Response *resp = NULL;
        double t = now_s();
        uint64_t id;

        sub.workqueue = (char *) queue;
        sub.n_argv = 1;
        sub.argv = true_argv;
        sub.n_env = 1;
        sub.env = env;
        sub.cwd = (char *) "/";
        if (len > 0) {
                sub.has_stdin_payload = true;
                sub.stdin_payload = (ProtobufCBinaryData) { len, (uint8_t *) payload };
        }
        sub.has_cpu = true;
        sub.cpu = 0;
        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = &sub;
        if (conn_call(c, &req, &resp) < 0 || resp->error != CMWQ__ERROR__OK || !resp->submit)
                die("submit refused during the compaction phase");
        id = resp->submit->id;
        cmwq__response__free_unpacked(resp, NULL);
        if (ret_s)
                *ret_s = now_s() - t;
        return id;
}

static void cancel_one(struct conn *c, uint64_t id) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId iid = CMWQ__ITEM_ID__INIT;

        iid.id = id;
        req.body_case = CMWQ__REQUEST__BODY_CANCEL;
        req.cancel = &iid;
        if (!call_ok(c, &req, "cancel", -1))
                die("cancel failed");
}

static bool file_ino(const char *path, ino_t *ret) {
        struct stat st;

        if (stat(path, &st) < 0)
                return false;
        *ret = st.st_ino;
        return true;
}

/* One small submission, cancelled, then 20 ms (nothing but the wait when
 * @quiet): counted in *@acked, its acknowledgement's time in *@worst if it
 * is the slowest.  Every reply waits for the records before it to be on
 * disk (a list too): paced, so that most list requests see the loop, not
 * the disk. */
static void submit_paced(struct conn *c, bool quiet, size_t *acked, double *worst) {
        double ack;

        if (!quiet) {
                cancel_one(c, submit_one(c, "system_freezable", NULL, 0, &ack));
                (*acked)++;
                if (ack > *worst)
                        *worst = ack;
        }
        sleep_until(now_s() + 0.02);
}

/* A compaction with the pending items in place; see the top comment. */
static void compaction_phase(struct conn *c, const char *socket, pid_t pid, const char *statedir) {
        const size_t big = 256 * 1024;
        char logp[4096], compactp[4096], path[64], old[4096] = " ", buf[4096];
        struct poller p = { .socket = socket };
        /* CMWQ_LOAD_QUIET=1: nothing is submitted while the compaction
         * runs, so that no list reply waits for a sync: the loop alone. */
        bool quiet = getenv("CMWQ_LOAD_QUIET") && atoi(getenv("CMWQ_LOAD_QUIET")) > 0;
        double t_start, t_seen = 0, t_end, worst_ack = 0, worst_ack_after = 0;
        size_t acked = 0, acked_after = 0, in_window = 0;
        long rss_steady, hwm, child_peak = 0;
        ino_t ino0, ino;
        void *payload;
        FILE *f;

        snprintf(logp, sizeof(logp), "%s/log", statedir);
        snprintf(compactp, sizeof(compactp), "%s/log.compact", statedir);
        /* A compaction the flood started ends first. */
        for (double t = now_s(); access(compactp, F_OK) == 0; sleep_until(now_s() + 0.05))
                if (now_s() - t > 600)
                        die("a compaction did not end in 600 s");
        sleep_until(now_s() + 0.5);
        if (!file_ino(logp, &ino0))
                die("no state log at %s", logp);
        /* The children cmwqd has now (its spawner) are not the compaction's. */
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int) pid, (int) pid);
        f = fopen(path, "re");
        if (f && fgets(buf, sizeof(buf) - 2, f))
                snprintf(old, sizeof(old), " %.4000s ", buf);
        if (f)
                fclose(f);
        for (char *nl = strchr(old, '\n'); nl; nl = strchr(old, '\n'))
                *nl = ' ';
        snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int) pid);
        f = fopen(path, "we");
        if (!f || fputs("5", f) < 0 || fclose(f) != 0)
                die("cannot reset the peak RSS through %s: %m", path);
        rss_steady = status_kib(pid, "VmRSS");
        payload = calloc(1, big);
        if (!payload)
                die("out of memory");

        if (pthread_create(&p.thread, NULL, poller_run, &p) != 0)
                die("cannot start the poller");
        sleep_until(now_s() + 0.2);
        t_start = now_s();
        /* Grow the log until a compaction starts (or, done on the loop,
         * has replaced the log already). */
        for (;;) {
                if (access(compactp, F_OK) == 0 || (file_ino(logp, &ino) && ino != ino0))
                        break;
                cancel_one(c, submit_one(c, "system_freezable", payload, big, NULL));
                if (now_s() - t_start > 300)
                        die("no compaction in 300 s");
        }
        t_seen = now_s();
        /* Submissions go on while it runs; until the log is replaced. */
        for (;;) {
                long priv;

                if (file_ino(logp, &ino) && ino != ino0 && access(compactp, F_OK) != 0)
                        break;
                submit_paced(c, quiet, &acked, &worst_ack);
                priv = new_children_private_kib(pid, old);
                if (priv > child_peak)
                        child_peak = priv;
                if (now_s() - t_start > 600)
                        die("the compaction did not end in 600 s");
        }
        t_end = now_s();
        /* And a moment after: the old log's blocks are freed then, which
         * once held up the commits that replies wait for. */
        while (now_s() < t_end + AFTER_S)
                submit_paced(c, quiet, &acked_after, &worst_ack_after);
        sleep_until(now_s() + 0.2);
        atomic_store(&p.stop, true);
        pthread_join(p.thread, NULL);
        hwm = status_kib(pid, "VmHWM");

        printf("cmwq-load: compaction with the items pending: log grown for %.2f s, compacted in %.2f s after\n",
               t_seen - t_start, t_end - t_seen);
        /* The requests due while the log grew and was compacted (a
         * compaction on the loop happens in the first part), then those
         * due while a compaction ran outside the loop. */
        for (int pass = 0; pass < 3; pass++) {
                static const char *const what[] = {     /* "300": AFTER_MS */
                        "while the log grew and was compacted",
                        "while the compaction ran",
                        "in the 300 ms after it",
                };
                double from = pass == 0 ? t_start : pass == 1 ? t_seen : t_end;
                double to = pass == 2 ? t_end + AFTER_S : t_end;
                double *l = malloc((p.n + 1) * sizeof(double));

                in_window = 0;
                for (size_t k = 0; l && k < p.n; k++)
                        if (p.due[k] >= from && p.due[k] <= to)
                                l[in_window++] = p.latency[k];
                qsort(l, in_window, sizeof(double), cmp_double);
                if (in_window > 0)
                        printf("  list every %.0f ms, %s: %zu requests, latency p50 %.2f ms, p99 %.2f ms, "
                               "max %.2f ms\n", POLL_INTERVAL_S * 1e3, what[pass], in_window,
                               l[in_window / 2] * 1e3, l[in_window * 99 / 100] * 1e3, l[in_window - 1] * 1e3);
                free(l);
        }
        printf("  %zu submissions acknowledged while it ran, the slowest in %.2f ms; %zu in the %d ms after it, "
               "the slowest in %.2f ms\n", acked, worst_ack * 1e3, acked_after, AFTER_MS, worst_ack_after * 1e3);
        printf("  memory: steady RSS %ld KiB, peak %ld KiB (VmHWM) + %ld KiB private to its child = %.2fx steady\n",
               rss_steady, hwm, child_peak, (double) (hwm + child_peak) / (double) rss_steady);
        free(p.due);
        free(p.latency);
        free(payload);
}

static void request_ok(struct conn *c, Cmwq__Request *req, const char *what) {
        if (!call_ok(c, req, what, 0))
                die("%s failed", what);
}

static int cmd_pending(int argc, char **argv) {
        static char *path_env[] = { (char *) "PATH=/usr/bin:/bin", NULL };
        static char *true_argv[] = { (char *) "/bin/true", NULL };
        const char *env_choice = getenv("CMWQ_LOAD_ENV");
        bool env_self = env_choice && strcmp(env_choice, "self") == 0;
        char **env = env_self ? environ : path_env;
        size_t n_env = 0, env_bytes = 0;
        const size_t chunk = 4096;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN), rss0, hwm0, rss1, hwm1;
        size_t n, sent = 0, replied = 0, rlen = 0, rcap = 1 << 20;
        uint8_t *rbuf = malloc(rcap), *buf = NULL;
        size_t blen = 0, boff = 0, bcap = 0, refused = 0;
        bool root = geteuid() == 0;
        const char *queue = root ? "system_freezable" : "system";
        char refusal[256] = "";
        struct conn *c;
        double t0;
        pid_t pid;
        int fd;

        if (argc < 5)
                die("usage: cmwq-load pending SOCKET PID N [STATEDIR]");
        pid = atoi(argv[3]);
        n = strtoull(argv[4], NULL, 10);
        if (!rbuf || pid <= 0 || n == 0)
                die("bad arguments");
        c = connect_daemon(argv[2]);
        if (!c)
                return 2;
        fd = conn_fd(c);
        for (; env[n_env]; n_env++)
                env_bytes += strlen(env[n_env]) + 1;
        printf("cmwq-load: each item carries %zu environment entries, %zu bytes (%s)\n", n_env, env_bytes,
               env_self ? "this process's environment" : "PATH only");

        if (root) {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__FreezeRequest fr = CMWQ__FREEZE_REQUEST__INIT;

                fr.name = (char *) "system_freezable";
                req.body_case = CMWQ__REQUEST__BODY_FREEZE;
                req.freeze = &fr;
                request_ok(c, &req, "freeze system_freezable");
        }
        rss0 = status_kib(pid, "VmRSS");
        hwm0 = status_kib(pid, "VmHWM");

        t0 = now_s();
        while (replied < (refused ? sent : n)) {
                struct pollfd p = { .fd = fd, .events = POLLIN };

                /* Keep one chunk of requests in flight ahead of the replies. */
                if (boff == blen && sent < n && !refused && sent - replied < 4 * chunk) {
                        blen = boff = 0;
                        for (size_t k = 0; k < chunk && sent < n; k++, sent++) {
                                Cmwq__Request req = CMWQ__REQUEST__INIT;
                                Cmwq__Submit s = CMWQ__SUBMIT__INIT;
                                size_t sz;

                                s.workqueue = (char *) queue;
                                if (!root) {
                                        s.has_delay_usec = true;
                                        s.delay_usec = UINT64_C(3600000000);
                                }
                                s.n_argv = 1;
                                s.argv = true_argv;
                                s.n_env = n_env;
                                s.env = env;
                                s.cwd = (char *) "/";
                                s.has_cpu = true;
                                s.cpu = (int32_t) (sent % (size_t) ncpu);
                                req.id = 1000 + sent;
                                req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
                                req.submit = &s;
                                sz = cmwq__request__get_packed_size(&req);
                                if (blen + CMWQ_FRAME_HEADER_SIZE + sz > bcap) {
                                        bcap = (bcap + sz + CMWQ_FRAME_HEADER_SIZE) * 2;
                                        buf = realloc(buf, bcap);
                                        if (!buf)
                                                die("out of memory");
                                }
                                frame_header_encode(buf + blen, (uint32_t) sz);
                                cmwq__request__pack(&req, buf + blen + CMWQ_FRAME_HEADER_SIZE);
                                blen += CMWQ_FRAME_HEADER_SIZE + sz;
                        }
                }
                if (boff < blen)
                        p.events |= POLLOUT;
                if (poll(&p, 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        die("poll: %m");
                }
                if ((p.revents & POLLOUT) && boff < blen) {
                        ssize_t k = send(fd, buf + boff, blen - boff, MSG_DONTWAIT | MSG_NOSIGNAL);

                        if (k < 0 && errno != EAGAIN && errno != EINTR)
                                die("send: %m");
                        if (k > 0)
                                boff += (size_t) k;
                }
                if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t k = recv(fd, rbuf + rlen, rcap - rlen, MSG_DONTWAIT);
                        size_t off = 0;

                        if (k == 0)
                                die("cmwqd closed the connection after %zu replies", replied);
                        if (k < 0 && errno != EAGAIN && errno != EINTR)
                                die("recv: %m");
                        if (k > 0)
                                rlen += (size_t) k;
                        for (;;) {
                                uint32_t plen;
                                size_t flen;
                                Cmwq__Response *resp;
                                int r = frame_parse(rbuf + off, rlen - off, CMWQ_FRAME_MAX_PAYLOAD, &plen, &flen);

                                if (r < 0)
                                        die("bad frame from cmwqd");
                                if (r == 0)
                                        break;
                                resp = cmwq__response__unpack(NULL, plen, rbuf + off + CMWQ_FRAME_HEADER_SIZE);
                                if (!resp)
                                        die("undecodable reply");
                                if (resp->error == CMWQ__ERROR__LIMIT_EXCEEDED && !root) {
                                        if (!refused++)
                                                snprintf(refusal, sizeof(refusal), "%s", resp->message);
                                } else if (resp->error != CMWQ__ERROR__OK)
                                        die("submit %zu refused: %s", replied,
                                            resp->message ? resp->message : conn_error_to_string(resp->error));
                                cmwq__response__free_unpacked(resp, NULL);
                                replied++;
                                off += flen;
                        }
                        memmove(rbuf, rbuf + off, rlen - off);
                        rlen -= off;
                }
        }
        rss1 = status_kib(pid, "VmRSS");
        hwm1 = status_kib(pid, "VmHWM");
        n = replied - refused;
        if (root)
                printf("cmwq-load: %zu items pending on frozen system_freezable, submitted in %.2f s\n", n,
                       now_s() - t0);
        else
                printf("cmwq-load: uid %u flooding: %zu items accepted (delayed), %zu refused in %.2f s%s%s\n",
                       (unsigned) geteuid(), n, refused, now_s() - t0, refused ? ", first refusal: " : "", refusal);
        printf("  cmwqd RSS %ld KiB -> %ld KiB, peak (VmHWM) %ld KiB -> %ld KiB\n", rss0, rss1, hwm0, hwm1);
        if (n > 0)
                printf("  %.0f bytes per pending item (RSS growth / items)\n",
                       (double) (rss1 - rss0) * 1024.0 / (double) n);
        if (argc >= 6 && root)
                compaction_phase(c, argv[2], pid, argv[5]);
        free(buf);
        free(rbuf);
        conn_close(c);
        return 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc >= 2 && strcmp(argv[1], "clients") == 0)
                return cmd_clients(argc, argv);
        if (argc >= 2 && strcmp(argv[1], "pending") == 0)
                return cmd_pending(argc, argv);
        fprintf(stderr, "usage: cmwq-load clients SOCKET PID CLIENTS ITEMS DIR [ROUNDS [QUEUE]]\n"
                        "       cmwq-load pending SOCKET PID N [STATEDIR]\n");
        return 2;
}

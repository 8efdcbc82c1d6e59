/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cmwq benchmarks: talks to a running cmwqd (started by tests/bench/run.sh)
 * over its socket with the client library, and prints figures.  It never
 * judges them: benchmarks are not tests.
 *
 *   cmwq-bench throughput SOCKET N ROUNDS VARIANT...
 *       N /bin/true items submitted in one pipelined batch on one
 *       connection, then a flush of the queue; items/s from the first submit
 *       to the flush's reply.  The peer, "xargs -P$(nproc) -n1 /bin/true" on
 *       the same N, runs in the same rounds, interleaved.  VARIANT is a
 *       queue name, optionally ":rr" (each item's CPU given explicitly,
 *       round-robin over the online CPUs; otherwise the daemon puts it on
 *       the submitter's CPU).
 *   cmwq-bench reaction SOCKET BLOCKER REPS [DUMP]
 *       Block reaction on the bound "system" queue, see README.md.  DUMP
 *       gets one line per kept pair: "block|exit T_BLOCK_NS T_NEXT_MAIN_NS"
 *       (CLOCK_MONOTONIC), for run.sh to join with a trace of cmwqd's forks.
 *   cmwq-bench load SOCKET QUEUE N
 *       Submit N /bin/true items in one batch and flush; prints the time.
 *   cmwq-bench submit SOCKET N DEPTH
 *       Submission alone: N items delayed by an hour (nothing runs) on the
 *       "system" queue, at most DEPTH requests in flight on one connection
 *       (1: each waits for its reply).  Prints submits/s and the mean time
 *       from a request to its reply.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "frame.h"

extern char **environ;

#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))

/* Where the timestamps of the reaction benchmark come from. */
#define SPIN_US 3000            /* well under the 10 ms CPU-intensive threshold */
#define SLEEP_US 20000
#define WARMUP_REPS 5

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...) {
        va_list ap;

        fputs("cmwq-bench: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        exit(1);
}

static int64_t now_ns(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int online_cpus(void) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        return n > 0 ? (int) n : 1;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;

        return x < y ? -1 : x > y;
}

/* Sorts @v.  The nearest-rank percentile @p (0 < p <= 100). */
static double percentile(double *v, int n, double p) {
        int k;

        if (n <= 0)
                return 0;
        qsort(v, (size_t) n, sizeof(double), cmp_double);
        k = (int) (p / 100.0 * n + 0.999999) - 1;
        if (k < 0)
                k = 0;
        if (k >= n)
                k = n - 1;
        return v[k];
}

static struct conn *connect_daemon(const char *path) {
        struct conn *c;
        int r;

        if (conn_new(&c) < 0)
                die("out of memory");
        r = conn_connect(c, path, "cmwq-bench");
        if (r < 0)
                die("cannot connect to %s: %s%s%s", path, strerror(-r), conn_last_error(c) ? ": " : "",
                    conn_last_error(c) ? conn_last_error(c) : "");
        return c;
}

static Cmwq__Response *call(struct conn *c, Cmwq__Request *req) {
        Cmwq__Response *resp = NULL;
        int r;

        r = conn_call(c, req, &resp);
        if (r < 0)
                die("request failed: %s", strerror(-r));
        if (resp->error != CMWQ__ERROR__OK)
                die("cmwqd answered: %s", resp->message ? resp->message : conn_error_to_string(resp->error));
        return resp;
}

static void fill_submit(Cmwq__Submit *s, const char *queue, char **argv, char **env, int cpu) {
        cmwq__submit__init(s);
        s->workqueue = (char *) queue;
        for (s->n_argv = 0; argv[s->n_argv]; s->n_argv++)
                ;
        s->argv = argv;
        if (env)
                for (s->n_env = 0; env[s->n_env]; s->n_env++)
                        ;
        s->env = env;
        s->cwd = (char *) "/";
        if (cpu >= 0) {
                s->has_cpu = true;
                s->cpu = cpu;
        }
}

static uint64_t submit(struct conn *c, const char *queue, char **argv, int cpu) {
        static char *env[] = { (char *) "PATH=/usr/bin:/bin", NULL };
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Submit s;
        Cmwq__Response *resp;
        uint64_t id;

        fill_submit(&s, queue, argv, env, cpu);
        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = &s;
        resp = call(c, &req);
        if (resp->body_case != CMWQ__RESPONSE__BODY_SUBMIT)
                die("unexpected reply to submit");
        id = resp->submit->id;
        cmwq__response__free_unpacked(resp, NULL);
        return id;
}

/* Waits for item @id to end; returns the response holding its ItemInfo. */
static Cmwq__Response *wait_item(struct conn *c, uint64_t id) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId iid = CMWQ__ITEM_ID__INIT;
        Cmwq__Response *resp;

        iid.id = id;
        req.body_case = CMWQ__REQUEST__BODY_WAIT;
        req.wait = &iid;
        resp = call(c, &req);
        if (resp->body_case != CMWQ__RESPONSE__BODY_ITEM)
                die("unexpected reply to wait");
        return resp;
}

static void flush_queue(struct conn *c, const char *queue) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__WorkqueueName wn = CMWQ__WORKQUEUE_NAME__INIT;

        wn.name = (char *) queue;
        req.body_case = CMWQ__REQUEST__BODY_FLUSH;
        req.flush = &wn;
        cmwq__response__free_unpacked(call(c, &req), NULL);
}

static void queue_stats(struct conn *c, const char *queue, uint64_t *ret_total, uint64_t *ret_failed) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Empty empty = CMWQ__EMPTY__INIT;
        Cmwq__Response *resp;
        bool found = false;

        req.body_case = CMWQ__REQUEST__BODY_STATS;
        req.stats = &empty;
        resp = call(c, &req);
        if (resp->body_case != CMWQ__RESPONSE__BODY_STATS)
                die("unexpected reply to stats");
        for (size_t k = 0; k < resp->stats->n_workqueues; k++) {
                Cmwq__WorkqueueStats *s = resp->stats->workqueues[k];

                if (strcmp(s->name, queue) == 0) {
                        *ret_total = s->total;
                        *ret_failed = s->has_failed ? s->failed : 0;
                        found = true;
                }
        }
        cmwq__response__free_unpacked(resp, NULL);
        if (!found)
                die("no workqueue %s", queue);
}

/* ---------------------------------------------------------------------------
 * exec throughput */

struct batch_result {
        double items_per_s;
        double submit_ms;       /* until the last submit reply */
        double total_ms;        /* until the flush reply */
};

/* N submits packed as frames into one buffer (not timed: that is the
 * client's cost, not the daemon's). */
static uint8_t *pack_batch(const char *queue, int n, bool rr, size_t *ret_len) {
        static char *argv[] = { (char *) "/bin/true", NULL };
        int ncpu = online_cpus();
        size_t cap = 0, len = 0;
        uint8_t *buf = NULL;

        for (int i = 0; i < n; i++) {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__Submit s;
                size_t sz;

                /* The environment of the bench, as cmwqctl sends its own; the
                 * xargs peer's children inherit it too. */
                fill_submit(&s, queue, argv, environ, rr ? i % ncpu : -1);
                req.id = 1000000 + (uint64_t) i;
                req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
                req.submit = &s;
                sz = cmwq__request__get_packed_size(&req);
                if (len + CMWQ_FRAME_HEADER_SIZE + sz > cap) {
                        cap = (cap + sz + CMWQ_FRAME_HEADER_SIZE) * 2;
                        buf = realloc(buf, cap);
                        if (!buf)
                                die("out of memory");
                }
                frame_header_encode(buf + len, (uint32_t) sz);
                cmwq__request__pack(&req, buf + len + CMWQ_FRAME_HEADER_SIZE);
                len += CMWQ_FRAME_HEADER_SIZE + sz;
        }
        *ret_len = len;
        return buf;
}

/* With @pin >= 0 the submitter runs on that CPU for the batch, so that
 * items queued without a CPU all go to that CPU's pool. */
static struct batch_result run_batch(const char *sock, const char *queue, int n, bool rr, int pin) {
        struct conn *c = connect_daemon(sock);
        int fd = conn_fd(c);
        uint64_t total0, failed0, total1, failed1;
        size_t len, sent = 0, rlen = 0, rcap = 1 << 20;
        uint8_t *rbuf = malloc(rcap);
        uint8_t *buf = pack_batch(queue, n, rr, &len);
        struct batch_result res;
        int64_t t0, t_sub, t1;
        int replies = 0;

        cpu_set_t saved;

        if (!rbuf)
                die("out of memory");
        if (pin >= 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(pin, &set);
                if (sched_getaffinity(0, sizeof(saved), &saved) < 0 || sched_setaffinity(0, sizeof(set), &set) < 0)
                        die("cannot pin to CPU %d: %m", pin);
        }
        queue_stats(c, queue, &total0, &failed0);

        t0 = now_ns(CLOCK_MONOTONIC);
        while (replies < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN | (sent < len ? POLLOUT : 0) };

                if (poll(&p, 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        die("poll: %m");
                }
                if ((p.revents & POLLOUT) && sent < len) {
                        ssize_t k = send(fd, buf + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);

                        if (k < 0 && errno != EAGAIN && errno != EINTR)
                                die("send: %m");
                        if (k > 0)
                                sent += (size_t) k;
                }
                if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t k = recv(fd, rbuf + rlen, rcap - rlen, MSG_DONTWAIT);
                        size_t off = 0;

                        if (k == 0)
                                die("cmwqd closed the connection");
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
                                if (resp->error != CMWQ__ERROR__OK)
                                        die("submit %d refused: %s", replies,
                                            resp->message ? resp->message : conn_error_to_string(resp->error));
                                cmwq__response__free_unpacked(resp, NULL);
                                replies++;
                                off += flen;
                        }
                        memmove(rbuf, rbuf + off, rlen - off);
                        rlen -= off;
                }
        }
        t_sub = now_ns(CLOCK_MONOTONIC);
        if (rlen != 0)
                die("stray bytes after the submit replies");
        flush_queue(c, queue);
        t1 = now_ns(CLOCK_MONOTONIC);

        queue_stats(c, queue, &total1, &failed1);
        if (total1 - total0 != (uint64_t) n || failed1 != failed0)
                die("%s: %" PRIu64 " items started, %" PRIu64 " failed, expected %d and 0", queue,
                    total1 - total0, failed1 - failed0, n);

        if (pin >= 0)
                (void) sched_setaffinity(0, sizeof(saved), &saved);
        free(buf);
        free(rbuf);
        conn_close(c);
        res.items_per_s = n / ((t1 - t0) / 1e9);
        res.submit_ms = (t_sub - t0) / 1e6;
        res.total_ms = (t1 - t0) / 1e6;
        return res;
}

/* "xargs -P@par -n1 /bin/true" on @n lines; pinned (with its children) to
 * @cpu when cpu >= 0, as "taskset -c CPU xargs ..." would. */
static struct batch_result run_xargs(int n, int par, int cpu) {
        char nproc[16];
        struct batch_result res = {};
        int64_t t0, t1;
        int fd, status;
        pid_t pid;

        fd = memfd_create("bench-input", MFD_CLOEXEC);
        if (fd < 0)
                die("memfd_create: %m");
        for (int i = 0; i < n; i++)
                if (write(fd, "x\n", 2) != 2)
                        die("write: %m");
        snprintf(nproc, sizeof(nproc), "%d", par);

        t0 = now_ns(CLOCK_MONOTONIC);
        pid = fork();
        if (pid < 0)
                die("fork: %m");
        if (pid == 0) {
                if (lseek(fd, 0, SEEK_SET) < 0 || dup2(fd, STDIN_FILENO) < 0)
                        _exit(126);
                if (cpu >= 0) {
                        cpu_set_t set;

                        CPU_ZERO(&set);
                        CPU_SET(cpu, &set);
                        if (sched_setaffinity(0, sizeof(set), &set) < 0)
                                _exit(126);
                }
                execlp("xargs", "xargs", "-P", nproc, "-n1", "/bin/true", (char *) NULL);
                _exit(127);
        }
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                die("xargs failed (status 0x%x)", status);
        t1 = now_ns(CLOCK_MONOTONIC);
        close(fd);

        res.items_per_s = n / ((t1 - t0) / 1e9);
        res.total_ms = (t1 - t0) / 1e6;
        return res;
}

/* One row of the throughput table: a peer or a daemon variant. */
struct tp_row {
        char label[96];
        char queue[64];         /* "" for a peer */
        bool rr;                /* item i on CPU i mod nproc */
        int pin;                /* the CPU the submitter (or xargs) runs on, or -1 */
        int par;                /* xargs -P */
        int peer;               /* the row this one is compared with */
};

static int cmd_throughput(int argc, char **argv) {
        const char *sock;
        int n, rounds, nv, ncpu = online_cpus(), one = online_cpus() - 1;
        struct tp_row rows[16];

        if (argc < 5)
                die("usage: cmwq-bench throughput SOCKET N ROUNDS VARIANT...");
        sock = argv[1];
        n = atoi(argv[2]);
        rounds = atoi(argv[3]);
        if (n <= 0 || rounds <= 0)
                die("bad N or ROUNDS");

        /* The peers: xargs on every CPU, and xargs on the one CPU that a
         * bound queue's items land on when the submitter names none. */
        rows[0] = (struct tp_row) { .pin = -1, .par = ncpu, .peer = 0 };
        snprintf(rows[0].label, sizeof(rows[0].label), "xargs -P%d -n1 /bin/true (peer)", ncpu);
        rows[1] = (struct tp_row) { .pin = one, .par = 1, .peer = 0 };
        snprintf(rows[1].label, sizeof(rows[1].label), "taskset -c %d xargs -P1 -n1 (1-CPU peer)", one);
        nv = 2;
        for (int k = 4; k < argc; k++) {
                struct tp_row *t = &rows[nv];
                char *colon;

                if (nv >= (int) ELEMENTS(rows))
                        die("too many variants");
                *t = (struct tp_row) { .pin = -1, .peer = 0 };
                snprintf(t->queue, sizeof(t->queue), "%s", argv[k]);
                colon = strchr(t->queue, ':');
                t->rr = colon && strcmp(colon, ":rr") == 0;
                if (colon)
                        *colon = 0;
                if (t->rr)
                        snprintf(t->label, sizeof(t->label), "cmwqd %s (cpu round-robin)", t->queue);
                else if (strstr(t->queue, "unbound"))
                        snprintf(t->label, sizeof(t->label), "cmwqd %s", t->queue);
                else {
                        /* Items without a CPU go to the submitter's: all on
                         * one pool, one at a time (concurrency management),
                         * so the fair peer is one CPU's xargs. */
                        t->pin = one;
                        t->peer = 1;
                        snprintf(t->label, sizeof(t->label), "cmwqd %s (cpu: submitter's = %d)", t->queue, one);
                }
                nv++;
        }

        double *rate = calloc((size_t) nv * rounds, sizeof(double));
        double *sub = calloc((size_t) nv * rounds, sizeof(double));
        double *med = calloc((size_t) nv, sizeof(double));
        double *paired = calloc((size_t) nv, sizeof(double));
        double *pair = calloc((size_t) rounds, sizeof(double));
        if (!rate || !sub || !med || !paired || !pair)
                die("out of memory");

        /* Rounds interleave the variants, so that a slow phase of the
         * machine hits all of them alike. */
        for (int r = 0; r < rounds; r++)
                for (int v = 0; v < nv; v++) {
                        struct batch_result b;

                        if (!rows[v].queue[0])
                                b = run_xargs(n, rows[v].par, rows[v].pin);
                        else
                                b = run_batch(sock, rows[v].queue, n, rows[v].rr, rows[v].pin);
                        rate[v * rounds + r] = b.items_per_s;
                        sub[v * rounds + r] = b.submit_ms;
                }

        /* Each round against its peer's of the same round, before
         * percentile() sorts the rounds: on a VM whose speed wanders over
         * the run, the median of these is the steadier figure. */
        for (int v = 0; v < nv; v++) {
                for (int r = 0; r < rounds; r++)
                        pair[r] = rate[v * rounds + r] / rate[rows[v].peer * rounds + r];
                paired[v] = percentile(pair, rounds, 50);
        }

        printf("  %-44s %8s %7s %7s %10s  %s\n", "", "items/s", "ratio", "paired", "submit ms",
               "items/s per round, in order");
        for (int v = 0; v < nv; v++) {
                char ratio[32], pratio[32], subms[16], each[256] = "";

                for (int r = 0; r < rounds; r++) {
                        size_t l = strlen(each);

                        snprintf(each + l, sizeof(each) - l, "%s%.0f", r ? " " : "", rate[v * rounds + r]);
                }
                /* percentile() sorts: the per-round list is printed first. */
                med[v] = percentile(rate + v * rounds, rounds, 50);
                if (rows[v].peer == v)
                        snprintf(ratio, sizeof(ratio), "1.00x");
                else
                        snprintf(ratio, sizeof(ratio), "%.2fx%s", med[v] / med[rows[v].peer],
                                 rows[v].peer == 1 ? "*" : "");
                snprintf(pratio, sizeof(pratio), "%.2fx%s", paired[v], rows[v].peer == 1 && v != 1 ? "*" : "");
                if (!rows[v].queue[0])
                        snprintf(subms, sizeof(subms), "-");
                else
                        snprintf(subms, sizeof(subms), "%.1f", percentile(sub + v * rounds, rounds, 50));
                printf("  %-44s %8.0f %7s %7s %10s  %s\n", rows[v].label, med[v], ratio, pratio, subms, each);
        }
        printf("  * against the 1-CPU peer: all items wait on one CPU's pool and run there one at a time\n");
        printf("  paired: the median over the rounds of each round's ratio to its peer's same round\n");
        free(rate);
        free(sub);
        free(med);
        free(paired);
        free(pair);
        return 0;
}

static int cmd_load(int argc, char **argv) {
        struct batch_result b;

        if (argc < 4)
                die("usage: cmwq-bench load SOCKET QUEUE N");
        b = run_batch(argv[1], argv[2], atoi(argv[3]), false, -1);
        printf("%d items in %.1f ms (%.0f items/s)\n", atoi(argv[3]), b.total_ms, b.items_per_s);
        return 0;
}

/* ---------------------------------------------------------------------------
 * block reaction */

struct stamp {
        int64_t mono_ns;
        int64_t real_us;
        int64_t main_real_us;           /* when the item entered main() */
        int64_t daemon_started_us;      /* the daemon's started_usec (CLOCK_REALTIME) */
};

static struct stamp item_stamp(struct conn *c, uint64_t id, const char *what) {
        Cmwq__Response *resp = wait_item(c, id);
        Cmwq__ItemInfo *i = resp->item;
        char buf[128] = "", tag[16];
        long long mono, real, main_mono, main_real;
        struct stamp s;

        if (i->state != CMWQ__ITEM_STATE__STATE_FINISHED || !i->has_exit_status || i->exit_status != 0)
                die("item %" PRIu64 " (%s) did not finish cleanly", id, what);
        if (i->has_stdout_data)
                snprintf(buf, sizeof(buf), "%.*s", (int) i->stdout_data.len, (const char *) i->stdout_data.data);
        if (sscanf(buf, "%15s %lld %lld %lld %lld", tag, &mono, &real, &main_mono, &main_real) != 5 ||
            strcmp(tag, what) != 0)
                die("item %" PRIu64 ": unexpected output '%s'", id, buf);
        s.mono_ns = mono;
        s.real_us = real;
        s.main_real_us = main_real;
        s.daemon_started_us = i->has_started_usec ? (int64_t) i->started_usec : 0;
        cmwq__response__free_unpacked(resp, NULL);
        return s;
}

struct series {
        const char *label;
        double *v;
        int n;
};

static void series_add(struct series *s, double us) {
        s->v[s->n++] = us;
}

static void series_print(struct series *s) {
        double med, p99, lo, hi;

        if (s->n == 0) {
                printf("  %-52s %9s\n", s->label, "no samples");
                return;
        }
        p99 = percentile(s->v, s->n, 99);
        med = percentile(s->v, s->n, 50);
        lo = s->v[0];
        hi = s->v[s->n - 1];
        printf("  %-52s %9.1f %9.1f %9.1f %9.1f %5d\n", s->label, med, p99, lo, hi, s->n);
}

/* The peer of the start part: the bench itself forks a child pinned to
 * @cpu, which takes a timestamp and execve()s @blocker; returns the µs from
 * that execve() to the blocker's main().  What any launcher pays to start
 * the program at all. */
static double exec_peer_usec(const char *blocker, int cpu) {
        static int64_t *shared;
        char *args[] = { (char *) blocker, (char *) "start", NULL };
        char buf[256] = "", tag[16];
        long long mono = 0;
        int p[2], status;
        ssize_t n, got = 0;
        pid_t pid;

        if (!shared) {
                shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
                if (shared == MAP_FAILED)
                        die("mmap: %m");
        }
        if (pipe2(p, O_CLOEXEC) < 0)
                die("pipe: %m");
        pid = fork();
        if (pid < 0)
                die("fork: %m");
        if (pid == 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                (void) sched_setaffinity(0, sizeof(set), &set);
                if (dup2(p[1], STDOUT_FILENO) < 0)
                        _exit(126);
                *shared = now_ns(CLOCK_MONOTONIC);
                execv(blocker, args);
                _exit(127);
        }
        close(p[1]);
        while ((n = read(p[0], buf + got, sizeof(buf) - 1 - (size_t) got)) > 0)
                got += n;
        close(p[0]);
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                die("%s start failed", blocker);
        buf[got] = 0;
        if (sscanf(buf, "%15s %lld", tag, &mono) != 2 || strcmp(tag, "start") != 0)
                die("unexpected output of %s: '%s'", blocker, buf);
        return (mono - *shared) / 1e3;
}

static int cmd_reaction(int argc, char **argv) {
        const char *sock, *blocker;
        int reps, ncpu = online_cpus(), cpu, early = 0, early_pre = 0, late_queue = 0, early_exit = 0, late_exit = 0;
        char spin[16], sleep_s[16];
        struct conn *c;

        FILE *dump = NULL;

        if (argc < 4)
                die("usage: cmwq-bench reaction SOCKET BLOCKER REPS [DUMP]");
        if (argc >= 5 && !(dump = fopen(argv[4], "we")))
                die("%s: %m", argv[4]);
        sock = argv[1];
        blocker = argv[2];
        reps = atoi(argv[3]);
        if (reps <= 0)
                die("bad REPS");
        snprintf(spin, sizeof(spin), "%d", SPIN_US);
        snprintf(sleep_s, sizeof(sleep_s), "%d", SLEEP_US);

        char *a_block[] = { (char *) blocker, (char *) "block", spin, sleep_s, NULL };
        char *a_exit[] = { (char *) blocker, (char *) "exit", spin, NULL };
        char *a_start[] = { (char *) blocker, (char *) "start", NULL };

        /* Items on the last CPU; this process elsewhere, so that it does not
         * compete with them. */
        cpu = ncpu - 1;
        if (ncpu > 1) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(0, &set);
                (void) sched_setaffinity(0, sizeof(set), &set);
        }

        struct series raw = { "block -> next item's main()  [total]", calloc(reps, sizeof(double)), 0 };
        struct series det = { "block -> cmwqd started next  [detection+decision]", calloc(reps, sizeof(double)), 0 };
        struct series exe = { "cmwqd started -> main()      [start, after block]", calloc(reps, sizeof(double)), 0 };
        struct series idle = { "submit -> main(), idle pool [exec start baseline]", calloc(reps, sizeof(double)), 0 };
        struct series idle_exe = { "cmwqd started -> main(), idle pool", calloc(reps, sizeof(double)), 0 };
        struct series ex = { "exit -> next item's main()  [pidfd reference]", calloc(reps, sizeof(double)), 0 };
        struct series ipc = { "IPC round trip (show of an unknown id)", calloc(reps, sizeof(double)), 0 };
        struct series peer = { "peer: execve() -> main(), no daemon", calloc(reps, sizeof(double)), 0 };
        if (!raw.v || !det.v || !exe.v || !idle.v || !idle_exe.v || !ex.v || !ipc.v || !peer.v)
                die("out of memory");

        c = connect_daemon(sock);
        for (int rep = -WARMUP_REPS; rep < reps; rep++) {
                bool keep = rep >= 0;
                struct stamp a, b;
                int64_t queued, t0_mono, t0_real;
                uint64_t ida, idb;

                /* 1. A runs (spins), B is queued behind it on the same CPU,
                 * A blocks: B must start. */
                ida = submit(c, "system", a_block, cpu);
                idb = submit(c, "system", a_start, cpu);
                queued = now_ns(CLOCK_MONOTONIC);
                b = item_stamp(c, idb, "start");
                a = item_stamp(c, ida, "block");
                if (queued > a.mono_ns) {
                        /* B was not surely queued before A blocked. */
                        late_queue += keep;
                } else if (b.daemon_started_us < a.real_us || b.mono_ns < a.mono_ns) {
                        /* cmwqd started B while A still ran: not a block
                         * reaction, and a concurrency-management miss.  (B's
                         * main() may still come after A blocked: B is pinned
                         * to A's CPU.)  The daemon stamps an item when it
                         * lets its (already made) process go. */
                        early += keep;
                        early_pre += keep && b.daemon_started_us < a.main_real_us;
                } else if (keep) {
                        series_add(&raw, (b.mono_ns - a.mono_ns) / 1e3);
                        series_add(&det, (double) (b.daemon_started_us - a.real_us));
                        series_add(&exe, (double) (b.real_us - b.daemon_started_us));
                        if (dump)
                                fprintf(dump, "block %lld %lld\n", (long long) a.mono_ns, (long long) b.mono_ns);
                }

                /* 2. The baseline: B alone on the idle pool. */
                t0_mono = now_ns(CLOCK_MONOTONIC);
                t0_real = now_ns(CLOCK_REALTIME);
                idb = submit(c, "system", a_start, cpu);
                b = item_stamp(c, idb, "start");
                if (keep) {
                        series_add(&idle, (b.mono_ns - t0_mono) / 1e3);
                        series_add(&idle_exe, (double) (b.real_us - b.daemon_started_us));
                }
                (void) t0_real;

                /* 3. The reference: A exits instead of blocking. */
                ida = submit(c, "system", a_exit, cpu);
                idb = submit(c, "system", a_start, cpu);
                queued = now_ns(CLOCK_MONOTONIC);
                b = item_stamp(c, idb, "start");
                a = item_stamp(c, ida, "exit");
                if (queued > a.mono_ns)
                        late_exit += keep;
                else if (b.daemon_started_us < a.real_us || b.mono_ns < a.mono_ns)
                        early_exit += keep;
                else if (keep) {
                        series_add(&ex, (b.mono_ns - a.mono_ns) / 1e3);
                        if (dump)
                                fprintf(dump, "exit %lld %lld\n", (long long) a.mono_ns, (long long) b.mono_ns);
                }

                /* 4. What one request costs. */
                {
                        Cmwq__Request req = CMWQ__REQUEST__INIT;
                        Cmwq__ItemId iid = CMWQ__ITEM_ID__INIT;
                        Cmwq__Response *resp = NULL;
                        int64_t t = now_ns(CLOCK_MONOTONIC);

                        iid.id = UINT64_MAX;
                        req.body_case = CMWQ__REQUEST__BODY_SHOW;
                        req.show = &iid;
                        if (conn_call(c, &req, &resp) < 0)
                                die("show failed");
                        if (keep)
                                series_add(&ipc, (now_ns(CLOCK_MONOTONIC) - t) / 1e3);
                        cmwq__response__free_unpacked(resp, NULL);
                }

                /* 5. The start part without the daemon. */
                {
                        double us = exec_peer_usec(blocker, cpu);

                        if (keep)
                                series_add(&peer, us);
                }
        }
        conn_close(c);
        if (dump && fclose(dump) != 0)
                die("%s: %m", argv[4]);

        printf("  items on CPU %d of the bound 'system' queue; %d reps (+%d warm-up); µs:\n", cpu, reps, WARMUP_REPS);
        printf("  %-52s %9s %9s %9s %9s %5s\n", "", "median", "p99", "min", "max", "n");
        series_print(&raw);
        series_print(&det);
        series_print(&exe);
        series_print(&peer);
        series_print(&idle);
        series_print(&idle_exe);
        series_print(&ex);
        series_print(&ipc);
        printf("  discarded: block pairs: %d started early (cmwqd started B before A blocked; %d of them even\n"
               "  before A's main()), %d queued too late; exit pairs: %d early, %d late\n",
               early, early_pre, late_queue, early_exit, late_exit);
        return 0;
}

/* ---------------------------------------------------------------------------
 * submission rate (what the durable store costs) */

static int cmd_submit(int argc, char **argv) {
        static char *item_argv[] = { (char *) "/bin/true", NULL };
        static char *env[] = { (char *) "PATH=/usr/bin:/bin", NULL };
        size_t len = 0, cap = 0, sent = 0, rlen = 0, rcap = 1 << 20;
        int n, depth, replies = 0, frames_sent = 0;
        uint8_t *buf = NULL, *rbuf = malloc(rcap);
        size_t *ends;
        int64_t *t_sent, t0, t1;
        double lat_sum = 0;
        struct conn *c;
        int fd;

        if (argc != 4 || (n = atoi(argv[2])) <= 0 || (depth = atoi(argv[3])) <= 0)
                die("usage: cmwq-bench submit SOCKET N DEPTH");
        ends = calloc((size_t) n, sizeof(*ends));
        t_sent = calloc((size_t) n, sizeof(*t_sent));
        if (!rbuf || !ends || !t_sent)
                die("out of memory");
        for (int i = 0; i < n; i++) {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__Submit sub;
                size_t sz;

                fill_submit(&sub, "system", item_argv, env, 0);
                sub.has_delay_usec = true;
                sub.delay_usec = 3600ULL * 1000000;
                req.id = 1 + (uint64_t) i;
                req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
                req.submit = &sub;
                sz = cmwq__request__get_packed_size(&req);
                if (len + CMWQ_FRAME_HEADER_SIZE + sz > cap) {
                        cap = (cap + sz + CMWQ_FRAME_HEADER_SIZE) * 2;
                        if (!(buf = realloc(buf, cap)))
                                die("out of memory");
                }
                frame_header_encode(buf + len, (uint32_t) sz);
                cmwq__request__pack(&req, buf + len + CMWQ_FRAME_HEADER_SIZE);
                len += CMWQ_FRAME_HEADER_SIZE + sz;
                ends[i] = len;
        }

        c = connect_daemon(argv[1]);
        fd = conn_fd(c);
        t0 = now_ns(CLOCK_MONOTONIC);
        while (replies < n) {
                /* Up to the end of the last frame the window allows. */
                size_t limit = frames_sent - replies < depth ? ends[frames_sent] : sent;
                struct pollfd p = { .fd = fd, .events = POLLIN | (sent < limit ? POLLOUT : 0) };

                if (poll(&p, 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        die("poll: %m");
                }
                if ((p.revents & POLLOUT) && sent < limit) {
                        ssize_t k = send(fd, buf + sent, limit - sent, MSG_DONTWAIT | MSG_NOSIGNAL);

                        if (k < 0 && errno != EAGAIN && errno != EINTR)
                                die("send: %m");
                        if (k > 0)
                                sent += (size_t) k;
                        while (frames_sent < n && ends[frames_sent] <= sent)
                                t_sent[frames_sent++] = now_ns(CLOCK_MONOTONIC);
                }
                if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t k = recv(fd, rbuf + rlen, rcap - rlen, MSG_DONTWAIT);
                        size_t off = 0;

                        if (k == 0)
                                die("cmwqd closed the connection");
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
                                if (!resp || resp->error != CMWQ__ERROR__OK)
                                        die("submit %d refused", replies);
                                cmwq__response__free_unpacked(resp, NULL);
                                lat_sum += (double) (now_ns(CLOCK_MONOTONIC) - t_sent[replies]);
                                replies++;
                                off += flen;
                        }
                        memmove(rbuf, rbuf + off, rlen - off);
                        rlen -= off;
                }
        }
        t1 = now_ns(CLOCK_MONOTONIC);
        printf("%.0f %.1f\n", n / ((t1 - t0) / 1e9), lat_sum / n / 1e3);
        conn_close(c);
        free(buf);
        free(rbuf);
        free(ends);
        free(t_sent);
        return 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc >= 2 && strcmp(argv[1], "submit") == 0)
                return cmd_submit(argc - 1, argv + 1);
        if (argc >= 2 && strcmp(argv[1], "throughput") == 0)
                return cmd_throughput(argc - 1, argv + 1);
        if (argc >= 2 && strcmp(argv[1], "reaction") == 0)
                return cmd_reaction(argc - 1, argv + 1);
        if (argc >= 2 && strcmp(argv[1], "load") == 0)
                return cmd_load(argc - 1, argv + 1);
        fprintf(stderr,
                "usage: cmwq-bench throughput SOCKET N ROUNDS VARIANT...\n"
                "       cmwq-bench reaction SOCKET BLOCKER REPS [DUMP]\n"
                "       cmwq-bench load SOCKET QUEUE N\n"
                "       cmwq-bench submit SOCKET N DEPTH\n");
        return 2;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The case cmwq is for (issue 11): K services on one machine, each with work
 * to run, either each on a private thread pool (GLib's GThreadPool, libuv's
 * default pool) or all on cmwqd's shared per-CPU budget through
 * libcmwq-client.  tests/bench/run.sh runs it row by row, interleaving the
 * runners and giving every cmwq row a fresh private cmwqd
 * (CMWQ_BENCH_ONLY=services).
 *
 *   services-bench SOCKET|- DAEMON_PID|0 RUNNER MIX K N [REP]
 *
 * RUNNER: glib-n (GThreadPool of nCPU threads), glib-4n (4 x nCPU), libuv
 * (uv_queue_work, UV_THREADPOOL_SIZE or its default 4), cmwq-bound (the
 * `system` queue, item i on CPU i mod nCPU), cmwq-local (`system`, plain
 * cmwq_queue_work(): the CPU the submitter runs on), cmwq-unbound
 * (`system_unbound`).  With CMWQ_BENCH_MAX_ACTIVE=N, cmwq-bound and
 * cmwq-local use a queue of each process's own with max_active N (per
 * CPU) instead of `system`.
 *
 * MIX, what one item does:
 *   block     sleep 1 ms (nanosleep), then compute 100 us
 *   compute   sleep 200 us, then compute 2 ms
 *   open50    sleep 1 ms, then compute 1 ms; the items of each process
 *   open90    arrive at Poisson intervals (each process on its own random
 *             schedule) so that all K together offer 50% (90%) of what the
 *             CPUs can compute: K x rate x 1 ms = 0.5 (0.9) x nCPU per second
 * "Compute" is a spin of calibrated loops until the thread's own CPU time
 * (CLOCK_THREAD_CPUTIME_ID) has grown by that much, so that preemption does
 * not shorten it.
 *
 * The K processes are forked, connect or make their pool, warm it up (one
 * empty item per CPU, waited for), and then wait on one pipe that the parent
 * closes: all start at once.  In closed-loop mixes each process queues its N
 * items back to back; in open-loop ones it queues each at its arrival time.
 *
 * Printed, one line for people and one "ROW key=value..." line for run.sh:
 *   makespan   the pipe's closing to the last item's end, any process
 *   threads    the sum over the processes of their peak "Threads:" of
 *              /proc/self/status, sampled every 10 ms by each process's
 *              main thread while its items run (main thread included)
 *   atonce     the most threads alive at once across the processes: the
 *              sum of each process's last sample, at each sample
 *   ran        the sum of the threads that ran items
 *   maxrun     the most items running at once across all processes
 *              (between an item's start and end, sleep included)
 *   vcsw/ivcsw voluntary / involuntary context switches of the processes
 *              (getrusage(RUSAGE_SELF) after minus before, every thread)
 *   cpu        user + system CPU of the processes over the same window
 *   item_cpu   the thread CPU time spent inside the items (sleep included)
 *   ideal      the items' compute over the CPUs: K x N x compute / nCPU
 *   idle       CPU time the machine's CPUs spent idle from the start until
 *              every process said it was done (/proc/stat idle + iowait, in
 *              ticks of 10 ms): what a makespan above the ideal lost to
 *              CPUs left idle, rather than to overhead
 *   dcpu/dwake cmwqd's CPU (sum of /proc/PID/task/X/schedstat) and its
 *              voluntary context switches (its wake-ups), from just before
 *              the start to the last item's end
 *   qs/qe      queue -> start and queue -> end latency, p50 and p99, over
 *              every item of every process
 *
 * Asserts no timing; exits non-zero only if something does not work.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#ifdef HAVE_LIBUV
#include <uv.h>
#endif
#ifdef HAVE_GLIB
#include <glib.h>
#endif

#define SAMPLE_NS 10000000LL    /* thread-count sampling period */

static int64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t thread_cpu_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the calibrated spin ------------------------------------------------ */

static double loops_per_ns;
static volatile unsigned long spin_sink;

static void spin_loops(unsigned long n) {
        unsigned long x = spin_sink;

        for (unsigned long i = 0; i < n; i++)
                x = x * 2862933555777941757UL + 3037000493UL;
        spin_sink = x;
}

static void calibrate(void) {
        unsigned long n = 1000000;
        int64_t t;

        for (;;) {
                t = thread_cpu_ns();
                spin_loops(n);
                t = thread_cpu_ns() - t;
                if (t >= 20000000 || n > (1UL << 34))
                        break;
                n *= 4;
        }
        loops_per_ns = (double) n / (double) (t > 0 ? t : 1);
}

/* Computes until this thread's CPU time grew by @ns, reading the clock only
 * every ~20 us of loops. */
static void compute_ns(int64_t ns) {
        int64_t start = thread_cpu_ns(), left;

        while ((left = start + ns - thread_cpu_ns()) > 0) {
                int64_t chunk = left < 20000 ? left : 20000;

                spin_loops((unsigned long) (chunk * loops_per_ns) + 1);
        }
}

/* ---- what the processes share ---------------------------------------------- */

struct proc_result {
        int64_t first_queued_ns, last_end_ns;
        int64_t cpu_ns, item_cpu_ns;
        long vcsw, ivcsw;
        int peak_threads, ran_threads;
        int ok;
};

struct shared {
        atomic_int running_now, running_max;
        /* The processes' threads as each last sampled them, summed, and the
         * most that sum reached: threads alive at once, machine-wide. */
        atomic_int threads_now, threads_at_once;
        struct proc_result proc[];
};

struct item {
        int64_t queued_ns, start_ns, end_ns, cpu_ns;
};

enum mix { MIX_BLOCK, MIX_COMPUTE, MIX_OPEN50, MIX_OPEN90 };

static const struct mix_info {
        const char *name;
        int64_t sleep_ns, compute_ns;
        double load;            /* open loop: offered load as a share of the CPUs */
} mixes[] = {
        [MIX_BLOCK] = { "block", 1000000, 100000, 0 },
        [MIX_COMPUTE] = { "compute", 200000, 2000000, 0 },
        [MIX_OPEN50] = { "open50", 1000000, 1000000, 0.5 },
        [MIX_OPEN90] = { "open90", 1000000, 1000000, 0.9 },
};

static const struct mix_info *mix;
static struct shared *sh;
static struct item *items;     /* this process's, in shared memory: the parent reads them */
static size_t n_items;
static long ncpu;
static atomic_size_t n_done;
static atomic_int ran_threads;
static __thread int thread_counted;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int peak_threads;
static int64_t last_sample_ns;

static int threads_now(void) {
        char line[128];
        int n = 0;
        FILE *f = fopen("/proc/self/status", "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Threads: %d", &n) == 1)
                        break;
        fclose(f);
        return n;
}

static int sampled_threads;     /* this process's part of sh->threads_now */

static void sample_threads(void) {
        int n = threads_now(), sum, m;

        if (n > peak_threads)
                peak_threads = n;
        sum = atomic_fetch_add(&sh->threads_now, n - sampled_threads) + n - sampled_threads;
        sampled_threads = n;
        m = atomic_load(&sh->threads_at_once);
        while (sum > m && !atomic_compare_exchange_weak(&sh->threads_at_once, &m, sum))
                ;
        last_sample_ns = now_ns();
}

static void sample_if_due(void) {
        if (now_ns() - last_sample_ns >= SAMPLE_NS)
                sample_threads();
}

/* The body of every item, whatever runs it. */
static void item_run(struct item *it) {
        int64_t cpu0 = thread_cpu_ns();
        int r, m;

        it->start_ns = now_ns();
        if (!thread_counted) {
                thread_counted = 1;
                atomic_fetch_add(&ran_threads, 1);
        }
        r = atomic_fetch_add(&sh->running_now, 1) + 1;
        m = atomic_load(&sh->running_max);
        while (r > m && !atomic_compare_exchange_weak(&sh->running_max, &m, r))
                ;
        if (mix->sleep_ns) {
                struct timespec ts = { mix->sleep_ns / 1000000000, mix->sleep_ns % 1000000000 };

                nanosleep(&ts, NULL);
        }
        compute_ns(mix->compute_ns);
        atomic_fetch_sub(&sh->running_now, 1);
        it->cpu_ns = thread_cpu_ns() - cpu0;
        it->end_ns = now_ns();
        if (atomic_fetch_add(&n_done, 1) + 1 == n_items) {
                pthread_mutex_lock(&done_lock);
                pthread_cond_broadcast(&done_cond);
                pthread_mutex_unlock(&done_lock);
        }
}

/* Waits for every item, sampling the thread count meanwhile. */
static int wait_all(void) {
        int64_t deadline = now_ns() + 600 * 1000000000LL;

        pthread_mutex_lock(&done_lock);
        while (atomic_load(&n_done) < n_items && now_ns() < deadline) {
                struct timespec until;

                pthread_mutex_unlock(&done_lock);
                sample_if_due();
                pthread_mutex_lock(&done_lock);
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += SAMPLE_NS;
                if (until.tv_nsec >= 1000000000) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000;
                }
                if (atomic_load(&n_done) < n_items)
                        pthread_cond_timedwait(&done_cond, &done_lock, &until);
        }
        pthread_mutex_unlock(&done_lock);
        return atomic_load(&n_done) == n_items ? 0 : -ETIMEDOUT;
}

/* ---- runners: each makes its pool, warms it, queues, waits ------------------ */

struct runner {
        const char *name;
        int (*setup)(const char *socket);
        void (*queue)(size_t i);
        void (*finish)(void);           /* after every item ended */
};

static int warm_wait(atomic_int *v, int n) {
        for (int waited = 0; atomic_load(v) < n; waited++) {
                if (waited > 50000)
                        return -1;      /* 10 s */
                usleep(200);
        }
        return 0;
}

/* cmwq */
struct cmwq_item {
        struct cmwq_work work;
        size_t i;
};

static struct cmwq *cmwq_conn;
static struct cmwq_workqueue *cmwq_wq;
static struct cmwq_item *cmwq_items;
static int cmwq_spread;
static atomic_int warm_done;

static void cmwq_fn(struct cmwq_work *w) {
        item_run(&items[cmwq_container_of(w, struct cmwq_item, work)->i]);
}

static void cmwq_warm_fn(struct cmwq_work *w) {
        (void) w;
        atomic_fetch_add(&warm_done, 1);
}

static int cmwq_setup_common(const char *socket, enum cmwq_system_queue which, int spread) {
        cmwq_conn = cmwq_connect(socket);
        if (!cmwq_conn) {
                fprintf(stderr, "services-bench: %s\n", cmwq_last_error());
                return -1;
        }
        if (which == CMWQ_SYSTEM && getenv("CMWQ_BENCH_MAX_ACTIVE")) {
                /* A queue of the process's own, its items at most this many
                 * at once per CPU, rather than `system`. */
                char name[32];

                snprintf(name, sizeof(name), "svc-%d", (int) getpid());
                cmwq_wq = cmwq_alloc_workqueue(cmwq_conn, name, 0,
                                               (unsigned) strtoul(getenv("CMWQ_BENCH_MAX_ACTIVE"), NULL, 10));
        } else
                cmwq_wq = cmwq_system_workqueue(cmwq_conn, which);
        if (!cmwq_wq) {
                fprintf(stderr, "services-bench: cannot have the workqueue: %s\n", cmwq_last_error());
                return -1;
        }
        cmwq_spread = spread;
        cmwq_items = calloc(n_items, sizeof(*cmwq_items));
        if (!cmwq_items)
                return -1;
        for (long cpu = 0; cpu < ncpu; cpu++) {
                struct cmwq_work warm;

                CMWQ_WORK_INIT(&warm, cmwq_warm_fn);
                cmwq_queue_work_on((int) cpu, cmwq_wq, &warm);
                cmwq_flush_work(&warm);
        }
        for (size_t i = 0; i < n_items; i++) {
                CMWQ_WORK_INIT(&cmwq_items[i].work, cmwq_fn);
                cmwq_items[i].i = i;
        }
        return 0;
}

static int cmwq_setup_bound(const char *s) {
        return cmwq_setup_common(s, CMWQ_SYSTEM, 1);
}

static int cmwq_setup_local(const char *s) {
        return cmwq_setup_common(s, CMWQ_SYSTEM, 0);
}

static int cmwq_setup_unbound(const char *s) {
        return cmwq_setup_common(s, CMWQ_SYSTEM_UNBOUND, 0);
}

static void cmwq_queue(size_t i) {
        if (cmwq_spread)
                cmwq_queue_work_on((int) (i % (size_t) ncpu), cmwq_wq, &cmwq_items[i].work);
        else
                cmwq_queue_work(cmwq_wq, &cmwq_items[i].work);
}

static void cmwq_finish(void) {
        cmwq_flush_workqueue(cmwq_wq);
        cmwq_disconnect(cmwq_conn);
}

/* GLib */
#ifdef HAVE_GLIB
static GThreadPool *glib_pool;
static int glib_factor;

static char glib_warm_item;       /* GThreadPool refuses NULL data */

static void glib_fn(gpointer data, gpointer user_data) {
        (void) user_data;
        if (data == &glib_warm_item) {
                atomic_fetch_add(&warm_done, 1);
                return;
        }
        item_run(data);
}

static int glib_setup(const char *socket) {
        (void) socket;
        glib_pool = g_thread_pool_new(glib_fn, NULL, (gint) (ncpu * glib_factor), FALSE, NULL);
        if (!glib_pool)
                return -1;
        for (long k = 0; k < ncpu; k++)
                g_thread_pool_push(glib_pool, &glib_warm_item, NULL);
        return warm_wait(&warm_done, (int) ncpu);
}

static int glib_setup_n(const char *s) {
        glib_factor = 1;
        return glib_setup(s);
}

static int glib_setup_4n(const char *s) {
        glib_factor = 4;
        return glib_setup(s);
}

static void glib_queue(size_t i) {
        g_thread_pool_push(glib_pool, &items[i], NULL);
}

static void glib_finish(void) {
        g_thread_pool_free(glib_pool, FALSE, TRUE);
}
#endif

/* libuv: uv_queue_work() hands the item to the pool at once; the loop only
 * runs the after-work callbacks, from the main thread now and then. */
#ifdef HAVE_LIBUV
static uv_loop_t uv_loop_;
static uv_work_t *uv_reqs;

static void uv_fn(uv_work_t *req) {
        if (req->data == NULL) {
                atomic_fetch_add(&warm_done, 1);
                return;
        }
        item_run(req->data);
}

static void uv_after_fn(uv_work_t *req, int status) {
        (void) req;
        (void) status;
}

static int libuv_setup(const char *socket) {
        uv_work_t warm = { 0 };

        (void) socket;
        if (uv_loop_init(&uv_loop_) < 0)
                return -1;
        uv_reqs = calloc(n_items, sizeof(*uv_reqs));
        if (!uv_reqs)
                return -1;
        uv_queue_work(&uv_loop_, &warm, uv_fn, uv_after_fn);
        uv_run(&uv_loop_, UV_RUN_DEFAULT);
        return atomic_load(&warm_done) == 1 ? 0 : -1;
}

static void libuv_queue(size_t i) {
        uv_reqs[i].data = &items[i];
        uv_queue_work(&uv_loop_, &uv_reqs[i], uv_fn, uv_after_fn);
        uv_run(&uv_loop_, UV_RUN_NOWAIT);
}

static void libuv_finish(void) {
        uv_run(&uv_loop_, UV_RUN_DEFAULT);
        uv_loop_close(&uv_loop_);
}
#endif

static const struct runner runners[] = {
        { "cmwq-bound", cmwq_setup_bound, cmwq_queue, cmwq_finish },
        { "cmwq-local", cmwq_setup_local, cmwq_queue, cmwq_finish },
        { "cmwq-unbound", cmwq_setup_unbound, cmwq_queue, cmwq_finish },
#ifdef HAVE_GLIB
        { "glib-n", glib_setup_n, glib_queue, glib_finish },
        { "glib-4n", glib_setup_4n, glib_queue, glib_finish },
#endif
#ifdef HAVE_LIBUV
        { "libuv", libuv_setup, libuv_queue, libuv_finish },
#endif
};

/* ---- one process ----------------------------------------------------------- */

static int64_t rusage_cpu_ns(const struct rusage *ru) {
        return (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000000LL +
               (ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1000LL;
}

static void sleep_until(int64_t t) {
        struct timespec ts = { t / 1000000000, t % 1000000000 };

        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
}

static int child_main(const struct runner *r, const char *socket, int proc, int k, int ready_fd, int start_fd,
                      int done_fd) {
        struct proc_result *res = &sh->proc[proc];
        struct rusage ru0, ru1;
        int64_t *arrival = NULL;
        char c;

        if (r->setup(socket) < 0)
                return 1;
        if (mix->load > 0) {
                /* Poisson: exponential gaps; every process on its own seed.
                 * K x rate x compute = load x nCPU. */
                double rate = mix->load * (double) ncpu / ((double) k * (double) mix->compute_ns / 1e9);
                unsigned seed = 0x9e3779b9u * (unsigned) (proc + 1);
                int64_t t = 0;

                arrival = calloc(n_items, sizeof(*arrival));
                if (!arrival)
                        return 1;
                for (size_t i = 0; i < n_items; i++) {
                        double u = (rand_r(&seed) + 1.0) / ((double) RAND_MAX + 2.0);

                        t += (int64_t) (-log(u) / rate * 1e9);
                        arrival[i] = t;
                }
        }
        sample_threads();
        if (write(ready_fd, "r", 1) != 1)
                return 1;
        close(ready_fd);
        /* The start barrier: the parent closes the pipe for everyone. */
        if (read(start_fd, &c, 1) != 0)
                return 1;
        getrusage(RUSAGE_SELF, &ru0);
        res->first_queued_ns = now_ns();
        if (!arrival) {
                for (size_t i = 0; i < n_items; i++) {
                        items[i].queued_ns = now_ns();
                        r->queue(i);
                }
        } else {
                int64_t base = res->first_queued_ns;

                for (size_t i = 0; i < n_items; i++) {
                        sleep_until(base + arrival[i]);
                        items[i].queued_ns = now_ns();
                        r->queue(i);
                        sample_if_due();
                }
        }
        if (wait_all() < 0) {
                fprintf(stderr, "services-bench: %s: process %d: only %zu of %zu items ran\n", r->name, proc,
                        atomic_load(&n_done), n_items);
                return 1;
        }
        getrusage(RUSAGE_SELF, &ru1);
        sample_threads();
        res->cpu_ns = rusage_cpu_ns(&ru1) - rusage_cpu_ns(&ru0);
        res->vcsw = ru1.ru_nvcsw - ru0.ru_nvcsw;
        res->ivcsw = ru1.ru_nivcsw - ru0.ru_nivcsw;
        res->peak_threads = peak_threads;
        res->ran_threads = atomic_load(&ran_threads);
        for (size_t i = 0; i < n_items; i++) {
                if (items[i].end_ns > res->last_end_ns)
                        res->last_end_ns = items[i].end_ns;
                res->item_cpu_ns += items[i].cpu_ns;
        }
        res->ok = 1;
        if (write(done_fd, "d", 1) != 1)
                return 1;
        r->finish();
        /* Its threads are gone. */
        atomic_fetch_sub(&sh->threads_now, sampled_threads);
        sampled_threads = 0;
        free(arrival);
        return 0;
}

/* ---- the parent ------------------------------------------------------------ */

/* cmwqd's CPU time (ns, all threads) and voluntary context switches. */
static void daemon_sample(pid_t pid, int64_t *ret_cpu_ns, long *ret_vcsw) {
        char path[320], line[128];
        struct dirent *e;
        DIR *dir;

        *ret_cpu_ns = 0;
        *ret_vcsw = 0;
        if (pid <= 0)
                return;
        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        dir = opendir(path);
        if (!dir)
                return;
        while ((e = readdir(dir))) {
                unsigned long long ns;
                long v;
                FILE *f;

                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", (int) pid, e->d_name);
                if ((f = fopen(path, "re"))) {
                        if (fscanf(f, "%llu", &ns) == 1)
                                *ret_cpu_ns += (int64_t) ns;
                        fclose(f);
                }
                snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int) pid, e->d_name);
                if ((f = fopen(path, "re"))) {
                        while (fgets(line, sizeof(line), f))
                                if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
                                        *ret_vcsw += v;
                        fclose(f);
                }
        }
        closedir(dir);
}

/* Idle + iowait of every CPU, in s (/proc/stat's first line); -1 unknown. */
static double cpus_idle_s(void) {
        unsigned long long user, nice, sys, idle, iowait;
        FILE *f = fopen("/proc/stat", "re");
        int n;

        if (!f)
                return -1;
        n = fscanf(f, "cpu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait);
        fclose(f);
        return n == 5 ? (double) (idle + iowait) / (double) sysconf(_SC_CLK_TCK) : -1;
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

        return x < y ? -1 : x > y;
}

static double pct_us(int64_t *v, size_t n, double p) {
        size_t k = (size_t) (p / 100.0 * (double) n + 0.999999);

        if (k < 1)
                k = 1;
        if (k > n)
                k = n;
        return v[k - 1] / 1e3;
}

int main(int argc, char **argv) {
        const struct runner *r = NULL;
        const char *socket;
        pid_t daemon_pid, *pids;
        int k, rep, ready[2], start[2], done[2], failed = 0;
        size_t shsize, itsize;
        void *itmem;

        if (argc < 7) {
                fprintf(stderr, "usage: services-bench SOCKET|- DAEMON_PID|0 RUNNER MIX K N [REP]\n");
                return 2;
        }
        socket = argv[1];
        daemon_pid = (pid_t) atoi(argv[2]);
        for (size_t i = 0; i < sizeof(runners) / sizeof(runners[0]); i++)
                if (strcmp(runners[i].name, argv[3]) == 0)
                        r = &runners[i];
        for (size_t i = 0; i < sizeof(mixes) / sizeof(mixes[0]); i++)
                if (strcmp(mixes[i].name, argv[4]) == 0)
                        mix = &mixes[i];
        k = atoi(argv[5]);
        n_items = strtoul(argv[6], NULL, 10);
        rep = argc > 7 ? atoi(argv[7]) : 1;
        if (!mix || k < 1 || n_items < 1) {
                fprintf(stderr, "services-bench: bad mix, K or N\n");
                return 2;
        }
        if (!r) {
                printf("  %-13s (not built: configure found no such library)\n", argv[3]);
                return 0;
        }
        ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        calibrate();

        shsize = sizeof(struct shared) + (size_t) k * sizeof(struct proc_result);
        sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        itsize = (size_t) k * n_items * sizeof(struct item);
        itmem = mmap(NULL, itsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pids = calloc((size_t) k, sizeof(*pids));
        if (sh == MAP_FAILED || itmem == MAP_FAILED || !pids || pipe(ready) < 0 || pipe(start) < 0 ||
            pipe(done) < 0)
                return 1;
        fflush(stdout);
        for (int p = 0; p < k; p++) {
                pids[p] = fork();
                if (pids[p] < 0)
                        return 1;
                if (pids[p] == 0) {
                        close(ready[0]);
                        close(start[1]);
                        close(done[0]);
                        items = (struct item *) itmem + (size_t) p * n_items;
                        _exit(child_main(r, socket, p, k, ready[1], start[0], done[1]));
                }
        }
        close(ready[1]);
        close(start[0]);
        close(done[1]);

        /* Every process made its pool: start them all at once. */
        for (int p = 0; p < k; p++) {
                char c;

                if (read(ready[0], &c, 1) != 1) {
                        fprintf(stderr, "services-bench: %s: a process failed to start\n", r->name);
                        failed = 1;
                        break;
                }
        }
        int64_t d_cpu0, d_cpu1, t0, tend = 0, item_cpu = 0, cpu = 0;
        long d_v0, d_v1, vcsw = 0, ivcsw = 0;
        int threads = 0, ran = 0;

        double idle0 = cpus_idle_s(), idle1;

        daemon_sample(daemon_pid, &d_cpu0, &d_v0);
        t0 = now_ns();
        close(start[1]);
        for (int p = 0; !failed && p < k; p++) {
                char c;

                if (read(done[0], &c, 1) != 1)
                        failed = 1;
        }
        idle1 = cpus_idle_s();
        daemon_sample(daemon_pid, &d_cpu1, &d_v1);
        for (int p = 0; p < k; p++) {
                int status;

                if (waitpid(pids[p], &status, 0) != pids[p] || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        failed = 1;
        }
        if (failed) {
                fprintf(stderr, "services-bench: %s %s: a process failed\n", r->name, mix->name);
                return 1;
        }

        size_t total = (size_t) k * n_items;
        int64_t *qs = malloc(total * sizeof(*qs)), *qe = malloc(total * sizeof(*qe));
        struct item *all = itmem;

        if (!qs || !qe)
                return 1;
        for (int p = 0; p < k; p++) {
                struct proc_result *res = &sh->proc[p];

                if (res->last_end_ns > tend)
                        tend = res->last_end_ns;
                cpu += res->cpu_ns;
                item_cpu += res->item_cpu_ns;
                vcsw += res->vcsw;
                ivcsw += res->ivcsw;
                threads += res->peak_threads;
                ran += res->ran_threads;
        }
        for (size_t i = 0; i < total; i++) {
                qs[i] = all[i].start_ns - all[i].queued_ns;
                qe[i] = all[i].end_ns - all[i].queued_ns;
        }
        qsort(qs, total, sizeof(*qs), cmp_i64);
        qsort(qe, total, sizeof(*qe), cmp_i64);

        double makespan = (tend - t0) / 1e9;
        double ideal = (double) total * (double) mix->compute_ns / 1e9 / (double) ncpu;
        double dcpu = daemon_pid > 0 ? (d_cpu1 - d_cpu0) / 1e9 : 0;
        double idle = idle0 >= 0 && idle1 >= idle0 ? idle1 - idle0 : -1;

        printf("  %-13s %8.3f %6.2f %7d %6d %5d %6d %8ld %8ld %7.3f %7.3f %7.3f %6ld %8.1f %8.1f %8.1f %8.1f\n", r->name,
               makespan, idle, threads, atomic_load(&sh->threads_at_once), ran, atomic_load(&sh->running_max), vcsw, ivcsw, cpu / 1e9, item_cpu / 1e9, dcpu,
               daemon_pid > 0 ? d_v1 - d_v0 : 0, pct_us(qs, total, 50), pct_us(qs, total, 99),
               pct_us(qe, total, 50), pct_us(qe, total, 99));
        printf("ROW rep=%d k=%d mix=%s runner=%s n=%zu ncpu=%ld makespan=%.4f ideal=%.4f idle=%.2f threads=%d atonce=%d ran=%d "
               "maxrun=%d vcsw=%ld ivcsw=%ld cpu=%.4f item_cpu=%.4f dcpu=%.4f dwake=%ld qs50=%.1f qs99=%.1f "
               "qe50=%.1f qe99=%.1f\n",
               rep, k, mix->name, r->name, n_items, ncpu, makespan, ideal, idle, threads, atomic_load(&sh->threads_at_once), ran,
               atomic_load(&sh->running_max), vcsw, ivcsw, cpu / 1e9, item_cpu / 1e9, dcpu,
               daemon_pid > 0 ? d_v1 - d_v0 : 0, pct_us(qs, total, 50), pct_us(qs, total, 99),
               pct_us(qe, total, 50), pct_us(qe, total, 99));
        return 0;
}

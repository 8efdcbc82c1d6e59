/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fuzz target "shm-ring": a libcmwq-client process scribbling on the memory
 * it shares with cmwqd for callback work (proto/shm.h), against the daemon's
 * real reader of it (daemon/callback/callback-shm.c) and the real callback registry
 * behind it (daemon/callback/callback.c, the pools of a fresh core).
 *
 * For each input: a fresh core, a callback registry, and one client attached
 * as the library attaches, mapping the sealed memfd cmwqd made and writing
 * to a copy of its eventfd; its
 * caller is this process, and four of its threads (real ones, started once
 * and asleep in pause()) are registered in slots 0-3 over the CPUs, one of
 * them high priority.  Then the input is a little program the client runs,
 * one op after another (fuzz-shm-ring.h): append a ring entry, set
 * sq_tail anywhere, write any bytes anywhere in the region (header, ring,
 * slots), ring the doorbell and turn the loop, register or unregister a
 * thread, freeze or thaw a queue, and "race": while the daemon reads the
 * ring, append more behind its back, as another thread of the client would.
 *
 * Checks beyond the sanitizers:
 *   - the broken function is called at most once, and once it was, the
 *     client holds no CPU and waits for none, no freeze waits for its
 *     answer, and no ring entry reaches the
 *     pools any more (the pool calls of daemon/callback/callback.c are wrapped and counted:
 *     -Wl,--wrap, see Makefile.am);
 *   - one turn of the event loop consumes at most one ring's worth of
 *     entries, however fast the client refills its ring (else a client
 *     keeps the daemon's loop to itself);
 *   - once the client, the registry and the core are freed: no busy worker,
 *     no pending work and no running count left in any pool, and no event
 *     left in the loop.
 *
 * $CMWQ_FUZZ_VERBOSE=1 prints the ops and the daemon's debug log.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "callback/callback.h"
#include "cm/pool.h"
#include "cm/sleepwatch.h"
/* It checks the core's pools and freeze holds from inside: the core's own
 * header, which only the core and its tests include. */
#include "core/core-internal.h"
#include "fuzz-shm-ring.h"
#include "fuzz.h"
#include "shm.h"

/* Turns of the loop at the end, to let a ring drained in parts go on. */
#define SETTLE_TURNS 4
#define NR_THREADS SHM_FUZZ_NR_THREADS
#define NR_INITIAL SHM_FUZZ_NR_INITIAL

static struct event_base *base;
static bool verbose;
static unsigned nr_cpus_online;
static pid_t thread_tids[NR_THREADS];

/* The input being run. */
static struct {
        struct cmwq_shm *shm;           /* the client's own mapping */
        unsigned nr_broken;
        bool tearing_down;
        unsigned pool_calls;            /* ring entries that reached the pools, this turn */
        unsigned race_left;             /* entries "another thread" still appends */
        unsigned race_done;
        uint32_t race_entry[2];         /* it alternates these */
} run;

static void *sleeper(void *userdata) {
        pid_t *tid = userdata;

        __atomic_store_n(tid, (pid_t) syscall(SYS_gettid), __ATOMIC_RELEASE);
        for (;;)
                pause();
        return NULL;
}

static void start_threads(void) {
        sigset_t all, old;

        /* Signals are the fuzzer's main thread's business. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        for (unsigned i = 0; i < NR_THREADS; i++) {
                pthread_t t;

                if (pthread_create(&t, NULL, sleeper, &thread_tids[i]) != 0)
                        abort();
                pthread_detach(t);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        for (unsigned i = 0; i < NR_THREADS; i++)
                while (!__atomic_load_n(&thread_tids[i], __ATOMIC_ACQUIRE))
                        usleep(100);
}

/* "Another thread of the client" adds an entry while the daemon reads. */
static void race(void) {
        struct cmwq_shm *shm = run.shm;
        uint32_t tail;

        if (!run.race_left || !shm)
                return;
        run.race_left--;
        tail = __atomic_load_n(&shm->sq_tail, __ATOMIC_RELAXED);
        __atomic_store_n(&shm->sq[tail & (CMWQ_SHM_RING - 1)], run.race_entry[run.race_done++ & 1], __ATOMIC_RELAXED);
        __atomic_store_n(&shm->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

/* What daemon/callback/callback.c does to the pools for a ring entry (and on unregister and
 * free).  After the client was found broken, only its end may touch them. */
static void pool_call(const char *what) {
        if (run.nr_broken && !run.tearing_down) {
                fprintf(stderr, "%s for a client after its shared memory was found broken\n", what);
                abort();
        }
        run.pool_calls++;
        race();
}

void __real_pool_queue_work(struct pool *p, struct pool_work *work);
bool __real_pool_cancel_pending(struct pool *p, struct pool_work *work);
void __real_pool_worker_done(struct worker *w);
void __real_pool_worker_cpu_intensive(struct worker *w);
void __wrap_pool_queue_work(struct pool *p, struct pool_work *work);
bool __wrap_pool_cancel_pending(struct pool *p, struct pool_work *work);
void __wrap_pool_worker_done(struct worker *w);
void __wrap_pool_worker_cpu_intensive(struct worker *w);

void __wrap_pool_queue_work(struct pool *p, struct pool_work *work) {
        pool_call("a demand");
        __real_pool_queue_work(p, work);
}

bool __wrap_pool_cancel_pending(struct pool *p, struct pool_work *work) {
        pool_call("a demand withdrawn");
        return __real_pool_cancel_pending(p, work);
}

void __wrap_pool_worker_done(struct worker *w) {
        pool_call("a grant given back");
        __real_pool_worker_done(w);
}

void __wrap_pool_worker_cpu_intensive(struct worker *w) {
        pool_call("a CPU-intensive grant");
        __real_pool_worker_cpu_intensive(w);
}

static void on_freeze(const char *name, bool frozen, uint32_t seq, void *userdata) {
        (void) userdata;
        if (verbose)
                fprintf(stderr, "  told: %s %s (notice %u)\n", name, frozen ? "frozen" : "thawed", (unsigned) seq);
}

static void on_broken(const char *why, void *userdata) {
        (void) userdata;
        if (verbose)
                fprintf(stderr, "  broken: %s\n", why);
        if (++run.nr_broken > 1) {
                fprintf(stderr, "the client was reported broken twice (now: %s)\n", why);
                abort();
        }
}

/* One turn of the daemon's loop (one poll of the fds, one pass over what
 * is active; EVLOOP_NONBLOCK alone would go on while anything is): at most a
 * ring's worth of entries. */
static void turn(void) {
        run.pool_calls = 0;
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        if (run.pool_calls > CMWQ_SHM_RING) {
                fprintf(stderr, "one turn of the loop took %u ring entries (a ring holds %u)\n", run.pool_calls,
                        CMWQ_SHM_RING);
                abort();
        }
        run.pool_calls = 0;
}

struct input {
        const uint8_t *data;
        size_t size;
        size_t off;
};

static bool take(struct input *in, void *buf, size_t n) {
        if (in->size - in->off < n)
                return false;
        memcpy(buf, in->data + in->off, n);
        in->off += n;
        return true;
}

static uint8_t take_u8(struct input *in, bool *ok) {
        uint8_t v = 0;

        *ok = *ok && take(in, &v, 1);
        return v;
}

static uint32_t take_u32(struct input *in, bool *ok) {
        uint8_t b[4] = {};

        *ok = *ok && take(in, b, 4);
        return (uint32_t) b[0] | (uint32_t) b[1] << 8 | (uint32_t) b[2] << 16 | (uint32_t) b[3] << 24;
}

static uint32_t entry_of(uint8_t slot_choice, uint8_t op) {
        return CMWQ_SHM_ENTRY(op % 8, shm_fuzz_slots[slot_choice % SHM_FUZZ_NR_SLOTS]);
}

/* Maps the region cmwqd made, as the library does (client/lib/work-shm.c:
 * work_attach()). */
static void client_map_region(int memfd) {
        struct cmwq_shm *shm;

        shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (shm == MAP_FAILED)
                abort();
        run.shm = shm;
        /* Credits entries of slots 0-2 name queues, as the library names
         * them before their first CREDITS: an unbound one (a claim), a
         * bound one (refused), a freezable unbound one. */
        strcpy(shm->credits[0].name, "system_unbound");
        strcpy(shm->credits[1].name, "system");
        strcpy(shm->credits[2].name, "system_freezable_unbound");
        shm->credits[0].want = 3;
        shm->credits[2].want = 600;
}

static void check_pools_idle(struct core *core) {
        for (unsigned i = 0; i < core->nr_cpus * 2; i++) {
                struct pool *p = &core->cpu_pools[i];

                if (p->nr_running || p->nr_blocked || p->nr_pending || !list_empty(&p->busy_list) ||
                    !list_empty(&p->worklist)) {
                        fprintf(stderr, "pool %d%s left with %u running, %u blocked, %llu pending%s\n", p->cpu,
                                p->highpri ? "H" : "", p->nr_running, p->nr_blocked,
                                (unsigned long long) p->nr_pending, list_empty(&p->busy_list) ? "" : ", busy workers");
                        abort();
                }
        }
}

/* No freeze waits for a broken client's answer. */
static void check_no_holds(struct core *core) {
        struct workqueue *wq;

        list_for_each_entry(wq, &core->workqueues, entry)
                if (!list_empty(&wq->callback_holds)) {
                        fprintf(stderr, "the freeze of %s waits for a broken client\n", wq->name);
                        abort();
                }
}

static void check_no_events(const char *when) {
        int n = event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);

        if (n != 0) {
                fprintf(stderr, "%d events left in the loop %s\n", n, when);
                abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static char *no_plugin_dirs[] = { NULL };
        struct core_config config = { .sleep_mode = SLEEPWATCH_PROC, .plugin_dirs = no_plugin_dirs };
        struct core_caller caller = { .uid = getuid(), .pid = getpid() };
        struct input in = { .data = data, .size = size };
        struct sleepwatch *sw = NULL;
        struct core *core = NULL;
        struct callback_registry *registry = NULL;
        struct callback_client *client = NULL;
        struct core_error e = {};
        int memfd, doorbell;

        if (!base) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);

                verbose = getenv("CMWQ_FUZZ_VERBOSE");
                log_setup(verbose ? LOG_DEBUG : LOG_CRIT);
                base = event_base_new();
                if (!base || n <= 0)
                        abort();
                nr_cpus_online = (unsigned) n;
                start_threads();
        }
        memset(&run, 0, sizeof(run));

        if (sleepwatch_new(base, SLEEPWATCH_PROC, 0, &sw) < 0 || core_new(base, sw, &config, &core) < 0 ||
            callback_registry_new(core, &registry) < 0)
                abort();
        if (callback_client_new(registry, &caller, -1, CALLBACK_CLIENT_CREDITS | CALLBACK_CLIENT_GRANT_TAKEN, on_freeze,
                                on_broken, NULL, &client, &memfd, &doorbell, &e) < 0) {
                fprintf(stderr, "callback_client_new: %s\n", e.message);
                abort();
        }
        client_map_region(memfd);
        close(memfd);
        /* The client's copy, as passed with SCM_RIGHTS: the region keeps its own. */
        doorbell = fcntl(doorbell, F_DUPFD_CLOEXEC, 3);
        if (doorbell < 0)
                abort();
        for (unsigned i = 0; i < NR_INITIAL; i++)
                if (callback_worker_register(client, thread_tids[i], i, i % core->nr_cpus, i == NR_INITIAL - 1,
                                             &e) < 0) {
                        fprintf(stderr, "callback_worker_register: %s\n", e.message);
                        abort();
                }

        while (in.off < in.size) {
                uint8_t op = in.data[in.off++] % _SHM_OP_MAX;
                bool ok = true;

                switch (op) {
                case SHM_OP_PUSH:
                case SHM_OP_PUSH_RAW: {
                        uint32_t entry;

                        if (op == SHM_OP_PUSH) {
                                uint8_t s = take_u8(&in, &ok);

                                entry = entry_of(s, take_u8(&in, &ok));
                        } else
                                entry = take_u32(&in, &ok);
                        if (!ok)
                                break;
                        uint32_t tail = run.shm->sq_tail;

                        if (verbose)
                                fprintf(stderr, "push %#x at %u\n", entry, tail);
                        run.shm->sq[tail & (CMWQ_SHM_RING - 1)] = entry;
                        __atomic_store_n(&run.shm->sq_tail, tail + 1, __ATOMIC_RELEASE);
                        break;
                }
                case SHM_OP_TAIL:
                case SHM_OP_TAIL_RAW: {
                        uint32_t v = take_u32(&in, &ok);

                        if (!ok)
                                break;
                        if (op == SHM_OP_TAIL)
                                v += __atomic_load_n(&run.shm->sq_head, __ATOMIC_ACQUIRE);
                        if (verbose)
                                fprintf(stderr, "tail = %u (head %u)\n", v, run.shm->sq_head);
                        __atomic_store_n(&run.shm->sq_tail, v, __ATOMIC_RELEASE);
                        break;
                }
                case SHM_OP_WRITE: {
                        uint8_t b[3] = {};
                        size_t at, len;

                        ok = take(&in, b, 3);
                        len = take_u8(&in, &ok);
                        if (!ok)
                                break;
                        at = ((size_t) b[0] | (size_t) b[1] << 8 | (size_t) b[2] << 16) % sizeof(struct cmwq_shm);
                        if (len > sizeof(struct cmwq_shm) - at)
                                len = sizeof(struct cmwq_shm) - at;
                        if (len > in.size - in.off)
                                len = in.size - in.off;
                        if (verbose)
                                fprintf(stderr, "write %zu bytes at %zu\n", len, at);
                        memcpy((uint8_t *) run.shm + at, in.data + in.off, len);
                        in.off += len;
                        break;
                }
                case SHM_OP_DOORBELL:
                        if (verbose)
                                fprintf(stderr, "doorbell\n");
                        if (eventfd_write(doorbell, 1) < 0)
                                abort();
                        turn();
                        break;
                case SHM_OP_TURN:
                        turn();
                        break;
                case SHM_OP_SYNC: {
                        int r = callback_client_sync(client);

                        if (verbose)
                                fprintf(stderr, "sync: %d\n", r);
                        if (run.nr_broken && r >= 0) {
                                fprintf(stderr, "a broken client's ring was read again\n");
                                abort();
                        }
                        break;
                }
                case SHM_OP_REGISTER: {
                        uint8_t t = take_u8(&in, &ok), s = take_u8(&in, &ok), cpu = take_u8(&in, &ok);
                        uint8_t hi = take_u8(&in, &ok);
                        int r;

                        if (!ok)
                                break;
                        /* As the dispatcher does: the ring first; a broken
                         * client's connection ends there. */
                        if (callback_client_sync(client) < 0)
                                break;
                        unsigned c = cpu == 0xff ? nr_cpus_online : cpu % (nr_cpus_online + 1);

                        r = callback_worker_register(client, thread_tids[t % NR_THREADS],
                                                     shm_fuzz_slots[s % SHM_FUZZ_NR_SLOTS], c, hi & 1, &e);
                        if (verbose)
                                fprintf(stderr, "register thread %u slot %u cpu %u%s: %d %s\n", t % NR_THREADS,
                                        shm_fuzz_slots[s % SHM_FUZZ_NR_SLOTS], c, hi & 1 ? " highpri" : "", r,
                                        r < 0 ? e.message : "");
                        break;
                }
                case SHM_OP_UNREGISTER: {
                        uint8_t t = take_u8(&in, &ok);
                        int r;

                        if (!ok || callback_client_sync(client) < 0)
                                break;
                        r = callback_worker_unregister(client, thread_tids[t % NR_THREADS], &e);
                        if (verbose)
                                fprintf(stderr, "unregister thread %u: %d\n", t % NR_THREADS, r);
                        break;
                }
                case SHM_OP_FREEZE: {
                        uint8_t f = take_u8(&in, &ok);
                        struct core_waiter w;

                        if (!ok)
                                break;
                        core_waiter_init(&w, NULL);
                        if (f & 1)
                                (void) core_thaw(core, &caller, "system_freezable", &e);
                        else if (core_freeze(core, &caller, "system_freezable", 0, &w, &e) > 0)
                                core_waiter_cancel(&w);
                        break;
                }
                case SHM_OP_RACE: {
                        uint8_t n[2] = {}, s, o;

                        ok = take(&in, n, 2);
                        s = take_u8(&in, &ok);
                        o = take_u8(&in, &ok);
                        if (!ok)
                                break;
                        run.race_left = (unsigned) n[0] | (unsigned) n[1] << 8;
                        run.race_done = 0;
                        run.race_entry[0] = entry_of(s, CMWQ_SHM_OP_IDLE);
                        run.race_entry[1] = entry_of(s, o);
                        if (verbose)
                                fprintf(stderr, "race: %u entries %#x/%#x\n", run.race_left, run.race_entry[0],
                                        run.race_entry[1]);
                        break;
                }
                case SHM_OP_FILL: {
                        uint8_t s = take_u8(&in, &ok), o = take_u8(&in, &ok);
                        uint32_t head = __atomic_load_n(&run.shm->sq_head, __ATOMIC_ACQUIRE);

                        if (!ok)
                                break;
                        for (unsigned i = 0; i < CMWQ_SHM_RING; i++)
                                run.shm->sq[i] = entry_of(s, o);
                        if (verbose)
                                fprintf(stderr, "fill: tail %u\n", head + CMWQ_SHM_RING);
                        __atomic_store_n(&run.shm->sq_tail, head + CMWQ_SHM_RING, __ATOMIC_RELEASE);
                        break;
                }
                }
                if (!ok)
                        break;
                /* A broken client holds no CPU and waits for none, and
                 * no freeze waits for it. */
                if (run.nr_broken) {
                        check_pools_idle(core);
                        check_no_holds(core);
                }
        }
        for (unsigned i = 0; i < SETTLE_TURNS; i++)
                turn();
        run.race_left = 0;

        /* The client goes away (its connection ends), then the daemon. */
        run.tearing_down = true;
        client = callback_client_free(client);
        check_pools_idle(core);
        registry = callback_registry_free(registry);
        core = core_free(core);
        check_no_events("after the client, the registry and the core were freed");
        sw = sleepwatch_free(sw);
        check_no_events("after the sleepwatch was freed");
        munmap(run.shm, sizeof(*run.shm));
        close(doorbell);
        return 0;
}

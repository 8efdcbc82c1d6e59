/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Sentinels, see cm/sentinel.h.
 *
 * Each sentinel thread waits on its futex word while disarmed.  Armed, it
 * is runnable at SCHED_IDLE: it runs when its CPU would idle, looks for
 * news, kicks the loop and waits for the loop to have looked (a generation
 * counter the loop moves), so that one block costs one kick.  The loop
 * never waits for a sentinel.
 *
 * A kick first pins the loop's thread to the sentinel's CPU, and the loop
 * lets go of the pin once it has read the rings (sentinel_looked()).  So the
 * loop wakes on the CPU that is about to idle rather than on a busy one,
 * and when its grant is for that CPU, the wake-up of the CPU's next thread
 * needs no interrupt from another CPU.  Left to the scheduler, the loop
 * woke on the other CPU, preempting the callback that ran there, and the
 * grant's wake-up reached the idle CPU by an IPI, which on a
 * paravirtualised VM the host delivers: about 60 us of idle CPU per block
 * (tests/bench/README.md, sessions 10 and 15).  Pinning a loop that runs
 * elsewhere moves it there at once (the kernel's migration thread).
 *
 * A pin and the word that says so cannot be one step, and the sentinel may
 * be kept from running between the two (the loop it has just pulled over
 * preempts it, then a busy CPU starves it).  So a sentinel counts a pin
 * started before it pins and done after, and the loop, at each read of
 * the rings and before each request it answers, lets go while any pin is
 * unaccounted for: a pin outlives no look of the loop at its news.
 * Processes and threads the loop makes while pinned inherit the pin; those
 * whose placement matters take the daemon's CPUs back (base/cpus.h).
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/cpus.h"
#include "base/log.h"
#include "cm/sentinel.h"
#include "util.h"

/* Armed and nothing new: spin this long (a block may be a few
 * instructions away), then sleep, doubling from the first to the last
 * back-off.  The sleeps bound what an idle CPU whose work cannot start
 * costs; a sentinel asleep misses nothing that matters for long, as the
 * loop's own timer (cm/sleepwatch.c) reads the rings too. */
#define SENTINEL_SPIN_USEC 50
#define SENTINEL_BACKOFF_MIN_USEC 50
#define SENTINEL_BACKOFF_MAX_USEC (2 * USEC_PER_MSEC)
/* In struct sentinel's looked: a sentinel sleeps on the word.  The rest
 * counts generations (wrapping below this bit). */
#define SENTINEL_LOOKED_SLEEPER 0x80000000u
/* How long a sentinel that kicked waits for the loop before it looks again. */
#define SENTINEL_LOOK_WAIT_USEC (10 * USEC_PER_MSEC)

struct sentinel_slot {
        struct sentinel *s;
        size_t idx;
        int cpu;
        pthread_t thread;
        bool started;
        uint32_t armed;         /* futex word: 0 or 1; written by the loop */
};

struct sentinel {
        struct sentinel_slot *slots;
        size_t n;
        sentinel_news_fn has_news;
        sentinel_kick_fn kick;
        void *userdata;
        int kick_fd;
        struct event *kick_ev;
        bool kick_edge;         /* kick_ev is edge-triggered: kick_fd is never read */
        /* Futex word: the generations the loop has looked, and
         * SENTINEL_LOOKED_SLEEPER while a sentinel sleeps on it. */
        uint32_t looked;
        uint32_t stop;
        pid_t loop_tid;                 /* the loop's thread, which sentinel_new() runs on */
        bool pin_loop;                  /* the daemon's CPUs are known: kicks pin the loop */
        uint32_t pins_started, pins_done;       /* by the sentinels */
        uint32_t pins_let_go;           /* the loop's: pins_started when it last let go of all */
};

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
        return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

static bool sentinel_stopping(const struct sentinel *s) {
        return __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
}

static void sentinel_kick_loop(struct sentinel *s, int cpu) {
        uint32_t gen = __atomic_load_n(&s->looked, __ATOMIC_ACQUIRE) & ~SENTINEL_LOOKED_SLEEPER, v;
        struct timespec wait = timespec_from_usec(SENTINEL_LOOK_WAIT_USEC);
        uint64_t one = 1;

        if (s->pin_loop) {
                cpu_set_t here;

                CPU_ZERO(&here);
                CPU_SET(cpu, &here);
                __atomic_add_fetch(&s->pins_started, 1, __ATOMIC_SEQ_CST);
                (void) sched_setaffinity(s->loop_tid, sizeof(here), &here);
                __atomic_add_fetch(&s->pins_done, 1, __ATOMIC_SEQ_CST);
        }

        if (write(s->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
                /* Cannot happen with an eventfd; do not spin on it. */
                nanosleep(&wait, NULL);
                return;
        }
        /* Say that it sleeps, unless the loop has looked already: the
         * loop pays for a wake-up only when someone sleeps (the loop
         * often runs before this, on this very CPU). */
        v = __atomic_load_n(&s->looked, __ATOMIC_ACQUIRE);
        do {
                if ((v & ~SENTINEL_LOOKED_SLEEPER) != gen)
                        return;
        } while (!(v & SENTINEL_LOOKED_SLEEPER) &&
                 !__atomic_compare_exchange_n(&s->looked, &v, v | SENTINEL_LOOKED_SLEEPER, false, __ATOMIC_SEQ_CST,
                                              __ATOMIC_ACQUIRE));
        (void) futex(&s->looked, FUTEX_WAIT_PRIVATE, gen | SENTINEL_LOOKED_SLEEPER, &wait);
}

static void *sentinel_main(void *userdata) {
        struct sentinel_slot *slot = userdata;
        struct sentinel *s = slot->s;
        struct sched_param param = { .sched_priority = 0 };
        uint64_t quiet_since = 0, backoff = 0;

        if (sched_setscheduler(0, SCHED_IDLE, &param) < 0)
                log_debug_errno(-errno, "sentinel: cannot go SCHED_IDLE on CPU %d: %m", slot->cpu);

        while (!sentinel_stopping(s)) {
                if (!__atomic_load_n(&slot->armed, __ATOMIC_ACQUIRE)) {
                        quiet_since = backoff = 0;
                        (void) futex(&slot->armed, FUTEX_WAIT_PRIVATE, 0, NULL);
                        continue;
                }
                if (s->has_news(slot->idx, s->userdata)) {
                        quiet_since = backoff = 0;
                        sentinel_kick_loop(s, slot->cpu);
                        continue;
                }
                if (quiet_since == 0)
                        quiet_since = now_usec(CLOCK_MONOTONIC);
                else if (now_usec(CLOCK_MONOTONIC) - quiet_since >= SENTINEL_SPIN_USEC) {
                        struct timespec ts;

                        backoff = backoff ? backoff * 2 : SENTINEL_BACKOFF_MIN_USEC;
                        if (backoff > SENTINEL_BACKOFF_MAX_USEC)
                                backoff = SENTINEL_BACKOFF_MAX_USEC;
                        ts = timespec_from_usec(backoff);
                        nanosleep(&ts, NULL);
                        quiet_since = now_usec(CLOCK_MONOTONIC);
                        continue;
                }
                cpu_relax();
        }
        return NULL;
}

static void sentinel_kick_cb(evutil_socket_t fd, short what, void *userdata) {
        struct sentinel *s = userdata;
        uint64_t n;

        /* Edge-triggered, every kick is an edge: the counter need not be
         * read (a system call on the way to every grant a kick makes). */
        if (!s->kick_edge && read(fd, &n, sizeof(n)) < 0) {
                /* EAGAIN: kicked and read already; the rings are read anyway. */
        }
        s->kick(s->userdata);   /* ends with sentinel_looked() */
}

void sentinel_let_go_of_loop(struct sentinel *s) {
        uint32_t done, started;

        if (!s || !s->pin_loop)
                return;
        /* Done read first: if every pin started was done then, the
         * restore below comes after all of them. */
        done = __atomic_load_n(&s->pins_done, __ATOMIC_SEQ_CST);
        started = __atomic_load_n(&s->pins_started, __ATOMIC_SEQ_CST);
        if (started == s->pins_let_go)
                return;
        daemon_cpus_restore();
        if (done == started)
                s->pins_let_go = started;
}

void sentinel_looked(struct sentinel *s) {
        if (!s)
                return;
        sentinel_let_go_of_loop(s);
        uint32_t v = __atomic_load_n(&s->looked, __ATOMIC_ACQUIRE);

        while (!__atomic_compare_exchange_n(&s->looked, &v, (v + 1) & ~SENTINEL_LOOKED_SLEEPER, false,
                                            __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
                ;
        if (v & SENTINEL_LOOKED_SLEEPER)
                (void) futex(&s->looked, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL);
}

void sentinel_arm(struct sentinel *s, size_t idx, bool armed) {
        struct sentinel_slot *slot;

        if (!s || idx >= s->n)
                return;
        slot = &s->slots[idx];
        if (__atomic_load_n(&slot->armed, __ATOMIC_RELAXED) == (uint32_t) armed)
                return;
        __atomic_store_n(&slot->armed, (uint32_t) armed, __ATOMIC_RELEASE);
        if (armed)
                (void) futex(&slot->armed, FUTEX_WAKE_PRIVATE, 1, NULL);
}

struct sentinel *sentinel_free(struct sentinel *s) {
        if (!s)
                return NULL;
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        for (size_t i = 0; i < s->n; i++) {
                struct sentinel_slot *slot = &s->slots[i];

                if (!slot->started)
                        continue;
                __atomic_store_n(&slot->armed, 1, __ATOMIC_RELEASE);
                (void) futex(&slot->armed, FUTEX_WAKE_PRIVATE, 1, NULL);
        }
        __atomic_add_fetch(&s->looked, 1, __ATOMIC_SEQ_CST);
        (void) futex(&s->looked, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL);
        for (size_t i = 0; i < s->n; i++)
                if (s->slots[i].started)
                        pthread_join(s->slots[i].thread, NULL);
        sentinel_let_go_of_loop(s);
        if (s->kick_ev)
                event_free(s->kick_ev);
        if (s->kick_fd >= 0)
                close(s->kick_fd);
        free(s->slots);
        free(s);
        return NULL;
}

int sentinel_new(struct event_base *base, const int *cpus, size_t n, sentinel_news_fn has_news,
                 sentinel_kick_fn kick, void *userdata, struct sentinel **ret) {
        const cpu_set_t *allowed;
        struct sentinel *s;
        int r;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->kick_fd = -1;
        s->loop_tid = (pid_t) syscall(SYS_gettid);
        daemon_cpus_note();
        allowed = daemon_cpus();
        s->pin_loop = allowed != NULL;
        s->has_news = has_news;
        s->kick = kick;
        s->userdata = userdata;
        s->n = n;
        s->slots = calloc(n, sizeof(*s->slots));
        if (!s->slots) {
                sentinel_free(s);
                return -ENOMEM;
        }
        s->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->kick_fd < 0) {
                r = -errno;
                sentinel_free(s);
                return r;
        }
        /* An eventfd wakes an edge-triggered epoll at every write, so the
         * count need not be read; it cannot reach its maximum (2^64 - 2
         * kicks).  Other backends read it. */
        s->kick_edge = event_base_get_features(base) & EV_FEATURE_ET;
        s->kick_ev = event_new(base, s->kick_fd, EV_READ | EV_PERSIST | (s->kick_edge ? EV_ET : 0),
                               sentinel_kick_cb, s);
        if (!s->kick_ev || event_add(s->kick_ev, NULL) < 0) {
                sentinel_free(s);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                struct sentinel_slot *slot = &s->slots[i];
                pthread_attr_t attr;
                cpu_set_t set;
                char name[16];

                *slot = (struct sentinel_slot) { .s = s, .idx = i, .cpu = cpus[i] };
                /* Outside a cpuset, pthread_create() would refuse the
                 * affinity, and with it every sentinel. */
                if (allowed && !CPU_ISSET_S((size_t) cpus[i], sizeof(*allowed), allowed))
                        continue;
                CPU_ZERO(&set);
                CPU_SET(cpus[i], &set);
                pthread_attr_init(&attr);
                pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
                pthread_attr_setstacksize(&attr, 64 * 1024);
                r = pthread_create(&slot->thread, &attr, sentinel_main, slot);
                pthread_attr_destroy(&attr);
                if (r != 0) {
                        sentinel_free(s);
                        return -r;
                }
                slot->started = true;
                snprintf(name, sizeof(name), "sentinel/%d", cpus[i]);
                (void) pthread_setname_np(slot->thread, name);
        }
        *ret = s;
        return 0;
}

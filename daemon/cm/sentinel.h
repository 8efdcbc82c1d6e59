/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Sentinels: one thread per CPU, pinned there at SCHED_IDLE, that tells the
 * event loop when its CPU is about to idle while the loop may have
 * something to do about it.
 *
 * A SCHED_IDLE thread runs only when nothing else on its CPU wants to (and
 * for a sliver now and then).  So a sentinel that is *armed* (its CPU's
 * pools have a worker counted running or work pending) gets the CPU exactly
 * when the running worker blocks or goes idle and nothing else takes over:
 * the moment the kernel's wq_worker_sleeping() acts on.  It then looks
 * whether the loop has news to read (has_news(), e.g. records in the CPU's
 * perf ring) and, if so, kicks the loop through an eventfd, pulling the
 * loop's thread onto its CPU for that turn, and waits until
 * the loop has looked (sentinel_looked()).  Records then need not wake the
 * loop one by one, which costs every watched thread a self-IPI per context
 * switch and wakes the daemon for switches it has nothing to do about
 * (preemptions, wake-ups; cm/sleepwatch.c, "perf: how records reach us").
 *
 * A sentinel that is armed, runs, and finds nothing new (a sliver while its
 * CPU is busy, or an idle CPU whose pending work cannot start) spins a
 * little, then sleeps with a growing back-off, so that it never burns an
 * idle CPU for long.
 */

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct sentinel;

/* Called on a sentinel's thread: whether the loop has something new to
 * read for CPU slot @idx.  Must be thread-safe (lock-free reads only). */
typedef bool (*sentinel_news_fn)(size_t idx, void *userdata);
/* Called on the loop when a sentinel kicked it: reads the news, then
 * calls sentinel_looked(). */
typedef void (*sentinel_kick_fn)(void *userdata);

/* One sentinel per entry of @cpus (n of them), slot i on CPU cpus[i],
 * named "sentinel/CPU" (ps -L).  None on a CPU the daemon may not run on
 * (its affinity or cpuset at start-up, base/cpus.h): it has no pool
 * there, and no thread of its could be put there.  Called on the loop's
 * thread: the kicks pin that thread, to the CPU of the sentinel that
 * kicks, until the loop has looked. */
int sentinel_new(struct event_base *base, const int *cpus, size_t n, sentinel_news_fn has_news,
                 sentinel_kick_fn kick, void *userdata, struct sentinel **ret);
struct sentinel *sentinel_free(struct sentinel *s);

/* Loop only.  Arms or disarms slot @idx. */
void sentinel_arm(struct sentinel *s, size_t idx, bool armed);
/* Loop only: it has read everything there was; waiting sentinels go on,
 * and the loop lets go of the pins of their kicks. */
void sentinel_looked(struct sentinel *s);
/* Loop only: lets go of the pins of kicks it has not yet let go of (one
 * system call if there are any): before it answers anything. */
void sentinel_let_go_of_loop(struct sentinel *s);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Callback work of libcmwq-client clients: their worker threads as workers
 * of the daemon's pools.
 *
 * A client first attaches the memory it shares with the daemon (see
 * proto/shm.h and callback/callback-shm.h), then registers each worker thread
 * (pinned to one CPU, normal or high priority) in a slot of it.  When the
 * thread has work it "demands" through the shared submission ring: its
 * embedded pool_work is queued on its CPU's pool like any work, and when the
 * pool starts it the thread is granted the CPU through its slot's futex --
 * it counts toward the pool's nr_running until it gives the grant back
 * ("idle").  While granted it runs the client's items back to back without
 * asking again.  Its blocking and waking are seen with the sleepwatch on its
 * thread id, exactly as for exec items, and the pool's CPU-intensive timer
 * applies to each of its callbacks, from that callback's start (which the
 * client reports in its slot) or the thread's last wake-up, not to the
 * grant; a thread marked CPU-intensive is asked to yield, so that its next
 * callback counts again under a new grant.  A thread that starts an item of
 * a CPU_INTENSIVE queue says so and stops counting at once (and gives the
 * grant back after that item).
 * When other work waits for a pool while a client thread holds it, that
 * thread is told (its slot's yield word) to yield after its current item.
 *
 * Everything a client sends is checked: thread ids must be threads of the
 * connecting process, slots and CPUs in range, and the number of threads is
 * bounded; a ring entry naming a slot with no thread breaks the client.  A
 * client that goes away (even killed) leaves nothing: its grants are
 * returned, its demands withdrawn, its sleepwatch targets closed, its
 * shared memory unmapped.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "core/core.h"
#include "shm.h"

/* Worker threads one client may register: one slot each. */
#define CALLBACK_WORKERS_MAX CMWQ_SHM_SLOTS

struct callback_registry;
struct callback_client;

/* Sends "the queue the client calls @name is frozen (or thawed)", a freeze
 * as notice @seq.  The client keeps its callbacks of a frozen queue from
 * starting (the daemon grants threads, not items, and does not see them) and
 * answers once none runs; until then the freeze waits for it. */
typedef void (*callback_freeze_fn)(const char *name, bool frozen, uint32_t seq, void *userdata);
/* The client broke its shared memory (@why): end its connection. */
typedef void (*callback_broken_fn)(const char *why, void *userdata);

int callback_registry_new(struct core *core, struct callback_registry **ret);
struct callback_registry *callback_registry_free(struct callback_registry *r);

/* What a client said it does in its CallbackAttach (proto/cmwq.proto). */
enum {
        CALLBACK_CLIENT_CREDITS = 1u << 0,      /* it maps the region with its credits entries */
        CALLBACK_CLIENT_GRANT_TAKEN = 1u << 1,  /* it writes when a thread took a grant (taken_ns) */
};

/* Makes a client's shared memory and doorbell (callback_shm_new(): send
 * both to the client, then close *@ret_memfd only).  @caller (the
 * connection's, alive as long as the client) decides which queues' freezing
 * it is told of: those it can see.  @pidfd names the process that
 * connected (-1: the kernel has none; the client owns it from here on, even
 * on failure): a thread is registered only while that process lives, so
 * never one of a process that got its pid after it died.  The queues frozen
 * now are told at once, before the caller's reply.  @flags: CALLBACK_CLIENT_*;
 * without CALLBACK_CLIENT_CREDITS, an older client gets the region it
 * knows. */
int callback_client_new(struct callback_registry *r, const struct core_caller *caller, int pidfd, unsigned flags,
                        callback_freeze_fn freeze, callback_broken_fn broken, void *userdata,
                        struct callback_client **ret, int *ret_memfd, int *ret_eventfd, struct core_error *e);
struct callback_client *callback_client_free(struct callback_client *c);

/* Reads what the client's ring holds now, so that a request it sends on the
 * socket is seen after the ring entries it made before.  0, or a negative
 * errno when the ring is broken. */
int callback_client_sync(struct callback_client *c);

int callback_worker_register(struct callback_client *c, pid_t tid, unsigned slot, unsigned cpu, bool highpri,
                             struct core_error *e);
int callback_worker_unregister(struct callback_client *c, pid_t tid, struct core_error *e);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Callback work of libcmwq-client clients: their worker threads as workers
 * of the daemon's pools.
 *
 * A client registers each worker thread (pinned to one CPU, normal or high
 * priority).  When the thread has work it "demands": its embedded pool_work
 * is queued on its CPU's pool like any work, and when the pool starts it the
 * thread is granted the CPU -- it counts toward the pool's nr_running until
 * it gives the grant back ("idle").  While granted it runs the client's
 * items back to back without asking again.  Its blocking and waking are
 * seen with the sleepwatch on its thread id, exactly as for exec items, and
 * the pool's CPU-intensive timer applies to it; a thread that starts an item
 * of a CPU_INTENSIVE queue says so and stops counting at once (and gives the
 * grant back after that item).  When other work waits for
 * a pool while a client thread holds it, that thread is told to yield after
 * its current item.
 *
 * Everything a client sends is checked: thread ids must be threads of the
 * connecting process and registered, CPUs must be the daemon's, and the
 * number of threads is bounded.  A client that goes away (even killed)
 * leaves nothing: its grants are returned, its demands withdrawn, its
 * sleepwatch targets closed.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "core.h"

/* Worker threads one client may register. */
#define CALLBACK_WORKERS_MAX 1024u

struct callback_registry;
struct callback_client;

/* Sends "thread @tid is granted its CPU" (or, with @yield, "give it back
 * after the current item") to the client. */
typedef void (*callback_grant_fn)(pid_t tid, bool yield, void *userdata);
/* Sends "the queue the client calls @name is frozen (or thawed)".  The
 * client keeps its callbacks of a frozen queue from starting: the daemon
 * grants threads, not items, and does not see them. */
typedef void (*callback_freeze_fn)(const char *name, bool frozen, void *userdata);

int callback_registry_new(struct core *core, struct callback_registry **ret);
struct callback_registry *callback_registry_free(struct callback_registry *r);

/* @caller (the connection's, alive as long as the client) decides which
 * queues' freezing it is told of: those it can see.  The queues frozen now
 * are sent at once. */
int callback_client_new(struct callback_registry *r, const struct core_caller *caller, callback_grant_fn grant,
                        callback_freeze_fn freeze, void *userdata, struct callback_client **ret);
struct callback_client *callback_client_free(struct callback_client *c);

int callback_worker_register(struct callback_client *c, pid_t tid, unsigned cpu, bool highpri,
                             struct core_error *e);
int callback_worker_unregister(struct callback_client *c, pid_t tid, struct core_error *e);
/* The thread has work: queue its demand (a no-op if queued or granted). */
int callback_worker_demand(struct callback_client *c, pid_t tid, struct core_error *e);
/* The granted thread runs an item of a CPU_INTENSIVE queue: it stops
 * counting toward the pool's concurrency until it gives the grant back.
 * Taken on the client's word: it cannot hold back anyone by it, only let
 * others start, as its own threads outside cmwq would. */
int callback_worker_intensive(struct callback_client *c, pid_t tid, struct core_error *e);
/* The thread gives its grant back, or withdraws its demand. */
int callback_worker_idle(struct callback_client *c, pid_t tid, struct core_error *e);

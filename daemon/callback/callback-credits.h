/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A callback client's credits of unbound queues (proto/shm.h, struct
 * cmwq_shm_credits): each entry of its region it names a queue in is a
 * claim of the core's (core/core.h, core_claim_*), and what the claim holds
 * and may keep is written back into the entry.  Nothing read is trusted:
 * the name is looked up as the client's (it sees only the queues it may),
 * a queue it names twice is refused the second time, want is bounded by
 * max_active, and a client that says it gave back more than it held breaks
 * its region.
 *
 * A CREDITS entry in the ring only marks its entry; the entries marked are
 * read once per turn of the event loop, so that a client pushing CREDITS
 * as fast as it may costs cmwqd one settling per entry and turn, not one
 * per ring entry.
 */

#include <event2/event.h>

#include "callback/callback-shm.h"
#include "core/core.h"

struct callback_credits;

/* The client broke its region through a credits entry (@why, for the log). */
typedef void (*callback_credits_broken_fn)(const char *why, void *userdata);

/* @caller and @shm outlive it. */
struct callback_credits *callback_credits_new(struct core *core, const struct core_caller *caller,
                                              struct callback_shm *shm, callback_credits_broken_fn broken,
                                              void *userdata);
/* Gives back every credit the client held. */
struct callback_credits *callback_credits_free(struct callback_credits *cc);
/* The client's CREDITS entry for @entry (< CMWQ_SHM_CREDIT_QUEUES): read
 * at the end of this turn of the loop. */
void callback_credits_changed(struct callback_credits *cc, unsigned entry);

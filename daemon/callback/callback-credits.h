/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A callback client's credits of unbound queues (proto/shm.h, struct
 * cmwq_shm_credits): each entry of its region it names a queue in is a
 * claim of the core's (core/core.h, core_claim_*), and what the claim holds
 * and may keep is written back into the entry.  Nothing read is trusted:
 * the name is looked up as the client's (it sees only the queues it may),
 * want is bounded by max_active, and a client that says it gave back more
 * than it held breaks its region.
 */

#include "callback/callback-shm.h"
#include "core/core.h"

struct callback_credits;

/* @caller and @shm outlive it. */
struct callback_credits *callback_credits_new(struct core *core, const struct core_caller *caller,
                                              struct callback_shm *shm);
/* Gives back every credit the client held. */
struct callback_credits *callback_credits_free(struct callback_credits *cc);
/* The client's CREDITS entry for @entry (< CMWQ_SHM_CREDIT_QUEUES): 0, or
 * -EBADMSG when what it wrote is broken. */
int callback_credits_changed(struct callback_credits *cc, unsigned entry);

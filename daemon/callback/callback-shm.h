/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The daemon's side of the memory one libcmwq-client process shares with it
 * (layout and protocol in proto/shm.h): checking the memfd and the doorbell
 * a client passed, reading its submission ring, and writing grants into its
 * workers' control blocks.
 *
 * Nothing read from the region is trusted.  Entries are read once each and
 * checked (op, slot) before they reach the caller's op function, the ring's
 * fill level is bounded by its size, and each client has a budget of
 * entries (a token bucket: so many a second, at most a ring's worth per turn
 * of the event loop), so that a client filling its ring as fast as it can
 * slows only itself and delays nobody else.  A region found broken is
 * reported once through the broken function; the owner ends that client's
 * connection.
 */

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/core.h"
#include "shm.h"

struct callback_shm;

/* One checked ring entry: @arg is a slot below CMWQ_SHM_SLOTS, or for
 * FREEZE_ACK a sequence number.  A negative errno rejects it: the client
 * broke the protocol (e.g. a slot it never registered), and its region is
 * broken. */
typedef int (*callback_shm_op_fn)(enum cmwq_shm_op op, unsigned arg, void *userdata);
/* The client broke its region; @why says how, for the log. */
typedef void (*callback_shm_broken_fn)(const char *why, void *userdata);

/* Makes the region and its doorbell for a client: a memfd of
 * sizeof(struct cmwq_shm) sealed against resizing and further sealing,
 * mapped here, and a (non-semaphore) eventfd cmwqd listens on.  The client
 * gets them over the socket: *@ret_memfd is the caller's to send and close;
 * *@ret_eventfd stays the region's (send it, do not close it).  cmwqd makes
 * them rather than take the client's: a file descriptor a client passes
 * could be anything, and closing one (a lingering socket, a file on the
 * client's FUSE mount) can block the event loop.  Before it acts on a
 * doorbell, @sw (NULL: none) is brought up to date (sleepwatch_catch_up()).
 * Without @credits the region ends before its credits entries, as an older
 * client maps it, and a CREDITS entry breaks it. */
int callback_shm_new(struct event_base *base, struct sleepwatch *sw, pid_t pid, bool credits, callback_shm_op_fn op,
                     callback_shm_broken_fn broken, void *userdata, struct callback_shm **ret, int *ret_memfd, int *ret_eventfd,
                     struct core_error *e);
struct callback_shm *callback_shm_free(struct callback_shm *s);

/* Reads what the ring holds now, as far as the client's budget goes; once
 * it is spent, nothing until a timer reads the rest when the budget allows
 * (its doorbell unheard meanwhile).  Returns 0, or a negative errno if the
 * ring is broken (and reports it). */
int callback_shm_drain(struct callback_shm *s);

/* The client broke its region in a way only the caller could tell (@why):
 * as for a broken ring, once, through the broken function. */
void callback_shm_break(struct callback_shm *s, const char *why);
/* Grants the thread in @slot its CPU for the @seq-th time and wakes it.
 * Returns whether the wake-up found a thread waiting on the slot's grant
 * word (its client's, honest or not). */
bool callback_shm_grant(struct callback_shm *s, unsigned slot, uint32_t seq);
/* When the thread in @slot took its @seq-th grant (CLOCK_MONOTONIC ns), as
 * its client wrote it; UINT64_MAX if it has not said it took that one. */
uint64_t callback_shm_grant_taken_ns(struct callback_shm *s, unsigned slot, uint32_t seq);
/* A thread is registered in @slot, which another may have used before:
 * its grant, yield, taken_grant and lazy_doorbell words start from 0 again. */
void callback_shm_reset_slot(struct callback_shm *s, unsigned slot);
/* Whether the thread in @slot may push entries without ringing (proto/shm.h,
 * lazy_doorbell).  Turned off, the ring is read again before the event loop
 * next waits: an entry pushed by a thread that still saw it on is read then. */
void callback_shm_set_lazy_doorbell(struct callback_shm *s, unsigned slot, bool lazy);
/* Other work is about to start on the CPU of the thread in @slot, which
 * holds its grant, blocked: it may not linger on this grant from now on
 * (proto/shm.h, enum cmwq_shm_linger).  Returns what the word said: IDLE
 * (it lingered: now REVOKED, and the grant is to be given back), NONE (now
 * BARRED), TAKEN (its client woke it to run items; left as it is, see
 * callback_shm_linger_settle()), or BARRED for anything else. */
enum cmwq_shm_linger callback_shm_linger_revoke(struct callback_shm *s, unsigned slot);
/* After TAKEN: wakes the thread if it still sleeps on the word, and sets
 * the word to NONE if cmwqd counts it running (@runs), BARRED if not. */
void callback_shm_linger_settle(struct callback_shm *s, unsigned slot, bool runs);
/* Asks the thread in @slot to give its @seq-th grant back after its current item. */
void callback_shm_yield(struct callback_shm *s, unsigned slot, uint32_t seq);
/* The client's completion records of @slot, as it wrote them: for display
 * and for telling progress from a stall, never for a decision about others. */
void callback_shm_records(struct callback_shm *s, unsigned slot, uint64_t *started, uint64_t *finished);
/* An unbound queue's credits entry (proto/shm.h, struct cmwq_shm_credits),
 * as the client wrote it: its name (copied when @name is not NULL; false if
 * it is not NUL-terminated), what it wants and how many it gave back. */
bool callback_shm_credits_read(struct callback_shm *s, unsigned entry, char *name, uint32_t *want,
                               uint32_t *returned);
/* Writes cmwqd's side of a credits entry, and wakes the client's thread
 * waiting on it when it got more (or was refused). */
void callback_shm_credits_write(struct callback_shm *s, unsigned entry, uint32_t granted, uint32_t limit,
                                bool refused);
/* The CPU time (ns) the thread had used under its grant when its current
 * callback started, as the client wrote it; 0 if it wrote none.  Believed
 * only within what the thread's CPU time itself bounds (cm/pool.c). */
uint64_t callback_shm_run_cpu_ns(struct callback_shm *s, unsigned slot);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The input language of the fuzz target "shm-ring" (fuzz-shm-ring.c),
 * shared with gen-seeds.c: a program a libcmwq-client process runs against
 * the memory it shares with cmwqd.  Each op is one byte (taken modulo
 * _SHM_OP_MAX) and its arguments; multi-byte numbers are little endian.  A
 * "slot choice" byte picks from shm_fuzz_slots[] (modulo its size), an "op"
 * byte is a ring op modulo 8 (0 and those past the last: unknown ops).
 */

#include "shm.h"

enum {
        SHM_OP_PUSH,            /* slot choice, op: append one entry */
        SHM_OP_PUSH_RAW,        /* u32: append any entry word */
        SHM_OP_TAIL,            /* u32: sq_tail = the published sq_head + that (wrapping) */
        SHM_OP_TAIL_RAW,        /* u32: sq_tail = that */
        SHM_OP_WRITE,           /* u24 offset (modulo the region's size), u8 length, the bytes */
        SHM_OP_DOORBELL,        /* write the eventfd, one turn of the loop */
        SHM_OP_TURN,            /* one turn of the loop */
        SHM_OP_SYNC,            /* what the daemon does before a callback request */
        SHM_OP_REGISTER,        /* thread (modulo 6), slot choice, CPU (modulo CPUs + 1; 0xff: CPUs, none),
                                 * bit 0: highpri */
        SHM_OP_UNREGISTER,      /* thread (modulo 6) */
        SHM_OP_FREEZE,          /* bit 0 clear: freeze system_freezable, set: thaw it */
        SHM_OP_RACE,            /* u16 count, slot choice, op: while the daemon reads the ring, another
                                 * thread appends IDLE and that entry alternately, one per entry the
                                 * daemon acts on, count in all */
        SHM_OP_FILL,            /* slot choice, op: the whole ring of that entry, sq_tail = sq_head + ring */
        _SHM_OP_MAX,
};

/* Threads 0-3 are registered in slots 0-3 when an input starts, on CPUs
 * 0, 1, ... (modulo the CPUs), thread 3 high priority. */
static const unsigned shm_fuzz_slots[] = { 0, 1, 2, 3, 4, 5, CMWQ_SHM_SLOTS - 1, CMWQ_SHM_SLOTS };
#define SHM_FUZZ_NR_SLOTS (sizeof(shm_fuzz_slots) / sizeof(shm_fuzz_slots[0]))
#define SHM_FUZZ_NR_THREADS 6
#define SHM_FUZZ_NR_INITIAL 4

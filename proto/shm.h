/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The memory a libcmwq-client process shares with cmwqd for callback work.
 *
 * The client asks for it with a CallbackAttach request; cmwqd makes a
 * memfd of exactly sizeof(struct cmwq_shm), seals its size and its seals
 * (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), and passes it with an eventfd
 * (the doorbell) over the socket with its answer.  Both ends map it shared.
 * cmwqd makes them because it takes no file descriptor from a client (a
 * passed one could be anything, and closing some kinds can block).  Then:
 *
 *   - the submission ring carries the client's worker threads' requests to
 *     the daemon: "thread in slot S has work for its CPU" (DEMAND), "now
 *     has work for CPU C instead" (MOVE), "gives
 *     its grant back" (IDLE), "runs an item of a CPU_INTENSIVE queue"
 *     (INTENSIVE), "this unbound queue's credits changed" (CREDITS, see
 *     struct cmwq_shm_credits); and the client's answer to the daemon's freeze notices
 *     (sent on the socket, each with a sequence number): "no callback of a
 *     frozen queue runs any more, as of notice N" (FREEZE_ACK).  The client is the only producer, the daemon the only
 *     consumer.  After adding entries the client rings the doorbell only if
 *     the daemon set need_wakeup (io_uring's SQ_NEED_WAKEUP), so a burst of
 *     requests costs one wake-up; entries that matter only once the thread
 *     that pushes them switches out ring no doorbell at all (see
 *     lazy_doorbell below);
 *   - a worker's control block (its slot) carries the daemon's answers: the
 *     grant word, a futex the thread sleeps on and the daemon bumps and
 *     wakes when it grants the CPU, and the yield word, which asks the
 *     thread to give the grant back after its current item.  A granted
 *     thread runs items back to back without asking the daemon (the
 *     kernel's keep_working()): queueing and running a callback needs no
 *     round trip while a thread holds its CPU;
 *   - the slot's completion records (items started and finished on that
 *     thread) are the client's account of its work, which the daemon reads
 *     for its statistics and its watchdog; and the CPU time the thread
 *     had used under its grant when its current callback started
 *     (run_cpu_ns), from which the daemon
 *     measures the CPU-intensive threshold per callback, as the kernel
 *     measures it per work item from the item's start, not per grant.  A
 *     thread the daemon marks CPU-intensive is asked to yield (the yield
 *     word) so that its next callback, under a new grant, counts again.
 *
 * The daemon trusts nothing it reads here: every index is bounded, every
 * op checked, the ring's fill level checked against its size, and every
 * value is read once into a local before it is used.  A client that
 * scribbles on the region harms only itself: the daemon ends its
 * connection.  The daemon never writes anything the client's correctness
 * depends on except the grant, yield and lazy_doorbell words, sq_head and
 * need_wakeup.  run_cpu_ns is believed only as far as it cannot hurt
 * others: it can move the start of the measurement no earlier than the
 * grant or the thread's last wake-up, nor later than the thread's CPU time
 * now, and once the thread has been asked to yield (other work waits), no
 * later than what it said then (daemon/callback/callback.c): claiming a fresh start again
 * and again does not keep a thread that will not yield counted.  taken_ns
 * can make a block of the thread's own count as its wait for a grant, so
 * that it holds its CPU asleep, as a thread its client keeps asleep
 * elsewhere does: once other work waits there, until the thread's
 * CPU-intensive threshold or cmwqd's look in /proc ends it.
 *
 * doc/design.md §6 walks through the protocol with the functions on both
 * sides.
 */

#include <stdint.h>

#define CMWQ_SHM_MAGIC 0x71776d63u      /* "cmwq", little endian */
#define CMWQ_SHM_VERSION 1u

/* Worker threads one client may register: one slot each. */
#define CMWQ_SHM_SLOTS 1024u
/* Entries of the submission ring, a power of two.  A thread has at most
 * three requests outstanding (INTENSIVE, IDLE, then DEMAND or MOVE, after
 * which it waits for a grant), and a FREEZE_ACK follows only a new notice
 * from the daemon, so those never fill it.  CREDITS come one per change of an
 * entry's want or returned, at most about max_active per burst of items;
 * should the ring be full, the client waits for room (ringing the
 * doorbell), which slows only itself. */
#define CMWQ_SHM_RING 4096u

enum cmwq_shm_op {
        CMWQ_SHM_OP_DEMAND = 1,
        CMWQ_SHM_OP_IDLE = 2,
        CMWQ_SHM_OP_INTENSIVE = 3,
        CMWQ_SHM_OP_FREEZE_ACK = 4,     /* the low 24 bits: a notice's sequence number */
        CMWQ_SHM_OP_CREDITS = 5,        /* the low 24 bits: an entry of credits[] whose want or
                                         * returned changed (CMWQ_SHM_FEATURE_CREDITS) */
        CMWQ_SHM_OP_MOVE = 6,           /* the low 24 bits: CMWQ_SHM_MOVE_ARG(slot, cpu): an idle
                                         * thread, pinned there now, demands that CPU
                                         * (CMWQ_SHM_FEATURE_MOVE) */
};

/* CMWQ_SHM_OP_MOVE's argument: the slot in the low 10 bits (CMWQ_SHM_SLOTS
 * is 1024), the CPU above.  The thread goes to that CPU's pool of its
 * priority, giving back what it had on its old CPU as by IDLE, and demands
 * it as by DEMAND.  A CPU's work that finds none of the client's threads
 * idle there takes an idle one of another CPU so, rather than a new one:
 * a process's CPUs reach their peaks of work blocked at once at different
 * times (client/lib/work-pool.c, work_pool_take_idle()). */
#define CMWQ_SHM_MOVE_ARG(slot, cpu) ((((uint32_t) (cpu)) << 10) | ((uint32_t) (slot) & 0x3ffu))
#define CMWQ_SHM_MOVE_SLOT(arg) ((uint32_t) (arg) & 0x3ffu)
#define CMWQ_SHM_MOVE_CPU(arg) (((uint32_t) (arg) & 0xffffffu) >> 10)
/* The highest CPU a MOVE can name (14 bits): a thread of a pool above it
 * is not moved. */
#define CMWQ_SHM_MOVE_CPU_MAX CMWQ_SHM_MOVE_CPU(UINT32_MAX)
_Static_assert(CMWQ_SHM_SLOTS - 1 == CMWQ_SHM_MOVE_SLOT(UINT32_MAX), "a MOVE names every slot");

/* cmwq_shm.features, written by cmwqd when it makes the region (0 from a
 * cmwqd that knows none). */
#define CMWQ_SHM_FEATURE_LINGER (1u << 0)       /* it honours cmwq_shm_slot.linger */
#define CMWQ_SHM_FEATURE_CREDITS (1u << 1)      /* it deals credits[] (below) */
#define CMWQ_SHM_FEATURE_MOVE (1u << 2)         /* it takes CMWQ_SHM_OP_MOVE */

/* Unbound queues a client may hold credits of at once (entries of credits[]). */
#define CMWQ_SHM_CREDIT_QUEUES 64u
/* A queue's name in an entry: "UID/NAME" at most, NUL-terminated. */
#define CMWQ_SHM_CREDIT_NAME 80u

/* An unbound queue's max_active holds across every client of cmwqd, as the
 * kernel's (since 6.9) holds across CPUs: a client runs at most as many
 * callbacks of the queue at once as it holds credits of it, and cmwqd deals
 * the queue's max_active out as credits, counted with the queue's exec items
 * (doc/design.md §6.6).  The client holds granted - returned.  It asks by
 * raising want and pushing CREDITS; cmwqd grants by raising granted and
 * waking the word.  While others want more than is left, cmwqd lowers
 * limit to this client's fair part, and the client gives back what it holds
 * beyond max(limit, its running callbacks) as they return.  cmwqd believes
 * want and returned only as this client's own: credits come out of its own
 * uid's share on a built-in queue, and a client that does not give back
 * keeps what it took, holding back only its uid's other clients.  The
 * region has these entries only when the client asked for them
 * (CallbackAttach.credits); it is offsetof(struct cmwq_shm, credits) long
 * otherwise. */
struct cmwq_shm_credits {
        /* Written by the client; name before the entry's first CREDITS, never changed after. */
        char name[CMWQ_SHM_CREDIT_NAME];
        uint32_t want;          /* credits it could use now: running callbacks + startable items */
        uint32_t returned;      /* credits given back so far */
        /* Written by cmwqd. */
        uint32_t granted;       /* credits given so far; the futex word */
        uint32_t limit;         /* credits it may keep: max_active, or its part when contended */
        uint32_t refused;       /* 1: no such unbound queue; the client counts its own callbacks only */
        uint8_t reserved[28];
} __attribute__((aligned(64)));

/* cmwq_shm_slot.linger, the kernel's idle worker: a granted thread that has
 * run out of work may keep its grant a while, asleep on this word, so that
 * its client's next item for that CPU starts on it at once, without asking
 * cmwqd.  Blocked, it does not hold the CPU back: before cmwqd starts other
 * work on that CPU it takes the grant back (IDLE -> REVOKED).  Transitions
 * by compare-and-exchange only; cmwqd believes none of it beyond this
 * client's own threads (doc/design.md §6.4). */
enum cmwq_shm_linger {
        CMWQ_SHM_LINGER_NONE = 0,       /* cmwqd, with each grant: the thread may linger */
        CMWQ_SHM_LINGER_IDLE = 1,       /* client, from NONE or TAKEN: asleep here with its grant */
        CMWQ_SHM_LINGER_TAKEN = 2,      /* client, from IDLE: woken to run items on the grant;
                                         * cmwqd sets NONE once it counts the thread running */
        CMWQ_SHM_LINGER_REVOKED = 3,    /* cmwqd, from IDLE: the grant is given back */
        CMWQ_SHM_LINGER_BARRED = 4,     /* cmwqd, from NONE or TAKEN: other work starts on the CPU,
                                         * no more lingering on this grant (which stays the
                                         * thread's, and so do the items it was woken for) */
};

/* A ring entry: the op in the top 8 bits, the slot (or the sequence number
 * of FREEZE_ACK, modulo 2^24) in the low 24. */
#define CMWQ_SHM_SEQ_MASK 0xffffffu
#define CMWQ_SHM_ENTRY(op, slot) (((uint32_t) (op) << 24) | ((uint32_t) (slot) & 0xffffffu))
#define CMWQ_SHM_ENTRY_OP(e) ((uint32_t) (e) >> 24)
#define CMWQ_SHM_ENTRY_SLOT(e) ((uint32_t) (e) & 0xffffffu)

/* One worker thread's control block, a cache line of its own.  A slot freed
 * by a thread that ended (CallbackUnregister) may serve a new one: the
 * daemon sets its grant, yield and taken_grant words to 0 when it
 * registers. */
struct cmwq_shm_slot {
        /* Written by the daemon. */
        uint32_t grant;         /* grants so far; the futex word */
        uint32_t yield;         /* == grant: give this grant back after the current item */
        /* 1: cmwqd reads this thread's switches within a few ms (perf, its
         * CPU busy), and drains the ring before it acts on one; so the
         * thread may skip the doorbell for the entries it pushes just
         * before it gives up its CPU (IDLE) and for demands on the CPU it
         * holds (DEMAND or MOVE while granted there): cmwqd learns of them
         * at its next switch, when they matter, without a wake-up of their
         * own.  0 (the /proc sampler, its CPU not watched, its grant
         * CPU-intensive, or not granted): every entry rings.  It may turn
         * to 0 at any time; cmwqd then reads the ring once more, and the
         * thread's store of sq_tail and its load of this word are
         * sequentially consistent, so that an entry pushed by a thread
         * that still saw 1 is read. */
        uint32_t lazy_doorbell;
        /* Written by both (enum cmwq_shm_linger); 0 in version 1 as first
         * released, and never lingered on without CMWQ_SHM_FEATURE_LINGER. */
        uint32_t linger;
        /* Written by the client: its completion records. */
        uint64_t started;       /* callbacks started on this thread */
        uint64_t finished;      /* callbacks that returned */
        /* The CPU time (ns) the thread had used under its current grant
         * when its current or last callback started, written before it
         * starts and set to 0 when the thread takes a grant: 0 counts from
         * the grant.  Relative to the grant because cmwqd's clock of the
         * thread's CPU time (a perf task-clock counter, or /proc) has
         * another origin than the thread's CLOCK_THREAD_CPUTIME_ID.  Was
         * reserved (zero) in version 1 as first released: either end may be
         * older than the other. */
        uint64_t run_cpu_ns;
        /* When the thread last took a grant: the grant word's value it saw
         * (taken_grant, written last, with release ordering) and the
         * CLOCK_MONOTONIC time in ns right after it saw it (taken_ns), from
         * a client that said so in CallbackAttach (grant_taken).  cmwqd
         * tells from it that a switch-out stamped before was the thread's
         * way into its wait for that grant, not its work blocking; not from
         * a client in another time namespace than cmwqd's.  Was reserved
         * (zero) in version 1 as first released. */
        uint64_t taken_ns;
        uint32_t taken_grant;
        uint8_t reserved1[12];
} __attribute__((aligned(64)));

struct cmwq_shm {
        /* Written by cmwqd when it makes the region; the client checks
         * magic and version once, when it maps it. */
        uint32_t magic;
        uint32_t version;
        uint32_t nr_slots;
        uint32_t ring_size;
        uint32_t features;      /* CMWQ_SHM_FEATURE_*; was reserved (0) */
        uint8_t reserved0[44];
        /* Written by the daemon. */
        uint32_t sq_head;       /* entries consumed */
        uint32_t need_wakeup;   /* 1: ring the doorbell after adding entries */
        uint8_t reserved1[56];
        /* Written by the client. */
        uint32_t sq_tail;       /* entries added */
        uint8_t reserved2[60];
        uint32_t sq[CMWQ_SHM_RING];
        struct cmwq_shm_slot slots[CMWQ_SHM_SLOTS];
        /* Past the end of a region without CMWQ_SHM_FEATURE_CREDITS. */
        struct cmwq_shm_credits credits[CMWQ_SHM_CREDIT_QUEUES];
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct cmwq_shm_slot) == 64, "a slot is one cache line");
_Static_assert(sizeof(struct cmwq_shm_credits) == 128, "a credits entry is two cache lines");
_Static_assert((CMWQ_SHM_RING & (CMWQ_SHM_RING - 1)) == 0, "the ring size is a power of two");
_Static_assert(CMWQ_SHM_RING >= 3 * CMWQ_SHM_SLOTS + 64, "the ring holds every thread's outstanding requests");

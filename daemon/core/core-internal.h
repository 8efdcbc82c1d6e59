/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The core's own header: the structs behind core/core.h's opaque
 * types and what the core's files (the .c files of daemon/core/) call of each other,
 * as the kernel's workqueue_internal.h.  Nothing outside daemon/core/
 * includes it (a unit test of the core may, and says so); front ends see
 * core/core.h: calls, and views the core fills.
 */

#include "core/core.h"
#include "core/item-env.h"
#include "exec/exec.h"
#include "store/store.h"

/* What only an item that started needs: its process while it runs, then
 * how that run went.  Allocated when the item first starts (or is read back
 * from the log having run, or with a failure to report), so that an item
 * that never started, such as each of a million pending ones, does without
 * it (issue 13, part 3).  Read through item_ran(); a requeued item keeps
 * its own (its CPU time adds up over its runs). */
struct item_run {
        struct item *item;
        /* At most once (drop queues): the record its start waits for, a
         * claim made ahead (ItemStarted ahead) or its own ItemStarted; 0:
         * none.  Set while pending: claimed; cleared when its process goes
         * or the claim is given back (item.c, "Claims").  A claim makes
         * the run of an item that has not started. */
        uint64_t start_seq;
        struct list_head starting_entry;        /* core->starting: waits for start_seq on disk */
        /* Its process made ahead while it waits on a bound pool (see
         * exec_prepare()); becomes proc when it starts. */
        struct exec_proc *prepared;
        /* While it runs. */
        struct exec_proc *proc;
        struct worker *worker;
        /* What happened. */
        uint64_t cpu_usec;
        uint64_t started_usec;          /* CLOCK_REALTIME, 0: not started */
        char *out;
        char *err;
        int exit_status;
        int signal;
        int exec_errno;
        /* Bounded by the limit output-bytes. */
        uint32_t out_len;
        uint32_t err_len;
};

/* Laid out for a million pending items (tests/bench/README.md, "Where the
 * bytes of a pending item go"): no holes, flags as bits, what it runs in
 * the same allocation (item_new()), what only a started item needs behind
 * one pointer, what only some items need behind another. */
struct item {
        uint64_t id;
        struct core *core;
        struct workqueue *wq;           /* NULL once finished: item_wq_name() then */
        struct pool_work work;          /* on a pool worklist or its pwq's inactive list */
        struct pwq *pwq;
        struct pwq_share *share;        /* while queued: the max_active it counts against */
        /* A queued item's links, and a finished one's (item_retire() takes
         * it off the first two before it joins the history). */
        union {
                struct list_head share_entry;   /* share->inactive, while inactive */
                struct list_head history_entry; /* core->history, once finished */
        };
        union {
                struct list_head inflight_entry;        /* wq->inflight: queued, not finished */
                struct list_head user_history_entry;    /* its uid's history, once finished */
        };
        struct list_head wq_entry;              /* wq->items: every unfinished item */
        struct item *hash_next;
        uint64_t seq;                   /* flush ordering within the queue */
        union {
                uint64_t queued_bytes;  /* charged to its uid's queued-bytes while unfinished */
                uint64_t history_bytes; /* charged to its uid's history-bytes once finished */
        };

        /* Its process and what its runs left; NULL: it never started. */
        struct item_run *run;
        /* A key, a delay, waiters, a past; NULL: none of them. */
        struct item_extras *extras;

        uint64_t queued_usec;           /* CLOCK_REALTIME */

        uid_t uid;
        int16_t cpu;                    /* requested CPU (Linux has at most 8192); -1: unbound queue */
        enum item_state state : 8;
        bool cancel_requested : 1;
        bool restored_running : 1;      /* recovery: the log says it was running */
        bool timed_out : 1;
        bool cpu_intensive : 1;
        bool out_truncated : 1;
        bool err_truncated : 1;
        bool has_program : 1;           /* argv's block holds a program other than argv[0] */

        /* What it runs, in its own allocation: the environment, shared
         * with the items that carry the same one (NULL once it has
         * ended), then argv's pointers and NULL, then cwd, the program
         * when it is not argv[0] (has_program), and argv's strings.
         * item_envp(), item_cwd() and item_program() find them. */
        struct item_env *env;
        char *argv[];
};

/* What few items need, made the first time one of them does
 * (item_extras_get()): a plain pending item, the kind a million wait as,
 * carries none of it. */
struct item_extras {
        struct work_key *key;
        char *key_name;                 /* kept in the history too */
        struct event *timer;            /* delay, back-off */
        uint64_t deadline_usec;         /* CLOCK_REALTIME end of the delay or back-off, 0: none */
        struct list_head waiters;
        char *wq_name;                  /* once finished: its queue's, which may go first */
        uint64_t finished_usec;         /* CLOCK_REALTIME, once finished */
        void *payload;                  /* its stdin; freed once it has ended */
        uint64_t timeout_usec;
        /* Bounded by the limit item-payload-bytes. */
        uint32_t payload_len;
        unsigned interruptions;         /* times cmwqd stopped while it ran */
        unsigned requeues;
};

/* What an item without extras reads: all zero (its waiters, though, are
 * only ever looked at through i->extras). */
extern const struct item_extras item_extras_none;

static inline const struct item_extras *item_extra(const struct item *i) {
        return i->extras ? i->extras : &item_extras_none;
}

/* @i's extras, made if it has none yet; NULL: out of memory. */
struct item_extras *item_extras_get(struct item *i);

/* A copy of @len bytes of @payload as @i's stdin; -ENOMEM. */
int item_set_payload(struct item *i, const void *payload, uint32_t len);
/* @i is killed after running @usec (0: never); -ENOMEM. */
int item_set_timeout(struct item *i, uint64_t usec);

/* The name of @i's queue, finished or not. */
const char *item_wq_name(const struct item *i);

/* An item's run, all zero for one that never started. */
extern const struct item_run item_run_none;

static inline const struct item_run *item_ran(const struct item *i) {
        return i->run ? i->run : &item_run_none;
}

static inline struct exec_proc *item_proc(const struct item *i) {
        return i->run ? i->run->proc : NULL;
}

static inline uint64_t item_start_seq(const struct item *i) {
        return i->run ? i->run->start_seq : 0;
}

/* On core->starting: its process waits for its start_seq to be on disk. */
static inline bool item_starting(const struct item *i) {
        return i->run && list_linked(&i->run->starting_entry);
}

/* Through argv's block: the environment (empty once finished), the
 * working directory, the resolved plugin path or NULL (argv[0] is run). */
char **item_envp(const struct item *i);
/* The shared environment behind item_envp(); NULL: empty. */
struct item_env *item_env(const struct item *i);
const char *item_cwd(const struct item *i);
const char *item_program(const struct item *i);

/* @i's run, made if it has none yet; NULL: out of memory. */
struct item_run *item_run_get(struct item *i);

static inline bool item_is_finished(const struct item *i) {
        return i->state >= ITEM_FINISHED;
}

/* Whether the item's process was seen to end, so that exit_status (signal
 * 0) or signal tells how: it ran to its end, was cancelled while running,
 * or exited 75 to be requeued.  Not when it never started, could not start
 * (exec_errno), or was running when cmwqd stopped or died: an interrupted
 * item's end was never seen, and it reports neither. */
static inline bool item_has_exit(const struct item *i) {
        return item_ran(i)->started_usec && (item_is_finished(i) || item_extra(i)->requeues > 0) && i->state != ITEM_FAILED &&
               i->state != ITEM_INTERRUPTED;
}

/* What counts against a queue's max_active on one pwq.  A queue's items
 * share the pwq's own; on a built-in queue, which every user shares, each
 * uid has a share of its own (struct user_usage), so that each user gets
 * the queue's max_active as if the queue were its own: one user's items,
 * however many and however long they sleep, never hold another's back. */
struct pwq_share {
        unsigned nr_active;             /* pending on the pool or running, and claims' credits */
        struct list_head inactive;      /* struct item, share_entry: waiting, in order */
        /* Unbound: the credits callback clients hold on it (core/claim.c),
         * counted in nr_active; and, while claims wait for room, what its
         * exec items may keep active (their fair part), 0 otherwise. */
        unsigned claims_held;
        unsigned exec_limit;
};

/* A workqueue's slot in one pool: the kernel's pool_workqueue. */
struct pwq {
        struct workqueue *wq;
        struct pool *pool;
        unsigned nr_active;             /* pending on the pool or running, all shares */
        unsigned nr_running;            /* running now */
        struct list_head inactive;      /* over max_active or frozen, all shares, in order */
        struct pwq_share shared;        /* the share of every item but those of built-in queues */
        size_t share_index;             /* built-in queues: its slot in user_usage.builtin_shares */
};

struct workqueue {
        struct core *core;
        struct list_head entry;
        char *name;
        unsigned flags;
        unsigned max_active;            /* effective: 1 for ORDERED */
        uid_t owner;
        bool builtin;                   /* system queue: shared with every user */
        bool frozen;
        bool draining;
        bool destroying;
        enum interrupt_policy on_interrupt;
        /* Connection-owned (struct core_conn_owner): destroyed when the
         * connection ends.  owner_conn is NULL once it has ended. */
        bool connection_owned;
        pid_t owner_pid;
        struct core_conn_owner *owner_conn;
        struct list_head owner_entry;   /* owner_conn->workqueues */
        struct pwq *pwqs;               /* bound: one per CPU; unbound: one */
        size_t n_pwqs;
        struct list_head inflight;      /* queued, not finished, by seq */
        struct list_head items;         /* every unfinished item (incl. delayed) */
        uint64_t nr_items;
        uint64_t next_seq;
        struct list_head flushers;
        struct list_head drainers;      /* drain and destroy */
        struct work_key *keys;          /* singly linked, small */
        struct exec_rescuer *rescuer;   /* MEM_RECLAIM: a process made ahead */
        struct list_head callback_holds;        /* while frozen: struct callback_hold */
        struct list_head claims;        /* unbound: struct core_claim, callback work's credits (core/claim.c) */
        struct list_head claim_waiters; /* the claims that wait for credits, in order */
        bool claims_settling;           /* in claims_settle(): a nested call only asks for another round */
        bool claims_resettle;
        struct workqueue_stats stats;
};

struct core {
        struct event_base *base;
        struct sleepwatch *sleepwatch;
        struct core_config config;
        unsigned nr_cpus;
        cpu_set_t cpus_allowed;         /* online CPUs in our affinity mask */
        struct pool *cpu_pools;         /* [cpu * 2 + highpri] */
        struct pool unbound_pools[2];   /* [highpri] */
        struct list_head workqueues;
        uint64_t next_id;
        struct item **item_hash;
        size_t item_hash_size;
        size_t nr_items;
        struct item_env_table envs;     /* the environments the items share */
        /* While the log is read back: its Environment records by id
         * (core/store-recovery.c), each holding a reference. */
        struct restore_env *restore_envs;
        size_t restore_envs_size, nr_restore_envs;
        struct list_head history;       /* finished, oldest first */
        unsigned nr_history;
        struct user_table users;        /* what each uid holds (core/user-limits.h) */
        size_t nr_builtin_pwqs;         /* the pwqs of the built-in queues: each user's shares */
        struct list_head freezers;      /* waiting for frozen queues to go idle */
        struct event *freeze_timer;
        struct event *watchdog_timer;   /* armed only while work waits */
        struct list_head observers;     /* struct core_observer */
        bool shutting_down;
        /* Told when a queue is frozen or thawed (callback work, whose
         * items the core does not see). */
        void (*freeze_changed)(struct workqueue *wq, void *userdata);
        void *callback_hooks_userdata;
        void (*count_callbacks)(void *userdata);       /* same userdata */
        void (*cpu_watch_changed)(int cpu, void *userdata);     /* same userdata */
        struct store *store;            /* NULL: nothing is kept across restarts */
        struct store_listener store_listener;
        bool restoring;                 /* replaying the log: record nothing */
        struct list_head starting;      /* item_runs whose start record is not on disk yet */
};

/* The log's environments, kept by id while it is read back, let go
 * (core/store-recovery.c). */
void core_store_restore_envs_done(struct core *c);

/* Internal between core/core.c, core/workqueue.c and core/item.c. */
void core_notify_workqueue_added(struct workqueue *wq);
void core_notify_workqueue_removed(struct workqueue *wq);
void core_notify_workqueue_changed(struct workqueue *wq);
void core_notify_item_finished(struct item *i);
/* The pool @n (< core_nr_pools()) in the order of core_for_each_pool(). */
struct pool *core_pool_at(const struct core *c, size_t n);
void core_item_hash(struct core *c, struct item *i);
void core_item_unhash(struct core *c, struct item *i);
/* Puts a queued item on its pwq, active or inactive. */
void workqueue_item_activate(struct item *i);
/* An active item left its pwq (ran, or was cancelled while pending). */
void workqueue_item_finished(struct item *i);
/* The share @uid's items count against on @pwq (its own on a built-in
 * queue); NULL: out of memory. */
struct pwq_share *workqueue_share_of(struct pwq *pwq, uid_t uid);
void workqueue_share_activate(struct pwq *pwq, struct pwq_share *share);
/* core/claim.c */
void workqueue_claims_changed(struct pwq *pwq, struct pwq_share *share);
void workqueue_claims_changed_all(struct workqueue *wq);
void workqueue_claims_detach(struct workqueue *wq);
/* An inactive item leaves its pwq (cancelled, or the daemon stops). */
void workqueue_item_unqueue(struct item *i);
/* After the built-in queues were made: each of their pwqs gets its slot
 * in every user's shares. */
void core_number_builtin_pwqs(struct core *c);
void workqueue_check_waiters(struct workqueue *wq);
/* @i is off its queue's inflight list from now on (finished, cancelled or
 * retired); a no-op if it was not on it. */
void workqueue_item_left_inflight(struct item *i);
struct pwq *workqueue_pwq_for_cpu(struct workqueue *wq, int cpu);
void workqueue_free(struct workqueue *wq);
void workqueue_rescuer_replenish(struct workqueue *wq);
struct item *item_free(struct item *i);
void item_queue(struct item *i);
void item_retire(struct item *i, enum item_state state);
void item_abort(struct item *i);
void core_items_start_durable(struct core *c, uint64_t seq);
/* @i, claimed ahead to start (at most once), will not start soon (its
 * queue is frozen): the claim is given back. */
void item_release_claim(struct item *i);
const char *item_key_name(const struct item *i);       /* NULL: no key */
/* The item of @work, or NULL when @work is no item (a client's callback). */
struct item *item_from_work(struct pool_work *work);
/* core/watchdog.c */
int core_watchdog_init(struct core *c);
void core_watchdog_done(struct core *c);
/* Work was queued on @p (its worklist, or behind max_active): arms the watchdog. */
void core_watchdog_kick(struct core *c, struct pool *p);
/* A new item of @wq (NULL: one restored into the history), on no list,
 * that runs copies of @argv in @cwd, with the program @program (NULL or
 * argv[0]: argv[0] is run) and the core's shared environment equal to
 * @envp. */
int item_new(struct core *c, struct workqueue *wq, char *const *argv, size_t argc, char *const *envp, size_t envc,
             const char *cwd, const char *program, struct item **ret);
/* The same with @env, an environment of the core's table, for its strings. */
int item_new_shared(struct core *c, struct workqueue *wq, char *const *argv, size_t argc, struct item_env *env,
                    const char *cwd, const char *program, struct item **ret);
int item_attach_key(struct item *i, const char *key);
/* The pending instance of @uid's work @key on @wq, or NULL. */
struct item *item_key_pending(struct workqueue *wq, uid_t uid, const char *key);
/* Frees @i, which never was queued, with its hold on its work key. */
void item_discard(struct item *i);
/* @w is called back once @i has ended; its item_id says which item. */
int item_add_waiter(struct item *i, struct core_waiter *w);
int item_delay(struct item *i, uint64_t usec);
int item_restore_charge(struct item *i);
void item_restore_history(struct item *i);

/* core/core-store.c: what the core keeps in the durable log.  Each is a no-op
 * without a store and while the log is replayed. */
int core_store_start(struct core *c, struct store *s);
/* -ENOSPC ("the state directory DIR is full") while the store has no room:
 * every change a client asks for (create, destroy, submit, set-max-active,
 * set-on-interrupt) is refused then; 0 otherwise.  Cancel stays allowed. */
int core_store_refuse_change(struct core *c, struct core_error *e);
void core_store_detach(struct core *c);
void core_store_workqueue(struct workqueue *wq);
void core_store_workqueue_destroyed(struct workqueue *wq);
void core_store_item_queued(struct item *i);
/* Whether @i may run only once a record of its start is on disk: the
 * store is on and its queue's policy is drop (at most once). */
bool core_store_at_most_once(const struct item *i);
/* Whether the record @seq is on disk. */
bool core_store_is_durable(const struct core *c, uint64_t seq);
/* Appends a claim for @i (ItemStarted ahead): once on disk, @i may start
 * without another record.  Returns its seq, 0 if none was written. */
uint64_t core_store_item_claim(struct item *i);
/* Gives @i's claim back (ItemReleased, not waited for): it did not start. */
void core_store_item_released(struct item *i);
/* Appends @i's start.  Returns the seq its process must wait for: 0 when
 * it may go at once (no store, policy rerun, or its claim on disk), else
 * its claim's or this record's. */
uint64_t core_store_item_started(struct item *i);
void core_store_item_requeued(struct item *i);
void core_store_item_result(struct item *i);

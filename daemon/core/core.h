/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The core: workqueues, their items and the pools that run them.  Both IPC
 * front ends (the Unix socket and D-Bus) are thin adapters over the calls
 * declared here; a behaviour exists once, in the core.
 *
 * Every call that acts for a client takes the caller's credentials and
 * applies the ownership rules itself, and returns a negative errno with a
 * human message in struct core_error.  Calls that may have to wait (flush,
 * drain, destroy, wait, cancel of a running item, freeze) take a
 * caller-owned struct core_waiter: they return 0 when done at once, or 1
 * when the waiter was queued and its done() will be called later from the
 * event loop.  A front end whose client goes away calls core_waiter_cancel()
 * and is never called back.
 */

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cm/pool.h"
#include "cm/sleepwatch.h"
#include "core/error.h"
#include "core/user-limits.h"
#include "exec/exec.h"
#include "list.h"
#include "store/store.h"

struct cgroup_root;
struct pids_root;
struct event;
struct store;
struct event_base;

/* Workqueue flags: the kernel's WQ_* bits, and the protocol's WorkqueueFlag. */
enum {
        WQ_UNBOUND = 1 << 0,
        WQ_FREEZABLE = 1 << 1,
        WQ_MEM_RECLAIM = 1 << 2,
        WQ_HIGHPRI = 1 << 4,
        WQ_CPU_INTENSIVE = 1 << 5,
        WQ_ORDERED = 1 << 17,
        WQ_FLAGS_ALL = WQ_UNBOUND | WQ_FREEZABLE | WQ_MEM_RECLAIM | WQ_HIGHPRI | WQ_CPU_INTENSIVE | WQ_ORDERED,
};

#define WQ_DFL_ACTIVE 256u
#define WQ_MAX_ACTIVE 512u
#define WQ_NAME_MAX 64u

#define WATCHDOG_DEFAULT_USEC (30ULL * 1000000)  /* the kernel's wq_watchdog_thresh */
#define WATCHDOG_DISABLED UINT64_MAX
#define FREEZE_TIMEOUT_DEFAULT_USEC (20ULL * 1000000)
#define REQUEUE_EXIT_STATUS 75                  /* EX_TEMPFAIL */
#define REQUEUE_BACKOFF_MIN_USEC (100ULL * 1000)
#define REQUEUE_BACKOFF_MAX_USEC (10ULL * 1000000)

/* Who is asking, as the kernel (SO_PEERCRED) or the bus vouches for it:
 * never anything read from /proc of the peer.  An exec item's groups are
 * not the caller's: they come from the user database when it runs (exec/exec.h). */
struct core_caller {
        uid_t uid;
        pid_t pid;                      /* when it connected; 0: unknown */
};

struct core_waiter {
        struct list_head entry;
        void (*done)(struct core_waiter *w, int r);
        uint64_t flush_seq;             /* core-private */
        uint64_t item_id;               /* core-private */
        struct workqueue *drain_wq;     /* core-private */
        uint64_t freeze_deadline_usec;  /* core-private, CLOCK_MONOTONIC */
};

void core_waiter_init(struct core_waiter *w, void (*done)(struct core_waiter *w, int r));
/* Forget a queued waiter; its done() is not called.  Safe if not queued. */
void core_waiter_cancel(struct core_waiter *w);

enum item_state {
        ITEM_DELAYED,
        ITEM_INACTIVE,
        ITEM_PENDING,
        ITEM_RUNNING,
        ITEM_FINISHED,
        ITEM_CANCELLED,
        ITEM_FAILED,
        ITEM_INTERRUPTED,               /* was running when cmwqd stopped; not rerun */
};

/* What becomes of a queue's items that were running when cmwqd stopped or
 * died (the protocol's InterruptPolicy). */
enum interrupt_policy {
        INTERRUPT_DROP,                 /* reported as interrupted, not run again */
        INTERRUPT_RERUN,                /* run again from the start, keeping the id */
        _INTERRUPT_POLICY_MAX,
};
const char *interrupt_policy_to_string(enum interrupt_policy p);
const char *item_state_to_string(enum item_state s);

struct workqueue;
struct pwq;
struct work_key;

/* What only an item that started needs: its process while it runs, then
 * how that run went.  Allocated when the item first starts (or is read back
 * from the log having run, or with a failure to report), so that an item
 * that never started, such as each of a million pending ones, does without
 * it (issue 13, part 3).  Read through item_ran(); a requeued item keeps
 * its own (its CPU time adds up over its runs). */
struct item_run {
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
 * one allocation (item_args_pack()) that it points to once, what only a
 * started item needs behind one pointer. */
struct item {
        uint64_t id;
        struct core *core;
        struct workqueue *wq;           /* NULL once finished and the queue is gone */
        /* Its queue's name: the queue's own while it is unfinished, a copy
         * of its own once finished (wq_name_owned). */
        const char *wq_name;
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
        struct work_key *key;
        char *key_name;                 /* kept in the history too */
        struct event *timer;            /* delay, back-off */
        uint64_t deadline_usec;         /* CLOCK_REALTIME end of the delay or back-off, 0: none */
        struct list_head starting_entry;        /* core->starting: waits for start_seq on disk */
        /* At most once (drop queues): the record its start waits for, a
         * claim made ahead (ItemStarted ahead) or its own ItemStarted; 0:
         * none.  Set while pending: claimed; cleared when its process goes
         * or the claim is given back (item.c, "Claims"). */
        uint64_t start_seq;

        /* What to run: argv is the one allocation that also holds envp, cwd
         * and program (item_args_pack(); item_envp(), item_cwd(),
         * item_program() find them in it). */
        char **argv;
        void *payload;
        uint64_t timeout_usec;
        union {
                uint64_t queued_bytes;  /* charged to its uid's queued-bytes while unfinished */
                uint64_t history_bytes; /* charged to its uid's history-bytes once finished */
        };

        /* Its process and what its runs left; NULL: it never started. */
        struct item_run *run;

        uint64_t queued_usec;           /* CLOCK_REALTIME */
        uint64_t finished_usec;
        struct list_head waiters;

        int cpu;                        /* requested CPU; -1: unbound queue */
        uid_t uid;
        unsigned interruptions;         /* times cmwqd stopped while it ran */
        unsigned requeues;
        /* Bounded by the limit item-payload-bytes. */
        uint32_t payload_len;
        enum item_state state : 8;
        bool cancel_requested : 1;
        bool restored_running : 1;      /* recovery: the log says it was running */
        bool timed_out : 1;
        bool cpu_intensive : 1;
        bool out_truncated : 1;
        bool err_truncated : 1;
        bool wq_name_owned : 1;
        bool has_program : 1;           /* argv's block holds a program other than argv[0] */
};

/* An item's run, all zero for one that never started. */
extern const struct item_run item_run_none;

static inline const struct item_run *item_ran(const struct item *i) {
        return i->run ? i->run : &item_run_none;
}

static inline struct exec_proc *item_proc(const struct item *i) {
        return i->run ? i->run->proc : NULL;
}

/* In argv's block: the environment (empty once finished), the working
 * directory, the resolved plugin path or NULL (argv[0] is run). */
char **item_envp(const struct item *i);
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
        return item_ran(i)->started_usec && (item_is_finished(i) || i->requeues > 0) && i->state != ITEM_FAILED &&
               i->state != ITEM_INTERRUPTED;
}

struct workqueue_stats {
        struct pool_work_stats pool;    /* started, CPUitsv, CMW, mayday, rescued */
        uint64_t cpu_usec;
        uint64_t requeued;
        uint64_t failed;
        uint64_t timed_out;
        uint64_t watchdog;              /* stalls of a pool this queue's items waited on */
        uint64_t completed;             /* item processes that ended, requeued ones too */
};

/* What counts against a queue's max_active on one pwq.  A queue's items
 * share the pwq's own; on a built-in queue, which every user shares, each
 * uid has a share of its own (struct user_usage), so that each user gets
 * the queue's max_active as if the queue were its own: one user's items,
 * however many and however long they sleep, never hold another's back. */
struct pwq_share {
        unsigned nr_active;             /* pending on the pool or running */
        struct list_head inactive;      /* struct item, share_entry: waiting, in order */
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

/* A client with callback work (callback/callback.c) that may still be running
 * callbacks of a frozen queue: it has been told of the freeze and has not
 * yet said that none runs.  A freeze waits for it as for a running item;
 * thawing or freeing the queue ends it. */
struct callback_hold {
        struct list_head wq_entry;      /* wq->callback_holds */
        struct list_head owner_entry;   /* its client's list */
        struct workqueue *wq;
        pid_t pid;                      /* the client's */
        uint32_t seq;                   /* the freeze notice it answers */
};

/* The freeze of @wq waits for @h (allocated by the caller, its pid, seq
 * and owner_entry set) until workqueue_callback_hold_free(). */
void workqueue_callback_hold_add(struct workqueue *wq, struct callback_hold *h);
/* Unlinks @h from both lists and frees it; the caller then lets waiting
 * freezers look again (core_check_freezers()). */
void workqueue_callback_hold_free(struct callback_hold *h);
/* Completes the freezes whose queues have nothing running any more. */
void core_check_freezers(struct core *c);

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
        struct workqueue_stats stats;
};

struct core_config {
        enum sleepwatch_mode sleep_mode;
        bool user_mode;
        char **plugin_dirs;             /* NULL-terminated */
        struct limits limits;           /* all zero: the defaults */
        uint64_t freeze_timeout_usec;
        uint64_t watchdog_usec;         /* 0: WATCHDOG_DEFAULT_USEC; WATCHDOG_DISABLED: off */
        struct cgroup_root *cgroups;    /* borrowed; NULL: items contained by process group only */
        struct pids_root *pids;         /* borrowed; NULL: task limits by RLIMIT_NPROC only */
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
        void *freeze_changed_userdata;
        struct store *store;            /* NULL: nothing is kept across restarts */
        struct store_listener store_listener;
        bool restoring;                 /* replaying the log: record nothing */
        struct list_head starting;      /* items whose start record is not on disk yet */
};

int core_new(struct event_base *base, struct sleepwatch *sw, const struct core_config *config,
             struct core **ret);
struct core *core_free(struct core *c);

/* What the core was made with and what it serves. */
const struct core_config *core_get_config(const struct core *c);
struct event_base *core_event_base(const struct core *c);
struct sleepwatch *core_sleepwatch(const struct core *c);     /* NULL: none */
/* What each uid holds (core/user-limits.h): front ends count connections
 * and callback threads in it. */
struct user_table *core_users(struct core *c);
unsigned core_nr_cpus(const struct core *c);
/* Whether @cpu is online and in cmwqd's affinity mask. */
bool core_cpu_allowed(const struct core *c, unsigned cpu);
/* The pool that runs @cpu's work (@cpu < 0: unbound), of normal or high
 * priority. */
struct pool *core_pool_for(struct core *c, int cpu, bool highpri);

/* Callback work (callback/callback.c): what the core tells the module that
 * runs clients' callbacks on its pools.  Any hook may be NULL. */
struct core_callback_hooks {
        /* A queue was frozen or thawed (the core does not see callbacks). */
        void (*freeze_changed)(struct workqueue *wq, void *userdata);
        /* Work queued on a CPU pool had to wait (cm/pool.h, contended). */
        void (*pool_contended)(struct pool *p, struct pool_work *work, void *userdata);
        /* The sleep detector read a batch of switches (sleepwatch_set_batch_hook()). */
        void (*switches_seen)(void *userdata);
};
/* @hooks NULL: none any more. */
void core_set_callback_hooks(struct core *c, const struct core_callback_hooks *hooks, void *userdata);

bool caller_is_privileged(const struct core_caller *caller);

/* A front end's connection of @caller: refused with -EDQUOT past the
 * per-user limit 'connections'.  Every successful connect is paired with one
 * core_user_disconnect() of the same uid. */
int core_user_connect(struct core *c, const struct core_caller *caller, struct core_error *e);
void core_user_disconnect(struct core *c, uid_t uid);

/* Front ends that publish the core's state (D-Bus signals and properties)
 * learn of changes here.  The callbacks run from inside the core, in the
 * middle of whatever changed: they may only look and remember, never call
 * back into the core.  Any callback may be NULL. */
struct core_observer {
        struct list_head entry;
        void (*workqueue_added)(struct core_observer *o, struct workqueue *wq);
        /* Still complete and findable by name; freed right after. */
        void (*workqueue_removed)(struct core_observer *o, struct workqueue *wq);
        /* Attributes or counters may have changed (max_active, frozen,
         * draining, pending, running, statistics). */
        void (*workqueue_changed)(struct core_observer *o, struct workqueue *wq);
        /* Ended for good (finished, failed or cancelled), in the history now. */
        void (*item_finished)(struct core_observer *o, struct item *i);
};

void core_observer_add(struct core *c, struct core_observer *o);
/* Safe if not added. */
void core_observer_remove(struct core_observer *o);

/* A front end's connection that owns workqueues: libcmwq-client's
 * alloc_workqueue(), which lives as long as its caller, as the kernel's
 * lives as long as its module.  When the connection ends, each of its queues
 * is destroyed as by core_workqueue_destroy() with nobody waiting: new work
 * is refused, what was accepted still runs, then the queue is gone. */
struct core_conn_owner {
        struct list_head workqueues;    /* struct workqueue, owner_entry */
        pid_t pid;                      /* shown with the queue ("connection of pid N") */
};

void core_conn_owner_init(struct core_conn_owner *o, pid_t pid);
/* The connection ended: destroys its queues (may free some at once).  Safe
 * to call twice. */
void core_conn_owner_release(struct core_conn_owner *o);
/* A connection-owned queue whose connection is gone: destroy it once its
 * items have run (may free it at once). */
void workqueue_orphan(struct workqueue *wq);

/* Pools, as a front end sees them: a read-only view the core fills, that
 * each transport only encodes (ipc/dispatch.c as protobuf, dbus/objects.c
 * as D-Bus). */
struct core_pool_info {
        int cpu;                        /* -1: unbound */
        bool highpri;
        unsigned workers;
        unsigned running;
        unsigned idle;
        unsigned busy;                  /* workers - idle */
        unsigned blocked;
        unsigned callback_threads;
        uint64_t pending;
        uint64_t callbacks;             /* callbacks its client threads returned */
        struct pool_counters counters;  /* started, sleeps, wakes, cm_wakeups, contended */
};

/* How many pools the core has: two per CPU and two unbound. */
size_t core_nr_pools(const struct core *c);
/* Calls @fn with a view of each pool in the order the protocol lists them:
 * the CPU pools (CPU 0 normal, CPU 0 highpri, CPU 1 ...), then the unbound
 * pools (normal, highpri).  Stops at, and returns, the first negative
 * return of @fn; 0 otherwise. */
int core_for_each_pool(const struct core *c, int (*fn)(const struct core_pool_info *p, void *userdata),
                       void *userdata);

/* Workqueues */
/* A workqueue, as a front end sees it: a read-only view the core fills,
 * that each transport only encodes (the socket's List and Stats, D-Bus's
 * ListWorkqueues, GetStatistics and the Workqueue object's properties).
 * @name borrows the queue's: valid until the core runs again. */
struct core_workqueue_info {
        const char *name;
        unsigned flags;
        unsigned max_active;            /* effective: 1 for ORDERED */
        uid_t owner;
        bool builtin;
        bool frozen;
        bool draining;
        enum interrupt_policy on_interrupt;
        bool connection_owned;
        bool owner_gone;                /* connection-owned, and the connection has ended */
        pid_t owner_pid;                /* connection-owned: the connection's */
        uint64_t pending;
        uint64_t running;
        uint64_t in_flight;             /* every unfinished item (incl. delayed) */
        struct workqueue_stats stats;
};

void core_workqueue_info(const struct workqueue *wq, struct core_workqueue_info *ret);
/* The name that names @wq for @caller: the bare name for a built-in queue
 * or one of the caller's own, "UID/NAME" otherwise; with @caller NULL, the
 * name that names it for anyone (bare only for a built-in queue). */
void core_workqueue_name_for(const struct core_workqueue_info *wq, const struct core_caller *caller, char *buf,
                             size_t size);
#define CORE_WORKQUEUE_NAME_MAX (WQ_NAME_MAX + 16)      /* "UID/NAME" */
size_t core_nr_workqueues(const struct core *c);
/* Calls @fn with each queue @caller may see (NULL: every queue), oldest
 * first, and its view.  Stops at, and returns, the first non-zero return
 * of @fn; 0 otherwise. */
int core_for_each_workqueue(struct core *c, const struct core_caller *caller,
                            int (*fn)(struct workqueue *wq, const struct core_workqueue_info *info, void *userdata),
                            void *userdata);
/* The queue @owner has under @name (exactly; see core/workqueue.c on names). */
struct workqueue *core_find_workqueue(struct core *c, uid_t owner, const char *name);
/* The queue @caller means by @name: -ENOENT when it has none it may see. */
int core_workqueue_lookup(struct core *c, const struct core_caller *caller, const char *name,
                          struct workqueue **ret, struct core_error *e);
bool workqueue_visible_to(const struct workqueue *wq, const struct core_caller *caller);
int core_workqueue_create(struct core *c, const struct core_caller *caller, const char *name,
                          unsigned flags, unsigned max_active, struct core_error *e);
/* As core_workqueue_create(), the queue tied to the connection @owner
 * (NULL: a persistent queue, as core_workqueue_create()). */
int core_workqueue_create_owned(struct core *c, const struct core_caller *caller, const char *name,
                                unsigned flags, unsigned max_active, struct core_conn_owner *owner,
                                struct core_error *e);
int core_workqueue_destroy(struct core *c, const struct core_caller *caller, const char *name,
                           struct core_waiter *w, struct core_error *e);
int core_workqueue_set_on_interrupt(struct core *c, const struct core_caller *caller, const char *name,
                                    enum interrupt_policy policy, struct core_error *e);
int core_workqueue_set_max_active(struct core *c, const struct core_caller *caller, const char *name,
                                  unsigned max_active, struct core_error *e);
int core_workqueue_flush(struct core *c, const struct core_caller *caller, const char *name,
                         struct core_waiter *w, struct core_error *e);
int core_workqueue_drain(struct core *c, const struct core_caller *caller, const char *name,
                         struct core_waiter *w, struct core_error *e);
/* @name NULL: every FREEZABLE queue.  Done when their running items ended or
 * the timeout passed (then -ETIMEDOUT, with the holders logged). */
int core_freeze(struct core *c, const struct core_caller *caller, const char *name,
                uint64_t timeout_usec, struct core_waiter *w, struct core_error *e);
int core_thaw(struct core *c, const struct core_caller *caller, const char *name, struct core_error *e);
/* What holds a freeze: a running item of a frozen queue, or a client that
 * may still run callbacks of one (struct callback_hold). */
struct core_freeze_holder {
        struct workqueue *wq;
        const char *workqueue;          /* its name */
        struct item *item;              /* the running item; NULL: a client's callbacks */
        pid_t pid;                      /* the client's, when @item is NULL */
};
/* Calls @fn for every holder of the frozen queues, queue by queue, each
 * queue's items first.  Stops at, and returns, the first negative return
 * of @fn; 0 otherwise.  The socket, D-Bus and the freeze's own time-out
 * all name the holders from here. */
int core_freeze_holders(struct core *c, int (*fn)(const struct core_freeze_holder *h, void *userdata),
                        void *userdata);
uint64_t workqueue_nr_pending(const struct workqueue *wq);
uint64_t workqueue_nr_running(const struct workqueue *wq);
/* Items running now, in every workqueue. */
uint64_t core_nr_running(const struct core *c);

/* Items */
struct submit_args {
        const char *workqueue;
        char *const *argv;
        size_t argc;
        char *const *envp;
        size_t envc;
        const char *cwd;
        const void *payload;
        size_t payload_len;
        int cpu;                        /* -1: the caller's current CPU */
        uint64_t delay_usec;
        const char *key;
        uint64_t timeout_usec;
};

/* An item, as a front end sees it: a read-only view the core fills, that
 * each transport only encodes.  Its pointers borrow the item's own: valid
 * until the core runs again. */
struct core_item_info {
        uint64_t id;
        const char *workqueue;
        enum item_state state;
        uid_t uid;
        char **argv;
        const char *key;                /* NULL: none */
        int cpu;                        /* requested CPU; -1: unbound queue */
        unsigned requeues;
        unsigned interruptions;
        uint64_t queued_usec;           /* CLOCK_REALTIME */
        uint64_t started_usec;          /* 0: never started */
        uint64_t finished_usec;         /* 0: not finished */
        /* Finished, or ran and was requeued: what follows is known. */
        bool has_result;
        /* Its process was seen to end: exit_status (signal 0) or signal
         * says how (see item_has_exit()). */
        bool has_exit;
        int exit_status;
        int signal;
        uint64_t cpu_usec;
        const char *out;
        const char *err;
        uint32_t out_len;
        uint32_t err_len;
        bool out_truncated;
        bool err_truncated;
        bool timed_out;
        bool cpu_intensive;
        char error[256];                /* why it could not run; "": it could */
};

void core_item_info(const struct item *i, struct core_item_info *ret);
/* Calls @fn with each of @caller's own items (root's too are only its
 * own): the unfinished ones, queue by queue, then its history, newest
 * first.  Stops at, and returns, the first non-zero return of @fn; 0
 * otherwise. */
int core_for_each_item_of(struct core *c, const struct core_caller *caller,
                          int (*fn)(struct item *i, void *userdata), void *userdata);

/* Queues an item.  With @wait, returns 1 and calls it back when the item has
 * ended (the waiter's item_id says which).  *ret_already_pending is set when
 * @key was pending: nothing new is queued and *ret_id is that item's. */
int core_submit(struct core *c, const struct core_caller *caller, const struct submit_args *a,
                struct core_waiter *wait, uint64_t *ret_id, bool *ret_already_pending,
                struct core_error *e);
int core_item_get(struct core *c, const struct core_caller *caller, uint64_t id, struct item **ret,
                  struct core_error *e);
int core_item_wait(struct core *c, const struct core_caller *caller, uint64_t id, struct core_waiter *w,
                   struct core_error *e);
int core_item_cancel(struct core *c, const struct core_caller *caller, uint64_t id, struct core_waiter *w,
                     struct core_error *e);

/* Internal between core/core.c, core/workqueue.c and core/item.c. */
void core_notify_workqueue_added(struct workqueue *wq);
void core_notify_workqueue_removed(struct workqueue *wq);
void core_notify_workqueue_changed(struct workqueue *wq);
void core_notify_item_finished(struct item *i);
/* The pool @n (< core_nr_pools()) in the order of core_for_each_pool(). */
struct pool *core_pool_at(const struct core *c, size_t n);
struct item *core_item_lookup(struct core *c, uint64_t id);
void core_item_hash(struct core *c, struct item *i);
void core_item_unhash(struct core *c, struct item *i);
/* Puts a queued item on its pwq, active or inactive. */
void workqueue_item_activate(struct item *i);
/* An active item left its pwq (ran, or was cancelled while pending). */
void workqueue_item_finished(struct item *i);
/* An inactive item leaves its pwq (cancelled, or the daemon stops). */
void workqueue_item_unqueue(struct item *i);
/* After the built-in queues were made: each of their pwqs gets its slot
 * in every user's shares. */
void core_number_builtin_pwqs(struct core *c);
void workqueue_check_waiters(struct workqueue *wq);
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
struct item *item_alloc(struct core *c, struct workqueue *wq);
/* Sets @i's argv, envp, cwd and program (NULL when it is argv[0]) to copies
 * in one allocation, freed with argv; @program may be NULL. */
int item_args_pack(struct item *i, char *const *argv, size_t argc, char *const *envp, size_t envc, const char *cwd,
                   const char *program);
int item_attach_key(struct item *i, const char *key);
int item_delay(struct item *i, uint64_t usec);
int item_restore_charge(struct item *i);
void item_restore_history(struct item *i);

/* core/store-recovery.c: the core rebuilt from the durable log at start-up,
 * record by record (the store's replay callback), then attached to the store. */
int core_store_replay(const CmwqStore__Record *rec, void *userdata);
int core_store_attach(struct core *c, struct store *s);
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

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The core: workqueues, their items and the pools that run them.  This is
 * its door: the front ends (the Unix socket, D-Bus, callback work, the
 * sleep freezer, main) are thin adapters over the calls declared here; a
 * behaviour exists once, in the core.  struct core, struct workqueue and
 * struct item are opaque here (core/core-internal.h, which only the core's
 * own files include, defines them): a front end holds them as handles and
 * learns what they are from read-only views the core fills -
 * core_pool_info (core_for_each_pool()), core_workqueue_info
 * (core_workqueue_info(), core_for_each_workqueue()), core_item_info
 * (core_item_info(), core_for_each_item_of()) and core_freeze_holder
 * (core_freeze_holders()) - which each transport only encodes (protobuf,
 * sd-bus).
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
#include "list.h"

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
        /* core-private: a flush of a built-in queue by an unprivileged
         * caller waits for that caller's items only (flush_uid), of which
         * flush_left are still in flight. */
        bool flush_own;
        uid_t flush_uid;
        uint64_t flush_left;
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

/* Opaque outside daemon/core/ (their definitions: core/core-internal.h). */
struct core;
struct workqueue;
struct item;

struct workqueue_stats {
        struct pool_work_stats pool;    /* started, CPUitsv, CMW, mayday, rescued */
        uint64_t cpu_usec;
        uint64_t requeued;
        uint64_t failed;
        uint64_t timed_out;
        uint64_t watchdog;              /* stalls of a pool this queue's items waited on */
        uint64_t completed;             /* item processes that ended, requeued ones too */
};

/* A client with callback work (callback/callback.c) that may still be running
 * callbacks of a frozen queue: it has been told of the freeze and has not
 * yet said that none runs.  A freeze waits for it as for a running item;
 * thawing or freeing the queue ends it. */
struct callback_hold {
        struct list_head wq_entry;      /* core-private: the queue's list */
        struct list_head owner_entry;   /* its client's list */
        struct workqueue *wq;           /* set by workqueue_callback_hold_add() */
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
        /* Before a view of the pools: bring their counts of callbacks
         * returned up to date (a thread may hold its grant a while). */
        void (*count_callbacks)(void *userdata);
        /* Whether the sleep detector watches @cpu closely changed
         * (sleepwatch_cpu_watched()); from inside pool operations. */
        void (*cpu_watch_changed)(int cpu, void *userdata);
};
/* @hooks NULL: none any more. */
void core_set_callback_hooks(struct core *c, const struct core_callback_hooks *hooks, void *userdata);
/* Before core_for_each_pool() for a view: its display-only counts as of now. */
void core_refresh_pool_counts(struct core *c);

/* Callback work's part of an unbound queue's max_active (core/claim.c): a
 * client process's credits, counted with the queue's exec items, so that
 * max_active holds across every client.  @changed is called (from any core
 * call) when the claim's credits or limit changed, or its queue went. */
#define CORE_CLAIMS_MAX 256u    /* clients of one uid with callbacks of one queue */
struct core_claim;
typedef void (*core_claim_changed_fn)(struct core_claim *cl, void *userdata);
/* What the client wants now, as it says (bounded by the core), read before
 * room is handed to a waiting claim. */
typedef unsigned (*core_claim_want_fn)(struct core_claim *cl, void *userdata);
/* A claim of @caller's on the unbound queue it calls @name, holding
 * nothing: -ENOENT, -EINVAL (not unbound), -EUSERS (too many of its uid). */
int core_claim_open(struct core *c, const struct core_caller *caller, const char *name,
                    core_claim_changed_fn changed, core_claim_want_fn want_now, void *userdata,
                    struct core_claim **ret, struct core_error *e);
/* Both claim credits of the same queue (neither gone). */
bool core_claim_same_queue(const struct core_claim *a, const struct core_claim *b);
/* Gives back all it holds. */
void core_claim_close(struct core_claim *cl);
/* The client gave @returned credits back and could use @want now: it gets
 * what it may of that at once, and waits in line for the rest. */
void core_claim_update(struct core_claim *cl, unsigned want, unsigned returned);
unsigned core_claim_held(const struct core_claim *cl);
/* What it may keep: max_active, or its fair part while others wait; 0 once gone. */
unsigned core_claim_limit(const struct core_claim *cl);
/* Its queue was destroyed: it holds nothing and gets nothing. */
bool core_claim_gone(const struct core_claim *cl);

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
#define CORE_WORKQUEUE_NAME_MAX (CMWQ_WORKQUEUE_NAME_MAX + 16)      /* "UID/NAME" */
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

/* Start-up (core/store-recovery.c): the core rebuilt from the durable log,
 * record by record (store_open()'s replay callback, @userdata the core),
 * then attached to the store, which keeps what changes from then on. */
struct CmwqStore__Record;
int core_store_replay(const struct CmwqStore__Record *rec, void *userdata);
int core_store_attach(struct core *c, struct store *s);

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
         * says how (core/core-internal.h, item_has_exit()). */
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
/* The item @id, live or in the history, whoever owns it; NULL: none.  For
 * a front end that already checked the caller (its waiter's item_id). */
struct item *core_item_lookup(struct core *c, uint64_t id);
int core_item_get(struct core *c, const struct core_caller *caller, uint64_t id, struct item **ret,
                  struct core_error *e);
int core_item_wait(struct core *c, const struct core_caller *caller, uint64_t id, struct core_waiter *w,
                   struct core_error *e);
int core_item_cancel(struct core *c, const struct core_caller *caller, uint64_t id, struct core_waiter *w,
                     struct core_error *e);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifndef CMWQ_CMWQ_H
#define CMWQ_CMWQ_H

/*
 * libcmwq-client: the kernel's workqueue API for services, over cmwqd.
 *
 * Link with `pkg-config --cflags --libs libcmwq-client`; the manual is
 * libcmwq-client(3).
 *
 * Conventions, as in the kernel:
 *  - Functions returning int return 0 (or a documented non-negative value)
 *    on success and a negative errno on failure.  Functions returning a
 *    pointer return NULL on failure and set errno.
 *  - After any failure, cmwq_last_error() has a human-readable sentence for
 *    the calling thread, with the daemon's own explanation when it gave one.
 *  - Every function may be called from any thread.  A struct cmwq and the
 *    workqueue handles made from it stay valid until cmwq_disconnect(), which
 *    must not race with other calls on the same connection.
 *  - Blocking functions never hang on a daemon that died: every call waiting
 *    for it returns -ECONNRESET (or the transport's errno), and so does every
 *    later call on that connection.  Disconnect and connect again.
 *  - Completion callbacks run only inside cmwq_process(), in the thread
 *    that calls it, never while the library holds a lock: they may call any
 *    function of this library except cmwq_disconnect() on their connection.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cmwq;
struct cmwq_workqueue;

/* ---- connection ------------------------------------------------------- */

/*
 * Connect to cmwqd.  @socket_path names the socket ("@name" for the abstract
 * namespace); NULL finds the daemon: $CMWQ_SOCKET if set and non-empty (and
 * only it), else the user instance at $XDG_RUNTIME_DIR/cmwqd.sock, else the
 * system instance at /run/cmwqd/cmwqd.sock.
 *
 * Returns the connection, or NULL with errno set:
 *   ECONNREFUSED  no cmwqd runs at any place tried (cmwq_last_error() lists
 *                 them and what each said),
 *   EACCES        the socket exists but we may not connect,
 *   EPROTONOSUPPORT  the daemon speaks another protocol version,
 *   ENOMEM, or another errno of socket(2)/connect(2).
 */
struct cmwq *cmwq_connect(const char *socket_path);

/*
 * Close the connection and free it with every workqueue handle made from it.
 * Callback work items that are running finish first (this waits for them);
 * pending ones, delayed ones waiting for their timer included, are dropped
 * (never run), and the library's threads end; a running callback that
 * flushes or waits for a dropped one gets -ECONNRESET.  The connection's work items
 * must not be passed to this library afterwards until CMWQ_WORK_INIT() (or
 * CMWQ_DELAYED_WORK_INIT()) made them new.  Completions not
 * yet delivered are dropped without their callbacks being called.
 * Workqueues allocated on the connection (cmwq_alloc_workqueue()) are
 * destroyed by the daemon as the connection closes: their exec items
 * already queued still run, then the queues are gone.  Must not be called
 * from a work item or a completion callback.  Accepts NULL.
 */
void cmwq_disconnect(struct cmwq *c);

/*
 * A human-readable description of the last failure of a cmwq_* call in the
 * calling thread (never NULL; "" before any failure).  Valid until the next
 * cmwq_* call in this thread.
 */
const char *cmwq_last_error(void);

/* ---- event-loop integration --------------------------------------------- */

/* examples/ in the source tree: complete programs under sd-event, GLib and libevent. */

/*
 * A file descriptor that polls readable (POLLIN / EV_READ / G_IO_IN) while
 * cmwq_process() has something to do.  Owned by the connection: do not read
 * it or close it.  The same for the connection's lifetime.  -EINVAL for a
 * NULL @c.
 */
int cmwq_get_fd(struct cmwq *c);

/*
 * Read what the daemon sent without blocking and run the completion
 * callbacks that are due (cmwq_exec_async()), in the calling thread.
 * Returns the number of callbacks run (>= 0), or a negative errno once the
 * connection is lost (-ECONNRESET when the daemon closed it); the callbacks
 * of every call still open have then been run with that error, and the fd
 * of cmwq_get_fd() no longer polls readable for this connection.  -EINVAL
 * for a NULL @c.
 */
int cmwq_process(struct cmwq *c);

/* ---- workqueues --------------------------------------------------------- */

/* Workqueue flags: the kernel's WQ_* bits. */
enum {
        CMWQ_WQ_UNBOUND = 1 << 0,       /* unbound pools, no concurrency management */
        CMWQ_WQ_FREEZABLE = 1 << 1,     /* frozen across suspend: no item
                                         * (callback or exec) starts while
                                         * frozen; thaw starts them in order */
        CMWQ_WQ_MEM_RECLAIM = 1 << 2,   /* a rescuer guarantees forward progress */
        CMWQ_WQ_HIGHPRI = 1 << 4,       /* high-priority pools: items at the
                                         * head; callback threads at nice -20,
                                         * or the lowest RLIMIT_NICE allows,
                                         * for bound, unbound and ordered
                                         * queues alike */
        CMWQ_WQ_CPU_INTENSIVE = 1 << 5, /* does not count toward concurrency */
};

/* max_active: 0 is the default (256); at most CMWQ_MAX_ACTIVE. */
#define CMWQ_DFL_ACTIVE 256u
#define CMWQ_MAX_ACTIVE 512u
#define CMWQ_NAME_MAX 64u

/*
 * Create the workqueue @name (1..CMWQ_NAME_MAX bytes of [A-Za-z0-9_.:@-],
 * unique in the daemon) owned by the caller's uid.  @max_active limits its
 * items executing at once per CPU (bound) or in total (CMWQ_WQ_UNBOUND).
 * For an unbound queue the total holds across every process that uses it
 * (cmwq_open_workqueue(), the system queues) and its exec items: the
 * library asks cmwqd for its part before it starts a callback, and gives it
 * back when the callback returns and nothing of the queue waits, so a
 * process's first callback after a quiet spell waits for one round trip to
 * the daemon.  While several processes want more than max_active, each gets
 * a fair part.  (A process can name 64 unbound queues this way; callbacks of
 * more are limited per process.)
 *
 * The queue lives as long as the connection @c, as the kernel's lives as
 * long as its module: when the connection ends (cmwq_disconnect(), the
 * process's exit or death, even by SIGKILL, or a lost connection) the daemon
 * destroys it as cmwq_destroy_workqueue() would, with nobody waiting: new
 * work is refused, exec items it already accepted still run (callback items
 * die with the process), then it is gone, from `cmwqctl list` and from the
 * daemon's state log.  Until then its name stays taken (EEXIST).  A restart
 * of the daemon ends the connection too.  For a queue that outlives its
 * client, create it with `cmwqctl create` and use cmwq_open_workqueue().
 *
 * Returns a handle, or NULL with errno: EEXIST (the name is taken), EINVAL
 * (bad name, flags or max_active), ENOSPC (a daemon limit), ECONNRESET.
 */
struct cmwq_workqueue *cmwq_alloc_workqueue(struct cmwq *c, const char *name, unsigned flags,
                                            unsigned max_active);

/*
 * Create an ordered workqueue: unbound with max_active 1, so its items run
 * one at a time in the order they were queued.  An item queued again while
 * it runs goes behind the items queued before that: A, B, then A again
 * while A runs, runs A, B, A (as an unbound queue with max_active 1 does).
 * @flags may add CMWQ_WQ_FREEZABLE, CMWQ_WQ_MEM_RECLAIM, CMWQ_WQ_HIGHPRI.
 * As cmwq_alloc_workqueue() otherwise.
 */
struct cmwq_workqueue *cmwq_alloc_ordered_workqueue(struct cmwq *c, const char *name, unsigned flags);

/*
 * A handle to an existing workqueue the caller may use (one it owns, a
 * shared or a built-in one), e.g. one made with cmwqctl.  NULL with errno
 * ENOENT when there is no such queue visible to the caller.
 */
struct cmwq_workqueue *cmwq_open_workqueue(struct cmwq *c, const char *name);

/* The built-in queues of every daemon, and cmwq_system_workqueue(). */
enum cmwq_system_queue {
        CMWQ_SYSTEM,                    /* "system": bound, general purpose */
        CMWQ_SYSTEM_HIGHPRI,            /* "system_highpri" */
        CMWQ_SYSTEM_LONG,               /* "system_long": for items that run long */
        CMWQ_SYSTEM_UNBOUND,            /* "system_unbound": max_active 512, the others 256 */
        CMWQ_SYSTEM_FREEZABLE,          /* "system_freezable" */
        CMWQ_SYSTEM_FREEZABLE_UNBOUND,  /* "system_freezable_unbound" */
};

/*
 * The handle of a built-in queue.  Never fails for a valid @which (NULL with
 * errno EINVAL otherwise); the handle belongs to the connection and must not
 * be destroyed.  No round trip to the daemon.
 */
struct cmwq_workqueue *cmwq_system_workqueue(struct cmwq *c, enum cmwq_system_queue which);

/* The queue's name, as the daemon knows it; NULL for a NULL @wq. */
const char *cmwq_workqueue_name(const struct cmwq_workqueue *wq);

/*
 * Destroy the workqueue: new queueing is refused at once, everything queued
 * on it runs to the end (as cmwq_drain_workqueue()), then it is removed.
 * Blocks until then.  Delayed callback work waiting for its timer counts as
 * queued: it is queued at once and runs before this returns (as
 * cmwq_flush_delayed_work() would), and so does delayed work that the
 * queue's own items queue on it meanwhile; none of it runs later.  Exec
 * items queued with a delay_usec run at their time, and this waits for
 * them.  The handle is freed whatever the result but -EDEADLK: pass it to
 * nothing after.  Must not race with other queueing on @wq.  Returns 0,
 * -EPERM (a built-in queue, or not the caller's), -ENOENT (already gone),
 * -ECONNRESET (then pending callbacks were dropped, not run), -EDEADLK
 * (nothing done: called from a work item of @wq, or from one whose own
 * item is queued on @wq again, which runs only after it returns; it would
 * wait for itself).
 */
int cmwq_destroy_workqueue(struct cmwq_workqueue *wq);

/*
 * Change the limit of items executing at once (0: the default).  Items
 * waiting over the old limit start at once if the new one allows.  Returns
 * 0, -EINVAL (over CMWQ_MAX_ACTIVE, an ordered queue, or a NULL @wq),
 * -EPERM, -ENOENT.
 */
int cmwq_workqueue_set_max_active(struct cmwq_workqueue *wq, unsigned max_active);

/*
 * Wait until every item (callback and exec) queued on @wq before the call
 * has finished.  Items queued after the call are not waited for, so a busy
 * queue cannot make this wait forever.  On a built-in queue, which every
 * user shares, only the caller's items are waited for (all of them for
 * root).  Returns 0, -ENOENT (the queue was destroyed meanwhile), -EPERM,
 * -ECONNRESET, -EINVAL (a NULL @wq), -EDEADLK (at once, when called from a
 * work item of @wq or from one whose own item is queued on @wq again: it
 * would wait for itself).
 */
int cmwq_flush_workqueue(struct cmwq_workqueue *wq);

/*
 * Wait until @wq is empty, including items that requeue themselves (a
 * callback queueing itself, an exec item exiting 75) while it drains; other
 * queueing on @wq fails meanwhile (cmwq_queue_work() returns false,
 * cmwq_exec() -EBUSY).  Returns as cmwq_flush_workqueue(), -EDEADLK too.
 */
int cmwq_drain_workqueue(struct cmwq_workqueue *wq);

/* ---- callback work ------------------------------------------------------ */

struct cmwq_work;
typedef void (*cmwq_work_fn)(struct cmwq_work *work);

/*
 * A work item: a function run on a worker thread of this process, when the
 * daemon's concurrency management lets it run on its CPU.  The first
 * callback work of a connection makes the memory it shares with the daemon
 * (a sealed memfd of about 80 KiB, mapped in both, and an eventfd): a
 * thread asks for its CPU and learns it may run through that memory, and
 * runs queued items back to back while it holds the CPU, so that queueing
 * and running an item takes no message to the daemon.  Out of items, it
 * keeps the CPU a moment, asleep ($CMWQ_LINGER seconds, default 0.01), and
 * the next item for that CPU starts on it at once; the daemon takes the CPU
 * back before it starts anything else there.  A CPU's work with no idle
 * thread there takes an idle one of another CPU (pinned anew) where it
 * can, rather than make one.  Idle threads beyond a few end
 * after a while ($CMWQ_IDLE_TIMEOUT seconds, default 300); an unbound
 * queue's at once while other processes want its max_active and this one
 * has more threads than its part lets run.
 *
 * Caller-owned and embedded in the caller's own structure (find it again
 * with cmwq_container_of()); initialize it with CMWQ_WORK_INIT() before
 * first use and keep it alive and unmoved until it is neither pending nor
 * running (cmwq_cancel_work_sync() or cmwq_flush_work() make sure).  The
 * fields starting with '_' belong to the library.
 */
struct cmwq_work {
        cmwq_work_fn func;
        struct cmwq_work *_next, *_prev;        /* pending list */
        struct cmwq_work *_inext, *_iprev;      /* its queue's in-flight list */
        struct cmwq_workqueue *_wq;
        struct cmwq *_conn;                     /* set at first queueing */
        void *_running;                         /* the worker running it */
        unsigned _state;
        int _cpu;
        uint64_t _queued_seq, _running_seq;     /* _running_seq: unused, kept for the ABI */
        uint64_t _nr_queued, _nr_started, _nr_finished;
};

/* Work that is queued after a delay. */
struct cmwq_delayed_work {
        struct cmwq_work work;
        struct cmwq_delayed_work *_tnext, *_tprev;      /* timer list */
        struct cmwq_workqueue *_twq;
        uint64_t _expires;                      /* CLOCK_MONOTONIC, µs */
        int _tcpu;
};

#define cmwq_container_of(ptr, type, member) \
        ((type *) ((char *) (ptr) - offsetof(type, member)))
#define cmwq_to_delayed_work(w) cmwq_container_of(w, struct cmwq_delayed_work, work)

#define CMWQ_WORK_INIT(w, fn) \
        (*(w) = (struct cmwq_work) { .func = (fn), ._cpu = -1 })
#define CMWQ_DELAYED_WORK_INIT(dw, fn) \
        (*(dw) = (struct cmwq_delayed_work) { .work = { .func = (fn), ._cpu = -1 }, ._tcpu = -1 })

/*
 * Queue @work on @wq, on the CPU the caller runs on.  Returns true if it was
 * queued, false if it was already pending (nothing changes then: it runs
 * once), if it is being cancelled, if @wq is draining and the caller is
 * not one of @wq's own work items, or if the connection to cmwqd is lost
 * (nothing would run it).  While @work is pending or running on a queue
 * of one connection, it must not be queued on a queue of another
 * connection (it would not run, and a flush of it would wait for ever);
 * idle again, it may go anywhere.
 *
 * Guarantees, as the kernel's: once queued, @work runs at least once after
 * this call; it never runs on two threads at once, whatever the number of
 * threads queueing it; a work item may queue itself again from its own
 * function (it is no longer pending once its function has started), and
 * then goes behind the items queued on that CPU's pool (or the queue, if
 * unbound) before it.  Running for one queue, it may be queued on another
 * of the same connection (the kernel allows it, without non-reentrancy):
 * it waits until the running instance returns and then runs on that
 * thread, and the other queue's flush, drain and destroy wait for it.
 * Items of a bound queue run on a worker pinned to their CPU, which counts
 * toward that CPU's concurrency level in cmwqd
 * together with the exec items and the callbacks of every other client
 * there: while one runs without blocking, nothing else of that CPU's pool
 * starts -- until that callback has used 10 ms of CPU time, counted for
 * each callback from its own start (or its last wake-up from a block), as
 * the kernel counts per work item; then it stops counting (it is
 * "CPU-intensive") and others start beside it.  Short callbacks never add
 * up to the threshold, however many of them one thread runs back to back,
 * and the callback after a CPU-intensive one counts again.  Never blocks on
 * the daemon.
 */
bool cmwq_queue_work(struct cmwq_workqueue *wq, struct cmwq_work *work);

/* As cmwq_queue_work(), on CPU @cpu (ignored for an unbound queue); -1:
 * the caller's current CPU, as cmwq_queue_work().  False also when @cpu is
 * not a CPU of this machine (nor -1). */
bool cmwq_queue_work_on(int cpu, struct cmwq_workqueue *wq, struct cmwq_work *work);

/*
 * Queue @dwork on @wq once @delay_usec have passed (0: at once).  False if
 * it was already pending (waiting for its timer or queued).  The item runs
 * not before its time.
 */
bool cmwq_queue_delayed_work(struct cmwq_workqueue *wq, struct cmwq_delayed_work *dwork, uint64_t delay_usec);

/*
 * Queue @dwork after @delay_usec whether it was pending or not: a pending
 * one gets the new time.  Returns true if it was pending before (its earlier
 * queueing is replaced), false if it was idle.
 */
bool cmwq_mod_delayed_work(struct cmwq_workqueue *wq, struct cmwq_delayed_work *dwork, uint64_t delay_usec);

/*
 * Take @work off its queue if it is pending.  Returns true if it was pending
 * (it will not run for that queueing), false otherwise.  Does not wait for a
 * running instance.
 */
bool cmwq_cancel_work(struct cmwq_work *work);

/*
 * Take @work off its queue if pending and wait until a running instance has
 * finished.  Queueing @work meanwhile fails.  On return @work is idle and
 * may be freed, unless something queues it again.  Returns 1 if it was
 * pending, 0 if not, -ECONNRESET if the connection was lost while waiting
 * (then it will not run any more either).  Must not be called from @work
 * itself.
 */
int cmwq_cancel_work_sync(struct cmwq_work *work);

/* Delayed-work versions: also stop its timer. */
bool cmwq_cancel_delayed_work(struct cmwq_delayed_work *dwork);
int cmwq_cancel_delayed_work_sync(struct cmwq_delayed_work *dwork);

/*
 * Wait until the last queueing of @work has finished executing.  Returns 1
 * if it waited, 0 if @work was idle, a negative errno (-ECONNRESET, or
 * -EPROTO when cmwqd ended the connection) once the connection is lost, idle
 * or not (pending callbacks are dropped then).  Later queueings are not
 * waited for.  Must not be called from @work itself (it would wait for
 * itself).
 */
int cmwq_flush_work(struct cmwq_work *work);

/* Queue @dwork at once if its timer is pending, then cmwq_flush_work(). */
int cmwq_flush_delayed_work(struct cmwq_delayed_work *dwork);

/* Whether @work is pending (queued or waiting for its timer, not yet started). */
bool cmwq_work_pending(const struct cmwq_work *work);
bool cmwq_delayed_work_pending(const struct cmwq_delayed_work *dwork);

/* ---- exec work ----------------------------------------------------------- */

/* What to run.  Zero-initialize, then fill what you need. */
struct cmwq_exec_args {
        const char *const *argv;        /* required, NULL-terminated; argv[0] is an
                                         * absolute path, a plugin name or a name
                                         * looked up in the item's PATH */
        const char *const *envp;        /* NULL: the caller's environment */
        const char *cwd;                /* NULL: the caller's current directory */
        const void *stdin_data;         /* delivered on the item's stdin (<= 1 MiB) */
        size_t stdin_len;
        bool pin_cpu;                   /* run on @cpu (cmwq_queue_work_on()); */
        unsigned cpu;                   /*   else on the caller's current CPU */
        uint64_t delay_usec;            /* start no earlier than this from now
                                         * (at most 30 days) */
        uint64_t timeout_usec;          /* kill its process group after this; 0: never
                                         * (at most 30 days) */
        const char *key;                /* one pending item per key (1-256 bytes):
                                         * queueing a key that is pending is a no-op */
};

enum cmwq_exec_state {
        CMWQ_EXEC_FINISHED = 4,         /* ran to its end (any exit status) */
        CMWQ_EXEC_CANCELLED = 5,
        CMWQ_EXEC_FAILED = 6,           /* could not be started: see error */
        CMWQ_EXEC_INTERRUPTED = 7,      /* was running when cmwqd stopped or died
                                         * (its queue does not rerun such items):
                                         * how it ended is unknown, exited is false
                                         * and signal 0 */
};

/* What happened to an exec item.  Read-only for the caller. */
struct cmwq_exec_result {
        uint64_t id;
        enum cmwq_exec_state state;
        bool exited;                    /* exit_status is valid: it ran to its end
                                         * (or was cancelled) and exited */
        int exit_status;
        int signal;                     /* killed by this signal, or 0 */
        bool timed_out;                 /* killed by its timeout */
        bool cpu_intensive;             /* the daemon marked it CPU-intensive */
        uint64_t cpu_usec;              /* user + system time */
        const char *out;                /* its stdout (bounded by the daemon), */
        size_t out_len;                 /*   NUL-terminated for convenience */
        bool out_truncated;
        const char *err;                /* its stderr, likewise */
        size_t err_len;
        bool err_truncated;
        const char *error;              /* why it could not start, or NULL */
};

/*
 * Queue an exec item on @wq and return at once.  The item runs as the
 * caller's uid under the daemon's concurrency management.  Returns 0 and the
 * item's id in *ret_id (may be NULL), or 1 when @args->key was pending: then
 * nothing was queued and *ret_id is the pending item's id.  Negative errno:
 * -EINVAL (bad arguments), -ENOENT, -EPERM, -EBUSY (the queue drains or is
 * being destroyed), -ENOSPC, -ECONNRESET.
 */
int cmwq_exec(struct cmwq_workqueue *wq, const struct cmwq_exec_args *args, uint64_t *ret_id);

/*
 * Queue an exec item and block until it has ended.  Returns 0 and its result
 * in *ret (free with cmwq_exec_result_free()), whatever its exit status; a
 * negative errno as cmwq_exec() if it could not be queued or the connection
 * was lost meanwhile.
 */
int cmwq_exec_sync(struct cmwq_workqueue *wq, const struct cmwq_exec_args *args,
                   struct cmwq_exec_result **ret);

/*
 * Called from cmwq_process() when an item has ended.  @error is 0 and
 * @result the outcome, or @error is a negative errno (the connection was
 * lost: -ECONNRESET; the item left the daemon's history: -ENOENT) and
 * @result NULL.  @result is freed when the callback returns.
 */
typedef void (*cmwq_exec_done_fn)(struct cmwq *c, uint64_t id, int error,
                                  const struct cmwq_exec_result *result, void *userdata);

/*
 * Queue an exec item; when it has ended, cmwq_process() calls @done exactly
 * once (unless the connection is freed first).  Returns as cmwq_exec(); on
 * failure @done is never called.  When the key was pending (1), @done is
 * called for the pending item.
 */
int cmwq_exec_async(struct cmwq_workqueue *wq, const struct cmwq_exec_args *args,
                    cmwq_exec_done_fn done, void *userdata, uint64_t *ret_id);

/*
 * Block until item @id (queued by the caller's uid) has ended and return its
 * result.  Returns 0, -ENOENT (no such item, or gone from the history),
 * -EPERM, -ECONNRESET.
 */
int cmwq_exec_wait(struct cmwq *c, uint64_t id, struct cmwq_exec_result **ret);

/*
 * Cancel item @id: a pending one is removed, a running one is killed (its
 * whole process group) and waited for.  Returns 0 when the item is cancelled
 * (by this call or an earlier one), 1 when it had already ended otherwise
 * (ran to its end or failed to start), or -ENOENT, -EPERM, -ECONNRESET.
 */
int cmwq_exec_cancel(struct cmwq *c, uint64_t id);

void cmwq_exec_result_free(struct cmwq_exec_result *r);

#ifdef __cplusplus
}
#endif

#endif

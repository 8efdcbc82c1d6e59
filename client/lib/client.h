/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Inside libcmwq-client: one connection shared by the caller's threads.
 *
 * Requests go out under the connection's lock.  Any number of them may be
 * open at once, each a struct client_call waiting for the response with its
 * id.  One thread at a time reads the socket (the "reader": a thread blocked
 * in a call, or cmwq_process()); it hands every response to its call and
 * wakes the threads waiting.  Calls with a completion (cmwq_exec_async())
 * are moved to the ready list and their callbacks run in cmwq_process(),
 * outside the lock.  When the transport fails, every open call completes
 * with that error and the connection stays dead.
 */

#include <pthread.h>
#include <sys/types.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmwq.pb-c.h"
#include "cmwq/cmwq.h"
#include "conn.h"
#include "list.h"

struct client_call;
typedef void (*client_complete_fn)(struct cmwq *c, struct client_call *call);

struct client_call {
        struct list_head entry;         /* c->calls, then c->ready */
        uint64_t id;
        Cmwq__Response *resp;           /* owned once done */
        int error;                      /* transport error, 0 when resp is set */
        bool done;
        client_complete_fn complete;    /* NULL: a blocking call waits for it */
        cmwq_exec_done_fn exec_done;
        void *userdata;
        uint64_t item_id;
};

struct cmwq_workqueue {
        struct cmwq *c;
        struct list_head entry;         /* c->workqueues (not the system ones) */
        char *name;
        bool builtin;
        unsigned flags;                 /* as far as known: CMWQ_WQ_* */
        unsigned max_active;            /* 0: the default */
        /* Callback work, under the work lock. */
        struct cmwq_work inflight;      /* sentinel of the _inext/_iprev list */
        uint64_t cb_seq;                /* queueings so far */
        unsigned cb_active;             /* running now (unbound max_active) */
        struct client_flusher *cb_flushers;     /* threads in cmwq_flush_workqueue() */
        /* cmwq_drain_workqueue() calls under way (atomic): only the queue's
         * own items may queue callbacks on it meanwhile, through both the
         * callbacks' phase and the exec items' (cmwqd's) phase. */
        unsigned cb_draining;
        /* cmwq_destroy_workqueue() has begun: only its own items may queue
         * on it, and their delayed work is queued at once. */
        bool cb_destroyed;
        /* Frozen by the daemon: none of its callbacks start.  Set by the
         * reader (connection lock), read under the work lock: atomic. */
        bool cb_frozen;
        /* Unbound: its credits entry + 1 (work-shm.c); 0: not named yet;
         * -1: none, its callbacks counted by this process alone. */
        int cb_credits;
        /* The work_pool_next() scan that found it could start nothing
         * (cw->next_scan then): its other items are passed over at once. */
        uint64_t cb_blocked_scan;
};

#define CLIENT_NR_SYSTEM_QUEUES 6

struct client_work;
struct client_flusher;
struct client_flusher;

struct cmwq {
        pthread_mutex_t lock;
        pthread_cond_t cond;            /* a call completed, or the reader left */
        struct conn *conn;
        int fd;                         /* the socket */
        int epoll_fd;                   /* cmwq_get_fd(): the socket + wake_fd */
        int wake_fd;                    /* eventfd: the ready list is not empty */
        int stop_fd;                    /* eventfd: a blocked reader must look at stopping */
        bool reading;                   /* a thread is reading the socket */
        int dead;                       /* negative errno once the transport failed */
        char *dead_reason;              /* what the daemon said when it ended the
                                         * connection; set (atomic) before dead */
        struct list_head calls;         /* open */
        struct list_head ready;         /* completed, callbacks not run yet */
        struct list_head workqueues;
        struct cmwq_workqueue system[CLIENT_NR_SYSTEM_QUEUES];
        bool stopping;                  /* cmwq_disconnect() has begun */
        struct client_work *work;       /* callback machinery, made on first use */
        bool work_kick;                 /* a queue thawed or froze: the manager kicks the pools */
        uint32_t freeze_notice;         /* the daemon's last freeze notice (atomic) */
        pthread_mutex_t work_init_lock;
};

/* For a call that finds the connection lost (@error): the message says why,
 * with the daemon's own words if it ended the connection; returns @error. */
int client_lost_error(struct cmwq *c, int error);

/* Sets the calling thread's message for cmwq_last_error(); returns @error. */
int client_error(int error, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For a response that carries an error: sets the message, returns the errno. */
int client_response_error(const Cmwq__Response *resp, const char *what);

/* Sends @req and blocks until its response: 0 and *ret (free it with
 * cmwq__response__free_unpacked), or a negative errno (transport).  An error
 * the daemon answered with is in the response. */
int client_call(struct cmwq *c, Cmwq__Request *req, Cmwq__Response **ret);
/* File descriptors that came with a response (conn_take_fds()). */
int client_take_fds(struct cmwq *c, int *fds, unsigned max);
/* A call that answers with an error or "done": returns 0 or the errno. */
int client_call_simple(struct cmwq *c, Cmwq__Request *req, const char *what);
/* Sends @req; @call (heap-allocated, owned by the connection from now on)
 * completes through @call->complete in cmwq_process(). */
int client_call_async(struct cmwq *c, Cmwq__Request *req, struct client_call *call);

void client_call_free(struct client_call *call);
/* Sends @req and forgets it: its answer is dropped. */
int client_send_oneway(struct cmwq *c, Cmwq__Request *req);
/* The manager thread's loop: reads until the connection ends. */
void client_read_forever(struct cmwq *c);
/* Wakes a reader blocked in poll() so that it sees c->stopping. */
void client_wake_reader(struct cmwq *c);

/* client-work.c, work-shm.c (client_work_freeze()) */
/* With c->lock held.  A freeze notice @seq is answered (FREEZE_ACK) by the
 * manager once no callback of a frozen queue runs. */
void client_work_freeze(struct cmwq *c, const char *name, bool frozen, uint32_t seq);
/* Lets every pool look for work again (after a thaw); without c->lock. */
void client_work_kick(struct cmwq *c);
void client_work_stop(struct cmwq *c);
void client_workqueue_init(struct cmwq_workqueue *wq);
/* @wq's handle goes: the credits it holds go back to cmwqd (work-shm.c). */
void client_workqueue_forget(struct cmwq_workqueue *wq);
int client_workqueue_flush_callbacks(struct cmwq_workqueue *wq, bool drain);
void client_workqueue_drain_hold(struct cmwq_workqueue *wq, bool hold);
/* Drains @wq's callbacks for cmwq_destroy_workqueue(): its delayed work
 * runs now; nothing of it is left on a timer or pending list after. */
int client_workqueue_destroy_callbacks(struct cmwq_workqueue *wq);
void client_workqueue_set_max_active(struct cmwq_workqueue *wq, unsigned max_active);

/* client-exec.c: the exec result of an ItemInfo; takes @resp on success. */
int client_exec_result_new(Cmwq__Response *resp, const Cmwq__ItemInfo *info, struct cmwq_exec_result **ret);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The Unix socket front end: accepts clients, frames and decodes their
 * requests, checks the protocol version in the first message, and hands
 * each request to ipc/dispatch.c.  A malformed, oversized or out-of-order
 * message ends that client's connection with an error reply; the daemon
 * keeps serving everyone else.
 *
 * A client must send Hello, and finish any frame it starts, within the
 * hello-timeout (core/user-limits.h); one that connects and stalls is dropped,
 * so that idle connections cannot pin slots.  A client that shuts down its
 * sending side still gets the replies to everything it sent, including
 * those that wait; the connection closes after the last one.
 *
 * Backpressure: a connection's requests are decoded only while its queued
 * replies are under IPC_CLIENT_BACKLOG_MAX, and at most
 * IPC_CLIENT_REQUESTS_PER_TURN per turn of the loop; the rest wait in its
 * input buffer (and the socket) until it reads.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "callback/callback.h"
#include "cmwq.pb-c.h"
#include "core/core.h"
#include "list.h"
#include "store/store.h"

struct event;
struct event_base;
struct evbuffer;
struct ipc_server;

/* A client may have this many replies queued (bytes) before it is dropped
 * for not reading them: the replies to requests that wait (wait, flush),
 * which come when their item ends, whatever the client reads. */
#define IPC_CLIENT_OUTPUT_MAX (32u * 1024u * 1024u)
/* Backpressure: while this many bytes of replies wait to be sent to a
 * client (or for the state log), no further request of its is taken; it is
 * served again as it reads.  One that pipelines requests and never reads
 * costs the daemon this much, plus one reply, and no CPU. */
#define IPC_CLIENT_BACKLOG_MAX (1024u * 1024u)
/* Requests taken from one connection per turn of the event loop: the
 * others get their turn between. */
#define IPC_CLIENT_REQUESTS_PER_TURN 64u
/* Requests that wait (wait, flush, drain, ...) one client may have open. */
#define IPC_CLIENT_CALLS_MAX 4096u
#define IPC_CLIENTS_MAX 4096u
/* Of those, the slots only privileged callers (root, the daemon's own uid)
 * may take: other users' connections, however many uids they come from,
 * never lock them out. */
#define IPC_CLIENTS_RESERVED 64u

/* File descriptors that go with one reply (CallbackAttach's). */
#define IPC_CLIENT_SEND_FDS_MAX 2u

struct ipc_client {
        struct ipc_server *server;
        struct list_head entry;
        int fd;
        struct event *read_event;
        struct event *write_event;
        struct evbuffer *in;
        struct evbuffer *out;
        struct evbuffer *held;  /* replies waiting for the state log to be on disk */
        uint64_t held_seq;      /* ... up to this record */
        struct core_caller caller;
        bool greeted;           /* Hello received */
        bool closing;           /* close once the output is flushed */
        bool eof;               /* the client shut down its sending side */
        bool in_backlog;        /* requests wait in @in for their turn (backpressure) */
        struct event *resume;   /* takes them up on a later turn */
        bool privileged;        /* root or the daemon's uid: may take a reserved slot */
        bool counted;           /* holds one of its uid's 'connections' */
        struct user_usage *usage;       /* its uid's, while counted */
        size_t out_charged;     /* bytes of out counted in usage->reply_bytes */
        struct event *deadline; /* Hello, or a started frame, not complete in time */
        struct list_head calls; /* struct ipc_call: requests still waiting */
        unsigned nr_calls;
        struct callback_client *callback;       /* once it attached its shared memory */
        /* File descriptors to send with the byte at offset send_fds_at of
         * the output stream (SCM_RIGHTS); out_written counts what went. */
        int send_fds[IPC_CLIENT_SEND_FDS_MAX];
        unsigned nr_send_fds;
        uint64_t send_fds_at;
        uint64_t out_written;
        struct core_conn_owner owned;   /* its workqueues that end with it */
};

/* Listens on the socket passed by systemd when there is one, else on @path
 * (which may then not be NULL). */
int ipc_server_new(struct event_base *base, struct core *core, const char *path, bool user_mode,
                   struct ipc_server **ret);
/* A server without a listening socket: its clients come from
 * ipc_server_add_client() alone (the fuzzer drives the protocol this way). */
int ipc_server_new_detached(struct event_base *base, struct core *core, bool user_mode,
                            struct ipc_server **ret);
/* Serves @fd, a connected Unix stream socket (accepted, or one end of a
 * socketpair); takes it, and closes it on failure.  The peer's uid (its
 * SO_PEERCRED) is checked first: a peer over its uid's 'connections', or
 * for whom the table has no slot, gets one error frame (id 0, its Hello
 * unread) and is closed at once, and nothing is kept of it.  *ret (may be
 * NULL) is set when the client is taken, else to NULL. */
int ipc_server_add_client(struct ipc_server *s, int fd, struct ipc_client **ret);
struct ipc_server *ipc_server_free(struct ipc_server *s);
struct core *ipc_server_core(struct ipc_server *s);
/* With a store, no reply leaves before every record appended when it was
 * sent is on disk: a client told "queued" has its item on disk. */
void ipc_server_set_store(struct ipc_server *s, struct store *store);
const char *ipc_server_path(struct ipc_server *s);
/* Whether the listening socket came from systemd (sd_listen_fds). */
bool ipc_server_socket_activated(struct ipc_server *s);
/* The server's callback registry (libcmwq-client worker threads). */
int ipc_server_callbacks(struct ipc_server *s, struct callback_registry **ret);

/* Queues @resp for the client.  Returns a negative errno if it could not. */
int ipc_client_send(struct ipc_client *c, const Cmwq__Response *resp);
/* For a reply that acknowledges nothing the state log keeps (a callback
 * thread's registration): it does not wait for the log to reach the disk,
 * and may overtake replies that do (clients match replies by id). */
int ipc_client_send_unlogged(struct ipc_client *c, const Cmwq__Response *resp);
/* As ipc_client_send_unlogged(), with @fds (duplicated here; the caller
 * keeps its own) passed along with the reply's first byte.  -EBUSY while
 * an earlier reply's are still waiting to go. */
int ipc_client_send_fds(struct ipc_client *c, const Cmwq__Response *resp, const int *fds, unsigned n_fds);

/* A pidfd (close-on-exec, the caller's to close) of the process that
 * connected: it names that process, never one that got its pid later.
 * -ESRCH when it has exited; -EOPNOTSUPP when the kernel has no pidfds. */
int ipc_client_peer_pidfd(struct ipc_client *c, int *ret_pidfd);
/* Sends an error reply; with @fatal the connection closes after it. */
void ipc_client_send_error(struct ipc_client *c, uint64_t id, int error, const char *message, bool fatal);

/* ipc/dispatch.c */
void ipc_dispatch(struct ipc_client *c, Cmwq__Request *req);
void ipc_client_cancel_calls(struct ipc_client *c);

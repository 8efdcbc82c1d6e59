/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A blocking client connection to cmwqd over its Unix socket.
 *
 * One request at a time: conn_call() sends a request and reads frames until
 * the response carrying the same id arrives.  This module never prints and
 * never exits; every failure is a negative errno, and what the daemon said
 * about it (if anything) is kept for conn_last_error().
 */

#include <stdint.h>

#include "cmwq.pb-c.h"

/* Where a system-mode cmwqd listens, and the name of a user instance's
 * socket inside $XDG_RUNTIME_DIR. */
#define CONN_SYSTEM_SOCKET_PATH "/run/cmwqd/cmwqd.sock"
#define CONN_USER_SOCKET_NAME "cmwqd.sock"

struct conn;

/*
 * Pick the socket to talk to: @explicit_path if not NULL, else $CMWQ_SOCKET
 * if set and non-empty, else $XDG_RUNTIME_DIR/cmwqd.sock if that socket
 * exists, else CONN_SYSTEM_SOCKET_PATH.  A path starting with '@' names a
 * socket in the abstract namespace.  Returns 0 or -ENOMEM.
 */
int conn_socket_path(const char *explicit_path, char **ret_path);

/* Allocate an unconnected connection.  Returns 0 or -ENOMEM. */
int conn_new(struct conn **ret);

/*
 * Connect @c to @path and say Hello (protocol version CMWQ_PROTOCOL_VERSION,
 * client name @client_name, which may be NULL).  Returns 0, or a negative
 * errno:
 *   the connect(2) error (-ENOENT, -ECONNREFUSED, -EACCES, ...),
 *   -ENAMETOOLONG if @path does not fit a socket address,
 *   -EPROTONOSUPPORT if the daemon refused our protocol version,
 *   -EPROTO / -EBADMSG / -ECONNRESET for a broken or closed conversation,
 *   or the errno matching any other error the daemon answered with.
 * When the daemon explained a refusal, conn_last_error() has its message.
 * -EISCONN if @c is already connected.
 */
int conn_connect(struct conn *c, const char *path, const char *client_name);

/* Close the connection and free it.  Accepts NULL, returns NULL. */
struct conn *conn_close(struct conn *c);
static inline void conn_closep(struct conn **c) {
        conn_close(*c);
}

/*
 * Send @req (its id is assigned here) and wait for the response with the
 * same id; responses with other ids are skipped.  Returns 0 and the response
 * in *ret (free it with cmwq__response__free_unpacked(r, NULL)); an error
 * the daemon answered with is in (*ret)->error and (*ret)->message, not in
 * the return value.
 *
 * Negative errno on transport failure: -EMSGSIZE if the request exceeds the
 * frame limit (nothing was sent) or the daemon announced an oversized frame,
 * -ECONNRESET if the daemon closed the connection before answering, -EBADMSG
 * if a response could not be decoded, -EPROTO if the daemon ended the
 * conversation with a connection-level error (response id 0; its message is
 * then in conn_last_error()), or the errno of a failed send/recv.
 * After any transport failure the connection is unusable.
 */
int conn_call(struct conn *c, Cmwq__Request *req, Cmwq__Response **ret);

/*
 * The two halves of conn_call(), for a caller that keeps several requests
 * open at once (the library).  conn_send_request() assigns req->id and sends
 * the whole frame, waiting for room if the socket is non-blocking.
 * conn_read_response() returns the next response whatever its id; on a
 * non-blocking socket -EAGAIN when no whole frame has arrived yet (the bytes
 * that did stay buffered).  Errors as for conn_call().
 */
int conn_send_request(struct conn *c, Cmwq__Request *req);
/* File descriptors the daemon passed with a response (SCM_RIGHTS; the
 * reply to CallbackAttach has two): up to @max move to @fds, the caller's
 * to close, and the rest are closed.  Returns how many moved.  Kept at most
 * CONN_PASS_FDS_MAX at a time. */
#define CONN_PASS_FDS_MAX 2u
int conn_take_fds(struct conn *c, int *fds, unsigned max);
int conn_read_response(struct conn *c, Cmwq__Response **ret);

/* The daemon's message for the last failure it explained, or NULL. */
const char *conn_last_error(const struct conn *c);

/* What the daemon said about itself in its HelloReply. */
uint32_t conn_daemon_protocol(const struct conn *c);
const char *conn_daemon_name(const struct conn *c);   /* may be NULL */
/* The largest payload the daemon accepts from us (<= CMWQ_FRAME_MAX_PAYLOAD). */
uint32_t conn_max_payload(const struct conn *c);
int conn_fd(const struct conn *c);

/* The negative errno that best matches a protocol error (0 for OK). */
int conn_error_to_errno(Cmwq__Error e);
/* A short English name of a protocol error, e.g. "not found". */
const char *conn_error_to_string(Cmwq__Error e);

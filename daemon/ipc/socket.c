/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The Unix socket front end's transport (see ipc/socket.h and
 * doc/design.md §5): everything about a client connection except what its
 * requests mean, which is ipc/dispatch.c's.  Kept apart so that the
 * protocol's edge -- sizes, framing, the Hello, who is calling -- is checked
 * in one place before any request reaches the core, and so that the fuzzer
 * can drive a real connection through ipc_server_add_client().
 *
 * It owns the listening socket (its own, or the one systemd passed) and
 * every connected client: its fd and events, its input and output buffers,
 * its credentials and what they count against the per-user limits, its
 * Hello and frame deadline, the file descriptors that go with a reply, and
 * the order in which replies leave -- held back while the state log has
 * records not yet on disk.  A client that breaks the protocol or does not
 * read its replies is dropped here.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "core/errno-map.h"
#include "frame.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83        /* Linux 6.16, asm-generic */
#endif
#include "base/log-ratelimit.h"
#include "base/log.h"
#include "ipc/socket.h"
#include "util.h"

#define IPC_READ_CHUNK 65536
#define IPC_ACCEPT_PAUSE_USEC (100 * USEC_PER_MSEC)
/* Connections taken per wake-up of the listening socket. */
#define IPC_ACCEPT_BATCH 64
/* What one uid's connections can make the daemon log again and again is
 * logged once per uid, kind and interval, with a count of the rest. */
#define IPC_LOG_INTERVAL_USEC (10 * USEC_PER_SEC)

enum ipc_log_kind {
        IPC_LOG_REFUSED,        /* over 'connections', or no slot */
        IPC_LOG_NO_HELLO,
        IPC_LOG_STALLED,        /* a started frame not completed */
        IPC_LOG_UNREAD,         /* replies not read */
        IPC_LOG_DROPPED,        /* a protocol error */
};

#define ipc_log_limited(s, uid, kind, level, ...) \
        log_ratelimit_log((s)->log_limit, (uint64_t) (kind) << 32 | (uint32_t) (uid), level, __VA_ARGS__)

struct ipc_server {
        struct event_base *base;
        struct core *core;
        char *path;             /* ours to unlink; NULL when the socket came from systemd */
        char *activated_path;   /* the address of systemd's socket, for the logs */
        bool user_mode;
        int fd;
        struct event *accept_event;
        struct event *accept_pause;
        struct list_head clients;
        unsigned nr_clients;
        unsigned nr_unprivileged;       /* of those, not c->privileged */
        struct log_ratelimit *log_limit;
        struct callback_registry *callbacks;    /* made on first use */
        struct store *store;
        struct store_listener store_listener;
};

static void ipc_client_free(struct ipc_client *c);
static int ipc_client_send_to(struct ipc_client *c, const Cmwq__Response *resp, bool unlogged);
static int ipc_server_new_fd(struct event_base *base, struct core *core, int fd, const char *path,
                             bool user_mode, struct ipc_server **ret);

struct core *ipc_server_core(struct ipc_server *s) {
        return s->core;
}

int ipc_server_callbacks(struct ipc_server *s, struct callback_registry **ret) {
        int r;

        if (!s->callbacks) {
                r = callback_registry_new(s->core, &s->callbacks);
                if (r < 0)
                        return r;
        }
        *ret = s->callbacks;
        return 0;
}

const char *ipc_server_path(struct ipc_server *s) {
        if (s->path)
                return s->path;
        return s->activated_path ? s->activated_path : "a socket from systemd";
}

bool ipc_server_socket_activated(struct ipc_server *s) {
        return !s->path;
}

/* The path systemd bound the socket to, so that the logs and the unit's
 * status say where clients connect.  NULL for an abstract or unnamed one. */
static char *ipc_socket_bound_path(int fd) {
        struct sockaddr_un sa = {};
        socklen_t len = sizeof(sa);
        size_t n;

        if (getsockname(fd, (struct sockaddr *) &sa, &len) < 0 || sa.sun_family != AF_UNIX ||
            len <= offsetof(struct sockaddr_un, sun_path) || sa.sun_path[0] != '/')
                return NULL;
        n = len - offsetof(struct sockaddr_un, sun_path);
        return strndup(sa.sun_path, n);
}

/* Replies waiting for @c to read them, or for the state log, fill its
 * share: its requests wait. */
static bool ipc_client_backpressured(struct ipc_client *c) {
        return evbuffer_get_length(c->out) + evbuffer_get_length(c->held) >= IPC_CLIENT_BACKLOG_MAX;
}

static void ipc_client_update_events(struct ipc_client *c) {
        size_t pending = evbuffer_get_length(c->out);

        /* Half-closed: done once nothing it asked for is still waiting. */
        if (c->eof && c->nr_calls == 0)
                c->closing = true;

        /* Write interest only while output is queued; stop reading from a
         * client that does not read its replies, or that is being closed.
         * A closing client with nothing (left) to send is freed by the write
         * callback on the next turn of the loop, not from under the caller. */
        if (pending > 0)
                event_add(c->write_event, NULL);
        else if (c->closing && evbuffer_get_length(c->held) == 0)
                event_active(c->write_event, EV_WRITE, 0);
        else
                event_del(c->write_event);
        /* Nothing more is read while requests wait in c->in, or while its
         * replies are not read; those that wait are taken up on a later
         * turn once their replies have gone. */
        if (c->closing || c->eof || c->in_backlog || ipc_client_backpressured(c))
                event_del(c->read_event);
        else
                event_add(c->read_event, NULL);
        if (c->in_backlog && !c->closing && !ipc_client_backpressured(c))
                event_active(c->resume, 0, 0);
}

/* Counts the replies queued for @c to its uid (limit 'reply-bytes'). */
static void ipc_client_account_output(struct ipc_client *c) {
        size_t now = evbuffer_get_length(c->out) + (c->held ? evbuffer_get_length(c->held) : 0);

        if (!c->usage)
                return;
        c->usage->reply_bytes = c->usage->reply_bytes - c->out_charged + now;
        c->out_charged = now;
}

/* Drops a client whose replies pile up unread: nothing more is queued for
 * it, and what is queued goes. */
static int ipc_client_drop_unread(struct ipc_client *c, const char *why) {
        ipc_log_limited(c->server, c->caller.uid, IPC_LOG_UNREAD, LOG_WARNING, "Client pid %d uid %u %s; dropping it",
                        (int) c->caller.pid, (unsigned) c->caller.uid, why);
        c->closing = true;
        evbuffer_drain(c->out, evbuffer_get_length(c->out));
        evbuffer_drain(c->held, evbuffer_get_length(c->held));
        ipc_client_account_output(c);
        ipc_client_update_events(c);
        return -ENOBUFS;
}

/* Replies wait in c->held while the state log has records not yet on
 * disk; they keep their order. */
static struct evbuffer *ipc_client_output_for_reply(struct ipc_client *c) {
        struct store *store = c->server->store;
        uint64_t seq;

        if (!store)
                return c->out;
        seq = store_appended_seq(store);
        /* A full state directory: records may wait for long, replies do
         * not (changes are refused meanwhile).  Those held already stay
         * held until their records are on disk: they acknowledge changes,
         * and the replies after them keep their order. */
        if (evbuffer_get_length(c->held) == 0 && (store_durable_seq(store) >= seq || store_is_full(store)))
                return c->out;
        c->held_seq = seq;
        store_urge(store);
        return c->held;
}

static void ipc_server_store_durable(struct store_listener *l, uint64_t seq) {
        struct ipc_server *s = container_of(l, struct ipc_server, store_listener);
        struct ipc_client *c, *n;

        list_for_each_entry_safe(c, n, &s->clients, entry)
                if (evbuffer_get_length(c->held) > 0 && c->held_seq <= seq) {
                        evbuffer_add_buffer(c->out, c->held);
                        ipc_client_update_events(c);
                }
}

void ipc_server_set_store(struct ipc_server *s, struct store *store) {
        s->store = store;
        s->store_listener.durable = ipc_server_store_durable;
        list_init(&s->store_listener.entry);
        if (store)
                store_add_listener(store, &s->store_listener);
}

int ipc_client_send(struct ipc_client *c, const Cmwq__Response *resp) {
        return ipc_client_send_to(c, resp, false);
}

int ipc_client_send_unlogged(struct ipc_client *c, const Cmwq__Response *resp) {
        return ipc_client_send_to(c, resp, true);
}

int ipc_client_send_fds(struct ipc_client *c, const Cmwq__Response *resp, const int *fds, unsigned n_fds) {
        uint64_t at = c->out_written + evbuffer_get_length(c->out);
        int r;

        if (c->nr_send_fds > 0)
                return -EBUSY;
        if (n_fds > IPC_CLIENT_SEND_FDS_MAX)
                return -EINVAL;
        r = ipc_client_send_to(c, resp, true);
        if (r < 0)
                return r;
        for (unsigned i = 0; i < n_fds; i++) {
                c->send_fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
                if (c->send_fds[i] < 0) {
                        r = -errno;
                        while (i > 0)
                                close(c->send_fds[--i]);
                        return r;       /* the reply went without them: the client fails to attach */
                }
        }
        c->nr_send_fds = n_fds;
        c->send_fds_at = at;
        return 0;
}

static int ipc_client_send_to(struct ipc_client *c, const Cmwq__Response *resp, bool unlogged) {
        size_t len = cmwq__response__get_packed_size(resp);
        struct evbuffer_iovec vec;
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE];
        struct evbuffer *out;

        if (c->closing)
                return -ECONNRESET;     /* dropped: nothing more for it */
        if (len > CMWQ_FRAME_MAX_PAYLOAD) {
                /* Say so rather than leave the request without an answer. */
                Cmwq__Response too_large = CMWQ__RESPONSE__INIT;
                char msg[128];

                log_warning("A reply of %zu bytes to client pid %d is over the frame limit", len, (int) c->caller.pid);
                snprintf(msg, sizeof(msg), "the reply would take %zu bytes, over the limit of %u", len,
                         CMWQ_FRAME_MAX_PAYLOAD);
                too_large.id = resp->id;
                too_large.error = CMWQ__ERROR__LIMIT_EXCEEDED;
                too_large.message = msg;
                (void) ipc_client_send(c, &too_large);
                return -EMSGSIZE;
        }
        if (evbuffer_get_length(c->out) + evbuffer_get_length(c->held) + len > IPC_CLIENT_OUTPUT_MAX)
                return ipc_client_drop_unread(c, "does not read its replies");
        /* Per user too: many connections that each stay under the bound
         * above would otherwise add up. */
        if (c->usage && !caller_is_privileged(&c->caller)) {
                const struct limits *l = &core_get_config(c->server->core)->limits;

                if (c->usage->reply_bytes + len + CMWQ_FRAME_HEADER_SIZE > l->value[LIMIT_REPLY_BYTES])
                        return ipc_client_drop_unread(c, "is over the per-user limit 'reply-bytes' of unread replies");
        }

        out = unlogged ? c->out : ipc_client_output_for_reply(c);
        frame_header_encode(hdr, (uint32_t) len);
        if (evbuffer_add(out, hdr, sizeof(hdr)) < 0)
                return -ENOMEM;
        if (len > 0) {
                if (evbuffer_reserve_space(out, len, &vec, 1) != 1)
                        return -ENOMEM;
                cmwq__response__pack(resp, vec.iov_base);
                vec.iov_len = len;
                if (evbuffer_commit_space(out, &vec, 1) < 0)
                        return -ENOMEM;
        }
        ipc_client_account_output(c);
        ipc_client_update_events(c);
        return 0;
}

void ipc_client_send_error(struct ipc_client *c, uint64_t id, int error, const char *message, bool fatal) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;

        resp.id = id;
        resp.error = errno_to_protocol_error(error);
        resp.message = (char *) message;
        (void) ipc_client_send(c, &resp);
        if (fatal) {
                ipc_log_limited(c->server, c->caller.uid, IPC_LOG_DROPPED, LOG_INFO, "Dropping client pid %d uid %u: %s",
                                (int) c->caller.pid, (unsigned) c->caller.uid, message);
                c->closing = true;
                ipc_client_update_events(c);
        }
}

/* The first message must be a Hello with a version we speak. */
static int ipc_client_greet(struct ipc_client *c, Cmwq__Request *req) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__HelloReply hello = CMWQ__HELLO_REPLY__INIT;
        char msg[128];

        if (req->body_case != CMWQ__REQUEST__BODY_HELLO) {
                ipc_client_send_error(c, req->id, -EPROTO, "the first request must be Hello", true);
                return -EPROTO;
        }
        if (req->hello->version != CMWQ_PROTOCOL_VERSION) {
                snprintf(msg, sizeof(msg), "protocol version %u is not supported; this cmwqd speaks version %u",
                         req->hello->version, CMWQ_PROTOCOL_VERSION);
                ipc_client_send_error(c, req->id, -EPROTONOSUPPORT, msg, true);
                return -EPROTONOSUPPORT;
        }

        c->greeted = true;
        hello.version = CMWQ_PROTOCOL_VERSION;
        hello.daemon = (char *) PACKAGE_STRING;
        hello.has_max_frame = true;
        hello.max_frame = CMWQ_FRAME_MAX_PAYLOAD;
        resp.id = req->id;
        resp.error = CMWQ__ERROR__OK;
        resp.body_case = CMWQ__RESPONSE__BODY_HELLO;
        resp.hello = &hello;
        return ipc_client_send(c, &resp);
}

/* Decodes every whole frame in the input buffer.  Returns -errno once the
 * connection is to be dropped. */
static int ipc_client_process_input(struct ipc_client *c, bool *ret_progress) {
        unsigned taken = 0;

        c->in_backlog = false;
        /* Requests are answered and decided from who runs now. */
        sleepwatch_catch_up(core_sleepwatch(c->server->core));
        while (!c->closing) {
                size_t avail = evbuffer_get_length(c->in), frame_len;
                uint32_t payload_len;
                uint8_t *data;
                Cmwq__Request *req;
                int r;

                if (avail < CMWQ_FRAME_HEADER_SIZE)
                        return 0;
                /* Its share of this turn, or of queued replies, is used up:
                 * the rest waits (ipc_client_resume()). */
                if (taken >= IPC_CLIENT_REQUESTS_PER_TURN || ipc_client_backpressured(c)) {
                        c->in_backlog = true;
                        return 0;
                }
                /* The size is judged on the header alone, before we keep more. */
                data = evbuffer_pullup(c->in, CMWQ_FRAME_HEADER_SIZE);
                r = frame_parse(data, CMWQ_FRAME_HEADER_SIZE, CMWQ_FRAME_MAX_PAYLOAD, &payload_len, &frame_len);
                if (r == -EMSGSIZE) {
                        ipc_client_send_error(c, 0, r, "message too large", true);
                        return r;
                }
                data = evbuffer_pullup(c->in, -1);
                r = frame_parse(data, avail, CMWQ_FRAME_MAX_PAYLOAD, &payload_len, &frame_len);
                if (r == 0)
                        return 0;

                req = cmwq__request__unpack(NULL, payload_len, data + CMWQ_FRAME_HEADER_SIZE);
                evbuffer_drain(c->in, frame_len);
                *ret_progress = true;
                taken++;
                if (!req) {
                        ipc_client_send_error(c, 0, -EBADMSG, "malformed request", true);
                        return -EBADMSG;
                }

                if (!c->greeted)
                        r = ipc_client_greet(c, req);
                else if (req->body_case == CMWQ__REQUEST__BODY_HELLO) {
                        ipc_client_send_error(c, req->id, -EPROTO, "Hello sent twice", true);
                        r = -EPROTO;
                } else {
                        ipc_dispatch(c, req);
                        r = 0;
                }
                cmwq__request__free_unpacked(req, NULL);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void ipc_client_arm_deadline(struct ipc_client *c) {
        const struct limits *l = &core_get_config(c->server->core)->limits;
        struct timeval tv = timeval_from_usec(l->value[LIMIT_HELLO_TIMEOUT] * USEC_PER_SEC);

        evtimer_add(c->deadline, &tv);
}

static void ipc_client_deadline(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_client *c = userdata;

        /* Input waits because we stopped reading (its replies are not
         * read): that stall is not the client's slow frame. */
        if (c->greeted && (c->in_backlog || ipc_client_backpressured(c))) {
                ipc_client_arm_deadline(c);
                return;
        }
        ipc_log_limited(c->server, c->caller.uid, c->greeted ? IPC_LOG_STALLED : IPC_LOG_NO_HELLO, LOG_INFO,
                        "Dropping client pid %d uid %u: %s within %" PRIu64 " s", (int) c->caller.pid,
                        (unsigned) c->caller.uid, c->greeted ? "a started request was not completed" : "no Hello",
                        core_get_config(c->server->core)->limits.value[LIMIT_HELLO_TIMEOUT]);
        ipc_client_free(c);
}

/* The peer shut down its sending side (EOF): if it is gone altogether there
 * is nobody to answer.  A full close shows as POLLHUP on a Unix socket; a
 * half-close does not.  (A half-closed client that closes for good later is
 * noticed when its reply cannot be written.) */
static bool ipc_client_peer_gone(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int n = poll(&p, 1, 0);

        /* Not writable is not gone: a client that half-closed and has not
         * read its replies yet fills its side. */
        return n < 0 || (n == 1 && (p.revents & (POLLHUP | POLLERR)));
}

/* Reads what the client sent into c->in.  Returns the bytes read, 0 at EOF,
 * or -1 with errno set: EPROTO if it tried to pass file descriptors, which
 * cmwqd never takes (SO_PASSRIGHTS refuses them where the kernel can; older
 * kernels drop them, which this notices). */
static ssize_t ipc_client_recv(struct ipc_client *c) {
        struct evbuffer_iovec vec;
        struct iovec iov;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        if (evbuffer_reserve_space(c->in, IPC_READ_CHUNK, &vec, 1) != 1) {
                errno = ENOMEM;
                return -1;
        }
        iov = (struct iovec) { .iov_base = vec.iov_base, .iov_len = vec.iov_len };
        n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
                return -1;
        vec.iov_len = (size_t) n;
        if (evbuffer_commit_space(c->in, &vec, 1) < 0) {
                errno = ENOMEM;
                return -1;
        }
        if (msg.msg_flags & MSG_CTRUNC) {
                errno = EPROTO;
                return -1;
        }
        return n;
}

static void ipc_client_input_done(struct ipc_client *c, bool progress) {
        /* The deadline runs from connect until Hello, and from the start of
         * any frame until its end; whole frames keep a busy client alive. */
        if (c->greeted && evbuffer_get_length(c->in) == 0)
                evtimer_del(c->deadline);
        else if (c->greeted && (progress || !evtimer_pending(c->deadline, NULL)))
                ipc_client_arm_deadline(c);
        ipc_client_update_events(c);
}

static void ipc_client_readable(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_client *c = userdata;
        bool progress = false;
        ssize_t n;

        n = ipc_client_recv(c);
        if (n == 0) {
                if (ipc_client_peer_gone(fd)) {
                        ipc_client_free(c);
                        return;
                }
                /* A frame cut short by the EOF can never complete. */
                c->eof = true;
                evbuffer_drain(c->in, evbuffer_get_length(c->in));
                evtimer_del(c->deadline);
                ipc_client_update_events(c);
                return;
        }
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return;
                if (errno == EPROTO) {
                        ipc_client_send_error(c, 0, -EPROTO, "file descriptors were sent; cmwqd takes none", true);
                        return;
                }
                log_debug_errno(-errno, "Reading from client pid %d failed: %m", (int) c->caller.pid);
                ipc_client_free(c);
                return;
        }
        (void) ipc_client_process_input(c, &progress);
        ipc_client_input_done(c, progress);
}

/* Requests left waiting by backpressure, or by the per-turn share, are
 * taken up. */
static void ipc_client_resume(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_client *c = userdata;
        bool progress = false;

        if (!c->in_backlog || c->closing)
                return;
        (void) ipc_client_process_input(c, &progress);
        ipc_client_input_done(c, progress);
}

/* Sends the file descriptors waiting for the byte at the head of c->out,
 * with as much of the output as the first chunk holds. */
static ssize_t ipc_client_write_fds(struct ipc_client *c) {
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int) * IPC_CLIENT_SEND_FDS_MAX)];
        } control = {};
        struct evbuffer_iovec vec;
        struct iovec iov;
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = &control,
                .msg_controllen = CMSG_SPACE(sizeof(int) * c->nr_send_fds),
        };
        struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
        ssize_t n;

        if (evbuffer_peek(c->out, -1, NULL, &vec, 1) < 1)
                return 0;
        iov = (struct iovec) { .iov_base = vec.iov_base, .iov_len = vec.iov_len };
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int) * c->nr_send_fds);
        memcpy(CMSG_DATA(h), c->send_fds, sizeof(int) * c->nr_send_fds);
        n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0)
                return n;
        evbuffer_drain(c->out, (size_t) n);
        for (unsigned i = 0; i < c->nr_send_fds; i++)
                close(c->send_fds[i]);
        c->nr_send_fds = 0;
        return n;
}

static void ipc_client_writable(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_client *c = userdata;
        ssize_t n;

        if (evbuffer_get_length(c->out) > 0) {
                if (c->nr_send_fds > 0 && c->out_written == c->send_fds_at)
                        n = ipc_client_write_fds(c);
                else if (c->nr_send_fds > 0)
                        /* Up to the byte the descriptors go with. */
                        n = evbuffer_write_atmost(c->out, fd, (ev_ssize_t) (c->send_fds_at - c->out_written));
                else
                        n = evbuffer_write(c->out, fd);
                if (n > 0)
                        c->out_written += (uint64_t) n;
                ipc_client_account_output(c);
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        ipc_client_free(c);
                        return;
                }
        }
        if (c->closing && evbuffer_get_length(c->out) == 0 && evbuffer_get_length(c->held) == 0) {
                ipc_client_free(c);
                return;
        }
        ipc_client_update_events(c);
}

static void ipc_client_free(struct ipc_client *c) {
        if (!c)
                return;
        ipc_client_cancel_calls(c);
        /* A client that went away, even killed, gives back its CPUs. */
        c->callback = callback_client_free(c->callback);
        for (unsigned i = 0; i < c->nr_send_fds; i++)
                close(c->send_fds[i]);
        core_conn_owner_release(&c->owned);
        list_del_init(&c->entry);
        c->server->nr_clients--;
        if (!c->privileged)
                c->server->nr_unprivileged--;
        if (c->usage)
                c->usage->reply_bytes -= c->out_charged;
        if (c->counted)
                core_user_disconnect(c->server->core, c->caller.uid);
        if (c->deadline)
                event_free(c->deadline);
        if (c->resume)
                event_free(c->resume);
        if (c->read_event)
                event_free(c->read_event);
        if (c->write_event)
                event_free(c->write_event);
        if (c->in)
                evbuffer_free(c->in);
        if (c->out)
                evbuffer_free(c->out);
        if (c->held)
                evbuffer_free(c->held);
        if (c->fd >= 0)
                close(c->fd);
        free(c);
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int ipc_client_peer_pidfd(struct ipc_client *c, int *ret_pidfd) {
        socklen_t len = sizeof(int);
        int fd = -1;

        /* The kernel's own: the process recorded at connect() (Linux 6.5).
         * A peer that has exited is EINVAL or ESRCH before Linux 6.16, a
         * pidfd of a dead process after. */
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0) {
                *ret_pidfd = fd;
                return 0;
        }
        if (errno == EINVAL || errno == ESRCH)
                return -ESRCH;
        if (errno != ENOPROTOOPT)
                return -errno;

        /* An older kernel: a pidfd of whoever has the pid now.  A process
         * that died and left its pid to another between connect() and this
         * call goes unnoticed (as before pidfds); after this call, it does
         * not. */
        fd = (int) syscall(SYS_pidfd_open, c->caller.pid, 0);
        if (fd >= 0) {
                *ret_pidfd = fd;
                return 0;
        }
        if (errno == ESRCH)
                return -ESRCH;
        return -EOPNOTSUPP;
}

static void ipc_server_resume_accept(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_server *s = userdata;

        event_add(s->accept_event, NULL);
}

static void ipc_server_accept(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_server *s = userdata;

        for (int n = 0; n < IPC_ACCEPT_BATCH; n++) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (cfd < 0) {
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                /* Out of fds: pause instead of spinning on a
                                 * listening socket that stays readable. */
                                struct timeval tv = timeval_from_usec(IPC_ACCEPT_PAUSE_USEC);
                                log_warning_errno(-errno, "Cannot accept clients: %m; pausing");
                                event_del(s->accept_event);
                                evtimer_add(s->accept_pause, &tv);
                        }
                        return;
                }
                (void) ipc_server_add_client(s, cfd, NULL);
        }
}

/* Answers a connection that is not taken with one error frame and closes
 * it: a refused client costs nothing after this.  The frame's id is 0 (its
 * Hello is not read); a fresh socket's buffer takes it whole. */
static int ipc_server_refuse(struct ipc_server *s, int fd, const struct core_caller *caller, int error,
                             const char *message) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        uint8_t frame[CMWQ_FRAME_HEADER_SIZE + 512];
        size_t len;

        resp.error = errno_to_protocol_error(error);
        resp.message = (char *) message;
        len = cmwq__response__get_packed_size(&resp);
        if (len <= sizeof(frame) - CMWQ_FRAME_HEADER_SIZE) {
                frame_header_encode(frame, (uint32_t) len);
                cmwq__response__pack(&resp, frame + CMWQ_FRAME_HEADER_SIZE);
                (void) send(fd, frame, CMWQ_FRAME_HEADER_SIZE + len, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        ipc_log_limited(s, caller->uid, IPC_LOG_REFUSED, LOG_INFO, "Refusing client pid %d uid %u: %s",
                        (int) caller->pid, (unsigned) caller->uid, message);
        close(fd);
        return error;
}

int ipc_server_add_client(struct ipc_server *s, int cfd, struct ipc_client **ret) {
        struct core_caller caller = {};
        struct core_error e = {};
        struct ipc_client *c;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        bool privileged;
        int r;

        if (ret)
                *ret = NULL;
        /* cmwqd takes no file descriptor from a client: refused at the
         * sender (Linux 6.16), rather than received and closed here, where
         * closing one can block (see callback/callback-shm.h). */
        (void) setsockopt(cfd, SOL_SOCKET, SO_PASSRIGHTS, &(int) { 0 }, sizeof(int));
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                r = log_warning_errno(-errno, "Cannot read a client's credentials: %m");
                close(cfd);
                return r;
        }
        /* The uid and pid the kernel recorded at connect().  Not its gid
         * or groups: a process may hold groups it has only borrowed (a
         * setgid program), and an item's groups come from the user database
         * (exec/exec.h). */
        caller.uid = cred.uid;
        caller.pid = cred.pid;

        /* Judged on the kernel's word for the peer's uid, before anything
         * is kept for it: a user's connections beyond its own limit are
         * refused here and take no slot from anybody. */
        if (s->user_mode && caller.uid != getuid())
                return ipc_server_refuse(s, cfd, &caller, -EPERM, "this is another user's cmwqd instance");
        r = core_user_connect(s->core, &caller, &e);
        if (r < 0)
                return ipc_server_refuse(s, cfd, &caller, r, e.message);
        privileged = caller_is_privileged(&caller);
        if (s->nr_clients >= IPC_CLIENTS_MAX ||
            (!privileged && s->nr_unprivileged >= IPC_CLIENTS_MAX - IPC_CLIENTS_RESERVED)) {
                char msg[128];

                core_user_disconnect(s->core, caller.uid);
                snprintf(msg, sizeof(msg), "cmwqd serves as many clients as it takes (%u); try again later",
                         privileged ? IPC_CLIENTS_MAX : IPC_CLIENTS_MAX - IPC_CLIENTS_RESERVED);
                return ipc_server_refuse(s, cfd, &caller, -EUSERS, msg);
        }

        c = calloc(1, sizeof(*c));
        if (!c) {
                core_user_disconnect(s->core, caller.uid);
                close(cfd);
                return -ENOMEM;
        }
        c->server = s;
        c->fd = cfd;
        c->caller = caller;
        c->privileged = privileged;
        c->counted = true;
        c->usage = user_usage_get(core_users(s->core), caller.uid);     /* exists: connected */
        list_init(&c->calls);
        core_conn_owner_init(&c->owned, caller.pid);
        list_add_tail(&c->entry, &s->clients);
        s->nr_clients++;
        if (!privileged)
                s->nr_unprivileged++;

        c->in = evbuffer_new();
        c->out = evbuffer_new();
        c->held = evbuffer_new();
        c->read_event = event_new(s->base, cfd, EV_READ | EV_PERSIST, ipc_client_readable, c);
        c->write_event = event_new(s->base, cfd, EV_WRITE | EV_PERSIST, ipc_client_writable, c);
        c->deadline = evtimer_new(s->base, ipc_client_deadline, c);
        c->resume = event_new(s->base, -1, 0, ipc_client_resume, c);
        if (!c->in || !c->out || !c->held || !c->read_event || !c->write_event || !c->deadline || !c->resume) {
                ipc_client_free(c);
                return -ENOMEM;
        }
        ipc_client_arm_deadline(c);
        if (ret)
                *ret = c;
        log_debug("Client connected: pid %d uid %u", (int) c->caller.pid, (unsigned) c->caller.uid);
        ipc_client_update_events(c);
        return 0;
}

/* A socket file left by a daemon that died is removed; a live one is not. */
static int ipc_unlink_stale(const char *path, const struct sockaddr_un *sa, socklen_t salen) {
        struct stat st;
        int fd, r;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode))
                return -EEXIST;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        r = connect(fd, (const struct sockaddr *) sa, salen);
        close(fd);
        if (r == 0)
                return -EADDRINUSE;
        return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

static int ipc_listen(const char *path, bool user_mode, int *ret_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_(closep) int fd = -1;
        _cleanup_(freep) char *dir = NULL;
        socklen_t salen;
        char *slash;
        int r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return log_error_errno(-ENAMETOOLONG, "Socket path too long: %s", path);
        strcpy(sa.sun_path, path);
        salen = offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1;

        dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                if (mkdir(dir, user_mode ? 0700 : 0755) < 0 && errno != EEXIST)
                        return log_error_errno(-errno, "Failed to create %s: %m", dir);
        }

        r = ipc_unlink_stale(path, &sa, salen);
        if (r == -EADDRINUSE)
                return log_error_errno(r, "Another cmwqd is already listening on %s", path);
        if (r < 0)
                return log_error_errno(r, "Cannot use %s for the socket: %m", path);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "Failed to create socket: %m");
        /* Anyone may connect to the system instance: who may do what is
         * decided per request from the peer's credentials.  The mode comes
         * from the umask at bind(), not a chmod() of a path that could have
         * been swapped for a symlink meanwhile. */
        mode_t old_umask = umask(user_mode ? 0177 : 0111);
        r = bind(fd, (struct sockaddr *) &sa, salen);
        umask(old_umask);
        if (r < 0)
                return log_error_errno(-errno, "Failed to bind %s: %m", path);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(-errno, "Failed to listen on %s: %m", path);

        *ret_fd = TAKE_FD(fd);
        return 0;
}

int ipc_server_new(struct event_base *base, struct core *core, const char *path, bool user_mode,
                   struct ipc_server **ret) {
        int fd = -1, n, r;

        /* Socket activation: systemd hands us the listening socket. */
        n = sd_listen_fds(true);
        if (n > 1)
                return log_error_errno(-EINVAL, "Expected one socket from systemd, got %d", n);
        if (n == 1) {
                if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0)
                        return log_error_errno(-EINVAL, "The socket passed by systemd is not a listening Unix stream socket");
                fd = SD_LISTEN_FDS_START;
                (void) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                path = NULL;
        } else if (!path)
                return log_error_errno(-EINVAL, "No socket path, and no socket from systemd");
        else {
                r = ipc_listen(path, user_mode, &fd);
                if (r < 0)
                        return r;
        }

        return ipc_server_new_fd(base, core, fd, path, user_mode, ret);
}

/* Takes @fd (-1: no listening socket). */
static int ipc_server_new_fd(struct event_base *base, struct core *core, int fd, const char *path,
                             bool user_mode, struct ipc_server **ret) {
        struct ipc_server *s;

        s = calloc(1, sizeof(*s));
        if (!s) {
                if (fd >= 0)
                        close(fd);
                return -ENOMEM;
        }
        s->base = base;
        s->core = core;
        s->fd = fd;
        s->user_mode = user_mode;
        list_init(&s->clients);
        if (log_ratelimit_new(base, IPC_LOG_INTERVAL_USEC, &s->log_limit) < 0) {
                if (fd >= 0)
                        close(fd);
                free(s);
                return -ENOMEM;
        }
        s->path = path ? strdup(path) : NULL;
        if (!path && fd >= 0)
                s->activated_path = ipc_socket_bound_path(fd);
        if (fd >= 0) {
                s->accept_event = event_new(base, fd, EV_READ | EV_PERSIST, ipc_server_accept, s);
                s->accept_pause = evtimer_new(base, ipc_server_resume_accept, s);
        }
        if ((path && !s->path) || (fd >= 0 && (!s->accept_event || !s->accept_pause))) {
                ipc_server_free(s);
                return -ENOMEM;
        }
        if (s->accept_event)
                event_add(s->accept_event, NULL);
        *ret = s;
        return 0;
}

int ipc_server_new_detached(struct event_base *base, struct core *core, bool user_mode,
                            struct ipc_server **ret) {
        return ipc_server_new_fd(base, core, -1, NULL, user_mode, ret);
}

struct ipc_server *ipc_server_free(struct ipc_server *s) {
        if (!s)
                return NULL;
        while (!list_empty(&s->clients))
                ipc_client_free(list_first_entry(&s->clients, struct ipc_client, entry));
        s->callbacks = callback_registry_free(s->callbacks);
        s->log_limit = log_ratelimit_free(s->log_limit);
        if (s->store)
                store_remove_listener(s->store, &s->store_listener);
        if (s->accept_event)
                event_free(s->accept_event);
        if (s->accept_pause)
                event_free(s->accept_pause);
        if (s->fd >= 0)
                close(s->fd);
        if (s->path)
                unlink(s->path);
        free(s->path);
        free(s->activated_path);
        free(s);
        return NULL;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "frame.h"
#include "util.h"

/* The receive buffer starts small and grows up to one maximal frame. */
#define CONN_RBUF_INITIAL (64u * 1024u)
#define CONN_RBUF_MAX (CMWQ_FRAME_HEADER_SIZE + CMWQ_FRAME_MAX_PAYLOAD)

struct conn {
        int fd;
        uint64_t next_id;

        uint8_t *rbuf;
        size_t rlen;            /* bytes in rbuf */
        size_t rsize;           /* allocated size of rbuf */

        uint32_t daemon_protocol;
        char *daemon_name;
        uint32_t max_payload;   /* what the daemon accepts from us */
        char *last_error;
        int fds[CONN_PASS_FDS_MAX];     /* received, not yet taken */
        unsigned nr_fds;
};

int conn_socket_path(const char *explicit_path, char **ret_path) {
        const char *e;
        char *p;

        if (explicit_path)
                p = strdup(explicit_path);
        else if ((e = getenv("CMWQ_SOCKET")) && *e)
                p = strdup(e);
        else {
                struct stat st;

                p = NULL;
                e = getenv("XDG_RUNTIME_DIR");
                if (e && *e) {
                        if (asprintf(&p, "%s/" CONN_USER_SOCKET_NAME, e) < 0)
                                return -ENOMEM;
                        if (stat(p, &st) < 0 || !S_ISSOCK(st.st_mode)) {
                                free(p);
                                p = NULL;
                        }
                }
                if (!p)
                        p = strdup(CONN_SYSTEM_SOCKET_PATH);
        }
        if (!p)
                return -ENOMEM;

        *ret_path = p;
        return 0;
}

int conn_new(struct conn **ret) {
        struct conn *c;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->fd = -1;
        c->max_payload = CMWQ_FRAME_MAX_PAYLOAD;
        *ret = c;
        return 0;
}

struct conn *conn_close(struct conn *c) {
        if (!c)
                return NULL;
        closep(&c->fd);
        for (unsigned i = 0; i < c->nr_fds; i++)
                close(c->fds[i]);
        free(c->rbuf);
        free(c->daemon_name);
        free(c->last_error);
        free(c);
        return NULL;
}

const char *conn_last_error(const struct conn *c) {
        return c->last_error;
}

uint32_t conn_daemon_protocol(const struct conn *c) {
        return c->daemon_protocol;
}

const char *conn_daemon_name(const struct conn *c) {
        return c->daemon_name;
}

uint32_t conn_max_payload(const struct conn *c) {
        return c->max_payload;
}

int conn_fd(const struct conn *c) {
        return c->fd;
}

static void conn_set_error(struct conn *c, const char *msg) {
        free(c->last_error);
        c->last_error = msg && *msg ? strdup(msg) : NULL;
}

static int conn_send_all(int fd, const uint8_t *p, size_t n) {
        while (n > 0) {
                ssize_t k;

                k = send(fd, p, n, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                /* A non-blocking socket (the library's): a
                                 * frame is sent whole, so wait for room. */
                                struct pollfd pfd = { .fd = fd, .events = POLLOUT };

                                if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                                        return -errno;
                                continue;
                        }
                        return -errno;
                }
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

static int conn_send(struct conn *c, const Cmwq__Request *req) {
        _cleanup_(freep) uint8_t *buf = NULL;
        size_t len;

        len = cmwq__request__get_packed_size(req);
        if (len > c->max_payload)
                return -EMSGSIZE;

        buf = malloc(CMWQ_FRAME_HEADER_SIZE + len);
        if (!buf)
                return -ENOMEM;
        frame_header_encode(buf, (uint32_t) len);
        if (cmwq__request__pack(req, buf + CMWQ_FRAME_HEADER_SIZE) != len)
                return -EINVAL;

        return conn_send_all(c->fd, buf, CMWQ_FRAME_HEADER_SIZE + len);
}

/* Reads into rbuf, keeping the file descriptors that come with the bytes
 * (the daemon's reply to CallbackAttach carries two) until taken. */
static ssize_t conn_recv_bytes(struct conn *c) {
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int) * CONN_PASS_FDS_MAX)];
        } control;
        struct iovec iov = { .iov_base = c->rbuf + c->rlen, .iov_len = c->rsize - c->rlen };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = &control,
                .msg_controllen = sizeof(control),
        };
        ssize_t k;

        k = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
        if (k < 0)
                return k;
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
                if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
                        continue;
                for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                        int fd;

                        memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(fd));
                        if (c->nr_fds < CONN_PASS_FDS_MAX)
                                c->fds[c->nr_fds++] = fd;
                        else
                                close(fd);
                }
        }
        return k;
}

/* Read one whole frame and decode it.  Bytes after it stay buffered. */
static int conn_recv(struct conn *c, Cmwq__Response **ret) {
        for (;;) {
                uint32_t payload_len;
                size_t frame_len;
                ssize_t k;
                int r;

                r = frame_parse(c->rbuf, c->rlen, CMWQ_FRAME_MAX_PAYLOAD, &payload_len, &frame_len);
                if (r < 0)
                        return r;
                if (r > 0) {
                        Cmwq__Response *resp;

                        resp = cmwq__response__unpack(NULL, payload_len, c->rbuf + CMWQ_FRAME_HEADER_SIZE);
                        memmove(c->rbuf, c->rbuf + frame_len, c->rlen - frame_len);
                        c->rlen -= frame_len;
                        if (!resp)
                                return -EBADMSG;
                        *ret = resp;
                        return 0;
                }

                if (c->rlen == c->rsize) {
                        size_t n = c->rsize == 0 ? CONN_RBUF_INITIAL : c->rsize * 2;
                        uint8_t *b;

                        if (n > CONN_RBUF_MAX)
                                n = CONN_RBUF_MAX;
                        if (n <= c->rsize)      /* cannot happen: frame_parse bounds the frame */
                                return -EMSGSIZE;
                        b = realloc(c->rbuf, n);
                        if (!b)
                                return -ENOMEM;
                        c->rbuf = b;
                        c->rsize = n;
                }

                k = conn_recv_bytes(c);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -ECONNRESET;
                c->rlen += (size_t) k;
        }
}

int conn_send_request(struct conn *c, Cmwq__Request *req) {
        if (!c || c->fd < 0)
                return -ENOTCONN;

        req->id = ++c->next_id;
        return conn_send(c, req);
}

int conn_take_fds(struct conn *c, int *fds, unsigned max) {
        unsigned n = c->nr_fds < max ? c->nr_fds : max;

        memcpy(fds, c->fds, n * sizeof(int));
        for (unsigned i = n; i < c->nr_fds; i++)
                close(c->fds[i]);
        c->nr_fds = 0;
        return (int) n;
}

int conn_read_response(struct conn *c, Cmwq__Response **ret) {
        if (!c || c->fd < 0)
                return -ENOTCONN;
        return conn_recv(c, ret);
}

int conn_call(struct conn *c, Cmwq__Request *req, Cmwq__Response **ret) {
        int r;

        r = conn_send_request(c, req);
        if (r < 0)
                return r;

        for (;;) {
                Cmwq__Response *resp = NULL;

                r = conn_recv(c, &resp);
                if (r < 0)
                        return r;

                if (resp->id == req->id) {
                        *ret = resp;
                        return 0;
                }
                if (resp->id == 0 && resp->error != CMWQ__ERROR__OK) {
                        /* Not an answer to anything: the daemon is ending
                         * the conversation and says why. */
                        conn_set_error(c, resp->message ? resp->message : conn_error_to_string(resp->error));
                        r = resp->error == CMWQ__ERROR__VERSION_MISMATCH ? -EPROTONOSUPPORT : -EPROTO;
                        cmwq__response__free_unpacked(resp, NULL);
                        return r;
                }
                /* A stale answer to something we gave up on: skip it. */
                cmwq__response__free_unpacked(resp, NULL);
        }
}

static int conn_make_address(const char *path, struct sockaddr_un *ret_sa, socklen_t *ret_len) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t n = strlen(path);

        if (n == 0)
                return -EINVAL;
        if (path[0] == '@') {
                /* Abstract namespace: a leading NUL, no terminator. */
                if (n > sizeof(sa.sun_path))
                        return -ENAMETOOLONG;
                memcpy(sa.sun_path + 1, path + 1, n - 1);
                *ret_len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + n);
        } else {
                if (n >= sizeof(sa.sun_path))
                        return -ENAMETOOLONG;
                memcpy(sa.sun_path, path, n);
                *ret_len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + n + 1);
        }
        *ret_sa = sa;
        return 0;
}

static int conn_hello(struct conn *c, const char *client_name) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Hello hello = CMWQ__HELLO__INIT;
        Cmwq__Response *resp = NULL;
        int r;

        hello.version = CMWQ_PROTOCOL_VERSION;
        hello.client = (char *) client_name;
        req.body_case = CMWQ__REQUEST__BODY_HELLO;
        req.hello = &hello;

        /* A daemon that does not take the connection (over the per-user
         * limit 'connections', for instance) says why in a frame of id 0
         * and closes without reading the Hello; the Hello's send may then
         * fail, and the answer is that frame. */
        r = conn_send_request(c, &req);
        if (r < 0 && r != -EPIPE && r != -ECONNRESET)
                return r;
        for (;;) {
                int k = conn_recv(c, &resp);

                if (k < 0)
                        return r < 0 ? r : k;
                if (resp->id == req.id || (resp->id == 0 && resp->error != CMWQ__ERROR__OK))
                        break;
                cmwq__response__free_unpacked(resp, NULL);
        }

        if (resp->error != CMWQ__ERROR__OK) {
                conn_set_error(c, resp->message ? resp->message : conn_error_to_string(resp->error));
                r = conn_error_to_errno(resp->error);
                if (resp->error == CMWQ__ERROR__PROTOCOL)
                        r = -EPROTO;
        } else if (resp->body_case != CMWQ__RESPONSE__BODY_HELLO)
                r = -EPROTO;
        else if (resp->hello->version != CMWQ_PROTOCOL_VERSION) {
                char buf[96];

                snprintf(buf, sizeof(buf), "cmwqd speaks protocol version %u, this client %u",
                         resp->hello->version, CMWQ_PROTOCOL_VERSION);
                conn_set_error(c, buf);
                r = -EPROTONOSUPPORT;
        } else {
                c->daemon_protocol = resp->hello->version;
                if (resp->hello->daemon) {
                        c->daemon_name = strdup(resp->hello->daemon);
                        if (!c->daemon_name)
                                r = -ENOMEM;
                }
                if (resp->hello->has_max_frame && resp->hello->max_frame > 0 &&
                    resp->hello->max_frame < c->max_payload)
                        c->max_payload = resp->hello->max_frame;
        }

        cmwq__response__free_unpacked(resp, NULL);
        return r;
}

int conn_connect(struct conn *c, const char *path, const char *client_name) {
        _cleanup_(closep) int fd = -1;
        struct sockaddr_un sa;
        socklen_t salen;
        int r;

        if (c->fd >= 0)
                return -EISCONN;
        conn_set_error(c, NULL);

        r = conn_make_address(path, &sa, &salen);
        if (r < 0)
                return r;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;

        while (connect(fd, (const struct sockaddr *) &sa, salen) < 0)
                if (errno != EINTR)
                        return -errno;

        c->fd = TAKE_FD(fd);
        c->rlen = 0;
        r = conn_hello(c, client_name);
        if (r < 0) {
                closep(&c->fd);
                c->fd = -1;
                return r;
        }
        return 0;
}

int conn_error_to_errno(Cmwq__Error e) {
        switch (e) {
        case CMWQ__ERROR__OK:                   return 0;
        case CMWQ__ERROR__INVALID_ARGUMENT:     return -EINVAL;
        case CMWQ__ERROR__NOT_FOUND:            return -ENOENT;
        case CMWQ__ERROR__ALREADY_EXISTS:       return -EEXIST;
        case CMWQ__ERROR__PERMISSION_DENIED:    return -EPERM;
        case CMWQ__ERROR__BUSY:                 return -EBUSY;
        case CMWQ__ERROR__PROTOCOL:             return -EPROTO;
        case CMWQ__ERROR__VERSION_MISMATCH:     return -EPROTONOSUPPORT;
        case CMWQ__ERROR__LIMIT_EXCEEDED:       return -ENOSPC;
        case CMWQ__ERROR__TIMED_OUT:            return -ETIMEDOUT;
        case CMWQ__ERROR__CANCELLED:            return -ECANCELED;
        case CMWQ__ERROR__SHUTTING_DOWN:        return -ESHUTDOWN;
        case CMWQ__ERROR__INTERNAL:
        default:                                return -EIO;
        }
}

const char *conn_error_to_string(Cmwq__Error e) {
        switch (e) {
        case CMWQ__ERROR__OK:                   return "success";
        case CMWQ__ERROR__INVALID_ARGUMENT:     return "invalid argument";
        case CMWQ__ERROR__NOT_FOUND:            return "not found";
        case CMWQ__ERROR__ALREADY_EXISTS:       return "already exists";
        case CMWQ__ERROR__PERMISSION_DENIED:    return "permission denied";
        case CMWQ__ERROR__BUSY:                 return "busy";
        case CMWQ__ERROR__PROTOCOL:             return "protocol error";
        case CMWQ__ERROR__VERSION_MISMATCH:     return "protocol version mismatch";
        case CMWQ__ERROR__LIMIT_EXCEEDED:       return "limit exceeded";
        case CMWQ__ERROR__TIMED_OUT:            return "timed out";
        case CMWQ__ERROR__CANCELLED:            return "cancelled";
        case CMWQ__ERROR__INTERNAL:             return "internal error";
        case CMWQ__ERROR__SHUTTING_DOWN:        return "cmwqd is shutting down";
        default:                                return "unknown error";
        }
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client: the connection, open calls, and event-loop integration.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "client.h"
#include "util.h"

#define CLIENT_NAME "libcmwq-client"

static __thread char client_last_error[512];

const char *cmwq_last_error(void) {
        return client_last_error;
}

int client_error(int error, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(client_last_error, sizeof(client_last_error), fmt, ap);
        va_end(ap);
        return error;
}

int client_response_error(const Cmwq__Response *resp, const char *what) {
        int r = conn_error_to_errno(resp->error);

        return client_error(r, "%s: %s", what,
                            resp->message && *resp->message ? resp->message : conn_error_to_string(resp->error));
}

static const char *const system_queue_names[CLIENT_NR_SYSTEM_QUEUES] = {
        [CMWQ_SYSTEM] = "system",
        [CMWQ_SYSTEM_HIGHPRI] = "system_highpri",
        [CMWQ_SYSTEM_LONG] = "system_long",
        [CMWQ_SYSTEM_UNBOUND] = "system_unbound",
        [CMWQ_SYSTEM_FREEZABLE] = "system_freezable",
        [CMWQ_SYSTEM_FREEZABLE_UNBOUND] = "system_freezable_unbound",
};

void client_call_free(struct client_call *call) {
        if (!call)
                return;
        if (call->resp)
                cmwq__response__free_unpacked(call->resp, NULL);
        free(call);
}

static void client_wake(struct cmwq *c) {
        uint64_t one = 1;

        /* Only fails when the counter would overflow: it is readable then. */
        (void) !write(c->wake_fd, &one, sizeof(one));
}

static void client_complete_locked(struct cmwq *c, struct client_call *call) {
        list_del_init(&call->entry);
        call->done = true;
        if (call->complete) {
                list_add_tail(&call->entry, &c->ready);
                client_wake(c);
        }
        pthread_cond_broadcast(&c->cond);
}

/* The transport failed: every open call ends with @error, now and later. */
static void client_fail_locked(struct cmwq *c, int error) {
        if (c->dead)
                return;
        c->dead = error;
        (void) epoll_ctl(c->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        while (!list_empty(&c->calls)) {
                struct client_call *call = list_first_entry(&c->calls, struct client_call, entry);

                call->error = error;
                client_complete_locked(c, call);
        }
        pthread_cond_broadcast(&c->cond);
}

int client_lost_error(struct cmwq *c, int error) {
        const char *reason = __atomic_load_n(&c->dead_reason, __ATOMIC_ACQUIRE);

        if (reason)
                return client_error(error, "cmwqd ended the connection: %s", reason);
        if (error == -ECONNRESET)
                return client_error(error, "the connection to cmwqd was lost (the daemon exited or restarted)");
        return client_error(error, "the connection to cmwqd failed: %s", strerror(-error));
}

static int client_dead_error(struct cmwq *c) {
        return client_lost_error(c, c->dead);
}

static void client_dispatch_locked(struct cmwq *c, Cmwq__Response *resp) {
        struct client_call *call;

        if (resp->id == 0 && resp->error == CMWQ__ERROR__OK &&
            resp->body_case == CMWQ__RESPONSE__BODY_CALLBACK_FREEZE) {
                client_work_freeze(c, resp->callback_freeze->workqueue, resp->callback_freeze->frozen,
                                   resp->callback_freeze->has_seq ? resp->callback_freeze->seq : 0);
                cmwq__response__free_unpacked(resp, NULL);
                return;
        }

        if (resp->id == 0 && resp->error != CMWQ__ERROR__OK) {
                /* Not an answer: the daemon ends the conversation and says why
                 * (kept for every thread whose call fails because of it). */
                client_response_error(resp, "cmwqd closed the connection");
                if (!c->dead_reason && resp->message)
                        __atomic_store_n(&c->dead_reason, strdup(resp->message), __ATOMIC_RELEASE);
                cmwq__response__free_unpacked(resp, NULL);
                client_fail_locked(c, -EPROTO);
                return;
        }

        list_for_each_entry(call, &c->calls, entry)
                if (call->id == resp->id) {
                        call->resp = resp;
                        client_complete_locked(c, call);
                        return;
                }
        /* An answer nobody waits for any more. */
        cmwq__response__free_unpacked(resp, NULL);
}

/* Reads every whole response there is, with the lock held and the reader
 * role claimed.  Returns 0 or the transport's negative errno. */
static int client_read_available_locked(struct cmwq *c) {
        for (;;) {
                Cmwq__Response *resp = NULL;
                int r;

                r = conn_read_response(c->conn, &resp);
                if (r == -EAGAIN)
                        return 0;
                if (r < 0) {
                        client_fail_locked(c, r);
                        return r;
                }
                client_dispatch_locked(c, resp);
        }
}

/* Blocks (without the lock) until the socket is readable, then reads. */
static void client_read_blocking_locked(struct cmwq *c) {
        struct pollfd pfd[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = c->stop_fd, .events = POLLIN } };
        int r;

        pthread_mutex_unlock(&c->lock);
        r = poll(pfd, 2, -1);
        pthread_mutex_lock(&c->lock);
        if (r < 0 && errno != EINTR) {
                client_fail_locked(c, -errno);
                return;
        }
        if (!c->dead)
                (void) client_read_available_locked(c);
}

/* One turn of the reader loop: waits while another thread reads, or reads
 * itself (one thread at a time reads for all of them). */
static void client_read_turn_locked(struct cmwq *c) {
        if (c->reading) {
                pthread_cond_wait(&c->cond, &c->lock);
                return;
        }
        c->reading = true;
        client_read_blocking_locked(c);
        c->reading = false;
        /* Someone else may have to take over reading. */
        pthread_cond_broadcast(&c->cond);
}

static int client_send_locked(struct cmwq *c, Cmwq__Request *req, struct client_call *call) {
        int r;

        if (c->dead)
                return client_dead_error(c);

        r = conn_send_request(c->conn, req);
        if (r == -EMSGSIZE)
                return client_error(r, "the request is larger than cmwqd accepts (%u bytes)",
                                    conn_max_payload(c->conn));
        if (r < 0) {
                /* The daemon may have said why it ended the connection
                 * before it did: read that first. */
                if (r == -EPIPE || r == -ECONNRESET)
                        (void) client_read_available_locked(c);
                client_fail_locked(c, r == -EPIPE ? -ECONNRESET : r);
                return client_dead_error(c);
        }
        call->id = req->id;
        list_add_tail(&call->entry, &c->calls);
        return 0;
}

int client_take_fds(struct cmwq *c, int *fds, unsigned max) {
        int n;

        pthread_mutex_lock(&c->lock);
        n = conn_take_fds(c->conn, fds, max);
        pthread_mutex_unlock(&c->lock);
        return n;
}

int client_call(struct cmwq *c, Cmwq__Request *req, Cmwq__Response **ret) {
        struct client_call call = {};
        int r;

        list_init(&call.entry);
        pthread_mutex_lock(&c->lock);
        r = client_send_locked(c, req, &call);
        if (r < 0) {
                pthread_mutex_unlock(&c->lock);
                return r;
        }

        while (!call.done)
                client_read_turn_locked(c);
        pthread_mutex_unlock(&c->lock);

        if (call.error < 0)
                return client_lost_error(c, call.error);
        *ret = call.resp;
        return 0;
}

int client_call_simple(struct cmwq *c, Cmwq__Request *req, const char *what) {
        Cmwq__Response *resp = NULL;
        int r;

        r = client_call(c, req, &resp);
        if (r < 0)
                return r;
        r = resp->error != CMWQ__ERROR__OK ? client_response_error(resp, what) : 0;
        cmwq__response__free_unpacked(resp, NULL);
        return r;
}

int client_send_oneway(struct cmwq *c, Cmwq__Request *req) {
        int r;

        pthread_mutex_lock(&c->lock);
        if (c->dead)
                r = c->dead;
        else {
                r = conn_send_request(c->conn, req);
                if (r < 0)
                        client_fail_locked(c, r == -EPIPE ? -ECONNRESET : r);
        }
        pthread_mutex_unlock(&c->lock);
        return r;
}

void client_read_forever(struct cmwq *c) {
        pthread_mutex_lock(&c->lock);
        while (!c->dead && !c->stopping) {
                if (c->work_kick) {
                        /* The work lock comes before the connection's. */
                        c->work_kick = false;
                        pthread_mutex_unlock(&c->lock);
                        client_work_kick(c);
                        pthread_mutex_lock(&c->lock);
                        continue;
                }
                client_read_turn_locked(c);
        }
        pthread_mutex_unlock(&c->lock);
}

void client_wake_reader(struct cmwq *c) {
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        uint64_t one = 1;
        (void) !write(c->stop_fd, &one, sizeof(one));
}

int client_call_async(struct cmwq *c, Cmwq__Request *req, struct client_call *call) {
        int r;

        list_init(&call->entry);
        pthread_mutex_lock(&c->lock);
        r = client_send_locked(c, req, call);
        pthread_mutex_unlock(&c->lock);
        return r;
}

int cmwq_get_fd(struct cmwq *c) {
        if (!c)
                return client_error(-EINVAL, "no connection");
        return c->epoll_fd;
}

int cmwq_process(struct cmwq *c) {
        struct list_head ready;
        uint64_t counter;
        int n = 0, dead;

        if (!c)
                return client_error(-EINVAL, "no connection");
        list_init(&ready);
        pthread_mutex_lock(&c->lock);
        if (!c->reading && !c->dead) {
                c->reading = true;
                (void) client_read_available_locked(c);
                c->reading = false;
                pthread_cond_broadcast(&c->cond);
        }
        (void) !read(c->wake_fd, &counter, sizeof(counter));
        while (!list_empty(&c->ready))
                list_move_tail(c->ready.next, &ready);
        dead = c->dead;
        pthread_mutex_unlock(&c->lock);

        while (!list_empty(&ready)) {
                struct client_call *call = list_first_entry(&ready, struct client_call, entry);

                list_del_init(&call->entry);
                call->complete(c, call);
                client_call_free(call);
                n++;
        }

        if (dead < 0)
                return client_lost_error(c, dead);
        return n;
}

/* ---- connect ------------------------------------------------------------- */

static bool connect_error_means_absent(int r) {
        return r == -ENOENT || r == -ECONNREFUSED || r == -ENOTDIR;
}

static int client_setup_fds(struct cmwq *c) {
        struct epoll_event ev = { .events = EPOLLIN };
        int flags;

        c->fd = conn_fd(c->conn);
        flags = fcntl(c->fd, F_GETFL);
        if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;

        c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->wake_fd < 0)
                return -errno;
        c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->stop_fd < 0)
                return -errno;
        c->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (c->epoll_fd < 0)
                return -errno;
        if (epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->fd, &ev) < 0 ||
            epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->wake_fd, &ev) < 0)
                return -errno;
        return 0;
}

static struct cmwq *client_new(void) {
        struct cmwq *c = calloc(1, sizeof(*c));

        if (!c)
                return NULL;
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->cond, NULL);
        c->fd = c->epoll_fd = c->wake_fd = c->stop_fd = -1;
        pthread_mutex_init(&c->work_init_lock, NULL);
        list_init(&c->calls);
        list_init(&c->ready);
        list_init(&c->workqueues);
        for (size_t i = 0; i < CLIENT_NR_SYSTEM_QUEUES; i++) {
                c->system[i].c = c;
                c->system[i].name = (char *) system_queue_names[i];
                c->system[i].builtin = true;
                list_init(&c->system[i].entry);
                client_workqueue_init(&c->system[i]);
                if (i == CMWQ_SYSTEM_UNBOUND || i == CMWQ_SYSTEM_FREEZABLE_UNBOUND) {
                        c->system[i].flags = CMWQ_WQ_UNBOUND;
                        /* The kernel's system_unbound_wq, and cmwqd's. */
                        c->system[i].max_active = CMWQ_MAX_ACTIVE;
                }
                if (i == CMWQ_SYSTEM_HIGHPRI)
                        c->system[i].flags = CMWQ_WQ_HIGHPRI;
        }
        return c;
}

/* Tries one socket.  Returns 0 with c->conn connected, or a negative errno
 * with a message in @msg. */
static int client_try(struct cmwq *c, const char *path, char *msg, size_t msglen) {
        struct conn *conn = NULL;
        int r;

        r = conn_new(&conn);
        if (r < 0)
                return r;
        r = conn_connect(conn, path, CLIENT_NAME);
        if (r < 0) {
                const char *why = conn_last_error(conn);

                snprintf(msg, msglen, "%s: %s", path, why ? why : strerror(-r));
                conn_close(conn);
                return r;
        }
        c->conn = conn;
        return 0;
}

struct cmwq *cmwq_connect(const char *socket_path) {
        _cleanup_(freep) char *user_path = NULL;
        const char *candidates[2];
        char tried[2][300] = {};
        size_t n = 0, i;
        struct cmwq *c;
        const char *e;
        int r = -ECONNREFUSED;

        if (socket_path)
                candidates[n++] = socket_path;
        else if ((e = getenv("CMWQ_SOCKET")) && *e)
                candidates[n++] = e;
        else {
                e = getenv("XDG_RUNTIME_DIR");
                if (e && *e) {
                        if (asprintf(&user_path, "%s/" CONN_USER_SOCKET_NAME, e) < 0) {
                                errno = -client_error(-ENOMEM, "out of memory");
                                return NULL;
                        }
                        candidates[n++] = user_path;
                }
                candidates[n++] = CONN_SYSTEM_SOCKET_PATH;
        }

        c = client_new();
        if (!c) {
                errno = -client_error(-ENOMEM, "out of memory");
                return NULL;
        }

        for (i = 0; i < n; i++) {
                r = client_try(c, candidates[i], tried[i], sizeof(tried[i]));
                if (r >= 0 || !connect_error_means_absent(r))
                        break;
        }

        if (r < 0) {
                if (connect_error_means_absent(r)) {
                        r = -ECONNREFUSED;
                        client_error(r, "no cmwqd is running (tried %s%s%s)", tried[0],
                                     n > 1 ? "; " : "", n > 1 ? tried[1] : "");
                } else
                        client_error(r, "cannot talk to cmwqd at %s", tried[i]);
                cmwq_disconnect(c);
                errno = -r;
                return NULL;
        }

        r = client_setup_fds(c);
        if (r < 0) {
                client_error(r, "cannot set up the connection: %s", strerror(-r));
                cmwq_disconnect(c);
                errno = -r;
                return NULL;
        }
        return c;
}

void cmwq_disconnect(struct cmwq *c) {
        struct cmwq_workqueue *wq, *wn;
        struct client_call *call, *cn;

        if (!c)
                return;
        /* Worker threads finish what runs and end; nothing is read after. */
        if (c->work)
                client_work_stop(c);
        list_for_each_entry_safe(call, cn, &c->ready, entry)
                client_call_free(call);
        /* Blocking calls live on their callers' stacks; by contract none is
         * open.  Only async ones can be left. */
        list_for_each_entry_safe(call, cn, &c->calls, entry)
                if (call->complete)
                        client_call_free(call);
        list_for_each_entry_safe(wq, wn, &c->workqueues, entry) {
                free(wq->name);
                free(wq);
        }
        conn_close(c->conn);
        if (c->epoll_fd >= 0)
                close(c->epoll_fd);
        if (c->wake_fd >= 0)
                close(c->wake_fd);
        if (c->stop_fd >= 0)
                close(c->stop_fd);
        pthread_mutex_destroy(&c->work_init_lock);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c->dead_reason);
        free(c);
}

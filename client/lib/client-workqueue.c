/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client: workqueue handles and the calls on whole queues.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "request.h"

/* The protocol's FLAG_ORDERED (the kernel's __WQ_ORDERED). */
#define CLIENT_WQ_ORDERED (1u << 17)
#define CLIENT_WQ_FLAGS (CMWQ_WQ_UNBOUND | CMWQ_WQ_FREEZABLE | CMWQ_WQ_MEM_RECLAIM | \
                         CMWQ_WQ_HIGHPRI | CMWQ_WQ_CPU_INTENSIVE)

static struct cmwq_workqueue *workqueue_handle_new(struct cmwq *c, const char *name, unsigned flags,
                                                   unsigned max_active) {
        struct cmwq_workqueue *wq = calloc(1, sizeof(*wq));

        if (!wq || !(wq->name = strdup(name))) {
                free(wq);
                errno = -client_error(-ENOMEM, "out of memory");
                return NULL;
        }
        wq->c = c;
        wq->flags = flags;
        wq->max_active = max_active;
        client_workqueue_init(wq);
        pthread_mutex_lock(&c->lock);
        list_add_tail(&wq->entry, &c->workqueues);
        pthread_mutex_unlock(&c->lock);
        return wq;
}

static void workqueue_handle_free(struct cmwq_workqueue *wq) {
        struct cmwq *c = wq->c;

        if (wq->builtin)
                return;
        client_workqueue_forget(wq);
        pthread_mutex_lock(&c->lock);
        list_del_init(&wq->entry);
        pthread_mutex_unlock(&c->lock);
        free(wq->name);
        free(wq);
}

static struct cmwq_workqueue *workqueue_create(struct cmwq *c, const char *name, unsigned flags,
                                               unsigned max_active) {
        const struct request_create_args create = {
                .name = name,
                .flags = flags,
                .has_max_active = true,
                .max_active = max_active,
                /* As the kernel's alloc_workqueue() lives with its module:
                 * the daemon destroys the queue when this connection ends. */
                .owned_by_connection = true,
        };
        struct request req;
        int r;

        if (!c || !name) {
                errno = -client_error(-EINVAL, "no connection or no name");
                return NULL;
        }
        r = client_call_simple(c, request_create(&req, &create), "cannot create the workqueue");
        if (r < 0) {
                errno = -r;
                return NULL;
        }
        return workqueue_handle_new(c, name, flags, (flags & CLIENT_WQ_ORDERED) ? 1 : max_active);
}

struct cmwq_workqueue *cmwq_alloc_workqueue(struct cmwq *c, const char *name, unsigned flags,
                                            unsigned max_active) {
        if (flags & ~CLIENT_WQ_FLAGS) {
                errno = -client_error(-EINVAL, "unknown workqueue flags 0x%x", flags & ~CLIENT_WQ_FLAGS);
                return NULL;
        }
        return workqueue_create(c, name, flags, max_active);
}

struct cmwq_workqueue *cmwq_alloc_ordered_workqueue(struct cmwq *c, const char *name, unsigned flags) {
        if (flags & ~(CMWQ_WQ_FREEZABLE | CMWQ_WQ_MEM_RECLAIM | CMWQ_WQ_HIGHPRI)) {
                errno = -client_error(-EINVAL, "an ordered workqueue takes only FREEZABLE, MEM_RECLAIM and HIGHPRI");
                return NULL;
        }
        return workqueue_create(c, name, flags | CMWQ_WQ_UNBOUND | CLIENT_WQ_ORDERED, 1);
}

struct cmwq_workqueue *cmwq_open_workqueue(struct cmwq *c, const char *name) {
        struct request req;
        Cmwq__Response *resp = NULL;
        unsigned flags = 0, max_active = 0;
        bool found = false;
        int r;

        if (!c || !name) {
                errno = -client_error(-EINVAL, "no connection or no name");
                return NULL;
        }
        r = client_call(c, request_empty(&req, CMWQ__REQUEST__BODY_LIST), &resp);
        if (r < 0) {
                errno = -r;
                return NULL;
        }
        if (resp->error != CMWQ__ERROR__OK)
                r = client_response_error(resp, "cannot list the workqueues");
        else if (resp->body_case == CMWQ__RESPONSE__BODY_LIST)
                for (size_t i = 0; i < resp->list->n_workqueues; i++)
                        if (strcmp(resp->list->workqueues[i]->name, name) == 0) {
                                found = true;
                                flags = resp->list->workqueues[i]->flags;
                                max_active = resp->list->workqueues[i]->max_active;
                        }
        cmwq__response__free_unpacked(resp, NULL);
        if (r < 0) {
                errno = -r;
                return NULL;
        }
        if (!found) {
                errno = -client_error(-ENOENT, "no workqueue '%s'", name);
                return NULL;
        }
        return workqueue_handle_new(c, name, flags, max_active);
}

struct cmwq_workqueue *cmwq_system_workqueue(struct cmwq *c, enum cmwq_system_queue which) {
        if (!c || (unsigned) which >= CLIENT_NR_SYSTEM_QUEUES) {
                errno = -client_error(-EINVAL, "no such system workqueue");
                return NULL;
        }
        return &c->system[which];
}

const char *cmwq_workqueue_name(const struct cmwq_workqueue *wq) {
        return wq ? wq->name : NULL;
}

/* A request naming one queue that answers "done" or an error. */
static int workqueue_call(struct cmwq_workqueue *wq, Cmwq__Request__BodyCase kind, const char *what) {
        struct request req;

        return client_call_simple(wq->c, request_workqueue(&req, kind, wq->name), what);
}

int cmwq_destroy_workqueue(struct cmwq_workqueue *wq) {
        int r;

        if (!wq)
                return client_error(-EINVAL, "no workqueue");
        if (wq->builtin)
                return client_error(-EPERM, "%s is a built-in workqueue and cannot be destroyed", wq->name);
        /* Like the kernel's destroy_workqueue(): drain first, delayed work
         * waiting for its timer included (it runs now). */
        r = client_workqueue_destroy_callbacks(wq);
        if (r == -EDEADLK)
                return r;       /* nothing was done: the handle stays */
        r = workqueue_call(wq, CMWQ__REQUEST__BODY_DESTROY, "cannot destroy the workqueue");
        workqueue_handle_free(wq);
        return r;
}

int cmwq_workqueue_set_max_active(struct cmwq_workqueue *wq, unsigned max_active) {
        struct request req;
        int r;

        if (!wq)
                return client_error(-EINVAL, "no workqueue");
        r = client_call_simple(wq->c, request_set_max_active(&req, wq->name, max_active), "cannot set max_active");
        if (r >= 0)
                client_workqueue_set_max_active(wq, max_active);
        return r;
}

int cmwq_flush_workqueue(struct cmwq_workqueue *wq) {
        int r;

        if (!wq)
                return client_error(-EINVAL, "no workqueue");
        r = client_workqueue_flush_callbacks(wq, false);
        if (r < 0)
                return r;
        return workqueue_call(wq, CMWQ__REQUEST__BODY_FLUSH, "cannot flush the workqueue");
}

int cmwq_drain_workqueue(struct cmwq_workqueue *wq) {
        int r;

        if (!wq)
                return client_error(-EINVAL, "no workqueue");
        /* As the kernel's __WQ_DRAINING, for the whole call: the callbacks
         * first, then cmwqd's exec items, then what the queue's own
         * callbacks queued meanwhile. */
        client_workqueue_drain_hold(wq, true);
        r = client_workqueue_flush_callbacks(wq, true);
        if (r >= 0)
                r = workqueue_call(wq, CMWQ__REQUEST__BODY_DRAIN, "cannot drain the workqueue");
        if (r >= 0)
                r = client_workqueue_flush_callbacks(wq, true);
        client_workqueue_drain_hold(wq, false);
        return r;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The requests cmwqctl and libcmwq-client send, built in one place.
 *
 * A struct request holds a Cmwq__Request and the body it points to, so that
 * the whole message lives where the caller put the struct (its stack, most
 * often) and borrows the strings it is given: nothing here allocates, and
 * nothing needs freeing.  Each builder fills @r from scratch and returns the
 * request to pass to conn_call() or client_call().
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmwq.pb-c.h"

struct request {
        Cmwq__Request req;
        union {
                Cmwq__Empty empty;
                Cmwq__CreateWorkqueue create;
                Cmwq__WorkqueueName workqueue;
                Cmwq__SetMaxActive set_max_active;
                Cmwq__FreezeRequest freeze;
                Cmwq__Submit submit;
                Cmwq__ItemId item;
        } body;
};

/* list, pools, stats, snapshot, items: a request with an empty body. */
Cmwq__Request *request_empty(struct request *r, Cmwq__Request__BodyCase kind);

/* What create says.  max_active and on_interrupt are sent only when set,
 * so that the daemon's defaults apply otherwise. */
struct request_create_args {
        const char *name;
        uint32_t flags;                 /* CMWQ__WORKQUEUE_FLAG__* bits */
        bool has_max_active;
        uint32_t max_active;
        bool has_on_interrupt;
        Cmwq__InterruptPolicy on_interrupt;
        bool owned_by_connection;       /* destroyed when this connection ends */
};
Cmwq__Request *request_create(struct request *r, const struct request_create_args *a);

/* destroy, flush, drain: a request naming one workqueue. */
Cmwq__Request *request_workqueue(struct request *r, Cmwq__Request__BodyCase kind, const char *name);

Cmwq__Request *request_set_max_active(struct request *r, const char *name, uint32_t max_active);

/* freeze (@freeze true) or thaw @name, or every queue if @name is NULL;
 * @timeout_usec is sent only if not NULL. */
Cmwq__Request *request_freeze(struct request *r, bool freeze, const char *name, const uint64_t *timeout_usec);

/* wait, show, cancel: a request naming one item. */
Cmwq__Request *request_item(struct request *r, Cmwq__Request__BodyCase kind, uint64_t id);

/* What a submission says.  The arrays are borrowed, not copied. */
struct request_submit_args {
        const char *workqueue;
        char *const *argv;
        size_t n_argv;
        char *const *env;
        size_t n_env;
        const char *cwd;
        const void *stdin_data;         /* NULL: no stdin payload (else even if empty) */
        size_t stdin_len;
        bool pin_cpu;                   /* run on @cpu (if >= 0); else, as queue_work(), */
        int cpu;                        /*   on the CPU the caller runs on */
        uint64_t delay_usec;            /* 0: none */
        uint64_t timeout_usec;          /* 0: none */
        const char *key;                /* NULL: none */
        bool wait;                      /* answer when the item has ended */
};
Cmwq__Request *request_submit(struct request *r, const struct request_submit_args *a);

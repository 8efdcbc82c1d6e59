/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The requests cmwqctl and libcmwq-client send (request.h).
 */
#include <sched.h>

#include "request.h"

static Cmwq__Request *request_init(struct request *r, Cmwq__Request__BodyCase kind) {
        *r = (struct request) { .req = CMWQ__REQUEST__INIT };
        r->req.body_case = kind;
        return &r->req;
}

Cmwq__Request *request_empty(struct request *r, Cmwq__Request__BodyCase kind) {
        request_init(r, kind);
        r->body.empty = (Cmwq__Empty) CMWQ__EMPTY__INIT;
        switch (kind) {
        case CMWQ__REQUEST__BODY_POOLS:
                r->req.pools = &r->body.empty;
                break;
        case CMWQ__REQUEST__BODY_STATS:
                r->req.stats = &r->body.empty;
                break;
        case CMWQ__REQUEST__BODY_SNAPSHOT:
                r->req.snapshot = &r->body.empty;
                break;
        case CMWQ__REQUEST__BODY_ITEMS:
                r->req.items = &r->body.empty;
                break;
        default:
                r->req.list = &r->body.empty;
                break;
        }
        return &r->req;
}

Cmwq__Request *request_create(struct request *r, const struct request_create_args *a) {
        Cmwq__CreateWorkqueue *c = &r->body.create;

        request_init(r, CMWQ__REQUEST__BODY_CREATE);
        *c = (Cmwq__CreateWorkqueue) CMWQ__CREATE_WORKQUEUE__INIT;
        c->name = (char *) a->name;
        c->has_flags = true;
        c->flags = a->flags;
        c->has_max_active = a->has_max_active;
        c->max_active = a->max_active;
        c->has_on_interrupt = a->has_on_interrupt;
        c->on_interrupt = a->on_interrupt;
        if (a->owned_by_connection) {
                c->has_owned_by_connection = true;
                c->owned_by_connection = true;
        }
        r->req.create = c;
        return &r->req;
}

Cmwq__Request *request_workqueue(struct request *r, Cmwq__Request__BodyCase kind, const char *name) {
        request_init(r, kind);
        r->body.workqueue = (Cmwq__WorkqueueName) CMWQ__WORKQUEUE_NAME__INIT;
        r->body.workqueue.name = (char *) name;
        switch (kind) {
        case CMWQ__REQUEST__BODY_DESTROY:
                r->req.destroy = &r->body.workqueue;
                break;
        case CMWQ__REQUEST__BODY_FLUSH:
                r->req.flush = &r->body.workqueue;
                break;
        default:
                r->req.drain = &r->body.workqueue;
                break;
        }
        return &r->req;
}

Cmwq__Request *request_set_max_active(struct request *r, const char *name, uint32_t max_active) {
        request_init(r, CMWQ__REQUEST__BODY_SET_MAX_ACTIVE);
        r->body.set_max_active = (Cmwq__SetMaxActive) CMWQ__SET_MAX_ACTIVE__INIT;
        r->body.set_max_active.name = (char *) name;
        r->body.set_max_active.max_active = max_active;
        r->req.set_max_active = &r->body.set_max_active;
        return &r->req;
}

Cmwq__Request *request_freeze(struct request *r, bool freeze, const char *name, const uint64_t *timeout_usec) {
        Cmwq__FreezeRequest *f = &r->body.freeze;

        request_init(r, freeze ? CMWQ__REQUEST__BODY_FREEZE : CMWQ__REQUEST__BODY_THAW);
        *f = (Cmwq__FreezeRequest) CMWQ__FREEZE_REQUEST__INIT;
        f->name = (char *) name;
        if (timeout_usec) {
                f->has_timeout_usec = true;
                f->timeout_usec = *timeout_usec;
        }
        if (freeze)
                r->req.freeze = f;
        else
                r->req.thaw = f;
        return &r->req;
}

Cmwq__Request *request_item(struct request *r, Cmwq__Request__BodyCase kind, uint64_t id) {
        request_init(r, kind);
        r->body.item = (Cmwq__ItemId) CMWQ__ITEM_ID__INIT;
        r->body.item.id = id;
        switch (kind) {
        case CMWQ__REQUEST__BODY_WAIT:
                r->req.wait = &r->body.item;
                break;
        case CMWQ__REQUEST__BODY_SHOW:
                r->req.show = &r->body.item;
                break;
        default:
                r->req.cancel = &r->body.item;
                break;
        }
        return &r->req;
}

Cmwq__Request *request_submit(struct request *r, const struct request_submit_args *a) {
        Cmwq__Submit *s = &r->body.submit;
        int cpu;

        request_init(r, CMWQ__REQUEST__BODY_SUBMIT);
        *s = (Cmwq__Submit) CMWQ__SUBMIT__INIT;
        s->workqueue = (char *) a->workqueue;
        s->n_argv = a->n_argv;
        s->argv = (char **) a->argv;
        s->n_env = a->n_env;
        s->env = (char **) a->env;
        s->cwd = (char *) a->cwd;
        if (a->stdin_data) {
                s->has_stdin_payload = true;
                s->stdin_payload = (ProtobufCBinaryData) { a->stdin_len, (uint8_t *) a->stdin_data };
        }
        /* Like queue_work(): the CPU we run on, unless one was asked for. */
        cpu = a->pin_cpu ? a->cpu : sched_getcpu();
        if (cpu >= 0) {
                s->has_cpu = true;
                s->cpu = cpu;
        }
        if (a->delay_usec) {
                s->has_delay_usec = true;
                s->delay_usec = a->delay_usec;
        }
        if (a->timeout_usec) {
                s->has_timeout_usec = true;
                s->timeout_usec = a->timeout_usec;
        }
        s->key = (char *) a->key;
        if (a->wait) {
                s->has_wait = true;
                s->wait = true;
        }
        r->req.submit = s;
        return &r->req;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The D-Bus front end: org.cmwq.cmwqd1 on the system bus (the session bus
 * for --user), driven from the daemon's one loop through dbus/bus-event.c.  It is
 * a thin adapter over the same core calls as the socket front end
 * (ipc/dispatch.c): the caller is the D-Bus sender's credentials, the
 * core's negative errno becomes an org.cmwq.cmwqd1.Error.* name at the edge,
 * and requests that wait (flush, drain, destroy, wait, cancel, freeze) are
 * answered from a core_waiter once done, never by blocking the loop.
 *
 *   /org/cmwq/cmwqd1                      org.cmwq.cmwqd1.Manager (+ ObjectManager)
 *   /org/cmwq/cmwqd1/workqueue/<escaped>  org.cmwq.cmwqd1.Workqueue
 *
 * dbus/bus.c owns the connection, the senders' credentials, the waiting
 * calls and what the core's observer hook turns into signals;
 * dbus/objects.c holds the two interfaces' vtables.
 */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

#include "core/core.h"
#include "list.h"
#include "store/store.h"

struct event;
struct event_base;
struct bus_event;

#define CMWQ_DBUS_NAME "org.cmwq.cmwqd1"
#define CMWQ_DBUS_PATH "/org/cmwq/cmwqd1"
#define CMWQ_DBUS_WORKQUEUE_PREFIX "/org/cmwq/cmwqd1/workqueue"
#define CMWQ_DBUS_MANAGER_INTERFACE "org.cmwq.cmwqd1.Manager"
#define CMWQ_DBUS_WORKQUEUE_INTERFACE "org.cmwq.cmwqd1.Workqueue"

/* Calls that wait for the core (flush, wait, ...) one bus client may have open. */
#define IPC_DBUS_CALLS_PER_SENDER_MAX 1024u
/* Credentials of this many idle bus clients that were not admitted are
 * remembered (one round trip to the bus daemon per client, not per call).
 * An admitted client is kept until it leaves the bus. */
#define IPC_DBUS_SENDER_CACHE_MAX 64u

struct ipc_dbus;

/* Connects to the bus, publishes the objects and takes the name.  Returns a
 * negative errno when there is no bus or the name cannot be had; the
 * caller logs that and goes on without D-Bus.  When the bus daemon goes
 * away later (restarted), the connection is dropped with what hung on it
 * (waiting calls, held replies, the clients, their counted connections and
 * subscriptions: all gone with the old bus) and made again with back-off,
 * IPC_DBUS_RECONNECT_MIN_USEC doubling up to IPC_DBUS_RECONNECT_MAX_USEC,
 * until the objects are published and the name is taken again. */
#define IPC_DBUS_RECONNECT_MIN_USEC (100 * 1000ULL)
#define IPC_DBUS_RECONNECT_MAX_USEC (10 * 1000 * 1000ULL)
int ipc_dbus_new(struct event_base *base, struct core *core, bool user_mode, struct ipc_dbus **ret);
/* The first step of shutting down, before the core goes: waiting calls are
 * answered with ShuttingDown, the clients let go of their connections, no
 * more signals.  Replies held for the store stay held: the store's last
 * sync (store_stop()) sends those it makes durable. */
void ipc_dbus_stop(struct ipc_dbus *d);
/* Stops (if not yet), drops the replies still held (their records never
 * reached the disk, so the caller gets no acknowledgement) and leaves the
 * bus. */
struct ipc_dbus *ipc_dbus_free(struct ipc_dbus *d);
/* With a durable store, replies that acknowledge a change (a queued item, a
 * created queue) wait until the change is on disk, as on the socket. */
void ipc_dbus_set_store(struct ipc_dbus *d, struct store *store);

/* Internal between dbus/bus.c and dbus/objects.c. */

/* A bus client, known by its unique name, and its credentials. */
struct dbus_sender {
        struct list_head entry;
        char *name;
        struct core_caller caller;
        unsigned nr_calls;      /* waiting calls: never forgotten while > 0 */
        bool admitted;          /* counts toward its uid's 'connections' until it leaves */
        bool subscribed;        /* Subscribe(): gets the signals it may see */
};

/* What a waiting call replies with once the core is done. */
enum dbus_call_reply {
        DBUS_CALL_REPLY_EMPTY,
        DBUS_CALL_REPLY_ITEM,           /* the item (a{sv}) its waiter names */
        DBUS_CALL_REPLY_FREEZE,         /* empty; a timeout names the items that held it */
};

struct dbus_call {
        struct core_waiter waiter;
        struct list_head entry;
        struct ipc_dbus *dbus;
        struct dbus_sender *sender;
        sd_bus_message *message;
        enum dbus_call_reply reply;
        uint64_t item_id;               /* DBUS_CALL_REPLY_ITEM */
};

/* The last values of a queue's properties that were announced, so that
 * PropertiesChanged names only what changed, once per loop turn. */
struct dbus_workqueue {
        struct list_head entry;
        struct list_head dirty_entry;
        struct ipc_dbus *dbus;
        struct workqueue *wq;
        uint64_t announced[32];
};

struct ipc_dbus {
        struct core *core;
        sd_bus *bus;
        struct bus_event *event;
        struct core_observer observer;
        bool user_mode;
        struct list_head senders;       /* most recently used first */
        unsigned nr_senders;
        struct list_head calls;
        struct list_head workqueues;    /* struct dbus_workqueue */
        struct list_head dirty;
        struct event *announce;         /* emits PropertiesChanged for dirty queues */
        struct store *store;            /* borrowed; NULL: nothing is kept */
        struct store_listener store_listener;
        struct list_head held;          /* struct dbus_held_reply, by seq */
        bool stopped;                   /* ipc_dbus_stop() ran */
        /* The bus daemon went away (restarted): @bus is dropped and a new
         * connection is tried after @backoff_usec, doubled each time. */
        struct event_base *base;
        struct event *reconnect;
        uint64_t backoff_usec;
        bool lost;                      /* from the drop until the name is ours again */
};

/* Sends @reply (taking it) once everything the store took so far is on
 * disk: at once when it already is, or without a store. */
int ipc_dbus_send_durable(struct ipc_dbus *d, sd_bus_message *reply);

int ipc_dbus_objects_add(struct ipc_dbus *d);
struct dbus_workqueue *ipc_dbus_workqueue_find(struct ipc_dbus *d, const struct workqueue *wq);
/* The object of @wq: CMWQ_DBUS_WORKQUEUE_PREFIX/<escaped "UID/NAME">, or of
 * the bare name for a built-in queue. */
int ipc_dbus_workqueue_path(const struct workqueue *wq, char **ret);
/* The values of @wq's changing properties, in the order of the
 * NULL-terminated ipc_dbus_workqueue_changing[]. */
void ipc_dbus_workqueue_values(const struct workqueue *wq, uint64_t *values);
extern const char *const ipc_dbus_workqueue_changing[];
int ipc_dbus_append_item(sd_bus_message *m, const struct item *i);
/* The properties @names (NULL-terminated; NULL: all) of @w's queue as a{sv}. */
int ipc_dbus_append_workqueue_properties(sd_bus_message *m, struct dbus_workqueue *w, const char *const *names);

/* The sender of @m as the core's caller.  Fails (with @error set) if the bus
 * cannot tell who sent it. */
int ipc_dbus_caller(struct ipc_dbus *d, sd_bus_message *m, struct dbus_sender **ret, sd_bus_error *error);
/* ipc_dbus_caller(), and on its first call a client is admitted as one of
 * its uid's connections (per-user limit 'connections', as a socket client
 * is) until it leaves the bus.  Fails (with @error set) past the limit.
 * Every request goes through here. */
int ipc_dbus_client(struct ipc_dbus *d, sd_bus_message *m, struct dbus_sender **ret, sd_bus_error *error);
/* Replies to @m with the core's error. */
int ipc_dbus_reply_core_error(sd_bus_message *m, const struct core_error *e);
/* Turns @m into a call that waits for the core; NULL (and an error reply
 * sent) if the sender has too many open. */
struct dbus_call *ipc_dbus_call_new(struct ipc_dbus *d, struct dbus_sender *s, sd_bus_message *m,
                                    enum dbus_call_reply reply);
/* Finishes a call after the core call that took its waiter returned @r:
 * parked when 1, answered (and freed) otherwise. */
int ipc_dbus_call_settle(struct dbus_call *call, int r, const struct core_error *e);

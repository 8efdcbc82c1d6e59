/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The D-Bus connection: who is calling, calls that wait for the core, and
 * the core's changes published as signals (see dbus/bus.h).
 */
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/errno-map.h"
#include "dbus/bus-event.h"
#include "dbus/bus-signal.h"
#include "dbus/bus.h"
#include "util.h"

/* ---- who is calling ---------------------------------------------------- */

static struct dbus_sender *dbus_sender_free(struct dbus_sender *s) {
        if (!s)
                return NULL;
        list_del_init(&s->entry);
        free(s->name);
        free(s);
        return NULL;
}

static struct dbus_sender *dbus_sender_find(struct ipc_dbus *d, const char *name) {
        struct dbus_sender *s;

        list_for_each_entry(s, &d->senders, entry)
                if (strcmp(s->name, name) == 0)
                        return s;
        return NULL;
}

/* Forgets a client: it left the bus, was refused, or cmwqd stops. */
static void dbus_sender_forget(struct ipc_dbus *d, struct dbus_sender *s) {
        if (s->admitted)
                core_user_disconnect(d->core, s->caller.uid);
        dbus_sender_free(s);
        d->nr_senders--;
}

/* Forgets idle senders that were never admitted beyond the cache size,
 * least recently used first.  Admitted ones stay until they leave. */
static void dbus_senders_trim(struct ipc_dbus *d) {
        struct dbus_sender *s, *n;
        unsigned idle = 0;

        list_for_each_entry_safe(s, n, &d->senders, entry) {
                if (s->nr_calls > 0 || s->admitted)
                        continue;
                if (++idle > IPC_DBUS_SENDER_CACHE_MAX) {
                        dbus_sender_free(s);
                        d->nr_senders--;
                }
        }
}

/*
 * The bus daemon vouches for the sender's effective uid and pid: it took
 * them from the kernel (SO_PEERCRED) when the client connected.  Nothing is
 * asked with SD_BUS_CREDS_AUGMENT, which would fill in what the bus did not
 * say from /proc/PID of whatever process has that pid now: the one that
 * connected may have exec'd a setgid program since, or died and left its pid
 * to another.  An item's groups come from the user database (exec/exec.h).  A
 * bus name is never reused, so the credentials are asked once per client.
 */
#define DBUS_SENDER_CREDS (SD_BUS_CREDS_EUID | SD_BUS_CREDS_PID)

int ipc_dbus_caller(struct ipc_dbus *d, sd_bus_message *m, struct dbus_sender **ret, sd_bus_error *error) {
        sd_bus_creds *creds = NULL;
        struct dbus_sender *s;
        const char *sender = sd_bus_message_get_sender(m);
        uint64_t augmented = 0;
        uid_t euid;
        pid_t pid;
        int r;

        if (!sender)
                return sd_bus_error_set(error, SD_BUS_ERROR_ACCESS_DENIED, "the bus did not say who sent this call");
        s = dbus_sender_find(d, sender);
        if (s) {
                list_del_init(&s->entry);
                list_add(&s->entry, &d->senders);
                *ret = s;
                return 0;
        }

        r = sd_bus_query_sender_creds(m, DBUS_SENDER_CREDS, &creds);
        if (r >= 0) {
                /* Belt and braces: nothing of what counts from /proc. */
                augmented = sd_bus_creds_get_augmented_mask(creds) & DBUS_SENDER_CREDS;
                if (augmented)
                        r = -EPERM;
        }
        if (r >= 0)
                r = sd_bus_creds_get_euid(creds, &euid);
        if (r >= 0)
                r = sd_bus_creds_get_pid(creds, &pid);
        sd_bus_creds_unref(creds);
        if (r < 0) {
                log_warning_errno(r, "Cannot get the credentials of D-Bus client %s from the bus%s: %m", sender,
                                  augmented ? " (only from /proc)" : "");
                return sd_bus_error_set(error, SD_BUS_ERROR_ACCESS_DENIED,
                                        "cannot determine the caller's credentials");
        }

        s = calloc(1, sizeof(*s));
        if (s)
                s->name = strdup(sender);
        if (!s || !s->name) {
                free(s);
                return -ENOMEM;
        }
        /* The pid only picks the CPU of an item queued without one (see
         * core_submit()): a pid reused since cannot give anything away. */
        s->caller = (struct core_caller) {
                .uid = euid,
                .pid = pid,
        };
        log_debug("D-Bus client %s is uid %u pid %d", sender, (unsigned) euid, (int) pid);
        list_add(&s->entry, &d->senders);
        d->nr_senders++;
        dbus_senders_trim(d);
        *ret = s;
        return 0;
}

int ipc_dbus_client(struct ipc_dbus *d, sd_bus_message *m, struct dbus_sender **ret, sd_bus_error *error) {
        struct core_error e = {};
        struct dbus_sender *s;
        int r;

        r = ipc_dbus_caller(d, m, &s, error);
        if (r < 0)
                return r;
        if (!s->admitted) {
                /* Counted as the socket counts its clients: one per unique
                 * bus name, released when the name goes (NameOwnerChanged). */
                r = core_user_connect(d->core, &s->caller, &e);
                if (r < 0) {
                        log_debug("D-Bus client %s refused: %s", s->name, e.message);
                        dbus_sender_forget(d, s);
                        return sd_bus_error_set(error, errno_to_dbus_error(e.error), e.message);
                }
                s->admitted = true;
        }
        *ret = s;
        return 0;
}

/* ---- errors and calls that wait ------------------------------------------ */

int ipc_dbus_reply_core_error(sd_bus_message *m, const struct core_error *e) {
        return sd_bus_reply_method_errorf(m, errno_to_dbus_error(e->error), "%s",
                                          e->message[0] ? e->message : "request failed");
}

static void dbus_call_free(struct dbus_call *call) {
        core_waiter_cancel(&call->waiter);
        list_del_init(&call->entry);
        if (call->sender)
                call->sender->nr_calls--;
        sd_bus_message_unref(call->message);
        free(call);
}

struct freeze_message {
        char text[1024];
        size_t len;
};

static int freeze_holder_describe(const struct core_freeze_holder *h, void *userdata) {
        struct freeze_message *msg = userdata;

        if (msg->len >= sizeof(msg->text))
                return 0;
        if (h->item) {
                struct core_item_info v;

                core_item_info(h->item, &v);
                msg->len += (size_t) snprintf(msg->text + msg->len, sizeof(msg->text) - msg->len,
                                              " item %" PRIu64 " (%s)", v.id, h->workqueue);
        } else
                msg->len += (size_t) snprintf(msg->text + msg->len, sizeof(msg->text) - msg->len,
                                              " callbacks of PID %d (%s)", (int) h->pid, h->workqueue);
        return 0;
}

/* A freeze that timed out: the error names the items that held it. */
static int dbus_reply_freeze_timeout(struct ipc_dbus *d, sd_bus_message *m) {
        struct freeze_message msg = {};

        msg.len = (size_t) snprintf(msg.text, sizeof(msg.text),
                                    "freeze timed out; still running, the queues stay frozen:");
        (void) core_freeze_holders(d->core, freeze_holder_describe, &msg);
        return sd_bus_reply_method_errorf(m, errno_to_dbus_error(-ETIMEDOUT), "%s", msg.text);
}

static int dbus_call_reply(struct dbus_call *call, int r) {
        struct ipc_dbus *d = call->dbus;
        sd_bus_message *m = call->message;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        struct item *i;

        if (r == -ETIMEDOUT && call->reply == DBUS_CALL_REPLY_FREEZE)
                return dbus_reply_freeze_timeout(d, m);
        if (r < 0) {
                struct core_error e = { .error = r };

                snprintf(e.message, sizeof(e.message), "%s", strerror(-r));
                return ipc_dbus_reply_core_error(m, &e);
        }
        if (call->reply != DBUS_CALL_REPLY_ITEM)
                return sd_bus_reply_method_return(m, NULL);

        i = core_item_lookup(d->core, call->item_id);
        if (!i)
                return sd_bus_reply_method_errorf(m, errno_to_dbus_error(-ENOENT), "the item is gone from the history");
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = ipc_dbus_append_item(reply, i);
        if (r >= 0)
                r = sd_bus_send(NULL, reply, NULL);
        return r;
}

static void dbus_call_done(struct core_waiter *w, int r) {
        struct dbus_call *call = container_of(w, struct dbus_call, waiter);
        struct ipc_dbus *d = call->dbus;

        r = dbus_call_reply(call, r);
        if (r < 0)
                log_debug_errno(r, "Cannot send a D-Bus reply: %m");
        dbus_call_free(call);
        /* Sent from outside the bus's own callbacks: flush it from the loop. */
        bus_event_kick(d->event);
}

struct dbus_call *ipc_dbus_call_new(struct ipc_dbus *d, struct dbus_sender *s, sd_bus_message *m,
                                    enum dbus_call_reply reply) {
        struct dbus_call *call;

        if (s->nr_calls >= IPC_DBUS_CALLS_PER_SENDER_MAX) {
                (void) sd_bus_reply_method_errorf(m, errno_to_dbus_error(-EMFILE),
                                                  "too many calls waiting for this client (the limit is %u)",
                                                  IPC_DBUS_CALLS_PER_SENDER_MAX);
                return NULL;
        }
        call = calloc(1, sizeof(*call));
        if (!call) {
                (void) sd_bus_reply_method_errno(m, ENOMEM, NULL);
                return NULL;
        }
        core_waiter_init(&call->waiter, dbus_call_done);
        list_init(&call->entry);
        call->dbus = d;
        call->sender = s;
        call->message = sd_bus_message_ref(m);
        call->reply = reply;
        s->nr_calls++;
        return call;
}

int ipc_dbus_call_settle(struct dbus_call *call, int r, const struct core_error *e) {
        if (r == 1) {
                list_add_tail(&call->entry, &call->dbus->calls);
                return 1;       /* sd-bus: handled, the reply comes later */
        }
        if (r < 0)
                r = ipc_dbus_reply_core_error(call->message, e);
        else
                r = dbus_call_reply(call, 0);
        dbus_call_free(call);
        return r < 0 ? r : 1;
}

/* A client left the bus: forget it, and the calls it waited on. */
static int on_name_owner_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        const char *name, *old_owner, *new_owner;
        struct dbus_sender *s;
        struct dbus_call *call, *n;

        /* Else any client could make cmwqd forget another's calls. */
        if (!bus_signal_is_from_bus_daemon(m)) {
                log_debug("Ignoring a NameOwnerChanged signal that %s sent to cmwqd alone",
                          bus_signal_sender(m));
                return 0;
        }
        if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) < 0)
                return 0;
        if (name[0] != ':' || new_owner[0])
                return 0;
        s = dbus_sender_find(d, name);
        if (!s)
                return 0;
        list_for_each_entry_safe(call, n, &d->calls, entry)
                if (call->sender == s)
                        dbus_call_free(call);
        dbus_sender_forget(d, s);
        return 0;
}

/* ---- the core's changes, published ------------------------------------- */

/*
 * Signals are never broadcast: a broadcast reaches every connection on the
 * bus that adds a match rule for it, whoever it belongs to.  Each signal is
 * sent, addressed, to every client that called Subscribe() and may see what
 * it is about: a workqueue's to those who may see the queue (its owner,
 * root; everyone for a built-in queue, whose properties anyone may read),
 * an item's to its owner and root.
 */

typedef int (*dbus_signal_body_fn)(sd_bus_message *m, void *userdata);

static bool dbus_sender_may_see(const struct dbus_sender *s, const struct workqueue *wq,
                                const struct core_item_info *i) {
        if (i)
                return i->uid == s->caller.uid || caller_is_privileged(&s->caller);
        return workqueue_visible_to(wq, &s->caller);
}

/* Sends the signal to each subscriber that may see @wq (@i, if given). */
static void dbus_signal_send(struct ipc_dbus *d, const struct workqueue *wq, const struct core_item_info *i,
                             const char *path, const char *interface, const char *member, dbus_signal_body_fn body,
                             void *userdata) {
        struct dbus_sender *s;
        bool sent = false;

        list_for_each_entry(s, &d->senders, entry) {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
                int r;

                if (!s->subscribed || !dbus_sender_may_see(s, wq, i))
                        continue;
                r = sd_bus_message_new_signal(d->bus, &m, path, interface, member);
                if (r >= 0)
                        r = sd_bus_message_set_destination(m, s->name);
                if (r >= 0)
                        r = body(m, userdata);
                if (r >= 0)
                        r = sd_bus_send(d->bus, m, NULL);
                if (r < 0)
                        log_debug_errno(r, "Cannot send %s about %s to %s: %m", member, path, s->name);
                else
                        sent = true;
        }
        /* Sent from outside the bus's own callbacks: flush it from the loop. */
        if (sent)
                bus_event_kick(d->event);
}

struct dbus_workqueue *ipc_dbus_workqueue_find(struct ipc_dbus *d, const struct workqueue *wq) {
        struct dbus_workqueue *w;

        list_for_each_entry(w, &d->workqueues, entry)
                if (w->wq == wq)
                        return w;
        return NULL;
}

static void dbus_workqueue_free(struct dbus_workqueue *w) {
        list_del_init(&w->entry);
        list_del_init(&w->dirty_entry);
        free(w);
}

static struct dbus_workqueue *dbus_workqueue_track(struct ipc_dbus *d, struct workqueue *wq) {
        struct dbus_workqueue *w = calloc(1, sizeof(*w));

        if (!w)
                return NULL;
        w->dbus = d;
        w->wq = wq;
        list_init(&w->dirty_entry);
        ipc_dbus_workqueue_values(wq, w->announced);
        list_add_tail(&w->entry, &d->workqueues);
        return w;
}

struct properties_changed {
        struct dbus_workqueue *w;
        const char *const *changed;
};

static int body_properties_changed(sd_bus_message *m, void *userdata) {
        const struct properties_changed *p = userdata;
        int r;

        r = sd_bus_message_append(m, "s", CMWQ_DBUS_WORKQUEUE_INTERFACE);
        if (r >= 0)
                r = ipc_dbus_append_workqueue_properties(m, p->w, p->changed);
        if (r >= 0)
                r = sd_bus_message_append_strv(m, NULL);
        return r;
}

static void dbus_announce_workqueue(struct ipc_dbus *d, struct dbus_workqueue *w) {
        const char *changed[ELEMENTSOF(w->announced) + 1];
        uint64_t now[ELEMENTSOF(w->announced)];
        _cleanup_(freep) char *path = NULL;
        size_t n = 0;

        ipc_dbus_workqueue_values(w->wq, now);
        for (size_t k = 0; ipc_dbus_workqueue_changing[k]; k++)
                if (now[k] != w->announced[k]) {
                        changed[n++] = ipc_dbus_workqueue_changing[k];
                        w->announced[k] = now[k];
                }
        changed[n] = NULL;
        if (n == 0 || ipc_dbus_workqueue_path(w->wq, &path) < 0)
                return;
        dbus_signal_send(d, w->wq, NULL, path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                         body_properties_changed, &(struct properties_changed) { .w = w, .changed = changed });
}

/* Once per loop turn, however many items started or ended in it. */
static void on_announce(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_dbus *d = userdata;

        while (!list_empty(&d->dirty)) {
                struct dbus_workqueue *w = list_first_entry(&d->dirty, struct dbus_workqueue, dirty_entry);

                list_del_init(&w->dirty_entry);
                dbus_announce_workqueue(d, w);
        }
}

static void observe_workqueue_changed(struct core_observer *o, struct workqueue *wq) {
        struct ipc_dbus *d = container_of(o, struct ipc_dbus, observer);
        struct dbus_workqueue *w = ipc_dbus_workqueue_find(d, wq);

        if (!w || list_linked(&w->dirty_entry))
                return;
        list_add_tail(&w->dirty_entry, &d->dirty);
        event_active(d->announce, EV_TIMEOUT, 0);
}

/* The interfaces of a workqueue's object, as sd-bus's object manager names
 * them, the queue's own last. */
static const char *const workqueue_interfaces[] = {
        "org.freedesktop.DBus.Peer",
        "org.freedesktop.DBus.Introspectable",
        "org.freedesktop.DBus.Properties",
        CMWQ_DBUS_WORKQUEUE_INTERFACE,
        NULL,
};

struct interfaces_changed {
        const char *path;
        struct dbus_workqueue *w;       /* InterfacesAdded */
};

static int body_interfaces_added(sd_bus_message *m, void *userdata) {
        const struct interfaces_changed *c = userdata;
        int r;

        r = sd_bus_message_append(m, "o", c->path);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sa{sv}}");
        for (size_t k = 0; r >= 0 && workqueue_interfaces[k]; k++) {
                bool own = strcmp(workqueue_interfaces[k], CMWQ_DBUS_WORKQUEUE_INTERFACE) == 0;

                r = sd_bus_message_open_container(m, 'e', "sa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(m, "s", workqueue_interfaces[k]);
                if (r >= 0)
                        r = own ? ipc_dbus_append_workqueue_properties(m, c->w, NULL)
                                : sd_bus_message_append(m, "a{sv}", 0);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

static int body_interfaces_removed(sd_bus_message *m, void *userdata) {
        const struct interfaces_changed *c = userdata;
        int r;

        r = sd_bus_message_append(m, "o", c->path);
        if (r >= 0)
                r = sd_bus_message_append_strv(m, (char **) workqueue_interfaces);
        return r;
}

static void observe_workqueue_added(struct core_observer *o, struct workqueue *wq) {
        struct ipc_dbus *d = container_of(o, struct ipc_dbus, observer);
        _cleanup_(freep) char *path = NULL;
        struct dbus_workqueue *w;

        w = dbus_workqueue_track(d, wq);
        if (!w) {
                struct core_workqueue_info info;

                core_workqueue_info(wq, &info);
                log_queue(LOG_WARNING, &info, "Out of memory: workqueue %s will not be announced on the bus",
                          info.name);
                return;
        }
        if (ipc_dbus_workqueue_path(wq, &path) < 0)
                return;
        dbus_signal_send(d, wq, NULL, CMWQ_DBUS_PATH, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded",
                         body_interfaces_added, &(struct interfaces_changed) { .path = path, .w = w });
}

static void observe_workqueue_removed(struct core_observer *o, struct workqueue *wq) {
        struct ipc_dbus *d = container_of(o, struct ipc_dbus, observer);
        struct dbus_workqueue *w = ipc_dbus_workqueue_find(d, wq);
        _cleanup_(freep) char *path = NULL;

        if (w)
                dbus_workqueue_free(w);
        if (ipc_dbus_workqueue_path(wq, &path) < 0)
                return;
        dbus_signal_send(d, wq, NULL, CMWQ_DBUS_PATH, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved",
                         body_interfaces_removed, &(struct interfaces_changed) { .path = path });
}

static int body_item_finished(sd_bus_message *m, void *userdata) {
        const struct core_item_info *i = userdata;
        int exited = i->has_exit && !i->signal;

        /* -1 where the protocol leaves the field out: no exit status when
         * killed, never started or interrupted, no signal when it exited. */
        return sd_bus_message_append(m, "tssiiu", i->id, i->workqueue, item_state_to_string(i->state),
                                     exited ? i->exit_status : -1, i->has_exit && i->signal ? i->signal : -1,
                                     (uint32_t) i->uid);
}

static void observe_item_finished(struct core_observer *o, struct item *item) {
        struct ipc_dbus *d = container_of(o, struct ipc_dbus, observer);
        struct core_item_info i;

        core_item_info(item, &i);
        dbus_signal_send(d, NULL, &i, CMWQ_DBUS_PATH, CMWQ_DBUS_MANAGER_INTERFACE, "ItemFinished",
                         body_item_finished, &i);
}

/* ---- the connection -------------------------------------------------------- */

struct dbus_held_reply {
        struct list_head entry;
        sd_bus_message *reply;
        uint64_t seq;
};

/* Sends the held replies whose records are on disk (@durable). */
static void dbus_held_send(struct ipc_dbus *d, uint64_t durable) {
        bool sent = false;

        while (!list_empty(&d->held)) {
                struct dbus_held_reply *h = list_first_entry(&d->held, struct dbus_held_reply, entry);

                if (h->seq > durable)
                        break;
                list_del_init(&h->entry);
                if (d->bus)
                        (void) sd_bus_send(d->bus, h->reply, NULL);
                sd_bus_message_unref(h->reply);
                free(h);
                sent = true;
        }
        if (sent)
                bus_event_kick(d->event);
}

static void dbus_store_durable(struct store_listener *l, uint64_t seq) {
        dbus_held_send(container_of(l, struct ipc_dbus, store_listener), seq);
}

void ipc_dbus_set_store(struct ipc_dbus *d, struct store *store) {
        if (!d)
                return;
        d->store = store;
        d->store_listener.durable = dbus_store_durable;
        if (store)
                store_add_listener(store, &d->store_listener);
}

int ipc_dbus_send_durable(struct ipc_dbus *d, sd_bus_message *reply) {
        struct dbus_held_reply *h;
        uint64_t seq;
        int r;

        if (!d->store || store_durable_seq(d->store) >= (seq = store_appended_seq(d->store)) ||
            (store_is_full(d->store) && list_empty(&d->held))) {
                r = sd_bus_send(d->bus, reply, NULL);
                sd_bus_message_unref(reply);
                return r < 0 ? r : 1;
        }
        h = calloc(1, sizeof(*h));
        if (!h) {
                sd_bus_message_unref(reply);
                return -ENOMEM;
        }
        h->reply = reply;
        h->seq = seq;
        list_add_tail(&h->entry, &d->held);
        store_urge(d->store);
        return 1;
}

/* ---- losing the bus and coming back ------------------------------------ */

static void on_bus_disconnected(void *userdata);

/* The name is ours again after a reconnect (or it is not). */
static int on_name_requested(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        struct ipc_dbus *d = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(m);
        uint32_t result = 0;

        d->lost = false;
        if (e || sd_bus_message_read(m, "u", &result) < 0 ||
            (result != 1 /* DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER */ &&
             result != 4 /* DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER */)) {
                log_warning("Back on the bus, but the name %s cannot be had (%s): D-Bus requests are not served",
                            CMWQ_DBUS_NAME, e && e->message ? e->message : "taken by another connection");
                return 0;
        }
        d->backoff_usec = IPC_DBUS_RECONNECT_MIN_USEC;
        log_info("Back on the bus as %s", CMWQ_DBUS_NAME);
        return 0;
}

/*
 * Opens the bus, publishes the objects (objects first, then the name: no
 * call arrives before its object), watches for clients leaving and asks for
 * the name.  The objects of every workqueue are served from the core's
 * list (a fallback vtable and an enumerator), so they are all back with it.
 * @async (reconnecting): the loop does not wait for the bus daemon's
 * answers; on_name_requested() gets the name's.
 */
static int dbus_connect(struct ipc_dbus *d, bool async) {
        int r;

        /* $DBUS_SYSTEM_BUS_ADDRESS / $DBUS_SESSION_BUS_ADDRESS, as usual. */
        r = d->user_mode ? sd_bus_open_user(&d->bus) : sd_bus_open_system(&d->bus);
        if (r < 0) {
                d->bus = NULL;
                return r;
        }
        (void) sd_bus_set_description(d->bus, "cmwqd");
        r = ipc_dbus_objects_add(d);
        if (r >= 0)
                r = async ? sd_bus_match_signal_async(d->bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                      "org.freedesktop.DBus", "NameOwnerChanged",
                                                      on_name_owner_changed, NULL, d)
                          : sd_bus_match_signal(d->bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                "org.freedesktop.DBus", "NameOwnerChanged", on_name_owner_changed, d);
        if (r >= 0)
                r = async ? sd_bus_request_name_async(d->bus, NULL, CMWQ_DBUS_NAME, 0, on_name_requested, d)
                          : sd_bus_request_name(d->bus, CMWQ_DBUS_NAME, 0);
        if (r >= 0)
                r = bus_event_attach(d->bus, d->base, &d->event);
        if (r < 0) {
                d->bus = sd_bus_close_unref(d->bus);
                return r;
        }
        bus_event_on_disconnected(d->event, on_bus_disconnected, d);
        return 0;
}

/* Everything that hung on the old connection goes with it: its clients are
 * gone (their unique names die with the bus daemon), so are the callers of
 * the waiting calls and of the held replies. */
static void dbus_drop_bus(struct ipc_dbus *d) {
        if (!d->lost) {
                log_warning("Lost the D-Bus connection (the bus daemon went away); calls in flight are dropped, "
                            "reconnecting");
                d->lost = true;
                d->backoff_usec = IPC_DBUS_RECONNECT_MIN_USEC;
        }
        while (!list_empty(&d->calls))
                dbus_call_free(list_first_entry(&d->calls, struct dbus_call, entry));
        while (!list_empty(&d->held)) {
                struct dbus_held_reply *h = list_first_entry(&d->held, struct dbus_held_reply, entry);

                list_del_init(&h->entry);
                sd_bus_message_unref(h->reply);
                free(h);
        }
        /* Releases their 'connections' and their subscriptions. */
        while (!list_empty(&d->senders))
                dbus_sender_forget(d, list_first_entry(&d->senders, struct dbus_sender, entry));
        d->event = bus_event_detach(d->event);
        d->bus = sd_bus_close_unref(d->bus);
}

/* A timer: drops a dead connection, or tries a new one; on failure, again
 * after the back-off, doubled each time. */
static void on_reconnect(evutil_socket_t fd, short what, void *userdata) {
        struct ipc_dbus *d = userdata;
        struct timeval tv;
        int r;

        if (d->stopped)
                return;
        if (d->bus)
                dbus_drop_bus(d);
        else {
                r = dbus_connect(d, true);
                if (r >= 0)
                        return;         /* on_name_requested(), or dropped again */
                log_debug_errno(r, "Cannot reconnect to the bus yet: %m");
        }
        tv = timeval_from_usec(d->backoff_usec);
        d->backoff_usec = d->backoff_usec * 2 > IPC_DBUS_RECONNECT_MAX_USEC ? IPC_DBUS_RECONNECT_MAX_USEC
                                                                             : d->backoff_usec * 2;
        evtimer_add(d->reconnect, &tv);
}

/* From bus_event_run(): the bus is closed.  Drop it from the loop, not
 * from inside the round that found it closed. */
static void on_bus_disconnected(void *userdata) {
        struct ipc_dbus *d = userdata;

        if (!d->stopped)
                event_active(d->reconnect, EV_TIMEOUT, 0);
}

static int workqueue_track(struct workqueue *wq, const struct core_workqueue_info *info, void *userdata) {
        return dbus_workqueue_track(userdata, wq) ? 0 : -ENOMEM;
}

int ipc_dbus_new(struct event_base *base, struct core *core, bool user_mode, struct ipc_dbus **ret) {
        struct ipc_dbus *d;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->core = core;
        d->base = base;
        d->user_mode = user_mode;
        d->backoff_usec = IPC_DBUS_RECONNECT_MIN_USEC;
        list_init(&d->senders);
        list_init(&d->calls);
        list_init(&d->workqueues);
        list_init(&d->dirty);
        list_init(&d->held);
        list_init(&d->store_listener.entry);
        list_init(&d->observer.entry);
        d->observer = (struct core_observer) {
                .workqueue_added = observe_workqueue_added,
                .workqueue_removed = observe_workqueue_removed,
                .workqueue_changed = observe_workqueue_changed,
                .item_finished = observe_item_finished,
        };
        list_init(&d->observer.entry);

        d->announce = event_new(base, -1, 0, on_announce, d);
        d->reconnect = evtimer_new(base, on_reconnect, d);
        if (!d->announce || !d->reconnect) {
                r = -ENOMEM;
                goto fail;
        }
        r = core_for_each_workqueue(core, NULL, workqueue_track, d);
        if (r < 0)
                goto fail;

        r = dbus_connect(d, false);
        if (r < 0)
                goto fail;
        core_observer_add(core, &d->observer);
        *ret = d;
        return 0;

fail:
        ipc_dbus_free(d);
        return r;
}

void ipc_dbus_stop(struct ipc_dbus *d) {
        if (!d || d->stopped)
                return;
        d->stopped = true;
        core_observer_remove(&d->observer);
        while (!list_empty(&d->calls)) {
                struct dbus_call *call = list_first_entry(&d->calls, struct dbus_call, entry);

                (void) sd_bus_reply_method_errorf(call->message, errno_to_dbus_error(-ESHUTDOWN),
                                                  "cmwqd is shutting down");
                dbus_call_free(call);
        }
        /* Their connections count in the core, which goes next. */
        while (!list_empty(&d->senders))
                dbus_sender_forget(d, list_first_entry(&d->senders, struct dbus_sender, entry));
        while (!list_empty(&d->workqueues))
                dbus_workqueue_free(list_first_entry(&d->workqueues, struct dbus_workqueue, entry));
        d->event = bus_event_detach(d->event);
        if (d->announce) {
                event_free(d->announce);
                d->announce = NULL;
        }
        if (d->reconnect) {
                event_free(d->reconnect);
                d->reconnect = NULL;
        }
}

struct ipc_dbus *ipc_dbus_free(struct ipc_dbus *d) {
        if (!d)
                return NULL;
        ipc_dbus_stop(d);
        if (d->store)
                store_remove_listener(d->store, &d->store_listener);
        /* What the store's last sync made durable is sent (store_stop()); a
         * reply still held acknowledges what is not on disk: the caller
         * gets the bus's NoReply instead. */
        while (!list_empty(&d->held)) {
                struct dbus_held_reply *h = list_first_entry(&d->held, struct dbus_held_reply, entry);

                list_del_init(&h->entry);
                sd_bus_message_unref(h->reply);
                free(h);
        }
        /* Whatever is still queued (the last replies) goes out first. */
        if (d->bus)
                sd_bus_flush_close_unref(d->bus);
        free(d);
        return NULL;
}

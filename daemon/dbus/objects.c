/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The objects of the D-Bus front end: org.cmwq.cmwqd1.Manager on
 * /org/cmwq/cmwqd1 and one org.cmwq.cmwqd1.Workqueue per queue, in the
 * pattern of org.freedesktop.systemd1 (Manager methods that take a name,
 * and the same methods on each queue's object).  Every method calls the
 * core exactly as ipc/dispatch.c does.  The interfaces are described in
 * dbus/org.cmwq.cmwqd1.*.xml; a test checks that they match.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/errno-map.h"
#include "dbus/bus.h"
#include "util.h"

/* Workqueue names are per user (core/workqueue.c): an object is named by what
 * names its queue exactly, "UID/NAME", or the bare name of a built-in. */
static void workqueue_exact_name(const struct workqueue *wq, char *buf, size_t size) {
        struct core_workqueue_info info;

        core_workqueue_info(wq, &info);
        core_workqueue_name_for(&info, NULL, buf, size);
}

static int workqueue_info_path(const struct core_workqueue_info *info, char **ret) {
        char name[CORE_WORKQUEUE_NAME_MAX];

        core_workqueue_name_for(info, NULL, name, sizeof(name));
        return sd_bus_path_encode(CMWQ_DBUS_WORKQUEUE_PREFIX, name, ret);
}

int ipc_dbus_workqueue_path(const struct workqueue *wq, char **ret) {
        struct core_workqueue_info info;

        core_workqueue_info(wq, &info);
        return workqueue_info_path(&info, ret);
}

/* ---- items ----------------------------------------------------------------- */

static int append_entry(sd_bus_message *m, const char *key, const char *type, ...) {
        va_list ap;
        int r;

        r = sd_bus_message_open_container(m, 'e', "sv");
        if (r >= 0)
                r = sd_bus_message_append_basic(m, 's', key);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'v', type);
        if (r >= 0) {
                va_start(ap, type);
                r = sd_bus_message_appendv(m, type, ap);
                va_end(ap);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

static int append_bytes(sd_bus_message *m, const char *key, const void *data, size_t len) {
        int r;

        r = sd_bus_message_open_container(m, 'e', "sv");
        if (r >= 0)
                r = sd_bus_message_append_basic(m, 's', key);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'v', "ay");
        if (r >= 0)
                r = sd_bus_message_append_array(m, 'y', data ? data : "", len);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

/* An item as a{sv}: the fields of the protocol's ItemInfo, present when
 * they are there. */
int ipc_dbus_append_item(sd_bus_message *m, const struct item *item) {
        struct core_item_info v, *i = &v;
        int r;

        core_item_info(item, &v);
        r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        r = append_entry(m, "Id", "t", i->id);
        if (r >= 0)
                r = append_entry(m, "Workqueue", "s", i->workqueue);
        if (r >= 0)
                r = append_entry(m, "State", "s", item_state_to_string(i->state));
        if (r >= 0)
                r = append_entry(m, "UID", "u", (uint32_t) i->uid);
        if (r >= 0) {
                r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append_basic(m, 's', "Argv");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', "as");
                if (r >= 0)
                        r = sd_bus_message_append_strv(m, i->argv);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0 && i->key)
                r = append_entry(m, "Key", "s", i->key);
        if (r >= 0)
                r = append_entry(m, "CPU", "i", (int32_t) i->cpu);
        if (r >= 0)
                r = append_entry(m, "Requeues", "u", (uint32_t) i->requeues);
        if (r >= 0)
                r = append_entry(m, "QueuedUSec", "t", i->queued_usec);
        if (r >= 0 && i->started_usec)
                r = append_entry(m, "StartedUSec", "t", i->started_usec);
        if (r >= 0 && i->finished_usec)
                r = append_entry(m, "FinishedUSec", "t", i->finished_usec);
        if (r >= 0 && i->has_result) {
                if (i->has_exit)
                        r = i->signal ? append_entry(m, "Signal", "i", (int32_t) i->signal)
                                      : append_entry(m, "ExitStatus", "i", (int32_t) i->exit_status);
                if (r >= 0)
                        r = append_entry(m, "CPUUSec", "t", i->cpu_usec);
                if (r >= 0)
                        r = append_bytes(m, "Stdout", i->out, i->out_len);
                if (r >= 0)
                        r = append_bytes(m, "Stderr", i->err, i->err_len);
                if (r >= 0)
                        r = append_entry(m, "StdoutTruncated", "b", (int) i->out_truncated);
                if (r >= 0)
                        r = append_entry(m, "StderrTruncated", "b", (int) i->err_truncated);
                if (r >= 0)
                        r = append_entry(m, "TimedOut", "b", (int) i->timed_out);
                if (r >= 0)
                        r = append_entry(m, "CPUIntensive", "b", (int) i->cpu_intensive);
        }
        if (r >= 0 && i->error[0])
                r = append_entry(m, "Error", "s", i->error);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

/* ---- method helpers --------------------------------------------------------- */

/* A call's caller, admitted as one of its uid's connections; on failure
 * the error is already in @error. */
#define GET_CALLER(d, m, s, error)                                      \
        do {                                                            \
                int _r = ipc_dbus_client(d, m, &(s), error);            \
                if (_r < 0)                                             \
                        return _r;                                      \
        } while (0)

/* Replies to @m with @types (may be NULL) once the change it acknowledges
 * is on disk. */
static int reply_durable(struct ipc_dbus *d, sd_bus_message *m, const char *types, ...) {
        sd_bus_message *reply = NULL;
        va_list ap;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0 && types) {
                va_start(ap, types);
                r = sd_bus_message_appendv(reply, types, ap);
                va_end(ap);
        }
        if (r < 0) {
                sd_bus_message_unref(reply);
                return r;
        }
        return ipc_dbus_send_durable(d, reply);
}

/* Replies with nothing or the core's error; the success once it is on disk. */
static int reply_core(struct ipc_dbus *d, sd_bus_message *m, int r, const struct core_error *e) {
        if (r < 0)
                return ipc_dbus_reply_core_error(m, e);
        return reply_durable(d, m, NULL);
}

/* Reads the submit arguments after the workqueue name and queues the item. */
static int submit(struct ipc_dbus *d, sd_bus_message *m, const char *workqueue, sd_bus_error *error) {
        _cleanup_(strv_freep) char **argv = NULL, **env = NULL;
        const char *cwd, *key;
        const void *payload = NULL;
        size_t payload_len = 0;
        struct dbus_sender *s;
        struct core_error e = {};
        uint64_t delay, timeout, id = 0;
        bool already = false;
        int32_t cpu;
        int r;

        GET_CALLER(d, m, s, error);
        r = sd_bus_message_read_strv(m, &argv);
        if (r >= 0)
                r = sd_bus_message_read_strv(m, &env);
        if (r >= 0)
                r = sd_bus_message_read(m, "s", &cwd);
        if (r >= 0)
                r = sd_bus_message_read_array(m, 'y', &payload, &payload_len);
        if (r >= 0)
                r = sd_bus_message_read(m, "itst", &cpu, &delay, &key, &timeout);
        if (r < 0)
                return r;

        struct submit_args a = {
                .workqueue = workqueue,
                .argv = argv,
                .argc = strv_length(argv),
                .envp = env,
                .envc = strv_length(env),
                .cwd = cwd[0] ? cwd : NULL,
                .payload = payload,
                .payload_len = payload_len,
                .cpu = cpu,
                .delay_usec = delay,
                .key = key[0] ? key : NULL,
                .timeout_usec = timeout,
        };
        r = core_submit(d->core, &s->caller, &a, NULL, &id, &already, &e);
        if (r < 0)
                return ipc_dbus_reply_core_error(m, &e);
        /* The id is an acknowledgement: the item must be on disk first. */
        return reply_durable(d, m, "tb", id, (int) already);
}

enum workqueue_wait { WAIT_FLUSH, WAIT_DRAIN, WAIT_DESTROY, WAIT_FREEZE };

/* The requests that reply once the core is done with them. */
static int workqueue_wait(struct ipc_dbus *d, sd_bus_message *m, enum workqueue_wait what, const char *name,
                          uint64_t timeout_usec, sd_bus_error *error) {
        struct core_error e = {};
        struct dbus_sender *s;
        struct dbus_call *call;
        int r;

        GET_CALLER(d, m, s, error);
        call = ipc_dbus_call_new(d, s, m, what == WAIT_FREEZE ? DBUS_CALL_REPLY_FREEZE : DBUS_CALL_REPLY_EMPTY);
        if (!call)
                return 1;
        switch (what) {
        case WAIT_FLUSH:
                r = core_workqueue_flush(d->core, &s->caller, name, &call->waiter, &e);
                break;
        case WAIT_DRAIN:
                r = core_workqueue_drain(d->core, &s->caller, name, &call->waiter, &e);
                break;
        case WAIT_DESTROY:
                r = core_workqueue_destroy(d->core, &s->caller, name, &call->waiter, &e);
                break;
        default:
                r = core_freeze(d->core, &s->caller, name && name[0] ? name : NULL, timeout_usec, &call->waiter, &e);
                break;
        }
        return ipc_dbus_call_settle(call, r, &e);
}

static int set_max_active(struct ipc_dbus *d, sd_bus_message *m, const char *name, uint32_t max_active,
                          sd_bus_error *error) {
        struct core_error e = {};
        struct dbus_sender *s;

        GET_CALLER(d, m, s, error);
        return reply_core(d, m, core_workqueue_set_max_active(d->core, &s->caller, name, max_active, &e), &e);
}

static int thaw(struct ipc_dbus *d, sd_bus_message *m, const char *name, sd_bus_error *error) {
        struct core_error e = {};
        struct dbus_sender *s;

        GET_CALLER(d, m, s, error);
        return reply_core(d, m, core_thaw(d->core, &s->caller, name && name[0] ? name : NULL, &e), &e);
}

/* ---- org.cmwq.cmwqd1.Manager ------------------------------------------------ */

static int method_create_workqueue(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        _cleanup_(freep) char *path = NULL;
        struct core_error e = {};
        struct dbus_sender *s;
        const char *name;
        uint32_t flags, max_active;
        int r;

        r = sd_bus_message_read(m, "suu", &name, &flags, &max_active);
        if (r < 0)
                return r;
        GET_CALLER(d, m, s, error);
        r = core_workqueue_create(d->core, &s->caller, name, flags, max_active, &e);
        if (r < 0)
                return ipc_dbus_reply_core_error(m, &e);
        r = ipc_dbus_workqueue_path(core_find_workqueue(d->core, s->caller.uid, name), &path);
        if (r < 0)
                return r;
        return reply_durable(d, m, "o", path);
}

static int method_get_workqueue(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        _cleanup_(freep) char *path = NULL;
        struct core_error e = {};
        struct workqueue *wq = NULL;
        struct dbus_sender *s;
        const char *name;
        int r;

        r = sd_bus_message_read(m, "s", &name);
        if (r < 0)
                return r;
        GET_CALLER(d, m, s, error);
        r = core_workqueue_lookup(d->core, &s->caller, name, &wq, &e);
        if (r < 0)
                return ipc_dbus_reply_core_error(m, &e);
        r = ipc_dbus_workqueue_path(wq, &path);
        if (r < 0)
                return r;
        return sd_bus_reply_method_return(m, "o", path);
}

static int method_name_wait(sd_bus_message *m, void *userdata, sd_bus_error *error, enum workqueue_wait what) {
        const char *name;
        int r;

        r = sd_bus_message_read(m, "s", &name);
        if (r < 0)
                return r;
        return workqueue_wait(userdata, m, what, name, 0, error);
}

static int method_destroy_workqueue(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return method_name_wait(m, userdata, error, WAIT_DESTROY);
}

static int method_flush_workqueue(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return method_name_wait(m, userdata, error, WAIT_FLUSH);
}

static int method_drain_workqueue(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return method_name_wait(m, userdata, error, WAIT_DRAIN);
}

static int method_freeze(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *name;
        uint64_t timeout;
        int r;

        r = sd_bus_message_read(m, "st", &name, &timeout);
        if (r < 0)
                return r;
        return workqueue_wait(userdata, m, WAIT_FREEZE, name, timeout, error);
}

static int method_thaw(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *name;
        int r;

        r = sd_bus_message_read(m, "s", &name);
        if (r < 0)
                return r;
        return thaw(userdata, m, name, error);
}

static int method_set_max_active(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *name;
        uint32_t max_active;
        int r;

        r = sd_bus_message_read(m, "su", &name, &max_active);
        if (r < 0)
                return r;
        return set_max_active(userdata, m, name, max_active, error);
}

static int method_submit(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *workqueue;
        int r;

        r = sd_bus_message_read(m, "s", &workqueue);
        if (r < 0)
                return r;
        return submit(userdata, m, workqueue, error);
}

static int method_get_item(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        struct core_error e = {};
        struct dbus_sender *s;
        struct item *i;
        uint64_t id;
        int r;

        r = sd_bus_message_read(m, "t", &id);
        if (r < 0)
                return r;
        GET_CALLER(d, m, s, error);
        r = core_item_get(d->core, &s->caller, id, &i, &e);
        if (r < 0)
                return ipc_dbus_reply_core_error(m, &e);
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = ipc_dbus_append_item(reply, i);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* WaitItem and CancelItem: the item once it has ended. */
static int method_item_wait(sd_bus_message *m, void *userdata, sd_bus_error *error, bool cancel) {
        struct ipc_dbus *d = userdata;
        struct core_error e = {};
        struct dbus_sender *s;
        struct dbus_call *call;
        uint64_t id;
        int r;

        r = sd_bus_message_read(m, "t", &id);
        if (r < 0)
                return r;
        GET_CALLER(d, m, s, error);
        call = ipc_dbus_call_new(d, s, m, DBUS_CALL_REPLY_ITEM);
        if (!call)
                return 1;
        call->item_id = id;
        if (cancel)
                r = core_item_cancel(d->core, &s->caller, id, &call->waiter, &e);
        else
                r = core_item_wait(d->core, &s->caller, id, &call->waiter, &e);
        return ipc_dbus_call_settle(call, r, &e);
}

static int method_wait_item(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return method_item_wait(m, userdata, error, false);
}

static int method_cancel_item(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return method_item_wait(m, userdata, error, true);
}

static int workqueue_list_append(struct workqueue *wq, const struct core_workqueue_info *v, void *userdata) {
        _cleanup_(freep) char *path = NULL;
        int r;

        r = workqueue_info_path(v, &path);
        if (r >= 0)
                r = sd_bus_message_append(userdata, "(souuubbbttt)", v->name, path, (uint32_t) v->flags,
                                          (uint32_t) v->max_active, (uint32_t) v->owner, (int) v->builtin,
                                          (int) v->frozen, (int) v->draining, v->pending, v->running,
                                          v->stats.pool.started);
        return r < 0 ? r : 0;
}

/* Replies to @m with an array of @type: one element per workqueue the caller
 * may see, appended by @fn (ListWorkqueues, GetStatistics). */
static int reply_workqueue_array(sd_bus_message *m, void *userdata, sd_bus_error *error, const char *type,
                                 int (*fn)(struct workqueue *wq, const struct core_workqueue_info *v,
                                           void *userdata)) {
        struct ipc_dbus *d = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        struct dbus_sender *s;
        int r;

        GET_CALLER(d, m, s, error);
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', type);
        if (r >= 0)
                r = core_for_each_workqueue(d->core, &s->caller, fn, reply);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_list_workqueues(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_workqueue_array(m, userdata, error, "(souuubbbttt)", workqueue_list_append);
}

static int pool_info_append(const struct core_pool_info *p, void *userdata) {
        return sd_bus_message_append(userdata, "(ibuuutuuut)", (int32_t) p->cpu, (int) p->highpri,
                                     (uint32_t) p->workers, (uint32_t) p->running, (uint32_t) p->idle,
                                     (uint64_t) p->pending, (uint32_t) p->busy, (uint32_t) p->blocked,
                                     (uint32_t) p->callback_threads, (uint64_t) p->callbacks);
}

static int method_list_pools(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ibuuutuuut)");
        core_refresh_pool_counts(d->core);
        if (r >= 0)
                r = core_for_each_pool(d->core, pool_info_append, reply);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int workqueue_stats_append(struct workqueue *wq, const struct core_workqueue_info *v, void *userdata) {
        int r;

        r = sd_bus_message_append(userdata, "(stttttttttt)", v->name, v->stats.pool.started, v->in_flight,
                                  v->stats.cpu_usec, v->stats.pool.cpu_intensive, v->stats.pool.cm_wakeups,
                                  v->stats.pool.mayday, v->stats.pool.rescued, v->stats.requeued, v->stats.failed,
                                  v->stats.timed_out);
        return r < 0 ? r : 0;
}

static int method_get_statistics(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_workqueue_array(m, userdata, error, "(stttttttttt)", workqueue_stats_append);
}

/* Signals about what the caller may see are sent to it from now on (until
 * Unsubscribe or until it leaves the bus); see dbus_signal_send(). */
static int method_subscribe(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        struct dbus_sender *s;

        GET_CALLER(d, m, s, error);
        s->subscribed = true;
        return sd_bus_reply_method_return(m, NULL);
}

static int method_unsubscribe(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        struct dbus_sender *s;

        GET_CALLER(d, m, s, error);
        s->subscribed = false;
        return sd_bus_reply_method_return(m, NULL);
}

static int property_manager(sd_bus *bus, const char *path, const char *interface, const char *property,
                            sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;

        if (strcmp(property, "Version") == 0)
                return sd_bus_message_append(reply, "s", PACKAGE_VERSION);
        if (strcmp(property, "Mode") == 0)
                return sd_bus_message_append(reply, "s", d->user_mode ? "user" : "system");
        return sd_bus_message_append(reply, "u", (uint32_t) core_nr_cpus(d->core));
}

#define SUBMIT_ARGS "as", argv, "as", environment, "s", working_directory, "ay", stdin_data, "i", cpu, \
        "t", delay_usec, "s", key, "t", timeout_usec

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_manager, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Mode", "s", property_manager, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("CPUs", "u", property_manager, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD_WITH_ARGS("CreateWorkqueue", SD_BUS_ARGS("s", name, "u", flags, "u", max_active),
                                SD_BUS_RESULT("o", workqueue), method_create_workqueue, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetWorkqueue", SD_BUS_ARGS("s", name), SD_BUS_RESULT("o", workqueue),
                                method_get_workqueue, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("DestroyWorkqueue", SD_BUS_ARGS("s", name), SD_BUS_NO_RESULT,
                                method_destroy_workqueue, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetMaxActive", SD_BUS_ARGS("s", name, "u", max_active), SD_BUS_NO_RESULT,
                                method_set_max_active, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("FlushWorkqueue", SD_BUS_ARGS("s", name), SD_BUS_NO_RESULT,
                                method_flush_workqueue, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("DrainWorkqueue", SD_BUS_ARGS("s", name), SD_BUS_NO_RESULT,
                                method_drain_workqueue, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Freeze", SD_BUS_ARGS("s", name, "t", timeout_usec), SD_BUS_NO_RESULT,
                                method_freeze, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Thaw", SD_BUS_ARGS("s", name), SD_BUS_NO_RESULT, method_thaw,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Submit", SD_BUS_ARGS("s", workqueue, SUBMIT_ARGS),
                                SD_BUS_RESULT("t", id, "b", already_pending), method_submit,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetItem", SD_BUS_ARGS("t", id), SD_BUS_RESULT("a{sv}", item), method_get_item,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("WaitItem", SD_BUS_ARGS("t", id), SD_BUS_RESULT("a{sv}", item), method_wait_item,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CancelItem", SD_BUS_ARGS("t", id), SD_BUS_RESULT("a{sv}", item),
                                method_cancel_item, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListWorkqueues", SD_BUS_NO_ARGS,
                                SD_BUS_RESULT("a(souuubbbttt)", workqueues), method_list_workqueues,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListPools", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ibuuutuuut)", pools),
                                method_list_pools, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetStatistics", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(stttttttttt)", workqueues),
                                method_get_statistics, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Subscribe", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_subscribe,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Unsubscribe", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_unsubscribe,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_SIGNAL_WITH_ARGS("ItemFinished",
                                SD_BUS_ARGS("t", id, "s", workqueue, "s", state, "i", exit_status, "i", signal,
                                            "u", uid),
                                0),
        SD_BUS_VTABLE_END,
};

/* ---- org.cmwq.cmwqd1.Workqueue --------------------------------------------- */

/* The properties that change, in the order of ipc_dbus_workqueue_values(). */
const char *const ipc_dbus_workqueue_changing[] = {
        "MaxActive", "Frozen", "Draining", "Pending", "Running", "Total", "InFlight", "CPUUSec",
        "CPUIntensive", "CMWakeups", "Mayday", "Rescued", "Requeued", "Failed", "TimedOut", NULL,
};
static const char workqueue_changing_types[] = "ubbtttttttttttt";

void ipc_dbus_workqueue_values(const struct workqueue *queue, uint64_t *v) {
        struct core_workqueue_info q;
        size_t n = 0;

        core_workqueue_info(queue, &q);
        v[n++] = q.max_active;
        v[n++] = q.frozen;
        v[n++] = q.draining;
        v[n++] = q.pending;
        v[n++] = q.running;
        v[n++] = q.stats.pool.started;
        v[n++] = q.in_flight;
        v[n++] = q.stats.cpu_usec;
        v[n++] = q.stats.pool.cpu_intensive;
        v[n++] = q.stats.pool.cm_wakeups;
        v[n++] = q.stats.pool.mayday;
        v[n++] = q.stats.pool.rescued;
        v[n++] = q.stats.requeued;
        v[n++] = q.stats.failed;
        v[n++] = q.stats.timed_out;
}

static int property_workqueue(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        struct dbus_workqueue *w = userdata;
        struct core_workqueue_info q;
        uint64_t v[ELEMENTSOF(w->announced)];

        core_workqueue_info(w->wq, &q);
        if (strcmp(property, "Name") == 0)
                return sd_bus_message_append(reply, "s", q.name);
        if (strcmp(property, "Flags") == 0)
                return sd_bus_message_append(reply, "u", (uint32_t) q.flags);
        if (strcmp(property, "Owner") == 0)
                return sd_bus_message_append(reply, "u", (uint32_t) q.owner);
        if (strcmp(property, "Builtin") == 0)
                return sd_bus_message_append(reply, "b", (int) q.builtin);

        ipc_dbus_workqueue_values(w->wq, v);
        for (size_t k = 0; ipc_dbus_workqueue_changing[k]; k++) {
                if (strcmp(property, ipc_dbus_workqueue_changing[k]) != 0)
                        continue;
                switch (workqueue_changing_types[k]) {
                case 'u':
                        return sd_bus_message_append(reply, "u", (uint32_t) v[k]);
                case 'b':
                        return sd_bus_message_append(reply, "b", (int) v[k]);
                default:
                        return sd_bus_message_append(reply, "t", v[k]);
                }
        }
        return -ENOENT;
}

/* The type of every property of the Workqueue interface. */
static char workqueue_property_type(const char *name) {
        static const struct {
                const char *name;
                char type;
        } constant[] = { { "Name", 's' }, { "Flags", 'u' }, { "Owner", 'u' }, { "Builtin", 'b' } };

        for (size_t k = 0; k < ELEMENTSOF(constant); k++)
                if (strcmp(name, constant[k].name) == 0)
                        return constant[k].type;
        for (size_t k = 0; ipc_dbus_workqueue_changing[k]; k++)
                if (strcmp(name, ipc_dbus_workqueue_changing[k]) == 0)
                        return workqueue_changing_types[k];
        return 0;
}

int ipc_dbus_append_workqueue_properties(sd_bus_message *m, struct dbus_workqueue *w, const char *const *names) {
        static const char *const constant[] = { "Name", "Flags", "Owner", "Builtin", NULL };
        const char *const *lists[2] = { names, NULL };
        int r;

        if (!names) {
                lists[0] = constant;
                lists[1] = ipc_dbus_workqueue_changing;
        }
        r = sd_bus_message_open_container(m, 'a', "{sv}");
        for (size_t l = 0; r >= 0 && l < ELEMENTSOF(lists) && lists[l]; l++)
                for (const char *const *p = lists[l]; r >= 0 && *p; p++) {
                        char type[2] = { workqueue_property_type(*p), 0 };

                        if (!type[0])
                                return -EINVAL;
                        r = sd_bus_message_open_container(m, 'e', "sv");
                        if (r >= 0)
                                r = sd_bus_message_append(m, "s", *p);
                        if (r >= 0)
                                r = sd_bus_message_open_container(m, 'v', type);
                        if (r >= 0)
                                r = property_workqueue(NULL, NULL, CMWQ_DBUS_WORKQUEUE_INTERFACE, *p, m, w, NULL);
                        if (r >= 0)
                                r = sd_bus_message_close_container(m);
                        if (r >= 0)
                                r = sd_bus_message_close_container(m);
                }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

static int wq_method_submit(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct dbus_workqueue *w = userdata;
        char name[CORE_WORKQUEUE_NAME_MAX];

        workqueue_exact_name(w->wq, name, sizeof(name));
        return submit(w->dbus, m, name, error);
}

/* Flush, Drain and Destroy of the object: the Manager's methods of the
 * same name (method_name_wait()) for this queue. */
static int wq_method_wait(sd_bus_message *m, void *userdata, sd_bus_error *error, enum workqueue_wait what) {
        struct dbus_workqueue *w = userdata;
        char name[CORE_WORKQUEUE_NAME_MAX];

        workqueue_exact_name(w->wq, name, sizeof(name));
        return workqueue_wait(w->dbus, m, what, name, 0, error);
}

static int wq_method_flush(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return wq_method_wait(m, userdata, error, WAIT_FLUSH);
}

static int wq_method_drain(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return wq_method_wait(m, userdata, error, WAIT_DRAIN);
}

static int wq_method_destroy(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return wq_method_wait(m, userdata, error, WAIT_DESTROY);
}

static int wq_method_freeze(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct dbus_workqueue *w = userdata;
        char name[CORE_WORKQUEUE_NAME_MAX];
        uint64_t timeout;
        int r;

        r = sd_bus_message_read(m, "t", &timeout);
        if (r < 0)
                return r;
        workqueue_exact_name(w->wq, name, sizeof(name));
        return workqueue_wait(w->dbus, m, WAIT_FREEZE, name, timeout, error);
}

static int wq_method_thaw(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct dbus_workqueue *w = userdata;
        char name[CORE_WORKQUEUE_NAME_MAX];

        workqueue_exact_name(w->wq, name, sizeof(name));
        return thaw(w->dbus, m, name, error);
}

static int wq_method_set_max_active(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct dbus_workqueue *w = userdata;
        char name[CORE_WORKQUEUE_NAME_MAX];
        uint32_t max_active;
        int r;

        r = sd_bus_message_read(m, "u", &max_active);
        if (r < 0)
                return r;
        workqueue_exact_name(w->wq, name, sizeof(name));
        return set_max_active(w->dbus, m, name, max_active, error);
}

#define WQ_PROPERTY(name, type) \
        SD_BUS_PROPERTY(name, type, property_workqueue, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

static const sd_bus_vtable workqueue_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Name", "s", property_workqueue, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Flags", "u", property_workqueue, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Owner", "u", property_workqueue, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Builtin", "b", property_workqueue, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        WQ_PROPERTY("MaxActive", "u"),
        WQ_PROPERTY("Frozen", "b"),
        WQ_PROPERTY("Draining", "b"),
        WQ_PROPERTY("Pending", "t"),
        WQ_PROPERTY("Running", "t"),
        WQ_PROPERTY("Total", "t"),
        WQ_PROPERTY("InFlight", "t"),
        WQ_PROPERTY("CPUUSec", "t"),
        WQ_PROPERTY("CPUIntensive", "t"),
        WQ_PROPERTY("CMWakeups", "t"),
        WQ_PROPERTY("Mayday", "t"),
        WQ_PROPERTY("Rescued", "t"),
        WQ_PROPERTY("Requeued", "t"),
        WQ_PROPERTY("Failed", "t"),
        WQ_PROPERTY("TimedOut", "t"),
        SD_BUS_METHOD_WITH_ARGS("Submit", SD_BUS_ARGS(SUBMIT_ARGS), SD_BUS_RESULT("t", id, "b", already_pending),
                                wq_method_submit, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Flush", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, wq_method_flush,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Drain", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, wq_method_drain,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Destroy", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, wq_method_destroy,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetMaxActive", SD_BUS_ARGS("u", max_active), SD_BUS_NO_RESULT,
                                wq_method_set_max_active, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Freeze", SD_BUS_ARGS("t", timeout_usec), SD_BUS_NO_RESULT, wq_method_freeze,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Thaw", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, wq_method_thaw,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

/* The caller of the message being processed may see @wq.  Only method
 * calls look objects up: anything else sees nothing. */
static bool workqueue_visible_to_current(struct ipc_dbus *d, sd_bus *bus, const struct workqueue *wq) {
        sd_bus_message *m = sd_bus_get_current_message(bus);
        struct dbus_sender *s;

        if (!m || sd_bus_message_is_method_call(m, NULL, NULL) <= 0)
                return false;
        if (ipc_dbus_client(d, m, &s, NULL) < 0)
                return false;
        return workqueue_visible_to(wq, &s->caller);
}

struct workqueue_by_path {
        const char *name;               /* exact, as in the path */
        struct workqueue *found;
};

static int workqueue_match_path(struct workqueue *wq, const struct core_workqueue_info *v, void *userdata) {
        struct workqueue_by_path *p = userdata;
        char exact[CORE_WORKQUEUE_NAME_MAX];

        core_workqueue_name_for(v, NULL, exact, sizeof(exact));
        if (strcmp(exact, p->name) != 0)
                return 0;
        p->found = wq;
        return 1;
}

static int find_workqueue(sd_bus *bus, const char *path, const char *interface, void *userdata, void **found,
                          sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        _cleanup_(freep) char *name = NULL;
        struct workqueue_by_path p = {};
        struct dbus_workqueue *w = NULL;
        int r;

        r = sd_bus_path_decode(path, CMWQ_DBUS_WORKQUEUE_PREFIX, &name);
        if (r <= 0 || !name[0])
                return 0;
        p.name = name;
        if (core_for_each_workqueue(d->core, NULL, workqueue_match_path, &p) > 0)
                w = ipc_dbus_workqueue_find(d, p.found);
        /* Another user's queue is not there for the caller, as on the socket. */
        if (!w || !workqueue_visible_to_current(d, bus, w->wq))
                return 0;
        *found = w;
        return 1;
}

struct workqueue_nodes {
        struct ipc_dbus *dbus;
        sd_bus *bus;
        char **nodes;
        size_t n;
};

static int workqueue_node_add(struct workqueue *wq, const struct core_workqueue_info *v, void *userdata) {
        struct workqueue_nodes *e = userdata;

        if (!workqueue_visible_to_current(e->dbus, e->bus, wq))
                return 0;
        if (workqueue_info_path(v, &e->nodes[e->n]) < 0)
                return -ENOMEM;
        e->n++;
        return 0;
}

static int enumerate_workqueues(sd_bus *bus, const char *path, void *userdata, char ***ret_nodes,
                                sd_bus_error *error) {
        struct ipc_dbus *d = userdata;
        struct workqueue_nodes e = { .dbus = d, .bus = bus };

        e.nodes = calloc(core_nr_workqueues(d->core) + 1, sizeof(char *));
        if (!e.nodes)
                return -ENOMEM;
        if (core_for_each_workqueue(d->core, NULL, workqueue_node_add, &e) < 0) {
                strv_free(e.nodes);
                return -ENOMEM;
        }
        *ret_nodes = e.nodes;
        return 0;
}

/* Before any method call or property read: answered and decided from who
 * runs now. */
static int dbus_catch_up(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct ipc_dbus *d = userdata;

        sleepwatch_catch_up(core_sleepwatch(d->core));
        return 0;
}

int ipc_dbus_objects_add(struct ipc_dbus *d) {
        int r;

        r = sd_bus_add_filter(d->bus, NULL, dbus_catch_up, d);
        if (r < 0)
                return r;
        r = sd_bus_add_object_vtable(d->bus, NULL, CMWQ_DBUS_PATH, CMWQ_DBUS_MANAGER_INTERFACE, manager_vtable, d);
        if (r < 0)
                return r;
        r = sd_bus_add_fallback_vtable(d->bus, NULL, CMWQ_DBUS_WORKQUEUE_PREFIX, CMWQ_DBUS_WORKQUEUE_INTERFACE,
                                       workqueue_vtable, find_workqueue, d);
        if (r < 0)
                return r;
        r = sd_bus_add_node_enumerator(d->bus, NULL, CMWQ_DBUS_WORKQUEUE_PREFIX, enumerate_workqueues, d);
        if (r < 0)
                return r;
        return sd_bus_add_object_manager(d->bus, NULL, CMWQ_DBUS_PATH);
}

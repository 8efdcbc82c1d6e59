/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "dbus/bus-event.h"
#include "util.h"

struct bus_event {
        sd_bus *bus;
        struct event_base *base;
        struct event *io;       /* re-added with the events sd-bus wants */
        struct event *timer;
        struct event *kick;     /* run one round from the loop */
        int fd;
        bus_event_disconnected_fn disconnected;
        void *userdata;
};

static void bus_event_run(struct bus_event *be);

static void on_bus_event(evutil_socket_t fd, short what, void *userdata) {
        bus_event_run(userdata);
}

static void bus_event_arm(struct bus_event *be) {
        uint64_t until;
        int events, r;
        short what = 0;

        events = sd_bus_get_events(be->bus);
        if (events < 0) {
                /* A closed connection: nothing left to watch. */
                event_del(be->io);
                event_del(be->timer);
                return;
        }
        if (events & POLLIN)
                what |= EV_READ;
        if (events & POLLOUT)
                what |= EV_WRITE;

        /* The fd can change between rounds only before the connection is
         * up; assign again so that a new fd is watched. */
        int fd = sd_bus_get_fd(be->bus);
        if (fd >= 0 && (fd != be->fd || event_get_events(be->io) != what)) {
                event_del(be->io);
                event_assign(be->io, be->base, fd, what, on_bus_event, be);
                be->fd = fd;
        }
        if (fd >= 0 && what)
                event_add(be->io, NULL);

        r = sd_bus_get_timeout(be->bus, &until);
        if (r > 0 && until != UINT64_MAX) {
                uint64_t now = now_usec(CLOCK_MONOTONIC);
                struct timeval tv = timeval_from_usec(until > now ? until - now : 0);
                event_add(be->timer, &tv);
        } else
                event_del(be->timer);
}

static void bus_event_run(struct bus_event *be) {
        bool closed;
        int r;

        /* Process everything that is ready: sd-bus handles one message per
         * call, and its fd may not poll readable for messages it has
         * already read into its buffer. */
        sd_bus_ref(be->bus);
        do {
                r = sd_bus_process(be->bus, NULL);
        } while (r > 0);
        if (r < 0 && r != -ECONNRESET && r != -ENOTCONN)
                log_warning_errno(r, "Processing a D-Bus connection failed: %m");
        bus_event_arm(be);
        closed = r == -ECONNRESET || r == -ENOTCONN || sd_bus_is_open(be->bus) <= 0;
        sd_bus_unref(be->bus);
        /* Last: the handler may only schedule, never detach @be here. */
        if (closed && be->disconnected)
                be->disconnected(be->userdata);
}

void bus_event_on_disconnected(struct bus_event *be, bus_event_disconnected_fn fn, void *userdata) {
        be->disconnected = fn;
        be->userdata = userdata;
}

int bus_event_attach(sd_bus *bus, struct event_base *base, struct bus_event **ret) {
        struct bus_event *be = calloc(1, sizeof(*be));

        if (!be)
                return -ENOMEM;
        be->bus = sd_bus_ref(bus);
        be->base = base;
        be->fd = -1;
        be->io = event_new(base, -1, 0, on_bus_event, be);
        be->timer = evtimer_new(base, on_bus_event, be);
        be->kick = event_new(base, -1, 0, on_bus_event, be);
        if (!be->io || !be->timer || !be->kick) {
                bus_event_detach(be);
                return -ENOMEM;
        }
        bus_event_arm(be);
        /* Messages may already be queued (Hello, AddMatch). */
        bus_event_kick(be);
        *ret = be;
        return 0;
}

void bus_event_kick(struct bus_event *be) {
        /* Activating an already active event only merges the flags. */
        if (be)
                event_active(be->kick, EV_TIMEOUT, 0);
}

struct bus_event *bus_event_detach(struct bus_event *be) {
        if (!be)
                return NULL;
        if (be->io)
                event_free(be->io);
        if (be->timer)
                event_free(be->timer);
        if (be->kick)
                event_free(be->kick);
        sd_bus_unref(be->bus);
        free(be);
        return NULL;
}

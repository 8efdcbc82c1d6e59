/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * sd-bus driven from the daemon's one libevent loop (doc/design.md §4.1):
 * no second loop, no thread.  The bus's fd is watched for what
 * sd_bus_get_events() asks, a timer follows sd_bus_get_timeout(), and after
 * every sd_bus_process() round both are armed again.
 *
 * Messages sent from outside a bus callback (a deferred method reply, a
 * signal emitted when an item ends) may sit in sd-bus's write queue; call
 * bus_event_kick() after sending them so that the queue is flushed from the
 * loop.
 */

#include <systemd/sd-bus.h>

struct event_base;
struct bus_event;

/* Takes a reference on @bus; the caller keeps its own. */
int bus_event_attach(sd_bus *bus, struct event_base *base, struct bus_event **ret);
struct bus_event *bus_event_detach(struct bus_event *be);
void bus_event_kick(struct bus_event *be);
/* @fn is called, from the loop, after a round in which the connection was
 * found closed (the bus daemon went away): it may schedule, but must not
 * detach @be from inside the call. */
typedef void (*bus_event_disconnected_fn)(void *userdata);
void bus_event_on_disconnected(struct bus_event *be, bus_event_disconnected_fn fn, void *userdata);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Which signals to believe.  A signal sent to cmwqd alone (one with a
 * destination) may come from any client on the bus, naming any path,
 * interface and sender it likes: the bus daemon stamps the real sender
 * field, but sd-bus dispatches it to a match that names a well-known sender
 * (org.freedesktop.login1) without checking that the sender owns it, and
 * the system bus's default policy lets every user send signals.  A
 * broadcast, on the other hand, reaches our match only if the bus daemon
 * found the sender owning the name the match names.  So logind's and the
 * bus daemon's signals count only as broadcasts.
 */

#include <stdbool.h>
#include <string.h>
#include <systemd/sd-bus.h>

static inline bool bus_signal_is_broadcast(sd_bus_message *m) {
        return !sd_bus_message_get_destination(m);
}

/* The bus daemon's own (NameOwnerChanged): no client can be its sender. */
static inline bool bus_signal_is_from_bus_daemon(sd_bus_message *m) {
        const char *sender = sd_bus_message_get_sender(m);

        return bus_signal_is_broadcast(m) && sender && strcmp(sender, "org.freedesktop.DBus") == 0;
}

/* For the log. */
static inline const char *bus_signal_sender(sd_bus_message *m) {
        const char *sender = sd_bus_message_get_sender(m);

        return sender ? sender : "an unknown sender";
}

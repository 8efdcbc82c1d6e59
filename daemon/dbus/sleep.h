/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Suspend integration (doc/design.md §3.8): the daemon holds a
 * systemd-logind *delay* inhibitor on "sleep".  On PrepareForSleep(true) it
 * freezes every FREEZABLE workqueue, waits for their running items up to the
 * core's freeze timeout, and only then closes the inhibitor, so the machine
 * sleeps with nothing freezable half done.  On PrepareForSleep(false) it
 * thaws them (what waited starts in order) and takes a new inhibitor.
 *
 * logind is reached over the system bus ($DBUS_SYSTEM_BUS_ADDRESS when set),
 * driven from the daemon's event loop by bus_event.  Without a system bus or
 * without logind on it the daemon says so once and goes on; when logind
 * appears later, the inhibitor is taken then.
 */

struct core;
struct event_base;
struct sleep_freezer;

/* Fails only when out of memory: a missing bus or logind is logged, not an
 * error. */
int sleep_freezer_new(struct event_base *base, struct core *core, struct sleep_freezer **ret);
struct sleep_freezer *sleep_freezer_free(struct sleep_freezer *s);

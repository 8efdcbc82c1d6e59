/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "base/log.h"
#include "dbus/bus-signal.h"
#include "core/core.h"
#include "dbus/bus-event.h"
#include "dbus/sleep.h"
#include "util.h"

#define LOGIND_NAME "org.freedesktop.login1"
#define LOGIND_PATH "/org/freedesktop/login1"
#define LOGIND_MANAGER "org.freedesktop.login1.Manager"
/* logind answers at once; this only bounds a hung one (or its activation). */
#define INHIBIT_STARTUP_TIMEOUT_USEC (10 * USEC_PER_SEC)
/* Released this much before logind would stop waiting, so that the items
 * still running are logged before the sleep. */
#define LOGIND_DELAY_MARGIN_USEC (500 * USEC_PER_MSEC)

struct sleep_freezer {
        struct core *core;
        sd_bus *bus;                    /* NULL: no system bus */
        struct bus_event *bus_event;
        sd_bus_slot *inhibit_call;      /* an Inhibit() in flight */
        sd_bus_slot *max_delay_call;    /* reading InhibitDelayMaxUSec */
        uint64_t logind_max_delay_usec; /* 0: not known */
        int inhibitor_fd;               /* -1: no inhibitor held */
        bool inhibitor_announced;       /* the first one is logged, later ones not */
        bool absence_logged;            /* "no bus / no logind" is said once */
        bool sleeping;                  /* between PrepareForSleep(true) and (false) */
        struct core_waiter freeze;      /* queued while running items finish */
        bool freezing;
        uint64_t freeze_started_usec;
};

static void sleep_freezer_take_inhibitor(struct sleep_freezer *s);

/* The daemon acts for itself: its own uid is privileged in both modes. */
static struct core_caller self_caller(void) {
        return (struct core_caller) { .uid = geteuid(), .pid = getpid() };
}

static void log_absence_once(struct sleep_freezer *s, const char *why) {
        if (s->absence_logged)
                return;
        s->absence_logged = true;
        log_notice("%s: freezable workqueues are not frozen on suspend by cmwqd itself "
                   "(the system-sleep hook or 'cmwqctl freeze' can do it)", why);
}

static void sleep_freezer_release_inhibitor(struct sleep_freezer *s) {
        if (s->inhibitor_fd < 0)
                return;
        close(s->inhibitor_fd);
        s->inhibitor_fd = -1;
        log_debug("Released the sleep inhibitor");
}

static void on_frozen(struct core_waiter *w, int r) {
        struct sleep_freezer *s = container_of(w, struct sleep_freezer, freeze);
        double waited = (double) (now_usec(CLOCK_MONOTONIC) - s->freeze_started_usec) / USEC_PER_SEC;

        s->freezing = false;
        /* The core has logged each item that held the freeze. */
        if (r == -ETIMEDOUT)
                log_warning("Freezable items still running after %.1f s (the freeze timeout); "
                            "letting the system sleep anyway", waited);
        else
                log_info("Freezable items finished after %.1f s; letting the system sleep", waited);
        sleep_freezer_release_inhibitor(s);
}

/* logind waits for delay inhibitors at most InhibitDelayMaxSec= (5 s by
 * default) and then sleeps anyway: a freeze before a sleep ends a little
 * earlier than that, or at the freeze timeout if that comes first. */
static uint64_t sleep_freezer_timeout(const struct sleep_freezer *s) {
        uint64_t timeout = core_get_config(s->core)->freeze_timeout_usec, max = s->logind_max_delay_usec;
        uint64_t margin = max / 10 < LOGIND_DELAY_MARGIN_USEC ? max / 10 : LOGIND_DELAY_MARGIN_USEC;

        if (max > 0 && max - margin < timeout)
                return max - margin;
        return timeout;
}

static void sleep_freezer_freeze(struct sleep_freezer *s) {
        struct core_caller self = self_caller();
        struct core_error e = {};
        int r;

        if (s->sleeping)
                return;
        s->sleeping = true;
        log_info("The system is about to sleep: freezing the freezable workqueues");

        core_waiter_init(&s->freeze, on_frozen);
        s->freeze_started_usec = now_usec(CLOCK_MONOTONIC);
        r = core_freeze(s->core, &self, NULL, sleep_freezer_timeout(s), &s->freeze, &e);
        if (r < 0)
                log_error_errno(r, "Failed to freeze before sleep (%s); letting the system sleep", e.message);
        if (r == 1) {
                s->freezing = true;
                return;
        }
        if (r == 0)
                log_info("No freezable item is running; letting the system sleep");
        sleep_freezer_release_inhibitor(s);
}

static void sleep_freezer_thaw(struct sleep_freezer *s, const char *why) {
        struct core_caller self = self_caller();
        struct core_error e = {};
        int r;

        if (!s->sleeping)
                return;
        s->sleeping = false;
        if (s->freezing) {
                core_waiter_cancel(&s->freeze);
                s->freezing = false;
        }
        log_info("%s: thawing the freezable workqueues", why);
        r = core_thaw(s->core, &self, NULL, &e);
        if (r < 0)
                log_error_errno(r, "Failed to thaw after sleep: %s", e.message);
}

static int on_prepare_for_sleep(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        struct sleep_freezer *s = userdata;
        int start, r;

        if (!bus_signal_is_broadcast(m)) {
                log_debug("Ignoring a PrepareForSleep signal that %s sent to cmwqd alone",
                          bus_signal_sender(m));
                return 0;
        }
        r = sd_bus_message_read(m, "b", &start);
        if (r < 0) {
                log_warning_errno(r, "Ignoring a malformed PrepareForSleep signal: %m");
                return 0;
        }
        if (start)
                sleep_freezer_freeze(s);
        else {
                sleep_freezer_thaw(s, "The system woke up");
                sleep_freezer_take_inhibitor(s);
        }
        return 0;
}

static const char *inhibit_why(const struct sleep_freezer *s) {
        return core_get_config(s->core)->user_mode ? "Freezing the user instance's freezable workqueues"
                                                   : "Freezing the freezable workqueues";
}

static int on_max_delay_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        struct sleep_freezer *s = userdata;
        uint64_t max = 0, timeout;
        int r;

        s->max_delay_call = sd_bus_slot_unref(s->max_delay_call);
        if (sd_bus_message_is_method_error(m, NULL)) {
                log_debug("Cannot read logind's InhibitDelayMaxUSec: %s",
                          sd_bus_message_get_error(m)->message ?: sd_bus_message_get_error(m)->name);
                return 0;
        }
        r = sd_bus_message_read(m, "v", "t", &max);
        if (r < 0 || max == 0) {
                log_debug("logind's InhibitDelayMaxUSec is not a time; ignoring it");
                return 0;
        }
        s->logind_max_delay_usec = max;
        log_debug("logind's InhibitDelayMaxUSec: %.1f s", (double) max / USEC_PER_SEC);
        timeout = sleep_freezer_timeout(s);
        if (timeout < core_get_config(s->core)->freeze_timeout_usec)
                log_info("logind waits at most %.1f s for a sleep inhibitor (InhibitDelayMaxSec=): a freeze before "
                         "a sleep waits %.1f s for running items, not the freeze timeout of %.1f s",
                         (double) max / USEC_PER_SEC, (double) timeout / USEC_PER_SEC,
                         (double) core_get_config(s->core)->freeze_timeout_usec / USEC_PER_SEC);
        return 0;
}

static void sleep_freezer_read_max_delay(struct sleep_freezer *s) {
        int r;

        if (s->logind_max_delay_usec > 0 || s->max_delay_call)
                return;
        r = sd_bus_call_method_async(s->bus, &s->max_delay_call, LOGIND_NAME, LOGIND_PATH,
                                     "org.freedesktop.DBus.Properties", "Get", on_max_delay_reply, s, "ss",
                                     LOGIND_MANAGER, "InhibitDelayMaxUSec");
        if (r < 0)
                log_debug_errno(r, "Cannot ask for logind's InhibitDelayMaxUSec: %m");
        bus_event_kick(s->bus_event);
}

/* What logind answered to Inhibit(): an @error, or the fd in @reply. */
static void sleep_freezer_inhibited(struct sleep_freezer *s, const sd_bus_error *error, sd_bus_message *reply) {
        int fd, r;

        if (error) {
                if (sd_bus_error_has_name(error, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
                    sd_bus_error_has_name(error, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        log_absence_once(s, "logind (" LOGIND_NAME ") is not on the system bus");
                else {
                        char why[512];

                        snprintf(why, sizeof(why), "logind gave no sleep inhibitor (%s: %s)", error->name,
                                 error->message ?: "no message");
                        log_absence_once(s, why);
                }
                return;
        }

        r = sd_bus_message_read(reply, "h", &fd);
        if (r < 0) {
                log_warning_errno(r, "logind answered Inhibit() without a file descriptor: %m");
                return;
        }
        /* Ours, close-on-exec: an item that inherited it would hold the
         * inhibitor for as long as it runs. */
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
                log_warning_errno(-errno, "Cannot keep the sleep inhibitor: %m");
                return;
        }
        sleep_freezer_release_inhibitor(s);
        s->inhibitor_fd = fd;
        sleep_freezer_read_max_delay(s);

        if (!s->inhibitor_announced) {
                s->inhibitor_announced = true;
                log_info("Holding a logind sleep inhibitor: freezable workqueues are frozen before the system sleeps");
        } else
                log_debug("Holding a new sleep inhibitor");

        /* Taken while the system was already going to sleep, with the
         * freeze done: holding it would only delay the sleep. */
        if (s->sleeping && !s->freezing)
                sleep_freezer_release_inhibitor(s);
}

static int on_inhibit_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        struct sleep_freezer *s = userdata;

        s->inhibit_call = sd_bus_slot_unref(s->inhibit_call);
        sleep_freezer_inhibited(s, sd_bus_message_get_error(m), m);
        return 0;
}

static void sleep_freezer_take_inhibitor(struct sleep_freezer *s) {
        int r;

        if (!s->bus || s->inhibitor_fd >= 0 || s->inhibit_call)
                return;
        /* Also starts logind if it is bus-activatable and not yet running. */
        r = sd_bus_call_method_async(s->bus, &s->inhibit_call, LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "Inhibit",
                                     on_inhibit_reply, s, "ssss", "sleep", "cmwqd", inhibit_why(s), "delay");
        if (r < 0)
                log_warning_errno(r, "Failed to ask logind for a sleep inhibitor: %m");
        bus_event_kick(s->bus_event);
}

/* At start-up, before the daemon reports ready, so that a suspend right
 * after "systemctl start cmwqd" already waits for the freeze. */
static void sleep_freezer_take_inhibitor_now(struct sleep_freezer *s) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *call = NULL, *reply = NULL;
        int r;

        r = sd_bus_message_new_method_call(s->bus, &call, LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "Inhibit");
        if (r >= 0)
                r = sd_bus_message_append(call, "ssss", "sleep", "cmwqd", inhibit_why(s), "delay");
        if (r >= 0)
                r = sd_bus_call(s->bus, call, INHIBIT_STARTUP_TIMEOUT_USEC, &error, &reply);
        if (r < 0 && !sd_bus_error_is_set(&error))
                sd_bus_error_set_errno(&error, r);
        sleep_freezer_inhibited(s, r < 0 ? &error : NULL, reply);
}

static int on_logind_owner_changed(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        struct sleep_freezer *s = userdata;
        const char *name, *old_owner, *new_owner;
        int r;

        if (!bus_signal_is_from_bus_daemon(m)) {
                log_debug("Ignoring a NameOwnerChanged signal that %s sent to cmwqd alone",
                          bus_signal_sender(m));
                return 0;
        }
        r = sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner);
        if (r < 0 || strcmp(name, LOGIND_NAME) != 0)
                return 0;

        if (old_owner[0]) {
                /* Its inhibitors went with it; nobody would tell us of the
                 * wake-up, so do not stay frozen. */
                log_notice("logind left the system bus");
                s->logind_max_delay_usec = 0;
                sleep_freezer_release_inhibitor(s);
                sleep_freezer_thaw(s, "logind is gone");
        }
        if (new_owner[0]) {
                log_info("logind appeared on the system bus");
                sleep_freezer_take_inhibitor(s);
        }
        return 0;
}

/* sd-bus tells of a lost connection with a local signal. */
static int on_bus_message(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        struct sleep_freezer *s = userdata;

        if (!sd_bus_message_is_signal(m, "org.freedesktop.DBus.Local", "Disconnected"))
                return 0;
        /* Only where they were: without logind nothing froze them. */
        if (s->inhibitor_fd >= 0)
                log_warning("Lost the system bus: freezable workqueues are no longer frozen on suspend");
        else
                log_notice("Lost the system bus");
        /* An inhibitor nobody can act on would only delay every sleep. */
        sleep_freezer_release_inhibitor(s);
        sleep_freezer_thaw(s, "Lost the system bus");
        return 0;
}

static int sleep_freezer_connect(struct sleep_freezer *s, struct event_base *base) {
        _cleanup_(sd_bus_unrefp) sd_bus *bus = NULL;
        int r;

        /* $DBUS_SYSTEM_BUS_ADDRESS or the standard socket. */
        r = sd_bus_open_system_with_description(&bus, "cmwqd-sleep");
        if (r < 0) {
                const char *address = getenv("DBUS_SYSTEM_BUS_ADDRESS");
                char why[512];

                snprintf(why, sizeof(why), "No system bus at %s (%s)",
                         address && address[0] ? address : "the standard socket", strerror(-r));
                log_absence_once(s, why);
                return 0;
        }

        s->bus = TAKE_PTR(bus);
        r = sd_bus_add_filter(s->bus, NULL, on_bus_message, s);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the system bus connection: %m");
        /* Waiting for the bus here, at start-up, so that no PrepareForSleep
         * after the daemon reports ready is missed. */
        r = sd_bus_match_signal(s->bus, NULL, LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "PrepareForSleep",
                                on_prepare_for_sleep, s);
        if (r < 0) {
                char why[512];

                snprintf(why, sizeof(why), "Cannot subscribe to logind's PrepareForSleep on the system bus (%s)",
                         strerror(-r));
                log_absence_once(s, why);
                s->bus = sd_bus_close_unref(s->bus);
                return 0;
        }
        r = sd_bus_add_match(s->bus, NULL,
                             "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
                             "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='" LOGIND_NAME "'",
                             on_logind_owner_changed, s);
        if (r < 0)
                log_warning_errno(r, "Cannot watch for logind (re)appearing on the system bus: %m");
        sleep_freezer_take_inhibitor_now(s);

        /* Signals that arrived meanwhile are queued in sd-bus; attaching
         * runs a first round. */
        r = bus_event_attach(s->bus, base, &s->bus_event);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the system bus: %m");
        return 0;
}

int sleep_freezer_new(struct event_base *base, struct core *core, struct sleep_freezer **ret) {
        struct sleep_freezer *s;
        int r;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->core = core;
        s->inhibitor_fd = -1;
        core_waiter_init(&s->freeze, on_frozen);

        r = sleep_freezer_connect(s, base);
        if (r < 0) {
                sleep_freezer_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

struct sleep_freezer *sleep_freezer_free(struct sleep_freezer *s) {
        if (!s)
                return NULL;
        if (s->freezing)
                core_waiter_cancel(&s->freeze);
        s->inhibit_call = sd_bus_slot_unref(s->inhibit_call);
        s->max_delay_call = sd_bus_slot_unref(s->max_delay_call);
        s->bus_event = bus_event_detach(s->bus_event);
        /* Closing the inhibitor lets a pending sleep go on without us. */
        sleep_freezer_release_inhibitor(s);
        /* No flush: it could block on a bus that never answered. */
        s->bus = sd_bus_close_unref(s->bus);
        free(s);
        return NULL;
}

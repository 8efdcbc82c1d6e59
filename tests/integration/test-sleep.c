/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Suspend (doc/design.md §3.8): a real cmwqd --user against a logind on
 * a private system bus — a dbus-daemon of the test's own, running
 * python3-dbusmock's logind template, which hands out inhibitor fds and
 * lists the inhibitors whose fd is still open (ListInhibitors), and whose
 * org.freedesktop.DBus.Mock.EmitSignal sends PrepareForSleep.  Also the
 * system-sleep hook against a real daemon.
 *
 * Items are shell one-liners that append lines to a file; a running item is
 * held by a gate file that the test creates when it wants the item to end,
 * so no assertion depends on how fast this machine is.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Debian's python3-dbusmock is installed for this interpreter only. */
#define MOCK_PYTHON "/usr/bin/python3"

/* echo TAG >> LOG */
#define ITEM_LINE "echo \"$1\" >>\"$2\""
/* TAG start, then wait for GATE to exist, then TAG end */
#define ITEM_GATED "echo \"$1 start\" >>\"$2\"; while [ ! -e \"$3\" ]; do sleep 0.05; done; echo \"$1 end\" >>\"$2\""

struct sysbus {
        char dir[64];
        char address[160];
        pid_t bus_pid;
        pid_t mock_pid;
        sd_bus *client;         /* the test's own connection */
};

static struct sysbus bus;
static struct cmwqd d;

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
}

static void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");

        ck_assert_msg(f, "cannot create %s: %s", path, strerror(errno));
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

/* Starts @argv with stdout and stderr to @log. */
static pid_t spawn_logged(const char *const *argv, const char *log) {
        pid_t pid = test_fork();
        if (pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

                if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(126);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        return pid;
}

static void stop_process(pid_t *pid) {
        if (*pid <= 0)
                return;
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = 0;
}

/* A system-bus-like dbus-daemon on a socket in a fresh directory; clients
 * started afterwards (cmwqd, the mock, the test) find it through
 * $DBUS_SYSTEM_BUS_ADDRESS. */
static void sysbus_start(void) {
        char conf[128], sock[128], log[128], text[1024];
        int r;

        memset(&bus, 0, sizeof(bus));
        snprintf(bus.dir, sizeof(bus.dir), "/tmp/cmwq-sysbus-XXXXXX");
        ck_assert_msg(mkdtemp(bus.dir), "mkdtemp: %s", strerror(errno));
        snprintf(conf, sizeof(conf), "%s/bus.conf", bus.dir);
        snprintf(sock, sizeof(sock), "%s/system_bus_socket", bus.dir);
        snprintf(log, sizeof(log), "%s/dbus-daemon.log", bus.dir);
        snprintf(bus.address, sizeof(bus.address), "unix:path=%s", sock);
        snprintf(text, sizeof(text),
                 "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
                 " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
                 "<busconfig>\n"
                 "  <type>system</type>\n"
                 "  <listen>unix:path=%s</listen>\n"
                 "  <auth>EXTERNAL</auth>\n"
                 "  <policy context=\"default\">\n"
                 "    <allow user=\"*\"/>\n"
                 "    <allow own=\"*\"/>\n"
                 "    <allow send_destination=\"*\"/>\n"
                 "    <allow receive_sender=\"*\"/>\n"
                 "  </policy>\n"
                 "</busconfig>\n",
                 sock);
        write_text(conf, text);

        char conf_arg[160];
        snprintf(conf_arg, sizeof(conf_arg), "--config-file=%s", conf);
        bus.bus_pid = spawn_logged((const char *const[]) { "/usr/bin/dbus-daemon", conf_arg, "--nofork",
                                                           "--nopidfile", NULL },
                                   log);
        ck_assert_int_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address, 1), 0);

        for (int waited = 0;; waited += 20) {
                r = sd_bus_open_system(&bus.client);
                if (r >= 0) {
                        /* Connected is not yet authenticated: ask something. */
                        r = sd_bus_call_method(bus.client, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                               "org.freedesktop.DBus", "GetId", NULL, NULL, "");
                        if (r >= 0)
                                break;
                        bus.client = sd_bus_flush_close_unref(bus.client);
                }
                ck_assert_msg(waitpid(bus.bus_pid, NULL, WNOHANG) == 0, "dbus-daemon exited; log:\n%s",
                              read_file(log));
                ck_assert_msg(waited < 15000, "the private system bus did not come up within 15 s: %s",
                              strerror(-r));
                sleep_ms(20);
        }
}

static bool logind_on_bus(void) {
        sd_bus_message *reply = NULL;
        int has = 0, r;

        r = sd_bus_call_method(bus.client, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", NULL, &reply, "s", "org.freedesktop.login1");
        ck_assert_msg(r >= 0, "NameHasOwner: %s", strerror(-r));
        ck_assert_int_ge(sd_bus_message_read(reply, "b", &has), 0);
        sd_bus_message_unref(reply);
        return has;
}

static void mock_logind_start(void) {
        char log[128];

        snprintf(log, sizeof(log), "%s/logind-mock.log", bus.dir);
        ck_assert_msg(access(MOCK_PYTHON, X_OK) == 0, "%s is missing (Debian: python3-dbusmock)", MOCK_PYTHON);
        bus.mock_pid = spawn_logged((const char *const[]) { MOCK_PYTHON, "-m", "dbusmock", "--system", "--template",
                                                            "logind", NULL },
                                    log);
        for (int waited = 0; !logind_on_bus(); waited += 50) {
                ck_assert_msg(waitpid(bus.mock_pid, NULL, WNOHANG) == 0,
                              "the logind mock exited (is python3-dbusmock installed for " MOCK_PYTHON "?); "
                              "log:\n%s",
                              read_file(log));
                ck_assert_msg(waited < 30000, "the logind mock did not take its name within 30 s");
                sleep_ms(50);
        }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        (void) remove(path);
        return 0;
}

static void sysbus_stop(void) {
        bus.client = sd_bus_flush_close_unref(bus.client);
        stop_process(&bus.mock_pid);
        stop_process(&bus.bus_pid);
        (void) nftw(bus.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        unsetenv("DBUS_SYSTEM_BUS_ADDRESS");
}

/* How many sleep delay inhibitors of cmwqd logind holds: the mock drops
 * one as soon as the other end of its fd is closed. */
static int cmwqd_inhibitors(void) {
        sd_bus_message *reply = NULL;
        const char *what, *who, *why, *mode;
        uint32_t uid, pid;
        int n = 0, r;

        r = sd_bus_call_method(bus.client, "org.freedesktop.login1", "/org/freedesktop/login1",
                               "org.freedesktop.login1.Manager", "ListInhibitors", NULL, &reply, "");
        ck_assert_msg(r >= 0, "ListInhibitors: %s", strerror(-r));
        ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "(ssssuu)"), 0);
        while ((r = sd_bus_message_read(reply, "(ssssuu)", &what, &who, &why, &mode, &uid, &pid)) > 0)
                if (strcmp(who, "cmwqd") == 0 && strcmp(what, "sleep") == 0 && strcmp(mode, "delay") == 0)
                        n++;
        ck_assert_int_ge(r, 0);
        sd_bus_message_unref(reply);
        return n;
}

static bool wait_inhibitors(int n, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 20) {
                if (cmwqd_inhibitors() == n)
                        return true;
                sleep_ms(20);
        }
        return false;
}

static void prepare_for_sleep(bool start) {
        int r;

        r = sd_bus_call_method(bus.client, "org.freedesktop.login1", "/org/freedesktop/login1",
                               "org.freedesktop.DBus.Mock", "EmitSignal", NULL, NULL, "sssav",
                               "org.freedesktop.login1.Manager", "PrepareForSleep", "b", 1, "b", (int) start);
        ck_assert_msg(r >= 0, "EmitSignal(PrepareForSleep): %s", strerror(-r));
}

/* The --json list entry of workqueue @name has "frozen":@frozen. */
static bool queue_frozen_is(const char *name, bool frozen) {
        char *json = CTL_OK(&d, "--json", "list"), pat[128], *p, *e;
        bool r = false;

        snprintf(pat, sizeof(pat), "{\"name\":\"%s\",", name);
        p = strstr(json, pat);
        if (p) {
                e = strchr(p, '}');
                if (e)
                        *e = 0;
                r = strstr(p, frozen ? "\"frozen\":true" : "\"frozen\":false") != NULL;
        }
        free(json);
        return r;
}

static bool wait_frozen_is(const char *name, bool frozen, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 20) {
                if (queue_frozen_is(name, frozen))
                        return true;
                sleep_ms(20);
        }
        return false;
}

/* How many lines of @path are exactly @line. */
static int count_exact(const char *path, const char *line) {
        char *s = read_file(path), *save = NULL;
        int n = 0;

        for (char *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
                n += strcmp(l, line) == 0;
        free(s);
        return n;
}

/* The 0-based line number of @line in @path, -1 if absent. */
static int line_index(const char *path, const char *line) {
        char *s = read_file(path), *save = NULL;
        int k = 0, found = -1;

        for (char *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save), k++)
                if (strcmp(l, line) == 0) {
                        found = k;
                        break;
                }
        free(s);
        return found;
}

static int count_in_log(const char *needle) {
        char *log = read_file(d.log);
        int n = 0;

        for (const char *p = log; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        free(log);
        return n;
}

static bool wait_in_log(const char *needle, int timeout_ms) {
        for (int waited = 0; waited <= timeout_ms; waited += 20) {
                if (count_in_log(needle) > 0)
                        return true;
                sleep_ms(20);
        }
        return false;
}

static char *submit(const char *wq, const char *script, const char *tag, const char *log, const char *gate) {
        if (gate)
                return CTL_OK(&d, "submit", wq, "--", "/bin/sh", "-c", script, "sh", tag, log, gate);
        return CTL_OK(&d, "submit", wq, "--", "/bin/sh", "-c", script, "sh", tag, log);
}

static void cmwqd_user_start(const char *const *extra) {
        const char *args[8] = { "--user" };
        int n = 1;

        for (; extra && *extra && n < 7; extra++)
                args[n++] = *extra;
        args[n] = NULL;
        cmwqd_start(&d, args);
}

static void setup_logind(void) {
        sysbus_start();
        mock_logind_start();
        cmwqd_user_start(NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
        sysbus_stop();
}

START_TEST(test_inhibitor_taken_at_start) {
        char *log, *held, *ready;

        ck_assert_msg(wait_inhibitors(1, 10000), "cmwqd took no sleep delay inhibitor; log:\n%s", read_file(d.log));
        /* One, not one per something. */
        sleep_ms(300);
        ck_assert_int_eq(cmwqd_inhibitors(), 1);

        /* Held before the daemon reports ready (its "listening on" line goes
         * with READY=1): a suspend right after start-up is not missed. */
        ck_assert(wait_in_log("listening on", 10000));
        log = read_file(d.log);
        held = strstr(log, "Holding a logind sleep inhibitor");
        ready = strstr(log, "listening on");
        ck_assert_msg(held && held < ready, "inhibitor not taken before ready; log:\n%s", log);
        free(log);
}
END_TEST

/* cmwqd's connections to the private system bus, by their unique names: up
 * to @max of them into @names (each of 64 bytes).  Returns how many. */
static int cmwqd_bus_names(char names[][64], int max) {
        sd_bus_message *reply = NULL;
        const char *name;
        int n = 0, r;

        r = sd_bus_call_method(bus.client, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "ListNames", NULL, &reply, "");
        ck_assert_msg(r >= 0, "ListNames: %s", strerror(-r));
        ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "s"), 0);
        while (n < max && (r = sd_bus_message_read(reply, "s", &name)) > 0) {
                sd_bus_message *pid_reply = NULL;
                uint32_t pid = 0;

                if (name[0] != ':' ||
                    sd_bus_call_method(bus.client, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                       "org.freedesktop.DBus", "GetConnectionUnixProcessID", NULL, &pid_reply, "s",
                                       name) < 0)
                        continue;
                if (sd_bus_message_read(pid_reply, "u", &pid) > 0 && (pid_t) pid == d.pid)
                        snprintf(names[n++], 64, "%s", name);
                sd_bus_message_unref(pid_reply);
        }
        sd_bus_message_unref(reply);
        return n;
}

/* Sends a signal to @destination alone, as any client on the bus may. */
static void send_signal_to(const char *destination, const char *path, const char *interface, const char *member,
                           const char *types, ...) {
        sd_bus_message *m = NULL;
        va_list ap;
        int r;

        r = sd_bus_message_new_signal(bus.client, &m, path, interface, member);
        ck_assert_int_ge(r, 0);
        ck_assert_int_ge(sd_bus_message_set_destination(m, destination), 0);
        va_start(ap, types);
        r = sd_bus_message_appendv(m, types, ap);
        va_end(ap);
        ck_assert_int_ge(r, 0);
        ck_assert_int_ge(sd_bus_send(bus.client, m, NULL), 0);
        sd_bus_message_unref(m);
}

/* Any client on the system bus may send a signal to cmwqd alone, naming
 * whatever sender, path and interface it likes (the default policy lets
 * every user send signals).  Believed, a forged PrepareForSleep froze every
 * user's freezable queues (freeze is root's) and a forged NameOwnerChanged
 * made cmwqd drop its sleep inhibitor; only logind's and the bus daemon's
 * broadcasts count. */
START_TEST(test_signals_sent_to_cmwqd_alone_are_not_believed) {
        char names[8][64];
        int n;

        ck_assert_msg(wait_inhibitors(1, 10000), "cmwqd took no sleep delay inhibitor; log:\n%s", read_file(d.log));
        n = cmwqd_bus_names(names, 8);
        ck_assert_msg(n > 0, "cmwqd has no connection to the system bus");
        for (int k = 0; k < n; k++) {
                send_signal_to(names[k], "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                               "PrepareForSleep", "b", 1);
                send_signal_to(names[k], "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameOwnerChanged", "sss",
                               "org.freedesktop.login1", ":1.0", "");
        }
        ck_assert_int_ge(sd_bus_flush(bus.client), 0);
        /* Until cmwqd has taken both, one way or the other. */
        for (int waited = 0; (count_in_log("Ignoring a PrepareForSleep signal that") == 0 &&
                              count_in_log("The system is about to sleep") == 0) ||
                             (count_in_log("Ignoring a NameOwnerChanged signal that") == 0 &&
                              count_in_log("logind left the system bus") == 0);
             waited += 20) {
                ck_assert_msg(waited < 10000, "cmwqd took neither forged signal; log:\n%s", read_file(d.log));
                sleep_ms(20);
        }

        ck_assert_msg(count_in_log("The system is about to sleep") == 0 && queue_frozen_is("system_freezable", false),
                      "a forged PrepareForSleep froze the freezable queues; log:\n%s", read_file(d.log));
        ck_assert_msg(count_in_log("logind left the system bus") == 0 && cmwqd_inhibitors() == 1,
                      "a forged NameOwnerChanged made cmwqd drop its inhibitor; log:\n%s", read_file(d.log));

        /* logind's own still counts. */
        prepare_for_sleep(true);
        ck_assert_msg(wait_frozen_is("system_freezable", true, 10000), "the real PrepareForSleep froze nothing");
        prepare_for_sleep(false);
        ck_assert_msg(wait_frozen_is("system_freezable", false, 10000), "the real wake-up thawed nothing");
}
END_TEST

/* The whole cycle: frozen queues start nothing, running items finish before
 * the inhibitor goes, non-freezable work goes on; after the wake-up
 * everything runs once, in order, and a new inhibitor is held. */
START_TEST(test_sleep_freezes_then_resumes_in_order) {
        char log[400], nlog[400], gate[400], *p[3], *s, *json;
        struct ctl_async other;
        struct ctl_result r;
        int r_end;

        test_path(&d, "items.log", log, sizeof(log));
        test_path(&d, "nonfreezable.log", nlog, sizeof(nlog));
        test_path(&d, "gate", gate, sizeof(gate));
        ck_assert_msg(wait_inhibitors(1, 10000), "no inhibitor at start; log:\n%s", read_file(d.log));

        free(CTL_OK(&d, "create", "fz", "--freezable", "--ordered"));
        free(submit("fz", ITEM_GATED, "R", log, gate));
        ck_assert_msg(wait_for_lines(log, 1, 10000) && count_exact(log, "R start") == 1, "R did not start");
        for (int k = 0; k < 3; k++) {
                char tag[8];

                snprintf(tag, sizeof(tag), "P%d", k + 1);
                p[k] = submit("fz", ITEM_LINE, tag, log, NULL);
        }

        prepare_for_sleep(true);
        ck_assert_msg(wait_frozen_is("fz", true, 10000), "fz not frozen after PrepareForSleep(true)");
        ck_assert_msg(wait_frozen_is("system_freezable", true, 1000), "system_freezable not frozen");
        ck_assert_msg(queue_frozen_is("system", false), "non-freezable 'system' was frozen");

        /* Queued during the freeze: waits too. */
        s = submit("system_freezable", ITEM_LINE, "S", log, NULL);
        /* A non-freezable queue keeps running meanwhile. */
        CTL_START(&d, &other, "submit", "system", "--wait", "--", "/bin/sh", "-c", ITEM_LINE, "sh", "N", nlog);
        ck_assert_msg(ctl_finish(&other, 15000, &r), "an item of non-freezable 'system' did not run during the freeze");
        ck_assert_msg(r.status == 0, "submit --wait exited %d: %s", r.status, r.err);
        ctl_result_free(&r);
        ck_assert_int_eq(count_exact(nlog, "N"), 1);

        /* R still runs: the inhibitor must still hold the sleep back. */
        sleep_ms(500);
        ck_assert_msg(cmwqd_inhibitors() == 1, "the inhibitor was released while R still ran");
        ck_assert_int_eq(count_exact(log, "R end"), 0);

        write_text(gate, "");
        ck_assert_msg(wait_inhibitors(0, 30000), "the inhibitor was not released after R ended; log:\n%s",
                      read_file(d.log));
        /* Released only after R had ended. */
        ck_assert_msg(count_exact(log, "R end") == 1, "the inhibitor was released before R ended");

        /* "Asleep": nothing frozen starts. */
        sleep_ms(500);
        ck_assert_msg(count_exact(log, "P1") + count_exact(log, "S") == 0, "a frozen item ran during the sleep");
        json = CTL_OK(&d, "--json", "show", p[0]);
        ck_assert_msg(strstr(json, "\"state\":\"inactive\""), "P1 is not waiting: %s", json);
        free(json);

        prepare_for_sleep(false);
        ck_assert_msg(wait_inhibitors(1, 10000), "no new inhibitor after PrepareForSleep(false); log:\n%s",
                      read_file(d.log));
        free(CTL_OK(&d, "flush", "fz"));
        free(CTL_OK(&d, "flush", "system_freezable"));
        ck_assert_msg(queue_frozen_is("fz", false), "fz still frozen after the wake-up");

        /* Everything ran exactly once, fz's items in submission order. */
        r_end = line_index(log, "R end");
        ck_assert_int_eq(count_exact(log, "R start"), 1);
        ck_assert_int_eq(count_exact(log, "S"), 1);
        for (int k = 0; k < 3; k++) {
                char tag[8];

                snprintf(tag, sizeof(tag), "P%d", k + 1);
                ck_assert_msg(count_exact(log, tag) == 1, "%s ran %d times", tag, count_exact(log, tag));
                ck_assert_msg(line_index(log, tag) > r_end, "%s ran before R ended", tag);
                if (k > 0) {
                        char prev[8];

                        snprintf(prev, sizeof(prev), "P%d", k);
                        ck_assert_msg(line_index(log, prev) < line_index(log, tag), "%s ran before %s", tag, prev);
                }
                free(p[k]);
        }
        free(s);
        ck_assert_int_eq(count_exact(nlog, "N"), 1);
        ck_assert_int_eq(count_in_log("Freeze timed out"), 0);
}
END_TEST

/* A freezable item that does not end in time: the inhibitor goes after
 * the freeze timeout, the item that held it is named, and it keeps running
 * (nobody kills it) until the wake-up. */
START_TEST(test_freeze_timeout_releases_inhibitor_and_names_holder) {
        char log[400], gate[400], held[128], *id, *json;

        mock_logind_start();
        cmwqd_user_start((const char *const[]) { "--freeze-timeout", "1", NULL });
        test_path(&d, "items.log", log, sizeof(log));
        test_path(&d, "gate", gate, sizeof(gate));
        ck_assert_msg(wait_inhibitors(1, 10000), "no inhibitor at start; log:\n%s", read_file(d.log));

        id = submit("system_freezable_unbound", ITEM_GATED, "R", log, gate);
        ck_assert_msg(wait_for_lines(log, 1, 10000), "R did not start");

        prepare_for_sleep(true);
        ck_assert_msg(wait_inhibitors(0, 30000), "the inhibitor was not released after the freeze timeout; log:\n%s",
                      read_file(d.log));
        snprintf(held, sizeof(held), "Freeze timed out: item %s of workqueue system_freezable_unbound", id);
        ck_assert_msg(count_in_log(held) == 1, "the holder was not named before the release; log:\n%s",
                      read_file(d.log));
        ck_assert_msg(count_exact(log, "R end") == 0, "R ended: the release proves nothing about the timeout");
        json = CTL_OK(&d, "--json", "show", id);
        ck_assert_msg(strstr(json, "\"state\":\"running\""), "R no longer runs: %s", json);
        free(json);

        prepare_for_sleep(false);
        ck_assert_msg(wait_inhibitors(1, 10000), "no new inhibitor after the wake-up");
        write_text(gate, "");
        free(CTL_OK(&d, "wait", id));
        ck_assert_int_eq(count_exact(log, "R end"), 1);
        free(id);
}
END_TEST

/* logind stops waiting for delay inhibitors after InhibitDelayMaxSec=: a
 * freeze before a sleep ends a little before that, so that the items still
 * running are named before the system sleeps, and the daemon says so at
 * start.  A shorter --freeze-timeout is left alone. */
START_TEST(test_logind_delay_limit_bounds_the_freeze) {
        static const char said[] = "logind waits at most 2.0 s for a sleep inhibitor";
        char log[400], gate[400], held[128], *id;
        int r;

        mock_logind_start();
        r = sd_bus_call_method(bus.client, "org.freedesktop.login1", "/org/freedesktop/login1",
                               "org.freedesktop.DBus.Mock", "AddProperty", NULL, NULL, "ssv",
                               "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec", "t", UINT64_C(2000000));
        ck_assert_msg(r >= 0, "AddProperty: %s", strerror(-r));
        cmwqd_user_start(NULL);
        ck_assert_msg(wait_in_log(said, 10000), "no word about logind's limit; log:\n%s", read_file(d.log));
        ck_assert_msg(count_in_log("waits 1.8 s for running items, not the freeze timeout of 20.0 s") == 1,
                      "log:\n%s", read_file(d.log));

        test_path(&d, "items.log", log, sizeof(log));
        test_path(&d, "gate", gate, sizeof(gate));
        id = submit("system_freezable", ITEM_GATED, "R", log, gate);
        ck_assert_msg(wait_for_lines(log, 1, 10000), "R did not start");
        prepare_for_sleep(true);
        /* Well before the 20 s freeze timeout, but no assertion on that:
         * the holder named in the log says the shorter bound was used. */
        ck_assert_msg(wait_inhibitors(0, 30000), "the inhibitor was not released");
        snprintf(held, sizeof(held), "Freeze timed out: item %s of workqueue system_freezable", id);
        ck_assert_msg(count_in_log(held) == 1, "the holder was not named before the release; log:\n%s",
                      read_file(d.log));
        ck_assert_int_eq(count_exact(log, "R end"), 0);
        prepare_for_sleep(false);
        write_text(gate, "");
        free(CTL_OK(&d, "wait", id));
        free(id);
        cmwqd_stop(&d);

        cmwqd_user_start((const char *const[]) { "--freeze-timeout", "1.5", NULL });
        ck_assert_msg(wait_in_log("logind's InhibitDelayMaxUSec: 2.0 s", 10000), "limit not read; log:\n%s",
                      read_file(d.log));
        ck_assert_int_eq(count_in_log("logind waits at most"), 0);
}
END_TEST

/* A daemon on a system bus without logind says so once and serves; when
 * logind shows up later, it takes its inhibitor then. */
START_TEST(test_without_logind_logs_once_and_serves) {
        static const char absent[] = "logind (org.freedesktop.login1) is not on the system bus";
        char log[400], *out;

        cmwqd_user_start(NULL);
        ck_assert_msg(wait_in_log(absent, 10000), "no word about the missing logind; log:\n%s", read_file(d.log));

        out = CTL_OK(&d, "submit", "system_freezable", "--wait", "--", "/bin/echo", "served");
        ck_assert_str_eq(out, "served");
        free(out);
        test_path(&d, "items.log", log, sizeof(log));
        free(CTL_OK(&d, "freeze"));
        free(CTL_OK(&d, "thaw"));
        free(CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", ITEM_LINE, "sh", "X", log));
        ck_assert_int_eq(count_exact(log, "X"), 1);
        ck_assert_int_eq(count_in_log(absent), 1);
        ck_assert_int_eq(count_in_log("not frozen on suspend"), 1);

        mock_logind_start();
        ck_assert_msg(wait_inhibitors(1, 10000), "no inhibitor once logind appeared; log:\n%s", read_file(d.log));
        ck_assert_int_eq(count_in_log(absent), 1);
}
END_TEST

START_TEST(test_without_system_bus_logs_once_and_serves) {
        char address[200], *out;

        /* A bus address where nothing listens. */
        snprintf(address, sizeof(address), "unix:path=%s/no-such-socket", bus.dir);
        ck_assert_int_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1), 0);
        cmwqd_user_start(NULL);
        ck_assert_msg(wait_in_log("No system bus at", 10000), "no word about the missing bus; log:\n%s",
                      read_file(d.log));
        out = CTL_OK(&d, "submit", "system_freezable", "--wait", "--", "/bin/echo", "served");
        ck_assert_str_eq(out, "served");
        free(out);
        ck_assert_int_eq(count_in_log("not frozen on suspend"), 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* the system-sleep hook */

struct hook_result {
        int status;
        char *err;
};

/* Runs the built hook with @phase as systemd-sleep would, against @socket. */
static void run_hook(const char *phase, const char *socket, struct hook_result *res) {
        const char *hook = getenv("CMWQ_SLEEP_HOOK"), *ctl = getenv("CMWQCTL");
        char err_path[400];
        int status;
        pid_t pid;

        ck_assert_msg(hook && hook[0] && ctl && ctl[0],
                      "$CMWQ_SLEEP_HOOK or $CMWQCTL is not set: run the tests through 'make check'");
        snprintf(err_path, sizeof(err_path), "%s/hook-%s.err", bus.dir, phase);
        pid = test_fork();
        if (pid == 0) {
                int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(126);
                /* The cmwqctl just built, not the installed one. */
                setenv("CMWQCTL", ctl, 1);
                setenv("CMWQ_SOCKET", socket, 1);
                execl(hook, hook, phase, "suspend", (char *) NULL);
                _exit(127);
        }
        /* It must never keep the system awake for long: give it the
         * daemon's freeze timeout and plenty more, then fail. */
        for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited += 20) {
                if (waited > 60000) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        ck_abort_msg("the sleep hook (%s) did not return within 60 s", phase);
                }
                sleep_ms(20);
        }
        res->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        res->err = read_file(err_path);
}

/* The hook alone (no inhibitor): the same freeze, wait and thaw. */
START_TEST(test_sleep_hook_freezes_and_thaws) {
        char log[400], gate[400], *p;
        struct hook_result h;
        pid_t writer;

        cmwqd_user_start((const char *const[]) { "--no-sleep-inhibitor", NULL });
        test_path(&d, "items.log", log, sizeof(log));
        test_path(&d, "gate", gate, sizeof(gate));
        free(CTL_OK(&d, "create", "fz", "--freezable", "--ordered"));
        free(submit("fz", ITEM_GATED, "R", log, gate));
        ck_assert_msg(wait_for_lines(log, 1, 10000), "R did not start");
        p = submit("fz", ITEM_LINE, "P", log, NULL);

        /* The hook waits for R: open the gate a moment after it started. */
        writer = test_fork();
        if (writer == 0) {
                sleep_ms(500);
                write_text(gate, "");
                _exit(0);
        }
        run_hook("pre", d.socket, &h);
        waitpid(writer, NULL, 0);
        ck_assert_msg(h.status == 0, "the hook exited %d: %s", h.status, h.err);
        ck_assert_msg(strstr(h.err, "froze"), "hook said: %s", h.err);
        free(h.err);
        ck_assert_msg(count_exact(log, "R end") == 1, "the hook returned before R ended");
        ck_assert_msg(queue_frozen_is("fz", true) && queue_frozen_is("system_freezable", true), "not frozen");
        sleep_ms(300);
        ck_assert_msg(count_exact(log, "P") == 0, "P ran while frozen");

        run_hook("post", d.socket, &h);
        ck_assert_msg(h.status == 0, "the hook exited %d: %s", h.status, h.err);
        free(h.err);
        free(CTL_OK(&d, "wait", p));
        ck_assert_int_eq(count_exact(log, "P"), 1);
        ck_assert_msg(queue_frozen_is("fz", false), "fz still frozen after the post hook");
        free(p);
}
END_TEST

/* The hook after the logind path froze, and before it thaws: harmless. */
START_TEST(test_sleep_hook_with_logind_path) {
        char log[400], *p;
        struct hook_result h;

        test_path(&d, "items.log", log, sizeof(log));
        ck_assert_msg(wait_inhibitors(1, 10000), "no inhibitor at start");
        prepare_for_sleep(true);
        ck_assert_msg(wait_inhibitors(0, 30000), "the inhibitor was not released");
        p = submit("system_freezable", ITEM_LINE, "P", log, NULL);

        run_hook("pre", d.socket, &h);
        ck_assert_msg(h.status == 0, "the hook exited %d: %s", h.status, h.err);
        free(h.err);
        ck_assert_msg(queue_frozen_is("system_freezable", true), "not frozen");
        sleep_ms(300);
        ck_assert_int_eq(count_exact(log, "P"), 0);

        /* systemd-sleep runs the post hooks before logind says it woke up. */
        run_hook("post", d.socket, &h);
        ck_assert_msg(h.status == 0, "the hook exited %d: %s", h.status, h.err);
        free(h.err);
        free(CTL_OK(&d, "wait", p));
        prepare_for_sleep(false);
        ck_assert_msg(wait_inhibitors(1, 10000), "no new inhibitor after the wake-up");
        ck_assert_msg(queue_frozen_is("system_freezable", false), "still frozen");
        ck_assert_int_eq(count_exact(log, "P"), 1);
        free(p);
}
END_TEST

/* No daemon, or a socket nobody serves (a daemon that died): the hook
 * says why and lets the system sleep. */
START_TEST(test_sleep_hook_without_daemon) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct hook_result h;
        char missing[200];
        int fd;

        snprintf(missing, sizeof(missing), "%s/no-cmwqd.sock", bus.dir);
        run_hook("pre", missing, &h);
        ck_assert_msg(h.status == 0, "the hook exited %d: %s", h.status, h.err);
        ck_assert_msg(strstr(h.err, "not running"), "hook said: %s", h.err);
        free(h.err);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/stale.sock", bus.dir);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        close(fd);
        run_hook("post", sa.sun_path, &h);
        ck_assert_msg(h.status == 0, "the hook exited %d: %s", h.status, h.err);
        ck_assert_msg(strstr(h.err, "cannot reach cmwqd"), "hook said: %s", h.err);
        free(h.err);
}
END_TEST

static void setup_bus_only(void) {
        sysbus_start();
}

int main(void) {
        Suite *s = suite_create("sleep");
        TCase *with_logind = tcase_create("with-logind");
        TCase *other = tcase_create("other");
        SRunner *sr;
        int failed;

        /* The daemon is started by the fixture. */
        tcase_add_checked_fixture(with_logind, setup_logind, teardown);
        tcase_set_timeout(with_logind, 120);
        tcase_add_test(with_logind, test_inhibitor_taken_at_start);
        tcase_add_test(with_logind, test_signals_sent_to_cmwqd_alone_are_not_believed);
        tcase_add_test(with_logind, test_sleep_freezes_then_resumes_in_order);
        tcase_add_test(with_logind, test_sleep_hook_with_logind_path);
        suite_add_tcase(s, with_logind);

        /* Each test starts its daemon (and logind, if it wants one). */
        tcase_add_checked_fixture(other, setup_bus_only, teardown);
        tcase_set_timeout(other, 120);
        tcase_add_test(other, test_freeze_timeout_releases_inhibitor_and_names_holder);
        tcase_add_test(other, test_logind_delay_limit_bounds_the_freeze);
        tcase_add_test(other, test_without_logind_logs_once_and_serves);
        tcase_add_test(other, test_without_system_bus_logs_once_and_serves);
        tcase_add_test(other, test_sleep_hook_freezes_and_thaws);
        tcase_add_test(other, test_sleep_hook_without_daemon);
        suite_add_tcase(s, other);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

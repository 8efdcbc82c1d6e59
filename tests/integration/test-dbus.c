/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The D-Bus front end (org.cmwq.cmwqd1) of a real cmwqd --user on a private
 * dbus-daemon started by the test: every method, property and signal,
 * replies that wait without blocking the daemon, wrong-user calls refused,
 * one state seen by both front ends, and the installed introspection XML
 * against what the daemon exports.  The clients are sd-bus and busctl.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define NAME "org.cmwq.cmwqd1"
#define PATH "/org/cmwq/cmwqd1"
#define MANAGER "org.cmwq.cmwqd1.Manager"
#define WORKQUEUE "org.cmwq.cmwqd1.Workqueue"
#define WQ_PREFIX "/org/cmwq/cmwqd1/workqueue/"
#define NOBODY 65534
/* A second unprivileged user, the victim in the tests of issue 12 (no
 * passwd entry, as in test-security.c). */
#define OTHER 65533
/* The victim on the system bus, which refuses uids without a passwd entry. */
#define VICTIM 1
/* Workqueue names are per user: an object is named by "UID/NAME" (escaped),
 * a built-in queue by its name.  Root's queues: */
#define ROOTS WQ_PREFIX "_30_2f"

static struct cmwqd d;
static pid_t bus_pid;
static char bus_dir[64], bus_address[256];
static sd_bus *bus;

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };

        nanosleep(&ts, NULL);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        ck_assert_msg(f, "cannot create %s: %s", path, strerror(errno));
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

static int bus_try_connect(sd_bus **ret);
static void bus_spawn(void);

/*
 * The default policy of Debian 12's system bus (/usr/share/dbus-1/system.conf),
 * what cmwqd meets in production and what issue 12 was found on: no
 * eavesdropping, only root may become a monitor, signals may be sent to
 * anyone.  Our policy file is included as the package installs it.
 */
static const char system_policy[] =
        "  <policy context=\"default\">\n"
        "    <allow user=\"*\"/>\n"
        "    <deny own=\"*\"/>\n"
        "    <deny send_type=\"method_call\"/>\n"
        "    <allow send_type=\"signal\"/>\n"
        "    <allow send_requested_reply=\"true\" send_type=\"method_return\"/>\n"
        "    <allow send_requested_reply=\"true\" send_type=\"error\"/>\n"
        "    <allow receive_type=\"method_call\"/>\n"
        "    <allow receive_type=\"method_return\"/>\n"
        "    <allow receive_type=\"error\"/>\n"
        "    <allow receive_type=\"signal\"/>\n"
        "    <allow send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus\"/>\n"
        "    <allow send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus.Introspectable\"/>\n"
        "    <allow send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus.Properties\"/>\n"
        "    <deny send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus\"\n"
        "          send_member=\"UpdateActivationEnvironment\"/>\n"
        "    <deny send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus.Debug.Stats\"/>\n"
        "  </policy>\n"
        "  <policy user=\"root\">\n"
        "    <allow send_destination=\"org.freedesktop.DBus\" send_interface=\"org.freedesktop.DBus.Monitoring\"/>\n"
        "  </policy>\n";

/* A private bus that every local user may use; names are anyone's, as on a
 * session bus (the system policy file is checked on its own). */
static void bus_start(void);
/* A private bus with the system bus's policy and ours, or (@system false)
 * one that lets everyone do everything, as a session bus. */
static void bus_start_with(bool system) {
        char conf[96], sock[96], ours[PATH_MAX], policy[sizeof(system_policy) + PATH_MAX + 64];

        snprintf(bus_dir, sizeof(bus_dir), "/tmp/cmwq-dbus-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(bus_dir));
        ck_assert_int_eq(chmod(bus_dir, 0755), 0);
        snprintf(conf, sizeof(conf), "%s/bus.conf", bus_dir);
        snprintf(sock, sizeof(sock), "%s/bus", bus_dir);
        snprintf(bus_address, sizeof(bus_address), "unix:path=%s", sock);

        if (system) {
                char file[PATH_MAX];

                snprintf(file, sizeof(file), "%s/../dbus/org.cmwq.cmwqd1.conf", getenv("CMWQ_TEST_SRCDIR"));
                ck_assert_msg(realpath(file, ours), "%s: %s", file, strerror(errno));
                snprintf(policy, sizeof(policy), "%s  <include>%s</include>\n", system_policy, ours);
        } else
                snprintf(policy, sizeof(policy),
                         "  <policy context=\"default\">\n"
                         "    <allow user=\"*\"/>\n"
                         "    <allow own=\"*\"/>\n"
                         /* as Debian's session.conf: without these the bus
                          * answers nobody, not even Hello */
                         "    <allow send_destination=\"*\" eavesdrop=\"true\"/>\n"
                         "    <allow eavesdrop=\"true\"/>\n"
                         "  </policy>\n");

        FILE *f = fopen(conf, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
                   " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
                   "<busconfig>\n"
                   "  <type>%s</type>\n"
                   "  <listen>unix:path=%s</listen>\n"
                   "  <auth>EXTERNAL</auth>\n"
                   "%s"
                   "</busconfig>\n",
                system ? "system" : "session", sock, policy);
        ck_assert_int_eq(fclose(f), 0);

        bus_spawn();
}

/* Starts dbus-daemon on the configuration and address of bus_start_with()
 * (again, for a restart) and connects the test's client. */
static void bus_spawn(void) {
        char conf[96], sock[96];

        snprintf(conf, sizeof(conf), "%s/bus.conf", bus_dir);
        snprintf(sock, sizeof(sock), "%s/bus", bus_dir);
        bus_pid = test_fork();
        if (bus_pid == 0) {
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

                /* It complains that it cannot raise its fd limit; not ours. */
                if (null >= 0)
                        dup2(null, STDERR_FILENO);
                execlp("dbus-daemon", "dbus-daemon", "--nofork", "--config-file", conf, (char *) NULL);
                _exit(127);
        }
        for (int waited = 0; access(sock, F_OK) < 0; waited += 10) {
                ck_assert_msg(waitpid(bus_pid, NULL, WNOHANG) == 0, "dbus-daemon exited at start-up");
                ck_assert_msg(waited < 10000, "dbus-daemon did not listen within 10 s");
                sleep_ms(10);
        }
        /* Other users must reach it (uid 65534's calls). */
        ck_assert_int_eq(chmod(sock, 0777), 0);
        /* The socket exists before the bus listens on it. */
        for (int waited = 0; bus_try_connect(&bus) < 0; waited += 10) {
                ck_assert_msg(waited < 10000, "dbus-daemon did not accept connections within 10 s");
                sleep_ms(10);
        }
}

static void bus_start(void) {
        bus_start_with(false);
}

static void bus_stop(void) {
        if (bus_pid > 0) {
                kill(bus_pid, SIGTERM);
                waitpid(bus_pid, NULL, 0);
                bus_pid = 0;
        }
        char path[160];
        snprintf(path, sizeof(path), "%s/bus.conf", bus_dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/bus", bus_dir);
        unlink(path);
        rmdir(bus_dir);
}

static int bus_try_connect(sd_bus **ret) {
        sd_bus *b = NULL;
        int r;

        r = sd_bus_new(&b);
        if (r >= 0)
                r = sd_bus_set_address(b, bus_address);
        if (r >= 0)
                r = sd_bus_set_bus_client(b, 1);
        if (r >= 0)
                r = sd_bus_start(b);
        if (r < 0) {
                sd_bus_unref(b);
                return r;
        }
        *ret = b;
        return 0;
}

static sd_bus *bus_connect(void) {
        sd_bus *b = NULL;
        int r = bus_try_connect(&b);

        ck_assert_msg(r >= 0, "cannot connect to %s: %s", bus_address, strerror(-r));
        return b;
}

static bool name_has_owner(sd_bus *b) {
        sd_bus_message *reply = NULL;
        int has = 0;

        if (sd_bus_call_method(b, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", NULL, &reply, "s", NAME) < 0)
                return false;
        (void) sd_bus_message_read(reply, "b", &has);
        sd_bus_message_unref(reply);
        return has;
}

static void start_daemon(const char *const *extra) {
        const char *args[8] = { "--user" };
        size_t n = 1;

        for (; extra && *extra && n < 7; extra++)
                args[n++] = *extra;
        args[n] = NULL;
        setenv("DBUS_SESSION_BUS_ADDRESS", bus_address, 1);
        cmwqd_start(&d, args);
}

static void setup(void) {
        bus_start();
        start_daemon(NULL);
        for (int waited = 0; !name_has_owner(bus); waited += 20) {
                ck_assert_msg(waited < 15000, "cmwqd did not take %s within 15 s; log:\n%s", NAME, read_file(d.log));
                sleep_ms(20);
        }
}

/* cmwqd as installed: the system instance, on a bus with the system policy. */
static void setup_system(void) {
        bus_start_with(true);
        setenv("DBUS_SYSTEM_BUS_ADDRESS", bus_address, 1);
        cmwqd_start(&d, (const char *const[]) { "--no-sleep-inhibitor", NULL });
        for (int waited = 0; !name_has_owner(bus); waited += 20) {
                ck_assert_msg(waited < 15000, "cmwqd did not take %s within 15 s; log:\n%s", NAME, read_file(d.log));
                sleep_ms(20);
        }
}

static void teardown(void) {
        bus = sd_bus_flush_close_unref(bus);
        cmwqd_stop(&d);
        bus_stop();
}

/* ---- calling ---------------------------------------------------------------- */

/* Calls a Manager method and fails the test on an error. */
static sd_bus_message *call_ok(const char *path, const char *iface, const char *method, const char *types, ...) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        va_list ap;
        int r;

        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, NAME, path, iface, method), 0);
        if (types) {
                va_start(ap, types);
                ck_assert_int_ge(sd_bus_message_appendv(m, types, ap), 0);
                va_end(ap);
        }
        r = sd_bus_call(bus, m, 60 * 1000000ULL, &error, &reply);
        ck_assert_msg(r >= 0, "%s.%s failed: %s: %s", iface, method, error.name, error.message);
        sd_bus_message_unref(m);
        sd_bus_error_free(&error);
        return reply;
}

/* Calls and expects the D-Bus error @name; returns the error's message. */
static char *call_fails(sd_bus *b, const char *path, const char *iface, const char *method, const char *name,
                        const char *types, ...) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        char *msg;
        va_list ap;
        int r;

        ck_assert_int_ge(sd_bus_message_new_method_call(b, &m, NAME, path, iface, method), 0);
        if (types) {
                va_start(ap, types);
                ck_assert_int_ge(sd_bus_message_appendv(m, types, ap), 0);
                va_end(ap);
        }
        r = sd_bus_call(b, m, 60 * 1000000ULL, &error, &reply);
        ck_assert_msg(r < 0, "%s.%s succeeded, expected %s", iface, method, name);
        ck_assert_msg(strcmp(error.name, name) == 0, "%s.%s: expected %s, got %s: %s", iface, method, name,
                      error.name, error.message);
        msg = strdup(error.message ? error.message : "");
        sd_bus_message_unref(m);
        sd_bus_error_free(&error);
        return msg;
}

static uint64_t submit(const char *wq, const char *const *argv, const char *key, uint64_t delay_usec,
                       bool *already) {
        sd_bus_message *m = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        uint64_t id = 0;
        int a = 0;

        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, NAME, PATH, MANAGER, "Submit"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", wq), 0);
        ck_assert_int_ge(sd_bus_message_append_strv(m, (char **) argv), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "as", 0), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", ""), 0);
        ck_assert_int_ge(sd_bus_message_append_array(m, 'y', "", 0), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "itst", -1, delay_usec, key ? key : "", (uint64_t) 0), 0);
        ck_assert_msg(sd_bus_call(bus, m, 0, &error, &reply) >= 0, "Submit: %s", error.message);
        ck_assert_int_ge(sd_bus_message_read(reply, "tb", &id, &a), 0);
        if (already)
                *already = a;
        sd_bus_message_unref(m);
        sd_bus_message_unref(reply);
        return id;
}

/* An item (a{sv}) as read by the test. */
struct item_info {
        uint64_t id;
        char workqueue[80];
        char state[32];
        uint32_t uid;
        int exit_status;        /* -1: none */
        int signal;             /* -1: none */
        char out[256];
        char key[64];
        char argv0[64];
};

static void read_item(sd_bus_message *m, struct item_info *info) {
        const char *key;

        memset(info, 0, sizeof(*info));
        info->exit_status = info->signal = -1;
        ck_assert_int_ge(sd_bus_message_enter_container(m, 'a', "{sv}"), 0);
        while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
                const char *s;
                const void *p;
                size_t len;
                uint32_t u;
                int32_t i;

                ck_assert_int_ge(sd_bus_message_read(m, "s", &key), 0);
                if (strcmp(key, "Id") == 0)
                        ck_assert_int_ge(sd_bus_message_read(m, "v", "t", &info->id), 0);
                else if (strcmp(key, "Workqueue") == 0 || strcmp(key, "State") == 0 || strcmp(key, "Key") == 0) {
                        ck_assert_int_ge(sd_bus_message_read(m, "v", "s", &s), 0);
                        snprintf(strcmp(key, "State") == 0 ? info->state : strcmp(key, "Key") == 0 ? info->key
                                                                                                 : info->workqueue,
                                 64, "%s", s);
                } else if (strcmp(key, "UID") == 0) {
                        ck_assert_int_ge(sd_bus_message_read(m, "v", "u", &u), 0);
                        info->uid = u;
                } else if (strcmp(key, "ExitStatus") == 0 || strcmp(key, "Signal") == 0) {
                        ck_assert_int_ge(sd_bus_message_read(m, "v", "i", &i), 0);
                        *(strcmp(key, "Signal") == 0 ? &info->signal : &info->exit_status) = i;
                } else if (strcmp(key, "Stdout") == 0) {
                        ck_assert_int_ge(sd_bus_message_enter_container(m, 'v', "ay"), 0);
                        ck_assert_int_ge(sd_bus_message_read_array(m, 'y', &p, &len), 0);
                        snprintf(info->out, sizeof(info->out), "%.*s", (int) len, (const char *) p);
                        ck_assert_int_ge(sd_bus_message_exit_container(m), 0);
                } else if (strcmp(key, "Argv") == 0) {
                        char **l = NULL;

                        ck_assert_int_ge(sd_bus_message_enter_container(m, 'v', "as"), 0);
                        ck_assert_int_ge(sd_bus_message_read_strv(m, &l), 0);
                        snprintf(info->argv0, sizeof(info->argv0), "%s", l && l[0] ? l[0] : "");
                        for (char **k = l; k && *k; k++)
                                free(*k);
                        free(l);
                        ck_assert_int_ge(sd_bus_message_exit_container(m), 0);
                } else
                        ck_assert_int_ge(sd_bus_message_skip(m, "v"), 0);
                ck_assert_int_ge(sd_bus_message_exit_container(m), 0);
        }
        ck_assert_int_ge(sd_bus_message_exit_container(m), 0);
}

static void item_call(const char *method, uint64_t id, struct item_info *info) {
        sd_bus_message *reply = call_ok(PATH, MANAGER, method, "t", id);

        read_item(reply, info);
        sd_bus_message_unref(reply);
}

static uint64_t property_u64(const char *path, const char *name, char type) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        uint64_t t = 0;
        uint32_t u = 0;
        int b = 0, r;

        switch (type) {
        case 't':
                r = sd_bus_get_property_trivial(bus, NAME, path, WORKQUEUE, name, &error, 't', &t);
                break;
        case 'u':
                r = sd_bus_get_property_trivial(bus, NAME, path, WORKQUEUE, name, &error, 'u', &u);
                t = u;
                break;
        default:
                r = sd_bus_get_property_trivial(bus, NAME, path, WORKQUEUE, name, &error, 'b', &b);
                t = (uint64_t) b;
                break;
        }
        ck_assert_msg(r >= 0, "property %s of %s: %s", name, path, error.message);
        sd_bus_error_free(&error);
        return t;
}

/* Runs a program (stdout and stderr together), as @uid (with group @uid and
 * supplementary group 100) unless it is -1. */
static int run(uid_t uid, char **out, const char *const *argv) {
        int p[2], status;
        size_t len = 0;
        char buf[4096];
        ssize_t n;
        pid_t pid;

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        pid = test_fork();
        if (pid == 0) {
                dup2(p[1], STDOUT_FILENO);
                dup2(p[1], STDERR_FILENO);
                /* One supplementary group (100, "users"), to see that
                 * items do not get the caller's groups over D-Bus either. */
                if (uid != (uid_t) -1 && (setgroups(1, (gid_t[]) { 100 }) < 0 || setresgid(uid, uid, uid) < 0 ||
                                          setresuid(uid, uid, uid) < 0))
                        _exit(126);
                execvp(argv[0], (char *const *) argv);
                _exit(127);
        }
        close(p[1]);
        *out = calloc(1, 1);
        while ((n = read(p[0], buf, sizeof(buf))) > 0) {
                *out = realloc(*out, len + (size_t) n + 1);
                memcpy(*out + len, buf, (size_t) n);
                len += (size_t) n;
                (*out)[len] = 0;
        }
        close(p[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* busctl --address=BUS ARGS..., as @uid. */
static int busctl(uid_t uid, char **out, const char *const *args) {
        const char *argv[40];
        char address[300];
        int n = 0;

        snprintf(address, sizeof(address), "--address=%s", bus_address);
        argv[n++] = "busctl";
        argv[n++] = address;
        argv[n++] = "--timeout=60";
        for (; *args && n < 39; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        return run(uid, out, argv);
}
#define BUSCTL(uid, out, ...) busctl(uid, out, (const char *const[]) { __VA_ARGS__, NULL })

static void busctl_ok(char **out, const char *const *args) {
        int r = busctl((uid_t) -1, out, args);

        ck_assert_msg(r == 0, "busctl %s %s exited %d: %s", args[0], args[1] ? args[1] : "", r, *out);
}
#define BUSCTL_OK(out, ...) busctl_ok(out, (const char *const[]) { __VA_ARGS__, NULL })

/* ---- signals ---------------------------------------------------------------- */

#define SEEN_MAX 256
static struct seen {
        char member[32];
        char path[128];
        char text[512];         /* what the test looks for, flattened */
} seen[SEEN_MAX];
static int n_seen;

static int on_signal(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct seen *s;

        if (n_seen >= SEEN_MAX)
                return 0;
        s = &seen[n_seen++];
        snprintf(s->member, sizeof(s->member), "%s", sd_bus_message_get_member(m));
        snprintf(s->path, sizeof(s->path), "%s", sd_bus_message_get_path(m));
        if (strcmp(s->member, "ItemFinished") == 0) {
                uint64_t id;
                const char *wq, *state;
                int32_t exit_status, sig;
                uint32_t uid;

                if (sd_bus_message_read(m, "tssiiu", &id, &wq, &state, &exit_status, &sig, &uid) >= 0)
                        snprintf(s->text, sizeof(s->text), "%llu %s %s %d %d %u", (unsigned long long) id, wq, state,
                                 exit_status, sig, uid);
        } else if (strcmp(s->member, "PropertiesChanged") == 0) {
                const char *iface, *prop;
                size_t len = 0;

                /* "Name=value Name=value ..." for t, u and b values */
                if (sd_bus_message_read(m, "s", &iface) < 0 ||
                    sd_bus_message_enter_container(m, 'a', "{sv}") < 0)
                        return 0;
                while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
                        const char *contents = NULL;
                        unsigned long long v = 0;

                        if (sd_bus_message_read(m, "s", &prop) < 0 ||
                            sd_bus_message_peek_type(m, NULL, &contents) < 0)
                                return 0;
                        if (strcmp(contents, "t") == 0) {
                                uint64_t t;
                                sd_bus_message_read(m, "v", "t", &t);
                                v = t;
                        } else if (strcmp(contents, "u") == 0) {
                                uint32_t u;
                                sd_bus_message_read(m, "v", "u", &u);
                                v = u;
                        } else if (strcmp(contents, "b") == 0) {
                                int b;
                                sd_bus_message_read(m, "v", "b", &b);
                                v = (unsigned long long) b;
                        } else
                                sd_bus_message_skip(m, "v");
                        sd_bus_message_exit_container(m);
                        if (len < sizeof(s->text))
                                len += (size_t) snprintf(s->text + len, sizeof(s->text) - len, "%s=%llu ", prop, v);
                }
        } else if (strcmp(s->member, "InterfacesAdded") == 0 || strcmp(s->member, "InterfacesRemoved") == 0) {
                const char *path;

                if (sd_bus_message_read(m, "o", &path) >= 0)
                        snprintf(s->text, sizeof(s->text), "%s", path);
        }
        return 0;
}

/* Signals are sent only to the clients that asked for them. */
static void subscribe(void) {
        ck_assert_int_ge(sd_bus_match_signal(bus, NULL, NAME, NULL, NULL, NULL, on_signal, NULL), 0);
        /* The match is in place once a round trip has passed. */
        sd_bus_message_unref(call_ok(PATH, MANAGER, "Subscribe", NULL));
}

/* Processes the bus until a signal @member on @path (NULL: any) has @text
 * in it, for up to 20 s. */
static bool saw(const char *member, const char *path, const char *text) {
        int64_t until = mono_ns() + 20LL * 1000000000;

        for (;;) {
                for (int k = 0; k < n_seen; k++)
                        if (strcmp(seen[k].member, member) == 0 && (!path || strcmp(seen[k].path, path) == 0) &&
                            strstr(seen[k].text, text))
                                return true;
                if (mono_ns() > until)
                        return false;
                if (sd_bus_process(bus, NULL) > 0)
                        continue;
                sd_bus_wait(bus, 100000);
        }
}

/* ---- other users' clients ------------------------------------------------- */

/*
 * A bus client of another uid, in a child process, that tries everything a
 * local user can to see what cmwqd sends: a match for every signal from
 * cmwqd, a match that asks to eavesdrop, BecomeMonitor on a second
 * connection, and Subscribe.  Every message it receives that is not the bus
 * daemon's own is written to its log, one line each, "MEMBER PATH TEXT" as
 * on_signal() flattens it.  watcher_sync() returns once everything cmwqd
 * sent it before has arrived and is logged.
 */
struct watcher {
        pid_t pid;
        int cmd;                /* "s": sync; closed: exit */
        int reply;              /* "r" when ready, "s" after each sync */
        char log[400];
};

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

static FILE *watcher_log;
static const char *watcher_name;

static int watcher_filter(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *sender = sd_bus_message_get_sender(m);
        const char *destination = sd_bus_message_get_destination(m);
        uint8_t type = 0;

        (void) sd_bus_message_get_type(m, &type);
        if (sender && strcmp(sender, "org.freedesktop.DBus") == 0)
                return 0;
        /* Replies to its own calls are its own; anything else, a signal or
         * someone else's traffic, is logged. */
        if (type != SD_BUS_MESSAGE_SIGNAL && destination && strcmp(destination, watcher_name) == 0)
                return 0;
        n_seen = 0;
        (void) on_signal(m, NULL, NULL);
        fprintf(watcher_log, "%s %s %s\n", seen[0].member, seen[0].path, seen[0].text);
        fflush(watcher_log);
        return 0;
}

static void watcher_child(uid_t uid, int cmd, int reply, const char *log) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus *b = NULL, *mon = NULL;
        static const char *const matches[] = {
                "type='signal',sender='" NAME "'",
                "type='signal',eavesdrop='true'",
                "eavesdrop='true'",
        };

        watcher_log = fopen(log, "we");
        if (!watcher_log)
                _exit(126);
        /* Not the other watchers' pipes: each must see its own close. */
        for (int fd = 3; fd < 1024; fd++)
                if (fd != cmd && fd != reply && fd != fileno(watcher_log))
                        close(fd);
        if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                _exit(126);
        int step = 0, r = bus_try_connect(&b);
        /* The name is known once Hello is answered. */
        if (r >= 0 && ++step)
                r = sd_bus_call_method(b, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                       "GetId", &error, NULL, NULL);
        if (r >= 0 && ++step)
                r = sd_bus_get_unique_name(b, &watcher_name);
        if (r >= 0 && ++step)
                r = sd_bus_add_filter(b, NULL, watcher_filter, NULL);
        if (r < 0) {
                fprintf(watcher_log, "CONNECT-FAILED %d %s %s\n", step, strerror(-r), error.message);
                fclose(watcher_log);
                _exit(125);
        }
        /* Straight to the bus, past sd-bus's own match bookkeeping: what
         * arrives goes through the filter either way. */
        for (size_t k = 0; k < ELEMENTSOF(matches); k++)
                if (sd_bus_call_method(b, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                       "AddMatch", &error, NULL, "s", matches[k]) < 0) {
                        fprintf(watcher_log, "ADDMATCH-REFUSED %s %s\n", matches[k], error.name);
                        sd_bus_error_free(&error);
                }
        if (bus_try_connect(&mon) >= 0 &&
            sd_bus_call_method(mon, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus.Monitoring", "BecomeMonitor", NULL, NULL, "asu", 0,
                               (uint32_t) 0) >= 0)
                fprintf(watcher_log, "MONITOR-ALLOWED\n");
        sd_bus_flush_close_unref(mon);
        /* Before cmwqd had it, this failed, and the signals came anyway. */
        if (sd_bus_call_method(b, NAME, PATH, MANAGER, "Subscribe", &error, NULL, NULL) < 0)
                fprintf(watcher_log, "SUBSCRIBE-FAILED %s\n", error.name);
        sd_bus_error_free(&error);
        fflush(watcher_log);
        if (write(reply, "r", 1) != 1)
                _exit(124);

        for (;;) {
                struct pollfd p[2] = { { .fd = sd_bus_get_fd(b), .events = (short) sd_bus_get_events(b) },
                                       { .fd = cmd, .events = POLLIN } };
                char c;

                while (sd_bus_process(b, NULL) > 0)
                        ;
                if (poll(p, 2, 100) < 0 && errno != EINTR)
                        _exit(123);
                if (!(p[1].revents & (POLLIN | POLLHUP)))
                        continue;
                if (read(cmd, &c, 1) != 1)
                        _exit(0);
                /* cmwqd answers in order: whatever it sent before the
                 * reply to this has been received once the reply is. */
                if (sd_bus_call_method(b, NAME, PATH, "org.freedesktop.DBus.Peer", "Ping", NULL, NULL, NULL) < 0)
                        fprintf(watcher_log, "PING-FAILED\n");
                while (sd_bus_process(b, NULL) > 0)
                        ;
                fflush(watcher_log);
                if (write(reply, "s", 1) != 1)
                        _exit(124);
        }
}

static void watcher_wait_for(struct watcher *w, char what) {
        struct pollfd p = { .fd = w->reply, .events = POLLIN };
        char c = 0;

        ck_assert_msg(poll(&p, 1, 30000) == 1, "the watcher did not answer within 30 s; its log:\n%s",
                      read_file(w->log));
        if (read(w->reply, &c, 1) != 1 || c != what) {
                int status = 0;

                waitpid(w->pid, &status, 0);
                ck_abort_msg("the watcher failed (status 0x%x); its log:\n%s", status, read_file(w->log));
        }
}

static void watcher_start(struct watcher *w, uid_t uid, const char *name) {
        int cmd[2], reply[2];

        test_path(&d, name, w->log, sizeof(w->log));
        ck_assert_int_eq(pipe2(cmd, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(reply, O_CLOEXEC), 0);
        w->pid = test_fork();
        if (w->pid == 0) {
                close(cmd[1]);
                close(reply[0]);
                watcher_child(uid, cmd[0], reply[1], w->log);
                _exit(0);
        }
        close(cmd[0]);
        close(reply[1]);
        w->cmd = cmd[1];
        w->reply = reply[0];
        watcher_wait_for(w, 'r');
}

static char *watcher_sync(struct watcher *w) {
        ck_assert_int_eq(write(w->cmd, "s", 1), 1);
        watcher_wait_for(w, 's');
        return read_file(w->log);
}

static void watcher_stop(struct watcher *w) {
        int status;

        close(w->cmd);
        close(w->reply);
        ck_assert_int_eq(waitpid(w->pid, &status, 0), w->pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the watcher exited with 0x%x", status);
}

/* ---- tests ------------------------------------------------------------------ */

/* The lines of the <interface name="@iface"> element that describe it
 * (methods, args, properties, signals, annotations), whitespace trimmed,
 * comments left out, joined by newlines. */
static char *interface_lines(const char *xml, const char *iface) {
        char start[128];
        const char *p, *end;
        char *out = calloc(1, strlen(xml) + 1);
        size_t len = 0;
        bool comment = false;

        snprintf(start, sizeof(start), "<interface name=\"%s\">", iface);
        p = strstr(xml, start);
        ck_assert_msg(p, "no %s in:\n%s", start, xml);
        end = strstr(p, "</interface>");
        ck_assert_ptr_nonnull(end);
        while (p < end) {
                const char *eol = memchr(p, '\n', (size_t) (end - p));
                const char *a = p, *b = eol ? eol : end;

                p = eol ? eol + 1 : end;
                while (a < b && (*a == ' ' || *a == '\t'))
                        a++;
                while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
                        b--;
                if (comment || (b - a >= 4 && memcmp(a, "<!--", 4) == 0)) {
                        comment = !(b - a >= 3 && memcmp(b - 3, "-->", 3) == 0);
                        continue;
                }
                if (a == b)
                        continue;
                memcpy(out + len, a, (size_t) (b - a));
                len += (size_t) (b - a);
                out[len++] = '\n';
        }
        out[len] = 0;
        return out;
}

static void check_introspection(const char *path, const char *iface) {
        char file[512];
        const char *srcdir = getenv("CMWQ_TEST_SRCDIR");
        sd_bus_message *reply;
        const char *xml;
        char *live, *installed, *text;

        ck_assert_ptr_nonnull(srcdir);
        snprintf(file, sizeof(file), "%s/../dbus/%s.xml", srcdir, iface);
        text = read_file(file);
        ck_assert_msg(text[0], "cannot read %s", file);
        reply = call_ok(path, "org.freedesktop.DBus.Introspectable", "Introspect", NULL);
        ck_assert_int_ge(sd_bus_message_read(reply, "s", &xml), 0);
        live = interface_lines(xml, iface);
        installed = interface_lines(text, iface);
        if (strcmp(live, installed) != 0) {
                /* Name the first line that differs (a whole dump is too
                 * long for Check's message). */
                const char *a = live, *b = installed;

                while (*a && *a == *b) {
                        a++;
                        b++;
                }
                while (a > live && a[-1] != '\n') {
                        a--;
                        b--;
                }
                ck_abort_msg("%s differs from what cmwqd exports: file has '%.120s', cmwqd '%.120s'", file, b, a);
        }
        free(live);
        free(installed);
        free(text);
        sd_bus_message_unref(reply);
}

START_TEST(test_introspection_matches_installed_xml) {
        check_introspection(PATH, MANAGER);
        check_introspection(WQ_PREFIX "system", WORKQUEUE);
}
END_TEST

START_TEST(test_manager_methods) {
        struct item_info info;
        sd_bus_message *reply;
        const char *path;
        bool already;
        uint64_t id, delayed, again;
        char *msg;

        reply = call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "build", (uint32_t) 0, (uint32_t) 4);
        ck_assert_int_ge(sd_bus_message_read(reply, "o", &path), 0);
        ck_assert_str_eq(path, ROOTS "build");
        sd_bus_message_unref(reply);
        reply = call_ok(PATH, MANAGER, "GetWorkqueue", "s", "build");
        ck_assert_int_ge(sd_bus_message_read(reply, "o", &path), 0);
        ck_assert_str_eq(path, ROOTS "build");
        sd_bus_message_unref(reply);

        msg = call_fails(bus, PATH, MANAGER, "CreateWorkqueue", "org.cmwq.cmwqd1.Error.AlreadyExists", "suu",
                         "build", (uint32_t) 0, (uint32_t) 0);
        ck_assert_msg(strstr(msg, "already exists"), "%s", msg);
        free(msg);
        free(call_fails(bus, PATH, MANAGER, "CreateWorkqueue", "org.cmwq.cmwqd1.Error.InvalidArgument", "suu",
                        "no spaces", (uint32_t) 0, (uint32_t) 0));
        free(call_fails(bus, PATH, MANAGER, "GetWorkqueue", "org.cmwq.cmwqd1.Error.NotFound", "s", "nosuch"));

        /* Submit with everything: argv, env, cwd, stdin, cpu, key, timeout. */
        {
                sd_bus_message *m = NULL;
                const char *argv[] = { "/bin/sh", "-c", "read line; echo \"$line $GREETING $(pwd)\"; exit 7", NULL };
                const char *env[] = { "GREETING=hello", NULL };
                int a = 1;

                ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, NAME, PATH, MANAGER, "Submit"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "s", "build"), 0);
                ck_assert_int_ge(sd_bus_message_append_strv(m, (char **) argv), 0);
                ck_assert_int_ge(sd_bus_message_append_strv(m, (char **) env), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "s", "/tmp"), 0);
                ck_assert_int_ge(sd_bus_message_append_array(m, 'y', "payload\n", 8), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "itst", 0, (uint64_t) 0, "", (uint64_t) 30000000), 0);
                ck_assert_int_ge(sd_bus_call(bus, m, 0, NULL, &reply), 0);
                ck_assert_int_ge(sd_bus_message_read(reply, "tb", &id, &a), 0);
                ck_assert(!a);
                sd_bus_message_unref(m);
                sd_bus_message_unref(reply);
        }
        item_call("WaitItem", id, &info);
        ck_assert_uint_eq(info.id, id);
        ck_assert_str_eq(info.state, "finished");
        ck_assert_str_eq(info.workqueue, "build");
        ck_assert_int_eq(info.exit_status, 7);
        ck_assert_int_eq(info.signal, -1);
        ck_assert_str_eq(info.out, "payload hello /tmp\n");
        ck_assert_str_eq(info.argv0, "/bin/sh");
        ck_assert_uint_eq(info.uid, 0);
        item_call("GetItem", id, &info);
        ck_assert_str_eq(info.state, "finished");

        /* A key pending under a delay: the second submit is a no-op. */
        delayed = submit("build", (const char *const[]) { "/bin/true", NULL }, "nightly", 60000000, &already);
        ck_assert(!already);
        again = submit("build", (const char *const[]) { "/bin/true", NULL }, "nightly", 60000000, &already);
        ck_assert(already);
        ck_assert_uint_eq(again, delayed);
        item_call("GetItem", delayed, &info);
        ck_assert_str_eq(info.state, "delayed");
        ck_assert_str_eq(info.key, "nightly");
        item_call("CancelItem", delayed, &info);
        ck_assert_str_eq(info.state, "cancelled");
        free(call_fails(bus, PATH, MANAGER, "GetItem", "org.cmwq.cmwqd1.Error.NotFound", "t", (uint64_t) 999999));

        sd_bus_message_unref(call_ok(PATH, MANAGER, "SetMaxActive", "su", "build", (uint32_t) 9));
        ck_assert_uint_eq(property_u64(ROOTS "build", "MaxActive", 'u'), 9);
        free(call_fails(bus, PATH, MANAGER, "SetMaxActive", "org.cmwq.cmwqd1.Error.InvalidArgument", "su", "build",
                        (uint32_t) 513));

        /* The lists. */
        {
                const char *name, *opath;
                uint32_t flags, max_active, owner;
                int builtin, frozen, draining;
                uint64_t pending, running, total;
                bool found = false;
                int n = 0;

                reply = call_ok(PATH, MANAGER, "ListWorkqueues", NULL);
                ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "(souuubbbttt)"), 0);
                while (sd_bus_message_read(reply, "(souuubbbttt)", &name, &opath, &flags, &max_active, &owner,
                                           &builtin, &frozen, &draining, &pending, &running, &total) > 0)
                        if (strcmp(name, "build") == 0) {
                                found = true;
                                ck_assert_str_eq(opath, ROOTS "build");
                                ck_assert_uint_eq(max_active, 9);
                                ck_assert(!builtin);
                                ck_assert_uint_eq(total, 1);
                        }
                ck_assert(found);
                sd_bus_message_unref(reply);

                /* Every pool once, as declared (the signature had a field
                 * more than the values given, read from garbage). */
                {
                        int32_t cpu;
                        int highpri, pools_seen[2 * 1024 + 2] = {};
                        uint32_t w, on_cpu, idle, busy, blocked, cb_threads;
                        uint64_t queued, cbs;
                        int r;

                        ck_assert_int_lt(sysconf(_SC_NPROCESSORS_CONF), 1024);
                        reply = call_ok(PATH, MANAGER, "ListPools", NULL);
                        ck_assert_str_eq(sd_bus_message_get_signature(reply, true), "a(ibuuutuuut)");
                        ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "(ibuuutuuut)"), 0);
                        while ((r = sd_bus_message_read(reply, "(ibuuutuuut)", &cpu, &highpri, &w, &on_cpu, &idle,
                                                        &queued, &busy, &blocked, &cb_threads, &cbs)) > 0) {
                                ck_assert_int_ge(cpu, -1);
                                ck_assert_int_lt(cpu, (int) sysconf(_SC_NPROCESSORS_CONF));
                                ck_assert_int_eq(pools_seen[(cpu + 1) * 2 + !!highpri]++, 0);
                                ck_assert_uint_le(on_cpu, w);
                                n++;
                        }
                        ck_assert_int_eq(r, 0);
                        ck_assert_int_eq(n, 2 * (int) sysconf(_SC_NPROCESSORS_CONF) + 2);
                        sd_bus_message_unref(reply);
                }

                found = false;
                reply = call_ok(PATH, MANAGER, "GetStatistics", NULL);
                ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "(stttttttttt)"), 0);
                for (;;) {
                        uint64_t v[10];
                        int r = sd_bus_message_read(reply, "(stttttttttt)", &name, &v[0], &v[1], &v[2], &v[3],
                                                    &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
                        ck_assert_int_ge(r, 0);
                        if (r == 0)
                                break;
                        if (strcmp(name, "build") == 0) {
                                found = true;
                                ck_assert_uint_eq(v[0], 1);     /* total started */
                        }
                }
                ck_assert(found);
                sd_bus_message_unref(reply);
        }

        sd_bus_message_unref(call_ok(PATH, MANAGER, "FlushWorkqueue", "s", "build"));
        sd_bus_message_unref(call_ok(PATH, MANAGER, "DrainWorkqueue", "s", "build"));
        sd_bus_message_unref(call_ok(PATH, MANAGER, "DestroyWorkqueue", "s", "build"));
        free(call_fails(bus, PATH, MANAGER, "GetWorkqueue", "org.cmwq.cmwqd1.Error.NotFound", "s", "build"));

        /* Freeze and thaw (root), by name and all freezable queues. */
        free(call_fails(bus, PATH, MANAGER, "Freeze", "org.cmwq.cmwqd1.Error.InvalidArgument", "st", "system",
                        (uint64_t) 0));
        sd_bus_message_unref(call_ok(PATH, MANAGER, "Freeze", "st", "", (uint64_t) 0));
        ck_assert_uint_eq(property_u64(WQ_PREFIX "system_5ffreezable", "Frozen", 'b'), 1);
        ck_assert_uint_eq(property_u64(WQ_PREFIX "system_5ffreezable_5funbound", "Frozen", 'b'), 1);
        sd_bus_message_unref(call_ok(PATH, MANAGER, "Thaw", "s", "system_freezable"));
        ck_assert_uint_eq(property_u64(WQ_PREFIX "system_5ffreezable", "Frozen", 'b'), 0);
        sd_bus_message_unref(call_ok(PATH, MANAGER, "Thaw", "s", ""));
        ck_assert_uint_eq(property_u64(WQ_PREFIX "system_5ffreezable_5funbound", "Frozen", 'b'), 0);

        /* The manager's own properties. */
        {
                sd_bus_error error = SD_BUS_ERROR_NULL;
                char *version = NULL, *mode = NULL;
                uint32_t cpus = 0;

                ck_assert_int_ge(sd_bus_get_property_string(bus, NAME, PATH, MANAGER, "Version", &error, &version), 0);
                ck_assert_str_eq(version, PACKAGE_VERSION);
                ck_assert_int_ge(sd_bus_get_property_string(bus, NAME, PATH, MANAGER, "Mode", &error, &mode), 0);
                ck_assert_str_eq(mode, "user");
                ck_assert_int_ge(sd_bus_get_property_trivial(bus, NAME, PATH, MANAGER, "CPUs", &error, 'u', &cpus), 0);
                ck_assert_uint_eq(cpus, (uint32_t) sysconf(_SC_NPROCESSORS_CONF));
                free(version);
                free(mode);
        }
}
END_TEST

static bool wait_property(const char *path, const char *name, char type, uint64_t value) {
        for (int waited = 0; waited < 20000; waited += 20) {
                if (property_u64(path, name, type) == value)
                        return true;
                sleep_ms(20);
        }
        return false;
}

/* A freeze that times out names the item that held it; a running item
 * cancelled is killed and the reply waits for its end. */
START_TEST(test_freeze_timeout_and_cancel_of_a_running_item) {
        const char *obj = ROOTS "ft";
        struct item_info info;
        char *msg, text[64];
        uint64_t id;

        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "ft", (uint32_t) 2, (uint32_t) 0));
        id = submit("ft", (const char *const[]) { "/bin/sleep", "600", NULL }, NULL, 0, NULL);
        ck_assert_msg(wait_property(obj, "Running", 't', 1), "the item did not start");

        msg = call_fails(bus, obj, WORKQUEUE, "Freeze", "org.cmwq.cmwqd1.Error.TimedOut", "t", (uint64_t) 200000);
        snprintf(text, sizeof(text), "item %llu (ft)", (unsigned long long) id);
        ck_assert_msg(strstr(msg, text), "'%s' does not name %s", msg, text);
        free(msg);
        ck_assert_uint_eq(property_u64(obj, "Frozen", 'b'), 1);
        sd_bus_message_unref(call_ok(obj, WORKQUEUE, "Thaw", NULL));

        item_call("CancelItem", id, &info);
        ck_assert_str_eq(info.state, "cancelled");
        ck_assert_int_eq(info.signal, 9);
        ck_assert_uint_eq(property_u64(obj, "Running", 't'), 0);
}
END_TEST

/* The counters of a queue, as properties. */
START_TEST(test_workqueue_counters) {
        const char *obj = ROOTS "count";
        char flag[256], script[600];
        sd_bus_message *m = NULL, *reply = NULL;
        uint64_t id;
        struct item_info info;

        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "count", (uint32_t) 1, (uint32_t) 0));
        /* Cannot be run: Failed. */
        id = submit("count", (const char *const[]) { "/nonexistent/program", NULL }, NULL, 0, NULL);
        item_call("WaitItem", id, &info);
        ck_assert_str_eq(info.state, "failed");
        /* Exit 75 once: Requeued. */
        test_path(&d, "requeued", flag, sizeof(flag));
        snprintf(script, sizeof(script), "[ -e %s ] && exit 0; : > %s; exit 75", flag, flag);
        id = submit("count", (const char *const[]) { "/bin/sh", "-c", script, NULL }, NULL, 0, NULL);
        item_call("WaitItem", id, &info);
        ck_assert_int_eq(info.exit_status, 0);
        /* Over its timeout: TimedOut. */
        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, NAME, obj, WORKQUEUE, "Submit"), 0);
        ck_assert_int_ge(sd_bus_message_append_strv(m, (char *[]) { "/bin/sleep", "600", NULL }), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "as", 0), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", ""), 0);
        ck_assert_int_ge(sd_bus_message_append_array(m, 'y', "", 0), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "itst", -1, (uint64_t) 0, "", (uint64_t) 100000), 0);
        ck_assert_int_ge(sd_bus_call(bus, m, 0, NULL, &reply), 0);
        int already;
        ck_assert_int_ge(sd_bus_message_read(reply, "tb", &id, &already), 0);
        sd_bus_message_unref(m);
        sd_bus_message_unref(reply);
        item_call("WaitItem", id, &info);
        /* Burn some CPU: CPUUSec. */
        id = submit("count", (const char *const[]) { "/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
                                                     NULL },
                    NULL, 0, NULL);
        item_call("WaitItem", id, &info);

        ck_assert_uint_eq(property_u64(obj, "Failed", 't'), 1);
        ck_assert_uint_eq(property_u64(obj, "Requeued", 't'), 1);
        ck_assert_uint_eq(property_u64(obj, "TimedOut", 't'), 1);
        ck_assert_uint_gt(property_u64(obj, "CPUUSec", 't'), 0);
        ck_assert_uint_eq(property_u64(obj, "InFlight", 't'), 0);
        ck_assert_uint_eq(property_u64(obj, "Draining", 'b'), 0);
        /* The pool counters are there (what they count is test-concurrency's). */
        (void) property_u64(obj, "CPUIntensive", 't');
        (void) property_u64(obj, "CMWakeups", 't');
        (void) property_u64(obj, "Mayday", 't');
        (void) property_u64(obj, "Rescued", 't');
}
END_TEST

/* The per-queue object, from busctl as a shell user would. */
START_TEST(test_workqueue_object_methods_with_busctl) {
        char *out;
        char flag[256];
        const char *obj = ROOTS "fr";

        BUSCTL_OK(&out, "call", "--", NAME, PATH, MANAGER, "CreateWorkqueue", "suu", "fr", "2", "0");
        ck_assert_str_eq(out, "o \"" ROOTS "fr\"\n");
        free(out);
        BUSCTL_OK(&out, "get-property", NAME, obj, WORKQUEUE, "Name", "Flags", "Owner", "Builtin", "MaxActive");
        ck_assert_str_eq(out, "s \"fr\"\nu 2\nu 0\nb false\nu 256\n");
        free(out);
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "SetMaxActive", "u", "3");
        free(out);
        BUSCTL_OK(&out, "get-property", NAME, obj, WORKQUEUE, "MaxActive");
        ck_assert_str_eq(out, "u 3\n");
        free(out);

        /* Frozen: a submitted item waits, and runs once thawed. */
        test_path(&d, "ran", flag, sizeof(flag));
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "Freeze", "t", "0");
        free(out);
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "Submit", "asassayitst", "2", "/usr/bin/touch", flag,
                  "0", "", "0", "-1", "0", "", "0");
        ck_assert_str_eq(out, "tb 1 false\n");
        free(out);
        BUSCTL_OK(&out, "get-property", NAME, obj, WORKQUEUE, "Frozen", "Pending", "InFlight");
        ck_assert_str_eq(out, "b true\nt 1\nt 1\n");
        free(out);
        ck_assert_int_ne(access(flag, F_OK), 0);
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "Thaw");
        free(out);
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "Flush");
        free(out);
        ck_assert_int_eq(access(flag, F_OK), 0);
        BUSCTL_OK(&out, "get-property", NAME, obj, WORKQUEUE, "Frozen", "Pending", "Running", "Total", "InFlight");
        ck_assert_str_eq(out, "b false\nt 0\nt 0\nt 1\nt 0\n");
        free(out);
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "Drain");
        free(out);
        BUSCTL_OK(&out, "call", "--", NAME, obj, WORKQUEUE, "Destroy");
        free(out);
        ck_assert_int_ne(BUSCTL((uid_t) -1, &out, "get-property", NAME, obj, WORKQUEUE, "Name"), 0);
        ck_assert_msg(strstr(out, "Unknown object"), "%s", out);
        free(out);
}
END_TEST

START_TEST(test_signals_and_properties_changed) {
        const char *obj = ROOTS "sig";
        char text[128];
        uint64_t id, killed;

        subscribe();
        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "sig", (uint32_t) 2, (uint32_t) 0));
        ck_assert_msg(saw("InterfacesAdded", PATH, obj), "no InterfacesAdded for %s", obj);

        id = submit("sig", (const char *const[]) { "/bin/sh", "-c", "exit 5", NULL }, NULL, 0, NULL);
        snprintf(text, sizeof(text), "%llu sig finished 5 -1 0", (unsigned long long) id);
        ck_assert_msg(saw("ItemFinished", PATH, text), "no ItemFinished '%s'", text);
        ck_assert_msg(saw("PropertiesChanged", obj, "Total=1"), "no PropertiesChanged with Total=1");
        ck_assert_msg(saw("PropertiesChanged", obj, "Running=0"), "no PropertiesChanged with Running=0");

        /* Killed by a signal: no exit status. */
        killed = submit("sig", (const char *const[]) { "/bin/sh", "-c", "kill -9 $$", NULL }, NULL, 0, NULL);
        snprintf(text, sizeof(text), "%llu sig finished -1 9 0", (unsigned long long) killed);
        ck_assert_msg(saw("ItemFinished", PATH, text), "no ItemFinished '%s'", text);

        sd_bus_message_unref(call_ok(PATH, MANAGER, "SetMaxActive", "su", "sig", (uint32_t) 5));
        ck_assert_msg(saw("PropertiesChanged", obj, "MaxActive=5"), "no PropertiesChanged with MaxActive=5");
        sd_bus_message_unref(call_ok(obj, WORKQUEUE, "Freeze", "t", (uint64_t) 0));
        ck_assert_msg(saw("PropertiesChanged", obj, "Frozen=1"), "no PropertiesChanged with Frozen=1");
        sd_bus_message_unref(call_ok(obj, WORKQUEUE, "Thaw", NULL));
        ck_assert_msg(saw("PropertiesChanged", obj, "Frozen=0"), "no PropertiesChanged with Frozen=0");

        sd_bus_message_unref(call_ok(obj, WORKQUEUE, "Destroy", NULL));
        ck_assert_msg(saw("InterfacesRemoved", PATH, obj), "no InterfacesRemoved for %s", obj);
}
END_TEST

static int on_flush_reply(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        int *replied = userdata;

        *replied = sd_bus_message_is_method_error(m, NULL) ? -1 : 1;
        return 0;
}

/* A flush replies only when the items queued before it have finished, and
 * meanwhile the daemon answers everything else, over both front ends. */
START_TEST(test_deferred_flush_does_not_block_the_daemon) {
        char gate[256], script[512], *out;
        uint64_t ids[3];
        int replied = 0;
        struct item_info info;

        test_path(&d, "gate", gate, sizeof(gate));
        snprintf(script, sizeof(script), "while [ ! -e %s ]; do sleep 0.05; done", gate);
        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "slow", (uint32_t) 1, (uint32_t) 0));
        for (int k = 0; k < 3; k++)
                ids[k] = submit("slow", (const char *const[]) { "/bin/sh", "-c", script, NULL }, NULL, 0, NULL);

        ck_assert_int_ge(sd_bus_call_method_async(bus, NULL, NAME, ROOTS "slow", WORKQUEUE, "Flush",
                                                  on_flush_reply, &replied, NULL),
                         0);
        /* A client that leaves while its flush waits is forgotten. */
        {
                sd_bus *gone = bus_connect();

                ck_assert_int_ge(sd_bus_call_method_async(gone, NULL, NAME, ROOTS "slow", WORKQUEUE, "Flush", NULL,
                                                          NULL, NULL),
                                 0);
                ck_assert_int_ge(sd_bus_call_method(gone, NAME, PATH, MANAGER, "ListPools", NULL, NULL, NULL), 0);
                sd_bus_flush_close_unref(gone);
        }
        /* Other calls are answered while the flush waits. */
        for (int k = 0; k < 5; k++) {
                sd_bus_message_unref(call_ok(PATH, MANAGER, "ListWorkqueues", NULL));
                BUSCTL_OK(&out, "get-property", NAME, ROOTS "slow", WORKQUEUE, "InFlight");
                ck_assert_str_eq(out, "t 3\n");
                free(out);
                out = CTL_OK(&d, "list");
                ck_assert_msg(strstr(out, "slow"), "%s", out);
                free(out);
                while (sd_bus_process(bus, NULL) > 0)
                        ;
                ck_assert_int_eq(replied, 0);
        }
        item_call("GetItem", ids[0], &info);
        ck_assert_str_ne(info.state, "finished");

        write_file(gate, "");
        for (int64_t until = mono_ns() + 30LL * 1000000000; replied == 0 && mono_ns() < until;)
                if (sd_bus_process(bus, NULL) == 0)
                        sd_bus_wait(bus, 100000);
        ck_assert_int_eq(replied, 1);
        for (int k = 0; k < 3; k++) {
                item_call("GetItem", ids[k], &info);
                ck_assert_str_eq(info.state, "finished");
        }
}
END_TEST

/* A client on the bus may send cmwqd a NameOwnerChanged of its own, to
 * cmwqd alone, saying that another client left.  Believed, cmwqd forgot
 * that client's waiting calls (it waited for a reply that never came) and
 * its subscription; only the bus daemon's own broadcast counts. */
START_TEST(test_a_forged_name_owner_changed_drops_no_calls) {
        char gate[256], script[512];
        const char *victim = NULL;
        sd_bus *forger = bus_connect();
        sd_bus_message *m = NULL;
        int replied = 0;

        test_path(&d, "gate", gate, sizeof(gate));
        snprintf(script, sizeof(script), "while [ ! -e %s ]; do sleep 0.05; done", gate);
        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "slow", (uint32_t) 1, (uint32_t) 0));
        (void) submit("slow", (const char *const[]) { "/bin/sh", "-c", script, NULL }, NULL, 0, NULL);
        ck_assert_int_ge(sd_bus_call_method_async(bus, NULL, NAME, ROOTS "slow", WORKQUEUE, "Flush", on_flush_reply,
                                                  &replied, NULL),
                         0);
        ck_assert_int_ge(sd_bus_flush(bus), 0);
        ck_assert_int_ge(sd_bus_get_unique_name(bus, &victim), 0);

        ck_assert_int_ge(sd_bus_message_new_signal(forger, &m, "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                                   "NameOwnerChanged"),
                         0);
        ck_assert_int_ge(sd_bus_message_set_destination(m, NAME), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "sss", victim, victim, ""), 0);
        ck_assert_int_ge(sd_bus_send(forger, m, NULL), 0);
        sd_bus_message_unref(m);
        ck_assert_int_ge(sd_bus_flush(forger), 0);
        /* It came before this answer, on the same connection. */
        ck_assert_int_ge(sd_bus_call_method(forger, NAME, PATH, MANAGER, "ListPools", NULL, NULL, NULL), 0);
        sd_bus_flush_close_unref(forger);

        write_file(gate, "");
        for (int64_t until = mono_ns() + 30LL * 1000000000; replied == 0 && mono_ns() < until;)
                if (sd_bus_process(bus, NULL) == 0)
                        sd_bus_wait(bus, 100000);
        ck_assert_msg(replied == 1, "the flush got %s after a forged NameOwnerChanged; log:\n%s",
                      replied ? "an error" : "no reply", read_file(d.log));
}
END_TEST

/* @method on root's item @id, called by uid 65534, fails exactly as on an
 * id that never existed (the id aside): nobody learns which ids exist. */
static void assert_item_error_as_if_unknown(const char *method, uint64_t id) {
        char id_text[32], *theirs, *none, want[512], *p;
        const char *unknown = "987654321";

        snprintf(id_text, sizeof(id_text), "%llu", (unsigned long long) id);
        ck_assert_int_ne(BUSCTL(NOBODY, &theirs, "call", "--", NAME, PATH, MANAGER, method, "t", id_text), 0);
        ck_assert_int_ne(BUSCTL(NOBODY, &none, "call", "--", NAME, PATH, MANAGER, method, "t", unknown), 0);
        p = strstr(none, unknown);
        ck_assert_msg(p, "%s of an unknown id: %s", method, none);
        snprintf(want, sizeof(want), "%.*s%s%s", (int) (p - none), none, id_text, p + strlen(unknown));
        ck_assert_msg(strcmp(theirs, want) == 0, "%s of root's item: '%s'; of an unknown id: '%s'", method, theirs,
                      none);
        free(theirs);
        free(none);
}

/* Another user (uid 65534, through busctl) can neither see nor touch a
 * queue root owns, nor root's items, nor freeze; its own work is its own. */
START_TEST(test_wrong_user_refused) {
        char *out, id_text[32];
        uint64_t id;

        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "private", (uint32_t) 2, (uint32_t) 0));
        id = submit("private", (const char *const[]) { "/bin/true", NULL }, NULL, 0, NULL);
        snprintf(id_text, sizeof(id_text), "%llu", (unsigned long long) id);

        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "DestroyWorkqueue", "s", "private"), 0);
        ck_assert_msg(strstr(out, "no workqueue named 'private'"), "%s", out);
        free(out);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "Submit", "sasassayitst", "private",
                                "1", "/bin/true", "0", "", "0", "-1", "0", "", "0"),
                         0);
        ck_assert_msg(strstr(out, "no workqueue named 'private'"), "%s", out);
        free(out);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, ROOTS "private", WORKQUEUE, "Flush"), 0);
        ck_assert_msg(strstr(out, "Unknown object"), "%s", out);
        free(out);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "get-property", NAME, ROOTS "private", WORKQUEUE, "Flags"), 0);
        free(out);
        /* Root's item: the answer an id that never existed gets. */
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "GetItem", "t", id_text), 0);
        ck_assert_msg(strstr(out, "no work item") && strstr(out, id_text), "%s", out);
        free(out);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "CancelItem", "t", id_text), 0);
        ck_assert_msg(strstr(out, "no work item") && strstr(out, id_text), "%s", out);
        free(out);
        assert_item_error_as_if_unknown("GetItem", id);
        assert_item_error_as_if_unknown("CancelItem", id);
        assert_item_error_as_if_unknown("WaitItem", id);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "Freeze", "st", "system_freezable",
                                "0"),
                         0);
        ck_assert_msg(strstr(out, "only root may freeze"), "%s", out);
        free(out);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, WQ_PREFIX "system", WORKQUEUE, "SetMaxActive",
                                "u", "1"),
                         0);
        ck_assert_msg(strstr(out, "belongs to the system"), "%s", out);
        free(out);
        ck_assert_int_eq(BUSCTL(NOBODY, &out, "tree", NAME), 0);
        ck_assert_msg(!strstr(out, "private") && strstr(out, WQ_PREFIX "system"), "%s", out);
        free(out);

        /* Its own: a queue, and an item on the shared queue that runs as it. */
        ck_assert_int_eq(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "CreateWorkqueue", "suu", "mine",
                                "0", "0"),
                         0);
        free(out);
        ck_assert_uint_eq(property_u64(WQ_PREFIX "_365534_2fmine", "Owner", 'u'), NOBODY);
        /* Names are per user: its "private" is another object than root's. */
        ck_assert_int_eq(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "CreateWorkqueue", "suu", "private",
                                "0", "0"),
                         0);
        ck_assert_str_eq(out, "o \"" WQ_PREFIX "_365534_2fprivate\"\n");
        free(out);
        ck_assert_uint_eq(property_u64(ROOTS "private", "Owner", 'u'), 0);
        ck_assert_uint_eq(property_u64(ROOTS "private", "Flags", 'u'), 2);
        ck_assert_int_eq(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "Submit", "sasassayitst", "system",
                                "3", "/bin/sh", "-c", "id -u; id -g; id -G", "0", "", "0", "-1", "0", "", "0"),
                         0);
        unsigned long long mine;
        ck_assert_int_eq(sscanf(out, "tb %llu", &mine), 1);
        free(out);
        struct item_info info;
        item_call("WaitItem", mine, &info);
        /* nobody's groups from the user database, not the caller's 100. */
        ck_assert_str_eq(info.out, "65534\n65534\n65534\n");
        ck_assert_uint_eq(info.uid, NOBODY);
}
END_TEST

/* Runs busctl as @uid and returns the first unsigned number of its output. */
static unsigned long long busctl_number(uid_t uid, const char *const *args) {
        unsigned long long n = 0;
        char *out;
        int r = busctl(uid, &out, args);

        ck_assert_msg(r == 0 && sscanf(out, "%*s %llu", &n) == 1, "busctl %s %s exited %d: %s", args[0], args[4], r,
                      out);
        free(out);
        return n;
}
#define BUSCTL_NUMBER(uid, ...) busctl_number(uid, (const char *const[]) { __VA_ARGS__, NULL })

/*
 * Issue 12, item 2: uid 65534 watching the bus saw another user's queue
 * created (InterfacesAdded with its name and owner), its counters and
 * ItemFinished with the queue's name.  Under the system bus's own policy,
 * a watcher that tries every way a user has (match rules, eavesdropping,
 * BecomeMonitor, Subscribe) sees nothing of uid 1's queue and items, and
 * still gets the signals about its own; the owner and root get theirs.
 */
START_TEST(test_signals_reach_only_whom_they_concern) {
        struct watcher nobody, owner;
        char *log, *victim_path = NULL, *own_path = NULL, text[160], id_text[32], sys_text[32];
        unsigned long long id, sys_id;

        ck_assert_int_ge(sd_bus_path_encode(PATH "/workqueue", "1/alice-private-payroll", &victim_path), 0);
        ck_assert_int_ge(sd_bus_path_encode(PATH "/workqueue", "65534/watcher-own", &own_path), 0);
        subscribe();
        watcher_start(&nobody, NOBODY, "watcher-nobody");
        watcher_start(&owner, VICTIM, "watcher-owner");

        /* The victim's private queue, an item on it and one on a built-in queue. */
        ck_assert_str_eq(victim_path, WQ_PREFIX "_31_2falice_2dprivate_2dpayroll");
        {
                char *out;
                ck_assert_int_eq(BUSCTL(VICTIM, &out, "call", "--", NAME, PATH, MANAGER, "CreateWorkqueue", "suu",
                                        "alice-private-payroll", "0", "0"),
                                 0);
                free(out);
        }
        id = BUSCTL_NUMBER(VICTIM, "call", "--", NAME, PATH, MANAGER, "Submit", "sasassayitst", "alice-private-payroll",
                           "1", "/bin/true", "0", "", "0", "-1", "0", "", "0");
        sys_id = BUSCTL_NUMBER(VICTIM, "call", "--", NAME, PATH, MANAGER, "Submit", "sasassayitst", "system", "1",
                               "/bin/true", "0", "", "0", "-1", "0", "", "0");
        snprintf(id_text, sizeof(id_text), "%llu", id);
        snprintf(sys_text, sizeof(sys_text), "%llu", sys_id);
        {
                char *out;
                ck_assert_int_eq(BUSCTL(VICTIM, &out, "call", "--", NAME, PATH, MANAGER, "WaitItem", "t", id_text), 0);
                free(out);
                ck_assert_int_eq(BUSCTL(VICTIM, &out, "call", "--", NAME, PATH, MANAGER, "WaitItem", "t", sys_text), 0);
                free(out);
                /* The watcher's own queue: its own news does reach it. */
                ck_assert_int_eq(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "CreateWorkqueue", "suu",
                                        "watcher-own", "0", "0"),
                                 0);
                free(out);
        }

        /* The owner: its queue's birth, counters, and both items' ends. */
        log = watcher_sync(&owner);
        snprintf(text, sizeof(text), "InterfacesAdded " PATH " %s\n", victim_path);
        ck_assert_msg(strstr(log, text), "the owner did not get '%s'; it got:\n%s", text, log);
        snprintf(text, sizeof(text), "PropertiesChanged %s ", victim_path);
        ck_assert_msg(strstr(log, text), "the owner did not get '%s'; it got:\n%s", text, log);
        snprintf(text, sizeof(text), "ItemFinished " PATH " %llu alice-private-payroll finished 0 -1 1\n", id);
        ck_assert_msg(strstr(log, text), "the owner did not get '%s'; it got:\n%s", text, log);
        snprintf(text, sizeof(text), "ItemFinished " PATH " %llu system finished 0 -1 1\n", sys_id);
        ck_assert_msg(strstr(log, text), "the owner did not get '%s'; it got:\n%s", text, log);
        ck_assert_msg(!strstr(log, "watcher-own") && !strstr(log, "watcher_2down"),
                      "the owner got the watcher's news:\n%s", log);
        free(log);

        /* Root: everything. */
        ck_assert_msg(saw("InterfacesAdded", PATH, victim_path), "root got no InterfacesAdded for %s", victim_path);
        snprintf(text, sizeof(text), "%llu alice-private-payroll finished 0 -1 1", id);
        ck_assert_msg(saw("ItemFinished", PATH, text), "root got no ItemFinished '%s'", text);
        ck_assert_msg(saw("InterfacesAdded", PATH, own_path), "root got no InterfacesAdded for %s", own_path);

        /* The watcher: its own queue, nothing of the other user's. */
        log = watcher_sync(&nobody);
        snprintf(text, sizeof(text), "InterfacesAdded " PATH " %s\n", own_path);
        ck_assert_msg(strstr(log, text), "the watcher did not get its own '%s'; it got:\n%s", text, log);
        ck_assert_msg(!strstr(log, "MONITOR-ALLOWED"), "the system policy let uid 65534 monitor the bus");
        ck_assert_msg(!strstr(log, "payroll"), "uid 65534 received uid 1's private work:\n%s", log);
        snprintf(text, sizeof(text), " %s system ", sys_text);
        ck_assert_msg(!strstr(log, text), "uid 65534 received the end of uid 1's item %s:\n%s", sys_text, log);
        snprintf(text, sizeof(text), " %s alice", id_text);
        ck_assert_msg(!strstr(log, text), "uid 65534 received the end of uid 1's item %s:\n%s", id_text, log);
        free(log);

        /* Root unsubscribes and gets nothing more; the watcher still gets
         * its own news. */
        {
                char *out;
                sd_bus_message_unref(call_ok(PATH, MANAGER, "Unsubscribe", NULL));
                n_seen = 0;
                ck_assert_int_eq(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "CreateWorkqueue", "suu",
                                        "after-unsubscribe", "0", "0"),
                                 0);
                free(out);
                log = watcher_sync(&nobody);
                ck_assert_msg(strstr(log, "after_2dunsubscribe"), "%s", log);
                free(log);
                /* Root's connection unsubscribed: a round trip, and nothing came. */
                sd_bus_message_unref(call_ok(PATH, MANAGER, "ListPools", NULL));
                while (sd_bus_process(bus, NULL) > 0)
                        ;
                for (int k = 0; k < n_seen; k++)
                        ck_assert_msg(!strstr(seen[k].text, "after_2dunsubscribe"), "root got %s %s after Unsubscribe",
                                      seen[k].member, seen[k].text);
        }
        watcher_stop(&nobody);
        watcher_stop(&owner);
        free(victim_path);
        free(own_path);
}
END_TEST

/* Issue 12: a D-Bus client is one of its user's connections (per-user limit
 * 'connections', as on the socket) from its first call until it leaves the
 * bus. */
START_TEST(test_bus_clients_count_as_connections) {
        struct watcher w1, w2;
        struct ctl_result r;
        char *out;
        bool served = false;

        cmwqd_stop(&d);
        cmwqd_start(&d, (const char *const[]) { "--no-sleep-inhibitor", "--limit", "connections=2", NULL });
        for (int waited = 0; !name_has_owner(bus); waited += 20) {
                ck_assert_msg(waited < 15000, "cmwqd did not take %s within 15 s", NAME);
                sleep_ms(20);
        }

        /* Two bus clients of uid 65534 that called cmwqd (Subscribe). */
        watcher_start(&w1, NOBODY, "w1");
        watcher_start(&w2, NOBODY, "w2");
        ck_assert_int_ne(CTL_AS(&d, NOBODY, &r, "list"), 0);
        ck_assert_msg(strstr(r.err, "connections"), "%s", r.err);
        ctl_result_free(&r);
        ck_assert_int_ne(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "ListWorkqueues"), 0);
        ck_assert_msg(strstr(out, "per-user limit 'connections' (2) reached for uid 65534"), "%s", out);
        free(out);
        /* Others, and root, are served. */
        free(CTL_OK(&d, "list"));
        ck_assert_int_eq(BUSCTL(VICTIM, &out, "call", "--", NAME, PATH, MANAGER, "ListWorkqueues"), 0);
        free(out);

        /* One leaves the bus: its place is free again. */
        watcher_stop(&w1);
        for (int64_t until = mono_ns() + 20LL * 1000000000; !served && mono_ns() < until;) {
                served = CTL_AS(&d, NOBODY, &r, "list") == 0;
                ctl_result_free(&r);
                if (!served)
                        sleep_ms(50);
        }
        ck_assert_msg(served, "uid 65534 still refused 20 s after one of its bus clients left");
        watcher_stop(&w2);
}
END_TEST

/* Issue 12: a reply that acknowledges a change goes only once the change is
 * on disk, also when cmwqd stops before it got there.  The state is on a
 * full file system: the Submit's record cannot be written, so its reply is
 * held; at SIGTERM the last sync fails too, and the caller must not be told
 * that its item was queued. */
START_TEST(test_no_acknowledgement_at_shutdown_without_the_disk) {
        char full[64], fill[96];
        static char big[600 * 1024];
        sd_bus_message *m = NULL;
        int replied = 0, fd;
        static char chunk[64 * 1024];

        cmwqd_stop(&d);
        snprintf(full, sizeof(full), "/tmp/cmwq-full-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(full));
        ck_assert_msg(mount("tmpfs", full, "tmpfs", 0, "size=1m,mode=0755") == 0, "mount tmpfs: %s", strerror(errno));
        start_daemon((const char *const[]) { "--state-dir", full, "--limit", "item-args-bytes=1048576", NULL });
        for (int waited = 0; !name_has_owner(bus); waited += 20) {
                ck_assert_msg(waited < 15000, "cmwqd did not take %s within 15 s", NAME);
                sleep_ms(20);
        }
        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "kept", (uint32_t) 0, (uint32_t) 0));

        snprintf(fill, sizeof(fill), "%s/fill", full);
        fd = open(fill, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        while (write(fd, chunk, sizeof(chunk)) > 0)
                ;
        ck_assert_int_eq(errno, ENOSPC);
        close(fd);

        /* Larger than the room cmwqd keeps allocated past the end of its
         * log for a full file system (daemon/store/store.c, STORE_RESERVE_BYTES): this
         * record cannot reach the disk. */
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, NAME, PATH, MANAGER, "Submit"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", "kept"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "as", 3, "/bin/echo", "--", big), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "as", 0), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", ""), 0);
        ck_assert_int_ge(sd_bus_message_append_array(m, 'y', "", 0), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "itst", -1, (uint64_t) 0, "", (uint64_t) 0), 0);
        ck_assert_int_ge(sd_bus_call_async(bus, NULL, m, on_flush_reply, &replied, 0), 0);
        sd_bus_message_unref(m);
        /* Handled in order: the Submit has been, once this is answered. */
        sd_bus_message_unref(call_ok(PATH, MANAGER, "ListWorkqueues", NULL));
        while (sd_bus_process(bus, NULL) > 0)
                ;
        ck_assert_int_ne(replied, 1);

        cmwqd_stop(&d);
        for (int64_t until = mono_ns() + 30LL * 1000000000; replied == 0 && mono_ns() < until;)
                if (sd_bus_process(bus, NULL) == 0)
                        sd_bus_wait(bus, 100000);
        ck_assert_msg(replied == -1, "Submit was acknowledged though its record never reached the disk");
        ck_assert_int_eq(umount(full), 0);
        ck_assert_int_eq(rmdir(full), 0);
}
END_TEST

/* ---- credentials ------------------------------------------------------------ */

/* The effective gid in /proc/@pid/status; -1 if it cannot be read. */
static long proc_egid(pid_t pid) {
        char path[64], line[256];
        long real, eff = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Gid: %ld %ld", &real, &eff) == 2)
                        break;
        fclose(f);
        return eff;
}

#define BORROWED_GID 4242

/* In the connector's child: the connection the connector made, Hello'd from
 * here once the connector runs the setgid program; Submit, WaitItem, the
 * item's stdout (or "ERROR ...") to @out_fd. */
_Noreturn static void connection_keeper(int fd, pid_t connector, int out_fd) {
        sd_bus_message *m = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        const char *argv[] = { "/bin/sh", "-c", "id -G", NULL };
        struct item_info info;
        uint64_t id = 0;
        sd_bus *b = NULL;
        int a, r;

        for (int waited = 0; proc_egid(connector) != BORROWED_GID; waited += 10) {
                if (waited > 10000) {
                        dprintf(out_fd, "ERROR the setgid program did not run within 10 s\n");
                        _exit(1);
                }
                sleep_ms(10);
        }
        r = sd_bus_new(&b);
        if (r >= 0)
                r = sd_bus_set_fd(b, fd, fd);
        if (r >= 0)
                r = sd_bus_set_bus_client(b, 1);
        if (r >= 0)
                r = sd_bus_start(b);
        if (r >= 0)
                r = sd_bus_message_new_method_call(b, &m, NAME, PATH, MANAGER, "Submit");
        if (r >= 0)
                r = sd_bus_message_append(m, "s", "system");
        if (r >= 0)
                r = sd_bus_message_append_strv(m, (char **) argv);
        if (r >= 0)
                r = sd_bus_message_append(m, "ass", 0, "");
        if (r >= 0)
                r = sd_bus_message_append_array(m, 'y', "", 0);
        if (r >= 0)
                r = sd_bus_message_append(m, "itst", -1, (uint64_t) 0, "", (uint64_t) 0);
        if (r >= 0)
                r = sd_bus_call(b, m, 0, &error, &reply);
        if (r >= 0)
                r = sd_bus_message_read(reply, "tb", &id, &a);
        if (r < 0) {
                dprintf(out_fd, "ERROR Submit: %s %s\n", strerror(-r), error.message ? error.message : "");
                _exit(1);
        }
        reply = sd_bus_message_unref(reply);
        r = sd_bus_call_method(b, NAME, PATH, MANAGER, "WaitItem", &error, &reply, "t", id);
        if (r < 0) {
                dprintf(out_fd, "ERROR WaitItem: %s %s\n", strerror(-r), error.message ? error.message : "");
                _exit(1);
        }
        read_item(reply, &info);
        dprintf(out_fd, "%s", info.out);
        _exit(0);
}

/*
 * Issue 12, item 1: a client connects, forks a child that keeps the
 * connection, and execs a setgid program that blocks; the child calls
 * Submit.  The bus vouches for the uid and pid of the connect(), and /proc
 * of that pid now shows the setgid program's group.  The item must run with
 * the user's groups from the user database, never that one.
 */
START_TEST(test_item_gets_no_group_of_a_program_the_caller_execd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char sgid[160], out[512] = "";
        int p[2], fd, status;
        size_t len = 0;
        ssize_t n;
        pid_t connector;

        /* A setgid program of a group uid 65534 does not have. */
        snprintf(sgid, sizeof(sgid), "%s/sgid-sleep", bus_dir);
        {
                char buf[65536];
                int in = open("/bin/sleep", O_RDONLY | O_CLOEXEC);
                int to = open(sgid, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);

                ck_assert_msg(in >= 0 && to >= 0, "copying /bin/sleep: %s", strerror(errno));
                while ((n = read(in, buf, sizeof(buf))) > 0)
                        ck_assert_int_eq(write(to, buf, (size_t) n), n);
                close(in);
                ck_assert_int_eq(close(to), 0);
        }
        ck_assert_int_eq(chown(sgid, 0, BORROWED_GID), 0);
        ck_assert_int_eq(chmod(sgid, 02755), 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/bus", bus_dir);
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        connector = test_fork();
        if (connector == 0) {
                pid_t keeper;

                if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
                    setresuid(NOBODY, NOBODY, NOBODY) < 0)
                        _exit(126);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                        _exit(125);
                keeper = fork();
                if (keeper < 0)
                        _exit(124);
                if (keeper == 0)
                        connection_keeper(fd, getppid(), p[1]);
                /* Blocks; the connection stays with the keeper. */
                execl(sgid, "sleep", "60", (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        while (len < sizeof(out) - 1 && (n = read(p[0], out + len, sizeof(out) - 1 - len)) > 0)
                len += (size_t) n;
        out[len] = 0;
        close(p[0]);
        kill(connector, SIGKILL);
        ck_assert_int_eq(waitpid(connector, &status, 0), connector);
        unlink(sgid);

        ck_assert_msg(strncmp(out, "ERROR", 5) != 0 && len > 0, "the keeper: %s", out);
        /* uid 65534's groups in the user database: nogroup alone. */
        ck_assert_msg(strcmp(out, "65534\n") == 0, "the item ran with groups '%.*s', not nobody's own", (int) len - 1,
                      out);
}
END_TEST

/* One core: what one front end does, the other sees. */
START_TEST(test_both_front_ends_see_the_same_state) {
        char *out;
        sd_bus_message *reply;
        const char *path;

        subscribe();
        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "viabus", (uint32_t) 1, (uint32_t) 7));
        out = CTL_OK(&d, "list");
        ck_assert_msg(strstr(out, "viabus"), "cmwqctl list:\n%s", out);
        free(out);

        out = CTL_OK(&d, "create", "viasocket", "--max-active", "3");
        free(out);
        ck_assert_msg(saw("InterfacesAdded", PATH, ROOTS "viasocket"), "no InterfacesAdded for viasocket");
        reply = call_ok(PATH, MANAGER, "GetWorkqueue", "s", "viasocket");
        ck_assert_int_ge(sd_bus_message_read(reply, "o", &path), 0);
        ck_assert_str_eq(path, ROOTS "viasocket");
        sd_bus_message_unref(reply);
        ck_assert_uint_eq(property_u64(ROOTS "viasocket", "MaxActive", 'u'), 3);

        out = CTL_OK(&d, "set-max-active", "viabus", "2");
        free(out);
        ck_assert_msg(saw("PropertiesChanged", ROOTS "viabus", "MaxActive=2"), "no MaxActive=2");
        out = CTL_OK(&d, "destroy", "viasocket");
        free(out);
        ck_assert_msg(saw("InterfacesRemoved", PATH, ROOTS "viasocket"), "no InterfacesRemoved");
}
END_TEST

/* The bus daemon crashes and is started again on the same address, after
 * a while during which cmwqd finds no bus; then cmwqd must take its name
 * again by itself (within a generous 30 s: its back-off tops at 10 s). */
static void bus_restart(void) {
        char sock[96];

        bus = sd_bus_flush_close_unref(bus);
        ck_assert_int_eq(kill(bus_pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(bus_pid, NULL, 0), bus_pid);
        bus_pid = 0;
        snprintf(sock, sizeof(sock), "%s/bus", bus_dir);
        (void) unlink(sock);
        sleep_ms(500);
        /* Meanwhile the socket serves. */
        free(CTL_OK(&d, "list"));
        bus_spawn();
        for (int waited = 0; !name_has_owner(bus); waited += 50) {
                ck_assert_msg(waited < 30000, "cmwqd did not take %s again within 30 s of the restart; log:\n%s",
                              NAME, read_file(d.log));
                sleep_ms(50);
        }
}

/* The bus daemon restarts (issue 12): cmwqd connects again, publishes its
 * objects and takes its name again, by itself; what it had before is there
 * after, and it says so in one line each way. */
START_TEST(test_reconnects_when_the_bus_restarts) {
        struct item_info info;
        sd_bus_message *reply;
        const char *name, *opath;
        char *log, *p;
        bool found = false;
        int lost = 0;
        uint64_t id;

        sd_bus_message_unref(call_ok(PATH, MANAGER, "CreateWorkqueue", "suu", "survivor", (uint32_t) 0, (uint32_t) 2));
        subscribe();

        bus_restart();
        reply = call_ok(PATH, MANAGER, "ListWorkqueues", NULL);
        ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "(souuubbbttt)"), 0);
        while (sd_bus_message_read(reply, "(souuubbbttt)", &name, &opath, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                   NULL, NULL) > 0)
                if (strcmp(name, "survivor") == 0) {
                        found = true;
                        ck_assert_str_eq(opath, ROOTS "survivor");
                }
        sd_bus_message_unref(reply);
        ck_assert_msg(found, "the queue created before the restart is not listed after it");
        ck_assert_uint_eq(property_u64(ROOTS "survivor", "MaxActive", 'u'), 2);

        id = submit("survivor", (const char *const[]) { "/bin/sh", "-c", "echo back", NULL }, NULL, 0, NULL);
        item_call("WaitItem", id, &info);
        ck_assert_str_eq(info.state, "finished");
        ck_assert_int_eq(info.exit_status, 0);
        ck_assert_str_eq(info.out, "back\n");

        /* Signals reach who subscribes on the new bus. */
        subscribe();
        free(CTL_OK(&d, "create", "after"));
        ck_assert_msg(saw("InterfacesAdded", PATH, ROOTS "after"), "no InterfacesAdded after the restart");

        log = read_file(d.log);
        for (p = log; (p = strstr(p, "Lost the D-Bus connection")); p++)
                lost++;
        ck_assert_msg(lost == 1, "expected one line about the lost bus, got %d; log:\n%s", lost, log);
        ck_assert_msg(strstr(log, "Back on the bus as " NAME), "log:\n%s", log);
        free(log);
}
END_TEST

/* A bus restart lets go of the clients of the old bus (issue 12): their
 * unique names died with it, and so must their places in their uid's
 * 'connections'. */
START_TEST(test_bus_restart_releases_bus_clients) {
        struct watcher w1, w2;
        struct ctl_result r;
        char *out;

        cmwqd_stop(&d);
        cmwqd_start(&d, (const char *const[]) { "--no-sleep-inhibitor", "--limit", "connections=2", NULL });
        for (int waited = 0; !name_has_owner(bus); waited += 20) {
                ck_assert_msg(waited < 15000, "cmwqd did not take %s within 15 s", NAME);
                sleep_ms(20);
        }
        watcher_start(&w1, NOBODY, "w1");
        watcher_start(&w2, NOBODY, "w2");
        ck_assert_int_ne(CTL_AS(&d, NOBODY, &r, "list"), 0);
        ck_assert_msg(strstr(r.err, "connections"), "%s", r.err);
        ctl_result_free(&r);

        bus_restart();
        ck_assert_msg(CTL_AS(&d, NOBODY, &r, "list") == 0,
                      "uid 65534 still refused after its bus clients went with the old bus: %s", r.err);
        ctl_result_free(&r);
        ck_assert_int_eq(BUSCTL(NOBODY, &out, "call", "--", NAME, PATH, MANAGER, "ListWorkqueues"), 0);
        free(out);
        watcher_stop(&w1);
        watcher_stop(&w2);
}
END_TEST

/* A second cmwqd on the bus (its own socket and state) finds the name
 * taken: it says so, not "D-Bus is not available (File exists)", and its
 * socket serves. */
START_TEST(test_a_second_daemon_finds_the_name_taken) {
        struct cmwqd second;
        char *out, *log;

        cmwqd_start(&second, (const char *const[]) { "--user", NULL });
        out = CTL_OK(&second, "list");
        ck_assert_msg(strstr(out, "system_freezable"), "%s", out);
        free(out);
        /* The socket serves before the bus is tried. */
        for (int waited = 0;; waited += 20) {
                log = read_file(second.log);
                if (strstr(log, "The name " NAME " is taken on the session bus"))
                        break;
                ck_assert_msg(waited < 15000, "log:\n%s", log);
                free(log);
                sleep_ms(20);
        }
        ck_assert_msg(!strstr(log, "File exists"), "log:\n%s", log);
        free(log);
        cmwqd_stop(&second);
        ck_assert(name_has_owner(bus));
}
END_TEST

/* No bus: one readable line, and the socket serves alone.  --no-dbus: the
 * bus is not touched. */
START_TEST(test_without_a_bus) {
        char *out, *log;

        cmwqd_stop(&d);
        bus = sd_bus_flush_close_unref(bus);

        snprintf(bus_address, sizeof(bus_address), "unix:path=%s/nothing-here", bus_dir);
        start_daemon(NULL);
        out = CTL_OK(&d, "list");
        ck_assert_msg(strstr(out, "system_freezable"), "%s", out);
        free(out);
        log = read_file(d.log);
        ck_assert_msg(strstr(log, "D-Bus is not available"), "log:\n%s", log);
        free(log);
        cmwqd_stop(&d);

        snprintf(bus_address, sizeof(bus_address), "unix:path=%s/bus", bus_dir);
        start_daemon((const char *const[]) { "--no-dbus", NULL });
        bus = bus_connect();
        out = CTL_OK(&d, "list");
        free(out);
        ck_assert(!name_has_owner(bus));
}
END_TEST

START_TEST(test_system_bus_policy_file) {
        char file[512], *text;
        const char *srcdir = getenv("CMWQ_TEST_SRCDIR");

        /* Only root owns the name; everyone may talk to it. */
        snprintf(file, sizeof(file), "%s/../dbus/org.cmwq.cmwqd1.conf", srcdir);
        text = read_file(file);
        ck_assert_msg(strstr(text, "<policy user=\"root\">\n    <allow own=\"org.cmwq.cmwqd1\"/>"), "%s", text);
        ck_assert_msg(strstr(text, "<policy context=\"default\">\n    <allow send_destination=\"org.cmwq.cmwqd1\"/>"),
                      "%s", text);
        ck_assert_msg(!strstr(strstr(text, "context=\"default\""), "own="), "%s", text);
        free(text);
        snprintf(file, sizeof(file), "%s/../dbus/org.cmwq.cmwqd1.service", srcdir);
        text = read_file(file);
        ck_assert_msg(strstr(text, "Name=org.cmwq.cmwqd1\n") && strstr(text, "SystemdService=cmwqd.service\n"), "%s",
                      text);
        free(text);
}
END_TEST

int main(void) {
        Suite *s = suite_create("dbus");
        TCase *tc = tcase_create("dbus");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 90);
        tcase_add_test(tc, test_introspection_matches_installed_xml);
        tcase_add_test(tc, test_manager_methods);
        tcase_add_test(tc, test_freeze_timeout_and_cancel_of_a_running_item);
        tcase_add_test(tc, test_workqueue_counters);
        tcase_add_test(tc, test_workqueue_object_methods_with_busctl);
        tcase_add_test(tc, test_signals_and_properties_changed);
        tcase_add_test(tc, test_deferred_flush_does_not_block_the_daemon);
        tcase_add_test(tc, test_a_forged_name_owner_changed_drops_no_calls);
        tcase_add_test(tc, test_wrong_user_refused);
        tcase_add_test(tc, test_item_gets_no_group_of_a_program_the_caller_execd);
        tcase_add_test(tc, test_both_front_ends_see_the_same_state);
        tcase_add_test(tc, test_reconnects_when_the_bus_restarts);
        tcase_add_test(tc, test_a_second_daemon_finds_the_name_taken);
        tcase_add_test(tc, test_without_a_bus);
        tcase_add_test(tc, test_system_bus_policy_file);
        tcase_add_test(tc, test_no_acknowledgement_at_shutdown_without_the_disk);
        suite_add_tcase(s, tc);

        /* The system instance under the system bus's policy (issue 12). */
        tc = tcase_create("system-policy");
        tcase_add_checked_fixture(tc, setup_system, teardown);
        tcase_set_timeout(tc, 90);
        tcase_add_test(tc, test_signals_reach_only_whom_they_concern);
        tcase_add_test(tc, test_bus_clients_count_as_connections);
        tcase_add_test(tc, test_bus_restart_releases_bus_clients);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

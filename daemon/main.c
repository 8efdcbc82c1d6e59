/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cmwqd: configuration, privileges and the one event loop that owns all state.
 */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <sys/resource.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "base/cpus.h"
#include "base/log.h"
#include "cm/sleepwatch.h"
#include "core/config-file.h"
#include "core/core.h"
#include "dbus/bus.h"
#include "dbus/sleep.h"
#include "exec/cgroup.h"
#include "exec/exec.h"
#include "exec/pids.h"
#include "ipc/socket.h"
#include "util.h"

/* A day: a longer stall is not something to be told about later. */
#define WATCHDOG_THRESHOLD_MAX_SEC 86400u

/* Fixed, not from --runstatedir: clients look here whatever the prefix. */
#define SYSTEM_SOCKET_PATH "/run/cmwqd/cmwqd.sock"
/* Fixed like the socket: the state must be found again whatever the prefix. */
#define SYSTEM_STATE_DIR "/var/lib/cmwqd"

/* logind waits for a delay inhibitor at most InhibitDelayMaxSec (5 s by
 * default) anyway; an hour is far beyond any useful freeze. */
#define FREEZE_TIMEOUT_MAX_USEC (3600 * USEC_PER_SEC)

struct options {
        bool user_mode;
        const char *socket_path;
        enum sleepwatch_mode sleep_mode;
        bool no_dbus;
        int log_level;
        char **plugin_dirs;             /* from --plugin-dir; NULL: the defaults */
        size_t n_plugin_dirs;
        const char *config;             /* --config; NULL: the default file (system instance) */
        char **limit_args;              /* --limit NAME=VALUE, checked, applied after the file */
        size_t n_limit_args;
        uint64_t freeze_timeout_usec;   /* 0: the core's default */
        bool sleep_inhibitor;
        bool idle_sentinels;
        uint64_t watchdog_usec;         /* 0: the core's default */
        const char *state_dir;          /* NULL: the default */
        bool no_store;
};

static void help(void) {
        printf("Usage: cmwqd [OPTION]...\n"
               "Run the concurrency-managed workqueue daemon in the foreground.\n"
               "\n"
               "  -u, --user                  run as the calling user's own instance, listening\n"
               "                              on $XDG_RUNTIME_DIR/cmwqd.sock\n"
               "  -s, --socket PATH           listen on PATH, an absolute path (default: %s,\n"
               "                              or the user socket with --user)\n"
               "  -d, --sleep-detector perf|proc\n"
               "                              how blocking of running items is detected\n"
               "                              (default: perf, falling back to proc)\n"
               "      --no-idle-sentinels     perf: read the switch records at every switch\n"
               "                              instead of when a busy CPU is about to idle\n"
               "                              (more CPU and wake-ups; --idle-sentinels, the\n"
               "                              default, is accepted)\n"
               "  -p, --plugin-dir DIR        look up plugins in DIR (repeatable; replaces\n"
               "                              the default directories)\n"
               "  -c, --config FILE           read FILE instead of %s\n"
               "                              (which the system instance reads if it exists)\n"
               "  -L, --limit NAME=VALUE      set a limit (repeatable): workqueues, pending-items,\n"
               "                              queued-bytes, connections, reply-bytes,\n"
               "                              callback-threads (per user), item-args-bytes,\n"
               "                              item-payload-bytes, output-bytes (per item), history,\n"
               "                              history-bytes (per user), hello-timeout (seconds),\n"
               "                              item-tasks (per item), user-tasks (per user);\n"
               "                              see LIMITS in cmwqd(8) for the defaults\n"
               "  -f, --freeze-timeout SECONDS\n"
               "                              how long a freeze waits for running items: before\n"
               "                              a sleep (then at most logind's InhibitDelayMaxSec=)\n"
               "                              and for 'cmwqctl freeze' without --timeout\n"
               "                              (default: %g)\n"
               "      --no-sleep-inhibitor    do not take a logind sleep inhibitor, and do not\n"
               "                              freeze the freezable workqueues on suspend\n"
               "  -S, --state-dir DIR         keep queues and items across restarts in DIR, an\n"
               "                              absolute path (default: %s, or\n"
               "                              $XDG_STATE_HOME/cmwqd with --user)\n"
               "      --no-store              keep no state: queues and items end with the daemon\n"
               "      --no-dbus               do not offer the D-Bus interface (org.cmwq.cmwqd1 on\n"
               "                              the system bus, or the session bus with --user)\n"
               "  -l, --log-level LEVEL       debug, info, notice, warning or error (default: info)\n"
               "      --watchdog-threshold SECONDS\n"
               "                              log a pool that has work waiting and makes no\n"
               "                              progress for this long (default: 30; 0: never)\n"
               "  -h, --help                  show this help and exit\n"
               "  -V, --version               show the version and exit\n"
               "\n"
               "SIGTERM or SIGINT stops the daemon; SIGHUP is ignored. See cmwqd(8), cmwqd.conf(5).\n",
               SYSTEM_SOCKET_PATH, CONFIG_FILE_DEFAULT, (double) FREEZE_TIMEOUT_DEFAULT_USEC / USEC_PER_SEC,
               SYSTEM_STATE_DIR);
}

/* Seconds, with a fraction: "20", "0.5". */
static int parse_freeze_timeout(const char *s, uint64_t *ret) {
        char *end = NULL;
        double v;

        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || end == s || *end || !isfinite(v) || v <= 0 ||
            v * USEC_PER_SEC > (double) FREEZE_TIMEOUT_MAX_USEC)
                return -EINVAL;
        *ret = (uint64_t) (v * USEC_PER_SEC + 0.5);
        return *ret > 0 ? 0 : -EINVAL;
}

static int parse_options(int argc, char **argv, struct options *o) {
        enum { ARG_NO_SLEEP_INHIBITOR = 0x100, ARG_WATCHDOG_THRESHOLD, ARG_NO_DBUS, ARG_IDLE_SENTINELS,
               ARG_NO_IDLE_SENTINELS };
        static const struct option longopts[] = {
                { "user", no_argument, NULL, 'u' },
                { "socket", required_argument, NULL, 's' },
                { "sleep-detector", required_argument, NULL, 'd' },
                { "plugin-dir", required_argument, NULL, 'p' },
                { "config", required_argument, NULL, 'c' },
                { "limit", required_argument, NULL, 'L' },
                { "log-level", required_argument, NULL, 'l' },
                { "freeze-timeout", required_argument, NULL, 'f' },
                { "no-sleep-inhibitor", no_argument, NULL, ARG_NO_SLEEP_INHIBITOR },
                { "idle-sentinels", no_argument, NULL, ARG_IDLE_SENTINELS },
                { "no-idle-sentinels", no_argument, NULL, ARG_NO_IDLE_SENTINELS },
                { "watchdog-threshold", required_argument, NULL, ARG_WATCHDOG_THRESHOLD },
                { "state-dir", required_argument, NULL, 'S' },
                { "no-store", no_argument, NULL, 'N' },
                { "no-dbus", no_argument, NULL, ARG_NO_DBUS },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {}
        };
        int c, r;

        while ((c = getopt_long(argc, argv, "us:d:p:c:L:l:f:S:hV", longopts, NULL)) >= 0)
                switch (c) {
                case 'u':
                        o->user_mode = true;
                        break;
                case 's':
                        if (optarg[0] != '/') {
                                fprintf(stderr, "cmwqd: --socket needs an absolute path, not '%s'\n", optarg);
                                return -EINVAL;
                        }
                        o->socket_path = optarg;
                        break;
                case 'd':
                        if (sleepwatch_mode_from_string(optarg, &o->sleep_mode) < 0) {
                                fprintf(stderr, "cmwqd: unknown sleep detector '%s' (perf or proc)\n", optarg);
                                return -EINVAL;
                        }
                        break;
                case 'p': {
                        char **l = realloc(o->plugin_dirs, (o->n_plugin_dirs + 2) * sizeof(char *));
                        if (!l)
                                return -ENOMEM;
                        o->plugin_dirs = l;
                        l[o->n_plugin_dirs++] = optarg;
                        l[o->n_plugin_dirs] = NULL;
                        break;
                }
                case 'c':
                        o->config = optarg;
                        break;
                case 'L': {
                        struct limits scratch;
                        char err[160], **l;

                        if (limits_parse(&scratch, optarg, err, sizeof(err)) < 0) {
                                fprintf(stderr, "cmwqd: %s\n", err);
                                return -EINVAL;
                        }
                        l = realloc(o->limit_args, (o->n_limit_args + 1) * sizeof(char *));
                        if (!l)
                                return -ENOMEM;
                        o->limit_args = l;
                        l[o->n_limit_args++] = optarg;
                        break;
                }
                case 'S':
                        if (optarg[0] != '/') {
                                fprintf(stderr, "cmwqd: --state-dir needs an absolute path, not '%s'\n", optarg);
                                return -EINVAL;
                        }
                        o->state_dir = optarg;
                        break;
                case 'N':
                        o->no_store = true;
                        break;
                case ARG_NO_DBUS:
                        o->no_dbus = true;
                        break;
                case 'l':
                        r = log_level_from_string(optarg);
                        if (r < 0) {
                                fprintf(stderr, "cmwqd: unknown log level '%s'\n", optarg);
                                return -EINVAL;
                        }
                        o->log_level = r;
                        break;
                case 'f':
                        if (parse_freeze_timeout(optarg, &o->freeze_timeout_usec) < 0) {
                                fprintf(stderr, "cmwqd: invalid --freeze-timeout '%s' (seconds, more than 0 "
                                        "and at most %llu)\n", optarg,
                                        (unsigned long long) (FREEZE_TIMEOUT_MAX_USEC / USEC_PER_SEC));
                                return -EINVAL;
                        }
                        break;
                case ARG_NO_SLEEP_INHIBITOR:
                        o->sleep_inhibitor = false;
                        break;
                case ARG_IDLE_SENTINELS:
                        o->idle_sentinels = true;
                        break;
                case ARG_NO_IDLE_SENTINELS:
                        o->idle_sentinels = false;
                        break;
                case ARG_WATCHDOG_THRESHOLD: {
                        char *end;
                        double sec;

                        errno = 0;
                        sec = strtod(optarg, &end);
                        if (errno || end == optarg || *end || !(sec >= 0 && sec <= WATCHDOG_THRESHOLD_MAX_SEC)) {
                                fprintf(stderr, "cmwqd: --watchdog-threshold needs seconds from 0 to %u, not '%s'\n",
                                        WATCHDOG_THRESHOLD_MAX_SEC, optarg);
                                return -EINVAL;
                        }
                        o->watchdog_usec = sec > 0 ? (uint64_t) (sec * 1e6) : WATCHDOG_DISABLED;
                        if (o->watchdog_usec == 0)
                                o->watchdog_usec = 1;
                        break;
                }
                case 'h':
                        help();
                        return 0;
                case 'V':
                        printf("%s\n", PACKAGE_STRING);
                        return 0;
                default:
                        fprintf(stderr, "Try 'cmwqd --help' for more information.\n");
                        return -EINVAL;
                }
        if (optind < argc) {
                fprintf(stderr, "cmwqd: unexpected argument '%s'\nTry 'cmwqd --help' for more information.\n",
                        argv[optind]);
                return -EINVAL;
        }
        return 1;
}

static void on_signal(evutil_socket_t sig, short what, void *userdata) {
        struct event_base *base = userdata;

        log_info("Received %s, shutting down", strsignal((int) sig));
        event_base_loopbreak(base);
}

/* SIGHUP's default would end the daemon without a word and leave its
 * items running unwatched (the terminal of a cmwqd started from a shell
 * closes); it re-reads nothing at run time either. */
static void on_sighup(evutil_socket_t sig, short what, void *userdata) {
        log_notice("Received SIGHUP: ignored (cmwqd reads its configuration at start only; restart it to apply "
                   "a new one)");
}

/* The plugin directories of doc/design.md §2.1, user ones first for --user. */
static char **default_plugin_dirs(bool user_mode) {
        char **l = calloc(4, sizeof(char *));
        size_t n = 0;
        const char *home = getenv("HOME");

        if (!l)
                return NULL;
        if (user_mode && home && asprintf(&l[n], "%s/.local/lib/cmwq/plugins", home) >= 0)
                n++;
        l[n++] = strdup(CMWQ_SYSCONFDIR "/cmwq/plugins");
        l[n++] = strdup(CMWQ_LIBDIR "/cmwq/plugins");
        for (size_t k = 0; k < n; k++)
                if (!l[k])
                        return strv_free(l);
        return l;
}

/* $XDG_STATE_HOME/cmwqd, by default ~/.local/state/cmwqd. */
static int user_state_dir(char **ret) {
        const char *dir = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

        if (dir && dir[0] == '/')
                return asprintf(ret, "%s/cmwqd", dir) < 0 ? -ENOMEM : 0;
        if (!home || home[0] != '/')
                return log_error_errno(-ENXIO, "--user needs $XDG_STATE_HOME or $HOME (or give --state-dir)");
        return asprintf(ret, "%s/.local/state/cmwqd", home) < 0 ? -ENOMEM : 0;
}

static int user_socket_path(char **ret) {
        const char *dir = getenv("XDG_RUNTIME_DIR");

        if (!dir || dir[0] != '/')
                return log_error_errno(-ENXIO, "--user needs $XDG_RUNTIME_DIR (or give --socket)");
        if (asprintf(ret, "%s/cmwqd.sock", dir) < 0)
                return -ENOMEM;
        return 0;
}

/*
 * The event loop.  With @precise, libevent reads CLOCK_MONOTONIC instead of
 * the coarse clock (which advances per jiffy) and arms a timerfd for every
 * timeout -- one more system call on every turn of the loop, which on a
 * busy machine is most of what cmwqd does.  Only the /proc sampler needs
 * it: its 1 ms interval would otherwise stretch to a jiffy or more.  The
 * timers of the perf detector's daemon (the CPU-intensive threshold, the
 * yield grace, the watchdog) are as coarse as the kernel's own check of
 * the threshold, which runs on the scheduler tick.
 */
static struct event_base *event_base_new_for(bool precise) {
        struct event_config *cfg;
        struct event_base *base;

        if (!precise)
                return event_base_new();
        cfg = event_config_new();
        if (!cfg)
                return NULL;
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        base = event_base_new_with_config(cfg);
        event_config_free(cfg);
        return base;
}

int main(int argc, char **argv) {
        struct options o = {
                .sleep_mode = SLEEPWATCH_PERF,
                .log_level = LOG_INFO,
                .sleep_inhibitor = true,
                .idle_sentinels = true,
        };
        _cleanup_(freep) char *user_socket = NULL, *user_state = NULL;
        _cleanup_(strv_freep) char **dirs = NULL;
        struct event_base *base = NULL;
        struct event *sigterm = NULL, *sigint = NULL, *sighup = NULL;
        struct sleepwatch *sw = NULL;
        struct cgroup_root *cgroups = NULL;
        struct pids_root *pids = NULL;
        struct core *core = NULL;
        struct ipc_server *server = NULL;
        struct sleep_freezer *sleep = NULL;
        struct ipc_dbus *dbus = NULL;
        const char *socket_path;
        struct store *store = NULL;
        const char *state_dir = NULL;
        int r, ret = EXIT_FAILURE;

        r = parse_options(argc, argv, &o);
        if (r <= 0) {
                free(o.plugin_dirs);
                free(o.limit_args);
                return r < 0 ? 2 : EXIT_SUCCESS;
        }
        log_setup(o.log_level);

        /* The file, then the command line over it. */
        struct limits limits;
        limits_init_default(&limits);
        if (o.config || !o.user_mode) {
                r = config_file_load(o.config ? o.config : CONFIG_FILE_DEFAULT, o.config != NULL, &limits);
                if (r < 0)
                        goto out;
        }
        for (size_t k = 0; k < o.n_limit_args; k++) {
                char err[160];

                (void) limits_parse(&limits, o.limit_args[k], err, sizeof(err));     /* checked by parse_options() */
        }

        if (!o.user_mode && geteuid() != 0)
                log_warning("Running the system instance without root: items can only run as uid %u",
                            (unsigned) geteuid());

        /* A socket from systemd needs no path (nor $XDG_RUNTIME_DIR). */
        socket_path = o.socket_path;
        if (!socket_path && sd_listen_fds(false) <= 0) {
                if (o.user_mode) {
                        if (user_socket_path(&user_socket) < 0)
                                goto out;
                        socket_path = user_socket;
                } else
                        socket_path = SYSTEM_SOCKET_PATH;
        }

        /* SCHED_BATCH: a perf record wakes us on the CPU of the item that
         * wrote it; under SCHED_OTHER that wake-up would preempt the item
         * (and make more records).  A blocking item leaves its CPU free, so
         * blocks are still seen at once; a wake-up is seen when we next run,
         * which needs no hurry.  Measured: a watched CPU-bound item ran
         * 20-70% slower under SCHED_OTHER, at full speed under SCHED_BATCH. */
        struct sched_param param = { .sched_priority = 0 };
        if (sched_setscheduler(0, SCHED_BATCH, &param) < 0)
                log_warning_errno(-errno, "Cannot switch to SCHED_BATCH, items may be slowed down: %m");

        /* Before anything can pin the loop to one CPU (cm/sentinel.c). */
        daemon_cpus_note();

        /* Each client and each running item holds fds: use what we may. */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
                nofile.rlim_cur = nofile.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &nofile);
        }

        /* Clients that vanish must not kill us; items get default dispositions back. */
        signal(SIGPIPE, SIG_IGN);
        signal(SIGHUP, SIG_IGN);        /* until on_sighup() says so */

        /* The helper that creates the items' processes, forked now, while
         * our heap is small (see exec/spawner.c). */
        r = exec_spawner_start();
        if (r < 0)
                log_warning_errno(r, "Cannot start the spawner, items will be forked by cmwqd itself: %m");

        /* The perf detector needs no precise timers; only the /proc sampler,
         * whose interval is 1 ms, does (see event_base_new_for()). */
        base = event_base_new_for(o.sleep_mode == SLEEPWATCH_PROC);
        if (!base) {
                log_error("Failed to create the event loop");
                goto out;
        }

        r = sleepwatch_new(base, o.sleep_mode, o.idle_sentinels ? SLEEPWATCH_SENTINELS : 0, &sw);
        if (r == -EOPNOTSUPP && o.sleep_mode == SLEEPWATCH_PERF) {
                log_warning("perf_event_open() is not available here; detecting blocked items by sampling /proc");
                event_base_free(base);
                base = event_base_new_for(true);
                if (!base) {
                        log_error("Failed to create the event loop");
                        goto out;
                }
                r = sleepwatch_new(base, SLEEPWATCH_PROC, 0, &sw);
        }
        if (r < 0) {
                log_error_errno(r, "Failed to set up the sleep detector: %m");
                goto out;
        }
        if (sleepwatch_has_sentinels(sw))
                log_info("Switch records are read when a busy CPU is about to idle (idle sentinels)");
        else if (sleepwatch_get_mode(sw) == SLEEPWATCH_PERF)
                log_info("Switch records are read at every switch%s",
                         o.idle_sentinels ? ": the idle sentinels could not be started" : " (--no-idle-sentinels)");

        /* Not fatal: the process group alone still stops every item that
         * does not leave it on purpose. */
        r = cgroup_root_new(&cgroups);
        if (r < 0)
                log_info_errno(r, "cgroup v2 not usable here (%m); items are contained by process group only");
        else
                log_info("Items get their own cgroup under %s", cgroup_root_path(cgroups));
        r = pids_root_new(&pids);
        if (r < 0)
                log_info_errno(r, "No cgroup v1 pids hierarchy usable here (%m); "
                                  "item tasks are limited per user by RLIMIT_NPROC only");
        else
                log_info("Item tasks are limited under %s", pids_root_path(pids));

        dirs = o.plugin_dirs ? NULL : default_plugin_dirs(o.user_mode);
        struct core_config config = {
                .sleep_mode = sleepwatch_get_mode(sw),
                .user_mode = o.user_mode,
                .plugin_dirs = o.plugin_dirs ? o.plugin_dirs : dirs,
                .limits = limits,
                .cgroups = cgroups,
                .pids = pids,
                .freeze_timeout_usec = o.freeze_timeout_usec,
                .watchdog_usec = o.watchdog_usec,
        };
        r = core_new(base, sw, &config, &core);
        if (r < 0) {
                log_error_errno(r, "Failed to set up the pools: %m");
                goto out;
        }

        /* The state comes back before anyone can connect: ids go on where
         * they were, and a client sees the queues it created. */
        if (o.no_store && o.state_dir)
                /* Not an error: a unit or script that always names the
                 * directory may add --no-store for one run. */
                log_notice("--no-store: the state directory %s is not used, and nothing is kept", o.state_dir);
        if (!o.no_store) {
                state_dir = o.state_dir;
                if (!state_dir) {
                        if (o.user_mode) {
                                if (user_state_dir(&user_state) < 0)
                                        goto out;
                                state_dir = user_state;
                        } else
                                state_dir = SYSTEM_STATE_DIR;
                }
                r = store_open(state_dir, core_store_replay, core, &store);
                if (r < 0)
                        goto out;
                r = core_store_attach(core, store);
                if (r < 0) {
                        log_error_errno(r, "Failed to set up the state log in %s: %m", state_dir);
                        goto out;
                }
        }

        /* Before anyone can reach us: whoever sees us up may stop us. */
        sigterm = evsignal_new(base, SIGTERM, on_signal, base);
        sigint = evsignal_new(base, SIGINT, on_signal, base);
        sighup = evsignal_new(base, SIGHUP, on_sighup, base);
        if (!sigterm || !sigint || !sighup || evsignal_add(sigterm, NULL) < 0 || evsignal_add(sigint, NULL) < 0 ||
            evsignal_add(sighup, NULL) < 0) {
                log_error("Failed to set up signal handling");
                goto out;
        }

        r = ipc_server_new(base, core, socket_path, o.user_mode, &server);
        if (r < 0)
                goto out;
        ipc_server_set_store(server, store);

        if (o.sleep_inhibitor) {
                r = sleep_freezer_new(base, core, &sleep);
                if (r < 0) {
                        log_error_errno(r, "Failed to set up freezing on suspend: %m");
                        goto out;
                }
        } else
                log_info("Not freezing workqueues on suspend (--no-sleep-inhibitor)");

        /* D-Bus is the second front end: without a bus the socket serves alone. */
        if (!o.no_dbus) {
                r = ipc_dbus_new(base, core, o.user_mode, &dbus);
                if (r == -EEXIST)
                        log_notice("The name %s is taken on the %s bus (another cmwqd?); serving the socket only",
                                   CMWQ_DBUS_NAME, o.user_mode ? "session" : "system");
                else if (r < 0)
                        log_notice_errno(r, "D-Bus is not available (%m); serving the socket only, without %s on the %s bus",
                                         CMWQ_DBUS_NAME, o.user_mode ? "session" : "system");
                else {
                        ipc_dbus_set_store(dbus, store);
                        log_info("Serving %s on the %s bus", CMWQ_DBUS_NAME, o.user_mode ? "session" : "system");
                }
        }

        log_info("cmwqd %s listening on %s%s (%s instance, %u CPUs, sleep detector %s, state %s)", PACKAGE_VERSION,
                 ipc_server_path(server), ipc_server_socket_activated(server) ? " (socket from systemd)" : "",
                 o.user_mode ? "user" : "system", core_nr_cpus(core),
                 sleepwatch_mode_to_string(sleepwatch_get_mode(sw)), store ? store_path(store) : "not kept");
        /* What "systemctl status cmwqd" shows under the unit's name. */
        (void) sd_notifyf(false, "READY=1\nSTATUS=Serving %u CPUs on %s, sleep detector %s, %s", core_nr_cpus(core),
                          ipc_server_path(server), sleepwatch_mode_to_string(sleepwatch_get_mode(sw)),
                          cgroups ? "items in cgroups" : "items in process groups only");

        if (event_base_dispatch(base) < 0) {
                log_error("The event loop failed");
                goto out;
        }
        (void) sd_notifyf(false, "STOPPING=1\nSTATUS=Stopping, killing %" PRIu64 " running items",
                          core_nr_running(core));
        ret = EXIT_SUCCESS;

out:
        /* First: its inhibitor lets a pending suspend go on at once. */
        sleep = sleep_freezer_free(sleep);
        ipc_dbus_stop(dbus);
        server = ipc_server_free(server);
        core = core_free(core);
        /* Before the cgroups: the processes made ahead that the items gave
         * back hold theirs until the spawner has told their pids. */
        exec_spawner_shutdown();
        /* What the last replies and items wrote reaches the disk; only then
         * do the D-Bus replies that acknowledge it go, and the bus. */
        store_stop(store);
        dbus = ipc_dbus_free(dbus);
        store = store_free(store);
        /* After the items, before the loop its removal events live on. */
        cgroups = cgroup_root_free(cgroups);
        pids = pids_root_free(pids);
        sw = sleepwatch_free(sw);
        if (sigterm)
                event_free(sigterm);
        if (sigint)
                event_free(sigint);
        if (sighup)
                event_free(sighup);
        if (base)
                event_base_free(base);
        free(o.plugin_dirs);
        free(o.limit_args);
        if (ret == EXIT_SUCCESS)
                log_info("Stopped");
        else
                /* The reason is logged; the unit's status points there. */
                (void) sd_notify(false, "STATUS=Exiting on an error, see the log");
        return ret;
}

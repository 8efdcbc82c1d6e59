/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Runs the cmwqctl just built ($CMWQCTL) as a user would: bad command lines
 * (exit 2, one line on stderr), no daemon (exit 3), and a fake cmwqd in a
 * thread of this test that answers with canned responses, to check what
 * cmwqctl sends and how it reports what comes back.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmwq.pb-c.h"
#include "frame.h"

extern char **environ;

typedef struct Run {
        int status;             /* exit status, or 128+signal */
        char *out;
        char *err;
} Run;

static void run_done(Run *r) {
        free(r->out);
        free(r->err);
        *r = (Run) {};
}

static const char *ctl_path(void) {
        const char *p = getenv("CMWQCTL");

        ck_assert_msg(p && *p, "$CMWQCTL is not set (run through make check)");
        return p;
}

static void drain_into(int fd, char **buf, size_t *len, bool *open) {
        char tmp[4096];
        ssize_t k = read(fd, tmp, sizeof(tmp));

        if (k <= 0) {
                *open = false;
                return;
        }
        *buf = realloc(*buf, *len + (size_t) k + 1);
        ck_assert_ptr_nonnull(*buf);
        memcpy(*buf + *len, tmp, (size_t) k);
        *len += (size_t) k;
        (*buf)[*len] = '\0';
}

/* Run cmwqctl with @args (NULL-terminated) in an environment without
 * $CMWQ_SOCKET and $XDG_RUNTIME_DIR, plus @env_extra (may be NULL). */
static void run_ctlv(Run *r, const char *env_extra, const char *const *args) {
        const char *argv[64];
        char *envp[512];
        size_t n = 0, ne = 0, out_len = 0, err_len = 0;
        int out[2], err[2], status;
        bool out_open = true, err_open = true;
        pid_t pid;

        argv[n++] = ctl_path();
        for (; *args && n < 63; args++)
                argv[n++] = *args;
        argv[n] = NULL;

        for (char **e = environ; *e && ne < 500; e++)
                if (strncmp(*e, "CMWQ_SOCKET=", 12) != 0 && strncmp(*e, "XDG_RUNTIME_DIR=", 16) != 0)
                        envp[ne++] = *e;
        if (env_extra)
                envp[ne++] = (char *) env_extra;
        envp[ne] = NULL;

        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY);

                dup2(null, STDIN_FILENO);
                dup2(out[1], STDOUT_FILENO);
                dup2(err[1], STDERR_FILENO);
                execve(argv[0], (char **) argv, envp);
                _exit(99);
        }
        close(out[1]);
        close(err[1]);

        *r = (Run) { .out = strdup(""), .err = strdup("") };
        while (out_open || err_open) {
                struct pollfd p[2] = {
                        { .fd = out_open ? out[0] : -1, .events = POLLIN },
                        { .fd = err_open ? err[0] : -1, .events = POLLIN },
                };

                ck_assert_int_ge(poll(p, 2, 30000), 1);
                if (p[0].revents)
                        drain_into(out[0], &r->out, &out_len, &out_open);
                if (p[1].revents)
                        drain_into(err[0], &r->err, &err_len, &err_open);
        }
        close(out[0]);
        close(err[0]);

        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run_ctl(Run *r, const char *env_extra, ...) {
        const char *args[64];
        size_t n = 0;
        va_list ap;

        va_start(ap, env_extra);
        for (const char *a; n < 63 && (a = va_arg(ap, const char *));)
                args[n++] = a;
        va_end(ap);
        args[n] = NULL;
        run_ctlv(r, env_extra, args);
}

static size_t count_lines(const char *s) {
        size_t n = 0;

        for (; *s; s++)
                if (*s == '\n')
                        n++;
        return n;
}

/* Exit 2, nothing on stdout, exactly one line on stderr that names the
 * problem and points to --help. */
static void assert_usage_error(const Run *r, const char *needle) {
        ck_assert_msg(r->status == 2, "exit status %d, stderr: %s", r->status, r->err);
        ck_assert_str_eq(r->out, "");
        ck_assert_msg(count_lines(r->err) == 1, "not one line: '%s'", r->err);
        ck_assert_msg(strncmp(r->err, "cmwqctl: ", 9) == 0, "no prefix: '%s'", r->err);
        ck_assert_msg(strstr(r->err, needle), "'%s' not in '%s'", needle, r->err);
        ck_assert_msg(strstr(r->err, "--help"), "no hint in '%s'", r->err);
}

#define NO_SOCKET "/nonexistent-cmwq-test/cmwqd.sock"
#define X16 "xxxxxxxxxxxxxxxx"
#define X64 X16 X16 X16 X16
#define NAME_65 X64 "x"
#define KEY_257 X64 X64 X64 X64 "x"

START_TEST(test_bad_command_lines) {
        static const struct {
                const char *args[8];
                const char *needle;
        } cases[] = {
                { { NULL },                                                     "missing COMMAND" },
                { { "frobnicate", NULL },                                       "unknown command 'frobnicate'" },
                { { "--bogus", "list", NULL },                                  "unknown option '--bogus'" },
                { { "-x", "list", NULL },                                       "unknown option '-x'" },
                { { "--socket", NULL },                                         "requires an argument" },
                { { "list", "extra", NULL },                                    "unexpected argument 'extra'" },
                { { "create", NULL },                                           "missing workqueue NAME" },
                { { "create", "q", "--bogus", NULL },                           "unknown option '--bogus'" },
                { { "create", "q", "--max-active", "many", NULL },              "invalid --max-active" },
                { { "create", "q", "--max-active", "-1", NULL },                "invalid --max-active" },
                { { "create", "", NULL },                                       "must not be empty" },
                { { "create", "a", "b", NULL },                                 "unexpected argument 'b'" },
                { { "submit", NULL },                                           "missing workqueue NAME" },
                { { "submit", "--", "/bin/true", NULL },                        "missing workqueue NAME" },
                { { "submit", "q", NULL },                                      "missing PROGRAM" },
                { { "submit", "q", "--", NULL },                                "missing PROGRAM" },
                { { "submit", "q", "--cpu", "abc", "--", "/bin/true", NULL },   "invalid --cpu" },
                { { "submit", "q", "--cpu", "-1", "--", "/bin/true", NULL },    "invalid --cpu" },
                { { "submit", "q", "--cpu", "1.5", "--", "/bin/true", NULL },   "invalid --cpu" },
                { { "submit", "q", "--delay", "-1", "--", "/bin/true", NULL },  "invalid --delay" },
                { { "submit", "q", "--delay", "1x", "--", "/bin/true", NULL },  "invalid --delay" },
                { { "submit", "q", "--delay", ".", "--", "/bin/true", NULL },   "invalid --delay" },
                { { "submit", "q", "--timeout", "", "--", "/bin/true", NULL },  "invalid --timeout" },
                { { "submit", "q", "--timeout", "1e3", "--", "/bin/true", NULL }, "invalid --timeout" },
                { { "submit", "q", "--timeout", "99999999999999999999", "--", "/bin/true", NULL }, "too large" },
                { { "submit", "q", "--delay", NULL },                           "requires an argument" },
                { { "submit", "q", "--wait=yes", "--", "/bin/true", NULL },     "option '--wait' takes no value" },
                { { "--json=yes", "list", NULL },                               "option '--json' takes no value" },
                { { "list", "--json=1", NULL },                                 "option '--json' takes no value" },
                { { "--bogus=1", "list", NULL },                                "unknown option '--bogus=1'" },
                /* Inside a cluster of short options: not the argument before. */
                { { "--socket=/tmp/s", "-Zj", "list", NULL },                   "unknown option '-Z'" },
                { { "--json", "-Zj", "list", NULL },                            "unknown option '-Z'" },
                { { "list", "--socket=/tmp/s", "-Zj", NULL },                  "unknown option '-Z'" },
                { { "submit", "q", "--delay", "2592001", "--", "/bin/true", NULL }, "over the limit of 30 days" },
                { { "submit", "q", "--timeout", "99999999999", "--", "/bin/true", NULL }, "over the limit of 30 days" },
                { { "submit", "q", "--key", "", "--", "/bin/true", NULL },      "--key must be 1-256 bytes" },
                { { "submit", "q", "--key", KEY_257, "--", "/bin/true", NULL }, "--key must be 1-256 bytes" },
                { { "create", NAME_65, NULL },                                  "invalid workqueue NAME: 1-64" },
                { { "create", "a/b", NULL },                                    "invalid workqueue NAME" },
                { { "submit", "q", "--stdin", "/nonexistent-cmwq-test", "--", "/bin/true", NULL },
                                                                                "cannot read --stdin file" },
                { { "wait", NULL },                                             "missing work ID" },
                { { "wait", "abc", NULL },                                      "invalid work ID 'abc'" },
                { { "show", "-5", NULL },                                       "unknown option '-5'" },
                { { "cancel", "1", "2", NULL },                                 "unexpected argument '2'" },
                { { "set-max-active", "q", NULL },                              "set-max-active: missing N" },
                { { "set-max-active", NULL },                                   "missing workqueue NAME and N" },
                { { "set-max-active", "q", "x", NULL },                         "invalid max_active 'x'" },
                { { "flush", NULL },                                            "missing workqueue NAME" },
                { { "drain", "a", "b", NULL },                                  "unexpected argument 'b'" },
                { { "destroy", NULL },                                          "missing workqueue NAME" },
                { { "thaw", "--timeout", "1", NULL },                           "unknown option '--timeout'" },
                { { "freeze", "--timeout", "soon", NULL },                      "invalid --timeout" },
                { { "freeze", "--timeout", "2592001", NULL },                   "over the limit of 30 days" },
                { { "freeze", "a", "b", NULL },                                 "unexpected argument 'b'" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                Run r;

                /* A socket that does not exist: the command line is judged
                 * before connecting. */
                run_ctlv(&r, "CMWQ_SOCKET=" NO_SOCKET, cases[i].args);
                assert_usage_error(&r, cases[i].needle);
                run_done(&r);
        }
}
END_TEST

START_TEST(test_help_and_version) {
        Run r;

        run_ctl(&r, NULL, "--help", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.err, "");
        for (const char *const *w = (const char *const[]) {
                     "create NAME", "--unbound", "--ordered", "--highpri", "--cpu-intensive", "--freezable",
                     "--mem-reclaim", "--max-active", "submit NAME", "--cpu", "--delay", "--key", "--timeout",
                     "--stdin", "--wait", "wait ID", "show ID", "cancel ID", "flush NAME", "drain NAME",
                     "destroy NAME", "set-max-active NAME N", "list", "pools", "stats", "freeze [NAME]",
                     "thaw [NAME]", "--socket", "--json", "--version", "CMWQ_SOCKET", NULL }; *w; w++)
                ck_assert_msg(strstr(r.out, *w), "--help lacks '%s'", *w);
        run_done(&r);

        /* After a command: that command's usage and options only. */
        run_ctl(&r, NULL, "list", "--help", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.err, "");
        ck_assert_msg(strncmp(r.out, "cmwqctl list\n", 13) == 0, "%s", r.out);
        ck_assert_ptr_nonnull(strstr(r.out, "--json"));
        ck_assert_ptr_null(strstr(r.out, "submit"));
        run_done(&r);

        run_ctl(&r, NULL, "create", "q", "--max-active", "many", "--help", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_msg(strncmp(r.out, "cmwqctl create NAME [--unbound]", 31) == 0, "%s", r.out);
        for (const char *const *w = (const char *const[]) {
                     "--ordered", "--highpri", "--cpu-intensive", "--freezable", "--mem-reclaim",
                     "--max-active=N", "--on-interrupt=rerun|drop", "--socket", NULL }; *w; w++)
                ck_assert_msg(strstr(r.out, *w), "create --help lacks '%s'", *w);
        ck_assert_ptr_null(strstr(r.out, "--delay"));
        run_done(&r);

        run_ctl(&r, NULL, "thaw", "--help", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_ptr_null(strstr(r.out, "--timeout"));
        run_done(&r);

        run_ctl(&r, NULL, "--version", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_ptr_nonnull(strstr(r.out, "cmwqctl"));
        ck_assert_ptr_nonnull(strstr(r.out, "protocol version"));
        run_done(&r);
}
END_TEST

START_TEST(test_no_daemon) {
        Run r;

        run_ctl(&r, NULL, "--socket", NO_SOCKET, "list", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_str_eq(r.out, "");
        ck_assert_str_eq(r.err, "cmwqctl: cannot connect to cmwqd at " NO_SOCKET ": No such file or directory\n");
        run_done(&r);

        /* $CMWQ_SOCKET, and options after the command */
        run_ctl(&r, "CMWQ_SOCKET=" NO_SOCKET "2", "pools", "--json", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_str_eq(r.err, "cmwqctl: cannot connect to cmwqd at " NO_SOCKET "2: No such file or directory\n");
        run_done(&r);

        /* --socket wins over $CMWQ_SOCKET */
        run_ctl(&r, "CMWQ_SOCKET=/elsewhere", "submit", "q", "--socket=" NO_SOCKET, "--delay", "0.5", "--",
                "/bin/true", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_str_eq(r.err, "cmwqctl: cannot connect to cmwqd at " NO_SOCKET ": No such file or directory\n");
        run_done(&r);
}
END_TEST

START_TEST(test_socket_not_listening) {
        char dir[] = "/tmp/test-cmwqctl-XXXXXX", path[128], env[160];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;
        Run r;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/sock", dir);
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);     /* bound, no listen() */

        snprintf(env, sizeof(env), "CMWQ_SOCKET=%s", path);
        run_ctl(&r, env, "stats", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_ptr_nonnull(strstr(r.err, "Connection refused"));
        ck_assert_ptr_nonnull(strstr(r.err, path));
        ck_assert_int_eq((int) count_lines(r.err), 1);
        run_done(&r);

        close(fd);
        unlink(path);
        rmdir(dir);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* a fake cmwqd */

typedef void (*Handler)(const Cmwq__Request *req, Cmwq__Response *resp);

static struct {
        char dir[64];
        char path[128];
        char env[160];
        int fd;
        Handler handler;
        pthread_mutex_t lock;
        Cmwq__Request *last;            /* the last request but Hello */
} fake = { .lock = PTHREAD_MUTEX_INITIALIZER };

static bool read_exact(int fd, void *p, size_t n) {
        while (n > 0) {
                ssize_t k = read(fd, p, n);
                if (k <= 0)
                        return false;
                p = (uint8_t *) p + k;
                n -= (size_t) k;
        }
        return true;
}

static void write_response(int fd, const Cmwq__Response *resp) {
        size_t len = cmwq__response__get_packed_size(resp);
        uint8_t *buf = malloc(CMWQ_FRAME_HEADER_SIZE + len);

        frame_header_encode(buf, (uint32_t) len);
        cmwq__response__pack(resp, buf + CMWQ_FRAME_HEADER_SIZE);
        ck_assert_int_eq(send(fd, buf, CMWQ_FRAME_HEADER_SIZE + len, MSG_NOSIGNAL), (ssize_t) (CMWQ_FRAME_HEADER_SIZE + len));
        free(buf);
}

static void serve(int cfd) {
        for (;;) {
                uint8_t hdr[CMWQ_FRAME_HEADER_SIZE], *buf;
                Cmwq__Response resp = CMWQ__RESPONSE__INIT;
                Cmwq__HelloReply hello = CMWQ__HELLO_REPLY__INIT;
                Cmwq__Request *req;
                uint32_t len;

                if (!read_exact(cfd, hdr, sizeof(hdr)))
                        return;
                len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t) hdr[3] << 24;
                ck_assert_uint_le(len, CMWQ_FRAME_MAX_PAYLOAD);
                buf = malloc(len + 1);
                if (!read_exact(cfd, buf, len))
                        return;
                req = cmwq__request__unpack(NULL, len, buf);
                free(buf);
                ck_assert_ptr_nonnull(req);

                resp.id = req->id;
                resp.error = CMWQ__ERROR__OK;
                if (req->body_case == CMWQ__REQUEST__BODY_HELLO) {
                        ck_assert_uint_eq(req->hello->version, CMWQ_PROTOCOL_VERSION);
                        hello.version = CMWQ_PROTOCOL_VERSION;
                        hello.daemon = (char *) "fake";
                        resp.body_case = CMWQ__RESPONSE__BODY_HELLO;
                        resp.hello = &hello;
                } else {
                        pthread_mutex_lock(&fake.lock);
                        if (fake.last)
                                cmwq__request__free_unpacked(fake.last, NULL);
                        fake.last = req;
                        pthread_mutex_unlock(&fake.lock);
                }
                fake.handler(req, &resp);
                if (resp.id == UINT64_MAX)      /* the handler wants the connection dropped */
                        return;
                write_response(cfd, &resp);
                if (req->body_case == CMWQ__REQUEST__BODY_HELLO)
                        cmwq__request__free_unpacked(req, NULL);
        }
}

static void *fake_thread(void *userdata) {
        for (;;) {
                int cfd = accept4(fake.fd, NULL, NULL, SOCK_CLOEXEC);
                if (cfd < 0)
                        return NULL;
                serve(cfd);
                close(cfd);
        }
}

static void fake_start(Handler handler) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        pthread_t t;

        strcpy(fake.dir, "/tmp/test-cmwqctl-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(fake.dir));
        snprintf(fake.path, sizeof(fake.path), "%s/cmwqd.sock", fake.dir);
        snprintf(fake.env, sizeof(fake.env), "CMWQ_SOCKET=%s", fake.path);
        strcpy(sa.sun_path, fake.path);
        fake.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fake.fd, 0);
        ck_assert_int_eq(bind(fake.fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(fake.fd, 16), 0);
        fake.handler = handler;
        ck_assert_int_eq(pthread_create(&t, NULL, fake_thread, NULL), 0);
        pthread_detach(t);
}

static void fake_stop(void) {
        unlink(fake.path);
        rmdir(fake.dir);
}

static Cmwq__Request *fake_last(void) {
        Cmwq__Request *r;

        pthread_mutex_lock(&fake.lock);
        r = fake.last;
        pthread_mutex_unlock(&fake.lock);
        ck_assert_ptr_nonnull(r);
        return r;
}

static const char *env_value(const Cmwq__Submit *s, const char *name) {
        size_t n = strlen(name);

        for (size_t i = 0; i < s->n_env; i++)
                if (strncmp(s->env[i], name, n) == 0 && s->env[i][n] == '=')
                        return s->env[i] + n + 1;
        return NULL;
}

/* The item the handlers below report; tests set it up before running. */
static Cmwq__ItemInfo test_item = CMWQ__ITEM_INFO__INIT;
static char *test_argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) "echo 'hi there'" };

static void item_setup(Cmwq__ItemState state) {
        test_item = (Cmwq__ItemInfo) CMWQ__ITEM_INFO__INIT;
        test_item.id = 17;
        test_item.workqueue = (char *) "system";
        test_item.state = state;
        test_item.n_argv = 3;
        test_item.argv = test_argv;
}

static void handle_version_mismatch(const Cmwq__Request *req, Cmwq__Response *resp) {
        if (req->body_case == CMWQ__REQUEST__BODY_HELLO) {
                resp->error = CMWQ__ERROR__VERSION_MISMATCH;
                resp->message = (char *) "protocol version 1 is not supported,\nupgrade";
                resp->body_case = CMWQ__RESPONSE__BODY__NOT_SET;
        }
}

START_TEST(test_version_mismatch) {
        Run r;

        fake_start(handle_version_mismatch);
        run_ctl(&r, fake.env, "list", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_str_eq(r.out, "");
        ck_assert_int_eq((int) count_lines(r.err), 1);
        ck_assert_ptr_nonnull(strstr(r.err, "refused the connection: protocol version 1 is not supported, upgrade"));
        run_done(&r);
        fake_stop();
}
END_TEST

static void handle_refuse(const Cmwq__Request *req, Cmwq__Response *resp) {
        static Cmwq__Empty done = CMWQ__EMPTY__INIT;

        if (req->body_case == CMWQ__REQUEST__BODY_HELLO)
                return;
        if (req->body_case == CMWQ__REQUEST__BODY_DESTROY && strcmp(req->destroy->name, "nope") == 0) {
                resp->error = CMWQ__ERROR__NOT_FOUND;
                resp->message = (char *) "workqueue 'nope' does not exist";
                return;
        }
        resp->body_case = CMWQ__RESPONSE__BODY_DONE;
        resp->done = &done;
}

START_TEST(test_refused_and_simple) {
        Cmwq__Request *req;
        Run r;

        fake_start(handle_refuse);

        run_ctl(&r, fake.env, "destroy", "nope", NULL);
        ck_assert_int_eq(r.status, 1);
        ck_assert_str_eq(r.out, "");
        ck_assert_str_eq(r.err, "cmwqctl: workqueue 'nope' does not exist\n");
        run_done(&r);

        run_ctl(&r, fake.env, "create", "--ordered", "q1", "--freezable", "--max-active", "4", "--highpri",
                "--unbound", "--cpu-intensive", "--mem-reclaim", NULL);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_str_eq(r.out, "");
        req = fake_last();
        ck_assert_int_eq(req->body_case, CMWQ__REQUEST__BODY_CREATE);
        ck_assert_str_eq(req->create->name, "q1");
        ck_assert_uint_eq(req->create->flags, CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED | CMWQ__WORKQUEUE_FLAG__FLAG_FREEZABLE |
                          CMWQ__WORKQUEUE_FLAG__FLAG_HIGHPRI | CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND |
                          CMWQ__WORKQUEUE_FLAG__FLAG_CPU_INTENSIVE | CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM);
        ck_assert(req->create->has_max_active);
        ck_assert_uint_eq(req->create->max_active, 4);
        run_done(&r);

        run_ctl(&r, fake.env, "create", "q2", NULL);
        ck_assert_int_eq(r.status, 0);
        req = fake_last();
        ck_assert_uint_eq(req->create->flags, 0);
        ck_assert(!req->create->has_max_active);
        run_done(&r);

        run_ctl(&r, fake.env, "set-max-active", "q2", "7", NULL);
        ck_assert_int_eq(r.status, 0);
        req = fake_last();
        ck_assert_int_eq(req->body_case, CMWQ__REQUEST__BODY_SET_MAX_ACTIVE);
        ck_assert_uint_eq(req->set_max_active->max_active, 7);
        run_done(&r);

        run_ctl(&r, fake.env, "freeze", NULL);
        ck_assert_int_eq(r.status, 0);
        req = fake_last();
        ck_assert_int_eq(req->body_case, CMWQ__REQUEST__BODY_FREEZE);
        ck_assert_ptr_null(req->freeze->name);
        run_done(&r);

        run_ctl(&r, fake.env, "thaw", "q2", NULL);
        ck_assert_int_eq(r.status, 0);
        req = fake_last();
        ck_assert_int_eq(req->body_case, CMWQ__REQUEST__BODY_THAW);
        ck_assert_str_eq(req->thaw->name, "q2");
        run_done(&r);

        run_ctl(&r, fake.env, "cancel", "12", NULL);
        ck_assert_int_eq(r.status, 0);
        req = fake_last();
        ck_assert_int_eq(req->body_case, CMWQ__REQUEST__BODY_CANCEL);
        ck_assert_uint_eq(req->cancel->id, 12);
        run_done(&r);

        fake_stop();
}
END_TEST

static void handle_submit(const Cmwq__Request *req, Cmwq__Response *resp) {
        static Cmwq__SubmitReply reply = CMWQ__SUBMIT_REPLY__INIT;

        if (req->body_case == CMWQ__REQUEST__BODY_HELLO)
                return;
        ck_assert_int_eq(req->body_case, CMWQ__REQUEST__BODY_SUBMIT);
        reply = (Cmwq__SubmitReply) CMWQ__SUBMIT_REPLY__INIT;
        reply.id = 42;
        if (req->submit->key && strcmp(req->submit->key, "dup") == 0) {
                reply.id = 7;
                reply.has_already_pending = reply.already_pending = true;
        }
        if (req->submit->wait)
                reply.item = &test_item;
        resp->body_case = CMWQ__RESPONSE__BODY_SUBMIT;
        resp->submit = &reply;
}

START_TEST(test_submit_request) {
        char cwd[4096], payload[] = "/tmp/test-cmwqctl-payload-XXXXXX";
        Cmwq__Request *req;
        Cmwq__Submit *s;
        int fd;
        Run r;

        fake_start(handle_submit);
        ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
        fd = mkstemp(payload);
        ck_assert_int_eq(write(fd, "in\0put", 6), 6);
        close(fd);

        run_ctl(&r, fake.env, "submit", "--delay", "0.5", "q", "--cpu", "3", "--timeout=2", "--key", "k1",
                "--stdin", payload, "--", "./run.sh", "--cpu", "x y", NULL);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_str_eq(r.out, "42\n");
        ck_assert_str_eq(r.err, "");
        req = fake_last();
        s = req->submit;
        ck_assert_str_eq(s->workqueue, "q");
        ck_assert_uint_eq(s->n_argv, 3);
        ck_assert_str_eq(s->argv[1], "--cpu");
        ck_assert_str_eq(s->argv[2], "x y");
        ck_assert_str_eq(s->cwd, cwd);
        ck_assert_ptr_nonnull(strstr(s->argv[0], "/run.sh"));
        ck_assert_msg(s->argv[0][0] == '/' && strncmp(s->argv[0], cwd, strlen(cwd)) == 0, "%s", s->argv[0]);
        ck_assert(s->has_cpu);
        ck_assert_int_eq(s->cpu, 3);
        ck_assert(s->has_delay_usec);
        ck_assert_uint_eq(s->delay_usec, 500000);
        ck_assert(s->has_timeout_usec);
        ck_assert_uint_eq(s->timeout_usec, 2000000);
        ck_assert_str_eq(s->key, "k1");
        ck_assert(s->has_stdin_payload);
        ck_assert_uint_eq(s->stdin_payload.len, 6);
        ck_assert_mem_eq(s->stdin_payload.data, "in\0put", 6);
        ck_assert(!s->wait);
        ck_assert_str_eq(env_value(s, "CMWQ_SOCKET"), fake.path);
        ck_assert_ptr_nonnull(env_value(s, "PATH"));
        run_done(&r);

        /* bare names go as they are; no options: no delay, no key, no payload */
        run_ctl(&r, fake.env, "submit", "q", "true", NULL);
        ck_assert_int_eq(r.status, 0);
        s = fake_last()->submit;
        ck_assert_str_eq(s->argv[0], "true");
        ck_assert_uint_eq(s->n_argv, 1);
        ck_assert(!s->has_delay_usec);
        ck_assert(!s->has_timeout_usec);
        ck_assert(!s->has_stdin_payload);
        ck_assert_ptr_null(s->key);
        run_done(&r);

        /* a key already pending: the id of the pending item, exit 0 */
        run_ctl(&r, fake.env, "submit", "q", "--key", "dup", "--", "/bin/true", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, "7\n");
        ck_assert_str_eq(r.err, "cmwqctl: work key dup already pending as item 7\n");
        run_done(&r);

        run_ctl(&r, fake.env, "--json", "submit", "q", "--key", "dup", "--", "/bin/true", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, "{\"id\":7,\"already_pending\":true}\n");
        run_done(&r);

        unlink(payload);
        fake_stop();
}
END_TEST

START_TEST(test_submit_wait_exit_codes) {
        static const uint8_t out[] = "hello\n", err[] = "oops\n";
        Run r;

        fake_start(handle_submit);

        /* exit status and output, verbatim */
        item_setup(CMWQ__ITEM_STATE__STATE_FINISHED);
        test_item.has_exit_status = true;
        test_item.exit_status = 3;
        test_item.has_stdout_data = test_item.has_stderr_data = true;
        test_item.stdout_data = (ProtobufCBinaryData) { sizeof(out) - 1, (uint8_t *) out };
        test_item.stderr_data = (ProtobufCBinaryData) { sizeof(err) - 1, (uint8_t *) err };
        run_ctl(&r, fake.env, "submit", "q", "--wait", "--", "/bin/sh", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_str_eq(r.out, "hello\n");
        ck_assert_str_eq(r.err, "oops\n");
        ck_assert(fake_last()->submit->wait);
        run_done(&r);

        /* truncation is noted on stderr */
        test_item.exit_status = 0;
        test_item.has_stdout_truncated = test_item.stdout_truncated = true;
        run_ctl(&r, fake.env, "submit", "q", "--wait", "--", "/bin/sh", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, "hello\n");
        ck_assert_ptr_nonnull(strstr(r.err, "oops\n"));
        ck_assert_ptr_nonnull(strstr(r.err, "stdout was truncated"));
        run_done(&r);

        /* killed by a signal: 128+N */
        item_setup(CMWQ__ITEM_STATE__STATE_FINISHED);
        test_item.has_signal = true;
        test_item.signal = SIGKILL;
        run_ctl(&r, fake.env, "submit", "q", "--wait", "--", "/bin/sh", NULL);
        ck_assert_int_eq(r.status, 128 + SIGKILL);
        run_done(&r);

        /* timed out beats the signal that stopped it */
        test_item.has_timed_out = test_item.timed_out = true;
        run_ctl(&r, fake.env, "submit", "q", "--wait", "--", "/bin/sh", NULL);
        ck_assert_int_eq(r.status, 124);
        run_done(&r);

        item_setup(CMWQ__ITEM_STATE__STATE_CANCELLED);
        run_ctl(&r, fake.env, "submit", "q", "--wait", "--", "/bin/sh", NULL);
        ck_assert_int_eq(r.status, 125);
        run_done(&r);

        item_setup(CMWQ__ITEM_STATE__STATE_FAILED);
        test_item.error = (char *) "/nonexistent: No such file or directory";
        run_ctl(&r, fake.env, "submit", "q", "--wait", "--", "/nonexistent", NULL);
        ck_assert_int_eq(r.status, 127);
        ck_assert_str_eq(r.out, "");
        ck_assert_str_eq(r.err, "cmwqctl: item 17 could not be started: /nonexistent: No such file or directory\n");
        run_done(&r);

        fake_stop();
}
END_TEST

static void handle_items(const Cmwq__Request *req, Cmwq__Response *resp) {
        if (req->body_case == CMWQ__REQUEST__BODY_HELLO)
                return;
        if (req->body_case == CMWQ__REQUEST__BODY_WAIT && req->wait->id == 666) {
                resp->id = UINT64_MAX;          /* hang up mid-call */
                return;
        }
        ck_assert(req->body_case == CMWQ__REQUEST__BODY_WAIT || req->body_case == CMWQ__REQUEST__BODY_SHOW);
        resp->body_case = CMWQ__RESPONSE__BODY_ITEM;
        resp->item = &test_item;
}

START_TEST(test_wait_show_json) {
        /* control characters, quotes, a backslash and bytes that are not UTF-8 */
        static const uint8_t out[] = "a\"b\\c\n\x01\xff\xc3\xa9";
        Run r;

        fake_start(handle_items);
        item_setup(CMWQ__ITEM_STATE__STATE_FINISHED);
        test_item.has_exit_status = true;
        test_item.exit_status = 5;
        test_item.has_stdout_data = true;
        test_item.stdout_data = (ProtobufCBinaryData) { sizeof(out) - 1, (uint8_t *) out };

        run_ctl(&r, fake.env, "wait", "17", NULL);
        ck_assert_int_eq(r.status, 5);
        ck_assert_mem_eq(r.out, out, sizeof(out) - 1);
        ck_assert_uint_eq(fake_last()->wait->id, 17);
        run_done(&r);

        run_ctl(&r, fake.env, "--json", "wait", "17", NULL);
        ck_assert_int_eq(r.status, 5);
        ck_assert_str_eq(r.out,
                         "{\"id\":17,\"workqueue\":\"system\",\"state\":\"finished\","
                         "\"argv\":[\"/bin/sh\",\"-c\",\"echo 'hi there'\"],\"exit_status\":5,"
                         "\"stdout\":\"a\\\"b\\\\c\\n\\u0001\\ufffd\xc3\xa9\","
                         "\"stdout_base64\":\"YSJiXGMKAf/DqQ==\",\"stdout_truncated\":false}\n");
        run_done(&r);

        run_ctl(&r, fake.env, "show", "17", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_ptr_nonnull(strstr(r.out, "state:         finished\n"));
        ck_assert_ptr_nonnull(strstr(r.out, "command:       /bin/sh -c 'echo '\\''hi there'\\'''\n"));
        ck_assert_ptr_nonnull(strstr(r.out, "exit status:   5\n"));
        ck_assert_ptr_nonnull(strstr(r.out, "stdout:        10 bytes\n  a\"b\\c\n  \\x01"));
        ck_assert_uint_eq(fake_last()->show->id, 17);
        run_done(&r);

        run_ctl(&r, fake.env, "wait", "666", NULL);
        ck_assert_int_eq(r.status, 3);
        ck_assert_int_eq((int) count_lines(r.err), 1);
        ck_assert_ptr_nonnull(strstr(r.err, "closed the connection"));
        run_done(&r);

        fake_stop();
}
END_TEST

static void handle_listings(const Cmwq__Request *req, Cmwq__Response *resp) {
        static Cmwq__WorkqueueInfo q1 = CMWQ__WORKQUEUE_INFO__INIT, q2 = CMWQ__WORKQUEUE_INFO__INIT,
                                   q3 = CMWQ__WORKQUEUE_INFO__INIT;
        static Cmwq__WorkqueueInfo *qs[] = { &q1, &q2, &q3 };
        static Cmwq__ListReply list = CMWQ__LIST_REPLY__INIT;
        static Cmwq__PoolInfo p1 = CMWQ__POOL_INFO__INIT, p2 = CMWQ__POOL_INFO__INIT;
        static Cmwq__PoolInfo *ps[] = { &p1, &p2 };
        static Cmwq__PoolsReply pools = CMWQ__POOLS_REPLY__INIT;
        static Cmwq__WorkqueueStats s1 = CMWQ__WORKQUEUE_STATS__INIT, s2 = CMWQ__WORKQUEUE_STATS__INIT;
        static Cmwq__WorkqueueStats *ss[] = { &s1, &s2 };
        static Cmwq__StatsReply stats = CMWQ__STATS_REPLY__INIT;

        q1.name = (char *) "system";
        q1.max_active = 256;
        q1.has_pending = q1.has_running = q1.has_total = true;
        q1.pending = 3;
        q1.running = 1;
        q1.total = 1234;
        q2.name = (char *) "long_unbound_queue";
        q2.flags = CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND | CMWQ__WORKQUEUE_FLAG__FLAG_FREEZABLE;
        q2.max_active = 4;
        q2.has_frozen = q2.frozen = true;
        /* A library's queue whose connection has ended. */
        q3.name = (char *) "lib";
        q3.max_active = 1;
        q3.has_owner_uid = true;
        q3.owner_uid = 0;
        q3.has_owner_pid = true;
        q3.owner_pid = 4242;
        q3.has_owner_gone = q3.owner_gone = true;
        q3.has_draining = q3.draining = true;
        list.n_workqueues = 3;
        list.workqueues = qs;

        p1.cpu = 0;
        p1.workers = 2;
        p1.running = 1;
        p1.idle = 1;
        p1.pending = 5;
        p2.cpu = -1;
        p2.highpri = true;
        pools.n_pools = 2;
        pools.pools = ps;

        s1.name = (char *) "system";
        s1.total = 10;
        s1.cpu_usec = 1500000;
        s1.cm_wakeups = 4;
        s1.has_watchdog = true;
        s1.watchdog = 2;
        s2.name = (char *) "long_unbound_queue";
        stats.n_workqueues = 2;
        stats.workqueues = ss;

        switch (req->body_case) {
        case CMWQ__REQUEST__BODY_HELLO:
                return;
        case CMWQ__REQUEST__BODY_LIST:
                resp->body_case = CMWQ__RESPONSE__BODY_LIST;
                resp->list = &list;
                return;
        case CMWQ__REQUEST__BODY_POOLS:
                resp->body_case = CMWQ__RESPONSE__BODY_POOLS;
                resp->pools = &pools;
                return;
        case CMWQ__REQUEST__BODY_STATS:
                resp->body_case = CMWQ__RESPONSE__BODY_STATS;
                resp->stats = &stats;
                return;
        default:
                ck_abort_msg("unexpected request %d", req->body_case);
        }
}

START_TEST(test_listings) {
        Run r;

        fake_start(handle_listings);

        run_ctl(&r, fake.env, "list", NULL);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_str_eq(r.out,
                "NAME                FLAGS              MAX_ACTIVE  PENDING  RUNNING  TOTAL  FROZEN  DRAINING  OWNER\n"
                "system              -                         256        3        1   1234  -       -         -\n"
                "long_unbound_queue  unbound,freezable           4        -        -      -  yes     -         -\n"
                "lib                 -                           1        -        -      -  -       yes       root, closed connection of pid 4242\n");
        run_done(&r);

        run_ctl(&r, fake.env, "pools", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out,
                "CPU      PRIO     WORKERS  RUNNING  IDLE  PENDING  BUSY  BLOCKED  CB-THREADS  CALLBACKS\n"
                "0        normal         2        1     1        5     -        -           -          -\n"
                "unbound  highpri        0        0     0        0     -        -           -          -\n");
        run_done(&r);

        run_ctl(&r, fake.env, "stats", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out,
                "NAME                total  infl  CPUtime  CPUitsv  CMW/RPR  mayday  rescued  stalls\n"
                "system                 10     0    1.500        0        4       0        -       2\n"
                "long_unbound_queue      0     0    0.000        -        0       0        -       -\n");
        run_done(&r);

        run_ctl(&r, fake.env, "list", "--json", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out,
                "[{\"name\":\"system\",\"flags\":[],\"flags_value\":0,\"max_active\":256,\"pending\":3,"
                "\"running\":1,\"total\":1234,\"frozen\":false,\"draining\":false,\"builtin\":false},"
                "{\"name\":\"long_unbound_queue\",\"flags\":[\"unbound\",\"freezable\"],\"flags_value\":3,"
                "\"max_active\":4,\"frozen\":true,\"draining\":false,\"builtin\":false},"
                "{\"name\":\"lib\",\"flags\":[],\"flags_value\":0,\"max_active\":1,\"owner_uid\":0,"
                "\"owner_pid\":4242,\"owner_gone\":true,\"frozen\":false,\"draining\":true,\"builtin\":false}]\n");
        run_done(&r);

        run_ctl(&r, fake.env, "--json", "pools", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out,
                "[{\"cpu\":0,\"unbound\":false,\"highpri\":false,\"workers\":2,\"running\":1,\"idle\":1,\"pending\":5},"
                "{\"cpu\":-1,\"unbound\":true,\"highpri\":true,\"workers\":0,\"running\":0,\"idle\":0,\"pending\":0}]\n");
        run_done(&r);

        run_ctl(&r, fake.env, "--json", "stats", NULL);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out,
                "[{\"name\":\"system\",\"total\":10,\"in_flight\":0,\"cpu_usec\":1500000,\"cpu_intensive\":0,"
                "\"cm_wakeups\":4,\"mayday\":0,\"rescued\":0,\"watchdog\":2},"
                "{\"name\":\"long_unbound_queue\",\"total\":0,\"in_flight\":0,\"cpu_usec\":0,\"cpu_intensive\":0,"
                "\"cm_wakeups\":0,\"mayday\":0,\"rescued\":0}]\n");
        run_done(&r);

        fake_stop();
}
END_TEST

int main(void) {
        Suite *s = suite_create("cmwqctl-args");
        TCase *tc = tcase_create("cmwqctl");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_bad_command_lines);
        tcase_add_test(tc, test_help_and_version);
        tcase_add_test(tc, test_no_daemon);
        tcase_add_test(tc, test_socket_not_listening);
        tcase_add_test(tc, test_version_mismatch);
        tcase_add_test(tc, test_refused_and_simple);
        tcase_add_test(tc, test_submit_request);
        tcase_add_test(tc, test_submit_wait_exit_codes);
        tcase_add_test(tc, test_wait_show_json);
        tcase_add_test(tc, test_listings);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

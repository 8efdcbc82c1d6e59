/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Privilege and ownership: cmwqd runs as root, and every exec item must run
 * as its submitter with exactly the submitter's credentials, never with the
 * daemon's; one user can neither see nor touch another user's queues and
 * items (doc/design.md §2.1 and §3.10).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/keyctl.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* The submitter, and a second unprivileged user with no relation to it;
 * both have an entry in the user database (Debian's base-passwd has
 * "nobody" and "daemon"), where an item's groups come from. */
#define USER_UID 65534
#define OTHER_UID 1
/* A uid with no entry there. */
#define UNKNOWN_UID 65533

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

static void write_file(const char *path, const char *text, mode_t mode) {
        FILE *f = fopen(path, "w");

        ck_assert_msg(f, "cannot create %s: %s", path, strerror(errno));
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(chmod(path, mode), 0);
}

static void sleep_ms(int ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };

        nanosleep(&ts, NULL);
}

/* stdout without the trailing newline; fails the test unless cmwqctl as @uid
 * exits 0. */
static char *ctl_as_ok(uid_t uid, const char *const *args) {
        struct ctl_result r;
        size_t n;

        ctl_run(&d, uid, &r, args);
        ck_assert_msg(r.status == 0, "cmwqctl %s ... as uid %d exited %d: %s", args[0], (int) uid, r.status, r.err);
        free(r.err);
        n = strlen(r.out);
        if (n > 0 && r.out[n - 1] == '\n')
                r.out[n - 1] = 0;
        return r.out;
}
#define CTL_AS_OK(uid, ...) ctl_as_ok(uid, (const char *const[]) { __VA_ARGS__, NULL })

static bool one_line(const char *s) {
        size_t n = strlen(s);

        return n > 0 && s[n - 1] == '\n' && strchr(s, '\n') == s + n - 1;
}

/* A refusal: exit 1, one clear "cmwqctl: ..." line that says @why, nothing on
 * stdout, and nothing of what must stay hidden. */
static void assert_refused(const struct ctl_result *r, const char *what, const char *why) {
        ck_assert_msg(r->status == 1, "%s: exit %d (want 1), stdout '%s', stderr '%s'", what, r->status, r->out, r->err);
        ck_assert_msg(one_line(r->err) && strncmp(r->err, "cmwqctl: ", 9) == 0, "%s: not one clear line: '%s'", what,
                      r->err);
        ck_assert_msg(strstr(r->err, why), "%s: stderr '%s' does not say '%s'", what, r->err, why);
        ck_assert_msg(r->out[0] == 0, "%s: printed '%s'", what, r->out);
        ck_assert_msg(!strstr(r->err, "SECRET"), "%s: leaked another user's data: %s", what, r->err);
}

/* Another user's item @id: refused with exactly what an id that never
 * existed gets (the id itself aside), so that nobody learns which ids
 * exist.  @args is the cmwqctl command with "ID" where the id goes. */
static void assert_as_if_unknown(uid_t uid, const char *const *args, const char *id, const char *what) {
        const char *argv[8], *unknown_id = "987654321";
        struct ctl_result theirs, none;
        char want[512], *p;
        size_t n = 0;

        for (; args[n]; n++) {
                ck_assert_uint_lt(n, sizeof(argv) / sizeof(argv[0]) - 1);
                argv[n] = strcmp(args[n], "ID") == 0 ? id : args[n];
        }
        argv[n] = NULL;
        ctl_run(&d, uid, &theirs, argv);
        assert_refused(&theirs, what, "no work item");
        for (size_t k = 0; k < n; k++)
                argv[k] = strcmp(args[k], "ID") == 0 ? unknown_id : args[k];
        ctl_run(&d, uid, &none, argv);
        assert_refused(&none, what, "no work item");
        /* The unknown id's message, with the id swapped in. */
        p = strstr(none.err, unknown_id);
        ck_assert_ptr_nonnull(p);
        snprintf(want, sizeof(want), "%.*s%s%s", (int) (p - none.err), none.err, id, p + strlen(unknown_id));
        ck_assert_msg(strcmp(theirs.err, want) == 0 && theirs.status == none.status,
                      "%s of another user's item: exit %d '%s'; of an unknown id: exit %d '%s'", what, theirs.status,
                      theirs.err, none.status, none.err);
        ctl_result_free(&theirs);
        ctl_result_free(&none);
}
#define ASSERT_AS_IF_UNKNOWN(uid, id, what, ...) \
        assert_as_if_unknown(uid, (const char *const[]) { __VA_ARGS__, NULL }, id, what)

/* The "state:" of an item, as its owner sees it. */
static char *item_state(uid_t uid, const char *id) {
        char *shown = CTL_AS_OK(uid, "show", id), *p, *state;

        p = strstr(shown, "state:");
        ck_assert_msg(p, "show %s said: %s", id, shown);
        p += strlen("state:");
        p += strspn(p, " ");
        state = strndup(p, strcspn(p, "\n"));
        free(shown);
        return state;
}

static void wait_for_state(uid_t uid, const char *id, const char *want) {
        char *state = NULL;

        for (int waited = 0; waited < 10000; waited += 20) {
                free(state);
                state = item_state(uid, id);
                if (strcmp(state, want) == 0)
                        break;
                sleep_ms(20);
        }
        ck_assert_msg(strcmp(state, want) == 0, "item %s is %s, not %s", id, state, want);
        free(state);
}

static int count_in_file(const char *path, const char *needle) {
        char *s = read_file(path);
        int n = 0;

        for (char *p = s; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        free(s);
        return n;
}

/* "Uid:", "Gid:", "Groups:", "CapEff:" ... lines of the item's own
 * /proc/self/status, one value list per field. */
static const char status_script[] =
        "id -u; id -g; "
        "sed -n -e 's/^\\(Uid\\|Gid\\|Groups\\|CapPrm\\|CapEff\\|CapBnd\\|CapAmb\\|NoNewPrivs\\):[[:space:]]*/\\1=/p' "
        "/proc/self/status | tr '\\t' ' ' | sed 's/ *$//'";

static void assert_line(const char *out, const char *line) {
        size_t n = strlen(line);
        const char *p = out;

        /* A whole line: at the start or after a newline, ending in one. */
        for (; (p = strstr(p, line)); p += n)
                if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0))
                        return;
        ck_abort_msg("the item's output has no line '%s':\n%s", line, out);
}

/* A built-in queue is every user's: a user's flush of it waits for that
 * user's items, not for another's (which that user cannot see, and which may
 * run for up to 30 days). */
START_TEST(test_a_flush_of_a_builtin_queue_waits_for_the_callers_items_only) {
        char gate[256], script[512], *theirs, *mine, *state;

        test_path(&d, "gate", gate, sizeof(gate));
        ck_assert_int_eq(chmod(d.dir, 0755), 0);
        /* Until the gate opens, or 20 s at most. */
        snprintf(script, sizeof(script), "i=0; while [ ! -e %s ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done",
                 gate);
        theirs = CTL_AS_OK(OTHER_UID, "submit", "system", "--", "/bin/sh", "-c", script);
        wait_for_state(OTHER_UID, theirs, "running");
        mine = CTL_AS_OK(USER_UID, "submit", "system", "--", "/bin/sh", "-c", "sleep 0.5");

        free(CTL_AS_OK(USER_UID, "flush", "system"));
        state = item_state(USER_UID, mine);
        ck_assert_msg(strcmp(state, "finished") == 0, "the flush returned with the caller's item %s", state);
        free(state);
        state = item_state(OTHER_UID, theirs);
        ck_assert_msg(strcmp(state, "running") == 0, "the flush waited for another user's item (now %s)", state);
        free(state);

        /* Root's flush waits for everyone's. */
        ck_assert_int_eq(creat(gate, 0644) >= 0, 1);
        free(CTL_OK(&d, "flush", "system"));
        state = item_state(OTHER_UID, theirs);
        ck_assert_str_eq(state, "finished");
        free(state);
        free(theirs);
        free(mine);
}
END_TEST

START_TEST(test_item_runs_as_the_submitter) {
        char *out;

        out = CTL_AS_OK(USER_UID, "submit", "system", "--wait", "--", "/bin/sh", "-c", status_script);
        assert_line(out, "65534");                      /* id -u */
        assert_line(out, "Uid=65534 65534 65534 65534");        /* real, effective, saved, fs */
        assert_line(out, "Gid=65534 65534 65534 65534");
        /* nobody's groups in the user database (its primary group, as
         * initgroups() sets them), not the daemon's (root has group 0). */
        assert_line(out, "Groups=65534");
        /* No capability is left, not even in the permitted set. */
        assert_line(out, "CapPrm=0000000000000000");
        assert_line(out, "CapEff=0000000000000000");
        assert_line(out, "CapAmb=0000000000000000");
        /* "id -g" is the second line. */
        ck_assert_msg(strncmp(out, "65534\n65534\n", 12) == 0, "id -u / id -g said:\n%s", out);
        free(out);
}
END_TEST

/* Runs cmwqctl as @uid/@gid with exactly @groups; returns its stdout. */
static char *ctl_with_groups(uid_t uid, gid_t gid, const gid_t *groups, size_t n_groups, const char *const *args,
                             int *ret_status) {
        const char *argv[32];
        int pipefd[2], n = 0, status;
        char *out = calloc(1, 1);
        size_t len = 0;
        char buf[4096];
        ssize_t k;
        pid_t pid;

        argv[n++] = d.ctl;
        argv[n++] = "--socket";
        argv[n++] = d.socket;
        for (; *args && n < 31; args++)
                argv[n++] = *args;
        argv[n] = NULL;

        ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
        pid = test_fork();
        if (pid == 0) {
                dup2(pipefd[1], STDOUT_FILENO);
                if (setgroups(n_groups, groups) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0 ||
                    chdir(d.dir) < 0)
                        _exit(126);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        close(pipefd[1]);
        while ((k = read(pipefd[0], buf, sizeof(buf))) > 0) {
                out = realloc(out, len + (size_t) k + 1);
                ck_assert_ptr_nonnull(out);
                memcpy(out + len, buf, (size_t) k);
                len += (size_t) k;
                out[len] = 0;
        }
        close(pipefd[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        *ret_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return out;
}

/* The groups a client process holds are not the user's: a setgid program,
 * newgrp, a connection inherited from either.  An item gets its user's
 * primary group and supplementary groups from the user database, as su,
 * cron and systemd's User= do, whatever the connecting process had. */
START_TEST(test_item_groups_come_from_the_user_database) {
        const gid_t groups[] = { 4343, 42, 0 };
        int status;
        char *out;

        out = ctl_with_groups(USER_UID, 4000, groups, 3,
                              (const char *const[]) { "submit", "system", "--wait", "--", "/bin/sh", "-c",
                                                      status_script, NULL },
                              &status);
        ck_assert_msg(status == 0, "cmwqctl exited %d", status);
        assert_line(out, "Uid=65534 65534 65534 65534");
        assert_line(out, "Gid=65534 65534 65534 65534");
        assert_line(out, "Groups=65534");
        free(out);
}
END_TEST

/* A uid the user database does not know: its groups cannot be told, so
 * nothing runs as it, and the submitter is told why. */
START_TEST(test_uid_without_a_user_entry_runs_nothing) {
        struct ctl_result r;

        ck_assert_msg(!getpwuid(UNKNOWN_UID), "uid %d has an entry in the user database here", UNKNOWN_UID);
        CTL_AS(&d, UNKNOWN_UID, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c", "echo ran");
        ck_assert_msg(r.status == 127, "exit %d (want 127, not started); stdout '%s', stderr '%s'", r.status, r.out,
                      r.err);
        ck_assert_msg(strstr(r.err, "no entry in the user database"), "stderr: %s", r.err);
        ck_assert_msg(!strstr(r.out, "ran"), "the item ran: %s", r.out);
        ctl_result_free(&r);
        /* Everything else it may do, as any user. */
        free(CTL_AS_OK(UNKNOWN_UID, "list"));
}
END_TEST

START_TEST(test_item_cannot_write_as_root) {
        char file[400], dir[400], created[500], script[2048], *content;
        struct ctl_result r;
        struct stat st;

        test_path(&d, "root-file", file, sizeof(file));
        write_file(file, "original\n", 0644);
        test_path(&d, "root-dir", dir, sizeof(dir));
        ck_assert_int_eq(mkdir(dir, 0755), 0);
        snprintf(created, sizeof(created), "%s/created-by-item", dir);

        snprintf(script, sizeof(script), "echo overwritten > '%s'", file);
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c", script);
        ck_assert_msg(r.status != 0, "writing a root-owned 0644 file succeeded; stderr: %s", r.err);
        ck_assert_msg(strstr(r.err, "Permission denied"), "stderr: %s", r.err);
        ctl_result_free(&r);
        content = read_file(file);
        ck_assert_str_eq(content, "original\n");
        free(content);
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert_int_eq(st.st_uid, 0);
        ck_assert_int_eq(st.st_mode & 07777, 0644);

        /* Not by renaming over it or truncating it either. */
        snprintf(script, sizeof(script), ": > '%s' || truncate -s 0 '%s' || mv -f '%s' '%s.moved'", file, file, file,
                 file);
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c", script);
        ck_assert_msg(r.status != 0, "an item of uid %d changed a root-owned file", USER_UID);
        ctl_result_free(&r);
        content = read_file(file);
        ck_assert_str_eq(content, "original\n");
        free(content);

        snprintf(script, sizeof(script), "echo new > '%s'", created);
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c", script);
        ck_assert_msg(r.status != 0, "creating a file in a root-owned 0755 directory succeeded");
        ctl_result_free(&r);
        ck_assert_msg(access(created, F_OK) < 0 && errno == ENOENT, "%s exists", created);

        /* The same item run by root does write: the test is meaningful. */
        free(CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", script));
        ck_assert_int_eq(access(created, F_OK), 0);
}
END_TEST

START_TEST(test_program_the_user_cannot_execute) {
        char script[400], path_env[400], *out;
        struct ctl_result r;

        test_path(&d, "root-only.sh", script, sizeof(script));
        write_file(script, "#!/bin/sh\necho root-ran\n", 0700);

        /* The daemon (root) could exec it; the item must not. */
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--wait", "--", script);
        ck_assert_msg(r.status == 127, "exit %d (want 127), stdout '%s', stderr '%s'", r.status, r.out, r.err);
        ck_assert_msg(strstr(r.err, "Permission denied"), "stderr: %s", r.err);
        ck_assert_msg(!strstr(r.out, "root-ran"), "the item ran: %s", r.out);
        ctl_result_free(&r);

        /* Nor as a bare name found in the item's PATH, nor relative to its
         * working directory (cmwqctl runs in the daemon's directory). */
        snprintf(path_env, sizeof(path_env), "%s:/usr/bin:/bin", d.dir);
        ck_assert_int_eq(setenv("PATH", path_env, 1), 0);
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--wait", "--", "root-only.sh");
        ck_assert_msg(r.status == 127 && strstr(r.err, "Permission denied"), "exit %d, stdout '%s', stderr '%s'",
                      r.status, r.out, r.err);
        ctl_result_free(&r);
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--wait", "--", "./root-only.sh");
        ck_assert_msg(r.status == 127 && strstr(r.err, "Permission denied"), "exit %d, stdout '%s', stderr '%s'",
                      r.status, r.out, r.err);
        ctl_result_free(&r);

        out = CTL_OK(&d, "submit", "system", "--wait", "--", script);
        ck_assert_str_eq(out, "root-ran");
        free(out);
}
END_TEST

START_TEST(test_stdin_file_is_read_by_cmwqctl_not_the_daemon) {
        char secret[400];
        struct ctl_result r;
        int queued;

        test_path(&d, "root-secret", secret, sizeof(secret));
        write_file(secret, "SECRET-of-root\n", 0600);

        queued = count_in_file(d.log, "Queued item");
        CTL_AS(&d, USER_UID, &r, "submit", "system", "--stdin", secret, "--wait", "--", "/bin/cat");
        ck_assert_msg(r.status == 2, "exit %d (want 2), stdout '%s', stderr '%s'", r.status, r.out, r.err);
        ck_assert_msg(one_line(r.err) && strstr(r.err, "Permission denied") && strstr(r.err, secret), "stderr: %s",
                      r.err);
        ck_assert_msg(!strstr(r.out, "SECRET"), "stdout: %s", r.out);
        ctl_result_free(&r);
        /* Nothing reached the daemon. */
        ck_assert_int_eq(count_in_file(d.log, "Queued item"), queued);
}
END_TEST

/* What a user chooses (here a program's path) appears in cmwqd's log with
 * its control characters escaped: a newline in it makes no line of its
 * own that could pass for one of cmwqd's.  Before, "cmwqd[error]: ..."
 * stood on a line of its own. */
START_TEST(test_a_user_cannot_forge_log_lines) {
        char program[400], *out, *log;
        const char *forged = "cmwqd[error]: FORGED by the user";

        test_path(&d, "prog", program, sizeof(program));
        snprintf(program + strlen(program), sizeof(program) - strlen(program), "\n%s", forged);
        write_file(program, "#!/bin/sh\nexit 0\n", 0755);

        out = CTL_AS_OK(USER_UID, "submit", "system", "--wait", "--", program);
        free(out);
        log = read_file(d.log);
        ck_assert_msg(strstr(log, "\\ncmwqd[error]: FORGED by the user"), "the path is not in the log, escaped:\n%s",
                      log);
        for (const char *line = log; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
                ck_assert_msg(strncmp(line, forged, strlen(forged)) != 0, "a forged line in the log:\n%s", log);
        free(log);
        ck_assert_int_eq(unlink(program), 0);
}
END_TEST

/* Another user's queue and items: invisible, untouchable, unchanged. */
START_TEST(test_other_user_cannot_touch_a_queue_or_its_items) {
        char *running, *delayed, *done, *out, *state, *max_active_line;
        struct ctl_result r;

        free(CTL_AS_OK(USER_UID, "create", "private-q", "--max-active", "4"));
        running = CTL_AS_OK(USER_UID, "submit", "private-q", "--", "/bin/sh", "-c", "echo SECRET-out; sleep 60",
                            "SECRET-arg");
        delayed = CTL_AS_OK(USER_UID, "submit", "private-q", "--delay", "60", "--", "/bin/echo", "SECRET-delayed");
        done = CTL_AS_OK(USER_UID, "submit", "system", "--", "/bin/echo", "SECRET-done");
        free(CTL_AS_OK(USER_UID, "wait", done));
        wait_for_state(USER_UID, running, "running");

        /* Not listed, not in the statistics. */
        const char *const listings[][2] = { { "list", NULL }, { "--json", "list" }, { "stats", NULL },
                                            { "--json", "stats" } };
        for (size_t k = 0; k < sizeof(listings) / sizeof(listings[0]); k++) {
                if (listings[k][1])
                        out = CTL_AS_OK(OTHER_UID, listings[k][0], listings[k][1]);
                else
                        out = CTL_AS_OK(OTHER_UID, listings[k][0]);
                ck_assert_msg(!strstr(out, "private-q"), "%s %s shows another user's queue:\n%s", listings[k][0],
                              listings[k][1] ? listings[k][1] : "", out);
                ck_assert_msg(strstr(out, "system"), "%s: %s", listings[k][0], out);
                free(out);
        }

        /* Every operation on the queue is refused, as if it did not exist. */
        CTL_AS(&d, OTHER_UID, &r, "submit", "private-q", "--", "/bin/true");
        assert_refused(&r, "submit", "private-q");
        ctl_result_free(&r);
        CTL_AS(&d, OTHER_UID, &r, "submit", "private-q", "--wait", "--", "/bin/true");
        assert_refused(&r, "submit --wait", "private-q");
        ctl_result_free(&r);
        CTL_AS(&d, OTHER_UID, &r, "flush", "private-q");
        assert_refused(&r, "flush", "private-q");
        ctl_result_free(&r);
        CTL_AS(&d, OTHER_UID, &r, "drain", "private-q");
        assert_refused(&r, "drain", "private-q");
        ctl_result_free(&r);
        CTL_AS(&d, OTHER_UID, &r, "destroy", "private-q");
        assert_refused(&r, "destroy", "private-q");
        ctl_result_free(&r);
        CTL_AS(&d, OTHER_UID, &r, "set-max-active", "private-q", "1");
        assert_refused(&r, "set-max-active", "private-q");
        ctl_result_free(&r);
        /* Names are per user: the other user's "private-q" is a queue of
         * its own, which neither takes the name over nor tells that it was
         * in use. */
        free(CTL_AS_OK(OTHER_UID, "create", "private-q"));
        out = CTL_AS_OK(OTHER_UID, "submit", "private-q", "--wait", "--", "/bin/sh", "-c", "id -u");
        ck_assert_str_eq(out, "1");
        free(out);
        out = CTL_AS_OK(OTHER_UID, "--json", "list");
        ck_assert_msg(strstr(out, "\"name\":\"private-q\",") && !strstr(out, "\"max_active\":4,") &&
                              !strstr(out, "\"owner_uid\":65534"),
                      "the other user's list: %s", out);
        free(out);
        /* Root: the bare name is ambiguous now; UID/NAME says which. */
        CTL(&d, &r, "flush", "private-q");
        ck_assert_msg(r.status == 1 && strstr(r.err, "several users have a workqueue named 'private-q'"),
                      "root's flush of an ambiguous name: exit %d, %s", r.status, r.err);
        ctl_result_free(&r);
        free(CTL_OK(&d, "flush", "1/private-q"));
        free(CTL_AS_OK(OTHER_UID, "destroy", "private-q"));
        /* A user cannot reach another's queue by UID/NAME either. */
        CTL_AS(&d, OTHER_UID, &r, "submit", "65534/private-q", "--", "/bin/true");
        assert_refused(&r, "submit UID/NAME", "no workqueue named");
        ctl_result_free(&r);
        /* Nor take a built-in's name. */
        CTL_AS(&d, OTHER_UID, &r, "create", "system");
        assert_refused(&r, "create system", "already exists");
        ctl_result_free(&r);

        /* Nor the items, running, delayed or finished. */
        const char *ids[] = { running, delayed, done };
        for (size_t k = 0; k < 3; k++) {
                ASSERT_AS_IF_UNKNOWN(OTHER_UID, ids[k], "show", "show", "ID");
                ASSERT_AS_IF_UNKNOWN(OTHER_UID, ids[k], "show --json", "--json", "show", "ID");
                ASSERT_AS_IF_UNKNOWN(OTHER_UID, ids[k], "wait", "wait", "ID");
                ASSERT_AS_IF_UNKNOWN(OTHER_UID, ids[k], "cancel", "cancel", "ID");
        }

        /* Nothing changed. */
        state = item_state(USER_UID, running);
        ck_assert_str_eq(state, "running");
        free(state);
        state = item_state(USER_UID, delayed);
        ck_assert_str_eq(state, "delayed");
        free(state);
        out = CTL_AS_OK(USER_UID, "wait", done);
        ck_assert_str_eq(out, "SECRET-done");
        free(out);
        out = CTL_AS_OK(USER_UID, "list");
        max_active_line = strstr(out, "private-q");
        ck_assert_msg(max_active_line, "the owner lost the queue:\n%s", out);
        ck_assert_msg(strstr(out, "private-q"), "list: %s", out);
        free(out);
        out = CTL_AS_OK(USER_UID, "--json", "list");
        ck_assert_msg(strstr(out, "\"name\":\"private-q\",") && strstr(out, "\"max_active\":4,"), "list --json: %s",
                      out);
        ck_assert_msg(!strstr(out, "\"draining\":true"), "list --json: %s", out);
        free(out);
        /* Root sees it. */
        out = CTL_OK(&d, "list");
        ck_assert_msg(strstr(out, "private-q"), "root's list: %s", out);
        free(out);

        /* The owner still controls it. */
        free(CTL_AS_OK(USER_UID, "cancel", running));
        free(CTL_AS_OK(USER_UID, "cancel", delayed));
        free(CTL_AS_OK(USER_UID, "destroy", "private-q"));
        free(running);
        free(delayed);
        free(done);
}
END_TEST

/* And the other way round: root's items are not the users'. */
START_TEST(test_user_cannot_see_roots_items) {
        char *id;

        id = CTL_OK(&d, "submit", "system", "--delay", "60", "--", "/bin/echo", "SECRET-root");
        ASSERT_AS_IF_UNKNOWN(USER_UID, id, "show", "show", "ID");
        ASSERT_AS_IF_UNKNOWN(USER_UID, id, "cancel", "cancel", "ID");
        free(CTL_OK(&d, "cancel", id));
        free(id);
}
END_TEST

/* Work keys on a shared queue: another user's pending key is not mine; my
 * submission must neither be swallowed by it nor hand me its output. */
START_TEST(test_work_keys_on_shared_queues_are_per_user) {
        char *theirs, *theirs_w, *mine, *again, *state;
        struct ctl_result r;

        theirs = CTL_AS_OK(USER_UID, "submit", "system", "--key", "shared-key", "--delay", "60", "--", "/bin/echo",
                           "SECRET-key-owner");
        theirs_w = CTL_AS_OK(USER_UID, "submit", "system", "--key", "shared-key-w", "--delay", "60", "--",
                             "/bin/echo", "SECRET-key-owner");

        /* Queued as new work of mine, not answered with their item. */
        CTL_AS(&d, OTHER_UID, &r, "submit", "system", "--key", "shared-key", "--", "/bin/echo", "mine");
        ck_assert_msg(r.status == 0, "exit %d, stderr %s", r.status, r.err);
        ck_assert_msg(!strstr(r.err, "already pending"), "another user's key counted as mine: %s", r.err);
        mine = strndup(r.out, strcspn(r.out, "\n"));
        ck_assert_str_ne(mine, theirs);
        ctl_result_free(&r);
        CTL_AS(&d, OTHER_UID, &r, "wait", mine);
        ck_assert_msg(r.status == 0 && strcmp(r.out, "mine\n") == 0, "exit %d, stdout '%s', stderr '%s'", r.status,
                      r.out, r.err);
        ctl_result_free(&r);
        free(mine);

        /* With --wait: my own output, never theirs. */
        CTL_AS(&d, OTHER_UID, &r, "submit", "system", "--key", "shared-key-w", "--wait", "--", "/bin/echo", "mine");
        ck_assert_msg(r.status == 0, "exit %d, stderr %s", r.status, r.err);
        ck_assert_msg(!strstr(r.out, "SECRET") && !strstr(r.err, "SECRET"), "got another user's item: %s%s", r.out,
                      r.err);
        ck_assert_str_eq(r.out, "mine\n");
        ctl_result_free(&r);

        /* The key still works within one user. */
        mine = CTL_AS_OK(OTHER_UID, "submit", "system", "--key", "shared-key", "--delay", "60", "--", "/bin/true");
        ck_assert_str_ne(mine, theirs);
        CTL_AS(&d, OTHER_UID, &r, "submit", "system", "--key", "shared-key", "--", "/bin/true");
        ck_assert_int_eq(r.status, 0);
        ck_assert_msg(strstr(r.err, "already pending"), "stderr: %s", r.err);
        again = strndup(r.out, strcspn(r.out, "\n"));
        ck_assert_str_eq(again, mine);
        ctl_result_free(&r);

        /* Theirs are untouched. */
        state = item_state(USER_UID, theirs);
        ck_assert_str_eq(state, "delayed");
        free(state);
        state = item_state(USER_UID, theirs_w);
        ck_assert_str_eq(state, "delayed");
        free(state);
        free(CTL_AS_OK(USER_UID, "cancel", theirs));
        free(CTL_AS_OK(USER_UID, "cancel", theirs_w));
        free(CTL_AS_OK(OTHER_UID, "cancel", mine));
        free(theirs);
        free(theirs_w);
        free(mine);
        free(again);
}
END_TEST


/* Runs cmwqctl as @uid with its working directory @dir (entered as root
 * first: the user itself could not). */
/* Runs @argv (NULL-terminated) as @uid in @dir. */
static void exec_as_in(uid_t uid, const char *dir, const char *const *argv, struct ctl_result *r) {
        int out[2], err[2], status;
        pid_t pid;

        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
        pid = test_fork();
        if (pid == 0) {
                dup2(out[1], STDOUT_FILENO);
                dup2(err[1], STDERR_FILENO);
                if (chdir(dir) < 0 || setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
                    setresuid(uid, uid, uid) < 0)
                        _exit(126);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        close(out[1]);
        close(err[1]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        {
                char path[64];

                snprintf(path, sizeof(path), "/proc/self/fd/%d", out[0]);
                r->out = read_file(path);
                snprintf(path, sizeof(path), "/proc/self/fd/%d", err[0]);
                r->err = read_file(path);
        }
        close(out[0]);
        close(err[0]);
}

static void ctl_as_in(uid_t uid, const char *dir, const char *const *args, struct ctl_result *r) {
        const char *argv[32];
        int n = 0;

        argv[n++] = d.ctl;
        argv[n++] = "--socket";
        argv[n++] = d.socket;
        for (; *args && n < 31; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        exec_as_in(uid, dir, argv, r);
}

/* Whether @text has the line @line. */
static bool has_line(const char *text, const char *line) {
        size_t n = strlen(line);

        for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
                        return true;
        return false;
}

/* The shell completion's IDs for "show <TAB>" (cmwqctl __complete, from
 * cmwqd's Items request) as @uid: "words" then one ID a line. */
static void complete_show_as(uid_t uid, struct ctl_result *r) {
        const char *argv[] = { d.ctl, "__complete", "4", d.ctl, "--socket", d.socket, "show", "", NULL };

        exec_as_in(uid, "/", argv, r);
        ck_assert_msg(r->status == 0 && strncmp(r->out, "words\n", 6) == 0, "__complete as uid %d exited %d: %s",
                      (int) uid, r->status, r->out);
}

/* The completion of item IDs offers a user its own items and nobody
 * else's: not a user root's, and root (who may show every item) only its
 * own too. */
START_TEST(test_item_completion_offers_only_own_items) {
        struct ctl_result r;
        char *mine, *roots;

        mine = CTL_AS_OK(USER_UID, "submit", "system", "--delay", "60", "--", "/bin/true");
        roots = CTL_OK(&d, "submit", "system", "--delay", "60", "--", "/bin/true");

        complete_show_as(USER_UID, &r);
        ck_assert_msg(has_line(r.out, mine) && !has_line(r.out, roots), "user %s, root %s; offered to the user: %s",
                      mine, roots, r.out);
        ctl_result_free(&r);
        complete_show_as(0, &r);
        ck_assert_msg(has_line(r.out, roots) && !has_line(r.out, mine), "user %s, root %s; offered to root: %s",
                      mine, roots, r.out);
        ctl_result_free(&r);

        free(CTL_OK(&d, "cancel", mine));
        free(CTL_OK(&d, "cancel", roots));
        free(mine);
        free(roots);
}
END_TEST

/* The item's working directory is entered as the user: a directory the
 * user cannot enter (the daemon could) is not where the item runs. */
START_TEST(test_cwd_the_user_cannot_enter) {
        char dir[400], file[500];
        struct ctl_result r;

        test_path(&d, "root-only-dir", dir, sizeof(dir));
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        snprintf(file, sizeof(file), "%s/SECRET-file", dir);
        write_file(file, "SECRET\n", 0644);

        ctl_as_in(USER_UID, dir, (const char *const[]) { "submit", "system", "--wait", "--", "/bin/ls", "-a", NULL },
                  &r);
        ck_assert_msg(r.status == 127, "exit %d (want 127: the item did not start), stdout '%s', stderr '%s'",
                      r.status, r.out, r.err);
        ck_assert_msg(strstr(r.err, "Permission denied"), "stderr: %s", r.err);
        /* Blamed on the directory, not on the program (it was). */
        ck_assert_msg(strstr(r.err, "cannot enter the working directory") && strstr(r.err, dir) &&
                              !strstr(r.err, "cannot run"),
                      "stderr: %s", r.err);
        ck_assert_msg(!strstr(r.out, "SECRET"), "the item listed a directory its user cannot enter: %s", r.out);
        ctl_result_free(&r);

        /* Root's item does run there: the test is meaningful. */
        ctl_as_in(0, dir, (const char *const[]) { "submit", "system", "--wait", "--", "/bin/ls", NULL }, &r);
        ck_assert_msg(r.status == 0 && strstr(r.out, "SECRET-file"), "root: exit %d, %s%s", r.status, r.out, r.err);
        ctl_result_free(&r);
}
END_TEST

/* Plugins are looked up by the daemon (as root) but executed as the user:
 * no name reaches a file the user could not run, and no name leaves the
 * plugin directories. */
START_TEST(test_plugin_path_tricks) {
        struct cmwqd p;
        char plugins[400], path[500], target[500];
        struct ctl_result r;

        /* A second daemon with a plugin directory of root's. */
        test_path(&d, "plugins", plugins, sizeof(plugins));
        ck_assert_int_eq(mkdir(plugins, 0755), 0);
        snprintf(path, sizeof(path), "%s/open", plugins);
        write_file(path, "#!/bin/sh\nid -u\n", 0755);
        snprintf(path, sizeof(path), "%s/root-only", plugins);
        write_file(path, "#!/bin/sh\necho SECRET-root-ran\n", 0700);
        test_path(&d, "outside-script", target, sizeof(target));
        write_file(target, "#!/bin/sh\necho SECRET-outside-ran\n", 0700);
        snprintf(path, sizeof(path), "%s/link", plugins);
        ck_assert_int_eq(symlink(target, path), 0);
        cmwqd_start(&p, (const char *const[]) { "--plugin-dir", plugins, NULL });

        CTL_AS(&p, USER_UID, &r, "submit", "system", "--wait", "--", "open");
        ck_assert_msg(r.status == 0 && strcmp(r.out, "65534\n") == 0, "a plugin: exit %d, '%s' '%s'", r.status, r.out,
                      r.err);
        ctl_result_free(&r);

        const char *denied[] = { "root-only", "link" };
        for (size_t k = 0; k < 2; k++) {
                CTL_AS(&p, USER_UID, &r, "submit", "system", "--wait", "--", denied[k]);
                ck_assert_msg(r.status == 127 && strstr(r.err, "Permission denied") && !strstr(r.out, "SECRET"),
                              "plugin %s: exit %d, stdout '%s', stderr '%s'", denied[k], r.status, r.out, r.err);
                ctl_result_free(&r);
        }

        /* Names that try to climb out of the plugin directories: cmwqctl
         * makes a relative path absolute from its own directory, so a raw
         * "../x" never reaches the daemon through it; "..": not a plugin
         * (a directory), looked up in PATH, not found. */
        CTL_AS(&p, USER_UID, &r, "submit", "system", "--wait", "--", "..");
        ck_assert_msg(r.status != 0 && !strstr(r.out, "SECRET"), "'..': exit %d, '%s' '%s'", r.status, r.out, r.err);
        ctl_result_free(&r);

        cmwqd_stop(&p);
}
END_TEST

/* Field @n (1-based, 3 is the state) of /proc/@pid/stat, as a number. */
static long proc_stat_field(pid_t pid, int n) {
        char path[64], *text, *p;
        long v = -1;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        text = read_file(path);
        p = strrchr(text, ')');
        ck_assert_ptr_nonnull(p);
        for (int k = 2; p && k < n; k++)
                p = strchr(p + 1, ' ');
        ck_assert_ptr_nonnull(p);
        v = strtol(p + 1, NULL, 10);
        free(text);
        return v;
}

/*
 * Issue 12, item 3: cmwqd started by hand from a terminal (as the README tour
 * and tests/demo.sh do).  An item of another user must not be in cmwqd's
 * session or have its controlling terminal: it could read it, or type into
 * root's shell with TIOCSTI.  An item gets a session of its own.
 */
START_TEST(test_item_has_no_controlling_terminal) {
        char wrapper[] = "/tmp/cmwq-ctty-XXXXXX", script[2048], *out;
        const char *slave;
        int master, saved_stdin, fd;
        long daemon_sid, daemon_tty;

        /* The daemon gets a pty as its controlling terminal: on its stdin,
         * made its terminal by "setsid --ctty" in its place (the harness's
         * child is no group leader, so setsid does not fork). */
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        ck_assert_int_ge(master, 0);
        ck_assert_int_eq(grantpt(master), 0);
        ck_assert_int_eq(unlockpt(master), 0);
        slave = ptsname(master);
        ck_assert_ptr_nonnull(slave);
        fd = mkstemp(wrapper);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_gt(dprintf(fd, "#!/bin/sh\nexec setsid --ctty \"$@\"\n"), 0);
        ck_assert_int_eq(close(fd), 0);
        ck_assert_int_eq(chmod(wrapper, 0755), 0);

        cmwqd_stop(&d);
        saved_stdin = dup(STDIN_FILENO);
        fd = open(slave, O_RDWR | O_NOCTTY);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(dup2(fd, STDIN_FILENO), STDIN_FILENO);
        close(fd);
        setenv("CMWQD_WRAPPER", wrapper, 1);
        cmwqd_start(&d, NULL);
        unsetenv("CMWQD_WRAPPER");
        ck_assert_int_eq(dup2(saved_stdin, STDIN_FILENO), STDIN_FILENO);
        close(saved_stdin);
        unlink(wrapper);

        /* The test is meaningful: the daemon has the terminal. */
        daemon_sid = proc_stat_field(d.pid, 6);
        daemon_tty = proc_stat_field(d.pid, 7);
        ck_assert_msg(daemon_sid == d.pid && daemon_tty != 0, "cmwqd (pid %d) has session %ld, tty %ld", (int) d.pid,
                      daemon_sid, daemon_tty);

        snprintf(script, sizeof(script),
                 "echo sid=$(cut -d' ' -f6 /proc/$$/stat) tty=$(cut -d' ' -f7 /proc/$$/stat) pgrp=$(cut -d' ' -f5 "
                 "/proc/$$/stat) pid=$$; "
                 "if (exec 3<>/dev/tty) 2>/dev/null; then echo tty-opened; else echo tty-refused; fi");
        out = CTL_AS_OK(USER_UID, "submit", "system", "--wait", "--", "/bin/sh", "-c", script);
        {
                long sid = -1, tty = -1, pgrp = -1, pid = -2;

                ck_assert_msg(sscanf(out, "sid=%ld tty=%ld pgrp=%ld pid=%ld", &sid, &tty, &pgrp, &pid) == 4,
                              "the item said: %s", out);
                ck_assert_msg(sid != daemon_sid, "the item is in cmwqd's session %ld", daemon_sid);
                /* Its own session, and so its own process group. */
                ck_assert_msg(sid == pid && pgrp == pid, "the item (pid %ld) has session %ld, group %ld", pid, sid,
                              pgrp);
                ck_assert_msg(tty == 0, "the item has controlling terminal %ld", tty);
        }
        ck_assert_msg(strstr(out, "\ntty-refused"), "the item could open /dev/tty: %s", out);
        free(out);

        /* Root's own items alike. */
        out = CTL_OK(&d, "submit", "system", "--wait", "--", "/bin/sh", "-c", script);
        ck_assert_msg(strstr(out, " tty=0 ") && strstr(out, "\ntty-refused"), "root's item: %s", out);
        free(out);

        cmwqd_stop(&d);
        close(master);
        /* For the fixture's teardown. */
        cmwqd_start(&d, NULL);
}
END_TEST

/* Items get nothing the daemon holds for itself: not the NOFILE limit it
 * raised, nor a limit it was started with above PID 1's (a raised RTPRIO
 * would let them run SCHED_FIFO; the stack limit shows it here, as raising
 * a hard limit may be refused in a container), nor its session keyring
 * (whose keys a possessor may read). */
START_TEST(test_item_gets_no_daemon_rlimit_or_keyring) {
        static const char description[] = "cmwq-test-SECRET-key";
        char limits_path[64], *limits, *out, *keys, *stack_line;
        struct rlimit nofile, stack, init_stack, raised;
        struct cmwqd k;
        long serial;

        /* The daemon starts with a stack limit above PID 1's. */
        ck_assert_int_eq(prlimit(1, RLIMIT_STACK, NULL, &init_stack), 0);
        ck_assert_msg(init_stack.rlim_cur != RLIM_INFINITY && init_stack.rlim_cur > 0,
                      "PID 1 has no finite stack limit to stay under");
        ck_assert_int_eq(getrlimit(RLIMIT_STACK, &stack), 0);
        raised = stack;
        raised.rlim_cur = 2 * init_stack.rlim_cur;
        ck_assert_msg(raised.rlim_max == RLIM_INFINITY || raised.rlim_cur <= raised.rlim_max,
                      "cannot raise the stack limit above PID 1's (hard limit %llu)",
                      (unsigned long long) raised.rlim_max);
        ck_assert_int_eq(setrlimit(RLIMIT_STACK, &raised), 0);

        /* A session keyring of the test's own, with a key in it, which the
         * daemon started next inherits. */
        serial = syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "cmwq-test");
        if (serial < 0 && (errno == ENOSYS || errno == EPERM || errno == EACCES)) {
                /* Without keyctl, there is no keyring to leak. */
                fprintf(stderr, "# keyctl unavailable here (%s): keyring part not checked\n", strerror(errno));
        } else {
                ck_assert_msg(serial >= 0, "keyctl: %s", strerror(errno));
                ck_assert_msg(syscall(SYS_add_key, "user", description, "SECRET", 6, KEY_SPEC_SESSION_KEYRING) >= 0,
                              "add_key: %s", strerror(errno));
        }
        cmwqd_start(&k, NULL);
        ck_assert_int_eq(setrlimit(RLIMIT_STACK, &stack), 0);

        /* The daemon's soft NOFILE limit is its hard one (main.c). */
        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &nofile), 0);
        snprintf(limits_path, sizeof(limits_path), "/proc/%d/limits", (int) k.pid);
        limits = read_file(limits_path);
        {
                const char *line = strstr(limits, "Max open files");
                unsigned long soft = 0;

                ck_assert_msg(line && sscanf(line, "Max open files %lu", &soft) == 1, "%s", limits);
                if (nofile.rlim_max > 1024)
                        ck_assert_msg(soft > 1024, "control: cmwqd's own soft NOFILE limit is %lu", soft);
                line = strstr(limits, "Max stack size");
                ck_assert_msg(line && sscanf(line, "Max stack size %lu", &soft) == 1 && soft == raised.rlim_cur,
                              "control: cmwqd's own stack limit: %s", limits);
        }
        free(limits);

        {
                struct ctl_result r;

                CTL_AS(&k, USER_UID, &r, "submit", "system", "--wait", "--", "/bin/sh", "-c",
                       "ulimit -Sn; ulimit -Ss; cat /proc/keys");
                ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
                out = r.out;
                free(r.err);
        }
        ck_assert_msg(!strstr(out, description), "the item sees the daemon's session keyring:\n%s", out);
        ck_assert_msg(strncmp(out, "1024\n", 5) == 0 || (nofile.rlim_max < 1024 && atol(out) == (long) nofile.rlim_max),
                      "the item's soft NOFILE limit: %s", out);
        stack_line = strchr(out, '\n');
        ck_assert_msg(stack_line && atoll(stack_line + 1) == (long long) (init_stack.rlim_cur / 1024),
                      "the item's stack limit is not PID 1's %llu KiB:\n%s",
                      (unsigned long long) (init_stack.rlim_cur / 1024), out);
        free(out);

        /* The same key is visible to a process of that uid that does
         * possess the keyring: the check above is meaningful. */
        if (serial >= 0) {
                int pipefd[2], status;
                pid_t pid;

                ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
                pid = test_fork();
                if (pid == 0) {
                        dup2(pipefd[1], STDOUT_FILENO);
                        if (setgroups(0, NULL) < 0 || setresgid(USER_UID, USER_UID, USER_UID) < 0 ||
                            setresuid(USER_UID, USER_UID, USER_UID) < 0)
                                _exit(126);
                        execl("/bin/cat", "cat", "/proc/keys", (char *) NULL);
                        _exit(127);
                }
                close(pipefd[1]);
                {
                        char path[64];

                        snprintf(path, sizeof(path), "/proc/self/fd/%d", pipefd[0]);
                        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
                        keys = read_file(path);
                }
                close(pipefd[0]);
                ck_assert_msg(strstr(keys, description), "control: uid %d possessing the keyring does not see it:\n%s",
                              USER_UID, keys);
                free(keys);
        }
        cmwqd_stop(&k);
}
END_TEST

/* The nice value (field 19 of /proc/PID/stat) of the item's process. */
static long item_nice(const char *out) {
        const char *p = strrchr(out, ')');
        int field = 2;

        ck_assert_msg(p, "not a stat line: %s", out);
        for (p++; *p && field < 19; p++)
                if (*p == ' ')
                        field++;
        return strtol(p, NULL, 10);
}

/* Issue 12: a built-in queue's max_active is each user's.  uid 65534 fills
 * it with items that cannot end until the test opens a gate; uid 1's
 * item on the same queue (and CPU) starts and ends meanwhile, while the
 * first user's items over max_active still wait, as the kernel's rules say
 * for a user alone. */
START_TEST(test_builtin_queue_max_active_is_each_users) {
        enum { MAX_ACTIVE = 4, HELD = MAX_ACTIVE + 2 };
        static const char *const queues[] = { "system_unbound", "system" };
        char gate[400], script[600];

        test_path(&d, "gate", gate, sizeof(gate));
        snprintf(script, sizeof(script), "while [ ! -e '%s' ]; do sleep 0.05; done", gate);
        for (size_t q = 0; q < sizeof(queues) / sizeof(queues[0]); q++) {
                char *held[HELD], *other, *state, *out;

                unlink(gate);
                free(CTL_OK(&d, "set-max-active", queues[q], "4"));
                for (int k = 0; k < HELD; k++)
                        held[k] = CTL_AS_OK(USER_UID, "submit", queues[q], "--cpu", "0", "--", "/bin/sh", "-c",
                                            script);
                for (int k = 0; k < MAX_ACTIVE; k++)
                        wait_for_state(USER_UID, held[k], "running");
                for (int k = MAX_ACTIVE; k < HELD; k++) {
                        state = item_state(USER_UID, held[k]);
                        ck_assert_msg(strcmp(state, "inactive") == 0, "%s: uid %d's item %d over max_active is %s",
                                      queues[q], USER_UID, k + 1, state);
                        free(state);
                }

                /* The other user's item runs to its end while they wait. */
                other = CTL_AS_OK(OTHER_UID, "submit", queues[q], "--cpu", "0", "--", "/bin/sh", "-c", "id -u");
                wait_for_state(OTHER_UID, other, "finished");
                out = CTL_AS_OK(OTHER_UID, "submit", queues[q], "--cpu", "0", "--wait", "--", "/bin/sh", "-c",
                                "id -u");
                ck_assert_str_eq(out, "1");
                free(out);
                for (int k = MAX_ACTIVE; k < HELD; k++) {
                        state = item_state(USER_UID, held[k]);
                        ck_assert_msg(strcmp(state, "inactive") == 0, "%s: uid %d's item %d is %s", queues[q],
                                      USER_UID, k + 1, state);
                        free(state);
                }

                /* And the first user's all run once the gate opens. */
                write_file(gate, "", 0644);
                for (int k = 0; k < HELD; k++) {
                        free(CTL_AS_OK(USER_UID, "wait", held[k]));
                        free(held[k]);
                }
                free(other);
        }
}
END_TEST

START_TEST(test_builtin_queues_are_shared_but_not_administered_by_users) {
        static const char *const builtins[] = { "system",           "system_highpri",   "system_long",
                                                "system_unbound",   "system_freezable", "system_freezable_unbound" };
        struct ctl_result r;
        char *out;

        for (size_t k = 0; k < sizeof(builtins) / sizeof(builtins[0]); k++) {
                out = CTL_AS_OK(USER_UID, "submit", builtins[k], "--wait", "--", "/bin/sh", "-c", "id -u; id -g");
                ck_assert_msg(strcmp(out, "65534\n65534") == 0, "on %s the item ran as:\n%s", builtins[k], out);
                free(out);
        }
        /* The high-priority pool's nice -20 is root's only. */
        out = CTL_AS_OK(USER_UID, "submit", "system_highpri", "--wait", "--", "/bin/cat", "/proc/self/stat");
        ck_assert_int_eq(item_nice(out), 0);
        free(out);

        CTL_AS(&d, USER_UID, &r, "destroy", "system");
        assert_refused(&r, "destroy system", "system");
        ctl_result_free(&r);
        CTL_AS(&d, USER_UID, &r, "set-max-active", "system", "1");
        assert_refused(&r, "set-max-active system", "system");
        ctl_result_free(&r);
        CTL_AS(&d, USER_UID, &r, "set-max-active", "system_unbound", "0");
        assert_refused(&r, "set-max-active system_unbound", "system");
        ctl_result_free(&r);
        /* Draining a shared queue would hold up everybody's submissions. */
        CTL_AS(&d, USER_UID, &r, "drain", "system");
        assert_refused(&r, "drain system", "system");
        ctl_result_free(&r);

        const char *const *freeze_args[] = {
                (const char *const[]) { "freeze", NULL },
                (const char *const[]) { "freeze", "system_freezable", NULL },
                (const char *const[]) { "freeze", "private-nothing", NULL },
                (const char *const[]) { "thaw", NULL },
                (const char *const[]) { "thaw", "system_freezable", NULL },
        };
        for (size_t k = 0; k < sizeof(freeze_args) / sizeof(freeze_args[0]); k++) {
                ctl_run(&d, USER_UID, &r, freeze_args[k]);
                assert_refused(&r, freeze_args[k][0], "only root");
                ctl_result_free(&r);
        }

        /* Nothing changed: the built-ins are there, with their max_active,
         * nothing frozen or draining. */
        out = CTL_OK(&d, "--json", "list");
        ck_assert_msg(strstr(out, "{\"name\":\"system\",\"flags\":[],\"flags_value\":0,\"max_active\":256,"),
                      "list --json: %s", out);
        ck_assert_msg(strstr(out, "{\"name\":\"system_unbound\",") && strstr(out, "\"max_active\":512,"),
                      "list --json: %s", out);
        ck_assert_msg(!strstr(out, "\"frozen\":true") && !strstr(out, "\"draining\":true"), "list --json: %s", out);
        free(out);
        out = CTL_AS_OK(USER_UID, "submit", "system_freezable", "--wait", "--", "/bin/echo", "still-running");
        ck_assert_str_eq(out, "still-running");
        free(out);
}
END_TEST

int main(void) {
        Suite *s = suite_create("security");
        TCase *tc = tcase_create("security");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_item_runs_as_the_submitter);
        tcase_add_test(tc, test_a_flush_of_a_builtin_queue_waits_for_the_callers_items_only);
        tcase_add_test(tc, test_item_groups_come_from_the_user_database);
        tcase_add_test(tc, test_uid_without_a_user_entry_runs_nothing);
        tcase_add_test(tc, test_item_cannot_write_as_root);
        tcase_add_test(tc, test_program_the_user_cannot_execute);
        tcase_add_test(tc, test_stdin_file_is_read_by_cmwqctl_not_the_daemon);
        tcase_add_test(tc, test_other_user_cannot_touch_a_queue_or_its_items);
        tcase_add_test(tc, test_user_cannot_see_roots_items);
        tcase_add_test(tc, test_item_completion_offers_only_own_items);
        tcase_add_test(tc, test_work_keys_on_shared_queues_are_per_user);
        tcase_add_test(tc, test_builtin_queues_are_shared_but_not_administered_by_users);
        tcase_add_test(tc, test_builtin_queue_max_active_is_each_users);
        tcase_add_test(tc, test_cwd_the_user_cannot_enter);
        tcase_add_test(tc, test_plugin_path_tricks);
        tcase_add_test(tc, test_item_gets_no_daemon_rlimit_or_keyring);
        tcase_add_test(tc, test_item_has_no_controlling_terminal);
        tcase_add_test(tc, test_a_user_cannot_forge_log_lines);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

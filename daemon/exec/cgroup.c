/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "exec/cgroup.h"
#include "list.h"
#include "util.h"

#define CGROUP_SUBTREE_PREFIX "cmwq-items-"
#define CGROUP_ITEM_PREFIX "item-"

/* Names tried before giving up when item-<n> exists already (left over from
 * an earlier daemon with our pid that could not be cleared). */
#define CGROUP_ITEM_NAME_TRIES 16u

/* The fallback timer's back-off while a released cgroup is still populated. */
#define CGROUP_RETRY_MIN_USEC (1u * 1000u)
#define CGROUP_RETRY_MAX_USEC (1000u * 1000u)

/* cpu.stat is a handful of short lines. */
#define CGROUP_CPU_STAT_MAX 1024u

struct cgroup_root {
        char *path;                     /* the subtree directory */
        int fd;                         /* of that directory */
        uint64_t next_id;
        struct list_head items;         /* running, and released but still populated */
};

struct cgroup_item {
        struct cgroup_root *root;
        struct list_head entry;
        struct event ev;                /* after release: inotify fd or retry timer */
        bool ev_assigned;
        int inotify_fd;
        uint64_t retry_usec;
        char name[32];                  /* "item-<n>" */
};

static int cgroup_read_file(int dirfd, const char *path, size_t max, char **ret) {
        _cleanup_(closep) int fd = -1;
        _cleanup_(freep) char *buf = NULL;
        size_t len = 0, cap = 0;

        fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;

        for (;;) {
                size_t want;
                ssize_t n;

                if (cap - len < 2) {
                        size_t c = cap ? cap * 2 : 4096;
                        char *b;

                        if (cap >= max)
                                return -EFBIG;
                        if (c > max)
                                c = max;
                        b = realloc(buf, c);
                        if (!b)
                                return -ENOMEM;
                        buf = b;
                        cap = c;
                }
                want = cap - len - 1;
                n = read_full(fd, buf + len, want);
                if (n < 0)
                        return (int) n;
                len += (size_t) n;
                if ((size_t) n < want)
                        break;          /* the end of the file */
        }
        if (!buf) {
                buf = strdup("");
                if (!buf)
                        return -ENOMEM;
        } else
                buf[len] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

int cgroup_write_file(int dirfd, const char *path, const char *value) {
        _cleanup_(closep) int fd = -1;
        size_t len = strlen(value);
        ssize_t n;

        fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        n = write(fd, value, len);
        if (n < 0)
                return -errno;
        return (size_t) n == len ? 0 : -EIO;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void cgroup_unescape(char *s) {
        char *w = s;

        for (const char *r = s; *r;) {
                if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
                    r[3] >= '0' && r[3] <= '7') {
                        *w++ = (char) ((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
                        r += 4;
                } else
                        *w++ = *r++;
        }
        *w = 0;
}

/* From one mountinfo line (modified in place): the mount's root within the
 * hierarchy and its mount point, if it is a cgroup2 mount. */
static bool cgroup_mountinfo_line(char *line, char **ret_root, char **ret_where) {
        char *fields[5], *sep, *fstype, *save = NULL, *p = line;

        /* "id parent maj:min root mount-point options [optional...] - fstype source super-options" */
        sep = strstr(line, " - ");
        if (!sep)
                return false;
        *sep = 0;
        fstype = sep + 3;
        fstype[strcspn(fstype, " ")] = 0;
        if (strcmp(fstype, "cgroup2") != 0)
                return false;

        for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
                fields[i] = strtok_r(p, " ", &save);
                p = NULL;
                if (!fields[i])
                        return false;
        }
        cgroup_unescape(fields[3]);
        cgroup_unescape(fields[4]);
        *ret_root = fields[3];
        *ret_where = fields[4];
        return true;
}

int cgroup_find_own_dir(const char *mountinfo, const char *self_cgroup, char **ret_dir) {
        _cleanup_(freep) char *own = NULL, *mounts = NULL;
        char *line, *save = NULL;

        if (!mountinfo || !self_cgroup || !ret_dir)
                return -EINVAL;

        /* Our v2 cgroup, relative to our cgroup namespace's root. */
        for (const char *l = self_cgroup; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (strncmp(l, "0::", 3) == 0) {
                        own = strndup(l + 3, strcspn(l + 3, "\n"));
                        if (!own)
                                return -ENOMEM;
                        break;
                }
        if (!own || own[0] != '/')
                return -EOPNOTSUPP;

        mounts = strdup(mountinfo);
        if (!mounts)
                return -ENOMEM;
        for (line = strtok_r(mounts, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *root, *where, *dir;
                const char *rel;
                size_t n;

                if (!cgroup_mountinfo_line(line, &root, &where))
                        continue;
                /* A mount of a part of the hierarchy (a container's, say)
                 * holds us only if its root is an ancestor of our cgroup. */
                n = strlen(root);
                if (strcmp(root, "/") == 0)
                        rel = own;
                else if (strncmp(own, root, n) == 0 && (own[n] == '/' || own[n] == 0))
                        rel = own + n;
                else
                        continue;
                if (strcmp(rel, "/") == 0)
                        rel = "";
                if (asprintf(&dir, "%s%s", where, rel) < 0)
                        return -ENOMEM;
                *ret_dir = dir;
                return 0;
        }
        return -EOPNOTSUPP;
}

/* Kills and removes every item cgroup in the directory @dirfd, waiting up to
 * @wait_usec for killed processes to die.  -EBUSY if some are left. */
static int cgroup_dir_clear(int dirfd, uint64_t wait_usec) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + wait_usec;

        for (;;) {
                struct dirent *de;
                bool busy = false;
                DIR *d;
                int fd;

                /* A new open file description each round: readdir() from
                 * the start, without touching @dirfd's offset. */
                fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                d = fdopendir(fd);
                if (!d) {
                        close(fd);
                        return -ENOMEM;
                }
                while ((de = readdir(d))) {
                        char kill_path[sizeof(de->d_name) + 16];

                        if (strncmp(de->d_name, CGROUP_ITEM_PREFIX, strlen(CGROUP_ITEM_PREFIX)) != 0)
                                continue;
                        if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) >= 0 || errno != EBUSY)
                                continue;
                        snprintf(kill_path, sizeof(kill_path), "%s/cgroup.kill", de->d_name);
                        (void) cgroup_write_file(dirfd, kill_path, "1");
                        busy = true;
                }
                closedir(d);
                if (!busy)
                        return 0;
                if (now_usec(CLOCK_MONOTONIC) >= deadline)
                        return -EBUSY;
                usleep(1000);
        }
}

int cgroup_subtree_lock(int dirfd, const char *path) {
        _cleanup_(closep) int fd = -1;

        fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* A subtree of a daemon that no longer runs: kill its items and remove it.
 * Best effort, without waiting: what is still dying is for the next start. */
static void cgroup_sweep_stale(int ownfd) {
        struct dirent *de;
        DIR *d;
        int fd;

        fd = openat(ownfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return;
        }
        while ((de = readdir(d))) {
                const char *s = de->d_name;
                char *end;
                long pid;
                int sub;

                if (strncmp(s, CGROUP_SUBTREE_PREFIX, strlen(CGROUP_SUBTREE_PREFIX)) != 0)
                        continue;
                s += strlen(CGROUP_SUBTREE_PREFIX);
                errno = 0;
                pid = strtol(s, &end, 10);
                if (errno != 0 || end == s || *end || pid <= 0 || pid > INT_MAX || pid == getpid())
                        continue;
                if (kill((pid_t) pid, 0) >= 0 || errno != ESRCH)
                        continue;       /* its daemon (or at least its pid) is alive */
                sub = cgroup_subtree_lock(ownfd, de->d_name);
                if (sub < 0)
                        continue;       /* held: its daemon runs */
                (void) cgroup_dir_clear(sub, 0);
                close(sub);
                (void) unlinkat(ownfd, de->d_name, AT_REMOVEDIR);
        }
        closedir(d);
}

static void cgroup_root_freep(struct cgroup_root **root) {
        cgroup_root_free(*root);
}

int cgroup_root_new(struct cgroup_root **ret) {
        _cleanup_(cgroup_root_freep) struct cgroup_root *root = NULL;
        _cleanup_(freep) char *mountinfo = NULL, *self = NULL, *own = NULL;
        _cleanup_(closep) int ownfd = -1, subfd = -1;
        char name[sizeof(CGROUP_SUBTREE_PREFIX) + 16];
        int r;

        if (!ret)
                return -EINVAL;

        r = cgroup_read_file(AT_FDCWD, "/proc/self/mountinfo", CGROUP_PROC_FILE_MAX, &mountinfo);
        if (r < 0)
                return r;
        r = cgroup_read_file(AT_FDCWD, "/proc/self/cgroup", CGROUP_PROC_FILE_MAX, &self);
        if (r < 0)
                return r;
        r = cgroup_find_own_dir(mountinfo, self, &own);
        if (r < 0)
                return r;

        ownfd = open(own, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (ownfd < 0)
                return -errno;
        /* Moving a process needs write access to cgroup.procs of the common
         * ancestor of where it is and where it goes: our own cgroup. */
        if (faccessat(ownfd, "cgroup.procs", W_OK, AT_EACCESS) < 0)
                return -errno;

        cgroup_sweep_stale(ownfd);

        root = calloc(1, sizeof(*root));
        if (!root)
                return -ENOMEM;
        root->fd = -1;
        list_init(&root->items);

        snprintf(name, sizeof(name), CGROUP_SUBTREE_PREFIX "%d", (int) getpid());
        /* EEXIST: left by an earlier process with our pid; cleared below,
         * unless a daemon that runs holds it (our pid in another PID
         * namespace): then it is not ours to clear. */
        if (mkdirat(ownfd, name, 0755) < 0 && errno != EEXIST)
                return -errno;
        subfd = cgroup_subtree_lock(ownfd, name);
        if (subfd < 0)
                return subfd == -EWOULDBLOCK ? -EBUSY : subfd;
        if (asprintf(&root->path, "%s/%s", own, name) < 0) {
                (void) unlinkat(ownfd, name, AT_REMOVEDIR);
                return -ENOMEM;
        }
        /* From here on, cgroup_root_free() removes the directory.  Its fd
         * keeps the lock for the daemon's life. */
        root->fd = TAKE_FD(subfd);

        /* cgroup.kill came with Linux 5.14; without it we could not stop an
         * escaped process reliably. */
        if (faccessat(root->fd, "cgroup.kill", W_OK, AT_EACCESS) < 0)
                return errno == ENOENT ? -EOPNOTSUPP : -errno;
        if (faccessat(root->fd, "cgroup.procs", W_OK, AT_EACCESS) < 0)
                return -errno;

        (void) cgroup_dir_clear(root->fd, 0);

        *ret = TAKE_PTR(root);
        return 0;
}

const char *cgroup_root_path(const struct cgroup_root *root) {
        return root ? root->path : NULL;
}

/* ---------------------------------------------------------------------------
 * Item cgroups */

static void cgroup_item_unwatch(struct cgroup_item *cg) {
        if (cg->ev_assigned) {
                event_del(&cg->ev);
                cg->ev_assigned = false;
        }
        if (cg->inotify_fd >= 0) {
                close(cg->inotify_fd);
                cg->inotify_fd = -1;
        }
}

static struct cgroup_item *cgroup_item_free(struct cgroup_item *cg) {
        if (!cg)
                return NULL;
        cgroup_item_unwatch(cg);
        list_del_init(&cg->entry);
        free(cg);
        return NULL;
}

static void cgroup_item_freep(struct cgroup_item **cg) {
        cgroup_item_free(*cg);
}

int cgroup_item_new(struct cgroup_root *root, struct cgroup_item **ret) {
        _cleanup_(cgroup_item_freep) struct cgroup_item *cg = NULL;

        if (!root || !ret)
                return -EINVAL;

        cg = calloc(1, sizeof(*cg));
        if (!cg)
                return -ENOMEM;
        cg->root = root;
        cg->inotify_fd = -1;
        list_init(&cg->entry);

        for (unsigned i = 0; i < CGROUP_ITEM_NAME_TRIES; i++) {
                snprintf(cg->name, sizeof(cg->name), CGROUP_ITEM_PREFIX "%" PRIu64, root->next_id++);
                if (mkdirat(root->fd, cg->name, 0755) >= 0) {
                        list_add_tail(&cg->entry, &root->items);
                        *ret = TAKE_PTR(cg);
                        return 0;
                }
                if (errno != EEXIST)
                        return -errno;
        }
        return -EEXIST;
}

const char *cgroup_item_name(const struct cgroup_item *cg) {
        return cg ? cg->name : NULL;
}

int cgroup_item_open_procs(const struct cgroup_item *cg, int *ret_fd) {
        char path[sizeof(cg->name) + 16];
        int fd;

        snprintf(path, sizeof(path), "%s/cgroup.procs", cg->name);
        fd = openat(cg->root->fd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        *ret_fd = fd;
        return 0;
}

int cgroup_item_open_dir(const struct cgroup_item *cg, int *ret_fd) {
        int fd;

        fd = openat(cg->root->fd, cg->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        *ret_fd = fd;
        return 0;
}

int cgroup_item_kill(const struct cgroup_item *cg) {
        char path[sizeof(cg->name) + 16];

        if (!cg)
                return -EINVAL;
        snprintf(path, sizeof(path), "%s/cgroup.kill", cg->name);
        return cgroup_write_file(cg->root->fd, path, "1");
}

int cgroup_item_cpu_usec(const struct cgroup_item *cg, uint64_t *ret) {
        _cleanup_(freep) char *stat = NULL;
        char path[sizeof(cg->name) + 16];
        unsigned long long usec;
        const char *p;
        int r;

        snprintf(path, sizeof(path), "%s/cpu.stat", cg->name);
        r = cgroup_read_file(cg->root->fd, path, CGROUP_CPU_STAT_MAX, &stat);
        if (r < 0)
                return r;
        for (p = stat; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (sscanf(p, "usage_usec %llu", &usec) == 1) {
                        *ret = (uint64_t) usec;
                        return 0;
                }
        return -ENODATA;
}

/* 0: removed (or gone anyway), -EBUSY: still populated. */
static int cgroup_item_remove(struct cgroup_item *cg) {
        if (unlinkat(cg->root->fd, cg->name, AT_REMOVEDIR) >= 0)
                return 0;
        if (errno == EBUSY)
                return -EBUSY;
        /* ENOENT: somebody else removed it.  Anything else cannot get better
         * by waiting; cgroup_root_free() tries once more. */
        return errno == ENOENT ? 0 : -errno;
}

static void cgroup_item_on_events(evutil_socket_t fd, short what, void *userdata) {
        struct cgroup_item *cg = userdata;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

        while (read(cg->inotify_fd, buf, sizeof(buf)) > 0)
                ;
        if (cgroup_item_remove(cg) != -EBUSY)
                cgroup_item_free(cg);
}

static void cgroup_item_on_retry(evutil_socket_t fd, short what, void *userdata) {
        struct cgroup_item *cg = userdata;
        struct timeval tv;

        if (cgroup_item_remove(cg) != -EBUSY) {
                cgroup_item_free(cg);
                return;
        }
        cg->retry_usec = cg->retry_usec * 2 > CGROUP_RETRY_MAX_USEC ? CGROUP_RETRY_MAX_USEC : cg->retry_usec * 2;
        tv = timeval_from_usec(cg->retry_usec);
        if (evtimer_add(&cg->ev, &tv) < 0)
                cgroup_item_unwatch(cg);        /* left for cgroup_root_free() */
}

/* Calls back once cgroup.events changes, i.e. once the cgroup is empty. */
static int cgroup_item_watch(struct cgroup_item *cg, struct event_base *base) {
        _cleanup_(freep) char *events = NULL;
        struct timeval tv;

        cg->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (cg->inotify_fd >= 0) {
                if (asprintf(&events, "%s/%s/cgroup.events", cg->root->path, cg->name) >= 0 &&
                    inotify_add_watch(cg->inotify_fd, events, IN_MODIFY) >= 0 &&
                    event_assign(&cg->ev, base, cg->inotify_fd, EV_READ | EV_PERSIST,
                                 cgroup_item_on_events, cg) >= 0) {
                        cg->ev_assigned = true;
                        if (event_add(&cg->ev, NULL) >= 0)
                                return 0;
                }
                cgroup_item_unwatch(cg);
        }

        /* Out of inotify instances (fs.inotify.max_user_instances): poll. */
        if (evtimer_assign(&cg->ev, base, cgroup_item_on_retry, cg) < 0)
                return -EINVAL;
        cg->ev_assigned = true;
        cg->retry_usec = CGROUP_RETRY_MIN_USEC;
        tv = timeval_from_usec(cg->retry_usec);
        if (evtimer_add(&cg->ev, &tv) < 0) {
                cgroup_item_unwatch(cg);
                return -ENOMEM;
        }
        return 0;
}

struct cgroup_item *cgroup_item_release(struct cgroup_item *cg, struct event_base *base) {
        if (!cg)
                return NULL;

        /* Usually empty already: the main process has exited and nothing it
         * started outlived it. */
        if (cgroup_item_remove(cg) != -EBUSY)
                return cgroup_item_free(cg);

        (void) cgroup_item_kill(cg);
        if (!base || cgroup_item_watch(cg, base) < 0)
                return NULL;            /* left for cgroup_root_free() */

        /* It may have emptied before the watch was in place. */
        if (cgroup_item_remove(cg) != -EBUSY)
                cgroup_item_free(cg);
        return NULL;
}

struct cgroup_root *cgroup_root_free(struct cgroup_root *root) {
        if (!root)
                return NULL;

        while (!list_empty(&root->items))
                cgroup_item_free(list_first_entry(&root->items, struct cgroup_item, entry));
        if (root->fd >= 0) {
                /* Whatever cannot be removed now (a process stuck in the
                 * kernel) stays; the next daemon's start sweeps it. */
                (void) cgroup_dir_clear(root->fd, CGROUP_SHUTDOWN_WAIT_USEC);
                close(root->fd);
        }
        if (root->path)
                (void) rmdir(root->path);
        free(root->path);
        free(root);
        return NULL;
}

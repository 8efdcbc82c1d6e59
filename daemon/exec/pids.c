/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Task limits of exec items in the cgroup v1 pids hierarchy, see exec/pids.h.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/cgroup.h"
#include "exec/pids.h"
#include "list.h"
#include "util.h"

struct pids_root {
        char *path;                     /* P/cmwq-pids-<pid> */
        int lock_fd;                    /* of that directory, flock()ed while we run */
        struct list_head stale;         /* struct pids_item: released, not removed yet */
};

struct pids_item {
        struct pids_root *root;
        struct list_head entry;         /* on root->stale once released */
        uid_t uid;
        char *path;
};

static int write_file(const char *dir, const char *name, const char *value) {
        char path[PATH_MAX];

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
                return -ENAMETOOLONG;
        return cgroup_write_file(AT_FDCWD, path, value);
}

/* Whether the comma-separated @list (cut up by strtok()) names the pids
 * controller. */
static bool names_pids(char *list) {
        for (char *o = strtok(list, ","); o; o = strtok(NULL, ","))
                if (strcmp(o, "pids") == 0)
                        return true;
        return false;
}

/* The first line of @path that @match takes: @match returns 0 for a line
 * that is not it, 1 once it has set *@ret from it, or -errno.  -EOPNOTSUPP
 * when no line is it. */
static int scan_proc_file(const char *path, int (*match)(char *line, char **ret), char **ret) {
        _cleanup_(freep) char *line = NULL;
        size_t size = 0;
        FILE *f;
        int r = 0;

        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (r == 0 && getline(&line, &size, f) > 0)
                r = match(line, ret);
        fclose(f);
        return r == 0 ? -EOPNOTSUPP : r < 0 ? r : 0;
}

static int strdup_to(const char *s, char **ret) {
        *ret = strdup(s);
        return *ret ? 1 : -ENOMEM;
}

/* A line of /proc/self/mountinfo: "... MOUNTPOINT ... - cgroup NAME OPTIONS". */
static int match_mount(char *line, char **ret) {
        char mnt[PATH_MAX], fstype[64], opts[512];
        const char *sep = strstr(line, " - ");

        if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
            sscanf(sep + 3, "%63s %*s %511s", fstype, opts) != 2 || strcmp(fstype, "cgroup") != 0)
                return 0;
        if (!names_pids(opts) || strchr(mnt, '\\'))
                return 0;
        return strdup_to(mnt, ret);
}

/* The mount point of the v1 hierarchy with the pids controller. */
static int find_mount(char **ret) {
        return scan_proc_file("/proc/self/mountinfo", match_mount, ret);
}

/* A line of /proc/self/cgroup: "N:CONTROLLERS:/path". */
static int match_own(char *line, char **ret) {
        char *c = strchr(line, ':'), *p;

        if (!c)
                return 0;
        p = strchr(c + 1, ':');
        if (!p)
                return 0;
        *p = 0;
        if (!names_pids(c + 1))
                return 0;
        p[1 + strcspn(p + 1, "\n")] = 0;
        return strdup_to(p + 1, ret);
}

/* Our cgroup in that hierarchy: the "N:pids:/path" line of /proc/self/cgroup. */
static int find_own(char **ret) {
        return scan_proc_file("/proc/self/cgroup", match_own, ret);
}

/* Removes @dir and the cgroups below it, two levels deep (user-*, item-*),
 * as far as they are empty. */
static void remove_tree(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *de;

        if (d) {
                while ((de = readdir(d))) {
                        char sub[PATH_MAX];

                        if (de->d_type != DT_DIR || de->d_name[0] == '.')
                                continue;
                        snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
                        remove_tree(sub);
                }
                closedir(d);
        }
        (void) rmdir(dir);
}

/* Subtrees of daemons that are gone (their pid no longer exists), and one
 * of ours from a dead daemon that had our pid. */
static void sweep_stale(const char *parent) {
        DIR *d = opendir(parent);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                char sub[PATH_MAX], *end;
                long pid;
                int lock_fd;

                if (strncmp(de->d_name, "cmwq-pids-", 10) != 0)
                        continue;
                pid = strtol(de->d_name + 10, &end, 10);
                if (*end || pid <= 0 || (pid != (long) getpid() && (kill((pid_t) pid, 0) >= 0 || errno != ESRCH)))
                        continue;
                snprintf(sub, sizeof(sub), "%s/%s", parent, de->d_name);
                lock_fd = cgroup_subtree_lock(AT_FDCWD, sub);
                if (lock_fd < 0)
                        continue;       /* held: its daemon runs */
                remove_tree(sub);
                close(lock_fd);
        }
        closedir(d);
}

int pids_root_new(struct pids_root **ret) {
        _cleanup_(freep) char *mnt = NULL, *own = NULL;
        struct pids_root *root;
        int r;

        r = find_mount(&mnt);
        if (r < 0)
                return r;
        r = find_own(&own);
        if (r < 0)
                return r;
        root = calloc(1, sizeof(*root));
        if (!root)
                return -ENOMEM;
        root->lock_fd = -1;
        list_init(&root->stale);
        if (asprintf(&root->path, "%s%s%scmwq-pids-%d", mnt, own, own[strlen(own) - 1] == '/' ? "" : "/",
                     (int) getpid()) < 0) {
                free(root);
                return -ENOMEM;
        }
        *strrchr(root->path, '/') = 0;
        sweep_stale(root->path);
        root->path[strlen(root->path)] = '/';
        if (mkdir(root->path, 0755) < 0 && errno != EEXIST) {
                r = -errno;
                pids_root_free(root);
                return r;
        }
        root->lock_fd = cgroup_subtree_lock(AT_FDCWD, root->path);
        if (root->lock_fd < 0) {
                r = root->lock_fd == -EWOULDBLOCK ? -EBUSY : root->lock_fd;
                root->lock_fd = -1;
                if (r == -EBUSY) {
                        /* A running daemon's with our pid number, in
                         * another PID namespace: not ours to remove. */
                        free(root->path);
                        root->path = NULL;
                }
                pids_root_free(root);
                return r;
        }
        *ret = root;
        return 0;
}

const char *pids_root_path(const struct pids_root *root) {
        return root->path;
}

static void user_dir(const struct pids_root *root, uid_t uid, char *buf, size_t size) {
        snprintf(buf, size, "%s/user-%u", root->path, (unsigned) uid);
}

/* Removes the item's cgroup and, if it was the last, its user's; 0 once
 * the item's is gone. */
static int pids_item_remove(struct pids_item *it) {
        char dir[PATH_MAX];

        if (rmdir(it->path) < 0 && errno != ENOENT)
                return -errno;
        user_dir(it->root, it->uid, dir, sizeof(dir));
        (void) rmdir(dir);              /* EBUSY while the user has other items */
        return 0;
}

static struct pids_item *pids_item_free(struct pids_item *it) {
        if (!it)
                return NULL;
        if (list_linked(&it->entry))
                list_del_init(&it->entry);
        free(it->path);
        free(it);
        return NULL;
}

static void pids_root_sweep(struct pids_root *root) {
        struct pids_item *it, *n;

        list_for_each_entry_safe(it, n, &root->stale, entry)
                if (pids_item_remove(it) >= 0)
                        pids_item_free(it);
}

struct pids_root *pids_root_free(struct pids_root *root) {
        struct pids_item *it, *n;

        if (!root)
                return NULL;
        pids_root_sweep(root);
        list_for_each_entry_safe(it, n, &root->stale, entry)
                pids_item_free(it);
        if (root->path)
                (void) rmdir(root->path);
        if (root->lock_fd >= 0)
                close(root->lock_fd);
        free(root->path);
        free(root);
        return NULL;
}

int pids_item_attach(struct pids_root *root, uid_t uid, pid_t pid, uint64_t item_max, uint64_t user_max,
                     struct pids_item **ret) {
        struct pids_item *it;
        char dir[PATH_MAX], value[32];
        int r;

        if (!root || pid <= 0 || !ret)
                return -EINVAL;
        pids_root_sweep(root);

        user_dir(root, uid, dir, sizeof(dir));
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (user_max > 0)
                snprintf(value, sizeof(value), "%" PRIu64, user_max);
        else
                snprintf(value, sizeof(value), "max");
        r = write_file(dir, "pids.max", value);
        if (r < 0)
                return r;

        it = calloc(1, sizeof(*it));
        if (!it)
                return -ENOMEM;
        it->root = root;
        it->uid = uid;
        list_init(&it->entry);
        if (asprintf(&it->path, "%s/item-%d", dir, (int) pid) < 0) {
                free(it);
                return -ENOMEM;
        }
        if (mkdir(it->path, 0755) < 0 && errno != EEXIST) {
                r = -errno;
                pids_item_free(it);
                return r;
        }
        snprintf(value, sizeof(value), "%" PRIu64, item_max);
        r = write_file(it->path, "pids.max", value);
        if (r >= 0) {
                snprintf(value, sizeof(value), "%d", (int) pid);
                r = write_file(it->path, "cgroup.procs", value);
        }
        if (r < 0) {
                (void) pids_item_remove(it);
                pids_item_free(it);
                return r;
        }
        *ret = it;
        return 0;
}

struct pids_item *pids_item_release(struct pids_item *it) {
        struct pids_root *root;

        if (!it)
                return NULL;
        root = it->root;
        if (pids_item_remove(it) >= 0)
                pids_item_free(it);
        else
                list_add_tail(&it->entry, &root->stale);
        return NULL;
}

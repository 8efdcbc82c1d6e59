/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A cgroup v2 per exec item, so that stopping an item stops every process it
 * started, including those that left its process group with setsid().
 *
 * Layout: the daemon's own v2 cgroup D (from /proc/self/cgroup, found on the
 * cgroup2 mount from /proc/self/mountinfo) gets one subtree
 *
 *     D/cmwq-items-<daemon pid>/item-<n>     one per running item
 *
 * The pid in the name keeps daemons that share a cgroup apart (outside
 * systemd every process may sit in the same one, and the tests run several
 * daemons at once).  Subtrees left by a daemon that died (its pid no longer
 * exists) are killed and removed when the next one starts.
 *
 * No controller is enabled anywhere: membership, cgroup.kill (kernel 5.14)
 * and cgroup.events are all that is used, and those work in every cgroup.
 * That is also why the daemon can stay in D next to its subtree: the v2 "no
 * internal processes" rule only applies once D enables controllers in its
 * cgroup.subtree_control.  Under systemd the unit should say Delegate=yes, so
 * that systemd knows the subtree is ours; should we ever want controllers
 * (cpu, memory per item), the daemon will first have to move itself into a
 * leaf such as D/daemon.
 *
 * The child is born in its cgroup: the spawner (see exec/spawner.c) creates it with
 * clone3(CLONE_INTO_CGROUP) on the directory fd the daemon opened for it.
 * Where that is not available, the child joins itself, between clone and
 * execve(), while still privileged, by writing "0" into cgroup.procs (which
 * can sleep for an RCU grace period, ~10 ms, when the lock has been idle).  Nothing of the item's own code runs before
 * that, so all its descendants are born inside.  The item's user cannot move
 * out: the cgroup files belong to the daemon's user.  (A --user daemon runs
 * items as that same user, who may; there the cgroup is only a convenience.)
 *
 * An item's cgroup is removed when the item ends.  rmdir() fails with EBUSY
 * while killed processes are still dying, so then the cgroup is kept and
 * removed once cgroup.events says "populated 0": watched with inotify
 * (kernfs sends IN_MODIFY when it changes; libevent cannot watch the
 * POLLPRI that poll() would give), or, should inotify be unavailable, with a
 * one-shot timer retried at 1 ms, doubling up to 1 s.  Nothing wakes up while
 * nothing is dying.
 *
 * Library code: nothing here logs; every error is a negative errno.
 */

#include <stdint.h>

struct event_base;
struct cgroup_root;
struct cgroup_item;

/* Bytes read at most from /proc/self/mountinfo and /proc/self/cgroup. */
#define CGROUP_PROC_FILE_MAX (4u * 1024u * 1024u)

/* Shutdown: how long cgroup_root_free() waits for killed items to empty. */
#define CGROUP_SHUTDOWN_WAIT_USEC (1000u * 1000u)

/*
 * Creates the daemon's subtree, after sweeping stale ones.  Any error means
 * "contain items by process group only": -EOPNOTSUPP when there is no usable
 * cgroup v2 (no cgroup2 mount, no v2 membership, our cgroup outside the
 * mount, a kernel without cgroup.kill), otherwise the errno of the step that
 * failed (EACCES or EROFS when we may not create cgroups or move processes
 * here).  One root per process at a time: the subtree is named after the
 * pid, and a new root clears what it finds there.
 */
int cgroup_root_new(struct cgroup_root **ret);

/* Kills and removes whatever is left (waiting up to CGROUP_SHUTDOWN_WAIT_USEC
 * for it to die), then the subtree.  Every exec item using @root must be gone
 * before, and this must run before the event bases that released item
 * cgroups were given to are freed.  Accepts NULL, returns NULL. */
struct cgroup_root *cgroup_root_free(struct cgroup_root *root);

/* The directory of the subtree, e.g. /sys/fs/cgroup/system.slice/cmwqd.service/cmwq-items-42. */
const char *cgroup_root_path(const struct cgroup_root *root);

/*
 * Pure: the directory of our own v2 cgroup, given the text of
 * /proc/self/mountinfo and of /proc/self/cgroup.  -EOPNOTSUPP when there is
 * no cgroup2 mount holding it or no "0::" line.  *ret_dir is malloc()ed.
 */
int cgroup_find_own_dir(const char *mountinfo, const char *self_cgroup, char **ret_dir);

/* Writes @value to the control file @path (relative to @dirfd, or
 * AT_FDCWD) in one write(): 0, or a negative errno (-EIO if short).  For
 * either cgroup hierarchy: the v2 one here, the v1 pids one in exec/pids.c. */
int cgroup_write_file(int dirfd, const char *path, const char *value);

/* Opens the daemon subtree @path (relative to @dirfd, or AT_FDCWD) and
 * takes its flock(), which a daemon holds on its own subtrees for its life:
 * the pid in a subtree's name does not say from another PID namespace
 * whether its daemon runs.  The fd (closing it lets go), -EWOULDBLOCK while
 * another process holds it, or another negative errno. */
int cgroup_subtree_lock(int dirfd, const char *path);

/* Creates a new, empty item cgroup. */
int cgroup_item_new(struct cgroup_root *root, struct cgroup_item **ret);

/* Opens the item cgroup's cgroup.procs for writing (close-on-exec): writing
 * "0" into it moves the writer in. */
int cgroup_item_open_procs(const struct cgroup_item *cg, int *ret_fd);

/* Opens the item cgroup's directory (O_DIRECTORY, close-on-exec), for
 * clone3(CLONE_INTO_CGROUP). */
int cgroup_item_open_dir(const struct cgroup_item *cg, int *ret_fd);

/* SIGKILLs every process in the cgroup (cgroup.kill), also those forked
 * while it happens. */
int cgroup_item_kill(const struct cgroup_item *cg);

/* CPU time (user + system) used by every process that was ever in the cgroup
 * (cpu.stat usage_usec, kept by the cgroup core without the cpu controller). */
int cgroup_item_cpu_usec(const struct cgroup_item *cg, uint64_t *ret);

/* "item-<n>", its name under cgroup_root_path(). */
const char *cgroup_item_name(const struct cgroup_item *cg);

/*
 * The item has ended: kills what is left in the cgroup and removes it, at
 * once if it is empty, else from @base's loop once it is (with @base NULL:
 * at cgroup_root_free()).  Accepts NULL; always returns NULL.
 */
struct cgroup_item *cgroup_item_release(struct cgroup_item *cg, struct event_base *base);

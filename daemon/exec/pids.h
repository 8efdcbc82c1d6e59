/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Task limits of exec items (cmwqd --limit item-tasks=N, user-tasks=N): a
 * fork bomb in one item must not take the tasks every other user's items
 * need.  Each item's processes and threads are counted by the kernel's pids
 * controller in a cgroup of their own, under one of their user:
 *
 *     P/cmwq-pids-<daemon pid>/user-<uid>/item-<item's pid>
 *
 * pids.max of item-<pid> is item-tasks; of user-<uid>, user-tasks (none for
 * root, who may stop the daemon anyway).  P is the daemon's own cgroup in the
 * cgroup v1 "pids" hierarchy, the only place a pids controller can be had
 * without reorganising the daemon's cgroup v2 tree (exec/cgroup.h: the daemon
 * sits in its v2 cgroup next to its items, so it cannot enable controllers
 * below it).  The daemon moves the item's process in before it lets it exec
 * (exec/exec.c), so everything the item starts is counted.  A fork over either
 * limit fails with EAGAIN in the item.
 *
 * Where there is no v1 pids hierarchy, pids_root_new() says -EOPNOTSUPP and
 * exec/exec.c falls back to RLIMIT_NPROC = user-tasks on each item of a user
 * other than root: per uid, counted over all of that user's processes on the
 * machine, and no per-item limit.
 *
 * Library code: nothing here logs; every error is a negative errno.
 */

#include <stdint.h>
#include <sys/types.h>

struct pids_root;
struct pids_item;

/* Finds the daemon's cgroup in a v1 pids hierarchy and makes its subtree
 * there (after removing the empty subtrees of daemons that are gone). */
int pids_root_new(struct pids_root **ret);
/* Removes what is left of the subtree (empty cgroups only).  NULL is fine. */
struct pids_root *pids_root_free(struct pids_root *root);
const char *pids_root_path(const struct pids_root *root);

/* Moves @pid, a child that has not exec'd yet, into a cgroup of its own with
 * pids.max @item_max, under its user's with pids.max @user_max (0: no
 * limit).  Limits the fork bomb of that item and of that user. */
int pids_item_attach(struct pids_root *root, uid_t uid, pid_t pid, uint64_t item_max, uint64_t user_max,
                     struct pids_item **ret);
/* The item has ended: removes its cgroup once empty (now, or at a later
 * attach or release, or at pids_root_free()).  NULL is fine. */
struct pids_item *pids_item_release(struct pids_item *it);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * cmwqd's CPUs as it started.  Its event loop is pinned to one CPU for a
 * moment at a time (cm/sentinel.c), and a process or thread it makes then
 * inherits that pin: those whose placement matters take these CPUs back.
 * Like the CPUs cmwqd has pools for, they are read once: a change of
 * cmwqd's affinity at run time is undone the next time the loop lets go of
 * a pin (restart cmwqd for it; a cgroup's cpuset narrows them as ever).
 */

#include <sched.h>

/* Notes the calling thread's CPUs, once per process: the first call wins.
 * cmwqd calls it first thing, before anything can pin its loop. */
void daemon_cpus_note(void);
/* Those CPUs, or NULL if not noted (or unknown). */
const cpu_set_t *daemon_cpus(void);
/* The calling thread takes them back; nothing if not noted.  A set the
 * kernel refuses now (a cpuset that no longer overlaps) leaves it as it
 * is. */
void daemon_cpus_restore(void);

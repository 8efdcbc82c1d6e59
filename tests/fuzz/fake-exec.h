/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The fake executor of the dispatch fuzzer (fake-exec.c).  Link with
 * FAKE_EXEC_WRAP (Makefile.am) so that it replaces daemon/exec/exec.c's calls. */

/* Items "running" now: 0 once the core they belonged to is freed. */
unsigned fake_exec_nr_procs(void);

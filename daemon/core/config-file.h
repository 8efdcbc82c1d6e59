/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * cmwqd's configuration file, cmwqd.conf(5): for now a [Limits] section of
 * NAME=VALUE lines, the same names and values as cmwqd --limit.  Command
 * line options are applied after it, so they win.
 */

#include <stdbool.h>

#include "core/user-limits.h"

/* The file read by the system instance when --config is not given. */
#define CONFIG_FILE_DEFAULT CMWQ_SYSCONFDIR "/cmwq/cmwqd.conf"

/* Applies @path to @l.  A missing file is fine unless @must_exist.  Errors
 * are printed to stderr as "cmwqd: FILE:LINE: what" and returned as a
 * negative errno (-EINVAL for a bad line). */
int config_file_load(const char *path, bool must_exist, struct limits *l);

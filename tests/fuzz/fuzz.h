/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The entry point every fuzz target defines: called by libFuzzer, or by
 * replay.c for each file of the target's corpus under "make check". */

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

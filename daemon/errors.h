/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "cmwq.pb-c.h"

/* The one mapping from the daemon's negative errno values to the protocol's
 * error enum, used by every front end at its edge. */
Cmwq__Error errno_to_protocol_error(int r);

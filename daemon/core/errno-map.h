/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "cmwq.pb-c.h"

#define CMWQ_DBUS_ERROR_PREFIX "org.cmwq.cmwqd1.Error."

/* The one mapping from the daemon's negative errno values to the protocol's
 * error enum, used by every front end at its edge. */
Cmwq__Error errno_to_protocol_error(int r);
/* The same error as a D-Bus error name, org.cmwq.cmwqd1.Error.<Name>. */
const char *errno_to_dbus_error(int r);

/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>

#include "core/errno-map.h"

Cmwq__Error errno_to_protocol_error(int r) {
        switch (r < 0 ? -r : r) {
        case 0:
                return CMWQ__ERROR__OK;
        case EINVAL:
        case ERANGE:
        case E2BIG:
        case ENAMETOOLONG:
                return CMWQ__ERROR__INVALID_ARGUMENT;
        case ENOENT:
        case ESRCH:
                return CMWQ__ERROR__NOT_FOUND;
        case EEXIST:
                return CMWQ__ERROR__ALREADY_EXISTS;
        case EPERM:
        case EACCES:
                return CMWQ__ERROR__PERMISSION_DENIED;
        case EBUSY:
                return CMWQ__ERROR__BUSY;
        case EPROTO:
        case EBADMSG:
        case EMSGSIZE:
                return CMWQ__ERROR__PROTOCOL;
        case EPROTONOSUPPORT:
                return CMWQ__ERROR__VERSION_MISMATCH;
        case ENOSPC:
        case EMFILE:
        case EDQUOT:
        case EUSERS:
                return CMWQ__ERROR__LIMIT_EXCEEDED;
        case ETIMEDOUT:
                return CMWQ__ERROR__TIMED_OUT;
        case ECANCELED:
                return CMWQ__ERROR__CANCELLED;
        case ESHUTDOWN:
                return CMWQ__ERROR__SHUTTING_DOWN;
        default:
                return CMWQ__ERROR__INTERNAL;
        }
}

const char *errno_to_dbus_error(int r) {
        /* The protocol enum's names, spelled the D-Bus way: one mapping
         * from errno, two spellings. */
        static const char *const names[] = {
                [CMWQ__ERROR__INVALID_ARGUMENT] = CMWQ_DBUS_ERROR_PREFIX "InvalidArgument",
                [CMWQ__ERROR__NOT_FOUND] = CMWQ_DBUS_ERROR_PREFIX "NotFound",
                [CMWQ__ERROR__ALREADY_EXISTS] = CMWQ_DBUS_ERROR_PREFIX "AlreadyExists",
                [CMWQ__ERROR__PERMISSION_DENIED] = CMWQ_DBUS_ERROR_PREFIX "PermissionDenied",
                [CMWQ__ERROR__BUSY] = CMWQ_DBUS_ERROR_PREFIX "Busy",
                [CMWQ__ERROR__PROTOCOL] = CMWQ_DBUS_ERROR_PREFIX "Protocol",
                [CMWQ__ERROR__VERSION_MISMATCH] = CMWQ_DBUS_ERROR_PREFIX "VersionMismatch",
                [CMWQ__ERROR__LIMIT_EXCEEDED] = CMWQ_DBUS_ERROR_PREFIX "LimitExceeded",
                [CMWQ__ERROR__TIMED_OUT] = CMWQ_DBUS_ERROR_PREFIX "TimedOut",
                [CMWQ__ERROR__CANCELLED] = CMWQ_DBUS_ERROR_PREFIX "Cancelled",
                [CMWQ__ERROR__INTERNAL] = CMWQ_DBUS_ERROR_PREFIX "Internal",
                [CMWQ__ERROR__SHUTTING_DOWN] = CMWQ_DBUS_ERROR_PREFIX "ShuttingDown",
        };
        Cmwq__Error e = errno_to_protocol_error(r);

        if ((size_t) e < sizeof(names) / sizeof(names[0]) && names[e])
                return names[e];
        return CMWQ_DBUS_ERROR_PREFIX "Internal";
}

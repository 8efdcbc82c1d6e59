/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>

#include "errors.h"

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

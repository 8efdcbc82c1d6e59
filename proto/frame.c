/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>

#include "frame.h"

void frame_header_encode(uint8_t hdr[CMWQ_FRAME_HEADER_SIZE], uint32_t len) {
        hdr[0] = len & 0xff;
        hdr[1] = (len >> 8) & 0xff;
        hdr[2] = (len >> 16) & 0xff;
        hdr[3] = (len >> 24) & 0xff;
}

int frame_parse(const uint8_t *buf, size_t avail, uint32_t max_payload,
                uint32_t *ret_payload_len, size_t *ret_frame_len) {
        uint32_t len;

        if (avail < CMWQ_FRAME_HEADER_SIZE)
                return 0;

        len = (uint32_t) buf[0] | (uint32_t) buf[1] << 8 |
              (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 24;
        if (len > max_payload)
                return -EMSGSIZE;
        if (avail - CMWQ_FRAME_HEADER_SIZE < len)
                return 0;

        *ret_payload_len = len;
        *ret_frame_len = CMWQ_FRAME_HEADER_SIZE + (size_t) len;
        return 1;
}

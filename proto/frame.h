/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Framing of the cmwq socket protocol, shared by the daemon and the client
 * library.  A frame is a 4-byte little-endian payload length followed by the
 * payload (a packed cmwq.Request or cmwq.Response).  A zero-length payload is
 * valid (an empty message packs to zero bytes).
 *
 * This module is pure: it works on byte buffers and never touches a socket,
 * so that unit tests can feed it split, truncated, oversized and empty frames.
 */

#include <stddef.h>
#include <stdint.h>

#define CMWQ_PROTOCOL_VERSION 1u
#define CMWQ_FRAME_HEADER_SIZE 4u
/* The largest payload either end accepts.  Checked before anything is
 * allocated; a peer that announces more is dropped. */
#define CMWQ_FRAME_MAX_PAYLOAD (4u * 1024u * 1024u)

/* Write the header for a payload of @len bytes into @hdr. */
void frame_header_encode(uint8_t hdr[CMWQ_FRAME_HEADER_SIZE], uint32_t len);

/*
 * Look at the @avail bytes at @buf and say whether a whole frame is there.
 * Returns 1 and sets *ret_payload_len (and *ret_frame_len = header + payload)
 * when a complete frame is at the start of @buf; 0 when more bytes are
 * needed; -EMSGSIZE when the announced payload exceeds @max_payload.
 */
int frame_parse(const uint8_t *buf, size_t avail, uint32_t max_payload,
                uint32_t *ret_payload_len, size_t *ret_frame_len);

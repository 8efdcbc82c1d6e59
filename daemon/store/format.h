/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The framing of cmwqd's durable log, without any I/O (unit-tested alone).
 *
 * A log file is the 8-byte magic followed by records.  A record is a 4-byte
 * little-endian payload length, the 4-byte little-endian CRC-32 of the
 * payload, and the payload: a packed cmwq_store.Record.  A write torn by a
 * crash can only damage the end of the file; reading stops at the first
 * record that is short, too long, fails its CRC or does not decode, and
 * everything before it is kept.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.pb-c.h"

#define STORE_MAGIC "CMWQLOG1"
#define STORE_MAGIC_SIZE 8u
#define STORE_RECORD_HEADER_SIZE 8u
/* Bigger than any record we write (an item's strings, payload and bounded
 * output are all limited far below this); a larger length is damage. */
#define STORE_RECORD_MAX (16u * 1024u * 1024u)
/* 2: items name their environment (Environment, ItemQueued.env_id), which a
 * reader of 1 would take for an empty one. */
#define STORE_FORMAT_VERSION 2u

/* The CRC-32 of zlib and Ethernet (reflected 0xEDB88320), chained:
 * start with 0. */
uint32_t store_crc32(uint32_t crc, const void *data, size_t len);

/* A growable byte buffer. */
struct store_buf {
        uint8_t *data;
        size_t len;
        size_t size;
};

void store_buf_done(struct store_buf *b);
int store_buf_reserve(struct store_buf *b, size_t more);

/* Appends @rec, framed, to @b. */
int store_record_append(struct store_buf *b, const CmwqStore__Record *rec);

/* The payload length in the frame header at @p (STORE_RECORD_HEADER_SIZE
 * bytes there), unchecked. */
uint32_t store_record_payload_len(const uint8_t *p);
/* The record framed at @p, if it fits whole in the @left bytes there and
 * checks out; NULL if not.  Free it with
 * cmwq_store__record__free_unpacked(). */
CmwqStore__Record *store_record_read(const uint8_t *p, size_t left);

/* Calls @cb for every intact record of the log image @data (which starts
 * with the magic) until it returns non-zero.  *ret_valid is the length of
 * the intact prefix: where the next record is to be written.  Returns the
 * number of records, -EBADMSG if @data does not start with the magic, or the
 * callback's negative errno. */
typedef int (*store_record_cb)(const CmwqStore__Record *rec, void *userdata);
int store_scan(const uint8_t *data, size_t len, store_record_cb cb, void *userdata, size_t *ret_valid);
/* Where store_scan() stopped short of @len at @valid: whether that is a
 * record a crash cut short (its header, or a length that a record can have
 * running past the end, with no record that checks out after it), rather
 * than damage. */
bool store_tail_is_torn(const uint8_t *data, size_t len, size_t valid);

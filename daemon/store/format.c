/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/format.h"

/* A table-driven CRC-32 is thirty lines; not worth linking zlib for.
 * Eight bytes a step ("slicing-by-8"): byte by byte it took a fifth of a
 * compaction's time, which checks every record of the log twice. */
static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_fill(void) {
        for (uint32_t n = 0; n < 256; n++) {
                uint32_t c = n;

                for (int k = 0; k < 8; k++)
                        c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
                crc_table[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++)
                for (int t = 1; t < 8; t++)
                        crc_table[t][n] = crc_table[0][crc_table[t - 1][n] & 0xff] ^ (crc_table[t - 1][n] >> 8);
}

uint32_t store_crc32(uint32_t crc, const void *data, size_t len) {
        const uint8_t *p = data;

        (void) pthread_once(&crc_table_once, crc_table_fill);
        crc = ~crc;
        for (; len >= 8; len -= 8, p += 8) {
                uint32_t lo = crc ^ ((uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
                                     (uint32_t) p[3] << 24);
                uint32_t hi = (uint32_t) p[4] | (uint32_t) p[5] << 8 | (uint32_t) p[6] << 16 | (uint32_t) p[7] << 24;

                crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
                      crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
                      crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        }
        while (len--)
                crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        return ~crc;
}

void store_buf_done(struct store_buf *b) {
        free(b->data);
        *b = (struct store_buf) {};
}

int store_buf_reserve(struct store_buf *b, size_t more) {
        size_t need = b->len + more, size = b->size ? b->size : 4096;
        uint8_t *p;

        if (need <= b->size)
                return 0;
        while (size < need)
                size *= 2;
        p = realloc(b->data, size);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->size = size;
        return 0;
}

static void put_le32(uint8_t *p, uint32_t v) {
        p[0] = v;
        p[1] = v >> 8;
        p[2] = v >> 16;
        p[3] = v >> 24;
}

static uint32_t get_le32(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

int store_record_append(struct store_buf *b, const CmwqStore__Record *rec) {
        size_t len = cmwq_store__record__get_packed_size(rec);
        uint8_t *p;
        int r;

        if (len > STORE_RECORD_MAX)
                return -E2BIG;
        r = store_buf_reserve(b, STORE_RECORD_HEADER_SIZE + len);
        if (r < 0)
                return r;
        p = b->data + b->len;
        cmwq_store__record__pack(rec, p + STORE_RECORD_HEADER_SIZE);
        put_le32(p, (uint32_t) len);
        put_le32(p + 4, store_crc32(0, p + STORE_RECORD_HEADER_SIZE, len));
        b->len += STORE_RECORD_HEADER_SIZE + len;
        return 0;
}

/* Whether the @left bytes at @p begin with a frame header whose record fits
 * in them. */
static bool record_fits(const uint8_t *p, size_t left) {
        uint32_t plen;

        if (left < STORE_RECORD_HEADER_SIZE)
                return false;
        plen = get_le32(p);
        return plen <= STORE_RECORD_MAX && left - STORE_RECORD_HEADER_SIZE >= plen;
}

/* The record at @p (its frame header first, @plen bytes after it), if its
 * checksum and its encoding check out; NULL if not. */
static CmwqStore__Record *record_unpack(const uint8_t *p, uint32_t plen) {
        if (store_crc32(0, p + STORE_RECORD_HEADER_SIZE, plen) != get_le32(p + 4))
                return NULL;
        return cmwq_store__record__unpack(NULL, plen, p + STORE_RECORD_HEADER_SIZE);
}

uint32_t store_record_payload_len(const uint8_t *p) {
        return get_le32(p);
}

CmwqStore__Record *store_record_read(const uint8_t *p, size_t left) {
        return record_fits(p, left) ? record_unpack(p, get_le32(p)) : NULL;
}

/* Whether the record at @p checks out and says something. */
static bool record_checks_out(const uint8_t *p, uint32_t plen) {
        CmwqStore__Record *rec = plen > 0 ? record_unpack(p, plen) : NULL;
        bool ok = rec && rec->body_case != CMWQ_STORE__RECORD__BODY__NOT_SET;

        if (rec)
                cmwq_store__record__free_unpacked(rec, NULL);
        return ok;
}

/* A crash tears the last write: a record cut short, with nothing whole
 * after it, and never more than one record's worth.  So a frame header that
 * says more than a record can hold, more bytes left than one record takes,
 * or any record that checks out further on, is damage.  The search for one
 * reads at most this many bytes of candidate records; past that it counts
 * as damage, the side that keeps the log and skips ids. */
#define STORE_TORN_SEARCH_MAX (64u * 1024u * 1024u)

bool store_tail_is_torn(const uint8_t *data, size_t len, size_t valid) {
        size_t left = len - valid;
        uint64_t budget = STORE_TORN_SEARCH_MAX;

        if (left < STORE_RECORD_HEADER_SIZE)
                return true;
        if (get_le32(data + valid) > STORE_RECORD_MAX || left > STORE_RECORD_HEADER_SIZE + STORE_RECORD_MAX ||
            record_fits(data + valid, left))
                return false;
        for (size_t off = valid + 1; len - off >= STORE_RECORD_HEADER_SIZE; off++) {
                uint32_t plen;

                if (!record_fits(data + off, len - off))
                        continue;
                plen = get_le32(data + off);
                if (plen > budget)
                        return false;
                budget -= plen;
                if (record_checks_out(data + off, plen))
                        return false;
        }
        return true;
}

int store_scan(const uint8_t *data, size_t len, store_record_cb cb, void *userdata, size_t *ret_valid) {
        size_t off = STORE_MAGIC_SIZE;
        int n = 0, r;

        *ret_valid = 0;
        if (len < STORE_MAGIC_SIZE || memcmp(data, STORE_MAGIC, STORE_MAGIC_SIZE) != 0)
                return -EBADMSG;

        for (;;) {
                CmwqStore__Record *rec;
                uint32_t plen;

                *ret_valid = off;
                if (!record_fits(data + off, len - off))
                        break;
                plen = get_le32(data + off);
                rec = record_unpack(data + off, plen);
                if (!rec)
                        break;
                r = cb ? cb(rec, userdata) : 0;
                cmwq_store__record__free_unpacked(rec, NULL);
                if (r < 0)
                        return r;
                off += STORE_RECORD_HEADER_SIZE + plen;
                n++;
                if (r > 0) {
                        *ret_valid = off;
                        break;
                }
        }
        return n;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fuzz target "decode": the daemon's message decoder alone.  The input is a
 * client's byte stream; frames are cut with frame_parse() and unpacked as
 * cmwq.Request with the limits the daemon uses, as daemon/ipc/socket.c does.
 *
 * Beyond the sanitizers: a request that decodes packs again, and that packing
 * decodes to a message that packs to the very same bytes (what the daemon
 * decodes, it can also say back).  Requests with unknown fields are exempt
 * from the second decode: protobuf-c 1.4 accepts field number 0 in an
 * overlong tag, keeps it as an unknown field, and refuses it once packed
 * canonically.  The daemon ignores unknown fields.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmwq.pb-c.h"
#include "frame.h"
#include "fuzz.h"

static bool has_unknown_fields(const ProtobufCMessage *m) {
        if (m->n_unknown_fields > 0)
                return true;
        for (unsigned k = 0; k < m->descriptor->n_fields; k++) {
                const ProtobufCFieldDescriptor *f = &m->descriptor->fields[k];
                const char *member = (const char *) m + f->offset;

                if (f->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n = *(const size_t *) ((const char *) m + f->quantifier_offset);
                        ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *) member;

                        for (size_t i = 0; i < n; i++)
                                if (has_unknown_fields(v[i]))
                                        return true;
                } else {
                        const ProtobufCMessage *sub = *(ProtobufCMessage *const *) member;

                        /* A oneof's members share the storage: only the set one counts. */
                        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
                            *(const uint32_t *) ((const char *) m + f->quantifier_offset) != f->id)
                                continue;
                        if (sub && has_unknown_fields(sub))
                                return true;
                }
        }
        return false;
}

static void check_repack(const Cmwq__Request *req) {
        size_t len = cmwq__request__get_packed_size(req), len2;
        uint8_t *buf = malloc(len ? len : 1), *buf2;
        Cmwq__Request *again;

        if (!buf || cmwq__request__pack(req, buf) != len)
                abort();
        again = cmwq__request__unpack(NULL, len, buf);
        if (!again && has_unknown_fields(&req->base)) {
                free(buf);
                return;
        }
        if (!again) {
                fprintf(stderr, "a decoded request packed to bytes that do not decode\n");
                abort();
        }
        len2 = cmwq__request__get_packed_size(again);
        buf2 = malloc(len2 ? len2 : 1);
        if (!buf2 || cmwq__request__pack(again, buf2) != len2)
                abort();
        if (len2 != len || memcmp(buf, buf2, len) != 0) {
                fprintf(stderr, "a request packs differently after a round trip\n");
                abort();
        }
        cmwq__request__free_unpacked(again, NULL);
        free(buf2);
        free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        for (;;) {
                uint32_t payload_len;
                size_t frame_len;
                Cmwq__Request *req;

                if (frame_parse(data, size, CMWQ_FRAME_MAX_PAYLOAD, &payload_len, &frame_len) <= 0)
                        return 0;
                req = cmwq__request__unpack(NULL, payload_len, data + CMWQ_FRAME_HEADER_SIZE);
                if (req) {
                        check_repack(req);
                        cmwq__request__free_unpacked(req, NULL);
                }
                data += frame_len;
                size -= frame_len;
        }
}

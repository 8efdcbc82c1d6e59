/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Credits of unbound queues for a callback client, see callback/callback-credits.h.
 */
#include <errno.h>
#include <stdlib.h>

#include "base/log.h"
#include "callback/callback-credits.h"

struct credits_entry {
        struct callback_credits *cc;
        struct core_claim *claim;       /* NULL: not named yet, or refused */
        uint32_t granted;               /* what we wrote: credits given so far */
        uint32_t returned;              /* the client's count as last read */
        bool refused;
};

struct callback_credits {
        struct core *core;
        const struct core_caller *caller;
        struct callback_shm *shm;
        struct credits_entry entries[CMWQ_SHM_CREDIT_QUEUES];
};

static unsigned entry_index(const struct credits_entry *en) {
        return (unsigned) (en - en->cc->entries);
}

/* What the claim holds, as the client counts it (granted - returned). */
static void entry_publish(struct credits_entry *en) {
        uint32_t held = en->granted - en->returned;
        unsigned now = en->claim ? core_claim_held(en->claim) : 0;

        /* Only more is granted here: what the client holds beyond the
         * claim (its queue went) it gives back as its callbacks return. */
        if (now > held)
                en->granted += now - held;
        callback_shm_credits_write(en->cc->shm, entry_index(en), en->granted,
                                   en->claim ? core_claim_limit(en->claim) : 0,
                                   en->refused || (en->claim && core_claim_gone(en->claim)));
}

static void entry_claim_changed(struct core_claim *cl, void *userdata) {
        struct credits_entry *en = userdata;

        (void) cl;
        entry_publish(en);
}

struct callback_credits *callback_credits_new(struct core *core, const struct core_caller *caller,
                                              struct callback_shm *shm) {
        struct callback_credits *cc = calloc(1, sizeof(*cc));

        if (!cc)
                return NULL;
        cc->core = core;
        cc->caller = caller;
        cc->shm = shm;
        for (unsigned k = 0; k < CMWQ_SHM_CREDIT_QUEUES; k++)
                cc->entries[k].cc = cc;
        return cc;
}

struct callback_credits *callback_credits_free(struct callback_credits *cc) {
        if (!cc)
                return NULL;
        for (unsigned k = 0; k < CMWQ_SHM_CREDIT_QUEUES; k++)
                if (cc->entries[k].claim) {
                        core_claim_close(cc->entries[k].claim);
                        cc->entries[k].claim = NULL;
                }
        free(cc);
        return NULL;
}

int callback_credits_changed(struct callback_credits *cc, unsigned entry) {
        struct credits_entry *en = &cc->entries[entry];
        char name[CMWQ_SHM_CREDIT_NAME];
        uint32_t want, returned, back;
        struct core_error e = {};
        int r;

        if (en->refused)
                return 0;
        if (!callback_shm_credits_read(cc->shm, entry, en->claim ? NULL : name, &want, &returned))
                return -EBADMSG;
        back = returned - en->returned;
        if (back > en->granted - en->returned)
                return -EBADMSG;        /* more than it held */
        en->returned = returned;

        if (!en->claim) {
                r = core_claim_open(cc->core, cc->caller, name, entry_claim_changed, en, &en->claim, &e);
                if (r < 0) {
                        /* Its callbacks of that queue are counted by itself
                         * alone, as before credits: nothing of others' is at
                         * stake in a queue it cannot see. */
                        log_debug("callback: PID %d cannot have credits of workqueue '%s': %s",
                                  (int) cc->caller->pid, name, e.message);
                        en->refused = true;
                        en->claim = NULL;
                        entry_publish(en);
                        return 0;
                }
        }
        core_claim_update(en->claim, want, back);
        entry_publish(en);
        return 0;
}

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
        callback_credits_broken_fn broken;
        void *userdata;
        struct event *settle;           /* reads the marked entries, once a turn */
        uint64_t marked;                /* entries with a CREDITS not read yet */
        bool is_broken;
        struct credits_entry entries[CMWQ_SHM_CREDIT_QUEUES];
};

_Static_assert(CMWQ_SHM_CREDIT_QUEUES <= 64, "one bit of marked per entry");

static unsigned entry_index(const struct credits_entry *en) {
        return (unsigned) (en - en->cc->entries);
}

/* Writes what the claim holds (as the client counts it: granted -
 * returned) and may keep into the entry. */
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

static unsigned entry_want_now(struct core_claim *cl, void *userdata) {
        struct credits_entry *en = userdata;
        uint32_t want, returned;

        (void) cl;
        if (!callback_shm_credits_read(en->cc->shm, entry_index(en), NULL, &want, &returned))
                return 0;
        return want;    /* bounded by the core */
}

static void entry_refuse(struct credits_entry *en, const char *name, const char *why) {
        /* Its callbacks of that queue are counted by itself alone, as before
         * credits: nothing of others' is at stake in a queue it cannot see. */
        log_debug("callback: PID %d cannot have credits of workqueue '%s': %s", (int) en->cc->caller->pid, name,
                  why);
        if (en->claim) {
                core_claim_close(en->claim);
                en->claim = NULL;
        }
        en->refused = true;
        entry_publish(en);
}

/* Reads entry @en as the client wrote it and acts on it: 0, or -EBADMSG
 * with *@why when it broke the protocol. */
static int entry_read(struct credits_entry *en, const char **why) {
        struct callback_credits *cc = en->cc;
        char name[CMWQ_SHM_CREDIT_NAME];
        uint32_t want, returned, back;
        struct core_error e = {};
        int r;

        if (en->refused)
                return 0;
        if (!callback_shm_credits_read(cc->shm, entry_index(en), en->claim ? NULL : name, &want, &returned)) {
                *why = "a credits entry of its region names a queue without ending the name";
                return -EBADMSG;
        }
        back = returned - en->returned;
        if (back > en->granted - en->returned) {
                *why = "a credits entry of its region gave back more credits than it was granted";
                return -EBADMSG;
        }
        en->returned = returned;

        if (!en->claim) {
                r = core_claim_open(cc->core, cc->caller, name, entry_claim_changed, entry_want_now, en, &en->claim,
                                    &e);
                if (r < 0) {
                        en->claim = NULL;
                        entry_refuse(en, name, e.message);
                        return 0;
                }
                /* One claim per queue and client: twice, it would have two
                 * fair parts and two places in line. */
                for (unsigned k = 0; k < CMWQ_SHM_CREDIT_QUEUES; k++)
                        if (&cc->entries[k] != en && cc->entries[k].claim &&
                            core_claim_same_queue(cc->entries[k].claim, en->claim)) {
                                entry_refuse(en, name, "it has credits of that queue in another entry");
                                return 0;
                        }
        }
        core_claim_update(en->claim, want, back);
        entry_publish(en);
        return 0;
}

static void credits_settle(evutil_socket_t fd, short what, void *userdata) {
        struct callback_credits *cc = userdata;
        const char *why = NULL;

        (void) fd;
        (void) what;
        while (cc->marked && !cc->is_broken) {
                unsigned k = (unsigned) __builtin_ctzll(cc->marked);

                cc->marked &= cc->marked - 1;
                if (entry_read(&cc->entries[k], &why) < 0) {
                        cc->is_broken = true;
                        cc->marked = 0;
                        /* The owner frees us: nothing here is touched after. */
                        cc->broken(why, cc->userdata);
                        return;
                }
        }
}

struct callback_credits *callback_credits_new(struct core *core, const struct core_caller *caller,
                                              struct callback_shm *shm, callback_credits_broken_fn broken,
                                              void *userdata) {
        struct callback_credits *cc = calloc(1, sizeof(*cc));

        if (!cc)
                return NULL;
        cc->settle = event_new(core_event_base(core), -1, 0, credits_settle, cc);
        if (!cc->settle) {
                free(cc);
                return NULL;
        }
        cc->core = core;
        cc->caller = caller;
        cc->shm = shm;
        cc->broken = broken;
        cc->userdata = userdata;
        for (unsigned k = 0; k < CMWQ_SHM_CREDIT_QUEUES; k++)
                cc->entries[k].cc = cc;
        return cc;
}

struct callback_credits *callback_credits_free(struct callback_credits *cc) {
        if (!cc)
                return NULL;
        event_free(cc->settle);
        for (unsigned k = 0; k < CMWQ_SHM_CREDIT_QUEUES; k++)
                if (cc->entries[k].claim) {
                        core_claim_close(cc->entries[k].claim);
                        cc->entries[k].claim = NULL;
                }
        free(cc);
        return NULL;
}

void callback_credits_changed(struct callback_credits *cc, unsigned entry) {
        if (cc->is_broken || entry >= CMWQ_SHM_CREDIT_QUEUES)
                return;
        if (!cc->marked)
                event_active(cc->settle, EV_TIMEOUT, 0);
        cc->marked |= UINT64_C(1) << entry;
}

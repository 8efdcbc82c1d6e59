/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Replays a fuzz target's corpus through its LLVMFuzzerTestOneInput(), as a
 * TAP test: built with any compiler, so that "make check" (also under the
 * sanitizers) runs every seed and every regression input of the target.
 *
 * Usage: replay-TARGET [FILE|DIR]...; without arguments, the committed
 * corpus $CMWQ_TEST_SRCDIR/fuzz/corpus/TARGET.  A crash is a failed test
 * (the TAP driver sees the plan missing); an empty corpus is one too.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#error "FUZZ_TARGET names the target (its corpus directory)"
#endif

static unsigned nr_run;

static int replay_file(const char *path, const char *label) {
        FILE *f = fopen(path, "rb");
        uint8_t *buf = NULL;
        size_t len = 0, size = 0, n;

        if (!f) {
                printf("not ok %u - %s: %s\n", ++nr_run, label, strerror(errno));
                return -1;
        }
        do {
                if (size - len < 4096) {
                        size = size ? size * 2 : 65536;
                        buf = realloc(buf, size);
                        if (!buf)
                                abort();
                }
                n = fread(buf + len, 1, size - len, f);
                len += n;
        } while (n > 0);
        fclose(f);

        /* libFuzzer hands out a buffer of exactly the input's size. */
        uint8_t *exact = malloc(len ? len : 1);
        if (!exact)
                abort();
        memcpy(exact, buf, len);
        free(buf);
        fflush(stdout);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        printf("ok %u - %s (%zu bytes)\n", ++nr_run, label, len);
        return 0;
}

static int cmp_names(const struct dirent **a, const struct dirent **b) {
        return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_path(const char *path) {
        struct dirent **names;
        struct stat st;
        int n, failed = 0;

        if (stat(path, &st) < 0) {
                printf("not ok %u - %s: %s\n", ++nr_run, path, strerror(errno));
                return -1;
        }
        if (!S_ISDIR(st.st_mode))
                return replay_file(path, path);

        n = scandir(path, &names, NULL, cmp_names);
        if (n < 0) {
                printf("not ok %u - %s: %s\n", ++nr_run, path, strerror(errno));
                return -1;
        }
        for (int k = 0; k < n; k++) {
                char file[4096], label[512];

                if (names[k]->d_name[0] != '.') {
                        snprintf(file, sizeof(file), "%s/%s", path, names[k]->d_name);
                        snprintf(label, sizeof(label), "%s/%s", FUZZ_TARGET, names[k]->d_name);
                        if (replay_file(file, label) < 0)
                                failed = -1;
                }
                free(names[k]);
        }
        free(names);
        return failed;
}

int main(int argc, char **argv) {
        int failed = 0;

        if (argc > 1)
                for (int k = 1; k < argc; k++)
                        failed |= replay_path(argv[k]);
        else {
                const char *srcdir = getenv("CMWQ_TEST_SRCDIR");
                char dir[4096];

                if (!srcdir) {
                        printf("Bail out! $CMWQ_TEST_SRCDIR is not set (make check sets it)\n");
                        return 1;
                }
                snprintf(dir, sizeof(dir), "%s/fuzz/corpus/%s", srcdir, FUZZ_TARGET);
                failed |= replay_path(dir);
        }
        if (nr_run == 0) {
                printf("not ok 1 - the %s corpus is empty\n", FUZZ_TARGET);
                nr_run = 1;
                failed = -1;
        }
        printf("1..%u\n", nr_run);
        return failed ? 1 : 0;
}

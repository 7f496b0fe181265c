/* fuzz_common.h — what the libFuzzer targets share: the readers they drive
 * take a path, not a buffer, so each input is written to a file in a private
 * scratch folder (made once per process, removed at exit) first. */
#ifndef NF_FUZZ_COMMON_H
#define NF_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[64];

static void fuzz_remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* Write data to <scratch>/<name> and return its path (a static buffer). */
static const char *fuzz_write_input(const char *name, const uint8_t *data, size_t size)
{
    static char path[192];
    if (!fuzz_dir[0]) {
        snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/nlflow-fuzz-XXXXXX");
        if (!mkdtemp(fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_remove_dir);
    }
    snprintf(path, sizeof path, "%s/%s", fuzz_dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || (size && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) {
        perror("fuzz: writing the input");
        abort();
    }
    return path;
}

#endif

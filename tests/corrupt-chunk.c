/* corrupt-chunk.c — test helper: flips one byte in the middle of the largest
 * stored chunk of an nlflow cache, the way a bad disk sector would, and prints
 * the key of the result it belongs to. Usage: corrupt-chunk CACHE.db */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int status = 1;
    if (argc != 2) {
        fprintf(stderr, "usage: corrupt-chunk CACHE.db\n");
        return 2;
    }
    if (sqlite3_open(argv[1], &db) != SQLITE_OK)
        goto fail;
    if (sqlite3_prepare_v2(db, "SELECT key, idx, data FROM chunks ORDER BY length(data) DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW)
        goto fail;
    char *key = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_int64 idx = sqlite3_column_int64(st, 1);
    int n = sqlite3_column_bytes(st, 2);
    unsigned char *blob = malloc((size_t)n);
    memcpy(blob, sqlite3_column_blob(st, 2), (size_t)n);
    sqlite3_finalize(st);
    st = NULL;
    blob[n / 2] ^= 0x5a;
    if (sqlite3_prepare_v2(db, "UPDATE chunks SET data = ? WHERE key = ? AND idx = ?", -1, &st, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_bind_blob(st, 1, blob, n, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, idx);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    printf("%s\n", key);
    free(key);
    free(blob);
    status = 0;
fail:
    if (status)
        fprintf(stderr, "corrupt-chunk: %s\n", db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return status;
}

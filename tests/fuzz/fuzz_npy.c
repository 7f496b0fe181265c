/* fuzz_npy.c — libFuzzer target for the .npy reader: header only (what the
 * planner reads) and the whole array. The header must be refused or agree
 * with the array that is then read. */
#include "fuzz_common.h"

#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_input("array.npy", data, size);
    struct nf_error err = { 0 };
    int64_t rows = 0, cols = 0;
    int info = nf_npy_read_info(path, &rows, &cols, &err);
    memset(&err, 0, sizeof err);
    struct nf_value *v = nf_npy_read(path, &err);
    if ((v != NULL) != (info == 0))
        abort();   /* the header reader and the reader disagree */
    if (v && (v->u.mat.rows != rows || v->u.mat.cols != cols))
        abort();
    nf_value_unref(v);
    memset(&err, 0, sizeof err);
    return 0;
}

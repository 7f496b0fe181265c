/* fuzz_table.c — libFuzzer target for the delimited-table reader: each input
 * is read as a .tsv and as a .csv, header only and whole, through the
 * functions the load node and the planner call. */
#include "fuzz_common.h"

#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_table(const char *name, const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_input(name, data, size);
    struct nf_error err = { 0 };
    int64_t rows, cols;
    char *names = NULL;
    if (nf_table_read_header(path, NULL, 0, &rows, &cols, &names, &err) == 0 &&
        (rows < 0 || cols < 0))
        abort();
    free(names);
    memset(&err, 0, sizeof err);
    struct nf_value *v = nf_table_read(path, NULL, 0, &err);
    nf_value_unref(v);
    memset(&err, 0, sizeof err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_table("table.tsv", data, size);
    read_table("table.csv", data, size);
    return 0;
}

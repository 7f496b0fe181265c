/* table_io.c — delimited tables (TSV, CSV) and .npy arrays.
 *
 * Tables: the whole file is read into memory and split in place into cells
 * (a BIDS events or confounds file is small next to the images it describes).
 * The first record is the header. A column is numeric when every cell parses
 * completely as a number or is a missing value (empty, "n/a", "NaN"), which
 * become NaN; any other column keeps its strings, e.g. BIDS `trial_type` used
 * as class labels. CSV fields may be double-quoted ("" is a quote inside);
 * TSV is not quoted, as BIDS specifies.
 *
 * .npy: format versions 1.0, 2.0 (and 3.0, which differs only in header text
 * encoding), little-endian float32 or float64, C order, 1-D or 2-D. Everything
 * else is refused with a message that says what the file holds, because the
 * usual cause is an array saved from numpy with an unexpected dtype or shape.
 *
 * Every writer goes through nf_atomic_* (temporary file + rename).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "io.h"
#include "core/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .npy reader and writer assume a little-endian host"
#endif

const char *nf_special_file_kind(unsigned mode)
{
    if (S_ISREG(mode) || S_ISDIR(mode))
        return NULL;
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

int nf_refuse_special_file(const char *path, struct nf_error *err)
{
    struct stat st;
    const char *kind;
    if (stat(path, &st) != 0 || !(kind = nf_special_file_kind(st.st_mode)))
        return 0;   /* missing or unreadable: the reader's own open says why */
    return NF_FAIL(err, NF_EIO, "cannot read '%s': it is %s, not a regular file", path, kind);
}

enum nf_file_format nf_file_format_of(const char *path)
{
    if (!path)
        return NF_FMT_UNKNOWN;
    if (nf_path_has_suffix(path, ".nii") || nf_path_has_suffix(path, ".nii.gz"))
        return NF_FMT_NIFTI;
    if (nf_path_has_suffix(path, ".tsv") || nf_path_has_suffix(path, ".csv") ||
        nf_path_has_suffix(path, ".txt"))
        return NF_FMT_TABLE;
    if (nf_path_has_suffix(path, ".npy"))
        return NF_FMT_NPY;
    return NF_FMT_UNKNOWN;
}

static char delimiter_of(const char *path)
{
    return nf_path_has_suffix(path, ".csv") ? ',' : '\t';
}

/* ---- table parsing ---- */

/* A table split into cells: cells[r * n_cols + c], row 0 is the header. The
 * cells point into buf, which the parse modified in place. */
struct cells {
    char *buf;
    char **cell;
    size_t n_cols;
    size_t n_records;   /* header included */
    size_t n_cells, cap;
};

static void cells_release(struct cells *t)
{
    free(t->buf);
    free(t->cell);
    memset(t, 0, sizeof *t);
}

static int cells_push(struct cells *t, char *s)
{
    if (t->n_cells == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        char **nc = ncap > SIZE_MAX / sizeof *nc ? NULL : nf_realloc(t->cell, ncap * sizeof *nc);
        if (!nc)
            return -1;
        t->cell = nc;
        t->cap = ncap;
    }
    t->cell[t->n_cells++] = s;
    return 0;
}

/* Split buf into records and fields. Blank lines are skipped. Each record must
 * have as many fields as the header. */
static int split_cells(const char *path, struct cells *t, size_t len, char delim,
                       struct nf_error *err)
{
    char *p = t->buf, *end = t->buf + len;
    int line = 1;
    bool quoting = delim == ',';
    size_t n_fields;

    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;   /* UTF-8 byte order mark from spreadsheet exports */
    while (p < end) {
        int record_line = line;
        if (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n')) {
            p += *p == '\r' ? 2 : 1;
            line++;
            continue;
        }
        n_fields = 0;
        for (;;) {
            char *field, stop;
            if (quoting && *p == '"') {
                char *q = p++;
                field = q;
                for (;;) {
                    if (p >= end)
                        return NF_FAIL(err, NF_EDATA,
                                       "cannot read '%s': line %d: quoted field is never closed",
                                       path, record_line);
                    if (*p == '"' && p + 1 < end && p[1] == '"') {
                        *q++ = '"';
                        p += 2;
                    } else if (*p == '"') {
                        p++;
                        break;
                    } else {
                        if (*p == '\n')
                            line++;
                        *q++ = *p++;
                    }
                }
                /* Text after the closing quote is kept, as spreadsheets do. */
                while (p < end && *p != delim && *p != '\n')
                    *q++ = *p++;
                stop = p < end ? *p : '\0';
                *q = '\0';
                if (q > field && q[-1] == '\r' && stop != delim)
                    q[-1] = '\0';
            } else {
                field = p;
                while (p < end && *p != delim && *p != '\n')
                    p++;
                stop = p < end ? *p : '\0';
                if (stop == '\n' && p > field && p[-1] == '\r')
                    p[-1] = '\0';
                *p = '\0';   /* p == end is the NUL nf_read_file appended */
            }
            if (cells_push(t, field) < 0)
                goto oom;
            n_fields++;
            p++;
            if (stop != delim)
                break;
        }
        if (t->n_records == 0) {
            t->n_cols = n_fields;
        } else if (n_fields != t->n_cols) {
            return NF_FAIL(err, NF_EDATA,
                           "cannot read '%s': line %d has %zu fields (expected %zu, as in "
                           "the header)", path, record_line, n_fields, t->n_cols);
        }
        t->n_records++;
        line++;
    }
    return 0;
oom:
    return NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
}

static int compare_names(const void *a, const void *b, void *names)
{
    char *const *n = names;
    size_t ia = *(const size_t *)a, ib = *(const size_t *)b;
    int c = strcmp(n[ia], n[ib]);
    return c ? c : (ia > ib) - (ia < ib);
}

/* The first column name (in column order) that appears again, and where:
 * sorted, so that a table of 100,000 columns is not checked pair by pair.
 * Returns false when every name is unique. */
static bool find_repeated_name(char *const *names, size_t n, size_t *first, size_t *again,
                               bool *oom)
{
    size_t *order = nf_malloc((n + 1) * sizeof *order);
    bool found = false;
    *oom = !order;
    if (!order)
        return false;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, compare_names, (void *)names);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[order[i - 1]], names[order[i]]) == 0 &&
            (i < 2 || strcmp(names[order[i - 2]], names[order[i]]) != 0) &&
            (!found || order[i - 1] < *first)) {
            *first = order[i - 1];   /* a name's first two columns, ties by index */
            *again = order[i];
            found = true;
        }
    free(order);
    return found;
}

/* Read and split a table file; checks that there is a header and data rows and
 * that column names are unique. */
static int load_cells(const char *path, struct cells *t, struct nf_error *err)
{
    size_t len = 0;
    int rc;

    memset(t, 0, sizeof *t);
    if (nf_refuse_special_file(path, err) < 0)
        return err->code;
    /* a table (events, participants, confounds: files of others) is read
       whole: a regular file of at most half this machine's memory */
    uint64_t mem = nf_physical_memory();
    t->buf = nf_read_untrusted_file(path, mem ? (size_t)(mem / 2) : (size_t)1 << 34, "table", false, &len, err);
    if (!t->buf)
        return err->code ? err->code : NF_EIO;
    if (strlen(t->buf) != len) {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot read '%s': not a text table (it contains NUL bytes)", path);
        goto fail;
    }
    NF_TRY(rc = split_cells(path, t, len, delimiter_of(path), err));
    if (t->n_records == 0) {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': file is empty (expected a header row)",
                     path);
        goto fail;
    }
    if (t->n_records == 1) {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': no data rows after the header", path);
        goto fail;
    }
    size_t a = 0, b = 0;
    bool oom;
    if (find_repeated_name(t->cell, t->n_cols, &a, &b, &oom)) {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot read '%s': column name '%s' appears twice "
                     "(columns %zu and %zu)", path, t->cell[a], a + 1, b + 1);
        goto fail;
    }
    if (oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
        goto fail;
    }
    return 0;
fail:
    cells_release(t);
    return rc;
}

/* Map requested column names to indices (all columns when columns is NULL). */
static int select_columns(const char *path, const struct cells *t,
                          const char *const *columns, size_t n_columns, size_t **out,
                          size_t *n_out, struct nf_error *err)
{
    size_t n = columns ? n_columns : t->n_cols;
    if (n > NF_TABLE_MAX_COLUMNS)   /* said here, where the file is known (and validate reads headers) */
        return NF_FAIL(err, NF_EDATA, "cannot read '%s': it has %zu columns; tables of at most %d are read", path,
                       n, NF_TABLE_MAX_COLUMNS);
    size_t *sel = nf_calloc(n ? n : 1, sizeof *sel);

    if (!sel)
        return NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
    for (size_t i = 0; i < n; i++) {
        size_t c;
        if (!columns) {
            sel[i] = i;
            continue;
        }
        for (c = 0; c < t->n_cols; c++)
            if (strcmp(t->cell[c], columns[i]) == 0)
                break;
        if (c == t->n_cols) {
            struct nf_strbuf sb;
            nf_strbuf_init(&sb);
            for (size_t k = 0; k < t->n_cols; k++)
                nf_strbuf_addf(&sb, "%s%s", k ? ", " : "", t->cell[k]);
            NF_FAIL(err, NF_EDATA, "cannot read '%s': no column '%s' (available: %s)", path,
                    columns[i], sb.buf ? sb.buf : "");
            nf_strbuf_release(&sb);
            free(sel);
            return NF_EDATA;
        }
        sel[i] = c;
    }
    *out = sel;
    *n_out = n;
    return 0;
}

/* A cell as a number: empty, "n/a" and "NaN" are missing (NaN). False when the
 * cell is not a number at all. */
static bool parse_number(const char *s, double *out)
{
    const char *b = s, *e;
    char *stop;

    while (*b == ' ')
        b++;
    e = b + strlen(b);
    while (e > b && e[-1] == ' ')
        e--;
    if (e == b || ((e - b) == 3 && (strncasecmp(b, "n/a", 3) == 0 ||
                                    strncasecmp(b, "nan", 3) == 0))) {
        *out = NAN;
        return true;
    }
    errno = 0;
    *out = strtod(b, &stop);
    return stop == e;
}

int nf_table_read_info(const char *path, const char *const *columns, size_t n_columns,
                       int64_t *rows, int64_t *cols, struct nf_error *err)
{
    return nf_table_read_header(path, columns, n_columns, rows, cols, NULL, err);
}

int nf_table_read_header(const char *path, const char *const *columns, size_t n_columns,
                         int64_t *rows, int64_t *cols, char **names, struct nf_error *err)
{
    struct cells t;
    size_t *sel = NULL, n_sel = 0;
    int rc;

    if (names)
        *names = NULL;
    NF_TRY(rc = load_cells(path, &t, err));
    rc = select_columns(path, &t, columns, n_columns, &sel, &n_sel, err);
    if (rc == 0) {
        *rows = (int64_t)t.n_records - 1;
        *cols = (int64_t)n_sel;
    }
    if (rc == 0 && names) {
        struct nf_strbuf sb;
        nf_strbuf_init(&sb);
        for (size_t i = 0; i < n_sel; i++)
            nf_strbuf_addf(&sb, "%s\n", t.cell[sel[i]]);
        *names = sb.oom ? NULL : nf_strbuf_detach(&sb);
        nf_strbuf_release(&sb);
        if (!*names)
            rc = NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
    }
    free(sel);
    cells_release(&t);
fail:
    return rc;
}

struct nf_value *nf_table_read(const char *path, const char *const *columns,
                               size_t n_columns, struct nf_error *err)
{
    struct cells t;
    struct nf_value *v = NULL;
    size_t *sel = NULL, n_sel = 0, n_rows;
    int rc;

    if (load_cells(path, &t, err) < 0)
        return NULL;
    NF_TRY(rc = select_columns(path, &t, columns, n_columns, &sel, &n_sel, err));
    n_rows = t.n_records - 1;
    v = nf_value_new_table((int64_t)n_rows, (int64_t)n_sel, err);
    if (!v)
        goto fail;
    for (size_t i = 0; i < n_sel; i++) {
        struct nf_column *col = &v->u.tab.cols[i];
        size_t c = sel[i];
        bool numeric = true;

        col->name = nf_strdup(t.cell[c]);
        col->num = nf_malloc(n_rows * sizeof *col->num);
        if (!col->name || !col->num)
            goto oom;
        for (size_t r = 0; r < n_rows && numeric; r++)
            numeric = parse_number(t.cell[(r + 1) * t.n_cols + c], &col->num[r]);
        col->numeric = numeric;
        if (numeric)
            continue;
        free(col->num);
        col->num = NULL;
        col->str = nf_calloc(n_rows, sizeof *col->str);
        if (!col->str)
            goto oom;
        for (size_t r = 0; r < n_rows; r++)
            if (!(col->str[r] = nf_strdup(t.cell[(r + 1) * t.n_cols + c])))
                goto oom;
    }
    nf_value_set_path(v, path);
    free(sel);
    cells_release(&t);
    return v;

oom:
    NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
fail:
    nf_value_unref(v);
    free(sel);
    cells_release(&t);
    return NULL;
}

/* ---- table writing ---- */

static void put_number(FILE *fp, double x)
{
    if (isnan(x))
        fputs("n/a", fp);
    else
        fprintf(fp, "%.9g", x);
}

/* A float cell: the text of "%.9g" (nf_format_float_g9, much faster than
 * printf: maps are written as one long row of them). */
static void put_float(FILE *fp, float x)
{
    char buf[32];
    if (isnan(x)) {
        fputs("n/a", fp);
        return;
    }
    fwrite(buf, 1, (size_t)nf_format_float_g9(x, buf), fp);
}

/* Write one text cell; CSV quotes when needed, TSV cannot hold tabs/newlines. */
static int put_text(FILE *fp, const char *s, char delim)
{
    bool special = strchr(s, delim) || strchr(s, '\n') || strchr(s, '\r') ||
                   (delim == ',' && strchr(s, '"'));
    if (!special) {
        fputs(s, fp);
        return 0;
    }
    if (delim != ',')
        return -1;
    fputc('"', fp);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', fp);
        fputc(*s, fp);
    }
    fputc('"', fp);
    return 0;
}

int nf_table_write(const char *path, const struct nf_table *t, struct nf_error *err)
{
    struct nf_atomic a = {0};
    char delim = delimiter_of(path);
    int rc;

    NF_TRY(rc = nf_atomic_open(&a, path, err));
    for (int64_t c = 0; c < t->n_cols; c++) {
        if (c)
            fputc(delim, a.fp);
        if (put_text(a.fp, t->cols[c].name ? t->cols[c].name : "", delim) < 0)
            goto bad_text;
    }
    fputc('\n', a.fp);
    for (int64_t r = 0; r < t->n_rows; r++) {
        for (int64_t c = 0; c < t->n_cols; c++) {
            const struct nf_column *col = &t->cols[c];
            if (c)
                fputc(delim, a.fp);
            if (col->numeric)
                put_number(a.fp, col->num[r]);
            else if (put_text(a.fp, col->str[r] ? col->str[r] : "", delim) < 0)
                goto bad_text;
        }
        fputc('\n', a.fp);
    }
    NF_TRY(rc = nf_atomic_commit(&a, err));
    return 0;

bad_text:
    rc = NF_FAIL(err, NF_EDATA,
                 "cannot write '%s': a value contains a tab or newline, which TSV cannot "
                 "hold (write a .csv instead)", path);
fail:
    nf_atomic_abort(&a);
    return rc;
}

int nf_matrix_write_tsv(const char *path, const struct nf_matrix *m, struct nf_error *err)
{
    struct nf_atomic a = {0};
    char delim = delimiter_of(path);
    int rc;

    NF_TRY(rc = nf_atomic_open(&a, path, err));
    for (int64_t c = 0; c < m->cols; c++) {
        if (c)
            fputc(delim, a.fp);
        if (m->col_names && m->col_names[c]) {
            if (put_text(a.fp, m->col_names[c], delim) < 0)
                goto bad_text;
        } else {
            char name[24] = "c";
            fwrite(name, 1, (size_t)nf_format_uint((uint64_t)c, name + 1) + 1, a.fp);
        }
    }
    fputc('\n', a.fp);
    for (int64_t r = 0; r < m->rows; r++) {
        for (int64_t c = 0; c < m->cols; c++) {
            if (c)
                fputc(delim, a.fp);
            put_float(a.fp, m->data[r * m->cols + c]);
        }
        fputc('\n', a.fp);
    }
    NF_TRY(rc = nf_atomic_commit(&a, err));
    return 0;

bad_text:
    rc = NF_FAIL(err, NF_EDATA,
                 "cannot write '%s': a column name contains a tab or newline", path);
fail:
    nf_atomic_abort(&a);
    return rc;
}

/* ---- .npy ---- */

struct npy_header {
    int item_size;          /* 4 or 8 */
    int64_t rows, cols;
    uint64_t data_offset;   /* bytes from the start of the file */
    uint64_t data_bytes;
};

/* Find `'key':` in a numpy header dict and return the text after the colon. */
static const char *npy_field(const char *hdr, const char *key)
{
    char quoted[32];
    const char *p;

    snprintf(quoted, sizeof quoted, "'%s'", key);
    p = strstr(hdr, quoted);
    if (!p) {
        snprintf(quoted, sizeof quoted, "\"%s\"", key);
        p = strstr(hdr, quoted);
    }
    if (!p)
        return NULL;
    p += strlen(quoted);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

/* Parse the magic, version and header dict; checks dtype, order and shape. */
static int npy_parse_header(const char *path, FILE *fp, struct npy_header *h,
                            struct nf_error *err)
{
    unsigned char pre[12];
    uint32_t hlen;
    size_t pre_len;
    char *text = NULL, descr[32] = "";
    const char *p;
    int64_t shape[8];
    int ndim = 0, rc = 0;
    char shape_text[160] = "(";

    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': not a .npy file (bad magic bytes)", path);
        goto fail;
    }
    if (pre[6] == 1) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
        pre_len = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2)
            goto truncated_header;
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
               (uint32_t)pre[11] << 24;
        pre_len = 12;
    } else {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot read '%s': .npy format version %d.%d is not supported "
                     "(expected 1.0 or 2.0)", path, pre[6], pre[7]);
        goto fail;
    }
    if (hlen > (1u << 20)) {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': .npy header is implausibly long "
                     "(%" PRIu32 " bytes)", path, hlen);
        goto fail;
    }
    text = nf_malloc((size_t)hlen + 1);
    if (!text) {
        rc = NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
        goto fail;
    }
    if (fread(text, 1, hlen, fp) != hlen)
        goto truncated_header;
    text[hlen] = '\0';

    /* descr */
    p = npy_field(text, "descr");
    if (p && (*p == '\'' || *p == '"')) {
        char q = *p++;
        size_t n = 0;
        while (p[n] && p[n] != q && n < sizeof descr - 1)
            n++;
        memcpy(descr, p, n);
        descr[n] = '\0';
    }
    if (strcmp(descr, "<f4") == 0) {
        h->item_size = 4;
    } else if (strcmp(descr, "<f8") == 0) {
        h->item_size = 8;
    } else {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot read '%s': .npy dtype '%s' is not supported (expected '<f4' "
                     "or '<f8': little-endian float32 or float64)", path,
                     descr[0] ? descr : (p ? "(not a simple dtype)" : "(missing)"));
        goto fail;
    }
    /* fortran_order */
    p = npy_field(text, "fortran_order");
    if (!p || strncmp(p, "False", 5) != 0) {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot read '%s': .npy array is stored in Fortran order "
                     "(got fortran_order %s, expected False; save it with "
                     "np.ascontiguousarray)", path, p && strncmp(p, "True", 4) == 0 ?
                     "True" : "missing");
        goto fail;
    }
    /* shape */
    p = npy_field(text, "shape");
    if (!p || *p != '(') {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': .npy header has no shape", path);
        goto fail;
    }
    p++;
    for (;;) {
        char *stop;
        long long d;
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        errno = 0;
        d = strtoll(p, &stop, 10);
        if (stop == p || errno || d < 0 || ndim == 8) {
            rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': .npy shape is malformed", path);
            goto fail;
        }
        snprintf(shape_text + strlen(shape_text), sizeof shape_text - strlen(shape_text),
                 "%s%lld", ndim ? ", " : "", d);
        shape[ndim++] = d;
        p = stop;
    }
    snprintf(shape_text + strlen(shape_text), sizeof shape_text - strlen(shape_text),
             "%s)", ndim == 1 ? "," : "");
    if (ndim == 1) {
        h->rows = 1;
        h->cols = shape[0];
    } else if (ndim == 2) {
        h->rows = shape[0];
        h->cols = shape[1];
    } else {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot read '%s': .npy array has shape %s (expected 1-D (n,) or "
                     "2-D (rows, cols))", path, shape_text);
        goto fail;
    }
    if (h->rows == 0 || h->cols == 0) {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': .npy array is empty (shape %s)", path,
                     shape_text);
        goto fail;
    }
    {
        int64_t n;
        /* at most INT64_MAX / 8 elements: their byte count plus the header's
         * then stays below 2^63, so the size checks below cannot wrap */
        if (__builtin_mul_overflow(h->rows, h->cols, &n) ||
            (uint64_t)n > (uint64_t)INT64_MAX / 8 || (uint64_t)n > SIZE_MAX / 8) {
            rc = NF_FAIL(err, NF_EDATA, "cannot read '%s': .npy array is too large (shape %s)",
                         path, shape_text);
            goto fail;
        }
        h->data_bytes = (uint64_t)n * (uint64_t)h->item_size;
    }
    h->data_offset = pre_len + hlen;
    free(text);
    return 0;

truncated_header:
    rc = NF_FAIL(err, NF_EIO, "cannot read '%s': file is truncated inside the .npy header",
                 path);
fail:
    free(text);
    return rc;
}

/* Open, parse and check the file is long enough for its data. */
static int npy_open(const char *path, FILE **out, struct npy_header *h, struct nf_error *err)
{
    FILE *fp;
    struct stat st;
    int rc;

    if (nf_refuse_special_file(path, err) < 0)
        return err->code;
    fp = fopen(path, "rb");
    if (!fp)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
    NF_TRY(rc = npy_parse_header(path, fp, h, err));
    if (fstat(fileno(fp), &st) != 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)st.st_size < h->data_offset ||
        (uint64_t)st.st_size - h->data_offset < h->data_bytes) {
        uint64_t have = (uint64_t)st.st_size > h->data_offset ?
                        (uint64_t)st.st_size - h->data_offset : 0;
        rc = NF_FAIL(err, NF_EIO,
                     "cannot read '%s': file is truncated (expected %" PRIu64 " bytes of "
                     "array data, got %" PRIu64 ")", path, h->data_bytes, have);
        goto fail;
    }
    *out = fp;
    return 0;
fail:
    fclose(fp);
    return rc;
}

int nf_npy_read_info(const char *path, int64_t *rows, int64_t *cols, struct nf_error *err)
{
    struct npy_header h;
    FILE *fp = NULL;
    int rc;

    NF_TRY(rc = npy_open(path, &fp, &h, err));
    fclose(fp);
    *rows = h.rows;
    *cols = h.cols;
    return 0;
fail:
    return rc;
}

struct nf_value *nf_npy_read(const char *path, struct nf_error *err)
{
    struct npy_header h;
    struct nf_value *v = NULL;
    FILE *fp = NULL;
    double *chunk = NULL;
    size_t n;

    if (npy_open(path, &fp, &h, err) < 0)
        return NULL;
    v = nf_value_new_matrix(h.rows, h.cols, NULL, err);
    if (!v)
        goto fail;
    n = (size_t)(h.rows * h.cols);
    if (h.item_size == 4) {
        if (fread(v->u.mat.data, sizeof(float), n, fp) != n)
            goto short_read;
    } else {
        /* float64 -> float32 in bounded chunks. */
        const size_t step = 1u << 16;
        chunk = nf_malloc(step * sizeof *chunk);
        if (!chunk) {
            NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
            goto fail;
        }
        for (size_t done = 0; done < n;) {
            size_t k = n - done < step ? n - done : step;
            if (fread(chunk, sizeof *chunk, k, fp) != k)
                goto short_read;
            for (size_t i = 0; i < k; i++)
                v->u.mat.data[done + i] = (float)chunk[i];
            done += k;
        }
    }
    free(chunk);
    fclose(fp);
    nf_value_set_path(v, path);
    return v;

short_read:
    NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path,
            ferror(fp) ? strerror(errno) : "file is truncated");
fail:
    free(chunk);
    fclose(fp);
    nf_value_unref(v);
    return NULL;
}

int nf_npy_write(const char *path, const struct nf_matrix *m, struct nf_error *err)
{
    struct nf_atomic a = {0};
    char dict[128];
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t len, padded, n;
    int rc;

    len = (size_t)snprintf(dict, sizeof dict,
                           "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64
                           ", %" PRId64 "), }", m->rows, m->cols);
    /* numpy pads the header with spaces and a newline to a multiple of 64. */
    padded = (sizeof pre + len + 1 + 63) / 64 * 64 - sizeof pre;
    pre[8] = (unsigned char)(padded & 0xff);
    pre[9] = (unsigned char)(padded >> 8);
    n = (size_t)(m->rows * m->cols);

    NF_TRY(rc = nf_atomic_open(&a, path, err));
    fwrite(pre, 1, sizeof pre, a.fp);
    fwrite(dict, 1, len, a.fp);
    for (size_t i = len; i + 1 < padded; i++)
        fputc(' ', a.fp);
    fputc('\n', a.fp);
    fwrite(m->data, sizeof(float), n, a.fp);
    /* nf_atomic_commit checks ferror, so short writes above are caught there. */
    NF_TRY(rc = nf_atomic_commit(&a, err));
    return 0;
fail:
    nf_atomic_abort(&a);
    return rc;
}

/* run_record.c — a node run's record in the cache: building it, checking a
 * stored one cell by cell (a record is read back from a file other people
 * and machines write), and whether the files it names still stand
 * (run_record.h).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_record.h"
#include "core/util.h"

static const char *const rec_names[NF_REC_COLS] = { "what", "port", "index", "text", "hash" };

static bool numeric_column(int c)
{
    return c == NF_REC_PORT || c == NF_REC_INDEX;
}

struct nf_value *nf_run_record_build(const struct nf_run_row *rows, size_t n, struct nf_error *err)
{
    struct nf_value *v = nf_value_new_table((int64_t)n, NF_REC_COLS, err);
    if (!v)
        return NULL;
    struct nf_table *t = &v->u.tab;
    for (int c = 0; c < NF_REC_COLS; c++) {
        struct nf_column *col = &t->cols[c];
        col->name = nf_strdup(rec_names[c]);
        col->numeric = numeric_column(c);
        if (col->numeric)
            col->num = nf_calloc(n + 1, sizeof *col->num);
        else
            col->str = nf_calloc(n + 1, sizeof *col->str);
        if (!col->name || (col->numeric ? !col->num : !col->str))
            goto oom;
    }
    for (size_t r = 0; r < n; r++) {
        t->cols[NF_REC_PORT].num[r] = rows[r].port;
        t->cols[NF_REC_INDEX].num[r] = (double)rows[r].index;
        t->cols[NF_REC_WHAT].str[r] = nf_strdup(rows[r].what);
        t->cols[NF_REC_TEXT].str[r] = nf_strdup(rows[r].text ? rows[r].text : "");
        t->cols[NF_REC_HASH].str[r] = nf_strdup(rows[r].hash);
        if (!t->cols[NF_REC_WHAT].str[r] || !t->cols[NF_REC_TEXT].str[r] || !t->cols[NF_REC_HASH].str[r])
            goto oom;
    }
    return v;
oom:
    nf_value_unref(v);
    NF_FAIL(err, NF_ENOMEM, "out of memory");
    return NULL;
}

/* A whole number in [lo, hi] (NaN and fractions are not). */
static bool whole_in(double x, double lo, double hi)
{
    return x >= lo && x <= hi && x == floor(x);
}

static bool row_ok(const struct nf_table *t, int64_t r, char *why, size_t why_size)
{
    for (int c = 0; c < NF_REC_COLS; c++)
        if (!numeric_column(c) && !t->cols[c].str[r]) {
            snprintf(why, why_size, "run record row %" PRId64 ": no %s", r, rec_names[c]);
            return false;
        }
    const char *what = t->cols[NF_REC_WHAT].str[r];
    double port = t->cols[NF_REC_PORT].num[r], index = t->cols[NF_REC_INDEX].num[r];
    bool out = strcmp(what, "out") == 0, label = strcmp(what, "label") == 0;
    bool file = strcmp(what, "file") == 0;
    struct nf_key k;
    if (!out && !label && !file)
        snprintf(why, why_size, "run record row %" PRId64 ": unknown kind '%.20s'", r, what);
    else if (!whole_in(port, file ? -1 : 0, INT32_MAX))
        snprintf(why, why_size, "run record row %" PRId64 ": port %g", r, port);
    else if (!whole_in(index, out ? -1 : 0, INT32_MAX))
        snprintf(why, why_size, "run record row %" PRId64 ": index %g", r, index);
    else if (file && (!t->cols[NF_REC_TEXT].str[r][0] || nf_key_parse(t->cols[NF_REC_HASH].str[r], &k) < 0))
        snprintf(why, why_size, "run record row %" PRId64 ": bad file entry", r);
    else
        return true;
    return false;
}

bool nf_run_record_check(const struct nf_value *rec, char *why, size_t why_size)
{
    if (!rec || rec->kind != NF_KIND_TABLE || rec->u.tab.n_cols != NF_REC_COLS) {
        snprintf(why, why_size, "not a run record");
        return false;
    }
    const struct nf_table *t = &rec->u.tab;
    for (int c = 0; c < NF_REC_COLS; c++)
        if (!t->cols[c].name || strcmp(t->cols[c].name, rec_names[c]) != 0 ||
            t->cols[c].numeric != numeric_column(c) ||
            (t->n_rows > 0 && (numeric_column(c) ? !t->cols[c].num : !t->cols[c].str))) {
            snprintf(why, why_size, "not a run record (column %d)", c);
            return false;
        }
    for (int64_t r = 0; r < t->n_rows; r++)
        if (!row_ok(t, r, why, why_size))
            return false;
    return true;
}

/* Written files are recorded relative to the outputs folder when they are in
 * it ("@outputs/sub-01_x.nii.gz"), so that they are checked where the current
 * outputs folder is, and by absolute path otherwise. */
#define OUTPUTS_MARK "@outputs/"

char *nf_run_recorded_path(const char *path, const char *outputs_dir)
{
    char *real = nf_realpath(path);
    char *out_real = outputs_dir ? nf_realpath(outputs_dir) : NULL;
    char *rec = NULL;
    size_t n = out_real ? strlen(out_real) : 0;
    if (real && out_real && strncmp(real, out_real, n) == 0 && real[n] == '/')
        rec = nf_asprintf(OUTPUTS_MARK "%s", real + n + 1);
    else
        rec = nf_strdup(real ? real : path);
    free(real);
    free(out_real);
    return rec;
}

static char *resolved_path(const char *recorded, const char *outputs_dir)
{
    size_t n = strlen(OUTPUTS_MARK);
    if (strncmp(recorded, OUTPUTS_MARK, n) == 0)
        return outputs_dir ? nf_path_join(outputs_dir, recorded + n) : NULL;
    return nf_strdup(recorded);
}

int nf_run_files_match(struct nf_cache *c, const struct nf_table *t, const char *outputs_dir,
                       char **stale)
{
    for (int64_t r = 0; r < t->n_rows; r++) {
        if (strcmp(t->cols[NF_REC_WHAT].str[r], "file") != 0)
            continue;
        struct nf_key want, got;
        struct nf_error ferr = { 0 };
        char *path = resolved_path(t->cols[NF_REC_TEXT].str[r], outputs_dir);
        bool same = path && nf_key_parse(t->cols[NF_REC_HASH].str[r], &want) == 0 &&
                    nf_cache_file_hash(c, path, &got, &ferr) == 0 && nf_key_equal(want, got);
        if (!same) {   /* gone, unreadable or edited: write it again */
            if (stale)
                *stale = path ? path : nf_strdup(t->cols[NF_REC_TEXT].str[r]);
            else
                free(path);
            return 0;
        }
        free(path);
    }
    return 1;
}

int nf_run_valid(struct nf_cache *c, struct nf_key run, const char *outputs_dir, char **stale,
                 struct nf_error *err)
{
    struct nf_value *rec = NULL;
    char why[128];
    if (stale)
        *stale = NULL;
    int rc = nf_cache_get(c, run, &rec, err);
    if (rc != 1)
        return rc;
    rc = nf_run_record_check(rec, why, sizeof why) ? nf_run_files_match(c, &rec->u.tab, outputs_dir, stale)
                                                   : 0;
    nf_value_unref(rec);
    return rc;
}

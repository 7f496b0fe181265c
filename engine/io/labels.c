/* labels.c — names of an atlas's integer labels, read from the text files
 * that ship beside atlases, and where to look for them.
 *
 * An atlas volume holds integers; people want region names. Three formats
 * carry them, chosen by the file name:
 * - `*.tsv`: a BIDS `_dseg.tsv`, a header row with columns `index` and `name`
 *   (others ignored);
 * - `*.lut`: a colour look-up table, either FreeSurferColorLUT's
 *   "index name R G B A" (numbers after the name) or FSL's "index R G B name"
 *   (three numbers, then a name that may hold spaces);
 * - anything else (mricron's `aal.nii.txt`): "index name [code]".
 * Fields are separated by spaces or tabs, '#' starts a comment line, CR LF
 * line ends (mricron-data's files) are accepted. Whatever is wrong (an index
 * that is not an integer, a duplicate, an empty name, a binary file, an empty
 * one) is an error naming the file and the line, because a table that names
 * the wrong regions is worse than none. Files are bounded (NF_LABELS_MAX_BYTES)
 * so that a mistaken path cannot exhaust memory.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/util.h"
#include "io/io.h"

enum label_format { LBL_TXT, LBL_LUT, LBL_DSEG };

static void label_names_init(struct nf_label_names *l)
{
    memset(l, 0, sizeof *l);
}

void nf_label_names_release(struct nf_label_names *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].name);
    free(l->v);
    free(l->path);
    label_names_init(l);
}

static enum label_format format_of(const char *path)
{
    if (nf_path_has_suffix(path, ".tsv"))
        return LBL_DSEG;
    if (nf_path_has_suffix(path, ".lut"))
        return LBL_LUT;
    return LBL_TXT;
}

/* Split a line in place into at most max fields at runs of spaces/tabs (TSV:
 * at every tab, so that empty cells count). Returns the number of fields. */
static size_t split_fields(char *line, bool tabs_only, char **field, size_t max)
{
    size_t n = 0;
    char *s = line;
    if (tabs_only) {
        while (n < max) {
            field[n++] = s;
            char *tab = strchr(s, '\t');
            if (!tab)
                break;
            *tab = '\0';
            s = tab + 1;
        }
        return n;
    }
    while (*s && n < max) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        field[n++] = s;
        while (*s && *s != ' ' && *s != '\t')
            s++;
        if (*s)
            *s++ = '\0';
    }
    return n;
}

static bool is_number(const char *s)
{
    char *end;
    if (!*s)
        return false;
    errno = 0;
    (void)strtod(s, &end);
    return *end == '\0' && errno == 0;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    size_t lead = strspn(s, " \t");
    memmove(s, s + lead, n - lead + 1);
}

static int add_label(struct nf_label_names *l, const char *path, int line, const char *index_text,
                     const char *name, size_t *cap, struct nf_error *err)
{
    char *end;
    errno = 0;
    long long index = strtoll(index_text, &end, 10);
    if (!*index_text || *end || errno || index < 0 || index > NF_LABELS_MAX_INDEX)
        return NF_FAIL(err, NF_EDATA,
                       "label file '%s', line %d: index '%s' is not an integer from 0 to %d",
                       path, line, index_text, NF_LABELS_MAX_INDEX);
    if (!*name)
        return NF_FAIL(err, NF_EDATA, "label file '%s', line %d: label %lld has an empty name",
                       path, line, index);
    if (strlen(name) > NF_LABELS_MAX_NAME)
        return NF_FAIL(err, NF_EDATA,
                       "label file '%s', line %d: the name of label %lld is longer than %d "
                       "characters", path, line, index, NF_LABELS_MAX_NAME);
    if (l->n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 64;
        struct nf_label_name *grown = nf_realloc(l->v, ncap * sizeof *grown);
        if (!grown)
            return NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
        l->v = grown;
        *cap = ncap;
    }
    if (!(l->v[l->n].name = nf_strdup(name)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
    l->v[l->n].line = line;
    l->v[l->n++].index = (int64_t)index;
    return 0;
}

static int by_index_then_line(const void *pa, const void *pb)
{
    const struct nf_label_name *a = *(const struct nf_label_name *const *)pa;
    const struct nf_label_name *b = *(const struct nf_label_name *const *)pb;
    if (a->index != b->index)
        return a->index < b->index ? -1 : 1;
    return (a->line > b->line) - (a->line < b->line);
}

/* A label named twice: reported at the first line that repeats one (sorted,
 * not pairwise, so that a large file stays O(n log n)). */
static int check_unique(const struct nf_label_names *l, const char *path, struct nf_error *err)
{
    const struct nf_label_name **order = nf_malloc((l->n ? l->n : 1) * sizeof *order);
    const struct nf_label_name *first = NULL, *again = NULL;
    if (!order)
        return NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
    for (size_t i = 0; i < l->n; i++)
        order[i] = &l->v[i];
    qsort(order, l->n, sizeof *order, by_index_then_line);
    for (size_t i = 1; i < l->n; i++)
        if (order[i]->index == order[i - 1]->index && (!again || order[i]->line < again->line)) {
            size_t f = i;
            while (f > 0 && order[f - 1]->index == order[i]->index)
                f--;
            first = order[f];
            again = order[i];
        }
    free(order);
    if (!again)
        return 0;
    return NF_FAIL(err, NF_EDATA, "label file '%s', line %d: label %lld is named twice ('%s' and "
                   "'%s')", path, again->line, (long long)again->index, first->name, again->name);
}

/* One data line of a .txt or .lut file (already without its line end). */
static int parse_line(struct nf_label_names *l, const char *path, int line, char *text,
                      enum label_format fmt, size_t *cap, struct nf_error *err)
{
    char *field[8];
    char copy[NF_LABELS_MAX_NAME * 2 + 64];
    if (fmt == LBL_LUT) {
        /* "index R G B name with spaces": keep the name's spaces */
        if (strlen(text) >= sizeof copy)
            return NF_FAIL(err, NF_EDATA, "label file '%s', line %d: longer than %zu characters",
                           path, line, sizeof copy - 1);
        strcpy(copy, text);
        size_t n = split_fields(copy, false, field, 5);
        if (n == 5 && is_number(field[1]) && is_number(field[2]) && is_number(field[3])) {
            char *name = text + (field[4] - copy);
            trim(name);
            return add_label(l, path, line, field[0], name, cap, err);
        }
    }
    size_t n = split_fields(text, false, field, 8);
    if (n < 2)
        return NF_FAIL(err, NF_EDATA,
                       "label file '%s', line %d: expected an index and a name, got '%s'", path,
                       line, n ? field[0] : "");
    if (fmt == LBL_LUT)
        for (size_t f = 2; f < n; f++)
            if (!is_number(field[f]))
                return NF_FAIL(err, NF_EDATA,
                               "label file '%s', line %d: expected \"index name R G B [A]\" or "
                               "\"index R G B name\", found '%s' after the name", path, line,
                               field[f]);
    return add_label(l, path, line, field[0], field[1], cap, err);
}

/* A BIDS _dseg.tsv: columns found by name in the header row. */
static int parse_dseg(struct nf_label_names *l, const char *path, char **lines, size_t n_lines,
                      size_t *cap, struct nf_error *err)
{
    char *field[64];
    size_t nh = split_fields(lines[0], true, field, 64);
    int ci = -1, cn = -1;
    for (size_t f = 0; f < nh; f++) {
        trim(field[f]);
        if (strcmp(field[f], "index") == 0 && ci < 0)
            ci = (int)f;
        else if (strcmp(field[f], "name") == 0 && cn < 0)
            cn = (int)f;
    }
    if (ci < 0 || cn < 0)
        return NF_FAIL(err, NF_EDATA,
                       "label file '%s', line 1: a _dseg.tsv needs the columns 'index' and "
                       "'name' in its header; missing '%s'", path, ci < 0 ? "index" : "name");
    size_t need = (size_t)(ci > cn ? ci : cn) + 1;
    for (size_t i = 1; i < n_lines; i++) {
        if (!lines[i] || !*lines[i])
            continue;
        char *row[64];
        size_t nr = split_fields(lines[i], true, row, 64);
        if (nr < need)
            return NF_FAIL(err, NF_EDATA,
                           "label file '%s', line %zu: %zu columns, the header has %zu", path,
                           i + 1, nr, nh);
        trim(row[ci]);
        trim(row[cn]);
        NF_TRY(add_label(l, path, (int)i + 1, row[ci], row[cn], cap, err));
    }
    return 0;
fail:
    return err->code;
}

int nf_label_names_read(const char *path, struct nf_label_names *out, struct nf_error *err)
{
    struct stat st;
    char *buf = NULL, **lines = NULL;
    size_t len = 0, n_lines = 0, cap = 0;
    int rc = 0;
    enum label_format fmt = format_of(path);

    label_names_init(out);
    NF_TRY(rc = nf_refuse_special_file(path, err));
    if (stat(path, &st) != 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot read label file '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = NF_FAIL(err, NF_EIO, "cannot read label file '%s': it is a folder", path);
        goto fail;
    }
    if (st.st_size > NF_LABELS_MAX_BYTES) {
        rc = NF_FAIL(err, NF_EDATA,
                     "label file '%s' is %lld bytes; label files are text of at most %d bytes",
                     path, (long long)st.st_size, NF_LABELS_MAX_BYTES);
        goto fail;
    }
    if (!(buf = nf_read_file(path, &len, err))) {
        rc = err->code;
        goto fail;
    }
    if (len > NF_LABELS_MAX_BYTES) {   /* grew since stat */
        rc = NF_FAIL(err, NF_EDATA, "label file '%s' is larger than %d bytes", path,
                     NF_LABELS_MAX_BYTES);
        goto fail;
    }
    /* Text only: a NUL or another control byte means a binary file (mricron's
     * own .lut files are 768-byte binary palettes, not names). */
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n')
            line++;
        else if (c < 0x20 && c != '\t' && c != '\r') {
            rc = NF_FAIL(err, NF_EDATA,
                         "label file '%s', line %d: binary data (byte 0x%02x), not a text file "
                         "of label names", path, line, c);
            goto fail;
        }
    }
    lines = nf_calloc((size_t)line + 1, sizeof *lines);
    if (!lines) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
        goto fail;
    }
    for (char *s = buf; s; n_lines++) {
        char *nl = strchr(s, '\n');
        if (nl)
            *nl = '\0';
        size_t n = strlen(s);
        if (n && s[n - 1] == '\r')
            s[n - 1] = '\0';
        lines[n_lines] = s;
        s = nl ? nl + 1 : NULL;
    }
    size_t first = 0;
    while (first < n_lines && lines[first][strspn(lines[first], " \t")] == '\0')
        first++;
    if (first == n_lines) {
        rc = NF_FAIL(err, NF_EDATA, "label file '%s' is empty (expected %s)", path,
                     fmt == LBL_DSEG ? "a header row with columns 'index' and 'name'"
                                     : "lines \"index name\"");
        goto fail;
    }
    if (fmt == LBL_DSEG) {
        if (first) {
            rc = NF_FAIL(err, NF_EDATA, "label file '%s', line 1: empty header row", path);
            goto fail;
        }
        NF_TRY(rc = parse_dseg(out, path, lines, n_lines, &cap, err));
    } else {
        for (size_t i = first; i < n_lines; i++) {
            char *t = lines[i] + strspn(lines[i], " \t");
            if (!*t || *t == '#')
                continue;
            NF_TRY(rc = parse_line(out, path, (int)i + 1, t, fmt, &cap, err));
        }
    }
    if (out->n == 0) {
        rc = NF_FAIL(err, NF_EDATA, "label file '%s' names no label", path);
        goto fail;
    }
    NF_TRY(rc = check_unique(out, path, err));
    if (!(out->path = nf_strdup(path))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
        goto fail;
    }
    free(lines);
    free(buf);
    return 0;

fail:
    free(lines);
    free(buf);
    nf_label_names_release(out);
    return rc < 0 ? rc : NF_EDATA;
}

const char *nf_label_name(const struct nf_label_names *l, int64_t index)
{
    for (size_t i = 0; l && i < l->n; i++)
        if (l->v[i].index == index)
            return l->v[i].name;
    return NULL;
}

/* FILE without ".gz", and without ".nii" after that: aal.nii.gz -> aal.nii, aal. */
static char *strip_suffix(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    if (n > k && nf_path_has_suffix(path, suffix))
        n -= k;
    return nf_asprintf("%.*s", (int)n, path);
}

int nf_label_names_sidecar(const char *volume_path, char **found, struct nf_error *err)
{
    char *base = NULL, *stem = NULL, *cand[4] = {0};
    int rc = 0;
    *found = NULL;
    if (!volume_path)
        return 0;
    base = strip_suffix(volume_path, ".gz");
    stem = base ? strip_suffix(base, ".nii") : NULL;
    if (!stem) {
        rc = NF_ENOMEM;
        goto done;
    }
    /* mricron: aal.nii.gz -> aal.nii.txt; then aal.txt, aal.lut; BIDS:
     * x_dseg.nii.gz -> x_dseg.tsv. Not aal.nii.lut: mricron's are binary
     * palettes. */
    cand[0] = nf_asprintf("%s.txt", base);
    cand[1] = nf_asprintf("%s.txt", stem);
    cand[2] = nf_asprintf("%s.lut", stem);
    cand[3] = nf_path_has_suffix(stem, "_dseg") ? nf_asprintf("%s.tsv", stem) : nf_strdup("");
    for (int i = 0; i < 4; i++)
        if (!cand[i]) {
            rc = NF_ENOMEM;
            goto done;
        }
    for (int i = 0; i < 4 && !*found; i++) {
        struct stat st;
        if (*cand[i] && strcmp(cand[i], volume_path) != 0 && stat(cand[i], &st) == 0 &&
            S_ISREG(st.st_mode)) {
            *found = cand[i];
            cand[i] = NULL;
        }
    }
done:
    for (int i = 0; i < 4; i++)
        free(cand[i]);
    free(base);
    free(stem);
    return rc ? NF_FAIL(err, rc, "out of memory") : 0;
}

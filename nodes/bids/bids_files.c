/* bids_files.c — reading a BIDS dataset's layout for the `bids` node.
 *
 * A BIDS dataset says what a file is in its name (key-value entities, a
 * suffix, an extension) and where it sits (sub-XX/[ses-YY/]func/); metadata
 * such as the repetition time lives in JSON sidecars that apply to every
 * file whose name carries their entities, nearest folder winning (the
 * inheritance principle). fMRIPrep derivatives mirror the raw folders and
 * add space-/desc- entities. This file turns that into a list of runs with
 * their files, without reading any image: the node decides what a missing
 * piece means. The JSON reader is a small validating parser: a sidecar is
 * read whole, checked for syntax (errors name line and column) and only the
 * top-level key asked for is kept.
 */
#include "bids_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/io.h"
#include "core/util.h"

/* ---- names ---- */

static bool is_label(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s))
            return false;
    return true;
}

void bids_name_release(struct bids_name *n)
{
    free(n->buf);
    memset(n, 0, sizeof *n);
}

int bids_name_parse(const char *name, struct bids_name *out)
{
    memset(out, 0, sizeof *out);
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    /* two copies: the first is cut into entities, the second keeps the extension */
    size_t len = strlen(base);
    if (!(out->buf = nf_malloc(2 * len + 2)))
        return NF_ENOMEM;
    memcpy(out->buf, base, len + 1);
    memcpy(out->buf + len + 1, base, len + 1);
    char *dot = strchr(out->buf, '.');
    if (dot) {
        out->ext = out->buf + len + 1 + (dot - out->buf);
        *dot = '\0';
    } else {
        out->ext = out->buf + 2 * len + 1;   /* "" */
    }
    char *part = out->buf, *sep;
    while ((sep = strchr(part, '_'))) {
        *sep = '\0';
        char *dash = strchr(part, '-');
        if (!dash || out->n == BIDS_MAX_ENTITIES)
            goto not_bids;
        *dash = '\0';
        if (!is_label(part) || !is_label(dash + 1))
            goto not_bids;
        out->key[out->n] = part;
        out->value[out->n++] = dash + 1;
        part = sep + 1;
    }
    if (!is_label(part) || out->n == 0)
        goto not_bids;
    out->suffix = part;
    return 1;
not_bids:
    bids_name_release(out);
    return 0;
}

const char *bids_name_get(const struct bids_name *n, const char *key)
{
    for (size_t i = 0; i < n->n; i++)
        if (strcmp(n->key[i], key) == 0)
            return n->value[i];
    return NULL;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

bool bids_filter_selects(const struct nf_str_list *filter, const char *key, const char *value)
{
    if (!filter || filter->n == 0)
        return true;
    size_t key_len = strlen(key);
    for (size_t i = 0; i < filter->n; i++) {
        const char *pat = filter->v[i];
        /* "sub-01" and "01" mean the same subject */
        if (strncmp(pat, key, key_len) == 0 && pat[key_len] == '-')
            pat += key_len + 1;
        if (fnmatch(pat, value, 0) == 0)
            return true;
        if (all_digits(pat) && all_digits(value) && strtoll(pat, NULL, 10) == strtoll(value, NULL, 10))
            return true;
    }
    return false;
}

/* ---- folders ---- */

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of `dir` (without . and ..), sorted by strcmp; a folder that is
 * not there gives none. */
static int list_dir(const char *dir, char ***names, size_t *n, struct nf_error *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? 0
               : NF_FAIL(err, NF_EIO, "cannot read the folder '%s': %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = nf_realloc(*names, cap * sizeof *grown);
            if (!grown)
                goto oom;
            *names = grown;
        }
        if (!((*names)[*n] = nf_strdup(e->d_name)))
            goto oom;
        (*n)++;
    }
    closedir(d);
    if (*n > 1)
        qsort(*names, *n, sizeof **names, compare_names);
    return 0;
oom:
    closedir(d);
    for (size_t i = 0; i < *n; i++)
        free((*names)[i]);
    free(*names);
    *names = NULL;
    *n = 0;
    return NF_FAIL(err, NF_ENOMEM, "out of memory");
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- inheritance ---- */

/* Whether every entity of `side` is in `data` with the same value. */
static bool entities_within(const struct bids_name *side, const struct bids_name *data)
{
    for (size_t i = 0; i < side->n; i++) {
        const char *v = bids_name_get(data, side->key[i]);
        if (!v || strcmp(v, side->value[i]) != 0)
            return false;
    }
    return true;
}

int bids_inherited(const char *root, const char *data, const char *suffix, const char *ext,
                   char ***found, size_t *n, struct nf_error *err)
{
    struct bids_name dn;
    char *levels[4] = { 0 };
    size_t n_levels = 0, cap = 0;
    int rc = 0;
    *found = NULL;
    *n = 0;
    rc = bids_name_parse(data, &dn);
    if (rc <= 0)
        return rc < 0 ? NF_FAIL(err, NF_ENOMEM, "out of memory")
                      : NF_FAIL(err, NF_EBUG, "'%s' is not a BIDS file name", data);
    rc = 0;
    const char *sub = bids_name_get(&dn, "sub"), *ses = bids_name_get(&dn, "ses");
    levels[n_levels++] = nf_strdup(root);
    if (sub)
        levels[n_levels++] = nf_asprintf("%s/sub-%s", root, sub);
    if (sub && ses)
        levels[n_levels++] = nf_asprintf("%s/sub-%s/ses-%s", root, sub, ses);
    char *folder = nf_path_dirname(data);
    if (folder && (n_levels == 0 || !levels[n_levels - 1] || strcmp(folder, levels[n_levels - 1]) != 0))
        levels[n_levels++] = folder;
    else
        free(folder);
    for (size_t l = 0; l < n_levels; l++)
        if (!levels[l]) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto done;
        }
    for (size_t l = 0; l < n_levels && rc == 0; l++) {
        char **names;
        size_t n_names;
        if ((rc = list_dir(levels[l], &names, &n_names, err)) < 0)
            break;
        const char *at_level = NULL;
        for (size_t i = 0; i < n_names && rc == 0; i++) {
            struct bids_name sn;
            int parsed = bids_name_parse(names[i], &sn);
            if (parsed < 0) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                break;
            }
            bool applies = parsed == 1 && strcmp(sn.suffix, suffix) == 0 && strcmp(sn.ext, ext) == 0 &&
                           entities_within(&sn, &dn);
            bids_name_release(&sn);
            if (!applies)
                continue;
            if (at_level) {
                rc = NF_FAIL(err, NF_EDATA, "two %s%s files in '%s' apply to '%s': %s and %s (BIDS "
                             "inheritance allows one per folder level)", suffix, ext, levels[l], data,
                             at_level, names[i]);
                break;
            }
            at_level = names[i];
            if (*n == cap) {
                cap = cap ? 2 * cap : 4;
                char **grown = nf_realloc(*found, cap * sizeof *grown);
                if (!grown) {
                    rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                    break;
                }
                *found = grown;
            }
            if (!((*found)[*n] = nf_path_join(levels[l], names[i]))) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                break;
            }
            (*n)++;
        }
        free_names(names, n_names);
    }
done:
    for (size_t l = 0; l < n_levels; l++)
        free(levels[l]);
    bids_name_release(&dn);
    if (rc < 0) {
        free_names(*found, *n);
        *found = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- JSON ---- */

struct json_reader {
    const char *text, *at, *path;
    struct nf_error *err;
};

static int json_fail(struct json_reader *j, const char *what)
{
    int line = 1, col = 1;
    for (const char *c = j->text; c < j->at; c++) {
        if (*c == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return NF_FAIL(j->err, NF_EDATA, "%s:%d:%d: malformed JSON sidecar: %s", j->path, line, col, what);
}

static void json_space(struct json_reader *j)
{
    while (*j->at == ' ' || *j->at == '\t' || *j->at == '\n' || *j->at == '\r')
        j->at++;
}

/* A string: start and len give its raw text between the quotes. */
static int json_string(struct json_reader *j, const char **start, size_t *len)
{
    if (*j->at != '"')
        return json_fail(j, "expected a string in double quotes");
    const char *s = ++j->at;
    while (*j->at != '"') {
        if (!*j->at || (unsigned char)*j->at < 0x20)
            return json_fail(j, "unterminated string");
        if (*j->at == '\\') {
            j->at++;
            if (!strchr("\"\\/bfnrtu", *j->at) || !*j->at)
                return json_fail(j, "invalid escape in a string");
        }
        j->at++;
    }
    *start = s;
    *len = (size_t)(j->at - s);
    j->at++;
    return 0;
}

static int json_number(struct json_reader *j, double *value)
{
    const char *s = j->at;
    if (*j->at == '-')
        j->at++;
    if (!isdigit((unsigned char)*j->at))
        return json_fail(j, "expected a value");
    while (isdigit((unsigned char)*j->at) || strchr(".eE+-", *j->at))
        j->at++;
    char *end;
    *value = strtod(s, &end);
    if (end != j->at)
        return json_fail(j, "malformed number");
    return 0;
}

static int json_value(struct json_reader *j, int depth, double *number, bool *is_number);

static int json_container(struct json_reader *j, int depth, const char *want_key, double *found_value,
                          bool *found, bool *found_not_number)
{
    bool object = *j->at == '{';
    char close = object ? '}' : ']';
    j->at++;
    json_space(j);
    if (*j->at == close) {
        j->at++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        json_space(j);
        if (object) {
            if (json_string(j, &key, &key_len) < 0)
                return -1;
            json_space(j);
            if (*j->at != ':')
                return json_fail(j, "expected ':' after a key");
            j->at++;
            json_space(j);
        }
        double v = 0;
        bool is_number = false;
        if (json_value(j, depth + 1, &v, &is_number) < 0)
            return -1;
        if (want_key && key && key_len == strlen(want_key) && memcmp(key, want_key, key_len) == 0) {
            *found = true;
            *found_value = v;
            *found_not_number = !is_number;
        }
        json_space(j);
        if (*j->at == ',') {
            j->at++;
            continue;
        }
        if (*j->at == close) {
            j->at++;
            return 0;
        }
        return json_fail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int json_value(struct json_reader *j, int depth, double *number, bool *is_number)
{
    const char *s;
    size_t len;
    bool unused_found = false, unused_nn = false;
    double unused = 0;
    *is_number = false;
    if (depth > 64)
        return json_fail(j, "nested deeper than 64 levels");
    json_space(j);
    switch (*j->at) {
    case '{':
    case '[':
        return json_container(j, depth, NULL, &unused, &unused_found, &unused_nn);
    case '"':
        return json_string(j, &s, &len);
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = { "true", "false", "null" };
        for (size_t w = 0; w < 3; w++)
            if (strncmp(j->at, words[w], strlen(words[w])) == 0) {
                j->at += strlen(words[w]);
                return 0;
            }
        return json_fail(j, "expected a value");
    }
    default:
        *is_number = true;
        return json_number(j, number);
    }
}

#define BIDS_SIDECAR_MAX_BYTES ((size_t)16 << 20)   /* a JSON sidecar: a few hundred bytes as written */

int bids_json_number(const char *path, const char *key, double *value, bool *found,
                     struct nf_error *err)
{
    size_t len = 0;
    *found = false;
    *value = 0;
    if (nf_refuse_special_file(path, err) < 0)
        return err->code;
    char *text = nf_read_text_file(path, BIDS_SIDECAR_MAX_BYTES, "sidecar", &len, err);   /* a dataset's: bounded */
    if (!text)
        return err->code ? err->code : NF_EIO;
    struct json_reader j = { .text = text, .at = text, .path = path, .err = err };
    bool not_number = false;
    int rc = 0;
    if (strlen(text) != len) {
        rc = json_fail(&j, "the file holds a NUL byte");
        goto done;
    }
    json_space(&j);
    if (*j.at != '{') {
        rc = json_fail(&j, "a sidecar must be a JSON object ({...})");
        goto done;
    }
    if ((rc = json_container(&j, 0, key, value, found, &not_number)) < 0)
        goto done;
    json_space(&j);
    if (*j.at) {
        rc = json_fail(&j, "text after the closing '}'");
        goto done;
    }
    if (*found && not_number)
        rc = NF_FAIL(err, NF_EDATA, "%s: %s is not a number", path, key);
done:
    free(text);
    return rc < 0 ? (err->code ? err->code : NF_EDATA) : 0;
}

/* ---- the scan ---- */

struct item_list {
    struct bids_item *v;
    size_t n, cap;
};

static void item_release(struct bids_item *it)
{
    free(it->label);
    free(it->raw_bold);
    free(it->bold);
    free(it->mask);
    free(it->events);
    free(it->confounds);
    free(it->tr_source);
    free_names(it->sidecars, it->n_sidecars);
}

void bids_scan_release(struct bids_scan *s)
{
    for (size_t i = 0; i < s->n; i++)
        item_release(&s->items[i]);
    free(s->items);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

/* The entities that name a run, in BIDS order. */
static const char *const run_entities[] = { "sub", "ses", "task", "acq", "ce", "rec", "dir", "run", "echo", NULL };

static char *run_label(const struct bids_name *n)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (size_t k = 0; run_entities[k]; k++) {
        const char *v = bids_name_get(n, run_entities[k]);
        if (v)
            nf_strbuf_addf(&sb, "%s%s-%s", sb.len ? "_" : "", run_entities[k], v);
    }
    return nf_strbuf_detach(&sb);
}

/* The one file in `dir` whose name has every run entity of `raw` (same
 * values, no other run entity), suffix `suffix`, extension `ext` (".nii.gz"
 * also matches ".nii"), and the extra entities `want` (key, value pairs; a
 * NULL value: any). None: *path NULL; two: an error naming both. */
static int find_counterpart(const char *dir, const struct bids_name *raw, const char *const *want,
                            size_t n_want, const char *suffix, const char *ext, char **path,
                            struct nf_error *err)
{
    char **names;
    size_t n_names;
    int rc = list_dir(dir, &names, &n_names, err);
    *path = NULL;
    if (rc < 0)
        return rc;
    const char *first = NULL;
    for (size_t i = 0; i < n_names && rc == 0; i++) {
        struct bids_name fn;
        int parsed = bids_name_parse(names[i], &fn);
        if (parsed < 0) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            break;
        }
        bool ok = parsed == 1 && strcmp(fn.suffix, suffix) == 0 &&
                  (strcmp(fn.ext, ext) == 0 || (strcmp(ext, ".nii.gz") == 0 && strcmp(fn.ext, ".nii") == 0));
        for (size_t k = 0; ok && run_entities[k]; k++) {
            const char *a = bids_name_get(raw, run_entities[k]), *b = bids_name_get(&fn, run_entities[k]);
            ok = (!a && !b) || (a && b && strcmp(a, b) == 0);
        }
        for (size_t w = 0; ok && w < n_want; w++) {
            const char *v = bids_name_get(&fn, want[2 * w]);
            ok = want[2 * w + 1] ? v && strcmp(v, want[2 * w + 1]) == 0 : true;
        }
        bids_name_release(&fn);
        if (!ok)
            continue;
        if (first) {
            rc = NF_FAIL(err, NF_EDATA, "two files in '%s' could be the %s of one run: %s and %s%s", dir,
                         suffix, first, names[i],
                         strcmp(suffix, "bold") == 0 ? " (give `space`, or `desc`, to choose)" : "");
            break;
        }
        first = names[i];
        if (!(*path = nf_path_join(dir, names[i])))
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    free_names(names, n_names);
    if (rc < 0) {
        free(*path);
        *path = NULL;
    }
    return rc;
}

/* The run's label names the space its derivatives are in (BIDS order puts
 * space after the run entities), so that every map made from them keeps it
 * in its file name: sub-01_task-x_run-1_space-MNI152NLin2009cAsym. */
static int label_add_space(struct bids_item *it, const char *space, struct nf_error *err)
{
    char *label = nf_asprintf("%s_space-%s", it->label, space);
    if (!label)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    free(it->label);
    it->label = label;
    return 0;
}

/* The derivatives' files of one run: preprocessed bold, brain mask (same
 * space and resolution as that bold), confounds. */
static int derivative_files(const struct bids_query *q, const char *rel_dir, const struct bids_name *raw,
                            struct bids_item *it, struct nf_error *err)
{
    char *dir = nf_path_join(q->derivatives, rel_dir);
    int rc = 0;
    if (!dir)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    const char *want[4] = { "desc", q->desc ? q->desc : "preproc", "space", q->space };
    NF_TRY(rc = find_counterpart(dir, raw, want, q->space ? 2 : 1, "bold", ".nii.gz", &it->bold, err));
    if (it->bold) {
        struct bids_name bn;
        if ((rc = bids_name_parse(it->bold, &bn)) < 0)
            goto fail;
        const char *space = bids_name_get(&bn, "space");
        const char *mask_want[6] = { "desc", "brain", "space", space, "res", bids_name_get(&bn, "res") };
        rc = find_counterpart(dir, raw, mask_want, 3, "mask", ".nii.gz", &it->mask, err);
        if (rc == 0 && space)
            rc = label_add_space(it, space, err);
        bids_name_release(&bn);
        NF_TRY(rc);
    }
    const char *conf_want[2] = { "desc", "confounds" };
    NF_TRY(rc = find_counterpart(dir, raw, conf_want, 1, "timeseries", ".tsv", &it->confounds, err));
    if (!it->confounds)   /* fMRIPrep before 20.2 */
        NF_TRY(rc = find_counterpart(dir, raw, conf_want, 1, "regressors", ".tsv", &it->confounds, err));
fail:
    free(dir);
    return rc < 0 ? rc : 0;
}

/* Sidecars and events of a run, and its repetition time. */
static int run_metadata(const struct bids_query *q, struct bids_item *it, struct nf_error *err)
{
    char **events = NULL;
    size_t n_events = 0;
    int rc = bids_inherited(q->root, it->raw_bold, "bold", ".json", &it->sidecars, &it->n_sidecars, err);
    if (rc < 0)
        return rc;
    for (size_t s = 0; s < it->n_sidecars; s++) {
        double tr;
        bool found;
        NF_TRY(rc = bids_json_number(it->sidecars[s], "RepetitionTime", &tr, &found, err));
        if (found) {
            if (!(tr > 0) || !isfinite(tr))
                return NF_FAIL(err, NF_EDATA, "%s: RepetitionTime is %g (expected a finite number of seconds > 0)",
                               it->sidecars[s], tr);
            it->tr = tr;   /* nearer sidecars come later and win */
            free(it->tr_source);
            if (!(it->tr_source = nf_strdup(it->sidecars[s])))
                return NF_FAIL(err, NF_ENOMEM, "out of memory");
        }
    }
    NF_TRY(rc = bids_inherited(q->root, it->raw_bold, "events", ".tsv", &events, &n_events, err));
    if (n_events > 0) {
        it->events = events[n_events - 1];
        events[n_events - 1] = NULL;
    }
fail:
    free_names(events, n_events);
    return rc < 0 ? rc : 0;
}

static int add_item(struct item_list *l, struct bids_item **it, struct nf_error *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        struct bids_item *grown = nf_realloc(l->v, cap * sizeof *grown);
        if (!grown)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        l->v = grown;
        l->cap = cap;
    }
    *it = &l->v[l->n++];
    memset(*it, 0, sizeof **it);
    return 0;
}

/* What the dataset holds, for the message when nothing matches. */
struct seen {
    struct nf_strbuf subjects, tasks;
    size_t n_subjects;
};

static void seen_task(struct seen *s, const char *task)
{
    char needle[256];
    snprintf(needle, sizeof needle, " %s,", task);
    if (!s->tasks.buf || !strstr(s->tasks.buf, needle))
        nf_strbuf_addf(&s->tasks, " %s,", task);
}

/* Runs in one func folder (rel_dir under root). */
static int scan_func(const struct bids_query *q, const char *rel_dir, struct item_list *l, struct seen *seen,
                     struct nf_error *err)
{
    char *dir = nf_path_join(q->root, rel_dir), **names = NULL;
    size_t n_names = 0;
    int rc = 0;
    if (!dir)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    NF_TRY(rc = list_dir(dir, &names, &n_names, err));
    for (size_t i = 0; i < n_names; i++) {
        struct bids_name bn;
        int parsed = bids_name_parse(names[i], &bn);
        if (parsed < 0) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        bool bold = parsed == 1 && strcmp(bn.suffix, "bold") == 0 &&
                    (strcmp(bn.ext, ".nii.gz") == 0 || strcmp(bn.ext, ".nii") == 0);
        const char *task = bold ? bids_name_get(&bn, "task") : NULL;
        if (task)
            seen_task(seen, task);
        const char *run = bold ? bids_name_get(&bn, "run") : NULL;
        bool take = task && (!q->task || strcmp(q->task, task) == 0) &&
                    (!q->runs || q->runs->n == 0 || (run && bids_filter_selects(q->runs, "run", run)));
        struct bids_item *it = NULL;
        if (take && (rc = add_item(l, &it, err)) == 0) {
            it->label = run_label(&bn);
            it->raw_bold = nf_path_join(dir, names[i]);
            if (!it->label || !it->raw_bold)
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            if (rc == 0 && q->derivatives)
                rc = derivative_files(q, rel_dir, &bn, it, err);
            if (rc == 0 && !q->derivatives && !(it->bold = nf_strdup(it->raw_bold)))
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            if (rc == 0)
                rc = run_metadata(q, it, err);
        }
        bids_name_release(&bn);
        if (rc < 0)
            goto fail;
    }
fail:
    free_names(names, n_names);
    free(dir);
    return rc;
}

static int compare_items(const void *a, const void *b)
{
    return strcmp(((const struct bids_item *)a)->label, ((const struct bids_item *)b)->label);
}

int bids_scan(const struct bids_query *q, struct bids_scan *out, struct nf_error *err)
{
    struct item_list l = { 0 };
    struct seen seen;
    char **subs = NULL;
    size_t n_subs = 0;
    int rc = 0;
    memset(out, 0, sizeof *out);
    nf_strbuf_init(&seen.subjects);
    nf_strbuf_init(&seen.tasks);
    seen.n_subjects = 0;
    if (!is_dir(q->root))
        return NF_FAIL(err, NF_EINVAL, "the BIDS root '%s' is not a folder", q->root);
    if (q->derivatives && !is_dir(q->derivatives))
        return NF_FAIL(err, NF_EINVAL, "the derivatives folder '%s' is not a folder", q->derivatives);
    NF_TRY(rc = list_dir(q->root, &subs, &n_subs, err));
    for (size_t s = 0; s < n_subs; s++) {
        char *sub_dir = nf_path_join(q->root, subs[s]);
        bool is_sub = strncmp(subs[s], "sub-", 4) == 0 && is_label(subs[s] + 4) && sub_dir && is_dir(sub_dir);
        if (is_sub)
            nf_strbuf_addf(&seen.subjects, "%s%s", seen.n_subjects++ ? ", " : "", subs[s]);
        if (!is_sub || !bids_filter_selects(q->subjects, "sub", subs[s] + 4)) {
            free(sub_dir);
            continue;
        }
        char **sess = NULL;
        size_t n_sess = 0;
        rc = list_dir(sub_dir, &sess, &n_sess, err);
        bool has_sessions = false;
        for (size_t k = 0; rc == 0 && k < n_sess; k++) {
            if (strncmp(sess[k], "ses-", 4) != 0 || !is_label(sess[k] + 4))
                continue;
            has_sessions = true;
            if (!bids_filter_selects(q->sessions, "ses", sess[k] + 4))
                continue;
            char *rel = nf_asprintf("%s/%s/func", subs[s], sess[k]);
            rc = rel ? scan_func(q, rel, &l, &seen, err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
            free(rel);
        }
        /* a filter on sessions leaves out subjects without sessions */
        if (rc == 0 && !has_sessions && (!q->sessions || q->sessions->n == 0)) {
            char *rel = nf_asprintf("%s/func", subs[s]);
            rc = rel ? scan_func(q, rel, &l, &seen, err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
            free(rel);
        }
        free_names(sess, n_sess);
        free(sub_dir);
        if (rc < 0)
            goto fail;
    }
    if (l.n > 1)
        qsort(l.v, l.n, sizeof *l.v, compare_items);
    for (size_t i = 1; i < l.n; i++)
        if (strcmp(l.v[i].label, l.v[i - 1].label) == 0) {
            rc = NF_FAIL(err, NF_EDATA, "two BOLD files name the run %s: %s and %s", l.v[i].label,
                         l.v[i - 1].raw_bold, l.v[i].raw_bold);
            goto fail;
        }
    if (seen.tasks.len)
        seen.tasks.buf[--seen.tasks.len] = '\0';   /* the last comma */
    out->seen = nf_asprintf("subjects: %s; tasks:%s", seen.n_subjects ? seen.subjects.buf : "none",
                            seen.tasks.len ? seen.tasks.buf : " none");
    out->items = l.v;
    out->n = l.n;
    l.v = NULL;
    l.n = 0;
fail:
    for (size_t i = 0; i < l.n; i++)
        item_release(&l.v[i]);
    free(l.v);
    free_names(subs, n_subs);
    nf_strbuf_release(&seen.subjects);
    nf_strbuf_release(&seen.tasks);
    return rc;
}

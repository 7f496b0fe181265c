/* init.c — `nlflow init`: a starting pipeline file for a dataset.
 *
 * A lab's analysis starts from the dataset it has. `nlflow init --bids DIR`
 * looks at a BIDS dataset (and its fMRIPrep derivatives: DIR/derivatives/
 * fmriprep unless --derivatives says otherwise) without reading any voxel:
 * the subjects, the tasks and their runs (file names), the spaces fMRIPrep
 * wrote, and each task's conditions (the trial_type column of its
 * _events.tsv files). It writes a pipeline that, per task, selects the runs
 * (`bids`), uses the shipped first-level template (`templates/<name>.yaml`,
 * found on NLFLOW_PATH or where nlflow is installed) with one contrast per
 * condition against baseline, the group template (`templates/group.yaml`)
 * on each contrast, and writes the group maps (`summarize`). The user edits
 * the contrasts. Without --bids it writes the same file with
 * placeholders and comments. Nothing is overwritten.
 */
#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "init.h"
#include "core/util.h"
#include "lang/ytree.h"

struct strset {
    char **v;
    size_t n;
};

static int strset_add(struct strset *s, const char *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], x) == 0)
            return 0;
    char **v = nf_realloc(s->v, (s->n + 1) * sizeof *v);
    if (!v)
        return -1;
    s->v = v;
    if (!(s->v[s->n] = nf_strdup(x)))
        return -1;
    s->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strset_sort(struct strset *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, cmp_str);
}

static void strset_free(struct strset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* The value of BIDS entity `key` in a file name ("task" in
 * sub-01_task-faces_run-1_bold.nii.gz -> "faces"), or NULL. Owned. */
static char *entity(const char *path, const char *key)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t kl = strlen(key);
    for (const char *s = base; s && *s;) {
        if (strncmp(s, key, kl) == 0 && s[kl] == '-') {
            size_t len = strcspn(s + kl + 1, "_.");
            return nf_strndup(s + kl + 1, len);
        }
        s = strchr(s, '_');
        s = s ? s + 1 : NULL;
    }
    return NULL;
}

/* Node-id-safe text: lowercase letters, digits and _, starting with a letter. */
static char *node_safe(const char *s, const char *prefix_if_needed)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        nf_strbuf_addf(&sb, "%s", prefix_if_needed);
    for (; *s; s++) {
        char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
        nf_strbuf_addf(&sb, "%c", (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ? c : '_');
    }
    return nf_strbuf_detach(&sb);
}

static int glob_both(const char *root, const char *tail, glob_t *g)
{
    char *a = nf_asprintf("%s/sub-*/func/%s", root, tail), *b = nf_asprintf("%s/sub-*/ses-*/func/%s", root, tail);
    int rc = -1;
    if (a && b) {   /* subjects without sessions, then with */
        int r1 = glob(a, 0, NULL, g);
        int r2 = r1 == 0 || r1 == GLOB_NOMATCH ? glob(b, r1 == 0 ? GLOB_APPEND : 0, NULL, g) : r1;
        rc = r1 == 0 || r2 == 0 ? 1 : r2 == GLOB_NOMATCH ? 0 : -1;
    }
    free(a);
    free(b);
    return rc;
}

/* The trial types of the events files of one task (sorted), found in the
 * raw dataset; "dummy" (nilearn's name) when a file has no trial_type. */
static int task_conditions(const char *root, const char *task, struct strset *conds, struct nf_error *err)
{
    glob_t g = { 0 };
    char *tail = nf_asprintf("*_task-%s_*events.tsv", task);
    int found = tail ? glob_both(root, tail, &g) : -1;
    free(tail);
    if (found < 0)
        return NF_FAIL(err, NF_EIO, "cannot list the events files of task '%s' in %s", task, root);
    for (size_t i = 0; found > 0 && i < g.gl_pathc; i++) {
        size_t len = 0;
        char *text = nf_read_file(g.gl_pathv[i], &len, err);
        if (!text) {
            globfree(&g);
            return -1;
        }
        int col = -1, c = 0;
        char *line = text, *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        for (char *f = line, *tab; f; f = tab ? tab + 1 : NULL, c++) {
            tab = strchr(f, '\t');
            size_t fl = tab ? (size_t)(tab - f) : strcspn(f, "\r");
            if (fl == 10 && strncmp(f, "trial_type", 10) == 0)
                col = c;
        }
        if (col < 0)
            strset_add(conds, "dummy");
        for (char *l = end ? end + 1 : NULL; l && *l; l = end ? end + 1 : NULL) {
            end = strchr(l, '\n');
            if (end)
                *end = '\0';
            char *f = l;
            for (int k = 0; k < col && f; k++)
                f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL;
            if (!f || col < 0)
                continue;
            size_t fl = strcspn(f, "\t\r");
            char *v = nf_strndup(f, fl);
            if (v && fl > 0 && strcmp(v, "n/a") != 0 && strset_add(conds, v) < 0) {
                free(v);
                free(text);
                globfree(&g);
                return NF_FAIL(err, NF_ENOMEM, "out of memory");
            }
            free(v);
        }
        free(text);
    }
    if (found > 0)
        globfree(&g);
    strset_sort(conds);
    return 0;
}

/* What init found in a dataset. */
struct dataset {
    char *name;                  /* dataset_description.json's Name, or the folder's */
    struct strset subjects, tasks, spaces;
    size_t *runs_per_task;       /* runs (all subjects) per task */
    char *derivatives;           /* the fMRIPrep folder, or NULL */
};

static int scan_dataset(const char *root, const char *deriv, struct dataset *ds, struct nf_error *err)
{
    size_t len = 0;
    char *desc_path = nf_asprintf("%s/dataset_description.json", root);
    struct nf_error jerr = { 0 };
    char *text = desc_path ? nf_read_file(desc_path, &len, &jerr) : NULL;
    if (!text) {
        free(desc_path);
        return NF_FAIL(err, NF_EUSAGE, "'%s' is not a BIDS dataset: it has no readable dataset_description.json",
                       root);
    }
    struct nf_ynode *json = nf_yaml_parse(text, len, nf_intern(desc_path), &jerr);
    free(text);
    if (!json) {
        *err = jerr;
        err->code = NF_EUSAGE;
        free(desc_path);
        return -1;
    }
    free(desc_path);
    const struct nf_ynode *name = nf_ypath(json, "Name");
    char *stem = nf_path_stem(root);
    ds->name = nf_strdup(name && name->type == NF_Y_SCALAR && name->value[0] ? name->value : stem ? stem : "dataset");
    free(stem);
    nf_ynode_free(json);

    glob_t g = { 0 };
    int found = glob_both(root, "*_bold.nii*", &g);
    if (found < 0)
        return NF_FAIL(err, NF_EIO, "cannot list the runs of %s", root);
    if (found == 0)
        return NF_FAIL(err, NF_EUSAGE, "'%s' has no BOLD runs (sub-*/[ses-*/]func/*_bold.nii[.gz])", root);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char *sub = entity(g.gl_pathv[i], "sub"), *task = entity(g.gl_pathv[i], "task");
        if (sub)
            strset_add(&ds->subjects, sub);
        if (task)
            strset_add(&ds->tasks, task);
        free(sub);
        free(task);
    }
    strset_sort(&ds->subjects);
    strset_sort(&ds->tasks);
    ds->runs_per_task = nf_calloc(ds->tasks.n + 1, sizeof *ds->runs_per_task);
    for (size_t i = 0; ds->runs_per_task && i < g.gl_pathc; i++) {
        char *task = entity(g.gl_pathv[i], "task");
        for (size_t t = 0; task && t < ds->tasks.n; t++)
            ds->runs_per_task[t] += strcmp(ds->tasks.v[t], task) == 0;
        free(task);
    }
    globfree(&g);
    if (ds->tasks.n == 0)
        return NF_FAIL(err, NF_EUSAGE, "the runs of '%s' have no task entity (task-NAME in their file names)", root);

    char *guess = deriv ? nf_realpath(deriv) : nf_asprintf("%s/derivatives/fmriprep", root);
    if (guess && access(guess, R_OK) == 0) {   /* absolute, as root is */
        ds->derivatives = guess;
        glob_t d = { 0 };
        if (glob_both(guess, "*_space-*_desc-preproc_bold.nii*", &d) > 0) {
            for (size_t i = 0; i < d.gl_pathc; i++) {
                char *space = entity(d.gl_pathv[i], "space");
                if (space)
                    strset_add(&ds->spaces, space);
                free(space);
            }
            globfree(&d);
        }
        strset_sort(&ds->spaces);
    } else {
        if (deriv) {
            free(guess);
            return NF_FAIL(err, NF_EUSAGE, "--derivatives '%s' is not a readable folder", deriv);
        }
        free(guess);
    }
    return 0;
}

static void dataset_free(struct dataset *ds)
{
    free(ds->name);
    strset_free(&ds->subjects);
    strset_free(&ds->tasks);
    strset_free(&ds->spaces);
    free(ds->runs_per_task);
    free(ds->derivatives);
}

/* The space the pipeline asks for: MNI152NLin2009cAsym when fMRIPrep wrote
 * it (nilearn's and most atlases' space), else the first. */
static const char *chosen_space(const struct dataset *ds)
{
    for (size_t i = 0; i < ds->spaces.n; i++)
        if (strcmp(ds->spaces.v[i], "MNI152NLin2009cAsym") == 0)
            return ds->spaces.v[i];
    return ds->spaces.n ? ds->spaces.v[0] : NULL;
}

/* Text from the dataset (its Name, task and space entities, condition
 * names, paths) never becomes YAML structure: in a comment it is one line
 * (control characters as spaces); as a value it is double-quoted with JSON's
 * escapes, which YAML reads as the same string. */
static void add_comment_text(struct nf_strbuf *sb, const char *s)
{
    for (; s && *s; s++)
        nf_strbuf_addf(sb, "%c", (unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s);
}

static void add_quoted(struct nf_strbuf *sb, const char *s)
{
    static const char *const words[] = { "true", "false", "yes", "no", "on", "off", "null", "y", "n", NULL };
    bool plain = s && (isalpha((unsigned char)s[0]) || s[0] == '/');
    for (const char *c = s; plain && *c; c++)
        plain = isalnum((unsigned char)*c) || strchr("._/+-", *c);
    for (size_t w = 0; plain && words[w]; w++)
        plain = strcasecmp(s, words[w]) != 0;
    if (plain)   /* MNI152NLin2009cAsym, /data/study: as a person would write them */
        nf_strbuf_addf(sb, "%s", s);
    else
        nf_strbuf_add_json_str(sb, s ? s : "");
}

/* One task's part of the pipeline. */
static int write_task(struct nf_strbuf *sb, const char *root, const char *task, const struct dataset *ds,
                      const char *template, struct nf_error *err)
{
    struct strset conds = { 0 };
    if (task_conditions(root, task, &conds, err) < 0)
        return -1;
    char *id = node_safe(task, "task_");
    const char *space = chosen_space(ds);
    nf_strbuf_addf(sb, "  %s_runs:\n    type: bids\n    root: ${bids}\n", id);
    if (ds->derivatives)
        nf_strbuf_addf(sb, "    derivatives: ${derivatives}\n");
    nf_strbuf_addf(sb, "    task: ");
    add_quoted(sb, task);
    nf_strbuf_addf(sb, "\n");
    if (space) {
        nf_strbuf_addf(sb, "    space: ");
        add_quoted(sb, space);
        nf_strbuf_addf(sb, "\n");
    }
    if (ds->derivatives)
        nf_strbuf_addf(sb, "    require: [events, confounds, mask]\n");
    else
        nf_strbuf_addf(sb, "    require: [events]\n");
    if (conds.n == 0) {
        nf_strbuf_addf(sb, "  # no events files found for task ");
        add_comment_text(sb, task);
        nf_strbuf_addf(sb, ": add contrasts by hand\n");
    }
    nf_strbuf_addf(sb, "  %s:\n    type: use\n    path: templates/%s.yaml\n    with:\n      contrasts:\n", id, template);
    for (size_t c = 0; c < conds.n; c++) {
        char *cid = node_safe(conds.v[c], "c_");
        char *expr = cid ? nf_asprintf("%s = %s", cid, conds.v[c]) : NULL;
        nf_strbuf_addf(sb, "        - ");
        add_quoted(sb, expr);
        nf_strbuf_addf(sb, "\n");
        if (!expr)
            sb->oom = true;
        free(expr);
        free(cid);
    }
    if (conds.n == 0)
        nf_strbuf_addf(sb, "        - \"effect = CONDITION\"\n");
    nf_strbuf_addf(sb, "    in:\n      bold: %s_runs.bold\n      events: %s_runs.events\n", id, id);
    if (ds->derivatives)
        nf_strbuf_addf(sb, "      confounds: %s_runs.confounds\n      mask: %s_runs.mask\n", id, id);
    /* the group template on each contrast, and the maps written */
    struct nf_strbuf maps;
    nf_strbuf_init(&maps);
    for (size_t c = 0; c < conds.n; c++) {
        char *cid = node_safe(conds.v[c], "c_");
        nf_strbuf_addf(sb, "  %s_%s_group:\n    type: use\n    path: templates/group.yaml\n"
                           "    with: {contrast: %s}\n    in: {effect: %s.subject_effect}\n", id, cid, cid, id);
        nf_strbuf_addf(&maps, "%s%s_t: %s_%s_group.t, %s_p_tfce_fwe: %s_%s_group.p_tfce_fwe", maps.len ? ", " : "",
                       cid, id, cid, cid, id, cid);
        free(cid);
    }
    if (maps.len)
        nf_strbuf_addf(sb, "  %s_maps:\n    type: summarize\n    in: {%s}\n", id, maps.buf);
    nf_strbuf_release(&maps);
    free(id);
    strset_free(&conds);
    return 0;
}

int nf_init_pipeline(const struct nf_init_opts *o, char **text, struct nf_error *err)
{
    struct nf_strbuf sb;
    struct dataset ds = { 0 };
    char *root = NULL;
    int rc = 0;
    nf_strbuf_init(&sb);
    *text = NULL;
    const char *template = o->template_name ? o->template_name : "first-level";
    if (!o->bids) {
        nf_strbuf_addf(&sb,
            "# A first-level + group analysis of a BIDS dataset with fMRIPrep derivatives.\n"
            "# Written by `nlflow init`; `nlflow init --bids DIR` fills it in from a dataset.\n"
            "# Set the params below, name the task and its conditions, then `nlflow plan`\n"
            "# and `nlflow run` this file (docs/guide.md: a lab's standard analysis).\n\n"
            "nlflow: 1\nname: study\nrequires: \">=%s\"\n"
            "params:\n"
            "  bids: /path/to/bids          # the raw dataset (dataset_description.json, sub-XX/)\n"
            "  derivatives: /path/to/bids/derivatives/fmriprep\n"
            "settings:\n  outputs: results/study\n"
            "nodes:\n"
            "  # the runs of one task, aligned with their events, confounds and masks\n"
            "  task_runs:\n    type: bids\n    root: ${bids}\n    derivatives: ${derivatives}\n"
            "    task: TASK                 # the task entity of the runs (task-TASK)\n"
            "    space: MNI152NLin2009cAsym  # the space fMRIPrep wrote\n"
            "    require: [events, confounds, mask]\n"
            "  # first level per run (design, GLM, contrasts), fixed effects per subject,\n"
            "  # and a group permutation test per contrast: templates/%s.yaml\n"
            "  # contrasts: one per condition against baseline, or any \"name = a - b\"\n"
            "  task:\n    type: use\n    path: templates/%s.yaml\n    with:\n"
            "      contrasts:\n"
            "        - \"condition = CONDITION\"\n"
            "    in:\n      bold: task_runs.bold\n      events: task_runs.events\n"
            "      confounds: task_runs.confounds\n      mask: task_runs.mask\n",
            PACKAGE_VERSION, template, template);
    } else {
        /* absolute paths: the file may be written, and moved, anywhere */
        root = nf_realpath(o->bids);
        if (!root) {
            rc = NF_FAIL(err, NF_EUSAGE, "--bids '%s' is not a readable folder", o->bids);
            goto done;
        }
        rc = scan_dataset(root, o->derivatives, &ds, err);
        if (rc < 0) {
            rc = -1;
            goto done;
        }
        char *slug = node_safe(ds.name, "d_");
        for (char *c = slug; c && *c; c++)
            if (*c == '_')
                *c = '-';
        nf_strbuf_addf(&sb, "# %s — written by `nlflow init --bids ", slug ? slug : "study");
        add_comment_text(&sb, o->bids);
        nf_strbuf_addf(&sb, "`.\n# Dataset \"");
        add_comment_text(&sb, ds.name);
        nf_strbuf_addf(&sb, "\": %zu subjects; task%s:", ds.subjects.n, ds.tasks.n > 1 ? "s" : "");
        for (size_t t = 0; t < ds.tasks.n; t++) {
            nf_strbuf_addf(&sb, "%s ", t ? "," : "");
            add_comment_text(&sb, ds.tasks.v[t]);
            nf_strbuf_addf(&sb, " (%zu runs)", ds.runs_per_task[t]);
        }
        nf_strbuf_addf(&sb, ".\n");
        if (ds.derivatives) {
            nf_strbuf_addf(&sb, "# fMRIPrep derivatives in ");
            add_comment_text(&sb, ds.derivatives);
            nf_strbuf_addf(&sb, "; spaces:");
            for (size_t s = 0; s < ds.spaces.n; s++) {
                nf_strbuf_addf(&sb, "%s ", s ? "," : "");
                add_comment_text(&sb, ds.spaces.v[s]);
            }
            nf_strbuf_addf(&sb, "%s.\n", ds.spaces.n ? "" : " none found");
        } else {
            nf_strbuf_addf(&sb, "# No fMRIPrep derivatives found: the raw runs are modelled, without confounds.\n");
        }
        nf_strbuf_addf(&sb, "# Each condition is a contrast against baseline: edit the contrasts (any\n"
                            "# \"name = expression\" over the conditions, e.g. \"a_minus_b = a - b\"), then\n"
                            "# `nlflow plan` and `nlflow run` this file.\n\n");
        nf_strbuf_addf(&sb, "nlflow: 1\nname: %s\nrequires: \">=%s\"\nparams:\n  bids: ", slug ? slug : "study",
                       PACKAGE_VERSION);
        add_quoted(&sb, root);
        nf_strbuf_addf(&sb, "\n");
        if (ds.derivatives) {
            nf_strbuf_addf(&sb, "  derivatives: ");
            add_quoted(&sb, ds.derivatives);
            nf_strbuf_addf(&sb, "\n");
        }
        nf_strbuf_addf(&sb, "settings:\n  outputs: results/%s\nnodes:\n", slug ? slug : "study");
        free(slug);
        for (size_t t = 0; t < ds.tasks.n; t++)
            if (write_task(&sb, root, ds.tasks.v[t], &ds, template, err) < 0) {
                rc = -1;
                goto done;
            }
    }
    if (sb.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    *text = nf_strbuf_detach(&sb);
done:
    free(root);
    dataset_free(&ds);
    nf_strbuf_release(&sb);
    return rc;
}

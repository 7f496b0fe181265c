/* simulate_bids.c — `simulate` with `bids:`: a small task-fMRI data set laid
 * out as BIDS raw data plus fMRIPrep-like derivatives.
 *
 * The first-level pipelines (bids -> design -> glm -> fixed effects ->
 * permute) need a data set with everything a real one has: events with two
 * conditions, JSON sidecars with the repetition time, preprocessed images in
 * a template space with brain masks, and confounds tables with fMRIPrep's
 * columns (motion, CSF, white matter, framewise displacement with n/a in
 * the first row), and a known answer. Every run of every subject shares the
 * run's event timing (run r has its own, seeded); each voxel of the brain is
 *     y[t] = 100 + 0.5 e (faces[t] + houses[t]) + a_s e faces[t] (in the ROI)
 *            + drift[t] + noise N(0, 1)
 * with faces/houses the events convolved with the Glover HRF (nilearn's
 * glover_hrf, normalised to sum 1 on a TR/16 grid, as nilearn's design
 * matrices are), e = effect_size and a_s = 1 + 0.2 N(0, 1) per subject: the
 * contrast faces - houses is e a_s in the ROI and 0 elsewhere, so its mean
 * over subjects, e, is the `truth` map. Deterministic from the seed, one
 * normal stream per run. participants.tsv gives each subject an age, sex,
 * group and handedness (for group_design), fixed, not drawn.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "core/rng.h"
#include "core/util.h"
#include "simulate_internal.h"

#define TASK "localizer"
#define SPACE "MNI152NLin2009cAsym"
#define FIRST_ONSET 6.0           /* s */
#define EVENT_SPACING 10.0        /* s between onsets, plus up to EVENT_JITTER */
#define EVENT_JITTER 2.0
#define EVENT_DURATION 4.0
#define TAIL 16.0                 /* s after the last event, for its response */
#define OVERSAMPLING 16
#define SUBJECT_SPREAD 0.2        /* sd of a subject's amplitude around 1 */
#define DRIFT 1.0                 /* linear drift over a run, signal units */
/* stream numbers, apart from simulate's subject streams 0.. */
#define EVENTS_STREAM(r) (UINT64_C(0x5EED0000) + (uint64_t)(r))
#define RUN_STREAM(s, r) (UINT64_C(0x7A5C00000000) + (uint64_t)(s) * 1000u + (uint64_t)(r))
#define AMPLITUDE_STREAM UINT64_C(0x7A5D00000000)

int64_t sim_bids_event_count(int64_t images)
{
    double span = (double)images * SIM_TR - TAIL - FIRST_ONSET - EVENT_JITTER;
    int64_t n = span < 0 ? 1 : (int64_t)floor(span / EVENT_SPACING) + 1;
    return n < 2 ? 2 : n;
}

struct run_events {
    int64_t n;
    double *onset;
    bool *face;
};

/* Run r's events: onsets every EVENT_SPACING s with jitter, as many faces
 * as houses (one more face when odd), in a shuffled order. */
static int make_events(int64_t images, uint64_t seed, int64_t r, struct run_events *ev, struct nf_error *err)
{
    ev->n = sim_bids_event_count(images);
    ev->onset = nf_malloc((size_t)ev->n * sizeof *ev->onset);
    ev->face = nf_malloc((size_t)ev->n * sizeof *ev->face);
    if (!ev->onset || !ev->face)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    uint64_t st = seed ^ EVENTS_STREAM(r);
    (void)nf_splitmix64(&st);
    for (int64_t k = 0; k < ev->n; k++) {
        /* centiseconds, so that the TSV holds what the data were made from */
        ev->onset[k] = round((FIRST_ONSET + EVENT_SPACING * (double)k + EVENT_JITTER * nf_rand_uniform(&st)) * 100) / 100;
        ev->face[k] = k < (ev->n + 1) / 2;
    }
    for (int64_t k = ev->n - 1; k > 0; k--) {   /* Fisher-Yates */
        int64_t j = (int64_t)floor(nf_rand_uniform(&st) * (double)(k + 1));
        j = j > k ? k : j;
        bool t = ev->face[k];
        ev->face[k] = ev->face[j];
        ev->face[j] = t;
    }
    return 0;
}

static void events_free(struct run_events *ev)
{
    free(ev->onset);
    free(ev->face);
}

/* scipy.stats.gamma.pdf(x, shape, scale=scale) */
static double gamma_pdf(double x, double shape, double scale)
{
    if (!(x > 0))
        return 0;
    double y = x / scale;
    return exp((shape - 1) * log(y) - y - lgamma(shape)) / scale;
}

/* faces[t], houses[t]: the events of one condition convolved with nilearn's
 * Glover HRF (peak 6 s, undershoot 12 s, dispersions 0.9, ratio 0.35) on a
 * TR/16 grid, sampled at the frames. */
static int regressors(const struct run_events *ev, int64_t images, double *faces, double *houses,
                      struct nf_error *err)
{
    double dt = SIM_TR / OVERSAMPLING;
    int64_t n_fine = images * OVERSAMPLING, n_hrf = (int64_t)ceil(32.0 / dt);
    double *hrf = nf_malloc((size_t)n_hrf * sizeof *hrf);
    double *box = nf_calloc((size_t)n_fine * 2, sizeof *box);
    if (!hrf || !box) {
        free(hrf);
        free(box);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    double sum = 0;
    for (int64_t k = 0; k < n_hrf; k++) {
        double t = (double)k * dt;
        hrf[k] = gamma_pdf(t, 6.0 / 0.9, 0.9) - 0.35 * gamma_pdf(t, 12.0 / 0.9, 0.9);
        sum += hrf[k];
    }
    for (int64_t k = 0; k < n_hrf; k++)
        hrf[k] /= sum;
    for (int64_t e = 0; e < ev->n; e++) {
        double *b = box + (ev->face[e] ? 0 : n_fine);
        for (int64_t i = 0; i < n_fine; i++) {
            double t = (double)i * dt;
            if (t >= ev->onset[e] && t < ev->onset[e] + EVENT_DURATION)
                b[i] = 1;
        }
    }
    for (int c = 0; c < 2; c++) {
        const double *b = box + c * n_fine;
        double *out = c == 0 ? faces : houses;
        for (int64_t t = 0; t < images; t++) {
            int64_t i = t * OVERSAMPLING;
            double acc = 0;
            for (int64_t k = 0; k < n_hrf && k <= i; k++)
                acc += hrf[k] * b[i - k];
            out[t] = acc;
        }
    }
    free(hrf);
    free(box);
    return 0;
}

static struct nf_value *events_table(const struct run_events *ev, struct nf_error *err)
{
    struct nf_value *tab = nf_value_new_table(ev->n, 3, err);
    if (!tab)
        return NULL;
    if (nf_table_column_numeric(tab, 0, "onset", err) < 0 || nf_table_column_numeric(tab, 1, "duration", err) < 0 ||
        nf_table_column_string(tab, 2, "trial_type", err) < 0)
        goto fail;
    for (int64_t k = 0; k < ev->n; k++) {
        tab->u.tab.cols[0].num[k] = ev->onset[k];
        tab->u.tab.cols[1].num[k] = EVENT_DURATION;
        if (!(tab->u.tab.cols[2].str[k] = nf_strdup(ev->face[k] ? "faces" : "houses"))) {
            NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    return tab;
fail:
    nf_value_unref(tab);
    return NULL;
}

static struct nf_value *regressor_table(const double *faces, const double *houses, int64_t images,
                                        struct nf_error *err)
{
    struct nf_value *tab = nf_value_new_table(images, 2, err);
    if (!tab)
        return NULL;
    if (nf_table_column_numeric(tab, 0, "faces", err) < 0 || nf_table_column_numeric(tab, 1, "houses", err) < 0) {
        nf_value_unref(tab);
        return NULL;
    }
    memcpy(tab->u.tab.cols[0].num, faces, (size_t)images * sizeof *faces);
    memcpy(tab->u.tab.cols[1].num, houses, (size_t)images * sizeof *houses);
    return tab;
}

/* fMRIPrep's confounds of one run: motion as small random walks (mm and
 * radians), tissue signals, and framewise displacement (Power et al.: the
 * sum of absolute differences, rotations on a 50 mm sphere; n/a at first). */
static struct nf_value *confounds_table(int64_t images, struct sim_normal *ns, struct nf_error *err)
{
    static const char *const names[] = { "global_signal", "csf", "white_matter", "framewise_displacement",
                                         "trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z" };
    struct nf_value *tab = nf_value_new_table(images, 10, err);
    if (!tab)
        return NULL;
    for (int64_t c = 0; c < 10; c++)
        if (nf_table_column_numeric(tab, c, names[c], err) < 0) {
            nf_value_unref(tab);
            return NULL;
        }
    struct nf_column *col = tab->u.tab.cols;
    for (int64_t t = 0; t < images; t++) {
        col[0].num[t] = 100 + 0.2 * sim_normal_next(ns);
        col[1].num[t] = 1000 + 5 * sim_normal_next(ns);
        col[2].num[t] = 800 + 5 * sim_normal_next(ns);
        double fd = 0;
        for (int m = 0; m < 6; m++) {
            double step = (m < 3 ? 0.02 : 0.0005) * sim_normal_next(ns);
            col[4 + m].num[t] = (t > 0 ? col[4 + m].num[t - 1] : 0) + step;
            fd += (m < 3 ? 1.0 : 50.0) * fabs(step);
        }
        col[3].num[t] = t == 0 ? NAN : fd;
    }
    return tab;
}

/* One run's series: baseline, shared response, the subject's face effect
 * in the ROI, drift, noise. */
static struct nf_value *run_series(const struct simulate_params *p, const struct nf_geom *geom, const int64_t *roi,
                                   int64_t n_roi, const double *faces, const double *houses, double amplitude,
                                   struct sim_normal *ns, struct nf_error *err)
{
    const int64_t T = p->images, nvox = nf_grid_nvox(&geom->grid);
    struct nf_value *vol = nf_value_new_volume(&geom->grid, 4, T, err);
    if (!vol)
        return NULL;
    vol->u.vol.tr = SIM_TR;
    for (int64_t t = 0; t < T; t++) {
        float *frame = vol->u.vol.data + t * nvox;
        double base = SIM_BASELINE + 0.5 * p->effect_size * (faces[t] + houses[t]) +
                      DRIFT * ((double)t / (double)(T - 1) - 0.5);
        for (int64_t c = 0; c < geom->n_voxels; c++)
            frame[geom->index[c]] = (float)(base + p->noise * sim_normal_next(ns));
        for (int64_t r = 0; r < n_roi; r++)
            frame[geom->index[roi[r]]] += (float)(amplitude * p->effect_size * faces[t]);
    }
    return vol;
}

static int write_in(const char *dir, const char *name, struct nf_value *v, bool series, int intent,
                    struct nf_error *err)
{
    char *path = nf_path_join(dir, name);
    if (!path)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc;
    if (v->kind == NF_KIND_TABLE)
        rc = nf_table_write(path, &v->u.tab, err);
    else if (series)
        rc = nf_nifti_write_series(path, &v->u.vol.grid, v->u.vol.nt, v->u.vol.data, v->u.vol.tr,
                                   "nlflow simulate", err);
    else
        rc = nf_nifti_write(path, &v->u.vol.grid, 1, v->u.vol.data, intent, "nlflow simulate", err);
    if (rc == 0 && series)
        nf_value_set_path(v, path);
    free(path);
    return rc;
}

static int write_top_level(const char *root, const char *deriv, const char *truth_dir, struct nf_value *truth,
                           struct nf_error *err)
{
    int rc = 0;
    NF_TRY(rc = nf_mkdirs(root, err));
    NF_TRY(rc = nf_mkdirs(deriv, err));
    NF_TRY(rc = nf_mkdirs(truth_dir, err));
    NF_TRY(rc = sim_write_text(root, "dataset_description.json",
                               "{\n  \"Name\": \"nlflow simulated task\",\n  \"BIDSVersion\": \"1.8.0\",\n"
                               "  \"DatasetType\": \"raw\"\n}\n", err));
    NF_TRY(rc = sim_write_text(root, "task-" TASK "_bold.json",
                               "{\n  \"TaskName\": \"" TASK "\",\n  \"RepetitionTime\": 2.0\n}\n", err));
    NF_TRY(rc = sim_write_text(deriv, "dataset_description.json",
                               "{\n  \"Name\": \"fMRIPrep-like derivatives (nlflow simulate)\",\n"
                               "  \"BIDSVersion\": \"1.8.0\",\n  \"DatasetType\": \"derivative\",\n"
                               "  \"GeneratedBy\": [{\"Name\": \"nlflow simulate\"}]\n}\n", err));
    NF_TRY(rc = write_in(truth_dir, "truth.nii.gz", truth, false, 0, err));
fail:
    return rc;
}

/* participants.tsv: ages from a fixed list (not a line in the subject index,
 * so that age is no combination of sex and group), sex alternating, groups
 * in pairs (balanced against sex), handedness with one n/a (a column no
 * design uses may have gaps). No random draws: the images stay as they were. */
static int write_participants(const char *root, int64_t subjects, struct nf_error *err)
{
    static const int ages[] = { 34, 27, 45, 23, 38, 52, 29, 41, 31, 47, 25, 36, 58, 33, 42, 28 };
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "participant_id\tage\tsex\tgroup\thandedness\n");
    for (int64_t s = 0; s < subjects; s++) {
        char *sub = sim_subject_label(s, subjects);
        nf_strbuf_addf(&sb, "%s\t%d\t%s\t%s\t%s\n", sub ? sub : "", ages[s % 16], s % 2 ? "M" : "F",
                       s / 2 % 2 ? "patient" : "control", s == 2 ? "n/a" : s % 5 == 4 ? "L" : "R");
        if (!sub)
            sb.oom = true;
        free(sub);
    }
    int rc = sb.oom ? NF_FAIL(err, NF_ENOMEM, "out of memory") : sim_write_text(root, "participants.tsv", sb.buf, err);
    nf_strbuf_release(&sb);
    return rc;
}

/* The data set's folder: new, empty or simulate's own (its earlier subjects
 * removed), listing the subjects it is about to write. */
static int begin_folder(const struct simulate_params *p, int64_t subjects, struct nf_error *err)
{
    char **labels = nf_calloc((size_t)subjects + 1, sizeof *labels);
    int rc = labels ? 0 : NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t s = 0; rc == 0 && s < subjects; s++)
        if (!(labels[s] = sim_subject_label(s, subjects)))
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (rc == 0)
        rc = sim_folder_begin(p, p->bids, labels, (size_t)subjects, err);
    for (int64_t s = 0; labels && s < subjects; s++)
        free(labels[s]);
    free(labels);
    return rc;
}

int sim_bids_run(struct nf_run *run, const struct nf_geom *geom, const int64_t *roi, int64_t n_roi,
                 uint64_t seed, struct nf_value **out)
{
    const struct simulate_params *p = run->params;
    struct nf_error *err = run->err;
    const int64_t T = p->images, S = p->subjects, R = p->runs;
    char *deriv = nf_path_join(p->bids, "derivatives/fmriprep"), *truth_dir = nf_path_join(p->bids, "derivatives/simulation");
    double *faces = nf_malloc((size_t)T * sizeof *faces), *houses = nf_malloc((size_t)T * sizeof *houses);
    struct run_events ev = { 0 };
    struct nf_value *mask = out[SIMULATE_OUT_MASK];
    int rc = 0;
    if (!deriv || !truth_dir || !faces || !houses) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (!(out[SIMULATE_OUT_TRUTH] = nf_value_new_volume(&geom->grid, 3, 1, err))) {
        rc = err->code;
        goto fail;
    }
    for (int64_t r = 0; r < n_roi; r++)
        out[SIMULATE_OUT_TRUTH]->u.vol.data[geom->index[roi[r]]] = (float)p->effect_size;
    NF_TRY(rc = begin_folder(p, S, err));
    NF_TRY(rc = write_top_level(p->bids, deriv, truth_dir, out[SIMULATE_OUT_TRUTH], err));
    NF_TRY(rc = write_participants(p->bids, S, err));
    if (!(out[SIMULATE_OUT_DATA] = nf_value_new_collection((size_t)(S * R), err))) {
        rc = err->code;
        goto fail;
    }
    struct sim_normal amp;
    sim_normal_init(&amp, seed, AMPLITUDE_STREAM);
    double *amplitude = nf_malloc((size_t)S * sizeof *amplitude);
    if (!amplitude) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t s = 0; s < S; s++)
        amplitude[s] = 1 + SUBJECT_SPREAD * sim_normal_next(&amp);
    for (int64_t r = 0; r < R && rc == 0; r++) {
        events_free(&ev);
        memset(&ev, 0, sizeof ev);
        if ((rc = make_events(T, seed, r, &ev, err)) < 0 || (rc = regressors(&ev, T, faces, houses, err)) < 0)
            break;
        struct nf_value *events = events_table(&ev, err);
        if (!events) {
            rc = err->code;
            break;
        }
        if (r == 0) {
            out[SIMULATE_OUT_X] = nf_value_ref(events);
            if (!(out[SIMULATE_OUT_Y] = regressor_table(faces, houses, T, err)))
                rc = err->code;
        }
        for (int64_t s = 0; s < S && rc == 0; s++) {
            if (nf_run_interrupted(run)) {
                rc = NF_FAIL(err, NF_EINTR, "interrupted");
                break;
            }
            nf_progress(run, r * S + s, S * R, "runs");
            char *sub = sim_subject_label(s, S);
            char *stem = sub ? nf_asprintf("%s_task-" TASK "_run-%" PRId64, sub, r + 1) : NULL;
            char *raw_func = sub ? nf_asprintf("%s/%s/func", p->bids, sub) : NULL;
            char *der_func = sub ? nf_asprintf("%s/%s/func", deriv, sub) : NULL;
            char *name = NULL;
            struct sim_normal ns;
            sim_normal_init(&ns, seed, RUN_STREAM(s, r));
            struct nf_value *conf = NULL, *vol = NULL;
            if (!stem || !raw_func || !der_func)
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            if (rc == 0 && !(vol = run_series(p, geom, roi, n_roi, faces, houses, amplitude[s], &ns, err)))
                rc = err->code;
            if (rc == 0 && !(conf = confounds_table(T, &ns, err)))
                rc = err->code;
            if (rc == 0)
                rc = nf_mkdirs(raw_func, err);
            if (rc == 0)
                rc = nf_mkdirs(der_func, err);
#define WRITE(dir, suffix, v, series)                                               \
            if (rc == 0) {                                                          \
                free(name);                                                         \
                name = nf_asprintf("%s%s", stem, suffix);                           \
                rc = name ? write_in(dir, name, v, series, 0, err)                  \
                          : NF_FAIL(err, NF_ENOMEM, "out of memory");               \
            }
            WRITE(raw_func, "_events.tsv", events, false);
            WRITE(raw_func, "_bold.nii.gz", vol, true);
            WRITE(der_func, "_desc-confounds_timeseries.tsv", conf, false);
            WRITE(der_func, "_space-" SPACE "_desc-brain_mask.nii.gz", mask, false);
            WRITE(der_func, "_space-" SPACE "_desc-preproc_bold.nii.gz", vol, true);
#undef WRITE
            if (rc == 0) {
                nf_value_set_label(vol, stem);
                if (!vol->label)
                    rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            }
            if (rc == 0) {   /* subject by subject, runs in order: the bids node's order */
                out[SIMULATE_OUT_DATA]->u.coll.items[s * R + r] = vol;
                vol = NULL;
            }
            nf_value_unref(vol);
            nf_value_unref(conf);
            free(name);
            free(sub);
            free(stem);
            free(raw_func);
            free(der_func);
        }
        nf_value_unref(events);
    }
    free(amplitude);
fail:
    events_free(&ev);
    free(deriv);
    free(truth_dir);
    free(faces);
    free(houses);
    return rc < 0 ? rc : 0;
}

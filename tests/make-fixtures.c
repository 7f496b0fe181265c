/* make-fixtures.c — writes the small data files the golden failure tests read
 * (tests/fail/): a 3D and a 4D volume, matching / shifted / empty masks, a
 * truncated .nii.gz and a truncated .nii, a design table, events and confounds tables (the design
 * node's), participants tables (group_design's), all on a 6x5x4 grid, and a mask on a
 * 9x8x6 grid of 2 mm voxels (another grid), and two special files named like
 * inputs (a FIFO fifo.nii, a link urandom.tsv to /dev/urandom) that readers
 * must refuse rather than block on or read without end, and a BIDS data set
 * (bids/) whose tasks each lack something (the bids node's failures). Usage:
 *     make-fixtures DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/io.h"
#include "core/util.h"

/* from, gzip-compressed by zlib at level 6, to to. */
static int gzip_copy(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    gzFile out = gzopen(to, "wb6");
    char buf[1 << 14];
    size_t got;
    int rc = in && out ? 0 : -1;
    while (rc == 0 && (got = fread(buf, 1, sizeof buf, in)) > 0)
        if (gzwrite(out, buf, (unsigned)got) != (int)got)
            rc = -1;
    if (in)
        fclose(in);
    if (out && gzclose(out) != Z_OK)
        rc = -1;
    return rc;
}

static int write_vol(const char *dir, const char *name, const struct nf_grid *g, int64_t nt,
                     float (*value)(int64_t v, int64_t t))
{
    struct nf_error err = { 0 };
    int64_t nvox = nf_grid_nvox(g);
    float *data = calloc((size_t)(nvox * nt), sizeof *data);
    char *path = nf_path_join(dir, name);
    int rc = -1;
    if (!data || !path)
        goto fail;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t v = 0; v < nvox; v++)
            data[t * nvox + v] = value(v, t);
    rc = nf_nifti_write(path, g, nt, data, 0, "nlflow test fixture", &err);
    if (rc < 0)
        nf_error_print(&err);
fail:
    free(data);
    free(path);
    return rc;
}

/* A 4D series with a repetition time in its header. */
static int write_series(const char *dir, const char *name, const struct nf_grid *g, int64_t nt, double tr)
{
    struct nf_error err = { 0 };
    int64_t nvox = nf_grid_nvox(g);
    float *data = calloc((size_t)(nvox * nt), sizeof *data);
    char *path = nf_path_join(dir, name), *folder = path ? nf_path_dirname(path) : NULL;
    int rc = -1;
    if (data && folder && nf_mkdirs(folder, &err) == 0)
        rc = nf_nifti_write_series(path, g, nt, data, tr, "nlflow test fixture", &err);
    if (rc < 0)
        nf_error_print(&err);
    free(data);
    free(path);
    free(folder);
    return rc;
}

/* The BIDS data set: task good is complete; notr has no RepetitionTime,
 * badjson a malformed sidecar, noevents no events file, mismatch a sidecar
 * TR (2.5 s) other than its header's (2 s). */
static const struct { const char *name, *text; } bids_files[] = {
    { "bids/dataset_description.json", "{\"Name\": \"fixture\", \"BIDSVersion\": \"1.8.0\"}\n" },
    { "bids/task-good_bold.json", "{\"TaskName\": \"good\", \"RepetitionTime\": 2}\n" },
    { "bids/sub-01/func/sub-01_task-good_events.tsv", "onset\tduration\ttrial_type\n1\t2\tface\n6\t2\thouse\n" },
    { "bids/task-notr_bold.json", "{\"TaskName\": \"notr\"}\n" },
    { "bids/task-badjson_bold.json", "{\n  \"RepetitionTime\": 2,\n  \"TaskName\": badjson\n}\n" },
    { "bids/task-noevents_bold.json", "{\"RepetitionTime\": 2}\n" },
    { "bids/task-mismatch_bold.json", "{\"RepetitionTime\": 2.5}\n" },
};
static const char *const bids_tasks[] = { "good", "notr", "badjson", "noevents", "mismatch" };

static float ramp(int64_t v, int64_t t) { return (float)(v + 100 * t) * 0.5f; }
static float inside(int64_t v, int64_t t) { (void)t; return (v % 7 != 0) ? 1.0f : 0.0f; }
static float nothing(int64_t v, int64_t t) { (void)v; (void)t; return 0.0f; }
static float three_regions(int64_t v, int64_t t) { (void)t; return (float)(1 + v % 3); }

/* Label-name files for atlas.nii.gz (summarize's atlas_labels): each broken
 * in one way; atlas_bad.nii.txt is found beside atlas_bad.nii.gz. */
static const struct { const char *name, *text; size_t len; } label_files[] = {
    { "labels_dup.txt", "1 Left\n2 Right\n1 Middle\n", 0 },
    { "labels_nocol_dseg.tsv", "index\tlabel\n1\tLeft\n", 0 },
    { "labels_binary.lut", "\x00\x01\x02\xcc\xcb", 5 },
    { "atlas_bad.nii.txt", "1 Left\n2.5 Right\n", 0 },
};

/* Events and confounds for the design node: one well-formed pair (8 rows of
 * confounds, as bold.nii.gz has 8 volumes) and events broken in one way each;
 * and a group design. */
static const struct { const char *name, *text; } design_files[] = {
    { "events.tsv", "onset\tduration\ttrial_type\n1\t2\tface\n6\t2\thouse\n" },
    { "events_negative.tsv", "onset\tduration\ttrial_type\n1\t2\tface\n6\t-2\thouse\n" },
    { "events_text_onset.tsv", "onset\tduration\ttrial_type\n1\t2\tface\nlate\t2\thouse\n" },
    { "events_nan.tsv", "onset\tduration\ttrial_type\n1\tn/a\tface\n6\t2\thouse\n" },
    { "confounds.tsv", "trans_x\tcsf\n0.1\t1\n0.2\t2\n0.1\t1\n0\t3\n0.3\t1\n0.2\t2\n0.1\t2\n0\t1\n" },
    /* a group design for permute's test: glm, the 8 volumes as subjects: age
     * in months is 12 x age (rank deficient with age), sites of 4, 3 and 1 */
    { "group_design.tsv", "intercept\tage\tage_months\tsite\n1\t30\t360\t1\n1\t41\t492\t1\n1\t25\t300\t2\n"
                          "1\t38\t456\t1\n1\t52\t624\t2\n1\t29\t348\t3\n1\t47\t564\t2\n1\t33\t396\t1\n" },
    /* participants tables for group_design (maps: sub-01_bold.nii.gz ...):
     * sub-03 missing and one site, an n/a age, sub-01 twice */
    { "participants.tsv", "participant_id\tage\tsex\tsite\nsub-02\t31\tF\tA\nsub-01\t25\tM\tA\n" },
    { "participants_na.tsv", "participant_id\tage\tsex\nsub-01\t25\tM\nsub-02\tn/a\tF\n" },
    { "participants_dup.tsv", "participant_id\tage\nsub-01\t25\nsub-02\t31\nsub-01\t27\n" },
};

int main(int argc, char **argv)
{
    struct nf_error err = { 0 };
    if (argc != 2) {
        fprintf(stderr, "usage: make-fixtures DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    if (nf_mkdirs(dir, &err) < 0) {
        nf_error_print(&err);
        return 1;
    }
    struct nf_grid g = { .dim = { 6, 5, 4 }, .pixdim = { 3, 3, 3 }, .sform_code = 4, .qform_code = 4 };
    double A[4][4] = { { -3, 0, 0, 9 }, { 0, 3, 0, -6 }, { 0, 0, 3, -3 }, { 0, 0, 0, 1 } };
    memcpy(g.affine, A, sizeof A);
    struct nf_grid shifted = g;
    shifted.affine[0][3] += 6;   /* same dims, moved by two voxels */
    struct nf_grid finer = { .dim = { 9, 8, 6 }, .pixdim = { 2, 2, 2 }, .sform_code = 4, .qform_code = 4 };
    double F[4][4] = { { -2, 0, 0, 8 }, { 0, 2, 0, -7 }, { 0, 0, 2, -5 }, { 0, 0, 0, 1 } };
    memcpy(finer.affine, F, sizeof F);   /* the same brain at 2 mm: another grid */
    if (write_vol(dir, "bold.nii.gz", &g, 8, ramp) < 0 || write_vol(dir, "anat.nii.gz", &g, 1, ramp) < 0 ||
        write_vol(dir, "mask.nii.gz", &g, 1, inside) < 0 ||
        write_vol(dir, "mask_shifted.nii.gz", &shifted, 1, inside) < 0 ||
        write_vol(dir, "mask_2mm.nii.gz", &finer, 1, inside) < 0 ||
        write_vol(dir, "mask_empty.nii.gz", &g, 1, nothing) < 0 ||
        write_vol(dir, "mask_4d.nii.gz", &g, 3, inside) < 0 ||
        write_vol(dir, "truncated.nii", &g, 8, ramp) < 0 ||
        write_vol(dir, "sub-01_bold.nii.gz", &g, 8, ramp) < 0 ||
        write_vol(dir, "sub-02_bold.nii.gz", &g, 8, ramp) < 0 ||
        write_vol(dir, "sub-03_bold.nii.gz", &g, 6, ramp) < 0 ||
        write_vol(dir, "atlas.nii.gz", &g, 1, three_regions) < 0 ||
        write_vol(dir, "atlas_bad.nii.gz", &g, 1, three_regions) < 0)
        return 1;
    for (size_t i = 0; i < sizeof label_files / sizeof *label_files; i++) {
        char *path = nf_path_join(dir, label_files[i].name);
        size_t len = label_files[i].len ? label_files[i].len : strlen(label_files[i].text);
        if (nf_write_file_atomic(path, label_files[i].text, len, &err) < 0) {
            nf_error_print(&err);
            return 1;
        }
        free(path);
    }
    for (size_t i = 0; i < sizeof design_files / sizeof *design_files; i++) {
        char *path = nf_path_join(dir, design_files[i].name);
        if (nf_write_file_atomic(path, design_files[i].text, strlen(design_files[i].text), &err) < 0) {
            nf_error_print(&err);
            return 1;
        }
        free(path);
    }
    for (size_t i = 0; i < sizeof bids_files / sizeof *bids_files; i++) {
        char *path = nf_path_join(dir, bids_files[i].name), *folder = path ? nf_path_dirname(path) : NULL;
        if (!folder || nf_mkdirs(folder, &err) < 0 ||
            nf_write_file_atomic(path, bids_files[i].text, strlen(bids_files[i].text), &err) < 0) {
            nf_error_print(&err);
            return 1;
        }
        free(path);
        free(folder);
    }
    for (size_t i = 0; i < sizeof bids_tasks / sizeof *bids_tasks; i++) {
        char name[128];
        snprintf(name, sizeof name, "bids/sub-01/func/sub-01_task-%s_bold.nii.gz", bids_tasks[i]);
        if (write_series(dir, name, &g, 8, 2.0) < 0)
            return 1;
    }
    /* cut a gzip stream in the middle of the voxel data: zlib's at level 6,
     * whichever compressor nlflow's writer uses, so that the cut (and the
     * golden message that counts the bytes before it) stays where it is */
    char *trunc = nf_path_join(dir, "truncated.nii.gz"), *plain = nf_path_join(dir, "truncated.nii");
    if (gzip_copy(plain, trunc) != 0) {
        perror(trunc);
        return 1;
    }
    free(plain);
    FILE *f = fopen(trunc, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) {
        perror(trunc);
        return 1;
    }
    long size = ftell(f);
    fclose(f);
    if (truncate(trunc, size / 2) != 0) {
        perror(trunc);
        return 1;
    }
    free(trunc);
    /* an uncompressed one: the 352-byte header and 1000 bytes of voxel data */
    char *trunc_nii = nf_path_join(dir, "truncated.nii");
    if (!trunc_nii || truncate(trunc_nii, 352 + 1000) != 0) {
        perror(trunc_nii);
        return 1;
    }
    free(trunc_nii);
    char *tsv = nf_path_join(dir, "design.tsv");
    const char text[] = "a\tb\ttrial_type\n1\t2\tface\n3\t4\thouse\n5\t6\tface\n";
    if (nf_write_file_atomic(tsv, text, sizeof text - 1, &err) < 0) {
        nf_error_print(&err);
        return 1;
    }
    free(tsv);
    char *fifo = nf_path_join(dir, "fifo.nii"), *device = nf_path_join(dir, "urandom.tsv");
    if (mkfifo(fifo, 0600) != 0 || symlink("/dev/urandom", device) != 0) {
        perror("make-fixtures: special files");
        return 1;
    }
    free(fifo);
    free(device);
    return 0;
}

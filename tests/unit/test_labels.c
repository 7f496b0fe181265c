/* test_labels.c — unit tests of the atlas label-name readers (engine/io/labels.c).
 *
 * Each format is written here by hand with the expected (index, name) pairs
 * spelled out; the files mricron-data ships are read when installed (aal: 116
 * regions, label 1 Precentral_L, CR LF line ends); discovery is checked in
 * its documented order; every malformed case must fail with its exact message.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "io/io.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/nf_test_labels_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char *cmd = nf_asprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

/* Write `len` bytes (-1: strlen) to dir/name; returns the owned path. */
static char *write_file(const char *name, const char *text, long len)
{
    char *path = nf_path_join(dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    size_t n = len < 0 ? strlen(text) : (size_t)len;
    assert_int_equal(fwrite(text, 1, n, fp), n);
    fclose(fp);
    return path;
}

static void expect_names(const char *name, const char *text, size_t n, const int64_t *index,
                         const char *const *names)
{
    struct nf_label_names l;
    struct nf_error err = {0};
    char *path = write_file(name, text, -1);
    if (nf_label_names_read(path, &l, &err) != 0)
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(l.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(l.v[i].index, index[i]);
        assert_string_equal(l.v[i].name, names[i]);
        assert_string_equal(nf_label_name(&l, index[i]), names[i]);
    }
    assert_string_equal(l.path, path);
    assert_null(nf_label_name(&l, 999));
    nf_label_names_release(&l);
    free(path);
}

static void test_mricron_txt(void **state)
{
    (void)state;
    static const int64_t idx[] = {1, 2, 0, 7};
    static const char *const names[] = {"Precentral_L", "Precentral_R", "Unclassified",
                                        "Pontine_crossing_tract_(a_part_of_MCP)"};
    /* CR LF, a code column, tabs (JHU's files), a blank line at the end */
    expect_names("a.nii.txt",
                 "1 Precentral_L 2001\r\n2 Precentral_R 2002\r\n0\tUnclassified\r\n"
                 "7\tPontine_crossing_tract_(a_part_of_MCP)\r\n\r\n",
                 4, idx, names);
}

static void test_lut_name_first(void **state)
{
    (void)state;
    static const int64_t idx[] = {0, 2, 17};
    static const char *const names[] = {"Unknown", "Left-Cerebral-White-Matter",
                                        "Left-Hippocampus"};
    expect_names("fs.lut",
                 "# FreeSurferColorLUT style\n#No. Label Name: R G B A\n\n"
                 "0   Unknown                       0   0   0   0\n"
                 "2   Left-Cerebral-White-Matter    245 245 245 0\n"
                 "17  Left-Hippocampus              220 216 20  0\n",
                 3, idx, names);
}

static void test_lut_rgb_first(void **state)
{
    (void)state;
    static const int64_t idx[] = {1, 2};
    static const char *const names[] = {"Left Cerebral White Matter", "Frontal Pole"};
    /* FSL/fsleyes: colours in 0..1, names with spaces */
    expect_names("fsl.lut",
                 "1 0.00000 0.93333 0.00000 Left Cerebral White Matter\n"
                 "2 1 0.5 0.25   Frontal Pole  \n",
                 2, idx, names);
}

static void test_dseg_tsv(void **state)
{
    (void)state;
    static const int64_t idx[] = {1, 2, 3};
    static const char *const names[] = {"GM", "WM", "CSF"};
    expect_names("sub-01_dseg.tsv",
                 "abbreviation\tindex\tname\tcolor\nGM\t1\tGM\t#ff0000\n"
                 "WM\t2\tWM\t#00ff00\nCSF\t3\tCSF\t#0000ff\n",
                 3, idx, names);
}

/* The files Debian's mricron-data ships, read as they are. */
static void test_mricron_data(void **state)
{
    (void)state;
    const char *aal = "/usr/share/mricron/templates/aal.nii.txt";
    struct nf_label_names l;
    struct nf_error err = {0};
    if (access(aal, R_OK) != 0)
        skip();
    assert_int_equal(nf_label_names_read(aal, &l, &err), 0);
    assert_int_equal(l.n, 116);
    assert_string_equal(nf_label_name(&l, 1), "Precentral_L");
    assert_string_equal(nf_label_name(&l, 116), "Vermis_10");
    nf_label_names_release(&l);
    /* the others too: AICHA (384 regions), JHU with tabs and label 0 */
    assert_int_equal(nf_label_names_read("/usr/share/mricron/templates/AICHAmc.nii.txt", &l, &err), 0);
    assert_string_equal(nf_label_name(&l, 1), "G_Frontal_Sup-1");
    nf_label_names_release(&l);
    assert_int_equal(nf_label_names_read("/usr/share/mricron/templates/JHU-WhiteMatter-labels-1mm.nii.txt",
                                         &l, &err), 0);
    assert_string_equal(nf_label_name(&l, 0), "Unclassified");
    assert_string_equal(nf_label_name(&l, 2), "Pontine_crossing_tract_(a_part_of_MCP)");
    nf_label_names_release(&l);
    char *found = NULL;
    assert_int_equal(nf_label_names_sidecar("/usr/share/mricron/templates/aal.nii.gz", &found, &err), 0);
    assert_string_equal(found, aal);
    free(found);
    /* mricron's .lut is a binary palette: refused, named */
    const char *lut = "/usr/share/mricron/templates/aal.nii.lut";
    assert_true(nf_label_names_read(lut, &l, &err) == NF_EDATA);
    assert_non_null(strstr(err.msg, "binary data"));
}

static void expect_sidecar(const char *volume, const char *expected)
{
    char *vpath = nf_path_join(dir, volume), *found = NULL;
    struct nf_error err = {0};
    assert_int_equal(nf_label_names_sidecar(vpath, &found, &err), 0);
    if (!expected) {
        assert_null(found);
    } else {
        char *want = nf_path_join(dir, expected);
        assert_non_null(found);
        assert_string_equal(found, want);
        free(want);
    }
    free(found);
    free(vpath);
}

/* Discovery: FILE.txt (without .gz), STEM.txt, STEM.lut, STEM.tsv for _dseg;
 * each removed in turn reveals the next. */
static void test_discovery_order(void **state)
{
    (void)state;
    const char *files[] = {"atl.nii.txt", "atl.txt", "atl.lut"};
    char *paths[3];
    for (int i = 0; i < 3; i++)
        paths[i] = write_file(files[i], "1 A\n", -1);
    expect_sidecar("atl.nii.gz", "atl.nii.txt");
    expect_sidecar("atl.nii", "atl.nii.txt");
    unlink(paths[0]);
    expect_sidecar("atl.nii.gz", "atl.txt");
    unlink(paths[1]);
    expect_sidecar("atl.nii.gz", "atl.lut");
    unlink(paths[2]);
    expect_sidecar("atl.nii.gz", NULL);
    /* not the binary-palette name mricron uses */
    char *pal = write_file("atl.nii.lut", "1 A\n", -1);
    expect_sidecar("atl.nii.gz", NULL);
    unlink(pal);
    free(pal);
    char *dseg = write_file("sub-01_space-MNI_dseg.tsv", "index\tname\n1\tA\n", -1);
    expect_sidecar("sub-01_space-MNI_dseg.nii.gz", "sub-01_space-MNI_dseg.tsv");
    expect_sidecar("sub-01_space-MNI_T1w.nii.gz", NULL);
    unlink(dseg);
    free(dseg);
    for (int i = 0; i < 3; i++)
        free(paths[i]);
}

static void expect_error(const char *name, const char *text, long len, const char *msg_fmt)
{
    struct nf_label_names l;
    struct nf_error err = {0};
    char *path = write_file(name, text, len);
    char *want = nf_asprintf(msg_fmt, path);
    assert_int_equal(nf_label_names_read(path, &l, &err), NF_EDATA);
    assert_string_equal(err.msg, want);
    assert_int_equal(l.n, 0);
    assert_null(l.v);
    free(want);
    free(path);
}

static void test_malformed(void **state)
{
    (void)state;
    expect_error("a.txt", "1 A\nx1 B\n", -1,
                 "label file '%s', line 2: index 'x1' is not an integer from 0 to 16777216");
    expect_error("b.txt", "1 A\n-3 B\n", -1,
                 "label file '%s', line 2: index '-3' is not an integer from 0 to 16777216");
    expect_error("c.txt", "1 A\n2 B\n1 C\n", -1,
                 "label file '%s', line 3: label 1 is named twice ('A' and 'C')");
    expect_error("d.txt", "1 A\n2\n", -1,
                 "label file '%s', line 2: expected an index and a name, got '2'");
    expect_error("e.txt", "", -1,
                 "label file '%s' is empty (expected lines \"index name\")");
    expect_error("f.txt", "\n  \r\n", -1,
                 "label file '%s' is empty (expected lines \"index name\")");
    expect_error("g.txt", "# only a comment\n", -1, "label file '%s' names no label");
    expect_error("h.txt", "1 A\n\x01\x02\xff\x00 junk", 10,
                 "label file '%s', line 2: binary data (byte 0x01), not a text file of "
                 "label names");
    expect_error("i.lut", "1 A 1 2 3\n2 B 1 x 3\n", -1,
                 "label file '%s', line 2: expected \"index name R G B [A]\" or \"index R G "
                 "B name\", found 'x' after the name");
    expect_error("j_dseg.tsv", "index\tlabel\n1\tA\n", -1,
                 "label file '%s', line 1: a _dseg.tsv needs the columns 'index' and 'name' "
                 "in its header; missing 'name'");
    expect_error("k_dseg.tsv", "name\tindex\tcolor\nA\t1\t#fff\nB\n", -1,
                 "label file '%s', line 3: 1 columns, the header has 3");
    expect_error("l_dseg.tsv", "index\tname\n1\t\n", -1,
                 "label file '%s', line 2: label 1 has an empty name");
    expect_error("m_dseg.tsv", "index\tname\n1.5\tA\n", -1,
                 "label file '%s', line 2: index '1.5' is not an integer from 0 to 16777216");
    expect_error("n_dseg.tsv", "", -1,
                 "label file '%s' is empty (expected a header row with columns 'index' and "
                 "'name')");
}

/* Size guard: a file over the bound is refused before it is read; missing
 * files, folders and FIFOs are i/o errors. */
static void test_too_large(void **state)
{
    (void)state;
    struct nf_label_names l;
    struct nf_error err = {0};
    char *path = nf_path_join(dir, "huge.txt");
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, NF_LABELS_MAX_BYTES, SEEK_SET), 0);
    fputc('\n', fp);
    fclose(fp);
    char *want = nf_asprintf("label file '%s' is %d bytes; label files are text of at most %d "
                             "bytes", path, NF_LABELS_MAX_BYTES + 1, NF_LABELS_MAX_BYTES);
    assert_int_equal(nf_label_names_read(path, &l, &err), NF_EDATA);
    assert_string_equal(err.msg, want);
    free(want);
    unlink(path);
    free(path);
    /* a missing file and a folder are i/o errors */
    assert_int_equal(nf_label_names_read("/nonexistent/x.txt", &l, &err), NF_EIO);
    assert_string_equal(err.msg, "cannot read label file '/nonexistent/x.txt': No such file or "
                                 "directory");
    assert_int_equal(nf_label_names_read(dir, &l, &err), NF_EIO);
    assert_non_null(strstr(err.msg, "it is a folder"));
    /* a FIFO would block the reader: refused before opening */
    char *fifo = nf_path_join(dir, "names.txt");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(nf_label_names_read(fifo, &l, &err), NF_EIO);
    assert_non_null(strstr(err.msg, "FIFO"));
    unlink(fifo);
    free(fifo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mricron_txt),
        cmocka_unit_test(test_lut_name_first),
        cmocka_unit_test(test_lut_rgb_first),
        cmocka_unit_test(test_dseg_tsv),
        cmocka_unit_test(test_mricron_data),
        cmocka_unit_test(test_discovery_order),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_too_large),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

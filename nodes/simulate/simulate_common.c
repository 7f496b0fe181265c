/* simulate_common.c — what the two data sets of `simulate` share (the
 * regression one in simulate.c, the BIDS task one in simulate_bids.c):
 * seeded normal streams, voxel coordinates, the ROI sphere, subject labels
 * and small text files. A file of its own, so that the two callers do not
 * call each other (tests/check-layout.sh). */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "core/rng.h"
#include "core/util.h"
#include "simulate_internal.h"

void sim_normal_init(struct sim_normal *ns, uint64_t seed, uint64_t stream)
{
    ns->state = seed ^ (0xD1B54A32D192ED03ull * (stream + 1));
    (void)nf_splitmix64(&ns->state);
    ns->has_spare = false;
    ns->spare = 0.0;
}

double sim_normal_next(struct sim_normal *ns)
{
    if (ns->has_spare) {
        ns->has_spare = false;
        return ns->spare;
    }
    double u1 = nf_rand_uniform(&ns->state), u2 = nf_rand_uniform(&ns->state);
    if (u1 < 1e-300)
        u1 = 1e-300;
    double r = sqrt(-2.0 * log(u1)), theta = 6.283185307179586 * u2;
    ns->spare = r * sin(theta);
    ns->has_spare = true;
    return r * cos(theta);
}

void sim_voxel_to_world(const struct nf_grid *g, double i, double j, double k, double xyz[3])
{
    for (int r = 0; r < 3; r++)
        xyz[r] = g->affine[r][0] * i + g->affine[r][1] * j + g->affine[r][2] * k + g->affine[r][3];
}

/* The in-mask columns whose voxel centre lies within the ROI sphere. */
int64_t sim_roi_columns(const struct nf_geom *geom, const double centre[3], double radius, int64_t *roi)
{
    const struct nf_grid *g = &geom->grid;
    int64_t n = 0;
    for (int64_t c = 0; c < geom->n_voxels; c++) {
        int64_t off = geom->index[c];
        int64_t i = off % g->dim[0], j = (off / g->dim[0]) % g->dim[1],
                k = off / (g->dim[0] * g->dim[1]);
        double xyz[3], d2 = 0.0;
        sim_voxel_to_world(g, (double)i, (double)j, (double)k, xyz);
        for (int a = 0; a < 3; a++)
            d2 += (xyz[a] - centre[a]) * (xyz[a] - centre[a]);
        if (d2 <= radius * radius)
            roi[n++] = c;
    }
    return n;
}

char *sim_subject_label(int64_t s, int64_t subjects)
{
    int width = 2;
    for (int64_t n = subjects; n >= 100; n /= 10)
        width++;
    return nf_asprintf("sub-%0*" PRId64, width, s + 1);
}

int sim_write_text(const char *dir, const char *name, const char *text, struct nf_error *err)
{
    char *path = nf_path_join(dir, name);
    int rc;
    if (!path)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    rc = nf_write_file_atomic(path, text, strlen(text), err);
    free(path);
    return rc;
}

int sim_folder_check(const struct simulate_params *p, const char *dir, const struct nf_node_inst *node,
                     struct nf_error *err)
{
    char *found = NULL;
    int rc = nf_folder_is_ours(dir, NF_SIMULATE_MARKER, &found, err);
    if (rc < 0)
        return nf_error_on_node(node, err, rc);
    if (rc == 1 || p->overwrite) {
        free(found);
        return 0;
    }
    rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                    "'%s' is not empty (it holds '%s') and simulate did not make it (no %s in it): simulate "
                    "writes only into a new or empty folder, or one it made before; nothing was written. Give "
                    "%s another folder, or set `overwrite: true` (nlflow simulate: --force) to write into "
                    "this one anyway",
                    dir, found, NF_SIMULATE_MARKER, p->bids ? "bids:" : "write:");
    free(found);
    return rc;
}

/* A subject label as simulate writes them: sub- and letters or digits, so
 * that a marker file cannot name anything else to remove. */
static bool plain_subject(const char *s)
{
    if (strncmp(s, "sub-", 4) != 0 || !s[4])
        return false;
    for (const char *c = s + 4; *c; c++)
        if (!isalnum((unsigned char)*c))
            return false;
    return true;
}

static void remove_subject(const char *dir, const char *sub, const char *label)
{
    char *where = sub ? nf_path_join(dir, sub) : nf_strdup(dir);
    char *path = where ? nf_path_join(where, label) : NULL;
    if (path)
        nf_remove_tree(path);
    free(path);
    free(where);
}

int sim_folder_begin(const struct simulate_params *p, const char *dir, char *const *labels, size_t n,
                     struct nf_error *err)
{
    char *found = NULL;
    int rc = nf_folder_is_ours(dir, NF_SIMULATE_MARKER, &found, err);
    free(found);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        if (!p->overwrite)   /* filled since the plan checked it */
            return NF_FAIL(err, NF_EINVAL, "'%s' is not empty and simulate did not make it; set `overwrite: "
                           "true` to write into it anyway", dir);
        return 0;
    }
    nf_sweep_temporaries(dir);   /* a killed run's half-written files */
    char *marker = nf_path_join(dir, NF_SIMULATE_MARKER);
    if (!marker)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    struct nf_error rerr = { 0 };
    size_t len = 0;
    char *old = access(marker, F_OK) == 0 ? nf_read_file(marker, &len, &rerr) : NULL;
    for (char *line = old, *next; line && *line; line = next) {
        next = line + strcspn(line, "\n");
        if (*next)
            *next++ = '\0';
        if (!plain_subject(line))
            continue;
        remove_subject(dir, NULL, line);
        remove_subject(dir, "derivatives/fmriprep", line);
    }
    free(old);
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "# nlflow simulate made this folder and may rewrite it; the subjects it wrote:\n");
    for (size_t i = 0; i < n; i++)
        nf_strbuf_addf(&sb, "%s\n", labels[i]);
    rc = sb.oom ? NF_FAIL(err, NF_ENOMEM, "out of memory") : nf_mkdirs(dir, err);
    if (rc == 0)
        rc = nf_write_file_atomic(marker, sb.buf, sb.len, err);
    nf_strbuf_release(&sb);
    free(marker);
    return rc;
}

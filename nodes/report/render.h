/* render.h — the pictures of the report: brain maps rasterised to RGB images.
 *
 * A scene puts one statistical map (the overlay) over an anatomical image
 * (the underlay, optional) on one display grid, and every picture of that map
 * is drawn from it: orthogonal slices through a voxel, an axial mosaic,
 * glass-brain projections and a colour bar. Images are 8-bit RGB, row-major,
 * top row first, 3 bytes per pixel; encode.h turns them into PNG and base64.
 *
 * Orientation. The display grid is the underlay's (the overlay's without
 * one). Each world axis (x: left->right, y: posterior->anterior, z:
 * inferior->superior, RAS mm through the grid's affine) is shown along the
 * voxel axis whose affine column points most nearly along it, flipped where
 * that column points the other way; an oblique affine is shown by its
 * nearest axis-aligned reading, without resampling. Views are drawn in the
 * neurological convention, nilearn's default (radiological=False): the
 * subject's left on the image's left.
 *   sagittal (cut at fixed x): columns y increasing to the right (anterior
 *            right), rows z increasing upwards;
 *   coronal  (fixed y): columns x increasing to the right, rows z upwards;
 *   axial    (fixed z): columns x increasing to the right, rows y upwards.
 * Each voxel is drawn as a square block of `scale` x `scale` pixels (voxels
 * that are not cubes look stretched). With nX, nY, nZ the display grid's
 * sizes along the voxel axes shown as x, y and z:
 *   sagittal: nY*scale wide, nZ*scale high;
 *   coronal:  nX*scale wide, nZ*scale high;
 *   axial:    nX*scale wide, nY*scale high;
 * glass-brain views have the size of the slice of the same name.
 * scale is the smallest integer that makes min(nX, nY, nZ) * scale at least
 * style.min_short_side (200 by default), lowered where the longest side
 * would exceed 6 * min_short_side (at least 1).
 *
 * Colours. The underlay is drawn in gray over its robust range, the 2nd to
 * 98th percentile (numpy's linear interpolation) of its finite nonzero
 * voxels; NaN is black, and so is everything without an underlay. An overlay
 * voxel is shown, opaque, where its value v is finite, nonzero and |v| >=
 * threshold (zero and NaN are "no value", as in nilearn); elsewhere the
 * underlay shows through. Signed maps use RdBu_r over [-vmax, vmax],
 * positive-only maps viridis over [0, vmax]; the entry is colormap.h's
 * nf_cmap_index of the normalised value. The overlay is sampled onto the
 * display grid by nearest neighbour: each display voxel centre is taken
 * through the display affine to mm and back through the inverse of the
 * overlay's affine, and rounded; outside the overlay's grid there is no value.
 *
 * Ownership: a scene copies what it needs (the caller's maps may go once
 * nf_scene_init returns); images own their pixels (release with
 * nf_image_release). Functions return 0 or a negative NF_E* code with *err
 * set (NF_ENOMEM, NF_EDATA for unusable maps, NF_EUSAGE for bad arguments).
 */
#ifndef NF_REPORT_RENDER_H
#define NF_REPORT_RENDER_H

#include <stdbool.h>
#include <stdint.h>

#include "colormap.h"
#include "core/error.h"
#include "core/value.h"

struct nf_image {
    int width, height;      /* pixels */
    uint8_t *rgb;           /* owned: width * height * 3 bytes, top row first */
};
/* Free the pixels and zero the struct (NULL-safe, and safe on a zeroed one). */
void nf_image_release(struct nf_image *im);

/* One 3-D map, borrowed: a volume (geom NULL: data holds grid's nx*ny*nz
 * floats in NIfTI order) or a masked map (data holds geom->n_voxels floats,
 * data[c] at voxel geom->index[c] of geom->grid; grid is then &geom->grid). */
struct nf_render_map {
    const struct nf_grid *grid;
    const float *data;
    const struct nf_geom *geom;
};
/* The map of a value: volume `which` of a 3-D/4-D volume, or row `which` of a
 * matrix whose columns are voxels. NF_EDATA (naming the value) otherwise. */
int nf_render_map_of_value(const struct nf_value *v, int64_t which,
                           struct nf_render_map *out, struct nf_error *err);

enum nf_overlay_scale {
    NF_SCALE_AUTO,          /* signed when any finite value is negative */
    NF_SCALE_SIGNED,        /* RdBu_r over [-vmax, vmax] */
    NF_SCALE_POSITIVE,      /* viridis over [0, vmax] (negative values at its low end) */
};
struct nf_render_style {
    double threshold;       /* show |v| >= threshold (0: every nonzero value) */
    double vmax;            /* top of the colour range; 0: max |v| of the overlay */
    enum nf_overlay_scale scale;
    int min_short_side;     /* pixels; 0: 200 */
};

enum nf_view {
    NF_VIEW_SAGITTAL,       /* cut at fixed x; glass brain: projection along x */
    NF_VIEW_CORONAL,        /* fixed y */
    NF_VIEW_AXIAL,          /* fixed z */
};

struct nf_scene {
    struct nf_grid grid;        /* the display grid */
    int axis[3];                /* voxel axis shown as world x, y, z */
    int flip[3];                /* 1 where that voxel index decreases as the world coordinate grows */
    int scale;                  /* pixels per voxel side */
    float *under;               /* owned, on grid; NULL without an underlay */
    float *over;                /* owned, the overlay on grid; NaN: no value */
    uint8_t *brain;             /* owned, on grid: the glass brain's silhouette */
    double under_lo, under_hi;  /* the underlay's gray range */
    double threshold, vmax;
    bool signed_map;
    enum nf_cmap map;           /* NF_CMAP_RDBU_R or NF_CMAP_VIRIDIS */
    uint8_t gray[256][3], colors[256][3];
};

/* Build a scene. underlay may be NULL. The silhouette of the glass brain is
 * the underlay's finite nonzero voxels, or without an underlay the voxels
 * where the overlay is defined (a masked map's mask, a volume's finite
 * nonzero voxels). Release with nf_scene_release, also after a failure. */
int nf_scene_init(struct nf_scene *s, const struct nf_render_map *underlay,
                  const struct nf_render_map *overlay, const struct nf_render_style *style,
                  struct nf_error *err);
void nf_scene_release(struct nf_scene *s);

/* Pixel size of a view's slice (and glass-brain view). */
void nf_scene_view_size(const struct nf_scene *s, enum nf_view view, int *width, int *height);
/* The display voxel of the strongest shown overlay value (largest |v|, the
 * first in storage order on ties): true; false (and the grid's centre voxel)
 * when nothing is shown. */
bool nf_scene_peak(const struct nf_scene *s, int64_t voxel[3]);
/* World mm of a display voxel's centre. */
void nf_scene_voxel_mm(const struct nf_scene *s, const int64_t voxel[3], double mm[3]);

/* The slice of `view` through display voxel `voxel` (NF_EUSAGE outside the grid). */
int nf_render_slice(const struct nf_scene *s, enum nf_view view, const int64_t voxel[3],
                    struct nf_image *out, struct nf_error *err);
/* Axial slices evenly spaced through the overlay's extent along z (from the
 * lowest to the highest display slice holding a finite nonzero overlay value,
 * whether or not above threshold; the whole grid when none does): the extent cut into n_slices equal runs and the middle slice of
 * each taken (fewer slices when the extent is thinner than n_slices), drawn
 * inferior to superior, left to right then top to bottom, n_cols tiles to a
 * row, tiles black where the last row is short. The image is n_cols * (axial
 * width) by ceil(n / n_cols) * (axial height) pixels. slices (may be NULL)
 * receives each tile's display voxel index along the axis shown as z, and
 * *n_out (may be NULL) the number of tiles drawn. NF_EUSAGE when n_slices or
 * n_cols < 1. */
int nf_render_mosaic(const struct nf_scene *s, int n_slices, int n_cols, struct nf_image *out,
                     int64_t *slices, int *n_out, struct nf_error *err);
/* The glass-brain view of `view`: along the projected axis, the shown overlay
 * value of largest |v| (sign kept; the first in voxel index order on ties)
 * in its colour, else the light gray silhouette (NF_RENDER_SILHOUETTE) where
 * any voxel along it is in the brain, else white. */
int nf_render_glass(const struct nf_scene *s, enum nf_view view, struct nf_image *out,
                    struct nf_error *err);
#define NF_RENDER_SILHOUETTE 216    /* gray level of the glass brain's silhouette */
#define NF_RENDER_THRESHOLD_GRAY 127 /* the colour bar's band below threshold (matplotlib's "grey") */

/* What a colour bar shows, for drawing it as SVG: the range, the colours
 * (entry 0 at lo, 255 at hi), the threshold band (|v| < threshold, drawn
 * NF_RENDER_THRESHOLD_GRAY) and 5 ticks evenly spaced from lo to hi. */
struct nf_colorbar {
    double lo, hi, threshold;
    enum nf_cmap map;
    uint8_t colors[256][3];
    double ticks[5];
};
void nf_scene_colorbar(const struct nf_scene *s, struct nf_colorbar *cb);
/* A vertical colour bar, width x height pixels, hi at the top: row r shows
 * the value hi - (r + 0.5) / height * (hi - lo) as the overlay would, or the
 * threshold band's gray. NF_EUSAGE when width or height < 1 or > 4096. */
int nf_render_colorbar(const struct nf_scene *s, int width, int height, struct nf_image *out,
                       struct nf_error *err);

#endif

/* colormap.h — the colour maps of the report's pictures, as matplotlib has them.
 *
 * A map is a 256-entry table of 8-bit RGB colours equal to matplotlib's
 * `colormaps[name](range(256), bytes=True)` (floats times 255, truncated).
 * A value is looked up as matplotlib does: t in [0, 1] (normalised) picks
 * entry floor(t * 256), t == 1 picking entry 255.
 */
#ifndef NF_REPORT_COLORMAP_H
#define NF_REPORT_COLORMAP_H

#include <stdint.h>

enum nf_cmap {
    NF_CMAP_GRAY,       /* "gray": black to white, the anatomical underlay */
    NF_CMAP_VIRIDIS,    /* "viridis": sequential, positive-only maps */
    NF_CMAP_RDBU_R,     /* "RdBu_r": diverging, signed maps (blue negative,
                           near-white centre, red positive) */
};

/* matplotlib's name of the map ("gray", "viridis", "RdBu_r"). */
const char *nf_cmap_name(enum nf_cmap map);
/* Fill table[i] with entry i of the map, i = 0 .. 255 (no allocation). */
void nf_cmap_fill(enum nf_cmap map, uint8_t table[256][3]);
/* The entry of normalised value t as matplotlib picks it: floor(t * 256),
 * t == 1 -> 255, clipped to 0 .. 255 (NaN -> 0). */
int nf_cmap_index(double t);

#endif

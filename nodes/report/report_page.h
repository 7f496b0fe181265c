/* report_page.h — the self-contained HTML page of the `report` node and of
 * `nlflow report`, and its SVG charts (report_page.c, report_charts.c).
 *
 * A page is built in order — header, sections, figures, tables, collapsible
 * text — into one string: inline CSS, images as data: URIs (PNG bytes given
 * by the caller), charts as inline SVG, and one small inline script (the
 * cluster table's links swap the slice view of a map). Nothing refers to
 * anything outside the file, so it opens offline and can be mailed. Output is
 * deterministic: the same calls give the same bytes.
 */
#ifndef NF_REPORT_PAGE_H
#define NF_REPORT_PAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

struct report_page {
    struct nf_strbuf sb;
    int n_figures;        /* ids of swappable images */
    bool in_section;
};

/* Start a page with its title (escaped). */
void report_page_begin(struct report_page *pg, const char *title);
/* A definition list of header facts: n pairs of (name, value), escaped. */
void report_page_facts(struct report_page *pg, const char *const *names, const char *const *values, size_t n);
/* A collapsible block of preformatted text (the pipeline file). */
void report_page_details(struct report_page *pg, const char *summary, const char *text);
/* A section with a heading (closes the previous one); `anchor` names it. */
void report_page_section(struct report_page *pg, const char *heading, const char *anchor);
/* A paragraph of text (escaped). */
void report_page_paragraph(struct report_page *pg, const char *text);
/* An image from PNG bytes, inline as a data: URI, with its pixel size and
 * alt text; returns its figure id (for report_page_table links), or -1 on
 * out of memory (the page is then marked and report_page_end fails). */
int report_page_png(struct report_page *pg, const uint8_t *png, size_t len, int width, int height, const char *alt);
/* Inline SVG markup (trusted: made by report_charts.c). */
void report_page_svg(struct report_page *pg, const char *svg);
/* A table: n_cols headers, n_rows x n_cols cells (escaped). With
 * link_figure >= 0, each row's first cell becomes a link that shows, in
 * figure link_figure, the image row_images[row] (PNG bytes, may be NULL for
 * no link). */
struct report_table {
    const char *const *headers;
    size_t n_cols, n_rows;
    const char *const *cells;          /* row-major */
    int link_figure;
    const uint8_t *const *row_png;     /* n_rows entries or NULL */
    const size_t *row_png_len;
};
void report_page_table(struct report_page *pg, const struct report_table *t);
/* The whole page (owned by the caller), or NULL on out of memory. */
char *report_page_end(struct report_page *pg, size_t *len);
void report_page_release(struct report_page *pg);

/* Base64 (RFC 4648, with padding) of n bytes into sb. */
void report_base64(struct nf_strbuf *sb, const uint8_t *p, size_t n);
/* s with & < > " ' escaped into sb. */
void report_escape(struct nf_strbuf *sb, const char *s);

/* ---- charts (report_charts.c), each an owned SVG string or NULL ---- */
/* Equal-width bins over [lo, hi] (lo < hi); values outside go to the end
 * bins; non-finite values are not counted. counts has n_bins entries. */
void report_histogram_counts(const float *v, size_t n, double lo, double hi, size_t n_bins, uint64_t *counts);
/* A histogram of v with a vertical marker at `mark` (NAN: none) labelled
 * mark_label, axis label x_label. */
char *report_svg_histogram(const float *v, size_t n, size_t n_bins, double mark, const char *mark_label,
                           const char *x_label);
/* Horizontal bars: one per label, value in [0, vmax] (vmax <= 0: the max),
 * with an optional reference line at `chance` (NAN: none). */
char *report_svg_bars(const char *const *labels, const double *values, size_t n, double vmax, double chance,
                      const char *x_label);
/* A colour bar from 256 RGB triplets (768 bytes) between lo and hi; `id`
 * names its gradient (unique in the page: SVG ids are the document's). */
char *report_svg_colorbar(const uint8_t *rgb256, double lo, double hi, const char *label, const char *id);

#endif

/* report_charts.c — the report's charts as inline SVG (report_page.h): a
 * histogram with a marked value (a permutation test's null distribution of
 * the maximum statistic and its FWE threshold; a ridge's chosen alphas),
 * horizontal bars (accuracy per region), and a colour bar.
 *
 * SVG keeps charts sharp at any zoom and costs a few kB; numbers are printed
 * with fixed formats so that the same data give the same bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_page.h"

void report_histogram_counts(const float *v, size_t n, double lo, double hi, size_t n_bins, uint64_t *counts)
{
    memset(counts, 0, n_bins * sizeof *counts);
    if (n_bins == 0 || !(hi > lo))
        return;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            continue;
        double t = ((double)v[i] - lo) / (hi - lo) * (double)n_bins;
        size_t b = t <= 0 ? 0 : t >= (double)n_bins ? n_bins - 1 : (size_t)t;
        counts[b]++;
    }
}

/* A tick value short enough for an axis. */
static void tick(char *buf, size_t size, double v)
{
    if (v != 0 && (fabs(v) >= 1e4 || fabs(v) < 1e-3))
        snprintf(buf, size, "%.2e", v);
    else
        snprintf(buf, size, "%.4g", v);
}

enum { CHART_W = 480, CHART_H = 240, PAD_L = 48, PAD_R = 16, PAD_T = 16, PAD_B = 42 };

char *report_svg_histogram(const float *v, size_t n, size_t n_bins, double mark, const char *mark_label,
                           const char *x_label)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
    if (isfinite(mark)) {
        lo = mark < lo ? mark : lo;
        hi = mark > hi ? mark : hi;
    }
    if (!isfinite(lo)) {
        lo = 0;
        hi = 1;
    }
    if (!(hi > lo)) {   /* one value: a bin around it */
        lo -= 0.5;
        hi += 0.5;
    }
    if (n_bins < 1)
        n_bins = 1;
    uint64_t *counts = nf_calloc(n_bins, sizeof *counts);
    if (!counts)
        return NULL;
    report_histogram_counts(v, n, lo, hi, n_bins, counts);
    uint64_t top = 1;
    for (size_t b = 0; b < n_bins; b++)
        top = counts[b] > top ? counts[b] : top;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    double pw = CHART_W - PAD_L - PAD_R, ph = CHART_H - PAD_T - PAD_B, bw = pw / (double)n_bins;
    nf_strbuf_addf(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                        "viewBox=\"0 0 %d %d\" font-size=\"11\" font-family=\"sans-serif\">",
                   CHART_W, CHART_H, CHART_W, CHART_H);
    for (size_t b = 0; b < n_bins; b++) {
        double h = ph * (double)counts[b] / (double)top;
        nf_strbuf_addf(&sb, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#6b8fc7\"/>",
                       PAD_L + bw * (double)b, PAD_T + ph - h, bw > 1.5 ? bw - 0.5 : bw, h);
    }
    nf_strbuf_addf(&sb, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#333\"/>", PAD_L, PAD_T + ph,
                   CHART_W - PAD_R, PAD_T + ph);
    char a[32], b2[32];
    tick(a, sizeof a, lo);
    tick(b2, sizeof b2, hi);
    nf_strbuf_addf(&sb, "<text x=\"%d\" y=\"%.2f\">%s</text><text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%s</text>",
                   PAD_L, PAD_T + ph + 14, a, CHART_W - PAD_R, PAD_T + ph + 14, b2);
    nf_strbuf_addf(&sb, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%llu</text>", PAD_L - 4, (double)PAD_T + 8,
                   (unsigned long long)top);
    nf_strbuf_addf(&sb, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">", PAD_L + pw / 2, CHART_H - 6);
    report_escape(&sb, x_label);
    nf_strbuf_addf(&sb, "</text>");
    if (isfinite(mark)) {
        double x = PAD_L + pw * (mark - lo) / (hi - lo);
        char m[32];
        tick(m, sizeof m, mark);
        nf_strbuf_addf(&sb, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#c0392b\" "
                            "stroke-width=\"2\" stroke-dasharray=\"5,3\"/>", x, PAD_T, x, PAD_T + ph);
        nf_strbuf_addf(&sb, "<text x=\"%.2f\" y=\"%d\" fill=\"#c0392b\" text-anchor=\"%s\">", x + (x > CHART_W / 2 ? -4 : 4),
                       PAD_T + 10, x > CHART_W / 2 ? "end" : "start");
        report_escape(&sb, mark_label);
        nf_strbuf_addf(&sb, " %s</text>", m);
    }
    nf_strbuf_addf(&sb, "</svg>");
    free(counts);
    return nf_strbuf_detach(&sb);
}

char *report_svg_bars(const char *const *labels, const double *values, size_t n, double vmax, double chance,
                      const char *x_label)
{
    if (!(vmax > 0)) {
        vmax = 0;
        for (size_t i = 0; i < n; i++)
            vmax = isfinite(values[i]) && values[i] > vmax ? values[i] : vmax;
        if (!(vmax > 0))
            vmax = 1;
    }
    int row = 16, label_w = 190, w = 560, h = PAD_T + (int)n * row + PAD_B;
    double pw = w - label_w - PAD_R;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                        "font-size=\"11\" font-family=\"sans-serif\">", w, h, w, h);
    for (size_t i = 0; i < n; i++) {
        double v = isfinite(values[i]) && values[i] > 0 ? values[i] : 0;
        double y = PAD_T + (double)i * row;
        nf_strbuf_addf(&sb, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", label_w - 6, y + 11);
        report_escape(&sb, labels[i]);
        nf_strbuf_addf(&sb, "</text><rect x=\"%d\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"#6b8fc7\"/>", label_w,
                       y + 2, pw * (v > vmax ? 1 : v / vmax), row - 4);
        char t[32];
        tick(t, sizeof t, values[i]);
        nf_strbuf_addf(&sb, "<text x=\"%.2f\" y=\"%.1f\">%s</text>", label_w + pw * (v > vmax ? 1 : v / vmax) + 3,
                       y + 11, isfinite(values[i]) ? t : "n/a");
    }
    if (isfinite(chance) && chance >= 0 && chance <= vmax) {
        double x = label_w + pw * chance / vmax;
        nf_strbuf_addf(&sb, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#c0392b\" "
                            "stroke-dasharray=\"4,3\"/>", x, PAD_T, x, h - PAD_B + 4);
    }
    nf_strbuf_addf(&sb, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">", label_w + pw / 2, h - 10);
    report_escape(&sb, x_label);
    nf_strbuf_addf(&sb, "</text></svg>");
    return nf_strbuf_detach(&sb);
}

char *report_svg_colorbar(const uint8_t *rgb256, double lo, double hi, const char *label, const char *id)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    int w = 300, h = 46, bar_h = 14;
    nf_strbuf_addf(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                        "font-size=\"11\" font-family=\"sans-serif\"><defs><linearGradient id=\"%s\">", w, h, w, h,
                   id);
    for (int i = 0; i <= 16; i++) {   /* 17 stops are indistinguishable from 256 at this width */
        int k = i * 255 / 16;
        nf_strbuf_addf(&sb, "<stop offset=\"%.4f\" stop-color=\"#%02x%02x%02x\"/>", (double)i / 16, rgb256[3 * k],
                       rgb256[3 * k + 1], rgb256[3 * k + 2]);
    }
    char a[32], b[32];
    tick(a, sizeof a, lo);
    tick(b, sizeof b, hi);
    nf_strbuf_addf(&sb, "</linearGradient></defs><rect x=\"10\" y=\"4\" width=\"%d\" height=\"%d\" fill=\"url(#%s)\" "
                        "stroke=\"#555\"/><text x=\"10\" y=\"%d\">%s</text><text x=\"%d\" y=\"%d\" "
                        "text-anchor=\"end\">%s</text><text x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
                   w - 20, bar_h, id, bar_h + 16, a, w - 10, bar_h + 16, b, w / 2, bar_h + 16);
    report_escape(&sb, label);
    nf_strbuf_addf(&sb, "</text></svg>");
    return nf_strbuf_detach(&sb);
}

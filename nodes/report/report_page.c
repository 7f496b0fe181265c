/* report_page.c — one self-contained HTML page (report_page.h): inline CSS,
 * images as data: URIs, inline SVG, and one small inline script; nothing is
 * fetched from anywhere, so the page opens offline and can be mailed.
 *
 * The script only swaps a figure's image for another one already in the page
 * (the cluster table's links: slices through each cluster's peak), so there
 * is no code to trust beyond these few lines, and the page reads fine with
 * scripts off. Every text that comes from data or the pipeline is escaped.
 */
#include <string.h>

#include "report_page.h"

static const char page_style[] =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;"
    "color:#1b1b1b;background:#fafafa}"
    "header{background:#23395d;color:#fff;padding:18px 28px}header h1{margin:0 0 6px;font-size:24px}"
    "main{padding:8px 28px 40px;max-width:1200px}"
    "section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px 18px;margin:18px 0}"
    "h2{font-size:19px;margin:6px 0 10px}dl{display:grid;grid-template-columns:max-content auto;"
    "gap:2px 16px;margin:0}dt{font-weight:600}dd{margin:0}"
    "header dl{color:#e8eef8}pre{background:#f3f3f3;padding:10px;overflow:auto;font-size:13px}"
    "table{border-collapse:collapse;font-size:14px;margin:8px 0}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eef1f5}"
    "td:first-child,th:first-child{text-align:left}img{image-rendering:pixelated;max-width:100%}"
    "figure{display:inline-block;margin:6px 12px 6px 0;vertical-align:top}"
    "figcaption{font-size:13px;color:#555}a.peak{color:#1f5fbf;cursor:pointer}";

static const char page_script[] =
    "function nfShow(fig,src){var i=document.getElementById(fig);if(i){i.src=src;"
    "i.scrollIntoView({block:'nearest'});}return false;}";

void report_escape(struct nf_strbuf *sb, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': nf_strbuf_addf(sb, "&amp;"); break;
        case '<': nf_strbuf_addf(sb, "&lt;"); break;
        case '>': nf_strbuf_addf(sb, "&gt;"); break;
        case '"': nf_strbuf_addf(sb, "&quot;"); break;
        case '\'': nf_strbuf_addf(sb, "&#39;"); break;
        default: nf_strbuf_add(sb, s, 1);
        }
    }
}

void report_base64(struct nf_strbuf *sb, const uint8_t *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        q[0] = tab[v >> 18];
        q[1] = tab[(v >> 12) & 63];
        q[2] = tab[(v >> 6) & 63];
        q[3] = tab[v & 63];
        nf_strbuf_add(sb, q, 4);
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        q[0] = tab[v >> 18];
        q[1] = tab[(v >> 12) & 63];
        q[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        q[3] = '=';
        nf_strbuf_add(sb, q, 4);
    }
}

void report_page_begin(struct report_page *pg, const char *title)
{
    memset(pg, 0, sizeof *pg);
    nf_strbuf_init(&pg->sb);
    nf_strbuf_addf(&pg->sb, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>");
    report_escape(&pg->sb, title);
    nf_strbuf_addf(&pg->sb, "</title>\n<style>%s</style>\n<script>%s</script>\n</head>\n<body>\n<header>\n<h1>",
                   page_style, page_script);
    report_escape(&pg->sb, title);
    nf_strbuf_addf(&pg->sb, "</h1>\n");
}

void report_page_facts(struct report_page *pg, const char *const *names, const char *const *values, size_t n)
{
    nf_strbuf_addf(&pg->sb, "<dl>\n");
    for (size_t i = 0; i < n; i++) {
        nf_strbuf_addf(&pg->sb, "<dt>");
        report_escape(&pg->sb, names[i]);
        nf_strbuf_addf(&pg->sb, "</dt><dd>");
        report_escape(&pg->sb, values[i]);
        nf_strbuf_addf(&pg->sb, "</dd>\n");
    }
    nf_strbuf_addf(&pg->sb, "</dl>\n");
}

void report_page_details(struct report_page *pg, const char *summary, const char *text)
{
    nf_strbuf_addf(&pg->sb, "<details><summary>");
    report_escape(&pg->sb, summary);
    nf_strbuf_addf(&pg->sb, "</summary>\n<pre>");
    report_escape(&pg->sb, text);
    nf_strbuf_addf(&pg->sb, "</pre></details>\n");
}

void report_page_section(struct report_page *pg, const char *heading, const char *anchor)
{
    if (pg->in_section)
        nf_strbuf_addf(&pg->sb, "</section>\n");
    else
        nf_strbuf_addf(&pg->sb, "</header>\n<main>\n");
    pg->in_section = true;
    nf_strbuf_addf(&pg->sb, "<section id=\"");
    report_escape(&pg->sb, anchor);
    nf_strbuf_addf(&pg->sb, "\">\n<h2>");
    report_escape(&pg->sb, heading);
    nf_strbuf_addf(&pg->sb, "</h2>\n");
}

void report_page_paragraph(struct report_page *pg, const char *text)
{
    nf_strbuf_addf(&pg->sb, "<p>");
    report_escape(&pg->sb, text);
    nf_strbuf_addf(&pg->sb, "</p>\n");
}

static void data_uri(struct nf_strbuf *sb, const uint8_t *png, size_t len)
{
    nf_strbuf_addf(sb, "data:image/png;base64,");
    report_base64(sb, png, len);
}

int report_page_png(struct report_page *pg, const uint8_t *png, size_t len, int width, int height, const char *alt)
{
    int id = pg->n_figures++;
    nf_strbuf_addf(&pg->sb, "<figure><img id=\"fig%d\" width=\"%d\" height=\"%d\" alt=\"", id, width, height);
    report_escape(&pg->sb, alt);
    nf_strbuf_addf(&pg->sb, "\" src=\"");
    data_uri(&pg->sb, png, len);
    nf_strbuf_addf(&pg->sb, "\"><figcaption>");
    report_escape(&pg->sb, alt);
    nf_strbuf_addf(&pg->sb, "</figcaption></figure>\n");
    return pg->sb.oom ? -1 : id;
}

void report_page_svg(struct report_page *pg, const char *svg)
{
    nf_strbuf_addf(&pg->sb, "<figure>%s</figure>\n", svg ? svg : "");
}

void report_page_table(struct report_page *pg, const struct report_table *t)
{
    nf_strbuf_addf(&pg->sb, "<table>\n<tr>");
    for (size_t c = 0; c < t->n_cols; c++) {
        nf_strbuf_addf(&pg->sb, "<th>");
        report_escape(&pg->sb, t->headers[c]);
        nf_strbuf_addf(&pg->sb, "</th>");
    }
    nf_strbuf_addf(&pg->sb, "</tr>\n");
    for (size_t r = 0; r < t->n_rows; r++) {
        nf_strbuf_addf(&pg->sb, "<tr>");
        for (size_t c = 0; c < t->n_cols; c++) {
            const char *cell = t->cells[r * t->n_cols + c];
            bool link = c == 0 && t->link_figure >= 0 && t->row_png && t->row_png[r];
            nf_strbuf_addf(&pg->sb, "<td>");
            if (link) {
                /* the image travels in the link itself: no lookup table to keep in sync */
                nf_strbuf_addf(&pg->sb, "<a class=\"peak\" href=\"#fig%d\" onclick=\"return nfShow('fig%d','",
                               t->link_figure, t->link_figure);
                data_uri(&pg->sb, t->row_png[r], t->row_png_len[r]);
                nf_strbuf_addf(&pg->sb, "')\">");
            }
            report_escape(&pg->sb, cell ? cell : "");
            if (link)
                nf_strbuf_addf(&pg->sb, "</a>");
            nf_strbuf_addf(&pg->sb, "</td>");
        }
        nf_strbuf_addf(&pg->sb, "</tr>\n");
    }
    nf_strbuf_addf(&pg->sb, "</table>\n");
}

char *report_page_end(struct report_page *pg, size_t *len)
{
    nf_strbuf_addf(&pg->sb, pg->in_section ? "</section>\n</main>\n" : "</header>\n");
    nf_strbuf_addf(&pg->sb, "<footer style=\"padding:0 28px 24px;color:#777;font-size:12px\">made by nlflow; "
                            "this page is self-contained (no external files)</footer>\n</body>\n</html>\n");
    if (pg->sb.oom) {
        report_page_release(pg);
        return NULL;
    }
    if (len)
        *len = pg->sb.len;
    return nf_strbuf_detach(&pg->sb);
}

void report_page_release(struct report_page *pg)
{
    nf_strbuf_release(&pg->sb);
    memset(pg, 0, sizeof *pg);
}

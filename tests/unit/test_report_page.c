/* test_report_page.c — the report's HTML page and SVG charts
 * (nodes/report/report_page.c, report_charts.c): base64 against RFC 4648's
 * test vectors, escaping, histogram counts against a direct count, a page
 * that refers to nothing outside itself (no http(s) source, no link, style
 * or script file; images as data: URIs that decode back to their bytes), the
 * cluster-table links carrying their image, and the same bytes for the same
 * calls. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_page.h"

static char *b64(const char *s)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    report_base64(&sb, (const uint8_t *)s, strlen(s));
    return nf_strbuf_detach(&sb);
}

static void test_base64_rfc4648(void **state)
{
    (void)state;
    static const char *in[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    static const char *out[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
    for (int i = 0; i < 7; i++) {
        char *got = b64(in[i]);
        assert_string_equal(got, out[i]);
        free(got);
    }
}

static void test_escape(void **state)
{
    (void)state;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    report_escape(&sb, "<a href=\"x\">R&D's</a>");
    char *s = nf_strbuf_detach(&sb);
    assert_string_equal(s, "&lt;a href=&quot;x&quot;&gt;R&amp;D&#39;s&lt;/a&gt;");
    free(s);
}

static void test_histogram_counts(void **state)
{
    (void)state;
    float v[103];
    for (int i = 0; i < 100; i++)
        v[i] = (float)i;
    v[100] = NAN;
    v[101] = -50;    /* below: first bin */
    v[102] = 1000;   /* above: last bin */
    uint64_t c[10], want[10] = { 0 };
    report_histogram_counts(v, 103, 0, 100, 10, c);
    for (int i = 0; i < 100; i++)
        want[i / 10]++;
    want[0]++;
    want[9]++;
    assert_memory_equal(c, want, sizeof want);
    /* the chart has one bar per bin, and the marker when given */
    char *svg = report_svg_histogram(v, 100, 20, 95.5, "FWE 5%", "maximum t");
    assert_non_null(svg);
    int rects = 0;
    for (const char *p = svg; (p = strstr(p, "<rect")); p++)
        rects++;
    assert_int_equal(rects, 20);
    assert_non_null(strstr(svg, "stroke-dasharray"));
    assert_non_null(strstr(svg, "FWE 5% 95.5"));
    free(svg);
}

/* Every attribute value that names a resource must be a data: URI or a
 * fragment: no file, no http(s), no protocol-relative URL. */
static void assert_self_contained(const char *html)
{
    static const char *bad[] = { "src=\"http", "src=\"//", "href=\"http", "href=\"//", "<link", "@import",
                                 "url(http", "url(//", "<script src", "<iframe", "<object", "<embed" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (strstr(html, bad[i]))
            fail_msg("the page refers outside itself: %s", bad[i]);
    for (const char *p = html; (p = strstr(p, "src=\"")); p += 5)
        assert_int_equal(strncmp(p + 5, "data:", 5), 0);
}

static char *build(const uint8_t *png, size_t n)
{
    struct report_page pg;
    report_page_begin(&pg, "group <permutation> & co");
    const char *names[] = { "pipeline", "hash" }, *values[] = { "group", "c6f7" };
    report_page_facts(&pg, names, values, 2);
    report_page_details(&pg, "pipeline file", "nodes:\n  a: {type: <load>}\n");
    report_page_section(&pg, "t map", "map-t");
    int fig = report_page_png(&pg, png, n, 10, 12, "slices through the peak");
    assert_int_equal(fig, 0);
    float v[5] = { 1, 2, 2, 3, 7 };
    char *svg = report_svg_histogram(v, 5, 4, 6, "threshold", "x");
    report_page_svg(&pg, svg);
    free(svg);
    const char *headers[] = { "cluster", "size" }, *cells[] = { "1", "65", "2", "3" };
    const uint8_t *row_png[] = { png, NULL };
    size_t row_len[] = { n, 0 };
    struct report_table t = { headers, 2, 2, cells, fig, row_png, row_len };
    report_page_table(&pg, &t);
    size_t len = 0;
    char *html = report_page_end(&pg, &len);
    assert_non_null(html);
    assert_int_equal(strlen(html), len);
    return html;
}

static void test_page(void **state)
{
    (void)state;
    uint8_t png[37];
    for (int i = 0; i < 37; i++)
        png[i] = (uint8_t)(i * 7 + 1);
    char *html = build(png, sizeof png), *again = build(png, sizeof png);
    assert_string_equal(html, again);   /* deterministic */
    assert_int_equal(strncmp(html, "<!DOCTYPE html>", 15), 0);
    assert_non_null(strstr(html, "</html>"));
    assert_self_contained(html);
    assert_non_null(strstr(html, "<title>group &lt;permutation&gt; &amp; co</title>"));
    assert_non_null(strstr(html, "{type: &lt;load&gt;}"));
    /* the image is its bytes in base64, in the img and in the first row's link only */
    char *enc = NULL;
    {
        struct nf_strbuf sb;
        nf_strbuf_init(&sb);
        report_base64(&sb, png, sizeof png);
        enc = nf_strbuf_detach(&sb);
    }
    int copies = 0;
    for (const char *p = html; (p = strstr(p, enc)); p++)
        copies++;
    assert_int_equal(copies, 2);
    assert_non_null(strstr(html, "onclick=\"return nfShow('fig0','data:image/png;base64,"));
    assert_non_null(strstr(html, "<td>2</td>"));   /* the second row has no link */
    free(enc);
    free(html);
    free(again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64_rfc4648),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_histogram_counts),
        cmocka_unit_test(test_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* check-report.c — checks an HTML report the way a reader's browser would
 * meet it (tests/run-report.sh): the file is under a size limit, refers to
 * nothing outside itself (no http(s) or protocol-relative source, no link,
 * @import, external script, frame or object), and every inline image is a
 * PNG that libpng decodes to the width and height its tag declares and that
 * is not one flat colour, nor are the images the cluster table's links swap
 * in. With --screenshot, a PNG of the rendered page
 * (headless Chromium) must not be blank: enough non-white pixels and
 * colours.
 *
 *   check-report REPORT.html [--max-bytes N] [--min-images N]
 *   check-report --screenshot PAGE.png
 * Prints what it found; exit 0 when every check holds, 1 otherwise.
 */
#include <png.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mem { const uint8_t *p; size_t n, off; };

static void mem_read(png_structp png, png_bytep out, png_size_t n)
{
    struct mem *m = png_get_io_ptr(png);
    if (n > m->n - m->off)
        png_error(png, "read past the end");
    memcpy(out, m->p + m->off, n);
    m->off += n;
}

/* Decode a PNG to RGB(A) rows: width, height, and whether it holds more
 * than one colour and how much is not white. false when it does not decode. */
static bool png_stats(const uint8_t *p, size_t n, int *w, int *h, long *colours, double *non_white)
{
    if (n < 8 || png_sig_cmp(p, 0, 8) != 0)
        return false;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_bytep *rows = NULL;
    bool ok = false;
    if (!png || !info)
        goto done;
    if (setjmp(png_jmpbuf(png)))
        goto done;
    struct mem m = { p, n, 0 };
    png_set_read_fn(png, &m, mem_read);
    png_read_info(png, info);
    png_set_expand(png);
    png_set_strip_16(png);
    png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_read_update_info(png, info);
    *w = (int)png_get_image_width(png, info);
    *h = (int)png_get_image_height(png, info);
    size_t rb = png_get_rowbytes(png, info);
    rows = calloc((size_t)*h, sizeof *rows);
    for (int y = 0; rows && y < *h; y++)
        rows[y] = malloc(rb);
    png_read_image(png, rows);
    /* colours: distinct values of a 12-bit reduction (enough to tell flat from not) */
    static uint8_t seen[4096];
    memset(seen, 0, sizeof seen);
    long distinct = 0, nw = 0;
    for (int y = 0; y < *h; y++)
        for (int x = 0; x < *w; x++) {
            const uint8_t *px = rows[y] + 3 * x;
            int k = (px[0] >> 4) << 8 | (px[1] >> 4) << 4 | px[2] >> 4;
            distinct += !seen[k];
            seen[k] = 1;
            nw += px[0] < 245 || px[1] < 245 || px[2] < 245;
        }
    *colours = distinct;
    *non_white = *w && *h ? (double)nw / ((double)*w * *h) : 0;
    ok = true;
done:
    for (int y = 0; rows && y < *h; y++)
        free(rows[y]);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return ok;
}

static int b64v(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decode base64 from s up to the first non-base64 character (owned). */
static uint8_t *unbase64(const char *s, size_t *n)
{
    size_t len = 0;
    while (b64v(s[len]) >= 0 || s[len] == '=')
        len++;
    uint8_t *out = malloc(len / 4 * 3 + 3);
    uint32_t acc = 0;
    int bits = 0;
    *n = 0;
    for (size_t i = 0; i < len && s[i] != '='; i++) {
        acc = acc << 6 | (uint32_t)b64v(s[i]);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[(*n)++] = (uint8_t)(acc >> bits);
        }
    }
    return out;
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

static int attr(const char *tag, const char *tag_end, const char *name)
{
    char pat[32];
    snprintf(pat, sizeof pat, " %s=\"", name);
    const char *a = strstr(tag, pat);
    return a && a < tag_end ? atoi(a + strlen(pat)) : -1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--screenshot") == 0) {
        size_t n;
        char *buf = read_all(argv[2], &n);
        int w = 0, h = 0;
        long colours = 0;
        double nw = 0;
        if (!buf || !png_stats((uint8_t *)buf, n, &w, &h, &colours, &nw)) {
            printf("FAIL %s: not a PNG\n", argv[2]);
            return 1;
        }
        free(buf);
        printf("screenshot %dx%d: %ld colours, %.1f%% not white\n", w, h, colours, 100 * nw);
        return colours >= 20 && nw >= 0.05 ? 0 : (printf("FAIL: the page looks blank\n"), 1);
    }
    if (argc < 2) {
        fprintf(stderr, "usage: check-report REPORT.html [--max-bytes N] [--min-images N] | --screenshot PNG\n");
        return 2;
    }
    long max_bytes = 10L << 20, min_images = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--max-bytes") == 0)
            max_bytes = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--min-images") == 0)
            min_images = atol(argv[i + 1]);
    }
    size_t n;
    char *html = read_all(argv[1], &n);
    if (!html) {
        printf("FAIL %s: cannot read\n", argv[1]);
        return 1;
    }
    int bad = 0;
    if ((long)n > max_bytes) {
        printf("FAIL: %zu bytes, over %ld\n", n, max_bytes);
        bad++;
    }
    static const char *external[] = { "src=\"http", "src=\"//", "href=\"http", "href=\"//", "<link", "@import",
                                      "url(http", "url(//", "<script src", "<iframe", "<object", "<embed" };
    for (size_t i = 0; i < sizeof external / sizeof *external; i++)
        if (strstr(html, external[i])) {
            printf("FAIL: refers outside itself: %s\n", external[i]);
            bad++;
        }
    long images = 0;
    for (const char *p = html; (p = strstr(p, "<img")); p++) {
        const char *end = strchr(p, '>');
        const char *src = strstr(p, " src=\"");
        if (!end || !src || src > end) {
            printf("FAIL: an <img> without a src\n");
            bad++;
            continue;
        }
        if (strncmp(src + 6, "data:image/png;base64,", 22) != 0) {
            printf("FAIL: an image that is not an inline PNG\n");
            bad++;
            continue;
        }
        size_t pn;
        uint8_t *png = unbase64(src + 28, &pn);
        int w = 0, h = 0, want_w = attr(p, end, "width"), want_h = attr(p, end, "height");
        long colours = 0;
        double nw = 0;
        if (!png_stats(png, pn, &w, &h, &colours, &nw)) {
            printf("FAIL: image %ld does not decode\n", images);
            bad++;
        } else if (w != want_w || h != want_h) {
            printf("FAIL: image %ld is %dx%d, its tag says %dx%d\n", images, w, h, want_w, want_h);
            bad++;
        } else if (colours < 2) {
            printf("FAIL: image %ld (%dx%d) is one flat colour\n", images, w, h);
            bad++;
        }
        free(png);
        images++;
    }
    /* the images a link swaps in (cluster peaks) travel in its onclick: they must decode too */
    long linked = 0;
    for (const char *p = strstr(html, "nfShow('"); p; p = strstr(p + 1, "nfShow('")) {
        const char *d = strstr(p, "data:image/png;base64,");
        if (!d || d > strchr(p, ')'))
            continue;
        size_t pn;
        uint8_t *png = unbase64(d + 22, &pn);
        int w = 0, h = 0;
        long colours = 0;
        double nw = 0;
        if (!png_stats(png, pn, &w, &h, &colours, &nw) || colours < 2) {
            printf("FAIL: the image of link %ld does not decode (or is flat)\n", linked);
            bad++;
        }
        free(png);
        linked++;
    }
    if (linked)
        printf("%ld linked images (cluster peaks) decode\n", linked);
    if (images < min_images) {
        printf("FAIL: %ld images, expected at least %ld\n", images, min_images);
        bad++;
    }
    printf("%s: %zu bytes, %ld inline PNG images, self-contained\n", argv[1], n, images);
    free(html);
    return bad ? 1 : 0;
}

/* encode.c — RGB images as PNG files in memory (libpng), and base64.
 *
 * The report is one self-contained HTML page, so its pictures travel inside
 * it as data: URIs: PNG bytes, base64-encoded. libpng writes into a buffer
 * that grows by doubling (png_set_write_fn) and allocates through nf_malloc
 * (png_create_write_struct_2), so an allocation test reaches it. Everything
 * that could vary between runs is fixed (no tIME or text chunks, compression
 * level, filters), so a picture always encodes to the same bytes. libpng
 * reports errors by longjmp: the state it must leave behind lives on the
 * heap, whose contents a longjmp does not make indeterminate.
 */
#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "core/alloc.h"

#define PNG_MAX_SIDE 65535
#define PNG_COMPRESSION 9

struct png_sink {
    uint8_t *buf;           /* nf_malloc'ed; handed to the caller on success */
    size_t n, cap;
    bool oom;               /* an allocation failed (libpng's or the buffer's) */
    char msg[256];          /* libpng's error message */
};

static void sink_write(png_structp png, png_bytep data, size_t len)
{
    struct png_sink *k = png_get_io_ptr(png);
    if (len > k->cap - k->n) {
        size_t cap = k->cap ? k->cap : 4096;
        while (cap - k->n < len) {
            if (cap > SIZE_MAX / 2) {
                k->oom = true;
                png_error(png, "PNG larger than memory");
            }
            cap *= 2;
        }
        uint8_t *b = nf_realloc(k->buf, cap);
        if (!b) {
            k->oom = true;
            png_error(png, "out of memory");
        }
        k->buf = b;
        k->cap = cap;
    }
    memcpy(k->buf + k->n, data, len);
    k->n += len;
}

static void sink_flush(png_structp png)
{
    (void)png;  /* the buffer is the destination: nothing is held back */
}

static void on_error(png_structp png, png_const_charp msg)
{
    struct png_sink *k = png_get_error_ptr(png);
    snprintf(k->msg, sizeof k->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;  /* libpng warns only about settings we do not use */
    (void)msg;
}

static png_voidp on_malloc(png_structp png, png_alloc_size_t n)
{
    void *p = nf_malloc(n);
    if (!p)
        ((struct png_sink *)png_get_mem_ptr(png))->oom = true;
    return p;
}

static void on_free(png_structp png, png_voidp p)
{
    (void)png;
    free(p);
}

int nf_png_encode(const uint8_t *rgb, int width, int height, uint8_t **png_out, size_t *n,
                  struct nf_error *err)
{
    *png_out = NULL;
    *n = 0;
    if (width < 1 || height < 1 || width > PNG_MAX_SIDE || height > PNG_MAX_SIDE)
        return NF_FAIL(err, NF_EUSAGE, "PNG of %dx%d pixels (expected 1 to %d each)", width, height, PNG_MAX_SIDE);
    struct png_sink *sink = nf_calloc(1, sizeof *sink);
    if (!sink)
        return NF_FAIL(err, NF_ENOMEM, "out of memory encoding a %dx%d PNG", width, height);
    png_structp png = png_create_write_struct_2(PNG_LIBPNG_VER_STRING, sink, on_error, on_warning,
                                                sink, on_malloc, on_free);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        free(sink);
        return NF_FAIL(err, NF_ENOMEM, "out of memory encoding a %dx%d PNG", width, height);
    }
    if (setjmp(png_jmpbuf(png))) {
        int rc = sink->oom ? NF_FAIL(err, NF_ENOMEM, "out of memory encoding a %dx%d PNG", width, height)
                           : NF_FAIL(err, NF_EBUG, "libpng failed to encode a %dx%d PNG: %s", width, height, sink->msg);
        png_destroy_write_struct(&png, &info);
        free(sink->buf);
        free(sink);
        return rc;
    }
    png_set_write_fn(png, sink, sink_write, sink_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, PNG_COMPRESSION);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_ALL_FILTERS);
    png_write_info(png, info);
    for (int y = 0; y < height; y++)
        png_write_row(png, rgb + (size_t)y * (size_t)width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    *png_out = sink->buf;
    *n = sink->n;
    free(sink);
    return 0;
}

char *nf_base64(const void *data, size_t n)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *in = data;
    size_t groups = n / 3 + (n % 3 != 0), len;
    if (!nf_size_mul(groups, 4, &len) || !nf_size_add(len, 1, &len))
        return NULL;
    char *out = nf_malloc(len), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        size_t left = n - i;
        uint32_t w = (uint32_t)in[i] << 16 | (left > 1 ? (uint32_t)in[i + 1] << 8 : 0)
                   | (left > 2 ? in[i + 2] : 0);
        *p++ = alphabet[w >> 18 & 63];
        *p++ = alphabet[w >> 12 & 63];
        *p++ = left > 1 ? alphabet[w >> 6 & 63] : '=';
        *p++ = left > 2 ? alphabet[w & 63] : '=';
    }
    *p = '\0';
    return out;
}

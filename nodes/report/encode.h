/* encode.h — images as PNG files in memory, and base64 for data: URIs.
 *
 * The PNG bytes depend only on the pixels (and the libpng/zlib versions):
 * 8-bit RGB, no interlacing, no time or text chunks, zlib level 9 and every
 * row filter tried in libpng's fixed order, so the same picture gives the
 * same file and a report can be compared byte for byte.
 */
#ifndef NF_REPORT_ENCODE_H
#define NF_REPORT_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Encode width x height RGB pixels (rows top first, 3 bytes a pixel) as a
 * PNG. On success *png is an nf_malloc'ed buffer of *n bytes that the caller
 * frees. NF_EUSAGE for sizes < 1 or over 65535, NF_ENOMEM, NF_EBUG when
 * libpng fails otherwise (its message is kept). */
int nf_png_encode(const uint8_t *rgb, int width, int height, uint8_t **png, size_t *n,
                  struct nf_error *err);

/* RFC 4648 base64 (standard alphabet, '=' padding, no line breaks) of n
 * bytes, NUL-terminated, nf_malloc'ed (the caller frees); NULL when out of
 * memory. */
char *nf_base64(const void *data, size_t n);

#endif

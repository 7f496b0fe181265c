/* format.c — sizes and numbers as text: byte sizes parsed and formatted
 * ("512 MiB"), unsigned integers, and floats with 9 significant digits
 * rounded half to even, the shortest text that reads back to the same float
 * (util.h).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* ---- sizes ---- */
int64_t nf_parse_size(const char *s)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || isinf(v))
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    static const struct { const char *suffix; double mult; } units[] = {
        { "", 1 }, { "b", 1 },
        { "k", 1e3 }, { "kb", 1e3 }, { "kib", 1024.0 },
        { "m", 1e6 }, { "mb", 1e6 }, { "mib", 1048576.0 },
        { "g", 1e9 }, { "gb", 1e9 }, { "gib", 1073741824.0 },
        { "t", 1e12 }, { "tb", 1e12 }, { "tib", 1099511627776.0 },
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (bytes > 9.2e18)
                return -1;
            return (int64_t)bytes;
        }
    }
    return -1;
}

void nf_format_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
}

int nf_format_uint(uint64_t x, char *buf)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + x % 10);
        x /= 10;
    } while (x);
    for (int i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return n;
}

/* round(q + rem/den) half to even, for den > 0 */
static unsigned __int128 round_half_even(unsigned __int128 q, unsigned __int128 rem, unsigned __int128 den)
{
    unsigned __int128 twice = rem * 2;
    if (twice > den || (twice == den && (q & 1)))
        q++;
    return q;
}

/* The 9 significant digits of |m| 2^e scaled by 10^k (rounded half to even),
 * or 0 when out of the exact range. */
static uint64_t scaled_digits(uint64_t m, int e, int k)
{
    unsigned __int128 p5 = 1;
    int ak = k < 0 ? -k : k;
    if (ak > 44)
        return 0;
    for (int i = 0; i < ak; i++)
        p5 *= 5;
    if (k >= 0) {   /* m 5^k 2^(k+e) */
        unsigned __int128 num = (unsigned __int128)m * p5;
        int s = k + e;
        if (s >= 0)
            return s > 40 ? 0 : (uint64_t)(num << s);
        if (s <= -127)
            return 0;
        unsigned __int128 den = (unsigned __int128)1 << -s;
        return (uint64_t)round_half_even(num >> -s, num & (den - 1), den);
    }
    /* m 2^(e-|k|) / 5^|k| */
    int t = e - ak;
    unsigned __int128 num = m, den = p5;
    if (t >= 0) {
        if (t > 100)
            return 0;
        num <<= t;
    } else {
        if (-t > 60)
            return 0;
        den <<= -t;
    }
    return (uint64_t)round_half_even(num / den, num % den, den);
}

int nf_format_float_g9(float f, char *buf)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    int bexp = (int)((u >> 23) & 0xff);
    uint64_t m = u & 0x7fffffu;
    int n = 0;
    if (bexp == 0xff)   /* inf, nan: as printf */
        return snprintf(buf, 32, "%.9g", (double)f);
    if (u >> 31)
        buf[n++] = '-';
    if (bexp == 0 && m == 0) {
        buf[n++] = '0';
        buf[n] = 0;
        return n;
    }
    int e;
    if (bexp == 0) {
        e = -149;
    } else {
        m |= 0x800000u;
        e = bexp - 150;
    }
    double a = fabs((double)f);
    int X = (int)floor(log10(a));
    /* X: the decimal exponent, from log10 and corrected by the digit count */
    uint64_t d = 0;
    for (int tries = 0; tries < 3; tries++) {
        d = scaled_digits(m, e, 8 - X);
        if (!d)
            return snprintf(buf, 32, "%.9g", (double)f);
        if (d > 1000000000u) {
            X++;
            continue;
        }
        if (d == 1000000000u) {   /* rounded up to the next power of ten */
            d = 100000000u;
            X++;
        } else if (d < 100000000u) {
            X--;
            continue;
        }
        break;
    }
    if (d < 100000000u || d >= 1000000000u)
        return snprintf(buf, 32, "%.9g", (double)f);
    char dig[10];
    for (int i = 8; i >= 0; i--) {
        dig[i] = (char)('0' + d % 10);
        d /= 10;
    }
    int last = 8;   /* the last significant digit kept (trailing zeros go) */
    while (last > 0 && dig[last] == '0')
        last--;
    if (X < -4 || X >= 9) {
        buf[n++] = dig[0];
        if (last > 0) {
            buf[n++] = '.';
            for (int i = 1; i <= last; i++)
                buf[n++] = dig[i];
        }
        buf[n++] = 'e';
        buf[n++] = X < 0 ? '-' : '+';
        int ax = X < 0 ? -X : X;
        if (ax < 10)
            buf[n++] = '0';
        n += nf_format_uint((uint64_t)ax, buf + n);
        return n;
    }
    if (X >= 0) {
        for (int i = 0; i <= X; i++)
            buf[n++] = dig[i];
        if (last > X) {
            buf[n++] = '.';
            for (int i = X + 1; i <= last; i++)
                buf[n++] = dig[i];
        }
    } else {
        buf[n++] = '0';
        buf[n++] = '.';
        for (int i = 0; i < -X - 1; i++)
            buf[n++] = '0';
        for (int i = 0; i <= last; i++)
            buf[n++] = dig[i];
    }
    buf[n] = 0;
    return n;
}

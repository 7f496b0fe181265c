/* suggest.c — "did you mean ...?": the closest known name to a mistyped one.
 *
 * Every message about an unknown name (node type, parameter, port, node id,
 * variable, setting, choice) runs the known names through one nf_suggest and
 * offers the closest if it is close enough: an optimal string alignment
 * distance (typos are mostly one insertion, deletion, substitution or swap of
 * neighbours) of at most 2 and at most a third of the word's length, so that
 * short words only get one-letter fixes and "y" is never "corrected" to "X".
 * Case is ignored (an `x` port for `X` is found), but an exact match never
 * counts: it is not unknown. Ties go to the first candidate, so suggestions
 * follow table order and are deterministic.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "suggest.h"

#define FAR 1000
#define MAX_LEN 64

int nf_edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > MAX_LEN || m > MAX_LEN)
        return FAR;
    /* three rows of the dynamic programme: i-2, i-1, i */
    int rows[3][MAX_LEN + 1];
    for (size_t j = 0; j <= m; j++)
        rows[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int *cur = rows[i % 3], *prev = rows[(i - 1) % 3], *prev2 = rows[(i + 1) % 3];
        cur[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int cost = ca != cb;
            int d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (prev[j - 1] + cost < d)
                d = prev[j - 1] + cost;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
        }
    }
    return rows[n % 3][m];
}

void nf_suggest_init(struct nf_suggest *s, const char *word)
{
    s->word = word;
    s->best = NULL;
    s->best_distance = FAR;
}

void nf_suggest_add(struct nf_suggest *s, const char *candidate)
{
    if (!s->word || !candidate || strcmp(s->word, candidate) == 0)
        return;
    int d = nf_edit_distance(s->word, candidate);
    int allowed = (int)strlen(s->word) / 3;
    if (allowed > 2)
        allowed = 2;
    if (d <= allowed && d < s->best_distance) {
        s->best = candidate;
        s->best_distance = d;
    }
}

const char *nf_suggest_hint(const struct nf_suggest *s, char *buf, size_t size)
{
    if (size == 0)
        return buf;
    buf[0] = '\0';
    if (s->best)
        snprintf(buf, size, "did you mean '%s'? ", s->best);
    return buf;
}

const char *nf_suggest_from(const char *word, const char *const *candidates)
{
    struct nf_suggest s;
    nf_suggest_init(&s, word);
    for (size_t i = 0; candidates && candidates[i]; i++)
        nf_suggest_add(&s, candidates[i]);
    return s.best;
}

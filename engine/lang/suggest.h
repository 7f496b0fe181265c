/* suggest.h — "did you mean ...?" for names a user mistyped (suggest.c). */
#ifndef NF_SUGGEST_H
#define NF_SUGGEST_H

#include <stddef.h>

/* Optimal string alignment distance (Damerau-Levenshtein with adjacent
 * transpositions, no substring edited twice), ASCII case folded: "laod" is 1
 * from "load", "x" is 0 from "X". Strings longer than 64 bytes are "far". */
int nf_edit_distance(const char *a, const char *b);

/* The closest candidate to `word`, fed one at a time; the first of equally
 * close ones wins, so the result follows the order candidates are given in. */
struct nf_suggest {
    const char *word;
    const char *best;   /* NULL until a candidate is close enough */
    int best_distance;
};
void nf_suggest_init(struct nf_suggest *s, const char *word);
void nf_suggest_add(struct nf_suggest *s, const char *candidate);
/* "did you mean 'best'? " (note the trailing space), to open the
 * parenthesis of a message that lists the known names; "" when nothing is
 * close. Returns buf. */
const char *nf_suggest_hint(const struct nf_suggest *s, char *buf, size_t size);
/* The best of a NULL-terminated list, or NULL. */
const char *nf_suggest_from(const char *word, const char *const *candidates);

#endif

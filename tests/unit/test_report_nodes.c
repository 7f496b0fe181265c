/* test_report_nodes.c — the report's permutation threshold
 * (nodes/report/report_nodes.c report_fwe_threshold) against enumeration:
 * for null maxima with ties and for both p formulas (every permutation, the
 * identity included: count / N; random: (count + 1) / (N + 1)), a statistic
 * t is significant (p_fwe < alpha, count = #{null >= t}) exactly when
 * t > threshold, checked at every null value and halfway between them, at
 * alphas where alpha * N is and is not a whole number. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "report/report_internal.h"

static double p_fwe(const float *null, size_t n, double t, bool exact)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += (double)null[i] >= t;
    return exact ? (double)count / (double)n : ((double)count + 1) / ((double)n + 1);
}

static void check_against_enumeration(const float *null, size_t n, bool exact, double alpha)
{
    double thr = report_fwe_threshold(null, n, exact, alpha);
    for (size_t i = 0; i < n; i++)
        for (int k = -1; k <= 1; k++) {
            /* at a null value and just around it */
            double t = (double)null[i] + k * 1e-3;
            bool significant = p_fwe(null, n, t, exact) < alpha;
            if (significant != (t > thr))
                fail_msg("n %zu exact %d alpha %g: t %.6f p_fwe %.6f, threshold %.6f", n, exact, alpha, t,
                         p_fwe(null, n, t, exact), thr);
        }
}

static void test_threshold_by_enumeration(void **state)
{
    (void)state;
    const size_t sizes[] = { 1, 19, 20, 21, 100, 999, 4096 };
    const double alphas[] = { 0.05, 0.01, 0.1, 0.5 };
    srand(7);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        float *null = malloc(n * sizeof *null);
        for (size_t i = 0; i < n; i++)   /* values on a coarse grid: many ties */
            null[i] = (float)(rand() % 50) * 0.25f;
        for (size_t a = 0; a < sizeof alphas / sizeof *alphas; a++) {
            check_against_enumeration(null, n, true, alphas[a]);
            check_against_enumeration(null, n, false, alphas[a]);
        }
        free(null);
    }
}

static void test_threshold_edges(void **state)
{
    (void)state;
    float null[19];
    for (int i = 0; i < 19; i++)
        null[i] = (float)i;
    /* 19 random permutations: the smallest p is 1/20 = 0.05, never < 0.05 */
    assert_true(isinf(report_fwe_threshold(null, 19, false, 0.05)));
    /* 20 enumerated: p = count / 20 < 0.05 only for count 0, above the maximum */
    float twenty[20];
    for (int i = 0; i < 20; i++)
        twenty[i] = (float)i;
    assert_float_equal(report_fwe_threshold(twenty, 20, true, 0.05), 19.0, 0);
    /* 100 random: (count + 1) / 101 < 0.05 for count <= 4: above the 5th largest */
    float hundred[100];
    for (int i = 0; i < 100; i++)
        hundred[i] = (float)(99 - i);
    assert_float_equal(report_fwe_threshold(hundred, 100, false, 0.05), 95.0, 0);
    /* no finite maxima: no threshold */
    float nan1[1] = { NAN };
    assert_true(isnan(report_fwe_threshold(nan1, 1, false, 0.05)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threshold_by_enumeration),
        cmocka_unit_test(test_threshold_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

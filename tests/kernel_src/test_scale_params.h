/*
 * test_scale_params.h: the params struct of the registry's test-only stage
 * (tests/test_stage.c), shared by the host test and its kernel
 * (test_scale.cuh), as kernel_src/kda_params.h is by the real stages.
 */
#ifndef KDART_TEST_SCALE_PARAMS_H
#define KDART_TEST_SCALE_PARAMS_H

typedef struct kdart_test_scale_params {
    const void *x; /* [rows, K] bf16 */
    float *y;      /* [rows, K] fp32 */
    float scale;
    int rows, K;
} kdart_test_scale_params;

#endif /* KDART_TEST_SCALE_PARAMS_H */

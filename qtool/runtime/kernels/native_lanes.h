/* What the numpy engine's C kernels share: the geometry of a sliding window, eight-lane float
 * vectors, and the loops _native.c (the Python module) calls with the GIL released:
 * _native_depthwise.c (DEPTHWISE_CONV_2D) and _native_passes.c (the one-pass kernels). */
#ifndef QTOOL_NATIVE_H
#define QTOOL_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Functions the module's files share, kept out of the extension's exported symbols. */
#define INTERNAL __attribute__((visibility("hidden")))

typedef struct {
    Py_ssize_t n, height, width, channels; /* the input, NHWC */
    Py_ssize_t kh, kw, sh, sw, dh, dw;     /* window, strides, dilations */
    Py_ssize_t top, left, oh, ow;          /* leading padding, output size */
} geometry;

/* Eight float lanes: one AVX register, two SSE ones (GCC's and clang's portable vectors). */
typedef float lanes __attribute__((vector_size(32)));
typedef int32_t mask __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) lanes load(const float *p) {
    lanes v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void store(float *p, lanes v) {
    memcpy(p, &v, sizeof v);
}

static inline __attribute__((always_inline)) lanes choose(mask m, lanes yes, lanes no) {
    return (lanes)((m & (mask)yes) | (~m & (mask)no));
}

INTERNAL int native_depthwise(const geometry *g, const float *x, const float *filters,
                              const float *bias, const unsigned char *group_of, int groups,
                              float low, float high, float *out);
INTERNAL void native_bias_clamp(float *values, const float *bias, Py_ssize_t rows, Py_ssize_t c,
                                float low, float high);
INTERNAL void native_prelu(const float *x, const float *alpha, float *out, Py_ssize_t rows,
                           Py_ssize_t size);
INTERNAL void native_max_pool(const geometry *g, const float *x, float *out, Py_ssize_t sample,
                              float low, float high);
INTERNAL void native_bilinear(const float *x, float *out, float *row, Py_ssize_t sample,
                              Py_ssize_t height, Py_ssize_t width, Py_ssize_t c, Py_ssize_t oh,
                              Py_ssize_t ow, const int64_t *y0, const int64_t *y1,
                              const float *dy, const int64_t *x0, const int64_t *x1,
                              const float *dx);

#endif

/* The numpy engine's one-pass kernels (_native.c has the Python side): a convolution's bias
 * and clamp, PRELU, MAX_POOL_2D and RESIZE_BILINEAR, each as the numpy code it stands in for
 * computes it. */
#include "native_lanes.h"

/* values[r, k] = clamp(values[r, k] + bias[k]) (no bias: the clamp alone), in place. */
VECTOR_CLONES
INTERNAL void native_bias_clamp(float *restrict values, const float *restrict bias, Py_ssize_t rows,
                            Py_ssize_t c, float low, float high) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        float *restrict v = values + r * c;
        for (Py_ssize_t k = 0; k < c; k++) {
            float sum = bias ? v[k] + bias[k] : v[k];
            sum = sum < low ? low : sum;
            v[k] = sum > high ? high : sum;
        }
    }
}

/* np.maximum(a, b): a if it is NaN, else b if it is NaN, else a where a >= b (so a tie of
 * zeros keeps a's sign). */
static inline __attribute__((always_inline)) lanes np_maximum(lanes a, lanes b) {
    return choose((a != a) | ((b == b) & (a >= b)), a, b);
}

static inline __attribute__((always_inline)) float np_maximum_1(float a, float b) {
    return a != a || (b == b && a >= b) ? a : b;
}

/* MAX_POOL_2D as pooling.py folds it: for each window column, its rows' maximum (padding
 * -inf), then the maximum of those column maxima, every step np.maximum's (NaN and the signs
 * of zeros included); then clamped. */
VECTOR_CLONES
INTERNAL void native_max_pool(const geometry *g, const float *restrict x, float *restrict out,
                            Py_ssize_t sample, float low_value, float high_value) {
    const Py_ssize_t c = g->channels, vectors = c / 8 * 8;
    const lanes low = (lanes){0} + low_value, high = (lanes){0} + high_value;
    const lanes padding = (lanes){0} - INFINITY;
    for (Py_ssize_t oy = 0; oy < g->oh; oy++)
        for (Py_ssize_t ox = 0; ox < g->ow; ox++) {
            float *o = out + ((sample * g->oh + oy) * g->ow + ox) * c;
            for (Py_ssize_t k = 0; k < c; k += k < vectors ? 8 : 1) {
                int whole = k < vectors;
                lanes total = padding;
                float total_1 = -INFINITY;
                for (Py_ssize_t j = 0; j < g->kw; j++) {
                    Py_ssize_t ix = ox * g->sw - g->left + j;
                    lanes column = padding;
                    float column_1 = -INFINITY;
                    for (Py_ssize_t i = 0; i < g->kh; i++) {
                        Py_ssize_t iy = oy * g->sh - g->top + i;
                        int inside = iy >= 0 && iy < g->height && ix >= 0 && ix < g->width;
                        const float *p =
                            x + ((sample * g->height + iy) * g->width + ix) * c + k;
                        if (whole) {
                            lanes v = inside ? load(p) : padding;
                            column = i ? np_maximum(column, v) : v;
                        } else {
                            float v = inside ? *p : -INFINITY;
                            column_1 = i ? np_maximum_1(column_1, v) : v;
                        }
                    }
                    if (whole) total = j ? np_maximum(total, column) : column;
                    else total_1 = j ? np_maximum_1(total_1, column_1) : column_1;
                }
                if (whole) {
                    total = choose(total < low, low, total);
                    store(o + k, choose(total > high, high, total));
                } else {
                    total_1 = total_1 < low_value ? low_value : total_1;
                    o[k] = total_1 > high_value ? high_value : total_1;
                }
            }
        }
}

/* RESIZE_BILINEAR as resize.py computes it: each output row from two input rows,
 * r = x[y0] * (1 - dy) + x[y1] * dy, then each output pixel from two pixels of r,
 * r[x0] * (1 - dx) + r[x1] * dx, every product and sum rounded to float32 on its own. */
VECTOR_CLONES
INTERNAL void native_bilinear(const float *restrict x, float *restrict out, float *restrict row,
                            Py_ssize_t sample, Py_ssize_t height, Py_ssize_t width, Py_ssize_t c,
                            Py_ssize_t oh, Py_ssize_t ow, const int64_t *y0, const int64_t *y1,
                            const float *dy, const int64_t *x0, const int64_t *x1,
                            const float *dx) {
    const Py_ssize_t span = width * c;
    for (Py_ssize_t oy = 0; oy < oh; oy++) {
        const float *top = x + (sample * height + y0[oy]) * span;
        const float *bottom = x + (sample * height + y1[oy]) * span;
        float wy = dy[oy], keep_y = 1.0f - wy;
        for (Py_ssize_t m = 0; m < span; m++) row[m] = top[m] * keep_y + bottom[m] * wy;
        float *o = out + (sample * oh + oy) * ow * c;
        for (Py_ssize_t ox = 0; ox < ow; ox++) {
            const float *left = row + x0[ox] * c, *right = row + x1[ox] * c;
            float wx = dx[ox], keep_x = 1.0f - wx;
            for (Py_ssize_t k = 0; k < c; k++) o[ox * c + k] = left[k] * keep_x + right[k] * wx;
        }
    }
}

/* out[r, k] = x[r, k] >= 0 ? x[r, k] : x[r, k] * alpha[k]: NaN takes the product (NaN). */
VECTOR_CLONES
INTERNAL void native_prelu(const float *restrict x, const float *restrict alpha,
                       float *restrict out, Py_ssize_t rows, Py_ssize_t size) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *restrict p = x + r * size;
        float *restrict o = out + r * size;
        for (Py_ssize_t k = 0; k < size; k++) o[k] = p[k] >= 0.0f ? p[k] : p[k] * alpha[k];
    }
}


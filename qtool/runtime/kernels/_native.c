/* The numpy engine's hottest float kernels in C (qtool/runtime/kernels/native.py), each giving
 * the results of the numpy code it stands in for bit for bit (NaN payloads aside: which one an
 * operation on two NaNs keeps depends on the compiler's operand order, in numpy as here;
 * tests/runtime/test_native_kernels.py).
 *
 * DEPTHWISE_CONV_2D (conv.py). numpy computes it as an einsum over strided views of a padded
 * copy of the input, then adds the bias and clamps in two more passes: on MediaPipe's models
 * that took 2 to 5 times as long as the matrix products around it. Here the output pixels whose
 * whole window lies inside the input are summed in registers (four pixels by eight channels at
 * a time), and the pixels along the padded borders in a row buffer that stays in the first-level
 * cache, a tap outside the input multiplying a zero; the bias and the clamp are applied as the
 * sums are written out. The numpy path sums the taps of each column group (the window columns
 * that read the same column phase of a strided input: TapGrid.column_groups) window row by
 * window row from zero, adds the groups' sums in group order, then the bias, then clamps; so
 * does this kernel, each product and sum rounded on its own (built with -ffp-contract=off, so
 * that no multiply and add are fused).
 *
 * PRELU (activations.py): x >= 0 ? x : x * alpha in one pass, alpha along the last axes. numpy
 * restarts its loops at every row of channels and needs four passes where alphas are mixed.
 *
 * Only the CPython API (the buffer protocol): no numpy headers at build time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ROW_FLOATS 4096 /* floats of one group's row buffer (16 KB), or one pixel's */

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

typedef struct {
    Py_ssize_t n, height, width, channels;    /* the input, NHWC */
    Py_ssize_t kh, kw, sh, sw, dh, dw;         /* window, strides, dilations */
    Py_ssize_t top, left, oh, ow;              /* leading padding, output size */
} geometry;

/* Eight float lanes: one AVX register, two SSE ones (GCC's and clang's portable vectors). */
typedef float lanes __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) lanes load(const float *p) {
    lanes v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void store(float *p, lanes v) {
    memcpy(p, &v, sizeof v);
}

/* acc[o * c + k] += x[o * step + k] * w[k] for `count` output pixels o and c channels k,
 * eight channels at a time. Few channels: pixel after pixel for each eight, their weights held
 * in a register; many: channel after channel for each pixel, one long contiguous run. */
static inline __attribute__((always_inline)) void
multiply_add(float *restrict acc, const float *restrict x, Py_ssize_t step,
             const float *restrict w, Py_ssize_t count, Py_ssize_t c) {
    Py_ssize_t vectors = c / 8 * 8;
    if (c >= 64) {
        for (Py_ssize_t o = 0; o < count; o++) {
            float *restrict a = acc + o * c;
            const float *restrict p = x + o * step;
#pragma GCC unroll 4
            for (Py_ssize_t k = 0; k < vectors; k += 8)
                store(a + k, load(a + k) + load(p + k) * load(w + k));
        }
    } else {
        for (Py_ssize_t k = 0; k < vectors; k += 8) {
            lanes weights = load(w + k);
#pragma GCC unroll 4
            for (Py_ssize_t o = 0; o < count; o++)
                store(acc + o * c + k, load(acc + o * c + k) + load(x + o * step + k) * weights);
        }
    }
    for (Py_ssize_t k = vectors; k < c; k++) {
        float weight = w[k];
        for (Py_ssize_t o = 0; o < count; o++) acc[o * c + k] += x[o * step + k] * weight;
    }
}

/* The first output column at or after `first` whose tap at input offset `offset` (the column
 * of output 0) lies inside [0, width), and the first at or after that which does not. */
static void inside(Py_ssize_t offset, Py_ssize_t stride, Py_ssize_t width, Py_ssize_t first,
                   Py_ssize_t stop, Py_ssize_t *lo, Py_ssize_t *hi) {
    Py_ssize_t need = -offset; /* output o reads column o * stride + offset */
    Py_ssize_t a = need <= 0 ? 0 : (need + stride - 1) / stride;
    Py_ssize_t last = width - 1 - offset;
    Py_ssize_t b = last < 0 ? 0 : last / stride + 1;
    a = a < first ? first : (a > stop ? stop : a);
    b = b < a ? a : (b > stop ? stop : b);
    *lo = a;
    *hi = b;
}

/* One call's constants: the geometry, the taps in summation order (column group by column
 * group, window rows, then columns), and the working memory. */
typedef struct {
    geometry g;
    const float *x, *filters, *bias;
    float *out;
    float low, high;
    const unsigned char *group_of; /* the column group of each window column */
    int groups;
    Py_ssize_t *tap_end;  /* taps [tap_end[k - 1], tap_end[k]) make group k */
    Py_ssize_t *tap_x;    /* a tap's input offset from its window's first pixel (floats) */
    Py_ssize_t *tap_w;    /* its weights' offset in the filters (floats) */
    float *acc;           /* groups * row floats: the edge columns' row buffers */
    Py_ssize_t row;       /* floats of one buffer: ROW_FLOATS, or one pixel's channels */
    const float *zeros;   /* c zeros: what a tap outside the input reads */
} plan;

/* Output columns [first, stop) of row oy of a sample, any of whose taps may lie outside the
 * input: summed in row buffers, tap by tap over the whole span, padded taps multiplying zeros. */
static inline __attribute__((always_inline)) void
edge_columns(const plan *pl, Py_ssize_t sample, Py_ssize_t oy, Py_ssize_t first,
             Py_ssize_t end) {
    const geometry *g = &pl->g;
    const Py_ssize_t c = g->channels, span = pl->row / c;
    for (Py_ssize_t ox0 = first; ox0 < end; ox0 += span) {
        Py_ssize_t count = end - ox0 < span ? end - ox0 : span;
        Py_ssize_t stop = ox0 + count;
        for (int group = 0; group < pl->groups; group++) {
            float *restrict a = pl->acc + group * pl->row;
            memset(a, 0, (size_t)(count * c) * sizeof(float));
            for (Py_ssize_t i = 0; i < g->kh; i++) {
                Py_ssize_t iy = oy * g->sh + i * g->dh - g->top;
                int row_inside = iy >= 0 && iy < g->height;
                const float *input =
                    row_inside ? pl->x + ((sample * g->height + iy) * g->width) * c : pl->zeros;
                for (Py_ssize_t j = 0; j < g->kw; j++) {
                    if (pl->group_of[j] != group) continue;
                    const float *w = pl->filters + (i * g->kw + j) * c;
                    Py_ssize_t offset = j * g->dw - g->left, lo = ox0, hi = ox0;
                    if (row_inside) inside(offset, g->sw, g->width, ox0, stop, &lo, &hi);
                    /* Left padding, the input, right padding (or a whole padded row). */
                    multiply_add(a, pl->zeros, 0, w, lo - ox0, c);
                    if (hi > lo)
                        multiply_add(a + (lo - ox0) * c, input + (lo * g->sw + offset) * c,
                                     g->sw * c, w, hi - lo, c);
                    multiply_add(a + (hi - ox0) * c, pl->zeros, 0, w, stop - hi, c);
                }
            }
        }
        float *restrict acc = pl->acc;
        for (int group = 1; group < pl->groups; group++) {
            const float *restrict more = acc + group * pl->row;
            for (Py_ssize_t m = 0; m < count * c; m++) acc[m] = acc[m] + more[m];
        }
        if (pl->bias)
            for (Py_ssize_t p = 0; p < count; p++)
                for (Py_ssize_t k = 0; k < c; k++) acc[p * c + k] = acc[p * c + k] + pl->bias[k];
        /* np.clip: NaN stays NaN (both comparisons are false). */
        float *o = pl->out + ((sample * g->oh + oy) * g->ow + ox0) * c;
        for (Py_ssize_t m = 0; m < count * c; m++) {
            float v = acc[m] < pl->low ? pl->low : acc[m];
            o[m] = v > pl->high ? pl->high : v;
        }
    }
}

typedef int32_t mask __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) lanes choose(mask m, lanes yes, lanes no) {
    return (lanes)((m & (mask)yes) | (~m & (mask)no));
}

/* Bias, clamp and store of `pixels` sums of channels [k, k + 8). */
static inline __attribute__((always_inline)) void
store_pixels(const plan *pl, const lanes *total, Py_ssize_t k, float *restrict o, int pixels,
             int most) {
    const Py_ssize_t c = pl->g.channels;
    lanes low = (lanes){0} + pl->low, high = (lanes){0} + pl->high;
    lanes bias = pl->bias ? load(pl->bias + k) : (lanes){0};
    for (int p = 0; p < most; p++) {
        if (p >= pixels) break;
        lanes v = pl->bias ? total[p] + bias : total[p];
        v = choose(v < low, low, v);
        v = choose(v > high, high, v);
        store(o + p * c + k, v);
    }
}

/* The sums of PIXELS neighbouring output pixels (columns ox, ox + 1, ...) for channels
 * [k, k + 8), every tap inside the input: held in registers from the first tap to the store.
 * `origin`: the input offset of the first pixel's window; `step`: floats between windows. */
#define PIXELS 4
static inline __attribute__((always_inline)) void
inner_pixels(const plan *pl, const float *restrict origin, Py_ssize_t step, Py_ssize_t k,
             float *restrict o, int pixels) {
    const Py_ssize_t c = pl->g.channels;
    lanes total[PIXELS] = {{0}}, sum[PIXELS];
    Py_ssize_t t = 0;
    for (int group = 0; group < pl->groups; group++) {
#pragma GCC unroll 4
        for (int p = 0; p < PIXELS; p++) sum[p] = (lanes){0};
        for (; t < pl->tap_end[group]; t++) {
            lanes w = load(pl->filters + pl->tap_w[t] + k);
            const float *restrict input = origin + pl->tap_x[t] + k;
#pragma GCC unroll 4
            for (int p = 0; p < PIXELS; p++)
                if (p < pixels) sum[p] = sum[p] + load(input + p * step) * w;
        }
#pragma GCC unroll 4
        for (int p = 0; p < PIXELS; p++) total[p] = group ? total[p] + sum[p] : sum[p];
    }
    store_pixels(pl, total, k, o, pixels, PIXELS);
}

/* As inner_pixels for a window KW columns wide read with column stride and dilation 1 (one
 * column group), UNIT pixels at a time: each input vector of a window row is loaded once and
 * added to every pixel whose window holds it, with the KW weights of the row in registers.
 * Each pixel's sum still takes its taps window row by window row, columns in order. */
#define UNIT 8
static inline __attribute__((always_inline)) void
unit_stride_pixels(const plan *pl, const float *restrict origin, Py_ssize_t k,
                   float *restrict o, int pixels, const int KW) {
    const Py_ssize_t c = pl->g.channels, row_step = pl->g.dh * pl->g.width * c;
    lanes sum[UNIT];
#pragma GCC unroll 8
    for (int p = 0; p < UNIT; p++) sum[p] = (lanes){0};
    for (Py_ssize_t i = 0; i < pl->g.kh; i++) {
        const float *restrict input = origin + i * row_step + k;
        lanes w[8];
#pragma GCC unroll 8
        for (int j = 0; j < KW; j++) w[j] = load(pl->filters + (i * KW + j) * c + k);
#pragma GCC unroll 16
        for (int column = 0; column < UNIT + KW - 1; column++) {
            if (column >= pixels + KW - 1) break;
            lanes v = load(input + column * c);
#pragma GCC unroll 8
            for (int p = 0; p < UNIT; p++) {
                int j = column - p;
                if (j >= 0 && j < KW && p < pixels) sum[p] = sum[p] + v * w[j];
            }
        }
    }
    store_pixels(pl, sum, k, o, pixels, UNIT);
}

/* Output columns [first, stop) of row oy of a sample, every tap of which lies inside the input
 * (c a multiple of 8). */
static inline __attribute__((always_inline)) void
inner_columns(const plan *pl, Py_ssize_t sample, Py_ssize_t oy, Py_ssize_t first,
              Py_ssize_t stop) {
    const geometry *g = &pl->g;
    const Py_ssize_t c = g->channels, step = g->sw * c;
    const float *row = pl->x + ((sample * g->height + oy * g->sh - g->top) * g->width) * c;
    float *o = pl->out + ((sample * g->oh + oy) * g->ow) * c;
    int unit = g->sw == 1 && g->dw == 1 && (g->kw == 3 || g->kw == 5);
    for (Py_ssize_t ox = first; ox < stop;) {
        const float *origin = row + (ox * g->sw - g->left) * c;
        if (unit) {
            int pixels = stop - ox < UNIT ? (int)(stop - ox) : UNIT;
            for (Py_ssize_t k = 0; k < c; k += 8)
                if (g->kw == 3 && pixels == UNIT)
                    unit_stride_pixels(pl, origin, k, o + ox * c, UNIT, 3);
                else if (g->kw == 3)
                    unit_stride_pixels(pl, origin, k, o + ox * c, pixels, 3);
                else if (pixels == UNIT)
                    unit_stride_pixels(pl, origin, k, o + ox * c, UNIT, 5);
                else
                    unit_stride_pixels(pl, origin, k, o + ox * c, pixels, 5);
            ox += pixels;
            continue;
        }
        int pixels = stop - ox < PIXELS ? (int)(stop - ox) : PIXELS;
        for (Py_ssize_t k = 0; k < c; k += 8)
            if (pixels == PIXELS)
                inner_pixels(pl, origin, step, k, o + ox * c, PIXELS);
            else
                inner_pixels(pl, origin, step, k, o + ox * c, pixels);
        ox += pixels;
    }
}

/* Every output row of one sample. */
VECTOR_CLONES
static void depthwise_sample(const plan *pl, Py_ssize_t sample) {
    const geometry *g = &pl->g;
    /* The output columns whose window columns all lie inside the input. */
    Py_ssize_t first = 0, stop = g->ow;
    for (Py_ssize_t j = 0; j < g->kw; j++) {
        Py_ssize_t lo, hi;
        inside(j * g->dw - g->left, g->sw, g->width, 0, g->ow, &lo, &hi);
        first = lo > first ? lo : first;
        stop = hi < stop ? hi : stop;
    }
    if (stop < first || g->channels % 8) stop = first;
    for (Py_ssize_t oy = 0; oy < g->oh; oy++) {
        Py_ssize_t top = oy * g->sh - g->top, bottom = top + (g->kh - 1) * g->dh;
        if (top < 0 || bottom >= g->height || stop == first) {
            edge_columns(pl, sample, oy, 0, g->ow);
            continue;
        }
        edge_columns(pl, sample, oy, 0, first);
        inner_columns(pl, sample, oy, first, stop);
        edge_columns(pl, sample, oy, stop, g->ow);
    }
}

/* A C-contiguous buffer of `length` items of the struct format `kind` ("f": float32, "q":
 * int64), writable if asked. */
static int typed_buffer(PyObject *object, Py_buffer *view, int writable, Py_ssize_t length,
                        char kind, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    int is_int64 = (format[0] == 'q' || format[0] == 'l') && view->itemsize == 8;
    int matches = kind == 'q' ? is_int64 : format[0] == 'f' && view->itemsize == 4;
    if (!matches || strlen(format) != 1 || view->len != length * view->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd C-contiguous %s items", what, length,
                     kind == 'q' ? "int64" : "float32");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int float_buffer(PyObject *object, Py_buffer *view, int writable, Py_ssize_t length,
                        const char *what) {
    return typed_buffer(object, view, writable, length, 'f', what);
}

/* "O&" converter: a tuple (n, height, width, c, kh, kw, stride_h, stride_w, dilation_h,
 * dilation_w, top, left, oh, ow) to a geometry. Any values are safe to run with (every tap is
 * checked against the input's bounds); nonsense ones are refused. */
static int to_geometry(PyObject *tuple, void *address) {
    geometry *g = address;
    if (!PyTuple_Check(tuple) ||
        !PyArg_ParseTuple(tuple, "nnnnnnnnnnnnnn;geometry: a tuple of 14 integers", &g->n,
                          &g->height, &g->width, &g->channels, &g->kh, &g->kw, &g->sh, &g->sw,
                          &g->dh, &g->dw, &g->top, &g->left, &g->oh, &g->ow)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "geometry: a tuple");
        return 0;
    }
    if (g->n < 0 || g->height < 0 || g->width < 0 || g->channels < 1 || g->kh < 1 ||
        g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->oh < 0 ||
        g->ow < 0) {
        PyErr_SetString(PyExc_ValueError, "geometry: inconsistent sizes");
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(depthwise_doc,
             "depthwise(x, filters, bias, out, geometry, group_of, low, high)\n\n"
             "x: float32 [n, height, width, c]; filters: float32 [kh, kw, c]; bias: float32 [c]\n"
             "or None; out: float32 [n, oh, ow, c], written. geometry: (n, height, width, c,\n"
             "kh, kw, stride_h, stride_w, dilation_h, dilation_w, top, left, oh, ow). group_of:\n"
             "the column group of each window column (bytes of length kw, groups numbered\n"
             "0, 1, ... by first column). Each output: the taps of each group summed from zero\n"
             "(window rows, then columns), the groups summed in order, the bias added, clamped\n"
             "to [low, high].");

static PyObject *depthwise(PyObject *self, PyObject *args) {
    PyObject *x_object, *filters_object, *bias_object, *out_object;
    geometry g;
    const char *group_bytes;
    Py_ssize_t group_length;
    float low, high;
    if (!PyArg_ParseTuple(args, "OOOOO&y#ff", &x_object, &filters_object, &bias_object,
                          &out_object, to_geometry, &g, &group_bytes, &group_length, &low,
                          &high))
        return NULL;
    if (group_length != g.kw) {
        PyErr_SetString(PyExc_ValueError, "depthwise: one group number per window column");
        return NULL;
    }
    const unsigned char *group_of = (const unsigned char *)group_bytes;
    int groups = 0;
    for (Py_ssize_t j = 0; j < g.kw; j++) {
        if (group_of[j] > groups) {
            PyErr_SetString(PyExc_ValueError, "depthwise: groups must be numbered in order");
            return NULL;
        }
        if (group_of[j] == groups) groups++;
    }
    Py_buffer x, filters, bias = {0}, out;
    int with_bias = bias_object != Py_None;
    if (float_buffer(x_object, &x, 0, g.n * g.height * g.width * g.channels, "x") < 0)
        return NULL;
    if (float_buffer(filters_object, &filters, 0, g.kh * g.kw * g.channels, "filters") < 0)
        goto release_x;
    if (with_bias && float_buffer(bias_object, &bias, 0, g.channels, "bias") < 0)
        goto release_filters;
    if (float_buffer(out_object, &out, 1, g.n * g.oh * g.ow * g.channels, "out") < 0)
        goto release_bias;
    Py_ssize_t row = g.channels > ROW_FLOATS ? g.channels : ROW_FLOATS;
    Py_ssize_t taps = g.kh * g.kw;
    float *acc = malloc(sizeof(float) * (size_t)(row * groups));
    float *zeros = calloc((size_t)g.channels, sizeof(float));
    Py_ssize_t *offsets = malloc(sizeof(Py_ssize_t) * (size_t)(2 * taps + groups));
    if (!acc || !zeros || !offsets) {
        free(acc);
        free(zeros);
        free(offsets);
        PyErr_NoMemory();
        goto release_out;
    }
    plan pl = {g, x.buf, filters.buf, with_bias ? bias.buf : NULL, out.buf, low, high,
               group_of, groups, offsets + 2 * taps, offsets, offsets + taps, acc, row, zeros};
    Py_ssize_t t = 0;
    for (int group = 0; group < groups; group++) {
        for (Py_ssize_t i = 0; i < g.kh; i++)
            for (Py_ssize_t j = 0; j < g.kw; j++)
                if (group_of[j] == group) {
                    pl.tap_x[t] = (i * g.dh * g.width + j * g.dw) * g.channels;
                    pl.tap_w[t] = (i * g.kw + j) * g.channels;
                    t++;
                }
        pl.tap_end[group] = t;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t sample = 0; sample < g.n; sample++) depthwise_sample(&pl, sample);
    Py_END_ALLOW_THREADS
    free(offsets);
    free(acc);
    free(zeros);
    PyBuffer_Release(&out);
    if (with_bias) PyBuffer_Release(&bias);
    PyBuffer_Release(&filters);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;

release_out:
    PyBuffer_Release(&out);
release_bias:
    if (with_bias) PyBuffer_Release(&bias);
release_filters:
    PyBuffer_Release(&filters);
release_x:
    PyBuffer_Release(&x);
    return NULL;
}

/* values[r, k] = clamp(values[r, k] + bias[k]) (no bias: the clamp alone), in place. */
VECTOR_CLONES
static void bias_clamp_rows(float *restrict values, const float *restrict bias, Py_ssize_t rows,
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

PyDoc_STRVAR(bias_clamp_doc,
             "bias_clamp(values, bias, rows, channels, low, high)\n\n"
             "values: float32 [rows, channels], updated in place to clip(values + bias, low,\n"
             "high) (bias: float32 [channels], or None for the clip alone) as numpy's\n"
             "`values += bias; np.clip(values, low, high, out=values)` does: NaN stays NaN.");

static PyObject *bias_clamp(PyObject *self, PyObject *args) {
    PyObject *values_object, *bias_object;
    Py_ssize_t rows, channels;
    float low, high;
    if (!PyArg_ParseTuple(args, "OOnnff", &values_object, &bias_object, &rows, &channels, &low,
                          &high))
        return NULL;
    if (rows < 0 || channels < 0) {
        PyErr_SetString(PyExc_ValueError, "bias_clamp: rows and channels must be >= 0");
        return NULL;
    }
    Py_buffer values, bias = {0};
    int with_bias = bias_object != Py_None;
    if (float_buffer(values_object, &values, 1, rows * channels, "values") < 0) return NULL;
    if (with_bias && float_buffer(bias_object, &bias, 0, channels, "bias") < 0) {
        PyBuffer_Release(&values);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    bias_clamp_rows(values.buf, with_bias ? bias.buf : NULL, rows, channels, low, high);
    Py_END_ALLOW_THREADS
    if (with_bias) PyBuffer_Release(&bias);
    PyBuffer_Release(&values);
    Py_RETURN_NONE;
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
static void max_pool_sample(const geometry *g, const float *restrict x, float *restrict out,
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

PyDoc_STRVAR(max_pool_doc,
             "max_pool(x, out, geometry, low, high)\n\n"
             "x: float32 [n, height, width, c]; out: float32 [n, oh, ow, c], written; geometry\n"
             "as for depthwise (dilations 1). Each output: its window's maximum (np.maximum's,\n"
             "window rows first, padding -inf), clamped to [low, high].");

static PyObject *max_pool(PyObject *self, PyObject *args) {
    PyObject *x_object, *out_object;
    geometry g;
    float low, high;
    if (!PyArg_ParseTuple(args, "OOO&ff", &x_object, &out_object, to_geometry, &g, &low, &high))
        return NULL;
    Py_buffer x, out;
    if (float_buffer(x_object, &x, 0, g.n * g.height * g.width * g.channels, "x") < 0)
        return NULL;
    if (float_buffer(out_object, &out, 1, g.n * g.oh * g.ow * g.channels, "out") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t sample = 0; sample < g.n; sample++)
        max_pool_sample(&g, x.buf, out.buf, sample, low, high);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
}

/* RESIZE_BILINEAR as resize.py computes it: each output row from two input rows,
 * r = x[y0] * (1 - dy) + x[y1] * dy, then each output pixel from two pixels of r,
 * r[x0] * (1 - dx) + r[x1] * dx, every product and sum rounded to float32 on its own. */
VECTOR_CLONES
static void bilinear_sample(const float *restrict x, float *restrict out, float *restrict row,
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

PyDoc_STRVAR(bilinear_doc,
             "bilinear(x, out, y0, y1, dy, x0, x1, dx)\n\n"
             "x: float32 [n, height, width, c]; out: float32 [n, oh, ow, c], written. y0, y1:\n"
             "int64 [oh] input rows in [0, height); dy: float32 [oh] weights of y1; x0, x1, dx\n"
             "likewise per output column. out = lerp over columns of the lerp over rows.");

/* An int64 index buffer of `length` items, every one in [0, limit). */
static int index_buffer(PyObject *object, Py_buffer *view, Py_ssize_t length, Py_ssize_t limit,
                        const char *what) {
    if (typed_buffer(object, view, 0, length, 'q', what) < 0) return -1;
    const int64_t *index = view->buf;
    for (Py_ssize_t i = 0; i < length; i++)
        if (index[i] < 0 || index[i] >= limit) {
            PyErr_Format(PyExc_ValueError, "%s: index %lld outside [0, %zd)", what,
                         (long long)index[i], limit);
            PyBuffer_Release(view);
            return -1;
        }
    return 0;
}

static PyObject *bilinear(PyObject *self, PyObject *args) {
    PyObject *objects[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &objects[5], &objects[6], &objects[7]))
        return NULL;
    Py_buffer views[8];
    int held = 0;
    PyObject *result = NULL;
    /* The shapes come from the buffers themselves: x and out are 4-D. */
    Py_buffer probe;
    if (PyObject_GetBuffer(objects[0], &probe, PyBUF_ND) < 0) return NULL;
    int x_ok = probe.ndim == 4;
    Py_ssize_t n = x_ok ? probe.shape[0] : 0, height = x_ok ? probe.shape[1] : 0;
    Py_ssize_t width = x_ok ? probe.shape[2] : 0, c = x_ok ? probe.shape[3] : 0;
    PyBuffer_Release(&probe);
    if (PyObject_GetBuffer(objects[1], &probe, PyBUF_ND) < 0) return NULL;
    int out_ok = probe.ndim == 4 && x_ok && probe.shape[0] == n && probe.shape[3] == c;
    Py_ssize_t oh = out_ok ? probe.shape[1] : 0, ow = out_ok ? probe.shape[2] : 0;
    PyBuffer_Release(&probe);
    if (!out_ok) {
        PyErr_SetString(PyExc_ValueError, "bilinear: x and out must be [n, h, w, c] alike");
        return NULL;
    }
    if (float_buffer(objects[0], &views[held++], 0, n * height * width * c, "x") < 0 ||
        float_buffer(objects[1], &views[held++], 1, n * oh * ow * c, "out") < 0 ||
        index_buffer(objects[2], &views[held++], oh, height, "y0") < 0 ||
        index_buffer(objects[3], &views[held++], oh, height, "y1") < 0 ||
        float_buffer(objects[4], &views[held++], 0, oh, "dy") < 0 ||
        index_buffer(objects[5], &views[held++], ow, width, "x0") < 0 ||
        index_buffer(objects[6], &views[held++], ow, width, "x1") < 0 ||
        float_buffer(objects[7], &views[held++], 0, ow, "dx") < 0) {
        held--; /* the failed one released itself */
        goto release;
    }
    float *row = malloc(sizeof(float) * (size_t)(width * c > 0 ? width * c : 1));
    if (!row) {
        PyErr_NoMemory();
        goto release;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t sample = 0; sample < n; sample++)
        bilinear_sample(views[0].buf, views[1].buf, row, sample, height, width, c, oh, ow,
                        views[2].buf, views[3].buf, views[4].buf, views[5].buf, views[6].buf,
                        views[7].buf);
    Py_END_ALLOW_THREADS
    free(row);
    Py_INCREF(Py_None);
    result = Py_None;
release:
    while (held > 0) PyBuffer_Release(&views[--held]);
    return result;
}

/* out[r, k] = x[r, k] >= 0 ? x[r, k] : x[r, k] * alpha[k]: NaN takes the product (NaN). */
VECTOR_CLONES
static void prelu_rows(const float *restrict x, const float *restrict alpha,
                       float *restrict out, Py_ssize_t rows, Py_ssize_t size) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *restrict p = x + r * size;
        float *restrict o = out + r * size;
        for (Py_ssize_t k = 0; k < size; k++) o[k] = p[k] >= 0.0f ? p[k] : p[k] * alpha[k];
    }
}

PyDoc_STRVAR(prelu_doc,
             "prelu(x, alpha, out, rows, size)\n\n"
             "x, out: float32 [rows, size] (out written); alpha: float32 [size].\n"
             "out = x where x >= 0, else x * alpha.");

static PyObject *prelu(PyObject *self, PyObject *args) {
    PyObject *x_object, *alpha_object, *out_object;
    Py_ssize_t rows, size;
    if (!PyArg_ParseTuple(args, "OOOnn", &x_object, &alpha_object, &out_object, &rows, &size))
        return NULL;
    if (rows < 0 || size < 0) {
        PyErr_SetString(PyExc_ValueError, "prelu: rows and size must be >= 0");
        return NULL;
    }
    Py_buffer x, alpha, out;
    if (float_buffer(x_object, &x, 0, rows * size, "x") < 0) return NULL;
    if (float_buffer(alpha_object, &alpha, 0, size, "alpha") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (float_buffer(out_object, &out, 1, rows * size, "out") < 0) {
        PyBuffer_Release(&alpha);
        PyBuffer_Release(&x);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    prelu_rows(x.buf, alpha.buf, out.buf, rows, size);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&alpha);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"depthwise", depthwise, METH_VARARGS, depthwise_doc},
    {"bias_clamp", bias_clamp, METH_VARARGS, bias_clamp_doc},
    {"bilinear", bilinear, METH_VARARGS, bilinear_doc},
    {"max_pool", max_pool, METH_VARARGS, max_pool_doc},
    {"prelu", prelu, METH_VARARGS, prelu_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The numpy engine's hottest float kernels in C (see _native.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

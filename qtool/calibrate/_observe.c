/* One pass over a chunk of float32 activations: the exact finite minimum and maximum, the
 * histogram of the binned subset (qtool/calibrate/histogram.py) and the fixed-point sums of the
 * layer inputs' means (qtool/calibrate/observers.py, MeanObserver), per element or per class of
 * positions (qtool/calibrate/mean_classes.py).
 *
 * numpy needs a pass over memory for each of min, max, the strided gather, the shift, bincount's
 * own two passes, and the means' multiply, rounding and float64 add: on MediaPipe's models the
 * observers cost 1.5 to 4 times LiteRT's inference. Here every element is read from memory once,
 * in blocks of columns that stay in the first-level cache while the three statistics read them.
 * The results are those of the numpy code bit for bit (tests/calibrate/test_observe_kernel.py):
 * min and max are order-free, the counts are integers, and the means' units are integers summed
 * exactly in float64.
 *
 * Only the CPython API (the buffer protocol): no numpy headers at build time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define SHIFT 18         /* histogram.py: SHIFT (23 - MANTISSA_BITS) */
#define BINS (1 << 14)   /* histogram.py: BINS */
#define COLUMNS 2048     /* columns per block: 8 KB of a row, 16 KB of the means' sums */
#define LANES 16         /* independent minima and maxima, one SIMD register's worth */

/* MeanObserver: units of 2^-24, values clipped to +-2^22, NaN counted as 0. */
static const float UNIT_SCALE = 16777216.0f;
static const float LIMIT = 4194304.0f;

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

static inline uint32_t bits_of(float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

/* GCC's and clang's portable vectors: one 64-byte register under AVX-512, two under AVX2,
 * four under SSE; plain loops where a target has none. */
typedef float floats __attribute__((vector_size(LANES * 4)));
typedef int32_t ints __attribute__((vector_size(LANES * 4)));
typedef double doubles __attribute__((vector_size(LANES * 8)));

static inline __attribute__((always_inline)) floats load(const float *p) {
    floats v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) floats choose(ints mask, floats yes, floats no) {
    return (floats)((mask & (ints)yes) | (~mask & (ints)no));
}

/* Running minima, maxima and a non-finite flag, ACCUMULATORS independent chains of them (a
 * compare and blend waits for the last one: one chain would run at a quarter of the speed). */
#define ACCUMULATORS 4
typedef struct {
    floats lo[ACCUMULATORS], hi[ACCUMULATORS];
    floats spread; /* the sum of v - v: 0 while every value is finite, NaN from then on */
} extremes;

static void extremes_start(extremes *e) {
    for (int a = 0; a < ACCUMULATORS; a++)
        for (int k = 0; k < LANES; k++) {
            e->lo[a][k] = INFINITY;
            e->hi[a][k] = -INFINITY;
        }
    e->spread = (floats){0};
}

/* min and max of every value (NaN compares false and is passed over), and whether any value
 * is infinite or NaN. */
static void extremes_end(const extremes *e, float *lo_out, float *hi_out, uint32_t *bad_out) {
    float l = INFINITY, h = -INFINITY;
    uint32_t b = 0;
    for (int a = 0; a < ACCUMULATORS; a++)
        for (int k = 0; k < LANES; k++) {
            l = e->lo[a][k] < l ? e->lo[a][k] : l;
            h = e->hi[a][k] > h ? e->hi[a][k] : h;
        }
    for (int k = 0; k < LANES; k++) b |= e->spread[k] != 0.0f;
    *lo_out = l;
    *hi_out = h;
    *bad_out = b;
}

/* Whether every value folded into the running extremes so far is finite and within the means'
 * clipping limit. */
static int within_limit(const extremes *e) {
    float lo, hi;
    uint32_t nonfinite;
    extremes_end(e, &lo, &hi, &nonfinite);
    return !nonfinite && lo >= -LIMIT && hi <= LIMIT;
}

/* Fold p[0:n] into the running extremes. */
VECTOR_CLONES
static void block_extremes(const float *p, Py_ssize_t n, extremes *e) {
    floats lo[ACCUMULATORS], hi[ACCUMULATORS];
    floats spread = e->spread;
    for (int a = 0; a < ACCUMULATORS; a++) {
        lo[a] = e->lo[a];
        hi[a] = e->hi[a];
    }
    Py_ssize_t i = 0;
    for (; i + ACCUMULATORS * LANES <= n; i += ACCUMULATORS * LANES) {
        for (int a = 0; a < ACCUMULATORS; a++) {
            floats v = load(p + i + a * LANES);
            lo[a] = choose(v < lo[a], v, lo[a]);
            hi[a] = choose(v > hi[a], v, hi[a]);
            spread += v - v;
        }
    }
    for (; i < n; i += LANES) {  /* the tail, padded with a copy of its first value */
        float padded[LANES];
        Py_ssize_t left = n - i < LANES ? n - i : LANES;
        for (int k = 0; k < LANES; k++) padded[k] = p[i];
        memcpy(padded, p + i, left * sizeof(float));
        floats v = load(padded);
        lo[0] = choose(v < lo[0], v, lo[0]);
        hi[0] = choose(v > hi[0], v, hi[0]);
        spread += v - v;
    }
    for (int a = 0; a < ACCUMULATORS; a++) {
        e->lo[a] = lo[a];
        e->hi[a] = hi[a];
    }
    e->spread = spread;
}

/* The extremes over finite values only: the slow path of a chunk holding infinities or NaN. */
static void finite_extremes(const float *p, Py_ssize_t n, float *lo, float *hi) {
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = p[i];
        if ((bits_of(v) & 0x7f800000u) == 0x7f800000u) continue;
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
}

/* One value's unit count: rint(clip(v, -LIMIT, LIMIT) * 2^24), NaN as 0. */
static inline float units_of(float v) {
    v = v == v ? v : 0.0f;
    v = v < -LIMIT ? -LIMIT : v;
    v = v > LIMIT ? LIMIT : v;
    return rintf(v * UNIT_SCALE);
}

/* total[0:n] += units_of(row[0:n]) for each of `rows` rows `per` values apart: MeanObserver's
 * units. `bounded`: every value is known finite and within the limit (the running extremes
 * say so), so neither NaN nor clipping is looked for. Compiled without trapping math, rintf
 * is one vector instruction (the rounding is the same: only floating-point exception flags,
 * which nothing reads, differ). */
VECTOR_CLONES
static void block_units(const float *p, Py_ssize_t per, Py_ssize_t rows, double *total,
                        Py_ssize_t n, int bounded) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *row = p + r * per;
        if (bounded)
            for (Py_ssize_t i = 0; i < n; i++) total[i] += (double)rintf(row[i] * UNIT_SCALE);
        else
            for (Py_ssize_t i = 0; i < n; i++) total[i] += (double)units_of(row[i]);
    }
}


/* A class's sums are exact integers: up to CLASS_RUN units of at most 2^46 add exactly in
 * float64 (2^53), then move into a 128-bit integer kept as a signed high and an unsigned low
 * word (a class of 9,216 positions takes 9,216 units a sample: no 64-bit sum holds them). */
#define CLASS_RUN 128

static void wide_add(int64_t *hi, uint64_t *lo, double value) {
    int64_t v = (int64_t)value;
    uint64_t before = *lo;
    *lo = before + (uint64_t)v;
    *hi += (v < 0 ? -1 : 0) + (*lo < before ? 1 : 0);
}

typedef struct {
    const int32_t *of_position;
    Py_ssize_t count, channels;
    double *open;    /* count * channels float64 sums of at most CLASS_RUN positions each */
    int *run;        /* positions in each class's open sums */
    int64_t *hi;     /* count * channels 128-bit totals */
    uint64_t *lo;
} class_sums;

static void class_close(class_sums *s, Py_ssize_t k) {
    double *open = s->open + k * s->channels;
    for (Py_ssize_t c = 0; c < s->channels; c++) {
        wide_add(s->hi + k * s->channels + c, s->lo + k * s->channels + c, open[c]);
        open[c] = 0.0;
    }
    s->run[k] = 0;
}

/* The units of positions [first, first + n) of one row (a sample) added to their classes: a
 * run of neighbouring positions of one class (a whole row of a 1x1 layer's input, the inside
 * of a row of a k x k layer's) in one call. */
static void class_add(class_sums *s, const float *row, Py_ssize_t first, Py_ssize_t n,
                      int bounded) {
    const int32_t *of = s->of_position;
    Py_ssize_t p = first, end = first + n, channels = s->channels;
    while (p < end) {
        Py_ssize_t k = of[p];
        if (s->run[k] == CLASS_RUN) class_close(s, k);
        Py_ssize_t q = p + 1, most = p + (CLASS_RUN - s->run[k]);
        while (q < end && q < most && of[q] == k) q++;
        block_units(row + p * channels, channels, q - p, s->open + k * channels, channels,
                    bounded);
        s->run[k] += (int)(q - p);
        p = q;
    }
}

/* A C-contiguous buffer of `length` items of the struct format `kinds` lists (one letter
 * each: "f" float32, "d" float64, "lq" int64 on any platform), writable if asked. */
static int read_buffer(PyObject *object, Py_buffer *view, int writable, const char *kinds,
                       Py_ssize_t itemsize, Py_ssize_t length, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    if (view->itemsize != itemsize || view->len != length * itemsize || strlen(format) != 1 ||
        !strchr(kinds, format[0])) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of type '%s'", what, length,
                     kinds);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(observe_doc,
             "observe(values, rows, per_row, stride, counts, total, classes=None)\n"
             "    -> (low, high, finite)\n\n"
             "values: C-contiguous float32, rows * per_row of them. Returns the minimum and\n"
             "maximum of the finite values (inf, -inf when none is) and whether every value is\n"
             "finite. counts (int64[16384], or None): each row's elements 0, stride, 2 * stride,\n"
             "... counted by bit pattern >> 18 (np.bincount's order). total (float64[per_row],\n"
             "or None): each row's rint(clip(x, -2^22, 2^22) * 2^24), NaN as 0, added.\n"
             "classes (or None; total must then be None): (of_position int32[positions],\n"
             "channels, high int64[n], low uint64[n]) with per_row = positions * channels and\n"
             "n = classes * channels: the same units added per class and channel into the\n"
             "128-bit integers high * 2^64 + low.");

/* The buffers of the `classes` argument, checked; -1 with an exception set otherwise. */
static int read_classes(PyObject *classes_object, Py_ssize_t per, Py_buffer *of_position,
                        Py_buffer *high, Py_buffer *low, class_sums *sums) {
    PyObject *position_object, *high_object, *low_object;
    Py_ssize_t channels;
    if (!PyArg_ParseTuple(classes_object, "OnOO", &position_object, &channels, &high_object,
                          &low_object))
        return -1;
    if (channels < 1 || per % channels) {
        PyErr_SetString(PyExc_ValueError, "per_row must be a multiple of channels >= 1");
        return -1;
    }
    Py_ssize_t positions = per / channels;
    if (read_buffer(position_object, of_position, 0, "i", 4, positions, "of_position") < 0)
        return -1;
    if (PyObject_GetBuffer(high_object, high,
                           PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(of_position);
        return -1;
    }
    Py_ssize_t n = high->len / 8, count = n / channels;
    const char *format = high->format ? high->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    if (read_buffer(low_object, low, 1, "LQ", 8, n, "low") < 0) {
        PyBuffer_Release(of_position);
        PyBuffer_Release(high);
        return -1;
    }
    const int32_t *of = (const int32_t *)of_position->buf;
    int valid = high->len == n * 8 && high->itemsize == 8 && strlen(format) == 1 &&
                strchr("lq", format[0]) && count * channels == n;
    for (Py_ssize_t p = 0; valid && p < positions; p++) valid = of[p] >= 0 && of[p] < count;
    if (!valid) {
        PyErr_SetString(PyExc_ValueError, "classes: sums and positions do not agree");
        PyBuffer_Release(of_position);
        PyBuffer_Release(high);
        PyBuffer_Release(low);
        return -1;
    }
    *sums = (class_sums){of, count, channels, NULL, NULL, (int64_t *)high->buf,
                         (uint64_t *)low->buf};
    return 0;
}

static PyObject *observe(PyObject *self, PyObject *args) {
    PyObject *values_object, *counts_object, *total_object, *classes_object = Py_None;
    Py_ssize_t rows, per, stride;
    if (!PyArg_ParseTuple(args, "OnnnOO|O", &values_object, &rows, &per, &stride,
                          &counts_object, &total_object, &classes_object))
        return NULL;
    if (rows < 0 || per < 0 || stride < 1) {
        PyErr_SetString(PyExc_ValueError, "rows and per_row must be >= 0, stride >= 1");
        return NULL;
    }
    int with_counts = counts_object != Py_None, with_total = total_object != Py_None;
    int with_classes = classes_object != Py_None;
    if (with_total && with_classes) {
        PyErr_SetString(PyExc_ValueError, "total and classes exclude each other");
        return NULL;
    }
    Py_buffer values, counts = {0}, total = {0}, of_position = {0}, high = {0}, low = {0};
    class_sums classes = {0};
    if (read_buffer(values_object, &values, 0, "f", 4, rows * per, "values") < 0) return NULL;
    if (with_counts && read_buffer(counts_object, &counts, 1, "lq", 8, BINS, "counts") < 0)
        goto fail_values;
    if (with_total && read_buffer(total_object, &total, 1, "d", 8, per, "total") < 0)
        goto fail_counts;
    if (with_classes) {
        if (read_classes(classes_object, per, &of_position, &high, &low, &classes) < 0)
            goto fail_counts;
        classes.open = PyMem_Calloc(classes.count * classes.channels, sizeof(double));
        classes.run = PyMem_Calloc(classes.count, sizeof(int));
        if (!classes.open || !classes.run) {
            PyErr_NoMemory();
            goto fail_classes;
        }
    }
    const float *data = (const float *)values.buf;
    int64_t *bins = with_counts ? (int64_t *)counts.buf : NULL;
    double *sums = with_total ? (double *)total.buf : NULL;
    float lo, hi;
    uint32_t nonfinite;
    extremes running;
    extremes_start(&running);

    Py_BEGIN_ALLOW_THREADS
    /* With per-element sums, a block of columns of every row, then their sums: the block
     * stays in the first-level cache. Otherwise row after row (one sequential stream through
     * memory), with class sums in blocks of whole positions, added while in cache. */
    Py_ssize_t step = COLUMNS;
    if (with_classes) step = (COLUMNS / classes.channels + 1) * classes.channels;
    Py_ssize_t blocks = (per + step - 1) / step;
    Py_ssize_t outer = sums ? blocks : rows, inner = sums ? rows : blocks;
    for (Py_ssize_t i = 0; i < outer; i++) {
        for (Py_ssize_t j = 0; j < inner; j++) {
            Py_ssize_t r = sums ? j : i, start = (sums ? i : j) * step;
            Py_ssize_t width = per - start < step ? per - start : step;
            const float *row = data + r * per;
            block_extremes(row + start, width, &running);
            if (bins) {
                /* The binned columns: 0, stride, 2 * stride... from the first in this block. */
                for (Py_ssize_t c = (start + stride - 1) / stride * stride; c < start + width;
                     c += stride)
                    bins[bits_of(row[c]) >> SHIFT]++;
            }
            if (with_classes)
                class_add(&classes, row, start / classes.channels, width / classes.channels,
                          within_limit(&running));
        }
        if (sums) {
            Py_ssize_t start = i * step, width = per - start < step ? per - start : step;
            block_units(data + start, per, rows, sums + start, width, within_limit(&running));
        }
    }
    for (Py_ssize_t k = 0; k < classes.count; k++)
        if (classes.run[k]) class_close(&classes, k);
    extremes_end(&running, &lo, &hi, &nonfinite);
    if (nonfinite) {
        lo = INFINITY;
        hi = -INFINITY;
        finite_extremes(data, rows * per, &lo, &hi);
    }
    Py_END_ALLOW_THREADS

    PyObject *result = Py_BuildValue("(ddO)", (double)lo, (double)hi,
                                     nonfinite ? Py_False : Py_True);
    if (with_classes) {
        PyMem_Free(classes.open);
        PyMem_Free(classes.run);
        PyBuffer_Release(&of_position);
        PyBuffer_Release(&high);
        PyBuffer_Release(&low);
    }
    if (with_total) PyBuffer_Release(&total);
    if (with_counts) PyBuffer_Release(&counts);
    PyBuffer_Release(&values);
    return result;

fail_classes:
    PyMem_Free(classes.open);
    PyMem_Free(classes.run);
    PyBuffer_Release(&of_position);
    PyBuffer_Release(&high);
    PyBuffer_Release(&low);
fail_counts:
    if (with_total) PyBuffer_Release(&total);
    if (with_counts) PyBuffer_Release(&counts);
fail_values:
    PyBuffer_Release(&values);
    return NULL;
}

static PyMethodDef methods[] = {
    {"observe", observe, METH_VARARGS, observe_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_observe",
    "One-pass min/max, histogram and means of float32 activations (see _observe.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__observe(void) { return PyModule_Create(&module); }

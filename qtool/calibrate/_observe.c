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


/* Class sums. A sample is a grid of `rows` rows of `width` values (qtool/calibrate/
 * mean_classes.py: a row of an image with all its channels); row r belongs to row class
 * row_class[r] and its value j goes to target column_target[j] (column class and channel) of
 * that row class: sum index row_class[r] * targets + column_target[j]. Each row is added whole
 * into an int64 row of its row class (one long vector add, in cache: with AVX-512 a rounding
 * and a conversion to int64 per 8 values), up to CLASS_RUN rows of units of at most 2^46
 * (2^62). Then the row moves into 128-bit integers, a signed high and an unsigned low word (a
 * class of 9,216 positions takes 9,216 units a sample: no 64-bit sum holds a calibration's). */
#define CLASS_RUN (1 << 16)

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
#define INTEGER_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define INTEGER_CLONES
#endif

/* total[0:n] += the units of rows[0][0:n] + ... + rows[count - 1][0:n] (as block_units), in
 * int64, four rows at a time: the open sums (twice the bytes of a row) are read and written
 * once per four rows of a row class, not per row. GROUP: grid rows observed together. */
#define GROUP 8

/* The rounding alone where the values are known finite and within the limit (`bounded`),
 * else clipping and NaN as 0 too: two loops, not one that computes both and picks. */
#define BOUNDED_UNIT(v) ((int64_t)rintf((v) * UNIT_SCALE))
#define CHECKED_UNIT(v) ((int64_t)units_of(v))
#define ROWS_INTO(UNIT)                                                                        \
    switch (count) {                                                                           \
    case 1:                                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) total[i] += UNIT(a[i]);                             \
        break;                                                                                 \
    case 2:                                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) total[i] += UNIT(a[i]) + UNIT(b[i]);                \
        break;                                                                                 \
    case 3:                                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) total[i] += UNIT(a[i]) + UNIT(b[i]) + UNIT(c[i]);   \
        break;                                                                                 \
    default:                                                                                   \
        for (Py_ssize_t i = 0; i < n; i++)                                                     \
            total[i] += UNIT(a[i]) + UNIT(b[i]) + UNIT(c[i]) + UNIT(d[i]);                     \
    }

INTEGER_CLONES
static void row_units(const float *const *rows, int count, Py_ssize_t n, int64_t *total,
                      int bounded) {
    for (; count > 0; rows += 4, count -= 4) {
        const float *a = rows[0], *b = rows[count > 1], *c = rows[count > 2 ? 2 : 0],
                    *d = rows[count > 3 ? 3 : 0];
        if (bounded) {
            ROWS_INTO(BOUNDED_UNIT)
        } else {
            ROWS_INTO(CHECKED_UNIT)
        }
    }
}

static void wide_add(int64_t *hi, uint64_t *lo, int64_t v) {
    uint64_t before = *lo;
    *lo = before + (uint64_t)v;
    *hi += (v < 0 ? -1 : 0) + (*lo < before ? 1 : 0);
}

typedef struct {
    const int32_t *row_class, *column_target;
    Py_ssize_t rows, width, row_classes, targets;
    int64_t *open; /* row_classes * width int64 sums of at most CLASS_RUN rows each */
    int *run;      /* rows in each row class's open sums */
    int64_t *hi;   /* row_classes * targets 128-bit totals */
    uint64_t *lo;
} class_sums;

static void class_close(class_sums *s, Py_ssize_t k) {
    int64_t *open = s->open + k * s->width;
    Py_ssize_t base = k * s->targets;
    for (Py_ssize_t j = 0; j < s->width; j++) {
        Py_ssize_t t = base + s->column_target[j];
        wide_add(s->hi + t, s->lo + t, open[j]);
        open[j] = 0;
    }
    s->run[k] = 0;
}

/* A group of at most GROUP neighbouring grid rows of a sample, gathered by row class. */
typedef struct {
    int classes;                        /* distinct row classes in the group */
    Py_ssize_t row_class[GROUP];        /* ... each */
    int count[GROUP];                   /* its rows */
    const float *rows[GROUP][GROUP];    /* where they start */
} row_group;

/* Gather grid rows [first, first + count) by row class, and count them as added (an open sum
 * that would then hold more than CLASS_RUN rows is closed first). */
static void group_rows(class_sums *s, const float *sample, Py_ssize_t first, Py_ssize_t count,
                       row_group *group) {
    int done[GROUP] = {0};
    group->classes = 0;
    for (Py_ssize_t g = 0; g < count; g++) {
        if (done[g]) continue;
        int c = group->classes++;
        Py_ssize_t k = s->row_class[first + g];
        group->row_class[c] = k;
        group->count[c] = 0;
        for (Py_ssize_t h = g; h < count; h++)
            if (!done[h] && s->row_class[first + h] == k) {
                group->rows[c][group->count[c]++] = sample + (first + h) * s->width;
                done[h] = 1;
            }
        if (s->run[k] + group->count[c] > CLASS_RUN) class_close(s, k);
        s->run[k] += group->count[c];
    }
}

/* A group's rows added to their row classes' open sums, the rows of one class together. */
static void group_add(class_sums *s, const row_group *group, int bounded) {
    for (int c = 0; c < group->classes; c++)
        row_units(group->rows[c], group->count[c], s->width,
                  s->open + group->row_class[c] * s->width, bounded);
}

/* One sample of a tensor with class sums: GROUP grid rows at a time (contiguous in memory: one
 * sequential stream), their extremes and binned columns, then their class sums while the rows
 * are in the second-level cache. GROUP 8 against 1: 5.4 -> 4.4 ms a sample of observing
 * pose_landmark_full's activations, one thread. */
static void observe_grid(class_sums *s, const float *sample, Py_ssize_t stride, int64_t *bins,
                         extremes *running) {
    for (Py_ssize_t first = 0; first < s->rows; first += GROUP) {
        Py_ssize_t count = s->rows - first < GROUP ? s->rows - first : GROUP;
        Py_ssize_t offset = first * s->width, n = count * s->width;
        block_extremes(sample + offset, n, running);
        if (bins)
            for (Py_ssize_t c = (offset + stride - 1) / stride * stride; c < offset + n;
                 c += stride)
                bins[bits_of(sample[c]) >> SHIFT]++;
        row_group group;
        group_rows(s, sample, first, count, &group);
        group_add(s, &group, within_limit(running));
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

/* A C-contiguous int32 buffer of any length. */
static int read_int32s(PyObject *object, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    if (view->itemsize != 4 || strcmp(format, "i") != 0) {
        PyErr_Format(PyExc_ValueError, "%s: expected int32 items", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The buffers of the `classes` argument, checked; -1 with an exception set otherwise. */
static int read_classes(PyObject *classes_object, Py_ssize_t per, Py_buffer *rows_view,
                        Py_buffer *columns_view, Py_buffer *high, Py_buffer *low,
                        class_sums *sums) {
    PyObject *rows_object, *columns_object, *high_object, *low_object;
    Py_ssize_t targets;
    if (!PyArg_ParseTuple(classes_object, "OOnOO", &rows_object, &columns_object, &targets,
                          &high_object, &low_object))
        return -1;
    if (read_int32s(rows_object, rows_view, "row_class") < 0) return -1;
    Py_ssize_t rows = rows_view->len / 4;
    Py_ssize_t width = rows > 0 && per % rows == 0 ? per / rows : -1;
    if (width < 1 || targets < 1) {
        PyErr_SetString(PyExc_ValueError, "classes: rows and targets do not fit the values");
        PyBuffer_Release(rows_view);
        return -1;
    }
    if (read_buffer(columns_object, columns_view, 0, "i", 4, width, "column_target") < 0) {
        PyBuffer_Release(rows_view);
        return -1;
    }
    if (PyObject_GetBuffer(high_object, high,
                           PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(rows_view);
        PyBuffer_Release(columns_view);
        return -1;
    }
    Py_ssize_t n = high->len / 8, row_classes = n / targets;
    const char *format = high->format ? high->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    if (read_buffer(low_object, low, 1, "LQ", 8, n, "low") < 0) {
        PyBuffer_Release(rows_view);
        PyBuffer_Release(columns_view);
        PyBuffer_Release(high);
        return -1;
    }
    const int32_t *row_class = (const int32_t *)rows_view->buf;
    const int32_t *column_target = (const int32_t *)columns_view->buf;
    int valid = high->len == n * 8 && high->itemsize == 8 && strlen(format) == 1 &&
                strchr("lq", format[0]) && row_classes * targets == n && row_classes > 0;
    for (Py_ssize_t r = 0; valid && r < rows; r++)
        valid = row_class[r] >= 0 && row_class[r] < row_classes;
    for (Py_ssize_t j = 0; valid && j < width; j++)
        valid = column_target[j] >= 0 && column_target[j] < targets;
    if (!valid) {
        PyErr_SetString(PyExc_ValueError, "classes: sums and positions do not agree");
        PyBuffer_Release(rows_view);
        PyBuffer_Release(columns_view);
        PyBuffer_Release(high);
        PyBuffer_Release(low);
        return -1;
    }
    *sums = (class_sums){row_class, column_target, rows, width, row_classes, targets,
                         NULL, NULL, (int64_t *)high->buf, (uint64_t *)low->buf};
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
             "classes (or None; total must then be None): (row_class int32[grid_rows],\n"
             "column_target int32[width], targets, high int64[n], low uint64[n]) with\n"
             "per_row = grid_rows * width and n = row classes * targets: the same units, value\n"
             "j of grid row g of a row added at row_class[g] * targets + column_target[j] to\n"
             "the 128-bit integers high * 2^64 + low.");

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
    /* Every buffer starts empty: releasing an empty one does nothing, so one exit releases
     * what was taken, whatever failed. */
    Py_buffer values = {0}, counts = {0}, total = {0}, row_view = {0}, column_view = {0},
              high = {0}, low = {0};
    class_sums classes = {0};
    PyObject *result = NULL;
    if (read_buffer(values_object, &values, 0, "f", 4, rows * per, "values") < 0) goto done;
    if (with_counts && read_buffer(counts_object, &counts, 1, "lq", 8, BINS, "counts") < 0)
        goto done;
    if (with_total && read_buffer(total_object, &total, 1, "d", 8, per, "total") < 0)
        goto done;
    if (with_classes) {
        if (read_classes(classes_object, per, &row_view, &column_view, &high, &low, &classes) <
            0)
            goto done;
        classes.open = PyMem_Calloc(classes.row_classes * classes.width, sizeof(int64_t));
        classes.run = PyMem_Calloc(classes.row_classes, sizeof(int));
        if (!classes.open || !classes.run) {
            PyErr_NoMemory();
            goto done;
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
     * stays in the first-level cache. With class sums, a sample's grid rows a few at a time
     * (observe_grid). Otherwise row after row: one sequential stream through memory. */
    Py_ssize_t blocks = (per + COLUMNS - 1) / COLUMNS;
    Py_ssize_t outer = sums ? blocks : rows, inner = sums ? rows : blocks;
    for (Py_ssize_t i = 0; i < outer; i++) {
        if (with_classes) {
            observe_grid(&classes, data + i * per, stride, bins, &running);
            continue;
        }
        for (Py_ssize_t j = 0; j < inner; j++) {
            Py_ssize_t r = sums ? j : i, start = (sums ? i : j) * COLUMNS;
            Py_ssize_t width = per - start < COLUMNS ? per - start : COLUMNS;
            const float *row = data + r * per;
            block_extremes(row + start, width, &running);
            if (bins) {
                /* The binned columns: 0, stride, 2 * stride... from the first in this block. */
                for (Py_ssize_t c = (start + stride - 1) / stride * stride; c < start + width;
                     c += stride)
                    bins[bits_of(row[c]) >> SHIFT]++;
            }
        }
        if (sums) {
            Py_ssize_t start = i * COLUMNS, width = per - start < COLUMNS ? per - start : COLUMNS;
            block_units(data + start, per, rows, sums + start, width, within_limit(&running));
        }
    }
    for (Py_ssize_t k = 0; k < classes.row_classes; k++)
        if (classes.run[k]) class_close(&classes, k);
    extremes_end(&running, &lo, &hi, &nonfinite);
    if (nonfinite) {
        lo = INFINITY;
        hi = -INFINITY;
        finite_extremes(data, rows * per, &lo, &hi);
    }
    Py_END_ALLOW_THREADS

    result = Py_BuildValue("(ddO)", (double)lo, (double)hi, nonfinite ? Py_False : Py_True);

done:
    PyMem_Free(classes.open);
    PyMem_Free(classes.run);
    PyBuffer_Release(&row_view);
    PyBuffer_Release(&column_view);
    PyBuffer_Release(&high);
    PyBuffer_Release(&low);
    PyBuffer_Release(&total);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&values);
    return result;
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

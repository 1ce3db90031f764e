/* The numpy engine's hottest float kernels in C (qtool/runtime/kernels/native.py): the Python
 * module, its argument checks, and the calls into the loops, made with the GIL released so that
 * the engine's threads run them at once. Each kernel gives the results of the numpy code it
 * stands in for bit for bit (NaN payloads aside: which one an operation on two NaNs keeps
 * depends on the compiler's operand order, in numpy as here; MAX_POOL_2D keeps either sign of
 * a tie of zeros, as numpy's own loops do; tests/runtime/test_native_kernels.py). So every
 * product and sum is rounded on its own, in the numpy code's order (built with
 * -ffp-contract=off: no multiply and add fused into one rounding).
 *
 * - DEPTHWISE_CONV_2D (_native_depthwise.c): numpy's einsum over strided views of a padded
 *   copy, then the bias and the clamp in two more passes, took 2 to 5 times as long as the
 *   matrix products around it on MediaPipe's models.
 * - A convolution's bias and clamp, PRELU, MAX_POOL_2D, RESIZE_BILINEAR (_native_passes.c):
 *   one pass each where numpy made two to eight, some restarting their loops at every row of
 *   a few channels.
 *
 * Only the CPython API (the buffer protocol): no numpy headers at build time.
 */
#include "native_lanes.h"

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
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = native_depthwise(&g, x.buf, filters.buf, with_bias ? bias.buf : NULL, group_of,
                              groups, low, high, out.buf);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto release_out;
    }
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
    native_bias_clamp(values.buf, with_bias ? bias.buf : NULL, rows, channels, low, high);
    Py_END_ALLOW_THREADS
    if (with_bias) PyBuffer_Release(&bias);
    PyBuffer_Release(&values);
    Py_RETURN_NONE;
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
        native_max_pool(&g, x.buf, out.buf, sample, low, high);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
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
        native_bilinear(views[0].buf, views[1].buf, row, sample, height, width, c, oh, ow,
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
    native_prelu(x.buf, alpha.buf, out.buf, rows, size);
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

/* DEPTHWISE_CONV_2D for the numpy engine (_native.c has the Python side, and why these
 * kernels give numpy's results bit for bit).
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
 */
#include "native_lanes.h"

#define ROW_FLOATS 4096 /* floats of one group's row buffer (16 KB), or one pixel's */

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

/* DEPTHWISE_CONV_2D of every sample (see _native.c): 0, or -1 where memory ran out. */
INTERNAL int native_depthwise(const geometry *g, const float *x, const float *filters,
                              const float *bias, const unsigned char *group_of, int groups,
                              float low, float high, float *out) {
    Py_ssize_t row = g->channels > ROW_FLOATS ? g->channels : ROW_FLOATS;
    Py_ssize_t taps = g->kh * g->kw;
    float *acc = malloc(sizeof(float) * (size_t)(row * groups));
    float *zeros = calloc((size_t)g->channels, sizeof(float));
    Py_ssize_t *offsets = malloc(sizeof(Py_ssize_t) * (size_t)(2 * taps + groups));
    if (!acc || !zeros || !offsets) {
        free(acc);
        free(zeros);
        free(offsets);
        return -1;
    }
    plan pl = {*g,     x,   filters, bias, out, low, high, group_of, groups, offsets + 2 * taps,
               offsets, offsets + taps, acc, row, zeros};
    Py_ssize_t t = 0;
    for (int group = 0; group < groups; group++) {
        for (Py_ssize_t i = 0; i < g->kh; i++)
            for (Py_ssize_t j = 0; j < g->kw; j++)
                if (group_of[j] == group) {
                    pl.tap_x[t] = (i * g->dh * g->width + j * g->dw) * g->channels;
                    pl.tap_w[t] = (i * g->kw + j) * g->channels;
                    t++;
                }
        pl.tap_end[group] = t;
    }
    for (Py_ssize_t sample = 0; sample < g->n; sample++) depthwise_sample(&pl, sample);
    free(offsets);
    free(acc);
    free(zeros);
    return 0;
}

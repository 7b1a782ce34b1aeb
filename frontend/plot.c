/* plot.c — `mcc plot METRICS.jsonl -o OUT.svg`: the curves of a train_rank --metrics-file
 * (train and validation loss, learning rate, tokens/s per GPU, against the iteration) drawn as
 * one self-contained SVG, three panels stacked, each with axes, ticks and labels. */
#include "frontend/plot.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double *x, *y;
    int n, cap;
} plot_series;

enum { PLOT_LOSS, PLOT_VALID, PLOT_LR, PLOT_TOKS, PLOT_NSERIES };
/* ORDER PLOT_*: the metrics key of each series, its legend and colour. */
static const char *const plot_keys[PLOT_NSERIES] = {"loss", "valid_loss", "lr", "tokens_per_s_per_gpu"};
static const char *const plot_labels[PLOT_NSERIES] = {"train", "validation", "lr", "tokens/s/GPU"};
static const char *const plot_colors[PLOT_NSERIES] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"};

/* A panel: its title and the series drawn in it. */
typedef struct {
    const char *title;
    int series[2], nseries;
} plot_panel;

static const plot_panel plot_panels[] = {
    {"loss", {PLOT_LOSS, PLOT_VALID}, 2},
    {"learning rate", {PLOT_LR}, 1},
    {"throughput (tokens/s/GPU)", {PLOT_TOKS}, 1},
};
enum { PLOT_W = 900, PLOT_PANEL_H = 260, PLOT_LEFT = 80, PLOT_RIGHT = 20, PLOT_TOP = 34, PLOT_BOTTOM = 40 };

static void plot_add(plot_series *s, double x, double y)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = realloc(s->x, sizeof(double) * (size_t)s->cap);
        s->y = realloc(s->y, sizeof(double) * (size_t)s->cap);
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

/* Every record's numbers into the series; false with a message naming the line. A record with
 * none of the series' keys adds nothing: the one opening a run with MCC_ variables set,
 * {"iteration": 0, "knobs": {...}} (runtime/metrics.h), is read past. A last line
 * without its newline that does not parse is a record cut by a killed run: skipped, with a
 * warning; a bad line anywhere else is an error. */
static bool plot_read(const char *path, plot_series *series, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return snprintf(err, errlen, "cannot open %s (write one with train_rank --metrics-file)", path), false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool ok = true;
    for (int lineno = 1; ok && (len = getline(&line, &cap, f)) > 0; lineno++) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        json_t *it = o ? json_object_get(o, "iteration") : NULL;
        if (!json_is_number(it) && line[len - 1] != '\n') {
            fprintf(stderr, "mcc plot: warning: %s:%d: the last line is cut (a killed run?); skipped it\n", path, lineno);
            json_decref(o);
            break;
        }
        if (!json_is_number(it)) {
            snprintf(err, errlen, "%s:%d: not a metrics record (a JSON object with \"iteration\")", path, lineno);
            ok = false;
        }
        for (int k = 0; ok && k < PLOT_NSERIES; k++) {
            json_t *v = json_object_get(o, plot_keys[k]);
            if (json_is_number(v))
                plot_add(&series[k], json_number_value(it), json_number_value(v));
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (ok && series[PLOT_LOSS].n == 0)
        return snprintf(err, errlen, "%s holds no training records (\"loss\")", path), false;
    return ok;
}

/* A round tick step giving about 5 ticks over span. */
static double plot_tick_step(double span)
{
    double base = pow(10, floor(log10(span / 5))), r = span / 5 / base;
    return base * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10);
}

/* [lo, hi] of the panel's values, widened when flat. */
static void plot_range(const plot_series *series, const plot_panel *p, bool use_x, double *lo, double *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (int k = 0; k < p->nseries; k++) {
        const plot_series *s = &series[p->series[k]];
        for (int i = 0; i < s->n; i++) {
            double v = use_x ? s->x[i] : s->y[i];
            *lo = fmin(*lo, v), *hi = fmax(*hi, v);
        }
    }
    if (*hi - *lo < 1e-12 * fmax(1, fabs(*hi)))
        *lo -= fmax(0.5, fabs(*lo) * 0.1), *hi += fmax(0.5, fabs(*hi) * 0.1);
}

typedef struct {
    double x0, x1, y0, y1;  /* data range */
    double left, top, w, h; /* pixel box */
} plot_box;

static double plot_px(const plot_box *b, double x) { return b->left + (x - b->x0) / (b->x1 - b->x0) * b->w; }
static double plot_py(const plot_box *b, double y) { return b->top + b->h - (y - b->y0) / (b->y1 - b->y0) * b->h; }

static void plot_axes(FILE *out, const plot_box *b, const char *title)
{
    fprintf(out, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n", b->left, b->top,
            b->w, b->h);
    fprintf(out, "<text x=\"%g\" y=\"%g\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", b->left, b->top - 10, title);
    double sx = plot_tick_step(b->x1 - b->x0), sy = plot_tick_step(b->y1 - b->y0);
    for (double x = ceil(b->x0 / sx) * sx; x <= b->x1 + 1e-9 * sx; x += sx)
        fprintf(out, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#333\"/>"
                     "<text x=\"%.1f\" y=\"%g\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
                plot_px(b, x), b->top + b->h, plot_px(b, x), b->top + b->h + 5, plot_px(b, x), b->top + b->h + 18, x);
    for (double y = ceil(b->y0 / sy) * sy; y <= b->y1 + 1e-9 * sy; y += sy)
        fprintf(out, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                     "<text x=\"%g\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>\n",
                b->left, plot_py(b, y), b->left + b->w, plot_py(b, y), b->left - 6, plot_py(b, y) + 4, y);
    fprintf(out, "<text x=\"%g\" y=\"%g\" font-size=\"11\" text-anchor=\"middle\">iteration</text>\n",
            b->left + b->w / 2, b->top + b->h + 33);
}

static void plot_curve(FILE *out, const plot_box *b, const plot_series *s, int k, int legend_row)
{
    fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", plot_colors[k]);
    for (int i = 0; i < s->n; i++)
        fprintf(out, "%.1f,%.1f ", plot_px(b, s->x[i]), plot_py(b, s->y[i]));
    fprintf(out, "\"/>\n");
    double lx = b->left + b->w - 130, ly = b->top + 16 + 16 * legend_row;
    fprintf(out, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"/>"
                 "<text x=\"%g\" y=\"%g\" font-size=\"11\">%s</text>\n",
            lx, ly - 4, lx + 20, ly - 4, plot_colors[k], lx + 26, ly, plot_labels[k]);
}

static void plot_write(FILE *out, const plot_series *series)
{
    int npanels = (int)(sizeof plot_panels / sizeof plot_panels[0]);
    int H = npanels * PLOT_PANEL_H;
    fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            PLOT_W, H, PLOT_W, H);
    for (int p = 0; p < npanels; p++) {
        const plot_panel *pn = &plot_panels[p];
        plot_box b = {.left = PLOT_LEFT, .top = p * PLOT_PANEL_H + PLOT_TOP, .w = PLOT_W - PLOT_LEFT - PLOT_RIGHT,
                      .h = PLOT_PANEL_H - PLOT_TOP - PLOT_BOTTOM};
        plot_range(series, pn, true, &b.x0, &b.x1);
        plot_range(series, pn, false, &b.y0, &b.y1);
        if (!isfinite(b.x0))
            continue; /* no records of this kind (e.g. no validation) */
        plot_axes(out, &b, pn->title);
        for (int k = 0, row = 0; k < pn->nseries; k++)
            if (series[pn->series[k]].n)
                plot_curve(out, &b, &series[pn->series[k]], pn->series[k], row++);
    }
    fprintf(out, "</svg>\n");
}

int mcc_plot_main(int argc, char **argv)
{
    const char *in = NULL, *out_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out_path = argv[++i];
        else if (argv[i][0] != '-' && !in)
            in = argv[i];
        else
            return fprintf(stderr, "mcc plot: error: unexpected argument '%s'\nusage: mcc plot METRICS.jsonl -o OUT.svg\n",
                           argv[i]), 2;
    }
    if (!in || !out_path)
        return fprintf(stderr, "mcc plot: error: usage: mcc plot METRICS.jsonl -o OUT.svg\n"), 2;
    plot_series series[PLOT_NSERIES] = {0};
    char err[1024];
    int rc = 0;
    FILE *out = NULL;
    if (!plot_read(in, series, err, sizeof err)) {
        fprintf(stderr, "mcc plot: error: %s\n", err);
        rc = 1;
    } else if (!(out = fopen(out_path, "w"))) {
        fprintf(stderr, "mcc plot: error: -o %s: cannot write it\n", out_path);
        rc = 1;
    } else {
        plot_write(out, series);
        rc = fclose(out) != 0;
        fprintf(stderr, "mcc plot: wrote %s (%d training, %d validation records)\n", out_path, series[PLOT_LOSS].n,
                series[PLOT_VALID].n);
    }
    for (int k = 0; k < PLOT_NSERIES; k++)
        free(series[k].x), free(series[k].y);
    return rc;
}

/* pp_schedule_test.c — the pipeline schedules (passes/pp_schedule.c): every schedule over a grid
 * of (p, m, v) runs each pass once and terminates (the simulation is the deadlock check), with
 * the bubbles and stash peaks the formulas say; the stage split and each of its refusals. */
#include "passes/pp_schedule.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* A uniform cost per virtual stage (the whole model's f, b, w split over p*v stages). */
static pp_stage_cost *uniform(int stages, double f, double b, double w)
{
    pp_stage_cost *c = malloc(sizeof *c * (size_t)stages);
    for (int g = 0; g < stages; g++) c[g] = (pp_stage_cost){f, b, w};
    return c;
}

/* Builds and simulates; false (with a check failed) when either refuses. */
static bool run(pp_sched_kind kind, int p, int m, int v, double f, double b, double w, pp_schedule *s,
                pp_timeline *t)
{
    char err[512] = "";
    bool ok = pp_schedule_build(kind, p, m, v, s, err, sizeof err);
    CHECK(ok, "%s p=%d m=%d v=%d: %s", pp_sched_names[kind], p, m, v, err);
    if (!ok) return false;
    pp_stage_cost *c = uniform(p * v, f / v, b / v, w / v);
    ok = pp_schedule_simulate(s, c, 0, t, err, sizeof err);
    free(c);
    CHECK(ok, "%s p=%d m=%d v=%d: %s", pp_sched_names[kind], p, m, v, err);
    if (!ok) pp_schedule_free(s);
    return ok;
}

/* Each (mb, virtual stage) pass appears exactly once in the programs, on the rank that holds the
 * stage; the simulation's own check agrees (it ran). */
static void check_once(const pp_schedule *s)
{
    int kinds = pp_sched_last_pass(s->kind) + 1, stages = s->p * s->v; /* F .. the last pass */
    int *seen = calloc((size_t)kinds * stages * s->m, sizeof(int));
    int total = 0;
    for (int r = 0; r < s->p; r++)
        for (int i = 0; i < s->rank[r].n; i++) {
            const pp_action *a = &s->rank[r].a[i];
            seen[((size_t)a->kind * stages + pp_virtual_stage(s, r, a->chunk)) * s->m + a->mb]++;
            total++;
        }
    int bad = 0;
    for (int i = 0; i < kinds * stages * s->m; i++) bad += seen[i] != 1;
    CHECK(bad == 0 && total == kinds * stages * s->m, "%s p=%d m=%d v=%d: %d passes not run exactly once",
          pp_sched_names[s->kind], s->p, s->m, s->v, bad);
    free(seen);
}

static int max_peak(const pp_schedule *s, const pp_timeline *t)
{
    int peak = 0;
    for (int r = 0; r < s->p; r++) peak = t->peak_slots[r] > peak ? t->peak_slots[r] : peak;
    return peak;
}

/* 1F1B: peak in flight on rank r is min(p-r, m); with f=1, b=2 (w=0) the makespan is (m+p-1)*3,
 * so the bubble is (p-1)/(m+p-1) and idle/busy (p-1)/m, the ideal. */
static void test_1f1b(void)
{
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 12; m++) {
            pp_schedule s;
            pp_timeline t;
            if (!run(PP_SCHED_1F1B, p, m, 1, 1, 2, 0, &s, &t)) continue;
            check_once(&s);
            for (int r = 0; r < p; r++) {
                int want = p - r < m ? p - r : m;
                CHECK(t.peak_slots[r] == want && s.rank[r].nslots[PP_SPAN_FB][0] == want,
                      "p=%d m=%d rank %d: peak %d, slots %d, want min(p-r, m) = %d", p, m, r, t.peak_slots[r],
                      s.rank[r].nslots[PP_SPAN_FB][0], want);
            }
            CHECK(near(t.makespan, 3.0 * (m + p - 1)), "p=%d m=%d: makespan %g, want %d", p, m, t.makespan,
                  3 * (m + p - 1));
            CHECK(near(t.bubble, (p - 1.0) / (m + p - 1)), "p=%d m=%d: bubble %g, want (p-1)/(m+p-1) = %g", p, m,
                  t.bubble, (p - 1.0) / (m + p - 1));
            CHECK(near(t.idle_ratio, pp_ideal_bubble(&s)) && near(pp_ideal_bubble(&s), (p - 1.0) / m),
                  "p=%d m=%d: idle/busy %g, ideal %g, want (p-1)/m", p, m, t.idle_ratio, pp_ideal_bubble(&s));
            pp_timeline_free(&t);
            pp_schedule_free(&s);
        }
}

/* Interleaved: every pass once, deadlock-free, and below 1F1B's bubble at the same total cost;
 * with m >= 2p... its idle/busy is (p-1)/(v m) exactly when stages are uniform and p2p is free. */
static void test_interleaved(void)
{
    for (int p = 2; p <= 6; p++)
        for (int v = 2; v <= 4; v++)
            for (int m = p; m <= 4 * p; m += p) {
                pp_schedule s, s1;
                pp_timeline t, t1;
                if (!run(PP_SCHED_INTERLEAVED, p, m, v, 1, 2, 0, &s, &t)) continue;
                check_once(&s);
                if (run(PP_SCHED_1F1B, p, m, 1, 1, 2, 0, &s1, &t1)) {
                    CHECK(t.bubble < t1.bubble, "p=%d m=%d v=%d: interleaved bubble %g not below 1F1B's %g", p, m, v,
                          t.bubble, t1.bubble);
                    pp_timeline_free(&t1);
                    pp_schedule_free(&s1);
                }
                CHECK(near(pp_ideal_bubble(&s), (p - 1.0) / (v * m)), "ideal (p-1)/(vm)");
                if (m > p)
                    CHECK(near(t.idle_ratio, pp_ideal_bubble(&s)), "p=%d m=%d v=%d: idle/busy %g, want (p-1)/(vm) = %g",
                          p, m, v, t.idle_ratio, pp_ideal_bubble(&s));
                pp_timeline_free(&t);
                pp_schedule_free(&s);
            }
}

/* ZB-H1 with F = B = W (the cost model's split of B = 2F): every pass once, the same peak stash as
 * 1F1B's (its first rank's, min(p, m)), a bubble below 1F1B's, and idle/busy (p-1)/(3m) for
 * m >= p: a third of 1F1B's (Qi et al.). */
static void test_zb_h1(void)
{
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++) {
            pp_schedule s, s1;
            pp_timeline t, t1;
            if (!run(PP_SCHED_ZB_H1, p, m, 1, 1, 1, 1, &s, &t)) continue;
            check_once(&s);
            /* each span its slots: what only B reads as 1F1B's min(p-r, m), what W reads min(p, m),
             * B's values for W one more than the F B pairs whose W waits (r of them, fewer when the
             * warm-up's p-r-1 forwards leave fewer micro-batches) */
            for (int r = 0; r < p; r++) {
                int warm = p - r - 1 < m ? p - r - 1 : m, pairs = r < m - warm ? r : m - warm;
                int fb = p - r < m ? p - r : m, fw = p < m ? p : m, bw = pairs + 1 < m ? pairs + 1 : m;
                const int *n = (int[]){s.rank[r].nslots[PP_SPAN_FB][0], s.rank[r].nslots[PP_SPAN_FW][0],
                                       s.rank[r].nslots[PP_SPAN_BW][0]};
                CHECK(n[0] == fb && n[1] == fw && n[2] == bw, "p=%d m=%d rank %d: slots fb %d fw %d bw %d, want %d %d %d",
                      p, m, r, n[0], n[1], n[2], fb, fw, bw);
            }
            if (run(PP_SCHED_1F1B, p, m, 1, 1, 1, 1, &s1, &t1)) {
                CHECK(max_peak(&s, &t) == max_peak(&s1, &t1), "p=%d m=%d: ZB-H1 peak %d, 1F1B's %d", p, m,
                      max_peak(&s, &t), max_peak(&s1, &t1));
                CHECK(p == 1 || t.bubble < t1.bubble, "p=%d m=%d: ZB-H1 bubble %g not below 1F1B's %g", p, m,
                      t.bubble, t1.bubble);
                pp_timeline_free(&t1);
                pp_schedule_free(&s1);
            }
            if (m >= p)
                CHECK(near(t.idle_ratio, (p - 1.0) / (3 * m)) && near(pp_ideal_bubble(&s), (p - 1.0) / (3 * m)),
                      "p=%d m=%d: idle/busy %g, ideal %g, want (p-1)/(3m) = %g", p, m, t.idle_ratio,
                      pp_ideal_bubble(&s), (p - 1.0) / (3 * m));
            pp_timeline_free(&t);
            pp_schedule_free(&s);
        }
}

/* Rank r's program as text: "F0.1" is F of micro-batch 0 on chunk 1 (".c" only when v > 1). */
static void program_text(const pp_schedule *s, int r, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->rank[r].n && used < n; i++) {
        const pp_action *a = &s->rank[r].a[i];
        if (s->v > 1)
            used += (size_t)snprintf(buf + used, n - used, "%s%c%d.%d", i ? " " : "", "FBW"[a->kind], a->mb, a->chunk);
        else
            used += (size_t)snprintf(buf + used, n - used, "%s%c%d", i ? " " : "", "FBW"[a->kind], a->mb);
    }
}

static void check_order(pp_sched_kind kind, int p, int m, int v, int r, const char *want)
{
    char err[256], got[1024];
    pp_schedule s;
    if (!pp_schedule_build(kind, p, m, v, &s, err, sizeof err)) {
        CHECK(false, "%s", err);
        return;
    }
    program_text(&s, r, got, sizeof got);
    CHECK(strcmp(got, want) == 0, "%s p=%d m=%d v=%d rank %d:\n  got  %s\n  want %s", pp_sched_names[kind], p, m, v, r,
          got, want);
    pp_schedule_free(&s);
}

/* The orders themselves, worked by hand from Megatron's schedules.py and Qi et al.'s figure 3. */
static void test_orders(void)
{
    /* 1F1B p=4 m=6, rank 1: 2 warm-up forwards, then F B pairs, then the cool-down */
    check_order(PP_SCHED_1F1B, 4, 6, 1, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
    /* interleaved p=2 v=2 m=4, rank 0: 2(p-r-1) + (v-1)p = 4 warm-up forwards through chunk 0 then 1 in
     * groups of p micro-batches; backwards through the chunks in reverse */
    check_order(PP_SCHED_INTERLEAVED, 2, 4, 2, 0,
                "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    /* rank 1: 2 warm-up forwards */
    check_order(PP_SCHED_INTERLEAVED, 2, 4, 2, 1,
                "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
    /* m = p: every forward first (Megatron's all-warm-up case) */
    check_order(PP_SCHED_INTERLEAVED, 2, 2, 2, 1, "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
    /* ZB-H1 p=4 m=8, rank 1: 1F1B's warm-up, one F B pair whose W waits, F B W steps, B W, the last W */
    check_order(PP_SCHED_ZB_H1, 4, 8, 1, 1,
                "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
    check_order(PP_SCHED_ZB_H1, 4, 8, 1, 3,
                "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
    /* stash peak of the interleaved warm-up: 2(p-r-1) + (v-1)p + 1 in flight on rank r (m > p) */
    for (int p = 2; p <= 5; p++)
        for (int v = 2; v <= 3; v++) {
            pp_schedule s;
            pp_timeline t;
            int m = 3 * p;
            if (!run(PP_SCHED_INTERLEAVED, p, m, v, 1, 2, 0, &s, &t)) continue;
            for (int r = 0; r < p; r++) {
                int want = 2 * (p - r - 1) + (v - 1) * p + 1;
                CHECK(t.peak_slots[r] == (want < m * v ? want : m * v), "p=%d v=%d rank %d: peak %d, want %d", p, v, r,
                      t.peak_slots[r], want);
            }
            pp_timeline_free(&t);
            pp_schedule_free(&s);
        }
}

/* A p2p latency delays only across ranks: 1F1B at p=2, m=1, f=1, b=2 runs F0 F1 (+L) B1 B0 (+L):
 * 2f + 2b + 2L. */
static void test_p2p(void)
{
    char err[256];
    pp_schedule s;
    pp_timeline t;
    CHECK(pp_schedule_build(PP_SCHED_1F1B, 2, 1, 1, &s, err, sizeof err), "%s", err);
    pp_stage_cost *c = uniform(2, 1, 2, 0);
    CHECK(pp_schedule_simulate(&s, c, 0.5, &t, err, sizeof err), "%s", err);
    CHECK(near(t.makespan, 7), "makespan %g, want 2*1 + 2*2 + 2*0.5 = 7", t.makespan);
    pp_timeline_free(&t);
    pp_schedule_free(&s);
    free(c);
}

/* The simulation refuses a program whose dependencies form a cycle, one with a pass missing, one
 * that runs a pass twice, and a misused stash slot: it is the validity check. */
static void test_invalid_programs(void)
{
    char err[512];
    pp_schedule s;
    pp_timeline t;
    pp_stage_cost *c = uniform(2, 1, 2, 0);
    CHECK(pp_schedule_build(PP_SCHED_1F1B, 2, 2, 1, &s, err, sizeof err), "%s", err);
    /* rank 1: F0 B0 F1 B1; make it B0 F0 ...: B0 waits for its own F0 after it: a cycle */
    pp_action tmp = s.rank[1].a[0];
    s.rank[1].a[0] = s.rank[1].a[1];
    s.rank[1].a[1] = tmp;
    CHECK(!pp_schedule_simulate(&s, c, 0, &t, err, sizeof err) && strstr(err, "deadlocks") &&
              strstr(err, "rank 1 waits at B(mb 0, stage 1) for F(mb 0, stage 1)"), "%s", err);
    s.rank[1].a[1] = s.rank[1].a[0];
    s.rank[1].a[0] = tmp;
    s.rank[0].n--; /* rank 0's last B(mb 1) dropped */
    CHECK(!pp_schedule_simulate(&s, c, 0, &t, err, sizeof err) && strstr(err, "no rank runs B(mb 1, stage 0)"), "%s",
          err);
    s.rank[0].n++;
    s.rank[0].a[3].mb = 0; /* B(mb 0) twice */
    CHECK(!pp_schedule_simulate(&s, c, 0, &t, err, sizeof err) && strstr(err, "runs B(mb 0, stage 0) twice"), "%s",
          err);
    s.rank[0].a[3].mb = 1;
    s.rank[0].a[1].slot[PP_SPAN_FB] = 0; /* F1 into the slot F0 holds */
    CHECK(!pp_schedule_simulate(&s, c, 0, &t, err, sizeof err) && strstr(err, "which mb 0 still holds"), "%s", err);
    pp_schedule_free(&s);
    free(c);
}

static void test_build_refusals(void)
{
    char err[512];
    pp_schedule s;
    CHECK(!pp_schedule_build(PP_SCHED_INTERLEAVED, 4, 6, 2, &s, err, sizeof err) &&
              strstr(err, "micro-batches (6) must be divisible by --pipeline-model-parallel-size (4)"), "%s", err);
    CHECK(!pp_schedule_build(PP_SCHED_INTERLEAVED, 4, 8, 1, &s, err, sizeof err) &&
              strstr(err, "at least 2 virtual stages per pipeline rank (got 1)"), "%s", err);
    CHECK(!pp_schedule_build(PP_SCHED_ZB_H1, 4, 8, 2, &s, err, sizeof err) &&
              strstr(err, "zb-h1 runs one stage per pipeline rank, but 2 virtual stages"), "%s", err);
    CHECK(!pp_schedule_build(PP_SCHED_1F1B, 0, 8, 1, &s, err, sizeof err) && strstr(err, "pipeline ranks (0)"), "%s",
          err);
}

/* What auto weighs (frontend/main.c build, the pipeline pass): at v = 1 ZB-H1, split, or 1F1B, whole;
 * at v > 1 interleaved, and no schedule that splits the backward yet. */
static void test_auto_candidates(void)
{
    CHECK(pp_sched_find(1, true) == PP_SCHED_ZB_H1, "v 1, split: %d", pp_sched_find(1, true));
    CHECK(pp_sched_find(1, false) == PP_SCHED_1F1B, "v 1, whole: %d", pp_sched_find(1, false));
    CHECK(pp_sched_find(2, false) == PP_SCHED_INTERLEAVED, "v 2, whole: %d", pp_sched_find(2, false));
    CHECK(pp_sched_find(2, true) == PP_NUM_SCHEDS, "v 2, split: %d", pp_sched_find(2, true));
}

static pp_split_flags counted(int L, int p, int v, int first, int last, bool ae, bool al)
{
    return (pp_split_flags){.num_layers = L, .p = p, .v = v, .first = first, .last = last, .account_embedding = ae,
                            .account_loss = al};
}

/* The split of f is want's, one entry a virtual stage. */
static bool split_is(const pp_split_flags *f, const int *want, char *err, size_t n)
{
    int got[64];
    if (!pp_split_layers(f, got, err, n)) return false;
    for (int g = 0; g < f->p * f->v; g++)
        if (got[g] != want[g]) {
            snprintf(err, n, "virtual stage %d gets %d layers, want %d", g, got[g], want[g]);
            return false;
        }
    return true;
}

static bool split(int L, int p, int v, int first, int last, bool ae, bool al, const int *want, char *err, size_t n)
{
    int got[64];
    pp_split_flags f = counted(L, p, v, first, last, ae, al);
    if (!pp_split_layers(&f, got, err, n)) return false;
    for (int g = 0; g < p * v; g++)
        if (got[g] != want[g]) {
            snprintf(err, n, "virtual stage %d gets %d layers, want %d", g, got[g], want[g]);
            return false;
        }
    return true;
}

static void test_split(void)
{
    char err[512];
    CHECK(split(8, 4, 1, -1, -1, false, false, (int[]){2, 2, 2, 2}, err, sizeof err), "even: %s", err);
    /* virtual stage g = chunk * p + rank: rank 0 holds stages 0 and 2 */
    CHECK(split(8, 2, 2, -1, -1, false, false, (int[]){2, 2, 2, 2}, err, sizeof err), "even, v 2: %s", err);
    CHECK(split(10, 4, 1, 1, 3, false, false, (int[]){1, 3, 3, 3}, err, sizeof err), "uneven: %s", err);
    CHECK(split(10, 4, 1, 4, -1, false, false, (int[]){4, 2, 2, 2}, err, sizeof err), "first only: %s", err);
    CHECK(split(10, 3, 1, -1, 2, false, false, (int[]){4, 4, 2}, err, sizeof err), "last only: %s", err);
    /* first rank 4 layers over its 2 chunks (stages 0 and 2), last rank 2 (stages 1 and 3) */
    CHECK(split(6, 2, 2, 4, 2, false, false, (int[]){2, 1, 2, 1}, err, sizeof err), "uneven, v 2: %s", err);
    CHECK(split(7, 4, 1, -1, -1, true, false, (int[]){1, 2, 2, 2}, err, sizeof err), "embedding: %s", err);
    CHECK(split(6, 4, 1, -1, -1, true, true, (int[]){1, 2, 2, 1}, err, sizeof err), "embedding, loss: %s", err);
    CHECK(split(7, 2, 2, -1, -1, false, true, (int[]){2, 2, 2, 1}, err, sizeof err), "loss, v 2: %s", err);

    struct { int L, p, v, first, last; bool ae, al; const char *want; } bad[] = {
        {10, 4, 1, -1, -1, false, false, "num_layers = 10 must be divisible by --pipeline-model-parallel-size (4)"},
        {8, 4, 1, -1, -1, true, false, "num_layers + 1 (embedding) = 9 must be divisible"},
        {12, 4, 2, -1, -1, false, false, "the 3 layers of each pipeline rank (num_layers = 12 over 4) must be divisible "
                                         "by the 2 virtual stages"},
        {10, 4, 1, 3, 4, false, false, "leave 3 of the 10 layers for the 2 other pipeline ranks"},
        {10, 2, 1, 3, 3, false, false, "leave 4 of the 10 layers for the 0 other pipeline ranks"},
        {10, 4, 1, 12, -1, false, false, "leave -2 of the 10 layers"},
        {9, 4, 2, 3, -1, false, false, "the 3 layers of the first pipeline rank must be divisible by the 2 virtual"},
        {10, 4, 1, 1, 3, true, false, "drop --account-for-embedding-in-pipeline-split"},
        {10, 1, 1, 4, -1, false, false, "--decoder-first-pipeline-num-layers needs --pipeline-model-parallel-size above 1"},
        {10, 4, 1, -1, 0, false, false, "--decoder-last-pipeline-num-layers must be at least 1"},
        {1, 2, 1, -1, -1, true, true, "must be divisible"},
        {0, 2, 1, -1, -1, false, false, "num_layers (0)"},
        /* the embedding counted as a layer leaves the first stage none: the pipeline pass builds a stage from its layers */
        {3, 4, 1, -1, -1, true, false, "virtual pipeline stage 0 of 4 gets no layer"},
        {7, 4, 2, -1, -1, true, false, "virtual pipeline stage 0 of 8 gets no layer"},
        {4, 3, 1, 2, 2, false, false, "virtual pipeline stage 1 of 3 gets no layer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int got[64];
        pp_split_flags f = counted(bad[i].L, bad[i].p, bad[i].v, bad[i].first, bad[i].last, bad[i].ae, bad[i].al);
        bool ok = pp_split_layers(&f, got, err, sizeof err);
        CHECK(!ok && strstr(err, bad[i].want), "case %zu: %s; want \"%s\"", i, ok ? "accepted" : err, bad[i].want);
    }
    /* 2 layers, p 2, both flags: 4 over 2 ranks = 2 each, minus one each: 1 and 1 */
    CHECK(split(2, 2, 1, -1, -1, true, true, (int[]){1, 1}, err, sizeof err), "%s", err);
    int got[8];
    pp_split_flags both = counted(8, 4, 2, -1, -1, true, true);
    CHECK(!pp_split_layers(&both, got, err, sizeof err) &&
              strstr(err, "num_layers + 2 (embedding, loss) = 10"), "%s", err);
}

static bool virtual_stages(int L, int p, int per_stage, int per_rank, bool ae, bool al, const char *layout, int *v,
                           char *err, size_t n)
{
    pp_split_flags f = counted(L, p, 0, -1, -1, ae, al);
    f.layout = layout;
    return pp_virtual_stages(&f, per_stage, per_rank, v, err, n);
}

static void test_virtual_stages(void)
{
    char err[512];
    int v;
    CHECK(virtual_stages(80, 4, 0, 0, false, false, NULL, &v, err, sizeof err) && v == 1, "none: %s", err);
    CHECK(virtual_stages(80, 4, 0, 2, false, false, NULL, &v, err, sizeof err) && v == 2, "per rank: %s", err);
    CHECK(virtual_stages(80, 4, 5, 0, false, false, NULL, &v, err, sizeof err) && v == 4, "layers per stage: %s", err);
    CHECK(virtual_stages(78, 4, 4, 0, true, true, NULL, &v, err, sizeof err) && v == 5, "with both flags: %s", err);
    CHECK(!virtual_stages(80, 4, 5, 2, false, false, NULL, &v, err, sizeof err) && strstr(err, "give one"), "%s", err);
    CHECK(!virtual_stages(80, 4, 3, 0, false, false, NULL, &v, err, sizeof err) &&
              strstr(err, "--num-layers-per-virtual-pipeline-stage 3 must divide the 20 layers"), "%s", err);
    CHECK(!virtual_stages(81, 4, 3, 0, false, false, NULL, &v, err, sizeof err) &&
              strstr(err, "num_layers = 81 must be divisible by --pipeline-model-parallel-size (4)"), "%s", err);
    CHECK(!virtual_stages(80, 1, 0, 2, false, false, NULL, &v, err, sizeof err) && strstr(err, "above 1"), "%s", err);
    CHECK(!virtual_stages(800, 2, 0, 100, false, false, NULL, &v, err, sizeof err) && strstr(err, "at most 64"), "%s",
          err);
    /* a layout's stages over the ranks: Megatron's H100 DeepSeek-V3 recipe at PP 8 is 32 stages, 4 a rank */
    CHECK(virtual_stages(61, 8, 0, 0, false, false, "Et|(tt|)*30mL", &v, err, sizeof err) && v == 4, "layout: %s", err);
    CHECK(virtual_stages(4, 2, 0, 0, false, false, "Ett|ttL", &v, err, sizeof err) && v == 1, "layout, v 1: %s", err);
    CHECK(!virtual_stages(61, 8, 0, 4, false, false, "Et|(tt|)*30mL", &v, err, sizeof err) &&
              strstr(err, "drop --num-virtual-stages-per-pipeline-rank"), "%s", err);
    CHECK(!virtual_stages(64, 8, 2, 0, false, false, "Et|(tt|)*30mL", &v, err, sizeof err) &&
              strstr(err, "drop --num-layers-per-virtual-pipeline-stage"), "%s", err);
    CHECK(!virtual_stages(61, 6, 0, 0, false, false, "Et|(tt|)*30mL", &v, err, sizeof err) &&
              strstr(err, "has 32 stages: give a multiple of --pipeline-model-parallel-size (6)"), "%s", err);
    CHECK(!virtual_stages(4, 1, 0, 0, false, false, "Ett|ttL", &v, err, sizeof err) && strstr(err, "above 1"), "%s",
          err);
}

/* Megatron's --pipeline-model-parallel-layout (PipelineParallelLayerLayout): its grammar, its
 * stages to (rank, chunk), and each refusal's message. */
static void test_layout(void)
{
    char err[512];
    /* the H100 recipe: 61 layers and one depth at PP 8 x VP 4: stage 0 = rank 0's chunk 0 (E and a
     * layer), 30 stages of 2, the last (rank 7's chunk 3) the depth and the loss alone */
    int recipe[32] = {1};
    for (int g = 1; g < 31; g++) recipe[g] = 2;
    pp_split_flags f = {.num_layers = 61, .mtp_layers = 1, .p = 8, .v = 4, .first = -1, .last = -1,
                        .layout = "Et|(tt|)*30mL"};
    CHECK(split_is(&f, recipe, err, sizeof err), "recipe: %s", err);
    /* Megatron's documented example (PP 16 x VP 2), commas cosmetic: its depth closes rank 14's last
     * chunk (Megatron's standalone MTP), which mcc does not build: refused naming the stage */
    int doc[32];
    f = (pp_split_flags){.num_layers = 61, .mtp_layers = 1, .p = 16, .v = 2, .first = -1, .last = -1,
                         .layout = "Et*3|(tt|)*29,m|L"};
    CHECK(!pp_split_layers(&f, doc, err, sizeof err) && strstr(err, "a multi-token depth m on stage 30 (rank 14, chunk 1)"),
          "the depth on its own stage: %s", err);
    f.layout = "Et*3|(tt|)*29,tmL", f.v = 2, f.p = 15;
    CHECK(!pp_split_layers(&f, doc, err, sizeof err) && strstr(err, "has 31 stages: give a multiple"), "31 stages: %s",
          err);
    /* a schedule of one stage a rank weighed against the recipe's 4 (mcc schedule's rows) */
    f = (pp_split_flags){.num_layers = 61, .mtp_layers = 1, .p = 8, .v = 1, .first = -1, .last = -1,
                         .layout = "Et|(tt|)*30mL"};
    CHECK(!pp_split_layers(&f, doc, err, sizeof err) &&
              strstr(err, "has 32 stages, 4 virtual stages on each of the 8 pipeline ranks, not 1"), "v 1: %s", err);
    /* uneven within a rank's chunks: rank 0 holds stages 0 and 2 */
    f = (pp_split_flags){.num_layers = 6, .p = 2, .v = 2, .first = -1, .last = -1, .layout = "Et|tt|t|ttL"};
    CHECK(split_is(&f, (int[]){1, 2, 1, 2}, err, sizeof err), "uneven chunks: %s", err);
    f = (pp_split_flags){.num_layers = 3, .mtp_layers = 2, .p = 2, .v = 1, .first = -1, .last = -1, .layout = "E,ttt|m*2L"};
    CHECK(split_is(&f, (int[]){3, 0}, err, sizeof err), "the depths alone: %s", err);
    f.layout = "(E)*1ttt|(m)*2,L";
    CHECK(split_is(&f, (int[]){3, 0}, err, sizeof err), "groups of one: %s", err);

    struct { int L, mtp, p, v; const char *layout; const char *want; } bad[] = {
        {2, 0, 2, 1, "Et|tX", "'X' at character 5 is not one of E (embedding), t (a decoder layer)"},
        {2, 0, 2, 1, "Et|(tL", "the '(' at character 4 is not closed"},
        {2, 0, 2, 1, "Et|((t)*1L)*1", "groups do not nest (the '(' at character 5)"},
        {2, 0, 2, 1, "Et|(tL)", "the group at character 4 needs a count, e.g. (tt|)*30"},
        {2, 0, 2, 1, "Et|t*L", "the '*' at character 5 needs a count"},
        {2, 0, 2, 1, "Et|(t?)*1L", "'?' inside a group is not one of"},
        {2, 0, 2, 1, "Et|t*99999999L", "the count at character 6 is above"},
        {2, 0, 2, 1, "tE|tL", "the embedding E must come once, first (mcc builds it on virtual stage 0), found one on stage 0"},
        {2, 0, 2, 1, "Et|EtL", "found another on stage 1 (rank 1, chunk 0)"},
        {2, 0, 2, 1, "Et|Lt", "the loss L must come once, last (it closes the last stage), found one on stage 1"},
        {2, 0, 2, 1, "t|tL", "has no embedding: begin it with E"},
        {2, 0, 2, 1, "Et|t", "has no loss: end it with L"},
        {3, 0, 2, 1, "Et|tL", "has 2 decoder layers t: num_layers is 3"},
        {2, 1, 2, 1, "Et|tL", "has 0 multi-token depths m: mtp_num_layers is 1"},
        {2, 0, 2, 1, "Et|tmL", "has 1 multi-token depths m: mtp_num_layers is 0"},
        {2, 1, 2, 2, "Et|t|m|L", "a multi-token depth m on stage 2 (rank 0, chunk 1): mcc builds the depths on the last "
                                 "virtual stage (3)"},
        {2, 1, 2, 1, "Et|mtL", "a decoder layer t on stage 1 after a multi-token depth m"},
        {2, 0, 2, 2, "Et||t|L", "stage 1 (rank 1, chunk 0) holds no decoder layer"},
        {2, 0, 3, 1, "Et|tL", "has 2 stages: give a multiple of --pipeline-model-parallel-size (3)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int got[64];
        f = (pp_split_flags){.num_layers = bad[i].L, .mtp_layers = bad[i].mtp, .p = bad[i].p, .v = bad[i].v,
                             .first = -1, .last = -1, .layout = bad[i].layout};
        bool ok = pp_split_layers(&f, got, err, sizeof err);
        CHECK(!ok && strstr(err, bad[i].want) && strstr(err, "--pipeline-model-parallel-layout"),
              "case %zu (%s): %s; want \"%s\"", i, bad[i].layout, ok ? "accepted" : err, bad[i].want);
    }
    /* the other spellings of the split are refused beside it, as Megatron-LM refuses them */
    const char *drop[] = {"drop --decoder-first-pipeline-num-layers", "drop --decoder-last-pipeline-num-layers",
                          "drop --account-for-embedding-in-pipeline-split", "drop --account-for-loss-in-pipeline-split"};
    for (int k = 0; k < 4; k++) {
        int got[2];
        f = (pp_split_flags){.num_layers = 2, .p = 2, .v = 1, .first = k == 0 ? 1 : -1, .last = k == 1 ? 1 : -1,
                             .account_embedding = k == 2, .account_loss = k == 3, .layout = "Et|tL"};
        CHECK(!pp_split_layers(&f, got, err, sizeof err) && strstr(err, drop[k]), "%s; want %s", err, drop[k]);
    }
    CHECK(pp_layout_stages("Et|(tt|)*30mL", err, sizeof err) == 32, "%s", err);
    CHECK(pp_layout_stages("E|t*3|*2L", err, sizeof err) == 4, "'|' repeated: %s", err);
    CHECK(pp_layout_stages("E(", err, sizeof err) == -1 && strstr(err, "not closed"), "%s", err);
}

/* The cost-balanced default split: llama3-70b's numbers per token (a layer 2 x 856M params + 4 T H
 * of attention = 1.98 GFLOP, the head 2 x 128256 x 8192 = 2.10 GFLOP) over 4 ranks move one layer
 * from the last rank to the first (21, 20, 20, 19: the most a rank costs 21 layers, against the
 * even split's 20 + 1.06); a head far below a layer keeps the even split; 2 ranks trade directly. */
static void test_balanced(void)
{
    int f, l;
    CHECK(pp_balanced_split(80, 4, 1.98, 0, 2.10, &f, &l) && f == 21 && l == 19, "llama3-70b: %d, %d", f, l);
    CHECK(!pp_balanced_split(4, 2, 82e3, 0, 33e3, &f, &l) && f == -1 && l == -1, "tiny: %d, %d", f, l);
    CHECK(pp_balanced_split(8, 2, 1, 0, 2, &f, &l) && f == 5 && l == 3, "two ranks, a head of 2 layers: %d, %d", f, l);
    CHECK(!pp_balanced_split(81, 4, 1, 0, 5, &f, &l), "81 layers over 4: the even split is refused elsewhere");
    CHECK(!pp_balanced_split(8, 1, 1, 0, 5, &f, &l), "one rank: nothing to balance");
}

int main(int argc, char **argv)
{
    static const check_part parts[] = {
        {"balanced", test_balanced},
        {"1f1b", test_1f1b},           {"interleaved", test_interleaved}, {"zb_h1", test_zb_h1},
        {"p2p", test_p2p},             {"invalid", test_invalid_programs}, {"refusals", test_build_refusals},
        {"auto", test_auto_candidates},
        {"split", test_split},         {"virtual", test_virtual_stages}, {"layout", test_layout}, {"orders", test_orders},
    };
    return check_main(argc, argv, parts, sizeof parts / sizeof parts[0]);
}

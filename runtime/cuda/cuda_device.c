/* cuda_device.c — the CUDA device: device memory, the plan's cubin, and functions run as CUDA
 * graphs. A function's first call runs eagerly (it sizes scratch space and lets cuBLASLt pick
 * its algorithms); the second call records it into a graph, and every later call replays it,
 * so a step costs a handful of host calls. MCC_CUDA_GRAPHS=0 keeps every call eager,
 * MCC_CUDA_GRAPHS=eager-collectives those of functions with collectives.
 * MCC_PROFILE=1 runs eagerly with an event pair around every instruction and prints, at exit,
 * the GPU time per op and the most expensive instructions, per call of micro_step, leaving out
 * each function's first call (cuBLASLt's and cuDNN's plans, scratch sizing, ranks out of step). */
#include "cuda_ctx.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/program.h"
#include "common/knobs.h"
#include "common/os.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h> /* header-only NVTX3: nothing to link; a no-op unless a tool attaches */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The last of the overlapped collectives (ir_overlapped) whose results instruction i reads, or -1:
 * the one the compute stream waits for before i (and with it, the comm stream being FIFO, those
 * forked before it). */
static int overlapped_def(const ir_func *f, int i)
{
    const ir_instr *in = &f->instrs[i];
    int last = -1;
    for (int a = 0; a < in->nargs; a++) {
        int def = f->vals[in->args[a]].def;
        if (ir_overlapped(&f->instrs[def]) && def > last)
            last = def;
    }
    return last;
}

/* Per-instruction GPU time, collected when MCC_PROFILE=1. */
typedef struct {
    cudaEvent_t *start, *stop;      /* per instruction of each function (flattened) */
    cudaEvent_t *join;              /* per instruction reading an overlapped result: before the join */
    double *ms;                     /* per instruction, summed over calls */
    double *wait;                   /* per instruction: the compute stream's wait for overlapped results before it */
    double *span;                   /* per instruction on the comm stream: its time there */
    cudaEvent_t end_join[2];        /* around the join at a function's end (--overlap-grad-reduce's buckets) */
    double join_ms;                 /* the compute stream's time waiting for overlapped collectives */
    double join_by_op[IR_NUM_OPS];  /* ... of it, per op of the collective waited for */
    cudaEvent_t *comm_before, *comm_after; /* per instruction forking to the comm stream: on that stream */
    double comm_ms;                 /* the overlapped collectives' own time on the comm stream */
    int comm_count;
    const int *offset;              /* per function: its first slot (cuda_state's first_slot) */
    int *counted;                   /* per function: calls timed (all but the first) */
} profile;

enum { MAX_WINDOWS = 4 }; /* window allocations a program makes (its arena) */

typedef struct {
    rt_cuda_ctx *cx;
    profile *prof;
    int *first_exec;                /* per function: the index of its first binding in graphs and calls
                                       (a pipeline stage's forward and backward: one per combination of
                                       its stash spans' slots, rt_program.slot_execs) */
    cudaGraphExec_t *graphs;        /* per binding, once recorded */
    void *window_mem[MAX_WINDOWS];  /* alloc_window's allocations (ncclMemFree'd) */
    int *calls;                     /* per binding: calls so far */
    bool *collectives;              /* per function: whether it has collectives (has_op_with) */
    bool *host_waits;               /* per function: an op the host waits in (IR_OPF_HOST_WAIT): never a graph */
    int *first_slot;                /* per function: its first instruction's index in comm_ends (and the profile's arrays) */
    rt_cuda_comm_end *comm_ends;    /* per instruction on the comm stream (ir_on_comm_stream): its end there */
    bool use_graphs;
    bool eager_collectives;         /* MCC_CUDA_GRAPHS=eager-collectives */
    cudaStream_t copy_stream;       /* the host optimizer's copies (copy_async), made at the first */
} cuda_state;

static cuda_state *state(rt_program *p) { return p->dev_state; }
static cudaStream_t stream(rt_program *p) { return (cudaStream_t)rt_cuda_stream(state(p)->cx); }
/* The binding func runs with now: its stash slot's (rt_program_bind_slot), 0 without stash. */
static int binding(rt_program *p, int func) { return state(p)->first_exec[func] + p->bound_slot[func]; }

static profile *profile_new(const ir_module *m, const int *first_slot)
{
    profile *pr = calloc(1, sizeof *pr);
    pr->offset = first_slot;
    pr->counted = calloc((size_t)m->nfuncs, sizeof(int));
    int n = pr->offset[m->nfuncs];
    pr->start = calloc((size_t)n, sizeof(cudaEvent_t));
    pr->stop = calloc((size_t)n, sizeof(cudaEvent_t));
    pr->join = calloc((size_t)n, sizeof(cudaEvent_t));
    pr->comm_before = calloc((size_t)n, sizeof(cudaEvent_t));
    pr->comm_after = calloc((size_t)n, sizeof(cudaEvent_t));
    pr->ms = calloc((size_t)n, sizeof(double));
    pr->wait = calloc((size_t)n, sizeof(double));
    pr->span = calloc((size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) {
        RT_CUDART_CHECK(cudaEventCreate(&pr->start[i]));
        RT_CUDART_CHECK(cudaEventCreate(&pr->stop[i]));
        RT_CUDART_CHECK(cudaEventCreate(&pr->join[i]));
        RT_CUDART_CHECK(cudaEventCreate(&pr->comm_before[i]));
        RT_CUDART_CHECK(cudaEventCreate(&pr->comm_after[i]));
    }
    RT_CUDART_CHECK(cudaEventCreate(&pr->end_join[0]));
    RT_CUDART_CHECK(cudaEventCreate(&pr->end_join[1]));
    return pr;
}

/* The index of v's largest element above 0, or -1. */
static int largest(const double *v, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (v[i] > 0 && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

/* The function an instruction's slot in the profile's flattened arrays belongs to. */
static int func_of_slot(const profile *pr, int slot)
{
    int f = 0;
    while (pr->offset[f + 1] <= slot)
        f++;
    return f;
}

/* The 12 overlapped collectives the compute stream waited longest for (per micro_step, as
 * profile_print's; each reader's wait counts for the collective it waited for, overlapped_def):
 * their time on the comm stream against the wait, and the work the plan put beside them before
 * their first reader (GEMMs and attention) — whether a wait comes from too little work beside a
 * collective or from elsewhere (the other ranks arriving late). */
static void print_most_waited(const ir_module *m, const profile *pr, double per)
{
    int n = pr->offset[m->nfuncs];
    double *waited = calloc((size_t)n, sizeof(double));
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            int def = overlapped_def(m->funcs[f], i);
            if (def >= 0)
                waited[pr->offset[f] + def] += per * pr->wait[pr->offset[f] + i];
        }
    for (int k = 0, best; k < 12 && (best = largest(waited, n)) >= 0; k++) {
        if (k == 0)
            fprintf(stderr, "profile: overlapped collectives most waited for (on the comm stream / waited / "
                            "multiply-adds beside: ir_work_macs)\n");
        int f = func_of_slot(pr, best);
        const ir_func *fn = m->funcs[f];
        int i = best - pr->offset[f], use = ir_first_reader(fn, i, fn->instrs[i].res[0]);
        double macs = 0;
        for (int j = i + 1; j < use; j++)
            macs += ir_work_macs(fn, &fn->instrs[j]);
        fprintf(stderr, "  %s #%d %-18s %6.3f / %6.3f ms  %6.1fG\n", fn->name, i, ir_ops[fn->instrs[i].op].name,
                per * pr->span[best], waited[best], macs / 1e9);
        waited[best] = 0;
    }
    free(waited);
}

/* GPU ms per op kind, then the 15 most expensive instructions: the timed calls' sums divided by
 * micro_step's timed calls (a step's share when a step is one micro-batch). */
static void profile_print(const ir_module *m, const profile *pr)
{
    double by_op[IR_NUM_OPS] = {0}, total = 0;
    int n = pr->offset[m->nfuncs], step = ir_func_of_kind(m, IR_FUNC_STEP), steps = step >= 0 ? pr->counted[step] : 0;
    double per = steps > 0 ? 1.0 / steps : 1.0;
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            by_op[m->funcs[f]->instrs[i].op] += per * pr->ms[pr->offset[f] + i];
            total += per * pr->ms[pr->offset[f] + i];
        }
    fprintf(stderr, "profile: GPU time by op per micro_step (%d timed calls, each function's first left out; %.2f ms "
                    "in all)\n", steps, total);
    if (pr->join_ms > 0 || pr->comm_count) /* an overlapped collective's own time is on the comm stream, not above */
        fprintf(stderr, "  (overlapped collectives, not in the total: %d of them ran %.2f ms on the comm stream; the "
                        "compute stream waited %.2f ms for them, so %.0f%% of their time was hidden)\n",
                (int)(pr->comm_count * per + 0.5), per * pr->comm_ms, per * pr->join_ms,
                pr->comm_ms > 0 ? 100 * (pr->comm_ms - pr->join_ms) / pr->comm_ms : 0.0);
    double readers = 0;
    for (int op = 0; op < IR_NUM_OPS; op++)
        if (pr->join_by_op[op] > 0) {
            fprintf(stderr, "  (waited before readers of %s: %.2f ms)\n", ir_ops[op].name, per * pr->join_by_op[op]);
            readers += pr->join_by_op[op];
        }
    if (pr->join_ms > readers) /* the rest: at functions' ends (data parallel's buckets) */
        fprintf(stderr, "  (waited at functions' ends: %.2f ms)\n", per * (pr->join_ms - readers));
    for (int best; (best = largest(by_op, IR_NUM_OPS)) >= 0;) {
        fprintf(stderr, "  %-20s %10.3f ms %5.1f%%\n", ir_ops[best].name, by_op[best], 100 * by_op[best] / total);
        by_op[best] = 0;
    }
    print_most_waited(m, pr, per);
    fprintf(stderr, "profile: most expensive instructions\n");
    double *ms = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        ms[i] = per * pr->ms[i];
    for (int k = 0, best; k < 15 && (best = largest(ms, n)) >= 0; k++) {
        int f = func_of_slot(pr, best);
        const ir_instr *in = &m->funcs[f]->instrs[best - pr->offset[f]];
        char type[96] = "";
        if (in->nres)
            ir_type_str(ir_vtype(m->funcs[f], in->res[0]), type, sizeof type);
        fprintf(stderr, "  %10.3f ms  %s #%d %s -> %s\n", ms[best], m->funcs[f]->name, best - pr->offset[f],
                ir_ops[in->op].name, type);
        ms[best] = 0;
    }
    free(ms);
}

static bool has_op_with(const ir_func *f, unsigned flag)
{
    for (int i = 0; i < f->ninstrs; i++)
        if (ir_op_has(f->instrs[i].op, flag))
            return true;
    return false;
}

/* The rank's GPU, from the launcher's layout (torchrun, Open MPI or SLURM), before any CUDA
 * context exists: the cubin is loaded into that GPU's context. */
static void select_gpu(void)
{
    rt_rank_env env = rt_rank_env_or_exit();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
        RT_CUDART_CHECK(cudaSetDevice(rt_rank_device(&env, ndev)));
}

static void cuda_open(rt_program *p, const void *image)
{
    select_gpu();
    char err[512];
    cuda_state *s = calloc(1, sizeof *s);
    s->cx = image ? rt_cuda_ctx_create(image, err, sizeof err) : NULL;
    if (!s->cx) {
        fprintf(stderr, "train_rank: error: %s\n", image ? err : "the plan has no CUDA kernels; recompile with --target cuda");
        exit(1);
    }
    /* a graph holds its buffers' addresses: one a binding (its stash slots' buffers) */
    s->first_exec = calloc((size_t)p->m->nfuncs + 1, sizeof *s->first_exec);
    for (int f = 0; f < p->m->nfuncs; f++)
        s->first_exec[f + 1] = s->first_exec[f] + p->nslots[f];
    s->graphs = calloc((size_t)s->first_exec[p->m->nfuncs], sizeof *s->graphs);
    s->calls = calloc((size_t)s->first_exec[p->m->nfuncs], sizeof *s->calls);
    s->collectives = calloc((size_t)p->m->nfuncs, sizeof *s->collectives);
    s->host_waits = calloc((size_t)p->m->nfuncs, sizeof *s->host_waits);
    s->first_slot = calloc((size_t)p->m->nfuncs + 1, sizeof *s->first_slot);
    for (int f = 0; f < p->m->nfuncs; f++) {
        s->collectives[f] = has_op_with(p->m->funcs[f], IR_OPF_COLLECTIVE);
        s->host_waits[f] = has_op_with(p->m->funcs[f], IR_OPF_HOST_WAIT);
        s->first_slot[f + 1] = s->first_slot[f] + p->m->funcs[f]->ninstrs;
    }
    s->comm_ends = calloc((size_t)s->first_slot[p->m->nfuncs], sizeof *s->comm_ends);
    int marks = ir_grad_ready_slots(p->m);
    rt_cuda_ready_marks(s->cx, marks);
    if (marks) /* the host's thread queues copies on it */
        RT_CUDART_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));
    for (int f = 0; f < p->m->nfuncs; f++)
        for (int i = 0; i < p->m->funcs[f]->ninstrs; i++)
            if (ir_on_comm_stream(&p->m->funcs[f]->instrs[i]))
                RT_CUDART_CHECK(cudaEventCreateWithFlags(&s->comm_ends[s->first_slot[f] + i].done,
                                                         cudaEventDisableTiming));
    enum { GRAPHS_ON, GRAPHS_OFF, GRAPHS_EAGER_COLLECTIVES }; /* ORDER MCC_CUDA_GRAPHS's choices: 1|0|eager-collectives */
    int graphs = knob_choice(KNOB_CUDA_GRAPHS);
    s->use_graphs = graphs != GRAPHS_OFF;
    s->eager_collectives = graphs == GRAPHS_EAGER_COLLECTIVES;
    if (knob_on(KNOB_PROFILE)) {
        s->use_graphs = false;
        s->prof = profile_new(p->m, s->first_slot);
    }
    p->dev_state = s;
}

/* MCC_PROFILE_DUMP=FILE: a line per instruction timed, tab-separated: its function, index and op,
 * the calls timed, GPU ms per call, its multiply-adds (ir_work_macs), the bytes of its operands and
 * results, and its result's type; what bench/calibrate.py fits the step-time model's rates from.
 * Overlapped collectives run on the comm stream and are not in it. Rank 0's only. */
static void profile_dump(const ir_module *m, const profile *pr, const char *path)
{
    FILE *out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "train_rank: warning: MCC_PROFILE_DUMP %s: cannot write it\n", path);
        return;
    }
    fprintf(out, "func\tindex\top\tcalls\tms\tmacs\tbytes\ttype\n");
    for (int f = 0; f < m->nfuncs; f++) {
        const ir_func *fn = m->funcs[f];
        for (int i = 0; pr->counted[f] > 0 && i < fn->ninstrs; i++) {
            const ir_instr *in = &fn->instrs[i];
            double bytes = 0;
            for (int a = 0; a < in->nargs; a++)
                bytes += (double)ir_bytes(ir_vtype(fn, in->args[a]));
            for (int r = 0; r < in->nres; r++)
                bytes += (double)ir_bytes(ir_vtype(fn, in->res[r]));
            char type[96] = "";
            if (in->nres)
                ir_type_str(ir_vtype(fn, in->res[0]), type, sizeof type);
            fprintf(out, "%s\t%d\t%s\t%d\t%.6f\t%.0f\t%.0f\t%s\n", fn->name, i, ir_ops[in->op].name, pr->counted[f],
                    pr->ms[pr->offset[f] + i] / pr->counted[f], ir_work_macs(fn, in), bytes, type);
        }
    }
    fclose(out);
}

static void cuda_close(rt_program *p)
{
    cuda_state *s = state(p);
    if (s->prof)
        profile_print(p->m, s->prof);
    bool first = true; /* the rank at every axis's coordinate 0 */
    for (int a = 0; a < IR_NUM_AXES; a++)
        first &= p->coord[a] == 0;
    if (s->prof && knob_text(KNOB_PROFILE_DUMP) && first)
        profile_dump(p->m, s->prof, knob_text(KNOB_PROFILE_DUMP));
    for (int i = 0; i < s->first_exec[p->m->nfuncs]; i++)
        if (s->graphs[i])
            cudaGraphExecDestroy(s->graphs[i]);
    free(s->first_exec);
    for (int i = 0; i < s->first_slot[p->m->nfuncs]; i++)
        if (s->comm_ends[i].done)
            cudaEventDestroy(s->comm_ends[i].done);
    free(s->comm_ends);
    free(s->first_slot);
    if (s->copy_stream)
        cudaStreamDestroy(s->copy_stream);
    rt_cuda_ctx_free(s->cx);
    free(s->graphs);
    free(s->calls);
    free(s->collectives);
    free(s->host_waits);
    free(s);
}

/* Zeroes a new allocation on the compute stream and waits: cudaMemset would run on the legacy
 * default stream, which the non-blocking compute stream does not wait for, so the parameters'
 * initialisation kernels could run first and be zeroed after (seen with 4 ranks sharing a GPU,
 * whose time-slicing delays the memset: whole parameters read back as zeros). */
static void zero_new(rt_program *p, void *ptr, size_t bytes)
{
    RT_CUDART_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream(p)));
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
}

static void *cuda_alloc(rt_program *p, size_t bytes)
{
    void *ptr = NULL;
    if (!bytes)
        bytes = 1;
    cudaError_t e = cudaMalloc(&ptr, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        fprintf(stderr, "train_rank: error: out of GPU memory allocating %.3f GiB (%.3f of %.3f GiB free); "
                        "mcc compile prints the plan's memory breakdown: lower --micro-batch-size or the model size\n",
                bytes / 1073741824.0, free_b / 1073741824.0, total / 1073741824.0);
        exit(1);
    }
    zero_new(p, ptr, bytes);
    return ptr;
}

/* ncclMemAlloc: cuMem memory NCCL can map into its peers (windows, copy-engine all-gathers);
 * plain cudaMalloc when it cannot (the copy lane then stays unused). */
static void *cuda_alloc_window(rt_program *p, size_t bytes)
{
    cuda_state *s = state(p);
    int slot = 0;
    while (slot < MAX_WINDOWS && s->window_mem[slot])
        slot++;
    void *ptr = NULL;
    if (slot == MAX_WINDOWS || ncclMemAlloc(&ptr, bytes ? bytes : 1) != ncclSuccess) {
        fprintf(stderr, "train_rank: note: ncclMemAlloc of %.3f GiB failed (%s); collectives use NCCL's kernels\n",
                bytes / 1073741824.0, slot == MAX_WINDOWS ? "too many windows" : ncclGetLastError(NULL));
        return cuda_alloc(p, bytes);
    }
    zero_new(p, ptr, bytes);
    s->window_mem[slot] = ptr;
    return ptr;
}

static void cuda_free(rt_program *p, void *ptr)
{
    cuda_state *s = state(p);
    for (int i = 0; i < MAX_WINDOWS; i++)
        if (ptr && s->window_mem[i] == ptr) {
            ncclMemFree(ptr);
            s->window_mem[i] = NULL;
            return;
        }
    cudaFree(ptr);
}

/* Page-locked host memory (a checkpoint's host copy, the offloaded optimizer's state), zeroed:
 * copies to and from it run at the link's speed, with no staging copy in the driver.
 * cudaMallocHost faults, zeroes and pins its pages on one thread (~1 GB/s: a minute for the 90 GiB
 * of llama3-8b's offloaded state); from LARGE_HOST bytes on, the pages are mapped, asked for as
 * transparent huge pages (MCC_HOST_HUGE_PAGES: 2 MiB each, so 512 times fewer faults and pages for
 * cudaHostRegister to pin, as cuDF's pinned pool does; where the kernel has none to give, its
 * default pages), faulted in (the kernel zeroes them) by a thread per CPU (os_cpus) over its slice,
 * then page-locked by one cudaHostRegister of the whole range (one registration, so that a copy
 * spanning it stays one DMA). */
enum { LARGE_HOST = 1 << 28, MAX_LARGE_HOST = 16, MAX_FAULT_THREADS = 64 };
static struct {
    pthread_mutex_t lock;
    void *ptr[MAX_LARGE_HOST];
    size_t bytes[MAX_LARGE_HOST];
} large_host = {.lock = PTHREAD_MUTEX_INITIALIZER};

typedef struct {
    char *begin;
    size_t bytes, page;
} fault_slice;

static void *fault_in(void *arg)
{
    const fault_slice *s = arg;
    for (size_t at = 0; at < s->bytes; at += s->page)
        ((volatile char *)s->begin)[at] = 0;
    return NULL;
}

/* Maps bytes of zeroed pages and faults them in, a slice a thread (*nthreads of them). NULL where
 * mmap fails. */
static void *map_faulted(size_t bytes, int *nthreads)
{
    void *ptr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED)
        return NULL;
    /* slices of whole huge pages (2 MiB), so that no two threads fault one; each touches every page
     * of its slice, so that a part the kernel gives no huge page is faulted in too */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), unit = page;
#ifdef MADV_HUGEPAGE
    if (knob_on(KNOB_HOST_HUGE_PAGES) && madvise(ptr, bytes, MADV_HUGEPAGE) == 0) /* refused: no THP here */
        unit = (size_t)2 << 20;
#endif
    size_t units = (bytes + unit - 1) / unit;
    int cores = os_cpus(), n = cores > MAX_FAULT_THREADS ? MAX_FAULT_THREADS : cores;
    pthread_t threads[MAX_FAULT_THREADS];
    fault_slice slices[MAX_FAULT_THREADS];
    int started = 0;
    for (int t = 0; t < n; t++) {
        size_t first = units * (size_t)t / (size_t)n * unit, last = units * (size_t)(t + 1) / (size_t)n * unit;
        last = last < bytes ? last : bytes;
        slices[t] = (fault_slice){(char *)ptr + first, last - first, page};
        if (last > first && t + 1 < n && pthread_create(&threads[started], NULL, fault_in, &slices[t]) == 0)
            started++;
        else if (last > first)
            fault_in(&slices[t]); /* the last slice, or one no thread took: here */
    }
    for (int t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    *nthreads = started + 1;
    return ptr;
}

static void *cuda_alloc_host(size_t bytes)
{
    void *ptr = NULL;
    if (bytes < LARGE_HOST) {
        RT_CUDART_CHECK(cudaMallocHost(&ptr, bytes ? bytes : 1));
        return memset(ptr, 0, bytes);
    }
    pthread_mutex_lock(&large_host.lock);
    int slot = 0, threads = 0;
    while (slot < MAX_LARGE_HOST && large_host.ptr[slot])
        slot++;
    double t0 = os_now_s();
    if (slot == MAX_LARGE_HOST || !(ptr = map_faulted(bytes, &threads))) {
        pthread_mutex_unlock(&large_host.lock);
        fprintf(stderr, "train_rank: cannot map %.2f GiB of host memory for page-locked buffers: %s\n",
                (double)bytes / (1 << 30), slot == MAX_LARGE_HOST ? "too many large host buffers" : "mmap failed");
        exit(1);
    }
    double t1 = os_now_s();
    RT_CUDART_CHECK(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
    /* what the time to the first step spends here, in parts (issue 42's start-up goal) */
    fprintf(stderr, "train_rank: %.2f GiB of page-locked host memory in %.2f s: faulted in by %d threads in %.2f s "
                    "(MCC_HOST_HUGE_PAGES=%d), registered in %.2f s\n",
            (double)bytes / (1 << 30), os_now_s() - t0, threads, t1 - t0, knob_on(KNOB_HOST_HUGE_PAGES),
            os_now_s() - t1);
    large_host.ptr[slot] = ptr, large_host.bytes[slot] = bytes;
    pthread_mutex_unlock(&large_host.lock);
    return ptr;
}

static void cuda_free_host(void *ptr)
{
    pthread_mutex_lock(&large_host.lock);
    for (int i = 0; ptr && i < MAX_LARGE_HOST; i++)
        if (large_host.ptr[i] == ptr) {
            cudaHostUnregister(ptr);
            munmap(ptr, large_host.bytes[i]);
            large_host.ptr[i] = NULL;
            pthread_mutex_unlock(&large_host.lock);
            return;
        }
    pthread_mutex_unlock(&large_host.lock);
    cudaFreeHost(ptr);
}

/* The host optimizer's overlapped copy (device.h copy_async): on the copy stream, after grad_ready's
 * mark `ready`, or (ready < 0) after the work queued on the compute stream so far; the event
 * returned marks its end. Under the host's update beside the backward it is called from the host's
 * thread while the main thread queues (or captures) the compute stream, which it then must not touch. */
static void *cuda_copy_async(rt_program *p, void *dst, const void *src, size_t bytes, bool to_host, int ready)
{
    cuda_state *s = state(p);
    if (!s->copy_stream) /* made at open where the plan has ready marks: never first on the host's thread */
        RT_CUDART_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));
    cudaEvent_t done;
    RT_CUDART_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    if (ready >= 0) {
        rt_cuda_wait_ready(s->cx, s->copy_stream, ready);
    } else {
        cudaEvent_t queued;
        RT_CUDART_CHECK(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
        RT_CUDART_CHECK(cudaEventRecord(queued, stream(p)));
        RT_CUDART_CHECK(cudaStreamWaitEvent(s->copy_stream, queued, 0));
        RT_CUDART_CHECK(cudaEventDestroy(queued)); /* released once the wait is done */
    }
    RT_CUDART_CHECK(cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                    s->copy_stream));
    RT_CUDART_CHECK(cudaEventRecord(done, s->copy_stream));
    return (void *)done;
}

static void cuda_copy_wait(rt_program *p, void *done)
{
    RT_CUDART_CHECK(cudaEventSynchronize((cudaEvent_t)done));
    RT_CUDART_CHECK(cudaEventDestroy((cudaEvent_t)done));
}

static void cuda_upload(rt_program *p, void *dst, const void *src, size_t bytes)
{
    RT_CUDART_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(p)));
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
}

static void cuda_download(rt_program *p, void *dst, const void *src, size_t bytes)
{
    RT_CUDART_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(p)));
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
}

/* Within device memory, on the kernels' stream (rt_device.copy, copy2d: the shared collective kernels). */
static void cuda_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    RT_CU_CHECK(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, (CUstream)stream));
}

static void cuda_copy2d(void *stream, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t height)
{
    RT_CUDART_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice,
                                      (cudaStream_t)stream));
}

static void cuda_init(rt_program *p, float *w, uint16_t *hi, int16_t *rem, int64_t n, uint64_t key, float std,
                      bool normal, float value, const rt_shard_layout *at)
{
    long long count = n;
    unsigned long long k = key;
    unsigned blocks = (unsigned)((n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536);
    if (normal) {
        long long lv[RT_SHARD_LEVELS][4];
        for (int l = 0; l < RT_SHARD_LEVELS; l++) {
            lv[l][0] = at->level[l].inner, lv[l][1] = at->level[l].mid;
            lv[l][2] = at->level[l].full_mid, lv[l][3] = at->level[l].offset;
        }
        void *params[] = {&w, &count, &k, &std, &lv[0][0], &lv[0][1], &lv[0][2], &lv[0][3],
                          &lv[1][0], &lv[1][1], &lv[1][2], &lv[1][3], &lv[2][0], &lv[2][1], &lv[2][2], &lv[2][3],
                          &hi, &rem};
        rt_cuda_launch(state(p)->cx, "mcc_init_normal_f32", blocks, 1, 1, 256, 0, params);
    } else {
        void *params[] = {&w, &count, &value, &hi, &rem};
        rt_cuda_launch(state(p)->cx, "mcc_init_const_f32", blocks, 1, 1, 256, 0, params);
    }
}

/* Launches a function's instructions in order. A collective that runs beside the work after it
 * (ir_on_comm_stream: overlap = 1, passes/comm_overlap.c) marks its end on the comm stream, and
 * the compute stream waits for that mark before an instruction reading its result: for that
 * collective and the ones before it, not for any forked since, which the plan put beside the
 * work from there on (weight gradients reading an all-gathered output gradient run beside the
 * reduce-scatter forked before them). */
static void launch_all(rt_program *p, int func)
{
    rt_func_exec *x = &p->funcs[func];
    cuda_state *s = state(p);
    profile *pr = s->prof;
    rt_cuda_comm_end *ends = s->comm_ends + s->first_slot[func];
    cudaStream_t comm = (cudaStream_t)rt_cuda_comm_stream(s->cx);
    rt_cuda_begin_function(s->cx);
    for (int i = 0; i < x->f->ninstrs; i++) {
        int waits_for = overlapped_def(x->f, i);
        bool side = ir_on_comm_stream(&x->f->instrs[i]);
        if (waits_for >= 0 && pr) /* the wait lasts from here to the instruction's start event */
            RT_CUDART_CHECK(cudaEventRecord(pr->join[pr->offset[func] + i], stream(p)));
        if (waits_for >= 0)
            rt_cuda_comm_wait(s->cx, &ends[waits_for]);
        if (pr)
            RT_CUDART_CHECK(cudaEventRecord(pr->start[pr->offset[func] + i], stream(p)));
        if (side && pr) /* the comm stream is free from here (its earlier work done) */
            RT_CUDART_CHECK(cudaEventRecord(pr->comm_before[pr->offset[func] + i], comm));
        rt_cuda_launchers[x->f->instrs[i].op](s->cx, &x->calls[i]);
        if (pr)
            RT_CUDART_CHECK(cudaEventRecord(pr->stop[pr->offset[func] + i], stream(p)));
        if (side && pr)
            RT_CUDART_CHECK(cudaEventRecord(pr->comm_after[pr->offset[func] + i], comm));
        if (side)
            rt_cuda_comm_mark(s->cx, &ends[i]);
    }
    if (!pr || s->calls[binding(p, func)] < 2) /* the first call is not timed */
        return;
    pr->counted[func]++;
    RT_CUDART_CHECK(cudaEventRecord(pr->end_join[0], stream(p)));
    rt_cuda_comm_join(s->cx); /* what cuda_run would join next, timed */
    RT_CUDART_CHECK(cudaEventRecord(pr->end_join[1], stream(p)));
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
    float tail = 0;
    RT_CUDART_CHECK(cudaEventElapsedTime(&tail, pr->end_join[0], pr->end_join[1]));
    pr->join_ms += tail;
    for (int i = 0; i < x->f->ninstrs; i++) {
        float ms = 0;
        RT_CUDART_CHECK(cudaEventElapsedTime(&ms, pr->start[pr->offset[func] + i], pr->stop[pr->offset[func] + i]));
        pr->ms[pr->offset[func] + i] += ms;
        int waited_for = overlapped_def(x->f, i);
        if (waited_for >= 0) {
            RT_CUDART_CHECK(cudaEventElapsedTime(&ms, pr->join[pr->offset[func] + i], pr->start[pr->offset[func] + i]));
            pr->join_ms += ms;
            pr->join_by_op[x->f->instrs[waited_for].op] += ms;
            pr->wait[pr->offset[func] + i] += ms;
        }
        if (ir_on_comm_stream(&x->f->instrs[i])) { /* it starts when both the comm stream and the fork point are reached */
            float lag = 0, span = 0;
            cudaEvent_t before = pr->comm_before[pr->offset[func] + i], fork = pr->start[pr->offset[func] + i];
            RT_CUDART_CHECK(cudaEventElapsedTime(&lag, before, fork));
            RT_CUDART_CHECK(cudaEventElapsedTime(&span, lag > 0 ? fork : before, pr->comm_after[pr->offset[func] + i]));
            pr->comm_ms += span;
            pr->comm_count++;
            pr->span[pr->offset[func] + i] += span;
        }
    }
}

/* A function's first call in a binding runs eagerly; the second is captured, collectives included
 * (NCCL's kernels replay in the graph; the comm stream forks from and joins the captured stream),
 * and later calls in that binding replay it. A graph with collectives is watched as one collective
 * per launch. MCC_CUDA_GRAPHS=eager-collectives keeps functions with collectives eager, as does a
 * world whose collectives wait on the host (rt_comm_host_waits: the staged backend). */
static void cuda_run(rt_program *p, int func)
{
    cuda_state *s = state(p);
    int b = binding(p, func), call = s->calls[b]++;
    const ir_func *f = p->funcs[func].f;
    bool collectives = s->collectives[func];
    if (!s->use_graphs || call == 0 || (collectives && s->eager_collectives) || s->host_waits[func]) {
        launch_all(p, func);
        rt_cuda_comm_join(s->cx); /* collectives overlapping the function end with it */
        return;
    }
    if (!s->graphs[b]) {
        cudaGraph_t graph;
        RT_CUDART_CHECK(cudaStreamBeginCapture(stream(p), cudaStreamCaptureModeThreadLocal));
        launch_all(p, func);
        rt_cuda_comm_join(s->cx);
        RT_CUDART_CHECK(cudaStreamEndCapture(stream(p), &graph));
        RT_CUDART_CHECK(cudaGraphInstantiate(&s->graphs[b], graph, 0));
        cudaGraphDestroy(graph);
    }
    RT_CUDART_CHECK(cudaGraphLaunch(s->graphs[b], stream(p)));
    if (collectives)
        rt_nccl_watch_graph(stream(p), f->name);
}

/* Graphs are recaptured should a function run again. */
static void cuda_quiesce(rt_program *p)
{
    cuda_state *s = state(p);
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
    for (int i = 0; i < s->first_exec[p->m->nfuncs]; i++)
        if (s->graphs[i]) {
            RT_CUDART_CHECK(cudaGraphExecDestroy(s->graphs[i]));
            s->graphs[i] = NULL;
        }
}

static size_t cuda_memory_in_use(rt_program *p)
{
    size_t free_b = 0, total = 0;
    RT_CUDART_CHECK(cudaStreamSynchronize(stream(p)));
    RT_CUDART_CHECK(cudaMemGetInfo(&free_b, &total));
    return total - free_b;
}

static void *cuda_queue(rt_program *p) { return stream(p); }

static void cuda_trace_push(const char *name) { nvtxRangePushA(name); }
static void cuda_trace_pop(void) { nvtxRangePop(); }

/* NCCL bootstraps from MASTER_ADDR/MASTER_PORT (torchrun, train_rank --nproc-per-node), or over
 * MPI when mpirun started the ranks and this build has MPI. Ranks that share a GPU (more on a
 * node than it has GPUs; NCCL refuses them) or MCC_GPU_COMM=staged: the MPI world with device
 * buffers staged through host memory (comm_staged.c), under mpirun only; functions with
 * collectives then run eagerly, since their host waits cannot be captured into a graph. */
static rt_comm *cuda_world_comm(rt_program *p, const rt_rank_env *e, char *err, size_t errlen)
{
    int device = 0, ndev = 1;
    RT_CUDART_CHECK(cudaGetDevice(&device));
    RT_CUDART_CHECK(cudaGetDeviceCount(&ndev));
    enum { COMM_AUTO, COMM_NCCL, COMM_STAGED }; /* ORDER MCC_GPU_COMM's choices: auto|nccl|staged */
    int how = knob_choice(KNOB_GPU_COMM);
    bool shared = e->local_world > ndev;
    if (how == COMM_STAGED || (shared && how == COMM_AUTO)) {
#ifdef MCC_HAVE_MPI
        rt_comm *host = rt_comm_world_mpi(e, err, errlen);
        if (!host)
            return NULL;
        if (e->rank == 0)
            fprintf(stderr, "train_rank: note: %d ranks on %d GPU%s of this node: collectives and pipeline transfers go "
                            "through host memory over MPI (MCC_GPU_COMM=staged), correct but slow; for speed, one rank a GPU\n",
                    e->local_world, ndev, ndev == 1 ? "" : "s");
        state(p)->eager_collectives = true;
        return rt_comm_world_staged(host);
#else
        snprintf(err, errlen, "%d ranks share this node's %d GPU%s, which NCCL refuses, and the host-staged path "
                 "(MCC_GPU_COMM=staged) needs MPI, which this build lacks: install Open MPI (libopenmpi-dev) and "
                 "rebuild mcc, or start one rank a GPU", e->local_world, ndev, ndev == 1 ? "" : "s");
        return NULL;
#endif
    }
    if (shared) {
        snprintf(err, errlen, "%d ranks share this node's %d GPU%s, which NCCL refuses (MCC_GPU_COMM=nccl): start one "
                 "rank a GPU, or unset MCC_GPU_COMM to go through host memory (under mpirun)",
                 e->local_world, ndev, ndev == 1 ? "" : "s");
        return NULL;
    }
    rt_comm *bootstrap = NULL;
#ifdef MCC_HAVE_MPI
    if (!e->master_addr && !getenv("NCCL_COMM_ID"))
        bootstrap = rt_comm_world_mpi(e, err, errlen);
#endif
    return rt_comm_world_nccl(e, device, bootstrap, err, errlen);
}

const rt_device rt_cuda_device = {RT_DEVICE_CUDA, cuda_open, cuda_alloc,         cuda_free,  cuda_upload, cuda_download,
                                  cuda_init, cuda_run,  cuda_memory_in_use, cuda_close, cuda_queue, cuda_world_comm,
                                  cuda_alloc_window, cuda_quiesce, cuda_trace_push, cuda_trace_pop,
                                  cuda_alloc_host, cuda_free_host, cuda_copy_async, cuda_copy_wait, cuda_copy,
                                  cuda_copy2d};

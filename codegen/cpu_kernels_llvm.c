/* cpu_kernels_llvm.c — the CPU backend's elementwise kernels, generated as LLVM IR: one loop per op
 * (runtime/cpu_kernels.h: rt_elementwise_kind_of), with the C kernels' formulas, optimised (and
 * vectorised where the math allows) by LLVM's O2 pipeline. Their object (emit_object.c, cached)
 * holds `mcc_plan_image`, the table of these functions, indexed by op. */
#include "cpu_kernels_llvm.h"

#include "runtime/cpu_kernels.h"

#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>

#define GELU_K 0.7978845608028654 /* sqrt(2/pi), as runtime/cpu_kernels.c */
#define GELU_C 0.044715

typedef struct {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef f32, i64;
} gen;

static LLVMValueRef cf(gen *g, double v) { return LLVMConstReal(g->f32, v); }

/* A call of libm's float function `name` (tanhf, expf, sqrtf). */
static LLVMValueRef libm(gen *g, const char *name, LLVMValueRef x)
{
    LLVMTypeRef ty = LLVMFunctionType(g->f32, &g->f32, 1, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
    if (!fn)
        fn = LLVMAddFunction(g->mod, name, ty);
    return LLVMBuildCall2(g->b, ty, fn, &x, 1, "");
}

static LLVMValueRef fmul(gen *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFMul(g->b, x, y, ""); }
static LLVMValueRef fadd(gen *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFAdd(g->b, x, y, ""); }
static LLVMValueRef fsub(gen *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFSub(g->b, x, y, ""); }

/* tanh(sqrt(2/pi) (x + 0.044715 x^3)) */
static LLVMValueRef gelu_t(gen *g, LLVMValueRef x)
{
    LLVMValueRef x3 = fmul(g, fmul(g, x, x), x);
    return libm(g, "tanhf", fmul(g, cf(g, GELU_K), fadd(g, x, fmul(g, cf(g, GELU_C), x3))));
}

static LLVMValueRef sigmoid(gen *g, LLVMValueRef x)
{
    return LLVMBuildFDiv(g->b, cf(g, 1), fadd(g, cf(g, 1), libm(g, "expf", LLVMBuildFNeg(g->b, x, ""))), "");
}

/* max(x, 0), 0 for NaN as the C kernels' x > 0 test */
static LLVMValueRef relu_of(gen *g, LLVMValueRef x)
{
    return LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOGT, x, cf(g, 0), ""), x, cf(g, 0), "");
}

/* The element formula of op on a (and b), attr: the C kernels' (runtime/cpu_kernels.c). */
static LLVMValueRef formula(gen *g, ir_op op, LLVMValueRef a, LLVMValueRef b, LLVMValueRef attr)
{
    switch (op) {
    case IR_OP_ADD: case IR_OP_ACCUMULATE: return fadd(g, a, b);
    case IR_OP_MUL: return fmul(g, a, b);
    case IR_OP_SCALE: return fmul(g, a, attr);
    case IR_OP_SQRT: return libm(g, "sqrtf", a);
    case IR_OP_COPY: return b;
    case IR_OP_FILL: return attr;
    case IR_OP_GELU: return fmul(g, fmul(g, cf(g, 0.5), a), fadd(g, cf(g, 1), gelu_t(g, a)));
    case IR_OP_GELU_GRAD: { /* dy * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)), a = dy, b = x */
        LLVMValueRef t = gelu_t(g, b), x2 = fmul(g, b, b);
        LLVMValueRef du = fmul(g, cf(g, GELU_K), fadd(g, cf(g, 1), fmul(g, cf(g, 3 * GELU_C), x2)));
        LLVMValueRef d = fadd(g, fmul(g, cf(g, 0.5), fadd(g, cf(g, 1), t)),
                              fmul(g, fmul(g, fmul(g, cf(g, 0.5), b), fsub(g, cf(g, 1), fmul(g, t, t))), du));
        return fmul(g, a, d);
    }
    case IR_OP_SILU: return fmul(g, a, sigmoid(g, a));
    case IR_OP_SILU_GRAD: { /* dy * s (1 + x (1 - s)), a = dy, b = x */
        LLVMValueRef s = sigmoid(g, b);
        return fmul(g, a, fmul(g, s, fadd(g, cf(g, 1), fmul(g, b, fsub(g, cf(g, 1), s)))));
    }
    case IR_OP_SQUARED_RELU: { /* relu(x)^2 */
        LLVMValueRef relu = relu_of(g, a);
        return fmul(g, relu, relu);
    }
    case IR_OP_SQUARED_RELU_GRAD: return fmul(g, a, fmul(g, cf(g, 2), relu_of(g, b))); /* dy 2 relu(x) */
    default: return NULL;
    }
}

/* void mcc_cpu_<op>(float *r, const float *a, const float *b, int64_t n, float attr):
 * for (i = 0; i < n; i++) r[i] = formula(a[i], b[i], attr) */
static LLVMValueRef kernel(gen *g, ir_op op)
{
    LLVMTypeRef pf = LLVMPointerType(g->f32, 0);
    LLVMTypeRef params[5] = {pf, pf, pf, g->i64, g->f32};
    char name[64];
    snprintf(name, sizeof name, "mcc_cpu_%s", ir_ops[op].name);
    LLVMValueRef fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(LLVMVoidTypeInContext(g->ctx), params, 5, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    for (int i = 0; i < 3; i++) /* the buffers never overlap except r == a, which reads before writing */
        LLVMAddAttributeAtIndex(fn, (unsigned)i + 1,
                                LLVMCreateEnumAttribute(g->ctx, LLVMGetEnumAttributeKindForName("nocapture", 9), 0));
    LLVMValueRef r = LLVMGetParam(fn, 0), a = LLVMGetParam(fn, 1), b = LLVMGetParam(fn, 2);
    LLVMValueRef n = LLVMGetParam(fn, 3), attr = LLVMGetParam(fn, 4);
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, fn, "entry");
    LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(g->ctx, fn, "loop");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, fn, "done");
    LLVMPositionBuilderAtEnd(g->b, entry);
    LLVMValueRef zero = LLVMConstInt(g->i64, 0, 0);
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, n, zero, ""), loop, done);
    LLVMPositionBuilderAtEnd(g->b, loop);
    LLVMValueRef i = LLVMBuildPhi(g->b, g->i64, "i");
    rt_elementwise_kind kind = rt_elementwise_kind_of(op);
    LLVMValueRef av = NULL, bv = NULL;
    if (kind != RT_EW_FILL)
        av = LLVMBuildLoad2(g->b, g->f32, LLVMBuildGEP2(g->b, g->f32, a, &i, 1, ""), "a");
    if (kind == RT_EW_BINARY || kind == RT_EW_INTO)
        bv = LLVMBuildLoad2(g->b, g->f32, LLVMBuildGEP2(g->b, g->f32, b, &i, 1, ""), "b");
    LLVMBuildStore(g->b, formula(g, op, av, bv, attr), LLVMBuildGEP2(g->b, g->f32, r, &i, 1, ""));
    LLVMValueRef next = LLVMBuildAdd(g->b, i, LLVMConstInt(g->i64, 1, 0), "");
    LLVMValueRef incoming[2] = {zero, next};
    LLVMBasicBlockRef from[2] = {entry, loop};
    LLVMAddIncoming(i, incoming, from, 2);
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, next, n, ""), loop, done);
    LLVMPositionBuilderAtEnd(g->b, done);
    LLVMBuildRetVoid(g->b);
    return fn;
}

void cg_add_cpu_kernels(LLVMContextRef ctx, LLVMModuleRef mod, const char *table)
{
    gen g = {ctx, mod, LLVMCreateBuilderInContext(ctx), LLVMFloatTypeInContext(ctx), LLVMInt64TypeInContext(ctx)};
    LLVMTypeRef ptr = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
    LLVMValueRef entries[IR_NUM_OPS];
    for (int op = 0; op < IR_NUM_OPS; op++)
        entries[op] = rt_elementwise_kind_of((ir_op)op) == RT_EW_NONE ? LLVMConstNull(ptr)
                                                                       : LLVMConstBitCast(kernel(&g, (ir_op)op), ptr);
    LLVMDisposeBuilder(g.b);
    LLVMValueRef array = LLVMConstArray(ptr, entries, IR_NUM_OPS);
    LLVMValueRef gv = LLVMAddGlobal(mod, LLVMTypeOf(array), table);
    LLVMSetInitializer(gv, array);
    LLVMSetGlobalConstant(gv, 1);
}

bool cg_optimise_cpu_kernels(LLVMModuleRef mod, LLVMTargetMachineRef tm, char *err, size_t errlen)
{
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(mod, CG_CPU_KERNELS_PIPELINE, tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (e) {
        char *msg = LLVMGetErrorMessage(e);
        snprintf(err, errlen, "LLVM could not optimise the CPU kernels: %s", msg);
        LLVMDisposeErrorMessage(msg);
        return false;
    }
    return true;
}

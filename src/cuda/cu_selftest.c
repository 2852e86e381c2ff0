/* cu_selftest.c: the start-up self-test of a CUDA device (docs/numerics.md "Devices"):
 * the arithmetic probes of src/kernels/fprobe.h through the kernels' own __fmaf_rn,
 * __fdiv_rn, __fsqrt_rn, __fmul_rn and __fadd_rn (cuk_probe), then kern_backend_check,
 * every op of the backend against the CPU on crafted inputs, which decides. */
#include "cu_internal.h"
#include "../base/progress.h"
#include "../kernels/fprobe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs the probe kernel on the triples in, results to out (5 words each). */
static enum kn_status probe_run(struct cu_backend *cb, const uint32_t *in, uint32_t *out,
                                struct kn_err *err)
{
    struct kern_stream_shape shape = {.max_tokens = 1};
    struct kern_stream *ks = cb->base.ops->stream_create(&cb->base, &shape, NULL, err);
    if (!ks)
        return err->status;
    struct cu_stream *s = cu_st(ks);
    s->err = (struct kn_err){0};
    if (!cu_ctx(cb, &s->err)) {
        *err = s->err;
        ks->ops->stream_free(ks);
        return err->status;
    }
    size_t nin = 3 * (size_t)KERN_FPROBE_N * 4, nout = 5 * (size_t)KERN_FPROBE_N * 4;
    CUdeviceptr pin = cu_stage(s, CU_SLOT_ACT, in, nin);
    CUdeviceptr pout = cu_scratch(s, CU_SLOT_OUT, nout);
    int n = KERN_FPROBE_N;
    if (pin && pout) {
        cu_launch(s, CUK_probe, (uint64_t)(n + 127) / 128, 1, 128, 1, (void *[]){&pin, &pout, &n});
        if (s->err.status == KN_OK)
            cu_check(s, cb->d->MemcpyDtoHAsync(out, pout, nout, s->st), "cuMemcpyDtoHAsync");
    }
    enum kn_status st = ks->ops->end(ks, err);
    ks->ops->stream_free(ks);
    return st;
}

void cu_selftest_run(struct cu_backend *cb, struct cu_selftest *t)
{
    memset(t, 0, sizeof *t);
    double t0 = kn_now();
    struct kn_err err = {0};
    uint32_t *in = malloc(3 * KERN_FPROBE_N * 4), *out = malloc(5 * KERN_FPROBE_N * 4);
    char probes[400] = "";
    if (!in || !out) {
        snprintf(probes, sizeof probes, "probes: out of memory");
    } else {
        kern_fprobe_inputs(in);
        kn_progress_stage("%s: arithmetic probes", cb->name);
        if (!cu_ctx(cb, &err) || probe_run(cb, in, out, &err) != KN_OK) {
            snprintf(probes, sizeof probes, "probes did not run: %.300s", err.msg);
        } else {
            kern_fprobe_judge(in, out, &t->probe);
            t->probed = true;
            snprintf(probes, sizeof probes, "%s", t->probe.report);
        }
    }
    free(in);
    free(out);

    char ops[512];
    t->ops_equal = kern_fprobe_ops(&cb->base, ops, sizeof ops);
    const struct kern_fprobe *fp = &t->probe;
    t->canonical = t->probed && t->ops_equal && fp->fma_fused && fp->div_rounded &&
                   fp->sqrt_rounded && fp->denormals_kept && fp->arith_ok;
    t->seconds = kn_now() - t0;
    snprintf(t->report, sizeof t->report, "%s; %s (%.2f s)", probes, ops, t->seconds);
}

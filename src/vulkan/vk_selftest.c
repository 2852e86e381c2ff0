/* vk_selftest.c: the start-up self-test of a Vulkan device (docs/numerics.md "Devices").
 * canonical-1 needs IEEE add and multiply (Vulkan's are correctly rounded), a fused
 * fmaf, correctly rounded division and sqrt and denormals kept. The probes run the
 * driver's own fma, /, sqrt, * and + (shaders/selftest.comp) on crafted triples and
 * compare every result with the CPU's; division and sqrt also on vkk_divsqrt_probe's hard
 * cases, and where the driver's differ the shaders switch to their integer builds
 * (kn_common.glsl); then kern_backend_check runs every op of the
 * backend against the CPU on crafted inputs, which decides: a device whose ops give the
 * CPU's bytes computes canonical-1 (the shaders work around what the probes find, e.g.
 * an unfused fma), one that does not gets its own class. The probes' findings go into
 * the report either way, so a failed check is named. The check's verdict is recorded
 * (vk_verdict.c) and a later start of the same build on the same device and driver whose
 * probes and modes come out the same takes it instead of running the check again. */
#include "vk_backend.h"
#include "vk_kern.h"
#include "vk_ops.h"
#include "../base/progress.h"
#include "../crypto/buildid.h"
#include "../kernels/fprobe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_N = KERN_FPROBE_N };

static enum kn_status st_probe(struct vkr *rt, const uint32_t *in, uint32_t *out,
                               struct kn_err *err)
{
    struct vkr_cmd *c = vkr_cmd_create(rt, err);
    if (!c)
        return err ? err->status : KN_E_NOMEM;
    const struct vkr_pipe *p = vkr_pipe_get(
        rt, &(struct vkr_pipe_desc){.shader = "selftest", .n_bufs = 2, .push_bytes = 4}, err);
    enum kn_status st = p ? KN_OK : (err ? err->status : KN_E_INTERNAL);
    struct vkr_buf *b = p ? vkr_buf_alloc(rt, 5 * ST_N * 4, VKR_MEM_DEVICE, false, err) : NULL;
    if (p && !b)
        st = err ? err->status : KN_E_NOMEM;
    if (b) {
        uint32_t n = ST_N;
        vkr_cmd_begin(c);
        struct vkr_bind bind[2] = {vkr_cmd_stage(c, in, 3 * ST_N * 4), {.buf = b, .write = true}};
        vkr_cmd_dispatch(c, p, bind, &n, vkr_groups(ST_N, 64), 1, 1);
        vkr_cmd_read(c, b, 0, out, 5 * ST_N * 4);
        st = vkr_cmd_submit(c, err);
    }
    vkr_buf_free(rt, b);
    vkr_cmd_free(c);
    return st;
}

void vk_selftest_run(struct vk_backend *vb, enum vk_check check, struct vk_selftest *t)
{
    memset(t, 0, sizeof *t);
    double t0 = kn_now();
    struct kn_err err = {0};
    uint32_t *in = malloc(3 * ST_N * 4), *out = malloc(5 * ST_N * 4);
    char probes[800] = "";
    bool probed = false;
    struct kern_fprobe *fp = &t->probe;
    if (!in || !out) {
        snprintf(probes, sizeof probes, "probes: out of memory");
    } else {
        kern_fprobe_inputs(in);
        kn_progress_stage("%s: arithmetic probes", vb->name);
        if (st_probe(vb->rt, in, out, &err) != KN_OK) {
            snprintf(probes, sizeof probes, "probes did not run: %.300s", err.msg);
        } else {
            probed = true;
            kern_fprobe_judge(in, out, fp);
            /* division and sqrt on the hard cases too (within 2^-44 of a tie); where the
             * driver's differ anywhere, the shaders use the integer builds */
            struct vkk_divsqrt dsq = {0};
            int hd = 0, hs = 0;
            char dsr[128] = "";
            if (vkk_divsqrt_probe(vb->rt, &dsq, &hd, &hs, &err) == KN_OK) {
                fp->div_rounded = fp->div_rounded && hd == 0;
                fp->sqrt_rounded = fp->sqrt_rounded && hs == 0;
                dsq.soft_div = !fp->div_rounded;
                dsq.soft_sqrt = !fp->sqrt_rounded;
                vkk_divsqrt_set(vb->rt, dsq);
                t->div_soft = dsq.soft_div;
                t->sqrt_soft = dsq.soft_sqrt;
                t->divsqrt_ok = true;
                if (t->div_soft || t->sqrt_soft)
                    snprintf(dsr, sizeof dsr, "; %s%s%s not correctly rounded on hard cases: the shaders use the integer build",
                             t->div_soft ? "division" : "", t->div_soft && t->sqrt_soft ? " and " : "",
                             t->sqrt_soft ? "sqrt" : "");
            } else {
                snprintf(dsr, sizeof dsr, "; division and sqrt probe failed (%.60s)", err.msg);
            }
            /* the soft-capped attention's double math (kern_tanhf): the driver's double
             * fma where it is fused, else the integer build; where the double math is not
             * exact either way, the op is left out (its layers stay on the CPU) */
            char dd[160] = "";
            if (vb->ops.attention_softcap) {
                bool soft = false;
                int bad = 0;
                if (vkk_dfma_probe(vb->rt, &soft, &bad, &err) == KN_OK) {
                    vkk_dfma_set(vb->rt, soft);
                    t->dfma_soft = soft;
                    snprintf(dd, sizeof dd, "; double fma %s", soft ? "not fused: the soft-capped "
                             "attention uses the integer build" : "fused");
                } else {
                    vb->ops.attention_softcap = NULL;
                    snprintf(dd, sizeof dd, "; double math not exact (%.100s)", err.msg);
                }
            }
            snprintf(probes, sizeof probes, "%s%s%s", fp->report, dsr, dd);
        }
    }
    free(in);
    free(out);

    /* The fma mode the shaders run (else probed at their first use, in the check). */
    enum vkk_fma fma = VKK_FMA_NATIVE;
    struct kn_err ferr = {0};
    bool fma_ok = probed && vkk_fma_probe(vb->rt, &fma, &ferr) == KN_OK;
    if (fma_ok)
        vkk_fma_set(vb->rt, fma);

    /* The ops against the CPU: the check that decides, or its record. What this start
     * found and chose is the record's key (with the build, device and driver): every
     * finding and mode that changes which shaders run or what the check would see. */
    char findings[sizeof probes + 400];
    snprintf(findings, sizeof findings,
             "probed %d; fma mode %d; divsqrt %d %d %d; dfma %d; softcap %d; dot %d; %s; %.300s",
             probed, fma_ok ? (int)fma : -1, t->divsqrt_ok, t->div_soft, t->sqrt_soft,
             t->dfma_soft, vb->ops.attention_softcap != NULL, vkk_dot(vb->rt), probes,
             fma_ok ? "" : ferr.msg);
    char ops[VK_VERDICT_OPS_LEN];
    struct vk_verdict_plan plan;
    struct kn_err why = {0};
    bool planned = vk_verdict_plan(vkr_device_info(vb->rt), kn_build_id(), findings, &plan, &why);
    enum vk_verdict_load lr = VK_VERDICT_MISS;
    if (!planned && why.msg[0])
        kn_log(KN_LOG_DEBUG, "%s: device verdict cache not used: %s", vb->name, why.msg);
    if (planned && check == VK_CHECK_RECORDED &&
        (lr = vk_verdict_load(&plan, &t->ops_equal, ops, &why)) == VK_VERDICT_BAD)
        kn_log(KN_LOG_DEBUG, "%s: device verdict %s ignored: %s", vb->name, plan.path, why.msg);
    t->recorded = planned && check == VK_CHECK_RECORDED && lr == VK_VERDICT_HIT;
    if (!t->recorded) {
        t->ops_equal = kern_fprobe_ops(&vb->base, ops, sizeof ops);
        /* Only a pass is recorded: a failure may be the moment's (out of memory, a lost
         * device) and is worth diagnosing again, so a failing device checks every start. */
        if (planned && t->ops_equal)
            vk_verdict_store(&plan, t->ops_equal, ops);
    }
    t->canonical = probed && t->ops_equal && t->divsqrt_ok && fp->denormals_kept && fp->arith_ok;
    t->seconds = kn_now() - t0;
    snprintf(t->report, sizeof t->report, "%.780s; %.1000s%s (%.2f s)", probes, ops,
             t->recorded ? " [the verdict recorded by this build on this device and driver]" : "",
             t->seconds);
}

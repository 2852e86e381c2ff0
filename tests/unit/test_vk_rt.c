/* test_vk_rt.c: the Vulkan runtime (src/vulkan/vk_rt.h) end to end on the first Vulkan
 * device (Mesa's lavapipe in CI): buffers up and down, the pipeline cache, a shader from
 * the embedded table with specialization and push constants, two dependent dispatches in
 * one pass (the automatic barrier), staged host arrays and reads, and the errors a pass
 * keeps. Skips (exit 77) with the reason when the build has no Vulkan or there is no
 * device. */
#include "check.h"
#include "vulkan/vk_rt.h"

#include <math.h>
#include <stdint.h>

static uint32_t rng = 12345;
static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((int32_t)(rng >> 8) - (1 << 23)) / (float)(1 << 20);
}

/* The CPU's y + a * s, two roundings (this file is built with -ffp-contract=off). */
static float ref_step(float y, float a, float s)
{
    float t = a * s;
    return y + t;
}

static void test_info(struct vkr *rt)
{
    const struct vkr_info *in = vkr_device_info(rt);
    printf("device: %s, driver %s (%s), %s, %.0f MiB, subgroup %u, fp64 %d int8 %d dot %d "
           "denorm-preserve32 %d rte32 %d\n", in->name, in->driver, in->driver_info, in->type,
           (double)in->device_local_bytes / (1 << 20), in->subgroup_size, in->float64, in->int8,
           in->int_dot, in->denorm_preserve[1], in->rte[1]);
    CHECK(in->name[0] != 0);
    CHECK(in->max_storage_range >= (1u << 27));
    CHECK(in->max_group_count[0] >= 65535);
    CHECK(in->max_push_bytes >= 128);
    CHECK(in->subgroup_size >= 1);
    struct vkr_info d;
    struct kn_err err = {0};
    CHECK(vkr_describe(0, &d, &err) == KN_OK);
    CHECK_STR(d.name, in->name);
    CHECK(vkr_describe(9999, &d, &err) == KN_E_ARG);
    CHECKF(strstr(err.msg, "vulkan:9999") != NULL, "%s", err.msg);
    CHECK(vkr_device_count(&err) >= 1);
}

static void test_buffers(struct vkr *rt)
{
    struct kn_err err = {0};
    enum { N = 3000 };
    uint8_t src[N], dst[N];
    for (int i = 0; i < N; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    for (int kind = 0; kind < 2; kind++) {
        struct vkr_buf *b = vkr_buf_alloc(rt, N, (enum vkr_mem)kind, true, &err);
        CHECKF(b != NULL, "%s", err.msg);
        if (!b)
            continue;
        CHECK(vkr_buf_size(b) >= N);
        CHECK((vkr_buf_map(b) != NULL) == (kind == VKR_MEM_HOST));
        memset(dst, 0xAA, N);
        CHECK(vkr_buf_download(rt, b, 0, dst, N, &err) == KN_OK);
        int zeros = 0;
        for (int i = 0; i < N; i++)
            zeros += dst[i] == 0;
        CHECK_EQ_INT(zeros, N);
        CHECK(vkr_buf_upload(rt, b, 100, src, N - 100, &err) == KN_OK);
        CHECK(vkr_buf_download(rt, b, 100, dst, N - 100, &err) == KN_OK);
        CHECK(memcmp(src, dst, N - 100) == 0);
        CHECK(vkr_buf_upload(rt, b, 100, src, N, &err) == KN_E_INTERNAL); /* past the end */
        CHECKF(strstr(err.msg, "past the end") != NULL, "%s", err.msg);
        vkr_buf_free(rt, b);
    }
}

static void test_pipelines(struct vkr *rt)
{
    struct kn_err err = {0};
    CHECK(vkr_shader_find("rt_add_f32") != NULL);
    CHECK(vkr_shader_find("no_such_shader") == NULL);
    uint32_t s64 = 64, s32 = 32;
    struct vkr_pipe_desc d = {.shader = "rt_add_f32", .n_bufs = 2, .push_bytes = 8,
                              .spec = &s64, .n_spec = 1};
    const struct vkr_pipe *a = vkr_pipe_get(rt, &d, &err);
    CHECKF(a != NULL, "%s", err.msg);
    CHECK(vkr_pipe_get(rt, &d, &err) == a);
    d.spec = &s32;
    const struct vkr_pipe *b = vkr_pipe_get(rt, &d, &err);
    CHECK(b != NULL && b != a);
    d.shader = "no_such_shader";
    CHECK(vkr_pipe_get(rt, &d, &err) == NULL);
    CHECKF(strstr(err.msg, "no_such_shader") != NULL, "%s", err.msg);
}

/* y += a*s twice in one pass (the second dispatch reads what the first wrote), with the
 * inputs written and the result read inside the pass, against the CPU's bits. */
static void test_dispatch(struct vkr *rt, uint32_t wg, int n)
{
    struct kn_err err = {0};
    float *y = malloc(n * sizeof *y), *a = malloc(n * sizeof *a), *out = malloc(n * sizeof *out);
    float *ref = malloc(n * sizeof *ref);
    float s = 1.0f + 1.0f / 1024 + 1.0f / (1 << 20);
    for (int i = 0; i < n; i++) {
        y[i] = rnd();
        a[i] = rnd();
        ref[i] = ref_step(ref_step(y[i], a[i], s), a[i], s);
    }
    /* Where fma(a, s, y) != y + a*s the test would see a contraction. */
    int fused_differs = 0;
    for (int i = 0; i < n; i++)
        fused_differs += fmaf(a[i], s, y[i]) != ref_step(y[i], a[i], s);
    CHECK(fused_differs > 0);

    struct vkr_buf *by = vkr_buf_alloc(rt, n * sizeof(float), VKR_MEM_DEVICE, false, &err);
    struct vkr_buf *ba = vkr_buf_alloc(rt, n * sizeof(float), VKR_MEM_DEVICE, false, &err);
    struct vkr_cmd *c = vkr_cmd_create(rt, &err);
    CHECK(by && ba && c);
    if (!by || !ba || !c)
        goto out;
    const struct vkr_pipe *p = vkr_pipe_get(rt, &(struct vkr_pipe_desc){
        .shader = "rt_add_f32", .n_bufs = 2, .push_bytes = 8, .spec = &wg, .n_spec = 1}, &err);
    CHECK(p != NULL);
    struct { uint32_t n; float s; } push = {(uint32_t)n, s};
    for (int round = 0; round < 2; round++) { /* the cmd is reused */
        memset(out, 0, n * sizeof *out);
        vkr_cmd_begin(c);
        vkr_cmd_write(c, by, 0, y, n * sizeof *y);
        vkr_cmd_write(c, ba, 0, a, n * sizeof *a);
        struct vkr_bind b[2] = {{.buf = by, .write = true}, {.buf = ba}};
        vkr_cmd_dispatch(c, p, b, &push, vkr_groups(n, wg), 1, 1);
        vkr_cmd_dispatch(c, p, b, &push, vkr_groups(n, wg), 1, 1);
        vkr_cmd_read(c, by, 0, out, n * sizeof *out);
        CHECK(vkr_cmd_submit(c, &err) == KN_OK);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += memcmp(&out[i], &ref[i], sizeof(float)) != 0;
        CHECKF(bad == 0, "wg %u n %d: %d of %d values differ from the CPU", wg, n, bad, n);
    }
    /* A staged array bound directly: a = staged copy, y read back through download. */
    vkr_cmd_begin(c);
    vkr_cmd_write(c, by, 0, y, n * sizeof *y);
    struct vkr_bind st = vkr_cmd_stage(c, a, n * sizeof *a);
    CHECK(st.buf != NULL);
    struct vkr_bind b2[2] = {{.buf = by, .write = true}, st};
    vkr_cmd_dispatch(c, p, b2, &push, vkr_groups(n, wg), 1, 1);
    CHECK(vkr_cmd_submit(c, &err) == KN_OK);
    CHECK(vkr_buf_download(rt, by, 0, out, n * sizeof *out, &err) == KN_OK);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float r1 = ref_step(y[i], a[i], s);
        bad += memcmp(&out[i], &r1, sizeof(float)) != 0;
    }
    CHECK_EQ_INT(bad, 0);
out:
    vkr_cmd_free(c);
    vkr_buf_free(rt, by);
    vkr_buf_free(rt, ba);
    free(y), free(a), free(out), free(ref);
}

/* A pass keeps its first error, runs nothing, and the next pass works. */
static void test_errors(struct vkr *rt)
{
    struct kn_err err = {0};
    uint32_t wg = 64;
    struct vkr_buf *b = vkr_buf_alloc(rt, 256, VKR_MEM_DEVICE, true, &err);
    struct vkr_cmd *c = vkr_cmd_create(rt, &err);
    const struct vkr_pipe *p = vkr_pipe_get(rt, &(struct vkr_pipe_desc){
        .shader = "rt_add_f32", .n_bufs = 2, .push_bytes = 8, .spec = &wg, .n_spec = 1}, &err);
    CHECK(b && c && p);
    if (!b || !c || !p)
        goto out;
    struct { uint32_t n; float s; } push = {64, 1.0f};
    vkr_cmd_begin(c);
    struct vkr_bind bad[2] = {{.buf = b, .off = 128, .bytes = 256, .write = true}, {.buf = b}};
    vkr_cmd_dispatch(c, p, bad, &push, 1, 1, 1);
    CHECK(vkr_cmd_failed(c));
    struct vkr_bind ok[2] = {{.buf = b, .write = true}, {.buf = b}};
    vkr_cmd_dispatch(c, p, ok, &push, 1u << 31, 1, 1); /* not recorded: already failed */
    CHECK(vkr_cmd_submit(c, &err) == KN_E_INTERNAL);
    CHECKF(strstr(err.msg, "rt_add_f32") && strstr(err.msg, "binding 0"), "%s", err.msg);
    vkr_cmd_begin(c);
    vkr_cmd_dispatch(c, p, ok, &push, 0xffffffffu, 1, 1);
    CHECK(vkr_cmd_submit(c, &err) == KN_E_LIMIT);
    CHECKF(strstr(err.msg, "workgroups") != NULL, "%s", err.msg);
    vkr_cmd_begin(c);
    vkr_cmd_fail(c, KN_E_UNSUPPORTED, "op x: shape y");
    vkr_cmd_fail(c, KN_E_INTERNAL, "a second failure");
    CHECK(vkr_cmd_submit(c, &err) == KN_E_UNSUPPORTED);
    CHECK_STR(err.msg, "op x: shape y");
    vkr_cmd_begin(c);
    vkr_cmd_dispatch(c, p, ok, &push, 1, 1, 1);
    CHECK(vkr_cmd_submit(c, &err) == KN_OK);
out:
    vkr_cmd_free(c);
    vkr_buf_free(rt, b);
}

int main(void)
{
    struct kn_err err = {0};
    struct vkr *rt = NULL;
    if (vkr_open(0, &rt, &err) != KN_OK) {
        printf("skip: %s\n", err.msg);
        CHECK(!vkr_built() || vkr_device_count(&err) == 0);
        return check_failures ? 1 : 77;
    }
    test_info(rt);
    test_buffers(rt);
    test_pipelines(rt);
    test_dispatch(rt, 64, 1000);
    test_dispatch(rt, 32, 33);
    test_dispatch(rt, 128, 70001); /* bigger than the arena's first chunk */
    test_errors(rt);
    vkr_close(rt);
    CHECK_DONE();
}

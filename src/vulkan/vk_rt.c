/* vk_rt.c: the Vulkan runtime (vk_rt.h) on the Vulkan loader. Built only when CMake finds
 * the loader and glslc; vk_rt_absent.c stands in otherwise. */
#include "vk_rt.h"

#include <vulkan/vulkan.h>

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------ */

static const char *vkr_result_str(VkResult r)
{
    switch (r) {
#define R(x) case x: return #x;
        R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_EVENT_SET) R(VK_EVENT_RESET)
        R(VK_INCOMPLETE) R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED)
        R(VK_ERROR_LAYER_NOT_PRESENT) R(VK_ERROR_EXTENSION_NOT_PRESENT)
        R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER)
        R(VK_ERROR_TOO_MANY_OBJECTS) R(VK_ERROR_FORMAT_NOT_SUPPORTED)
        R(VK_ERROR_FRAGMENTED_POOL) R(VK_ERROR_UNKNOWN) R(VK_ERROR_OUT_OF_POOL_MEMORY)
        R(VK_ERROR_INVALID_EXTERNAL_HANDLE) R(VK_ERROR_FRAGMENTATION)
        R(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS) R(VK_PIPELINE_COMPILE_REQUIRED)
        R(VK_ERROR_INVALID_SHADER_NV)
#undef R
    default:
        return "an unknown VkResult";
    }
}

static enum kn_status vk_fail(struct kn_err *err, const char *call, VkResult r, const char *what)
{
    enum kn_status st = (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
                            ? KN_E_NOMEM
                            : KN_E_UNSUPPORTED;
    return kn_fail(err, st, "Vulkan: %s: %s (%d)%s%s", call, vkr_result_str(r), (int)r,
                   what ? ": " : "", what ? what : "");
}

/* ---- the shader table -------------------------------------------------------------- */

const struct vkr_shader *vkr_shader_find(const char *name)
{
    for (int i = 0; i < vkr_shader_count; i++)
        if (strcmp(vkr_shaders[i].name, name) == 0)
            return &vkr_shaders[i];
    return NULL;
}

bool vkr_built(void)
{
    return true;
}

/* ---- the instance ------------------------------------------------------------------ */

/* One instance for the process, made on first use (device listing and every open). */
static pthread_once_t inst_once = PTHREAD_ONCE_INIT;
static VkInstance inst;
static VkResult inst_result = VK_ERROR_INITIALIZATION_FAILED;
static uint32_t inst_api;

static void inst_create(void)
{
    uint32_t api = VK_API_VERSION_1_0;
    PFN_vkEnumerateInstanceVersion ev =
        (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
    if (ev)
        ev(&api);
    inst_api = api >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3
               : api >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : api;
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "kinetic",
        .applicationVersion = VK_MAKE_VERSION(0, 1, 0),
        .pEngineName = "kinetic",
        .apiVersion = inst_api,
    };
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    inst_result = vkCreateInstance(&ci, NULL, &inst);
}

static enum kn_status inst_get(struct kn_err *err)
{
    pthread_once(&inst_once, inst_create);
    if (inst_result != VK_SUCCESS)
        return vk_fail(err, "vkCreateInstance", inst_result,
                       inst_result == VK_ERROR_INCOMPATIBLE_DRIVER
                           ? "no Vulkan driver is installed (Mesa's lavapipe: mesa-vulkan-drivers)"
                           : NULL);
    if (inst_api < VK_API_VERSION_1_2)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "Vulkan: the loader offers Vulkan %u.%u; Kinetic needs 1.2 or later",
                       VK_API_VERSION_MAJOR(inst_api), VK_API_VERSION_MINOR(inst_api));
    return KN_OK;
}

static enum kn_status phys_get(int index, VkPhysicalDevice *out, struct kn_err *err)
{
    enum kn_status st = inst_get(err);
    if (st != KN_OK)
        return st;
    uint32_t n = 0;
    VkResult r = vkEnumeratePhysicalDevices(inst, &n, NULL);
    if (r != VK_SUCCESS)
        return vk_fail(err, "vkEnumeratePhysicalDevices", r, NULL);
    if (n == 0)
        return kn_fail(err, KN_E_UNSUPPORTED, "Vulkan: no Vulkan device found (for a CPU "
                       "device install Mesa's lavapipe: mesa-vulkan-drivers)");
    if (index < 0 || (uint32_t)index >= n)
        return kn_fail(err, KN_E_ARG, "Vulkan: there is no device vulkan:%d (%u device%s: "
                       "vulkan:0%s; see kinetic devices)", index, n, n == 1 ? "" : "s",
                       n == 1 ? "" : " ...");
    VkPhysicalDevice *all = calloc(n, sizeof *all);
    if (!all)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    r = vkEnumeratePhysicalDevices(inst, &n, all);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(all);
        return vk_fail(err, "vkEnumeratePhysicalDevices", r, NULL);
    }
    if ((uint32_t)index >= n) {
        free(all);
        return kn_fail(err, KN_E_ARG, "Vulkan: there is no device vulkan:%d", index);
    }
    *out = all[index];
    free(all);
    return KN_OK;
}

int vkr_device_count(struct kn_err *err)
{
    if (inst_get(err) != KN_OK)
        return 0;
    uint32_t n = 0;
    VkResult r = vkEnumeratePhysicalDevices(inst, &n, NULL);
    if (r != VK_SUCCESS) {
        vk_fail(err, "vkEnumeratePhysicalDevices", r, NULL);
        return 0;
    }
    if (n == 0)
        kn_fail(err, KN_E_UNSUPPORTED, "Vulkan: no Vulkan device found (for a CPU device "
                "install Mesa's lavapipe: mesa-vulkan-drivers)");
    return (int)n;
}

/* The feature structs queried and then enabled (only what the device has). */
struct feats {
    VkPhysicalDeviceFeatures2 f2;
    VkPhysicalDeviceVulkan11Features v11;
    VkPhysicalDeviceVulkan12Features v12;
    VkPhysicalDeviceVulkan13Features v13;
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot; /* 1.2 with the extension */
};

/* Whether the int8 dot products come from VK_KHR_shader_integer_dot_product (a Vulkan
 * 1.2 device that has it) rather than from Vulkan 1.3's core. */
static bool dot_ext(VkPhysicalDevice pd, uint32_t api)
{
    uint32_t n = 0;
    if (api >= VK_API_VERSION_1_3 || vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS)
        return false;
    VkExtensionProperties *ext = malloc((n ? n : 1) * sizeof *ext);
    bool has = false;
    VkResult r = ext ? vkEnumerateDeviceExtensionProperties(pd, NULL, &n, ext) : VK_ERROR_OUT_OF_HOST_MEMORY;
    for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n && !has; i++)
        has = strcmp(ext[i].extensionName, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) == 0;
    free(ext);
    return has;
}

static void feats_chain(struct feats *f, uint32_t api, bool dot)
{
    memset(f, 0, sizeof *f);
    f->f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f->v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    f->v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    f->v13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
    f->dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
    f->f2.pNext = &f->v11;
    f->v11.pNext = &f->v12;
    if (api >= VK_API_VERSION_1_3)
        f->v12.pNext = &f->v13;
    else if (dot)
        f->v12.pNext = &f->dot;
}

static void describe(VkPhysicalDevice pd, int index, struct vkr_info *o, struct feats *f)
{
    memset(o, 0, sizeof *o);
    o->index = index;
    VkPhysicalDeviceProperties base;
    vkGetPhysicalDeviceProperties(pd, &base);
    uint32_t api = base.apiVersion < inst_api ? base.apiVersion : inst_api;

    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
    VkPhysicalDeviceVulkan12Properties p12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
    VkPhysicalDeviceVulkan13Properties p13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
    VkPhysicalDeviceShaderIntegerDotProductProperties pdot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &p11};
    p11.pNext = &p12;
    bool ext = dot_ext(pd, api);
    if (api >= VK_API_VERSION_1_3) {
        p12.pNext = &p13;
        p13.pNext = &pdot;
    } else if (ext) {
        p12.pNext = &pdot;
    }
    vkGetPhysicalDeviceProperties2(pd, &p2);
    const VkPhysicalDeviceProperties *p = &p2.properties;

    snprintf(o->name, sizeof o->name, "%s", p->deviceName);
    snprintf(o->driver, sizeof o->driver, "%s", p12.driverName);
    snprintf(o->driver_info, sizeof o->driver_info, "%s", p12.driverInfo);
    static const char *const types[] = {"other", "integrated", "discrete", "virtual", "cpu"};
    o->type = p->deviceType <= VK_PHYSICAL_DEVICE_TYPE_CPU ? types[p->deviceType] : "other";
    o->api_version = p->apiVersion;
    o->driver_version = p->driverVersion;
    o->vendor_id = p->vendorID;
    o->device_id = p->deviceID;
    o->driver_id = (uint32_t)p12.driverID;
    static_assert(sizeof o->device_uuid == VK_UUID_SIZE && sizeof o->driver_uuid == VK_UUID_SIZE,
                  "vkr_info's UUIDs are VK_UUID_SIZE bytes");
    memcpy(o->device_uuid, p11.deviceUUID, VK_UUID_SIZE);
    memcpy(o->driver_uuid, p11.driverUUID, VK_UUID_SIZE);

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp.memoryHeaps[i].size > o->device_local_bytes)
            o->device_local_bytes = mp.memoryHeaps[i].size;

    feats_chain(f, api, ext);
    vkGetPhysicalDeviceFeatures2(pd, &f->f2);
    o->float64 = f->f2.features.shaderFloat64;
    o->int16 = f->f2.features.shaderInt16;
    o->int64 = f->f2.features.shaderInt64;
    o->float16 = f->v12.shaderFloat16;
    o->int8 = f->v12.shaderInt8;
    o->storage8 = f->v12.storageBuffer8BitAccess;
    o->storage16 = f->v11.storageBuffer16BitAccess;
    o->int_dot = api >= VK_API_VERSION_1_3 ? f->v13.shaderIntegerDotProduct
                                           : ext && f->dot.shaderIntegerDotProduct;
    o->int_dot_ext = o->int_dot && ext;
    o->int_dot_4x8_signed_accel = o->int_dot && pdot.integerDotProduct4x8BitPackedSignedAccelerated;

    o->denorm_preserve[0] = p12.shaderDenormPreserveFloat16;
    o->denorm_preserve[1] = p12.shaderDenormPreserveFloat32;
    o->denorm_preserve[2] = p12.shaderDenormPreserveFloat64;
    o->denorm_flush[0] = p12.shaderDenormFlushToZeroFloat16;
    o->denorm_flush[1] = p12.shaderDenormFlushToZeroFloat32;
    o->denorm_flush[2] = p12.shaderDenormFlushToZeroFloat64;
    o->rte[0] = p12.shaderRoundingModeRTEFloat16;
    o->rte[1] = p12.shaderRoundingModeRTEFloat32;
    o->rte[2] = p12.shaderRoundingModeRTEFloat64;
    o->rtz[0] = p12.shaderRoundingModeRTZFloat16;
    o->rtz[1] = p12.shaderRoundingModeRTZFloat32;
    o->rtz[2] = p12.shaderRoundingModeRTZFloat64;
    o->signed_zero_inf_nan[0] = p12.shaderSignedZeroInfNanPreserveFloat16;
    o->signed_zero_inf_nan[1] = p12.shaderSignedZeroInfNanPreserveFloat32;
    o->signed_zero_inf_nan[2] = p12.shaderSignedZeroInfNanPreserveFloat64;

    o->subgroup_size = p11.subgroupSize;
    o->subgroup_min = o->subgroup_max = p11.subgroupSize;
    if (api >= VK_API_VERSION_1_3) {
        o->subgroup_min = p13.minSubgroupSize;
        o->subgroup_max = p13.maxSubgroupSize;
    }
    bool compute = p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
    o->subgroup_arith = compute && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    o->subgroup_shuffle = compute && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    o->subgroup_ballot = compute && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);

    for (int i = 0; i < 3; i++) {
        o->max_group_count[i] = p->limits.maxComputeWorkGroupCount[i];
        o->max_group_size[i] = p->limits.maxComputeWorkGroupSize[i];
    }
    o->max_group_invocations = p->limits.maxComputeWorkGroupInvocations;
    o->max_shared_bytes = p->limits.maxComputeSharedMemorySize;
    o->max_push_bytes = p->limits.maxPushConstantsSize;
    o->max_storage_range = p->limits.maxStorageBufferRange;
    o->max_alloc_bytes = p11.maxMemoryAllocationSize;
    o->storage_align = (uint32_t)p->limits.minStorageBufferOffsetAlignment;
}

enum kn_status vkr_describe(int index, struct vkr_info *out, struct kn_err *err)
{
    VkPhysicalDevice pd;
    enum kn_status st = phys_get(index, &pd, err);
    if (st != KN_OK)
        return st;
    struct feats f;
    describe(pd, index, out, &f);
    return KN_OK;
}

/* ---- the device -------------------------------------------------------------------- */

struct vkr_pipe {
    struct vkr_pipe *next;        /* the cache's list */
    char shader[64];
    uint32_t n_bufs, push_bytes, n_spec;
    uint32_t spec[16];
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe;
};

struct vkr {
    struct vkr_info info;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t family;
    VkPhysicalDeviceMemoryProperties mem;
    int mt_device, mt_host;       /* memory type indices (-1: none) */
    bool device_mapped;           /* device-local memory is host-visible too (lavapipe, UMA) */
    pthread_mutex_t queue_lock;   /* vkQueueSubmit is externally synchronised */
    pthread_mutex_t pipe_lock;    /* the pipeline cache */
    struct vkr_pipe *pipes;
    VkPipelineCache cache;
    struct vkr_cmd *sync;         /* for vkr_buf_upload/download, under sync_lock */
    pthread_mutex_t sync_lock;
};

struct vkr_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t bytes;
    void *map;                    /* the persistent mapping, or NULL */
    enum vkr_mem kind;
};

static int mem_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits,
                    VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++)
        if ((bits & (1u << i)) && (mp->memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

enum kn_status vkr_open(int index, struct vkr **out, struct kn_err *err)
{
    *out = NULL;
    VkPhysicalDevice pd;
    enum kn_status st = phys_get(index, &pd, err);
    if (st != KN_OK)
        return st;
    struct vkr *rt = kn_calloc(1, sizeof *rt, err);
    if (!rt)
        return KN_E_NOMEM;
    rt->pd = pd;
    struct feats f;
    describe(pd, index, &rt->info, &f);
    if (VK_API_VERSION_MINOR(rt->info.api_version) < 2 && VK_API_VERSION_MAJOR(rt->info.api_version) == 1) {
        kn_fail(err, KN_E_UNSUPPORTED, "Vulkan: %s offers Vulkan %u.%u; Kinetic needs 1.2",
                rt->info.name, VK_API_VERSION_MAJOR(rt->info.api_version),
                VK_API_VERSION_MINOR(rt->info.api_version));
        free(rt);
        return KN_E_UNSUPPORTED;
    }

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32)
        nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf);
    int family = -1;
    for (uint32_t i = 0; i < nq && family < 0; i++) /* a compute queue without graphics first */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            family = (int)i;
    for (uint32_t i = 0; i < nq && family < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            family = (int)i;
    if (family < 0) {
        kn_fail(err, KN_E_UNSUPPORTED, "Vulkan: %s has no compute queue", rt->info.name);
        free(rt);
        return KN_E_UNSUPPORTED;
    }
    rt->family = (uint32_t)family;

    /* Enable what is there of what the shaders may use; everything else off. */
    struct feats en;
    uint32_t api = rt->info.api_version < inst_api ? rt->info.api_version : inst_api;
    feats_chain(&en, api, rt->info.int_dot_ext);
    en.f2.features.shaderFloat64 = f.f2.features.shaderFloat64;
    en.f2.features.shaderInt16 = f.f2.features.shaderInt16;
    en.f2.features.shaderInt64 = f.f2.features.shaderInt64;
    en.v11.storageBuffer16BitAccess = f.v11.storageBuffer16BitAccess;
    en.v11.uniformAndStorageBuffer16BitAccess = f.v11.uniformAndStorageBuffer16BitAccess;
    en.v12.shaderFloat16 = f.v12.shaderFloat16;
    en.v12.shaderInt8 = f.v12.shaderInt8;
    en.v12.storageBuffer8BitAccess = f.v12.storageBuffer8BitAccess;
    en.v12.uniformAndStorageBuffer8BitAccess = f.v12.uniformAndStorageBuffer8BitAccess;
    en.v12.storagePushConstant8 = f.v12.storagePushConstant8;
    en.v12.shaderSubgroupExtendedTypes = f.v12.shaderSubgroupExtendedTypes;
    if (api >= VK_API_VERSION_1_3) {
        en.v13.shaderIntegerDotProduct = f.v13.shaderIntegerDotProduct;
        en.v13.subgroupSizeControl = f.v13.subgroupSizeControl;
        en.v13.computeFullSubgroups = f.v13.computeFullSubgroups;
    } else {
        en.dot.shaderIntegerDotProduct = rt->info.int_dot_ext;
    }
    const char *exts[] = {VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME};
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = rt->family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &en.f2,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = rt->info.int_dot_ext ? 1u : 0u,
                              .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateDevice(pd, &dci, NULL, &rt->dev);
    if (r != VK_SUCCESS) {
        st = vk_fail(err, "vkCreateDevice", r, rt->info.name);
        free(rt);
        return st;
    }
    vkGetDeviceQueue(rt->dev, rt->family, 0, &rt->queue);
    vkGetPhysicalDeviceMemoryProperties(pd, &rt->mem);
    rt->mt_device = mem_type(&rt->mem, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    rt->mt_host = mem_type(&rt->mem, ~0u, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                              VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                              VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (rt->mt_host < 0)
        rt->mt_host = mem_type(&rt->mem, ~0u, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                  VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    pthread_mutex_init(&rt->queue_lock, NULL);
    pthread_mutex_init(&rt->pipe_lock, NULL);
    pthread_mutex_init(&rt->sync_lock, NULL);
    VkPipelineCacheCreateInfo pcci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    r = vkCreatePipelineCache(rt->dev, &pcci, NULL, &rt->cache);
    if (r != VK_SUCCESS)
        rt->cache = VK_NULL_HANDLE;
    rt->sync = vkr_cmd_create(rt, err);
    if (!rt->sync) {
        vkr_close(rt);
        return err ? err->status : KN_E_INTERNAL;
    }
    *out = rt;
    return KN_OK;
}

void vkr_close(struct vkr *rt)
{
    if (!rt)
        return;
    if (rt->dev)
        vkDeviceWaitIdle(rt->dev);
    vkr_cmd_free(rt->sync);
    for (struct vkr_pipe *p = rt->pipes, *next; p; p = next) {
        next = p->next;
        vkDestroyPipeline(rt->dev, p->pipe, NULL);
        vkDestroyPipelineLayout(rt->dev, p->layout, NULL);
        vkDestroyDescriptorSetLayout(rt->dev, p->dsl, NULL);
        free(p);
    }
    if (rt->cache)
        vkDestroyPipelineCache(rt->dev, rt->cache, NULL);
    if (rt->dev)
        vkDestroyDevice(rt->dev, NULL);
    pthread_mutex_destroy(&rt->queue_lock);
    pthread_mutex_destroy(&rt->pipe_lock);
    pthread_mutex_destroy(&rt->sync_lock);
    free(rt);
}

const struct vkr_info *vkr_device_info(const struct vkr *rt)
{
    return &rt->info;
}

/* ---- buffers ----------------------------------------------------------------------- */

struct vkr_buf *vkr_buf_alloc(struct vkr *rt, size_t bytes, enum vkr_mem kind, bool zero,
                              struct kn_err *err)
{
    if (bytes == 0)
        bytes = 4; /* a binding may not be empty */
    bytes = (bytes + 3) & ~(size_t)3;
    if (rt->info.max_alloc_bytes && bytes > rt->info.max_alloc_bytes) {
        kn_fail(err, KN_E_LIMIT, "Vulkan: a buffer of %zu bytes is over %s's largest "
                "allocation (%llu bytes)", bytes, rt->info.name,
                (unsigned long long)rt->info.max_alloc_bytes);
        return NULL;
    }
    struct vkr_buf *b = kn_calloc(1, sizeof *b, err);
    if (!b)
        return NULL;
    b->bytes = bytes;
    b->kind = kind;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = bytes,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(rt->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        vk_fail(err, "vkCreateBuffer", r, NULL);
        free(b);
        return NULL;
    }
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(rt->dev, b->buf, &req);
    int mt = -1;
    if (kind == VKR_MEM_DEVICE)
        mt = mem_type(&rt->mem, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (mt < 0 || kind == VKR_MEM_HOST) {
        mt = mem_type(&rt->mem, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                        VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                                        VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
        if (mt < 0)
            mt = mem_type(&rt->mem, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                            VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    }
    if (mt < 0) {
        vkDestroyBuffer(rt->dev, b->buf, NULL);
        free(b);
        kn_fail(err, KN_E_UNSUPPORTED, "Vulkan: %s has no memory type for a %s buffer",
                rt->info.name, kind == VKR_MEM_HOST ? "host-visible" : "device");
        return NULL;
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = (uint32_t)mt};
    r = vkAllocateMemory(rt->dev, &mai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "%zu bytes of %s memory", bytes,
                 kind == VKR_MEM_HOST ? "host-visible" : "device-local");
        vk_fail(err, "vkAllocateMemory", r, what);
        vkDestroyBuffer(rt->dev, b->buf, NULL);
        free(b);
        return NULL;
    }
    r = vkBindBufferMemory(rt->dev, b->buf, b->mem, 0);
    VkMemoryPropertyFlags flags = rt->mem.memoryTypes[mt].propertyFlags;
    if (r == VK_SUCCESS && (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
        (flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
        r = vkMapMemory(rt->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
    if (r != VK_SUCCESS) {
        vk_fail(err, "vkBindBufferMemory/vkMapMemory", r, NULL);
        vkr_buf_free(rt, b);
        return NULL;
    }
    if (zero) {
        if (b->map) {
            memset(b->map, 0, bytes);
        } else {
            pthread_mutex_lock(&rt->sync_lock);
            vkr_cmd_begin(rt->sync);
            vkr_cmd_fill(rt->sync, b, 0, bytes, 0);
            enum kn_status st = vkr_cmd_submit(rt->sync, err);
            pthread_mutex_unlock(&rt->sync_lock);
            if (st != KN_OK) {
                vkr_buf_free(rt, b);
                return NULL;
            }
        }
    }
    return b;
}

void vkr_buf_free(struct vkr *rt, struct vkr_buf *b)
{
    if (!b)
        return;
    if (b->map)
        vkUnmapMemory(rt->dev, b->mem);
    vkDestroyBuffer(rt->dev, b->buf, NULL);
    vkFreeMemory(rt->dev, b->mem, NULL);
    free(b);
}

size_t vkr_buf_size(const struct vkr_buf *b)
{
    return b->bytes;
}

void *vkr_buf_map(const struct vkr_buf *b)
{
    return b->kind == VKR_MEM_HOST ? b->map : NULL;
}

static enum kn_status range_check(const struct vkr_buf *b, size_t off, size_t bytes,
                                  const char *what, struct kn_err *err)
{
    if (off > b->bytes || bytes > b->bytes - off)
        return kn_fail(err, KN_E_INTERNAL, "Vulkan: %s of %zu bytes at %zu is past the end of "
                       "a buffer of %zu bytes", what, bytes, off, b->bytes);
    return KN_OK;
}

/* A staged transfer in pieces of at most this much host-visible memory. */
#define VKR_STAGE_PIECE ((size_t)64 << 20)

enum kn_status vkr_buf_upload(struct vkr *rt, struct vkr_buf *b, size_t off, const void *src,
                              size_t bytes, struct kn_err *err)
{
    enum kn_status st = range_check(b, off, bytes, "an upload", err);
    if (st != KN_OK || bytes == 0)
        return st;
    if (b->map) {
        memcpy((char *)b->map + off, src, bytes);
        return KN_OK;
    }
    pthread_mutex_lock(&rt->sync_lock);
    for (size_t done = 0; done < bytes && st == KN_OK; done += VKR_STAGE_PIECE) {
        size_t n = bytes - done < VKR_STAGE_PIECE ? bytes - done : VKR_STAGE_PIECE;
        vkr_cmd_begin(rt->sync);
        vkr_cmd_write(rt->sync, b, off + done, (const char *)src + done, n);
        st = vkr_cmd_submit(rt->sync, err);
    }
    pthread_mutex_unlock(&rt->sync_lock);
    return st;
}

enum kn_status vkr_buf_download(struct vkr *rt, const struct vkr_buf *b, size_t off, void *dst,
                                size_t bytes, struct kn_err *err)
{
    enum kn_status st = range_check(b, off, bytes, "a download", err);
    if (st != KN_OK || bytes == 0)
        return st;
    if (b->map) {
        memcpy(dst, (const char *)b->map + off, bytes);
        return KN_OK;
    }
    pthread_mutex_lock(&rt->sync_lock);
    for (size_t done = 0; done < bytes && st == KN_OK; done += VKR_STAGE_PIECE) {
        size_t n = bytes - done < VKR_STAGE_PIECE ? bytes - done : VKR_STAGE_PIECE;
        vkr_cmd_begin(rt->sync);
        vkr_cmd_read(rt->sync, b, off + done, (char *)dst + done, n);
        st = vkr_cmd_submit(rt->sync, err);
    }
    pthread_mutex_unlock(&rt->sync_lock);
    return st;
}

/* ---- pipelines --------------------------------------------------------------------- */

static bool pipe_same(const struct vkr_pipe *p, const struct vkr_pipe_desc *d)
{
    return strcmp(p->shader, d->shader) == 0 && p->n_bufs == d->n_bufs &&
           p->push_bytes == d->push_bytes && p->n_spec == d->n_spec &&
           (d->n_spec == 0 || memcmp(p->spec, d->spec, d->n_spec * sizeof *d->spec) == 0);
}

static struct vkr_pipe *pipe_make(struct vkr *rt, const struct vkr_pipe_desc *d, struct kn_err *err)
{
    const struct vkr_shader *sh = vkr_shader_find(d->shader);
    if (!sh) {
        kn_fail(err, KN_E_INTERNAL, "Vulkan: no shader named '%s' is embedded in this build "
                "(src/vulkan/shaders/%s.comp)", d->shader, d->shader);
        return NULL;
    }
    if (d->n_bufs > 16 || d->n_spec > 16 || d->push_bytes % 4 ||
        d->push_bytes > rt->info.max_push_bytes || strlen(d->shader) >= sizeof ((struct vkr_pipe *)0)->shader) {
        kn_fail(err, KN_E_INTERNAL, "Vulkan: shader %s: %u buffers, %u constants and %u bytes of "
                "push constants are over the runtime's limits (16, 16, %u in words)", d->shader,
                d->n_bufs, d->n_spec, d->push_bytes, rt->info.max_push_bytes);
        return NULL;
    }
    struct vkr_pipe *p = kn_calloc(1, sizeof *p, err);
    if (!p)
        return NULL;
    snprintf(p->shader, sizeof p->shader, "%s", d->shader);
    p->n_bufs = d->n_bufs;
    p->push_bytes = d->push_bytes;
    p->n_spec = d->n_spec;
    if (d->n_spec)
        memcpy(p->spec, d->spec, d->n_spec * sizeof *d->spec);

    VkDescriptorSetLayoutBinding lb[16];
    for (uint32_t i = 0; i < d->n_bufs; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                               .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1,
                                               .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = d->n_bufs,
                                           .pBindings = lb};
    VkResult r = vkCreateDescriptorSetLayout(rt->dev, &dci, NULL, &p->dsl);
    const char *call = "vkCreateDescriptorSetLayout";
    VkShaderModule mod = VK_NULL_HANDLE;
    if (r == VK_SUCCESS) {
        VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = d->push_bytes};
        VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                          .setLayoutCount = 1,
                                          .pSetLayouts = &p->dsl,
                                          .pushConstantRangeCount = d->push_bytes ? 1 : 0,
                                          .pPushConstantRanges = &pr};
        r = vkCreatePipelineLayout(rt->dev, &lci, NULL, &p->layout);
        call = "vkCreatePipelineLayout";
    }
    if (r == VK_SUCCESS) {
        VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                        .codeSize = sh->bytes,
                                        .pCode = sh->code};
        r = vkCreateShaderModule(rt->dev, &mci, NULL, &mod);
        call = "vkCreateShaderModule";
    }
    if (r == VK_SUCCESS) {
        VkSpecializationMapEntry me[16];
        for (uint32_t i = 0; i < d->n_spec; i++)
            me[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
        VkSpecializationInfo si = {.mapEntryCount = d->n_spec,
                                   .pMapEntries = me,
                                   .dataSize = 4 * d->n_spec,
                                   .pData = p->spec};
        VkComputePipelineCreateInfo cci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = mod,
                      .pName = "main",
                      .pSpecializationInfo = d->n_spec ? &si : NULL},
            .layout = p->layout};
        r = vkCreateComputePipelines(rt->dev, rt->cache, 1, &cci, NULL, &p->pipe);
        call = "vkCreateComputePipelines";
        vkDestroyShaderModule(rt->dev, mod, NULL);
    }
    if (r != VK_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "shader %s", d->shader);
        vk_fail(err, call, r, what);
        if (p->layout)
            vkDestroyPipelineLayout(rt->dev, p->layout, NULL);
        if (p->dsl)
            vkDestroyDescriptorSetLayout(rt->dev, p->dsl, NULL);
        free(p);
        return NULL;
    }
    return p;
}

const struct vkr_pipe *vkr_pipe_get(struct vkr *rt, const struct vkr_pipe_desc *d,
                                    struct kn_err *err)
{
    pthread_mutex_lock(&rt->pipe_lock);
    struct vkr_pipe *p = rt->pipes;
    while (p && !pipe_same(p, d))
        p = p->next;
    if (!p) {
        p = pipe_make(rt, d, err);
        if (p) {
            p->next = rt->pipes;
            rt->pipes = p;
        }
    }
    pthread_mutex_unlock(&rt->pipe_lock);
    return p;
}

/* ---- a pass ------------------------------------------------------------------------ */

/* The host-visible memory of a pass: staged host arrays, and the landing area of reads. */
struct arena {
    struct vkr_buf *buf;
    size_t used;
};

struct vkr_read {
    void *dst;
    const struct vkr_buf *from; /* the arena chunk (chunks move in the array, buffers not) */
    size_t off, bytes;          /* ... and where in it */
};

/* What the commands since the last barrier touched, for the automatic barriers. */
struct touch {
    VkBuffer buf;
    bool write;
};

#define VKR_TOUCH_MAX 64
#define VKR_SETS_PER_POOL 256

struct vkr_cmd {
    struct vkr *rt;
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    bool recording;
    struct kn_err err;            /* the pass's first failure (status KN_OK: none) */
    VkDescriptorPool *dpools;     /* pools used this pass; the last one has room */
    int n_dpools, cap_dpools, cur_dpool;
    struct arena *arenas;         /* host-visible chunks; reused pass after pass */
    int n_arenas, cap_arenas, cur_arena;
    struct vkr_read *reads;
    int n_reads, cap_reads;
    struct touch touched[VKR_TOUCH_MAX];
    int n_touched;
};

static bool cmd_ok(struct vkr_cmd *c)
{
    return c->err.status == KN_OK && c->recording;
}

void vkr_cmd_fail(struct vkr_cmd *c, enum kn_status status, const char *fmt, ...)
{
    if (c->err.status != KN_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    kn_vfail(&c->err, status, fmt, ap);
    va_end(ap);
}

bool vkr_cmd_failed(const struct vkr_cmd *c)
{
    return c->err.status != KN_OK;
}

static void cmd_vkfail(struct vkr_cmd *c, const char *call, VkResult r, const char *what)
{
    if (c->err.status == KN_OK)
        vk_fail(&c->err, call, r, what);
}

struct vkr_cmd *vkr_cmd_create(struct vkr *rt, struct kn_err *err)
{
    struct vkr_cmd *c = kn_calloc(1, sizeof *c, err);
    if (!c)
        return NULL;
    c->rt = rt;
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = rt->family};
    VkResult r = vkCreateCommandPool(rt->dev, &pci, NULL, &c->pool);
    const char *call = "vkCreateCommandPool";
    if (r == VK_SUCCESS) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = c->pool,
                                          .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        r = vkAllocateCommandBuffers(rt->dev, &ai, &c->cb);
        call = "vkAllocateCommandBuffers";
    }
    if (r == VK_SUCCESS) {
        VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        r = vkCreateFence(rt->dev, &fci, NULL, &c->fence);
        call = "vkCreateFence";
    }
    if (r != VK_SUCCESS) {
        vk_fail(err, call, r, NULL);
        vkr_cmd_free(c);
        return NULL;
    }
    return c;
}

void vkr_cmd_free(struct vkr_cmd *c)
{
    if (!c)
        return;
    VkDevice dev = c->rt->dev;
    for (int i = 0; i < c->n_dpools; i++)
        vkDestroyDescriptorPool(dev, c->dpools[i], NULL);
    for (int i = 0; i < c->n_arenas; i++)
        vkr_buf_free(c->rt, c->arenas[i].buf);
    if (c->fence)
        vkDestroyFence(dev, c->fence, NULL);
    if (c->pool)
        vkDestroyCommandPool(dev, c->pool, NULL); /* frees cb */
    free(c->dpools);
    free(c->arenas);
    free(c->reads);
    free(c);
}

struct vkr *vkr_cmd_rt(struct vkr_cmd *c)
{
    return c->rt;
}

void vkr_cmd_begin(struct vkr_cmd *c)
{
    c->err.status = KN_OK;
    c->err.msg[0] = 0;
    c->n_reads = 0;
    c->n_touched = 0;
    c->cur_arena = 0;
    for (int i = 0; i < c->n_arenas; i++)
        c->arenas[i].used = 0;
    c->cur_dpool = 0;
    for (int i = 0; i < c->n_dpools; i++)
        vkResetDescriptorPool(c->rt->dev, c->dpools[i], 0);
    VkResult r = vkResetCommandBuffer(c->cb, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS)
        r = vkBeginCommandBuffer(c->cb, &bi);
    c->recording = r == VK_SUCCESS;
    if (r != VK_SUCCESS)
        cmd_vkfail(c, "vkBeginCommandBuffer", r, NULL);
}

const struct vkr_pipe *vkr_cmd_pipe(struct vkr_cmd *c, const struct vkr_pipe_desc *d)
{
    if (!cmd_ok(c))
        return NULL;
    return vkr_pipe_get(c->rt, d, &c->err);
}

static void barrier_now(struct vkr_cmd *c)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(c->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
    c->n_touched = 0;
}

void vkr_cmd_barrier(struct vkr_cmd *c)
{
    if (cmd_ok(c))
        barrier_now(c);
}

/* Puts a barrier before a command touching bufs[i] (writing it when writes[i]) when it
 * conflicts with what was touched since the last barrier, then records the touches. */
static void hazards(struct vkr_cmd *c, int n, const VkBuffer *bufs, const bool *writes)
{
    bool need = c->n_touched + n > VKR_TOUCH_MAX;
    for (int i = 0; i < n && !need; i++)
        for (int j = 0; j < c->n_touched; j++)
            if (c->touched[j].buf == bufs[i] && (writes[i] || c->touched[j].write)) {
                need = true;
                break;
            }
    if (need)
        barrier_now(c);
    for (int i = 0; i < n; i++)
        c->touched[c->n_touched++] = (struct touch){bufs[i], writes[i]};
}

static VkDescriptorSet set_alloc(struct vkr_cmd *c, VkDescriptorSetLayout dsl)
{
    for (;;) {
        if (c->cur_dpool < c->n_dpools) {
            VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                              .descriptorPool = c->dpools[c->cur_dpool],
                                              .descriptorSetCount = 1,
                                              .pSetLayouts = &dsl};
            VkDescriptorSet set;
            VkResult r = vkAllocateDescriptorSets(c->rt->dev, &ai, &set);
            if (r == VK_SUCCESS)
                return set;
            if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) {
                cmd_vkfail(c, "vkAllocateDescriptorSets", r, NULL);
                return VK_NULL_HANDLE;
            }
            c->cur_dpool++;
            continue;
        }
        if (c->n_dpools == c->cap_dpools) {
            int cap = c->cap_dpools ? 2 * c->cap_dpools : 4;
            VkDescriptorPool *p = realloc(c->dpools, (size_t)cap * sizeof *p);
            if (!p) {
                vkr_cmd_fail(c, KN_E_NOMEM, "out of memory");
                return VK_NULL_HANDLE;
            }
            c->dpools = p;
            c->cap_dpools = cap;
        }
        VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                   .descriptorCount = 16 * VKR_SETS_PER_POOL};
        VkDescriptorPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                          .maxSets = VKR_SETS_PER_POOL,
                                          .poolSizeCount = 1,
                                          .pPoolSizes = &ps};
        VkResult r = vkCreateDescriptorPool(c->rt->dev, &pci, NULL, &c->dpools[c->n_dpools]);
        if (r != VK_SUCCESS) {
            cmd_vkfail(c, "vkCreateDescriptorPool", r, NULL);
            return VK_NULL_HANDLE;
        }
        c->n_dpools++;
    }
}

void vkr_cmd_dispatch(struct vkr_cmd *c, const struct vkr_pipe *p, const struct vkr_bind *binds,
                      const void *push, uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!cmd_ok(c))
        return;
    if (!p) {
        vkr_cmd_fail(c, KN_E_INTERNAL, "Vulkan: a dispatch without a pipeline");
        return;
    }
    const struct vkr_info *in = &c->rt->info;
    if (gx > in->max_group_count[0] || gy > in->max_group_count[1] || gz > in->max_group_count[2]) {
        vkr_cmd_fail(c, KN_E_LIMIT, "Vulkan: shader %s: %u x %u x %u workgroups is over %s's "
                     "limit (%u x %u x %u)", p->shader, gx, gy, gz, in->name,
                     in->max_group_count[0], in->max_group_count[1], in->max_group_count[2]);
        return;
    }
    if (gx == 0 || gy == 0 || gz == 0)
        return;
    VkDescriptorBufferInfo bi[16];
    VkWriteDescriptorSet wr[16];
    VkBuffer bufs[16];
    bool writes[16];
    VkDescriptorSet set = set_alloc(c, p->dsl);
    if (!set)
        return;
    for (uint32_t i = 0; i < p->n_bufs; i++) {
        const struct vkr_bind *b = &binds[i];
        if (!b->buf) {
            vkr_cmd_fail(c, KN_E_INTERNAL, "Vulkan: shader %s: binding %u has no buffer",
                         p->shader, i);
            return;
        }
        size_t bytes = b->bytes ? b->bytes : b->buf->bytes - (b->off < b->buf->bytes ? b->off : b->buf->bytes);
        if (b->off > b->buf->bytes || bytes > b->buf->bytes - b->off || bytes == 0) {
            vkr_cmd_fail(c, KN_E_INTERNAL, "Vulkan: shader %s: binding %u (%zu bytes at %zu) is "
                         "outside its buffer of %zu bytes", p->shader, i, bytes, b->off,
                         b->buf->bytes);
            return;
        }
        if (bytes > in->max_storage_range || (in->storage_align && b->off % in->storage_align)) {
            vkr_cmd_fail(c, KN_E_LIMIT, "Vulkan: shader %s: binding %u (%zu bytes at offset %zu) "
                         "is over %s's storage binding limits (%llu bytes, offsets aligned to "
                         "%u)", p->shader, i, bytes, b->off, in->name,
                         (unsigned long long)in->max_storage_range, in->storage_align);
            return;
        }
        bi[i] = (VkDescriptorBufferInfo){.buffer = b->buf->buf, .offset = b->off, .range = bytes};
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = set,
                                       .dstBinding = i,
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &bi[i]};
        bufs[i] = b->buf->buf;
        writes[i] = b->write;
    }
    vkUpdateDescriptorSets(c->rt->dev, p->n_bufs, wr, 0, NULL);
    hazards(c, (int)p->n_bufs, bufs, writes);
    vkCmdBindPipeline(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
    vkCmdBindDescriptorSets(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    if (p->push_bytes)
        vkCmdPushConstants(c->cb, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes, push);
    vkCmdDispatch(c->cb, gx, gy, gz);
}

static bool copy_check(struct vkr_cmd *c, const struct vkr_buf *b, size_t off, size_t bytes,
                       const char *what)
{
    if (off > b->bytes || bytes > b->bytes - off) {
        vkr_cmd_fail(c, KN_E_INTERNAL, "Vulkan: %s of %zu bytes at %zu is past the end of a "
                     "buffer of %zu bytes", what, bytes, off, b->bytes);
        return false;
    }
    return true;
}

void vkr_cmd_copy(struct vkr_cmd *c, const struct vkr_buf *dst, size_t doff,
                  const struct vkr_buf *src, size_t soff, size_t bytes)
{
    if (!cmd_ok(c) || bytes == 0 || !copy_check(c, dst, doff, bytes, "a copy's destination") ||
        !copy_check(c, src, soff, bytes, "a copy's source"))
        return;
    VkBuffer bufs[2] = {dst->buf, src->buf};
    bool writes[2] = {true, false};
    hazards(c, 2, bufs, writes);
    VkBufferCopy r = {.srcOffset = soff, .dstOffset = doff, .size = bytes};
    vkCmdCopyBuffer(c->cb, src->buf, dst->buf, 1, &r);
}

void vkr_cmd_fill(struct vkr_cmd *c, const struct vkr_buf *dst, size_t off, size_t bytes,
                  uint32_t v)
{
    if (!cmd_ok(c) || bytes == 0 || !copy_check(c, dst, off, bytes, "a fill"))
        return;
    if (off % 4 || bytes % 4) {
        vkr_cmd_fail(c, KN_E_INTERNAL, "Vulkan: a fill of %zu bytes at %zu is not in whole words",
                     bytes, off);
        return;
    }
    VkBuffer b = dst->buf;
    bool w = true;
    hazards(c, 1, &b, &w);
    vkCmdFillBuffer(c->cb, dst->buf, off, bytes, v);
}

/* Takes bytes of the pass's host-visible arena (aligned to 256, any binding's offset
 * alignment); NULL with the error recorded when out of memory. */
static struct arena *arena_take(struct vkr_cmd *c, size_t bytes, size_t *off)
{
    const size_t align = 256;
    for (; c->cur_arena < c->n_arenas; c->cur_arena++) {
        struct arena *a = &c->arenas[c->cur_arena];
        size_t at = (a->used + align - 1) & ~(align - 1);
        if (at <= a->buf->bytes && bytes <= a->buf->bytes - at) {
            a->used = at + bytes;
            *off = at;
            return a;
        }
        if (a->used == 0)
            break; /* an empty chunk too small: make a bigger one after it */
    }
    if (c->n_arenas == c->cap_arenas) {
        int cap = c->cap_arenas ? 2 * c->cap_arenas : 4;
        struct arena *p = realloc(c->arenas, (size_t)cap * sizeof *p);
        if (!p) {
            vkr_cmd_fail(c, KN_E_NOMEM, "out of memory");
            return NULL;
        }
        c->arenas = p;
        c->cap_arenas = cap;
    }
    size_t size = (size_t)1 << 20;
    while (size < bytes)
        size *= 2;
    struct vkr_buf *b = vkr_buf_alloc(c->rt, size, VKR_MEM_HOST, false, &c->err);
    if (!b)
        return NULL;
    if (!b->map) {
        vkr_buf_free(c->rt, b);
        vkr_cmd_fail(c, KN_E_UNSUPPORTED, "Vulkan: %s gave host memory that cannot be mapped",
                     c->rt->info.name);
        return NULL;
    }
    /* Kept in order: put the new chunk at the current place, move the rest after it. */
    memmove(&c->arenas[c->cur_arena + 1], &c->arenas[c->cur_arena],
            (size_t)(c->n_arenas - c->cur_arena) * sizeof *c->arenas);
    c->n_arenas++;
    struct arena *a = &c->arenas[c->cur_arena];
    a->buf = b;
    a->used = bytes;
    *off = 0;
    return a;
}

struct vkr_bind vkr_cmd_stage(struct vkr_cmd *c, const void *src, size_t bytes)
{
    struct vkr_bind b = {0};
    if (!cmd_ok(c))
        return b;
    size_t off;
    struct arena *a = arena_take(c, bytes ? bytes : 4, &off);
    if (!a)
        return b;
    if (bytes)
        memcpy((char *)a->buf->map + off, src, bytes);
    b.buf = a->buf;
    b.off = off;
    b.bytes = bytes ? bytes : 4;
    return b;
}

void vkr_cmd_write(struct vkr_cmd *c, const struct vkr_buf *dst, size_t off, const void *src,
                   size_t bytes)
{
    if (!cmd_ok(c) || bytes == 0 || !copy_check(c, dst, off, bytes, "a write"))
        return;
    struct vkr_bind s = vkr_cmd_stage(c, src, bytes);
    if (s.buf)
        vkr_cmd_copy(c, dst, off, s.buf, s.off, bytes);
}

void vkr_cmd_read(struct vkr_cmd *c, const struct vkr_buf *b, size_t off, void *dst, size_t bytes)
{
    if (!cmd_ok(c) || bytes == 0 || !copy_check(c, b, off, bytes, "a read"))
        return;
    if (c->n_reads == c->cap_reads) {
        int cap = c->cap_reads ? 2 * c->cap_reads : 8;
        struct vkr_read *p = realloc(c->reads, (size_t)cap * sizeof *p);
        if (!p) {
            vkr_cmd_fail(c, KN_E_NOMEM, "out of memory");
            return;
        }
        c->reads = p;
        c->cap_reads = cap;
    }
    size_t aoff;
    struct arena *a = arena_take(c, bytes, &aoff);
    if (!a)
        return;
    vkr_cmd_copy(c, a->buf, aoff, b, off, bytes);
    c->reads[c->n_reads++] = (struct vkr_read){.dst = dst, .from = a->buf, .off = aoff,
                                               .bytes = bytes};
}

enum kn_status vkr_cmd_submit(struct vkr_cmd *c, struct kn_err *err)
{
    if (!c->recording) {
        if (c->err.status == KN_OK)
            kn_fail(&c->err, KN_E_INTERNAL, "Vulkan: a submit without a begin");
        goto out;
    }
    c->recording = false;
    if (c->n_reads) { /* the reads' copies done before the host looks */
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                              .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                              .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
        vkCmdPipelineBarrier(c->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                             0, 1, &mb, 0, NULL, 0, NULL);
    }
    VkResult r = vkEndCommandBuffer(c->cb);
    if (r != VK_SUCCESS) {
        cmd_vkfail(c, "vkEndCommandBuffer", r, NULL);
        goto out;
    }
    if (c->err.status != KN_OK)
        goto out; /* recorded, but a recording failed: never run half a pass */
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &c->cb};
    pthread_mutex_lock(&c->rt->queue_lock);
    r = vkQueueSubmit(c->rt->queue, 1, &si, c->fence);
    pthread_mutex_unlock(&c->rt->queue_lock);
    if (r != VK_SUCCESS) {
        cmd_vkfail(c, "vkQueueSubmit", r, NULL);
        goto out;
    }
    r = vkWaitForFences(c->rt->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    vkResetFences(c->rt->dev, 1, &c->fence);
    if (r != VK_SUCCESS) {
        cmd_vkfail(c, "vkWaitForFences", r, NULL);
        goto out;
    }
    for (int i = 0; i < c->n_reads; i++) {
        const struct vkr_buf *b = c->reads[i].from;
        memcpy(c->reads[i].dst, (const char *)b->map + c->reads[i].off, c->reads[i].bytes);
    }
out:
    c->n_reads = 0;
    if (c->err.status != KN_OK) {
        if (err)
            *err = c->err;
        return c->err.status;
    }
    return KN_OK;
}

/* vk_backend.h: the Vulkan backend, the public face of src/vulkan: an open Vulkan device
 * as a struct kern_backend (src/kernels/backend.h), and what the device registry shows of
 * the devices. In a build without Vulkan every open fails saying what to install. */
#ifndef KN_VULKAN_VK_BACKEND_H
#define KN_VULKAN_VK_BACKEND_H

#include "../kernels/backend.h"
#include "vk_rt.h"

/* Opens Vulkan device index as a backend (name "vulkan:<index>"). A device is opened once
 * per process; each open is paired with a vk_backend_close. NULL with err set on failure
 * (no Vulkan in this build, no such device, the driver refused). */
struct kern_backend *vk_backend_open(int index, struct kn_err *err);
void vk_backend_close(struct kern_backend *be);
/* Whether be is a Vulkan backend. */
bool vk_backend_is(const struct kern_backend *be);
/* The device behind a Vulkan backend. */
const struct vkr_info *vk_backend_info(const struct kern_backend *be);

#endif

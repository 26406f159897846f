// The one place where code differs between the supported torch releases
// (2.11 to 2.15). Each library is built against one release, so these are
// compile-time choices; everything else is the same source on every release.
#pragma once

#include <torch/version.h>

#define TORCHSCAN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#define TORCHSCAN_STR_(x) #x
#define TORCHSCAN_STR(x) TORCHSCAN_STR_(x)
// "2.15": the release whose torch.utils.flop_counter the native rows follow.
#define TORCHSCAN_TORCH_RELEASE TORCHSCAN_STR(TORCH_VERSION_MAJOR) "." TORCHSCAN_STR(TORCH_VERSION_MINOR)

// torch.utils.flop_counter counts the CPU flash attention kernel and its
// backward (matrix products only, like the other SDPA kernels) from 2.15 on;
// before, TorchScan's fallback rows count them.
#define TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION TORCHSCAN_TORCH_AT_LEAST(2, 15)

// LibTorch's four AOTInductor run functions that TorchScan stands in for
// (AOTIModelPackageLoader::run and ::boxed_run, AOTIModelContainerRunner::run
// and ::boxed_run), by their torch 2.13 mangled names: one list for the
// attach library's interposers (aoti_interpose.cc) and the preload's jumps
// to them (preload.cc). attach.lds and preload.lds spell the same names;
// tests/python/api/test_aoti.py checks all of them against libtorch_cpu.so.
// Plain preprocessor and char data: no LibTorch header.
#pragma once

// X(index, mangled name) for each function.
#define TORCHSCAN_AOTI_RUNS(X)                                                                 \
  X(0, _ZN5torch8inductor22AOTIModelPackageLoader3runERKSt6vectorIN2at6TensorESaIS4_EEPv)      \
  X(1, _ZN5torch8inductor22AOTIModelPackageLoader9boxed_runEOSt6vectorIN2at6TensorESaIS4_EEPv) \
  X(2, _ZN5torch8inductor24AOTIModelContainerRunner3runERKSt6vectorIN2at6TensorESaIS4_EEPv)    \
  X(3, _ZN5torch8inductor24AOTIModelContainerRunner9boxed_runEOSt6vectorIN2at6TensorESaIS4_EEPv)

namespace torchscan {

#define TORCHSCAN_AOTI_RUN_NAME(i, name) #name,
inline constexpr const char* kAotiRuns[] = {TORCHSCAN_AOTI_RUNS(TORCHSCAN_AOTI_RUN_NAME)};
#undef TORCHSCAN_AOTI_RUN_NAME
enum AotiRun { kLoaderRun = 0, kLoaderBoxedRun = 1, kRunnerRun = 2, kRunnerBoxedRun = 3 };

}  // namespace torchscan

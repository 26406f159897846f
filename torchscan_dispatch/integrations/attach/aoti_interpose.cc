// Part of libtorchscan_attach.so: AOTInductor runs in an attached server.
//
// An AOTInductor package (a .pt2 loaded with torch::inductor::
// AOTIModelPackageLoader) runs generated C++ kernels that make no ATen call
// through the dispatcher, so the attach scan would report a complete total
// with the model's work missing. This file interposes on the LibTorch
// functions a server calls to run one (exported by libtorch_cpu.so and called
// through the PLT, see attach.lds): each definition below records a
// `torchscan::compiled_region("aotinductor")` call through the dispatcher,
// which no view can value (formulas/compiled.cc), then forwards to the real
// function found with dlsym(RTLD_NEXT). The report is then partial with a
// `compiled_region` diagnostic; the kernels the model still calls through
// the dispatcher (its fallback operators) are counted as usual.
//
// AOTIModelPackageLoader::run forwards to AOTIModelContainerRunner::run, and
// libtorch_cpu.so makes that call through its own PLT, so it comes here too:
// only the outermost run of a thread records (a thread-local depth).
//
// Limits: a run is seen only when it enters through one of these four
// functions. A runner's virtual run_impl called by a subclass of the
// server's own, or the model .so's AOTInductorModelContainerRun called
// directly through dlsym, is not.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "torchscan_dispatch/integrations/attach/aoti_runs.h"
#include "torchscan_dispatch/torchscan.h"

namespace {

using Tensors = std::vector<at::Tensor>;
using torch::inductor::AOTIModelContainerRunner;
using torch::inductor::AOTIModelPackageLoader;

// The real function behind an interposed one. A member function called
// through a plain function pointer takes `this` first (Itanium C++ ABI).
template <typename Fn>
Fn Real(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    // Only this library defines the symbol the program called: there is
    // nothing to forward to, and returning anything would be a lie.
    std::fprintf(stderr, "torchscan attach: %s is not in this process's LibTorch (%s)\n", mangled, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

void MarkCompiledRegion() {
  try {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("torchscan::compiled_region", "");
    torch::jit::Stack stack{c10::IValue(std::string("aotinductor"))};
    op.callBoxed(&stack);
  } catch (const std::exception& e) {
    // The server's run must not fail because of the scan; say why the
    // report may be short.
    std::fprintf(stderr, "torchscan attach: an AOTInductor run was not marked: %s\n", e.what());
  }
}

thread_local int run_depth = 0;

// Marks the outermost run of this thread, if this thread is being scanned.
struct Run {
  Run() {
    if (run_depth++ == 0 && torchscan::ModeKeyIncluded()) MarkCompiledRegion();
  }
  ~Run() { --run_depth; }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
};

// The mangled names (aoti_runs.h), checked against `nm -D --defined-only
// libtorch_cpu.so` of torch 2.13 and exported by attach.lds.
using torchscan::kAotiRuns;

}  // namespace

// Defined as the members the headers declare, so the compiler checks each
// signature against the mangled name it gets (the names above).
namespace torch::inductor {

Tensors AOTIModelPackageLoader::run(const Tensors& inputs, void* stream_handle) {
  static const auto real =
      Real<Tensors (*)(AOTIModelPackageLoader*, const Tensors&, void*)>(kAotiRuns[torchscan::kLoaderRun]);
  Run marked;
  return real(this, inputs, stream_handle);
}

Tensors AOTIModelPackageLoader::boxed_run(Tensors&& inputs, void* stream_handle) {
  static const auto real =
      Real<Tensors (*)(AOTIModelPackageLoader*, Tensors&&, void*)>(kAotiRuns[torchscan::kLoaderBoxedRun]);
  Run marked;
  return real(this, std::move(inputs), stream_handle);
}

Tensors AOTIModelContainerRunner::run(const Tensors& inputs, void* stream_handle) {
  static const auto real =
      Real<Tensors (*)(AOTIModelContainerRunner*, const Tensors&, void*)>(kAotiRuns[torchscan::kRunnerRun]);
  Run marked;
  return real(this, inputs, stream_handle);
}

Tensors AOTIModelContainerRunner::boxed_run(Tensors&& inputs, void* stream_handle) {
  static const auto real =
      Real<Tensors (*)(AOTIModelContainerRunner*, Tensors&&, void*)>(kAotiRuns[torchscan::kRunnerBoxedRun]);
  Run marked;
  return real(this, std::move(inputs), stream_handle);
}

}  // namespace torch::inductor

// Tells the Python shim (python_shim/torchscan/_aoti.py) that runs are
// marked here, so it does not mark them a second time.
extern "C" int torchscan_attach_marks_aotinductor() { return 1; }

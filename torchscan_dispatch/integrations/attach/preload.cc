// libtorchscan_preload.so: what tools/attach.py --wrapper preloads, for a
// process that is not yet a LibTorch program when it starts: a wrapper
// command (taskset, a shell script) that runs the server, or a host that
// dlopens LibTorch later (an inference server's backends).
//
// The attach library cannot be preloaded there: it needs LibTorch, and a
// preload whose dependency is missing stops the process before main(). This
// one needs no LibTorch (libc, libstdc++, libm and libgcc_s, present
// wherever LibTorch runs), so it loads anywhere, and it does nothing until
// LibTorch is in the process: when it loads into a LibTorch program (the
// server the wrapper started), or after a dlopen that brought libc10.so in,
// it loads libtorchscan_attach.so from its own directory, which attaches as
// it does under the launcher. Until then the attach variables stay in the
// environment, so a wrapper passes them on to what it runs.
//
// Preloaded, it is also ahead of libc and LibTorch in symbol lookup, which
// the attach library, loaded later, is not. So it stands in for the
// attach library's interposers:
//   - pthread_create hands thread starts to the attach library
//     (torchscan_attach_pthread_create) once that is loaded, so threads the
//     server starts join the scan as they start;
//   - LibTorch's four AOTInductor run functions (aoti_interpose.cc) are
//     jumps through a table, filled with the attach library's versions once
//     it is loaded and with LibTorch's own otherwise, so a package run is
//     still marked (x86-64; elsewhere they are not defined here).
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "torchscan_dispatch/integrations/attach/aoti_runs.h"

namespace {

using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
using AttachCreate = int (*)(Create, pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
using Open = void* (*)(const char*, int);

std::atomic<AttachCreate> attach_create{nullptr};
void* attach_handle = nullptr;  // under load_mu
std::atomic<bool> tried{false};
pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

Open RealDlopen() {
  static const Open real = reinterpret_cast<Open>(dlsym(RTLD_NEXT, "dlopen"));
  return real;
}

bool LibTorchLoaded() {
  int found = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* slash = info->dlpi_name ? std::strrchr(info->dlpi_name, '/') : nullptr;
        const char* base = slash ? slash + 1 : info->dlpi_name;
        if (base && std::strncmp(base, "libc10.so", 9) == 0) *static_cast<int*>(out) = 1;
        return *static_cast<int*>(out);
      },
      &found);
  return found != 0;
}

// Loads the attach library once LibTorch is here; `late`: after the program
// started (threads that exist already join on their first operator).
void LoadAttach(bool late) {
  if (tried.load() || std::getenv("TORCHSCAN_ATTACH_OUTPUT") == nullptr || !LibTorchLoaded()) return;
  pthread_mutex_lock(&load_mu);
  if (!tried.exchange(true)) {
    Dl_info self{};
    std::string path = "libtorchscan_attach.so";
    if (dladdr(reinterpret_cast<void*>(&LoadAttach), &self) != 0 && self.dli_fname != nullptr) {
      const std::string own = self.dli_fname;
      const size_t slash = own.rfind('/');
      if (slash != std::string::npos) path = own.substr(0, slash + 1) + path;
    }
    if (late) setenv("TORCHSCAN_ATTACH_LATE", "1", 1);
    void* handle = RealDlopen()(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      std::fprintf(stderr, "torchscan attach: not attaching: %s\n", dlerror());
    } else {
      attach_handle = handle;
      attach_create.store(reinterpret_cast<AttachCreate>(dlsym(handle, "torchscan_attach_pthread_create")));
    }
  }
  pthread_mutex_unlock(&load_mu);
}

}  // namespace

#if defined(__x86_64__)
// The functions and their names: aoti_runs.h.

// Where each run function jumps: never null once this library's
// initialiser ran in a process that has LibTorch (a call can only come from
// LibTorch code), refreshed when the attach library or LibTorch arrives.
extern "C" __attribute__((visibility("hidden"))) void* torchscan_preload_aoti[4];
void* torchscan_preload_aoti[4] = {nullptr, nullptr, nullptr, nullptr};

// Each is one indirect jump: the arguments, the hidden return slot and the
// stack are the caller's, untouched, so no signature is restated here.
#define TORCHSCAN_TRAMPOLINE(i, name)                               \
  asm(".text\n.globl " #name "\n.type " #name ", @function\n" #name \
      ":\n"                                                         \
      "  jmp *torchscan_preload_aoti+" #i "*8(%rip)\n.size " #name ", .-" #name "\n");
TORCHSCAN_AOTI_RUNS(TORCHSCAN_TRAMPOLINE)

namespace {
void ResolveAotiRuns() {
  using torchscan::kAotiRuns;
  pthread_mutex_lock(&load_mu);
  for (int i = 0; i < 4; ++i) {
    void* fn = attach_handle ? dlsym(attach_handle, kAotiRuns[i]) : nullptr;  // marks the run, then LibTorch's
    if (fn == nullptr) fn = dlsym(RTLD_NEXT, kAotiRuns[i]);                   // LibTorch's own
    if (fn != nullptr) __atomic_store_n(&torchscan_preload_aoti[i], fn, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&load_mu);
}
}  // namespace
#else
namespace {
void ResolveAotiRuns() {}
}  // namespace
#endif

namespace {
__attribute__((constructor)) void OnLoad() {
  LoadAttach(/*late=*/false);
  ResolveAotiRuns();
}
}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  void* handle = RealDlopen()(file, mode);
  if (handle != nullptr && !tried.load()) {
    LoadAttach(/*late=*/true);
    ResolveAotiRuns();  // LibTorch may have come with this dlopen
  }
  return handle;
}

extern "C" __attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                                     void* (*fn)(void*), void* arg) {
  static const Create real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  if (AttachCreate hook = attach_create.load()) return hook(real, thread, attr, fn, arg);
  return real(thread, attr, fn, arg);
}

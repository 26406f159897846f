// A host that is not a LibTorch program: it dlopens a backend library that
// is (libexample_server.so, the example server as a library), the way an
// inference server loads its backends, and runs it with its own arguments:
//
//   dlopen_host BACKEND.so [SERVER ARGS...]
//
// tools/attach.py --wrapper attaches to it once LibTorch arrives with the
// backend (torchscan_dispatch/integrations/attach/preload.cc; tests/python/serving/test_attach_wrapper.py).
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dlopen_host BACKEND.so [ARGS...]\n");
    return 2;
  }
  void* backend = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (backend == nullptr) {
    std::fprintf(stderr, "dlopen_host: %s\n", dlerror());
    return 2;
  }
  using Main = int (*)(int, char**);
  auto run = reinterpret_cast<Main>(dlsym(backend, "example_server_main"));
  if (run == nullptr) {
    std::fprintf(stderr, "dlopen_host: %s has no example_server_main\n", argv[1]);
    return 2;
  }
  return run(argc - 1, argv + 1);  // the backend sees its own argv[0] and arguments
}

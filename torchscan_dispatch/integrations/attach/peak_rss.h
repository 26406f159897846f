// The process's peak resident memory since exec (VmHWM of /proc/self/status),
// in KiB, or -1 when it cannot be read. Unlike getrusage's ru_maxrss it does
// not count a launcher that forked and then exec'd this process. Header-only
// and plain C library: the attach library and the example servers read it
// without linking the engine.
#pragma once

#include <cstdio>

namespace torchscan {

inline long PeakResidentKib() {
  long kib = -1;
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f)) {
      if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    }
    std::fclose(f);
  }
  return kib;
}

}  // namespace torchscan

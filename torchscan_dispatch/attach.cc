// libtorchscan_attach.so: preloaded into an unmodified LibTorch binary by
// tools/attach.py. It scans every thread of the process (Threads::kAll) from
// before main() and writes the scan report to $TORCHSCAN_ATTACH_OUTPUT at exit
// and each time $TORCHSCAN_ATTACH_SIGNAL arrives. Loaded without that
// variable it does nothing.
//
// The signal handler only writes a byte to a pipe (async-signal-safe); a
// writer thread builds the report from a snapshot, so the server's threads
// keep running and no call is lost: calls still running at a snapshot are
// reported by the next one and by the report at exit.
#include <ATen/Version.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "torchscan_built_against.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

// What this library needs from the process's LibTorch, and what it found.
struct Footing {
  std::string built_against = TORCHSCAN_BUILT_TORCH_VERSION;
  std::string loaded;  // TORCH_VERSION of the LibTorch in this process
  int library_abi = _GLIBCXX_USE_CXX11_ABI;
  int loaded_abi = -1;  // -1: could not tell
  std::string torch_library;  // path of the loaded libc10

  std::string Problem() const {
    const std::string built = built_against.substr(0, built_against.find('+'));
    if (loaded != built) {
      return "the binary runs torch " + loaded + " but this TorchScan library was built against torch " +
             built_against + "; rebuild TorchScan against the binary's torch (see README, attach)";
    }
    if (loaded_abi != library_abi) {
      return "the binary's LibTorch uses _GLIBCXX_USE_CXX11_ABI=" + std::to_string(loaded_abi) +
             " but this TorchScan library was built with " + std::to_string(library_abi);
    }
    return "";
  }
};

Footing Inspect() {
  Footing f;
  const std::string config = at::show_config();
  const std::string key = "TORCH_VERSION=";
  if (auto at = config.find(key); at != std::string::npos) {
    const auto start = at + key.size();
    f.loaded = config.substr(start, config.find_first_of(", \n", start) - start);
  }
  // The C++ ABI shows in the mangled names LibTorch exports: std::string
  // parameters are std::__cxx11::basic_string under the new ABI.
  void* cxx11 = dlsym(RTLD_DEFAULT,
                      "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_"
                      "traitsIcESaIcEEE");
  void* old = dlsym(RTLD_DEFAULT, "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs");
  f.loaded_abi = cxx11 ? 1 : old ? 0 : -1;
  Dl_info info;
  if ((cxx11 || old) && dladdr(cxx11 ? cxx11 : old, &info) && info.dli_fname) {
    f.torch_library = info.dli_fname;
  }
  return f;
}

struct Attached {
  std::string output;
  std::unique_ptr<Session> session;
  std::mutex write_mu;  // one report at a time
  int sequence = 0;
  int pipe_read = -1, pipe_write = -1;
  int signo = 0;
  pid_t pid = 0;        // the attached process (a fork()ed child writes nothing)
  bool closed = false;  // the exit report is written: no more reports
};
Attached* attached = nullptr;  // lives until the process ends

// Caller holds attached->write_mu.
void WriteReportLocked(const char* reason) {
  if (attached->closed || getpid() != attached->pid) return;
  absl::StatusOr<std::string> text = attached->session->ScanReportJson();
  if (!text.ok()) {
    std::fprintf(stderr, "torchscan attach: no report (%s)\n", std::string(text.status().message()).c_str());
    return;
  }
  nlohmann::json report = nlohmann::json::parse(*text);
  report["attach"] = {{"reason", reason}, {"sequence", ++attached->sequence}, {"pid", getpid()}};
  const std::string tmp = attached->output + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << report.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) {
      std::fprintf(stderr, "torchscan attach: cannot write %s\n", tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), attached->output.c_str()) != 0) {
    std::fprintf(stderr, "torchscan attach: cannot rename %s: %s\n", tmp.c_str(), std::strerror(errno));
  }
}

void WriteReport(const char* reason) {
  std::lock_guard<std::mutex> lock(attached->write_mu);
  WriteReportLocked(reason);
}

void OnSignal(int) {
  const int saved = errno;
  const char byte = 's';
  (void)!write(attached->pipe_write, &byte, 1);
  errno = saved;
}

void Writer() {
  char byte;
  for (;;) {
    const ssize_t n = read(attached->pipe_read, &byte, 1);
    if (n == 1) {
      WriteReport("signal");
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;
    }
  }
}

void AtExit() {
  // Stop first: every thread's later calls (static destructors, threads the
  // server left running) are not part of the scan. The lock keeps a
  // snapshot the writer thread may be taking from racing with the stop.
  std::lock_guard<std::mutex> lock(attached->write_mu);
  if (getpid() != attached->pid) return;
  (void)attached->session->Stop();
  WriteReportLocked("exit");
  attached->closed = true;  // a signal arriving during teardown writes nothing
  if (attached->signo > 0) signal(attached->signo, SIG_IGN);
}

// Every thread created after the library loaded joins the scan as it starts,
// so no RecordFunction callback is needed to catch first calls.
struct Start {
  void* (*fn)(void*);
  void* arg;
};

void* StartJoined(void* p) {
  const Start start = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  JoinAllThreadsScan();
  return start.fn(start.arg);
}

int SignalNumber(const std::string& name) {
  if (name.empty()) return 0;
  const std::string n = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  if (n == "USR1") return SIGUSR1;
  if (n == "USR2") return SIGUSR2;
  if (n == "HUP") return SIGHUP;
  if (n == "WINCH") return SIGWINCH;
  return -1;
}

__attribute__((constructor)) void Attach() {
  const Footing footing = Inspect();
  if (std::getenv("TORCHSCAN_ATTACH_PROBE")) {
    // The launcher's compatibility check: report and leave before main().
    nlohmann::json probe = {{"built_against", footing.built_against}, {"loaded", footing.loaded},
                            {"library_abi", footing.library_abi},     {"loaded_abi", footing.loaded_abi},
                            {"torch_library", footing.torch_library}, {"problem", footing.Problem()}};
    std::printf("TORCHSCAN_PROBE %s\n", probe.dump().c_str());
    std::fflush(stdout);
    _exit(0);
  }
  const char* output = std::getenv("TORCHSCAN_ATTACH_OUTPUT");
  if (output == nullptr) return;
  if (const std::string problem = footing.Problem(); !problem.empty()) {
    std::fprintf(stderr, "torchscan attach: not attaching: %s\n", problem.c_str());
    return;
  }
  const char* signal_name = std::getenv("TORCHSCAN_ATTACH_SIGNAL");
  const int signo = SignalNumber(signal_name ? signal_name : "");
  if (signo < 0) {
    std::fprintf(stderr, "torchscan attach: not attaching: unsupported signal %s (USR1, USR2, HUP, WINCH)\n",
                 signal_name);
    return;
  }
  attached = new Attached();
  attached->output = output;
  attached->pid = getpid();
  attached->signo = signo;
  // Child processes the server starts are not part of this attach.
  unsetenv("TORCHSCAN_ATTACH_OUTPUT");
  unsetenv("TORCHSCAN_ATTACH_SIGNAL");
  ScanOptions options;
  options.threads = Threads::kAll;
  options.join_on_first_call = false;     // threads join at creation (pthread_create below)
  options.record_owned_children = false;  // same reports, fewer calls recorded
  if (const char* ts = std::getenv("TORCHSCAN_ATTACH_TORCHSCRIPT_SCOPES"); ts && std::string(ts) == "0") {
    options.torchscript_scopes = false;
  }
  attached->session = std::make_unique<Session>(options);
  if (absl::Status st = attached->session->Start(); !st.ok()) {
    std::fprintf(stderr, "torchscan attach: not attaching: %s\n", std::string(st.message()).c_str());
    return;
  }
  if (signo > 0) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      attached->pipe_read = fds[0];
      attached->pipe_write = fds[1];
      fcntl(fds[1], F_SETFL, O_NONBLOCK);
      std::thread(Writer).detach();
      struct sigaction sa;
      std::memset(&sa, 0, sizeof(sa));
      sa.sa_handler = &OnSignal;
      sa.sa_flags = SA_RESTART;
      sigemptyset(&sa.sa_mask);
      sigaction(signo, &sa, nullptr);
    }
  }
  std::atexit(&AtExit);
}

}  // namespace
}  // namespace torchscan

// Interposes on the binary's pthread_create (the only symbol this library
// exports, see attach.lds).
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const Create real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  if (torchscan::attached == nullptr) return real(thread, attr, fn, arg);
  auto* start = new torchscan::Start{fn, arg};
  const int rc = real(thread, attr, &torchscan::StartJoined, start);
  if (rc != 0) delete start;
  return rc;
}

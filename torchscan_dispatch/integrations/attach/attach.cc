// libtorchscan_attach.so: preloaded into an unmodified LibTorch binary by
// tools/attach.py. It scans every thread of the process (Threads::kAll) from
// before main() and writes the scan report to $TORCHSCAN_ATTACH_OUTPUT at exit
// and each time $TORCHSCAN_ATTACH_SIGNAL arrives. Loaded without that
// variable it does nothing. With $TORCHSCAN_ATTACH_TRACE it also times every
// call and writes the scan as a trace (Session::TraceJson) there, after the
// final report.
//
// The signal handler only writes a byte to a pipe (async-signal-safe); a
// writer thread builds the report from a snapshot, so the server's threads
// keep running and no call is lost: calls still running at a snapshot are
// reported by the next one and by the report at exit.
//
// With TORCHSCAN_ATTACH_REPORT_ON_TERM=1, SIGTERM (a container's stop
// signal) goes through the same pipe: the writer stops the scan, writes the
// final report (reason "sigterm") and then re-raises SIGTERM with the action
// it had before, so the process still ends the way SIGTERM ends it (status
// 143). A server that installs its own SIGTERM handler replaces this one and
// exits its own way; the report is then written at exit.
//
// The handler and its pipe are the first thing the library sets up
// (HoldReportSignal, before its other initialisers): a signal that arrives
// before the scan and the writer are ready waits in the pipe and is served
// once they are. Before that (from exec through LibTorch's initialisers) the
// launcher keeps the signal blocked, and HoldReportSignal unblocks it.
#include <ATen/Version.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <initializer_list>
#include <thread>

#include <nlohmann/json.hpp>

#include "torchscan_built_against.h"
#include "torchscan_dispatch/integrations/attach/peak_rss.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

// What this library needs from the process's LibTorch, and what it found.
struct Footing {
  std::string built_against = TORCHSCAN_BUILT_TORCH_VERSION;
  std::string loaded;  // TORCH_VERSION of the LibTorch in this process
  int library_abi = _GLIBCXX_USE_CXX11_ABI;
  int loaded_abi = -1;        // -1: could not tell
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

// The report signal, set up before this library's C++ objects are
// constructed and read by the signal handler: plain data only.
struct ReportSignal {
  int signo;  // 0: none
  int pipe_read, pipe_write;
  pid_t pid;  // the process that set it up (a fork()ed child ignores it)
  struct sigaction previous;
  bool term;  // SIGTERM reports, then ends the process (TORCHSCAN_ATTACH_REPORT_ON_TERM)
  struct sigaction previous_term;
};
ReportSignal report_signal = {0, -1, -1, 0, {}, false, {}};

struct Attached {
  std::string output;
  std::string trace;  // TORCHSCAN_ATTACH_TRACE ("": none)
  std::unique_ptr<Session> session;
  std::mutex write_mu;  // one report at a time
  int sequence = 0;
  unsigned temporaries = 0;  // numbers this process's temporary files (PublishLocked)
  pid_t pid = 0;             // the attached process (a fork()ed child writes nothing)
  bool closed = false;       // the exit report is written: no more reports
};
Attached* attached = nullptr;  // lives until the process ends

// Writes text to path through a temporary in the same directory (so the
// rename is atomic) whose name no other process or writer uses: the pid and
// this process's count, created with O_EXCL (a stale file of a recycled pid
// is skipped, never reused). Other processes writing the same path publish
// whole files only; the temporary is removed if anything fails. Caller holds
// attached->write_mu.
bool PublishLocked(const std::string& path, std::initializer_list<std::string_view> pieces) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(attached->temporaries++);
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    std::fprintf(stderr, "torchscan attach: cannot create %s: %s (is its directory writable?)\n", tmp.c_str(),
                 std::strerror(errno));
    return false;
  }
  const char* what = nullptr;
  for (std::string_view text : pieces) {  // pieces, not one string: a report can be tens of MB
    for (size_t done = 0; done < text.size() && !what;) {
      const ssize_t n = write(fd, text.data() + done, text.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        what = "write";
      }
    }
  }
  if (close(fd) != 0 && !what) what = "close";
  if (!what && std::rename(tmp.c_str(), path.c_str()) != 0) what = "rename";
  if (what) {
    std::fprintf(stderr, "torchscan attach: no report written: cannot %s %s: %s\n", what, tmp.c_str(),
                 std::strerror(errno));
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

// Caller holds attached->write_mu.
void WriteReportLocked(const char* reason) {
  if (attached->closed || getpid() != attached->pid) return;
  const auto started = std::chrono::steady_clock::now();
  StatusOr<std::string> text = attached->session->ScanReportJson();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!text.ok()) {
    std::fprintf(stderr, "torchscan attach: no report (%s)\n", text.status().message().c_str());
    return;
  }
  // The report's text is published as the session wrote it (never re-parsed:
  // nlohmann would turn counts past 2^64 into floats); "attach" goes first.
  // report_seconds: building the report (what the server waits for at exit);
  // peak_rss_kib: the process's peak resident memory so far, this report's
  // building included (VmHWM; -1 if unreadable).
  const nlohmann::json attach = {{"reason", reason},
                                 {"sequence", ++attached->sequence},
                                 {"pid", getpid()},
                                 {"report_seconds", seconds},
                                 {"peak_rss_kib", PeakResidentKib()}};
  const std::string head = "{\"attach\":" + attach.dump() + ",";
  PublishLocked(attached->output, {head, std::string_view(*text).substr(1), "\n"});
}

// After the final report, the scan stopped: the trace needs every call's
// end (snapshots have none). Caller holds attached->write_mu.
void WriteTraceLocked() {
  if (attached->trace.empty() || attached->closed || getpid() != attached->pid) return;
  StatusOr<std::string> text = attached->session->TraceJson();
  if (!text.ok()) {
    std::fprintf(stderr, "torchscan attach: no trace (%s)\n", text.status().message().c_str());
    return;
  }
  PublishLocked(attached->trace, {*text, "\n"});
}

void WriteReport(const char* reason) {
  std::lock_guard<std::mutex> lock(attached->write_mu);
  WriteReportLocked(reason);
}

void OnSignal(int signo) {
  const int saved = errno;
  if (getpid() == report_signal.pid) {
    // Non-blocking: with a full pipe, reports are already pending.
    const char byte = signo == SIGTERM ? 't' : 's';
    (void)!write(report_signal.pipe_write, &byte, 1);
  }
  errno = saved;
}

// SIGTERM: the final report, then SIGTERM's own ending.
void ReportAndTerminate() {
  {
    std::lock_guard<std::mutex> lock(attached->write_mu);
    if (!attached->closed) {
      (void)attached->session->Stop();
      WriteReportLocked("sigterm");
      WriteTraceLocked();
      attached->closed = true;
    }
  }
  sigaction(SIGTERM, &report_signal.previous_term, nullptr);
  kill(getpid(), SIGTERM);
}

void Writer() {
  char byte;
  for (;;) {
    const ssize_t n = read(report_signal.pipe_read, &byte, 1);
    if (n == 1 && byte == 't') {
      ReportAndTerminate();
    } else if (n == 1) {
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
  if (getpid() != attached->pid || attached->closed) return;
  (void)attached->session->Stop();
  WriteReportLocked("exit");
  WriteTraceLocked();
  attached->closed = true;  // a signal arriving during teardown writes nothing
  if (report_signal.signo > 0) signal(report_signal.signo, SIG_IGN);
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

// 0 for no name, -1 for an unsupported one. Plain C: runs before this
// library's C++ objects are constructed.
int SignalNumber(const char* name) {
  if (name == nullptr || *name == '\0') return 0;
  if (std::strncmp(name, "SIG", 3) == 0) name += 3;
  if (std::strcmp(name, "USR1") == 0) return SIGUSR1;
  if (std::strcmp(name, "USR2") == 0) return SIGUSR2;
  if (std::strcmp(name, "HUP") == 0) return SIGHUP;
  if (std::strcmp(name, "WINCH") == 0) return SIGWINCH;
  return -1;
}

// The first initialiser of this library (priority 101 runs before the
// default-priority ones, the scan's included): from here on the report
// signal is caught and remembered in the pipe. The launcher blocked it
// before exec (TORCHSCAN_ATTACH_SIGNAL_HELD); unblocking it now delivers a
// signal that arrived since, to this handler.
bool CatchTerm() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = &OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTERM, nullptr, &report_signal.previous_term) != 0 ||
      report_signal.previous_term.sa_handler == SIG_IGN) {
    return false;  // started with SIGTERM ignored: it stays ignored
  }
  if (sigaction(SIGTERM, &sa, nullptr) != 0) {
    std::fprintf(stderr, "torchscan attach: no report on SIGTERM: sigaction: %s\n", std::strerror(errno));
    return false;
  }
  report_signal.term = true;
  return true;
}

__attribute__((constructor(101))) void HoldReportSignal() {
  int signo = SignalNumber(std::getenv("TORCHSCAN_ATTACH_SIGNAL"));
  const char* on_term = std::getenv("TORCHSCAN_ATTACH_REPORT_ON_TERM");
  const bool term = on_term != nullptr && std::strcmp(on_term, "1") == 0;
  if (std::getenv("TORCHSCAN_ATTACH_OUTPUT") == nullptr || (signo <= 0 && !term)) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "torchscan attach: no report signal: pipe: %s\n", std::strerror(errno));
    return;  // a held signal stays blocked: it cannot kill the server either
  }
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  report_signal.pipe_read = fds[0];
  report_signal.pipe_write = fds[1];
  report_signal.pid = getpid();
  if (term && CatchTerm() && std::getenv("TORCHSCAN_ATTACH_TERM_HELD")) {
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &held, nullptr);
  }
  if (signo <= 0) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = &OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(signo, &sa, &report_signal.previous) != 0) {
    std::fprintf(stderr, "torchscan attach: no report signal: sigaction: %s\n", std::strerror(errno));
    if (!report_signal.term) {
      close(fds[0]);
      close(fds[1]);
      report_signal.pipe_read = report_signal.pipe_write = -1;
    }
    return;
  }
  report_signal.signo = signo;
  if (std::getenv("TORCHSCAN_ATTACH_SIGNAL_HELD")) {
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, signo);
    pthread_sigmask(SIG_UNBLOCK, &held, nullptr);
  }
}

// Not attaching after all: the signal gets its previous action back, and
// signals that came meanwhile are dropped (they asked for reports).
void ReleaseReportSignal() {
  if (report_signal.term) {
    sigaction(SIGTERM, &report_signal.previous_term, nullptr);
    report_signal.term = false;
  }
  if (report_signal.pipe_read < 0) return;
  if (report_signal.signo > 0) sigaction(report_signal.signo, &report_signal.previous, nullptr);
  report_signal.signo = 0;
  fcntl(report_signal.pipe_read, F_SETFL, O_NONBLOCK);
  char bytes[64];
  ssize_t n, dropped = 0;
  bool terminate = false;
  while ((n = read(report_signal.pipe_read, bytes, sizeof(bytes))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (bytes[i] == 't') {
        terminate = true;
      } else {
        ++dropped;
      }
    }
  }
  if (dropped > 0) {
    std::fprintf(stderr, "torchscan attach: %zd report signal(s) ignored: not attached\n", dropped);
  }
  close(report_signal.pipe_read);
  close(report_signal.pipe_write);
  report_signal.pipe_read = report_signal.pipe_write = -1;
  // A SIGTERM that came meanwhile still ends the process, with its own action.
  if (terminate) kill(getpid(), SIGTERM);
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
    ReleaseReportSignal();
    return;
  }
  const char* signal_name = std::getenv("TORCHSCAN_ATTACH_SIGNAL");
  if (SignalNumber(signal_name) < 0) {
    std::fprintf(stderr, "torchscan attach: not attaching: unsupported signal %s (USR1, USR2, HUP, WINCH)\n",
                 signal_name);
    return;
  }
  const char* trace = std::getenv("TORCHSCAN_ATTACH_TRACE");
  if (trace != nullptr && std::strcmp(trace, output) == 0) {
    std::fprintf(stderr,
                 "torchscan attach: not attaching: TORCHSCAN_ATTACH_TRACE and TORCHSCAN_ATTACH_OUTPUT "
                 "name the same file (%s); give the trace its own file\n",
                 trace);
    ReleaseReportSignal();
    return;
  }
  attached = new Attached();
  attached->output = output;
  if (trace != nullptr) attached->trace = trace;
  attached->pid = getpid();
  // Child processes the server starts are not part of this attach.
  unsetenv("TORCHSCAN_ATTACH_OUTPUT");
  unsetenv("TORCHSCAN_ATTACH_TRACE");
  unsetenv("TORCHSCAN_ATTACH_SIGNAL");
  unsetenv("TORCHSCAN_ATTACH_SIGNAL_HELD");
  unsetenv("TORCHSCAN_ATTACH_REPORT_ON_TERM");
  unsetenv("TORCHSCAN_ATTACH_TERM_HELD");
  // Loaded by libtorchscan_preload.so after the program started (a host that
  // dlopened LibTorch): threads that exist already join on their first operator.
  const bool late = std::getenv("TORCHSCAN_ATTACH_LATE") != nullptr;
  unsetenv("TORCHSCAN_ATTACH_LATE");
  ScanOptions options;
  options.threads = Threads::kAll;
  options.join_on_first_call = late;      // otherwise threads join at creation (pthread_create below)
  options.record_owned_children = false;  // same reports, fewer calls recorded
  if (const char* ts = std::getenv("TORCHSCAN_ATTACH_TORCHSCRIPT_SCOPES"); ts && std::string(ts) == "0") {
    options.torchscript_scopes = false;
  }
  // Each top-level TorchScript forward is a request (the server's own
  // RequestScopes, if it has them, take precedence).
  if (const char* tr = std::getenv("TORCHSCAN_ATTACH_TORCHSCRIPT_REQUESTS"); !tr || std::string(tr) != "0") {
    options.torchscript_requests = true;
  }
  // A trace needs every thread's call times (two clock reads per call) and
  // every call held: --trace implies TORCHSCAN_ATTACH_STREAMING=0.
  options.timestamps = !attached->trace.empty();
  // Streaming (on by default): memory grows with module calls and requests,
  // not with operator calls, and the exit report sums what was folded while
  // the server ran. TORCHSCAN_ATTACH_STREAMING=0 holds every call.
  const char* st = std::getenv("TORCHSCAN_ATTACH_STREAMING");
  if (!options.timestamps && (!st || std::string(st) != "0")) {
    options.streaming = true;
    // Smaller folds than a scan's default: each fold's transient memory
    // (plans and tallies over the calls it folds) adds to the server's peak,
    // and the aggregated rows make a fold's cost per call the same either way.
    options.fold_every = 512;
    // How many calls are held before a fold (tests fold at every request).
    if (const char* n = std::getenv("TORCHSCAN_ATTACH_FOLD_EVERY"); n && std::atoll(n) > 0) {
      options.fold_every = static_cast<size_t>(std::atoll(n));
    }
  }
  // Layer rows are aggregated across requests (one row per module identity
  // and call signature: a report bounded by the model, not by the traffic);
  // TORCHSCAN_ATTACH_PER_REQUEST_LAYERS keeps the rows of the last N
  // requests as well ("all": every request's).
  if (const char* keep = std::getenv("TORCHSCAN_ATTACH_PER_REQUEST_LAYERS"); keep && *keep) {
    if (std::string(keep) == "all") {
      options.per_request_rows = SIZE_MAX;
    } else if (std::atoll(keep) > 0) {
      options.per_request_rows = static_cast<size_t>(std::atoll(keep));
    }
  }
  unsetenv("TORCHSCAN_ATTACH_PER_REQUEST_LAYERS");
  attached->session = std::make_unique<Session>(options);
  if (Status st = attached->session->Start(); !st.ok()) {
    std::fprintf(stderr, "torchscan attach: not attaching: %s\n", st.message().c_str());
    ReleaseReportSignal();
    return;
  }
  // Serves the signals held in the pipe since HoldReportSignal, then the rest.
  if (report_signal.pipe_read >= 0) std::thread(Writer).detach();
  std::atexit(&AtExit);
}

}  // namespace
}  // namespace torchscan

using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

// A thread start through `real`, joining the scan when attached. Also what
// libtorchscan_preload.so (preload.cc) calls from its own pthread_create
// when it loaded this library after the program started.
extern "C" int torchscan_attach_pthread_create(Create real, pthread_t* thread, const pthread_attr_t* attr,
                                               void* (*fn)(void*), void* arg) {
  if (torchscan::attached == nullptr) return real(thread, attr, fn, arg);
  auto* start = new torchscan::Start{fn, arg};
  const int rc = real(thread, attr, &torchscan::StartJoined, start);
  if (rc != 0) delete start;
  return rc;
}

// Interposes on the binary's pthread_create (see attach.lds for what this
// library exports).
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  static const Create real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  return torchscan_attach_pthread_create(real, thread, attr, fn, arg);
}

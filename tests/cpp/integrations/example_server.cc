// An example C++ inference server: loads a TorchScript model (written by
// tests/fixtures/serving.py) and serves N requests on a pool of W worker
// threads. Built as `example_server` it is an ordinary LibTorch binary with
// no TorchScan in it, which tools/attach.py scans from outside. Built as
// `example_server_scanned` (EXAMPLE_SERVER_SCANNED) it accepts --scan and
// scans itself through the public C++ API: one all-threads scan, one
// RequestScope per request.
//
//   example_server --model m.pt --requests N --workers W --input 1,3,32,32
//                  [--scan REPORT.json [--join-at-start] [--lean] [--per-request-layers N|all]]
//                  [--pace-ms MS]
//
// --lean: ScanOptions::record_owned_children = false (same report, fewer
// calls recorded).
// --per-request-layers: the report keeps the last N requests' own layer
// rows ("all": every request's) beside the rows aggregated across requests.
// --join-at-start: workers join the scan when they start
// (torchscan::JoinAllThreadsScan) instead of on their first operator, which
// spares every ATen call the RecordFunction input boxing.
//
// Prints "served K" after each request and "elapsed_seconds S" at the end.
// Built as `libexample_server.so` (EXAMPLE_SERVER_LIBRARY) it is a library
// whose example_server_main a host without LibTorch dlopens and calls.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "torchscan_dispatch/integrations/attach/peak_rss.h"

#ifdef EXAMPLE_SERVER_SCANNED
#include "torchscan_dispatch/torchscan.h"
#endif

namespace {

struct Args {
  std::string model, scan_report, per_request_layers;
  int requests = 8, workers = 2, pace_ms = 0;
  bool join_at_start = false, lean = false;
  std::vector<int64_t> input = {1, 3, 32, 32};
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "example_server: %s\nusage: example_server --model M.pt [--requests N] [--workers W] "
               "[--input 1,3,32,32] [--scan REPORT.json [--join-at-start] [--lean]] [--pace-ms MS]\n",
               why);
  return 2;
}

}  // namespace

#ifdef EXAMPLE_SERVER_LIBRARY
// libexample_server.so: the same server as a library a host dlopens
// (tests/cpp/integrations/dlopen_host.cc), which is how LibTorch first enters that host.
extern "C" __attribute__((visibility("default"))) int example_server_main(int argc, char** argv) {
#else
int main(int argc, char** argv) {
#endif
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--join-at-start" || flag == "--lean") {
      (flag == "--lean" ? a.lean : a.join_at_start) = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--model") {
      a.model = value;
    } else if (flag == "--requests") {
      a.requests = std::stoi(value);
    } else if (flag == "--workers") {
      a.workers = std::stoi(value);
    } else if (flag == "--scan") {
      a.scan_report = value;
    } else if (flag == "--per-request-layers") {
      a.per_request_layers = value;
    } else if (flag == "--pace-ms") {
      a.pace_ms = std::stoi(value);
    } else if (flag == "--input") {
      a.input.clear();
      std::stringstream ss(value);
      for (std::string d; std::getline(ss, d, ',');) a.input.push_back(std::stoll(d));
    } else {
      return Usage(("unknown flag " + flag).c_str());
    }
  }
  if (a.model.empty()) return Usage("--model is required");

  torch::jit::Module model = torch::jit::load(a.model);
  model.eval();

#ifdef EXAMPLE_SERVER_SCANNED
  std::unique_ptr<torchscan::Session> session;
  if (!a.scan_report.empty()) {
    torchscan::ScanOptions options;
    options.threads = torchscan::Threads::kAll;
    options.join_on_first_call = !a.join_at_start;
    options.record_owned_children = !a.lean;
    if (a.per_request_layers == "all") {
      options.per_request_rows = SIZE_MAX;
    } else if (!a.per_request_layers.empty()) {
      options.per_request_rows = static_cast<size_t>(std::stoll(a.per_request_layers));
    }
    session = std::make_unique<torchscan::Session>(options);
    if (torchscan::Status st = session->Start(); !st.ok()) {
      std::fprintf(stderr, "example_server: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
#else
  if (!a.scan_report.empty()) return Usage("--scan needs the example_server_scanned build");
#endif

  std::atomic<int> next{0}, served{0};
  std::mutex print_mu;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < a.workers; ++w) {
    pool.emplace_back([&] {
#ifdef EXAMPLE_SERVER_SCANNED
      if (a.join_at_start) torchscan::JoinAllThreadsScan();
#endif
      at::NoGradGuard no_grad;
      for (int r = next++; r < a.requests; r = next++) {
#ifdef EXAMPLE_SERVER_SCANNED
        std::unique_ptr<torchscan::RequestScope> request;
        if (session) request = std::make_unique<torchscan::RequestScope>(*session, "request-" + std::to_string(r));
#endif
        at::Tensor x = at::ones(a.input);
        at::Tensor y = model.forward({x}).toTensor();
#ifdef EXAMPLE_SERVER_SCANNED
        request.reset();
#endif
        const int k = ++served;
        {
          std::lock_guard<std::mutex> lock(print_mu);
          std::printf("served %d\n", k);
          std::fflush(stdout);
        }
        if (a.pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.pace_ms));
      }
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

#ifdef EXAMPLE_SERVER_SCANNED
  if (session) {
    if (torchscan::Status st = session->Stop(); !st.ok()) {
      std::fprintf(stderr, "example_server: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::ofstream(a.scan_report) << session->ScanReportJson().value() << "\n";
  }
#endif
  std::printf("peak_rss_kib %ld\n", torchscan::PeakResidentKib());
  std::printf("elapsed_seconds %.6f\n", seconds);
  return 0;
}

// A C++ server that runs an AOTInductor package (a .pt2 written by
// torch._inductor.aoti_compile_and_package) with
// torch::inductor::AOTIModelPackageLoader: an ordinary LibTorch binary with
// no TorchScan in it, which tests/python/api/test_aoti.py runs under the attach
// launcher (tools/attach.py).
//
//   aoti_server --package m.pt2 [--requests N] [--workers W] [--input 8,16]
//               [--via run|boxed_run|runner]
//
// Each request runs the model once on a fresh all-ones input of the given
// shape, through the entry point --via names: AOTIModelPackageLoader::run
// (default), AOTIModelPackageLoader::boxed_run, or the loader's
// AOTIModelContainerRunner::run (get_runner()). Prints "served K" after
// each request and "output_sum S" (the sum of the last request's first
// output, to check the run still computes the model) at the end.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::string package, via = "run";
  int requests = 4, workers = 1;
  std::vector<int64_t> input = {8, 16};
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "aoti_server: %s\nusage: aoti_server --package M.pt2 [--requests N] [--workers W] [--input 8,16] "
               "[--via run|boxed_run|runner]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--package") {
      a.package = value;
    } else if (flag == "--requests") {
      a.requests = std::stoi(value);
    } else if (flag == "--workers") {
      a.workers = std::stoi(value);
    } else if (flag == "--via") {
      a.via = value;
    } else if (flag == "--input") {
      a.input.clear();
      std::stringstream ss(value);
      for (std::string d; std::getline(ss, d, ',');) a.input.push_back(std::stoll(d));
    } else {
      return Usage(("unknown flag " + flag).c_str());
    }
  }
  if (a.package.empty()) return Usage("--package is required");
  if (a.via != "run" && a.via != "boxed_run" && a.via != "runner")
    return Usage("--via must be run, boxed_run or runner");
  if (a.requests < 0 || a.workers < 1) return Usage("--requests must be >= 0 and --workers >= 1");

  // One runner per worker, so concurrent requests never share a container.
  torch::inductor::AOTIModelPackageLoader loader(a.package, "model", false, static_cast<size_t>(a.workers));

  std::atomic<int> next{0}, served{0};
  std::mutex mu;
  double last_sum = 0;
  std::vector<std::thread> pool;
  for (int w = 0; w < a.workers; ++w) {
    pool.emplace_back([&] {
      at::NoGradGuard no_grad;
      while (next.fetch_add(1) < a.requests) {
        std::vector<at::Tensor> inputs = {at::ones(a.input)};
        std::vector<at::Tensor> outputs;
        if (a.via == "run") {
          outputs = loader.run(inputs);
        } else if (a.via == "boxed_run") {
          outputs = loader.boxed_run(std::move(inputs));
        } else {
          outputs = loader.get_runner()->run(inputs);
        }
        std::lock_guard<std::mutex> lock(mu);
        last_sum = outputs.at(0).sum().item<double>();
        std::printf("served %d\n", ++served);
        std::fflush(stdout);
      }
    });
  }
  for (auto& t : pool) t.join();
  std::printf("output_sum %.6f\n", last_sum);
  return 0;
}

// A program built outside the repository against the installed package
// (tests/python/install/test_install.py builds it with CMake and with make): it
// includes <torchscan/torchscan.h> only, uses its own abseil
// (other_abseil/), scans a matmul with a module scope and a caller formula,
// and prints the reports on stdout as JSON lines.
#include <ATen/ATen.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include <torchscan/torchscan.h>

int main() {
  // For the launcher's tests: proof that main() ran.
  if (const char* marker = std::getenv("CONSUMER_MAIN_RAN")) std::ofstream(marker) << "main ran\n";
  const absl::Status mine("the program's own abseil");
  std::cout << "{\"own_abseil\": \"" << mine.ToString() << "\"}\n";

  torchscan::Session session;
  // A caller formula for relu: 3 FLOPs per element (an arbitrary convention,
  // so the test can tell it was applied: 4 x 16 outputs -> 192).
  torchscan::Status st = session.SetOperatorFormula("aten::relu", [](const torchscan::OpCall& call) {
    return torchscan::FormulaResult::Complete(torchscan::Count(3) * call.output(0).tensor().numel());
  });
  if (!st.ok()) {
    std::cerr << st << "\n";
    return 1;
  }
  {
    torchscan::ScanGuard scan(session);
    torchscan::ModuleScope layer(session, "layer");
    at::relu(at::matmul(at::ones({4, 8}), at::ones({8, 16})));
  }
  // Errors are torchscan::Status values: a Session scans once.
  const torchscan::Status again = session.Start();
  std::cout << "{\"restart_code\": " << static_cast<int>(again.code()) << "}\n";
  std::cout << "{\"flops\": " << session.FlopReportJson().value() << "}\n";
  std::cout << "{\"layers\": " << session.LayersJson().value() << "}\n";
  try {
    (void)session.TraceJson().value();  // no timestamps were taken
  } catch (const torchscan::BadStatusAccess& e) {
    std::cout << "{\"trace_refused\": " << (e.status().code() == torchscan::StatusCode::kFailedPrecondition) << "}\n";
  }
  return 0;
}

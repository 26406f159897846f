// Token dependencies of a module call from the operators it ran: a data-flow
// pass over the recorded calls of one module scope (tensor identities, as the
// receptive-field pass follows them), from the call's input tensors' token
// axes to its output's. Mask values are not recorded (metadata only): the
// caller supplies what each attention mask lets through, read from the mask
// tensor the call actually ran with.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// Which source positions output position i depends on: one interval per
// output position, [lo[i], hi[i]], empty when hi[i] < lo[i].
struct TokenRows {
  std::vector<int64_t> lo, hi;
  int64_t rows() const { return static_cast<int64_t>(lo.size()); }
  bool empty(int64_t i) const { return hi[i] < lo[i]; }
  static TokenRows None(int64_t rows);
  static TokenRows Same(int64_t rows);
};

// The schema's compact relations: kind "none", "same_position", "prefix" or
// "all"; limit (-1: absent) and first_position (0: absent).
struct TokenRelation {
  std::string kind;
  int64_t limit = -1;
  int64_t first_position = 0;
};

// The named relation of `d` over a source of `source_length` positions, or
// nullopt when it is none of them (a sliding window, a gap).
std::optional<TokenRelation> NameRelation(const TokenRows& d, int64_t source_length);
// The rows of a named relation (`rows` outputs over `source_length` sources).
TokenRows RowsOf(const TokenRelation& r, int64_t rows, int64_t source_length);
// Output i reads the union of b's rows over a's row i (a: out -> mid, b: mid
// -> source); nullopt when a union is not one interval (`why` says so).
std::optional<TokenRows> ComposeRows(const TokenRows& a, const TokenRows& b, std::string* why);
// Row-wise union; nullopt when a row's union is not one interval.
std::optional<TokenRows> UniteRows(const TokenRows& a, const TokenRows& b);

// One input tensor of the module call: `source` numbers it (tensors passed
// twice are one source), `axis` is the dim holding its positions.
struct TokenInput {
  uintptr_t identity = 0;
  int32_t source = 0;
  int32_t axis = 0;
  int64_t length = 0;  // positions on `axis`
};

// What an attention mask lets through, the same for every batch element and
// head: visible[r] = keys [lo[r], hi[r]] of query row r, over a (rows, cols)
// mask that broadcasts to (L, S); or a reason it cannot be used.
struct TokenMask {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> lo, hi;
  std::string reason;  // non-empty: unusable, why
};

// A module call inside the analysed one whose relation is already known (a
// native attention layer, or a module analysed before): taken as one step.
struct TokenStep {
  int32_t scope = -1;
  std::string reason;  // non-empty: its relation is unavailable, why
  struct Input {
    uintptr_t identity = 0;
    int32_t axis = 0;
    int64_t length = 0;
    TokenRelation relation;
  };
  std::vector<Input> inputs;
  uintptr_t output = 0;
  int32_t output_axis = 0;
  int64_t output_length = 0;
};

struct TokenFlowRequest {
  int32_t scope = -1;  // a closed scope of the recorder
  std::vector<TokenInput> inputs;
  uintptr_t output = 0;               // the primary output tensor
  std::vector<int64_t> output_sizes;  // its shape
  std::map<uintptr_t, TokenMask> masks;
  std::vector<TokenStep> steps;
};

struct TokenFlowResult {
  bool complete = false;
  std::string reason;  // unavailable: why, naming the operator
  int32_t output_axis = 0;
  int64_t output_length = 0;
  std::map<int32_t, TokenRelation> sources;  // by TokenInput::source; every source
  // Two token-indexed tensors met in one product (attention written with
  // explicit products, which the pass does not analyse).
  bool explicit_attention = false;
};

// Whether the scope ran an attention operator, and the identities of the
// attention masks its calls used (the caller reads their values).
struct TokenMaskQuery {
  bool attention = false;
  bool softmax = false;  // a softmax ran: attention written with explicit products, perhaps
  std::vector<uintptr_t> masks;
};
TokenMaskQuery FindAttentionMasks(const Recorder& recorder, int32_t scope);

TokenFlowResult AnalyseTokenFlow(const Recorder& recorder, const TokenFlowRequest& request);

// The Python shim's entry (bindings.cc), on this thread's innermost scan:
// {"query": "masks", "scope", "path"} -> {"attention", "masks"}; otherwise a
// request as above -> {"status", "reason" | "output", "sources"} (JSON text).
std::string TokenFlowJson(std::string_view request);

}  // namespace torchscan

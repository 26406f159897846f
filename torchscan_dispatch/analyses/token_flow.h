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
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "torchscan_dispatch/core/recorder.h"

namespace at {
class Tensor;
}  // namespace at

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

// One row of a relation over positions that need not be one interval: sorted,
// disjoint, non-adjacent runs [lo, hi] (a mask's visible keys). Most rows
// are one or two runs, held inline: a mask's rows are copied, intersected
// and united row by row, and a heap block per row cost more than the rest.
using TokenRuns = absl::InlinedVector<std::pair<int64_t, int64_t>, 2>;
TokenRuns IntersectRuns(const TokenRuns& a, const TokenRuns& b);
TokenRuns UniteRuns(const TokenRuns& a, const TokenRuns& b);
// The rows as intervals, or nullopt when a row is two runs or more.
std::optional<TokenRows> IntervalRows(const std::vector<TokenRuns>& rows);

// What an attention mask lets through, as the caller read it from the mask
// tensor the call ran with (values are not recorded): the slice of its last
// dims that every batch element and head shares, `rows` x `cols` (a size of 1
// broadcasts), by row the keys it lets through; or what makes it unusable.
struct TokenMask {
  enum class Problem { kNone, kMeta, kDtype, kNonFinite, kDiffers };  // kMaskProblemNames order
  Problem problem = Problem::kNone;
  std::string dtype;           // kDtype: the mask's dtype, as the caller names it
  std::vector<int64_t> shape;  // the mask's sizes
  int64_t rows = 0, cols = 0;
  std::vector<TokenRuns> runs;  // by row
  std::string reason;           // non-empty: unusable in the caller's words, or malformed
};
// A summary's rows, cols and runs ([row, lo, hi, ...] in row order, each
// row's runs apart and increasing) set on `mask`; a malformed summary sets
// its reason instead. The one check of runs, for JSON and word requests.
void SetMaskRuns(TokenMask& mask, int64_t rows, int64_t cols, const std::vector<int64_t>& flat);
// Note [Reading a mask's values]
// A mask's summary (TokenMask's problem, rows, cols and runs) is read by the
// Python shim's tokens.read_mask with a few tensor operators, each costing
// more than its arithmetic on the small masks of most models. For a dense
// CPU mask of the dtypes attention takes (bool, float16, bfloat16, float32,
// float64) ReadMaskValues reads the same summary straight from its memory,
// element by element in row-major order; the operators stay the reading of
// every other mask (another device, dtype or layout, an empty or 0-d mask, a
// view with a negative or conjugate bit). The two agree on every mask
// (tests/python/modules/test_token_dependencies.py). Neither reads a view
// that reaches past its storage's memory (a storage resized under its
// tensors keeps their shapes): the shim refuses it with an error, which the
// analysis reports.
//
// The summary's words: the problem (kMaskProblems order: kNone, kNonFinite
// or kDiffers), rows, cols, then the runs [row, lo, hi, ...] of the slice
// every batch element and head shares; nullopt where ReadMaskValues does not
// apply. blocks_true: a boolean mask blocks where True; padding: a key
// padding mask (one row of keys per batch element).
std::optional<std::vector<int64_t>> ReadMaskValues(const at::Tensor& mask, bool blocks_true, bool padding);
// The summaries' names of TokenMask::Problem (kNone: no problem, named "").
inline constexpr int kMaskProblems = 5;
inline constexpr const char* kMaskProblemNames[kMaskProblems] = {"", "meta", "dtype", "non_finite", "differs"};
// Why a mask's values cannot be read (meta, dtype, NaN or +inf), the
// sentence's subject `what`; empty when they can.
std::string MaskValueProblem(const TokenMask& m, std::string_view what);

// Note [Visible keys]
// Query i of an attention over `source` keys sees every key, or with
// `causal` key j <= i (tril), and of those only the ones each mask lets
// through. Output i then reads value j for every visible key j and, through
// a softmax over two or more scores, those keys and query i as well; a
// softmax over one score is 1 whatever the score, so such an output reads
// the value alone (the schema's "first_position" case). The SDPA rule of the
// token-flow pass and the analysis of native layers (AnalyseNativeLayer)
// both derive their relations from here.
std::vector<TokenRuns> VisibleKeys(int64_t length, int64_t source, bool causal);
// Keeps the keys `m` lets through (its rows and cols broadcast where 1).
void RestrictKeys(std::vector<TokenRuns>& visible, const TokenMask& m);
struct AttentionReads {
  std::vector<TokenRuns> query, key, value;
};
AttentionReads ReadsOf(const std::vector<TokenRuns>& visible);

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
  uint64_t mixed = 0;  // its output's marked dims (TokenFlowResult::mixed)
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
  // Complete, but parts of the output along these dims (bit d: dim d) read
  // different inputs (Note [Dependencies that differ along another dim] in
  // token_flow_pass.h): a step of this call must say so.
  uint64_t mixed = 0;
};

// Whether the scope ran an attention operator, and the identities of the
// attention masks its calls used (the caller reads their values). `steps`:
// module calls inside the scope that a request will take as steps, whose
// calls the pass never visits: their operators and masks are not searched
// (an outer module of a transformer asks for none of its layers' masks).
struct TokenMaskQuery {
  bool attention = false;
  bool softmax = false;  // a softmax ran: attention written with explicit products, perhaps
  std::vector<uintptr_t> masks;
};
TokenMaskQuery FindAttentionMasks(const Recorder& recorder, int32_t scope, const std::vector<int32_t>& steps = {});
// The recorder holding `scope`, closed and still unfolded, with this `path`:
// this thread's innermost scan, the crawl's (a scan the model opened inside
// it would hold other scopes: those are refused, never read); or nullptr.
const Recorder* ClosedScopeRecorder(int32_t scope, std::string_view path);

TokenFlowResult AnalyseTokenFlow(const Recorder& recorder, const TokenFlowRequest& request);

// A call of a native nn.MultiheadAttention, nn.TransformerEncoderLayer or
// nn.TransformerDecoderLayer, as the caller gathered it: the module's
// configuration, its bound arguments (tensors by name, masks read, flags).
struct NativeTensor {
  bool tensor = true;  // false: the argument is not a tensor
  bool nested = false;
  uintptr_t identity = 0;
  std::vector<int64_t> sizes;
};
struct NativeAttention {  // one nn.MultiheadAttention of the layer
  bool batch_first = false;
  bool extra_positions = false;  // bias_k/bias_v or add_zero_attn
};
struct NativeLayerRequest {
  std::string layer;                       // "MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer"
  std::vector<NativeAttention> attention;  // self_attn, then the decoder's multihead_attn
  std::map<std::string, NativeTensor> arguments;
  std::map<std::string, TokenMask> masks;  // TokenMask conventions: allowed keys
  std::map<std::string, bool> flags;       // is_causal, tgt_is_causal, memory_is_causal
};
struct NativeSource {
  std::vector<std::string> arguments;  // one tensor passed as these arguments
  uintptr_t identity = 0;
  int32_t axis = 0;
  int64_t length = 0;
  TokenRelation relation;
};
struct NativeLayerResult {
  bool complete = false;
  std::string reason;  // unavailable: why
  int32_t output_axis = 0;
  int64_t output_length = 0;
  std::vector<NativeSource> sources;
};
// The token dependencies of the layer's primary output (token_flow_native.cc).
NativeLayerResult AnalyseNativeLayer(const NativeLayerRequest& request);

// The Python shim's entry (bindings.cc), on this thread's innermost scan:
// {"query": "masks", "scope", "path"} -> {"attention", "masks"};
// {"query": "native", ...} (a NativeLayerRequest) -> {"status", "reason" |
// "output", "sources"}; otherwise a request as above -> {"status", "reason" |
// "output_axis", "output_length", "sources"} (JSON text).
std::string TokenFlowJson(std::string_view request);

// Note [Token-flow requests without JSON]
// The crawl asks for a module call's token dependencies after every call
// that ran attention; as JSON text the request and answer cost about as much
// as the pass itself (writing, parsing and reading them back on both sides).
// TokenFlowWords takes the same request (for this thread's innermost scan,
// as TokenFlowJson) as 64-bit words, with its strings in `text` named by
// (offset, length) pairs, and writes the answer as words; the relation kinds
// are numbered kRelationKinds, mask problems kMaskProblemNames. A mask's
// summary is checked by one function (SetMaskRuns) from either encoding.
//   request: scope, path (offset, length), output, sizes (count, then each),
//     inputs (count, then identity, source, axis, length each),
//     masks (count, then identity, problem, dtype (offset, length), shape
//     (count, then each), summarized (1/0), then, when summarized, rows,
//     cols and runs (count, then each) each),
//     steps (count, then scope, output, form (0 a relation, 1 a reason, 2 a
//     relation whose output has marked dims); then the reason (offset,
//     length), or the marks (form 2 only, TokenStep::mixed), output_axis,
//     output_length and inputs (count, then identity, axis, length, kind,
//     limit, first_position each)).
//   answer: complete (1/0), a word (unavailable: explicit_attention, 1/0;
//     complete: TokenFlowResult::mixed), output_axis,
//     output_length, sources (count, then source, kind, limit,
//     first_position each); an unavailable answer's reason in `*reason`.
// Returns the answer's word count, or -1 for a malformed request or one
// whose answer does not fit `capacity` (the caller then asks in JSON).
inline constexpr const char* kRelationKinds[4] = {"none", "same_position", "prefix", "all"};
int64_t TokenFlowWords(const int64_t* words, int64_t count, std::string_view text, int64_t* answer, int64_t capacity,
                       std::string* reason);
// NativeLayerWords takes a NativeLayerRequest the same way (no scan needed):
//   request: layer (offset, length), attention (count, then batch_first and
//     extra_positions (1/0) each), arguments (count, then name (offset,
//     length), kind (0 not a tensor, 1 nested, 2 tensor), identity, sizes
//     (count, then each) each), masks (count, then name (offset, length) and
//     the mask as above from its problem on, each), flags (count, then name
//     (offset, length) and value (1/0) each).
//   answer: complete (1/0), output_axis, output_length, sources (count, then
//     identity, axis, length, kind, limit, first_position and arguments
//     (count, then each one's index in the request's arguments) each).
int64_t NativeLayerWords(const int64_t* words, int64_t count, std::string_view text, int64_t* answer, int64_t capacity,
                         std::string* reason);

}  // namespace torchscan

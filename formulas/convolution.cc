#include "formulas/convolution.h"

#include <vector>

#include "formulas/arithmetic.h"
#include "formulas/shapes.h"

namespace torchscan::convolution {

Count ConvFlops(absl::Span<const int64_t> x, absl::Span<const int64_t> w, absl::Span<const int64_t> out,
                bool transposed) {
  absl::Span<const int64_t> positions = transposed ? x : out;
  return Count(2) * x[0] * Product(positions.subspan(2)) * Product(w);
}

namespace {

FormulaResult Forward(const OpCall& call, bool transposed) {
  const TensorMeta* x = TensorArg(call, 0);
  const TensorMeta* w = TensorArg(call, 1);
  const ArgMeta& out = call.output(0);
  if (!x || !w || !out.is_tensor() || x->dim() < 3 || x->dim() != w->dim() || out.tensor().nested ||
      out.tensor().dim() != x->dim()) {
    return ShapeMismatch(call, "expected batched input, weight and output of equal rank");
  }
  return FormulaResult::Complete(ConvFlops(x->sizes(), w->sizes(), out.tensor().sizes(), transposed));
}

// Swap the first two dimensions (batch <-> channels), as the weight
// gradient is itself a convolution over the batch.
std::vector<int64_t> SwapFirstTwo(absl::Span<const int64_t> s) {
  std::vector<int64_t> r(s.begin(), s.end());
  std::swap(r[0], r[1]);
  return r;
}

}  // namespace

FormulaResult Convolution(const OpCall& call) {
  const ArgMeta& t = call.arg(6);
  return Forward(call, t.kind == ArgKind::kBool && t.to_bool());
}

FormulaResult DirectConvolution(const OpCall& call) { return Forward(call, false); }

// grad_input = conv_transpose(grad_out, weight) for a direct convolution
// (a direct conv for a transposed one); grad_weight = conv(input^T, grad_out^T)
// (conv(grad_out^T, input^T) when transposed), ^T swapping batch and channels.
// Each is counted with ConvFlops exactly like the forward products.
FormulaResult ConvolutionBackward(const OpCall& call) {
  const TensorMeta* gy = TensorArg(call, 0);
  const TensorMeta* x = TensorArg(call, 1);
  const TensorMeta* w = TensorArg(call, 2);
  const ArgMeta& transposed_arg = call.arg(7);
  const ArgMeta& mask = call.arg(10);
  if (!gy || !x || !w || gy->dim() < 3 || x->dim() != gy->dim() || w->dim() != gy->dim() ||
      mask.kind != ArgKind::kBoolList || mask.ints().size() < 2) {
    return ShapeMismatch(call, "expected grad_output, input, weight and output_mask");
  }
  const bool transposed = transposed_arg.kind == ArgKind::kBool && transposed_arg.to_bool();
  Count flops = 0;
  if (mask.ints()[0]) {
    const ArgMeta& gx = call.output(0);
    if (!gx.is_tensor() || gx.tensor().nested) return ShapeMismatch(call, "grad_input missing");
    flops += ConvFlops(gy->sizes(), w->sizes(), gx.tensor().sizes(), !transposed);
  }
  if (mask.ints()[1]) {
    const ArgMeta& gw = call.output(1);
    if (!gw.is_tensor() || gw.tensor().nested) return ShapeMismatch(call, "grad_weight missing");
    const auto gy_t = SwapFirstTwo(gy->sizes());
    const auto x_t = SwapFirstTwo(x->sizes());
    const auto gw_t = SwapFirstTwo(gw.tensor().sizes());
    flops += transposed ? ConvFlops(gy_t, x_t, gw_t, false) : ConvFlops(x_t, gy_t, gw_t, false);
  }
  return FormulaResult::Complete(flops);
}

}  // namespace torchscan::convolution

namespace torchscan::convolution {

ModuleCosts ConvolutionCosts(const OpCall& call) {
  const TensorMeta* x = DenseArg(call, 0);
  const TensorMeta* w = DenseArg(call, 1);
  const TensorMeta* b = DenseArg(call, 2);
  const TensorMeta* out = DenseOutput(call);
  const ArgMeta& transposed_arg = call.arg(6);
  const auto groups = ScalarArg(call, 8);
  if (!x || !w || !out || x->dim() < 2 || w->dim() < 3 || !groups || *groups < 1) {
    return ModuleCosts::Unavailable(ShapeMismatch(call, "expected input, weight and groups"));
  }
  if (ArithmeticOf(call) == Arithmetic::kComplex) {
    return ModuleCosts::Unavailable(CountFor(call, Arithmetic::kComplex, 0));
  }
  const bool transposed = transposed_arg.kind == ArgKind::kBool && transposed_arg.to_bool();
  const int64_t g = static_cast<int64_t>(*groups);
  const Count kvol = Product(Dims(w->sizes()).subspan(2));
  const int64_t n_out = out->numel();
  const Count params = Count(w->numel()) + (b ? b->numel() : 0);
  const int64_t bias_adds = b ? n_out : 0;
  // Taps read per output in the gather view: Cin/groups x kernel_volume.
  const Count cin = transposed ? Count(w->size(0)) : Count(w->size(1)) * g;
  const Count gathered = cin * kvol * n_out / g;
  if (!transposed) {
    const Count terms = w->size(1) * kvol;
    return {FormulaResult::Complete(n_out * (terms > 0 ? 2 * terms - 1 : Count(0)) + bias_adds),
            FormulaResult::Complete(n_out * terms), FormulaResult::Complete(gathered + params + n_out)};
  }
  const Count products = Count(x->numel()) * w->size(1) * kvol;
  const int64_t legacy_metadata = 5 * (w->dim() - 2);
  return {FormulaResult::Complete(2 * products + bias_adds), FormulaResult::Complete(products),
          FormulaResult::Complete(legacy_metadata + gathered + params + n_out)};
}

}  // namespace torchscan::convolution

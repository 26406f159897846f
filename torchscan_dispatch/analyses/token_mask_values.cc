// A dense CPU mask's summary read from its memory (Note [Reading a mask's
// values] in token_flow.h).
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>

#include "torchscan_dispatch/analyses/token_flow.h"

namespace torchscan {
namespace {

// Whether each element lets its key through, in row-major order; false when
// a floating mask holds NaN or +inf (the scores would be NaN).
template <class T>
bool Allowed(const at::Tensor& t, bool blocks_true, std::vector<uint8_t>& allowed) {
  const int64_t ndim = t.dim();
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  const T* base = static_cast<const T*>(t.const_data_ptr());
  std::vector<int64_t> index(static_cast<size_t>(ndim), 0);
  const int64_t last = ndim - 1, cols = sizes[last], step = strides[last];
  int64_t offset = 0;  // of the current row's first element
  for (size_t at = 0; at < allowed.size(); at += static_cast<size_t>(cols)) {
    const T* row = base + offset;
    for (int64_t c = 0; c < cols; ++c) {
      if constexpr (std::is_same_v<T, bool>) {
        // Read as bytes: any nonzero byte is True to PyTorch (a uint8
        // tensor viewed as bool may hold 2), while a C++ bool holding it
        // need not compare equal to true.
        const uint8_t byte = reinterpret_cast<const uint8_t*>(row)[c * step];
        allowed[at + static_cast<size_t>(c)] = (byte != 0) != blocks_true;
      } else {
        // Blocked at -inf and at the dtype's lowest value (the softmax weight is then exactly 0).
        const double x = static_cast<double>(row[c * step]);
        if (std::isnan(x) || x == std::numeric_limits<double>::infinity()) return false;
        allowed[at + static_cast<size_t>(c)] = x > static_cast<double>(std::numeric_limits<T>::lowest());
      }
    }
    // The next row: the odometer over the leading dims.
    for (int64_t d = last - 1; d >= 0; --d) {
      offset += strides[d];
      if (++index[d] < sizes[d]) break;
      offset -= strides[d] * sizes[d];
      index[d] = 0;
    }
  }
  return true;
}

// Whether every element the view reaches lies inside its storage's memory.
// A storage can shrink under its tensors (untyped_storage().resize_(0), as
// sharded training does to free memory): the sizes and strides stay, the
// memory is gone, and reading it would fault. The shim then refuses such a
// view with an error (tokens.storage_holds), which the analysis reports.
bool InsideStorage(const at::Tensor& t) {
  if (t.const_data_ptr() == nullptr) return false;
  int64_t last = t.storage_offset();  // the furthest element's index (numel > 0: every size >= 1)
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = 0;
    if (t.stride(d) < 0 || __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span) ||
        __builtin_add_overflow(last, span, &last)) {
      return false;
    }
  }
  int64_t need = 0;
  if (last < 0 || __builtin_mul_overflow(last + 1, static_cast<int64_t>(t.element_size()), &need)) return false;
  return static_cast<uint64_t>(need) <= t.storage().nbytes();
}

}  // namespace

std::optional<std::vector<int64_t>> ReadMaskValues(const at::Tensor& mask, bool blocks_true, bool padding) {
  if (!mask.defined() || !mask.device().is_cpu() || mask.layout() != at::kStrided || mask.is_nested() ||
      mask.is_neg() || mask.is_conj() || mask.dim() == 0 || mask.numel() == 0 || !mask.has_storage() ||
      !InsideStorage(mask)) {
    return std::nullopt;
  }
  std::vector<uint8_t> allowed(static_cast<size_t>(mask.numel()));
  bool finite = true;
  switch (mask.scalar_type()) {
    case at::kBool:
      finite = Allowed<bool>(mask, blocks_true, allowed);
      break;
    case at::kHalf:
      finite = Allowed<c10::Half>(mask, blocks_true, allowed);
      break;
    case at::kBFloat16:
      finite = Allowed<c10::BFloat16>(mask, blocks_true, allowed);
      break;
    case at::kFloat:
      finite = Allowed<float>(mask, blocks_true, allowed);
      break;
    case at::kDouble:
      finite = Allowed<double>(mask, blocks_true, allowed);
      break;
    default:
      return std::nullopt;
  }
  constexpr auto kNonFinite = static_cast<int64_t>(TokenMask::Problem::kNonFinite);
  constexpr auto kDiffers = static_cast<int64_t>(TokenMask::Problem::kDiffers);
  if (!finite) return std::vector<int64_t>{kNonFinite, 0, 0};
  // The shared slice: a key padding mask's last dim; else the last two dims
  // (one row for a 1-d mask), repeated over the leading ones.
  const auto sizes = mask.sizes();
  const int64_t cols = sizes.back();
  const int64_t rows = padding || sizes.size() == 1 ? 1 : sizes[sizes.size() - 2];
  const size_t slice = static_cast<size_t>(rows * cols);
  for (size_t k = slice; k < allowed.size(); ++k) {
    if (allowed[k] != allowed[k % slice]) return std::vector<int64_t>{kDiffers, 0, 0};
  }
  std::vector<int64_t> words = {static_cast<int64_t>(TokenMask::Problem::kNone), rows, cols};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = allowed.data() + r * cols;
    for (int64_t c = 0; c < cols;) {
      if (!row[c]) {
        ++c;
        continue;
      }
      const int64_t lo = c;
      while (c < cols && row[c]) ++c;
      words.insert(words.end(), {r, lo, c - 1});
    }
  }
  return words;
}

}  // namespace torchscan

// The receptive-field rules that move, mix or reduce dims: permutes,
// reshapes, slices and pieces, products, attention, norms, reductions, and
// the generic rule for everything else (receptive_field_layout.h).
#include "torchscan_dispatch/analyses/receptive_field_layout.h"

namespace torchscan::receptive_field_internal {

Layout Propagator::Permute(const OpCall& call, const TensorMeta& out) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor() || x.tensor().ndim != out.ndim) return Generic(call, out);
  Layout in = Get(x.tensor());
  if (!in.lost.empty()) return in;
  const int nd = out.ndim;
  std::vector<int64_t> order(nd);
  std::iota(order.begin(), order.end(), 0);
  if (call.name == "aten::permute" || call.name == "aten::permute_copy") {
    const ArgMeta& dims = call.arg(1);
    if (dims.kind != ArgKind::kIntList || static_cast<int>(dims.ints().size()) != nd) return Generic(call, out);
    for (int i = 0; i < nd; ++i) order[i] = Wrap(dims.ints()[i], nd);
  } else if (nd >= 2) {  // transpose(self, dim0, dim1); t() swaps the two dims of a matrix
    const int64_t a = call.arg(1).kind == ArgKind::kInt ? Wrap(call.arg(1).to_int(), nd) : 0;
    const int64_t b = call.arg(2).kind == ArgKind::kInt ? Wrap(call.arg(2).to_int(), nd) : 1;
    if (a < 0 || b < 0 || a >= nd || b >= nd) return Generic(call, out);
    std::swap(order[a], order[b]);
  }
  Layout l = in;
  for (int i = 0; i < nd; ++i) {
    if (order[i] < 0 || order[i] >= nd) return Generic(call, out);
    l.dims[i] = in.dims[order[i]];
  }
  return l;
}

// Views between shapes of the same elements: the input's parts, in
// row-major order, are regrouped into the output's dims.
Layout Propagator::Reshape(const OpCall& call, const TensorMeta& out) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor()) return Generic(call, out);
  Layout in = Get(x.tensor());
  if (!in.lost.empty()) return in;
  struct Atom {
    int64_t size;
    int32_t axis;
    Dim::State state;
    std::vector<Part> origin;  // kTokens / kMixed: the dim's parts
  };
  std::vector<Atom> atoms;
  for (const Dim& d : in.dims) {
    if (d.state == Dim::State::kClean) {
      for (const Part& p : d.parts) {
        if (p.size != 1) atoms.push_back({p.size, p.axis, d.state, {}});
      }
    } else if (d.size != 1) {
      atoms.push_back({d.size, -1, d.state, d.parts});
    }
  }
  Layout l;
  l.weak = in.weak;
  l.axes = in.axes;
  size_t ai = 0;
  auto regroup_lost = [&](const Atom& a, int64_t want) {
    return Lost(absl::StrCat(N(call.name), " splits a spatial axis (", a.size, " positions) across dims in pieces of ",
                             want, " (e.g. a window partition); the positions are regrouped; not followed"));
  };
  for (int32_t j = 0; j < out.ndim; ++j) {
    int64_t remaining = out.size(j);
    Dim dim;
    dim.size = remaining;
    dim.parts.clear();
    Dim::State state = Dim::State::kClean;
    std::vector<Part> origin;
    while (remaining > 1) {
      if (ai >= atoms.size()) return Lost(absl::StrCat(N(call.name), ": sizes do not match; not followed"));
      Atom& a = atoms[ai];
      int64_t take = a.size;
      if (remaining % a.size != 0) {
        take = std::gcd(a.size, remaining);
        if (take == 1) return Lost(absl::StrCat(N(call.name), ": sizes do not regroup; not followed"));
      }
      if (take < a.size && a.state == Dim::State::kClean && a.axis >= 0) return regroup_lost(a, take);
      if (a.state != Dim::State::kClean) {
        state =
            a.state == Dim::State::kTokens || state == Dim::State::kTokens ? Dim::State::kTokens : Dim::State::kMixed;
        origin.insert(origin.end(), a.origin.begin(), a.origin.end());
        dim.parts.push_back({take, -1});
      } else {
        dim.parts.push_back({take, a.axis});
      }
      remaining /= take;
      a.size /= take;
      if (a.size == 1) ++ai;
    }
    if (dim.parts.empty()) dim.parts.push_back({out.size(j), -1});
    if (state != Dim::State::kClean) {
      // Clean parts joining tokens become tokens too; their axes are kept for the record.
      for (const Part& p : dim.parts) {
        if (p.axis >= 0) origin.push_back(p);
      }
      if (state == Dim::State::kMixed && !origin.empty()) state = Dim::State::kTokens;
      dim.parts = origin.empty() ? std::vector<Part>{{out.size(j), -1}} : origin;
    }
    dim.state = state;
    l.dims.push_back(std::move(dim));
  }
  if (ai < atoms.size()) return Lost(absl::StrCat(N(call.name), ": sizes do not match; not followed"));
  return l;
}

// slice(self, dim, start, end, step) along a spatial axis: output o is input
// start + o*step, so padding' = padding - start*jump and jump' = jump*step.
// Also one piece of split/chunk (`start` given, step 1).
Layout Propagator::Slice(const OpCall& call, const TensorMeta& out, int64_t start, bool from_args, int64_t dim) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor() || x.tensor().ndim != out.ndim) return Generic(call, out);
  const TensorMeta& in = x.tensor();
  Layout l = Get(in);
  if (!l.lost.empty()) return l;
  int64_t step = 1;
  if (from_args) {
    dim = call.arg(1).kind == ArgKind::kInt ? call.arg(1).to_int() : 0;
    start = call.arg(2).kind == ArgKind::kInt ? call.arg(2).to_int() : 0;
    step = call.arg(4).kind == ArgKind::kInt ? std::max<int64_t>(call.arg(4).to_int(), 1) : 1;
  }
  const int64_t d = Wrap(dim, out.ndim);
  if (d < 0 || d >= out.ndim) return Generic(call, out);
  const int64_t size = in.size(d);
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  if (out.size(d) == size && start == 0) return l;  // the whole dim
  Dim& D = l.dims[d];
  const int32_t id = D.axis();
  if (id >= 0) {
    Window& w = l.axes[id];
    w.padding -= static_cast<double>(start) * w.jump;
    w.jump *= static_cast<double>(step);
    D = OfAxis(out.size(d), id);
  } else if (Involved(D)) {
    D.state = Dim::State::kTokens;  // some of the tokens: no view can split them back
    D.size = out.size(d);
  } else {
    D = Plain(out.size(d), D.state);
  }
  return l;
}

// select(self, dim, index): one position; a spatial axis leaves the dims.
Layout Propagator::Select(const OpCall& call, const TensorMeta& out) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor() || x.tensor().ndim != out.ndim + 1 || call.arg(1).kind != ArgKind::kInt) {
    return Generic(call, out);
  }
  Layout l = Get(x.tensor());
  if (!l.lost.empty()) return l;
  const int64_t d = Wrap(call.arg(1).to_int(), x.tensor().ndim);
  if (d < 0 || d >= x.tensor().ndim) return Generic(call, out);
  l.dims.erase(l.dims.begin() + d);
  return l;
}

// One output of split / split_with_sizes / unbind / chunk along a dim.
Layout Propagator::Piece(const OpCall& call, const TensorMeta& out, int64_t& offset) {
  const ArgMeta& x = call.arg(0);
  const ReceptiveRule rule = TraitsOf(call.name).receptive;
  const bool unbind = rule == ReceptiveRule::kUnbind;
  const bool split = rule == ReceptiveRule::kSplit;
  if (!x.is_tensor() || (!unbind && !split)) return Generic(call, out);
  const size_t dim_arg = unbind ? 1 : 2;
  const int64_t dim = call.arg(dim_arg).kind == ArgKind::kInt ? call.arg(dim_arg).to_int() : 0;
  const TensorMeta& in = x.tensor();
  const int64_t d = Wrap(dim, in.ndim);
  if (d < 0 || d >= in.ndim) return Generic(call, out);
  if (unbind) {
    if (out.ndim + 1 != in.ndim) return Generic(call, out);
    Layout l = Get(in);
    if (l.lost.empty()) l.dims.erase(l.dims.begin() + d);
    return l;
  }
  const int64_t start = offset;
  offset += out.ndim > d ? out.size(d) : 0;
  return Slice(call, out, start, false, d);
}

// Ops that keep positions where they keep the shape: elementwise math,
// activations, norms (their statistics are left out, as in the usual
// receptive-field arithmetic), dropout, copies, expand, cat. Inputs are
// aligned from the trailing dim (broadcasting); the windows of the axes an
// input holds at the output's positions join. A dim of size 1 broadcast
// adds nothing: as in the usual arithmetic, a squeeze-excite gate does not
// widen the field.
// cat_dim: the dim cat joins along. A dim that holds spatial positions and
// changes size in a way not listed above cannot be followed.
Layout Propagator::Generic(const OpCall& call, const TensorMeta& out, int64_t cat_dim, size_t first_arg) {
  bool weak = false;
  const auto sources = Sources(TensorArgs(call, first_arg), &weak);
  Layout l;
  l.weak = weak;
  l.dims.assign(out.ndim, Dim{});
  std::vector<bool> filled(out.ndim, false);
  bool cat_tokens = false;
  std::vector<Part> cat_parts;
  for (const TensorMeta* t : sources) {
    Layout in = Get(*t);
    if (!in.lost.empty()) return in;
    // The windows of the axes this input holds at the output's positions join.
    auto join = [&](const Dim& D) {
      for (const Part& p : D.parts) {
        if (p.axis < 0) continue;
        auto it = l.axes.find(p.axis);
        const Window& w = in.axes[p.axis];
        l.axes[p.axis] = it == l.axes.end() ? w : Join(it->second, w);
      }
    };
    const int64_t off = static_cast<int64_t>(out.ndim) - t->ndim;
    for (int32_t di = 0; di < t->ndim; ++di) {
      const Dim& D = in.dims[di];
      const int64_t d = di + off;
      if (d < 0) {
        if (Involved(D)) return Lost(absl::StrCat(N(call.name), " drops dim ", di, ", which holds spatial positions"));
        continue;
      }
      if (d == cat_dim) {
        if (D.axis() >= 0) return Lost(absl::StrCat(N(call.name), " joins tensors along spatial dim ", d));
        if (Involved(D)) {
          join(D);
          cat_tokens = true;
          cat_parts.insert(cat_parts.end(), D.parts.begin(), D.parts.end());
        }
        continue;
      }
      if (t->size(di) == out.size(d)) {
        join(D);
        if (!filled[d]) {
          l.dims[d] = D;
          filled[d] = true;
        } else if (!Same(l.dims[d], D)) {
          return Lost(absl::StrCat(N(call.name), ": its inputs disagree on what dim ", d, " holds"));
        } else if (!Involved(l.dims[d]) && D.state == Dim::State::kMixed) {
          l.dims[d].state = Dim::State::kMixed;
        }
      } else if (t->size(di) != 1 && Involved(D)) {
        return Lost(absl::StrCat(N(call.name), " changes the size of dim ", d, ", which holds spatial positions"));
      }
    }
  }
  for (int32_t d = 0; d < out.ndim; ++d) {
    if (d == cat_dim && cat_tokens) {
      l.dims[d] = Dim{cat_parts, out.size(d), Dim::State::kTokens};
    } else if (!filled[d] || d == cat_dim) {
      l.dims[d] = Plain(out.size(d));
    }
  }
  return l;
}

// Every output value reads all positions of `summed` (dims the op sums
// over). A spatial axis summed over is not a window; token dims summed over
// (attention) make every token dim of the result mixed.
Layout Propagator::Mix(Layout l, const std::vector<Dim>& summed, absl::string_view name) {
  for (const Dim& c : summed) {
    if (!Involved(c)) continue;
    if (l.weak) continue;  // a guessed axis of an untracked tensor: the guess was wrong
    if (c.axis() >= 0) return Lost(absl::StrCat(name, " sums over a spatial axis: its positions are mixed"));
    for (const Part& p : c.parts) {
      if (p.axis >= 0) l.axes[p.axis].known = false;
    }
    for (Dim& d : l.dims) {
      if (d.axis() >= 0) return Lost(absl::StrCat(name, " mixes tokens into a spatial axis; not followed"));
      if (Involved(d)) {
        d.state = Dim::State::kTokens;
        for (const Part& p : d.parts) {
          if (p.axis >= 0) l.axes[p.axis].known = false;
        }
      }
    }
  }
  return l;
}

// linear(input, weight): (..., K) -> (..., N); mm/bmm/matmul/addmm: (..., M, K) @ (..., K, N).
Layout Propagator::Contract(const OpCall& call, const TensorMeta& out, size_t ia, size_t ib, bool linear) {
  const ArgMeta &a = call.arg(ia), &b = call.arg(ib);
  if (!a.is_tensor() || !b.is_tensor() || out.ndim < 1 || a.tensor().ndim < (linear ? 1 : 2) || b.tensor().ndim < 2 ||
      a.tensor().nested || b.tensor().nested) {
    return Generic(call, out);
  }
  const TensorMeta &ta = a.tensor(), &tb = b.tensor();
  const bool sa = Strong(ta), sb = Strong(tb);
  const bool use_a = sa || !sb, use_b = !linear && (sb || !sa);
  Layout la = Get(ta), lb = Get(tb);
  if (use_a && !la.lost.empty()) return la;
  if (use_b && !lb.lost.empty()) return lb;
  Layout l;
  l.weak = !(sa || sb);
  for (int32_t d = 0; d < out.ndim; ++d) l.dims.push_back(Plain(out.size(d)));
  std::vector<Dim> summed;
  auto take = [&](const Layout& src, int32_t from, int64_t to) {
    if (to < 0 || to >= out.ndim || from < 0) return true;
    if (src.dims[from].size != out.size(to)) return src.dims[from].size == 1 || !Involved(src.dims[from]);
    if (Involved(l.dims[to]) && !Same(l.dims[to], src.dims[from])) return false;
    if (!Involved(l.dims[to])) l.dims[to] = src.dims[from];
    return true;
  };
  if (use_a) {
    for (const auto& [id, w] : la.axes) l.axes[id] = w;
    const int32_t na = ta.ndim;
    // Rows (and batch dims) keep their place counted from the end; the last dim is summed.
    for (int32_t d = 0; d < na - 1; ++d) {
      if (!take(la, d, d + out.ndim - na)) {
        return Lost(absl::StrCat(N(call.name), ": its inputs disagree on a dim that holds spatial positions"));
      }
    }
    summed.push_back(la.dims[na - 1]);
  }
  if (use_b) {
    for (const auto& [id, w] : lb.axes) {
      auto it = l.axes.find(id);
      l.axes[id] = it == l.axes.end() ? w : Join(it->second, w);
    }
    const int32_t nb = tb.ndim;
    // Batch dims align from the end; the last dim becomes the output's last; dim -2 is summed.
    for (int32_t d = 0; d < nb - 2; ++d) {
      if (!take(lb, d, out.ndim - 2 - (nb - 2) + d)) {
        return Lost(absl::StrCat(N(call.name), ": its inputs disagree on a dim that holds spatial positions"));
      }
    }
    if (!take(lb, nb - 1, out.ndim - 1)) {
      return Lost(absl::StrCat(N(call.name), ": its inputs disagree on a dim that holds spatial positions"));
    }
    summed.push_back(lb.dims[nb - 2]);
  }
  return Mix(std::move(l), summed, N(call.name));
}

// Attention (q, k, v: (..., L, E), (..., S, E), (..., S, Ev)) -> (..., L, Ev):
// every query reads all S keys/values. The fused encoder layer and native
// MHA are self-attention over their first argument's dim -2.
Layout Propagator::Attention(const OpCall& call, const TensorMeta& out) {
  const ArgMeta& q = call.arg(0);
  if (!q.is_tensor() || q.tensor().ndim != out.ndim || out.ndim < 2) return Generic(call, out);
  bool weak = false;
  std::vector<const TensorMeta*> ins;
  for (size_t i = 0; i < 3; ++i) {
    if (call.arg(i).is_tensor() && call.arg(i).tensor().ndim == out.ndim) ins.push_back(&call.arg(i).tensor());
  }
  const auto sources = Sources(ins, &weak);
  Layout l = Get(q.tensor());
  if (!l.lost.empty()) return l;
  if (!weak && !Strong(q.tensor())) {
    l = Get(*sources[0]);
    if (!l.lost.empty()) return l;
    for (int32_t d = 0; d < out.ndim; ++d) l.dims[d] = Plain(out.size(d));  // rows of an untracked query
  }
  l.weak = weak;
  l.dims[out.ndim - 1] = Plain(out.size(out.ndim - 1));
  for (int32_t d = 0; d < out.ndim - 1; ++d) {
    if (l.dims[d].size != out.size(d)) l.dims[d] = Plain(out.size(d));
  }
  std::vector<Dim> summed;
  for (const TensorMeta* t : sources) {
    Layout s = Get(*t);
    if (!s.lost.empty()) return s;
    for (const auto& [id, w] : s.axes) {
      auto it = l.axes.find(id);
      l.axes[id] = it == l.axes.end() ? w : Join(it->second, w);
    }
    summed.push_back(s.dims[t->ndim - 2]);
    summed.push_back(s.dims[t->ndim - 1]);
  }
  return Mix(std::move(l), summed, N(call.name));
}

// layer_norm / rms_norm over the trailing len(normalized_shape) dims: those
// are feature dims. A guessed axis of an untracked tensor there was a wrong
// guess; on tracked tensors the statistics are left out as for other norms.
Layout Propagator::Normalize(const OpCall& call, const TensorMeta& out) {
  Layout l = Generic(call, out);
  if (!l.lost.empty() || !l.weak || call.arg(1).kind != ArgKind::kIntList) return l;
  const int64_t n = static_cast<int64_t>(call.arg(1).ints().size());
  for (int64_t d = std::max<int64_t>(out.ndim - n, 0); d < out.ndim; ++d) {
    if (Involved(l.dims[d])) l.dims[d] = Plain(out.size(d), Dim::State::kMixed);
  }
  return l;
}

// Ops whose value at a position reads every position along `dim`
// (softmax, cumulative sums, sort) or moves positions along it (flip, roll).
Layout Propagator::MixAlong(const OpCall& call, const TensorMeta& out) {
  Layout l = Generic(call, out);
  if (!l.lost.empty()) return l;
  std::vector<int64_t> dims;
  const absl::string_view name = N(call.name);
  const size_t dim_arg = name == "aten::roll" ? 2 : (name == "aten::sort" && call.overload == "stable") ? 2 : 1;
  const ArgMeta& a = call.arg(dim_arg);
  if (a.kind == ArgKind::kInt) dims.push_back(a.to_int());
  if (a.kind == ArgKind::kIntList) dims.assign(a.ints().begin(), a.ints().end());
  if (dims.empty()) {
    if (name == "aten::sort" || name == "aten::argsort") {
      dims.push_back(-1);
    } else {
      for (int32_t d = 0; d < out.ndim; ++d) dims.push_back(d);  // roll without dims: the flattened tensor
    }
  }
  for (int64_t raw : dims) {
    const int64_t d = Wrap(raw, out.ndim);
    if (d < 0 || d >= out.ndim) continue;
    Dim& D = l.dims[d];
    if (!Involved(D)) continue;
    if (l.weak) {
      D = Plain(D.size, Dim::State::kMixed);
    } else if (D.axis() >= 0) {
      return Lost(absl::StrCat(name, " mixes or moves positions along spatial dim ", d));
    } else {
      D.state = Dim::State::kTokens;
      for (const Part& p : D.parts) {
        if (p.axis >= 0) l.axes[p.axis].known = false;
      }
    }
  }
  return l;
}

// Reductions over `dim` (all dims when absent): every position of a
// reduced axis is read, so its window covers the whole axis (as a global
// pool: rf += (L-1) jump, jump *= L); keepdim leaves a dim of size 1.
Layout Propagator::Reduce(const OpCall& call, const TensorMeta& out) {
  const ArgMeta& x = call.arg(0);
  if (!x.is_tensor()) return Generic(call, out);
  const TensorMeta& in = x.tensor();
  Layout l = Get(in);
  if (!l.lost.empty()) return l;
  const absl::string_view name = N(call.name);
  const size_t dim_arg = (name == "aten::norm" || name == "aten::linalg_vector_norm") ? 2 : 1;
  std::vector<bool> reduced(in.ndim, false);
  const ArgMeta& a = call.arg(dim_arg);
  if (a.kind == ArgKind::kInt) {
    const int64_t d = Wrap(a.to_int(), in.ndim);
    if (d >= 0 && d < in.ndim) reduced[d] = true;
  } else if (a.kind == ArgKind::kIntList && !a.ints().empty()) {
    for (int64_t raw : a.ints()) {
      const int64_t d = Wrap(raw, in.ndim);
      if (d >= 0 && d < in.ndim) reduced[d] = true;
    }
  } else {
    reduced.assign(in.ndim, true);
  }
  const bool keepdim = out.ndim == in.ndim;
  int32_t kept = 0;
  for (int32_t d = 0; d < in.ndim; ++d) kept += reduced[d] ? 0 : 1;
  if (!keepdim && kept != out.ndim) {
    return Lost(absl::StrCat(N(call.name), ": reduced dims do not match the result's shape; not followed"));
  }
  std::vector<Dim> dims;
  for (int32_t d = 0; d < in.ndim; ++d) {
    const Dim& D = l.dims[d];
    if (!reduced[d]) {
      dims.push_back(D);
      continue;
    }
    for (const Part& p : D.parts) {
      if (p.axis >= 0) Absorb(l.axes[p.axis], p.size);
    }
    const int32_t id = D.axis();
    if (keepdim) dims.push_back(id >= 0 ? OfAxis(1, id) : Plain(1));
  }
  l.dims = std::move(dims);
  return l;
}

}  // namespace torchscan::receptive_field_internal

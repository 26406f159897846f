// Operator-view FLOPs of the matrix-product family (native convention:
// 2K per K-term dot; fused bias and alpha/beta scaling omitted).
#pragma once

#include "formulas/module_costs.h"
#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan::matmul {

// Pure counts, reusable by other families (attention, convolution).
// (m x k) @ (k x n): m*n dots of k terms -> 2*m*n*k.
// Wide from the first multiplication: 2 * 2^21 * 2^21 * 2^21 is already 2^64.
// m is a Count so callers can pass a wide row count (batch x length).
inline Count MmFlops(const Count& m, int64_t k, int64_t n) { return Count(2) * m * n * k; }

FormulaResult Mm(const OpCall& call);        // aten::mm(a, b)
FormulaResult Addmm(const OpCall& call);     // aten::addmm(self, a, b)
FormulaResult Bmm(const OpCall& call);       // aten::bmm(a, b)
FormulaResult Baddbmm(const OpCall& call);   // aten::baddbmm(self, a, b)
FormulaResult ScaledMm(const OpCall& call);  // aten::_scaled_mm(a, b, ...)
// TorchScan fallbacks for products native PyTorch does not count.
FormulaResult Dot(const OpCall& call);     // aten::dot / vdot(a, b)
FormulaResult Mv(const OpCall& call);      // aten::mv(mat, vec)
FormulaResult Addmv(const OpCall& call);   // aten::addmv(self, mat, vec)
FormulaResult Addbmm(const OpCall& call);  // aten::addbmm(self, a, b)
FormulaResult Addr(const OpCall& call);    // aten::addr(self, v1, v2)
FormulaResult IntMm(const OpCall& call);   // aten::_int_mm(a, b)
// aten::_grouped_mm(self, mat2, offs, bias, out_dtype): every row of `self`
// meets every output column of its group once, whatever the packing:
// 2 x self elements x output width (torchscan_flops_v1 "Packed-row grouped matmul").
FormulaResult GroupedMm(const OpCall& call);
// aten::_addmm_activation(self, mat1, mat2, beta, alpha, use_gelu): the addmm
// (2mnk, bias omitted) plus its fused activation per output: ReLU 1, or exact
// GELU 5 (the CPU kernel applies at::gelu_ with its default, exact form).
FormulaResult AddmmActivation(const OpCall& call);

// Module view (K multiplies + K-1 adds per K-term dot, one bias add per output;
// MACs = K per output; DMAs read every operand and parameter once and write
// every output once).
// linear(input, weight, bias): rows x out dots of in terms.
ModuleCosts LinearCosts(const OpCall& call);
ModuleCosts MmCosts(const OpCall& call);       // (m x k)(k x n)
ModuleCosts AddmmCosts(const OpCall& call);    // + one bias add per output
ModuleCosts BmmCosts(const OpCall& call);      // B products
ModuleCosts BaddbmmCosts(const OpCall& call);  // + one add per output
ModuleCosts DotCosts(const OpCall& call);      // dot / vdot: one dot of k terms
ModuleCosts MvCosts(const OpCall& call);       // m dots of k terms
ModuleCosts AddmvCosts(const OpCall& call);    // + one bias add per output
ModuleCosts AddrCosts(const OpCall& call);     // m x n one-term products + one add per output
// _grouped_mm: each output value is one dot over its group's K terms; the
// operator view's MACs (self elements x output width), module FLOPs 2 MACs
// less one add per output (an empty group's outputs are counted as if it had
// a term: its zeros cost nothing, a lower figure would be off by its outputs).
ModuleCosts GroupedMmCosts(const OpCall& call);

}  // namespace torchscan::matmul

// The formula table's indexing rows (scatter/gather that compute, lookups by
// index, distances, grid sampling) and torchscan_selection_v1's sorting,
// selection and search.
#include "formulas/registry_rows.h"

#include "formulas/indexing.h"
#include "formulas/selection.h"

namespace torchscan::rows {
namespace {

const OperatorFormula kRows[] = {
    TS_PW("isin", indexing::Isin),
    // Scatter/gather that compute, and distances.
    TS_PW("scatter_add", indexing::ScatterAdd),
    TS_PW("scatter_reduce", indexing::ScatterReduce),
    TS_PW("scatter", indexing::Scatter),
    TS_PW("index_put", indexing::IndexPut),
    TS_PW("_index_put_impl", indexing::IndexPut),
    TS_PW("masked_scatter", indexing::MaskedScatter),
    TS_ROW("index_copy", indexing::IndexCopy),
    TS_PW("nonzero", indexing::Nonzero),
    TS_ROW("_cdist_forward", indexing::Cdist),
    TS_ROW("_euclidean_dist", indexing::EuclideanDist),
    TS_ROW("_pdist_forward", indexing::Pdist),
    TS_ROW("_embedding_bag", indexing::EmbeddingBag),
    TS_ROW("_embedding_bag_forward_only", indexing::EmbeddingBag),
    TS_PW("index_add", indexing::IndexAdd),
    TS_PW("index_reduce", indexing::IndexReduce),
    TS_PW("affine_grid_generator", indexing::AffineGridGenerator),
    TS_ROW("grid_sampler_2d", indexing::GridSampler2d),
    // torchscan_selection_v1 (formulas/CONVENTIONS.md): comparisons of sorting, selection and search.
    TS_PW("sort", selection::Sort),
    TS_PW("argsort", selection::Sort),
    TS_PW("msort", selection::Sort),
    TS_PW("topk", selection::Topk),
    TS_PW("kthvalue", selection::Kthvalue),
    TS_PW("median", selection::Median),
    TS_PW("nanmedian", selection::Median),
    TS_PW("mode", selection::Mode),
    TS_PW("_unique2", selection::Unique),
    TS_PW("_unique", selection::Unique),
    TS_PW("unique_consecutive", selection::UniqueConsecutive),
    TS_PW("unique_dim", selection::UniqueDim),
    TS_PW("unique_dim_consecutive", selection::UniqueDim),
    TS_PW("searchsorted", selection::Searchsorted),
    TS_PW("bucketize", selection::Bucketize),
    TS_PW("histc", selection::Histc),
};

}  // namespace

absl::Span<const OperatorFormula> Indexing() { return kRows; }

}  // namespace torchscan::rows

// vjpviz's reductions on the CPU, one pass over each array (capture/cpu_kernels.py).
//
// VjpvizFlowSummary: a flow tap's summary of its cotangent. In: float32[..., n], each
// row of n (a vmapped tap's, per example) summarised. Out: float32[..., 5] per row: the
// sum of squares, max |.| (NaN where any element is NaN, else Inf where any is
// infinite), the finite and the zero elements, n.
//
// VjpvizSquaredNorms: a watch's gradient leaves. In: float32 arrays, any shapes. Out:
// float32[arrays], each one's sum of squares.
#include <cmath>
#include <cstdint>
#include <limits>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
// The wide loop built for AVX2 and for any x86-64, the loader picking one: the cached
// library stays right for every CPU that may share the user's cache.
#define VJPVIZ_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VJPVIZ_CLONES
#endif

namespace {

constexpr int kLanes = 16;   // independent accumulators: the loops vectorise

VJPVIZ_CLONES float SumOfSquares(const float* x, int64_t n) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[i + l] * x[i + l];
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += x[i] * x[i];
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return static_cast<float>(sum);
}

VJPVIZ_CLONES void SummariseRow(const float* x, int64_t n, float* out) {
  const float largest = std::numeric_limits<float>::max();
  float squares[kLanes] = {}, top[kLanes] = {};
  int32_t nonzero[kLanes] = {}, finite[kLanes] = {};
  int64_t i = 0;
  // int32 lanes count at most n / kLanes each: exact below 2^35 elements a row
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float v = x[i + l], a = std::fabs(v);
      squares[l] += v * v;
      top[l] = a > top[l] ? a : top[l];   // NaN never wins here: see below
      nonzero[l] += v != 0.0f;
      finite[l] += a <= largest;
    }
  }
  double sum = 0.0;
  float max_abs = 0.0f;
  int64_t nonzeros = 0, finites = 0;
  for (; i < n; ++i) {
    const float v = x[i], a = std::fabs(v);
    sum += v * v;
    max_abs = a > max_abs ? a : max_abs;
    nonzeros += v != 0.0f;
    finites += a <= largest;
  }
  for (int l = 0; l < kLanes; ++l) {
    sum += squares[l];
    max_abs = top[l] > max_abs ? top[l] : max_abs;
    nonzeros += nonzero[l];
    finites += finite[l];
  }
  if (finites < n) {   // as XLA's max: NaN where any is NaN (the squares' sum is), else Inf
    max_abs = std::isnan(sum) ? std::numeric_limits<float>::quiet_NaN()
                              : std::numeric_limits<float>::infinity();
  }
  out[0] = static_cast<float>(sum);
  out[1] = max_abs;
  out[2] = static_cast<float>(finites);
  out[3] = static_cast<float>(n - nonzeros);
  out[4] = static_cast<float>(n);
}

ffi::Error Summarise(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> out) {
  const auto dims = x.dimensions();
  const int64_t n = dims.size() == 0 ? 1 : dims.back();
  if (n <= 0) {
    return ffi::Error::InvalidArgument("vjpviz flow summary: an empty row");
  }
  const int64_t rows = static_cast<int64_t>(x.element_count()) / n;
  if (static_cast<int64_t>(out->element_count()) != 5 * rows) {
    return ffi::Error::InvalidArgument("vjpviz flow summary: 5 outputs a row expected");
  }
  for (int64_t r = 0; r < rows; ++r) {
    SummariseRow(x.typed_data() + r * n, n, out->typed_data() + 5 * r);
  }
  return ffi::Error::Success();
}

ffi::Error SquaredNorms(ffi::RemainingArgs arrays, ffi::ResultBuffer<ffi::F32> out) {
  if (static_cast<size_t>(out->element_count()) != arrays.size()) {
    return ffi::Error::InvalidArgument("vjpviz squared norms: one output an array expected");
  }
  for (size_t k = 0; k < arrays.size(); ++k) {
    auto x = arrays.get<ffi::Buffer<ffi::F32>>(k);
    if (x.has_error()) return x.error();
    out->typed_data()[k] = SumOfSquares(x->typed_data(), x->element_count());
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(VjpvizSquaredNorms, SquaredNorms,
                              ffi::Ffi::Bind().RemainingArgs().Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(VjpvizFlowSummary, Summarise,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

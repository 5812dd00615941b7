// Multi-segment op parity (label gpu): segmented convert, grad stats, stats packing and fused AdamW
// on CUDA against the CPU reference over many odd-sized segments (1 .. 300001 elements, gaps,
// zero-fill), guard bytes around every device buffer; a DistributedOptimizer on a CUDA store
// against the same on a CPU store; and the time of one optimizer step for a GPT-2 124M layout
// (148 segments) against the per-segment op sequence it replaces. Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_test_support.h"
#include "tessera/core/half.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/adamw.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/multi_tensor.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/config.h"

using namespace tessera;

namespace {

using gpu_test::cuda_ok;
using gpu_test::kGuard;
using gpu_test::kGuardByte;
std::mt19937 rng(2024);
int failures = 0;
std::vector<std::string> table_rows;

std::string dtype_str(DType t) { return std::string(dtype_name(t)); }

void check(bool ok, const std::string& what, const std::string& detail) {
  char line[512];
  std::snprintf(line, sizeof(line), "%-58s %s  %s", what.c_str(), ok ? "ok  " : "FAIL", detail.c_str());
  table_rows.push_back(line);
  if (!ok) {
    ++failures;
    std::printf("FAIL %s: %s\n", what.c_str(), detail.c_str());
  }
}

std::string fmt(const char* f, double a, double b = 0) {
  char s[256];
  std::snprintf(s, sizeof(s), f, a, b);
  return s;
}

// Host bytes of a float dtype, filled from f32.
struct HostArray {
  DType dtype;
  std::vector<unsigned char> bytes;
  HostArray(DType t, int64_t n) : dtype(t), bytes(static_cast<size_t>(n) * dtype_size(t)) {}
  int64_t numel() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
  Tensor tensor() { return Tensor(bytes.data(), dtype, {numel()}); }
  float get(int64_t i) const {
    if (dtype == DType::f32) { float v; std::memcpy(&v, &bytes[i * 4], 4); return v; }
    if (dtype == DType::f64) { double v; std::memcpy(&v, &bytes[i * 8], 8); return static_cast<float>(v); }
    if (dtype == DType::bf16) { bf16 h; std::memcpy(&h, &bytes[i * 2], 2); return bf16_to_float(h); }
    f16 h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return f16_to_float(h);
  }
  void set(int64_t i, float v) {
    if (dtype == DType::f32) std::memcpy(&bytes[i * 4], &v, 4);
    else if (dtype == DType::bf16) { bf16 h = float_to_bf16(v); std::memcpy(&bytes[i * 2], &h, 2); }
    else { f16 h = float_to_f16(v); std::memcpy(&bytes[i * 2], &h, 2); }
  }
};

HostArray random_array(DType t, int64_t n, float stddev, float mean = 0.0f) {
  HostArray a(t, n);
  std::normal_distribution<float> dist(mean, stddev);
  for (int64_t i = 0; i < n; ++i) a.set(i, dist(rng));
  return a;
}

// A device copy of a host array with guard bytes on both sides.
struct DeviceArray {
  char* base = nullptr;
  size_t bytes = 0;
  Tensor tensor;
  explicit DeviceArray(const HostArray& h) {
    bytes = h.bytes.size();
    cuda_ok(cudaMalloc(&base, bytes + 2 * kGuard), "cudaMalloc");
    cuda_ok(cudaMemset(base, kGuardByte, bytes + 2 * kGuard), "cudaMemset");
    cuda_ok(cudaMemcpy(base + kGuard, h.bytes.data(), bytes, cudaMemcpyHostToDevice), "upload");
    tensor = Tensor(base + kGuard, h.dtype, {h.numel()}, Device::cuda(0));
  }
  ~DeviceArray() { cudaFree(base); }
  DeviceArray(const DeviceArray&) = delete;
  HostArray download(const std::string& what) const {
    ops::cuda::synchronize();
    cuda_ok(cudaGetLastError(), what.c_str());
    std::vector<unsigned char> g(kGuard);
    bool intact = true;
    for (size_t offset : {size_t(0), kGuard + bytes}) {
      cuda_ok(cudaMemcpy(g.data(), base + offset, kGuard, cudaMemcpyDeviceToHost), "guard download");
      for (unsigned char c : g) intact = intact && c == kGuardByte;
    }
    if (!intact) check(false, what + " guard bytes", "out-of-bounds write");
    HostArray h(tensor.dtype(), tensor.numel());
    cuda_ok(cudaMemcpy(h.bytes.data(), tensor.data(), bytes, cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

// max |a - b| / max |b| over the elements, and the count of bitwise differences.
struct Diff { double normalised = 0; int64_t mismatches = 0; };
Diff compare(const HostArray& gpu, const HostArray& ref) {
  double max_ref = 0, max_err = 0;
  Diff d;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = gpu.get(i), r = ref.get(i);
    if (std::memcmp(&gpu.bytes[i * dtype_size(gpu.dtype)], &ref.bytes[i * dtype_size(ref.dtype)],
                    dtype_size(ref.dtype)) != 0)
      ++d.mismatches;
    if (!std::isfinite(r) || !std::isfinite(g)) {
      if (std::isfinite(r) != std::isfinite(g)) max_err = INFINITY;
      continue;
    }
    max_ref = std::max(max_ref, std::fabs(r));
    max_err = std::max(max_err, std::fabs(g - r));
  }
  d.normalised = max_err / std::max(max_ref, 1e-30);
  return d;
}

const int64_t kSizes[] = {1, 7, 1000, 300001, 3, 16384, 16385, 64, 33, 5000, 2, 131071, 49999};
constexpr int kSegments = sizeof(kSizes) / sizeof(kSizes[0]);

// Offsets in a shuffled order with random gaps (multiples of align elements); returns the extent.
std::vector<int64_t> scattered_offsets(int64_t& extent, int64_t align) {
  std::vector<int> order(kSegments);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> offsets(kSegments);
  std::uniform_int_distribution<int64_t> gap(0, 17);
  auto next = [&](int64_t at) { return (at + gap(rng) + align - 1) / align * align; };
  int64_t at = next(0);
  for (int i : order) {
    offsets[i] = at;
    at = next(at + kSizes[i]);
  }
  extent = at + gap(rng);
  return offsets;
}

struct Layout {
  std::vector<ops::TensorSegment> segments;
  int64_t src_extent = 0, dst_extent = 0, state_extent = 0;
};

// align: every offset a multiple of it (4: every segment 16-byte aligned, the kernels' vector paths).
Layout make_layout(bool zero_fill_gaps, int64_t align = 1) {
  Layout l;
  const auto src = scattered_offsets(l.src_extent, align);
  const auto dst = scattered_offsets(l.dst_extent, align);
  const auto state = scattered_offsets(l.state_extent, align);
  for (int i = 0; i < kSegments; ++i) {
    uint32_t flags = 0;
    if (i % 2 == 0) flags |= ops::kSegmentWeightDecay;
    if (i % 3 != 1) flags |= ops::kSegmentCountedInNorm;
    l.segments.push_back({src[i], dst[i], state[i], kSizes[i], flags});
  }
  if (zero_fill_gaps) {  // zero the dst gaps (the GradBuffer padding case)
    std::vector<std::pair<int64_t, int64_t>> used;
    for (const auto& s : l.segments) used.push_back({s.dst_offset, s.dst_offset + s.numel});
    std::sort(used.begin(), used.end());
    int64_t cursor = 0;
    for (const auto& [b, e] : used) {
      if (b > cursor) l.segments.push_back({0, cursor, 0, b - cursor, ops::kSegmentZeroFill});
      cursor = e;
    }
    if (l.dst_extent > cursor) l.segments.push_back({0, cursor, 0, l.dst_extent - cursor, ops::kSegmentZeroFill});
  }
  return l;
}

void test_convert(DType t) {
  for (bool to_f32 : {true, false}) {  // model grads -> f32 buffer; f32 main params -> model dtype
    const Layout l = make_layout(to_f32);
    const DType src_t = to_f32 ? t : DType::f32, dst_t = to_f32 ? DType::f32 : t;
    HostArray src = random_array(src_t, l.src_extent, 1.0f), dst = random_array(dst_t, l.dst_extent, 5.0f);
    DeviceArray dsrc(src), ddst(dst);
    ops::segmented_convert(dsrc.tensor, ddst.tensor, ops::SegmentTable(l.segments, Device::cuda(0)));
    ops::segmented_convert(src.tensor(), dst.tensor(), ops::SegmentTable(l.segments, Device::cpu()));
    const std::string what = "segmented_convert " + dtype_str(src_t) + "->" + dtype_str(dst_t);
    const Diff d = compare(ddst.download(what), dst);
    check(d.mismatches == 0, what + (to_f32 ? " +zero-fill" : ""),
          fmt("%.0f bitwise mismatches of %.0f", double(d.mismatches), double(dst.numel())));
  }
}

void test_stats_and_pack(int64_t align) {
  for (double unscale : {1.0, 1.0 / 1024}) {
    const Layout l = make_layout(false, align);
    HostArray grads = random_array(DType::f32, l.src_extent, unscale == 1.0 ? 0.3f : 300.0f);
    DeviceArray dgrads(grads);
    HostArray stats(DType::f64, 2), packed(DType::f32, 3);
    DeviceArray dstats(stats), dpacked(packed);
    ops::SegmentTable gpu_table(l.segments, Device::cuda(0)), cpu_table(l.segments, Device::cpu());
    ops::segmented_grad_stats(dgrads.tensor, gpu_table, unscale, dstats.tensor);
    ops::pack_grad_stats(dstats.tensor, dpacked.tensor);
    ops::segmented_grad_stats(grads.tensor(), cpu_table, unscale, stats.tensor());
    ops::pack_grad_stats(stats.tensor(), packed.tensor());
    const HostArray gs = dstats.download("segmented_grad_stats");
    double g_sum, c_sum;
    std::memcpy(&g_sum, gs.bytes.data(), 8);
    std::memcpy(&c_sum, stats.bytes.data(), 8);
    const double rel = std::fabs(g_sum - c_sum) / c_sum;
    check(rel <= 1e-10 && gs.get(1) == 0 && stats.get(1) == 0,
          "segmented_grad_stats sum (unscale " + fmt("%g", unscale) + ", align " + std::to_string(align) + ")",
          fmt("rel diff %.3e, sum %.6e", rel, c_sum));
    const Diff dg = compare(dgrads.download("unscaled grads"), grads);
    check(dg.mismatches == 0, "segmented_grad_stats in-place unscale", fmt("%.0f bitwise mismatches", double(dg.mismatches)));
    const HostArray gp = dpacked.download("pack_grad_stats");
    const double g_packed = double(gp.get(0)) + double(gp.get(1)), c_packed = double(packed.get(0)) + double(packed.get(1));
    check(std::fabs(g_packed - c_packed) <= 1e-10 * c_packed && std::fabs(g_packed - g_sum) <= 1e-13 * g_sum,
          "pack_grad_stats hi+lo", fmt("gpu %.9e cpu %.9e", g_packed, c_packed));
    // Non-finite values: an inf in an uncounted segment, then a NaN in a counted one.
    for (int which : {1, 0}) {
      const auto& s = l.segments[static_cast<size_t>(which)];  // segment 1: not counted, 0: counted
      HostArray bad = grads;
      bad.set(s.src_offset + s.numel / 2, which == 1 ? INFINITY : NAN);
      DeviceArray dbad(bad);
      ops::segmented_grad_stats(dbad.tensor, gpu_table, 1.0, dstats.tensor);
      ops::segmented_grad_stats(bad.tensor(), cpu_table, 1.0, stats.tensor());
      const HostArray gbad = dstats.download("stats nonfinite");
      double gsum;
      std::memcpy(&gsum, gbad.bytes.data(), 8);
      const bool sum_ok = which == 1 ? std::isfinite(gsum) : std::isnan(gsum);
      check(gbad.get(1) > 0 && stats.get(1) > 0 && sum_ok,
            std::string("segmented_grad_stats finds ") + (which == 1 ? "inf in uncounted" : "nan in counted"),
            fmt("gpu nonfinite %.0f, cpu %.0f", gbad.get(1), stats.get(1)));
    }
  }
}

void test_adamw(DType t, int64_t align) {
  const Layout l = make_layout(false, align);
  HostArray grads = random_array(DType::f32, l.src_extent, 0.05f);
  HostArray params = random_array(DType::f32, l.state_extent, 0.5f);
  HostArray m = random_array(DType::f32, l.state_extent, 0.01f);
  HostArray v(DType::f32, l.state_extent);
  std::normal_distribution<float> second_moment(0.0f, 1e-3f);
  for (int64_t i = 0; i < v.numel(); ++i) v.set(i, std::fabs(second_moment(rng)) + 1e-6f);
  HostArray out = random_array(t, l.dst_extent, 3.0f);
  DeviceArray dg(grads), dp(params), dm(m), dv(v), dout(out);
  ops::AdamWParams hyper;
  hyper.lr = 3e-3;
  hyper.beta1 = 0.9;
  hyper.beta2 = 0.95;
  hyper.eps = 1e-8;
  hyper.weight_decay = 0.1;
  hyper.step = 7;
  const double factor = 0.73;
  ops::segmented_adamw(dg.tensor, dp.tensor, dm.tensor, dv.tensor, dout.tensor, ops::SegmentTable(l.segments, Device::cuda(0)),
                       hyper, factor);
  ops::segmented_adamw(grads.tensor(), params.tensor(), m.tensor(), v.tensor(), out.tensor(),
                       ops::SegmentTable(l.segments, Device::cpu()), hyper, factor);
  const std::string dn = dtype_str(t) + (align > 1 ? ", aligned segments" : "");
  const Diff p = compare(dp.download("adamw params"), params), mm = compare(dm.download("adamw m"), m),
             vv = compare(dv.download("adamw v"), v), oo = compare(dout.download("adamw out"), out);
  check(p.normalised <= 1e-6 && mm.normalised <= 1e-6 && vv.normalised <= 1e-6, "segmented_adamw main/m/v (out " + dn + ")",
        fmt("max norm err %.3e, %.0f bitwise mismatches", std::max({p.normalised, mm.normalised, vv.normalised}),
            double(p.mismatches + mm.mismatches + vv.mismatches)));
  const double out_tol = t == DType::f32 ? 1e-6 : t == DType::bf16 ? 8e-3 : 1e-3;
  check(oo.normalised <= out_tol, "segmented_adamw out " + dn,
        fmt("norm err %.3e, %.0f bitwise mismatches", oo.normalised, double(oo.mismatches)));
}

// --------------------------------------------------------------------------------------------
train::Config& base_config() {
  static train::Config config = train::load_config("", {"data.mock_data=true", "data.vocab_size=50"});
  return config;
}

std::vector<float> download_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Buffer host(out.size() * dtype_size(t.dtype()));
  const Tensor h = host.as_tensor(t.dtype(), {t.numel()});
  ops::copy(t.flat(), h);  // device -> host, same dtype
  ops::copy(h, Tensor(out.data(), DType::f32, {t.numel()}));
  return out;
}

void set_random(const Tensor& t, float stddev, uint32_t seed) {
  std::mt19937 local(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (auto& x : v) x = dist(local);
  ops::copy(Tensor(v.data(), DType::f32, {t.numel()}), t.flat());
}

void test_optimizer(DType t, bool sharded, bool fp16_scaling, parallel::ParallelContext& cpu_context,
                    parallel::ParallelContext& gpu_context) {
  const std::vector<Shape> shapes = {{1000, 64}, {64}, {64, 192}, {192}, {7}, {1}, {300001}, {129, 33}};
  nn::ParameterStore cpu_store, gpu_store;
  for (size_t i = 0; i < shapes.size(); ++i)
    for (auto* s : {&cpu_store, &gpu_store}) s->add(std::string("p").append(std::to_string(i)), shapes[i], nn::Init::normal, 0.02, true);
  cpu_store.allocate(t, Device::cpu());
  gpu_store.allocate(t, Device::cuda(0));
  for (size_t i = 0; i < shapes.size(); ++i) set_random(cpu_store.value(static_cast<int>(i)), 0.3f, 10 + i);
  ops::copy(cpu_store.all_values(), gpu_store.all_values());
  std::vector<bool> decay, counted;
  for (size_t i = 0; i < shapes.size(); ++i) {
    decay.push_back(i % 2 == 0);
    counted.push_back(i != 4);
  }
  optim::DistributedOptimizerOptions options;
  options.shard_over_data_parallel = sharded;
  options.bucket_size = sharded ? 70000 : 0;
  options.dynamic_loss_scaling = fp16_scaling;
  options.scaler.initial_scale = 128;
  optim::DistributedOptimizer cpu_opt(cpu_store, cpu_context, options, decay, counted);
  optim::DistributedOptimizer gpu_opt(gpu_store, gpu_context, options, decay, counted);
  double worst_norm = 0, worst_param = 0, worst_main = 0;
  bool skipped_agree = true;
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor& g = cpu_store.grad(static_cast<int>(i));
      set_random(g, step == 1 ? 2.0f : 0.02f, 1000 * step + i);
      if (fp16_scaling) ops::scale_inplace(g, cpu_opt.loss_scale());
    }
    // Parameter by parameter: the CUDA store's f32 gradients are the optimizer's gradient buffer (in
    // bucket order, padded when sharded), which a CPU store of half params does not share; convert on
    // the host, then upload.
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor& gpu_grad = gpu_store.grad(static_cast<int>(i));
      Buffer staged(static_cast<size_t>(gpu_grad.numel()) * dtype_size(gpu_grad.dtype()));
      const Tensor host_grad = staged.as_tensor(gpu_grad.dtype(), gpu_grad.shape());
      ops::copy(cpu_store.grad(static_cast<int>(i)), host_grad);
      ops::copy(host_grad, gpu_grad);
    }
    const auto rc = cpu_opt.step(1e-2, 0.1, 0.9, 0.95, 1e-8, 1.0);
    const auto rg = gpu_opt.step(1e-2, 0.1, 0.9, 0.95, 1e-8, 1.0);
    skipped_agree = skipped_agree && rc.skipped == rg.skipped && !rc.skipped;
    worst_norm = std::max(worst_norm, std::fabs(rg.grad_norm - rc.grad_norm) / rc.grad_norm);
    const auto pc = download_f32(cpu_store.all_values()), pg = download_f32(gpu_store.all_values());
    double max_ref = 0, max_err = 0;
    for (size_t k = 0; k < pc.size(); ++k) {
      max_ref = std::max(max_ref, double(std::fabs(pc[k])));
      max_err = std::max(max_err, double(std::fabs(pg[k] - pc[k])));
    }
    worst_param = std::max(worst_param, max_err / max_ref);
    const auto mc = download_f32(cpu_opt.main_params()), mg = download_f32(gpu_opt.main_params());
    double mref = 0, merr = 0;
    for (size_t k = 0; k < mc.size(); ++k) {
      mref = std::max(mref, double(std::fabs(mc[k])));
      merr = std::max(merr, double(std::fabs(mg[k] - mc[k])));
    }
    worst_main = std::max(worst_main, merr / mref);
  }
  // Params within the model dtype's rounding (one bf16 ulp is 2^-8 relative, f16 2^-11).
  const double param_tol = t == DType::f32 ? 1e-5 : t == DType::bf16 ? 8e-3 : 1e-3;
  const std::string name = std::string("DistributedOptimizer cuda vs cpu ") + dtype_str(t) +
                           (sharded ? " sharded" : "") + (fp16_scaling ? " +loss-scale" : "");
  check(skipped_agree && worst_norm <= 1e-6 && worst_param <= param_tol && worst_main <= 1e-5, name,
        fmt("norm rel %.2e, params %.2e", worst_norm, worst_param) + fmt(", main %.2e", worst_main));
}

// --------------------------------------------------------------------------------------------
// GPT-2 124M's parameter list (148 tensors, 124.4M elements).
std::vector<Shape> gpt2_small_shapes() {
  std::vector<Shape> s = {{50304, 768}, {1024, 768}};
  for (int layer = 0; layer < 12; ++layer)
    for (Shape shape : std::vector<Shape>{{768}, {768}, {2304, 768}, {2304}, {768, 768}, {768}, {768}, {768},
                                          {3072, 768}, {3072}, {768, 3072}, {768}})
      s.push_back(shape);
  s.push_back({768});
  s.push_back({768});
  return s;
}

float time_ms(const std::function<void()>& f, int repeats) {
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "event");
  cuda_ok(cudaEventCreate(&stop), "event");
  cudaStream_t s = nullptr;  // legacy stream: ordered with the compute stream (blocking stream)
  cuda_ok(cudaEventRecord(start, s), "record");
  for (int i = 0; i < repeats; ++i) f();
  cuda_ok(cudaEventRecord(stop, s), "record");
  cuda_ok(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  cuda_ok(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / static_cast<float>(repeats);
}

void benchmark(DType t, parallel::ParallelContext& gpu_context) {
  const auto shapes = gpt2_small_shapes();
  nn::ParameterStore store;
  for (size_t i = 0; i < shapes.size(); ++i) store.add(std::string("p").append(std::to_string(i)), shapes[i], nn::Init::normal, 0.02, true);
  store.allocate(t, Device::cuda(0));
  ops::fill(store.all_values(), 0.01);
  ops::fill(store.all_grads(), 1e-3);
  std::vector<bool> decay, counted(shapes.size(), true);
  for (const auto& s : shapes) decay.push_back(s.size() > 1);
  optim::DistributedOptimizer opt(store, gpu_context, {}, decay, counted);
  auto step = [&]() { opt.step(1e-4, 0.1, 0.9, 0.95, 1e-8, 1.0); };
  step();
  step();
  const float ms = time_ms(step, 10);
  char line[256];
  std::snprintf(line, sizeof(line), "optimizer step, %s model params, %zu segments, %.1fM f32 main params: %.3f ms",
                dtype_str(t).c_str(), opt.segments().size(), opt.local_numel() / 1e6, ms);
  table_rows.push_back(line);

  // The per-segment sequence the optimizer used to issue (per parameter: convert the grad into the
  // f32 buffer, sum of squares with a host sync, AdamW, copy back), on the same buffers.
  const Tensor grads = opt.grad_buffer().all(), main = opt.main_params(), m = opt.exp_avg(), v = opt.exp_avg_sq();
  ops::AdamWParams hyper;
  hyper.lr = 1e-4;
  hyper.beta2 = 0.95;
  const auto& segments = opt.segments();
  auto legacy = [&]() {
    for (size_t i = 0; i < shapes.size(); ++i)
      ops::copy(store.grad(static_cast<int>(i)),
                opt.grad_buffer().param_grad(static_cast<int>(i)));
    double sq = 0;
    for (const auto& s : segments) sq += ops::sum_of_squares(grads.rows(s.buffer_offset, s.buffer_offset + s.numel));
    for (const auto& s : segments) {
      ops::adamw_update(main.rows(s.local_offset, s.local_offset + s.numel),
                        grads.rows(s.buffer_offset, s.buffer_offset + s.numel),
                        m.rows(s.local_offset, s.local_offset + s.numel), v.rows(s.local_offset, s.local_offset + s.numel),
                        hyper);
      ops::copy(main.rows(s.local_offset, s.local_offset + s.numel),
                store.value(s.param).flat().rows(s.param_offset, s.param_offset + s.numel));
    }
    (void)sq;
  };
  legacy();
  const float legacy_ms = time_ms(legacy, 5);
  std::snprintf(line, sizeof(line), "per-segment op sequence it replaces (%s, %zu syncs): %.3f ms  (%.1fx)",
                dtype_str(t).c_str(), segments.size(), legacy_ms, legacy_ms / ms);
  table_rows.push_back(line);
  std::printf("%s\n", line);
}

}  // namespace

int main() {
  if (!gpu_test::device_visible()) return 77;
  auto section = [](const char* name, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      check(false, name, std::string("exception: ") + e.what());
    }
  };
  for (DType t : {DType::f32, DType::bf16, DType::f16}) section("convert", [&] { test_convert(t); });
  section("stats", [&] {
    test_stats_and_pack(1);
    test_stats_and_pack(4);
  });
  for (DType t : {DType::f32, DType::bf16, DType::f16}) section("adamw", [&] {
    test_adamw(t, 1);
    test_adamw(t, 4);
  });
  std::unique_ptr<parallel::ParallelContext> cpu_context, gpu_context;
  section("contexts", [&] {
    Runtime& rt = Runtime::init(nullptr, nullptr);
    cpu_context = std::make_unique<parallel::ParallelContext>(base_config().parallel, 1, rt.world_rank(), Device::cpu());
    gpu_context = std::make_unique<parallel::ParallelContext>(base_config().parallel, 1, rt.world_rank(), Device::cuda(0));
  });
  if (gpu_context) {
    section("optimizer f32", [&] { test_optimizer(DType::f32, false, false, *cpu_context, *gpu_context); });
    section("optimizer bf16", [&] { test_optimizer(DType::bf16, false, false, *cpu_context, *gpu_context); });
    section("optimizer bf16 sharded", [&] { test_optimizer(DType::bf16, true, false, *cpu_context, *gpu_context); });
    section("optimizer f16 sharded", [&] { test_optimizer(DType::f16, true, true, *cpu_context, *gpu_context); });
    section("benchmark bf16", [&] { benchmark(DType::bf16, *gpu_context); });
    section("benchmark f32", [&] { benchmark(DType::f32, *gpu_context); });
  }
  std::printf("\n");
  for (const auto& row : table_rows) std::printf("%s\n", row.c_str());
  std::printf("\nmulti-tensor parity: %s (%d failures)\n", failures ? "FAILED" : "PASSED", failures);
  gpu_context.reset();
  cpu_context.reset();
  if (Runtime::initialized()) Runtime::get().finalize();
  return failures ? 1 : 0;
}

// Native CPU kernels of velobins_net (loaded by velobins_net/accel/native.py through ctypes):
//
// 1. vb_attn_*: multi-head self-attention (no mask) for small heads, forward and backward.
// 2. vb_bin_decode_f32: the bin decoder at inference (eq:softmax, eq:decode, eq:bin_variance).
// 3. vb_gelu_f32: the exact GELU of the small activations of one window, without autograd.
//
// --- 1. attention ------------------------------------------------------------------------------
//
// Why: the encoder's all-token transformer layer has head dimension 12 and windows of 100 steps.
// PyTorch's CPU attention kernels are built for large heads; at this size their backward pass
// dominated a training step (benchmarks/bench_net_train.py prints both). Here
// one (window, head) pair is a handful of tiny matrices that fit in L1/L2, so each is computed
// in one go with register-blocked products on 64-byte vectors (GCC vector extensions: AVX-512
// with -march=native where the CPU has it, narrower SIMD or plain code elsewhere).
//
// Layout (all contiguous):   qkv  (B, T, 3, H, E)   packed as the projection produces it
//                            out  (B, T, H, E)      softmax(q kᵀ · scale) v per head
//                            lse  (B, H, T)         log Σ_j exp(score) per query (for backward)
//                            dqkv (B, T, 3, H, E)   gradient, same layout as qkv
// The forward pass keeps only lse; the backward pass recomputes the probabilities from it
// (as FlashAttention does), so no (T × T) matrix per head is stored between the passes.
//
// Entry points: vb_attn_{fwd,bwd}_{f32,f64}; they return 0, or 1 for an unsupported head
// dimension (the caller then uses PyTorch's kernel).
//
// --- 2. bin decoder ----------------------------------------------------------------------------
// One window at a time (the streaming predictor's case) the decoder is a dozen tiny PyTorch ops,
// each with a fixed cost, which made up most of the difference to the regression head's latency.
// vb_bin_decode_f32 does them in one call: logits = q · features, softmax, v = Σ p c and
// var = Σ p (c − v)² per row (one row per window and axis). It is a backend of
// velobins_net.bins.decode_queries, whose PyTorch expressions define these formulas.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

// The vector width follows the instruction set the kernel is compiled for: 64-byte vectors
// only where AVX-512 holds them in one register. Elsewhere GCC splits each one into several
// narrower registers, and the 4 × 4 blocks of matmul then spill: on an AVX2 CPU (AMD Zen 3) the
// attention ran 5× slower than PyTorch's with 64-byte vectors and 1.3× faster with 32-byte ones
// (benchmarks/bench_net_train.py prints both kernels). VB_VEC_BYTES overrides the choice.
#ifndef VB_VEC_BYTES
#if defined(__AVX512F__)
#define VB_VEC_BYTES 64
#elif defined(__AVX__)
#define VB_VEC_BYTES 32
#else
#define VB_VEC_BYTES 16
#endif
#endif
constexpr int kVecBytes = VB_VEC_BYTES;
template <typename F> struct Vec;
template <> struct Vec<float> {
  typedef float v __attribute__((vector_size(kVecBytes)));
  typedef int32_t vi __attribute__((vector_size(kVecBytes)));
  static constexpr int lanes = kVecBytes / 4;
};
template <> struct Vec<double> {
  typedef double v __attribute__((vector_size(kVecBytes)));
  typedef int64_t vi __attribute__((vector_size(kVecBytes)));
  static constexpr int lanes = kVecBytes / 8;
};

// exp per float lane: Cephes' expf (range reduction by ln 2, degree-5 polynomial), max error ~2 ulp.
inline Vec<float>::v vexp(Vec<float>::v x) {
  typedef Vec<float>::v v;
  typedef Vec<float>::vi vi;
  const v lo = v{} - 87.3365447504f, hi = v{} + 88.3762626647949f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  v fx = x * 1.44269504088896341f + 0.5f;
  v t = __builtin_convertvector(__builtin_convertvector(fx, vi), v);
  fx = t > fx ? t - 1.0f : t;  // floor
  x = x - fx * 0.693359375f;
  x = x - fx * -2.12194440e-4f;
  v y = ((((1.9875691500E-4f * x + 1.3981999507E-3f) * x + 8.3334519073E-3f) * x + 4.1665795894E-2f) * x +
         1.6666665459E-1f) * x + 5.0000001201E-1f;
  y = y * x * x + x + 1.0f;
  vi e = (__builtin_convertvector(fx, vi) + 127) << 23;  // 2^fx
  return y * (v)e;
}
// exp per double lane: libm (the double kernel exists for gradient checks, not for speed).
inline Vec<double>::v vexp(Vec<double>::v x) {
  for (int l = 0; l < Vec<double>::lanes; ++l) x[l] = std::exp(x[l]);
  return x;
}

// Horizontal reductions over the lanes (once per row, not in inner loops). The sum halves the
// vector until one lane is left (lane l plus lane l + half), so it adds in the same order at
// every width: the 64-byte build sums as it did with its shuffle tree.
template <typename V> inline auto lane_sum(V x) -> decltype(x[0] + 0) {
  for (int half = int(sizeof(V) / sizeof(x[0])) / 2; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) x[l] += x[l + half];
  return x[0];
}
template <typename V> inline auto lane_max(V x) -> decltype(x[0] + 0) {
  auto r = x[0];
  for (int l = 1; l < int(sizeof(V) / sizeof(x[0])); ++l) r = x[l] > r ? x[l] : r;
  return r;
}

// One (window, head) pair at a time. Work buffers hold matrices as rows of vectors: "T × Ep"
// (one row per time step, head dimension zero-padded to Ep) or transposed "E × Tp" (time padded
// to Tp). Padding lanes are zeroed once per thread and never written, so they stay zero.
template <typename F, int E>
struct Attention {
  typedef typename Vec<F>::v v;
  static constexpr int W = Vec<F>::lanes;
  static constexpr int64_t Ep = (E + W - 1) / W * W, ne = Ep / W;
  int64_t T, H, Tp, nb;
  F scale;
  v tail;  // 1 on the lanes of the last time block that are real time steps, 0 on padding

  Attention(int64_t T_, int64_t H_, F s) : T(T_), H(H_), Tp((T_ + W - 1) / W * W), nb(Tp / W), scale(s) {
    for (int l = 0; l < W; ++l) tail[l] = (nb - 1) * W + l < T ? F(1) : F(0);
  }
  int64_t qkv_at(int64_t b, int64_t t, int c, int64_t h) const { return ((b * T + t) * 3 + c) * H * E + h * E; }
  int64_t out_at(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H * E + h * E; }

  // C (M × N vectors) = Σ_k A[r·rs + k·cs] · Bv[k·N + c] for k < K; A scalar, Bv rows of N vectors.
  template <int RB, int CB>
  static void block(const F* A, int64_t rs, int64_t cs, int64_t K, const v* Bv, int64_t ldb, v* C, int64_t ldc) {
    v acc[RB][CB];
    for (int r = 0; r < RB; ++r)
      for (int c = 0; c < CB; ++c) acc[r][c] = v{};
    for (int64_t k = 0; k < K; ++k) {
      v bk[CB];
      for (int c = 0; c < CB; ++c) bk[c] = Bv[k * ldb + c];
      for (int r = 0; r < RB; ++r) {
        F a = A[r * rs + k * cs];
        for (int c = 0; c < CB; ++c) acc[r][c] += a * bk[c];
      }
    }
    for (int r = 0; r < RB; ++r)
      for (int c = 0; c < CB; ++c) C[r * ldc + c] = acc[r][c];
  }
  static void matmul(const F* A, int64_t rs, int64_t cs, int64_t M, int64_t K, const v* Bv, int64_t N, v* C) {
    int64_t r = 0;
    if (N >= 4) {
      for (; r + 4 <= M; r += 4) {
        int64_t c = 0;
        for (; c + 4 <= N; c += 4) block<4, 4>(A + r * rs, rs, cs, K, Bv + c, N, C + r * N + c, N);
        for (; c < N; ++c) block<4, 1>(A + r * rs, rs, cs, K, Bv + c, N, C + r * N + c, N);
      }
    } else {
      for (; r + 8 <= M; r += 8)
        for (int64_t c = 0; c < N; ++c) block<8, 1>(A + r * rs, rs, cs, K, Bv + c, N, C + r * N + c, N);
    }
    for (; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) block<1, 1>(A + r * rs, rs, cs, K, Bv + c, N, C + r * N + c, N);
  }

  // Gather E values per time step (stride st from off) into T × Ep rows, times mult.
  void rows_in(const F* src, int64_t st, int64_t off, F mult, v* dst) const {
    F* f = (F*)dst;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) f[t * Ep + e] = mult * src[off + t * st + e];
  }
  // Gather E values per time step into the transposed E × Tp layout.
  void cols_in(const F* src, int64_t st, int64_t off, v* dst) const {
    F* f = (F*)dst;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) f[e * Tp + t] = src[off + t * st + e];
  }
  void rows_out(const v* src, const F* mult, F scalar, int64_t st, int64_t off, F* dst) const {
    const F* f = (const F*)src;
    for (int64_t t = 0; t < T; ++t) {
      F m = mult ? mult[t] : scalar;
      for (int64_t e = 0; e < E; ++e) dst[off + t * st + e] = m * f[t * Ep + e];
    }
  }
  void cols_out(const v* src, int64_t st, int64_t off, F* dst) const {
    const F* f = (const F*)src;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) dst[off + t * st + e] = f[e * Tp + t];
  }

  size_t forward_workspace() const { return E * nb + 3 * T * ne + T * nb + (T + W - 1) / W; }
  void forward(const F* qkv, F* out, F* lse, int64_t bh, v* ws) const {
    const int64_t b = bh / H, h = bh % H, st = 3 * H * E;
    v* Kt = ws;            // E × Tp
    v* Vr = Kt + E * nb;   // T × Ep
    v* Qr = Vr + T * ne;   // T × Ep, times scale
    v* O = Qr + T * ne;    // T × Ep, unnormalised output
    v* S = O + T * ne;     // T × Tp scores, then exp(score − row max)
    F* inv = (F*)(S + T * nb);
    cols_in(qkv, st, qkv_at(b, 0, 1, h), Kt);
    rows_in(qkv, st, qkv_at(b, 0, 2, h), F(1), Vr);
    rows_in(qkv, st, qkv_at(b, 0, 0, h), scale, Qr);
    matmul((const F*)Qr, Ep, 1, T, E, Kt, nb, S);
    for (int64_t i = 0; i < T; ++i) {
      v* p = S + i * nb;
      // Padding lanes repeat lane 0 of the last block (a real score), so the max is over real ones.
      p[nb - 1] = tail > F(0) ? p[nb - 1] : v{} + p[nb - 1][0];
      v vm = p[0];
      for (int64_t k = 1; k < nb; ++k) vm = p[k] > vm ? p[k] : vm;
      const F m = lane_max(vm);
      v vs{};
      for (int64_t k = 0; k < nb; ++k) {
        v e = vexp(p[k] - m);
        if (k == nb - 1) e = tail > F(0) ? e : v{};
        p[k] = e;
        vs += e;
      }
      const F s = lane_sum(vs);
      inv[i] = F(1) / s;
      lse[bh * T + i] = m + std::log(s);
    }
    matmul((const F*)S, Tp, 1, T, T, Vr, ne, O);
    rows_out(O, inv, F(1), H * E, out_at(b, 0, h), out);
  }

  size_t backward_workspace() const { return 4 * E * nb + 4 * T * ne + 2 * T * nb; }
  void backward(const F* qkv, const F* out, const F* dout, const F* lse, F* dqkv, int64_t bh, v* ws) const {
    const int64_t b = bh / H, h = bh % H, st = 3 * H * E;
    v* Kt = ws;             // E × Tp
    v* Vt = Kt + E * nb;    // E × Tp
    v* dKt = Vt + E * nb;   // E × Tp
    v* dVt = dKt + E * nb;  // E × Tp
    v* Kr = dVt + E * nb;   // T × Ep
    v* Qr = Kr + T * ne;    // T × Ep, times scale
    v* dOr = Qr + T * ne;   // T × Ep
    v* dQ = dOr + T * ne;   // T × Ep
    v* P = dQ + T * ne;     // T × Tp probabilities
    v* dS = P + T * nb;     // T × Tp: dP, then the score gradient
    cols_in(qkv, st, qkv_at(b, 0, 1, h), Kt);
    cols_in(qkv, st, qkv_at(b, 0, 2, h), Vt);
    rows_in(qkv, st, qkv_at(b, 0, 1, h), F(1), Kr);
    rows_in(qkv, st, qkv_at(b, 0, 0, h), scale, Qr);
    rows_in(dout, H * E, out_at(b, 0, h), F(1), dOr);
    matmul((const F*)Qr, Ep, 1, T, E, Kt, nb, P);    // scores
    matmul((const F*)dOr, Ep, 1, T, E, Vt, nb, dS);  // dP = dO Vᵀ
    const F* dof = (const F*)dOr;
    for (int64_t i = 0; i < T; ++i) {
      const F* o = out + out_at(b, i, h);
      F D = 0;  // Σ_j P_ij dP_ij = dO_i · O_i
      for (int64_t e = 0; e < E; ++e) D += dof[i * Ep + e] * o[e];
      const F l = lse[bh * T + i];
      v* pr = P + i * nb;
      v* dsr = dS + i * nb;
      for (int64_t k = 0; k < nb; ++k) {
        v p = vexp(pr[k] - l);
        if (k == nb - 1) p = tail > F(0) ? p : v{};
        pr[k] = p;
        dsr[k] = p * (dsr[k] - D);
      }
    }
    matmul((const F*)dS, Tp, 1, T, T, Kr, ne, dQ);   // dQ = dS K (times scale on the way out)
    matmul((const F*)Qr, 1, Ep, E, T, dS, nb, dKt);  // dKᵀ = (scale Q)ᵀ dS
    matmul((const F*)dOr, 1, Ep, E, T, P, nb, dVt);  // dVᵀ = dOᵀ P
    rows_out(dQ, nullptr, scale, st, qkv_at(b, 0, 0, h), dqkv);
    cols_out(dKt, st, qkv_at(b, 0, 1, h), dqkv);
    cols_out(dVt, st, qkv_at(b, 0, 2, h), dqkv);
  }
};

// Run job(first, last, workspace) over [0, n) on up to `threads` threads, each with its own
// zeroed workspace of `ws` vectors.
template <typename V, typename Job>
void parallel(int64_t n, int threads, size_t ws, Job job) {
  auto run = [&](int64_t first, int64_t last) {
    std::vector<V> buf(ws, V{});
    for (int64_t i = first; i < last; ++i) job(i, buf.data());
  };
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(threads, n));
  if (nt == 1) {
    run(0, n);
    return;
  }
  const int64_t chunk = (n + nt - 1) / nt;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < nt; ++t) pool.emplace_back(run, t * chunk, std::min(n, (t + 1) * chunk));
  run(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

template <typename F, int E>
void forward_e(const F* qkv, F* out, F* lse, int64_t B, int64_t T, int64_t H, double scale, int threads) {
  const Attention<F, E> a(T, H, F(scale));
  parallel<typename Attention<F, E>::v>(B * H, threads, a.forward_workspace(),
                                        [&](int64_t bh, typename Attention<F, E>::v* ws) { a.forward(qkv, out, lse, bh, ws); });
}
template <typename F, int E>
void backward_e(const F* qkv, const F* out, const F* dout, const F* lse, F* dqkv, int64_t B, int64_t T, int64_t H,
                double scale, int threads) {
  const Attention<F, E> a(T, H, F(scale));
  parallel<typename Attention<F, E>::v>(B * H, threads, a.backward_workspace(), [&](int64_t bh, typename Attention<F, E>::v* ws) {
    a.backward(qkv, out, dout, lse, dqkv, bh, ws);
  });
}

// Head dimensions compiled (each one a specialisation, so loops over E unroll); others return 1.
#define VB_HEAD_DIMS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)

template <typename F>
int forward(const F* qkv, F* out, F* lse, int64_t B, int64_t T, int64_t H, int64_t E, double scale, int threads) {
  if (B < 0 || T < 1 || H < 1) return 1;
  switch (E) {
#define X(n)                                                    \
  case n:                                                       \
    forward_e<F, n>(qkv, out, lse, B, T, H, scale, threads);    \
    return 0;
    VB_HEAD_DIMS(X)
#undef X
    default:
      return 1;
  }
}
template <typename F>
int backward(const F* qkv, const F* out, const F* dout, const F* lse, F* dqkv, int64_t B, int64_t T, int64_t H,
             int64_t E, double scale, int threads) {
  if (B < 0 || T < 1 || H < 1) return 1;
  switch (E) {
#define X(n)                                                                 \
  case n:                                                                    \
    backward_e<F, n>(qkv, out, dout, lse, dqkv, B, T, H, scale, threads);    \
    return 0;
    VB_HEAD_DIMS(X)
#undef X
    default:
      return 1;
  }
}


// Bin decoder rows: logits (rows × N) = q (rows × D) · features_t (D × N); then per row the
// softmax p, v = Σ_j p_j c_j and var = Σ_j p_j (c_j − v)².
void bin_decode(const float* q, const float* feat_t, const float* centres, float* logits, float* v_out,
                float* var_out, int64_t rows, int64_t D, int64_t N) {
  typedef Vec<float>::v v;
  constexpr int W = Vec<float>::lanes;
  const int64_t nv = N / W;  // full vectors; the remaining N % W bins take scalar code
  std::vector<float> p(N);
  for (int64_t r = 0; r < rows; ++r) {
    float* lg = logits + r * N;
    const float* qr = q + r * D;
    for (int64_t j = 0; j < N; ++j) lg[j] = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float a = qr[d];
      const float* f = feat_t + d * N;
      for (int64_t j = 0; j < N; ++j) lg[j] += a * f[j];
    }
    // Vector blocks of W bins, then the N % W tail in scalar code, for the max, the sum, the mean
    // and the variance; the lanes are folded with lane_max / lane_sum.
    auto load = [](const float* src) { v x; __builtin_memcpy(&x, src, sizeof(v)); return x; };
    v vm = v{} + lg[0];
    for (int64_t k = 0; k < nv; ++k) { v x = load(lg + k * W); vm = x > vm ? x : vm; }
    float m = lane_max(vm);
    for (int64_t j = nv * W; j < N; ++j) m = lg[j] > m ? lg[j] : m;
    v vs{}, vc{};
    for (int64_t k = 0; k < nv; ++k) {
      v x = vexp(load(lg + k * W) - m);
      __builtin_memcpy(p.data() + k * W, &x, sizeof(v));
      vs += x;
      vc += x * load(centres + k * W);
    }
    float s = lane_sum(vs), sc = lane_sum(vc);
    for (int64_t j = nv * W; j < N; ++j) {
      p[j] = std::exp(lg[j] - m);
      s += p[j];
      sc += p[j] * centres[j];
    }
    const float inv = 1.0f / s, mean = sc * inv;
    v vv{};
    for (int64_t k = 0; k < nv; ++k) {
      v dv = load(centres + k * W) - mean;
      vv += load(p.data() + k * W) * dv * dv;
    }
    float var = lane_sum(vv);
    for (int64_t j = nv * W; j < N; ++j) {
      const float dv = centres[j] - mean;
      var += p[j] * dv * dv;
    }
    v_out[r] = mean;
    var_out[r] = var * inv;
  }
}

// Exact GELU, y = x·Φ(x) with Φ(x) = ½ erfc(−x/√2), erfc by the Chebyshev fit of Numerical
// Recipes' erfcc (relative error < 1.2e-7 everywhere, so the negative tail keeps its relative
// precision): t = 1/(1 + |z|/2), erfc(|z|) = t·exp(−z² + P(t)). For the small activations of one
// window, where oneDNN's eltwise primitive (PyTorch's choice for contiguous float32) costs more in
// fixed overhead than the arithmetic.
template <typename T> inline T gelu_poly(T x, T* z2_out) {
  const T az = (x < 0 ? -x : x) * 0.70710678118654752f;
  *z2_out = az * az;
  return 1.0f / (0.5f * az + 1.0f);
}
template <typename T> inline T gelu_of(T x, T t, T e) {
  // e = exp(−z² + P(t)); erfc(|z|) = t·e; Φ(x) = ½ erfc(|z|) for x < 0, 1 − ½ erfc(|z|) otherwise
  const T half_erfc = 0.5f * t * e;
  return x * (x < 0 ? half_erfc : 1.0f - half_erfc);
}
template <typename T> inline T erfcc_exponent(T t, T z2) {
  return -z2 - 1.26551223f +
         t * (1.00002368f +
              t * (0.37409196f +
                   t * (0.09678418f +
                        t * (-0.18628806f +
                             t * (0.27886807f +
                                  t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
}

void gelu(const float* x, float* y, int64_t n) {
  typedef Vec<float>::v v;
  constexpr int W = Vec<float>::lanes;
  const int64_t nv = n / W;
  for (int64_t k = 0; k < nv; ++k) {
    v a, z2;
    __builtin_memcpy(&a, x + k * W, sizeof(v));
    const v t = gelu_poly<v>(a, &z2);
    const v r = gelu_of<v>(a, t, vexp(erfcc_exponent<v>(t, z2)));
    __builtin_memcpy(y + k * W, &r, sizeof(v));
  }
  for (int64_t j = nv * W; j < n; ++j) {
    float z2;
    const float t = gelu_poly<float>(x[j], &z2);
    y[j] = gelu_of<float>(x[j], t, std::exp(erfcc_exponent<float>(t, z2)));
  }
}

}  // namespace

extern "C" {
int vb_gelu_f32(const float* x, float* y, int64_t n) {
  if (n < 0) return 1;
  gelu(x, y, n);
  return 0;
}
int vb_attn_max_head_dim() { return 16; }
int vb_vec_bytes() { return kVecBytes; }
int vb_bin_decode_f32(const float* q, const float* feat_t, const float* centres, float* logits, float* v, float* var,
                      int64_t rows, int64_t D, int64_t N) {
  if (rows < 0 || D < 1 || N < 1) return 1;
  bin_decode(q, feat_t, centres, logits, v, var, rows, D, N);
  return 0;
}
int vb_attn_fwd_f32(const float* qkv, float* out, float* lse, int64_t B, int64_t T, int64_t H, int64_t E, double scale,
                    int threads) {
  return forward(qkv, out, lse, B, T, H, E, scale, threads);
}
int vb_attn_fwd_f64(const double* qkv, double* out, double* lse, int64_t B, int64_t T, int64_t H, int64_t E,
                    double scale, int threads) {
  return forward(qkv, out, lse, B, T, H, E, scale, threads);
}
int vb_attn_bwd_f32(const float* qkv, const float* out, const float* dout, const float* lse, float* dqkv, int64_t B,
                    int64_t T, int64_t H, int64_t E, double scale, int threads) {
  return backward(qkv, out, dout, lse, dqkv, B, T, H, E, scale, threads);
}
int vb_attn_bwd_f64(const double* qkv, const double* out, const double* dout, const double* lse, double* dqkv,
                    int64_t B, int64_t T, int64_t H, int64_t E, double scale, int threads) {
  return backward(qkv, out, dout, lse, dqkv, B, T, H, E, scale, threads);
}
}

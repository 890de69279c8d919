// host.h — maps the CUDA built-ins the kernels use onto plain C++ (g++,
// -std=c++17 or later), so that the same .cu sources compile on a machine
// without CUDA and run on the CPU, for cuda/kernels/hostcheck.
//
// A launch runs every (block, thread) of a one-dimensional grid:
//   gorun_host::launch(grid, block, kernel, args...)        sequentially, for
//       kernels without __shared__ memory or __syncthreads;
//   gorun_host::launch_block(grid, block, kernel, args...)  blocks one after
//       another, the threads of a block as concurrent std::threads meeting
//       at __syncthreads (a barrier). __shared__ becomes `static`, which is
//       right because only one block runs at a time. Launches are
//       serialised by a global mutex.
#ifndef GORUN_HOST_H
#define GORUN_HOST_H
#ifndef __CUDACC__

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
};

// float4 is CUDA's 16-byte vector of four floats (common.cuh's 128-bit
// loads); alignas makes the host build's accesses aligned the same way.
struct alignas(16) float4 {
  float x, y, z, w;
};

namespace gorun_host {

inline thread_local dim3 tls_threadIdx, tls_blockIdx, tls_blockDim, tls_gridDim;

// barrier is a reusable barrier for the threads of one block.
struct barrier {
  std::mutex mu;
  std::condition_variable cv;
  unsigned int count = 0, waiting = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    unsigned int gen = generation;
    if (++waiting == count) {
      waiting = 0;
      generation++;
      cv.notify_all();
      return;
    }
    cv.wait(lk, [&] { return gen != generation; });
  }
};

inline barrier* current_barrier = nullptr;
inline std::mutex launch_mu;

inline void set_ids(unsigned int b, unsigned int t, unsigned int grid, unsigned int block) {
  tls_blockIdx.x = b;
  tls_threadIdx.x = t;
  tls_blockDim.x = block;
  tls_gridDim.x = grid;
}

template <typename F, typename... A>
void launch(unsigned int grid, unsigned int block, F kernel, A... args) {
  std::lock_guard<std::mutex> lk(launch_mu);
  for (unsigned int b = 0; b < grid; b++)
    for (unsigned int t = 0; t < block; t++) {
      set_ids(b, t, grid, block);
      kernel(args...);
    }
}

template <typename F, typename... A>
void launch_block(unsigned int grid, unsigned int block, F kernel, A... args) {
  std::lock_guard<std::mutex> lk(launch_mu);
  for (unsigned int b = 0; b < grid; b++) {
    barrier bar;
    bar.count = block;
    current_barrier = &bar;
    std::vector<std::thread> threads;
    threads.reserve(block);
    for (unsigned int t = 0; t < block; t++)
      threads.emplace_back([=] {
        set_ids(b, t, grid, block);
        kernel(args...);
      });
    for (auto& th : threads) th.join();
    current_barrier = nullptr;
  }
}

} // namespace gorun_host

#define threadIdx (gorun_host::tls_threadIdx)
#define blockIdx (gorun_host::tls_blockIdx)
#define blockDim (gorun_host::tls_blockDim)
#define gridDim (gorun_host::tls_gridDim)

// __syncthreads outside launch_block (a kernel with shared memory launched
// sequentially) aborts rather than computing garbage.
inline void __syncthreads() {
  if (!gorun_host::current_barrier) {
    std::fprintf(stderr, "host.h: __syncthreads outside launch_block\n");
    std::abort();
  }
  gorun_host::current_barrier->wait();
}

// Math intrinsics: the device's fast or special forms, mapped onto libm.
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
using std::erf;
using std::exp;
using std::max;
using std::min;
using std::fma;
using std::fmaf;
using std::isnan;
using std::log;
using std::pow;
using std::sqrt;
using std::tanh;

#endif // __CUDACC__
#endif // GORUN_HOST_H

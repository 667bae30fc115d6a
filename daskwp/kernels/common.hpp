// daskwp — shared definitions for code compiled both by the host C++ compiler and by
// nvcc/NVRTC. Nothing here allocates, throws, or touches Python.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define DWP_HD __host__ __device__
#define DWP_FORCEINLINE __forceinline__
#define DWP_NOINLINE __noinline__
#define DWP_DEVICE_NOINLINE __noinline__
#define DWP_HOST_FORCEINLINE
#else
// Hot on the CPU for non-ASCII text, but inlining it on the GPU costs minutes of compile.
#define DWP_DEVICE_NOINLINE
#define DWP_HD
#if defined(__GNUC__)
// Inlined on the host, left to the compiler on the device (the core's end_word: a template's
// member, GCC stops inlining it on its own).
#define DWP_HOST_FORCEINLINE inline __attribute__((always_inline))
#define DWP_FORCEINLINE inline __attribute__((always_inline))
#define DWP_NOINLINE __attribute__((noinline))
#else
#define DWP_FORCEINLINE inline
#define DWP_HOST_FORCEINLINE inline
#define DWP_NOINLINE
#endif
#endif

#if defined(__CUDACC_RTC__)
// NVRTC has no standard headers; the fixed-width types are all we need.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <cstdint>
#endif

namespace daskwp {

// Version of the compiled blob layouts (vocabulary trie and normalization tables).
// Bump whenever a field moves; loaders refuse other versions.
constexpr uint32_t kBlobVersion = 3;
constexpr uint32_t kVocabMagic = 0x56505744u;  // "DWPV" little endian
constexpr uint32_t kNormMagic = 0x4e505744u;   // "DWPN" little endian

}  // namespace daskwp

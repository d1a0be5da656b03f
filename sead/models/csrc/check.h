// SEAD_CHECK(condition, parts...): TORCH_CHECK for the kernels, its message parts (strings and integers) written
// with snprintf into a plain C string.
//
// TORCH_CHECK with values in its message builds it with c10::str, stream code instantiated in this library. On
// one NVIDIA host (gcc 13.3, torch 2.11.0+cu130, 2026-11-27) a failing check of that kind crashed the process
// (SIGSEGV) instead of raising, while checks with a fixed message raised. Handed one C string, c10 builds the
// exception inside its own library: the path that raised there.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <concepts>
#include <cstdio>

namespace sead {

// past what snprintf wrote, or to the last byte (the terminator) when the message is full
inline void advance(char*& at, const char* end, int written) {
  if (written > 0) at += std::min<long>(written, end - at - 1);
}

inline void append(char*& at, const char* end, const char* text) {
  advance(at, end, std::snprintf(at, end - at, "%s", text));
}

inline void append(char*& at, const char* end, std::integral auto value) {
  advance(at, end, std::snprintf(at, end - at, "%lld", static_cast<long long>(value)));
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  char message[512] = "";
  char* at = message;
  (append(at, message + sizeof message, parts), ...);
  TORCH_CHECK(false, static_cast<const char*>(message));
}

}  // namespace sead

#define SEAD_CHECK(condition, ...) \
  do {                             \
    if (!(condition)) [[unlikely]] \
      ::sead::fail(__VA_ARGS__);   \
  } while (false)

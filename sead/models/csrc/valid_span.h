// The valid positions of one row of an attention mask, shared by the decoding attention kernels.
#pragma once

#include <cstdint>

namespace sead {

// [first, last) around every true entry of `row` (nothing valid: first == last)
inline void valid_span(const bool* row, int64_t positions, int64_t& first, int64_t& last) {
  first = 0;
  last = positions;
  while (first < last && !row[first]) ++first;
  while (last > first && !row[last - 1]) --last;
}

}  // namespace sead

// AlignedFloats (engine/base/aligned_floats.h): every size starts on a cache
// line, is zero and holds at least what was asked; from 2 MiB up it starts
// on a 2 MiB boundary; a move hands the array over. A reserved array starts
// on a page, takes memory page by page as written, and Discard zeros exactly
// the whole pages of its range and gives their memory back.
#include "base/aligned_floats.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace attnscore::internal {
namespace {

uintptr_t Address(const float* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(AlignedFloats, EverySizeIsZeroOnACacheLineAndAtLeastAsLong) {
  constexpr size_t kHugeFloats = AlignedFloats::kHugePageBytes / sizeof(float);
  for (const size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{4096} + 3, kHugeFloats - 1,
                             kHugeFloats, kHugeFloats + 1, 3 * kHugeFloats + 5}) {
    AlignedFloats floats(count);
    ASSERT_NE(floats.data(), nullptr) << count;
    EXPECT_EQ(Address(floats.data()) % 64, 0u) << count;
    EXPECT_GE(floats.capacity(), count) << count;
    if (count * sizeof(float) >= AlignedFloats::kHugePageBytes) {
      EXPECT_EQ(Address(floats.data()) % AlignedFloats::kHugePageBytes, 0u) << count;
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < floats.capacity(); ++i) nonzero += floats.data()[i] != 0.0f;
    EXPECT_EQ(nonzero, 0u) << count;
    for (size_t i = 0; i < floats.capacity(); ++i) floats.data()[i] = static_cast<float>(i);
    EXPECT_EQ(floats.data()[floats.capacity() - 1], static_cast<float>(floats.capacity() - 1));
  }
}

TEST(AlignedFloats, AMoveHandsTheArrayOver) {
  for (const size_t count : {size_t{100}, AlignedFloats::kHugePageBytes / sizeof(float) + 1}) {
    AlignedFloats from(count);
    from.data()[0] = 7.0f;
    const float* data = from.data();
    AlignedFloats to(std::move(from));
    EXPECT_EQ(to.data(), data);
    EXPECT_EQ(to.data()[0], 7.0f);
    EXPECT_EQ(from.data(), nullptr);  // NOLINT(bugprone-use-after-move): the state a move leaves
    EXPECT_EQ(from.capacity(), 0u);   // NOLINT(bugprone-use-after-move)
    AlignedFloats other(3);
    other = std::move(to);
    EXPECT_EQ(other.data(), data);
    EXPECT_EQ(to.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  }
}

TEST(AlignedFloats, AReservedArrayIsZeroOnAPageAndDiscardZerosItsWholePages) {
  const size_t page = AlignedFloats::PageBytes() / sizeof(float);  // floats a page
  AlignedFloats floats = AlignedFloats::Reserved(4 * page + 3);
  ASSERT_NE(floats.data(), nullptr);
  EXPECT_EQ(Address(floats.data()) % AlignedFloats::PageBytes(), 0u);
  ASSERT_EQ(floats.capacity(), 5 * page);  // whole pages
  for (size_t i = 0; i < floats.capacity(); ++i) ASSERT_EQ(floats.data()[i], 0.0f) << i;
  for (size_t i = 0; i < floats.capacity(); ++i) floats.data()[i] = 1.0f;
  // From half a page in to half a page short of the fourth page's end: only
  // pages 1 and 2 are whole within it.
  floats.Discard(page / 2, 3 * page);
  for (size_t i = 0; i < floats.capacity(); ++i) {
    const bool discarded = i >= page && i < 3 * page;
    ASSERT_EQ(floats.data()[i], discarded ? 0.0f : 1.0f) << i;
  }
  // Written again, a discarded page holds what is written; ranges past the
  // end are cut to it.
  floats.data()[page] = 2.0f;
  EXPECT_EQ(floats.data()[page], 2.0f);
  floats.Discard(4 * page, 10 * page);
  EXPECT_EQ(floats.data()[4 * page], 0.0f);
  EXPECT_EQ(floats.data()[4 * page - 1], 1.0f);
  floats.data()[4 * page] = 4.0f;
  floats.Discard(9 * page, page);  // wholly past the end: nothing
  EXPECT_EQ(floats.data()[4 * page], 4.0f);
  // An array that is not reserved keeps its values.
  AlignedFloats plain(2 * page);
  plain.data()[page] = 3.0f;
  plain.Discard(0, 2 * page);
  EXPECT_EQ(plain.data()[page], 3.0f);
  // A move, by construction or assignment, hands the reservation over,
  // Discard included.
  AlignedFloats moved(std::move(floats));
  moved.Discard(0, page);
  EXPECT_EQ(moved.data()[0], 0.0f);
  AlignedFloats assigned(3);
  assigned = std::move(moved);
  assigned.data()[0] = 5.0f;
  assigned.Discard(0, page);
  EXPECT_EQ(assigned.data()[0], 0.0f);
}

// Which of the array's first `pages` pages are resident (mincore).
std::vector<bool> ResidentPages(const AlignedFloats& floats, size_t pages) {
  std::vector<unsigned char> resident(pages);
  EXPECT_EQ(mincore(floats.data(), pages * AlignedFloats::PageBytes(), resident.data()), 0);
  return std::vector<bool>(resident.begin(), resident.end());
}

// A reserved page takes memory when written, not before, and gives it back
// when discarded: page by page, as mincore sees them.
TEST(AlignedFloats, AReservedPageIsResidentFromItsFirstWriteUntilDiscarded) {
  const size_t page = AlignedFloats::PageBytes() / sizeof(float);
  AlignedFloats floats = AlignedFloats::Reserved(8 * page);
  EXPECT_EQ(ResidentPages(floats, 8), std::vector<bool>(8, false));
  for (const size_t p : {1, 2, 3, 6}) floats.data()[p * page + 5] = 1.0f;
  EXPECT_EQ(ResidentPages(floats, 8),
            (std::vector<bool>{false, true, true, true, false, false, true, false}));
  floats.Discard(2 * page, 5 * page);  // pages 2 to 6
  EXPECT_EQ(ResidentPages(floats, 8),
            (std::vector<bool>{false, true, false, false, false, false, false, false}));
}

}  // namespace
}  // namespace attnscore::internal

// The wgmma producer's K and V tiles (kernels/mmaprefill/paged_tiles.h): the boxes of a paged
// tile reaching past the sequence's keys cover every row once, each from its own page or, past
// the keys, as zeros, in boxes inside one page; and the element-row copies place every chunk
// where the swizzled layout a TMA box writes puts it, filling the tile once.
#include <gtest/gtest.h>
#include <hip/hip_runtime.h>

#if defined(__HIP_PLATFORM_NVIDIA__)  // the wgmma family's producer: Hopper only
#include <set>
#include <string>
#include <vector>

#include "kernels/mmaprefill/paged_tiles.h"

namespace fmha {
namespace mmaprefill {
namespace {

template <class Pages, int kBlockKeys>
void expect_every_row_once(int page_size, int k0, int kv_end) {
    const std::string what = "tile of " + std::to_string(kBlockKeys) + " keys from " + std::to_string(k0) + ", pages of " +
                             std::to_string(page_size) + ", keys end at " + std::to_string(kv_end);
    const int part_rows = Pages::box_rows(page_size);
    std::vector<int> covered(kBlockKeys, 0);
    Pages::plan_last(page_size, k0, kv_end, [&](int kind, int row, int page_row) {
        const int rows = kind == 0 ? part_rows : kind == 1 ? Pages::kGroupRows : 1;
        ASSERT_TRUE(kind >= 0 && kind <= 2 && row >= 0 && row + rows <= kBlockKeys) << what << ": row " << row;
        ASSERT_EQ(row % rows, 0) << what << ": a box on its own rows' grid";
        ASSERT_EQ((k0 + row) / page_size, (k0 + row + rows - 1) / page_size) << what << ": a box inside one page";
        for (int r = row; r < row + rows; ++r) {
            ++covered[r];
            if (k0 + r < kv_end) {
                ASSERT_GE(page_row, 0) << what << ": row " << r << " is a key, not zeros";
                EXPECT_EQ((k0 + page_row) / page_size, (k0 + r) / page_size) << what << ": row " << r << "'s own page";
            } else {
                EXPECT_EQ(page_row, -1) << what << ": row " << r << " is past the keys (zeros)";
            }
        }
    });
    for (int r = 0; r < kBlockKeys; ++r) EXPECT_EQ(covered[r], 1) << what << ": row " << r;
}

TEST(PagedTiles, LastTilesBoxesCoverEveryRowOnceFromItsPageOrAsZeros) {
    // The serving kernels' tiles (tiles.h): d64 96 keys, 64 on short causal ranges; d128 128; d256 64.
    for (int page_size = 16; page_size <= 256; page_size *= 2) {
        for (int k0 : {0, 768}) {
            for (int in_tile : {1, 5, 8, 9, 16, 17, 31, 32, 33, 48, 63, 64, 65, 95, 96, 100, 127}) {  // past the end
                expect_every_row_once<PagedTiles<96, 64>, 96>(page_size, k0, k0 + in_tile);
                expect_every_row_once<PagedTiles<64, 64>, 64>(page_size, k0, k0 + in_tile);
                expect_every_row_once<PagedTiles<128, 128>, 128>(page_size, k0, k0 + in_tile);
                expect_every_row_once<PagedTiles<64, 256>, 64>(page_size, k0, k0 + in_tile);
            }
        }
    }
    // One issuing warp per page part, at most the warpgroup's four (the argument: log2(page_size)).
    EXPECT_EQ((PagedTiles<128, 128>::issuers(4)), 4);
    EXPECT_EQ((PagedTiles<128, 128>::issuers(6)), 2);
    EXPECT_EQ((PagedTiles<128, 128>::issuers(8)), 1);
    EXPECT_EQ((PagedTiles<96, 64>::issuers(6)), 3);  // 96-key tiles: parts of 32 keys
}

template <class Pages>
void expect_swizzled_and_whole(const char* what) {
    const int rows = Pages::kAtomBytes / wgmma::kRowBytes, columns = Pages::kChunksPerRow * 8;
    std::set<uint32_t> placed;
    for (int thread = 0; thread < Pages::kThreads; ++thread) {
        const int chunk = thread % Pages::kChunksPerRow;
        for (int row = thread / Pages::kChunksPerRow; row < rows; row += Pages::kRowsPerPass) {
            const uint32_t offset = Pages::row_offset(row, chunk);
            EXPECT_EQ(offset, uint32_t(wgmma::swizzled_offset(rows, row, 8 * chunk)))
                << what << ": thread " << thread << ", row " << row << ", chunk " << chunk;
            placed.insert(offset);
        }
    }
    EXPECT_EQ(placed.size(), size_t(wgmma::tile_bytes(rows, columns) / 16)) << what << ": every 16-byte slot once";
}

TEST(PagedTiles, ElementRowCopiesPlaceEveryChunkWhereABoxWould) {
    expect_swizzled_and_whole<PagedTiles<96, 64>>("d64, 96 keys");
    expect_swizzled_and_whole<PagedTiles<64, 64>>("d64, 64 keys");
    expect_swizzled_and_whole<PagedTiles<128, 128>>("d128");
    expect_swizzled_and_whole<PagedTiles<64, 256>>("d256, 64 keys");
}

}  // namespace
}  // namespace mmaprefill
}  // namespace fmha
#endif

// Where the wgmma producer's copies place a K or V tile (kernels/mmaprefill/paged_tiles.h): every
// thread's chunks, at every run of chunks a row and each tile of the tile table, land where the
// swizzled layout a TMA box writes puts them, and together fill the tile exactly once.
#include <gtest/gtest.h>
#include <hip/hip_runtime.h>

#if defined(__HIP_PLATFORM_NVIDIA__)  // the wgmma family's producer: Hopper only
#include <set>

#include "kernels/mmaprefill/paged_tiles.h"

namespace fmha {
namespace mmaprefill {
namespace {

template <class Pages>
void expect_swizzled_and_whole(bool elements, const char* what) {
    const int run = Pages::run(elements), threads_per_row = Pages::kChunksPerRow / run;
    const int rows_per_pass = Pages::kThreads / threads_per_row, rows = Pages::kAtomBytes / wgmma::kRowBytes;
    const int columns = Pages::kChunksPerRow * 8;
    std::set<uint32_t> placed;
    for (int thread = 0; thread < Pages::kThreads; ++thread) {
        const int first = thread % threads_per_row;
        for (int row = thread / threads_per_row; row < rows; row += rows_per_pass) {
            for (int j = 0; j < run; ++j) {
                const int step = threads_per_row * j;
                const uint32_t offset = Pages::chunk_offset(Pages::row_offset(row, first), step);
                EXPECT_EQ(offset, uint32_t(wgmma::swizzled_offset(rows, row, 8 * (first + step))))
                    << what << ": thread " << thread << ", row " << row << ", chunk " << first + step;
                placed.insert(offset);
            }
        }
    }
    EXPECT_EQ(placed.size(), size_t(wgmma::tile_bytes(rows, columns) / 16)) << what << ": every 16-byte slot once";
}

TEST(PagedTiles, CopiesPlaceEveryChunkWhereABoxWould) {
    // The serving kernels' tiles (tiles.h): d64 96 keys, 64 on short causal ranges; d128 128, its
    // producer copying whole tiles of small pages (four chunks a row); d256 64.
    expect_swizzled_and_whole<PagedTiles<96, 64, 0>>(false, "d64, 96 keys");
    expect_swizzled_and_whole<PagedTiles<64, 64, 0>>(false, "d64, 64 keys");
    expect_swizzled_and_whole<PagedTiles<128, 128, 16>>(false, "d128, whole tiles copied");
    expect_swizzled_and_whole<PagedTiles<128, 128, 16>>(true, "d128, element rows");
    expect_swizzled_and_whole<PagedTiles<64, 256, 0>>(false, "d256, 64 keys");
    // Runs of two and four chunks where whole passes allow them.
    expect_swizzled_and_whole<PagedTiles<96, 64, 16>>(false, "d64, 96 keys, runs of 2");
    expect_swizzled_and_whole<PagedTiles<64, 256, 16>>(false, "d256, runs of 4");
    static_assert(PagedTiles<128, 128, 16>::run(false) == 4 && PagedTiles<96, 64, 16>::run(false) == 2 &&
                      PagedTiles<128, 128, 16>::run(true) == 1 && PagedTiles<128, 128, 0>::run(false) == 1,
                  "runs of chunks");
}

}  // namespace
}  // namespace mmaprefill
}  // namespace fmha
#endif

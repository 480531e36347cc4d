// The AMX tile setup vlabench's kernels share: eight tiles of 16 rows x 64 bytes (four C tiles 0-3, A tile 4,
// B tile 5), and the per-process permission Linux requires before any tile instruction.
#pragma once
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

// Tile register numbers must be literals for the tile intrinsics: C tiles are 0-3, then the A and B tiles.
#define VLABENCH_A_TILE 4
#define VLABENCH_B_TILE 5

namespace vlabench_amx {
constexpr int TILE_ROWS = 16, TILE_ROW_BYTES = 64, C_TILES = 4, TILES_USED = 6;
constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;

struct TileConfig {
  uint8_t palette_id = 1, start_row = 0, reserved[14] = {0};
  uint16_t colsb[16] = {0};
  uint8_t rows[16] = {0};
};

inline bool amx_permitted() {
  static const bool permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  return permitted;
}

// Every tile the kernels use is 16 rows of 64 bytes: int8 A (16 x 64), int8 B in VNNI (16 x 4 x 16), bf16 A
// (16 x 32), bf16 B in pairs (16 x 2 x 16) and fp32 / int32 C (16 x 16).
inline void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < TILES_USED; ++t) {
    cfg.rows[t] = TILE_ROWS;
    cfg.colsb[t] = TILE_ROW_BYTES;
  }
  _tile_loadconfig(&cfg);
}
}  // namespace vlabench_amx

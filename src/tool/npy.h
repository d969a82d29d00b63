// Minimal writer of NumPy .npy files (format version 1.0), so anyone can check a run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fmha {

// dtype_descr: "<f2", "<f4", "<i4", ... Returns false (and sets *error) on I/O failure.
bool write_npy(const std::string& path, const std::string& dtype_descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes, std::string* error);

// The header bytes write_npy puts before the data (exposed for tests).
std::string npy_header(const std::string& dtype_descr, const std::vector<int64_t>& shape);

}  // namespace fmha

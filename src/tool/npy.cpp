#include "tool/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace fmha {

std::string npy_header(const std::string& dtype_descr, const std::vector<int64_t>& shape) {
    std::string dict = "{'descr': '" + dtype_descr + "', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
    dict += "), }";
    // Magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64.
    const size_t unpadded = 10 + dict.size() + 1;
    dict.append((64 - unpadded % 64) % 64, ' ');
    dict += '\n';
    std::string header("\x93NUMPY\x01\x00", 8);
    header += static_cast<char>(dict.size() & 0xff);
    header += static_cast<char>(dict.size() >> 8);
    return header + dict;
}

bool write_npy(const std::string& path, const std::string& dtype_descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes, std::string* error) {
    std::ofstream file(path, std::ios::binary);
    const std::string header = npy_header(dtype_descr, shape);
    file.write(header.data(), static_cast<std::streamsize>(header.size()));
    file.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!file) {
        *error = "cannot write " + path + ": " + std::strerror(errno);
        return false;
    }
    return true;
}

}  // namespace fmha

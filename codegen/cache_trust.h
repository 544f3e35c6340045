// INTERNAL to codegen/object_cache.cpp (and its tests and fuzz target): what the
// on-disk kernel cache trusts. An entry is machine code kiln maps and runs, so
// whoever can write the cache directory could make every kiln process of the
// user run their code. Hence:
//   - the directory is created 0700 and refused (the caller compiles without a
//     disk cache) when it, any directory holding it up to the user's home or /,
//     or any directory holding a symlink on its path, can be changed by someone
//     else: writable by group or others (the cache directory itself at all, the
//     others unless sticky), or owned by a user other than the caller or root;
//   - entries and the secret are opened with O_NOFOLLOW and must be regular
//     files owned by the user; they are created 0600 (temporary file + rename);
//   - every entry carries an HMAC-SHA-256 (OpenSSL) over its header, key and
//     object, keyed by a per-user secret of 32 random bytes kept 0600 in the
//     directory, so an entry made by anyone else (or by another cache) fails;
//   - every length is checked against a stated limit before anything of that
//     length is allocated.
// No LLVM here: unit tests and the fuzz target (fuzz/targets.cpp) call it directly.
//
// Entry layout (format 2), little-endian:
//   "KILNOBJ2" | u64 key length | u64 object length | key | object | HMAC-SHA-256 of all before it
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::codegen::cache {

// Limits of an entry, checked against the header's claims and the file's size
// before any buffer of that size exists. Kernels' objects are kilobytes; keys
// (versions, CPU features, the kernel's description) a few kilobytes.
constexpr uint64_t kMaxKeyBytes = uint64_t(1) << 20;     // 1 MiB
constexpr uint64_t kMaxObjectBytes = uint64_t(1) << 28;  // 256 MiB
constexpr uint64_t kHeaderBytes = 8 + 2 * sizeof(uint64_t);
constexpr uint64_t kMacBytes = 32;
constexpr uint64_t kMaxEntryBytes = kHeaderBytes + kMaxKeyBytes + kMaxObjectBytes + kMacBytes;
constexpr const char *kSecretName = "hmac-key";

using Secret = std::array<unsigned char, 32>;

// mkdir -p with mode 0700 for every directory it creates. "" or why it failed.
std::string make_private_dir(const std::string &dir);

// Why `dir` (an existing directory) must not hold the cache, or "" when it may.
std::string unsafe_dir_reason(const std::string &dir);

// The directory's secret, created on first use (32 bytes from RAND_bytes,
// 0600, published with link() so that concurrent processes agree on one).
// "" or why there is none (a secret that is not a private regular file of the
// user, of the wrong size, or cannot be made).
std::string load_or_create_secret(const std::string &dir, Secret &out);

// The entry for (key, object), MAC included.
std::string seal_entry(std::string_view key, std::string_view object, const Secret &secret);

// Why `data` is not an entry for `key` sealed with `secret`, or "" when it is
// (then *object views the object inside `data`).
std::string open_entry(std::string_view data, std::string_view key, const Secret &secret,
                       std::string_view *object);

// Reads the entry file at `path` (O_NOFOLLOW; a regular file owned by the user,
// at most kMaxEntryBytes). Missing: no file by that name.
enum class ReadResult { Ok, Missing, Refused };
ReadResult read_entry_file(const std::string &path, std::string &out, std::string &why);

// The checks of read_entry_file on an open descriptor, then its bytes.
std::string read_entry_fd(int fd, std::string &out);

// Writes `bytes` to a fresh 0600 temporary file beside `path` (O_EXCL,
// O_NOFOLLOW) and renames it over `path`. "" or why it failed.
std::string write_entry_file(const std::string &path, std::string_view bytes);

} // namespace kiln::codegen::cache

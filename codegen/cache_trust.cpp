#include "codegen/cache_trust.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace kiln::codegen::cache {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '2'};
constexpr int kMaxLinkDepth = 8;

std::string errno_text() { return std::strerror(errno); }

std::string in_quotes(const std::string &p) { return "'" + p + "'"; }

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(mode & 07777));
  return buf;
}

class Fd {
public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  int get() const { return fd_; }
  // close() reports write-back errors; the destructor cannot.
  bool close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

private:
  int fd_;
};

bool read_full(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}

bool write_full(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= size_t(put);
  }
  return true;
}

// A name beside `path` no other process picks.
std::string temp_name(const std::string &path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
         std::to_string(std::random_device{}());
}

bool owned_by_me_or_root(const struct stat &st) { return st.st_uid == ::geteuid() || st.st_uid == 0; }

std::string canonical(const std::string &p, std::string &why) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf)) return buf;
  why = "cannot resolve " + in_quotes(p) + ": " + errno_text();
  return {};
}

// The user's home, where the walk up from the cache directory stops (as ssh's
// checks do); "/" when there is none.
std::string home_dir() {
  const char *home = std::getenv("HOME");
  if (!home || !*home) {
    if (const passwd *pw = ::getpwuid(::geteuid())) home = pw->pw_dir;
  }
  if (!home || !*home) return "/";
  std::string ignored;
  std::string real = canonical(home, ignored);
  return real.empty() ? "/" : real;
}

// Why someone other than the user (or root) can change what the directory `p`
// (canonical) holds. Group/other write access is fine on an ancestor with the
// sticky bit (/tmp: others cannot rename or remove what the user put there),
// never on the cache directory itself (others could plant entries in it).
std::string unsafe_holder(const std::string &p, bool is_cache_dir) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return "cannot stat " + in_quotes(p) + ": " + errno_text();
  if (!S_ISDIR(st.st_mode)) return in_quotes(p) + " is not a directory";
  if (!owned_by_me_or_root(st))
    return in_quotes(p) + " is owned by uid " + std::to_string(st.st_uid) + " (neither the user nor root)";
  if (!(st.st_mode & (S_IWGRP | S_IWOTH))) return {};
  if (is_cache_dir) return in_quotes(p) + " is writable by group or others (mode " + octal(st.st_mode) + ")";
  if (st.st_mode & S_ISVTX) return {};
  return in_quotes(p) + " is writable by group or others without the sticky bit (mode " + octal(st.st_mode) + ")";
}

// unsafe_holder for the canonical directory `dir` and each parent up to home or /.
std::string unsafe_chain(std::string dir, bool is_cache_dir, const std::string &home) {
  for (bool first = is_cache_dir;; first = false) {
    if (std::string why = unsafe_holder(dir, first); !why.empty()) return why;
    if (dir == home || dir == "/") return {};
    dir = fs::path(dir).parent_path().string();
  }
}

// Every symlink met while resolving `path` (and the symlinks its targets pass
// through): owned by the user or root, in a directory only they can change.
std::string unsafe_links(const std::string &path, const std::string &home, int depth) {
  if (depth > kMaxLinkDepth) return "more than " + std::to_string(kMaxLinkDepth) + " levels of symbolic links";
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) return "cannot resolve " + in_quotes(path) + ": " + ec.message();
  fs::path prefix;
  for (const fs::path &part : abs) {
    if (part.empty()) continue;
    prefix /= part;
    struct stat st;
    if (::lstat(prefix.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) continue;
    if (!owned_by_me_or_root(st))
      return "the symlink " + in_quotes(prefix) + " is owned by uid " + std::to_string(st.st_uid) +
             " (neither the user nor root)";
    std::string why;
    std::string holder = canonical(prefix.parent_path().string(), why);
    if (holder.empty()) return why;
    if (why = unsafe_chain(holder, false, home); !why.empty()) return why + ", on the way to the symlink " + in_quotes(prefix);
    fs::path target = fs::read_symlink(prefix, ec);
    if (ec) return "cannot read the symlink " + in_quotes(prefix) + ": " + ec.message();
    if (target.is_relative()) target = prefix.parent_path() / target;
    if (why = unsafe_links(target.string(), home, depth + 1); !why.empty()) return why;
  }
  return {};
}

std::string mac_of(std::string_view data, const Secret &secret, unsigned char out[kMacBytes]) {
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), int(secret.size()), reinterpret_cast<const unsigned char *>(data.data()),
            data.size(), out, &len) ||
      len != kMacBytes)
    return "HMAC-SHA-256 failed";
  return {};
}

uint64_t read_u64(const char *p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void append_u64(std::string &out, uint64_t v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.append(b, sizeof v);
}

// Why the open file `fd` is not a private regular file of the user of `size` bytes.
std::string check_private_file(int fd, const std::string &what, uint64_t max_size, struct stat &st) {
  if (::fstat(fd, &st) != 0) return "cannot stat " + what + ": " + errno_text();
  if (!S_ISREG(st.st_mode)) return what + " is not a regular file";
  if (st.st_uid != ::geteuid())
    return what + " is owned by uid " + std::to_string(st.st_uid) + ", not by the user (uid " +
           std::to_string(::geteuid()) + ")";
  if (uint64_t(st.st_size) > max_size)
    return what + " has " + std::to_string(st.st_size) + " bytes, over the limit of " + std::to_string(max_size);
  return {};
}

enum class SecretRead { Ok, Missing, Bad };

SecretRead read_secret(const std::string &path, Secret &out, std::string &why) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return SecretRead::Missing;
    why = "cannot open the secret " + in_quotes(path) + ": " + (errno == ELOOP ? "a symbolic link" : errno_text());
    return SecretRead::Bad;
  }
  struct stat st;
  why = check_private_file(fd.get(), "the secret " + in_quotes(path), out.size(), st);
  if (why.empty() && (st.st_mode & 077))
    why = "the secret " + in_quotes(path) + " is accessible to group or others (mode " + octal(st.st_mode) + ")";
  if (why.empty() && uint64_t(st.st_size) != out.size())
    why = "the secret " + in_quotes(path) + " has " + std::to_string(st.st_size) + " bytes, not " +
          std::to_string(out.size());
  if (why.empty() && !read_full(fd.get(), reinterpret_cast<char *>(out.data()), out.size()))
    why = "cannot read the secret " + in_quotes(path);
  return why.empty() ? SecretRead::Ok : SecretRead::Bad;
}

// A fresh secret in a 0600 temporary file, then link()ed to its name: the
// name appears complete or not at all, and a process that loses the race
// (EEXIST) uses the winner's.
std::string create_secret(const std::string &path) {
  Secret fresh;
  if (RAND_bytes(fresh.data(), int(fresh.size())) != 1) return "RAND_bytes failed";
  std::string tmp = temp_name(path);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) return "cannot create " + in_quotes(tmp) + ": " + errno_text();
  bool ok = write_full(fd.get(), reinterpret_cast<const char *>(fresh.data()), fresh.size()) && fd.close();
  std::string why = ok ? "" : "cannot write " + in_quotes(tmp) + ": " + errno_text();
  if (ok && ::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST)
    why = "cannot create the secret " + in_quotes(path) + ": " + errno_text();
  ::unlink(tmp.c_str());
  return why;
}

} // namespace

std::string make_private_dir(const std::string &dir) {
  fs::path prefix;
  for (const fs::path &part : fs::path(dir)) {
    if (part.empty()) continue;
    prefix /= part;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot create " + in_quotes(prefix) + ": " + errno_text();
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return "cannot stat " + in_quotes(dir) + ": " + errno_text();
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  return {};
}

std::string unsafe_dir_reason(const std::string &dir) {
  std::string home = home_dir(), why;
  std::string real = canonical(dir, why);
  if (real.empty()) return why;
  if (why = unsafe_chain(real, /*is_cache_dir=*/true, home); !why.empty()) return why;
  return unsafe_links(dir, home, 0);
}

std::string load_or_create_secret(const std::string &dir, Secret &out) {
  std::string path = dir + "/" + kSecretName, why;
  SecretRead r = read_secret(path, out, why);
  if (r != SecretRead::Missing) return why;
  if (why = create_secret(path); !why.empty()) return why;
  r = read_secret(path, out, why); // ours, or the one a concurrent process linked first
  if (r == SecretRead::Missing) return "the secret " + in_quotes(path) + " vanished after it was created";
  return why;
}

std::string seal_entry(std::string_view key, std::string_view object, const Secret &secret) {
  std::string entry(kMagic, sizeof kMagic);
  append_u64(entry, key.size());
  append_u64(entry, object.size());
  entry.reserve(entry.size() + key.size() + object.size() + kMacBytes);
  entry += key;
  entry += object;
  unsigned char mac[kMacBytes];
  if (!mac_of(entry, secret, mac).empty()) return {}; // an empty entry never opens
  entry.append(reinterpret_cast<const char *>(mac), kMacBytes);
  return entry;
}

std::string open_entry(std::string_view data, std::string_view key, const Secret &secret,
                       std::string_view *object) {
  if (data.size() < kHeaderBytes + kMacBytes)
    return "truncated: " + std::to_string(data.size()) + " bytes, less than a header and a MAC";
  if (std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) return "bad magic (not a kiln cache entry of this format)";
  uint64_t key_len = read_u64(data.data() + 8), obj_len = read_u64(data.data() + 16);
  if (key_len > kMaxKeyBytes)
    return "key length " + std::to_string(key_len) + " over the limit of " + std::to_string(kMaxKeyBytes) + " bytes";
  if (obj_len > kMaxObjectBytes)
    return "object length " + std::to_string(obj_len) + " over the limit of " + std::to_string(kMaxObjectBytes) +
           " bytes";
  uint64_t want = kHeaderBytes + key_len + obj_len + kMacBytes; // no overflow: both lengths are bounded
  if (data.size() != want)
    return "size mismatch: the header claims " + std::to_string(want) + " bytes, the entry has " +
           std::to_string(data.size());
  if (data.substr(kHeaderBytes, key_len) != key) return "key mismatch (another kiln, LLVM, CPU or kernel)";
  unsigned char mac[kMacBytes];
  std::string_view sealed = data.substr(0, data.size() - kMacBytes);
  if (std::string why = mac_of(sealed, secret, mac); !why.empty()) return why;
  if (CRYPTO_memcmp(mac, data.data() + sealed.size(), kMacBytes) != 0)
    return "MAC mismatch: not sealed with this cache directory's secret";
  *object = data.substr(kHeaderBytes + key_len, obj_len);
  return {};
}

std::string read_entry_fd(int fd, std::string &out) {
  struct stat st;
  if (std::string why = check_private_file(fd, "the entry", kMaxEntryBytes, st); !why.empty()) return why;
  out.resize(size_t(st.st_size));
  if (!read_full(fd, out.data(), out.size())) return "the entry changed while it was read";
  return {};
}

ReadResult read_entry_file(const std::string &path, std::string &out, std::string &why) {
  // O_NONBLOCK: a FIFO planted under the entry's name must not block the open.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return ReadResult::Missing;
    why = errno == ELOOP ? "a symbolic link" : "cannot open: " + errno_text();
    return ReadResult::Refused;
  }
  why = read_entry_fd(fd.get(), out);
  return why.empty() ? ReadResult::Ok : ReadResult::Refused;
}

std::string write_entry_file(const std::string &path, std::string_view bytes) {
  std::string tmp = temp_name(path);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) return "cannot create " + in_quotes(tmp) + ": " + errno_text();
  std::string why;
  if (!write_full(fd.get(), bytes.data(), bytes.size()) || !fd.close())
    why = "cannot write " + in_quotes(tmp) + ": " + errno_text();
  else if (::rename(tmp.c_str(), path.c_str()) != 0)
    why = "cannot rename it to " + in_quotes(path) + ": " + errno_text();
  if (!why.empty()) ::unlink(tmp.c_str());
  return why;
}

} // namespace kiln::codegen::cache

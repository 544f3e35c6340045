#include "codegen/object_cache.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>
#include <unistd.h>

#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/xxhash.h>
#include <spdlog/spdlog.h>

#include "runtime/log.h"

namespace kiln::codegen {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '1'};
constexpr size_t kHeader = 8 + 3 * sizeof(uint64_t);
constexpr const char *kKeyMetadata = "kiln.cache_key";

std::string module_key(const llvm::Module &m) {
  llvm::NamedMDNode *md = m.getNamedMetadata(kKeyMetadata);
  if (!md || md->getNumOperands() == 0) return {};
  auto *node = md->getOperand(0);
  if (node->getNumOperands() == 0) return {};
  auto *s = llvm::dyn_cast<llvm::MDString>(node->getOperand(0));
  return s ? s->getString().str() : std::string();
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

// Why `data` is not a valid entry for `key`, or empty if it is.
std::string invalid_reason(llvm::StringRef data, const std::string &key) {
  if (data.size() < kHeader) return "truncated header";
  if (std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) return "bad magic";
  uint64_t key_len = read_u64(data.data() + 8);
  uint64_t obj_len = read_u64(data.data() + 16);
  uint64_t sum = read_u64(data.data() + 24);
  if (key_len != key.size() || data.size() != kHeader + key_len + obj_len) return "size mismatch";
  if (data.substr(kHeader, key_len) != key) return "key mismatch";
  llvm::StringRef obj = data.substr(kHeader + key_len);
  if (llvm::xxh3_64bits(obj) != sum) return "checksum mismatch";
  return {};
}

// The object parsed from an aligned copy (the file offset of the object is not aligned).
std::string unparsable_reason(const llvm::MemoryBuffer &obj) {
  auto parsed = llvm::object::ObjectFile::createObjectFile(obj.getMemBufferRef());
  if (!parsed) return "not an object file: " + llvm::toString(parsed.takeError());
  return {};
}

} // namespace

DiskObjectCache::DiskObjectCache(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_, ec)) {
    kiln::log()->warn("kiln: object cache directory '{}' is unusable ({}); continuing without it",
                     dir_, ec ? ec.message() : "not a directory");
    return;
  }
  enabled_ = true;
}

void DiskObjectCache::set_key(llvm::Module &m, const std::string &key) {
  llvm::LLVMContext &c = m.getContext();
  m.getOrInsertNamedMetadata(kKeyMetadata)->addOperand(llvm::MDNode::get(c, llvm::MDString::get(c, key)));
}

std::string DiskObjectCache::path_for(const std::string &key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kobj",
                static_cast<unsigned long long>(llvm::xxh3_64bits(llvm::StringRef(key))));
  return dir_ + "/" + name;
}

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::load(const std::string &key) {
  std::string path = path_for(key);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nullptr; // a plain miss: no warning
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!file) {
    ++rejects;
    kiln::log()->warn("kiln: ignoring unreadable object cache entry {}: {}", path, file.getError().message());
    return nullptr;
  }
  llvm::StringRef data = (*file)->getBuffer();
  std::string why = invalid_reason(data, key);
  if (!why.empty()) {
    ++rejects;
    kiln::log()->warn("kiln: ignoring corrupt object cache entry {} ({}); recompiling", path, why);
    return nullptr;
  }
  auto obj = llvm::MemoryBuffer::getMemBufferCopy(data.substr(kHeader + key.size()), path);
  why = unparsable_reason(*obj);
  if (!why.empty()) {
    ++rejects;
    kiln::log()->warn("kiln: ignoring corrupt object cache entry {} ({}); recompiling", path, why);
    return nullptr;
  }
  return obj;
}

bool DiskObjectCache::prefetch(const llvm::Module &m) {
  if (!enabled_) return false;
  std::string key = module_key(m);
  if (key.empty()) return false;
  auto obj = load(key);
  bool usable = obj != nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  pending_[key] = std::move(obj); // a miss is remembered too: getObject must not reload and re-warn
  return usable;
}

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::getObject(const llvm::Module *m) {
  if (!enabled_) return nullptr;
  std::string key = module_key(*m);
  if (key.empty()) return nullptr;
  std::unique_ptr<llvm::MemoryBuffer> obj;
  bool prefetched = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(key);
    if (it != pending_.end()) {
      prefetched = true;
      obj = std::move(it->second);
      pending_.erase(it);
    }
  }
  if (!prefetched) obj = load(key);
  if (obj) ++hits;
  return obj;
}

void DiskObjectCache::notifyObjectCompiled(const llvm::Module *m, llvm::MemoryBufferRef obj) {
  if (!enabled_) return;
  std::string key = module_key(*m);
  if (key.empty()) return;
  std::string entry(kMagic, sizeof kMagic);
  append_u64(entry, key.size());
  append_u64(entry, obj.getBufferSize());
  append_u64(entry, llvm::xxh3_64bits(obj.getBuffer()));
  entry += key;
  entry.append(obj.getBufferStart(), obj.getBufferSize());

  // Write beside the final name, then rename: readers see all or nothing.
  std::string path = path_for(key);
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(std::random_device{}());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(entry.data(), std::streamsize(entry.size()));
    out.close();
    if (out.fail()) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      std::lock_guard<std::mutex> lock(mu_);
      if (!std::exchange(warned_write_, true))
        kiln::log()->warn("kiln: cannot write object cache entry {}; continuing without storing", tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    kiln::log()->warn("kiln: cannot store object cache entry {}: {}", path, ec.message());
    return;
  }
  ++writes;
}

} // namespace kiln::codegen

#include "codegen/object_cache.h"

#include <cstdio>
#include <string_view>
#include <utility>

#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/xxhash.h>
#include <spdlog/spdlog.h>

#include "runtime/log.h"

namespace kiln::codegen {
namespace {

constexpr const char *kKeyMetadata = "kiln.cache_key";
// Part of every entry's file name: entries of another format get other names
// (and are never opened) instead of one warning each.
constexpr const char *kFormat = "kiln-cache-format-2;";

std::string module_key(const llvm::Module &m) {
  llvm::NamedMDNode *md = m.getNamedMetadata(kKeyMetadata);
  if (!md || md->getNumOperands() == 0) return {};
  auto *node = md->getOperand(0);
  if (node->getNumOperands() == 0) return {};
  auto *s = llvm::dyn_cast<llvm::MDString>(node->getOperand(0));
  return s ? s->getString().str() : std::string();
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
  if (std::string why = cache::make_private_dir(dir_); !why.empty()) {
    kiln::log()->warn("kiln: object cache directory '{}' is unusable ({}); continuing without it", dir_, why);
    return;
  }
  // Entries are code this process will run: a directory someone else can
  // change is not used at all (one warning; the Jit compiles without it).
  if (std::string why = cache::unsafe_dir_reason(dir_); !why.empty()) {
    kiln::log()->warn("kiln: refusing object cache directory '{}': {}; compiling without a disk cache", dir_, why);
    return;
  }
  if (std::string why = cache::load_or_create_secret(dir_, secret_); !why.empty()) {
    kiln::log()->warn("kiln: refusing object cache directory '{}': {}; compiling without a disk cache", dir_, why);
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
                static_cast<unsigned long long>(llvm::xxh3_64bits(llvm::StringRef(kFormat + key))));
  return dir_ + "/" + name;
}

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::load(const std::string &key) {
  std::string path = path_for(key), data, why;
  cache::ReadResult read = cache::read_entry_file(path, data, why);
  if (read == cache::ReadResult::Missing) return nullptr; // a plain miss: no warning
  std::string_view object;
  if (read == cache::ReadResult::Ok) why = cache::open_entry(data, key, secret_, &object);
  if (!why.empty()) {
    ++rejects;
    kiln::log()->warn("kiln: ignoring corrupt object cache entry {} ({}); recompiling", path, why);
    return nullptr;
  }
  auto obj = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), path);
  why = unparsable_reason(*obj);
  if (!why.empty()) {
    ++rejects;
    kiln::log()->warn("kiln: ignoring corrupt object cache entry {} ({}); recompiling", path, why);
    return nullptr;
  }
  return obj;
}

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::lookup(const std::string &key) {
  if (!enabled_) return nullptr;
  auto obj = load(key);
  if (obj) {
    ++hits;
    return obj;
  }
  std::lock_guard<std::mutex> lock(mu_);
  pending_[key] = nullptr;
  return nullptr;
}

bool DiskObjectCache::prefetch(const llvm::Module &m) {
  if (!enabled_) return false;
  std::string key = module_key(m);
  if (key.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = pending_.find(key); it != pending_.end() && !it->second) return false; // lookup() missed it
  }
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
  if (key.size() > cache::kMaxKeyBytes || obj.getBufferSize() > cache::kMaxObjectBytes) return; // never readable
  std::string entry = cache::seal_entry(key, std::string_view(obj.getBufferStart(), obj.getBufferSize()), secret_);
  if (entry.empty()) return; // HMAC failed: nothing a reader would accept
  std::string path = path_for(key);
  // Written beside the final name, then renamed: readers see all or nothing.
  if (std::string why = cache::write_entry_file(path, entry); !why.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!std::exchange(warned_write_, true))
      kiln::log()->warn("kiln: cannot write object cache entry {} ({}); continuing without storing", path, why);
    return;
  }
  ++writes;
}

} // namespace kiln::codegen

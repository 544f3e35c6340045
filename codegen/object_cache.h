// INTERNAL to codegen/jit.cpp (includes LLVM): the on-disk object cache.
//
// One file per kernel, <dir>/<xxh3 of format and key>.kobj, in the layout of
// codegen/cache_trust.h (header, key, object, HMAC-SHA-256 under the
// directory's secret). The key (LLVM version, CPU, features, codegen version,
// kernel bytes) is stored in full and compared on load, so a file-name
// collision can never load the wrong kernel. Entries are written to a 0600
// temporary file and renamed into place, so concurrent processes never see
// half-written files. Anything that does not validate (short, over a limit,
// wrong magic/key/MAC, a symlink, not the user's, not an object file) is
// ignored with a warning and the kernel is recompiled (and the entry rewritten).
//
// The directory is checked once, when the cache is made (codegen/cache_trust.h):
// one that others could change is refused with one warning, and the Jit then
// compiles without a disk cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <llvm/ExecutionEngine/ObjectCache.h>

#include "codegen/cache_trust.h"

namespace llvm {
class Module;
}

namespace kiln::codegen {

class DiskObjectCache final : public llvm::ObjectCache {
public:
  explicit DiskObjectCache(std::string dir);

  bool enabled() const { return enabled_; }

  // The full cache key travels with the module as named metadata.
  static void set_key(llvm::Module &m, const std::string &key);

  // Loads and validates the entry for `m`; when usable it is kept for the next
  // getObject(m) and true is returned (the caller then skips the O3 pipeline).
  bool prefetch(const llvm::Module &m);
  // The usable object stored under `key`, or nullptr (a miss is remembered, so a
  // module built after it is not looked up, or warned about, again).
  std::unique_ptr<llvm::MemoryBuffer> lookup(const std::string &key);

  void notifyObjectCompiled(const llvm::Module *m, llvm::MemoryBufferRef obj) override;
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module *m) override;

  std::atomic<int64_t> hits{0}, writes{0}, rejects{0};

private:
  std::string path_for(const std::string &key) const;
  std::unique_ptr<llvm::MemoryBuffer> load(const std::string &key);

  std::string dir_;
  cache::Secret secret_{};
  bool enabled_ = false;
  bool warned_write_ = false;
  std::mutex mu_;
  // key -> prefetched object (nullptr: looked up, not usable)
  std::map<std::string, std::unique_ptr<llvm::MemoryBuffer>> pending_;
};

} // namespace kiln::codegen

// The disk kernel cache as a trust boundary (codegen/cache_trust.h): its
// entries are code the Jit runs, so a directory someone else can change is
// refused (one warning, no entry read or written, compiled results still
// right), entries are private files of the user, and an entry sealed with
// another secret is ignored and recompiled. Lengths in an entry are checked
// against limits before anything is allocated.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"
#include "codegen/cache_trust.h"
#include "codegen/jit.h"
#include "codegen/kernel.h"

using namespace kiln;
using kiln::testing::capture_stderr;
namespace fs = std::filesystem;
namespace cache = kiln::codegen::cache;

namespace {

fs::path fresh_dir(const std::string &name) {
  fs::path d = fs::temp_directory_path() / ("kiln-trust-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::permissions(d, fs::perms(0755));
  return d;
}


size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

codegen::KernelDesc tiny_kernel(double scale = 1.0) {
  codegen::KernelBuilder k({64});
  codegen::Expr x = k.input(kFloat32);
  k.output((x + scale) * x);
  return k.build();
}

// The kernel against a naive loop.
void expect_tiny_kernel_works(const codegen::CompiledKernel &kernel, float scale = 1.f) {
  std::vector<float> x(64), y(64, -1.f);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i) * 0.5f - 3.f;
  void *bufs[] = {x.data(), y.data()};
  kernel.run(bufs);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], (x[size_t(i)] + scale) * x[size_t(i)]) << i;
}

std::vector<fs::path> entries(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kobj") out.push_back(e.path());
  return out;
}

std::set<std::string> names_in(const fs::path &dir) {
  std::set<std::string> out;
  for (const auto &e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string bytes_of(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path &p, const std::string &bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

mode_t mode_of(const fs::path &p) {
  struct stat st;
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

void fill(const fs::path &cache_dir) {
  codegen::JitOptions opts;
  opts.cache_dir = cache_dir.string();
  codegen::Jit jit(opts);
  jit.compile(tiny_kernel());
  ASSERT_EQ(jit.stats().disk_writes, 1) << cache_dir;
}

// A Jit over `cache_dir` must refuse it: one warning, no entry read (a valid
// one may be there) or written, the kernel compiled and right.
void expect_refused(const fs::path &cache_dir, const std::string &reason) {
  std::set<std::string> before = names_in(cache_dir);
  codegen::JitOptions opts;
  opts.cache_dir = cache_dir.string();
  std::unique_ptr<codegen::Jit> jit;
  std::shared_ptr<const codegen::CompiledKernel> k;
  std::string err = capture_stderr([&] {
    jit = std::make_unique<codegen::Jit>(opts);
    k = jit->compile(tiny_kernel());
    k = jit->compile(tiny_kernel(2.0)); // a second kernel: still no second warning
  });
  EXPECT_EQ(count(err, "refusing object cache directory"), 1u) << cache_dir << ": " << err;
  EXPECT_EQ(count(err, "[warning]"), 1u) << err;
  EXPECT_NE(err.find(reason), std::string::npos) << "expected '" << reason << "' in: " << err;
  codegen::JitStats s = jit->stats();
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.disk_hits, 0);
  EXPECT_EQ(s.disk_rejects, 0);
  EXPECT_EQ(s.disk_writes, 0);
  expect_tiny_kernel_works(*k, 2.f);
  expect_tiny_kernel_works(*jit->compile(tiny_kernel()));
  EXPECT_EQ(names_in(cache_dir), before) << "something was written to " << cache_dir;
}

// A Jit over `cache_dir` uses it without a warning.
void expect_accepted(const fs::path &cache_dir) {
  codegen::JitOptions opts;
  opts.cache_dir = cache_dir.string();
  codegen::Jit jit(opts);
  std::string err = capture_stderr([&] { expect_tiny_kernel_works(*jit.compile(tiny_kernel())); });
  EXPECT_EQ(err, "") << cache_dir;
  EXPECT_EQ(jit.stats().disk_hits + jit.stats().disk_writes, 1) << cache_dir;
}

} // namespace

TEST(CacheTrust, CreatesAPrivateDirectoryPrivateEntriesAndASecret) {
  fs::path base = fresh_dir("create");
  fs::path dir = base / "new" / "kiln";
  expect_accepted(dir);
  EXPECT_EQ(mode_of(base / "new"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  auto files = entries(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(mode_of(files[0]), 0600u);
  fs::path secret = dir / cache::kSecretName;
  EXPECT_EQ(mode_of(secret), 0600u);
  EXPECT_EQ(fs::file_size(secret), 32u);
  std::string key = bytes_of(secret);
  expect_accepted(dir); // the next Jit hits the entry with the same secret
  EXPECT_EQ(bytes_of(secret), key);
  // Another directory, another secret.
  expect_accepted(base / "other");
  EXPECT_NE(bytes_of(base / "other" / cache::kSecretName), key);
  fs::remove_all(base);
}

TEST(CacheTrust, GroupOrWorldWritableDirectoryIsRefused) {
  for (mode_t mode : {0770, 0707, 0777, 01777, 01770}) { // sticky or not: the cache dir itself is never shared
    fs::path dir = fresh_dir("writable");
    fill(dir);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    expect_refused(dir, "writable by group or others");
    fs::remove_all(dir);
  }
}

TEST(CacheTrust, DirectoryUnderAParentWritableByOthersIsRefused) {
  fs::path base = fresh_dir("parent");
  fs::path open = base / "open", dir = open / "a" / "cache";
  fs::create_directories(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  fill(dir);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0); // anyone could rename "a" away and put their own in its place
  expect_refused(dir, "without the sticky bit");
  ASSERT_EQ(::chmod(open.c_str(), 0775), 0);
  expect_refused(dir, "without the sticky bit");
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0); // like /tmp: others cannot move what is not theirs
  expect_accepted(dir);
  fs::remove_all(base);
}

TEST(CacheTrust, SymlinkIntoOrInsideAPlaceOthersCanWriteIsRefused) {
  fs::path base = fresh_dir("symlink");
  fs::path open = base / "open", safe = base / "safe";
  fs::create_directories(open / "cache");
  fs::create_directories(safe / "cache");
  ASSERT_EQ(::chmod((open / "cache").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((safe / "cache").c_str(), 0700), 0);
  fill(open / "cache");
  fill(safe / "cache");
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  // A private-looking path whose symlink leads into the open directory.
  fs::create_directory_symlink(open / "cache", safe / "into-open");
  expect_refused(safe / "into-open", "without the sticky bit");
  // A symlink to a safe place, kept where anyone could replace it.
  fs::create_directory_symlink(safe / "cache", open / "to-safe");
  expect_refused(open / "to-safe", "on the way to the symlink");
  // Two hops: safe/hop -> open/to-safe -> safe/cache.
  fs::create_directory_symlink(open / "to-safe", safe / "hop");
  expect_refused(safe / "hop", "on the way to the symlink");
  // A symlink kept in a safe place, to a safe place: fine.
  fs::create_directory_symlink(safe / "cache", safe / "link");
  expect_accepted(safe / "link");
  fs::remove_all(base);
}

TEST(CacheTrust, DirectoryOrEntryOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory to another user (uid 65534)";
  fs::path base = fresh_dir("owner");
  fs::path dir = base / "cache";
  fs::create_directories(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  fill(dir);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  expect_refused(dir, "owned by uid 65534");
  ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(base.c_str(), 65534, 65534), 0); // a parent owned by someone else
  expect_refused(dir, "owned by uid 65534");
  ASSERT_EQ(::chown(base.c_str(), 0, 0), 0);
  // The directory is fine; one entry in it belongs to someone else.
  auto files = entries(dir);
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(::chown(files[0].c_str(), 65534, 65534), 0);
  codegen::JitOptions opts;
  opts.cache_dir = dir.string();
  codegen::Jit jit(opts);
  std::string err = capture_stderr([&] { expect_tiny_kernel_works(*jit.compile(tiny_kernel())); });
  EXPECT_NE(err.find("owned by uid 65534"), std::string::npos) << err;
  EXPECT_EQ(jit.stats().disk_hits, 0);
  EXPECT_EQ(jit.stats().disk_rejects, 1);
  EXPECT_EQ(jit.stats().compiles, 1);
  fs::remove_all(base);
}

TEST(CacheTrust, EntryThatIsASymlinkIsNotFollowed) {
  fs::path base = fresh_dir("entrylink");
  fs::path dir = base / "cache", elsewhere = base / "elsewhere";
  fill(dir);
  auto files = entries(dir);
  ASSERT_EQ(files.size(), 1u);
  fs::create_directories(elsewhere);
  fs::rename(files[0], elsewhere / "entry"); // a valid entry, reached through a symlink
  fs::create_symlink(elsewhere / "entry", files[0]);
  codegen::JitOptions opts;
  opts.cache_dir = dir.string();
  codegen::Jit jit(opts);
  std::string err = capture_stderr([&] { expect_tiny_kernel_works(*jit.compile(tiny_kernel())); });
  EXPECT_NE(err.find("symbolic link"), std::string::npos) << err;
  EXPECT_EQ(jit.stats().disk_hits, 0);
  EXPECT_EQ(jit.stats().disk_rejects, 1);
  fs::remove_all(base);
}

// The object of another kernel, sealed for this kernel's key with the secret
// of another cache directory (a valid entry there): ignored, recompiled, and
// the result is this kernel's.
TEST(CacheTrust, EntrySealedWithAnotherSecretIsIgnored) {
  fs::path base = fresh_dir("secret");
  fs::path mine = base / "mine", theirs = base / "theirs";
  fill(mine);
  { // theirs holds the entry of another kernel, (x + 2) * x
    codegen::JitOptions opts;
    opts.cache_dir = theirs.string();
    codegen::Jit(opts).compile(tiny_kernel(2.0));
  }
  cache::Secret their_secret;
  ASSERT_EQ(cache::load_or_create_secret(theirs.string(), their_secret), "");
  std::string their_entry = bytes_of(entries(theirs).at(0));
  uint64_t key_len = 0, obj_len = 0;
  std::memcpy(&key_len, their_entry.data() + 8, 8);
  std::memcpy(&obj_len, their_entry.data() + 16, 8);
  std::string their_object = their_entry.substr(cache::kHeaderBytes + key_len, obj_len);

  fs::path my_entry = entries(mine).at(0);
  std::string mine_bytes = bytes_of(my_entry);
  uint64_t my_key_len = 0;
  std::memcpy(&my_key_len, mine_bytes.data() + 8, 8);
  std::string my_key = mine_bytes.substr(cache::kHeaderBytes, my_key_len);
  write_bytes(my_entry, cache::seal_entry(my_key, their_object, their_secret));
  fs::permissions(my_entry, fs::perms(0600));

  codegen::JitOptions opts;
  opts.cache_dir = mine.string();
  {
    codegen::Jit jit(opts);
    std::shared_ptr<const codegen::CompiledKernel> k;
    std::string err = capture_stderr([&] { k = jit.compile(tiny_kernel()); });
    EXPECT_NE(err.find("MAC mismatch"), std::string::npos) << err;
    EXPECT_NE(err.find("recompiling"), std::string::npos) << err;
    EXPECT_EQ(jit.stats().disk_hits, 0);
    EXPECT_EQ(jit.stats().disk_rejects, 1);
    EXPECT_EQ(jit.stats().compiles, 1);
    EXPECT_EQ(jit.stats().disk_writes, 1); // the entry is rewritten with this cache's secret
    expect_tiny_kernel_works(*k);          // (x + 1) * x, not their (x + 2) * x
  }
  codegen::Jit healed(opts);
  expect_tiny_kernel_works(*healed.compile(tiny_kernel()));
  EXPECT_EQ(healed.stats().disk_hits, 1);
  fs::remove_all(base);
}

TEST(CacheTrust, SecretThatIsNotPrivateIsRefused) {
  fs::path dir = fresh_dir("badsecret");
  fill(dir);
  fs::path secret = dir / cache::kSecretName;
  ASSERT_EQ(::chmod(secret.c_str(), 0640), 0); // others could read it and seal entries
  expect_refused(dir, "accessible to group or others");
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  fs::resize_file(secret, 31);
  expect_refused(dir, "not 32");
  fs::remove(secret);
  fs::create_symlink("/dev/null", secret);
  expect_refused(dir, "symbolic link");
  fs::remove_all(dir);
}

// Lengths an entry claims are checked against the limits before anything of
// that size is allocated; a file over the limit is not read at all.
TEST(CacheTrust, EntryLimitsAreCheckedBeforeAllocating) {
  cache::Secret secret{};
  std::string entry = cache::seal_entry("key", "object", secret);
  std::string_view object;
  ASSERT_EQ(cache::open_entry(entry, "key", secret, &object), "");
  EXPECT_EQ(object, "object");
  auto claim = [&](size_t offset, uint64_t v) {
    std::string e = entry;
    std::memcpy(e.data() + offset, &v, 8);
    return cache::open_entry(e, "key", secret, &object);
  };
  EXPECT_NE(claim(8, uint64_t(1) << 62).find("key length 4611686018427387904 over the limit of 1048576"),
            std::string::npos);
  EXPECT_NE(claim(16, ~uint64_t(0)).find("over the limit of 268435456"), std::string::npos);
  EXPECT_NE(claim(16, 7).find("size mismatch"), std::string::npos);
  cache::Secret other{};
  other[0] = 1;
  EXPECT_NE(cache::open_entry(entry, "key", other, &object).find("MAC mismatch"), std::string::npos);

  // A sparse file one byte over the limit: refused from its size alone.
  fs::path dir = fresh_dir("limits");
  fs::path big = dir / "big.kobj";
  write_bytes(big, entry);
  fs::resize_file(big, cache::kMaxEntryBytes + 1);
  std::string data, why;
  EXPECT_EQ(cache::read_entry_file(big.string(), data, why), cache::ReadResult::Refused);
  EXPECT_NE(why.find("over the limit of " + std::to_string(cache::kMaxEntryBytes)), std::string::npos) << why;
  EXPECT_TRUE(data.empty());
  EXPECT_EQ(cache::read_entry_file((dir / "none.kobj").string(), data, why), cache::ReadResult::Missing);
  fs::remove_all(dir);
}

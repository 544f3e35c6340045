// save_safetensors / load_safetensors. The reference is the file format itself:
// each file here is built byte by byte by the test (u64 little-endian header
// length, JSON header text, little-endian values written from their IEEE bit
// patterns), and files kiln writes are taken apart the same way.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <kiln/kiln.h>

#include "unit/expect_error.h"

namespace {

using namespace kiln;
using kiln::testing::expect_error;
namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-safetensors-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string &name) const { return (dir_ / name).string(); }

  // Writes `bytes` verbatim and returns the file's path.
  std::string write(const std::string &name, const std::string &bytes) const {
    std::ofstream os(path(name), std::ios::binary);
    os.write(bytes.data(), std::streamsize(bytes.size()));
    return path(name);
  }

  fs::path dir_;
};

// The 8 little-endian bytes of n, least significant first.
std::string u64le(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += char((n >> (8 * i)) & 0xff);
  return s;
}

// A file: header length, header, data.
std::string file_of(const std::string &header, const std::string &data = "") {
  return u64le(header.size()) + header + data;
}

std::string bytes_of(std::initializer_list<int> bs) {
  std::string s;
  for (int b : bs) s += char(b);
  return s;
}

std::string read_all(const std::string &p) {
  std::ifstream is(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(is), {});
}

// 1.0f = 0x3f800000, -2.0f = 0xc0000000, 0.5f = 0x3f000000 (little-endian byte order below).
const std::string kF32_1_m2_05 = bytes_of({0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f});

TEST_F(Safetensors, LoadsAHandBuiltFileOfEveryDtype) {
  // Offsets tile the data section in the header's own (non-sorted) order:
  // i64 [0,16), f64 [16,24), f32 [24,36), i32 [36,44), bool [44,47).
  std::string header = R"({"__metadata__": {"format": "pt"},)"
                       R"( "b": {"dtype": "BOOL", "shape": [3], "data_offsets": [44, 47]},)"
                       R"( "f": {"dtype": "F32", "shape": [3, 1], "data_offsets": [24, 36]},)"
                       R"( "d": {"dtype": "F64", "shape": [], "data_offsets": [16, 24]},)"
                       R"( "i": {"dtype": "I32", "shape": [2], "data_offsets": [36, 44]},)"
                       R"( "l": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})";
  std::string data = bytes_of({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // -1
                               0, 0, 0, 0, 0, 0, 0, 0x40}) +                    // 2^62
                     bytes_of({0, 0, 0, 0, 0, 0, 0x0c, 0x40}) +                  // 3.5
                     kF32_1_m2_05 +                                               // 1, -2, 0.5
                     bytes_of({7, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}) +             // 7, -2
                     bytes_of({1, 0, 1});
  auto t = load_safetensors(write("all.safetensors", file_of(header, data)));
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t["l"].dtype(), kInt64);
  EXPECT_EQ(t["l"].data_ptr<int64_t>()[0], -1);
  EXPECT_EQ(t["l"].data_ptr<int64_t>()[1], int64_t(1) << 62);
  EXPECT_EQ(t["d"].dim(), 0);
  EXPECT_EQ(t["d"].item<double>(), 3.5);
  EXPECT_EQ(t["f"].sizes(), IntArrayRef({3, 1}));
  const float *f = t["f"].data_ptr<float>();
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 0.5f);
  EXPECT_EQ(t["i"].data_ptr<int32_t>()[0], 7);
  EXPECT_EQ(t["i"].data_ptr<int32_t>()[1], -2);
  EXPECT_EQ(t["b"].dtype(), kBool);
  EXPECT_TRUE(t["b"].data_ptr<bool>()[0]);
  EXPECT_FALSE(t["b"].data_ptr<bool>()[1]);
  EXPECT_TRUE(t["b"].data_ptr<bool>()[2]);
  auto meta = load_safetensors_metadata(path("all.safetensors"));
  ASSERT_EQ(meta.size(), 1u);
  EXPECT_EQ(meta["format"], "pt");
}

TEST_F(Safetensors, EmptyAndZeroSizedTensorsAndPaddedHeader) {
  // The reference writer pads the header with spaces; zero-sized tensors take no bytes.
  std::string header = R"({"z": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},)"
                       R"( "x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}     )";
  auto t = load_safetensors(write("z.safetensors", file_of(header, kF32_1_m2_05)));
  EXPECT_EQ(t["z"].sizes(), IntArrayRef({0, 4}));
  EXPECT_EQ(t["x"].data_ptr<float>()[1], -2.0f);
  EXPECT_TRUE(load_safetensors(write("e.safetensors", file_of("{}"))).empty());
}

// What save_safetensors wrote, taken apart by hand: header length, header text
// and the data bytes.
TEST_F(Safetensors, SavedFileHasTheFormatsBytes) {
  float v[3];
  std::memcpy(v, kF32_1_m2_05.data(), sizeof v);
  Tensor x = from_blob(v, {3}, kFloat32).clone();
  save_safetensors(path("s.safetensors"), {{"x", x}}, {{"k", "v"}});
  std::string bytes = read_all(path("s.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(bytes[size_t(i)]);
  ASSERT_EQ(bytes.size(), 8 + n + 12);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data section starts 8-byte aligned";
  std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("x":{"data_offsets":[0,12],"dtype":"F32","shape":[3]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("__metadata__":{"k":"v"})"), std::string::npos) << header;
  EXPECT_EQ(bytes.substr(8 + n), kF32_1_m2_05);
}

TEST_F(Safetensors, RoundTripsEveryDtypeNonContiguousAndMetadata) {
  manual_seed(3);
  Tensor f = randn({4, 6});
  Tensor ft = f.t();                            // non-contiguous: saved by its values
  Tensor d = randn({5}, kFloat64).slice(0, 0, 5, 2); // strided view
  Tensor i = randint(-100, 100, {2, 3}, kInt32);
  Tensor l = randint(-100, 100, {7}, kInt64);
  Tensor b = randint(0, 2, {3, 2}, kInt64).to(kBool);
  Tensor e = zeros({0, 3});
  std::map<std::string, Tensor> in = {{"ft", ft}, {"d", d}, {"i", i}, {"l", l}, {"b", b}, {"e", e}};
  save_safetensors(path("rt.safetensors"), in, {{"author", "kiln"}, {"n", "6"}});
  auto out = load_safetensors(path("rt.safetensors"));
  ASSERT_EQ(out.size(), in.size());
  for (const auto &[name, t] : in) {
    const Tensor &got = out.at(name);
    EXPECT_EQ(got.dtype(), t.dtype()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(got.is_contiguous()) << name;
    Tensor want = t.contiguous().to(kFloat64), have = got.to(kFloat64);
    for (int64_t k = 0; k < t.numel(); ++k)
      EXPECT_EQ(have.data_ptr<double>()[k], want.data_ptr<double>()[k]) << name << "[" << k << "]";
  }
  auto meta = load_safetensors_metadata(path("rt.safetensors"));
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"author", "kiln"}, {"n", "6"}}));
}

TEST_F(Safetensors, BadFilesNameTheFileAndTheFault) {
  const std::string ok_x = R"("x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]})";
  struct Case {
    const char *name;
    std::string bytes;
    std::vector<std::string> want;
  };
  std::vector<Case> cases = {
      {"short", bytes_of({5, 0, 0}), {"truncated", "3 bytes"}},
      {"empty", "", {"truncated", "0 bytes"}},
      {"longheader", u64le(1000) + R"({"x": 1})", {"header length 1000", "larger than the file"}},
      {"cap", u64le(200'000'000) + std::string(16, ' '), {"header length 200000000", "cap", "100000000"}},
      {"json", file_of(R"({"x": {"dtype": "F32",)"), {"invalid JSON"}},
      {"notobject", file_of("[1, 2]"), {"not an object"}},
      {"range", file_of(R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", kF32_1_m2_05),
       {"'x'", "[0, 16)", "out of range", "12 bytes"}},
      {"backwards", file_of(R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", kF32_1_m2_05),
       {"'x'", "out of range"}},
      {"size", file_of(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}})", kF32_1_m2_05),
       {"'x'", "12 bytes", "F32 [2]", "takes 8"}},
      {"i64size", file_of(R"({"x": {"dtype": "I64", "shape": [2], "data_offsets": [0, 12]}})", kF32_1_m2_05),
       {"'x'", "I64 [2]", "takes 16"}},
      {"dtype", file_of(R"({"x": {"dtype": "Q7", "shape": [3], "data_offsets": [0, 12]}})", kF32_1_m2_05),
       {"'x'", "unknown dtype 'Q7'"}},
      {"u16", file_of(R"({"x": {"dtype": "U16", "shape": [6], "data_offsets": [0, 12]}})", kF32_1_m2_05),
       {"'x'", "U16", "not support"}},
      {"overlap",
       file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
               R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
               kF32_1_m2_05),
       {"'a' [0, 8)", "'b' [4, 12)", "overlap"}},
      {"gap",
       file_of(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
               R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
               kF32_1_m2_05),
       {"bytes [4, 8)", "belong to no tensor"}},
      {"trailing", file_of("{" + ok_x + "}", kF32_1_m2_05 + "xyzw"), {"bytes [12, 16)", "belong to no tensor"}},
      {"shape", file_of(R"({"x": {"dtype": "F32", "shape": [-3], "data_offsets": [0, 12]}})", kF32_1_m2_05),
       {"'x'", "shape entry -3"}},
      {"nooffsets", file_of(R"({"x": {"dtype": "F32", "shape": [3]}})", kF32_1_m2_05),
       {"'x'", "data_offsets"}},
      {"meta", file_of(R"({"__metadata__": {"k": 1}, )" + ok_x + "}", kF32_1_m2_05),
       {"__metadata__", "'k'", "not a string"}},
      {"overflow",
       file_of(R"({"x": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 12]}})",
               kF32_1_m2_05),
       {"'x'", "[4294967296,4294967296]", "more than the limit of 2^50 elements"}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    std::string p = write(std::string(c.name) + ".safetensors", c.bytes);
    std::vector<std::string> want = c.want;
    want.push_back(p);
    expect_error([&] { load_safetensors(p); }, want);
  }
  expect_error([&] { load_safetensors(path("missing.safetensors")); }, {path("missing.safetensors"), "cannot open"});
}

// A weight file is untrusted input: what its header claims is checked against
// the limits (header size, nesting depth, rank, elements, bytes in the file)
// before anything of that size is allocated or recursed into.
TEST_F(Safetensors, ClaimsPastTheLimitsAreRefusedBeforeAllocating) {
  const std::string tib4 = "4398046511104"; // 2^40 F32 elements
  std::string deep = "{\"x\": " + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  std::string rank = R"({"x": {"dtype": "F32", "shape": [)";
  for (int i = 0; i < 100; ++i) rank += i ? ", 1" : "1";
  rank += R"(], "data_offsets": [0, 4]}})";
  struct Case {
    const char *name;
    std::string bytes;
    std::vector<std::string> want;
  };
  std::vector<Case> cases = {
      {"2^40-elements",
       file_of(R"({"x": {"dtype": "F32", "shape": [1099511627776], "data_offsets": [0, )" + tib4 + "]}}",
               kF32_1_m2_05),
       {"'x'", tib4, "out of range", "12 bytes"}},
      {"2^40-elements-small-range",
       file_of(R"({"x": {"dtype": "F32", "shape": [1048576, 1048576], "data_offsets": [0, 12]}})", kF32_1_m2_05),
       {"'x'", "takes " + tib4}},
      {"zero-sized-but-huge", // 0 bytes, but strides of 2^80 elements
       file_of(R"({"x": {"dtype": "F32", "shape": [0, 1099511627776, 1099511627776], "data_offsets": [0, 0]}})"),
       {"'x'", "more than the limit of 2^50 elements"}},
      {"deep", file_of(deep), {"nests deeper than the limit of 16 levels"}},
      {"rank", file_of(rank, bytes_of({0, 0, 0, 0})), {"'x'", "100 dims"}},
      {"header-cap", u64le(100'000'001) + std::string(64, ' '), {"header length 100000001", "100000000"}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    std::string p = write(std::string(c.name) + ".safetensors", c.bytes);
    std::vector<std::string> want = c.want;
    want.push_back(p);
    expect_error([&] { load_safetensors(p); }, want);
    expect_error([&] { load_safetensors_metadata(p); }, want);
  }
}

TEST_F(Safetensors, SaveRejectsWhatItCannotWrite) {
  expect_error([&] { save_safetensors(path("u.safetensors"), {{"x", Tensor()}}); }, {"'x'", "undefined"});
  expect_error([&] { save_safetensors(path("m.safetensors"), {{"__metadata__", zeros({1})}}); },
               {"__metadata__", "reserved"});
  std::string bad = (dir_ / "no-such-dir" / "w.safetensors").string();
  expect_error([&] { save_safetensors(bad, {{"x", zeros({1})}}); }, {bad, "cannot open for writing"});
  expect_error([&] { save_safetensors(path("utf.safetensors"), {{"x", zeros({1})}}, {{"k", "\xff"}}); },
               {"UTF-8"});
}

} // namespace

// kiln_probe_fresh_memory: what this machine charges for memory a process has
// not touched before, without kiln. A warm compile packs the weights into fresh
// memory (W5: 28 MB), so its time includes this cost.
//
// On a virtual machine whose guest hands free memory back to the hypervisor
// (Linux free page reporting: `page_reporting.page_reporting_order` on the
// kernel command line), memory left free for ~2 s is reclaimed by the host, and
// the next first touch faults it back in. The probe populates the same amount
// twice: right after freeing it (memory the host still backs), and after an
// idle pause (memory it may have taken back).
//
// usage: kiln_probe_fresh_memory [MB (default 28)] [idle ms (default 3000)] [rounds (default 3)]
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>

namespace {

// ms to fault in `mb` MiB of fresh anonymous memory in one madvise call, as
// kiln's alloc_packing does; the mapping is unmapped again before returning.
double populate_ms(size_t mb, bool huge) {
  const size_t n = mb << 20;
  void *p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  if (huge) ::madvise(p, n, MADV_HUGEPAGE);
  const auto t0 = std::chrono::steady_clock::now();
#ifdef MADV_POPULATE_WRITE
  if (::madvise(p, n, MADV_POPULATE_WRITE) != 0)
#endif
    for (size_t i = 0; i < n; i += 4096) static_cast<volatile char *>(p)[i] = 1; // older kernels: touch each page
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ::munmap(p, n);
  return ms;
}

std::string page_reporting_order() {
  std::ifstream f("/proc/cmdline");
  std::string word;
  while (f >> word)
    if (word.rfind("page_reporting.page_reporting_order=", 0) == 0) return word.substr(word.find('=') + 1);
  return "not set";
}

} // namespace

int main(int argc, char **argv) {
  const size_t mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 28;
  const int idle_ms = argc > 2 ? std::atoi(argv[2]) : 3000;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  if (mb == 0 || idle_ms < 0 || rounds < 1) {
    std::fprintf(stderr, "usage: %s [MB > 0] [idle ms >= 0] [rounds >= 1]\n", argv[0]);
    return 2;
  }
  std::printf("kernel command line page_reporting_order: %s\n", page_reporting_order().c_str());
  std::printf("%-10s %6s %16s %16s %20s %16s\n", "pages", "MB", "just freed ms", "ms per MB", "after idle ms", "ms per MB");
  for (bool huge : {true, false}) {
    for (int r = 0; r < rounds; ++r) {
      populate_ms(mb, huge); // leaves `mb` MB just freed
      const double warm = populate_ms(mb, huge);
      std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
      const double idle = populate_ms(mb, huge);
      std::printf("%-10s %6zu %16.2f %16.3f %14.2f (%d ms) %16.3f\n", huge ? "2 MiB THP" : "4 KiB", mb, warm,
                  warm / double(mb), idle, idle_ms, idle / double(mb));
    }
  }
  return 0;
}

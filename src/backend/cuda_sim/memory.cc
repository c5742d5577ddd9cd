#include "src/backend/cuda_sim/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ladder {
namespace cuda_sim {
namespace internal {
namespace {

// One cudaMalloc. Layout of its mapping, from low to high addresses:
//   [unused head of the first page][data: size][slack: rounded - size][guard page]
struct Allocation {
  size_t size;     // what was asked for
  size_t rounded;  // size rounded up to kDeviceAlign
  char* map_base;
  size_t map_bytes;  // including the guard page
};

std::mutex mu;
std::map<uintptr_t, Allocation>* registry = new std::map<uintptr_t, Allocation>;  // by data start
size_t in_use = 0;

size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// The allocation whose [data, data + rounded + guard page) holds addr.
const std::pair<const uintptr_t, Allocation>* Find(uintptr_t addr) {
  auto it = registry->upper_bound(addr);
  if (it == registry->begin()) return nullptr;
  --it;
  return addr < it->first + it->second.rounded + PageBytes() ? &*it : nullptr;
}

}  // namespace

void* AllocateDevice(size_t bytes) {
  const size_t page = PageBytes();
  const size_t rounded = (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
  const size_t data_pages = (rounded + page - 1) / page * page;
  const size_t map_bytes = data_pages + page;
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  char* map_base = static_cast<char*>(p);
  if (mprotect(map_base + data_pages, page, PROT_NONE) != 0) {
    munmap(p, map_bytes);
    return nullptr;
  }
  char* data = map_base + data_pages - rounded;
  std::memset(data, kPoisonByte, rounded);
  std::lock_guard<std::mutex> lock(mu);
  (*registry)[reinterpret_cast<uintptr_t>(data)] = {bytes, rounded, map_base, map_bytes};
  in_use += bytes;
  return data;
}

bool FreeDevice(void* ptr) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = registry->find(reinterpret_cast<uintptr_t>(ptr));
  if (it == registry->end()) return false;
  munmap(it->second.map_base, it->second.map_bytes);
  in_use -= it->second.size;
  registry->erase(it);
  return true;
}

void FreeAllDevice() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [data, a] : *registry) munmap(a.map_base, a.map_bytes);
  registry->clear();
  in_use = 0;
}

size_t DeviceBytesInUse() {
  std::lock_guard<std::mutex> lock(mu);
  return in_use;
}

bool IsDeviceRange(const void* ptr, size_t bytes) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu);
  const auto* found = Find(addr);
  if (found == nullptr) return false;
  const uintptr_t end = found->first + found->second.size;
  return addr <= end && bytes <= end - addr;
}

std::string DescribeFault(const void* addr) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  const auto* found = Find(a);
  if (found != nullptr && a >= found->first + found->second.rounded) {
    const Allocation& al = found->second;
    return absl::StrCat(a - (found->first + al.size), " bytes past the end of a ", al.size,
                        "-byte device allocation");
  }
  return absl::StrFormat("address %p, outside every device allocation", addr);
}

std::string CheckSlack() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [data, a] : *registry) {
    unsigned char* slack = reinterpret_cast<unsigned char*>(data) + a.size;
    for (size_t i = 0; i < a.rounded - a.size; ++i) {
      if (slack[i] == kPoisonByte) continue;
      std::memset(slack, kPoisonByte, a.rounded - a.size);
      return absl::StrCat("a write ", i, " bytes past the end of a ", a.size,
                          "-byte device allocation");
    }
  }
  return "";
}

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder

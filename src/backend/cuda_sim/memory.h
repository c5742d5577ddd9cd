// Device memory of the CUDA simulator (runtime.h states the contract): one
// mapping per allocation, its end flush against a guard page, and a registry
// that answers "which allocation holds this address" for the launch checks,
// the copies and the fault handler. Internal to the simulator.
//
// Thread-safe: the registry is guarded by a mutex. Lookup from the fault
// handler takes no lock (see DescribeFault).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ladder {
namespace cuda_sim {
namespace internal {

// Bytes an allocation is rounded up to: the alignment of a 16-byte vector.
inline constexpr size_t kDeviceAlign = 16;
// The fill of new allocations and of the rounding slack: 0xff bytes are NaN
// as floats and -1 as integers.
inline constexpr unsigned char kPoisonByte = 0xff;

// A new allocation of `bytes` (> 0), filled with kPoisonByte; null if out of
// memory.
void* AllocateDevice(size_t bytes);
// False if `ptr` is not the start of a live allocation.
bool FreeDevice(void* ptr);
// Frees every allocation (cudaDeviceReset).
void FreeAllDevice();
// Bytes in live allocations.
size_t DeviceBytesInUse();

// True iff [ptr, ptr + bytes) lies inside one live allocation (bytes may be 0:
// then ptr must lie inside or at the end of one).
bool IsDeviceRange(const void* ptr, size_t bytes);

// For a faulting address: "N bytes past the end of a S-byte allocation" when
// it lies in an allocation's guard page, else "address 0x...". Called from
// the signal handler: it reads the registry without locking, which is safe
// because a launch never runs while another host thread frees memory it uses.
std::string DescribeFault(const void* addr);

// After a launch: the first allocation whose rounding slack no longer holds
// kPoisonByte (a write just past its end that the guard page could not see),
// described; empty if none. Restores the poison.
std::string CheckSlack();

}  // namespace internal
}  // namespace cuda_sim
}  // namespace ladder

#include "src/parallel/context_parallel/ring_attention.h"

#include "src/core/status.h"

namespace ladder::cp {
namespace {

// Ring rank r's positions, [T].
Tensor Positions(const RingTensors& t, int r) {
  const int64_t T = t.positions.dim(1);
  return t.positions.Slice(r * T, {T});
}

// Block b of the ring buffer (b = 2 i: buffer i's keys and values, 2 i + 1:
// their gradient), shaped like qkv; Pair(i) is both, contiguous.
Tensor Block(const RingTensors& t, int b) {
  const int64_t n = t.qkv.numel();
  return t.ring.Slice(b * n, {t.qkv.dim(0), t.qkv.dim(1), t.qkv.dim(2)});
}
Tensor Pair(const RingTensors& t, int i) {
  return t.ring.Slice(2 * i * t.qkv.numel(), {2 * t.qkv.numel()});
}

}  // namespace

int64_t ChunkPosition(int rank, int ranks, int64_t local, int64_t j) {
  if (ranks == 1) return j;  // the whole sequence, of any length
  const int64_t c = local / 2;
  const int64_t chunk = j < c ? rank : 2 * ranks - 1 - rank;
  return chunk * c + j % c;
}

void TakeChunks(const int32_t* whole, int B, int T, int rank, int ranks, int32_t* local) {
  const int64_t n = T / ranks;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < n; ++j) {
      local[b * n + j] = whole[b * T + ChunkPosition(rank, ranks, n, j)];
    }
  }
}

absl::Status RingAttentionForward(Backend& be, Communicator& ring, const RingTensors& t,
                                  int num_heads) {
  const int R = ring.size(), r = ring.rank();
  const Tensor mine = Positions(t, r);
  RETURN_IF_ERROR(be.AttentionPartForward(t.out, t.lse, t.qkv, t.qkv, mine, mine, num_heads,
                                          /*merge=*/false));
  // Hop h: send the block held (own at h = 1) to r + 1, receive r - h's
  // from r - 1 into the other buffer, attend to it.
  Tensor held = t.qkv;
  for (int h = 1; h < R; ++h) {
    const Tensor next = Block(t, 2 * (h % 2));
    RETURN_IF_ERROR(ring.SendRecv(held, (r + 1) % R, next, (r + R - 1) % R));
    RETURN_IF_ERROR(be.AttentionPartForward(t.out, t.lse, t.qkv, next, mine,
                                            Positions(t, (r + R - h) % R), num_heads,
                                            /*merge=*/true));
    held = next;
  }
  return absl::OkStatus();
}

absl::Status RingAttentionBackward(Backend& be, Communicator& ring, const RingTensors& t,
                                   Tensor dqkv, Tensor dout, int num_heads) {
  const int R = ring.size(), r = ring.rank();
  const Tensor mine = Positions(t, r);
  // The own block's share: query and key/value gradients into dqkv alike.
  RETURN_IF_ERROR(be.Fill(dqkv, 0.0f));
  RETURN_IF_ERROR(be.AttentionPartBackward(dqkv, dqkv, dout, t.qkv, t.qkv, t.out, t.lse, mine, mine,
                                           num_heads));
  if (R == 1) return absl::OkStatus();
  // Hop 1 sends the own block alone; its gradient starts at the receiver.
  // Hops 2 .. R-1 send a block with its gradient so far; a last hop brings
  // each gradient home.
  int held = 1;
  RETURN_IF_ERROR(ring.SendRecv(t.qkv, (r + 1) % R, Block(t, 2), (r + R - 1) % R));
  for (int h = 1;; ++h) {
    const Tensor kv = Block(t, 2 * held), dkv = Block(t, 2 * held + 1);
    if (h == 1) RETURN_IF_ERROR(be.Fill(dkv, 0.0f));
    RETURN_IF_ERROR(be.AttentionPartBackward(dqkv, dkv, dout, t.qkv, kv, t.out, t.lse, mine,
                                             Positions(t, (r + R - h) % R), num_heads));
    if (h == R - 1) break;
    RETURN_IF_ERROR(ring.SendRecv(Pair(t, held), (r + 1) % R, Pair(t, 1 - held), (r + R - 1) % R));
    held = 1 - held;
  }
  const Tensor home = Block(t, 2 * (1 - held) + 1);
  RETURN_IF_ERROR(ring.SendRecv(Block(t, 2 * held + 1), (r + 1) % R, home, (r + R - 1) % R));
  // home: this rank's own keys' and values' gradient from every other
  // rank's queries (its query part was never written: zero).
  return be.ResidualAdd(dqkv, dqkv, home);
}

}  // namespace ladder::cp

// Context parallelism: R ranks compute one set of sequences together, each
// holding 1/R of every sequence's tokens, and causal attention runs as a
// ring over them. Everything outside attention works token by token, so it
// runs on a rank's tokens alone; attention needs every earlier key.
//
// Which tokens. Each sequence of T tokens is cut into 2R chunks of
// c = T / (2R); ring rank r holds chunk r and chunk 2R - 1 - r, side by
// side, 2c tokens. Under a causal mask a late chunk attends to nearly the
// whole sequence and an early one to little of it: paired like this, every
// rank does the same attention work (the "zigzag" split). Positions stay
// global (a token's position embedding and its mask use where it stands in
// the whole sequence), so positions, not local indices, say what attends
// to what.
//
// The ring. Forward: a rank attends its queries to its own keys and values,
// then R - 1 times passes the block it holds to the next rank and receives
// the previous rank's, attending to each as it arrives; the partial results
// merge by log-sum-exp (Backend::AttentionPartForward). Backward: the same
// circuit with each block's key and value gradient travelling beside it,
// every rank adding its queries' share; after one hop more the gradient is
// home, summed over all queries. The query gradient stays where it is.
// Per layer and microbatch a rank sends R - 1 blocks forward (B x 2c x 3C'
// values each: the packed qkv, of which the keys and values are used) and
// R - 1 block-and-gradient pairs plus one gradient backward.
//
// The math is the backend's; this file is the order of the hops. Every
// member of the group (two or more ranks) calls these with its own tensors.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/parallel/comm.h"

namespace ladder::cp {

// The position in the whole sequence of local token j (0 <= j < 2c) of
// ring rank `rank` of `ranks`, with c = local / 2; j itself for a ring of
// one (then `local` may be odd).
int64_t ChunkPosition(int rank, int ranks, int64_t local, int64_t j);

// Copies ring rank `rank`'s tokens of B sequences of T ids each (rows of
// `whole`) into `local` (B rows of T / ranks ids). T divides by 2 ranks.
void TakeChunks(const int32_t* whole, int B, int T, int rank, int ranks, int32_t* local);

// The tensors a layer's ring attention works on, for B sequences of a
// rank's T tokens: qkv [B,T,3C'] (its own block), out [B,T,C'] and lse
// [B,NH',T] (the attention, merged over the ring), ring [4,B,T,3C'] (two
// buffers of a block in transit and its gradient) and positions [R,T] i32
// (ChunkPosition of every ring rank, row r for rank r). All on the
// backend's device.
struct RingTensors {
  Tensor qkv, out, lse, ring, positions;
};

// out, lse = causal attention of this rank's queries over every rank's
// keys and values. Collective over `ring`.
absl::Status RingAttentionForward(Backend& be, Communicator& ring, const RingTensors& t,
                                  int num_heads);
// dqkv [B,T,3C'] (overwritten) from dout [B,T,C'], given RingAttentionForward's
// out and lse. Collective over `ring`.
absl::Status RingAttentionBackward(Backend& be, Communicator& ring, const RingTensors& t,
                                   Tensor dqkv, Tensor dout, int num_heads);

}  // namespace ladder::cp

// branch_state.h — what the Context keeps for each live branch (the Branch handle points
// here): its sequence, decoder, KV-reuse session and place in the fork tree.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lacuna/generator.h"
#include "lacuna/kv.h"
#include "lacuna/runtime.h"

namespace lacuna::runtime {

struct BranchState {
  uint32_t id = 0;
  uint64_t gen = 0;  // handle generation: a handle to a freed id is refused
  llama_seq_id seq = -1;
  BranchParams params;
  std::unique_ptr<Generator> decoder;
  std::unique_ptr<kv::Session> session;
  int64_t parent = -1;  // id of the parent branch (-1: a root)
  uint64_t parent_gen = 0;
  uint64_t fork_shared = 0;  // positions shared with the parent at the fork
  std::vector<uint32_t> children;
  size_t reseeds = 0;  // automatic Blink KV reseeds
};

}  // namespace lacuna::runtime

// batch.cpp — Batch: a fixed-capacity, reusable llama_batch of tokens.
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "lacuna/model.h"

namespace lacuna {

Batch::Batch(int32_t capacity, int32_t n_seq_max) {
  if (capacity <= 0) {
    throw std::invalid_argument("Batch: capacity must be positive, got " +
                                std::to_string(capacity));
  }
  if (n_seq_max <= 0) {
    throw std::invalid_argument("Batch: n_seq_max must be positive, got " +
                                std::to_string(n_seq_max));
  }
  batch_ = llama_batch_init(capacity, 0, n_seq_max);
  if (batch_.token == nullptr) throw std::bad_alloc();
  batch_.n_tokens = 0;
  capacity_ = capacity;
  n_seq_max_ = n_seq_max;
}

Batch::~Batch() {
  if (capacity_ > 0) llama_batch_free(batch_);
}

Batch::Batch(Batch&& other) noexcept
    : batch_(other.batch_), capacity_(other.capacity_), n_seq_max_(other.n_seq_max_) {
  other.batch_ = llama_batch{};
  other.capacity_ = 0;
  other.n_seq_max_ = 0;
}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    if (capacity_ > 0) llama_batch_free(batch_);
    batch_ = std::exchange(other.batch_, llama_batch{});
    capacity_ = std::exchange(other.capacity_, 0);
    n_seq_max_ = std::exchange(other.n_seq_max_, 0);
  }
  return *this;
}

void Batch::add(Token token, Pos pos, SeqId seq, bool logits) {
  add(token, pos, std::span<const SeqId>(&seq, 1), logits);
}

void Batch::add(Token token, Pos pos, std::span<const SeqId> seqs, bool logits) {
  if (batch_.n_tokens >= capacity_) {
    throw std::length_error("Batch::add: the batch is full (" + std::to_string(capacity_) +
                            " tokens)");
  }
  if (seqs.empty() || seqs.size() > static_cast<size_t>(n_seq_max_)) {
    throw std::invalid_argument("Batch::add: a token needs 1 to " + std::to_string(n_seq_max_) +
                                " sequence ids, got " + std::to_string(seqs.size()));
  }
  const int32_t i = batch_.n_tokens;
  batch_.token[i] = token;
  batch_.pos[i] = pos;
  batch_.n_seq_id[i] = static_cast<int32_t>(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) batch_.seq_id[i][s] = seqs[s];
  batch_.logits[i] = logits ? 1 : 0;
  batch_.n_tokens = i + 1;
}

void Batch::set_logits(int32_t i, bool logits) {
  if (i < 0 || i >= batch_.n_tokens) {
    throw std::out_of_range("Batch::set_logits: index " + std::to_string(i) +
                            " outside the batch of " + std::to_string(batch_.n_tokens));
  }
  batch_.logits[i] = logits ? 1 : 0;
}

}  // namespace lacuna

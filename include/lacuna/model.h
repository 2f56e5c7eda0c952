// model.h — thin RAII wrappers over llama.h: model loading with checked errors, vocabulary
// facts, tokenize/detokenize, context, batch and sampler handles.
//
// Ownership: Model shares its llama_model (copies are cheap and keep it alive); a Context
// keeps its Model alive; Batch and SamplerPtr own their llama objects. Raw llama pointers
// are always reachable through get()/raw() for code that needs the full C API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "llama.h"

namespace lacuna {

using Token = int32_t;  // same as constraint.h and llama_token
using Pos = int32_t;    // llama_pos
using SeqId = int32_t;  // llama_seq_id

// ---------------------------------------------------------------------------------------
// Errors

// What went wrong when loading a model file.
enum class ModelErrorKind {
  not_found,                 // no such file
  unreadable,                // exists but cannot be opened/read (permissions, a directory, ...)
  empty,                     // zero bytes
  not_gguf,                  // does not start with the GGUF magic
  malformed,                 // GGUF header/metadata/tensor infos cannot be parsed
  truncated,                 // the file ends before the data it announces
  unsupported_architecture,  // general.architecture missing or unknown to llama.cpp
  vocab_only,                // no tensors, but a full model was asked for
  load_failed,               // llama.cpp refused it for another reason (see message)
};

const char* model_error_kind_name(ModelErrorKind kind);

// Raised by Model::load and inspect_gguf. what() names the file and the reason, and ends
// with llama.cpp's own last error line when there is one.
class ModelError : public std::runtime_error {
 public:
  ModelError(ModelErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ModelErrorKind kind() const { return kind_; }

 private:
  ModelErrorKind kind_;
};

// Raised when llama.cpp fails at run time (context creation, decode).
class LlamaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------
// Owning pointers over llama.h handles

struct LlamaModelDeleter {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct LlamaContextDeleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
struct LlamaSamplerDeleter {
  void operator()(llama_sampler* s) const { llama_sampler_free(s); }
};
using ModelPtr = std::unique_ptr<llama_model, LlamaModelDeleter>;
using ContextPtr = std::unique_ptr<llama_context, LlamaContextDeleter>;
using SamplerPtr = std::unique_ptr<llama_sampler, LlamaSamplerDeleter>;

// ---------------------------------------------------------------------------------------
// GGUF inspection (no llama.cpp model is created)

struct GgufInfo {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version = 0;
  int64_t n_kv = 0;
  int64_t n_tensors = 0;
  uint64_t data_offset = 0;  // where the tensor data blob starts
  std::string architecture;  // general.architecture ("" when absent)
  std::string name;          // general.name ("" when absent)
  int64_t file_type = -1;    // general.file_type (a llama_ftype), -1 when absent
};

// Checks that `path` is a well-formed, complete GGUF file: readable, the magic, a header,
// metadata and tensor infos that ggml's gguf parser accepts, and every tensor's data inside
// the file. Throws ModelError otherwise. Never aborts on bad input.
GgufInfo inspect_gguf(const std::string& path);

// ---------------------------------------------------------------------------------------
// Model

struct ModelParams {
  bool vocab_only = false;     // load only the tokenizer (works for ggml-vocab-*.gguf files)
  int32_t n_gpu_layers = -1;   // layers to offload when a GPU backend exists; -1 = all
  bool use_mmap = true;        // map the file instead of reading it
  bool check_tensors = false;  // let llama.cpp validate tensor data (slow)
};

class Vocab;

class Model {
 public:
  // Validates the file (inspect_gguf), then loads it with llama.cpp. Every failure is a
  // ModelError with a clear message; nothing aborts.
  static Model load(const std::string& path, const ModelParams& params = {});

  // Wraps an already loaded model (takes ownership). Throws std::invalid_argument on null.
  explicit Model(ModelPtr model, std::string path = {});

  llama_model* get() const { return model_.get(); }
  const std::shared_ptr<llama_model>& shared() const { return model_; }
  const llama_vocab* vocab_ptr() const { return llama_model_get_vocab(model_.get()); }
  Vocab vocab() const;

  const std::string& path() const { return path_; }
  std::string architecture() const;  // general.architecture
  std::string description() const;   // llama_model_desc, e.g. "llama ?B F16"
  int32_t n_embd() const { return llama_model_n_embd(model_.get()); }
  int32_t n_layer() const { return llama_model_n_layer(model_.get()); }
  int32_t n_head() const { return llama_model_n_head(model_.get()); }
  int32_t n_head_kv() const { return llama_model_n_head_kv(model_.get()); }
  int32_t n_ctx_train() const { return llama_model_n_ctx_train(model_.get()); }
  uint64_t n_params() const { return llama_model_n_params(model_.get()); }
  uint64_t size_bytes() const { return llama_model_size(model_.get()); }
  bool vocab_only() const { return vocab_only_; }

  // A metadata value rendered as a string, or "" if the key is absent.
  std::string meta(const std::string& key) const;

 private:
  std::shared_ptr<llama_model> model_;
  std::string path_;
  bool vocab_only_ = false;
};

// ---------------------------------------------------------------------------------------
// Vocabulary facts and tokenization (a non-owning view; the model must outlive it)

class Vocab {
 public:
  explicit Vocab(const llama_vocab* vocab);

  const llama_vocab* get() const { return vocab_; }
  int32_t n_vocab() const { return n_vocab_; }
  enum llama_vocab_type type() const { return llama_vocab_type(vocab_); }
  const char* type_name() const;  // "SPM", "BPE", "WPM", "UGM", "RWKV", "PLAMO2", ...

  // Special tokens; LLAMA_TOKEN_NULL (-1) when the vocabulary has none.
  Token bos() const { return llama_vocab_bos(vocab_); }
  Token eos() const { return llama_vocab_eos(vocab_); }
  Token eot() const { return llama_vocab_eot(vocab_); }
  Token nl() const { return llama_vocab_nl(vocab_); }
  bool add_bos() const { return llama_vocab_get_add_bos(vocab_); }
  bool add_eos() const { return llama_vocab_get_add_eos(vocab_); }

  bool valid(Token t) const { return t >= 0 && t < n_vocab_; }
  // End of generation (EOS, EOT, ...). False for ids out of range.
  bool is_eog(Token t) const { return valid(t) && llama_vocab_is_eog(vocab_, t); }
  bool is_control(Token t) const { return valid(t) && llama_vocab_is_control(vocab_, t); }
  llama_token_attr attr(Token t) const;  // throws std::out_of_range
  std::string text(Token t) const;       // the raw vocabulary entry; throws std::out_of_range

 private:
  const llama_vocab* vocab_;
  int32_t n_vocab_;
};

// Text to tokens. add_special: add BOS/EOS as the vocabulary asks. parse_special: turn
// special-token text such as "<|eot_id|>" into the special token instead of plain text.
std::vector<Token> tokenize(const Vocab& vocab, std::string_view text, bool add_special,
                            bool parse_special);

// Tokens to text. remove_special: drop the BOS/EOS the vocabulary adds. unparse_special:
// render control tokens as their text (otherwise they produce nothing).
// Throws std::out_of_range for an id outside the vocabulary.
std::string detokenize(const Vocab& vocab, std::span<const Token> tokens,
                       bool remove_special = false, bool unparse_special = false);

// The bytes of one token (may be part of a UTF-8 character). special: render control
// tokens. Throws std::out_of_range for an id outside the vocabulary.
std::string token_to_piece(const Vocab& vocab, Token token, bool special = false);

// Same, appending to `out` (no allocation once `out` has capacity). Returns bytes appended.
size_t append_token_piece(const Vocab& vocab, Token token, std::string& out, bool special = false);

// ---------------------------------------------------------------------------------------
// Batch: a fixed-capacity llama_batch of tokens

class Batch {
 public:
  // Room for `capacity` tokens, each in up to `n_seq_max` sequences.
  explicit Batch(int32_t capacity, int32_t n_seq_max = 1);
  ~Batch();
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void clear() { batch_.n_tokens = 0; }
  // Appends a token at position `pos` of sequence `seq`; `logits` asks for its output.
  // Throws std::length_error when full.
  void add(Token token, Pos pos, SeqId seq = 0, bool logits = false);
  // Same, for a token shared by several sequences (1..n_seq_max of them).
  void add(Token token, Pos pos, std::span<const SeqId> seqs, bool logits);
  // Turns the output flag of token i on or off (i < size()).
  void set_logits(int32_t i, bool logits);

  int32_t size() const { return batch_.n_tokens; }
  int32_t capacity() const { return capacity_; }
  int32_t n_seq_max() const { return n_seq_max_; }
  bool empty() const { return batch_.n_tokens == 0; }
  const llama_batch& raw() const { return batch_; }

 private:
  llama_batch batch_{};
  int32_t capacity_ = 0;
  int32_t n_seq_max_ = 0;
};

// ---------------------------------------------------------------------------------------
// Context

struct ContextParams {
  uint32_t n_ctx = 4096;        // KV cache size in tokens (0 = the model's training context)
  uint32_t n_batch = 512;       // most tokens per decode() call
  uint32_t n_ubatch = 512;      // physical batch size
  uint32_t n_seq_max = 1;       // distinct sequences in the KV cache
  int32_t n_threads = 0;        // threads for single-token decode; 0 = hardware threads
  int32_t n_threads_batch = 0;  // threads for prompt/batch decode; 0 = same as n_threads
  bool embeddings = false;      // also extract embeddings
  bool perf = false;            // let llama.cpp keep its own performance counters
};

class Context {
 public:
  // Creates a context over `model` (kept alive by the context). Throws LlamaError.
  static Context create(const Model& model, const ContextParams& params = {});
  // Same with full llama.cpp parameters, for needs ContextParams does not cover.
  static Context create(const Model& model, const llama_context_params& params);

  llama_context* get() const { return ctx_.get(); }
  const Model& model() const { return model_; }
  Vocab vocab() const { return model_.vocab(); }

  uint32_t n_ctx() const { return llama_n_ctx(ctx_.get()); }
  uint32_t n_batch() const { return llama_n_batch(ctx_.get()); }
  uint32_t n_ubatch() const { return llama_n_ubatch(ctx_.get()); }
  uint32_t n_seq_max() const { return llama_n_seq_max(ctx_.get()); }
  int32_t n_threads() const { return llama_n_threads(ctx_.get()); }
  int32_t n_threads_batch() const { return llama_n_threads_batch(ctx_.get()); }
  void set_threads(int32_t n_threads, int32_t n_threads_batch);

  // Runs the model on a batch. Throws LlamaError with the reason on any non-zero status
  // (no KV slot, aborted, invalid batch, fatal). An empty batch is an error too.
  void decode(const Batch& batch);
  // Same, returning llama_decode's status instead of throwing.
  int32_t try_decode(const Batch& batch);

  // Logits of output i of the last decode (negative: from the end). Throws LlamaError
  // when there is no such output. n_vocab floats.
  const float* logits(int32_t i) const;

  // KV cache (llama memory) management.
  void clear_memory(bool data = true);
  bool seq_rm(SeqId seq, Pos p0, Pos p1);  // remove positions [p0, p1); -1 = open end
  Pos seq_pos_max(SeqId seq) const;        // -1 when the sequence is empty

 private:
  Context(Model model, ContextPtr ctx) : model_(std::move(model)), ctx_(std::move(ctx)) {}
  Model model_;
  ContextPtr ctx_;
};

// ---------------------------------------------------------------------------------------
// Plain sampling chain (greedy or temperature sampling)

struct SamplingParams {
  float temp = 0.0f;    // <= 0: greedy (argmax)
  uint32_t seed = 0;    // for temp > 0
  int32_t top_k = 40;   // <= 0: off
  float top_p = 0.95f;  // >= 1: off
  float min_p = 0.05f;  // <= 0: off
};

// A llama.cpp sampler chain: greedy when temp <= 0, else top-k, top-p, min-p, temperature
// and a seeded random draw. Throws std::invalid_argument on NaN/negative parameters.
SamplerPtr make_sampler(const SamplingParams& params);

}  // namespace lacuna

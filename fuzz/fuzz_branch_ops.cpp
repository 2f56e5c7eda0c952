// fuzz_branch_ops.cpp — libFuzzer target: random sequences of runtime branch operations
// (create, prefill, set_tokens, fork, next, produce/commit of any token, prune, prune_subtree,
// retain_only, clear_and_reseed, batched step/commit/prefill over random subsets, constraints,
// sampling settings) on a tiny model in a small context (n_ctx 256, 4 branches, 1 thread).
//
// After every operation, whether it succeeded or threw, the invariants must hold: each live
// branch's KV is its token list (positions [0, n_past) of its sequence, n_past + n_pending =
// tokens().size()), no sequence leaks (available() + n_live_branches() = n_branches), the tree
// links agree. Only the documented exceptions may escape an operation (std::invalid_argument,
// std::length_error, std::logic_error, std::runtime_error), and the context stays usable: at the
// end every branch is pruned and a fresh one must prefill and generate.
//
// The model: $LACUNA_TEST_MODEL_DIR/tiny-spm.gguf (or the build's models/), else one generated
// once with lacuna::make_model into a temporary directory.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "decode/constraint_factory.h"
#include "lacuna/log.h"
#include "lacuna/make_model.h"
#include "lacuna/model.h"
#include "lacuna/runtime.h"

namespace {

using lacuna::Token;
using lacuna::runtime::Branch;
using lacuna::runtime::BranchParams;
using lacuna::runtime::Context;
using lacuna::runtime::ContextParams;

constexpr uint32_t kBranches = 4;
constexpr uint32_t kCtx = 256;
constexpr size_t kMaxHandles = 12;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_branch_ops: invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string find_or_make_model() {
  for (const char* dir : {static_cast<const char*>(std::getenv("LACUNA_TEST_MODEL_DIR")),
                          static_cast<const char*>(LACUNA_TEST_MODEL_DIR)}) {
    if (dir == nullptr) continue;
    const std::string p = std::string(dir) + "/tiny-spm.gguf";
    if (std::filesystem::exists(p)) return p;
  }
  lacuna::MakeModelOptions o;
  o.preset = "tiny-spm";
  o.out_path = (std::filesystem::temp_directory_path() /
                ("lacuna-fuzz-branch-ops-" + std::to_string(::getuid())) / "tiny-spm.gguf")
                   .string();
  o.skip_existing = true;
  return lacuna::make_model(o).path;
}

struct Shared {
  lacuna::Model model;
  int32_t n_vocab = 0;
  // Fresh-state constraints to fork from (compiled once).
  std::vector<std::unique_ptr<lacuna::Constraint>> protos;
};

Shared& shared() {
  static Shared* s = [] {
    lacuna::set_log_level(lacuna::LogLevel::none);
    auto* sh = new Shared{lacuna::Model::load(find_or_make_model()), 0, {}};
    sh->n_vocab = sh->model.vocab().n_vocab();
    const llama_vocab* v = sh->model.vocab_ptr();
    sh->protos.push_back(
        lacuna::decode::make_grammar_constraint(v, R"(root ::= "{\"id\": " [0-9]{1,3} "}")"));
    sh->protos.push_back(
        lacuna::decode::make_grammar_constraint(v, R"(root ::= ("yes" | "no") " " [a-z]{0,6})"));
    sh->protos.push_back(lacuna::decode::make_grammar_constraint(
        v, R"g(root ::= "call(" [a-z]+ ")")g", std::vector<std::string>{"x"}));
    return sh;
  }();
  return *s;
}

// Reads the input front to back; past the end it gives zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool more() const { return pos_ < size_; }
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t u16() {
    const uint32_t lo = byte();
    return lo | (static_cast<uint32_t>(byte()) << 8);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

class Driver {
 public:
  Driver(Context& ctx, Reader& in) : ctx_(ctx), in_(in), n_vocab_(shared().n_vocab) {}

  void run() {
    // LACUNA_FUZZ_TRACE=1: each operation and what it threw, to stderr (reproducing a crash).
    static const bool trace = std::getenv("LACUNA_FUZZ_TRACE") != nullptr;
    while (in_.more()) {
      const uint8_t op = in_.byte() % 20;
      if (trace) std::fprintf(stderr, "op %u\n", op);
      try {
        apply(op);
      } catch (const std::out_of_range& e) {
        fail(std::string("undocumented std::out_of_range: ") + e.what());
      } catch (const std::invalid_argument& e) {
        if (trace) std::fprintf(stderr, "  invalid_argument: %s\n", e.what());
      } catch (const std::length_error& e) {
        if (trace) std::fprintf(stderr, "  length_error: %s\n", e.what());
      } catch (const std::logic_error& e) {
        if (trace) std::fprintf(stderr, "  logic_error: %s\n", e.what());
      } catch (const std::runtime_error& e) {
        if (trace) std::fprintf(stderr, "  runtime_error: %s\n", e.what());
      }
      check();
    }
    finish();
  }

 private:
  // A handle from the list (possibly pruned), or an empty one.
  Branch pick() {
    const size_t i = in_.byte() % (handles_.size() + 1);
    return i < handles_.size() ? handles_[i] : Branch();
  }
  void keep(const Branch& b) {
    if (handles_.size() >= kMaxHandles) {
      for (size_t i = 0; i < handles_.size(); ++i) {
        if (!handles_[i].valid()) {
          handles_.erase(handles_.begin() + static_cast<long>(i));
          break;
        }
      }
    }
    if (handles_.size() < kMaxHandles) handles_.push_back(b);
  }
  Token token() {
    const uint32_t v = in_.u16();
    if (v == 0xffff) return -1;
    if (v == 0xfffe) return n_vocab_;
    return static_cast<Token>(v % static_cast<uint32_t>(n_vocab_));
  }
  std::vector<Token> tokens(size_t n) {
    // Mostly a cheap pseudo-random run from one seed byte; sometimes explicit tokens.
    std::vector<Token> t;
    const uint8_t mode = in_.byte();
    if (mode % 8 == 0) {
      for (size_t i = 0; i < n; ++i) t.push_back(token());
    } else {
      uint32_t x = mode * 2654435761u + 1;
      for (size_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        t.push_back(static_cast<Token>(3 + (x >> 8) % static_cast<uint32_t>(n_vocab_ - 3)));
      }
    }
    return t;
  }
  std::vector<Branch> subset() {
    const uint8_t mask = in_.byte();
    std::vector<Branch> out;
    for (size_t i = 0; i < handles_.size() && i < 7; ++i) {
      if ((mask >> i) & 1) out.push_back(handles_[i]);
    }
    if ((mask & 0x80) && !out.empty()) out.push_back(out.front());  // a branch twice
    return out;
  }

  void apply(uint8_t op) {
    switch (op) {
      case 0: {  // create
        BranchParams p;
        const uint8_t a = in_.byte();
        p.max_tokens = a % 24;
        if (a & 0x80) {
          p.temp = 0.7f;
          p.seed = in_.byte();
        }
        if (a & 0x40) {
          p.blink_sinks = in_.byte() % 8;
          p.blink_tail = in_.byte() % 96;
        }
        p.stop_strings = (a & 0x20) ? std::vector<std::string>{"e"} : std::vector<std::string>{};
        p.track_perplexity = (a & 0x10) != 0;
        keep(ctx_.create_branch(p));
        break;
      }
      case 1: {  // prefill
        Branch b = pick();
        b.prefill(tokens(in_.byte() % 72));
        break;
      }
      case 2: {  // set_tokens: often a prefix of what the branch holds plus a little
        Branch b = pick();
        const uint8_t a = in_.byte();
        std::vector<Token> t;
        if (b.valid() && (a & 1)) {
          const auto have = b.tokens();
          t.assign(have.begin(), have.begin() + static_cast<long>(have.size() * (a >> 1) / 128));
        }
        const auto more = tokens(in_.byte() % 24);
        t.insert(t.end(), more.begin(), more.end());
        b.set_tokens(t);
        break;
      }
      case 3:
      case 4: {  // fork
        Branch b = pick();
        keep(b.fork());
        break;
      }
      case 5:
      case 6: {  // next
        Branch b = pick();
        b.next();
        break;
      }
      case 7: {  // commit any token
        Branch b = pick();
        b.commit(token());
        break;
      }
      case 8: {  // produce, then commit it (or not)
        Branch b = pick();
        const Token t = b.produce();
        if (in_.byte() & 1) b.commit(t);
        break;
      }
      case 9: {
        Branch b = pick();
        b.prune();
        break;
      }
      case 10: {
        Branch b = pick();
        b.prune_subtree();
        break;
      }
      case 11: {
        if ((in_.byte() & 3) != 0) break;  // rarer: it ends most of the tree
        ctx_.store().retain_only(pick());
        break;
      }
      case 12: {  // clear_and_reseed: sinks and tail from the branch's own tokens, or random
        Branch b = pick();
        const size_t n_sinks = in_.byte() % 10;
        const size_t n_tail = in_.byte() % 300;
        std::vector<Token> sinks, tail;
        if (b.valid() && (in_.byte() & 1)) {
          const auto have = b.tokens();
          sinks.assign(have.begin(),
                       have.begin() + static_cast<long>(std::min(n_sinks, have.size())));
          tail.assign(have.end() - static_cast<long>(std::min(n_tail, have.size())), have.end());
        } else {
          sinks = tokens(n_sinks);
          tail = tokens(n_tail);
        }
        b.clear_and_reseed(sinks, tail);
        break;
      }
      case 13:
      case 14: {  // batched step over a random subset
        const auto bs = subset();
        ctx_.store().step(bs);
        break;
      }
      case 15: {  // batched commit: each branch's own pick or any token
        std::vector<std::pair<Branch, Token>> items;
        for (const Branch& b : subset()) {
          Token t = token();
          if ((t & 1) && b.valid()) {
            try {
              t = Branch(b).produce();
            } catch (const std::invalid_argument&) {
            }
          }
          items.emplace_back(b, t);
        }
        ctx_.store().commit(items);
        break;
      }
      case 16: {  // batched prefill
        std::vector<std::pair<Branch, std::vector<Token>>> items;
        for (const Branch& b : subset()) items.emplace_back(b, tokens(in_.byte() % 40));
        ctx_.store().prefill(items);
        break;
      }
      case 17: {  // constraint
        Branch b = pick();
        const uint8_t k = in_.byte() % 4;
        b.set_constraint(k == 3 ? nullptr : shared().protos[k]->fork());
        break;
      }
      case 18: {  // sampling settings
        Branch b = pick();
        const uint8_t a = in_.byte();
        if (a % 3 == 0) b.set_sampler_params(a & 4 ? 0.8f : 0.0f, in_.byte(), in_.byte() % 50);
        if (a % 3 == 1) b.reseed(in_.byte());
        if (a % 3 == 2) b.set_logit_bias({{token(), static_cast<float>(in_.byte()) - 128.0f}});
        break;
      }
      case 19: {  // metrics and short generations
        Branch b = pick();
        const uint8_t a = in_.byte();
        if (a % 4 == 0) (void)b.model_entropy();
        if (a % 4 == 1) (void)b.model_surprisal(token());
        if (a % 4 == 2) {
          (void)b.logits();
          (void)b.perplexity();
          (void)b.children();
          (void)b.parent();
        }
        if (a % 4 == 3) {
          int left = in_.byte() % 8;
          b.generate([&](const lacuna::Step&) { return --left > 0; });
        }
        break;
      }
      default:
        break;
    }
  }

  void check() {
    llama_memory_t mem = llama_get_memory(ctx_.raw());
    const size_t live = ctx_.n_live_branches();
    if (ctx_.store().available() + live != kBranches) {
      fail("available " + std::to_string(ctx_.store().available()) + " + live " +
           std::to_string(live) + " != " + std::to_string(kBranches));
    }
    size_t valid = 0;
    for (size_t i = 0; i < handles_.size(); ++i) {
      const Branch& b = handles_[i];
      if (!b.valid()) continue;
      ++valid;
      const auto& g = b.generator();
      const llama_seq_id seq = b.seq();
      const llama_pos pmax = llama_memory_seq_pos_max(mem, seq);
      const llama_pos pmin = llama_memory_seq_pos_min(mem, seq);
      const std::string who = "branch " + std::to_string(b.id()) + " (seq " + std::to_string(seq) +
                              ", n_past " + std::to_string(g.n_past()) + ", pending " +
                              std::to_string(g.n_pending()) + ", tokens " +
                              std::to_string(b.tokens().size()) + ", KV positions " +
                              std::to_string(pmin) + ".." + std::to_string(pmax) + ")";
      if (pmax + 1 != g.n_past()) fail(who + ": KV end != n_past");
      if (g.n_past() > 0 && pmin != 0) fail(who + ": KV does not start at position 0");
      if (static_cast<size_t>(g.n_past()) + g.n_pending() != b.tokens().size())
        fail(who + ": n_past + n_pending != tokens().size()");
      if (g.n_past() >= static_cast<llama_pos>(kCtx)) fail(who + ": beyond the context");
      for (const Branch& c : b.children()) {
        if (!(c.parent() == b)) fail(who + ": a child whose parent is another branch");
      }
      const Branch p = b.parent();
      if (p.valid()) {
        bool found = false;
        for (const Branch& c : p.children()) found = found || c == b;
        if (!found) fail(who + ": not among its parent's children");
      }
    }
    // Every live branch was made here and is in the list (a full list drops a pruned handle
    // for a new one: at most kBranches are valid).
    if (valid != live) {
      fail("live branches " + std::to_string(live) + " != valid handles " + std::to_string(valid));
    }
  }

  // Everything pruned: every sequence back, and a fresh branch works.
  void finish() {
    for (const Branch& b : handles_) {
      if (b.valid()) Branch(b).prune_subtree();
    }
    check();
    if (ctx_.n_live_branches() != 0) fail("branches left after pruning every handle");
    if (ctx_.store().available() != kBranches) fail("sequences leaked");
    BranchParams p;
    p.max_tokens = 3;
    Branch b = ctx_.create_branch(p);
    keep(b);
    const std::vector<Token> prompt = {10, 200, 3000, 40, 500, 6000, 70, 800};
    try {
      b.prefill(prompt);
      b.generate();
    } catch (const std::exception& e) {
      fail(std::string("a fresh branch fails after the run: ") + e.what());
    }
    if (b.generator().tokens().empty() && b.generator().stats().stop != lacuna::StopReason::eog) {
      fail("a fresh branch generates nothing");
    }
    check();
  }

  Context& ctx_;
  Reader& in_;
  int32_t n_vocab_;
  std::vector<Branch> handles_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Shared& sh = shared();
  Reader in(data, size);
  const uint8_t cfg = in.byte();
  ContextParams p;
  p.n_ctx = kCtx;
  p.n_batch = (cfg & 1) ? 32 : 64;
  p.n_ubatch = p.n_batch;
  p.n_branches = kBranches;
  p.n_threads = 1;
  p.n_threads_batch = 1;
  p.kv = lacuna::kv::KvConfig{};
  p.kv.prefix_cache = (cfg & 2) != 0;
  p.kv.block_size = 8;
  p.n_cache_holders = 2;
  p.decode = lacuna::DecodeOptions{};
  p.decode.skip_forced = (cfg & 4) == 0;
  p.decode.verify_strings = (cfg & 8) == 0;
  p.decode.jump_forward = (cfg & 16) != 0;
  p.decode.max_draft = 1 + (cfg >> 5);
  Context ctx(sh.model, p);
  Driver(ctx, in).run();
  return 0;
}

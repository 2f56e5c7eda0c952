// trie_payload.cpp — parses and validates the token-trie JSON payload, with size and depth
// limits checked before nlohmann-json sees the text.
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "lacuna/token_trie.h"

namespace lacuna {
namespace {

using nlohmann::json;

[[noreturn]] void fail(TrieErrc code, const std::string& where, const std::string& what) {
  throw TrieError(code, where + ": " + what);
}

// Rejects nesting deeper than max_depth without recursion (nlohmann's parser recurses).
void check_nesting(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw TrieError(TrieErrc::kTooDeep, "payload nests deeper than " +
                                                std::to_string(max_depth) + " levels (at byte " +
                                                std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
}

const json& member(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(TrieErrc::kSchema, where, std::string("missing \"") + key + "\"");
  return *it;
}

std::string type_name(const json& j) {
  return j.type_name();
}

}  // namespace

TriePayload parse_trie_payload(std::string_view text, size_t n_vocab,
                               const TriePayloadLimits& limits) {
  if (text.size() > limits.max_payload_bytes) {
    throw TrieError(TrieErrc::kTooLarge, "payload is " + std::to_string(text.size()) +
                                             " bytes, over the limit of " +
                                             std::to_string(limits.max_payload_bytes));
  }
  check_nesting(text, limits.max_nesting_depth);
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw TrieError(TrieErrc::kSyntax, std::string("malformed JSON: ") + e.what());
  }
  if (!root.is_object()) fail(TrieErrc::kSchema, "/", "expected an object, got " + type_name(root));

  TriePayload payload;
  const json& model_id = member(root, "modelId", "/");
  if (!model_id.is_string()) {
    fail(TrieErrc::kSchema, "/modelId", "expected a string, got " + type_name(model_id));
  }
  payload.model_id = model_id.get<std::string>();

  const json& descriptors = member(root, "descriptors", "/");
  if (!descriptors.is_array()) {
    fail(TrieErrc::kSchema, "/descriptors", "expected an array, got " + type_name(descriptors));
  }
  if (descriptors.empty()) fail(TrieErrc::kEmptyLeafSet, "/descriptors", "no descriptors");

  size_t total_leaves = 0;
  std::unordered_map<std::string, size_t> paths;
  payload.descriptors.reserve(descriptors.size());
  for (size_t d = 0; d < descriptors.size(); ++d) {
    const std::string dwhere = "/descriptors/" + std::to_string(d);
    const json& desc = descriptors[d];
    if (!desc.is_object())
      fail(TrieErrc::kSchema, dwhere, "expected an object, got " + type_name(desc));
    TrieDescriptor out;
    const json& path = member(desc, "path", dwhere);
    if (!path.is_string()) {
      fail(TrieErrc::kSchema, dwhere + "/path", "expected a string, got " + type_name(path));
    }
    out.path = path.get<std::string>();
    if (auto [it, fresh] = paths.emplace(out.path, d); !fresh) {
      fail(TrieErrc::kDuplicate, dwhere + "/path",
           "duplicate path \"" + out.path + "\" (first at /descriptors/" +
               std::to_string(it->second) + ")");
    }
    const json& leaves = member(desc, "leaves", dwhere);
    if (!leaves.is_array()) {
      fail(TrieErrc::kSchema, dwhere + "/leaves", "expected an array, got " + type_name(leaves));
    }
    if (leaves.empty()) fail(TrieErrc::kEmptyLeafSet, dwhere + "/leaves", "empty leaf set");
    total_leaves += leaves.size();
    if (total_leaves > limits.max_leaves) {
      fail(TrieErrc::kLimit, dwhere + "/leaves",
           "more than " + std::to_string(limits.max_leaves) + " leaves in the payload");
    }
    std::unordered_map<std::string, size_t> names;
    names.reserve(leaves.size());
    out.leaves.reserve(leaves.size());
    for (size_t l = 0; l < leaves.size(); ++l) {
      const std::string lwhere = dwhere + "/leaves/" + std::to_string(l);
      const json& leaf = leaves[l];
      if (!leaf.is_object())
        fail(TrieErrc::kSchema, lwhere, "expected an object, got " + type_name(leaf));
      TrieLeaf tl;
      const json& name = member(leaf, "name", lwhere);
      if (!name.is_string()) {
        fail(TrieErrc::kSchema, lwhere + "/name", "expected a string, got " + type_name(name));
      }
      tl.name = name.get<std::string>();
      if (tl.name.empty()) fail(TrieErrc::kSchema, lwhere + "/name", "empty leaf name");
      if (auto [it, fresh] = names.emplace(tl.name, l); !fresh) {
        fail(TrieErrc::kDuplicate, lwhere + "/name",
             "duplicate leaf name \"" + tl.name + "\" (first at " + dwhere + "/leaves/" +
                 std::to_string(it->second) + ")");
      }
      const json& tokens = member(leaf, "tokens", lwhere);
      if (!tokens.is_array()) {
        fail(TrieErrc::kSchema, lwhere + "/tokens", "expected an array, got " + type_name(tokens));
      }
      if (tokens.empty()) fail(TrieErrc::kEmptyLeafSet, lwhere + "/tokens", "leaf has no tokens");
      if (tokens.size() > limits.max_leaf_tokens) {
        fail(TrieErrc::kLimit, lwhere + "/tokens",
             std::to_string(tokens.size()) + " tokens, over the limit of " +
                 std::to_string(limits.max_leaf_tokens));
      }
      tl.tokens.reserve(tokens.size());
      for (size_t t = 0; t < tokens.size(); ++t) {
        const json& tok = tokens[t];
        // Built only on the error paths: no string work per valid token.
        const auto twhere = [&] { return lwhere + "/tokens/" + std::to_string(t); };
        if (tok.is_number_unsigned()) {
          const uint64_t v = tok.get<uint64_t>();
          if (v >= n_vocab) {
            fail(TrieErrc::kTokenRange, twhere(),
                 "token id " + std::to_string(v) + " out of range [0, " + std::to_string(n_vocab) +
                     ")");
          }
          tl.tokens.push_back(static_cast<Token>(v));
        } else if (tok.is_number_integer()) {
          fail(TrieErrc::kTokenRange, twhere(),
               "token id " + std::to_string(tok.get<int64_t>()) + " out of range [0, " +
                   std::to_string(n_vocab) + ")");
        } else {
          fail(TrieErrc::kSchema, twhere(), "expected an integer token id, got " + type_name(tok));
        }
      }
      out.leaves.push_back(std::move(tl));
    }
    payload.descriptors.push_back(std::move(out));
  }
  return payload;
}

}  // namespace lacuna

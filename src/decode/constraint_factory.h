// constraint_factory.h — turns the command line's constraint options (GBNF file, JSON Schema,
// regex, choices, lazy trigger) into GBNF text and a Constraint for the generator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lacuna/constraint.h"
#include "llama.h"

namespace lacuna::decode {

struct ConstraintSpec {
  std::string grammar_file;                // GBNF (llama.cpp's dialect)
  std::string schema_file;                 // JSON Schema
  std::string regex;                       // a regular expression over the whole output
  std::vector<std::string> choices;        // the output is exactly one of these
  std::vector<std::string> lazy_triggers;  // constrain only after one of these appears

  bool empty() const {
    return grammar_file.empty() && schema_file.empty() && regex.empty() && choices.empty();
  }
};

// The GBNF text of the spec (root rule "root"). Throws std::invalid_argument when more than
// one source is given or none, std::runtime_error for unreadable files, and the front ends'
// own errors (GrammarError, SchemaError, ...) with their positions.
std::string spec_to_gbnf(const ConstraintSpec& spec);

// GBNF for "exactly one of these strings". Throws std::invalid_argument on an empty list.
std::string choices_to_gbnf(const std::vector<std::string>& choices);

// Parses, compiles (against the vocabulary's token index, built once per vocabulary and
// cached) and wraps in a LazyConstraint when triggers are given.
std::unique_ptr<Constraint> make_grammar_constraint(
    const llama_vocab* vocab, const std::string& gbnf,
    const std::vector<std::string>& lazy_triggers = {});

// `c` inactive until one of the trigger words appears in the output (a LazyConstraint); `c`
// itself when there are none.
std::unique_ptr<Constraint> make_lazy(const llama_vocab* vocab, std::unique_ptr<Constraint> c,
                                      const std::vector<std::string>& lazy_triggers);

// A JSON Schema's constraint (flexible or compact whitespace; unsupported keywords are
// logged as warnings), with lazy triggers like make_grammar_constraint.
std::unique_ptr<Constraint> make_schema_constraint(
    const llama_vocab* vocab, const std::string& schema, bool compact,
    const std::vector<std::string>& lazy_triggers = {});

// Reads a whole file; throws std::runtime_error naming the file on failure.
std::string read_text_file(const std::string& path);

}  // namespace lacuna::decode

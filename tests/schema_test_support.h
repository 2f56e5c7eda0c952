// schema_test_support.h — a JSON Schema compiled to its byte-level language, for the schema
// tests: does a document belong to it, which warnings did the conversion give.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"

namespace lacuna::testing {

inline SchemaOptions compact(bool strict = false) {
  SchemaOptions o;
  o.whitespace = SchemaOptions::Whitespace::Compact;
  o.strict = strict;
  return o;
}

// The language of a schema (compact whitespace unless told otherwise). Warnings are recorded
// and still passed to the options' own on_warning, if any.
class Lang {
 public:
  explicit Lang(const std::string& schema, SchemaOptions opt = compact()) {
    auto forward = opt.on_warning;
    opt.on_warning = [this, forward](const std::string& k, const std::string& p,
                                     const std::string& m) {
      warnings_.push_back(k);
      if (forward) forward(k, p, m);
    };
    gbnf_ = json_schema_to_gbnf(schema, opt);
    compiled_ = CompiledGrammar::compile(parse_gbnf(gbnf_), nullptr);
  }
  bool accepts(const std::string& text) const {
    GrammarMatcher m(compiled_);
    return m.accept_string(text) && m.is_completed();
  }
  const std::string& gbnf() const { return gbnf_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::string gbnf_;
  std::vector<std::string> warnings_;
  std::shared_ptr<const CompiledGrammar> compiled_;
};

inline void expect_language(const Lang& l, const std::vector<std::string>& yes,
                            const std::vector<std::string>& no) {
  for (const std::string& s : yes)
    EXPECT_TRUE(l.accepts(s)) << "should accept " << s << "\n" << l.gbnf();
  for (const std::string& s : no)
    EXPECT_FALSE(l.accepts(s)) << "should refuse " << s << "\n" << l.gbnf();
}

}  // namespace lacuna::testing

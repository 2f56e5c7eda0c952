// gbnf_printer.cpp — prints the grammar IR back as GBNF text that parses to the same language.
#include <cstdio>
#include <string>

#include "lacuna/grammar.h"

namespace lacuna {

namespace {

bool is_single_char(const GrammarElement& el) {
  return el.kind == GrammarElement::Kind::kChars && !el.any && !el.negated &&
         el.ranges.size() == 1 && el.ranges[0].lo == el.ranges[0].hi;
}

void append_char(std::string& out, uint32_t cp, bool in_class) {
  char buf[16];
  if (cp == '\\' || cp == '"' || (in_class && (cp == ']' || cp == '[' || cp == '-'))) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp == '\n') {
    out += "\\n";
  } else if (cp == '\t') {
    out += "\\t";
  } else if (cp == '\r') {
    out += "\\r";
  } else if (cp < 0x20 || cp == 0x7F || (in_class && cp == '^')) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    out += buf;
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    out += buf;
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    out += buf;
  }
}

void append_token(std::string& out, const GrammarElement& el) {
  if (el.kind == GrammarElement::Kind::kTokenNot) out += '!';
  if (el.token >= 0) {
    out += "<[" + std::to_string(el.token) + "]>";
  } else {
    out += el.token_text;
  }
}

}  // namespace

std::string to_gbnf(const Grammar& grammar) {
  std::string out;
  const auto& rules = grammar.rules();
  for (const auto& rule : rules) {
    out += rule.name;
    out += " ::= ";
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      if (a > 0) out += " | ";
      const auto& alt = rule.alternatives[a];
      if (alt.empty()) out += "\"\"";
      for (size_t i = 0; i < alt.size(); ++i) {
        const GrammarElement& el = alt[i];
        if (i > 0) out += ' ';
        switch (el.kind) {
          case GrammarElement::Kind::kChars:
            if (el.any) {
              out += '.';
            } else if (is_single_char(el)) {
              out += '"';
              while (true) {
                append_char(out, alt[i].ranges[0].lo, false);
                if (i + 1 < alt.size() && is_single_char(alt[i + 1])) {
                  ++i;
                } else {
                  break;
                }
              }
              out += '"';
            } else {
              out += el.negated ? "[^" : "[";
              for (const auto& r : el.ranges) {
                append_char(out, r.lo, true);
                if (r.hi != r.lo) {
                  out += '-';
                  append_char(out, r.hi, true);
                }
              }
              out += ']';
            }
            break;
          case GrammarElement::Kind::kRuleRef:
            out += rules.at(el.rule).name;
            break;
          case GrammarElement::Kind::kToken:
          case GrammarElement::Kind::kTokenNot:
            append_token(out, el);
            break;
        }
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace lacuna

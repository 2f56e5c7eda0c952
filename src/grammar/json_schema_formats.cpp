// json_schema_formats.cpp — grammars for the string formats of JSON Schema (`format`):
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// dates and times (RFC 3339), durations, uuid, email, hostname, IPv4/IPv6, URIs.
#include <map>
#include <string>

#include "grammar/json_schema_parts.h"

namespace lacuna::schema_detail {
namespace {

std::string date(gbnf::RuleSet& r) {
  // Days per month are checked; 29 February is accepted in every year.
  return r.add(
      "date",
      "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | "
      "\"3\" [01]) | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02\" "
      "\"-\" (\"0\" [1-9] | [12] [0-9]))");
}

std::string time(gbnf::RuleSet& r) {
  return r.add("time",
               "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" "
               "[0-9]+)? ([zZ] | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])");
}

std::string ipv4(gbnf::RuleSet& r) {
  std::string octet = r.add(
      "dec-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]");
  return r.add("ipv4", octet + " \".\" " + octet + " \".\" " + octet + " \".\" " + octet);
}

std::string ipv6(gbnf::RuleSet& r) {
  std::string h16 = r.add("h16", "[0-9a-fA-F]{1,4}");
  std::string ls32 = r.add("ls32", h16 + " \":\" " + h16 + " | " + ipv4(r));
  std::string hc = "(" + h16 + " \":\")";
  auto head = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    if (n == 0) return "(" + h16 + ")?";
    return "(" + hc + "{0," + std::to_string(n) + "} " + h16 + ")?";
  };
  std::string body = hc + "{6} " + ls32;
  body += " | \"::\" " + hc + "{5} " + ls32;
  body += " | " + head(0) + " \"::\" " + hc + "{4} " + ls32;
  body += " | " + head(1) + " \"::\" " + hc + "{3} " + ls32;
  body += " | " + head(2) + " \"::\" " + hc + "{2} " + ls32;
  body += " | " + head(3) + " \"::\" " + h16 + " \":\" " + ls32;
  body += " | " + head(4) + " \"::\" " + ls32;
  body += " | " + head(5) + " \"::\" " + h16;
  body += " | " + head(6) + " \"::\"";
  return r.add("ipv6", body);
}

std::string hostname(gbnf::RuleSet& r) {
  std::string label = r.add("host-label", "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?");
  return r.add("hostname", label + " (\".\" " + label + ")*");
}

std::string duration(gbnf::RuleSet& r) {
  std::string sec = r.add("dur-second", "[0-9]+ \"S\"");
  std::string min = r.add("dur-minute", "[0-9]+ \"M\" " + sec + "?");
  std::string hour = r.add("dur-hour", "[0-9]+ \"H\" " + min + "?");
  std::string tim = r.add("dur-time", "\"T\" (" + hour + " | " + min + " | " + sec + ")");
  std::string day = r.add("dur-day", "[0-9]+ \"D\"");
  std::string month = r.add("dur-month", "[0-9]+ \"M\" " + day + "?");
  std::string year = r.add("dur-year", "[0-9]+ \"Y\" " + month + "?");
  return r.add("duration", "\"P\" ((" + day + " | " + month + " | " + year + ") " + tim + "? | " +
                               tim + " | [0-9]+ \"W\")");
}

// Characters of a URI outside percent-encodings (RFC 3986 unreserved, reserved).
const char* kUriChar = "[a-zA-Z0-9._~:/?#@!$&'()*+,;=\\x5B\\x5D-]";

std::string uri_chars(gbnf::RuleSet& r) {
  return r.add("uri-char", std::string(kUriChar) + " | \"%\" [0-9a-fA-F] [0-9a-fA-F]");
}

}  // namespace

std::string format_content(const std::string& format, gbnf::RuleSet& r) {
  if (format == "date") return date(r);
  if (format == "time") return time(r);
  if (format == "date-time") return r.add("date-time", date(r) + " [tT] " + time(r));
  if (format == "duration") return duration(r);
  if (format == "uuid") {
    return r.add("uuid",
                 "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
                 "\"-\" [0-9a-fA-F]{12}");
  }
  if (format == "ipv4") return ipv4(r);
  if (format == "ipv6") return ipv6(r);
  if (format == "hostname") return hostname(r);
  if (format == "email") {
    std::string atom = r.add("email-atom", "[a-zA-Z0-9!#$%&'*+=?^_`{|}~\\x2F-]+");
    return r.add("email", atom + " (\".\" " + atom + ")* \"@\" " + hostname(r));
  }
  // IRIs (RFC 3987): URI characters and non-ASCII characters from U+00A0.
  bool iri = format == "iri" || format == "iri-reference";
  std::string chars =
      iri ? r.add("iri-char", uri_chars(r) + " | [\\u00A0-\\U0010FFFF]") : uri_chars(r);
  std::string absolute = "[a-zA-Z] [a-zA-Z0-9+.-]* \":\" " + chars + "*";
  if (format == "uri" || format == "iri") return r.add(format, absolute);
  if (format == "uri-reference" || format == "iri-reference") {
    // A reference is absolute, or relative: then its first segment holds no ':' (RFC 3986
    // 4.2), so "://" is not a URI reference.
    std::string first =
        r.add(iri ? "iri-first-char" : "uri-first-char",
              "[a-zA-Z0-9._~@!$&'()*+,;=\\x5B\\x5D-] | \"%\" [0-9a-fA-F] [0-9a-fA-F]" +
                  std::string(iri ? " | [\\u00A0-\\U0010FFFF]" : ""));
    return r.add(format, absolute + " | " + first + "* ([/?#] " + chars + "*)?");
  }
  return "";
}

}  // namespace lacuna::schema_detail

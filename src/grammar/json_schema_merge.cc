#include "grammar/json_schema_merge.h"

#include <cmath>
#include <set>

#include "base/error.h"
#include "grammar/json_numbers.h"

namespace deepinfer::grammar {

using json = nlohmann::ordered_json;

bool is_annotation(const std::string& k) {
  static const std::set<std::string> a = {
      "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
      "writeOnly", "$schema", "$id", "id", "$anchor", "$vocabulary", "contentMediaType",
      "contentEncoding", "contentSchema", "$defs", "definitions", "example", "nullable",
      "discriminator", "xml", "externalDocs"};
  return a.count(k) > 0;
}

namespace {

json normalize_numbers(const json& v) {
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0)
      return json(static_cast<int64_t>(d));
    return v;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& x : v) out.push_back(normalize_numbers(x));
    return out;
  }
  if (v.is_object()) {
    json out = json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = normalize_numbers(it.value());
    return out;
  }
  return v;
}

nlohmann::json sorted(const json& v) { return nlohmann::json::parse(normalize_numbers(v).dump()); }

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  THROW(kUnsupported) << "JSON Schema at '" << path << "': " << what << " is not supported";
}

int exact_compare(const NumberLiterals& lits, const json& a, const json& b, const std::string& path,
                  const std::string& k) {
  const std::string where = "JSON Schema at '" + path + "': '" + k + "'";
  CHECK(a.is_number() && b.is_number()) << where << " must be a number";
  return compare(lits.exact(a, k, where), lits.exact(b, k, where));
}

json all_of(const json& a, const json& b) {
  if (a == true) return b;
  if (b == true) return a;
  if (a == b) return a;
  return json{{"allOf", json::array({a, b})}};
}

json merge(json a, const json& b, const std::string& path, const NumberLiterals& lits) {
  if (b == true) return a;
  if (b == false) return false;
  if (a == false) return false;
  CHECK(b.is_object()) << "JSON Schema at '" << path << "': a schema must be an object or a boolean";
  if (a.contains("unevaluatedProperties") || b.contains("unevaluatedProperties"))
    unsupported(path, "'unevaluatedProperties' combined through allOf/$ref/anyOf");
  // Array keywords interact too (items applies after the same schema's prefixItems only).
  const bool a_pre = a.contains("prefixItems"), b_pre = b.contains("prefixItems");
  const bool a_arr = a_pre || a.contains("items"), b_arr = b_pre || b.contains("items");
  if ((a_pre || b_pre) && a_arr && b_arr) {
    if ((a.contains("items") && a["items"].is_array()) || (b.contains("items") && b["items"].is_array()))
      unsupported(path, "allOf combining tuple-form 'items'");
    json aPre = a.value("prefixItems", json::array()), bPre = b.value("prefixItems", json::array());
    json aI = a.value("items", json(true)), bI = b.value("items", json(true));
    json pre = json::array();
    for (size_t i = 0; i < std::max(aPre.size(), bPre.size()); ++i)
      pre.push_back(all_of(i < aPre.size() ? aPre[i] : aI, i < bPre.size() ? bPre[i] : bI));
    a["prefixItems"] = pre;
    json items = all_of(aI, bI);
    if (items != true) a["items"] = items; else a.erase("items");
  }
  const bool arrays_merged = (a_pre || b_pre) && a_arr && b_arr;
  // Object keywords interact (additionalProperties refers to its own schema's properties).
  const bool a_obj = a.contains("properties") || a.contains("additionalProperties") || a.contains("patternProperties");
  const bool b_obj = b.contains("properties") || b.contains("additionalProperties") || b.contains("patternProperties");
  if (a_obj && b_obj) {
    if (a.contains("patternProperties") || b.contains("patternProperties"))
      unsupported(path, "allOf combining patternProperties with other property keywords");
    json aP = a.value("properties", json::object()), bP = b.value("properties", json::object());
    json aA = a.value("additionalProperties", json(true)), bA = b.value("additionalProperties", json(true));
    json props = json::object();
    for (auto it = aP.begin(); it != aP.end(); ++it)
      props[it.key()] = all_of(it.value(), bP.contains(it.key()) ? bP[it.key()] : bA);
    for (auto it = bP.begin(); it != bP.end(); ++it)
      if (!aP.contains(it.key())) props[it.key()] = all_of(aA, it.value());
    a["properties"] = props;
    json add = all_of(aA, bA);
    if (add != true) a["additionalProperties"] = add;
  }
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (is_annotation(k) && k != "$defs" && k != "definitions") continue;
    if (a_obj && b_obj && (k == "properties" || k == "additionalProperties")) continue;
    if (arrays_merged && (k == "prefixItems" || k == "items")) continue;
    if (!a.contains(k)) { a[k] = v; continue; }
    json& x = a[k];
    if (x == v) continue;
    if (k == "type") {
      auto set_of = [](const json& t) {
        std::set<std::string> s;
        if (t.is_array()) for (const auto& e : t) s.insert(e.get<std::string>());
        else s.insert(t.get<std::string>());
        if (s.count("number")) s.insert("integer");
        return s;
      };
      auto sa = set_of(x), sb = set_of(v);
      json out = json::array();
      for (const auto& t : sa)
        if (sb.count(t)) out.push_back(t);
      // "number" in one and only "integer" in the other leaves "integer" (number dropped above).
      x = out;
    } else if (k == "properties") {
      for (auto p = v.begin(); p != v.end(); ++p)
        x[p.key()] = x.contains(p.key()) ? all_of(x[p.key()], p.value()) : p.value();
    } else if (k == "required") {
      for (const auto& r : v)
        if (std::find(x.begin(), x.end(), r) == x.end()) x.push_back(r);
    } else if (k == "items" || k == "additionalProperties" || k == "additionalItems" || k == "unevaluatedProperties") {
      if (x.is_array() || v.is_array()) unsupported(path, "allOf combining tuple-form 'items'");
      x = all_of(x, v);
    } else if (k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties" ||
               (k == "exclusiveMinimum" && x.is_number() && v.is_number())) {
      if (exact_compare(lits, v, x, path, k) > 0) x = v;
    } else if (k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties" ||
               (k == "exclusiveMaximum" && x.is_number() && v.is_number())) {
      if (exact_compare(lits, v, x, path, k) < 0) x = v;
    } else if (k == "pattern") {
      if (!a.contains(kExtraPatterns)) a[kExtraPatterns] = json::array();
      a[kExtraPatterns].push_back(v);
    } else if (k == kExtraPatterns) {
      for (const auto& p : v) x.push_back(p);
    } else if (k == "enum") {
      json out = json::array();
      for (const auto& e : x) {
        bool found = false;
        for (const auto& f : v) found = found || json_equal(e, f);
        if (found) out.push_back(e);
      }
      x = out;
    } else if (k == "const") {
      if (!json_equal(x, v)) { a.erase("const"); a["enum"] = json::array(); }
    } else if (k == "anyOf") {
      if (x.size() * v.size() > 64) unsupported(path, "allOf of several large anyOf");
      json out = json::array();
      for (const auto& e : x)
        for (const auto& f : v) out.push_back(all_of(e, f));
      x = out;
    } else if (k == "$defs" || k == "definitions") {
      continue;
    } else if (k == "format" || k == "oneOf" || k == "prefixItems" || k == "exclusiveMinimum" || k == "multipleOf" ||
               k == "exclusiveMaximum" || k == "patternProperties" || k == "uniqueItems") {
      unsupported(path, "allOf with two different '" + k + "'");
    }
    // Other keywords do not constrain instances here; keep the first.
  }
  return a;
}

}  // namespace

std::string canonical_dump(const json& v) { return normalize_numbers(v).dump(); }

bool json_equal(const json& a, const json& b) { return sorted(a) == sorted(b); }

const json& resolve_ref(const std::string& ref, const json& root, const std::string& path) {
  if (ref == "#") return root;
  if (ref.rfind("#/", 0) != 0) unsupported(path, "$ref '" + ref + "' (only local JSON pointers)");
  std::string ptr;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size()) {
      ptr += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      ptr += ref[i];
    }
  }
  try {
    return root.at(json::json_pointer(ptr));
  } catch (const json::exception&) {
    THROW(kInvalidInput) << "JSON Schema at '" << path << "': $ref '" << ref << "' does not resolve";
  }
}

json flatten_all_of(const json& s, const json& root, const std::string& path, int depth,
                    const NumberLiterals* literals) {
  static const NumberLiterals kNone;
  const NumberLiterals& lits = literals ? *literals : kNone;
  if (!s.is_object()) return s;
  CHECK_KIND(kUnsupported, depth < 32) << "JSON Schema at '" << path << "': $ref/allOf nesting too deep (recursive allOf)";
  if (!s.contains("$ref") && !s.contains("allOf")) return s;
  json out = s;
  out.erase("$ref");
  out.erase("allOf");
  std::vector<json> parts;
  if (s.contains("$ref")) {
    CHECK(s["$ref"].is_string()) << "JSON Schema at '" << path << "': $ref must be a string";
    parts.push_back(resolve_ref(s["$ref"].get<std::string>(), root, path));
  }
  if (s.contains("allOf")) {
    CHECK(s["allOf"].is_array()) << "JSON Schema at '" << path << "': allOf must be an array";
    for (const auto& p : s["allOf"]) parts.push_back(p);
  }
  for (const auto& p : parts) {
    json f = flatten_all_of(p, root, path, depth + 1, literals);
    out = merge(out, f, path, lits);
    if (out == false) return out;
  }
  return out;
}

namespace {

std::set<std::string> literal_types(const json& s) {
  std::vector<json> vals;
  if (s.contains("const")) vals.push_back(s["const"]);
  else for (const auto& v : s["enum"]) vals.push_back(v);
  std::set<std::string> out;
  for (const auto& v : vals) {
    if (v.is_null()) out.insert("null");
    else if (v.is_boolean()) out.insert("boolean");
    else if (v.is_number()) out.insert("number");
    else if (v.is_string()) out.insert("string");
    else if (v.is_array()) out.insert("array");
    else out.insert("object");
  }
  return out;
}

std::set<std::string> branch_types(const json& s) {
  if (!s.is_object()) return {"null", "boolean", "number", "string", "array", "object"};
  if (s.contains("const") || s.contains("enum")) return literal_types(s);
  if (!s.contains("type") || s.contains("anyOf") || s.contains("oneOf"))
    return {"null", "boolean", "number", "string", "array", "object"};
  std::set<std::string> out;
  auto add = [&](const std::string& t) { out.insert(t == "integer" ? "number" : t); };
  if (s["type"].is_array()) for (const auto& t : s["type"]) add(t.get<std::string>());
  else add(s["type"].get<std::string>());
  return out;
}

std::vector<json> literals(const json& s) {
  if (s.contains("const")) return {s["const"]};
  return std::vector<json>(s["enum"].begin(), s["enum"].end());
}

bool literals_disjoint(const std::vector<json>& a, const std::vector<json>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (json_equal(x, y)) return false;
  return true;
}

bool has_literals(const json& s) { return s.is_object() && (s.contains("const") || s.contains("enum")); }

bool pair_disjoint(const json& a, const json& b, const json& root) {
  auto ta = branch_types(a), tb = branch_types(b);
  bool overlap = false;
  for (const auto& t : ta) overlap = overlap || tb.count(t);
  if (!overlap) return true;
  if (has_literals(a) && has_literals(b) && literals_disjoint(literals(a), literals(b))) return true;
  // The rules below separate objects only, so the branches may share no other type.
  for (const auto& t : ta)
    if (t != "object" && tb.count(t)) return false;
  // A property one branch requires and the other forbids (additionalProperties: false, not
  // declared, no patternProperties; or declared as false).
  auto forbids = [](const json& s, const std::string& k) {
    if (!s.is_object()) return false;
    if (s.contains("properties") && s["properties"].contains(k)) return s["properties"][k] == false;
    return s.contains("additionalProperties") && s["additionalProperties"] == false &&
           !s.contains("patternProperties");
  };
  auto requires_forbidden = [&](const json& x, const json& y) {
    if (!x.is_object() || !x.contains("required")) return false;
    for (const auto& r : x["required"])
      if (r.is_string() && forbids(y, r.get<std::string>())) return true;
    return false;
  };
  if (requires_forbidden(a, b) || requires_forbidden(b, a)) return true;
  // Discriminator: a property required by both whose literal sets are disjoint.
  if (!a.is_object() || !b.is_object() || !a.contains("properties") || !b.contains("properties")) return false;
  if (!a.contains("required") || !b.contains("required")) return false;
  for (auto it = a["properties"].begin(); it != a["properties"].end(); ++it) {
    const std::string& k = it.key();
    if (!b["properties"].contains(k)) continue;
    auto req = [&](const json& s) { return std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end(); };
    if (!req(a) || !req(b)) continue;
    json pa = flatten_all_of(it.value(), root, "#"), pb = flatten_all_of(b["properties"][k], root, "#");
    if (has_literals(pa) && has_literals(pb) && literals_disjoint(literals(pa), literals(pb))) return true;
  }
  return false;
}

}  // namespace

bool provably_disjoint(const std::vector<json>& branches, const json& root) {
  for (size_t i = 0; i < branches.size(); ++i)
    for (size_t j = i + 1; j < branches.size(); ++j)
      if (!pair_disjoint(branches[i], branches[j], root)) return false;
  return true;
}

}  // namespace deepinfer::grammar

// Keys: typed access to one config.json object with errors that name the key. Internal to
// the config parser (model_config.cc, model_config_v41.cc).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer {

using nlohmann::json;

// `prefix` + key is the name in messages.
class Keys {
 public:
  Keys(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  // Present and not null.
  bool has(const std::string& key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  bool is_null(const std::string& key) const { return obj_.contains(key) && obj_[key].is_null(); }
  const json& at(const std::string& key) const { return obj_[key]; }
  std::string name(const std::string& key) const { return prefix_ + key; }

  int64_t integer(const std::string& key) const {
    CHECK(has(key)) << "config: required key '" << name(key) << "' is missing";
    return to_int(key, obj_[key]);
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return has(key) ? to_int(key, obj_[key]) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    CHECK(obj_[key].is_number()) << "config: '" << name(key) << "' must be a number, got "
                                 << obj_[key].dump();
    return obj_[key].get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    CHECK(obj_[key].is_boolean()) << "config: '" << name(key) << "' must be true or false, got "
                                  << obj_[key].dump();
    return obj_[key].get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    CHECK(obj_[key].is_string()) << "config: '" << name(key) << "' must be a string, got "
                                 << obj_[key].dump();
    return obj_[key].get<std::string>();
  }
  const json& array(const std::string& key) const {
    CHECK(obj_[key].is_array()) << "config: '" << name(key) << "' must be a list, got "
                                << obj_[key].dump();
    return obj_[key];
  }
  const json& object(const std::string& key) const {
    CHECK(obj_[key].is_object()) << "config: '" << name(key) << "' must be an object, got "
                                 << obj_[key].dump();
    return obj_[key];
  }
  int64_t to_int(const std::string& key, const json& v) const {
    const bool integral_float =
        v.is_number_float() && std::isfinite(v.get<double>()) &&
        v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 9e15;
    CHECK(v.is_number_integer() || integral_float)
        << "config: '" << name(key) << "' must be an integer, got " << v.dump();
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }

 private:
  const json& obj_;
  std::string prefix_;
};

// A list of integers (layer ids); the whole list must be integers.
inline std::vector<int64_t> int_list(const Keys& k, const std::string& key) {
  std::vector<int64_t> out;
  if (!k.has(key)) return out;
  for (const json& v : k.array(key)) out.push_back(k.to_int(key, v));
  return out;
}

}  // namespace deepinfer

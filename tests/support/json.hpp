// SPDX-License-Identifier: MIT
// A small JSON reader for the tests (trace_test reads the trace files clbuf writes): objects,
// arrays, strings, numbers, true, false and null, by recursive descent. Strict: anything else,
// or anything after the value, throws std::runtime_error naming the offset, so a file that is
// not JSON fails the test that reads it.
#ifndef CLBUF_TESTS_SUPPORT_JSON_HPP
#define CLBUF_TESTS_SUPPORT_JSON_HPP

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace clbuf_test {

struct Json {
  enum Kind { null, boolean, number, string, array, object };
  Kind kind = null;
  bool flag = false;
  double value = 0;
  std::string text;
  std::vector<Json> items;                            // an array's
  std::vector<std::pair<std::string, Json>> members;  // an object's, in order

  /// The member `key` of an object, or null when there is none (or this is no object).
  const Json* find(const std::string& key) const {
    for (const auto& member : members) {
      if (member.first == key) return &member.second;
    }
    return nullptr;
  }
  /// The text of member `key` ("" when absent or not a string).
  std::string text_of(const std::string& key) const {
    const Json* found = find(key);
    return found != nullptr && found->kind == string ? found->text : std::string();
  }
  /// The number of member `key` (`otherwise` when absent or not a number).
  double number_of(const std::string& key, double otherwise = -1) const {
    const Json* found = find(key);
    return found != nullptr && found->kind == number ? found->value : otherwise;
  }
};

class JsonReader {
 public:
  /// `text` as one JSON value. @throws std::runtime_error when it is not exactly one.
  static Json parse(const std::string& text) {
    JsonReader reader(text);
    Json value = reader.value();
    reader.space();
    if (reader.at_ != text.size()) reader.error("text after the value");
    return value;
  }

  /// The file at `path` as one JSON value.
  static Json parse_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::stringstream text;
    text << in.rdbuf();
    return parse(text.str());
  }

 private:
  explicit JsonReader(const std::string& text) : text_(text) {}

  [[noreturn]] void error(const std::string& what) const {
    throw std::runtime_error("not JSON at offset " + std::to_string(at_) + ": " + what);
  }

  void space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }

  char peek() {
    space();
    if (at_ >= text_.size()) error("unexpected end");
    return text_[at_];
  }

  void expect(char c) {
    if (peek() != c) error(std::string("expected '") + c + "'");
    ++at_;
  }

  Json value() {
    const char c = peek();
    if (c == '{') return object();
    if (c == '[') return array();
    Json json;
    if (c == '"') {
      json.kind = Json::string;
      json.text = string();
    } else if (literal("true") || literal("false")) {
      json.kind = Json::boolean;
      json.flag = text_[at_ - 1] == 'e' && text_[at_ - 2] == 'u';
    } else if (literal("null")) {
      json.kind = Json::null;
    } else {
      json.kind = Json::number;
      json.value = number();
    }
    return json;
  }

  bool literal(const char* word) {
    const std::string w(word);
    if (text_.compare(at_, w.size(), w) != 0) return false;
    at_ += w.size();
    return true;
  }

  double number() {
    const char* begin = text_.c_str() + at_;
    if (*begin != '-' && !std::isdigit(static_cast<unsigned char>(*begin))) error("no value");
    char* end = nullptr;
    const double value = std::strtod(begin, &end);
    at_ += static_cast<std::size_t>(end - begin);
    return value;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= text_.size()) error("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) error("unterminated escape");
      out += escape(text_[at_++]);
    }
  }

  std::string escape(char c) {
    switch (c) {
      case '"':
      case '\\':
      case '/':
        return std::string(1, c);
      case 'b':
        return "\b";
      case 'f':
        return "\f";
      case 'n':
        return "\n";
      case 'r':
        return "\r";
      case 't':
        return "\t";
      case 'u': {
        if (at_ + 4 > text_.size()) error("short \\u escape");
        const long code = std::strtol(text_.substr(at_, 4).c_str(), nullptr, 16);
        at_ += 4;
        return code < 0x80 ? std::string(1, static_cast<char>(code)) : std::string("?");
      }
      default:
        error("bad escape");
    }
  }

  Json array() {
    expect('[');
    Json json;
    json.kind = Json::array;
    if (peek() == ']') {
      ++at_;
      return json;
    }
    while (true) {
      json.items.push_back(value());
      if (peek() == ']') {
        ++at_;
        return json;
      }
      expect(',');
    }
  }

  Json object() {
    expect('{');
    Json json;
    json.kind = Json::object;
    if (peek() == '}') {
      ++at_;
      return json;
    }
    while (true) {
      if (peek() != '"') error("expected a member name");
      std::string key = string();
      expect(':');
      json.members.emplace_back(std::move(key), value());
      if (peek() == '}') {
        ++at_;
        return json;
      }
      expect(',');
    }
  }

  const std::string& text_;
  std::size_t at_ = 0;
};

}  // namespace clbuf_test

#endif  // CLBUF_TESTS_SUPPORT_JSON_HPP

// Reads pipeline.json (a small JSON reader: the runtime links no JSON
// library) and checks that it describes the running stage program.
#include "internal.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace gpipe {
namespace {

/// A JSON value: null, bool, number, string, array or object.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json *get(const std::string &key) const {
    auto it = object.find(key);
    return kind == Object && it != object.end() ? &it->second : nullptr;
  }
};

class Reader {
public:
  explicit Reader(const std::string &text) : s(text) {}
  bool parse(Json &out, std::string &err) {
    if (!value(out, 0) || (skip(), pos != s.size())) {
      err = "invalid JSON near byte " + std::to_string(pos);
      return false;
    }
    return true;
  }

private:
  void skip() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos])))
      ++pos;
  }
  bool literal(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(pos, n, word) != 0)
      return false;
    pos += n;
    return true;
  }
  bool str(std::string &out) {
    if (pos >= s.size() || s[pos] != '"')
      return false;
    for (++pos; pos < s.size(); ++pos) {
      char c = s[pos];
      if (c == '"') {
        ++pos;
        return true;
      }
      if (c == '\\') {
        if (++pos >= s.size())
          return false;
        char e = s[pos];
        if (e == 'u') { // keep \uXXXX escapes as they are: names only compare
          if (pos + 4 >= s.size())
            return false;
          out += "\\u" + s.substr(pos + 1, 4);
          pos += 4;
          continue;
        }
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *at = std::char_traits<char>::find(from, 8, e);
        if (!at)
          return false;
        out += to[at - from];
        continue;
      }
      out += c;
    }
    return false;
  }
  bool value(Json &v, int depth) {
    if (depth > 64)
      return false;
    skip();
    if (pos >= s.size())
      return false;
    char c = s[pos];
    if (c == '{') {
      v.kind = Json::Object;
      ++pos;
      skip();
      if (pos < s.size() && s[pos] == '}')
        return ++pos, true;
      while (true) {
        std::string key;
        skip();
        if (!str(key))
          return false;
        skip();
        if (pos >= s.size() || s[pos++] != ':')
          return false;
        if (!value(v.object[key], depth + 1))
          return false;
        skip();
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        return pos < s.size() && s[pos++] == '}';
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++pos;
      skip();
      if (pos < s.size() && s[pos] == ']')
        return ++pos, true;
      while (true) {
        v.array.emplace_back();
        if (!value(v.array.back(), depth + 1))
          return false;
        skip();
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        return pos < s.size() && s[pos++] == ']';
      }
    }
    if (c == '"')
      return v.kind = Json::String, str(v.string);
    if (literal("true"))
      return v.kind = Json::Bool, v.boolean = true, true;
    if (literal("false"))
      return v.kind = Json::Bool, true;
    if (literal("null"))
      return true;
    char *end = nullptr;
    v.number = std::strtod(s.c_str() + pos, &end);
    if (end == s.c_str() + pos)
      return false;
    v.kind = Json::Number;
    pos = static_cast<size_t>(end - s.c_str());
    return true;
  }

  const std::string &s;
  size_t pos = 0;
};

int64_t asInt(const Json *v) {
  return v && v->kind == Json::Number ? static_cast<int64_t>(v->number) : -1;
}

std::string asString(const Json *v) {
  return v && v->kind == Json::String ? v->string : std::string("?");
}

std::string actionName(const gp_action &a) {
  if (a.kind == GP_UPDATE)
    return "U";
  return (a.kind == GP_FORWARD ? "F" : "B") + std::to_string(a.microbatch);
}

} // namespace

bool checkPipelineFile(const gp_program &p, const std::string &path,
                       std::string &err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = "cannot read " + path;
    return false;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  Json root;
  std::string perr;
  if (!Reader(text).parse(root, perr)) {
    err = path + ": " + perr;
    return false;
  }
  auto mismatch = [&](const std::string &what) {
    err = path + " does not describe this executable: " + what +
          " (run the stage executables with the pipeline.json compiled with "
          "them)";
    return false;
  };
  if (asString(root.get("format")) != "gpipe-pipeline" ||
      asInt(root.get("version")) != 2)
    return mismatch("not a version 2 gpipe pipeline description");
  if (p.build_id && asString(root.get("build_id")) != p.build_id)
    return mismatch("build id " + asString(root.get("build_id")) +
                    ", this executable's is " + p.build_id);
  const Json *stages = root.get("stages");
  if (!stages || stages->kind != Json::Array ||
      static_cast<int64_t>(stages->array.size()) != p.num_stages)
    return mismatch(
        "it lists " +
        std::to_string(
            stages && stages->kind == Json::Array ? stages->array.size() : 0) +
        " stages, this executable is one of " + std::to_string(p.num_stages));
  if (asInt(root.get("microbatches")) != p.microbatches ||
      asInt(root.get("batch_size")) != p.batch_size)
    return mismatch("batch " + std::to_string(asInt(root.get("batch_size"))) +
                    " in " + std::to_string(asInt(root.get("microbatches"))) +
                    " micro-batches, this executable runs batch " +
                    std::to_string(p.batch_size) + " in " +
                    std::to_string(p.microbatches));
  const Json &me = stages->array[static_cast<size_t>(p.stage)];
  if (asInt(me.get("index")) != p.stage || asInt(me.get("rank")) != p.stage)
    return mismatch("its stage entry " + std::to_string(p.stage) +
                    " has index " + std::to_string(asInt(me.get("index"))) +
                    " and rank " + std::to_string(asInt(me.get("rank"))));
  // The schedule: the compiled action list, entry by entry.
  const Json *schedule = me.get("schedule");
  if (!schedule || schedule->kind != Json::Array ||
      static_cast<int64_t>(schedule->array.size()) != p.num_actions)
    return mismatch("its schedule does not have this executable's " +
                    std::to_string(p.num_actions) + " actions");
  for (int32_t i = 0; i < p.num_actions; ++i)
    if (asString(&schedule->array[static_cast<size_t>(i)]) !=
        actionName(p.actions[i]))
      return mismatch("schedule action " + std::to_string(i) + " is " +
                      asString(&schedule->array[static_cast<size_t>(i)]) +
                      ", this executable runs " + actionName(p.actions[i]));
  // The boundaries: every transfer this program makes, in order (programs
  // without a build id, written by hand, declare none).
  if (!p.build_id)
    return true;
  const Json *bounds = me.get("boundaries");
  if (!bounds || bounds->kind != Json::Array ||
      static_cast<int64_t>(bounds->array.size()) != p.num_transfers)
    return mismatch("its boundaries do not list this executable's " +
                    std::to_string(p.num_transfers) + " transfers");
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    const Json &b = bounds->array[static_cast<size_t>(i)];
    const gp_transfer &t = p.transfers[i];
    bool same =
        asString(b.get("direction")) == (t.is_send ? "send" : "recv") &&
        asString(b.get("phase")) == (t.backward ? "backward" : "forward") &&
        asInt(b.get("peer")) == t.peer && asInt(b.get("tag")) == t.tag &&
        asInt(b.get("bytes")) == t.bytes;
    if (!same)
      return mismatch(
          "boundary " + std::to_string(i) + " (" +
          asString(b.get("direction")) + " " + asString(b.get("phase")) +
          " peer " + std::to_string(asInt(b.get("peer"))) + " tag " +
          std::to_string(asInt(b.get("tag"))) +
          ") differs from this executable's " + (t.is_send ? "send" : "recv") +
          " " + (t.backward ? "backward" : "forward") + " peer " +
          std::to_string(t.peer) + " tag " + std::to_string(t.tag));
  }
  return true;
}

} // namespace gpipe

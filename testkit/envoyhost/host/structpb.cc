// JSON to google.protobuf.Struct (the filter's plugin_config, wrapped in an
// Any) and google.protobuf.Value bytes (dynamic metadata) back to JSON, by
// hand on the wire format: the host links no protobuf library.
#include <cstdio>
#include <cstring>
#include <string>

#include "structpb.h"

namespace envoyhost {
namespace {

// ---- JSON -> google.protobuf.Struct, and Value bytes -> JSON ---------------

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void lenField(std::string& out, int field, const std::string& b) {
  varint(out, (uint64_t(field) << 3) | 2);
  varint(out, b.size());
  out += b;
}

struct JsonParser {
  const std::string& s;
  size_t i{0};
  std::string err;
  void ws() {
    while (i < s.size() && isspace(static_cast<unsigned char>(s[i]))) {
      i++;
    }
  }
  bool fail(const std::string& m) {
    if (err.empty()) {
      err = m + " at offset " + std::to_string(i);
    }
    return false;
  }
  bool str(std::string& out) {
    if (i >= s.size() || s[i] != '"') {
      return fail("want a string");
    }
    i++;
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (c == '\\' && i < s.size()) {
        char e = s[i++];
        switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'u': {
          if (i + 4 > s.size()) {
            return fail("bad \\u escape");
          }
          unsigned cp = std::stoul(s.substr(i, 4), nullptr, 16);
          i += 4;
          if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
          } else {
            out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
            out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
          }
          break;
        }
        default:
          out.push_back(e);
        }
      } else {
        out.push_back(c);
      }
    }
    if (i >= s.size()) {
      return fail("unterminated string");
    }
    i++;
    return true;
  }
  // value encodes one JSON value as google.protobuf.Value.
  bool value(std::string& out) {
    ws();
    if (i >= s.size()) {
      return fail("unexpected end");
    }
    char c = s[i];
    if (c == '{') {
      std::string st;
      if (!object(st)) {
        return false;
      }
      lenField(out, 5, st);
      return true;
    }
    if (c == '[') {
      i++;
      std::string lv;
      ws();
      if (i < s.size() && s[i] == ']') {
        i++;
        lenField(out, 6, lv);
        return true;
      }
      for (;;) {
        std::string v;
        if (!value(v)) {
          return false;
        }
        lenField(lv, 1, v);
        ws();
        if (i < s.size() && s[i] == ',') {
          i++;
          continue;
        }
        if (i < s.size() && s[i] == ']') {
          i++;
          break;
        }
        return fail("want , or ]");
      }
      lenField(out, 6, lv);
      return true;
    }
    if (c == '"') {
      std::string v;
      if (!str(v)) {
        return false;
      }
      lenField(out, 3, v);
      return true;
    }
    if (s.compare(i, 4, "true") == 0 || s.compare(i, 5, "false") == 0) {
      bool b = s[i] == 't';
      i += b ? 4 : 5;
      varint(out, (4 << 3) | 0);
      varint(out, b ? 1 : 0);
      return true;
    }
    if (s.compare(i, 4, "null") == 0) {
      i += 4;
      varint(out, (1 << 3) | 0);
      varint(out, 0);
      return true;
    }
    size_t end = i;
    while (end < s.size() && (isdigit(static_cast<unsigned char>(s[end])) || s[end] == '-' ||
                              s[end] == '+' || s[end] == '.' || s[end] == 'e' || s[end] == 'E')) {
      end++;
    }
    if (end == i) {
      return fail("bad value");
    }
    double d = std::strtod(s.substr(i, end - i).c_str(), nullptr);
    i = end;
    varint(out, (2 << 3) | 1);
    uint64_t bits;
    memcpy(&bits, &d, 8);
    for (int k = 0; k < 8; k++) {
      out.push_back(static_cast<char>(bits >> (8 * k)));
    }
    return true;
  }
  // object encodes a JSON object as google.protobuf.Struct.
  bool object(std::string& out) {
    ws();
    if (i >= s.size() || s[i] != '{') {
      return fail("want {");
    }
    i++;
    ws();
    if (i < s.size() && s[i] == '}') {
      i++;
      return true;
    }
    for (;;) {
      ws();
      std::string k, v;
      if (!str(k)) {
        return false;
      }
      ws();
      if (i >= s.size() || s[i] != ':') {
        return fail("want :");
      }
      i++;
      if (!value(v)) {
        return false;
      }
      std::string entry;
      lenField(entry, 1, k);
      lenField(entry, 2, v);
      lenField(out, 1, entry);
      ws();
      if (i < s.size() && s[i] == ',') {
        i++;
        continue;
      }
      if (i < s.size() && s[i] == '}') {
        i++;
        return true;
      }
      return fail("want , or }");
    }
  }
};

} // namespace

bool configAny(const std::string& json, std::string* out, std::string* err) {
  JsonParser p{json, 0, ""};
  std::string st;
  if (!p.object(st)) {
    *err = p.err;
    return false;
  }
  p.ws();
  if (p.i != json.size()) {
    *err = "trailing text after the config object";
    return false;
  }
  out->clear();
  lenField(*out, 1, "type.googleapis.com/google.protobuf.Struct");
  lenField(*out, 2, st);
  return true;
}

std::string jsonStr(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      o += "\\\"";
      break;
    case '\\':
      o += "\\\\";
      break;
    case '\n':
      o += "\\n";
      break;
    case '\r':
      o += "\\r";
      break;
    case '\t':
      o += "\\t";
      break;
    default:
      if (c < 0x20 || c >= 0x7f) {
        char b[8];
        snprintf(b, sizeof b, "\\u%04x", c);
        o += b;
      } else {
        o.push_back(static_cast<char>(c));
      }
    }
  }
  return o + "\"";
}

struct Reader {
  const std::string& b;
  size_t i{0};
  bool ok{true};
  uint64_t var() {
    uint64_t v = 0;
    int sh = 0;
    while (i < b.size()) {
      uint8_t c = static_cast<uint8_t>(b[i++]);
      v |= uint64_t(c & 0x7f) << sh;
      if (!(c & 0x80)) {
        return v;
      }
      sh += 7;
    }
    ok = false;
    return 0;
  }
  std::string bytes() {
    uint64_t n = var();
    if (i + n > b.size()) {
      ok = false;
      return "";
    }
    std::string s = b.substr(i, n);
    i += n;
    return s;
  }
};

std::string valueJSON(const std::string& v);

std::string structJSON(const std::string& st) {
  Reader r{st};
  std::string o = "{";
  bool first = true;
  while (r.ok && r.i < st.size()) {
    uint64_t tag = r.var();
    if ((tag >> 3) != 1 || (tag & 7) != 2) {
      return "\"<bad struct>\"";
    }
    std::string entry = r.bytes();
    Reader e{entry};
    std::string k, val;
    while (e.ok && e.i < entry.size()) {
      uint64_t t = e.var();
      std::string f = e.bytes();
      if ((t >> 3) == 1) {
        k = f;
      } else {
        val = f;
      }
    }
    o += (first ? "" : ",") + jsonStr(k) + ":" + valueJSON(val);
    first = false;
  }
  return o + "}";
}

std::string valueJSON(const std::string& v) {
  Reader r{v};
  if (v.empty()) {
    return "null";
  }
  uint64_t tag = r.var();
  switch (tag >> 3) {
  case 1:
    return "null";
  case 2: {
    if (r.i + 8 > v.size()) {
      return "\"<bad number>\"";
    }
    uint64_t bits = 0;
    for (int k = 0; k < 8; k++) {
      bits |= uint64_t(static_cast<uint8_t>(v[r.i + k])) << (8 * k);
    }
    double d;
    memcpy(&d, &bits, 8);
    char b[64];
    snprintf(b, sizeof b, "%.17g", d);
    return b;
  }
  case 3:
    return jsonStr(r.bytes());
  case 4:
    return r.var() ? "true" : "false";
  case 5:
    return structJSON(r.bytes());
  case 6: {
    std::string lv = r.bytes();
    Reader l{lv};
    std::string o = "[";
    bool first = true;
    while (l.ok && l.i < lv.size()) {
      l.var();
      o += (first ? "" : ",") + valueJSON(l.bytes());
      first = false;
    }
    return o + "]";
  }
  }
  return "\"<bad value>\"";
}


} // namespace envoyhost

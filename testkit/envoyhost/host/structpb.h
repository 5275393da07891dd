// Hand-written protobuf wire encoding for the host (see structpb.cc).
#pragma once

#include <string>

namespace envoyhost {

// configAny encodes a JSON object as an Any holding a google.protobuf.Struct.
bool configAny(const std::string& json, std::string* out, std::string* err);
// jsonStr quotes s as a JSON string, bytes outside ASCII as \u00XX.
std::string jsonStr(const std::string& s);
// valueJSON renders google.protobuf.Value bytes as JSON.
std::string valueJSON(const std::string& v);

} // namespace envoyhost

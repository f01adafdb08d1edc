// Kubernetes' protobuf wire for lists and watches of Pods and Nodes (issue 33): the API server
// encodes a list in protobuf several times faster than in JSON, and most of `tessera status`'s
// time at 10,000 nodes (and of the scheduler's start-up at 80,000 pods) is the API server
// rendering JSON.
//
// An answer in `application/vnd.kubernetes.protobuf` is the 4 bytes "k8s\0" and a runtime.Unknown
// (its typeMeta, and in `raw` the object itself: here a core/v1 PodList or NodeList). The lists
// are decoded with libprotobuf from proto/k8s_core.proto, which declares only the fields tessera
// reads (the rest are skipped as unknown fields), and turned into the JSON shape the API server
// would have sent, with only those fields, so that the one decoder of each object
// (k8s/scheduler/objects.h DecodePod and DecodeNode) reads both wires and no decision has two
// homes. Times become RFC 3339 strings (seconds only, as the API server writes them), quantities
// their strings, absent optional fields stay absent.
//
// A watch in protobuf is a stream of frames: a 4-byte big-endian length, then a meta/v1
// WatchEvent *without* the envelope (the API server's stream serializer is the raw one), whose
// object.raw is the object *with* its envelope (apiserver pkg/endpoints/handlers/response.go
// watchEncoder.doEncode; codec_factory.go: StreamSerializer protoRawSerializer, Framer
// LengthDelimitedFramer). A frame becomes the JSON line the API server would have sent,
// {"type", "object"}, so the watch decoder's one reading of an event (watch.h) serves both wires.
// Captured from a real API server: fuzz/corpus/protobuf_watch.
//
// JSON stays the wire of everything else (CRDs have no protobuf encoding) and the fallback.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

// The Accept header asking for protobuf, with JSON as the API server's fallback (it answers JSON
// for resources without a protobuf encoding).
inline constexpr std::string_view kAcceptProtobuf =
    "application/vnd.kubernetes.protobuf, application/json";
inline constexpr std::string_view kProtobufContentType = "application/vnd.kubernetes.protobuf";

// `s` as Kubernetes' JSON writes a string of its protobuf: each byte that begins no valid UTF-8
// sequence becomes U+FFFD (Go's encoding/json), the rest stays.
std::string ValidUtf8(std::string_view s);

// Whether `body` starts with the protobuf envelope's magic ("k8s\0").
bool IsProtobufEnvelope(std::string_view body);

// A PodList or NodeList answer (envelope included) as the JSON the API server would send for it:
// {"kind", "apiVersion", "metadata": {"resourceVersion", "continue", "remainingItemCount"},
// "items": [...]}, with only the fields proto/k8s_core.proto declares. DataLoss naming what is
// wrong for anything else (no envelope, a kind other than PodList/NodeList, bytes that do not
// parse).
absl::StatusOr<nlohmann::json> ProtobufListToJson(std::string_view body);

// One object in the envelope (a watch event's object, or an answer to a GET) as the JSON the API
// server would send for it, kind and apiVersion included: a Pod or a Node as the items of
// ProtobufListToJson, a Status as ProtobufStatusAsJson. DataLoss naming what is wrong for
// anything else.
absl::StatusOr<nlohmann::json> ProtobufObjectToJson(std::string_view body);

// The largest watch frame read: client-go's streaming decoder stops at 16 MiB too
// (apimachinery pkg/runtime/serializer/streaming: maxBytes), and etcd keeps no object near it.
inline constexpr size_t kMaxProtobufWatchFrame = size_t{16} << 20;

// One frame of a protobuf watch (its bytes after the 4-byte length) as the JSON line the API
// server would have sent for it: {"type": "ADDED" (as written), "object": ProtobufObjectToJson of
// the object}. DataLoss naming what is wrong (no type, no object, an object that does not read).
absl::StatusOr<nlohmann::json> ProtobufWatchEventToJson(std::string_view frame);

// The continue token of a PodList or NodeList answer, read from the wire without decoding the
// items (the list's metadata is its first field), so that the next page can be asked for while
// this one is decoded; "" on the last page, nullopt when it cannot be read that way.
std::optional<std::string> PeekProtobufContinue(std::string_view body);

// An error answer in protobuf (a meta/v1 Status in the envelope) as the JSON the API server would
// have sent for it ({"kind": "Status", "status", "message", "reason", "code"}), so that
// StatusFromResponse reads it as it reads JSON errors; nullopt if `body` is not one.
std::optional<std::string> ProtobufStatusAsJson(std::string_view body);

}  // namespace tessera::k8s

#include "k8s/client/watch.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

std::vector<WatchEvent> FeedInPieces(const std::string& stream, size_t piece,
                                     bool protobuf = false) {
  WatchDecoder d(/*drop_managed_fields=*/false, protobuf);
  std::vector<WatchEvent> out;
  for (size_t i = 0; i < stream.size(); i += piece) {
    absl::Status s = d.Feed(std::string_view(stream).substr(i, piece),
                            [&](WatchEvent&& e) { out.push_back(std::move(e)); });
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(d.buffered(), 0u);
  return out;
}

TEST(WatchDecoder, SplitsLinesArrivingInAnyPieces) {
  std::string stream =
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\","
      "\"resourceVersion\":\"10\"}}}\n"
      "\r\n"
      "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\","
      "\"resourceVersion\":\"11\"}}}\r\n"
      "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":"
      "\"12\"}}}\n"
      "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":"
      "\"13\"}}}\n";
  for (size_t piece : {1, 2, 7, 64, 100000}) {
    // A client that asked for protobuf reads a JSON answer (the API server's fallback) the same.
    std::vector<WatchEvent> events = FeedInPieces(stream, piece, /*protobuf=*/piece % 2 == 0);
    ASSERT_EQ(events.size(), 4u) << piece;
    EXPECT_EQ(events[0].type, WatchEventType::kAdded);
    EXPECT_EQ(KeyOf(events[0].object), "ns/a");
    EXPECT_EQ(ResourceVersionOf(events[1].object), "11");
    EXPECT_EQ(events[2].type, WatchEventType::kBookmark);
    EXPECT_EQ(ResourceVersionOf(events[2].object), "12");
    EXPECT_EQ(events[3].type, WatchEventType::kDeleted);
    EXPECT_EQ(KeyOf(events[3].object), "n1");
  }
}

TEST(WatchDecoder, KeepsAnIncompleteLineUntilItsNewline) {
  WatchDecoder d;
  int n = 0;
  ASSERT_TRUE(d.Feed("{\"type\":\"ADDED\",\"obj", [&](WatchEvent&&) { ++n; }).ok());
  EXPECT_EQ(n, 0);
  EXPECT_GT(d.buffered(), 0u);
  ASSERT_TRUE(d.Feed("ect\":{}}\n{\"ty", [&](WatchEvent&&) { ++n; }).ok());
  EXPECT_EQ(n, 1);
}

TEST(WatchDecoder, RejectsLinesThatAreNotEvents) {
  WatchDecoder d;
  auto noop = [](WatchEvent&&) {};
  EXPECT_FALSE(d.Feed("not json\n", noop).ok());
  EXPECT_FALSE(WatchDecoder().Feed("{\"object\":{}}\n", noop).ok());
  EXPECT_FALSE(WatchDecoder().Feed("{\"type\":\"SURPRISE\",\"object\":{}}\n", noop).ok());
  EXPECT_FALSE(WatchDecoder().Feed("{\"type\":\"ADDED\"}\n", noop).ok());
}

std::string Captured(const std::string& name) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/fuzz/corpus/protobuf_watch/" + name,
                   std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A watch of pods in protobuf as a real API server (v1.37.2) sent it: a pod created, labelled,
// deleted (MODIFIED twice: the deletion's own update first), then a bookmark. Read the same in
// any pieces.
TEST(WatchDecoder, ReadsAProtobufStreamFromTheApiServerInAnyPieces) {
  const std::string stream = Captured("pods-added-modified-deleted-bookmark.bin");
  ASSERT_EQ(stream.size(), 5278u);
  std::vector<WatchEvent> whole;
  for (size_t piece : {1, 3, 4, 5, 1000, 100000}) {
    SCOPED_TRACE(piece);
    std::vector<WatchEvent> events = FeedInPieces(stream, piece, /*protobuf=*/true);
    ASSERT_EQ(events.size(), 5u);
    std::vector<WatchEventType> types;
    for (const WatchEvent& e : events) types.push_back(e.type);
    EXPECT_EQ(types,
              (std::vector<WatchEventType>{WatchEventType::kAdded, WatchEventType::kModified,
                                           WatchEventType::kModified, WatchEventType::kDeleted,
                                           WatchEventType::kBookmark}));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(KeyOf(events[i].object), "default/p1");
    EXPECT_FALSE(events[0].object["metadata"]["labels"].contains("x"));
    EXPECT_EQ(events[1].object["metadata"]["labels"]["x"], "y");
    EXPECT_EQ(events[0].object["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m");
    EXPECT_EQ(events[0].object["spec"]["schedulerName"], "none");
    EXPECT_TRUE(events[3].object["metadata"].contains("deletionTimestamp"));
    EXPECT_LT(std::stoll(ResourceVersionOf(events[0].object)),
              std::stoll(ResourceVersionOf(events[3].object)));
    EXPECT_FALSE(ResourceVersionOf(events[4].object).empty());
    if (whole.empty()) {
      whole = std::move(events);
    } else {
      for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(events[i].object, whole[i].object);
    }
  }
  // Without protobuf allowed, the same bytes are not JSON lines.
  WatchDecoder json_only;
  EXPECT_FALSE(json_only.Feed(stream + "\n", [](WatchEvent&&) {}).ok());
}

TEST(WatchDecoder, RefusesProtobufFramesThatAreNotEventsOrTooLong) {
  auto noop = [](WatchEvent&&) {};
  WatchDecoder d(false, /*protobuf=*/true);
  // 16 MiB + 1 announced: refused as soon as the length is read, before the bytes arrive.
  EXPECT_THAT(d.Feed(std::string("\x01\x00\x00\x01", 4), noop).message(),
              ::testing::HasSubstr("a protobuf frame of 16777217 bytes"));
  WatchDecoder garbage(false, true);
  EXPECT_THAT(garbage.Feed(std::string("\x00\x00\x00\x02\x0a\xff", 6), noop).message(),
              ::testing::HasSubstr("not a WatchEvent"));
  // A frame cut short waits for the rest.
  const std::string stream = Captured("nodes-initial-events-bookmark.bin");
  WatchDecoder cut(false, true);
  int n = 0;
  ASSERT_TRUE(cut.Feed(std::string_view(stream).substr(0, 100), [&](WatchEvent&&) { ++n; }).ok());
  EXPECT_EQ(n, 0);
  EXPECT_EQ(cut.buffered(), 100u);
  EXPECT_TRUE(cut.protobuf());
  ASSERT_TRUE(cut.Feed(std::string_view(stream).substr(100), [&](WatchEvent&&) { ++n; }).ok());
  EXPECT_EQ(n, 2);  // the node, then the bookmark that ends the initial events
  EXPECT_EQ(cut.buffered(), 0u);
}

TEST(ParseApiJson, CanSkipManagedFieldsWhileParsing) {
  std::string pod = R"({"metadata":{"name":"p","managedFields":[{"manager":"kubectl","fieldsV1":)"
                    R"({"f:spec":{}}}],"labels":{"managedFields":"a label, kept"}},"spec":{}})";
  absl::StatusOr<nlohmann::json> full = ParseApiJson(pod, false);
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE((*full)["metadata"].contains("managedFields"));
  absl::StatusOr<nlohmann::json> lean = ParseApiJson(pod, true);
  ASSERT_TRUE(lean.ok());
  EXPECT_FALSE((*lean)["metadata"].contains("managedFields"));
  EXPECT_EQ((*lean)["metadata"]["name"], "p");
  EXPECT_EQ((*lean)["metadata"]["labels"]["managedFields"], "a label, kept");
  EXPECT_FALSE(ParseApiJson("{oops", true).ok());
  WatchDecoder d(/*drop_managed_fields=*/true);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(
      d.Feed(R"({"type":"ADDED","object":)" + std::string(pod) + "}\n", [&](WatchEvent&& e) {
         events.push_back(std::move(e));
       }).ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].object["metadata"].contains("managedFields"));
}

TEST(TooOld, InStreamErrorWithCode410OrReasonExpiredOrGone) {
  auto line = [](const std::string& obj) {
    return DecodeWatchLine("{\"type\":\"ERROR\",\"object\":" + obj + "}").value();
  };
  EXPECT_TRUE(IsTooOld(line(R"j({"kind":"Status","apiVersion":"v1","status":"Failure",
      "message":"too old resource version: 1 (4217)","reason":"Expired","code":410})j")));
  EXPECT_TRUE(IsTooOld(line(R"({"kind":"Status","reason":"Gone","message":"x"})")));
  EXPECT_TRUE(IsTooOld(line(R"({"kind":"Status","code":410})")));
  EXPECT_FALSE(IsTooOld(line(R"({"kind":"Status","code":500,"reason":"InternalError"})")));
  // An ADDED object that happens to carry code 410 is not an error.
  WatchEvent added = DecodeWatchLine(R"({"type":"ADDED","object":{"code":410}})").value();
  EXPECT_FALSE(IsTooOld(added));
  // The body of an HTTP 410 answer.
  EXPECT_TRUE(IsTooOldStatus(nlohmann::json::parse(R"({"kind":"Status","code":410})")));
}

}  // namespace
TEST(ReadListHead, ReadsTheMetadataBeforeTheItems) {
  std::optional<ListHead> head =
      ReadListHead(R"({"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"42",)"
                   R"("continue":"abc","remainingItemCount":7},"items":[{"metadata":{"name":"n1",)"
                   R"("resourceVersion":"9","continue":"not-this"}})");  // cut short: never read
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->resource_version, "42");
  EXPECT_EQ(head->continue_token, "abc");

  head = ReadListHead(R"({"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[]})");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->resource_version, "7");
  EXPECT_EQ(head->continue_token, "");  // the last page
}

TEST(ReadListHead, RefusesWhatItCannotReadFromTheHead) {
  // Items before the metadata: the caller must parse the whole page.
  EXPECT_FALSE(ReadListHead(R"({"items":[],"metadata":{"continue":"x"}})").has_value());
  EXPECT_FALSE(ReadListHead(R"({"kind":"List","items":[]})").has_value());
  EXPECT_FALSE(ReadListHead("not json").has_value());
  EXPECT_FALSE(ReadListHead(R"({"metadata":{"continue":)").has_value());
  // A nested "metadata" or "items" does not count.
  EXPECT_FALSE(ReadListHead(R"({"spec":{"metadata":{"continue":"x"}},"items":[]})").has_value());
}

}  // namespace tessera::k8s

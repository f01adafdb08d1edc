#include "k8s/client/events.h"

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

// 2026-12-03T15:04:05Z
const std::chrono::system_clock::time_point kNow =
    std::chrono::system_clock::from_time_t(1796310245);

TEST(Events, APodEventAsTheRecorderWritesIt) {
  ObjectRef pod = PodRef("team-a", "trainer-0", "uid-1");
  pod.resource_version = "42";
  const nlohmann::json e =
      EventJson({.object = pod, .reason = "GPUUnhealthy", .message = "GPU 3 lost"},
                {"tessera-agent", "node-a", "node-a"}, kNow);
  EXPECT_EQ(e["kind"], "Event");
  EXPECT_EQ(e["metadata"]["namespace"], "team-a");
  EXPECT_EQ(e["metadata"]["generateName"], "trainer-0.");
  EXPECT_FALSE(e["metadata"].contains("name"));
  EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(e["involvedObject"]["namespace"], "team-a");
  EXPECT_EQ(e["involvedObject"]["uid"], "uid-1");
  EXPECT_EQ(e["involvedObject"]["resourceVersion"], "42");
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["reason"], "GPUUnhealthy");
  EXPECT_EQ(e["source"]["component"], "tessera-agent");
  EXPECT_EQ(e["source"]["host"], "node-a");
  EXPECT_EQ(e["reportingInstance"], "node-a");
  EXPECT_EQ(e["firstTimestamp"], "2026-12-03T15:04:05Z");
  EXPECT_EQ(e["lastTimestamp"], "2026-12-03T15:04:05Z");
  EXPECT_EQ(e["count"], 1);
  EXPECT_FALSE(e.contains("action"));
}

TEST(Events, ANamedNormalEventForAClusterScopedObject) {
  const ObjectRef node{.kind = "Node", .name = "node-a", .uid = "u"};
  const std::string name = EventName(node, kNow);
  EXPECT_EQ(name.rfind("node-a.", 0), 0u) << name;
  const nlohmann::json e = EventJson(
      {.object = node, .reason = "GPURecovered", .message = "m", .type = "Normal", .action = "A"},
      {"tessera-scheduler", "tessera-0", ""}, kNow, name);
  EXPECT_EQ(e["metadata"]["name"], name);
  EXPECT_EQ(e["metadata"]["namespace"], "default");  // cluster-scoped objects' events live there
  EXPECT_FALSE(e["involvedObject"].contains("namespace"));
  EXPECT_FALSE(e["source"].contains("host"));
  EXPECT_EQ(e["type"], "Normal");
  EXPECT_EQ(e["action"], "A");
  EXPECT_EQ(EventsPath("default"), "/api/v1/namespaces/default/events");
}

}  // namespace
}  // namespace tessera::k8s

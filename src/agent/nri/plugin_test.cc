// The plugin's session against a runtime played by the test over a real unix socket: NRI's
// multiplexer and ttrpc as containerd frames them (the encoders are checked against Go's bytes in
// nri_api_test.cc), the calls in containerd's order.
#include "agent/nri/plugin.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "agent/nri/mux.h"
#include "agent/nri/ttrpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent::nri {
namespace {

using ::testing::HasSubstr;

// The runtime's end: listens, accepts the plugin, and talks to it.
class FakeRuntime {
 public:
  explicit FakeRuntime(std::string path) : path_(std::move(path)) {
    std::filesystem::remove(path_);
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
  }
  ~FakeRuntime() {
    CloseConnection();
    ::close(listen_fd_);
    std::filesystem::remove(path_);
  }

  bool Accept() {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) return false;
    fd_ = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    return fd_ >= 0;
  }
  void CloseConnection() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // The next complete ttrpc frame on `conn` (waits up to 10 s).
  std::optional<ttrpc::Frame> NextFrame(uint32_t conn) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      auto f = decoders_[conn].Next();
      if (!f.ok()) return std::nullopt;
      if (f->has_value()) return **f;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      char buf[8192];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return std::nullopt;
      demux_.Feed(std::string_view(buf, static_cast<size_t>(n)));
      while (true) {
        auto payload = demux_.Next();
        if (!payload.ok() || !payload->has_value()) break;
        max_payload_ = std::max(max_payload_, (*payload)->data.size());
        decoders_[(*payload)->conn].Feed((*payload)->data);
      }
    }
    return std::nullopt;
  }

  void Send(uint32_t conn, uint32_t stream, ttrpc::MessageType type, const std::string& data) {
    const std::string bytes = nrimux::Encode(conn, ttrpc::EncodeFrame(stream, type, data));
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // Reads the plugin's RegisterPlugin call and answers it (an error message refuses it).
  std::optional<ttrpc::Request> Register(const std::string& refuse = "") {
    std::optional<ttrpc::Frame> f = NextFrame(nrimux::kRuntimeServiceConn);
    if (!f || f->type != ttrpc::kRequest) return std::nullopt;
    absl::StatusOr<ttrpc::Request> r = ttrpc::DecodeRequest(f->data);
    if (!r.ok()) return std::nullopt;
    ttrpc::Response answer;
    if (!refuse.empty()) {
      answer.code = ttrpc::kInvalidArgument;
      answer.message = refuse;
    }
    Send(nrimux::kRuntimeServiceConn, f->stream_id, ttrpc::kResponse,
         ttrpc::EncodeResponse(answer));
    return *r;
  }

  // Calls the plugin's service and waits for the answer.
  std::optional<ttrpc::Response> Call(const std::string& method, const std::string& payload,
                                      const std::string& service = kPluginService) {
    const uint32_t stream = next_stream_;
    next_stream_ += 2;
    Send(nrimux::kPluginServiceConn, stream, ttrpc::kRequest,
         ttrpc::EncodeRequest({service, method, payload, 2'000'000'000, {}}));
    std::optional<ttrpc::Frame> f = NextFrame(nrimux::kPluginServiceConn);
    if (!f || f->type != ttrpc::kResponse || f->stream_id != stream) return std::nullopt;
    absl::StatusOr<ttrpc::Response> r = ttrpc::DecodeResponse(f->data);
    if (!r.ok()) return std::nullopt;
    return *r;
  }

  size_t max_payload() const { return max_payload_; }

 private:
  std::string path_;
  int listen_fd_ = -1;
  int fd_ = -1;
  nrimux::Demux demux_;
  std::map<uint32_t, ttrpc::FrameDecoder> decoders_;
  uint32_t next_stream_ = 1;
  size_t max_payload_ = 0;
};

class RecordingHandler : public NriHandler {
 public:
  absl::StatusOr<ContainerAdjustment> CreateContainer(const PodSandbox& pod,
                                                      const Container& c) override {
    created.push_back(pod.name + "/" + c.name);
    if (pod.name == "refused") return absl::NotFoundError("no such GPU here");
    ContainerAdjustment a;
    a.env.emplace_back("POD", pod.name);
    if (pod.name == "big") {
      for (int i = 0; i < 500; ++i)
        a.env.emplace_back("VAR_" + std::to_string(i), std::string(40, 'v'));
    }
    return a;
  }
  void Synchronize(const std::vector<PodSandbox>& pods,
                   const std::vector<Container>& containers) override {
    synced_pods = pods.size();
    synced_containers = containers.size();
    ++syncs;
  }
  void StopPodSandbox(const PodSandbox& pod) override { stopped.push_back(pod.name); }
  void RemovePodSandbox(const PodSandbox& pod) override { removed.push_back(pod.name); }

  std::vector<std::string> created, stopped, removed;
  size_t synced_pods = 0, synced_containers = 0;
  int syncs = 0;
};

std::string SocketPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

PodSandbox Pod(const std::string& name) {
  PodSandbox p;
  p.id = "sandbox-" + name;
  p.name = name;
  p.uid = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d";
  p.ns = "ns";
  return p;
}

Container Ctr(const std::string& name) {
  Container c;
  c.id = "ctr-" + name;
  c.name = name;
  return c;
}

TEST(NriPlugin, ASessionAsContainerdRunsIt) {
  const std::string path = SocketPath("nri_session.sock");
  FakeRuntime runtime(path);
  RecordingHandler handler;
  NriPlugin plugin(NriPluginOptions{path, "tessera", "50"}, handler);
  std::atomic<bool> stop{false};
  absl::Status served;
  std::thread t([&] { served = plugin.ServeOnce(stop); });

  ASSERT_TRUE(runtime.Accept());
  std::optional<ttrpc::Request> reg = runtime.Register();
  ASSERT_TRUE(reg.has_value());
  EXPECT_EQ(reg->service, "nri.pkg.api.v1alpha1.Runtime");
  EXPECT_EQ(reg->method, "RegisterPlugin");
  EXPECT_EQ(reg->payload, EncodeRegisterPluginRequest("tessera", "50", "v0.12.3"));

  std::optional<ttrpc::Response> configured = runtime.Call(
      "Configure", EncodeConfigureRequest({"", "containerd", "v2.4.2", "v0.12.3", 5000, 2000}));
  ASSERT_TRUE(configured.has_value());
  EXPECT_EQ(configured->code, ttrpc::kOk);
  EXPECT_EQ(configured->payload,
            EncodeConfigureResponse(EventBit(kCreateContainer) | EventBit(kStopPodSandbox) |
                                    EventBit(kRemovePodSandbox)));

  // Synchronize in two parts: the plugin answers `more` to the first and syncs once.
  std::optional<ttrpc::Response> part1 = runtime.Call(
      "Synchronize", EncodeSynchronizeRequest({{Pod("a"), Pod("b")}, {Ctr("a0")}, true}));
  ASSERT_TRUE(part1.has_value());
  EXPECT_EQ(part1->payload, EncodeSynchronizeResponse(true));
  EXPECT_EQ(handler.syncs, 0);
  std::optional<ttrpc::Response> part2 = runtime.Call(
      "Synchronize", EncodeSynchronizeRequest({{Pod("c")}, {Ctr("b0"), Ctr("c0")}, false}));
  ASSERT_TRUE(part2.has_value());
  EXPECT_EQ(part2->payload, EncodeSynchronizeResponse(false));
  EXPECT_EQ(handler.syncs, 1);
  EXPECT_EQ(handler.synced_pods, 3u);
  EXPECT_EQ(handler.synced_containers, 3u);

  std::optional<ttrpc::Response> created =
      runtime.Call("CreateContainer", EncodeCreateContainerRequest(Pod("p"), Ctr("main")));
  ASSERT_TRUE(created.has_value());
  EXPECT_EQ(created->code, ttrpc::kOk);
  ContainerAdjustment want;
  want.env = {{"POD", "p"}};
  EXPECT_EQ(created->payload, EncodeCreateContainerResponse(want));

  // A refusal reaches the runtime as the call's error (containerd fails the container with it).
  std::optional<ttrpc::Response> refused =
      runtime.Call("CreateContainer", EncodeCreateContainerRequest(Pod("refused"), Ctr("main")));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, ttrpc::kNotFound);
  EXPECT_EQ(refused->message, "no such GPU here");

  // An answer longer than one mux payload arrives whole, in payloads of at most 4096 bytes.
  std::optional<ttrpc::Response> big =
      runtime.Call("CreateContainer", EncodeCreateContainerRequest(Pod("big"), Ctr("main")));
  ASSERT_TRUE(big.has_value());
  EXPECT_GT(big->payload.size(), 4096u * 5);
  EXPECT_LE(runtime.max_payload(), 4096u);

  std::optional<ttrpc::Response> pod_stopped =
      runtime.Call("StopPodSandbox", EncodeCreateContainerRequest(Pod("p"), Ctr("main")));
  ASSERT_TRUE(pod_stopped.has_value());
  EXPECT_EQ(pod_stopped->code, ttrpc::kOk);
  EXPECT_EQ(handler.stopped, std::vector<std::string>{"p"});
  EXPECT_TRUE(handler.removed.empty());
  std::optional<ttrpc::Response> removed =
      runtime.Call("RemovePodSandbox", EncodeCreateContainerRequest(Pod("p"), Ctr("main")));
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->code, ttrpc::kOk);
  EXPECT_EQ(handler.removed, std::vector<std::string>{"p"});

  std::optional<ttrpc::Response> unknown = runtime.Call("NoSuchCall", "");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->code, ttrpc::kUnimplemented);
  std::optional<ttrpc::Response> other_service = runtime.Call("Configure", "", "some.Other");
  ASSERT_TRUE(other_service.has_value());
  EXPECT_EQ(other_service->code, ttrpc::kUnimplemented);
  std::optional<ttrpc::Response> stopped = runtime.Call("StopContainer", "");
  ASSERT_TRUE(stopped.has_value());
  EXPECT_EQ(stopped->code, ttrpc::kOk);

  EXPECT_EQ(handler.created, (std::vector<std::string>{"p/main", "refused/main", "big/main"}));
  EXPECT_EQ(plugin.registered(), 1);
  EXPECT_EQ(plugin.create_calls(), 3);

  runtime.CloseConnection();  // containerd stops: the session ends cleanly
  t.join();
  EXPECT_TRUE(served.ok()) << served;
}

TEST(NriPlugin, ARefusedRegistrationEndsTheSession) {
  const std::string path = SocketPath("nri_refused.sock");
  FakeRuntime runtime(path);
  RecordingHandler handler;
  NriPlugin plugin(NriPluginOptions{path, "tessera", "50"}, handler);
  std::atomic<bool> stop{false};
  absl::Status served;
  std::thread t([&] { served = plugin.ServeOnce(stop); });
  ASSERT_TRUE(runtime.Accept());
  ASSERT_TRUE(runtime.Register("plugin name already taken").has_value());
  t.join();
  EXPECT_EQ(served.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(served.message(), HasSubstr("the runtime refused to register NRI plugin 50-tessera: "
                                          "plugin name already taken"));
}

TEST(NriPlugin, NoSocketSaysWhatToCheck) {
  RecordingHandler handler;
  NriPlugin plugin(NriPluginOptions{SocketPath("nri_absent.sock"), "tessera", "50"}, handler);
  std::atomic<bool> stop{false};
  absl::Status s = plugin.ServeOnce(stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("cannot connect to the NRI socket"));
  EXPECT_THAT(s.message(), HasSubstr("is NRI on in the container runtime?"));
}

TEST(NriPlugin, RunReconnectsWhenTheRuntimeRestarts) {
  const std::string path = SocketPath("nri_restart.sock");
  RecordingHandler handler;
  NriPluginOptions options{path, "tessera", "50"};
  options.reconnect_min = std::chrono::milliseconds(20);
  NriPlugin plugin(options, handler);
  std::atomic<bool> stop{false};
  std::thread t([&] { plugin.Run(stop); });
  {
    FakeRuntime runtime(path);  // the runtime comes up after the plugin started
    ASSERT_TRUE(runtime.Accept());
    ASSERT_TRUE(runtime.Register().has_value());
  }  // ... and goes away
  FakeRuntime again(path);
  ASSERT_TRUE(again.Accept());
  ASSERT_TRUE(again.Register().has_value());
  std::optional<ttrpc::Response> created =
      again.Call("CreateContainer", EncodeCreateContainerRequest(Pod("after"), Ctr("main")));
  ASSERT_TRUE(created.has_value());
  EXPECT_EQ(created->code, ttrpc::kOk);
  stop.store(true);
  t.join();
  EXPECT_GE(plugin.connections(), 2);
  EXPECT_EQ(plugin.registered(), 2);
}

}  // namespace
}  // namespace tessera::agent::nri

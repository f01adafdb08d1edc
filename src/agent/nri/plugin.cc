#include "agent/nri/plugin.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "agent/nri/mux.h"
#include "agent/nri/ttrpc.h"
#include "common/backoff.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace tessera::agent::nri {
namespace {

// The NRI API version these messages follow (nri_api.h).
constexpr char kNriVersion[] = "v0.12.3";

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

  absl::Status SendAll(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(StrCat("NRI socket: send: ", std::strerror(errno)));
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
};

absl::StatusOr<std::unique_ptr<Socket>> Connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(StrCat("NRI socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(StrCat("socket: ", std::strerror(errno)));
  auto socket = std::make_unique<Socket>(fd);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        StrCat("cannot connect to the NRI socket ", path, ": ", std::strerror(errno),
               " (is NRI on in the container runtime? containerd 2.x: "
               "[plugins.'io.containerd.nri.v1.nri'] disable = false, socket_path)"));
  }
  return socket;
}

// Responses whose message is empty when there is nothing to say.
const std::set<std::string>& EmptyAnswers() {
  static const std::set<std::string> kMethods = {
      "Shutdown",           "RunPodSandbox",        "StopPodSandbox",      "RemovePodSandbox",
      "UpdatePodSandbox",   "PostUpdatePodSandbox", "PostCreateContainer", "StartContainer",
      "PostStartContainer", "UpdateContainer",      "PostUpdateContainer", "StopContainer",
      "RemoveContainer",    "StateChange"};
  return kMethods;
}

}  // namespace

NriPlugin::NriPlugin(NriPluginOptions options, NriHandler& handler)
    : options_(std::move(options)), handler_(handler) {}

absl::Status NriPlugin::ServeOnce(const std::atomic<bool>& stop) {
  absl::StatusOr<std::unique_ptr<Socket>> connected = Connect(options_.socket_path);
  if (!connected.ok()) return connected.status();
  Socket& socket = **connected;
  ++connections_;

  auto send = [&](uint32_t conn, uint32_t stream, ttrpc::MessageType type,
                  const std::string& data) {
    return socket.SendAll(nrimux::Encode(conn, ttrpc::EncodeFrame(stream, type, data)));
  };
  // 1. Register (we are the client on the runtime-service connection; odd stream ids).
  ttrpc::Request reg;
  reg.service = kRuntimeService;
  reg.method = "RegisterPlugin";
  reg.payload = EncodeRegisterPluginRequest(options_.name, options_.index, kNriVersion);
  reg.timeout_nano = 5'000'000'000;
  if (absl::Status s =
          send(nrimux::kRuntimeServiceConn, 1, ttrpc::kRequest, ttrpc::EncodeRequest(reg));
      !s.ok()) {
    return s;
  }

  nrimux::Demux demux;
  std::map<uint32_t, ttrpc::FrameDecoder> decoders;
  SynchronizeRequest sync;  // parts collected until `more` is false
  char buffer[65536];
  while (!stop.load()) {
    pollfd p{socket.fd(), POLLIN, 0};
    const int ready = ::poll(&p, 1, 200);
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(StrCat("poll: ", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    const ssize_t n = ::recv(socket.fd(), buffer, sizeof(buffer), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(StrCat("NRI socket: recv: ", std::strerror(errno)));
    }
    if (n == 0) return absl::OkStatus();  // the runtime closed the connection
    demux.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    while (true) {
      absl::StatusOr<std::optional<nrimux::Payload>> payload = demux.Next();
      if (!payload.ok()) return payload.status();
      if (!payload->has_value()) break;
      ttrpc::FrameDecoder& decoder = decoders[(*payload)->conn];
      decoder.Feed((*payload)->data);
      while (true) {
        absl::StatusOr<std::optional<ttrpc::Frame>> frame = decoder.Next();
        if (!frame.ok()) return frame.status();
        if (!frame->has_value()) break;
        const ttrpc::Frame& f = **frame;
        const uint32_t conn = (*payload)->conn;
        if (conn == nrimux::kRuntimeServiceConn && f.type == ttrpc::kResponse) {
          absl::StatusOr<ttrpc::Response> r = ttrpc::DecodeResponse(f.data);
          if (!r.ok()) return r.status();
          if (r->code != ttrpc::kOk) {
            return absl::FailedPreconditionError(
                StrCat("the runtime refused to register NRI plugin ", options_.index, "-",
                       options_.name, ": ", r->message));
          }
          ++registered_;
          spdlog::info("NRI plugin {}-{} registered on {}", options_.index, options_.name,
                       options_.socket_path);
          continue;
        }
        if (conn != nrimux::kPluginServiceConn || f.type != ttrpc::kRequest) continue;
        absl::StatusOr<ttrpc::Request> request = ttrpc::DecodeRequest(f.data);
        if (!request.ok()) return request.status();
        ttrpc::Response answer;
        if (request->service != kPluginService) {
          answer.code = ttrpc::kUnimplemented;
          answer.message = StrCat("service ", request->service);
        } else if (request->method == "Configure") {
          absl::StatusOr<ConfigureRequest> c = DecodeConfigureRequest(request->payload);
          if (!c.ok()) return c.status();
          spdlog::info("NRI: configured by {} {} (NRI {}), request timeout {} ms", c->runtime_name,
                       c->runtime_version, c->nri_version.empty() ? "?" : c->nri_version,
                       c->request_timeout_ms);
          answer.payload = EncodeConfigureResponse(events_);
        } else if (request->method == "Synchronize") {
          absl::StatusOr<SynchronizeRequest> part = DecodeSynchronizeRequest(request->payload);
          if (!part.ok()) return part.status();
          for (PodSandbox& pod : part->pods) sync.pods.push_back(std::move(pod));
          for (Container& c : part->containers) sync.containers.push_back(std::move(c));
          if (!part->more) {
            handler_.Synchronize(sync.pods, sync.containers);
            sync = SynchronizeRequest{};
          }
          answer.payload = EncodeSynchronizeResponse(part->more);
        } else if (request->method == "CreateContainer") {
          absl::StatusOr<PodContainerRequest> req = DecodePodContainerRequest(request->payload);
          if (!req.ok()) return req.status();
          ++create_calls_;
          absl::StatusOr<ContainerAdjustment> adjust =
              req->container ? handler_.CreateContainer(req->pod, *req->container)
                             : absl::InvalidArgumentError("CreateContainer without a container");
          if (adjust.ok()) {
            answer.payload = EncodeCreateContainerResponse(*adjust);
          } else {
            answer.code = static_cast<int32_t>(adjust.status().code());
            answer.message = std::string(adjust.status().message());
          }
        } else if (request->method == "StopPodSandbox" || request->method == "RemovePodSandbox") {
          absl::StatusOr<PodContainerRequest> req = DecodePodContainerRequest(request->payload);
          if (!req.ok()) return req.status();
          if (request->method == "StopPodSandbox") {
            handler_.StopPodSandbox(req->pod);
          } else {
            handler_.RemovePodSandbox(req->pod);
          }
        } else if (EmptyAnswers().count(request->method) == 0) {
          answer.code = ttrpc::kUnimplemented;
          answer.message = StrCat("method ", request->method);
        }
        if (absl::Status s = send(nrimux::kPluginServiceConn, f.stream_id, ttrpc::kResponse,
                                  ttrpc::EncodeResponse(answer));
            !s.ok()) {
          return s;
        }
        if (request->method == "Shutdown") {
          spdlog::info("NRI: the runtime is shutting down");
        }
      }
    }
  }
  return absl::OkStatus();
}

void NriPlugin::Run(const std::atomic<bool>& stop) {
  // The one back-off formula, without jitter: reconnect_min, twice that, ... up to reconnect_max;
  // from reconnect_min again after a connection that registered.
  const Backoff::Params backoff{.initial = options_.reconnect_min,
                                .factor = 2.0,
                                .max = options_.reconnect_max,
                                .jitter = 0.0};
  int failures = 0;  // connections since the last one that registered
  std::string last;
  while (!stop.load()) {
    const int64_t registered_before = registered_.load();
    absl::Status s = ServeOnce(stop);
    if (stop.load()) break;
    if (registered_.load() > registered_before) failures = 0;
    const std::string why = s.ok() ? "the runtime closed the connection" : std::string(s.message());
    if (why != last) spdlog::warn("NRI: {}; reconnecting", why);
    last = why;
    const auto until =
        std::chrono::steady_clock::now() + Backoff::Delay(backoff, ++failures, /*jitter_draw=*/0.0);
    while (!stop.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace tessera::agent::nri

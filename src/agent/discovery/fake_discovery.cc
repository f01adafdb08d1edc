#include "agent/discovery/fake_discovery.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/discovery/fake_gpus_file.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/mig.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {

namespace {

// Holds an exclusive flock on `path` while alive (the description file's writers' lock).
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) (void)::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

int64_t FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_size;
}

}  // namespace

FakeDiscovery::FakeDiscovery(std::string path)
    : path_(std::move(path)), events_offset_(FileSize(FakeXidEventsPath(path_))) {}

std::string FakeDiscovery::Describe() const { return StrCat("GPU description file ", path_); }

std::string FakeDiscovery::Stamp() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return "";
  return StrCat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "/", st.st_size, "/", st.st_ino);
}

absl::StatusOr<NodeGpus> FakeDiscovery::Discover() {
  seen_stamp_ = Stamp();
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        StrCat("cannot read the GPU description file ", path_, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::FailedPreconditionError(
        StrCat("cannot read the GPU description file ", path_, ": ", std::strerror(errno)));
  }
  absl::StatusOr<NodeGpus> gpus = ParseFakeGpusFile(text.str(), path_);
  if (gpus.ok()) {
    std::lock_guard<std::mutex> lock(events_mu_);
    last_ = std::make_shared<const NodeGpus>(*gpus);
  }
  return gpus;
}

void FakeDiscovery::ReadEvents(const NodeGpus& gpus, WaitResult* result) {
  const std::string events_path = FakeXidEventsPath(path_);
  const int64_t size = FileSize(events_path);
  if (size < events_offset_) events_offset_ = 0;  // truncated: read it from the start
  if (size == events_offset_) return;
  std::ifstream in(events_path, std::ios::binary);
  in.seekg(events_offset_);
  std::string chunk(static_cast<size_t>(size - events_offset_), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(in.gcount()));
  const size_t end = chunk.rfind('\n');
  if (end == std::string::npos) return;  // a line still being written
  events_offset_ += static_cast<int64_t>(end + 1);
  size_t begin = 0;
  while (begin <= end) {
    const size_t nl = chunk.find('\n', begin);
    const std::string_view line(chunk.data() + begin, nl - begin);
    begin = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    absl::StatusOr<HealthEvent> e = ParseFakeXidEvent(line, gpus);
    if (e.ok()) {
      result->events.push_back(std::move(*e));
    } else {
      result->warnings.push_back(StrCat(events_path, ": ", e.status().message()));
    }
  }
}

absl::StatusOr<WaitResult> FakeDiscovery::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  WaitResult result;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(events_mu_);
      if (last_) ReadEvents(*last_, &result);
    }
    if (Stamp() != seen_stamp_) result.changed = true;
    if (result.changed || !result.events.empty() || !result.warnings.empty()) return result;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return result;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(100), deadline - now));
  }
}

absl::StatusOr<DiscoveredGpu> FakeDiscovery::Rewrite(
    const std::string& uuid, const std::string& what,
    const std::function<absl::Status(nlohmann::json& gpu)>& change) {
  std::lock_guard<std::mutex> lock(mig_mu_);
  FileLock file_lock(FakeGpusLockPath(path_));
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        StrCat("cannot read the GPU description file ", path_, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  // The file must be valid as it is: the change is checked by reading the result back.
  TESSERA_RETURN_IF_ERROR(ParseFakeGpusFile(text.str(), path_).status());
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InternalError(StrCat(path_, " is not JSON"));
  nlohmann::json* gpu = nullptr;
  for (nlohmann::json& g : doc["gpus"]) {
    if (g.value("uuid", "") == uuid) gpu = &g;
  }
  if (gpu == nullptr) return absl::NotFoundError(StrCat("no GPU ", uuid, " in ", path_));
  TESSERA_RETURN_IF_ERROR(change(*gpu));
  const std::string next = doc.dump(1);
  absl::StatusOr<NodeGpus> check = ParseFakeGpusFile(next, path_);
  if (!check.ok()) {
    return absl::FailedPreconditionError(StrCat(what, ": ", check.status().message()));
  }
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << next << "\n";
    if (!out.flush()) return absl::InternalError(StrCat("cannot write ", tmp));
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  for (const DiscoveredGpu& g : check->gpus) {
    if (g.spec.uuid == uuid) return g;
  }
  return absl::InternalError("the GPU vanished");
}

namespace {

// The GPU's MIG instances (its "mig" object must say enabled).
absl::StatusOr<nlohmann::json*> MigInstances(nlohmann::json& gpu, const std::string& uuid) {
  nlohmann::json& mig = gpu["mig"];
  if (!mig.is_object() || !mig.value("enabled", false)) {
    return absl::FailedPreconditionError(StrCat("GPU ", uuid, " is not in MIG mode"));
  }
  if (!mig.contains("instances") || !mig["instances"].is_array()) {
    mig["instances"] = nlohmann::json::array();
  }
  return &mig["instances"];
}

absl::Status EraseInstance(nlohmann::json& instances, const std::string& uuid,
                           const records::MigInstanceRecord& d) {
  for (auto it = instances.begin(); it != instances.end(); ++it) {
    if (it->value("profile", "") == d.profile && it->value("start", -1) == d.start) {
      instances.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(
      StrCat("GPU ", uuid, " has no MIG instance ", d.profile, "@", d.start, " to destroy"));
}

}  // namespace

absl::StatusOr<DiscoveredGpu> FakeDiscovery::ReconfigureMig(
    const std::string& uuid, const std::vector<records::MigInstanceRecord>& destroy,
    const records::MigInstanceRecord& create) {
  return Rewrite(
      uuid,
      StrCat("MIG instance ", create.profile, "@", create.start, " cannot be created on GPU ",
             uuid),
      [&](nlohmann::json& gpu) -> absl::Status {
        TESSERA_ASSIGN_OR_RETURN(nlohmann::json * instances, MigInstances(gpu, uuid));
        for (const records::MigInstanceRecord& d : destroy) {
          TESSERA_RETURN_IF_ERROR(EraseInstance(*instances, uuid, d));
        }
        instances->push_back({{"profile", create.profile},
                              {"start", create.start},
                              {"uuid", FakeMigUuid(uuid, create.profile, create.start)}});
        return absl::OkStatus();
      });
}

absl::StatusOr<DiscoveredGpu> FakeDiscovery::DestroyMig(
    const std::string& uuid, const records::MigInstanceRecord& instance) {
  return Rewrite(uuid,
                 StrCat("MIG instance ", instance.profile, "@", instance.start, " of GPU ", uuid,
                        " cannot be destroyed"),
                 [&](nlohmann::json& gpu) -> absl::Status {
                   TESSERA_ASSIGN_OR_RETURN(nlohmann::json * instances, MigInstances(gpu, uuid));
                   return EraseInstance(*instances, uuid, instance);
                 });
}

absl::StatusOr<DiscoveredGpu> FakeDiscovery::SetMigMode(const std::string& uuid, bool enabled) {
  return Rewrite(
      uuid, StrCat("MIG mode of GPU ", uuid, " cannot be turned ", enabled ? "on" : "off"),
      [&](nlohmann::json& gpu) -> absl::Status {
        nlohmann::json& mig = gpu["mig"];
        if (!mig.is_object() || !mig.value("capable", false)) {
          return absl::FailedPreconditionError(StrCat("GPU ", uuid, " is not MIG-capable"));
        }
        if (!enabled && !mig.value("instances", nlohmann::json::array()).empty()) {
          return absl::FailedPreconditionError(
              StrCat("GPU ", uuid, " still has MIG instances; destroy them first"));
        }
        mig["enabled"] = enabled;
        mig["instances"] = nlohmann::json::array();
        return absl::OkStatus();
      });
}

}  // namespace tessera::agent

#include "k8s/scheduler/scheduler.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <variant>

#include "common/status.h"
#include "common/strings.h"
#include "httplib.h"
#include "k8s/client/events.h"
#include "k8s/client/informer.h"
#include "k8s/client/leader_election.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/preemption.h"
#include "k8s/scheduler/queue_status.h"
#include "k8s/scheduler/queue_usage_writer.h"
#include "k8s/scheduler/scheduler_core.h"
#include "records/assignment.h"
#include "records/inventory.h"
#include "records/move.h"
#include "records/queue.h"
#include "records/reservation.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

using Clock = std::chrono::steady_clock;

// What the other threads hand to the scheduler thread.
struct LoopEvent {
  enum Kind {
    kNode,
    kPod,
    kNodesSynced,
    kPodsSynced,
    kBindResult,
    kLeading,
    kLostLease,
    kSlice,
    kDeviceClass,
    kClaim,
    kDraSynced,     // one of the three DRA informers listed
    kQueues,        // a Queue changed: the loop reads them all from the informer
    kQueuesListed,  // the same, and the Queues' first list is complete
    kBudget,
    kBudgetsSynced,
    kPodGroup,
    kPodGroupsSynced,
  };
  Kind kind = kNode;
  Change change = Change::kAdded;
  std::shared_ptr<const NodeInfo> node;
  std::shared_ptr<const PodInfo> pod;
  std::shared_ptr<const dra::SliceInfo> slice;
  std::shared_ptr<const dra::ClassInfo> device_class;
  std::shared_ptr<const dra::ClaimInfo> claim;
  std::shared_ptr<const BudgetInfo> budget;
  std::shared_ptr<const PodGroupInfo> pod_group;
  std::string key;
  uint64_t attempt = 0;
  absl::Status status;
};

class EventQueue {
 public:
  void Push(LoopEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Everything queued, waiting until `deadline` for something if nothing is.
  std::vector<LoopEvent> Take(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return !events_.empty(); });
    std::vector<LoopEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
    events_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<LoopEvent> events_;
};

Change ChangeOf(int informer_kind) {
  switch (informer_kind) {
    case 0:
      return Change::kAdded;
    case 1:
      return Change::kUpdated;
    default:
      return Change::kDeleted;
  }
}

// Reporter on the API server, asynchronously: PodScheduled conditions and Events.
class ApiReporter final : public Reporter {
 public:
  ApiReporter(AsyncClient& client, std::string component, std::string instance)
      : async_(client), component_(std::move(component)), instance_(std::move(instance)) {}

  void ReportWarning(const PodInfo& pod, std::string_view reason,
                     const std::string& message) override {
    Submit(HttpRequest{"POST", EventsPath(pod.ns),
                       EventJson(pod, reason, message, std::chrono::system_clock::now()).dump(),
                       "application/json"},
           pod.key);
  }

  void ReportNormal(const PodInfo& pod, std::string_view reason,
                    const std::string& message) override {
    Submit(
        HttpRequest{
            "POST", EventsPath(pod.ns),
            EventJson(pod, reason, message, std::chrono::system_clock::now(), "Normal").dump(),
            "application/json"},
        pod.key);
  }

  void ReportScaleUp(const PodInfo& pod, const std::string& message, bool helps) override {
    ReportNormal(pod, "ScaleUpSignal", message);
    WriteCondition(pod, kScaleUpCondition, helps, helps ? "NodesWouldHelp" : "NoTemplateHelps",
                   message);
  }

  void ReportReservation(const PodInfo& pod, bool held, const std::string& message,
                         int64_t since_unix) override {
    WriteCondition(pod, records::kReservedCondition, held, held ? "RoomReserved" : "Released",
                   message,
                   std::chrono::system_clock::time_point(std::chrono::seconds(since_unix)));
  }

  void ReportMoving(const PodInfo& pod, const std::string& message) override {
    WriteCondition(pod, records::kMovingCondition, true, "MovedForDefragmentation", message);
  }

  void ReportGangRestart(const PodInfo& pod, const std::string& message) override {
    WriteCondition(pod, kGangRestartCondition, true, "GangRestarting", message);
  }

  void ReportSpares(const std::string& node, const std::string& gpus) override {
    nlohmann::json value = gpus.empty() ? nlohmann::json(nullptr) : nlohmann::json(gpus);
    nlohmann::json patch = {
        {"metadata", {{"annotations", {{std::string(records::kSpareGpusAnnotation), value}}}}}};
    Submit(HttpRequest{"PATCH", StrCat("/api/v1/nodes/", node), patch.dump(),
                       std::string(ContentTypeOf(PatchType::kMerge))},
           StrCat("node ", node));
  }

  void ReportPodGroup(const PodGroupInfo& group, bool scheduled,
                      const std::string& message) override {
    // The whole list (a merge patch replaces it): the group's other conditions as they are, ours
    // replaced, its transition time kept when its status does not change.
    const std::string status = scheduled ? "True" : "False";
    nlohmann::json condition = {
        {"type", kPodGroupScheduledCondition},
        {"status", status},
        {"reason", scheduled ? "Scheduled" : "Unschedulable"},
        {"message", message},
        {"observedGeneration", group.generation},
        {"lastTransitionTime", FormatTime(std::chrono::system_clock::now())}};
    nlohmann::json conditions = nlohmann::json::array();
    for (const nlohmann::json& c : group.conditions) {
      if (c.value("type", "") != kPodGroupScheduledCondition) {
        conditions.push_back(c);
      } else if (c.value("status", "") == status && c.contains("lastTransitionTime")) {
        condition["lastTransitionTime"] = c["lastTransitionTime"];
      }
    }
    conditions.push_back(std::move(condition));
    nlohmann::json patch = {{"status", {{"conditions", std::move(conditions)}}}};
    Submit(HttpRequest{"PATCH",
                       StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", group.ns,
                              "/podgroups/", group.name, "/status"),
                       patch.dump(), std::string(ContentTypeOf(PatchType::kMerge))},
           StrCat("PodGroup ", group.key));
  }

  void ReportFailure(const PodInfo& pod, std::string_view reason, const std::string& message,
                     bool repeat) override {
    const auto now = std::chrono::system_clock::now();
    const std::string now_text = FormatTime(now);
    if (!repeat) WriteCondition(pod, "PodScheduled", false, reason, message, now);
    // One Event per distinct message; a repeat bumps its count (the event recorder's way).
    auto it = reported_.find(pod.key);
    if (repeat && it != reported_.end() && it->second.message == message) {
      ++it->second.count;
      nlohmann::json patch = {{"count", it->second.count}, {"lastTimestamp", now_text}};
      Submit(
          HttpRequest{"PATCH", StrCat("/api/v1/namespaces/", pod.ns, "/events/", it->second.name),
                      patch.dump(), std::string(ContentTypeOf(PatchType::kMerge))},
          pod.key);
      return;
    }
    if (reported_.size() > 200'000) reported_.clear();
    nlohmann::json event = EventJson(pod, "FailedScheduling", message, now);
    reported_[pod.key] = Reported{event["metadata"]["name"].get<std::string>(), message, 1};
    Submit(HttpRequest{"POST", EventsPath(pod.ns), event.dump(), "application/json"}, pod.key);
  }

 private:
  // A condition of ours on `pod` (`type`, status True or False, `reason`, `message`, the
  // transition at `since`): a strategic merge patch of its status, which merges the list by type
  // and keeps the pod's other conditions.
  void WriteCondition(
      const PodInfo& pod, std::string_view type, bool status, std::string_view reason,
      const std::string& message,
      std::chrono::system_clock::time_point since = std::chrono::system_clock::now()) {
    nlohmann::json patch = {
        {"status",
         {{"conditions", nlohmann::json::array({{{"type", type},
                                                 {"status", status ? "True" : "False"},
                                                 {"reason", reason},
                                                 {"message", message},
                                                 {"lastProbeTime", nullptr},
                                                 {"lastTransitionTime", FormatTime(since)}}})}}}};
    Submit(
        HttpRequest{"PATCH", StrCat("/api/v1/namespaces/", pod.ns, "/pods/", pod.name, "/status"),
                    patch.dump(), std::string(ContentTypeOf(PatchType::kStrategic))},
        pod.key);
  }

  struct Reported {
    std::string name;
    std::string message;
    int count = 1;
  };
  // A core/v1 Event (Warning unless `type` says otherwise) about `pod`, named as the event
  // recorder names them (a repeat PATCHes its count).
  nlohmann::json EventJson(const PodInfo& pod, std::string_view reason, const std::string& message,
                           std::chrono::system_clock::time_point now,
                           std::string_view type = "Warning") const {
    ObjectRef ref = PodRef(pod.ns, pod.name, pod.uid);
    ref.resource_version = pod.resource_version;
    const EventSpec spec{.object = ref,
                         .reason = std::string(reason),
                         .message = message,
                         .type = std::string(type),
                         .action = "Scheduling"};
    return k8s::EventJson(spec, EventSource{component_, instance_, ""}, now, EventName(ref, now));
  }

  void Submit(HttpRequest req, const std::string& key) {
    async_.Submit(req, [req, key](const HttpResponse& r) {
      if (r.ok() || r.status == 404) return;  // a pod deleted meanwhile needs no report
      spdlog::warn("reporting on {}: {}", key, FromAbsl(StatusFromResponse(req, r).message()));
    });
  }

  AsyncClient& async_;
  std::string component_;
  std::string instance_;
  absl::flat_hash_map<std::string, Reported> reported_;  // scheduler thread only
};

// /metrics, /healthz, /readyz on a small thread pool.
class HttpEndpoints {
 public:
  absl::Status Start(const std::string& address, int port, std::function<std::string()> metrics,
                     std::function<bool()> healthy, std::function<bool()> ready) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(2); };
    server_.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server_.Get("/healthz", [healthy](const httplib::Request&, httplib::Response& res) {
      bool ok = healthy();
      res.status = ok ? 200 : 503;
      res.set_content(ok ? "ok" : "the scheduler loop is stuck", "text/plain");
    });
    server_.Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
      bool ok = ready();
      res.status = ok ? 200 : 503;
      res.set_content(ok ? "ok" : "caches not synced yet", "text/plain");
    });
    if (port == 0) {
      port_ = server_.bind_to_any_port(address);
      if (port_ < 0) port_ = 0;
    } else if (server_.bind_to_port(address, port)) {
      port_ = port;
    }
    if (port_ <= 0) {
      return absl::UnavailableError(
          StrCat("cannot listen on ", address, ":", port, " for /metrics and /healthz"));
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    return absl::OkStatus();
  }
  int port() const { return port_; }
  ~HttpEndpoints() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace

void WriteSchedulerClientMetrics(const std::vector<const ListWatch*>& informers,
                                 const RequestCounts& requests, prometheus::Exposition& out) {
  struct Counter {
    const char* name;
    const char* help;
    int64_t (ListWatch::*get)() const;
  };
  const Counter counters[] = {
      {"tessera_scheduler_watch_lists_total", "Complete lists (initial and relists).",
       &ListWatch::lists},
      {"tessera_scheduler_watch_too_old_total",
       "Watches answered \"too old resource version\" (410), each followed by a relist.",
       &ListWatch::too_old},
      {"tessera_scheduler_watch_failures_total", "Lists or watches that failed and backed off.",
       &ListWatch::failures},
      {"tessera_scheduler_watch_events_total", "Watch events received.", &ListWatch::events},
  };
  for (const Counter& c : counters) {
    auto family = out.Family({c.name, prometheus::MetricType::kCounter, c.help, {"resource"}});
    for (const ListWatch* lw : informers) family.Add({lw->options().resource}, (lw->*c.get)());
  }
  requests.Write(out, "tessera_scheduler_api_requests_total");
}

Scheduler::Scheduler(ApiClient& client, SchedulerConfig config)
    : client_(client), config_(std::move(config)) {}

Scheduler::~Scheduler() = default;

absl::Status Scheduler::Run(const std::atomic<bool>& stop) {
  const auto started = Clock::now();
  if (config_.lease.identity.empty()) config_.lease.identity = DefaultIdentity();
  if (config_.leader_elect) TESSERA_RETURN_IF_ERROR(ValidateLeaderElection(config_.lease));
  EventQueue events;
  std::atomic<int64_t> heartbeat{Clock::now().time_since_epoch().count()};
  std::atomic<bool> ready{false};

  AsyncClientOptions wo;
  wo.max_in_flight = config_.bind_concurrency;
  wo.http2 = config_.http2;
  // One client for every write: binds, conditions and Events.
  AsyncClient writes(client_.transport(), wo);
  ApiReporter reporter(writes, config_.core.scheduler_name, config_.lease.identity);
  AnnotationBinder binder(writes,
                          [&events](const std::string& key, uint64_t attempt, absl::Status status) {
                            LoopEvent e;
                            e.kind = LoopEvent::kBindResult;
                            e.key = key;
                            e.attempt = attempt;
                            e.status = std::move(status);
                            events.Push(std::move(e));
                          });
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<SchedulerCore> core,
                           SchedulerCore::Create(config_.core, &binder, &reporter, &metrics_));
  // Each Queue's .status, from the same rows /metrics serves (queue_status.h).
  QueueStatusWriter queue_status(writes);
  // Fair share that remembers (queue_usage_writer.h): the usage's half-life; what Queue objects
  // say they held is taken once the pods are in (so a restart's gap counts as holding what the
  // queues then hold), and the leader writes it back at a bounded rate.
  core->queue_book().SetHalfLife(config_.queue_usage_half_life.count());
  QueueUsageWriter usage_writer(
      [&writes](const records::QueueUsageStatus& u, std::function<void(bool)> done) {
        HttpRequest req = QueueUsageRequest(u);
        writes.Submit(req, [req, done = std::move(done)](const HttpResponse& r) {
          if (!r.ok()) {
            spdlog::warn("writing a queue's usage: {}",
                         FromAbsl(StatusFromResponse(req, r).message()));
          }
          done(r.ok());
        });
      },
      config_.queue_usage_write_interval.count());
  // The usage the Queue objects say they held (latest per queue), until it is taken.
  absl::flat_hash_map<std::string, records::QueueUsageStatus> usage_read;
  ClaimBinder claim_binder(
      writes,
      [&events](const std::string& key, uint64_t attempt, absl::Status status) {
        LoopEvent e;
        e.kind = LoopEvent::kBindResult;
        e.key = key;
        e.attempt = attempt;
        e.status = std::move(status);
        events.Push(std::move(e));
      },
      &metrics_);
  // DRA mode: ResourceSlices, DeviceClasses and ResourceClaims (dra_allocator.h).
  std::vector<std::unique_ptr<ListWatch>> dra_informers;
  if (config_.core.dra) {
    core->EnableDra(&claim_binder);
    auto push = [&events](LoopEvent::Kind kind, int informer_kind, auto object, auto field) {
      LoopEvent le;
      le.kind = kind;
      le.change = ChangeOf(informer_kind);
      le.*field = std::move(object);
      events.Push(std::move(le));
    };
    auto synced = [&events] { events.Push(LoopEvent{LoopEvent::kDraSynced}); };
    auto make = [&]<typename T>(std::string resource, auto decode, LoopEvent::Kind kind,
                                std::shared_ptr<const T> LoopEvent::*field) {
      ListWatchOptions o;
      o.resource = resource;
      o.path = StrCat(dra::kResourceApi, "/", resource);
      dra_informers.push_back(std::make_unique<Informer<T>>(
          client_, o, decode, [push, synced, kind, field](typename Informer<T>::Event&& e) {
            if (e.kind == Informer<T>::Event::kSynced) {
              synced();
            } else {
              push(kind, static_cast<int>(e.kind), std::move(e.object), field);
            }
          }));
    };
    make.template operator()<dra::SliceInfo>(
        "resourceslices", [](const nlohmann::json& j) { return dra::DecodeSlice(j); },
        LoopEvent::kSlice, &LoopEvent::slice);
    make.template operator()<dra::ClassInfo>(
        "deviceclasses", [](const nlohmann::json& j) { return dra::DecodeClass(j); },
        LoopEvent::kDeviceClass, &LoopEvent::device_class);
    make.template operator()<dra::ClaimInfo>(
        "resourceclaims", [](const nlohmann::json& j) { return dra::DecodeClaim(j); },
        LoopEvent::kClaim, &LoopEvent::claim);
    spdlog::info("DRA mode: allocating ResourceClaims for devices of driver {}",
                 config_.core.dra_driver);
  }
  // Preemption and reclaim (preemption.h): evictions and nominations through the same client.
  ApiPreemptionWriter preemption_writer(writes);
  core->EnablePreemption(&preemption_writer);
  // An informer's events as loop events: each object as `kind` in `field`, the end of its first
  // full list as `synced`.
  auto forward = [&events]<typename T>(LoopEvent::Kind synced, LoopEvent::Kind kind,
                                       std::shared_ptr<const T> LoopEvent::*field) {
    return [&events, synced, kind, field](typename Informer<T>::Event&& e) {
      LoopEvent le;
      if (e.kind == Informer<T>::Event::kSynced) {
        le.kind = synced;
      } else {
        le.kind = kind;
        le.change = ChangeOf(static_cast<int>(e.kind));
        le.*field = std::move(e.object);
      }
      events.Push(std::move(le));
    };
  };
  // Queues: nothing is decided until they are listed (SchedulerCore::SetQueues). Without the
  // Queue CRD the API server answers 404: none here (every queue a pod names is implicit), asked
  // again every minute.
  core->SetQueues({}, false);
  ListWatchOptions queue_options;
  queue_options.resource = "queues";
  queue_options.path = std::string(records::kQueuesPath);
  queue_options.absent_retry = std::chrono::seconds(60);
  Informer<QueueInfo> queues(
      client_, queue_options, [](const nlohmann::json& j) { return DecodeQueue(j); },
      [&events](Informer<QueueInfo>::Event&& e) {
        // The end of the list is its own event: the informer counts the list (synced()) only
        // after this handler returns, so the loop must not read it from there.
        events.Push(LoopEvent{e.kind == Informer<QueueInfo>::Event::kSynced
                                  ? LoopEvent::kQueuesListed
                                  : LoopEvent::kQueues});
      });
  // PodDisruptionBudgets: preemption plans around the pods they protect (disruption_budgets.h),
  // and plans nothing until they are listed.
  core->SetBudgetsKnown(false);
  ListWatchOptions budget_options;
  budget_options.resource = "poddisruptionbudgets";
  budget_options.path = "/apis/policy/v1/poddisruptionbudgets";
  Informer<BudgetInfo> budgets(
      client_, budget_options, [](const nlohmann::json& j) { return DecodeBudget(j); },
      forward(LoopEvent::kBudgetsSynced, LoopEvent::kBudget, &LoopEvent::budget));

  // Upstream PodGroups (pod_groups.h). Without the GenericWorkload gate the API server does not
  // serve them (404): none here, asked again every minute.
  ListWatchOptions group_options;
  group_options.resource = "podgroups";
  group_options.path = std::string(kPodGroupsPath);
  group_options.absent_retry = std::chrono::seconds(60);
  Informer<PodGroupInfo> pod_groups(
      client_, group_options, [](const nlohmann::json& j) { return DecodePodGroup(j); },
      forward(LoopEvent::kPodGroupsSynced, LoopEvent::kPodGroup, &LoopEvent::pod_group));
  core->SetPodGroupsKnown(false);

  ListWatchOptions node_options;
  node_options.resource = "nodes";
  node_options.path = "/api/v1/nodes";
  node_options.label_selector = config_.node_selector;
  node_options.protobuf = config_.protobuf_wire;
  Informer<NodeInfo> nodes(
      client_, node_options, [](const nlohmann::json& j) { return DecodeNode(j); },
      [](const ProtobufValue& p) { return DecodeNode(p); },
      forward(LoopEvent::kNodesSynced, LoopEvent::kNode, &LoopEvent::node));
  ListWatchOptions pod_options;
  pod_options.resource = "pods";
  pod_options.path = "/api/v1/pods";
  // As kube-scheduler: finished pods hold nothing (leaving this selector reads as a deletion).
  pod_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  pod_options.protobuf = config_.protobuf_wire;
  Informer<PodInfo> pods(
      client_, pod_options, [](const nlohmann::json& j) { return DecodePod(j); },
      [](const ProtobufValue& p) { return DecodePod(p); },
      forward(LoopEvent::kPodsSynced, LoopEvent::kPod, &LoopEvent::pod));

  metrics_.SetBuild(config_.build);
  metrics_.SetExtra([this, &nodes, &pods, &queues, &budgets, &pod_groups,
                     &dra_informers](prometheus::Exposition& out) {
    std::vector<const ListWatch*> all = {&nodes, &pods, &queues, &budgets, &pod_groups};
    for (const auto& lw : dra_informers) all.push_back(lw.get());
    WriteSchedulerClientMetrics(all, client_.transport()->requests(), out);
  });
  HttpEndpoints http;
  TESSERA_RETURN_IF_ERROR(http.Start(
      config_.metrics_address, config_.metrics_port, [this] { return metrics_.Render(); },
      [&heartbeat] {
        auto last = Clock::time_point(Clock::duration(heartbeat.load()));
        return Clock::now() - last < std::chrono::seconds(30);
      },
      [&ready] { return ready.load(); }));
  spdlog::info("tessera scheduler {}: serving /metrics, /healthz and /readyz on http://{}:{}",
               config_.lease.identity, config_.metrics_address, http.port());

  nodes.Start();
  pods.Start();
  for (auto& lw : dra_informers) lw->Start();
  int dra_lists = 0;
  queues.Start();
  budgets.Start();
  pod_groups.Start();
  std::unique_ptr<LeaderElector> elector;
  bool leading = !config_.leader_elect;
  if (config_.leader_elect) {
    elector = std::make_unique<LeaderElector>(
        client_, config_.lease,
        LeaderElector::Callbacks{[&events] { events.Push(LoopEvent{LoopEvent::kLeading}); },
                                 [&events] { events.Push(LoopEvent{LoopEvent::kLostLease}); },
                                 [](const std::string& holder) {
                                   spdlog::info("leader election: the leader is now {}", holder);
                                 }});
    elector->Start();
  } else {
    spdlog::info("leader election is off: this replica schedules");
  }
  metrics_.is_leader = leading ? 1 : 0;

  absl::Status result = absl::OkStatus();
  auto last_publish = Clock::time_point();
  auto since_start = [&started] {
    return std::chrono::duration<double>(Clock::now() - started).count();
  };
  bool was_synced = false;
  bool decided = false;
  bool queues_listed = false;
  while (!stop.load()) {
    heartbeat = Clock::now().time_since_epoch().count();
    auto deadline = Clock::now() + std::chrono::milliseconds(500);
    if (leading && core->HasReadyWork()) {
      deadline = Clock::now();
    } else if (leading) {
      if (auto next = core->NextWakeup(); next && *next < deadline) deadline = *next;
    }
    std::vector<LoopEvent> batch = events.Take(deadline);
    bool lost = false;
    for (LoopEvent& e : batch) {
      switch (e.kind) {
        case LoopEvent::kNode:
          core->OnNode(e.change, std::move(e.node));
          break;
        case LoopEvent::kPod:
          core->OnPod(e.change, std::move(e.pod));
          break;
        case LoopEvent::kNodesSynced:
          core->SetSynced(true, false);
          break;
        case LoopEvent::kPodsSynced:
          core->SetSynced(false, true);
          break;
        case LoopEvent::kBindResult:
          core->OnBindResult(e.key, e.attempt, e.status);
          break;
        case LoopEvent::kLeading:
          leading = true;
          metrics_.is_leader = 1;
          spdlog::info("this replica leads: scheduling");
          break;
        case LoopEvent::kLostLease:
          lost = true;
          break;
        case LoopEvent::kSlice:
          core->OnSlice(e.change, std::move(e.slice));
          break;
        case LoopEvent::kDeviceClass:
          core->OnDeviceClass(e.change, std::move(e.device_class));
          break;
        case LoopEvent::kClaim:
          core->OnClaim(e.change, std::move(e.claim));
          break;
        case LoopEvent::kDraSynced:
          if (++dra_lists >= 3) core->SetDraSynced();
          break;
        case LoopEvent::kQueuesListed:
          queues_listed = true;
          [[fallthrough]];
        case LoopEvent::kQueues: {
          std::vector<core::QueueSpec> specs;
          for (const std::shared_ptr<const QueueInfo>& q : queues.List()) {
            if (q->error.empty()) {
              specs.push_back(q->spec);
            } else {
              spdlog::warn("queue {} is unusable: {}", q->spec.name, q->error);
            }
          }
          core->SetQueues(std::move(specs), queues_listed);
          if (config_.queue_usage_half_life.count() > 0) {
            for (const std::shared_ptr<const QueueInfo>& q : queues.List()) {
              if (!q->usage_error.empty()) {
                spdlog::warn("queue {}: its usage is not read back (it starts afresh): {}",
                             q->spec.name, q->usage_error);
              } else if (q->usage && q->usage->half_life_seconds * 1000 !=
                                         config_.queue_usage_half_life.count()) {
                spdlog::info(
                    "queue {}: its usage was kept with a half-life of {} s, not {} s; "
                    "it starts afresh",
                    q->spec.name, q->usage->half_life_seconds,
                    config_.queue_usage_half_life.count() / 1000);
              } else if (q->usage) {
                usage_read[q->spec.name] = *q->usage;
              }
            }
          }
          break;
        }
        case LoopEvent::kBudget:
          core->OnBudget(e.change, std::move(e.budget));
          break;
        case LoopEvent::kBudgetsSynced:
          core->SetBudgetsKnown(true);
          break;
        case LoopEvent::kPodGroup:
          core->OnPodGroup(e.change, std::move(e.pod_group));
          break;
        case LoopEvent::kPodGroupsSynced:
          core->SetPodGroupsKnown(true);
          break;
      }
    }
    if (lost) {
      metrics_.is_leader = 0;
      result = absl::AbortedError(
          "lost the leader lease; exiting so that a restart starts from the API server's state");
      break;
    }
    if (core->synced() && !was_synced) {
      was_synced = true;
      ready = true;
      spdlog::info("caches synced: {} nodes, {} pods ({:.2f} s after start)", nodes.size(),
                   pods.size(), since_start());
    }
    if (core->synced() && !usage_read.empty()) {
      // Usage read back once the pods are in (before any decision counts them).
      for (const auto& [queue, u] : usage_read) core->queue_book().RestoreUsage(u);
      usage_read.clear();
    }
    if (leading && core->ScheduleSome() > 0 && !decided) {
      decided = true;
      spdlog::info("first decisions {:.2f} s after start", since_start());
    }
    if (core->synced() && leading && config_.queue_usage_half_life.count() > 0) {
      usage_writer.MaybeWrite(
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count(),
          [&core] { return core->queue_book().UsageNow(); },
          [&queues](std::string_view q) { return queues.Get(std::string(q)) != nullptr; });
    }
    if (Clock::now() - last_publish >= std::chrono::seconds(1)) {
      core->PublishMetrics();
      if (leading && queues_listed)
        queue_status.Update(queues.List(), metrics_.queues(), Clock::now());
      last_publish = Clock::now();
    }
  }
  // Let binds in flight land before giving up the lease, so that the next leader sees them.
  if (!writes.Drain(std::chrono::seconds(10))) {
    spdlog::warn("stopping with writes still in flight");
  }
  if (elector) elector->Stop();
  for (auto& lw : dra_informers) lw->Stop();
  nodes.Stop();
  pods.Stop();
  queues.Stop();
  budgets.Stop();
  pod_groups.Stop();
  spdlog::info("tessera scheduler stopped");
  return result;
}

}  // namespace tessera::k8s

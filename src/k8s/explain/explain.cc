#include "k8s/explain/explain.h"

#include <algorithm>
#include <map>

#include "absl/time/time.h"
#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/plan/defrag.h"
#include "fmt/format.h"
#include "k8s/scheduler/gang_assembler.h"
#include "k8s/scheduler/queue.h"
#include "k8s/scheduler/queue_book.h"
#include "k8s/status/status.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

ExplainEvent ReadEvent(const json& e) {
  ExplainEvent x;
  x.type = JsonStringField(e, "type");
  x.reason = JsonStringField(e, "reason");
  x.message = JsonStringField(e, "message");
  x.last = JsonStringField(e, "lastTimestamp");
  if (x.last.empty()) x.last = JsonStringField(e, "eventTime");
  if (x.last.empty()) x.last = JsonStringField(JsonField(e, "metadata"), "creationTimestamp");
  if (const json& series = JsonField(e, "series"); series.is_object()) {
    const json& c = JsonField(series, "count");
    if (c.is_number_integer()) x.count = c.get<int>();
    if (std::string t = JsonStringField(series, "lastObservedTime"); !t.empty()) x.last = t;
  } else if (const json& c = JsonField(e, "count"); c.is_number_integer()) {
    x.count = c.get<int>();
  }
  return x;
}

// The queue's place of `pod` among the waiting pods of the scheduler, in the order it would try
// them now: SchedulingQueue ordered by the QueueBook, the scheduler's own two parts.
void Position(const ExplainInputs& in, const PodInfo& pod, const ClusterLedger& ledger,
              PodExplanation* e) {
  QueueBook book;
  book.SetSpecs(in.queues.value_or(std::vector<core::QueueSpec>{}), in.queues.has_value());
  CountQueues(in.snapshot, ledger, in.scheduler_name, &book);
  SchedulingQueue queue;
  queue.set_order(&book.set());
  int64_t seq = 0;
  for (const PodInfo* p : in.snapshot.PendingPods(in.scheduler_name)) {
    if (!p->input_error.empty() || p->gated) continue;
    queue.Push(p->key, p->priority, p->queue, ArrivalOfCreation(p->created, seq++));
  }
  e->waiting_pods = static_cast<int>(queue.size());
  for (int i = 1; std::optional<std::string> next = queue.Pop(); ++i) {
    if (*next == pod.key) {
      e->position = i;
      break;
    }
  }
  for (const QueueGauges& g : book.Gauges()) {
    if (g.queue != pod.queue) continue;
    e->queue_figures =
        StrCat("deserves ", FormatGpus(g.deserved[core::kQueueGpu]), " GPUs, fair share ",
               FormatGpus(g.fair_share[core::kQueueGpu]), ", holds ",
               FormatGpus(g.allocated[core::kQueueGpu]), ", borrows ",
               FormatGpus(g.borrowed[core::kQueueGpu]), ", its waiting pods ask ",
               FormatGpus(g.pending[core::kQueueGpu]), " (", g.pending_pods, " pods)");
    if (!g.usable) {
      std::string why;
      (void)book.set().Usable(g.queue, &why);
      e->queue_invalid = why;
    }
  }
}

// The engine's decision now, on the ledger a scheduler starting now would have.
void WhatIf(const ExplainInputs& in, const PodInfo& pod, ClusterLedger& ledger, PodExplanation* e) {
  core::PlacementResult r;
  if (pod.request.gang) {
    std::vector<const PodInfo*> members;
    std::vector<std::string> running;
    for (const PodInfo* p : in.snapshot.PendingPods(in.scheduler_name)) {
      if (GangAssembler::KeyOf(*p) == GangAssembler::KeyOf(pod) && p->input_error.empty()) {
        members.push_back(p);
      }
    }
    for (const PodInfo* p : in.snapshot.BoundPods()) {
      if (GangAssembler::KeyOf(*p) == GangAssembler::KeyOf(pod)) running.push_back(p->key);
    }
    const int present = static_cast<int>(members.size() + running.size());
    if (present < pod.request.gang->min_members()) {
      e->what_if = StrCat("gang ", pod.request.gang->name, " has ", present, " of the ",
                          pod.request.gang->min_members(),
                          " members it needs to start: the scheduler waits for the others");
      return;
    }
    std::vector<core::PlacementResult> rs =
        running.empty() ? ledger.DecideGang(members, GangAssembler::KeyOf(pod))
                        : ledger.DecideGangMembers(members, running, GangAssembler::KeyOf(pod));
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i]->key == pod.key) r = rs[i];
    }
  } else {
    r = ledger.Decide(pod);
  }
  e->what_if_fits = r.placed();
  e->never_fits = r.outcome == core::Outcome::kNeverFits;
  if (r.placed()) {
    e->what_if = StrCat("the engine would place it now at ",
                        plan::DescribePlacement(ledger.engine().cluster(), r.placement),
                        ": the scheduler has not tried it yet. Is a tessera scheduler with "
                        "schedulerName ",
                        in.scheduler_name,
                        " running and leading? (kubectl get pods -A -l "
                        "app.kubernetes.io/name=tessera-scheduler; its log)");
  } else {
    e->what_if = StrCat(e->never_fits ? "it can never fit this cluster: " : "it does not fit now: ",
                        r.reason);
  }
}

void Gang(const ExplainInputs& in, const PodInfo& pod, PodExplanation* e) {
  if (!pod.request.gang) return;
  e->gang = pod.request.gang->name;
  e->gang_size = pod.request.gang->size;
  e->gang_min = pod.request.gang->min_members();
  for (const auto& p : in.snapshot.pods()) {
    if (GangAssembler::KeyOf(*p) != GangAssembler::KeyOf(pod)) continue;
    e->members.push_back(GangMember{p->key, p->bound()    ? StrCat("bound to ", p->node_name)
                                            : p->deleting ? "being deleted"
                                                          : "waiting"});
  }
}

std::string Summary(const PodExplanation& e) {
  if (!e.node.empty()) return StrCat("not waiting: bound to node ", e.node);
  if (e.phase == "Succeeded" || e.phase == "Failed") return StrCat("not waiting: ", e.phase);
  if (!e.ours) {
    return StrCat(
        "its schedulerName is ", e.scheduler_name.empty() ? "(none)" : e.scheduler_name,
        ": this tessera scheduler does not schedule it (set spec.schedulerName: tessera)");
  }
  if (!e.input_error.empty()) return StrCat("its request cannot be read: ", e.input_error);
  if (!e.gates.empty()) {
    return StrCat("waiting for its scheduling gates to be removed: ", StrJoin(e.gates, ", "));
  }
  if (!e.gang.empty()) {
    int present = static_cast<int>(e.members.size());
    for (const GangMember& m : e.members) present -= m.state == "being deleted" ? 1 : 0;
    if (present < e.gang_min) {
      return StrCat("gang ", e.gang, " has ", present, " of the ", e.gang_min,
                    " members it needs to start; create the others");
    }
  }
  if (!e.nominated_node.empty()) {
    return StrCat("nominated to node ", e.nominated_node, ": waiting for ",
                  e.victims.empty() ? std::string("room being made there")
                                    : StrCat(e.victims.size(), " evicted pod(s) to end"));
  }
  if (!e.queue_invalid.empty()) return StrCat("its queue is unusable: ", e.queue_invalid);
  if (!e.scheduled_message.empty()) return e.scheduled_message;
  if (!e.what_if.empty()) return e.what_if;
  return "not tried by the scheduler yet";
}

}  // namespace

absl::StatusOr<PodExplanation> ExplainPod(const ExplainInputs& in) {
  std::shared_ptr<const PodInfo> pod = DecodePod(in.pod);
  if (pod->name.empty()) return absl::InvalidArgumentError("the object is not a Pod");
  PodExplanation e;
  e.pod = pod->key;
  e.phase = pod->phase;
  e.node = pod->node_name;
  e.scheduler_name = pod->scheduler_name;
  e.ours = pod->scheduler_name == in.scheduler_name;
  e.input_error = pod->input_error;
  e.ask = pod->input_error.empty() ? core::DescribeAsk(pod->request) : "(cannot be read)";
  e.queue = pod->queue;
  e.priority = pod->priority;
  e.nominated_node = pod->nominated_node;
  e.scale_up = pod->scale_up_message;
  e.unreadable = in.unreadable;
  e.waiting_seconds = pod->bound() ? -1 : SecondsSince(pod->created, in.now);
  if (const json& gates = JsonField(JsonField(in.pod, "spec"), "schedulingGates");
      gates.is_array()) {
    for (const json& g : gates) e.gates.push_back(JsonStringField(g, "name"));
  }
  if (const json& cs = JsonField(JsonField(in.pod, "status"), "conditions"); cs.is_array()) {
    for (const json& c : cs) {
      if (JsonStringField(c, "type") != "PodScheduled") continue;
      e.scheduled_status = JsonStringField(c, "status");
      e.scheduled_reason = JsonStringField(c, "reason");
      e.scheduled_message = JsonStringField(c, "message");
    }
  }
  for (const json& ev : in.events) e.events.push_back(ReadEvent(ev));
  std::stable_sort(e.events.begin(), e.events.end(),
                   [](const ExplainEvent& a, const ExplainEvent& b) { return a.last < b.last; });
  for (const ExplainEvent& ev : e.events) {
    if (ev.reason == "Defragmentation") e.defrag = ev.message;
  }
  // Victims: the scheduler's Preempted Events name the pod or its gang they make room for.
  const std::string for_pod = StrCat(" for pod ", pod->key, " (");
  const std::string gang_key = GangAssembler::KeyOf(*pod);
  const std::string for_gang = StrCat(" for gang ", gang_key, " (");
  for (const json& ev : in.other_events) {
    const std::string m = JsonStringField(ev, "message");
    if (JsonStringField(ev, "reason") != "Preempted") continue;
    if (m.find(for_pod) == std::string::npos &&
        (gang_key.empty() || m.find(for_gang) == std::string::npos)) {
      continue;
    }
    const json& obj = JsonField(ev, "involvedObject");
    const std::string victim =
        StrCat(JsonStringField(obj, "namespace"), "/", JsonStringField(obj, "name"));
    const size_t on = m.find("room on node ");
    std::string where;
    if (on != std::string::npos) {
      where = m.substr(on + 13, m.find(' ', on + 13) - on - 13);
    }
    std::string v = where.empty() ? victim : StrCat(victim, " (on node ", where, ")");
    if (std::find(e.victims.begin(), e.victims.end(), v) == e.victims.end()) e.victims.push_back(v);
  }
  Gang(in, *pod, &e);
  if (!pod->bound() && !pod->terminal() && e.ours && pod->input_error.empty()) {
    std::unique_ptr<ClusterLedger> ledger = in.snapshot.Ledger(LedgerOptions{});
    Position(in, *pod, *ledger, &e);
    // The engine answers when the scheduler left no word (and nodes could be read).
    if (e.scheduled_message.empty() && e.gates.empty() && in.snapshot.nodes_error.empty()) {
      WhatIf(in, *pod, *ledger, &e);
    }
  }
  e.summary = Summary(e);
  return e;
}

std::string RenderExplanationText(const PodExplanation& e) {
  std::string out = StrCat("POD ", e.pod, "  ", e.phase.empty() ? "?" : e.phase);
  if (e.waiting_seconds >= 0) StrAppend(&out, ", waiting ", FormatWait(e.waiting_seconds));
  StrAppend(&out, "  scheduler ", e.scheduler_name.empty() ? "(none)" : e.scheduler_name,
            "  priority ", e.priority, "  queue ", e.queue, "\n");
  auto row = [&out](std::string_view label, const std::string& text) {
    if (!text.empty()) StrAppend(&out, fmt::format("{:<11}", label), text, "\n");
  };
  row("ASKS", e.ask);
  row("WHY", e.summary);
  if (!e.scheduled_status.empty()) {
    row("SCHEDULER", StrCat("PodScheduled=", e.scheduled_status,
                            e.scheduled_reason.empty() ? "" : StrCat(" ", e.scheduled_reason),
                            e.scheduled_message.empty() ? "" : StrCat(": ", e.scheduled_message)));
  }
  if (e.position > 0) {
    row("QUEUE", StrCat(e.queue, ": position ", e.position, " of ", e.waiting_pods,
                        " waiting pods in the order the scheduler would try them now"));
  }
  row("", e.queue_figures.empty() ? "" : StrCat(e.queue, " ", e.queue_figures));
  row("", e.queue_invalid.empty() ? "" : StrCat("unusable: ", e.queue_invalid));
  if (!e.nominated_node.empty() || !e.victims.empty()) {
    row("PREEMPTION",
        StrCat(e.nominated_node.empty() ? "" : StrCat("nominated to node ", e.nominated_node),
               e.victims.empty() ? ""
                                 : StrCat(e.nominated_node.empty() ? "" : "; ",
                                          "victims: ", StrJoin(e.victims, ", "))));
  }
  row("DEFRAG", e.defrag);
  row("SCALE-UP", e.scale_up);
  if (!e.gang.empty()) {
    std::vector<std::string> ms;
    for (const GangMember& m : e.members) ms.push_back(StrCat(m.pod, " (", m.state, ")"));
    row("GANG", StrCat(e.gang, ": ", e.members.size(), " members of size ", e.gang_size,
                       e.gang_min != e.gang_size ? StrCat(" (starts with ", e.gang_min, ")") : "",
                       ": ", StrJoin(ms, ", ")));
  }
  row("WHAT-IF", e.what_if);
  if (!e.events.empty()) {
    out += "EVENTS\n";
    for (const ExplainEvent& ev : e.events) {
      StrAppend(&out, "  ", ev.last, "  ", ev.type, "  ", ev.reason,
                ev.count > 1 ? StrCat(" (x", ev.count, ")") : "", ": ", ev.message, "\n");
    }
  }
  for (const std::string& u : e.unreadable) StrAppend(&out, "(could not read ", u, ")\n");
  return out;
}

json ExplanationToJson(const PodExplanation& e) {
  json events = json::array();
  for (const ExplainEvent& ev : e.events) {
    events.push_back({{"type", ev.type},
                      {"reason", ev.reason},
                      {"message", ev.message},
                      {"count", ev.count},
                      {"last", ev.last}});
  }
  json gang = nullptr;
  if (!e.gang.empty()) {
    json members = json::array();
    for (const GangMember& m : e.members) members.push_back({{"pod", m.pod}, {"state", m.state}});
    gang = {{"name", e.gang}, {"size", e.gang_size}, {"min", e.gang_min}, {"members", members}};
  }
  json what_if = nullptr;
  if (!e.what_if.empty()) {
    what_if = {{"fits", e.what_if_fits}, {"never_fits", e.never_fits}, {"message", e.what_if}};
  }
  auto opt = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"version", 1},
          {"pod", e.pod},
          {"phase", e.phase},
          {"node", opt(e.node)},
          {"scheduler_name", e.scheduler_name},
          {"ours", e.ours},
          {"ask", e.ask},
          {"input_error", opt(e.input_error)},
          {"waiting_seconds", e.waiting_seconds},
          {"summary", e.summary},
          {"scheduled",
           {{"status", opt(e.scheduled_status)},
            {"reason", opt(e.scheduled_reason)},
            {"message", opt(e.scheduled_message)}}},
          {"events", std::move(events)},
          {"gates", e.gates},
          {"queue",
           {{"name", e.queue},
            {"priority", e.priority},
            {"position", e.position},
            {"waiting_pods", e.waiting_pods},
            {"figures", opt(e.queue_figures)},
            {"invalid", opt(e.queue_invalid)}}},
          {"nominated_node", opt(e.nominated_node)},
          {"victims", e.victims},
          {"defrag", opt(e.defrag)},
          {"scale_up", opt(e.scale_up)},
          {"gang", std::move(gang)},
          {"what_if", std::move(what_if)},
          {"unreadable", e.unreadable}};
}

absl::StatusOr<ExplainInputs> GatherExplainInputs(ApiClient& client, const std::string& ns,
                                                  const std::string& name,
                                                  const std::string& scheduler_name) {
  ExplainInputs in;
  in.scheduler_name = scheduler_name;
  absl::StatusOr<json> pod =
      client.Get(StrCat("/api/v1/namespaces/", QueryEscape(ns), "/pods/", QueryEscape(name)));
  if (!pod.ok()) {
    if (pod.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(StrCat("pod ", ns, "/", name, " not found"));
    }
    return pod.status();
  }
  in.pod = *std::move(pod);
  const std::string uid = JsonStringField(JsonField(in.pod, "metadata"), "uid");
  absl::StatusOr<json> events = client.Get(
      StrCat("/api/v1/namespaces/", QueryEscape(ns), "/events?fieldSelector=",
             QueryEscape(StrCat("involvedObject.kind=Pod,involvedObject.name=", name,
                                uid.empty() ? "" : StrCat(",involvedObject.uid=", uid)))));
  if (events.ok() && JsonField(*events, "items").is_array()) {
    for (const json& e : (*events)["items"]) in.events.push_back(e);
  } else if (!events.ok()) {
    in.unreadable.push_back(StrCat("its Events: ", events.status().message()));
  }
  const std::string preempted = StrCat("?fieldSelector=", QueryEscape("reason=Preempted"));
  absl::StatusOr<json> others = client.Get(StrCat("/api/v1/events", preempted));
  if (!others.ok() && others.status().code() == absl::StatusCode::kPermissionDenied) {
    others = client.Get(StrCat("/api/v1/namespaces/", QueryEscape(ns), "/events", preempted));
  }
  if (others.ok() && JsonField(*others, "items").is_array()) {
    for (const json& e : (*others)["items"]) in.other_events.push_back(e);
  }
  SnapshotOptions so;
  absl::StatusOr<ClusterSnapshot> snapshot = ReadSnapshot(client, so);
  if (!snapshot.ok() && snapshot.status().code() == absl::StatusCode::kPermissionDenied) {
    so.pod_namespace = ns;
    so.nodes_optional = true;
    snapshot = ReadSnapshot(client, so);
    if (snapshot.ok()) {
      in.unreadable.push_back(StrCat("the pods of other namespaces (only ", ns,
                                     "'s: queue positions count them alone)"));
    }
  }
  if (!snapshot.ok()) return snapshot.status();
  in.snapshot = *std::move(snapshot);
  if (!in.snapshot.nodes_error.empty()) {
    in.unreadable.push_back(
        StrCat("the nodes (no what-if without them): ", in.snapshot.nodes_error));
  }
  std::vector<std::pair<std::string, std::string>> queue_errors;
  ReadQueues(client, &in.queues, &queue_errors);
  return in;
}

}  // namespace tessera::k8s

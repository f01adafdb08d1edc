#include "k8s/scheduler/config_keys.h"

#include "common/strings.h"
#include "core/model/profiles.h"
#include "core/policy/policy.h"
#include "k8s/scheduler/config.h"

namespace tessera::k8s {

std::string FormatDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return StrCat(ms / 3'600'000, "h");
  if (ms != 0 && ms % 60'000 == 0) return StrCat(ms / 60'000, "m");
  if (ms % 1000 == 0) return StrCat(ms / 1000, "s");
  return StrCat(ms, "ms");
}

namespace {

std::vector<ConfigKey> MakeKeys() {
  const SchedulerConfig d;  // the defaults
  const SchedulerCoreOptions& c = d.core;
  std::vector<std::string> levels;
  for (const core::TopologyLevel& l : c.levels)
    levels.push_back(StrCat(l.name, " (", l.label, ")"));
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  return {
      {"apiVersion", "string", "tessera.dev/v1alpha1", "tessera.dev/v1alpha1",
       "Optional; when given, tessera.dev/v1alpha1."},
      {"kind", "string", "SchedulerConfiguration", "SchedulerConfiguration",
       "Optional; when given, SchedulerConfiguration."},
      {"schedulerName", "string", c.scheduler_name, "tessera-gpu",
       "Pods with this spec.schedulerName are this scheduler's (`--scheduler-name` overrides)."},
      {"policy", "string", c.policy, "binpack",
       StrCat("Placement policy (`--policy` overrides): ", StrJoin(core::PolicyNames(), ", "),
              ".")},
      {"seed", "integer >= 0", StrCat(c.seed), "7", "For policies that randomise."},
      {"nodeSelector", "string (label selector)", "", "\"pool=gpu\"",
       "The nodes to place on (default: all)."},
      {"topologyLevels", "list", StrJoin(levels, ", "),
       "[{name: nvlink-domain}, {name: rack, label: example.com/rack}]",
       "Gang topology levels, narrowest first: a gang asking a level (tessera.dev/gang-topology) "
       "lands inside one domain of it, the nodes with the same value of its label. Replaces the "
       "default list."},
      {"topologyLevels[].name", "string", "", "rack", "The level's name, as pods ask it."},
      {"topologyLevels[].label", "string", "tessera.dev/<name>", "example.com/rack",
       "The node label whose value is the domain."},
      {"spareGpusPerDomain", "integer 0..64", StrCat(c.spare_gpus_per_domain), "1",
       "Hot spares: whole GPUs of every NVLink domain kept free for the replacement of a gang's "
       "lost member (a gang running fewer than its minimum); no other pod takes them. The last "
       "free GPUs in the domain's order; shown by tessera status. 0: none."},
      {"leaderElection", "map", "", "{leaderElect: false}",
       "Replicas elect one leader through a Lease; only it schedules."},
      {"leaderElection.leaderElect", "boolean", b(d.leader_elect), "false",
       "Off: this replica schedules alone (`--leader-elect` overrides)."},
      {"leaderElection.resourceNamespace", "string", d.lease.lease_namespace, "tessera-system",
       "The Lease's namespace (the chart: the release's)."},
      {"leaderElection.resourceName", "string", d.lease.lease_name, "tessera-canary-scheduler",
       "The Lease's name (the chart: <release>-scheduler)."},
      {"leaderElection.leaseDuration", "duration", FormatDuration(d.lease.lease_duration), "30s",
       "How long a lease not renewed holds before another replica takes it."},
      {"leaderElection.renewDeadline", "duration", FormatDuration(d.lease.renew_deadline), "8s",
       "The leader gives up (and exits) when it has not renewed within this."},
      {"leaderElection.retryPeriod", "duration", FormatDuration(d.lease.retry_period), "4s",
       "How often replicas try to acquire or renew."},
      {"metrics", "map", "", "{port: 0}", "/metrics, /healthz and /readyz."},
      {"metrics.bindAddress", "string", d.metrics_address, "0.0.0.0",
       "The address to listen on (the chart: 0.0.0.0)."},
      {"metrics.port", "integer 0..65535", StrCat(d.metrics_port), "10270",
       "The port; 0 picks a free one (logged)."},
      {"bindConcurrency", "integer 1..1024", StrCat(d.bind_concurrency), "128",
       "Binds and status writes in flight at once."},
      {"http2", "boolean", b(d.http2), "true",
       "Writes over HTTP/2 instead of HTTP/1.1 keep-alive connections (slower against "
       "kube-apiserver: it serialises streams of one connection)."},
      {"wire", "protobuf or json", d.protobuf_wire ? "protobuf" : "json", "json",
       "The encoding of the lists and watches of Pods and Nodes (`--wire` overrides): "
       "Kubernetes' protobuf, which the API server encodes several times faster, or JSON. "
       "Everything else is read in JSON."},
      {"retry", "map", "", "{minInterval: 200ms}", "When unschedulable pods are tried again."},
      {"retry.minInterval", "duration", FormatDuration(c.retry_min_interval), "500ms",
       "After a change that may let them fit (a node, a pod leaving), at least this far apart."},
      {"retry.period", "duration", FormatDuration(c.retry_period), "1m",
       "And every period regardless (not shorter than minInterval)."},
      {"maxPodsPerCycle", "integer 1..1000000", StrCat(c.max_pods_per_cycle), "256",
       "Pods decided before the scheduler looks at new events again."},
      {"dra", "map", "", "{enabled: true}",
       "DRA mode: also allocate pods' ResourceClaims (docs/dra.md; needs the resource.k8s.io "
       "RBAC of deploy/scheduler-dra-rbac.yaml)."},
      {"dra.enabled", "boolean", b(c.dra), "true", "Allocate claims of the driver below."},
      {"dra.driver", "string", c.dra_driver, "gpu.tessera.dev",
       "The DRA driver whose devices are tessera's."},
      {"scaleUp", "map", "", "{interval: 1m}",
       "The scale-up signal (docs/planning.md): which node template would let waiting pods run; "
       "off without templates."},
      {"scaleUp.templates", "list", "",
       "[{name: h100, profile: hgx-h100, labels: {tessera.dev/rack: new}}]",
       "The nodes an operator or autoscaler can add."},
      {"scaleUp.templates[].name", "string", "the profile's name", "h100",
       "Unique among the templates."},
      {"scaleUp.templates[].profile", "string", "", "hgx-h100",
       StrCat("A built-in node profile: ", StrJoin(core::ProfileNames(), ", "), ".")},
      {"scaleUp.templates[].labels", "map", "", "{tessera.dev/rack: new}",
       "Labels the new nodes would carry (node selectors, topology levels)."},
      {"scaleUp.interval", "duration", FormatDuration(c.scale_up.interval), "1m",
       "Recomputed at most this often while pods wait."},
      {"scaleUp.maxNodes", "integer 1..10000", StrCat(c.scale_up.max_nodes), "16",
       "The most nodes of one template."},
      {"defrag", "map", "", "{enabled: true}",
       "The defragmentation executor (docs/planning.md): moves a few pods so that a waiting "
       "pod or gang fits."},
      {"defrag.enabled", "boolean", b(c.defrag.enabled), "true", "Off by default."},
      {"defrag.minPriority", "integer", StrCat(c.defrag.min_priority), "100",
       "Pods of at least this priority trigger a plan."},
      {"defrag.after", "duration", FormatDuration(c.defrag.after), "2m",
       "Once they have waited this long."},
      {"defrag.maxMoves", "integer 1..16", StrCat(c.defrag.max_moves), "3",
       "The move budget of one plan."},
      {"defrag.maxChecks", "integer 1..100000000", StrCat(c.defrag.max_checks), "50000",
       "Sets of pods one search checks at most."},
      {"defrag.holdFor", "duration", FormatDuration(c.defrag.hold_for), "5m",
       "A moved pod's destination is kept this long for its replacement."},
      {"reservations", "map", "", "{max: 4}",
       "Reservations with backfill (docs/scheduler.md): room held for the "
       "big pods and gangs that have waited longest; small pods use it only if they declare a "
       "run time (tessera.dev/max-runtime or activeDeadlineSeconds) that ends before it is "
       "needed, and the scheduler evicts pods that run past the run time they declared."},
      {"reservations.max", "integer 0..1000", StrCat(c.reservations.max_reservations), "4",
       "Reservations held at once; 0: off."},
      {"reservations.after", "duration (whole seconds)",
       FormatDuration(std::chrono::seconds(c.reservations.after_s)), "2m",
       "A pod or gang gets a reservation once it has waited this long."},
      {"reservations.minGpus", "integer 1..64", StrCat(c.reservations.min_gpus), "4",
       "Whole GPUs a pod asks to get one (any gang of whole-GPU pods does)."},
      {"reservations.runtimeEstimate", "duration (whole seconds)",
       FormatDuration(std::chrono::seconds(c.reservations.unknown_runtime_s)), "4h",
       "How long a running pod that declares no run time is expected to run (from its start; "
       "one that already ran longer: this long from now)."},
      {"reservations.grace", "duration (whole seconds)",
       FormatDuration(std::chrono::seconds(c.reservations.grace_s)), "5m",
       "A reservation whose expected start slips this far is chosen again."},
      {"reservations.maxRuntimeGrace", "duration (whole seconds)",
       FormatDuration(c.max_runtime_grace), "1m",
       "A pod still running this long past its declared run time is evicted (Event "
       "MaxRuntimeExceeded)."},
      {"queues", "map", "", "{usageHalfLife: 24h}",
       "Fair share that remembers (docs/queues.md): queues are ordered by what they hold plus "
       "what they held lately."},
      {"queues.usageHalfLife", "duration (whole seconds)", FormatDuration(d.queue_usage_half_life),
       "1h",
       "The weights of past usage halve every half-life (24h: a day); 0: queues are ordered by "
       "what they hold now."},
      {"queues.usageWriteInterval", "duration >= 1s", FormatDuration(d.queue_usage_write_interval),
       "5m",
       "Each Queue's status.usage is written at most this often (for restarts and `tessera "
       "status`)."},
  };
}

}  // namespace

const std::vector<ConfigKey>& SchedulerConfigKeys() {
  static const std::vector<ConfigKey> keys = MakeKeys();
  return keys;
}

std::vector<std::string_view> KeysUnder(std::string_view parent) {
  std::vector<std::string_view> out;
  for (const ConfigKey& k : SchedulerConfigKeys()) {
    std::string_view p = k.path;
    if (parent.empty()) {
      if (p.find('.') == std::string_view::npos && p.find('[') == std::string_view::npos) {
        out.push_back(p);
      }
      continue;
    }
    if (p.size() <= parent.size() + 1 || !p.starts_with(parent) || p[parent.size()] != '.')
      continue;
    std::string_view rest = p.substr(parent.size() + 1);
    if (rest.find('.') == std::string_view::npos && rest.find('[') == std::string_view::npos) {
      out.push_back(rest);
    }
  }
  return out;
}

}  // namespace tessera::k8s

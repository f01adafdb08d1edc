// The "does not fit" chain's own rules (no_fit.h), with answers that record what they are asked:
// the order answers are asked in, notes, Unanswered, and how kept room refuses or steers a
// placement on a real ledger. What each answer decides is tested through SchedulerCore
// (preemption_test.cc, defrag_executor_test.cc, scheduler_core_test.cc).
#include "k8s/scheduler/no_fit.h"

#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using ::testing::ElementsAre;

// An answer that records its calls (into a log shared by the answers of one test) and does what
// the test says.
class Scripted final : public NoFitAnswer {
 public:
  Scripted(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}

  std::string_view name() const override { return name_; }
  Verdict Answer(const NoFit& unfit) override {
    log_->push_back(name_ + ".Answer " + unfit.what);
    return verdict;
  }
  void Unanswered(const NoFit& unfit) override {
    log_->push_back(name_ + ".Unanswered " + unfit.what);
  }
  Admission Admit(const Placed& placed) override {
    ++admits;
    return admit ? admit(placed) : Admission{};
  }
  bool PlaceKept(const std::string& key, const PodInfo&) override {
    log_->push_back(name_ + ".PlaceKept " + key);
    return keeps;
  }
  bool StartCycle(TimePoint) override {
    log_->push_back(name_ + ".StartCycle");
    return changed;
  }
  std::optional<TimePoint> NextWakeup() const override { return wakeup; }

  Verdict verdict;
  std::function<Admission(const Placed&)> admit;
  int admits = 0;
  bool keeps = false;    // PlaceKept's answer
  bool changed = false;  // StartCycle's answer
  std::optional<TimePoint> wakeup;

 private:
  std::string name_;
  std::vector<std::string>* log_;
};

NoFit OnePod(const PodInfo& pod) { return NoFit{pod.key, {pod.key}, {&pod}, {}, "no room"}; }

// A chain of `answers`, in that order.
NoFitChain ChainOf(std::initializer_list<NoFitAnswer*> answers) {
  NoFitChain chain;
  for (NoFitAnswer* a : answers) chain.Add(a);
  return chain;
}

std::shared_ptr<const PodInfo> OneGpuPod() {
  return DecodePod(testing::PodObject("ns", "p").Limit("tessera.dev/gpu", "1").Json());
}

TEST(NoFitChain, AsksInOrderUntilOneAnswers) {
  std::vector<std::string> log;
  Scripted first("first", &log), second("second", &log), third("third", &log);
  second.verdict = NoFitAnswer::Verdict::Answered();
  NoFitChain chain = ChainOf({&first, &second, &third});
  std::shared_ptr<const PodInfo> pod = OneGpuPod();
  NoFitChain::Outcome out = chain.Answer(OnePod(*pod));
  EXPECT_TRUE(out.answered);
  EXPECT_THAT(log, ElementsAre("first.Answer ns/p", "second.Answer ns/p"));
}

TEST(NoFitChain, WithNoAnswerTheNotesAddUpAndEveryAnswerAskedHearsUnanswered) {
  std::vector<std::string> log;
  Scripted first("first", &log), second("second", &log);
  first.verdict = NoFitAnswer::Verdict::Pass("; first could not");
  second.verdict = NoFitAnswer::Verdict::Pass("; nor second");
  NoFitChain chain = ChainOf({&first, &second});
  std::shared_ptr<const PodInfo> pod = OneGpuPod();
  NoFitChain::Outcome out = chain.Answer(OnePod(*pod));
  EXPECT_FALSE(out.answered);
  EXPECT_EQ(out.notes, "; first could not; nor second");
  EXPECT_THAT(log, ElementsAre("first.Answer ns/p", "second.Answer ns/p", "first.Unanswered ns/p",
                               "second.Unanswered ns/p"));
}

TEST(NoFitChain, RoomKeptForAPodIsAskedInOrderUntilOneAnswerPlacesIt) {
  std::vector<std::string> log;
  Scripted first("first", &log), second("second", &log), third("third", &log);
  second.keeps = true;
  NoFitChain chain = ChainOf({&first, &second, &third});
  std::shared_ptr<const PodInfo> pod = OneGpuPod();
  EXPECT_TRUE(chain.PlaceKept(pod->key, *pod));
  EXPECT_THAT(log, ElementsAre("first.PlaceKept ns/p", "second.PlaceKept ns/p"));
  second.keeps = false;
  log.clear();
  EXPECT_FALSE(chain.PlaceKept(pod->key, *pod));
  EXPECT_EQ(log.size(), 3u);
}

TEST(NoFitChain, EveryAnswerStartsTheCycleAndTheEarliestWakeupWins) {
  std::vector<std::string> log;
  Scripted first("first", &log), second("second", &log), third("third", &log);
  NoFitChain chain = ChainOf({&first, &second, &third});
  const NoFitAnswer::TimePoint t0{};
  EXPECT_FALSE(chain.StartCycle(t0));
  first.changed = true;  // one answer's change is enough, and every answer still hears it
  log.clear();
  EXPECT_TRUE(chain.StartCycle(t0));
  EXPECT_THAT(log, ElementsAre("first.StartCycle", "second.StartCycle", "third.StartCycle"));

  EXPECT_EQ(chain.NextWakeup(), std::nullopt);
  second.wakeup = t0 + std::chrono::seconds(30);
  third.wakeup = t0 + std::chrono::seconds(5);
  EXPECT_EQ(chain.NextWakeup(), t0 + std::chrono::seconds(5));
}

// A ledger with two 1-GPU nodes, a and b.
class KeptRoom : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b"}) {
      ledger_.OnNode(Change::kAdded, DecodeNode(testing::NodeObject(name).Gpus(1).Json()));
    }
    ledger_.Sync();
    pod_ = OneGpuPod();
  }
  core::NodeId Id(const std::string& node) const {
    return ledger_.engine().cluster().FindNode(node);
  }
  // The pod placed (committed) on `node`, as the engine would hand it to the chain.
  core::PlacementResult PlacedOn(const std::string& node) {
    const std::vector<core::Candidate> only = {core::Candidate{Id(node)}};
    return ledger_.DecideWith(*pod_, pod_->request, &only, nullptr);
  }
  core::NodeSet Only(const std::string& node) const {
    std::vector<bool> in(ledger_.engine().cluster().node_count(), false);
    in[Id(node).value()] = true;
    return core::NodeSet(std::move(in));
  }
  std::string NodeOf(const core::Placement& p) const {
    return ledger_.engine().cluster().node(p.node).name;
  }

  ClusterLedger ledger_{LedgerOptions{}, nullptr, nullptr};
  std::shared_ptr<const PodInfo> pod_;
  std::vector<std::string> log_;
};

TEST_F(KeptRoom, ASteeringRefusalGoesBeforeAPlainOneAndThePodIsDecidedAgainThere) {
  Scripted keeps_a("keeps-a", &log_), steers_to_b("steers-to-b", &log_);
  keeps_a.admit = [&](const NoFitAnswer::Placed& placed) {
    return NoFitAnswer::Admission{NodeOf(placed.placements[0]) == "a" ? "a is kept" : "", {}};
  };
  steers_to_b.admit = [&](const NoFitAnswer::Placed& placed) {
    if (NodeOf(placed.placements[0]) == "b") return NoFitAnswer::Admission{};
    return NoFitAnswer::Admission{"not here", Only("b")};
  };
  // keeps-a is first in the chain, but its refusal cannot be gone around.
  NoFitChain chain = ChainOf({&keeps_a, &steers_to_b});
  core::PlacementResult r = PlacedOn("a");
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(chain.AdmitPod(ledger_, pod_->key, *pod_, &r), "");
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(NodeOf(r.placement), "b");
  EXPECT_EQ(ledger_.engine().Find(pod_->key)->node, Id("b"));  // committed there, a freed
  EXPECT_EQ(keeps_a.admits, 2);                                // shown the new placement too
}

TEST_F(KeptRoom, APlainRefusalTakesThePlacementBack) {
  Scripted keeps_a("keeps-a", &log_);
  keeps_a.admit = [&](const NoFitAnswer::Placed&) {
    return NoFitAnswer::Admission{"a is kept", {}};
  };
  NoFitChain chain = ChainOf({&keeps_a});
  core::PlacementResult r = PlacedOn("a");
  EXPECT_EQ(chain.AdmitPod(ledger_, pod_->key, *pod_, &r), "a is kept");
  EXPECT_FALSE(r.placed());
  EXPECT_EQ(ledger_.engine().Find(pod_->key), nullptr);
}

TEST_F(KeptRoom, OfPlainRefusalsThePodIsToldTheFirstInChainOrder) {
  Scripted first("first", &log_), second("second", &log_);
  first.admit = [&](const NoFitAnswer::Placed&) { return NoFitAnswer::Admission{"first's", {}}; };
  second.admit = [&](const NoFitAnswer::Placed&) { return NoFitAnswer::Admission{"second's", {}}; };
  NoFitChain chain = ChainOf({&first, &second});
  core::PlacementResult r = PlacedOn("a");
  EXPECT_EQ(chain.AdmitPod(ledger_, pod_->key, *pod_, &r), "first's");
  EXPECT_EQ(second.admits, 1);  // every answer is shown the placement
  EXPECT_EQ(ledger_.engine().Find(pod_->key), nullptr);
}

TEST_F(KeptRoom, AnAnswerSteersAPodOnceThenItsRefusalStands) {
  Scripted steers("steers", &log_);
  steers.admit = [&](const NoFitAnswer::Placed& placed) {
    // Always somewhere else: to the node the pod is not on.
    return NoFitAnswer::Admission{"elsewhere",
                                  Only(NodeOf(placed.placements[0]) == "a" ? "b" : "a")};
  };
  NoFitChain chain = ChainOf({&steers});
  core::PlacementResult r = PlacedOn("a");
  EXPECT_EQ(chain.AdmitPod(ledger_, pod_->key, *pod_, &r), "elsewhere");
  EXPECT_FALSE(r.placed());
  EXPECT_EQ(steers.admits, 2);
  EXPECT_EQ(ledger_.engine().Find(pod_->key), nullptr);
}

TEST_F(KeptRoom, AGangIsNeverSteeredAndARefusalTakesBackEveryMember) {
  std::shared_ptr<const PodInfo> m0 =
      DecodePod(testing::PodObject("ns", "m0").Limit("tessera.dev/gpu", "1").Gang("g", 2).Json());
  std::shared_ptr<const PodInfo> m1 =
      DecodePod(testing::PodObject("ns", "m1").Limit("tessera.dev/gpu", "1").Gang("g", 2).Json());
  std::vector<core::PlacementResult> results = ledger_.DecideGang({m0.get(), m1.get()}, "ns/g");
  ASSERT_TRUE(results[0].placed() && results[1].placed());
  Scripted steers("steers", &log_);
  steers.admit = [&](const NoFitAnswer::Placed& placed) {
    EXPECT_TRUE(placed.gang);
    EXPECT_EQ(placed.pods.size(), 2u);
    return NoFitAnswer::Admission{"kept", Only("a")};
  };
  NoFitChain chain = ChainOf({&steers});
  EXPECT_EQ(chain.AdmitGang(ledger_, {m0->key, m1->key}, {m0.get(), m1.get()}, results), "kept");
  EXPECT_EQ(ledger_.engine().Find(m0->key), nullptr);
  EXPECT_EQ(ledger_.engine().Find(m1->key), nullptr);
}

}  // namespace
}  // namespace tessera::k8s

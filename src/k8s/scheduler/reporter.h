// Where the scheduler's word on a pod goes: conditions and Events the pod's owner reads with
// kubectl describe (and `tessera status` shows). The live scheduler writes them on the API server
// (scheduler.cc); tests record them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

// Where failures go: the pod's owner reads them with kubectl describe.
class Reporter {
 public:
  virtual ~Reporter() = default;
  // Why `pod` is not scheduled: condition PodScheduled=False with `reason` ("Unschedulable" or
  // "SchedulerError") and a FailedScheduling Event with `message`. `repeat`: the same message was
  // reported before; only the Event's count needs bumping.
  virtual void ReportFailure(const PodInfo& pod, std::string_view reason,
                             const std::string& message, bool repeat) = 0;
  // A Warning Event on `pod` (bound or not) with `reason` and `message`; no condition.
  virtual void ReportWarning(const PodInfo& pod, std::string_view reason,
                             const std::string& message) = 0;
  // A Normal Event on `pod` (information, not a problem: the scale-up signal). Default: none.
  virtual void ReportNormal(const PodInfo& pod, std::string_view reason,
                            const std::string& message) {
    (void)pod, (void)reason, (void)message;
  }
  // Condition PodGroupInitiallyScheduled on an upstream PodGroup (its status subresource), as
  // kube-scheduler writes it: True with reason Scheduled, or False with reason Unschedulable,
  // and `message`. Default: none.
  virtual void ReportPodGroup(const PodGroupInfo& group, bool scheduled,
                              const std::string& message) {
    (void)group, (void)scheduled, (void)message;
  }
  // The scale-up signal's word on a waiting pod (scale_up_signal.h): a Normal Event (reason
  // ScaleUpSignal) and the pod condition tessera.dev/ScaleUp, which `tessera status` shows.
  // `helps`: some template lets the pod run. Default: the Event only.
  virtual void ReportScaleUp(const PodInfo& pod, const std::string& message, bool helps) {
    (void)helps;
    ReportNormal(pod, "ScaleUpSignal", message);
  }
  // The pod condition tessera.dev/Reserved (records/reservation.h), which `tessera status` shows:
  // `held` True (reason RoomReserved) with the record's `message` and lastTransitionTime
  // `since_unix` (when the room was reserved), or False (reason Released) with why. Default: none.
  virtual void ReportReservation(const PodInfo& pod, bool held, const std::string& message,
                                 int64_t since_unix) {
    (void)pod, (void)held, (void)message, (void)since_unix;
  }
  // Condition tessera.dev/Moving (records/move.h) True on `pod`, moved for defragmentation, with
  // `message` (its destination and hold). Default: none.
  virtual void ReportMoving(const PodInfo& pod, const std::string& message) {
    (void)pod, (void)message;
  }
  // Condition tessera.dev/GangRestart (objects.h) True on `pod`, an old member of a gang
  // restarting whole, with `message` (why). Default: none.
  virtual void ReportGangRestart(const PodInfo& pod, const std::string& message) {
    (void)pod, (void)message;
  }
  // The GPUs of `node` kept as hot spares now (records::kSpareGpusAnnotation: "6,7"; "" removes
  // the annotation), which `tessera status` shows. Default: none.
  virtual void ReportSpares(const std::string& node, const std::string& gpus) {
    (void)node, (void)gpus;
  }
};

}  // namespace tessera::k8s

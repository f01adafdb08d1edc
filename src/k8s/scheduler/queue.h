// The scheduler's queue of waiting pods: core::SchedulingQueue (core/queues/scheduling_queue.h),
// where the rules for when a pod is tried again, and in which order, live for the scheduler and
// the simulator alike. What is the scheduler's own is how a pod's arrival is read from its
// object (ArrivalOfCreation).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/queues/queue_set.h"
#include "core/queues/scheduling_queue.h"

namespace tessera::k8s {

using SchedulingQueue = core::SchedulingQueue;

// A pod's place in arrival order: its metadata.creationTimestamp (RFC 3339 in UTC, whose digits
// read as one number order as the times do; unknown: after every known one), then `seq` (the
// order in which the pod was first seen) between equal times. The scheduler's order, and what
// `tessera explain` reproduces.
core::Arrival ArrivalOfCreation(std::string_view created, int64_t seq);

}  // namespace tessera::k8s

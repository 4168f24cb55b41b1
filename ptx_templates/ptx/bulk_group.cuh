// Completion of TMA stores (bulk async-groups), and the fence that orders
// ordinary shared-memory writes before the TMA engine reads them.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE void cp_async_bulk_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until at most N groups still read their shared-memory source.
template <int N>
FP4Q_DEVICE void cp_async_bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Wait until at most N groups are still in flight.
template <int N>
FP4Q_DEVICE void cp_async_bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

// Makes generic-proxy writes to shared memory visible to the TMA engine.
FP4Q_DEVICE void fence_proxy_async_shared_cta() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

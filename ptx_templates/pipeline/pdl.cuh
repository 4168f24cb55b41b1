// Programmatic dependent launch where the target has it (FP4Q_HAS_PDL): a
// kernel overlaps its prologue with the tail of the previous kernel in the
// stream. Other targets launch without the PDL attribute, so a grid starts
// only once the previous one has completed, and both steps are no-ops.
#pragma once
#include "ptx/griddepcontrol.cuh"

// Wait until the previous grid has completed and its writes are visible.
FP4Q_DEVICE void pdl_wait() {
    if constexpr (FP4Q_HAS_PDL) griddepcontrol_wait();
}

// Let the next grid start its prologue.
FP4Q_DEVICE void pdl_launch_dependents() {
    if constexpr (FP4Q_HAS_PDL) griddepcontrol_launch_dependents();
}

// Programmatic dependent launch: overlap a kernel's prologue with the tail
// of the previous kernel in the stream.
#pragma once
#include "ptx/types.cuh"

// Wait until the previous grid has completed and its writes are visible.
FP4Q_DEVICE void griddepcontrol_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Let the next grid start its prologue.
FP4Q_DEVICE void griddepcontrol_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

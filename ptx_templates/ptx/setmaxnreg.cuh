// Moving registers between the warpgroups of a warp-specialized CTA.
#pragma once
#include "ptx/types.cuh"

template <int N>
FP4Q_DEVICE void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}

template <int N>
FP4Q_DEVICE void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}

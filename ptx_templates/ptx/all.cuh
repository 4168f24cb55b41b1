// Every wrapper family, for code that exercises them all (the wrapper
// tests); a kernel includes only the families it uses.
#pragma once
#include "ptx/types.cuh"
#include "ptx/float_math.cuh"
#include "ptx/int_math.cuh"
#include "ptx/permute.cuh"
#include "ptx/convert.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/global_memory.cuh"
#include "ptx/atomics.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/bulk_group.cuh"
#include "ptx/sync.cuh"
#include "ptx/griddepcontrol.cuh"
#include "ptx/setmaxnreg.cuh"

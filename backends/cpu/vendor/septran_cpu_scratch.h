/* septran_cpu_scratch.h -- inside the vendor library (not for kernels): the one per-thread scratch its leaves
 * share (septran_cpu.c). */
#ifndef SEPTRAN_CPU_SCRATCH_H
#define SEPTRAN_CPU_SCRATCH_H

#include <stddef.h>

/* At least `bytes` of 64-byte aligned memory for this thread, or NULL when it cannot grow. One buffer per thread,
 * grown as needed and kept (a kernel calls a leaf once per tile, on OpenMP threads that live as long as the
 * process); what it held before the call is gone. A leaf holds it only for the length of one call. */
void* septran_cpu_scratch(size_t bytes);

#endif

// The thread count of msdet's CPU kernels, set once from Python (ops/cpu_kernels.py) through
// the exported MsdetSetThreads; loops split their outer dimension over an OpenMP team of
// this many threads.
//
// Why a team is fine here although MindSpore runs its own pool: the process runs with
// OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=1000 (set by engine/device.py before anything
// loads libgomp), so the team's threads spin ~10 us at a barrier or after a kernel, then
// sleep instead of spinning on the cores MindSpore's next operator needs. With libgomp's
// default (~3 ms of spinning) a team of 2 made the whole training step 1.5x slower; with the
// passive policy it is 1.2x faster, and the short spin gains a few percent more.
#pragma once

int msdet_threads();

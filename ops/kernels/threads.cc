#include "threads.h"

namespace {
int g_threads = 1;
}  // namespace

int msdet_threads() { return g_threads; }

extern "C" void MsdetSetThreads(int n) { g_threads = n < 1 ? 1 : n; }

extern "C" int MsdetThreads() { return g_threads; }

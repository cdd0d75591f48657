/* A stand-in for libnvidia-ml.so.1 whose functions return at once: what remains of a sample
   is the Python of pynvml and of the sampler, i.e. the time it holds the GIL (docs/performance.md).
     gcc -O2 -shared -fPIC -o /tmp/nvmlstub/libnvidia-ml.so.1 bench/nvml_stub.c
     LD_LIBRARY_PATH=/tmp/nvmlstub python3 bench/telemetry_overhead.py
   Only on a machine without the NVIDIA driver (CPU machines): it answers for one fake GPU. */
#include <string.h>
typedef struct { unsigned gpu, memory; } util_t;
static int dev;
int nvmlInitWithFlags(unsigned f) { return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "stub"; }
int nvmlDeviceGetCount_v2(unsigned *c) { *c = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { *h = &dev; return 0; }
int nvmlDeviceGetUUID(void *h, char *s, unsigned n) { strncpy(s, "GPU-00000000-1111-2222-3333-444444444444", n); return 0; }
int nvmlDeviceGetName(void *h, char *s, unsigned n) { strncpy(s, "Stub GPU", n); return 0; }
int nvmlDeviceGetClockInfo(void *h, int t, unsigned *c) { *c = t == 1 ? 1980 : 3201; return 0; }
int nvmlDeviceGetMaxClockInfo(void *h, int t, unsigned *c) { *c = t == 1 ? 1980 : 3201; return 0; }
int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *p) { *p = 700000; return 0; }
int nvmlDeviceGetPowerUsage(void *h, unsigned *p) { *p = 250000; return 0; }
int nvmlDeviceGetTemperature(void *h, int s, unsigned *t) { *t = 40; return 0; }
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) { u->gpu = 99; u->memory = 50; return 0; }
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) { *r = 0; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *n, void *p) { *n = 0; return 0; }
int nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned *n, void *p) { *n = 0; return 0; }

/* TVM's parallel launch on OpenMP threads (runtime/launcher.py builds this once per machine and
 * runtime/native.py points a kernel's __TVMBackendParallelLaunch/Barrier at the two entries below).
 *
 * Linked against libgomp.so.1: in a process where torch is loaded, the loader binds that soname to
 * torch's own libgomp, so akgpy's parallel loops run on torch's intra-op threads (the team size
 * follows torch.set_num_threads) and no second pool of spinning threads competes for the cores.
 *
 * The lambda/task/barrier logic is the self-contained kernels' runtime (targets/cpu/standalone_rt.c:
 * TVM's lambda run per task of a caller's parallel_launch, a barrier, the task count checked against
 * the one announced), included here; this file only supplies the OpenMP parallel_launch it runs on.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "standalone_rt.c"

#define AKGPY_EXPORT __attribute__((visibility("default")))
#define AKGPY_MAX_TRACKED 256

static _Thread_local char akgpy_omp_error_text[256];
static atomic_long akgpy_omp_launches;
static atomic_int akgpy_omp_last_team, akgpy_omp_last_distinct;

static void akgpy_omp_fail(const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  vsnprintf(akgpy_omp_error_text, sizeof akgpy_omp_error_text, format, ap);
  va_end(ap);
}

/* MindSpore-style parallel_launch: one OpenMP team, each thread one task, the team's size
 * announced as the task count (OpenMP may give fewer threads than asked: nested, dynamic) */
static int akgpy_omp_team(int (*task)(int, int, void *), void *cdata, int nthreads) {
  long tid[AKGPY_MAX_TRACKED];
  int team = 0;
#pragma omp parallel num_threads(nthreads)
  {
    int me = omp_get_thread_num(), n = omp_get_num_threads();
    if (me == 0) team = n;
    if (me < AKGPY_MAX_TRACKED) tid[me] = (long)syscall(SYS_gettid);
    task(me, n, cdata);
  }
  int distinct = 0;
  for (int i = 0; i < team && i < AKGPY_MAX_TRACKED; ++i) {
    int seen = 0;
    for (int j = 0; j < i && !seen; ++j) seen = tid[j] == tid[i];
    distinct += !seen;
  }
  atomic_store(&akgpy_omp_last_team, team);
  atomic_store(&akgpy_omp_last_distinct, distinct);
  atomic_fetch_add(&akgpy_omp_launches, 1);
  return 0;
}

static void *akgpy_omp_malloc(size_t n) { return malloc(n); }
static void akgpy_omp_free(void *p) { free(p); }
static const akgpy_callbacks akgpy_omp_callbacks = {akgpy_omp_team, akgpy_omp_malloc, akgpy_omp_free, NULL};

/* TVMBackendParallelLaunch: num_task 0 means "every thread" (omp_get_max_threads(), which follows
 * torch.set_num_threads); an explicit count is honoured exactly or refused, as TVM's pool refuses a
 * count above its thread count (more would start threads beyond the pool's) */
AKGPY_EXPORT int akgpy_omp_parallel_launch(tvm_lambda body, void *cdata, int num_task) {
  int most = omp_get_max_threads();
  akgpy_omp_error_text[0] = 0;
  if (num_task < 0 || num_task > most) {
    akgpy_omp_fail("parallel launch of %d tasks: the OpenMP launcher runs 1 to %d (omp_get_max_threads())",
                   num_task, most);
    return -1;
  }
  const akgpy_callbacks *outer = akgpy_cb;
  akgpy_cb = &akgpy_omp_callbacks;
  int want = num_task ? num_task : most, rc;
  if (want == 1 || omp_in_parallel()) {
    /* already on a team's thread (nested regions run serially anyway) or one thread: in place */
    tvm_group_env alone = {NULL, 1};
    rc = body(0, &alone, cdata);
  } else {
    rc = akgpy_parallel_launch(body, cdata, want);
    int team = atomic_load(&akgpy_omp_last_team);
    if (rc == 0 && num_task && team != num_task) {
      akgpy_omp_fail("parallel launch of %d tasks ran on a team of %d OpenMP threads", num_task, team);
      rc = -1;
    }
  }
  if (rc != 0 && !akgpy_omp_error_text[0])
    akgpy_omp_fail("a parallel task of the kernel failed (return code %d)", rc);
  akgpy_cb = outer;
  return rc;
}

AKGPY_EXPORT int akgpy_omp_parallel_barrier(int task_id, tvm_group_env *penv) {
  return penv->sync_handle == NULL ? 0 : akgpy_parallel_barrier(task_id, penv);
}

/* for runtime/launcher.py: the reason of this thread's last failed launch, and what the last
 * launch ran on (team size, distinct OS threads, launches so far) */
AKGPY_EXPORT const char *akgpy_omp_error(void) { return akgpy_omp_error_text; }

AKGPY_EXPORT long akgpy_omp_stats(int *team, int *distinct) {
  *team = atomic_load(&akgpy_omp_last_team);
  *distinct = atomic_load(&akgpy_omp_last_distinct);
  return atomic_load(&akgpy_omp_launches);
}

AKGPY_EXPORT int akgpy_omp_max_threads(void) { return omp_get_max_threads(); }

/* The runtime a self-contained akgpy kernel carries (targets/cpu/standalone.py compiles this file
 * with the per-request table and entry, and links both with the kernel's object code).
 *
 * TVM's host code reaches its runtime through function-pointer variables (__TVMBackendParallelLaunch,
 * ...), which TVM's module loader fills from libtvm_runtime. Here they point at the functions below,
 * which run on the callbacks the caller passes in args[0] (MindSpore's AKG calling convention):
 *   struct { int (*parallel_launch)(int (*)(int task, int ntask, void *cdata), void *cdata, int nthreads);
 *            void *(*malloc)(size_t); void (*free)(void *); void *extend; }
 * TVM's backend calls carry no context argument, so the caller's callbacks are kept in a thread-local
 * pointer for the duration of a call (and of each parallel task, on the thread that runs it): no
 * state outlives a call, and the caller's thread pool is the only one.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  int (*parallel_launch)(int (*)(int, int, void *), void *, int);
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *extend;
} akgpy_callbacks;

/* dlpack.h and tvm/ffi/c_api.h, the parts a packed call reads */
typedef struct { int32_t device_type, device_id; } akgpy_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } akgpy_dtype;
typedef struct {
  void *data;
  akgpy_device device;
  int32_t ndim;
  akgpy_dtype dtype;
  const int64_t *shape;
  const int64_t *strides;
  uint64_t byte_offset;
} akgpy_dltensor;
typedef struct { int32_t type_index; uint32_t zero_padding; void *v_ptr; } akgpy_any;
#define AKGPY_DLTENSOR_PTR 7 /* TVMFFITypeIndex.kTVMFFIDLTensorPtr */
#define AKGPY_DLCPU 1

typedef struct { void *sync_handle; int32_t num_task; } tvm_group_env;
typedef int (*tvm_lambda)(int task_id, tvm_group_env *penv, void *cdata);

static _Thread_local const akgpy_callbacks *akgpy_cb;
static _Thread_local const char *akgpy_kernel_name;  /* for error messages */

static void akgpy_error(const char *kind, const char *message) {
  fprintf(stderr, "akgpy kernel %s: %s: %s\n", akgpy_kernel_name ? akgpy_kernel_name : "?", kind, message);
}

/* -- memory: the caller's malloc/free, aligned as TVM's workspace allocator aligns ---------------- */

#define AKGPY_ALIGN 64

static void *akgpy_alloc(size_t nbytes) {
  const akgpy_callbacks *cb = akgpy_cb;
  if (cb == NULL || cb->malloc == NULL) return NULL;
  char *raw = cb->malloc(nbytes + AKGPY_ALIGN + sizeof(void *));
  if (raw == NULL) return NULL;
  uintptr_t at = ((uintptr_t)(raw + sizeof(void *)) + AKGPY_ALIGN - 1) & ~(uintptr_t)(AKGPY_ALIGN - 1);
  ((void **)at)[-1] = raw;
  return (void *)at;
}

static void akgpy_release(void *p) {
  const akgpy_callbacks *cb = akgpy_cb;
  if (p != NULL && cb != NULL && cb->free != NULL) cb->free(((void **)p)[-1]);
}

static void *akgpy_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  (void)device_type, (void)device_id, (void)code, (void)bits;
  return akgpy_alloc((size_t)nbytes);
}

static int akgpy_free_workspace(int device_type, int device_id, void *p) {
  (void)device_type, (void)device_id;
  akgpy_release(p);
  return 0;
}

/* -- parallel loops on the caller's launcher ------------------------------------------------------ */

typedef struct {
  tvm_lambda body;
  void *cdata;
  const akgpy_callbacks *cb;
  const char *name;
  atomic_int failed, arrived, phase;
  atomic_int ran, announced;  /* tasks the launcher ran, and the count it told them */
} akgpy_launch;

static int akgpy_task(int task, int ntask, void *data) {
  akgpy_launch *l = data;
  atomic_fetch_add(&l->ran, 1);
  atomic_store(&l->announced, ntask);
  const akgpy_callbacks *outer = akgpy_cb;
  const char *outer_name = akgpy_kernel_name;
  akgpy_cb = l->cb;
  akgpy_kernel_name = l->name;
  tvm_group_env env = {l, ntask};
  int rc = l->body(task, &env, l->cdata);
  if (rc != 0) atomic_store(&l->failed, 1);
  akgpy_cb = outer;
  akgpy_kernel_name = outer_name;
  return rc;
}

static int akgpy_parallel_launch(tvm_lambda body, void *cdata, int num_task) {
  akgpy_launch l = {body, cdata, akgpy_cb, akgpy_kernel_name, 0, 0, 0, 0, 0};
  tvm_group_env alone = {&l, 1};
  if (l.cb == NULL || l.cb->parallel_launch == NULL) return body(0, &alone, cdata);
  /* num_task 0 (TVM's usual request) means "as many as you have"; MindSpore's launcher decides anyway */
  l.cb->parallel_launch(akgpy_task, &l, num_task);
  int ran = atomic_load(&l.ran);
  if (ran == 0) return body(0, &alone, cdata);  /* a launcher that took 0 literally: run it here */
  if (ran != atomic_load(&l.announced)) {
    akgpy_error("RuntimeError", "the caller's parallel_launch ran another number of tasks than it announced");
    return -1;
  }
  return atomic_load(&l.failed) ? -1 : 0;
}

/* every task of the launch arrives before any leaves (the launcher runs them all at once, as
 * TVM's pool does) */
static int akgpy_parallel_barrier(int task_id, tvm_group_env *penv) {
  (void)task_id;
  akgpy_launch *l = penv->sync_handle;
  int phase = atomic_load(&l->phase);
  if (atomic_fetch_add(&l->arrived, 1) == penv->num_task - 1) {
    atomic_store(&l->arrived, 0);
    atomic_fetch_add(&l->phase, 1);
  } else {
    while (atomic_load(&l->phase) == phase) sched_yield();
  }
  return 0;
}

/* strong definitions: they take the place of the object's weak, zero-initialised context slots */
void *__TVMBackendParallelLaunch = (void *)akgpy_parallel_launch;
void *__TVMBackendParallelBarrier = (void *)akgpy_parallel_barrier;
void *__TVMBackendAllocWorkspace = (void *)akgpy_alloc_workspace;
void *__TVMBackendFreeWorkspace = (void *)akgpy_free_workspace;
void *__TVMFFIErrorSetRaisedFromCStr = (void *)akgpy_error;

/* -- the call -------------------------------------------------------------------------------------- */

typedef struct { int32_t arg; int64_t offset, nbytes; } akgpy_copy;

typedef struct {
  akgpy_dtype dtype;
  int32_t ndim;
  const int64_t *shape;
  int64_t nbytes;
  int32_t align;   /* bytes the kernel assumes of the start of the array */
  int32_t direct;  /* the caller's argument passed as it is (when aligned), or -1: a temporary */
  int32_t reads, writes;  /* a misaligned direct argument: copied in before, out after */
  int32_t n_in, n_out;
  const akgpy_copy *copy_in;   /* caller's bytes into the temporary before the call */
  const akgpy_copy *copy_out;  /* the temporary's bytes to the caller's after the call */
} akgpy_param;

typedef struct { int32_t src, dst; int64_t nbytes; } akgpy_move;

typedef struct {
  const char *name;
  int (*entry)(void *, const akgpy_any *, int32_t, akgpy_any *);
  int32_t n_params;
  const akgpy_param *params;
  int32_t n_moves;
  const akgpy_move *moves;  /* after the call: output slots that repeat another slot or an input */
} akgpy_kernel;

static int akgpy_run(void **args, const akgpy_kernel *k, akgpy_dltensor *t, akgpy_any *a, void **tmp) {
  const akgpy_callbacks *outer = akgpy_cb;
  const char *outer_name = akgpy_kernel_name;
  akgpy_cb = (const akgpy_callbacks *)args[0];
  akgpy_kernel_name = k->name;
  int rc = 0;
  for (int i = 0; i < k->n_params; ++i) tmp[i] = NULL;
  for (int i = 0; i < k->n_params; ++i) {
    const akgpy_param *p = &k->params[i];
    void *data = p->direct >= 0 ? args[p->direct] : NULL;
    if (data == NULL || ((uintptr_t)data & (uintptr_t)(p->align - 1)) != 0) {
      tmp[i] = akgpy_alloc((size_t)p->nbytes);
      if (tmp[i] == NULL) {
        akgpy_error("MemoryError", "cannot allocate a temporary argument");
        rc = -1;
        break;
      }
      if (data != NULL && p->reads) memcpy(tmp[i], data, (size_t)p->nbytes);
      for (int c = 0; c < p->n_in; ++c)
        memcpy((char *)tmp[i] + p->copy_in[c].offset, args[p->copy_in[c].arg], (size_t)p->copy_in[c].nbytes);
      data = tmp[i];
    }
    t[i] = (akgpy_dltensor){data, {AKGPY_DLCPU, 0}, p->ndim, p->dtype, p->shape, NULL, 0};
    a[i] = (akgpy_any){AKGPY_DLTENSOR_PTR, 0, &t[i]};
  }
  if (rc == 0) {
    akgpy_any result = {0, 0, NULL};
    rc = k->entry(NULL, a, k->n_params, &result);
    if (rc != 0) akgpy_error("RuntimeError", "the kernel returned an error");
  }
  for (int i = 0; i < k->n_params; ++i) {
    const akgpy_param *p = &k->params[i];
    if (tmp[i] == NULL) continue;
    if (rc == 0) {
      if (p->direct >= 0 && p->writes) memcpy(args[p->direct], tmp[i], (size_t)p->nbytes);
      for (int c = 0; c < p->n_out; ++c)
        memcpy(args[p->copy_out[c].arg], (char *)tmp[i] + p->copy_out[c].offset, (size_t)p->copy_out[c].nbytes);
    }
    akgpy_release(tmp[i]);
  }
  if (rc == 0)
    for (int m = 0; m < k->n_moves; ++m)
      memmove(args[k->moves[m].dst], args[k->moves[m].src], (size_t)k->moves[m].nbytes);
  akgpy_cb = outer;
  akgpy_kernel_name = outer_name;
  return rc;
}

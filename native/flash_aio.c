/*
 * Linux native AIO for the flash reader (src/io/aio.ts loads it, src/io/flash-reader.ts drives it).
 *
 * Why: a decode token misses a few hundred 8 KiB neuron bundles per layer. Through libuv's thread
 * pool every read is one pool-thread wake-up, one pread and one completion hop back to the event
 * loop: ~30 us of CPU per read here (measured), which on a 2-core machine takes the core the
 * kernels need. io_submit hands the kernel a whole batch in one system call and io_getevents
 * collects finished reads in another (~3-6 us of CPU per read, measured), and the reads proceed
 * while JavaScript computes, with no thread to schedule.
 *
 * Only for O_DIRECT descriptors: on a buffered file io_submit reads synchronously.
 *
 * Interface (all numbers are JS numbers; the caller checks alignment and bounds, this file checks
 * bounds again against the view it is given):
 *   open(fd, capacity) -> ring                     io_setup(capacity)
 *   submit(ring, view, reqs, n) -> k               reqs: Float64Array [id, fileOffset, length, dst] * n;
 *                                                  k >= 0 submitted (the first k), or -errno when the
 *                                                  first one was refused (EAGAIN is reported as 0)
 *   reap(ring, out, max, waitMs) -> k              out: Float64Array [id, result] * k; result = bytes
 *                                                  read or -errno; waits up to waitMs for the first
 *   close(ring)                                    io_destroy (waits for reads in flight)
 */
#define _GNU_SOURCE
#include <node_api.h>
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  aio_context_t ctx;
  int fd;
  int capacity;
  struct iocb *cbs;
  struct iocb **ptrs;
  struct io_event *events;
} Ring;

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

static napi_value throw_msg(napi_env env, const char *msg) {
  napi_throw_type_error(env, NULL, msg);
  return NULL;
}

static napi_value number(napi_env env, double v) {
  napi_value r;
  napi_create_double(env, v, &r);
  return r;
}

static int get_args(napi_env env, napi_callback_info info, size_t want, napi_value *argv) {
  size_t argc = want;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < want) {
    throw_msg(env, "flash_aio: too few arguments");
    return 0;
  }
  return 1;
}

static Ring *get_ring(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok || p == NULL) {
    throw_msg(env, "flash_aio: not an open ring");
    return NULL;
  }
  Ring *r = (Ring *)p;
  if (r->fd < 0) {
    throw_msg(env, "flash_aio: the ring is closed");
    return NULL;
  }
  return r;
}

/* A Float64Array argument: its data and length in elements. */
static double *get_f64(napi_env env, napi_value v, size_t *length) {
  napi_typedarray_type type;
  void *data;
  if (napi_get_typedarray_info(env, v, &type, length, &data, NULL, NULL) != napi_ok || type != napi_float64_array) {
    throw_msg(env, "flash_aio: expected a Float64Array");
    return NULL;
  }
  return (double *)data;
}

static napi_value ring_open(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (!get_args(env, info, 2, argv)) return NULL;
  int32_t fd, capacity;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &capacity) != napi_ok || fd < 0 || capacity < 1 || capacity > 65536) {
    return throw_msg(env, "flash_aio.open(fd, capacity): bad arguments");
  }
  Ring *r = calloc(1, sizeof(Ring));
  if (!r) return throw_errno(env, "flash_aio.open", ENOMEM);
  r->cbs = calloc((size_t)capacity, sizeof(struct iocb));
  r->ptrs = calloc((size_t)capacity, sizeof(struct iocb *));
  r->events = calloc((size_t)capacity, sizeof(struct io_event));
  if (!r->cbs || !r->ptrs || !r->events) {
    free(r->cbs); free(r->ptrs); free(r->events); free(r);
    return throw_errno(env, "flash_aio.open", ENOMEM);
  }
  if (syscall(SYS_io_setup, capacity, &r->ctx) < 0) {
    int e = errno;
    free(r->cbs); free(r->ptrs); free(r->events); free(r);
    return throw_errno(env, "io_setup", e);
  }
  r->fd = fd;
  r->capacity = capacity;
  napi_value out;
  napi_create_external(env, r, NULL, NULL, &out);
  return out;
}

static napi_value ring_submit(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, argv)) return NULL;
  Ring *r = get_ring(env, argv[0]);
  if (!r) return NULL;
  napi_typedarray_type vtype;
  size_t vlen;
  void *vdata;
  if (napi_get_typedarray_info(env, argv[1], &vtype, &vlen, &vdata, NULL, NULL) != napi_ok || vtype != napi_uint8_array) {
    return throw_msg(env, "flash_aio.submit: the view must be a Uint8Array");
  }
  size_t rlen;
  double *reqs = get_f64(env, argv[2], &rlen);
  if (!reqs) return NULL;
  int32_t n;
  if (napi_get_value_int32(env, argv[3], &n) != napi_ok || n < 0 || (size_t)n * 4 > rlen || n > r->capacity) {
    return throw_msg(env, "flash_aio.submit: bad request count");
  }
  for (int i = 0; i < n; i++) {
    double id = reqs[4 * i], off = reqs[4 * i + 1], len = reqs[4 * i + 2], dst = reqs[4 * i + 3];
    if (!(id >= 0 && id < r->capacity) || !(off >= 0) || !(len > 0) || !(dst >= 0) || dst + len > (double)vlen) {
      return throw_msg(env, "flash_aio.submit: a request is out of bounds");
    }
    struct iocb *cb = &r->cbs[(int)id];
    memset(cb, 0, sizeof *cb);
    cb->aio_data = (uint64_t)id;
    cb->aio_lio_opcode = IOCB_CMD_PREAD;
    cb->aio_fildes = (uint32_t)r->fd;
    cb->aio_buf = (uint64_t)(uintptr_t)((uint8_t *)vdata + (size_t)dst);
    cb->aio_nbytes = (uint64_t)len;
    cb->aio_offset = (int64_t)off;
    r->ptrs[i] = cb;
  }
  long k = n > 0 ? syscall(SYS_io_submit, r->ctx, (long)n, r->ptrs) : 0;
  if (k < 0) k = errno == EAGAIN ? 0 : -errno;
  return number(env, (double)k);
}

static napi_value ring_reap(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, argv)) return NULL;
  Ring *r = get_ring(env, argv[0]);
  if (!r) return NULL;
  size_t olen;
  double *out = get_f64(env, argv[1], &olen);
  if (!out) return NULL;
  int32_t max;
  double wait_ms;
  if (napi_get_value_int32(env, argv[2], &max) != napi_ok || max < 1 || (size_t)max * 2 > olen || napi_get_value_double(env, argv[3], &wait_ms) != napi_ok) {
    return throw_msg(env, "flash_aio.reap: bad arguments");
  }
  if (max > r->capacity) max = r->capacity;
  struct timespec ts = {0, 0};
  if (wait_ms > 0) {
    ts.tv_sec = (time_t)(wait_ms / 1000);
    ts.tv_nsec = (long)((wait_ms - (double)ts.tv_sec * 1000) * 1e6);
  }
  long k;
  do k = syscall(SYS_io_getevents, r->ctx, wait_ms > 0 ? 1L : 0L, (long)max, r->events, &ts);
  while (k < 0 && errno == EINTR);
  if (k < 0) return throw_errno(env, "io_getevents", errno);
  for (long i = 0; i < k; i++) {
    out[2 * i] = (double)r->events[i].data;
    out[2 * i + 1] = (double)(int64_t)r->events[i].res;
  }
  return number(env, (double)k);
}

static napi_value ring_close(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!get_args(env, info, 1, argv)) return NULL;
  void *p = NULL;
  if (napi_get_value_external(env, argv[0], &p) != napi_ok || p == NULL) return throw_msg(env, "flash_aio.close: not a ring");
  Ring *r = (Ring *)p;
  if (r->fd >= 0) {
    syscall(SYS_io_destroy, r->ctx);
    r->fd = -1;
    free(r->cbs); free(r->ptrs); free(r->events);
    r->cbs = NULL; r->ptrs = NULL; r->events = NULL;
  }
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"open", NULL, ring_open, NULL, NULL, NULL, napi_default, NULL},
    {"submit", NULL, ring_submit, NULL, NULL, NULL, napi_default, NULL},
    {"reap", NULL, ring_reap, NULL, NULL, NULL, napi_default, NULL},
    {"close", NULL, ring_close, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)

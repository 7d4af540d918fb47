/*
 * Linux native AIO for the flash reader (src/io/aio.ts loads it, src/io/aio-backend.ts drives it).
 *
 * Why: a decode token misses a few hundred 8 KiB neuron bundles per layer. Through libuv's thread
 * pool every read is one pool-thread wake-up, one pread and one completion hop back to the event
 * loop: ~30 us of CPU per read here (measured), which on a 2-core machine takes the core the
 * kernels need. io_submit hands the kernel a whole batch in one system call and io_getevents
 * collects finished reads in another (~3-6 us of CPU per read, measured), and the reads proceed
 * while JavaScript computes, with no thread to schedule.
 *
 * The system calls run on a thread of this addon, not on JavaScript's: submit() queues requests
 * and wakes it (an eventfd), it calls io_submit (which does each request's block-layer work, ~3-4
 * us, and may block while the disk's queue is full) and collects completions (the kernel signals
 * a second eventfd), and reap() takes what it collected. So JavaScript spends well under a
 * microsecond per read and never blocks in io_submit, and on a machine whose other core is idle
 * the I/O work runs there.
 *
 * Only for O_DIRECT descriptors: on a buffered file io_submit reads synchronously.
 *
 * Interface (all numbers are JS numbers; the caller checks alignment and bounds, this file checks
 * bounds again against the view it is given):
 *   open(fd, capacity, threaded) -> ring           io_setup(capacity); threaded: start the I/O thread
 *   pin(ring, cpu) -> bool                         threaded: the I/O thread on cpu, the caller on its
 *                                                  other CPUs, until close (pin_threads)
 *   submit(ring, view, reqs, n) -> k               reqs: Float64Array [id, fileOffset, length, dst] * n,
 *                                                  ids < capacity and not in flight. Threaded: all are
 *                                                  queued (k = n). Inline: io_submit here, k taken (the
 *                                                  first k; 0 when the kernel is full), or -errno when
 *                                                  the first was refused
 *   reap(ring, out, max, waitMs) -> k              out: Float64Array [id, result] * k; result = bytes
 *                                                  read or -errno (a refused submission too); waits
 *                                                  up to waitMs for the first
 *   setChecksums(ring, crcs, start, end, chunk, seen)  threaded: the I/O thread checks each whole read's
 *                                                  chunks (CRC-32) and reports a mismatch as -EBADMSG
 *   close(ring)                                    stops the thread, io_destroy (waits for reads in flight)
 */
#define _GNU_SOURCE
#include <node_api.h>
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/mman.h>

typedef struct {
  aio_context_t ctx;
  int fd;
  int capacity;
  struct iocb *cbs;      /* one per request id */
  struct iocb **ptrs;    /* the I/O thread's io_submit argument */
  struct io_event *events;
  /* shared between JavaScript's thread and the I/O thread, under mu */
  pthread_mutex_t mu;
  pthread_cond_t reaped; /* signalled when completions arrive */
  int *queued;           /* ids to submit: a FIFO of capacity */
  int qHead, qCount;
  double *done;          /* [id, result] pairs: a FIFO of capacity */
  int dHead, dCount;
  int stop;
  int submitFd, doneFd;  /* eventfds: work to submit; reads completed (IOCB_FLAG_RESFD) */
  pthread_t thread;
  int threaded;          /* 0: submit and reap make the system calls themselves, on the caller's thread */
  /* checksums the I/O thread verifies (set_checksums): CRC-32 per chunk of [ckStart, ckEnd) */
  const uint32_t *crcs;
  uint8_t *seen;         /* "once": chunks already verified (NULL: verify every read) */
  double ckStart, ckEnd;
  int ckChunk;
  /* pin(): the I/O thread was given a CPU of its own and the pinning thread the others */
  int pinned;
  pid_t opener;            /* the pinning thread */
  cpu_set_t openerMask;    /* its CPUs before (restored at close) */
  cpu_set_t openerPinned;  /* its CPUs after */
} Ring;

/* CRC-32 (zlib's polynomial): zlib's own when the process exports it (Node does), else a table. */
typedef unsigned long (*crc32_fn)(unsigned long, const unsigned char *, unsigned int);
static crc32_fn zlib_crc32;
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  zlib_crc32 = (crc32_fn)dlsym(RTLD_DEFAULT, "crc32");
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[n] = c;
  }
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
  if (zlib_crc32) return (uint32_t)zlib_crc32(0, p, (unsigned int)n);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

/* A read that landed whole: are its chunks what the checksums say? (marks them seen) */
static int verify_read(Ring *r, const struct iocb *cb) {
  if (!r->crcs) return 1;
  double off = (double)cb->aio_offset;
  size_t len = (size_t)cb->aio_nbytes;
  const uint8_t *p = (const uint8_t *)(uintptr_t)cb->aio_buf;
  for (size_t o = 0; o < len; o += (size_t)r->ckChunk) {
    double at = off + (double)o;
    if (at < r->ckStart || at + r->ckChunk > r->ckEnd) continue;
    size_t c = (size_t)((at - r->ckStart) / r->ckChunk);
    if (r->seen && r->seen[c]) continue;
    if (crc32_of(p + o, (size_t)r->ckChunk) != r->crcs[c]) return 0;
    if (r->seen) r->seen[c] = 1;
  }
  return 1;
}

static void push_done(Ring *r, int id, double res) {
  int at = (r->dHead + r->dCount) % r->capacity;
  r->done[2 * at] = id;
  r->done[2 * at + 1] = res;
  r->dCount++;
}

/* The I/O thread: submit what is queued, collect what finished, sleep in poll() otherwise. */
static void *io_thread(void *arg) {
  Ring *r = (Ring *)arg;
  struct pollfd fds[2] = {{r->submitFd, POLLIN, 0}, {r->doneFd, POLLIN, 0}};
  uint64_t v;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    int stop = r->stop;
    int n = r->qCount;
    for (int i = 0; i < n; i++) r->ptrs[i] = &r->cbs[r->queued[(r->qHead + i) % r->capacity]];
    pthread_mutex_unlock(&r->mu);
    if (stop) return NULL;
    int submitted = 0;
    while (submitted < n) {
      long k = syscall(SYS_io_submit, r->ctx, (long)(n - submitted), r->ptrs + submitted);
      if (k > 0) { submitted += (int)k; continue; }
      if (k < 0 && errno == EAGAIN) break; /* the kernel is full: retry after something completes */
      /* the first of the rest was refused: it completes with the error */
      int e = k < 0 ? errno : EIO;
      pthread_mutex_lock(&r->mu);
      push_done(r, (int)r->ptrs[submitted]->aio_data, -(double)e);
      pthread_cond_broadcast(&r->reaped);
      pthread_mutex_unlock(&r->mu);
      submitted++;
    }
    if (n > 0) {
      pthread_mutex_lock(&r->mu);
      r->qHead = (r->qHead + submitted) % r->capacity;
      r->qCount -= submitted;
      pthread_mutex_unlock(&r->mu);
    }
    long got;
    struct timespec zero = {0, 0};
    do got = syscall(SYS_io_getevents, r->ctx, 0L, (long)r->capacity, r->events, &zero);
    while (got < 0 && errno == EINTR);
    if (got > 0) {
      /* verify outside the lock: JavaScript only waits on the lock to take finished reads */
      for (long i = 0; i < got; i++) {
        struct io_event *ev = &r->events[i];
        const struct iocb *cb = &r->cbs[(int)ev->data];
        if ((int64_t)ev->res == (int64_t)cb->aio_nbytes && !verify_read(r, cb)) ev->res = (uint64_t)(int64_t)-EBADMSG;
      }
      pthread_mutex_lock(&r->mu);
      for (long i = 0; i < got; i++) push_done(r, (int)r->events[i].data, (double)(int64_t)r->events[i].res);
      pthread_cond_broadcast(&r->reaped);
      pthread_mutex_unlock(&r->mu);
      continue;
    }
    if (poll(fds, 2, -1) > 0) {
      if (fds[0].revents & POLLIN) { ssize_t rd = read(r->submitFd, &v, sizeof v); (void)rd; }
      if (fds[1].revents & POLLIN) { ssize_t rd = read(r->doneFd, &v, sizeof v); (void)rd; }
    }
  }
}

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

/* A typed-array argument of type `want`: its data and length in elements, or NULL with `error` thrown. */
static void *get_typed(napi_env env, napi_value v, napi_typedarray_type want, size_t *length, const char *error) {
  napi_typedarray_type type;
  void *data;
  if (napi_get_typedarray_info(env, v, &type, length, &data, NULL, NULL) != napi_ok || type != want) {
    throw_msg(env, error);
    return NULL;
  }
  return data;
}

/* A Float64Array argument: its data and length in elements. */
static double *get_f64(napi_env env, napi_value v, size_t *length) {
  return (double *)get_typed(env, v, napi_float64_array, length, "flash_aio: expected a Float64Array");
}

/*
 * When the JavaScript handle is collected: a closed ring's memory is freed. One never closed is
 * left as it is (its thread may still be checking a read against arrays JavaScript has freed by
 * now; stopping it here could race with that): FlashReader.close() is what closes rings.
 */
static void ring_finalize(napi_env env, void *data, void *hint) {
  (void)env; (void)hint;
  Ring *r = (Ring *)data;
  if (r->fd < 0) free(r);
}

/*
 * pin(ring, cpu): the I/O thread on `cpu` alone, the calling (computing) thread on the other CPUs
 * it may use, until close. aio-backend.ts picks the CPU that takes the disk's interrupts: left
 * alone, the scheduler wakes the I/O thread where the completion interrupt came in and moves the
 * computing thread off that core, which then restarts with cold L1/L2 caches (on a 2-core VM a 7B
 * token at 3 GiB decoded 4-21% slower: docs/store-format.md, "Where the I/O thread runs").
 * Returns whether it pinned: not when `cpu` is not one the caller may use, or is its only one.
 */
static int pin_threads(Ring *r, int cpu) {
  if (!r->threaded || r->pinned || cpu < 0 || cpu >= CPU_SETSIZE) return 0;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2 || !CPU_ISSET(cpu, &allowed)) return 0;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(r->thread, sizeof one, &one) != 0) return 0;
  cpu_set_t rest = allowed;
  CPU_CLR(cpu, &rest);
  if (sched_setaffinity(0, sizeof rest, &rest) != 0) return 0;
  r->pinned = 1;
  r->opener = (pid_t)syscall(SYS_gettid);
  r->openerMask = allowed;
  r->openerPinned = rest;
  return 1;
}

/* At close, on the pinning thread: its CPUs as they were, unless someone changed them since. */
static void unpin_threads(Ring *r) {
  if (!r->pinned || (pid_t)syscall(SYS_gettid) != r->opener) return;
  r->pinned = 0;
  cpu_set_t now;
  CPU_ZERO(&now);
  if (sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &r->openerPinned))
    sched_setaffinity(0, sizeof r->openerMask, &r->openerMask);
}

static napi_value ring_open(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  int32_t fd, capacity;
  bool threaded;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &capacity) != napi_ok || napi_get_value_bool(env, argv[2], &threaded) != napi_ok || fd < 0 || capacity < 1 || capacity > 65536) {
    return throw_msg(env, "flash_aio.open(fd, capacity, threaded): bad arguments");
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
  r->queued = calloc((size_t)capacity, sizeof(int));
  r->done = calloc((size_t)capacity * 2, sizeof(double));
  r->submitFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  r->doneFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->reaped, NULL);
  int err = (!r->queued || !r->done) ? ENOMEM : (r->submitFd < 0 || r->doneFd < 0) ? errno : 0;
  r->threaded = threaded;
  if (!err && threaded) err = pthread_create(&r->thread, NULL, io_thread, r);
  if (err) {
    syscall(SYS_io_destroy, r->ctx);
    if (r->submitFd >= 0) close(r->submitFd);
    if (r->doneFd >= 0) close(r->doneFd);
    free(r->queued); free(r->done); free(r->cbs); free(r->ptrs); free(r->events); free(r);
    return throw_errno(env, "flash_aio.open: I/O thread", err);
  }
  napi_value out;
  napi_create_external(env, r, ring_finalize, NULL, &out);
  return out;
}

static napi_value ring_submit(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, argv)) return NULL;
  Ring *r = get_ring(env, argv[0]);
  if (!r) return NULL;
  size_t vlen;
  void *vdata = get_typed(env, argv[1], napi_uint8_array, &vlen, "flash_aio.submit: the view must be a Uint8Array");
  if (!vdata) return NULL;
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
    if (r->threaded) {
      cb->aio_flags = IOCB_FLAG_RESFD;
      cb->aio_resfd = (uint32_t)r->doneFd;
    }
    if (!r->threaded) r->ptrs[i] = cb; /* threaded: ptrs belongs to the I/O thread */
  }
  if (!r->threaded) {
    /* inline: the first k taken; -errno when the first is refused (EAGAIN: 0, try again later) */
    long k = n > 0 ? syscall(SYS_io_submit, r->ctx, (long)n, r->ptrs) : 0;
    if (k < 0) k = errno == EAGAIN ? 0 : -errno;
    return number(env, (double)k);
  }
  pthread_mutex_lock(&r->mu);
  if (r->qCount + n > r->capacity) {
    pthread_mutex_unlock(&r->mu);
    return throw_msg(env, "flash_aio.submit: more requests queued than the ring holds");
  }
  for (int i = 0; i < n; i++) r->queued[(r->qHead + r->qCount + i) % r->capacity] = (int)reqs[4 * i];
  r->qCount += n;
  pthread_mutex_unlock(&r->mu);
  uint64_t one = 1;
  if (n > 0) { ssize_t w = write(r->submitFd, &one, sizeof one); (void)w; }
  return number(env, (double)n);
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
  if (!r->threaded) {
    struct timespec ts = {0, 0};
    if (wait_ms > 0) {
      ts.tv_sec = (time_t)(wait_ms / 1000);
      ts.tv_nsec = (long)((wait_ms - (double)ts.tv_sec * 1000) * 1e6);
    }
    if (max > r->capacity) max = r->capacity;
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
  pthread_mutex_lock(&r->mu);
  if (r->dCount == 0 && wait_ms > 0) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long ns = until.tv_nsec + (long)(wait_ms * 1e6);
    until.tv_sec += ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    while (r->dCount == 0 && pthread_cond_timedwait(&r->reaped, &r->mu, &until) == 0) {}
  }
  int k = r->dCount < max ? r->dCount : max;
  for (int i = 0; i < k; i++) {
    int at = (r->dHead + i) % r->capacity;
    out[2 * i] = r->done[2 * at];
    out[2 * i + 1] = r->done[2 * at + 1];
  }
  r->dHead = (r->dHead + k) % r->capacity;
  r->dCount -= k;
  pthread_mutex_unlock(&r->mu);
  return number(env, (double)k);
}

static napi_value ring_pin(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (!get_args(env, info, 2, argv)) return NULL;
  Ring *r = get_ring(env, argv[0]);
  if (!r) return NULL;
  int32_t cpu;
  if (napi_get_value_int32(env, argv[1], &cpu) != napi_ok) return throw_msg(env, "flash_aio.pin: bad arguments");
  napi_value out;
  napi_get_boolean(env, pin_threads(r, cpu), &out);
  return out;
}

static napi_value ring_close(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!get_args(env, info, 1, argv)) return NULL;
  void *p = NULL;
  if (napi_get_value_external(env, argv[0], &p) != napi_ok || p == NULL) return throw_msg(env, "flash_aio.close: not a ring");
  Ring *r = (Ring *)p;
  if (r->fd >= 0) {
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_mutex_unlock(&r->mu);
    uint64_t one = 1;
    ssize_t w = write(r->submitFd, &one, sizeof one);
    (void)w;
    if (r->threaded) pthread_join(r->thread, NULL);
    unpin_threads(r);
    syscall(SYS_io_destroy, r->ctx);
    close(r->submitFd);
    close(r->doneFd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->reaped);
    r->fd = -1;
    free(r->cbs); free(r->ptrs); free(r->events); free(r->queued); free(r->done);
    r->cbs = NULL; r->ptrs = NULL; r->events = NULL; r->queued = NULL; r->done = NULL;
  }
  return NULL;
}

/*
 * set_checksums(ring, crcs: Uint32Array, start, end, chunkBytes, seen: Uint8Array | null): the
 * I/O thread verifies every read that lands whole against crcs (chunks of [start, end); `seen`:
 * skip chunks verified before and mark the ones it verifies), and reports a mismatch as
 * -EBADMSG. Threaded rings only. The arrays must outlive the ring (the caller keeps them).
 */
static napi_value ring_set_checksums(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  if (!get_args(env, info, 6, argv)) return NULL;
  Ring *r = get_ring(env, argv[0]);
  if (!r) return NULL;
  if (!r->threaded) return throw_msg(env, "flash_aio.set_checksums: the ring has no I/O thread");
  size_t count;
  void *crcs = get_typed(env, argv[1], napi_uint32_array, &count, "flash_aio.set_checksums: crcs must be a Uint32Array");
  if (!crcs) return NULL;
  double start, end;
  int32_t chunk;
  if (napi_get_value_double(env, argv[2], &start) != napi_ok || napi_get_value_double(env, argv[3], &end) != napi_ok ||
      napi_get_value_int32(env, argv[4], &chunk) != napi_ok || chunk < 1 || !(start >= 0) || !(end >= start) || (end - start) / chunk > (double)count) {
    return throw_msg(env, "flash_aio.set_checksums: bad region");
  }
  void *seen = NULL;
  napi_valuetype vt;
  napi_typeof(env, argv[5], &vt);
  if (vt != napi_null && vt != napi_undefined) {
    size_t n = 0;
    const char *error = "flash_aio.set_checksums: seen must be a Uint8Array with an entry per chunk";
    seen = get_typed(env, argv[5], napi_uint8_array, &n, error);
    if (!seen) return NULL;
    if (n < count) return throw_msg(env, error);
  }
  pthread_once(&crc_once, crc_init);
  pthread_mutex_lock(&r->mu);
  r->crcs = (const uint32_t *)crcs;
  r->seen = (uint8_t *)seen;
  r->ckStart = start;
  r->ckEnd = end;
  r->ckChunk = chunk;
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/*
 * huge_pages(view: Uint8Array) -> bytes: madvise(MADV_HUGEPAGE) over the 2 MiB pages wholly
 * inside the view, so that where transparent huge pages are "madvise" the kernel backs them with
 * huge pages when they are first touched. Returns the bytes advised (0 where the kernel refused).
 */
static napi_value huge_pages(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!get_args(env, info, 1, argv)) return NULL;
  size_t len;
  void *data = get_typed(env, argv[0], napi_uint8_array, &len, "flash_aio.hugePages: the view must be a Uint8Array");
  if (!data) return NULL;
  const uintptr_t H = (uintptr_t)2 << 20;
  uintptr_t a = ((uintptr_t)data + H - 1) & ~(H - 1), b = ((uintptr_t)data + len) & ~(H - 1);
  if (b <= a) return number(env, 0);
  if (madvise((void *)a, b - a, MADV_HUGEPAGE) != 0) return number(env, 0);
  return number(env, (double)(b - a));
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"open", NULL, ring_open, NULL, NULL, NULL, napi_default, NULL},
    {"submit", NULL, ring_submit, NULL, NULL, NULL, napi_default, NULL},
    {"reap", NULL, ring_reap, NULL, NULL, NULL, napi_default, NULL},
    {"pin", NULL, ring_pin, NULL, NULL, NULL, napi_default, NULL},
    {"setChecksums", NULL, ring_set_checksums, NULL, NULL, NULL, napi_default, NULL},
    {"close", NULL, ring_close, NULL, NULL, NULL, napi_default, NULL},
    {"hugePages", NULL, huge_pages, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)

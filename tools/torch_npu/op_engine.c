/* An op engine small enough for the smoke tests: torch_npu runs
 * torch.zeros (and the zero fill of a few other factories) as the op
 * "ZerosLike" through aclopCompileAndExecute, torch.ones as "OnesLike"
 * (ProcessGroupHCCL::barrier all-reduces at::ones({1})), and Tensor.fill_
 * with a scalar (torch_npu 2.8's graph capture fills its generator's seed
 * and offset tensors) as "Fill". Compiling and running ops is the graph
 * engine's and the op compiler's work, not the runtime's, so it is not part
 * of the emulator. Here ZerosLike and Zeros become an aclrtMemsetAsync of
 * the output on the op's stream (queued by the emulator like any other
 * stream work); Fill, of a value held in host memory, and OnesLike, of 1 in
 * the output's type, one aclrtMemsetAsync per run of equal bytes, for
 * outputs of at most FILL_MAX_BYTES. Every other op (and a Fill or OnesLike
 * beyond that) is refused with 207000
 * (ACL_ERROR_RT_FEATURE_NOT_SUPPORT), its type named once on stderr.
 *
 * Tensor descriptors, data buffers and op attributes are plain host structs:
 * only what aclopCompileAndExecute reads is kept. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
typedef int aclError;
typedef void *aclrtStream;

/* the emulator's */
extern aclError aclrtMemsetAsync(void *dev, size_t max, int32_t value, size_t count, aclrtStream stream);

typedef struct {
  void *data;
  size_t size;
} DataBuffer;

API void *aclCreateDataBuffer(void *data, size_t size) {
  DataBuffer *b = malloc(sizeof *b);
  if (b) {
    b->data = data;
    b->size = size;
  }
  return b;
}
API aclError aclDestroyDataBuffer(const void *buffer) {
  free((void *)buffer);
  return 0;
}
API void *aclGetDataBufferAddr(const void *buffer) { return buffer ? ((const DataBuffer *)buffer)->data : NULL; }
API size_t aclGetDataBufferSizeV2(const void *buffer) { return buffer ? ((const DataBuffer *)buffer)->size : 0; }

/* What Fill reads: the element type and where the data lies. */
typedef struct {
  int dtype;
  int placement; /* aclMemType: 0 device, 1 and 2 host */
} TensorDesc;

API void *aclCreateTensorDesc(int dtype, int dims, const int64_t *shape, int format) {
  (void)dims, (void)shape, (void)format;
  TensorDesc *d = calloc(1, sizeof *d);
  if (d) d->dtype = dtype;
  return d;
}
API void aclDestroyTensorDesc(const void *desc) { free((void *)desc); }
API aclError aclSetTensorFormat(void *desc, int format) { return desc ? ((void)format, 0) : ACL_ERROR_INVALID_PARAM; }
API aclError aclSetTensorShape(void *desc, int dims, const int64_t *shape) {
  (void)dims, (void)shape;
  return desc ? 0 : ACL_ERROR_INVALID_PARAM;
}
API aclError aclSetTensorPlaceMent(void *desc, int placement) {
  if (!desc) return ACL_ERROR_INVALID_PARAM;
  ((TensorDesc *)desc)->placement = placement;
  return 0;
}
API void aclSetTensorDescName(void *desc, const char *name) { (void)desc, (void)name; }

API void *aclopCreateAttr(void) { return calloc(1, 16); }
API void aclopDestroyAttr(const void *attr) { free((void *)attr); }
#define ATTR_SETTER(fn, ...)                                      \
  API aclError fn(void *attr, const char *name, __VA_ARGS__) {    \
    return (attr && name) ? 0 : ACL_ERROR_INVALID_PARAM;          \
  }
ATTR_SETTER(aclopSetAttrBool, uint8_t value)
ATTR_SETTER(aclopSetAttrInt, int64_t value)
ATTR_SETTER(aclopSetAttrFloat, float value)
ATTR_SETTER(aclopSetAttrString, const char *value)
ATTR_SETTER(aclopSetAttrDataType, int value)
ATTR_SETTER(aclopSetAttrListBool, int count, const uint8_t *values)
ATTR_SETTER(aclopSetAttrListInt, int count, const int64_t *values)
ATTR_SETTER(aclopSetAttrListFloat, int count, const float *values)
ATTR_SETTER(aclopSetAttrListListInt, int count, const int *lengths, const int64_t *const values[])

/* The size of one element of aclDataType `dtype` (acl_base.h), 0 for a type Fill does not take. */
static size_t element_size(int dtype) {
  switch (dtype) {
    case 2: case 4: case 12: return 1;          /* INT8, UINT8, BOOL */
    case 1: case 6: case 7: case 27: return 2;  /* FLOAT16, INT16, UINT16, BF16 */
    case 0: case 3: case 8: return 4;           /* FLOAT, INT32, UINT32 */
    case 9: case 10: case 11: return 8;         /* INT64, UINT64, DOUBLE */
    default: return 0;
  }
}

#define FILL_MAX_BYTES 4096

/* Every element of y (esize bytes each) becomes `value`: memsets of runs of equal bytes, queued
 * on the stream. */
static aclError fill_with(const DataBuffer *y, const unsigned char *value, size_t esize, aclrtStream stream) {
  if (y->size % esize != 0 || y->size > FILL_MAX_BYTES) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  size_t i = 0;
  while (i < y->size) {
    size_t j = i + 1;
    while (j < y->size && value[j % esize] == value[i % esize]) j++;
    aclError err = aclrtMemsetAsync((char *)y->data + i, y->size - i, value[i % esize], j - i, stream);
    if (err != 0) return err;
    i = j;
  }
  return 0;
}

/* Fill (inputs: dims, value; output: y): every element of y becomes value, a host tensor of y's
 * type. */
static aclError fill(int inputs, const void *const input_desc[], const void *const input_data[], int outputs,
                     const void *const output_desc[], void *const output_data[], aclrtStream stream) {
  if (inputs < 2 || outputs < 1 || !input_desc || !input_data || !output_desc || !output_data)
    return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  const TensorDesc *vd = input_desc[1], *yd = output_desc[0];
  const DataBuffer *v = input_data[1], *y = output_data[0];
  if (!vd || !yd || !v || !y || !v->data) return ACL_ERROR_INVALID_PARAM;
  size_t esize = element_size(yd->dtype);
  if (esize == 0 || vd->dtype != yd->dtype || vd->placement == 0 || v->size < esize)
    return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  return fill_with(y, v->data, esize, stream);
}

/* OnesLike (input: x; output: y): every element of y becomes 1 in y's type (little-endian). */
static aclError ones_like(int outputs, const void *const output_desc[], void *const output_data[],
                          aclrtStream stream) {
  if (outputs < 1 || !output_desc || !output_data) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  const TensorDesc *yd = output_desc[0];
  const DataBuffer *y = output_data[0];
  if (!yd || !y) return ACL_ERROR_INVALID_PARAM;
  uint64_t one;
  switch (yd->dtype) {
    case 0: one = 0x3f800000u; break;           /* FLOAT */
    case 1: one = 0x3c00u; break;               /* FLOAT16 */
    case 27: one = 0x3f80u; break;              /* BF16 */
    case 11: one = 0x3ff0000000000000ull; break; /* DOUBLE */
    default: one = 1; break;                    /* the integer types and BOOL */
  }
  size_t esize = element_size(yd->dtype);
  if (esize == 0) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  unsigned char value[8];
  for (size_t k = 0; k < 8; k++) value[k] = (unsigned char)(one >> (8 * k));
  return fill_with(y, value, esize, stream);
}

/* Names each op type once on stderr, with what happened to it. */
static void note_op(const char *op, int runs) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static char seen[64][48];
  pthread_mutex_lock(&mu);
  int k = 0;
  while (k < 64 && seen[k][0] && strcmp(seen[k], op) != 0) k++;
  if (k < 64 && !seen[k][0]) {
    snprintf(seen[k], sizeof seen[k], "%s", op);
    char msg[128];
    int n = snprintf(msg, sizeof msg, "[torch_npu harness] op %s: %s\n", op,
                     runs ? "memsets on its stream" : "not supported (207000)");
    if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  }
  pthread_mutex_unlock(&mu);
}

API aclError aclopCompileAndExecute(const char *op, int inputs, const void *const input_desc[],
                                    const void *const input_data[], int outputs, const void *const output_desc[],
                                    void *const output_data[], const void *attr, int engine, int compile_flag,
                                    const char *op_path, aclrtStream stream) {
  (void)attr, (void)engine, (void)compile_flag, (void)op_path;
  if (!op) return ACL_ERROR_INVALID_PARAM;
  if (strcmp(op, "Fill") == 0) {
    aclError err = fill(inputs, input_desc, input_data, outputs, output_desc, output_data, stream);
    note_op(op, err != ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    return err;
  }
  if (strcmp(op, "OnesLike") == 0) {
    aclError err = ones_like(outputs, output_desc, output_data, stream);
    note_op(op, err != ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    return err;
  }
  int zeros = (strcmp(op, "ZerosLike") == 0 || strcmp(op, "Zeros") == 0) && outputs >= 1 && output_data;
  note_op(op, zeros);
  if (!zeros) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  const DataBuffer *out = output_data[0];
  if (!out) return ACL_ERROR_INVALID_PARAM;
  return aclrtMemsetAsync(out->data, out->size, 0, out->size, stream);
}

// cublasLt.h for the simulator: a stand-in for cuBLASLt's matmul, computed on the CPU (cudasim_blas.h).
// Covered: cublasLtMatmul with column- or row-major layouts, transposes, batches (count and stride on the
// layouts), fp32/fp16/bf16/fp64 data, and the epilogues DEFAULT, BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS
// (the ones a forward matmul uses, as llm.c's dev/cuda files do); the heuristic query gives one algorithm.
// Other epilogues and attributes raise an error naming them. Nothing needs linking: -lcublasLt is dropped.
#pragma once
#include "cublas_v2.h"

struct cublasLtContext {};
typedef cublasLtContext* cublasLtHandle_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_RELU_AUX = 130,
  CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_RELU_BIAS = 6, CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 134,
  CUBLASLT_EPILOGUE_DRELU = 136, CUBLASLT_EPILOGUE_DRELU_BGRAD = 152, CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_DGELU_BGRAD = 208, CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;
typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1, CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_TRANSC = 5,
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6, CUBLASLT_MATMUL_DESC_EPILOGUE = 7, CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0, CUBLASLT_MATRIX_LAYOUT_ORDER = 1, CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3, CUBLASLT_MATRIX_LAYOUT_LD = 4, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
} cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;
typedef enum { CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 }
    cublasLtMatmulPreferenceAttributes_t;

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  long long bias_batch_stride = 0;
  int bias_type = -1;  // -1: D's type
};
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  unsigned long long rows, cols;
  long long ld;
  int order = CUBLASLT_ORDER_COL;
  int batch = 1;
  long long batch_stride = 0;
};
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque_t {};
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
typedef struct { unsigned long long data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (h == nullptr) ::cudasim::blas::fail("cublasLtCreate", "handle", "is a null pointer");
  *h = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline size_t cublasLtGetVersion() { return 130000; }

namespace cudasim::blas {
// Copy an attribute's value of type T out of (buf, size), checking the size as cuBLASLt does.
template <class T>
inline T attribute(const char* call, const char* name, const void* buf, size_t size) {
  if (buf == nullptr) fail(call, name, "has a null buffer");
  if (size != sizeof(T))
    fail(call, name, "was given " + std::to_string(size) + " bytes, not " + std::to_string(sizeof(T)));
  T v;
  std::memcpy(&v, buf, sizeof(T));
  return v;
}
}  // namespace cudasim::blas

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  const char* call = "cublasLtMatmulDescCreate";
  if (scale != ::cudasim::blas::scale_type(call, compute))
    ::cudasim::blas::fail(call, "scaleType", std::string("is ") + ::cudasim::blas::type_name(scale) +
                                                 ", not the compute type's scale type");
  *d = new cublasLtMatmulDescOpaque_t();
  (*d)->compute = compute;
  (*d)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t size) {
  using ::cudasim::blas::attribute;
  const char* call = "cublasLtMatmulDescSetAttribute";
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: d->transa = attribute<cublasOperation_t>(call, "TRANSA", buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: d->transb = attribute<cublasOperation_t>(call, "TRANSB", buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: d->epilogue = attribute<cublasLtEpilogue_t>(call, "EPILOGUE", buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: d->bias = attribute<const void*>(call, "BIAS_POINTER", buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      d->bias_batch_stride = attribute<long long>(call, "BIAS_BATCH_STRIDE", buf, size);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: d->bias_type = attribute<cudaDataType_t>(call, "BIAS_DATA_TYPE", buf, size); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (attribute<int>(call, "POINTER_MODE", buf, size) > 1)
        ::cudasim::blas::fail(call, "POINTER_MODE", "is not host or device (the stand-in has no vector alpha)");
      break;
    case CUBLASLT_MATMUL_DESC_TRANSC:
      if (attribute<cublasOperation_t>(call, "TRANSC", buf, size) != CUBLAS_OP_N)
        ::cudasim::blas::fail(call, "TRANSC", "is not CUBLAS_OP_N (cuBLASLt has only that)");
      break;
    default:
      ::cudasim::blas::fail(call, "the attribute", std::to_string(int(attr)) + " is one the stand-in does not have");
  }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type,
                                                 unsigned long long rows, unsigned long long cols, long long ld) {
  *l = new cublasLtMatrixLayoutOpaque_t();
  (*l)->type = type;
  (*l)->rows = rows;
  (*l)->cols = cols;
  (*l)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                       const void* buf, size_t size) {
  using ::cudasim::blas::attribute;
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: l->type = attribute<cudaDataType_t>(call, "TYPE", buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      l->order = attribute<int>(call, "ORDER", buf, size);
      if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
        ::cudasim::blas::fail(call, "ORDER", "is not CUBLASLT_ORDER_COL or _ROW (the stand-in has no tiled orders)");
      break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: l->rows = attribute<unsigned long long>(call, "ROWS", buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: l->cols = attribute<unsigned long long>(call, "COLS", buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: l->ld = attribute<long long>(call, "LD", buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: l->batch = attribute<int>(call, "BATCH_COUNT", buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      l->batch_stride = attribute<long long>(call, "STRIDED_BATCH_OFFSET", buf, size);
      break;
    default:
      ::cudasim::blas::fail(call, "the attribute", std::to_string(int(attr)) + " is one the stand-in does not have");
  }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
// A preference only narrows which algorithm is chosen; the stand-in has one.
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                           const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
                                                     cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (requested < 1) ::cudasim::blas::fail("cublasLtMatmulAlgoGetHeuristic", "requestedAlgoCount", "is less than 1");
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace cudasim::blas {
inline Matrix lt_matrix(const cublasLtMatrixLayoutOpaque_t& l, const void* p, bool trans) {
  long long rs = l.order == CUBLASLT_ORDER_COL ? 1 : l.ld, cs = l.order == CUBLASLT_ORDER_COL ? l.ld : 1;
  if (trans) std::swap(rs, cs);
  return Matrix{p, l.type, rs, cs, l.batch_stride};
}
inline void lt_check(const char* name, const cublasLtMatrixLayoutOpaque_t* l, unsigned long long rows,
                     unsigned long long cols, int batch) {
  const char* call = "cublasLtMatmul";
  if (l == nullptr) fail(call, name, "has no layout (a null cublasLtMatrixLayout_t)");
  if (!known_type(l->type)) fail(call, name, std::string("'s type is ") + type_name(l->type) + ", which the stand-in does not have");
  if (l->rows != rows || l->cols != cols)
    fail(call, name, "is " + std::to_string(l->rows) + "x" + std::to_string(l->cols) + ", but the product needs " +
                         std::to_string(rows) + "x" + std::to_string(cols));
  check_ld(call, name, l->ld, l->order == CUBLASLT_ORDER_COL ? (long long)rows : (long long)cols);
  if (l->batch != batch && l->batch != 1)
    fail(call, name, "has a batch count of " + std::to_string(l->batch) + ", D's is " + std::to_string(batch));
}
}  // namespace cudasim::blas

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t Ad, const void* B, cublasLtMatrixLayout_t Bd,
                                     const void* beta, const void* C, cublasLtMatrixLayout_t Cd, void* D,
                                     cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t*, void*, size_t,
                                     cudaStream_t) {
  namespace b = ::cudasim::blas;
  const char* call = "cublasLtMatmul";
  if (h == nullptr) b::fail(call, "handle", "is null: create it with cublasLtCreate first");
  if (d == nullptr) b::fail(call, "computeDesc", "is null");
  if (Dd == nullptr || Ad == nullptr) b::fail(call, Dd ? "Adesc" : "Ddesc", "is null");
  bool tA = b::transposed(call, "TRANSA", d->transa), tB = b::transposed(call, "TRANSB", d->transb);
  unsigned long long m = Dd->rows, n = Dd->cols, k = tA ? Ad->rows : Ad->cols;
  int batch = Dd->batch;
  b::lt_check("Ddesc", Dd, m, n, batch);
  b::lt_check("Adesc", Ad, tA ? k : m, tA ? m : k, batch);
  b::lt_check("Bdesc", Bd, tB ? n : k, tB ? k : n, batch);
  b::lt_check("Cdesc", Cd, m, n, batch);
  if (Bd->type != Ad->type)
    b::fail(call, "Bdesc", std::string("'s type is ") + b::type_name(Bd->type) + ", not Adesc's " + b::type_name(Ad->type));
  if (Cd->type != Dd->type) b::fail(call, "Cdesc", "'s type differs from Ddesc's");
  b::check_types(call, Ad->type, Bd->type, Dd->type);
  if (Cd->order != Dd->order || Cd->ld != Dd->ld) {
    if (C == D) b::fail(call, "Cdesc", "differs from Ddesc while C and D are the same memory (in place)");
  }
  b::Epilogue ep;
  switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_RELU: ep.act = b::RELU; break;
    case CUBLASLT_EPILOGUE_GELU: ep.act = b::GELU; break;
    case CUBLASLT_EPILOGUE_BIAS: ep.bias = d->bias; break;
    case CUBLASLT_EPILOGUE_RELU_BIAS: ep.bias = d->bias; ep.act = b::RELU; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: ep.bias = d->bias; ep.act = b::GELU; break;
    default:
      b::fail(call, "the epilogue", std::to_string(int(d->epilogue)) + " is not one the stand-in has (DEFAULT, BIAS, RELU, "
                                    "RELU_BIAS, GELU, GELU_BIAS; no AUX, gradient or backward epilogues)");
  }
  if (ep.bias) {
    ep.bias_type = d->bias_type < 0 ? Dd->type : cudaDataType_t(d->bias_type);
    ep.bias_batch_stride = d->bias_batch_stride;
  } else if (d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
             d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) {
    b::fail(call, "the bias epilogue", "has no BIAS_POINTER set");
  }
  b::multiply(call, m, n, k, batch, b::read(d->scale, alpha, call, "alpha"), b::lt_matrix(*Ad, A, tA),
              b::lt_matrix(*Bd, B, tB), b::read(d->scale, beta, call, "beta"), b::lt_matrix(*Cd, C, false),
              b::lt_matrix(*Dd, D, false), ep);
  return CUBLAS_STATUS_SUCCESS;
}

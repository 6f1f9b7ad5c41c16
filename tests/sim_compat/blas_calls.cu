// blas_calls.cu: cuBLAS and cuBLASLt matrix multiplications called as llm.c's dev/cuda files and
// extensions call them, on buffers that tests/test_sim_blas.py reads as column-major matrices (any
// leading dimension, transposes, batches) and compares with torch.matmul. On cuda this links the real
// libraries; on sim the simulator's stand-ins (cublas_v2.h, cublasLt.h) compute the same products.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// link flags: -lcublas -lcublasLt
//
//   op                 what it calls
//   sgemm              cublasSgemm (fp32)
//   gemm_ex            cublasGemmEx, the data type of the tensors (fp32, fp16, bf16), fp32 compute
//   sgemm_batched      cublasSgemmStridedBatched
//   gemm_batched_ex    cublasGemmStridedBatchedEx
//   lt_matmul          cublasLtMatmul with an epilogue (DEFAULT, BIAS, RELU_BIAS, GELU_BIAS, ...), llm.c's calls
//   gemv               cublasSgemv or cublasDgemv (by the tensors' type), strided vectors (the CUDA samples' calls)
#include "helpers.cuh"

#include <cublasLt.h>
#include <cublas_v2.h>

#define CUBLAS_OK(call)                                                                                 \
  do {                                                                                                  \
    cublasStatus_t s_ = (call);                                                                         \
    TORCH_CHECK(s_ == CUBLAS_STATUS_SUCCESS, #call " failed: ", cublasGetStatusString(s_));             \
  } while (0)

// One handle of each library for the process, made at first use.
template <class Handle>
static Handle made(cublasStatus_t (*create)(Handle*)) {
  Handle h;
  CUBLAS_OK(create(&h));
  return h;
}
static cublasHandle_t handle() {
  static cublasHandle_t h = made<cublasHandle_t>(cublasCreate);
  return h;
}
static cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = made<cublasLtHandle_t>(cublasLtCreate);
  return h;
}

static cublasOperation_t op(int64_t t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

static cudaDataType_t data_type(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return CUDA_R_32F;
  if (t.scalar_type() == at::kHalf) return CUDA_R_16F;
  if (t.scalar_type() == at::kBFloat16) return CUDA_R_16BF;
  TORCH_CHECK(false, "fp32, fp16 or bf16 tensors only");
}

// c is updated in place and returned: C = alpha op(A) op(B) + beta C (column-major, leading dimensions given)
at::Tensor sgemm(at::Tensor a, at::Tensor b, at::Tensor c, int64_t ta, int64_t tb, int64_t m, int64_t n,
                    int64_t k, int64_t lda, int64_t ldb, int64_t ldc, double alpha, double beta) {
  float al = alpha, be = beta;
  CUBLAS_OK(cublasSgemm(handle(), op(ta), op(tb), m, n, k, &al, a.data_ptr<float>(), lda, b.data_ptr<float>(), ldb,
                        &be, c.data_ptr<float>(), ldc));
  return c;
}

at::Tensor gemm_ex(at::Tensor a, at::Tensor b, at::Tensor c, int64_t ta, int64_t tb, int64_t m, int64_t n,
                      int64_t k, int64_t lda, int64_t ldb, int64_t ldc, double alpha, double beta) {
  float al = alpha, be = beta;
  CUBLAS_OK(cublasGemmEx(handle(), op(ta), op(tb), m, n, k, &al, a.data_ptr(), data_type(a), lda, b.data_ptr(),
                         data_type(b), ldb, &be, c.data_ptr(), data_type(c), ldc, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
  return c;
}

at::Tensor sgemm_batched(at::Tensor a, at::Tensor b, at::Tensor c, int64_t ta, int64_t tb, int64_t m,
                            int64_t n, int64_t k, int64_t lda, int64_t sa, int64_t ldb, int64_t sb, int64_t ldc,
                            int64_t sc, int64_t batch, double alpha, double beta) {
  float al = alpha, be = beta;
  CUBLAS_OK(cublasSgemmStridedBatched(handle(), op(ta), op(tb), m, n, k, &al, a.data_ptr<float>(), lda, sa,
                                      b.data_ptr<float>(), ldb, sb, &be, c.data_ptr<float>(), ldc, sc, batch));
  return c;
}

at::Tensor gemm_batched_ex(at::Tensor a, at::Tensor b, at::Tensor c, int64_t ta, int64_t tb, int64_t m,
                              int64_t n, int64_t k, int64_t lda, int64_t sa, int64_t ldb, int64_t sb, int64_t ldc,
                              int64_t sc, int64_t batch, double alpha, double beta) {
  float al = alpha, be = beta;
  CUBLAS_OK(cublasGemmStridedBatchedEx(handle(), op(ta), op(tb), m, n, k, &al, a.data_ptr(), data_type(a), lda, sa,
                                       b.data_ptr(), data_type(b), ldb, sb, &be, c.data_ptr(), data_type(c), ldc, sc,
                                       batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return c;
}

// D = epilogue(alpha op(A) op(B) + beta C + bias), D written into d; C is c (in place when c is d).
at::Tensor lt_matmul(at::Tensor a, at::Tensor b, at::Tensor c, at::Tensor d, at::Tensor bias,
                        int64_t ta, int64_t tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                        int64_t epilogue, double alpha, double beta) {
  cublasLtMatmulDesc_t desc;
  CUBLAS_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = op(ta), opb = op(tb);
  cublasLtEpilogue_t epi = cublasLtEpilogue_t(epilogue);
  const void* bias_ptr = bias.numel() ? bias.data_ptr() : nullptr;
  CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias_ptr) CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  cublasLtMatrixLayout_t la, lb, lc;
  CUBLAS_OK(cublasLtMatrixLayoutCreate(&la, data_type(a), ta ? k : m, ta ? m : k, lda));
  CUBLAS_OK(cublasLtMatrixLayoutCreate(&lb, data_type(b), tb ? n : k, tb ? k : n, ldb));
  CUBLAS_OK(cublasLtMatrixLayoutCreate(&lc, data_type(c), m, n, ldc));
  cublasLtMatmulPreference_t pref;
  size_t workspace_size = 32 << 20;
  CUBLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_size,
                                                 sizeof(workspace_size)));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  CUBLAS_OK(cublasLtMatmulAlgoGetHeuristic(lt_handle(), desc, la, lb, lc, lc, pref, 1, &heuristic, &found));
  TORCH_CHECK(found == 1, "no cuBLASLt algorithm for this matmul");
  static void* workspace = nullptr;  // one for the process, as llm.c keeps it
  if (workspace == nullptr) TORCH_CHECK(cudaMalloc(&workspace, workspace_size) == cudaSuccess, "cudaMalloc failed");
  float al = alpha, be = beta;
  CUBLAS_OK(cublasLtMatmul(lt_handle(), desc, &al, a.data_ptr(), la, b.data_ptr(), lb, &be, c.data_ptr(), lc,
                           d.data_ptr(), lc, &heuristic.algo, workspace, workspace_size, nullptr));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  return d;
}

// y is updated in place and returned: y = alpha op(A) x + beta y (A column-major m x n, vectors with strides)
at::Tensor gemv(at::Tensor a, at::Tensor x, at::Tensor y, int64_t trans, int64_t m, int64_t n, int64_t lda,
                int64_t incx, int64_t incy, double alpha, double beta) {
  if (a.scalar_type() == at::kDouble) {
    CUBLAS_OK(cublasDgemv(handle(), op(trans), m, n, &alpha, a.data_ptr<double>(), lda, x.data_ptr<double>(), incx,
                          &beta, y.data_ptr<double>(), incy));
  } else {
    float al = alpha, be = beta;
    CUBLAS_OK(cublasSgemv(handle(), op(trans), m, n, &al, a.data_ptr<float>(), lda, x.data_ptr<float>(), incx, &be,
                          y.data_ptr<float>(), incy));
  }
  return y;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("gemv(Tensor a, Tensor x, Tensor y, int trans, int m, int n, int lda, int incx, int incy, float alpha, "
        "float beta) -> Tensor", &gemv);
  m.def("sgemm(Tensor a, Tensor b, Tensor c, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, "
        "float alpha, float beta) -> Tensor", &sgemm);
  m.def("gemm_ex(Tensor a, Tensor b, Tensor c, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, "
        "float alpha, float beta) -> Tensor", &gemm_ex);
  m.def("sgemm_batched(Tensor a, Tensor b, Tensor c, int ta, int tb, int m, int n, int k, int lda, int sa, int ldb, "
        "int sb, int ldc, int sc, int batch, float alpha, float beta) -> Tensor", &sgemm_batched);
  m.def("gemm_batched_ex(Tensor a, Tensor b, Tensor c, int ta, int tb, int m, int n, int k, int lda, int sa, int ldb, "
        "int sb, int ldc, int sc, int batch, float alpha, float beta) -> Tensor", &gemm_batched_ex);
  m.def("lt_matmul(Tensor a, Tensor b, Tensor c, Tensor d, Tensor bias, int ta, int tb, int m, int n, int k, int lda, "
        "int ldb, int ldc, int epilogue, float alpha, float beta) -> Tensor", &lt_matmul);
}

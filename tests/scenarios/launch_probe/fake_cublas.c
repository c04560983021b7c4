/* A stand-in of libcublas.so.13's cublasGemmEx (19 parameters, the real one's: a handle, enums, ints and
 * pointers). It prints the arguments it got, so the test sees that the probe's forwarder of 24 words
 * passed every one through unchanged. */
#include <stdio.h>
int cublasGemmEx(void * handle, int transa, int transb, int m, int n, int k, const void * alpha, const void * a,
                 int a_type, int lda, const void * b, int b_type, int ldb, const void * beta, void * c, int c_type,
                 int ldc, int compute_type, int algo) {
    printf("real cublasGemmEx %p %d %d %d %d %d %p %p %d %d %p %d %d %p %p %d %d %d %d\n", handle, transa, transb,
           m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, compute_type, algo);
    return 0;
}

/* A stand-in of libcuda.so.1: the stand-in kernel handle is its mangled name; a kernel whose name
 * holds "tile" has 1024 bytes of static shared memory, one holding "unsized" cannot say (an error), any
 * other has none. */
#include <string.h>
int cuKernelGetName(const char ** name, const void * kernel) {
    *name = (const char *) kernel;
    return 0;
}
int cuCtxGetDevice(int * device) {
    *device = 0;
    return 0;
}
int cuKernelGetAttribute(int * value, int attribute, const void * kernel, int device) {
    if (attribute != 1 || device != 0) {   /* 1: CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
        return 1;
    }
    if (strstr((const char *) kernel, "unsized")) {
        return 500;                        /* CUDA_ERROR_INVALID_HANDLE */
    }
    *value = strstr((const char *) kernel, "tile") ? 1024 : 0;
    return 0;
}

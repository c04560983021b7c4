/* A stand-in of libcuda.so.1's cuKernelGetName: the stand-in kernel handle is its mangled name. */
int cuKernelGetName(const char ** name, const void * kernel) {
    *name = (const char *) kernel;
    return 0;
}

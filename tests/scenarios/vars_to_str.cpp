// A case's vars() as ggml's tests/test-backend-ops.cpp builds it: VAR_TO_STR stringifies the member
// name (`#x "="`), so the compiled program carries "type_KV=" (before ggml 6976b270) or "type_K=" and
// "type_V=" (from it on) in its read-only data. Built with -DSPLIT for the newer era.
#include <cstdio>
#include <string>

static std::string var_to_str(const char * s) { return s; }
static std::string var_to_str(int x) { return std::to_string(x); }

#define VAR_TO_STR(x) (#x "=" + var_to_str(x))
#define VARS_TO_STR2(a, b) VAR_TO_STR(a) + "," + VAR_TO_STR(b)
#define VARS_TO_STR3(a, b, c) VAR_TO_STR(a) + "," + VARS_TO_STR2(b, c)

struct test_flash_attn_ext {
    int hsk = 256;
#ifdef SPLIT
    const char * type_K = "f16";
    const char * type_V = "f16";
    std::string vars() const { return VARS_TO_STR3(hsk, type_K, type_V); }
#else
    const char * type_KV = "f16";
    std::string vars() const { return VARS_TO_STR2(hsk, type_KV); }
#endif
};

int main() {
    std::printf("  FLASH_ATTN_EXT(%s): OK\n", test_flash_attn_ext().vars().c_str());
    return 0;
}

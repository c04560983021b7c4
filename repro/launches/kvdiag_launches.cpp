// kvdiag's launch lister: a CUPTI injection library that names every kernel a CUDA program launches.
//
// The CUDA driver loads it into any CUDA program when CUDA_INJECTION64_PATH names it, and calls
// InitializeInjection() at cuInit. It subscribes to CUPTI's runtime and driver API callbacks and, for
// every launch (the callbacks whose data carries a symbolName: cudaLaunchKernel and its _ptsz/ExC/
// cooperative twins, CUDA 13's __cudaLaunchKernel, cuLaunchKernel(Ex)), writes the demangled kernel:
//
//   KVDIAG_PRINT_LAUNCHES set:  "kvdiag-launch: <kernel>" on the program's own stdout (the same libc
//                               FILE, so each line lands between the program's own lines in order,
//                               inside the test case that launched it), flushed;
//   KVDIAG_LAUNCH_LOG=<file>:   "<pid> <kernel>" appended to that file, one line per launch.
//
// A driver-API launch made inside a runtime launch (the runtime calls the driver) is the same launch
// and is not written twice. Once subscribed it writes "kvdiag-launch-lister: cupti <version>" first:
// a run without that line did not list its launches (another tool took the injection slot, CUPTI
// refused a second subscriber), and kvdiag then does not read "no launch" into it.
// It does not depend on the program's source, nor on how it links the CUDA runtime (static or shared).
// Built by kvdiag (kvdiag/target/launch_lister.py) with the toolkit's nvcc against its CUPTI.

#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unistd.h>

namespace {

std::mutex g_lock;
FILE * g_log = nullptr;
bool g_stdout = false;
thread_local int t_runtime_depth = 0;  // inside a runtime launch: its driver call is the same launch

// One line to each sink asked for: "<marker><text>" on stdout; "<pid> <text>" in the log, with the
// marker too where it says something other than a launch (the ready line).
void emit(const char * marker, const char * text, bool marker_in_log) {
    std::lock_guard<std::mutex> hold(g_lock);
    if (g_stdout) {
        fprintf(stdout, "%s%s\n", marker, text);
        fflush(stdout);
    }
    if (g_log) {
        fprintf(g_log, "%d %s%s\n", (int) getpid(), marker_in_log ? marker : "", text);
        fflush(g_log);
    }
}

void write_launch(const char * mangled) {
    int status = 0;
    char * name = mangled ? abi::__cxa_demangle(mangled, nullptr, nullptr, &status) : nullptr;
    emit("kvdiag-launch: ", name ? name : (mangled ? mangled : "(unnamed)"), false);
    free(name);
}

void CUPTIAPI on_callback(void *, CUpti_CallbackDomain domain, CUpti_CallbackId, const void * data) {
    const CUpti_CallbackData * info = static_cast<const CUpti_CallbackData *>(data);
    if (info == nullptr || info->symbolName == nullptr) {
        return;                                   // not a launch
    }
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        if (info->callbackSite == CUPTI_API_ENTER) {
            t_runtime_depth++;
            write_launch(info->symbolName);
        } else if (t_runtime_depth > 0) {
            t_runtime_depth--;
        }
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && info->callbackSite == CUPTI_API_ENTER
               && t_runtime_depth == 0) {
        write_launch(info->symbolName);
    }
}

void say_ready() {
    uint32_t version = 0;
    cuptiGetVersion(&version);
    char text[64];
    snprintf(text, sizeof text, "cupti %u", version);
    emit("kvdiag-launch-lister: ", text, true);
}

}  // namespace

extern "C" int InitializeInjection(void) {
    static bool done = false;
    if (done) {
        return 1;
    }
    done = true;
    g_stdout = getenv("KVDIAG_PRINT_LAUNCHES") != nullptr;
    const char * log_path = getenv("KVDIAG_LAUNCH_LOG");
    if (log_path != nullptr && *log_path) {
        g_log = fopen(log_path, "a");
    }
    CUpti_SubscriberHandle subscriber;
    CUptiResult result = cuptiSubscribe(&subscriber, (CUpti_CallbackFunc) on_callback, nullptr);
    if (result == CUPTI_SUCCESS) {
        result = cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    }
    if (result == CUPTI_SUCCESS) {
        result = cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
    }
    if (result != CUPTI_SUCCESS) {
        const char * why = nullptr;
        cuptiGetResultString(result, &why);
        fprintf(stderr, "kvdiag-launch-lister: not listing: %s\n", why ? why : "CUPTI error");
        return 1;                                 // the program runs on, unlisted
    }
    say_ready();
    return 1;
}

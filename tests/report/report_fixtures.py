"""Canned outcomes and sweeps for the report tests, built from the engine's own value types.

(A module of its own, not conftest: several test folders have a conftest.py, and
`from conftest import` would pick whichever was imported first.)

The D2 outcome carries the real numbers measured on an H200 (ggml d99724f2):
2048 synccheck barrier errors at fattn-mma-f16.cuh:1538, 20 printed, in one
instantiation of flash_attn_ext_f16_process_tile. Paths are fictional.
"""

from __future__ import annotations

from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict
from kvdiag.store.sweeps import Sweep, sweep_outcome

D2_INSTANTIATION = ("flash_attn_ext_f16_process_tile<(int)256, (int)256, (int)4, (int)4, (int)2, "
                    "(bool)0, (bool)0, (bool)0, (bool)1>")
D2_CALLER = "flash_attn_ext_f16<(int)256, (int)256, (int)4, (int)4, (bool)0, (bool)0>"
D2_PARAMS = ("hsk=256,hsv=256,nh=4,nr23=\\[4,1\\],kv=512,nb=3,mask=1,sinks=0,max_bias=0\\.000000,"
             "logit_softcap=0\\.000000,prec=f32,type_K=f16,type_V=f16,permute=\\[0,1,2,3\\]")
D2_QUOTED = (
    "========= Barrier error detected. Divergent thread(s) in block.",
    f"=========     at void {D2_INSTANTIATION}(const float2 *, const __half2 *, const __half2 *, const __half *, "
    "const float *, float2 *, float2 *, float, float, float, uint3, int, int, int, int, int, int, int, int, int, "
    "int, int, int)+0x15b50 in fattn-mma-f16.cuh:1538",
    "=========     by thread (0,0,0) in block (52,0,0)",
    f"=========         Device Frame: void {D2_CALLER}(const char *, …)+0xfbf0 in fattn-mma-f16.cuh:1878",
)
D2_ARGV = ["/usr/local/cuda/bin/compute-sanitizer", "--tool", "synccheck", "--show-backtrace", "device",
           "--print-limit", "100", "--log-file", "/home/user/.kvdiag/runs/r1/logs/fast-1.sanitizer.log",
           "/home/user/ggml/build-li/bin/test-backend-ops", "test", "-o", "FLASH_ATTN_EXT", "-b", "CUDA0",
           "-p", D2_PARAMS]

HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = '"><img src=x onerror=alert(2)>'


def d2_outcome() -> Outcome:
    evidence = Evidence(
        quoted=D2_QUOTED, error_count=2048,
        sites=({"site": "fattn-mma-f16.cuh:1538", "kind": "barrier-divergence",
                "kernel": "flash_attn_ext_f16_process_tile", "file": "fattn-mma-f16.cuh", "line": 1538,
                "count": 20, "blocks": 1, "template_args": ["256", "256", "4", "4", "2", "0", "0", "0", "1"]},),
        instantiations=(D2_INSTANTIATION, D2_CALLER),
        aborts=({"kind": "cuda-error", "message": "CUDA error: unspecified launch failure", "detail": None,
                 "file": None, "line": None},),
        cases_matched=1, cases_executed=0, cases_failed=0, cases_not_supported=0, exit="exit 255",
        matched=("sanitizer(tool='synccheck', kind='barrier-divergence')",),
    )
    attempt = Attempt("fast", 1, Verdict.CONFIRMED,
                      "20 printed finding(s) of kind barrier-divergence at fattn-mma-f16.cuh:1538", evidence,
                      commands=({"argv": D2_ARGV, "description": "exit 255"},), duration_s=2.41,
                      log_dir="/home/user/.kvdiag/runs/r1/logs")
    return Outcome("D2", Verdict.CONFIRMED,
                   "1/1 runs matched the signature: 20 printed finding(s) of kind barrier-divergence at "
                   "fattn-mma-f16.cuh:1538", (attempt,), (), "fast", 2.52)


def d3_flaky_outcome() -> Outcome:
    abort = {"kind": "ggml-abort", "message": "fattn.cu:380: fatal error", "detail": None, "file": "fattn.cu",
             "line": 380}
    hit = Attempt("mtp", 2, Verdict.CONFIRMED, "ggml-abort: fattn.cu:380: fatal error",
                  Evidence(quoted=("fattn.cu:380: fatal error",), aborts=(abort,), exit="killed by SIGABRT (6)"),
                  duration_s=31.0)
    miss = [Attempt("mtp", i, Verdict.NOT_REPRODUCED, "the expected path ran; the signature did not match",
                    Evidence(exit="exit 0"), duration_s=30.0) for i in (1, 3)]
    return Outcome("D3", Verdict.CONFIRMED, "1/3 runs matched the signature: ggml-abort: fattn.cu:380: fatal error",
                   (miss[0], hit, miss[1]), (), "mtp", 91.0)


def simple(entry_id: str, verdict: Verdict, reason: str, *, duration: float = 0.1, evidence: Evidence | None = None,
           attempts: int = 1, warnings: tuple[str, ...] = ()) -> Outcome:
    atts = tuple(Attempt("default", i, verdict, reason, evidence or Evidence(), duration_s=duration)
                 for i in range(1, attempts + 1)) if verdict not in (Verdict.NOT_APPLICABLE,) else ()
    return Outcome(entry_id, verdict, reason, atts, warnings, "default", duration)


def hostile_outcome() -> Outcome:
    ev = Evidence(quoted=(f"========= {HOSTILE_SCRIPT}", f"value={HOSTILE_IMG}"), error_count=3,
                  sites=({"site": "evil<b>.cu:7", "kind": "race", "kernel": "k<script>", "file": "evil<b>.cu",
                          "line": 7, "count": 3, "blocks": 1, "template_args": []},))
    attempt = Attempt("fast", 1, Verdict.CONFIRMED, f"matched {HOSTILE_IMG}", ev, duration_s=1.0)
    return Outcome("D12", Verdict.CONFIRMED, f"reason with {HOSTILE_IMG} and {HOSTILE_SCRIPT}", (attempt,),
                   (f"warning {HOSTILE_SCRIPT}",), "fast", 1.0)


TITLES = {
    "D2": "Divergent __syncthreads() in the MMA FlashAttention kernel",
    "D3": "MTP + host-resident KV aborts in fattn.cu",
    "D5": "Quantized V cache not supported by the vec kernel",
    "D7": "llama-server slot restore reads past the KV buffer",
    "D9": "racecheck hazard in the tile kernel",
    "D11": "Broken exception unwinding in the CUDA backend",
    "D12": "A title with <b>markup</b> & ampersand",
    "D13": "Stale build against its sources",
}


def make_target() -> dict:
    return {
        "build": {
            "build_dir": "/home/user/ggml/build-li", "generator": "Ninja", "source_dir": "/home/user/ggml",
            "cuda": True, "cuda_architectures": "90", "cuda_flags": "-lineinfo", "cuda_compiler_version": "13.0.88",
            "lineinfo": True, "lineinfo_source": "CMAKE_CUDA_FLAGS: -lineinfo", "build_type": "Release",
            "options": {"GGML_CUDA": "ON"}, "binaries": {"test-backend-ops": "/home/user/ggml/build-li/bin/test-backend-ops"},
            "git": {"commit": "d99724f2a0c6b2c4e9f1d3b5a7c9e1f3a5b7c9d1", "short": "d99724f2",
                    "describe": "v0.9.4-112-gd99724f2", "dirty": False, "dirty_files": [], "dirty_count": 0,
                    "branch": "master"},
            "staleness": {"checked": True, "stale": False, "tool": "ninja -n", "pending": [], "pending_count": 0,
                          "detail": "no work to do", "program": "/usr/bin/ninja",
                          "proof": "the ninja -n control (ninja 1.13.2 (/usr/bin/ninja)) called a staged build current right after building it and stale after an edit of its header, on this machine"},
            "cache_path": "/home/user/ggml/build-li/CMakeCache.txt", "notes": [],
        },
        "environment": {
            "key": "5f0c2e91ab34", "kvdiag_version": "0.1.0",
            "host": {"hostname": "h200-box", "os": "Linux 6.8", "python": "3.12.3", "cpu": "Xeon", "cpu_count": 16},
            "gpu": {"source": "pycuda", "available": True,
                    "devices": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1234", "compute_capability": "9.0",
                                 "arch": "sm_90", "sm_count": 132, "total_memory_bytes": 150109880320,
                                 "pci_bus_id": "0000:19:00.0"}],
                    "driver_version": "580.159.04", "driver_cuda_version": "13.0", "runtime_version": "13.0",
                    "visible_devices": None, "notes": []},
            "tools": {"nvcc": "13.0.88", "nvcc_path": "/usr/local/cuda/bin/nvcc", "compute_sanitizer": "2025.3.1",
                      "compute_sanitizer_path": "/usr/local/cuda/bin/compute-sanitizer"},
        },
        "sanitizer": "/usr/local/cuda/bin/compute-sanitizer",
        "backend_ops": None,
    }


def all_outcomes() -> list[Outcome]:
    return [
        d2_outcome(),
        d3_flaky_outcome(),
        simple("D5", Verdict.NOT_APPLICABLE, "no FLASH_ATTN_EXT test case matches /type_V=q4_0/ in this build (0 cases)"),
        simple("D7", Verdict.SKIPPED, "llama-server is not in the build's bin/ (requires.binaries)"),
        simple("D9", Verdict.INCONCLUSIVE, "timed out after 120.0 s (process group killed) while running "
               "FLASH_ATTN_EXT(hsk=128)", duration=120.3),
        simple("D11", Verdict.ERROR, "kvdiag failed while running D11: OSError: [Errno 28] No space left on device"),
        simple("D13", Verdict.NOT_REPRODUCED, "the build is current with its sources (dry run found nothing to rebuild)"),
    ]


def make_sweep(outcomes: list[Outcome] | None = None, *, shard: str | None = None, selection=None,
               target: dict | None = None, started_at: str = "2026-11-29T10:00:00+00:00", wall_s: float = 245.5,
               interrupted: bool = False) -> Sweep:
    outcomes = all_outcomes() if outcomes is None else outcomes
    files = {"D2": ["src/ggml-cuda/fattn-mma-f16.cuh"], "D3": ["src/ggml-cuda/fattn.cu"]}
    data = [sweep_outcome(o, title=TITLES.get(o.entry_id, o.entry_id),
                          run_dir=f"/home/user/.kvdiag/runs/20261129-100000-{o.entry_id}-ab12",
                          files=files.get(o.entry_id, ())) for o in outcomes]
    return Sweep(target=target if target is not None else make_target(), outcomes=data, started_at=started_at,
                 wall_s=wall_s, shard=shard, kvdiag_version="0.1.0",
                 selection=selection if selection is not None else [o.entry_id for o in outcomes],
                 interrupted=interrupted)

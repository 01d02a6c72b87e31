"""Launch configuration of the scorer kernels (tile sizes, warps, MXFP4 path defaults) and the derived constexprs.

Values: the best of sweeps on the H200 (triton 3.6, 2026-11-30; `python -m tools.tune`, docs/perf/h200-tune.json). The
launchers (hw/logits.py) read them at each call, so a benchmark or a test may change them on this module.
"""
from dataclasses import dataclass
from typing import Mapping

import triton

MMA_MIN_ROWS = 16                     # tl.dot / tl.dot_scaled need M >= 16


@dataclass(frozen=True)
class PrefillTiles:
    """Tile settings of the prefill kernel on one backend."""
    tile_rows: Mapping[str, int]   # MMA rows (query tokens x padded heads) per dot variant: "fp8" or an MXFP4 path
    block_n: int                   # keys of one step of a program
    num_warps: int
    num_stages: int | None = None  # software-pipeline depth of the key loop; None: the backend's default


#: prefill tiles per backend. "nvidia": `python -m tools.tune` on the H200 (4096 x 4096 x H32/D128, full;
#: docs/perf/h200-bench.md): 128 rows x 128-key steps x 4 warps took FP8 668 us and MXFP4 dot_scaled 1000 us,
#: against 1229 / 3295 us for 64 x 64 x 8 warps, although they compile with a stack frame on sm_90 (the hw.isa
#: report lists it); the unpack paths spill badly at 128 rows (unpack_ptx 6.5 ms) and take 64 (1.41 ms).
#: "amd" (HIP): not timed (no gfx950 here); 64 x 64 x 8 warps, the tiles that compile for gfx950 without scratch
#: (at 128 x 128 x 4 the MXFP4 kernel spills 231 VGPRs).
#: "interpreter" (CPU): the interpreter pays per Triton operation, almost independently of its size, so the
#: tiles are as large as memory comfortably allows (a 1024-token causal prefill at H = 8: 37 s at 64 x 64,
#: about 1 s at 1024 x 256 with dot_scaled).
PREFILL = {
    "nvidia": PrefillTiles(tile_rows={"fp8": 128, "dot_scaled": 128, "unpack": 64, "unpack_ptx": 64}, block_n=128,
                           num_warps=4),
    "amd": PrefillTiles(tile_rows={"fp8": 64, "dot_scaled": 64, "unpack": 64}, block_n=64, num_warps=8),
    "interpreter": PrefillTiles(tile_rows={"fp8": 1024, "dot_scaled": 1024, "unpack": 1024}, block_n=256,
                                num_warps=4),
}
BACKENDS = tuple(PREFILL)             # "nvidia" | "amd" | "interpreter": what the launch settings depend on
PREFILL_KEYS_PER_PROGRAM = 4096       # keys one prefill program walks (a multiple of every block_n)
PAGED_NUM_WARPS = 4
#: register cap per thread of the paged kernel on NVIDIA (ptxas .maxnreg) per format; None: the compiler's choice
PAGED_MAXNREG = {"fp8": None, "mxfp4": None}
#: a decode step scores max(1, this // P) pages of one sequence (H200, B64/H32/D128/ctx 8192/P 64, 528 programs,
#: graph-replayed: FP8 33.7 / 27.2 / 34.9 us and MXFP4 (unpack_ptx) 78 / 61 / 50 us at 64 / 128 / 256 tokens)
PAGED_TOKENS_PER_STEP = {"fp8": 128, "mxfp4": 256}
FP8_PROMOTE_K = 32                    # Hopper FP8 MMA: promote to fp32 every 32 products (DESIGN §4)
#: default MXFP4 path on NVIDIA GPUs per kernel (H200, one page a step: decode unpack_ptx 77 us < dot_scaled 86 <
#: unpack 113, at 256 tokens a step 50.4 vs 51.6 us; prefill 4k x 4k x H32: dot_scaled 1.19 ms < unpack_ptx 1.41 <
#: unpack 1.84). HIP and the interpreter use dot_scaled.
CUDA_DEFAULT_MX_PATH = {"prefill": "dot_scaled", "decode": "unpack_ptx"}
#: minimum MMA rows (N_PAD * H_PAD) of the paged kernel. At 32 rows (N = 1, H = 32) Triton emits mma.sync on
#: f16-converted tiles on sm_90; at 64 it emits wgmma on the e4m3 tiles themselves (FP8, and MXFP4 through the
#: exact e2m1 -> e4m3 unpack), scratch-free at 64 tokens a step, at the cost of padded head rows. Timed slower on
#: the H200 (`mxidx bench` "M64" rows, docs/perf/h200-bench.md: FP8 75 vs 28 us, MXFP4 134 vs 56 us), so off.
PAGED_MMA_MIN_ROWS = MMA_MIN_ROWS


def head_pad(num_heads: int, rows: int, min_rows: int = MMA_MIN_ROWS) -> int:
    """Padded head count: a power of two with rows * H_PAD >= min_rows (rows a power of two)."""
    return max(triton.next_power_of_2(num_heads), min_rows // rows)


def prefill_settings(backend: str) -> PrefillTiles:
    """PREFILL's entry for `backend` (one of BACKENDS)."""
    return PREFILL[backend]


def prefill_tiles(num_heads: int, variant: str, backend: str) -> tuple[int, int]:
    """(H_PAD, BLOCK_S) of the prefill kernel; variant: "fp8" or the MXFP4 dot path's name."""
    h_pad = head_pad(num_heads, 1)
    return h_pad, max(1, prefill_settings(backend).tile_rows[variant] // h_pad)


def prefill_launch_options(backend: str) -> dict:
    """num_warps (and num_stages when set) of the prefill kernel. Steps narrower than 32 keys get at most 4 warps:
    with 8, each of the two warpgroups would own fewer than 16 columns of a 64-row tile, which Triton 3.6 to 3.9
    fail to lower for tl.dot_scaled on sm_90 (ConvertTritonGPUToLLVM: PassManager::run failed)."""
    tiles = prefill_settings(backend)
    options = {"num_warps": tiles.num_warps if tiles.block_n >= 32 else min(tiles.num_warps, 4)}
    if tiles.num_stages is not None:
        options["num_stages"] = tiles.num_stages
    return options


def paged_launch_options(kv_format: str, nvidia: bool) -> dict:
    """num_warps (and maxnreg on NVIDIA when set) of the paged kernel."""
    options = {"num_warps": PAGED_NUM_WARPS}
    if nvidia and PAGED_MAXNREG[kv_format] is not None:
        options["maxnreg"] = PAGED_MAXNREG[kv_format]
    return options


def paged_tiles(num_heads: int, next_n: int, page_size: int, kv_format: str) -> tuple[int, int, int]:
    """(N_PAD, H_PAD, PAGES_PER_STEP) of the paged kernel."""
    n_pad = triton.next_power_of_2(next_n)
    return n_pad, head_pad(num_heads, n_pad, PAGED_MMA_MIN_ROWS), max(1, PAGED_TOKENS_PER_STEP[kv_format] // page_size)

"""Launch configuration of the scorer kernels (tile sizes, warps, MXFP4 path defaults) and the derived constexprs.

Values: the best of small sweeps on the H200 (triton 3.6, 2026-11-30). The launchers (hw/logits.py) read them at
each call, so a benchmark or a test may change them on this module.
"""
import triton

MMA_MIN_ROWS = 16                     # tl.dot / tl.dot_scaled need M >= 16
PREFILL_TILE_ROWS = 64                # MMA rows (query tokens x padded heads) of one prefill program
PREFILL_BLOCK_N = 64                  # keys of one step of a prefill program
PREFILL_KEYS_PER_PROGRAM = 4096       # keys one prefill program walks (a multiple of PREFILL_BLOCK_N)
PREFILL_NUM_WARPS = 8
PREFILL_NUM_STAGES = None             # software-pipeline depth of the key loop; None: the backend's default
PAGED_NUM_WARPS = 4
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
#: exact e2m1 -> e4m3 unpack), scratch-free at 64 tokens a step by cross-compilation, at the cost of padded head
#: rows. Not timed yet: `mxidx bench` measures both (its "M64" rows).
PAGED_MMA_MIN_ROWS = MMA_MIN_ROWS


def head_pad(num_heads: int, rows: int, min_rows: int = MMA_MIN_ROWS) -> int:
    """Padded head count: a power of two with rows * H_PAD >= min_rows (rows a power of two)."""
    return max(triton.next_power_of_2(num_heads), min_rows // rows)


def prefill_tiles(num_heads: int) -> tuple[int, int]:
    """(H_PAD, BLOCK_S) of the prefill kernel."""
    h_pad = head_pad(num_heads, 1)
    return h_pad, max(1, PREFILL_TILE_ROWS // h_pad)


def prefill_launch_options() -> dict:
    """num_warps (and num_stages when set) of the prefill kernel. Steps narrower than 32 keys get at most 4 warps:
    with 8, each of the two warpgroups would own fewer than 16 columns of the 64-row tile, which Triton 3.6 to 3.9
    fail to lower for tl.dot_scaled on sm_90 (ConvertTritonGPUToLLVM: PassManager::run failed)."""
    options = {"num_warps": PREFILL_NUM_WARPS if PREFILL_BLOCK_N >= 32 else min(PREFILL_NUM_WARPS, 4)}
    if PREFILL_NUM_STAGES is not None:
        options["num_stages"] = PREFILL_NUM_STAGES
    return options


def paged_tiles(num_heads: int, next_n: int, page_size: int, kv_format: str) -> tuple[int, int, int]:
    """(N_PAD, H_PAD, PAGES_PER_STEP) of the paged kernel."""
    n_pad = triton.next_power_of_2(next_n)
    return n_pad, head_pad(num_heads, n_pad, PAGED_MMA_MIN_ROWS), max(1, PAGED_TOKENS_PER_STEP[kv_format] // page_size)

"""hw.fp8_fp4_mqa_logits (ragged prefill) against sim.scorer's float64 reference and its fp32 error bound."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
from hw.logits import declared_precision, scorer_target
from hw.targets import Op, Target
from hw.testing import pair_as_torch
from hw.variants import select, variants
from sim import scorer
from sim.formats import E8M0_NAN
from sim.testing import case_rng, sim_quantize
from tests.hw._logits_fixtures import (
    adversarial_key,
    case_variants,
    check_adversarial_key,
    poison_key,
    quantize_queries,
)

pytestmark = pytest.mark.interp


# ============================================================================================ accuracy matrix
@dataclass(frozen=True)
class PrefillCase:
    kv_dtype: str           # "fp8" | "mxfp4"
    head_dim: int
    heads: int
    ranges: tuple            # (ks, ke) per query row
    num_keys: int
    clean: bool = True
    int32_scales: bool = False
    nan_key: int | None = None      # this key is NaN as a writer leaves a non-finite row (DESIGN §1)
    nan_weight_row: int | None = None

    def __str__(self):
        return (f"{self.kv_dtype}-D{self.head_dim}-H{self.heads}-S{len(self.ranges)}-SK{self.num_keys}"
                f"{'-clean' if self.clean else ''}{'-i32' if self.int32_scales else ''}"
                f"{'-nank' if self.nan_key is not None else ''}{'-nanw' if self.nan_weight_row is not None else ''}")


CAUSAL_5 = ((0, 1), (0, 2), (0, 3), (0, 4), (0, 5))
RAGGED = ((0, 70), (3, 40), (10, 10), (0, 1), (69, 70), (64, 70), (5, 64))
MIDDLE = ((40, 50), (45, 60), (0, 0), (90, 100), (41, 42))     # no row sees keys 0..39 or 60..89
CASES = [
    PrefillCase("mxfp4", 128, 3, RAGGED, 70),
    PrefillCase("mxfp4", 64, 5, CAUSAL_5, 5, clean=False),
    PrefillCase("mxfp4", 32, 2, RAGGED, 70, nan_key=7, nan_weight_row=1),
    PrefillCase("mxfp4", 128, 4, CAUSAL_5, 5, int32_scales=True),
    PrefillCase("fp8", 128, 3, RAGGED, 70, nan_key=20),
    PrefillCase("fp8", 64, 17, CAUSAL_5, 5, clean=False, nan_weight_row=2),
    PrefillCase("fp8", 32, 1, RAGGED, 70),
    PrefillCase("mxfp4", 64, 2, MIDDLE, 100),
    PrefillCase("fp8", 64, 17, MIDDLE, 100),
]


@pytest.mark.parametrize("case,variant", [(c, v) for c in CASES for v in case_variants(Op.PREFILL, c.kv_dtype)],
                         ids=lambda x: str(x) if isinstance(x, PrefillCase) else x)
def test_prefill_matches_reference(case: PrefillCase, variant, device):
    check_prefill_case(case, variant, device)


@pytest.mark.parametrize("case,variant", [(CASES[0], "mxfp4_keys_m"), (CASES[1], "mxfp4_keys_m_dot_scaled"),
                                          (CASES[7], "mxfp4_keys_m"), (CASES[8], "fp8_keys_m")],
                         ids=lambda x: str(x) if isinstance(x, PrefillCase) else x)
def test_prefill_small_tiles(case: PrefillCase, variant, device):
    """Tiles of 32 keys and one or two query tokens a program: several key tiles per program, several programs,
    ranges starting and ending mid-tile."""
    h_pad = 1 << (case.heads - 1).bit_length()
    block_q = 2 if h_pad <= 8 else 1
    check_prefill_case(case, variant, device, launch_settings={
        "block_q": block_q, "block_k": 32, "h_pad": max(h_pad, 16 // block_q), "num_warps": 4})


def check_prefill_case(case: PrefillCase, variant, device, launch_settings=None):
    if variant not in case_variants(Op.PREFILL, case.kv_dtype):
        pytest.skip(f"variant {variant} does not run on {scorer_target(device).value}")
    rng = case_rng(str(case))
    num_q = len(case.ranges)
    q = rng.standard_normal((num_q, case.heads, case.head_dim)).astype(np.float32)
    k = rng.standard_normal((case.num_keys, case.head_dim)).astype(np.float32)
    w = rng.standard_normal((num_q, case.heads)).astype(np.float32)
    if case.nan_weight_row is not None:
        w[case.nan_weight_row, 0] = np.nan
    q_pair, w_t, q_ref, w_ref = quantize_queries(case.kv_dtype, q, w, device, int32_scales=case.int32_scales)
    values, scales = sim_quantize(case.kv_dtype, k)
    if case.nan_key is not None:
        poison_key(case.kv_dtype, values, scales, case.nan_key, block=-1)
    k_ref = scorer.dequantize_kv(values, scales)
    ks = np.array([r[0] for r in case.ranges], dtype=np.int32)
    ke = np.array([r[1] for r in case.ranges], dtype=np.int32)

    out = hw.fp8_fp4_mqa_logits(q_pair, pair_as_torch(case.kv_dtype, values, scales, device,
                                                       int32_scales=case.int32_scales),
                                w_t, torch.from_numpy(ks).to(device), torch.from_numpy(ke).to(device),
                                clean_logits=case.clean, variant=variant, launch_settings=launch_settings)
    assert out.shape == (num_q, case.num_keys) and out.dtype == torch.float32
    n, u = declared_precision(Op.PREFILL, case.kv_dtype, case.head_dim, device, variant)
    ref = scorer.prefill_logits(q_ref, k_ref, w_ref, ks, ke, clean_logits=True)
    bound = scorer.prefill_error_bound(q_ref, k_ref, w_ref, ks, ke,
                                       n_roundings=n, u=u)
    visible = None if case.clean else scorer.visible_mask(ke, case.num_keys, starts=ks)
    result = scorer.assert_logits_within_bound(out.cpu().numpy(), ref, bound, visible=visible)
    assert result.compared > 0
    if case.nan_key is not None:      # the poisoned key makes exactly the rows that see it NaN
        sees = (ks <= case.nan_key) & (case.nan_key < ke)
        assert sees.any() and np.isnan(out[torch.from_numpy(sees), case.nan_key].cpu().numpy()).all()


def test_relu_keeps_nan_but_zeroes_negatives(device):
    """A head whose dot product is NaN poisons the logit; negative dot products contribute 0, not their value."""
    head_dim = 32
    codes = np.zeros((1, 2, head_dim // 2), dtype=np.uint8)
    codes[0, 0, 0] = 0x02                                   # q head 0: element 0 = 1.0
    codes[0, 1, 0] = 0x0A                                   # q head 1: element 0 = -1.0
    q_scales = np.full((1, 2, 1), 127, dtype=np.uint8)
    k_codes = np.zeros((2, head_dim // 2), dtype=np.uint8)
    k_codes[:, 0] = 0x04                                     # keys: element 0 = 2.0
    k_scales = np.array([[127], [E8M0_NAN]], dtype=np.uint8)  # key 1 is NaN
    w = torch.tensor([[1.0, 1.0]], device=device)
    ends = torch.tensor([2], dtype=torch.int32, device=device)
    out = hw.fp8_fp4_mqa_logits((torch.from_numpy(codes).to(device), torch.from_numpy(q_scales).to(device)),
                                (torch.from_numpy(k_codes).to(device), torch.from_numpy(k_scales).to(device)),
                                w, torch.zeros_like(ends), ends).cpu()
    assert out[0, 0].item() == 2.0, f"relu(2) + relu(-2) must be 2, got {out[0, 0].item()}"
    assert torch.isnan(out[0, 1]), f"a NaN key must give a NaN logit, got {out[0, 1].item()}"


# ============================================================================================ rejections
def _good_args(device):
    q = (torch.zeros(2, 3, 32, dtype=torch.uint8, device=device), torch.full((2, 3, 2), 127, dtype=torch.uint8,
                                                                           device=device))
    kv = (torch.zeros(5, 32, dtype=torch.uint8, device=device), torch.full((5, 2), 127, dtype=torch.uint8,
                                                                          device=device))
    w = torch.ones(2, 3, device=device)
    ks = torch.zeros(2, dtype=torch.int32, device=device)
    return dict(q=q, kv=kv, weights=w, cu_seq_len_k_start=ks, cu_seq_len_k_end=ks + 5)


def _fp8(t):
    return t.to(torch.float8_e4m3fn)


BAD_PREFILL = {
    "max_seqlen_k": (lambda a: {**a, "max_seqlen_k": 4}, "max_seqlen_k"),
    "logits_dtype": (lambda a: {**a, "logits_dtype": torch.bfloat16}, "logits_dtype"),
    "clean_logits": (lambda a: {**a, "clean_logits": 1}, "clean_logits"),
    "q not a pair": (lambda a: {**a, "q": a["q"][0]}, "q must be a (values, scales) pair"),
    "q dtype": (lambda a: {**a, "q": (a["q"][0].float(), a["q"][1])}, "q[0] must have dtype"),
    "q head dim": (lambda a: {**a, "q": (torch.zeros(2, 3, 8, dtype=torch.uint8), torch.zeros(2, 3, 1))},
                   "head dim"),
    "q scales shape": (lambda a: {**a, "q": (a["q"][0], torch.zeros(2, 3, 1, dtype=torch.uint8))},
                       "q[1] must have shape"),
    "int32 scales at D=64": (lambda a: {**a, "q": (a["q"][0], torch.zeros(2, 3, 1, dtype=torch.int32))},
                             "int32-packed"),
    "q head dim 96": (lambda a: {**a, "q": (torch.zeros(2, 3, 48, dtype=torch.uint8),
                                            torch.zeros(2, 3, 3, dtype=torch.uint8))}, "power-of-two head dim"),
    "fp8 q with scales": (lambda a: {**a, "q": (_fp8(torch.zeros(2, 3, 64)), torch.ones(2, 3))}, "(values, None)"),
    "format mismatch": (lambda a: {**a, "q": (_fp8(torch.zeros(2, 3, 64)), None)}, "must share a format"),
    "kv scales dtype": (lambda a: {**a, "kv": (a["kv"][0], a["kv"][1].float())}, "kv[1] must have dtype"),
    "kv not contiguous": (lambda a: {**a, "kv": (torch.zeros(32, 5, dtype=torch.uint8).t(), a["kv"][1])},
                          "kv[0] must be contiguous"),
    "weights shape": (lambda a: {**a, "weights": torch.ones(2, 4)}, "weights must have shape"),
    "weights dtype": (lambda a: {**a, "weights": torch.ones(2, 3, dtype=torch.float64)}, "weights must have dtype"),
    "ks dtype": (lambda a: {**a, "cu_seq_len_k_start": torch.zeros(2, dtype=torch.int64)}, "cu_seq_len_k_start"),
    "ke shape": (lambda a: {**a, "cu_seq_len_k_end": torch.zeros(3, dtype=torch.int32)}, "cu_seq_len_k_end"),
}


@pytest.mark.parametrize("name", sorted(BAD_PREFILL))
def test_prefill_rejects_bad_input(name):
    make, message = BAD_PREFILL[name]
    with pytest.raises(ValueError, match=re.escape(message)):
        hw.fp8_fp4_mqa_logits(**make(_good_args(torch.device("cpu"))))


def test_prefill_good_args_are_accepted(device):
    """The rejection table's base arguments are valid (so each rejection is caused by its one change)."""
    out = hw.fp8_fp4_mqa_logits(**_good_args(device))
    assert torch.equal(out.cpu(), torch.zeros(2, 5))


@pytest.mark.parametrize("variant", ["fast", "fp8_keys_m"])
def test_unknown_variant(device, variant):
    """A variant that is not one of the op's for q's format is a ValueError listing the choices, on any device."""
    names = [v.name for v in variants(Op.PREFILL, "mxfp4")]
    with pytest.raises(ValueError, match=re.escape(f"variant must be one of {names} for prefill with mxfp4 inputs, "
                                                   f"got {variant!r}")):
        hw.fp8_fp4_mqa_logits(**_good_args(device), variant=variant)


def test_variant_of_another_target_is_refused():
    """A variant that does not run on the target is refused, naming where it runs. Asked of the registry itself:
    with the interpreter off, CPU tensors are refused earlier, by the device check."""
    with pytest.raises(ValueError, match=re.escape("variant 'mxfp4_keys_m_dot_scaled' does not run on nvidia")):
        select(Op.DECODE, Target.NVIDIA, "mxfp4", "mxfp4_keys_m_dot_scaled")


# ============================================================================================ validate mode
@dataclass(frozen=True)
class BadRange:
    name: str
    row: int                 # the row whose ranges are set to (start, end); the other row keeps (0, SK)
    start: int
    end: int
    message: str

    def __str__(self):
        return self.name


GOOD_NUM_KEYS = 5            # _good_args' SK
BAD_RANGES = [
    BadRange("negative start", 1, -1, 3, "cu_seq_len_k_start: row 1 has cu_seq_len_k_start = -1, "
             "cu_seq_len_k_end = 3; every row needs 0 <= cu_seq_len_k_start <= cu_seq_len_k_end <= SK = 5"),
    BadRange("end past SK", 0, 2, 6, "cu_seq_len_k_end: row 0 has cu_seq_len_k_start = 2, cu_seq_len_k_end = 6"),
    BadRange("start after end", 1, 4, 3, "cu_seq_len_k_start > cu_seq_len_k_end: row 1 has "
             "cu_seq_len_k_start = 4, cu_seq_len_k_end = 3"),
]


def _with_range(device, bad: BadRange) -> dict:
    args = _good_args(device)
    ks, ke = args["cu_seq_len_k_start"].clone(), args["cu_seq_len_k_end"].clone()
    ks[bad.row], ke[bad.row] = bad.start, bad.end
    return {**args, "cu_seq_len_k_start": ks, "cu_seq_len_k_end": ke}


@pytest.mark.parametrize("bad", BAD_RANGES, ids=str)
@pytest.mark.parametrize("how", ["argument", "environment"])
def test_validate_rejects_bad_ranges(bad: BadRange, how, device, monkeypatch):
    """validate=True (or MXIDX_VALIDATE=1) checks 0 <= ks <= ke <= SK and names the argument and the first bad row."""
    monkeypatch.delenv("MXIDX_VALIDATE", raising=False)
    kwargs = {"validate": True}
    if how == "environment":
        monkeypatch.setenv("MXIDX_VALIDATE", "1")
        kwargs = {}
    with pytest.raises(ValueError, match=re.escape(bad.message)):
        hw.fp8_fp4_mqa_logits(**_with_range(device, bad), **kwargs)


def test_validate_reports_the_first_bad_row(device):
    args = _good_args(device)
    ks = torch.tensor([-3, -1], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=re.escape("row 0 has cu_seq_len_k_start = -3")):
        hw.fp8_fp4_mqa_logits(**{**args, "cu_seq_len_k_start": ks}, validate=True)


def test_validate_accepts_edge_ranges(device):
    """Empty rows (ks == ke, at 0 and at SK) and full rows are valid; validate is keyword-only."""
    args = _good_args(device)
    ks = torch.tensor([0, GOOD_NUM_KEYS], dtype=torch.int32, device=device)
    ke = torch.tensor([0, GOOD_NUM_KEYS], dtype=torch.int32, device=device)
    out = hw.fp8_fp4_mqa_logits(**{**args, "cu_seq_len_k_start": ks, "cu_seq_len_k_end": ke}, validate=True)
    assert torch.isneginf(out).all()
    with pytest.raises(TypeError):
        hw.fp8_fp4_mqa_logits(*args.values(), True, 0, torch.float32, True)


@pytest.mark.parametrize("bad", BAD_RANGES, ids=str)
def test_without_validate_the_kernel_clamps(bad: BadRange, device, monkeypatch):
    """Unvalidated ranges are clamped as documented: ks < 0 acts as 0, ke > SK as SK, ks > ke is an empty row."""
    monkeypatch.delenv("MXIDX_VALIDATE", raising=False)
    rng = np.random.default_rng(11)
    codes = torch.from_numpy(rng.integers(0, 256, (2, 3, 32), dtype=np.uint8)).to(device)   # D = 64
    k_codes = torch.from_numpy(rng.integers(0, 256, (GOOD_NUM_KEYS, 32), dtype=np.uint8)).to(device)
    args = {**_with_range(device, bad), "q": (codes, _good_args(device)["q"][1]),
            "kv": (k_codes, _good_args(device)["kv"][1])}
    out = hw.fp8_fp4_mqa_logits(**args).cpu()
    start, end = max(bad.start, 0), min(bad.end, GOOD_NUM_KEYS)
    clamped = _with_range(device, BadRange("clamped", bad.row, start, max(start, end), ""))
    want = hw.fp8_fp4_mqa_logits(**{**clamped, "q": args["q"], "kv": args["kv"]}).cpu()
    assert torch.equal(out, want), f"unvalidated {bad}: {out} != clamped {want}"
    assert torch.isfinite(out[1 - bad.row]).all()     # the good row is untouched


# ============================================================================================ declared roundings
@pytest.mark.parametrize("variant", case_variants(Op.PREFILL, "mxfp4"))
def test_adversarial_key_within_the_declared_roundings(variant, device):
    """Every MXFP4 variant within its declared (n, u). Why dot_scaled declares n = D: the interpreter sums the D
    products in fp32, and where the kernels are interpreted the n = D/32 violation itself is asserted (the result is
    exactly 1.0); compiled backends only have to meet the declared bound."""
    q_codes, q_scales, k_codes, k_scales = adversarial_key()
    q = (torch.from_numpy(q_codes[0]).to(device), torch.from_numpy(q_scales[0]).to(device))
    kv = (torch.from_numpy(k_codes).to(device), torch.from_numpy(k_scales).to(device))
    q64, k64 = scorer.dequantize_q(q_codes[0], q_scales[0]), scorer.dequantize_kv(k_codes, k_scales)
    w = np.ones((1, 1), np.float32)
    ks, ke = np.zeros(1, np.int32), np.ones(1, np.int32)
    out = hw.fp8_fp4_mqa_logits(q, kv, torch.from_numpy(w).to(device), torch.from_numpy(ks).to(device),
                                torch.from_numpy(ke).to(device), variant=variant).cpu().numpy()
    check_adversarial_key(variant, Op.PREFILL, float(out[0, 0]), scorer.prefill_logits(q64, k64, w, ks, ke)[0, 0],
                          lambda n, u: scorer.prefill_error_bound(q64, k64, w, ks, ke, n_roundings=n, u=u)[0, 0],
                          device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's declarations: needs kernels that run in "
                                                     "the Triton interpreter (a machine without a CUDA device)")
@pytest.mark.parametrize("op", [Op.PREFILL, Op.DECODE])
def test_declared_precision_on_the_cpu(op):
    """FP8: n = D with fp32 accumulation; MXFP4: n = D on the default, the keys-on-M fold (its folded products span
    up to 22 binades), and on dot_scaled where the interpreter runs it (it sums D products in fp32)."""
    assert declared_precision(op, "fp8", 64, "cpu") == (64, 2.0 ** -24)
    assert declared_precision(op, "mxfp4", 128, "cpu") == (128, 2.0 ** -24)
    if "mxfp4_keys_m_dot_scaled" in [v.name for v in variants(op, "mxfp4", Target.INTERPRETER)]:
        assert declared_precision(op, "mxfp4", 64, "cpu", "mxfp4_keys_m_dot_scaled") == (64, 2.0 ** -24)


@pytest.mark.parametrize("args,message", [((Op.TOPK, "mxfp4", 64, "cpu"), "op must be one of"),
                                          ((Op.DECODE, "bf16", 64, "cpu"), "kv_dtype must be one of"),
                                          ((Op.DECODE, "mxfp4", 48, "cpu"), "head_dim must be a multiple of 32"),
                                          ((Op.DECODE, "mxfp4", 64, "cpu", "fp8_keys_m"), "variant must be one of")])
def test_declared_precision_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        declared_precision(*args)

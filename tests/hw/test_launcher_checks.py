"""Host-side checks shared by every hw launcher (hw/checks.py, hw/layout.py): device rules, 32-bit offset
guards, sync-free hot paths, the validate mode (validate=True / MXIDX_VALIDATE) and DeepGEMM parameters we reject.

Each launcher appears once in LAUNCHERS with a small valid call; the tests change one thing about it. The per-kernel
rejection tables (wrong dtype, shape, layout, ...) live next to each kernel's own tests.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

import hw
import hw.checks

pytestmark = pytest.mark.interp

P = 16            # page size of every fixture cache
MX_D = 64         # mxfp4 head dim of the fixtures: 34 bytes per token
MX_BPT = MX_D // 2 + MX_D // 32


def _cache(num_pages: int, device) -> torch.Tensor:
    """A contiguous mxfp4 cache view uint8 [num_pages, P, 1, 34] (page stride 544, a multiple of 16)."""
    return torch.zeros(num_pages, P, 1, MX_BPT, dtype=torch.uint8, device=device)


def _i32(values, device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device)


def _writer_args(device):
    return dict(k=torch.zeros(4, MX_D, device=device), kv_cache=_cache(2, device),
                slot_mapping=torch.arange(4, device=device), kv_dtype="mxfp4")


def _q_mxfp4_args(device):
    return dict(q=torch.zeros(3, 2, MX_D, device=device))


def _q_fp8_args(device):
    return dict(q=torch.zeros(3, 2, MX_D, device=device), weights=torch.ones(3, 2, device=device))


def _gather_args(device):
    return dict(kv_cache=_cache(4, device), block_table=_i32([[0, 1], [2, 3]], device),
                cu_seq_lens=_i32([0, 5, 25], device), layout="mxfp4", num_tokens=25)


def _prefill_args(device):
    q = (torch.zeros(2, 3, MX_D // 2, dtype=torch.uint8, device=device),
         torch.full((2, 3, MX_D // 32), 127, dtype=torch.uint8, device=device))
    kv = (torch.zeros(5, MX_D // 2, dtype=torch.uint8, device=device),
          torch.full((5, MX_D // 32), 127, dtype=torch.uint8, device=device))
    starts = _i32([0, 1], device)
    return dict(q=q, kv=kv, weights=torch.ones(2, 3, device=device), cu_seq_len_k_start=starts,
                cu_seq_len_k_end=starts + 4)


def _paged_args(device):
    context_lens = _i32([5, 20], device)
    q = (torch.zeros(2, 1, 3, MX_D // 2, dtype=torch.uint8, device=device),
         torch.full((2, 1, 3, MX_D // 32), 127, dtype=torch.uint8, device=device))
    return dict(q=q, kv_cache=_cache(4, device), weights=torch.ones(2, 3, device=device), context_lens=context_lens,
                block_table=_i32([[0, 1], [3, 2]], device),
                schedule_meta=hw.get_paged_mqa_logits_metadata(context_lens, P, 2), max_context_len=32)


@dataclass(frozen=True)
class Launcher:
    name: str
    fn: Callable
    args: Callable          # device -> keyword arguments of a valid call
    kernel_modules: tuple   # (module, kernel attribute) pairs the launcher may launch
    launches: int = 1       # kernel launches of one call on the interpreter's default variant

    def __str__(self):
        return self.name


LAUNCHERS = (
    Launcher("indexer_k_quant_and_cache", hw.indexer_k_quant_and_cache, _writer_args,
             (("hw.quant", "k_quant_cache_mxfp4_kernel"),)),
    Launcher("quantize_q_mxfp4", hw.quantize_q_mxfp4, _q_mxfp4_args, (("hw.quant", "q_quant_mxfp4_kernel"),)),
    Launcher("quantize_q_fp8", hw.quantize_q_fp8, _q_fp8_args, (("hw.quant", "q_quant_fp8_kernel"),)),
    Launcher("cp_gather_indexer_k_quant_cache", hw.cp_gather_indexer_k_quant_cache, _gather_args,
             (("hw.gather", "gather_mxfp4_kernel"),)),
    # the scorers: hw.logits's kernel object decides the target (a recorder there makes it the interpreter's, on
    # any machine), whose default variant launches the kernels of its own module: MXFP4 prefill's fold the key fold
    # and its two passes
    Launcher("fp8_fp4_mqa_logits", hw.fp8_fp4_mqa_logits, _prefill_args,
             (("hw.logits", "prefill_keys_m_kernel"), ("hw._logits_details.prefill_keys_m", "fold_keys_kernel"),
              ("hw._logits_details.prefill_keys_m", "prefill_keys_m_kernel"),
              ("hw._logits_details.prefill_keys_m", "clean_outside_kernel")), launches=3),
    Launcher("fp8_fp4_paged_mqa_logits", hw.fp8_fp4_paged_mqa_logits, _paged_args,
             (("hw.logits", "paged_keys_m_kernel"), ("hw.logits", "prefill_keys_m_kernel"),
              ("hw._logits_details.paged_keys_m", "paged_keys_m_kernel"))),
)
VALIDATING = [launcher for launcher in LAUNCHERS if launcher.name in
              ("indexer_k_quant_and_cache", "cp_gather_indexer_k_quant_cache", "fp8_fp4_mqa_logits",
               "fp8_fp4_paged_mqa_logits")]


def _map_tensors(args: dict, fn) -> dict:
    """args with fn applied to every tensor, including the members of (values, scales) pairs."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return fn(v)
        if isinstance(v, tuple):
            return tuple(one(x) for x in v)
        return v
    return {k: one(v) for k, v in args.items()}


def _tensor_slots(args: dict):
    """(label, key, index or None) of every tensor argument."""
    for key, value in args.items():
        if isinstance(value, torch.Tensor):
            yield key, key, None
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                if isinstance(v, torch.Tensor):
                    yield f"{key}[{i}]", key, i


# ---------------------------------------------------------------------------------------------- devices
@pytest.mark.parametrize("launcher", LAUNCHERS, ids=str)
def test_valid_call_runs(launcher, device):
    """The base call of each launcher is valid, so every rejection below is caused by its one change."""
    launcher.fn(**launcher.args(device))


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=str)
def test_cpu_tensors_need_the_interpreter(launcher, monkeypatch):
    """With compiled kernels (interpreter off), CPU tensors are a clear ValueError, not a crash in the launch."""
    monkeypatch.setattr(hw.checks, "kernels_interpreted", lambda kernel: False)
    with pytest.raises(ValueError, match="on the CPU but the Triton interpreter is off"):
        launcher.fn(**launcher.args(torch.device("cpu")))


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=str)
def test_meta_tensors_are_rejected(launcher):
    """Tensors without storage ("meta") on every argument: consistent devices, but no kernel can run there."""
    args = _map_tensors(launcher.args(torch.device("cpu")), lambda t: t.to("meta"))
    with pytest.raises(ValueError, match=re.escape("the kernels run on CUDA/ROCm GPUs")):
        launcher.fn(**args)


@pytest.mark.parametrize("launcher", [la for la in LAUNCHERS if la.name != "quantize_q_mxfp4"], ids=str)
def test_device_mismatch_names_the_argument(launcher):
    """Each tensor argument in turn on another device: the error names that argument, or -- when it is the first
    one, whose device the others are compared with -- says that the others were expected on its device."""
    base = launcher.args(torch.device("cpu"))
    slots = list(_tensor_slots(base))
    for label, key, index in slots:
        args = dict(base)
        if index is None:
            args[key] = args[key].to("meta")
        else:
            args[key] = tuple(v.to("meta") if i == index else v for i, v in enumerate(args[key]))
        with pytest.raises(ValueError) as info:
            launcher.fn(**args)
        message = str(info.value)
        first_moved = label == slots[0][0] and "expected meta" in message
        assert "device" in message and (label in message or first_moved), f"{launcher.name}, {label}: {message}"


# ---------------------------------------------------------------------------------------------- 32-bit offsets
TALL = 2**26   # rows of a meta tensor whose 32-bit offsets would wrap (no memory is allocated)


def _column_major(rows: int, cols: int) -> torch.Tensor:
    """fp32 [rows, cols] on meta with strides (1, rows): column offsets reach (cols - 1) * rows elements."""
    return torch.empty(cols, rows, device="meta").t()


WRAPPING = {
    "writer k column stride": (hw.indexer_k_quant_and_cache, lambda: dict(
        k=_column_major(TALL, MX_D), kv_cache=_cache(2, "meta"),
        slot_mapping=torch.empty(TALL, dtype=torch.int64, device="meta"), kv_dtype="mxfp4"), "k: column offsets"),
    "mxfp4 q column stride": (hw.quantize_q_mxfp4, lambda: dict(q=_column_major(TALL, MX_D)), "q: column offsets"),
    "fp8 q column stride": (hw.quantize_q_fp8, lambda: dict(
        q=_column_major(TALL, MX_D), weights=torch.empty(TALL, device="meta")), "q: column offsets"),
    "prefill keys": (hw.fp8_fp4_mqa_logits, lambda: dict(
        q=(torch.empty(1, 1, 64, dtype=torch.uint8, device="meta"),
           torch.empty(1, 1, 4, dtype=torch.uint8, device="meta")),
        kv=(torch.empty(TALL, 64, dtype=torch.uint8, device="meta"),
            torch.empty(TALL, 4, dtype=torch.uint8, device="meta")),
        weights=torch.empty(1, 1, device="meta"), cu_seq_len_k_start=torch.empty(1, dtype=torch.int32, device="meta"),
        cu_seq_len_k_end=torch.empty(1, dtype=torch.int32, device="meta")), "kv[0]: key byte offsets"),
}


@pytest.mark.parametrize("name", list(WRAPPING))
def test_offsets_that_would_wrap_int32_are_rejected(name):
    """The kernels keep these offsets 32-bit (row offsets are 64-bit); a tensor whose offsets would wrap is refused
    on the host instead of being read at a wrapped address."""
    fn, make, message = WRAPPING[name]
    with pytest.raises(ValueError, match=re.escape(message) + ".*32-bit"):
        fn(**make())


# ---------------------------------------------------------------------------------------------- no device sync
SYNCS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


class _Recorder:
    """Stands in for a @triton.jit kernel: records the launch instead of running it."""

    def __init__(self):
        self.launches = 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
        return launch


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=str)
def test_hot_path_reads_no_tensor_value(launcher, monkeypatch):
    """Without validation the launchers read shapes, strides and devices only (legal in CUDA-graph capture): every
    way Python code reads a tensor's value raises here, and the kernel is replaced by a recorder."""
    args = launcher.args(torch.device("cpu"))
    recorders = []
    for module, attr in launcher.kernel_modules:
        recorders.append(_Recorder())
        monkeypatch.setattr(f"{module}.{attr}", recorders[-1])
    # the recorders make the kernels look interpreted on any machine; none of them runs Triton's interpreter
    monkeypatch.setattr(hw.checks, "interpreter_problem", lambda: None)

    def sync(self, *a, **k):
        raise AssertionError("a launcher read a tensor value (a device sync)")
    for name in SYNCS:
        monkeypatch.setattr(torch.Tensor, name, sync)
    launcher.fn(**args)
    monkeypatch.undo()
    assert sum(r.launches for r in recorders) == launcher.launches, \
        f"{launcher.name} launched {[r.launches for r in recorders]}"


# ---------------------------------------------------------------------------------------------- validate mode
@pytest.mark.parametrize("setting", ["yes", "true", "2", ""])
@pytest.mark.parametrize("launcher", VALIDATING, ids=str)
def test_validate_env_must_be_0_or_1(launcher, setting, monkeypatch, device):
    """A misspelt MXIDX_VALIDATE is an error, not silently "off"."""
    monkeypatch.setenv("MXIDX_VALIDATE", setting)
    with pytest.raises(ValueError, match="MXIDX_VALIDATE must be 0 or 1"):
        launcher.fn(**launcher.args(device))


@pytest.mark.parametrize("launcher", VALIDATING, ids=str)
def test_validate_refused_during_graph_capture(launcher, monkeypatch, device):
    """Validation syncs, which capture forbids: a clear error rather than an invalidated capture. Without
    validation the same call is fine while capturing (the recorder kernel keeps this test device-free)."""
    monkeypatch.setattr(hw.checks, "stream_capturing", lambda: True)
    for env, validate in (("1", False), ("0", True)):
        monkeypatch.setenv("MXIDX_VALIDATE", env)
        with pytest.raises(ValueError, match="CUDA-graph capture forbids"):
            launcher.fn(**launcher.args(device), validate=validate)
    monkeypatch.setenv("MXIDX_VALIDATE", "0")
    for module, attr in launcher.kernel_modules:
        monkeypatch.setattr(f"{module}.{attr}", _Recorder())
    launcher.fn(**launcher.args(device))


def _gather(device, **changes):
    args = {**_gather_args(device), **changes}
    return hw.cp_gather_indexer_k_quant_cache(**args)


BAD_GATHER_VALUES = {
    "first offset not 0": (dict(cu_seq_lens=[2, 5, 25]), "cu_seq_lens[0] must be 0"),
    "decreasing offsets": (dict(cu_seq_lens=[0, 5, 3]), "cu_seq_lens must be non-decreasing; cu_seq_lens[2] = 3"),
    "num_tokens short": (dict(num_tokens=24), "num_tokens = 24 leaves out tokens"),
    "sequence past its block-table row": (dict(cu_seq_lens=[0, 5, 38], num_tokens=38),
                                          "sequence 1 has 33 tokens but block_table's 2 pages of 16 tokens cover "
                                          "only 32"),
    "page id past the cache": (dict(block_table=[[0, 1], [2, 4]]), "block_table[1, 1] = 4"),
    "negative page id": (dict(block_table=[[-1, 1], [2, 3]]), "block_table[0, 0] = -1"),
}


@pytest.mark.parametrize("name", list(BAD_GATHER_VALUES))
@pytest.mark.parametrize("via_env", [False, True])
def test_gather_validate_rejects(name, via_env, monkeypatch, device):
    """What the gather's hot path trusts, checked in validate mode (validate=True or MXIDX_VALIDATE=1)."""
    changes, message = BAD_GATHER_VALUES[name]
    changes = {k: _i32(v, device) if isinstance(v, list) else v for k, v in changes.items()}
    if via_env:
        monkeypatch.setenv("MXIDX_VALIDATE", "1")
    with pytest.raises(ValueError, match=re.escape(message)):
        _gather(device, validate=not via_env, **changes)


def test_gather_validate_accepts_good_input(device):
    """Validation changes nothing on valid input: the same bytes come out, with entries past each sequence's last
    page holding out-of-range sentinels that are never read."""
    cache = torch.randint(0, 256, (4, P, 1, MX_BPT), dtype=torch.uint8, device=device)
    table = _i32([[3, 2**31 - 1], [1, 0]], device)     # sequence 0 uses one page: entry [0, 1] is never read
    cu = _i32([0, 9, 41], device)
    plain = hw.cp_gather_indexer_k_quant_cache(cache, table, cu, "mxfp4", num_tokens=41)
    checked = hw.cp_gather_indexer_k_quant_cache(cache, table, cu, "mxfp4", num_tokens=41, validate=True)
    for a, b, what in zip(plain, checked, ("codes", "scales")):
        assert torch.equal(a, b), f"validate=True changed the gathered {what}"
    page3_codes = cache[3].reshape(-1)[:9 * MX_D // 2].reshape(9, MX_D // 2)   # block-planar: codes first
    assert torch.equal(plain[0][:9].cpu(), page3_codes.cpu()), "sequence 0 must be page 3's first 9 tokens"


# ---------------------------------------------------------------------------------------------- unsupported options
def test_paged_rejects_deepgemm_indices(device):
    args = _paged_args(device)
    with pytest.raises(ValueError, match="indices is not supported"):
        hw.fp8_fp4_paged_mqa_logits(**args, indices=torch.zeros(2, 4, dtype=torch.int32, device=device))


def test_paged_rejects_a_tensor_as_layout(device):
    """DeepGEMM's 10th positional parameter is `indices`; ours is `layout`: a tensor there is named, not compared."""
    args = _paged_args(device)
    positional = [args.pop(k) for k in ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta",
                                        "max_context_len")]
    with pytest.raises(ValueError, match="layout must be None or one of .* got a Tensor"):
        hw.fp8_fp4_paged_mqa_logits(*positional, False, torch.float32, torch.zeros(2, dtype=torch.int32))


@pytest.mark.parametrize("value", [[1], "rceil ", None])
def test_scale_rule_must_be_a_rule_name(value, device):
    with pytest.raises(ValueError, match="scale_rule must be one of"):
        hw.quantize_q_mxfp4(torch.zeros(2, 32, device=device), scale_rule=value)


@pytest.mark.parametrize("value", ["float32", torch.bfloat16, None])
def test_logits_dtype_must_be_float32(value, device):
    with pytest.raises(ValueError, match="logits_dtype must be torch.float32"):
        hw.fp8_fp4_mqa_logits(**_prefill_args(device), logits_dtype=value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs kernels that run in the Triton interpreter")
def test_an_interpreter_that_cannot_run_the_kernels_is_a_clear_error(monkeypatch):
    """triton 3.6's interpreter fails inside the kernels (loop bounds under NumPy 2): refused up front instead."""
    monkeypatch.setattr(hw.checks, "triton_version", lambda: (3, 6, 0))
    launcher = LAUNCHERS[0]
    with pytest.raises(ValueError, match=re.escape("is on the CPU, but the Triton interpreter of triton")):
        launcher.fn(**launcher.args(torch.device("cpu")))


def test_scorers_refuse_more_heads_than_their_tiles_take(device):
    """H above hw.layout.MAX_HEADS is a ValueError up front (the tiles would exhaust registers, or hang an
    interpreter), not a launch."""
    from hw.layout import MAX_HEADS

    args = _prefill_args(device)
    values, scales = args["q"]
    wide = (values.new_zeros(values.shape[0], MAX_HEADS + 1, values.shape[2]),
            scales.new_zeros(scales.shape[0], MAX_HEADS + 1, scales.shape[2]))
    with pytest.raises(ValueError, match=re.escape(f"q[0]: the scorers take 1 to {MAX_HEADS} heads, got "
                                                   f"{MAX_HEADS + 1}")):
        hw.fp8_fp4_mqa_logits(**{**args, "q": wide})


def test_paged_output_width_must_fit_int32_columns(device):
    """max_context_len past int32 (the column indices) is a ValueError, not an allocator error."""
    args = _paged_args(device)
    with pytest.raises(ValueError, match=re.escape("max_context_len = 1000000000000 is past the int32 column")):
        hw.fp8_fp4_paged_mqa_logits(**{**args, "max_context_len": 10 ** 12})


def test_named_gluon_scorer_refuses_a_call_it_does_not_cover(monkeypatch, device):
    """The paged launcher, its target made NVIDIA's, with variant="mxfp4_keys_m_wgmma" on CPU tensors (not an
    sm_90 device): NotCovered, a ValueError naming the default's mxfp4_keys_m, before any kernel runs (the
    clean_logits fill included)."""
    if device.type != "cpu":
        pytest.skip("the call is built on CPU tensors, which only the interpreter takes")
    import hw.logits
    from hw.targets import NotCovered, Target
    monkeypatch.setattr(hw.logits, "scorer_target", lambda device: Target.NVIDIA)
    fills = []
    monkeypatch.setattr(torch.Tensor, "fill_", lambda self, value: fills.append(value))
    with pytest.raises(NotCovered, match="covers sm_90 devices.*not an NVIDIA GPU.*runs mxfp4_keys_m"):
        hw.fp8_fp4_paged_mqa_logits(**_paged_args(device), clean_logits=True, variant="mxfp4_keys_m_wgmma")
    assert fills == []

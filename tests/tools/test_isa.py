"""tools.isa: cross-compiled ISA facts for gfx950 and sm_90 (DESIGN §5), no GPU needed; hw.isa_spec's registry and
signatures derived from the kernels' parameter lists.

The module's own ISA_SPECS (a tiny e2m1 x e2m1 `tl.dot_scaled` kernel at D = 32 and 128, and the top-k kernel at
k = 64) are compiled once per target (module fixture; under TRITON_INTERPRET=1 tools.isa compiles in a child
process that imports this module by name).
"""
from __future__ import annotations

import inspect

import pytest
import triton
import triton.language as tl

from hw.isa_spec import TARGETS, CompileSpec, kernel_signature
from hw.variants import kernel_packages, load_specs
from tools import isa

THIS_MODULE = "tests.tools.test_isa"
TILE = 64   # M = N: one 64 x 64 output tile (a wgmma m64 tile on sm90, 32x32 MFMA tiles on gfx950)


@triton.jit
def tiny_dot_scaled(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr,
                    D: tl.constexpr):
    """out fp32 [M, N] = dequant(a) @ dequant(b)^T; a/b: e2m1 codes uint8 [M|N, D/2] (even element in the low
    nibble), E8M0 scales uint8 [M|N, D/32]; everything contiguous."""
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    rk, rg = tl.arange(0, D // 2), tl.arange(0, D // 32)
    a = tl.load(a_ptr + rm[:, None] * (D // 2) + rk[None, :])
    b = tl.load(b_ptr + rn[:, None] * (D // 2) + rk[None, :])
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (D // 32) + rg[None, :])
    b_scale = tl.load(b_scale_ptr + rn[:, None] * (D // 32) + rg[None, :])
    out = tl.dot_scaled(a, a_scale, "e2m1", b.T, b_scale, "e2m1")
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], out)


def _tiny(d: int) -> CompileSpec:
    return CompileSpec(f"tiny_dot_scaled/D{d}", tiny_dot_scaled,
                       {"a_ptr": "*u8", "a_scale_ptr": "*u8", "b_ptr": "*u8", "b_scale_ptr": "*u8", "out_ptr": "*fp32"},
                       {"M": TILE, "N": TILE, "D": d}, scaled_mfma=True)


ISA_SPECS = (_tiny(32), _tiny(128), *(s for s in load_specs()[0] if s.label == "topk/k64"))


@pytest.fixture(scope="module")
def reports() -> dict[tuple[str, str], isa.KernelIsa]:
    found = {}
    for target in TARGETS:
        kernels, missing = isa.report(target, modules=(THIS_MODULE,))
        assert missing == ()
        found.update({(k.target, k.label): k for k in kernels})
    assert len(found) == 2 * len(ISA_SPECS)
    return found


@pytest.mark.parametrize("target", TARGETS)
def test_topk_has_no_scratch_and_fits(reports, target):
    k = reports[(target, "topk/k64")]
    assert k.failures == () and k.scratch_bytes == 0 and k.spills == 0, k
    assert k.matrix_ops == () and 1 <= k.occupancy <= k.occupancy_max, k
    assert all(n > 0 for name, n in k.registers if name != "agpr"), k


def test_gfx950_scaled_mfma_claim(reports):
    """D >= 64: native v_mfma_scale_f32_*_f8f6f4. D = 32 (K = 32): Triton emits a bf16 MFMA instead, and the
    claim check must say so (the negative control that shows the check can fail)."""
    wide = reports[("gfx950", "tiny_dot_scaled/D128")]
    assert wide.scaled_mfma and wide.failures == (), wide
    narrow = reports[("gfx950", "tiny_dot_scaled/D32")]
    assert not narrow.scaled_mfma and any(op.startswith("v_mfma_f32_") and op.endswith("bf16")
                                          for op, _ in narrow.matrix_ops), narrow
    assert len(narrow.failures) == 1 and "without v_mfma_scale_f32_*_f8f6f4" in narrow.failures[0], narrow


def test_sm90_decomposes_dot_scaled_to_wgmma(reports):
    """Hopper has no FP4 matrix unit: Triton upcasts and issues bf16 wgmma."""
    k = reports[("sm90", "tiny_dot_scaled/D128")]
    assert any(op.startswith("wgmma.mma_async") and op.endswith(".bf16.bf16") for op, _ in k.matrix_ops), k
    assert k.failures == () and not k.scaled_mfma, k


def test_gfx950_occupancy_model_agrees_with_llvm(reports):
    """Without LDS the model must reproduce LLVM's own estimate ("; Occupancy: N" in the AMDGCN)."""
    for (target, label), k in reports.items():
        if target == "gfx950":
            regs = dict(k.registers)
            assert k.compiler_occupancy is not None, label
            assert isa.amd_waves_per_simd(regs["vgpr_total"], regs["sgpr"], 0, k.num_warps)[0] == \
                k.compiler_occupancy, (label, k)


# Expected values worked out by hand from the rules cited in tools/isa.py.
@pytest.mark.parametrize("vgprs, sgprs, lds, warps, want", [
    (4, 19, 0, 4, (8, "waves")),          # nothing limits: 8 waves per SIMD
    (80, 80, 0, 4, (6, "vgpr")),          # 512 // 80
    (65, 30, 0, 4, (7, "vgpr")),          # 65 -> 72 allocated, 512 // 72 = 7
    (256, 30, 0, 4, (2, "vgpr")),
    (512, 30, 0, 4, (1, "vgpr")),         # the whole unified file (256 arch + 256 acc)
    (64, 102, 0, 4, (7, "sgpr")),         # more than 100 SGPRs: 7 waves
    (32, 30, 64 * 1024, 4, (2, "lds")),   # 160 KiB // 64 KiB = 2 workgroups of one wave per SIMD each
    (32, 30, 1, 8, (8, "waves")),         # 8-wave workgroups put 2 waves on each SIMD: 4 workgroups
    (100, 30, 0, 8, (4, "vgpr")),         # 104 allocated: 4 waves = 2 workgroups of 2 waves per SIMD
    (92, 30, 17920, 2, (4, "lds")),       # 2-wave workgroups: 9 fit the LDS, 18 waves on 4 SIMDs (VGPRs: 10)
    (152, 30, 16896, 2, (3, "vgpr")),     # 3 waves per SIMD = 6 workgroups of 2 (the LDS holds 9)
])
def test_amd_occupancy_rules(vgprs, sgprs, lds, warps, want):
    assert isa.amd_waves_per_simd(vgprs, sgprs, lds, warps) == want


@pytest.mark.parametrize("regs, shared, warps, want", [
    (32, 0, 4, (64, "warps")),            # 64 resident warps
    (55, 2048, 4, (36, "regs")),          # 56 * 32 regs per warp -> 36 warps = 9 blocks of 4
    (255, 0, 4, (8, "regs")),             # 256 * 32 = 8192 per warp -> 8 warps
    (32, 100 * 1024, 4, (8, "smem")),     # 228 KB // (100 KB + 1 KB reserved) = 2 blocks
    (32, 0, 1, (32, "blocks")),           # one-warp blocks: 32 resident blocks
    (32, 228 * 1024, 4, (0, "smem")),     # over the 227 KB per-block limit: does not launch
])
def test_nv_occupancy_rules(regs, shared, warps, want):
    assert isa.nv_warps_per_sm(regs, shared, warps) == want


def test_hw_mxfp4_scorers_use_scaled_mfma():
    """Every hw/ spec that claims scaled MFMA (MXFP4 scorers, D >= 64) compiles to it on gfx950, without scratch."""
    specs, _ = load_specs()
    claimed = {s.label for s in specs if s.scaled_mfma}
    assert any("/D64" in label for label in claimed) and any("/D128" in label for label in claimed), \
        f"hw/_logits_details must export MXFP4 scorer specs at D = 64 and 128 with scaled_mfma=True; got {claimed}"
    kernels, _ = isa.report("gfx950", scaled_mfma_only=True)
    assert {k.label for k in kernels} == claimed
    assert all(k.scaled_mfma and not k.failures for k in kernels), \
        [(k.label, k.failures) for k in kernels if k.failures]


def test_registry_lists_topk_and_rejects_bad_requests():
    assert "hw._topk_details" in kernel_packages()
    families = {s.label.split("/")[0] for s in load_specs()[0]}
    assert {"topk", "q_quant", "gather"} <= families, families
    with pytest.raises(ValueError, match="target must be one of"):
        isa.report("gfx942")


@triton.jit
def tiny_copy(src_ptr, dst_ptr, n, offset, BLOCK: tl.constexpr):
    """dst[i] = src[offset + i] for i < n, one BLOCK per program (kernel_signature's example: two scalars)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + i, tl.load(src_ptr + offset + i, mask=i < n), mask=i < n)


def test_kernel_signature_follows_the_kernel():
    """Every parameter in the kernel's order; pointers typed by the caller, other scalars i32 unless typed."""
    sig = kernel_signature(tiny_copy, {"src_ptr": "*fp32", "dst_ptr": "*bf16", "offset": "i64"}, {"BLOCK": 128})
    assert list(sig.items()) == [("src_ptr", "*fp32"), ("dst_ptr", "*bf16"), ("n", "i32"), ("offset", "i64"),
                                 ("BLOCK", "constexpr")]


@pytest.mark.parametrize("types, constexprs, message", [
    ({"src_ptr": "*fp32"}, {"BLOCK": 128}, "tiny_copy: pointer parameter 'dst_ptr' has no type"),      # added
    ({"src_ptr": "*fp32", "dst_ptr": "*fp32", "out_ptr": "*fp32"}, {"BLOCK": 128},
     "tiny_copy has no parameter 'out_ptr'"),                                                # removed or renamed
    ({"src_ptr": "*fp32", "dst_ptr": "i32"}, {"BLOCK": 128}, "tiny_copy: pointer parameter 'dst_ptr' is typed 'i32'"),
    ({"src_ptr": "*fp32", "dst_ptr": "*fp32", "n": "*i32"}, {"BLOCK": 128},
     r"tiny_copy: parameter 'n' is typed '\*i32' but not named \*_ptr"),
    ({"src_ptr": "*fp32", "dst_ptr": "*fp32", "BLOCK": "i32"}, {"BLOCK": 128},
     "tiny_copy: parameter 'BLOCK' is a constexpr"),
    ({"src_ptr": "*fp32", "dst_ptr": "*fp32"}, {}, "tiny_copy: constexpr parameter 'BLOCK' has no value"),
    ({"src_ptr": "*fp32", "dst_ptr": "*fp32"}, {"BLOCK": 128, "n": 4}, "tiny_copy has no constexpr parameter 'n'"),
])
def test_kernel_signature_names_the_kernel_and_parameter_it_rejects(types, constexprs, message):
    with pytest.raises(ValueError, match=message):
        kernel_signature(tiny_copy, types, constexprs)


def test_compile_spec_rejects_what_the_kernel_lacks():
    with pytest.raises(ValueError, match="CompileSpec 'bad': tiny_dot_scaled: pointer parameter 'a_scale_ptr'"):
        CompileSpec("bad", tiny_dot_scaled, {"a_ptr": "*u8"}, {"M": 64, "N": 64, "D": 32})
    with pytest.raises(ValueError, match="targets must be"):
        CompileSpec("bad", tiny_dot_scaled, _tiny(32).types, _tiny(32).constexprs, targets=("gfx942",))
    with pytest.raises(ValueError, match="aligned names 'M', not a runtime parameter"):
        CompileSpec("bad", tiny_dot_scaled, _tiny(32).types, _tiny(32).constexprs, aligned=("M",))


def _parameters(fn) -> list[tuple[str, bool]]:
    """(name, is a tl.constexpr) of fn's parameters, read from its Python signature (compiled or interpreted)."""
    params = inspect.signature(fn.fn).parameters.values()
    return [(p.name, "constexpr" in str(p.annotation)) for p in params]


@pytest.mark.parametrize("spec", load_specs()[0], ids=lambda spec: spec.label)
def test_every_spec_compiles_its_kernels_own_parameters(spec):
    """Each spec's compile signature is its kernel's parameter list: the runtime parameters typed (pointers as
    pointers), the constexpr ones marked and valued."""
    params = _parameters(spec.fn)
    assert list(spec.signature) == [name for name, _ in params], spec.label
    assert {n for n, t in spec.signature.items() if t == "constexpr"} == set(spec.constexprs) == \
        {name for name, constexpr in params if constexpr}, spec.label
    for name, ty in spec.signature.items():
        assert ty == "constexpr" or ty.startswith("*") == name.endswith("_ptr"), (spec.label, name, ty)


@pytest.mark.parametrize("spills, scratch, lanes, scratch_ok, failed, notes", [
    (0, 0, 0, "", False, 0),
    (0, 0, 8, "", False, 1),        # AMD SGPRs in VGPR lanes: no memory, a note
    (2, 0, 0, "", True, 0),         # registers spilled to memory
    (0, 48, 0, "", True, 0),        # a stack frame
    (0, 48, 0, "why", False, 1),    # ... with its reason
    (2, 16, 3, "why", False, 2),
])
def test_scratch_claims(spills, scratch, lanes, scratch_ok, failed, notes):
    """Scratch memory or spills into it fail the report unless the spec says why; SGPRs spilled into VGPR lanes
    (AMD, no scratch memory) are a note."""
    spec = CompileSpec("claim", tiny_dot_scaled, _tiny(32).types, _tiny(32).constexprs, scratch_ok=scratch_ok)
    failures, got_notes = isa._common_failures(spec, spills, scratch, 8, lane_spills=lanes)
    assert bool(failures) == failed and len(got_notes) == notes, (failures, got_notes)
    assert isa._common_failures(spec, spills, scratch, 0, lane_spills=lanes)[0][-1].startswith("does not fit")


def test_scratch_failure_names_what_was_counted():
    """gfx950 counts spilled registers; sm90 reports stack and local bytes, where spills are part of them, so its
    failure names no spill count (a '0 spilled registers' there would be wrong whenever ptxas spilled)."""
    spec = CompileSpec("claim", tiny_dot_scaled, _tiny(32).types, _tiny(32).constexprs)
    assert isa._common_failures(spec, 3, 64, 8)[0] == ["scratch: 64 bytes, 3 spilled registers"]
    assert isa._common_failures(spec, None, 24, 8)[0] == ["scratch: 24 bytes of stack and local memory a thread"]


_LOOP_ASM = """\tv_mov_b32 v0, 0
.LBB0_1:                                ; =>This Inner Loop Header: Depth=1
\tbuffer_load_dwordx4 v1, s[0:3], 0 offen lds
\tglobal_load_ubyte v2, v3, s[4:5]
\tv_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[16:19], v[20:23], 0, v1, v2 op_sel_hi:[0,0,0]
\ts_cbranch_scc0 .LBB0_3
.LBB0_2:                                ;   in Loop: Header=BB0_1 Depth=1
\tds_read_b128 v[4:7], v8
\tds_read2_b32 v[9:10], v8 offset1:1
\ts_cbranch_scc1 .LBB0_1
.LBB0_3:
\tv_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], 0
.LBB0_4:                                ; =>This Inner Loop Header: Depth=1
\tv_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], 0
\ts_cbranch_scc1 .LBB0_4
\ts_endpgm
.Lfunc_end0:
.LBB9_9:                                ; =>This Inner Loop Header: Depth=1
\tv_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], 0
"""


def test_amd_key_loop_reads_the_loop_of_the_matrix_instructions():
    """The loop's blocks by LLVM's loop comments; the loop with the most matrix instructions (ties: the first); the
    loads' bytes per lane; nothing after the kernel's end; per_tile scales by warps, keys and rows."""
    loop = isa.amd_key_loop(_LOOP_ASM, keys=128, rows=16)
    assert loop == isa.KeyLoop(keys=128, rows=16, instructions=7,
                               matrix_ops=(("v_mfma_scale_f32_32x32x64_f8f6f4", 1),), global_loads=2,
                               global_load_bytes=17, lds_reads=2, lds_read_bytes=24, loops_with_matrix_ops=2)
    assert isa.amd_key_loop("\tv_mfma_f32_32x32x16_bf16 v[0:15], v[1:4], v[5:8], 0\n", 64, 32) is None
    kernel = isa.KernelIsa("x", "k", "gfx950", 4, (), (), 0, 0, 0, 8, 8, "waves", 8, 0.0, (), key_loop=loop)
    tile = isa.per_tile(kernel)        # 4 waves x (64 / 128 keys) x (32 / 16 rows) = 4 loop iterations' worth
    assert tile["instructions"] == 28 and tile["matrix_ops"] == {"v_mfma_scale_f32_32x32x64_f8f6f4": 4}
    assert tile["global_loads"] == 8 and tile["global_bytes_per_load"] == 8.5 and tile["lds_bytes_per_read"] == 12
    assert isa.KernelIsa.from_json(kernel.to_json()) == kernel

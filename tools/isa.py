"""Cross-compilation report: every kernel of hw/ compiled for gfx950 and sm_90 on any machine (DESIGN §5, §7).

`triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget(...))` runs Triton's whole pipeline
down to the device binary without a GPU: the AMD backend links the HSACO with the LLD built into Triton's wheel,
the NVIDIA backend runs the ptxas the wheel bundles. hw.variants.load_specs() gives every variant's and kernel
package's CompileSpecs (hw/isa_spec.py states the contract); this module compiles each spec once per process
(and Triton's on-disk cache keeps the binaries across processes) and reads, per kernel:

  gfx950  matrix instructions (v_mfma*, v_smfmac*; the MXFP4 claim is v_mfma_scale_f32_*_f8f6f4), VGPR / AGPR /
          SGPR counts, spill counts and the private (scratch) segment from the AMDGCN's metadata, LDS bytes;
  sm90    matrix instructions in the PTX (wgmma.mma_async*, mma.sync*), registers per thread, stack and local
          (spill) bytes and static shared memory from `cuobjdump -res-usage` on the cubin, plus Triton's dynamic
          shared memory;

and the occupancy those resources allow (waves per SIMD on gfx950, warps per SM on sm90; rules below). For a
scorer whose spec declares its key tile (CompileSpec.key_tile), gfx950 also reads the key loop (KeyLoop): the
static instructions of one iteration, its matrix instructions and its loads, which per_tile() puts on the scale of
one TILE_KEYS x TILE_ROWS tile (`mxidx isa --per-tile`).

`python -m tools.isa TARGET ...` prints the report as JSON: report() runs it as a child process when this process
has TRITON_INTERPRET=1 set (its kernels are then interpreter objects, which cannot be compiled).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

from hw.isa_spec import TARGETS, CompileSpec
from hw.variants import load_specs

GPU_TARGETS = {"gfx950": GPUTarget("hip", "gfx950", 64), "sm90": GPUTarget("cuda", 90, 32)}
assert tuple(GPU_TARGETS) == TARGETS

# ---------------------------------------------------------------------------------------------------------------
# gfx950 (CDNA4, MI350X/MI355X) occupancy rules, per SIMD (4 SIMDs per CU):
#  - ROCm "GPU specifications" table, MI355X/MI350X (gfx950): 512 KiB VGPR file per CU = 4 SIMDs x 512 registers
#    x 64 lanes x 4 B; LDS 160 KiB per CU; wavefront 64.
#  - gfx90a and later have a unified VGPR file: arch VGPRs and AGPRs share the 512 registers of a lane, at most 256
#    of each (gfx90a ISA §3.6.4, as cited in LLVM commit b7611370); LLVM allocates them in granules of 8 and
#    reports the combined count as "TotalNumVgprs" (AGPRs start at a 4-aligned offset after the arch VGPRs).
#  - at most 8 waves per SIMD on gfx90a and later (LLVM AMDGPU getMaxWavesPerEU; LLVM prints "Occupancy: 8" for a
#    kernel limited by nothing).
#  - SGPRs limit waves on GFX8/GFX9 only above 80 (LLVM GCNSubtarget::getOccupancyWithNumSGPRs: <= 80: 10,
#    <= 88: 9, <= 100: 8, else 7).
#  - LDS is allocated in blocks of 320 dwords = 1280 B on gfx950 (LLVM AMDGPUUsage, COMPUTE_PGM_RSRC2.LDS_SIZE).
#  - the waves of one workgroup are spread evenly over the 4 SIMDs of a CU (assumption of this model).
AMD_VGPRS_PER_SIMD_LANE = 512
AMD_VGPR_GRANULE = 8
AMD_MAX_WAVES_PER_SIMD = 8
AMD_SIMDS_PER_CU = 4
AMD_LDS_PER_CU = 160 * 1024
AMD_LDS_GRANULE = 320 * 4
AMD_SGPR_WAVES = ((80, 10), (88, 9), (100, 8))   # (max SGPRs, waves); more SGPRs -> 7

# sm_90 (H100/H200) occupancy rules, per SM: CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability", 9.0: 65536 32-bit registers, at most 255 per thread, 64 resident warps, 32 resident blocks,
# 228 KB shared memory per SM of which at most 227 KB per block; 1 KB of shared memory is reserved per block
# (cudaDevAttrReservedSharedMemoryPerBlock). Registers are allocated per warp in units of 256 (8 per thread);
# shared memory in units of 128 B (CUDA occupancy calculator, compute capability 9.0).
NV_REGS_PER_SM = 65536
NV_REG_GRANULE_PER_THREAD = 8
NV_MAX_WARPS_PER_SM = 64
NV_MAX_BLOCKS_PER_SM = 32
NV_SMEM_PER_SM = 228 * 1024
NV_SMEM_PER_BLOCK = 227 * 1024
NV_SMEM_RESERVED_PER_BLOCK = 1024
NV_SMEM_GRANULE = 128

SCALED_MFMA = re.compile(r"^v_mfma_scale_f32_\w+_f8f6f4$")
_AMD_MATRIX_OP = re.compile(r"^\s+(v_mfma\w*|v_smfmac\w*)\s", re.M)
_NV_MATRIX_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:wgmma\.mma_async|mma\.sync)[\w.]*)", re.M)
_AMD_META = re.compile(r"^\s+\.(vgpr_count|agpr_count|sgpr_count|vgpr_spill_count|sgpr_spill_count|"
                       r"private_segment_fixed_size|group_segment_fixed_size):\s+(\d+)", re.M)
_AMD_TOTAL_VGPRS = re.compile(r"^; TotalNumVgprs: (\d+)", re.M)
_AMD_LLVM_OCCUPANCY = re.compile(r"^; Occupancy: (\d+)", re.M)
_NV_RESOURCES = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
_EXIT_BAD_ARGUMENT = 2
_PROGRESS_PREFIX = "progress: "   # child stderr lines that carry progress (python -m tools.isa --progress)
# the AMDGCN's basic blocks: a label, with LLVM's loop comment ("=>This Inner Loop Header: Depth=1",
# "in Loop: Header=BB0_9 Depth=1"), then its instructions
_AMD_LABEL = re.compile(r"^(\.LBB\d+_\d+):[ \t]*(?:;(.*))?$")
_AMD_LOOP_MEMBER = re.compile(r"Header=BB(\d+_\d+)")
_AMD_INSTRUCTION = re.compile(r"^\s+([a-z][a-z0-9_]*)(?:\s|$)")
_AMD_GLOBAL_LOAD = re.compile(r"^(?:global|buffer|flat)_load_(?:lds_)?([a-z0-9]+)")
_AMD_LDS_READ = re.compile(r"^ds_read(2st64|2)?_([biu])(\d+)")
_AMD_LOAD_BYTES = {"ubyte": 1, "sbyte": 1, "ushort": 2, "sshort": 2, "short": 2, "dword": 4, "dwordx2": 8,
                   "dwordx3": 12, "dwordx4": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "b32": 4, "b64": 8, "b96": 12,
                   "b128": 16}
#: the per-tile table's unit of work: a tile of this many keys scored against this many query rows (one decode
#: tile of the keys-on-M kernels at next_n 1, 32 heads)
TILE_KEYS = 64
TILE_ROWS = 32


@dataclass(frozen=True)
class KeyLoop:
    """One iteration of a scorer's key loop on gfx950, per wave, as compiled: the instructions of the LLVM loop (the
    blocks its loop comments put in it) that holds the most matrix instructions (the first of equals), counted
    statically, every branch of the body included (an upper bound of what one iteration issues). The body scores
    `keys` keys against `rows` query rows (CompileSpec.key_tile)."""

    keys: int
    rows: int
    instructions: int
    matrix_ops: tuple[tuple[str, int], ...]
    global_loads: int           # global_/buffer_/flat_load instructions, into registers or into LDS
    global_load_bytes: int      # bytes one lane loads by them
    lds_reads: int              # ds_read* instructions
    lds_read_bytes: int         # bytes one lane reads by them
    loops_with_matrix_ops: int  # loops of the kernel holding matrix instructions (e.g. an unmasked and a masked one)

    @classmethod
    def from_json(cls, d: dict) -> "KeyLoop":
        return cls(**(d | {"matrix_ops": tuple(tuple(op) for op in d["matrix_ops"])}))


@dataclass(frozen=True)
class KernelIsa:
    """What one compiled kernel uses on one target. Register counts per lane (gfx950) / thread (sm90)."""

    label: str
    kernel: str                             # the @triton.jit function's name
    target: str                             # "gfx950" | "sm90"
    num_warps: int
    matrix_ops: tuple[tuple[str, int], ...]  # (mnemonic, static count), most frequent first
    registers: tuple[tuple[str, int], ...]   # gfx950: vgpr_total (arch + acc, as allocated), vgpr, agpr, sgpr;
                                            # sm90: reg
    spills: int                             # spilled registers (gfx950) / 0 on sm90 (spills show as local bytes)
    scratch_bytes: int                      # gfx950: private segment per lane; sm90: stack + local per thread
    shared_bytes: int                       # LDS / shared memory per workgroup (static + Triton's dynamic)
    occupancy: int                          # waves per SIMD (gfx950) / warps per SM (sm90); 0: does not fit
    occupancy_max: int                      # the architecture's ceiling (8 waves per SIMD / 64 warps per SM)
    limited_by: str                         # which resource sets the occupancy
    compiler_occupancy: int | None          # gfx950: LLVM's own estimate (blind to Triton's dynamic LDS); sm90: None
    compile_s: float
    failures: tuple[str, ...]               # failed claims (empty: all good)
    notes: tuple[str, ...] = ()             # e.g. why a stack frame is accepted (CompileSpec.scratch_ok)
    key_loop: KeyLoop | None = None         # gfx950, specs with a key_tile: the key loop's instructions

    @property
    def scaled_mfma(self) -> bool:
        return any(SCALED_MFMA.match(op) for op, _ in self.matrix_ops)

    def to_json(self) -> dict:
        d = asdict(self)
        d["matrix_ops"] = dict(self.matrix_ops)
        d["registers"] = dict(self.registers)
        d["scaled_mfma"] = self.scaled_mfma
        return d

    @classmethod
    def from_json(cls, d: dict) -> "KernelIsa":
        fields = {k: v for k, v in d.items() if k != "scaled_mfma"}
        fields.update(matrix_ops=tuple(d["matrix_ops"].items()), registers=tuple(d["registers"].items()),
                      failures=tuple(d["failures"]), notes=tuple(d.get("notes", ())),
                      key_loop=KeyLoop.from_json(d["key_loop"]) if d.get("key_loop") else None)
        return cls(**fields)


# ---------------------------------------------------------------------------------------------------- compiling
_COMPILED: dict[tuple[str, str], tuple[object, float]] = {}
_ANALYZED: dict[tuple[str, str], KernelIsa] = {}


def compile_spec(spec: CompileSpec, target: str):
    """The triton CompiledKernel of `spec` for `target` ("gfx950" | "sm90"), and its compile time in seconds.
    Cached per process by (label, target)."""
    if target not in GPU_TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    key = (spec.label, target)
    if key not in _COMPILED:
        if not isinstance(spec.fn, triton.runtime.JITFunction):
            raise ValueError(f"{spec.label}: fn is not a compilable @triton.jit function (got "
                             f"{type(spec.fn).__name__}: TRITON_INTERPRET=1 was set when it was defined; "
                             f"tools.isa.report compiles in a child process then)")
        aligned = [n for n, t in spec.signature.items() if t.startswith("*")] if spec.aligned is None \
            else spec.aligned
        attrs = {(spec.fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        options = {"num_warps": spec.num_warps}
        if spec.num_stages is not None:
            options["num_stages"] = spec.num_stages
        if spec.maxnreg is not None and target == "sm90":
            options["maxnreg"] = spec.maxnreg
        kind = GluonASTSource if isinstance(spec.fn, GluonJITFunction) else ASTSource     # Gluon: layouts given
        source = kind(spec.fn, dict(spec.signature), constexprs=dict(spec.constexprs), attrs=attrs)
        start = time.perf_counter()
        compiled = triton.compile(source, target=GPU_TARGETS[target], options=options)
        _COMPILED[key] = (compiled, time.perf_counter() - start)
    return _COMPILED[key]


def analyze(spec: CompileSpec, target: str) -> KernelIsa:
    """Compile (cached) and read the resources, matrix instructions, occupancy and failed claims."""
    key = (spec.label, target)
    if key not in _ANALYZED:
        compiled, seconds = compile_spec(spec, target)
        read = _read_amdgcn if target == "gfx950" else _read_sm90
        _ANALYZED[key] = read(spec, compiled, seconds)
    return _ANALYZED[key]


def report(target: str, kernel: str | None = None, modules: tuple[str, ...] | None = None, *,
           scaled_mfma_only: bool = False, key_tile_only: bool = False,
           progress=None) -> tuple[tuple[KernelIsa, ...], tuple[str, ...]]:
    """(one KernelIsa per spec of `modules` meant for `target`, the modules without ISA_SPECS).

    `modules` defaults to every kernel package of hw/. `kernel` filters: a full label ("topk/k2048"), a label
    prefix ending at a "/" ("topk"), or a function name; ValueError when it matches nothing. `scaled_mfma_only`
    keeps the specs that claim scaled MFMA (the MXFP4 scorers for D >= 64), `key_tile_only` those that declare a
    key tile (the scorers).
    Under TRITON_INTERPRET=1 the kernels (and Triton's own tl.sort & co.) are interpreter objects that cannot be
    compiled, so the report is then made by a child Python process without it (`python -m tools.isa`).
    `progress`, if given, is called with one line per kernel as it is compiled ("[i/n] label  s").
    """
    if target not in GPU_TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    if triton.knobs.runtime.interpret:
        return _report_in_child(target, kernel, modules, scaled_mfma_only, key_tile_only, progress)
    specs, missing = load_specs(modules)
    chosen = [s for s in specs if target in s.targets and (kernel is None or _matches(s, kernel))
              and (s.scaled_mfma or not scaled_mfma_only) and (s.key_tile is not None or not key_tile_only)]
    if kernel is not None and not chosen:
        raise ValueError(f"kernel {kernel!r} matches no spec for {target}; labels: "
                         f"{sorted(s.label for s in specs if target in s.targets)}")
    kernels = []
    for i, spec in enumerate(chosen, 1):
        kernels.append(analyze(spec, target))
        if progress is not None:
            progress(f"[{i}/{len(chosen)}] {spec.label}  {kernels[-1].compile_s:.1f} s")
    return tuple(kernels), missing


def _report_in_child(target, kernel, modules, scaled_mfma_only, key_tile_only, progress):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)   # the child imports what this process can
    cmd = [sys.executable, "-m", __spec__.name, target]   # "tools.isa", also when run as __main__
    cmd += [] if kernel is None else ["--kernel", kernel]
    cmd += [] if modules is None else ["--modules", ",".join(modules)]
    cmd += ["--scaled-mfma-only"] if scaled_mfma_only else []
    cmd += ["--key-tile-only"] if key_tile_only else []
    cmd += ["--progress"] if progress is not None else []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        stderr = []
        for line in child.stderr:               # the child's progress lines, passed on as they come
            if progress is not None and line.startswith(_PROGRESS_PREFIX):
                progress(line[len(_PROGRESS_PREFIX):].rstrip("\n"))
            else:
                stderr.append(line)
        stdout = child.stdout.read()
    stderr = "".join(stderr)
    if child.returncode == _EXIT_BAD_ARGUMENT:
        raise ValueError(stderr.strip().splitlines()[-1])
    if child.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({child.returncode}):\n{stderr[-4000:]}")
    result = json.loads(stdout)
    return tuple(KernelIsa.from_json(d) for d in result["kernels"]), tuple(result["missing"])


def _matches(spec: CompileSpec, name: str) -> bool:
    return spec.label == name or spec.label.startswith(name.rstrip("/") + "/") or spec.fn.__name__ == name


# ------------------------------------------------------------------------------------------------------ gfx950
def _read_amdgcn(spec: CompileSpec, compiled, seconds: float) -> KernelIsa:
    asm = compiled.asm["amdgcn"]
    meta = {k: int(v) for k, v in _AMD_META.findall(asm)}
    vgpr, agpr, sgpr = meta["vgpr_count"], meta.get("agpr_count", 0), meta["sgpr_count"]
    total = _AMD_TOTAL_VGPRS.search(asm)
    total_vgpr = int(total.group(1)) if total else (_round_up(vgpr, 4) + agpr if agpr else vgpr)
    lds = max(compiled.metadata.shared, meta.get("group_segment_fixed_size", 0))
    occupancy, limited_by = amd_waves_per_simd(total_vgpr, sgpr, lds, spec.num_warps)
    vgpr_spills, sgpr_spills = meta.get("vgpr_spill_count", 0), meta.get("sgpr_spill_count", 0)
    spills = vgpr_spills + sgpr_spills
    scratch = meta.get("private_segment_fixed_size", 0)
    ops = _count(_AMD_MATRIX_OP.findall(asm))
    lane_spills = 0 if scratch else sgpr_spills   # without scratch memory the SGPRs went to VGPR lanes
    failures, notes = _common_failures(spec, spills - lane_spills, scratch, occupancy, lane_spills=lane_spills)
    if spec.scaled_mfma and not any(SCALED_MFMA.match(op) for op, _ in ops):
        failures.append("MXFP4 scorer without v_mfma_scale_f32_*_f8f6f4 "
                        f"(matrix ops: {', '.join(op for op, _ in ops) or 'none'})")
    llvm = _AMD_LLVM_OCCUPANCY.search(asm)
    registers = (("vgpr_total", total_vgpr), ("vgpr", vgpr), ("agpr", agpr), ("sgpr", sgpr))
    key_loop = None if spec.key_tile is None else amd_key_loop(asm, *spec.key_tile)
    return KernelIsa(spec.label, spec.fn.__name__, "gfx950", spec.num_warps, ops, registers, spills, scratch, lds,
                     occupancy, AMD_MAX_WAVES_PER_SIMD, limited_by, int(llvm.group(1)) if llvm else None,
                     round(seconds, 2), tuple(failures), notes, key_loop)


def amd_key_loop(asm: str, keys: int, rows: int) -> KeyLoop | None:
    """The KeyLoop of AMDGCN text `asm` (its first kernel) whose loop body scores `keys` x `rows`; None when no loop
    holds a matrix instruction."""
    end = asm.find(".Lfunc_end")
    loops: dict[str, list[str]] = {}
    loop = None
    for line in asm[:end if end >= 0 else len(asm)].splitlines():
        label = _AMD_LABEL.match(line)
        if label:
            comment = label.group(2) or ""
            member = _AMD_LOOP_MEMBER.search(comment)
            loop = f".LBB{member.group(1)}" if member else label.group(1) if "Loop Header" in comment else None
            continue
        found = _AMD_INSTRUCTION.match(line)
        if loop is not None and found:
            loops.setdefault(loop, []).append(found.group(1))
    matrix = {name: [op for op in body if _AMD_MATRIX_OP.match(f"\t{op} ")] for name, body in loops.items()}
    with_ops = [name for name in loops if matrix[name]]
    if not with_ops:
        return None
    hot = max(with_ops, key=lambda name: len(matrix[name]))     # max() keeps the first of equals
    body = loops[hot]
    global_loads = [_AMD_LOAD_BYTES[m.group(1)] for m in map(_AMD_GLOBAL_LOAD.match, body) if m]
    lds_reads = [_lds_read_bytes(m) for m in map(_AMD_LDS_READ.match, body) if m]
    return KeyLoop(keys, rows, len(body), _count(matrix[hot]), len(global_loads), sum(global_loads), len(lds_reads),
                   sum(lds_reads), len(with_ops))


def _lds_read_bytes(read: re.Match) -> int:
    """Bytes per lane of a ds_read* mnemonic matched by _AMD_LDS_READ (ds_read2*: two values)."""
    pair, _, bits = read.groups()           # ds_read_b128, ds_read_u8, ds_read2_b64, ds_read2st64_b32, ...
    return int(bits) // 8 * (2 if pair else 1)


def per_tile(k: KernelIsa) -> dict | None:
    """k's key loop per TILE_KEYS x TILE_ROWS tile of work, summed over the waves of a workgroup (the loop's counts
    x num_warps x (TILE_KEYS / keys) x (TILE_ROWS / rows)): matrix instructions by mnemonic, instructions, global
    loads and LDS reads, and the bytes each of those moves per lane on average. None without a key loop."""
    loop = k.key_loop
    if loop is None:
        return None
    scale = k.num_warps * (TILE_KEYS / loop.keys) * (TILE_ROWS / loop.rows)
    return {
        "tile": (loop.keys, loop.rows),
        "matrix_ops": {op: n * scale for op, n in loop.matrix_ops},
        "instructions": loop.instructions * scale,
        "global_loads": loop.global_loads * scale,
        "global_bytes_per_load": loop.global_load_bytes / loop.global_loads if loop.global_loads else 0.0,
        "lds_reads": loop.lds_reads * scale,
        "lds_bytes_per_read": loop.lds_read_bytes / loop.lds_reads if loop.lds_reads else 0.0,
        "loops_with_matrix_ops": loop.loops_with_matrix_ops,
    }


def amd_waves_per_simd(vgprs: int, sgprs: int, lds_bytes: int, num_warps: int) -> tuple[int, str]:
    """Waves per SIMD on gfx950 for a kernel using `vgprs` (arch + acc) and `sgprs` per wave and `lds_bytes` per
    workgroup of `num_warps` waves, counted in whole workgroups per CU (their waves spread evenly over its 4 SIMDs,
    so that a workgroup of 2 waves holds half a wave per SIMD), rounded down; and the limiting resource."""
    by_vgpr = AMD_VGPRS_PER_SIMD_LANE // _round_up(max(vgprs, 1), AMD_VGPR_GRANULE)
    by_sgpr = next((w for limit, w in AMD_SGPR_WAVES if sgprs <= limit), 7)

    def workgroups(waves_per_simd: int) -> int:     # whole workgroups that fit in that many waves on every SIMD
        return waves_per_simd * AMD_SIMDS_PER_CU // num_warps

    limits = {   # workgroups per CU
        "waves": workgroups(AMD_MAX_WAVES_PER_SIMD),
        "vgpr": workgroups(min(by_vgpr, AMD_MAX_WAVES_PER_SIMD)),
        "sgpr": workgroups(min(by_sgpr, AMD_MAX_WAVES_PER_SIMD)),
        "lds": AMD_LDS_PER_CU // _round_up(lds_bytes, AMD_LDS_GRANULE) if lds_bytes else math.inf,
    }
    limited_by = min(limits, key=lambda name: limits[name])
    return int(limits[limited_by]) * num_warps // AMD_SIMDS_PER_CU, limited_by


def spec_variants(target: str) -> dict[str, tuple[str, str, bool]]:
    """label -> (op, variant name, whether the variant is the default of its op and kv_dtype on the Target that
    cross-compiles as `target`) for every registered variant's spec meant for `target`."""
    from hw.targets import Target
    from hw.variants import REGISTRY, select

    where = Target.of_isa(target)
    found = {}
    for op, op_variants in REGISTRY.items():
        for v in op_variants:
            default = v.runs_on(where) and select(op, where, v.kv_dtype).name == v.name
            found.update({spec.label: (op.value, v.name, default) for spec in v.isa_specs() if target in spec.targets})
    return found


# ------------------------------------------------------------------------------------------------------- sm_90
def _read_sm90(spec: CompileSpec, compiled, seconds: float) -> KernelIsa:
    regs, stack, static_shared, local = _cuobjdump_resources(compiled.asm["cubin"])
    shared = static_shared + compiled.metadata.shared
    occupancy, limited_by = nv_warps_per_sm(regs, shared, spec.num_warps)
    scratch = stack + local
    ops = _count(_NV_MATRIX_OP.findall(compiled.asm["ptx"]))
    failures, notes = _common_failures(spec, None, scratch, occupancy)
    return KernelIsa(spec.label, spec.fn.__name__, "sm90", spec.num_warps, ops, (("reg", regs),), 0, scratch,
                     shared, occupancy, NV_MAX_WARPS_PER_SM, limited_by, None, round(seconds, 2), tuple(failures),
                     notes)


def _cuobjdump_resources(cubin: bytes) -> tuple[int, int, int, int]:
    """(registers per thread, stack bytes, static shared bytes, local bytes) of the cubin's one kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-res-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
    found = _NV_RESOURCES.search(out)
    if found is None:
        raise RuntimeError(f"cuobjdump -res-usage printed no resource line:\n{out}")
    return tuple(int(v) for v in found.groups())


def nv_warps_per_sm(regs: int, shared_bytes: int, num_warps: int) -> tuple[int, str]:
    """Resident warps per SM on sm_90 for blocks of `num_warps` warps using `regs` per thread and `shared_bytes`
    (static + dynamic) per block, counted in whole blocks; and the limiting resource."""
    regs_per_warp = _round_up(max(regs, 1), NV_REG_GRANULE_PER_THREAD) * 32
    limits = {
        "warps": NV_MAX_WARPS_PER_SM // num_warps,
        "blocks": NV_MAX_BLOCKS_PER_SM,
        "regs": (NV_REGS_PER_SM // regs_per_warp) // num_warps,
        "smem": 0 if shared_bytes > NV_SMEM_PER_BLOCK else
        NV_SMEM_PER_SM // (_round_up(shared_bytes, NV_SMEM_GRANULE) + NV_SMEM_RESERVED_PER_BLOCK),
    }
    limited_by = min(limits, key=lambda name: limits[name])
    return limits[limited_by] * num_warps, limited_by


# ------------------------------------------------------------------------------------------------------ helpers
def _common_failures(spec: CompileSpec, spills: int | None, scratch: int, occupancy: int,
                     lane_spills: int = 0) -> tuple[list[str], tuple]:
    """(failed claims, notes): scratch memory or registers spilled to it fail unless the spec gives a reason
    (scratch_ok), then it is a note; AMD's SGPRs spilled into VGPR lanes (`lane_spills`, no scratch memory: a
    v_writelane / v_readlane pair each) are a note; not fitting on one CU/SM always fails. spills None: not
    counted (sm90, where spills are part of the stack and local bytes)."""
    failures, notes = [], []
    if (spills or scratch) and spec.scratch_ok:
        notes.append(f"scratch accepted: {spec.scratch_ok}")
    elif spills or scratch:
        failures.append(f"scratch: {scratch} bytes" + (" of stack and local memory a thread" if spills is None
                                                       else f", {spills} spilled registers"))
    if lane_spills:
        notes.append(f"{lane_spills} SGPRs spilled into VGPR lanes, no scratch memory")
    if occupancy == 0:
        failures.append("does not fit on one CU/SM (registers or shared memory)")
    return failures, tuple(notes)


def _count(ops: list[str]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _round_up(x: int, granule: int) -> int:
    return -(-x // granule) * granule


def _main(argv=None) -> None:
    """`python -m tools.isa TARGET [--kernel K] [--modules a,b] [--scaled-mfma-only] [--key-tile-only] [--progress]`:
    the report as JSON on stdout (progress lines on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m tools.isa")
    parser.add_argument("target", choices=TARGETS)
    parser.add_argument("--kernel")
    parser.add_argument("--modules", help="comma-separated modules exporting ISA_SPECS (default: hw's packages)")
    parser.add_argument("--scaled-mfma-only", action="store_true")
    parser.add_argument("--key-tile-only", action="store_true")
    parser.add_argument("--progress", action="store_true", help="one stderr line per compiled kernel")
    args = parser.parse_args(argv)
    modules = None if args.modules is None else tuple(args.modules.split(","))
    try:
        progress = (lambda line: print(_PROGRESS_PREFIX + line, file=sys.stderr, flush=True)) if args.progress \
            else None
        kernels, missing = report(args.target, args.kernel, modules, scaled_mfma_only=args.scaled_mfma_only,
                                  key_tile_only=args.key_tile_only, progress=progress)
    except ValueError as e:
        print(e, file=sys.stderr)
        raise SystemExit(_EXIT_BAD_ARGUMENT) from None
    json.dump({"kernels": [k.to_json() for k in kernels], "missing": list(missing)}, sys.stdout)


if __name__ == "__main__":
    _main()

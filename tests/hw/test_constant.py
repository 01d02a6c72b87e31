"""hw._constant.Constant: a tl.constexpr that is its own deep copy, so that Triton's per-launch check of the globals
a kernel read (JITFunction.run: `now != recorded`, the recorded value deep-copied at compilation) answers by
identity; and every module-level constexpr of the kernel packages is one."""
from __future__ import annotations

import copy
import importlib
import pkgutil

import triton.language as tl

import hw
from hw._constant import Constant


def test_a_constant_is_a_constexpr_and_its_own_copy():
    c = Constant(5)
    assert isinstance(c, tl.constexpr) and c.value == 5 and repr(c) == repr(tl.constexpr(5))
    assert copy.deepcopy(c) is c
    assert (c != c) is False                       # by identity: no constexpr built
    assert hash(c) == hash(tl.constexpr(5))


def test_other_objects_compare_by_value():
    """A name rebound to another object is still compared by value, as tl.constexpr compares."""
    assert bool(Constant(5) != Constant(6)) and not bool(Constant(5) != Constant(5))
    assert bool(Constant(5) != 6) and not bool(Constant(5) != tl.constexpr(5))


def test_the_kernels_module_constants_are_constants():
    """Every module-level tl.constexpr of hw's modules is a Constant (a plain one would cost a few Python calls per
    launch of every kernel that reads it)."""
    plain, constants = [], set()
    for info in pkgutil.walk_packages(hw.__path__, "hw."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if type(value) is tl.constexpr:
                plain.append(f"{info.name}.{name}")
            elif isinstance(value, Constant):
                constants.add(id(value))
    assert not plain, f"module constants that are plain tl.constexpr (use hw._constant.Constant): {plain}"
    assert len(constants) > 90   # the walk saw the kernel packages

"""Module-level constants of the kernels that cost no host time at a launch.

At every launch Triton's JITFunction.run compares each module-level constexpr that the kernel, or a function it
calls, read when it was compiled with that name's value now (`now != recorded`, the recorded value a deep copy taken
at compilation). Between two tl.constexpr that comparison builds a third and asks its truth, a few Python calls each,
and the kernels of one prefill call of the hook read over a hundred of them (docs/perf/h200-prefill-ablation.md,
"Triton's check of the kernels' global constants"). A Constant is its own deep copy, so the check finds the recorded
value identical to the global and answers at once; a name rebound to another object is still compared by value.
Constants are never changed in place (Triton would not see it).
"""
import triton.language as tl


class Constant(tl.constexpr):
    """A tl.constexpr for a module-level constant of the kernels: everywhere a tl.constexpr, except that it is its
    own deep copy and `!=` against itself is False without building a constexpr."""

    def __deepcopy__(self, memo):
        return self

    def __ne__(self, other):
        return False if other is self else super().__ne__(other)

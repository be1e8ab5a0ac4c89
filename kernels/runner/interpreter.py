"""Triton's CPU interpreter for correctness checks where no GPU is present.

``enable()`` sets ``TRITON_INTERPRET=1`` (read when a kernel module is imported: ``@triton.jit``
then yields interpreted functions that run on CPU tensors through NumPy) and works around a quirk
of Triton 3.6's interpreter with NumPy >= 2.4: scalar kernel arguments are held as one-element
arrays, and ``int()`` of such an array is an error in those NumPy releases, which breaks any
``range(..., runtime_int, ...)`` loop. The patch converts through ``.reshape(-1)[0]`` instead.
The interpreter also holds bf16 as raw ``uint16`` bits and its ``tl.dot`` multiplies those bits
as integers; the second patch widens bf16 operands to fp32 (bits shifted into the high half, which
is exact) before the product, as the tensor cores do.
Timings under the interpreter mean nothing; it is for correctness only.
"""
from __future__ import annotations

import os

_PATCHED = False


def enable() -> None:
    """Turn the interpreter on for kernel modules imported after this call (process-wide
    environment change) and install the NumPy compatibility patch once. Idempotent."""
    global _PATCHED
    os.environ["TRITON_INTERPRET"] = "1"
    if _PATCHED:
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched

    import numpy as np
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    original_dot = builder.create_dot

    def widen(handle):
        if handle.dtype.scalar == tl.bfloat16 or handle.dtype == tl.bfloat16:
            bits = handle.data.astype(np.uint32) << np.uint32(16)
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return handle

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    builder.create_dot = create_dot
    _PATCHED = True

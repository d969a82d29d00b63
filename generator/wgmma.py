"""The wgmma instruction wrappers (generated/wgmma_instructions.h).

One inline-assembly statement per (N, dtype, B's and A's major-ness, A's source): a wgmma's
accumulator registers are operands of the instruction itself, N/2 of them per thread for an
m64nNk16 tile, so each N needs its own statement. This module writes the statements;
templates/wgmma_instructions.h.j2 only places them.
"""
from dataclasses import dataclass

# Every N the tensor-core families may ask for: key-tile widths and head dims, multiples of 16
# up to 256 (the largest N of a 16-bit wgmma).
WGMMA_N = tuple(range(16, 257, 16))
DTYPE_PTX = {"fp16": "f16", "bf16": "bf16"}


@dataclass(frozen=True)
class WgmmaStatement:
    n: int
    dtype: str
    transpose_b: bool
    a_from_registers: bool
    transpose_a: bool  # A from shared memory stored M-major (the backward's dS^T as dS)
    asm: str           # the PTX, as C string literal lines
    constraints: str   # the output operand list


def statement(n, dtype, transpose_b, a_from_registers, transpose_a=False):
    count = n // 2  # accumulators per thread
    accumulators = ", ".join(f"%{i}" for i in range(count))
    if a_from_registers:  # operands: d..., a0..a3, b descriptor, accumulate
        a, b, accumulate = "{" + ", ".join(f"%{count + i}" for i in range(4)) + "}", f"%{count + 4}", count + 5
        tail = f"p, 1, 1, {int(transpose_b)}"
    else:                 # operands: d..., a descriptor, b descriptor, accumulate
        a, b, accumulate = f"%{count}", f"%{count + 1}", count + 2
        tail = f"p, 1, 1, {int(transpose_a)}, {int(transpose_b)}"
    ptx = DTYPE_PTX[dtype]
    lines = ["{", ".reg .pred p;", f"setp.ne.b32 p, %{accumulate}, 0;",
             f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{accumulators}}}, {a}, {b}, {tail};", "}"]
    asm = "\n".join(f'"{line}\\n"' for line in lines)
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    return WgmmaStatement(n, dtype, transpose_b, a_from_registers, transpose_a, asm, constraints)


def statements():
    """A from registers is never transposed (its layout is the accumulators')."""
    return [statement(n, dtype, transpose_b, a_from_registers, transpose_a)
            for n in WGMMA_N for dtype in DTYPE_PTX for transpose_b in (False, True)
            for a_from_registers in (False, True) for transpose_a in (False, True)
            if not (a_from_registers and transpose_a)]

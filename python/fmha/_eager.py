"""Eager autograd for fmha's operators. A call through a torch.library operator with autograd
costs about a millisecond of host time for its forward and backward (the dispatcher's checks),
more than the kernels of a short training call take, so outside torch.compile the same
implementations run under a torch.autograd.Function (docs/python.md, "Eager autograd")."""
import torch


def autograd_function(forward, setup_context, backward):
    """The apply() of an autograd.Function that runs forward(*inputs), records what backward
    needs with setup_context(ctx, inputs, output) (the operator's own), and computes the
    inputs' gradients with backward(ctx, *output_grads); gradients of unused outputs are None."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            ctx.set_materialize_grads(False)
            output = forward(*inputs)
            setup_context(ctx, inputs, output)
            return output

        @staticmethod
        @torch.autograd.function.once_differentiable  # (the kernels' gradients have no gradient of their own)
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    return Function.apply

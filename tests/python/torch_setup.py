"""What the PyTorch tests share: torch (None where it is not installed), the skip marks that say
why, and the in-tree package on sys.path (unless one is installed)."""
import sys
from pathlib import Path

import pytest

try:
    import torch
except ImportError as error:
    torch = None
    _NO_TORCH = f"PyTorch is not installed in {sys.executable} ({error}); the device machine has it"
else:
    _NO_TORCH = ""
needs_torch = pytest.mark.skipif(torch is None, reason=_NO_TORCH)
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                                reason=_NO_TORCH or "PyTorch sees no CUDA GPU")
if torch is not None:
    sys.path.append(str(Path(__file__).resolve().parents[2] / "python"))

#!/usr/bin/env bash
# Proof that the README's Python install works where PyTorch is installed (issue 32), on a machine
# with a GPU and the repository already built (`make`: bin/libfmha.so), with no network:
#   bash tools/python_install_check.sh        (PYTHON=... picks the Python with PyTorch; default python3)
# In a temporary folder: a clean virtual environment that sees that Python's packages
# (--system-site-packages, as docs/python.md says), the README's command run in it (pip offline),
# then, from another folder, `import fmha` must find the installed package and its own
# libfmha.so, and the README's example must match PyTorch's SDPA. Prints PASS or FAIL (why);
# exit code 0 or 1.
set -u -o pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "python_install_check: FAIL: $*"; exit 1; }

[ -f bin/libfmha.so ] || fail "bin/libfmha.so is missing: run make first"
"$PYTHON" -c "import torch" 2>/dev/null || fail "$PYTHON cannot import torch (PyTorch)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || fail "$PYTHON has no pip (the environment borrows it)"
# --without-pip: the environment uses the pip its base Python has (no ensurepip, no download).
"$PYTHON" -m venv --without-pip --system-site-packages "$work/venv" || fail "python -m venv failed"
venv_python=$work/venv/bin/python
# Where that Python is itself a venv's (PyTorch installed there, as on the GPU machine), the new
# one sees only the base Python's packages: a .pth file adds the outer venv's.
outer=$("$PYTHON" -c 'import site, sys; print("\n".join(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
[ -z "$outer" ] || echo "$outer" > "$("$venv_python" -c 'import site; print(site.getsitepackages()[0])')/outer-venv.pth"
. "$work/venv/bin/activate"
# The README's command, verbatim; PIP_NO_INDEX: proof that it needs no package index.
(set -x; PIP_NO_INDEX=1 python3 -m pip install --no-build-isolation --no-deps ./python) \
    || fail "the README's pip command failed (output above)"

mkdir "$work/elsewhere"
cd "$work/elsewhere" && env -u FMHA_LIBRARY -u PYTHONPATH "$venv_python" - "$work/venv" <<'PY' || fail "the installed package (output above)"
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import fmha
from fmha import _library, flash_attn_func

venv = Path(sys.argv[1]).resolve()
package = Path(fmha.__file__).resolve().parent
library = Path(_library.load().path).resolve()
print(f"fmha from {package}, libfmha.so from {library} ({_library.load().platform} build)")
assert venv in package.parents, f"import fmha found {package}, not the package installed in {venv}"
assert library.parent.parent == package, f"the library {library} is not the installed package's own"

# The README's example, served by a catalogue kernel (strict: no fallback), against PyTorch's SDPA.
torch.manual_seed(0)
q = torch.randn(2, 128, 32, 128, dtype=torch.float16, device="cuda")
k, v = (torch.randn(2, 128, 8, 128, dtype=torch.float16, device="cuda") for _ in range(2))
print("backend:", fmha.which_backend(q, k, v, causal=True))
out = flash_attn_func(q, k, v, causal=True, strict=True)
heads = lambda t: t.transpose(1, 2).float().repeat_interleave(q.shape[2] // t.shape[2], dim=1)  # [b, h, s, d]
reference = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True).transpose(1, 2)
error = (out.float() - reference).abs().max().item()
print(f"max |fmha - SDPA| = {error:.2e}")
assert out.shape == q.shape and error < 4e-3, f"max abs error {error} against SDPA"
PY
echo "python_install_check: PASS"

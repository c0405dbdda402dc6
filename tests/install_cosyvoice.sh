#!/usr/bin/env bash
# Install the CosyVoice engine stack into the ACTIVE Python environment (a venv).
#
#   python3 -m venv .venv-cosyvoice && . .venv-cosyvoice/bin/activate
#   pip install -r requirements.txt pytest
#   bash tests/install_cosyvoice.sh            # CPU (default)
#   TORCH_SPEC='torch==2.13.0' bash tests/install_cosyvoice.sh
#
# Why it is a script and not only a requirements file: torch must be the CPU build
# (plain `pip install torch` pulls several GB of CUDA wheels), and three packages must be
# installed without their declared dependencies (see requirements-cosyvoice.txt).
# Measured on a 2-core machine, warm pip cache, fresh venv holding requirements.txt:
# 65-190 s (depending on load), +1.7 GB (venv 0.6 GB -> 2.2 GB). See the CosyVoice section of README.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python}"
pip=("$py" -m pip install --disable-pip-version-check -q)

if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CI:-}" ] && [ -z "${ALLOW_SYSTEM_PIP:-}" ]; then
    echo "install_cosyvoice.sh: activate a virtual environment first (or set ALLOW_SYSTEM_PIP=1)" >&2
    exit 2
fi

start=$(date +%s)
# 1. torch: CPU build (on this kind of machine it lies on disk; elsewhere use the CPU index,
#    e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
"${pip[@]}" "${TORCH_SPEC:-torch==2.13.0}"

# 2. Packages whose declared dependencies must not be followed. pip then reports that
#    onnxruntime-gpu and triton are "not installed": expected, the CPU stack needs neither.
"${pip[@]}" --no-deps cosyvoice-minicpmo==0.1.0 openai-whisper==20250625 torchaudio==2.11.0

# 3. The rest, pinned.
"${pip[@]}" -r "$here/requirements-cosyvoice.txt"

# 4. torchaudio's compiled extension is built against another torch and CUDA; beside a CPU
#    torch it fails to load. Without it torchaudio runs its pure-torch code paths, which is
#    all CosyVoice uses (kaldi fbank, resample, mel spectrogram).
ta_dir="$("$py" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torchaudio").origin))')"
if ls "$ta_dir"/lib/*.so >/dev/null 2>&1; then
    if ! "$py" -c 'import torch, torchaudio.lib._torchaudio' >/dev/null 2>&1; then
        rm -f "$ta_dir"/lib/*.so
    fi
fi

# 5. Smoke test: the import chain the engine uses.
"$py" - <<'PY'
import torch, torchaudio.compliance.kaldi, onnxruntime, whisper, hyperpyyaml  # noqa: F401
import x_transformers, wetext  # noqa: F401  (upstream code: CosyVoice3's DiT, the text normaliser)
from cosyvoice.cli.cosyvoice import CosyVoice  # noqa: F401
from cosyvoice.utils.common import set_all_random_seed  # noqa: F401
print(f"cosyvoice stack ok: torch {torch.__version__}, cuda={torch.cuda.is_available()}")
PY
echo "install_cosyvoice.sh: done in $(( $(date +%s) - start ))s"

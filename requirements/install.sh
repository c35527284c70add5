#!/usr/bin/env bash
# Install a pinned requirements file whose torch is PyTorch's CPU build (torch==X+cpu, which only PyTorch's own wheel
# index serves), saying where torch comes from. The Makefile's venv and vllm-venv targets run it.
#   bash requirements/install.sh PYTHON REQUIREMENTS [--pypi-fallback] [PIP OPTIONS...]
# 1. PyTorch's CPU wheel index ($TORCH_INDEX, default https://download.pytorch.org/whl/cpu), added when it answers;
# 2. else pip's configured sources alone (a machine's local wheel folder may hold the CPU build);
# 3. else, with --pypi-fallback, PyPI's build of the same torch version: every pin of the file as locked (installed
#    without resolving: the lock is complete), then the runtime libraries that build needs, less its own Triton pin
#    (the lock's Triton stays). A download of several GB; on the CPU it runs all the same.
set -uo pipefail
python=$1
requirements=$2
shift 2
fallback=0
if [ "${1:-}" = --pypi-fallback ]; then
  fallback=1
  shift
fi
index=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if "$python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=10)" "$index" \
    2>/dev/null; then
  echo "torch: from $index"
  exec "$python" -m pip install -q --extra-index-url "$index" -r "$requirements" "$@"
fi
echo "torch: $index cannot be reached; from pip's configured sources" >&2
"$python" -m pip install -q -r "$requirements" "$@" && exit 0
[ "$fallback" = 1 ] || exit 1
echo "WARNING: no source here has torch's CPU build: installing PyPI's build of the same version instead" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed 's/^\(torch==[^+]*\)+cpu$/\1/' "$requirements" > "$work/pinned.txt"
"$python" -m pip install -q --no-deps -r "$work/pinned.txt" "$@" || exit 1
"$python" -c "
import importlib.metadata as m
print('\n'.join(r for r in m.requires('torch') or [] if 'extra ==' not in r and not r.startswith('triton')))
" > "$work/torch-runtime.txt" || exit 1
"$python" -m pip install -q -r "$work/torch-runtime.txt" "$@"

#!/usr/bin/env bash
# Before a borrowed GPU machine runs `gpu_paper.sh` (from the project root, on a clean commit):
# the commit and the tracked files' blob hashes it checks its copy against, and the wheels of
# what its image lacks (papermill, ipykernel and their needs, for its Python 3.12) in .whl/.
# Both folders are ignored by git (.git/info/exclude); name them in the device call's `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
git diff --quiet HEAD -- . ':(exclude)book' || { echo "commit first: the copy is checked against HEAD"; exit 2; }
mkdir -p .devrun .whl
for path in /.devrun/ /.whl/; do grep -qx "$path" .git/info/exclude 2>/dev/null || echo "$path" >> .git/info/exclude; done
git ls-files -s > .devrun/manifest.txt
git rev-parse --short=12 HEAD > .devrun/commit.txt
rm -f .whl/*.whl
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl papermill ipykernel
# What the image has already (its own versions stay), and debugpy (5 MB), which ipykernel only
# tries to import: fewer bytes to carry.
for name in pygments pyyaml charset_normalizer psutil packaging urllib3 certifi click python_dateutil \
            tqdm requests idna attrs typing_extensions tzdata debugpy; do rm -f .whl/${name}-*.whl; done
cp tools/device/check_tree.py tools/device/sanity.py tools/device/prelude.sh .devrun/
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1); commit $(cat .devrun/commit.txt)"
echo 'device call: run(command="bash tools/device/gpu_paper.sh", carry=[".devrun", ".whl"], timeout_s=570)'

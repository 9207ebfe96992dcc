# Wheels of papermill, ipykernel and their needs (what the device image lacks) into /tmp/site.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || { echo "WHEELS FAILED"; exit 4; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH  # the kernel: ipykernel's native spec, i.e. this python3

"""Seconds, before any chapter: papermill runs a notebook in a python3 kernel that sees the
project, and torch sees the GPU."""
import json, tempfile, time, os
import nbformat, papermill, torch
t = time.time()
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import replicate, torch; x = torch.cuda.is_available()"),
                                     nbformat.v4.new_code_cell("print(x, replicate.__file__)")])
d = tempfile.mkdtemp(); nbformat.write(nb, f"{d}/in.ipynb")
papermill.execute_notebook(f"{d}/in.ipynb", f"{d}/out.ipynb", kernel_name="python3", progress_bar=False)
out = nbformat.read(f"{d}/out.ipynb", as_version=4).cells[1].outputs[0]["text"]
print("sanity:", out.strip(), torch.cuda.get_device_name(0), f"{time.time() - t:.1f} s")
assert out.startswith("True")

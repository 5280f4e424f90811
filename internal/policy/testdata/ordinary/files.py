import os, shutil, tempfile, pathlib

d = tempfile.mkdtemp()
pathlib.Path(d, "x.txt").write_text("hello")
shutil.rmtree(d)
shutil.rmtree("/workspace/tmp-output", ignore_errors=True)
os.makedirs("/workspace/out", exist_ok=True)
for root, dirs, files in os.walk("/workspace"):
    print(root, len(files))
home = os.path.expanduser("~")
print(os.listdir(home))

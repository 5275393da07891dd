# Measures grid points that the shared calibration file leaves out, with the
# same code that produced it (calib_mixed.py beside this file, a superset of the
# shared calib.py), so
# the fitted timing model can be checked out of sample:
#   python3 holdout.py        (on an H200; writes $OUT/calib.jsonl)
# sim/holdout_test.go compares the model with the result, holdout-h200.jsonl.
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calib_mixed as calib

print("torch", calib.torch.__version__, calib.torch.cuda.get_device_name(0), flush=True)
calib.ceilings()
decode = [(B, 4096) for B in (1, 2, 4, 8, 16, 32, 64, 128)]
names = sys.argv[1:] or ["llama3-8b", "qwen2.5-7b"]
for name in names:
    calib.run_shape(name, [4096], decode, 80 * 1024 ** 3)
    if name != "llama3-70b":
        calib.run_mixed(name, [256], [(32, 4096, 512), (64, 256, 1024), (8, 16384, 512), (256, 256, 256)])

"""The joint rule's calibration table (verify.joint_calibration): every case with the label the papers' definitions
give it, the rule's label, the collapse floor at its size and the differences A − B of spread, own-subspace
energy, subspace-specific R^c and ΔR (mean [95% interval] over 16 seeds).

    python benchmarks/joint_calibration.py
"""
import time

from verify import joint_calibration

if __name__ == "__main__":
    start = time.perf_counter()
    print(joint_calibration.table())
    print(f"({time.perf_counter() - start:.0f} s)")

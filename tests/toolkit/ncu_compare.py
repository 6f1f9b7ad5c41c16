"""The simulator's access profile next to Nsight Compute's counters, on a machine with a GPU.

    python tests/toolkit/ncu_compare.py        (from the repository root; needs ncu on PATH or in
                                                the CUDA toolkit, a GPU and g++ for the simulator)

Runs the probes of tests/sim_kernels/profile_probes.cu and the strided and reduction kernels of
lessons 04 and 06 once under `ncu` (cuda backend) and once under `kernels.profile` (sim backend),
and prints per case and kernel: global sectors per request (loads, stores) and shared-memory
wavefronts per request (1 + bank conflicts per request) from both. Kernel-level totals: every
probe kernel has one access of each kind that matters. The simulator README explains the
differences to expect (atomics, caching, 16-byte shared accesses).
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PROBES = ROOT / "tests" / "sim_kernels" / "profile_probes.cu"
KERNELS = ["strided_copy_kernel", "shared_stride_kernel", "odd_lanes_kernel", "matmul_tiled_kernel",
           "scale_add_kernel3", "sum_kernel2", "sum_kernel3"]
METRICS = {
    "ld_req": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "ld_sec": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "st_req": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "st_sec": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "sh_ld_req": "smsp__inst_executed_op_shared_ld.sum",
    "sh_ld_wave": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "sh_ld_conf": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "sh_st_req": "smsp__inst_executed_op_shared_st.sum",
    "sh_st_wave": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
}


# A profile row's kind -> (the METRICS key of its requests, of its total, the Row field per request)
SIM_FIELDS = {"global load": ("ld_req", "ld_sec", "sectors_per_request"),
              "global store": ("st_req", "st_sec", "sectors_per_request"),
              "shared load": ("sh_ld_req", "sh_ld_wave", "bank_ways"),
              "shared store": ("sh_st_req", "sh_st_wave", "bank_ways")}


def cases(backend: str) -> list[tuple[str, object]]:
    """(name, function) per case; each function launches exactly one kernel of KERNELS."""
    import torch

    from kernels import load

    dev = "cuda" if backend == "cuda" else "cpu"
    probes, l04, l06 = load(PROBES, backend), load("04_memory_bound", backend), load("06_reductions", backend)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(32 * 4096, generator=gen).to(dev)
    small, out = x[:4096].contiguous(), torch.empty(4096, device=dev)
    a, b = torch.rand(256, 256, generator=gen).to(dev), torch.rand(256, 256, generator=gen).to(dev)
    one = torch.zeros(1, device=dev)
    out_cases = [(f"strided_copy stride {s}", lambda s=s: probes.strided_copy(x, out, s)) for s in (1, 2, 32)]
    out_cases += [(f"shared_stride stride {s}", lambda s=s: probes.shared_stride(out, s)) for s in (0, 1, 2, 32)]
    out_cases += [("odd_lanes", lambda: probes.odd_lanes(small, out)),
                  ("matmul_tiled 256", lambda: probes.matmul_tiled(a, b))]
    out_cases += [(f"04 scale_add3 stride {s}", lambda s=s: l04.scale_add3(2.0, small, small, out, s)) for s in (1, 2, 32)]
    out_cases += [("06 sum2", lambda: l06.sum2(small, one)), ("06 sum3", lambda: l06.sum3(small, one))]
    return out_cases


def run_cases() -> None:
    """The child process that ncu watches: every case once on the GPU."""
    import torch

    for _, fn in cases("cuda"):
        fn()
    torch.cuda.synchronize()


def ncu_figures() -> list[dict[str, float]]:
    """One dict of METRICS per profiled kernel launch, in launch order."""
    ncu = shutil.which("ncu") or next((str(p) for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "ncu"]
                                       if p.exists()), None)
    if not ncu:
        sys.exit("ncu (Nsight Compute) not found: put the CUDA toolkit's bin/ on PATH")
    cmd = [ncu, "--csv", "--metrics", ",".join(METRICS.values()), "--kernel-name", "regex:^(" + "|".join(KERNELS) + ")",
           sys.executable, __file__, "--run-cases"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        sys.exit(f"ncu failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    text = run.stdout[run.stdout.find('"ID"'):]
    launches: dict[str, dict[str, float]] = {}
    names = {v: k for k, v in METRICS.items()}
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("Metric Name") in names:
            value = float(row["Metric Value"].replace(",", "") or 0)
            launches.setdefault(row["ID"], {})[names[row["Metric Name"]]] = value
    return [launches[k] for k in sorted(launches, key=int)]


def sim_figures() -> list[dict[str, float]]:
    """The same totals from the simulator's profile of the same cases."""
    from kernels import profile

    out = []
    for _, fn in cases("sim"):
        rows = profile(fn).rows
        f = dict.fromkeys(METRICS, 0.0)
        for r in rows:
            if r.kind in SIM_FIELDS:
                requests, total, per_request = SIM_FIELDS[r.kind]
                f[requests] += r.requests
                f[total] += r.requests * getattr(r, per_request)
        f["sh_ld_conf"] = f["sh_ld_wave"] - f["sh_ld_req"]
        out.append(f)
    return out


def _per(f: dict[str, float], num: str, den: str) -> str:
    return f"{f[num] / f[den]:.2f}" if f.get(den) else "-"


def main() -> None:
    names = [name for name, _ in cases("cuda")]
    gpu = ncu_figures()
    sim = sim_figures()
    if len(gpu) != len(names):
        sys.exit(f"ncu profiled {len(gpu)} launches, expected {len(names)} (one per case)")
    cols = [("ld sectors/req", "ld_sec", "ld_req"), ("st sectors/req", "st_sec", "st_req"),
            ("shared ld wavefronts/req", "sh_ld_wave", "sh_ld_req"), ("shared st wavefronts/req", "sh_st_wave", "sh_st_req")]
    print(f"{'case':26}" + "".join(f"{c[0]:>28}" for c in cols))
    print(f"{'':26}" + "".join(f"{'ncu / sim':>28}" for _ in cols))
    for name, g, s in zip(names, gpu, sim):
        print(f"{name:26}" + "".join(f"{_per(g, n, d) + ' / ' + _per(s, n, d):>28}" for _, n, d in cols))
    print("\nshared-load bank conflicts (ncu l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum / sim):")
    for name, g, s in zip(names, gpu, sim):
        if g.get("sh_ld_req") or s.get("sh_ld_req"):
            print(f"  {name:26} {g.get('sh_ld_conf', 0):>10.0f} / {s['sh_ld_conf']:.0f}")


if __name__ == "__main__":
    if "--run-cases" in sys.argv:
        run_cases()
    else:
        main()

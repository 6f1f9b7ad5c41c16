"""Lesson 10's debugging guide: every entry runs and shows its diagnosis; make sanitize and make
profile KERNEL= handle their arguments and read their tools' output.

The compute-sanitizer and Nsight Compute outputs in tests/toolkit/formats/ are written in the
formats those tools' documentation shows (not recorded from a run); on a GPU, `make sanitize` and
`make profile` check the real thing.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import debugging
from kernels.tools import doctor, nsight, sanitize

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ROOT / "tests" / "toolkit" / "formats"
NAMES = ["late_error", "illegal_address", "misaligned_vec4", "off_by_one", "sync_in_branch", "missing_barrier",
         "sticky_error", "no_kernel_image", "timing_without_sync"]


def shown(name, backend, capsys) -> str:
    debugging.run(name, backend)
    return capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The entries.

def test_the_entries_are_the_guides_in_its_order_each_with_its_file_and_section():
    assert debugging.names() == NAMES
    guide = debugging.GUIDE.read_text()
    headings = re.findall(r"^## \d+\. .*\(`(\w+)`\)$", guide, re.M)
    assert headings == NAMES
    for name in NAMES:
        assert debugging.ENTRIES[name].file == debugging.FOLDER / f"{name}.cu" and debugging.ENTRIES[name].file.exists()


def test_an_unknown_entry_is_refused_naming_the_entries():
    with pytest.raises(KeyError, match="no debugging entry 'oops'; the entries are: late_error, illegal_address"):
        debugging.run("oops", "sim")


def test_late_error(backend, capsys):
    out = shown("late_error", backend, capsys)
    assert re.search(r"raised RuntimeError: ids must lie in \[0, 1000\) \(the table's rows\), got ids from \d+ to "
                     r"1099511627783\n", out)
    if backend == "sim":  # the simulator reports at the launch: step 1 raises
        assert re.search(r"1\. ext\.broken.*\n    raised RuntimeError: cudasim: illegal memory access at late_error\.cu:17",
                         out)
        return
    plain, blocking = out.split("with CUDA_LAUNCH_BLOCKING=1")
    assert re.search(r"1\. ext\.broken.*\n    returned", plain)          # the launch returns,
    assert "illegal memory access" in plain.split("1. ext.broken")[1]     # a later step raises
    assert re.search(r"1\. ext\.broken.*\n    raised .*illegal memory access", blocking)  # with it, the launch does


def test_illegal_address(backend, capsys):
    out = shown("illegal_address", backend, capsys)
    # the faulting load of bias is line 20; g++ moves it into the add of line 21, clang++ keeps it there
    where = r"illegal memory access at illegal_address\.cu:2[01]\b" if backend == "sim" else "an illegal memory access was encountered"
    assert re.search(where, out), out
    if backend == "sim":  # bias[c] of a null bias: a small address, named as one
        assert re.search(r"address 0x[0-9a-f]{1,3} \(a null pointer, or an index from one\)", out), out
    assert "out equals x (no bias to add): True" in out


def test_misaligned_vec4(backend, capsys):
    out = shown("misaligned_vec4", backend, capsys)
    assert "x.data_ptr() % 16 = 4" in out
    # the simulator has no alignment check of its own: the CPU's aligned load faults at the line
    # (the load is line 14; g++ reports it at line 15, where it schedules the load's first use)
    assert re.search(r"at misaligned_vec4\.cu:1[45]\b" if backend == "sim" else "misaligned address", out), out
    if backend == "sim":  # the fault carries no address: the report names both causes, not "(nil)"
        assert "misaligned vector access" in out and "(nil)" not in out, out
    assert "out equals 2 * x: True" in out


def test_off_by_one_writes_past_the_end_silently_and_the_self_check_sees_it(backend, capsys):
    out = shown("off_by_one", backend, capsys)
    broken, fixed = out.split("fixed:")
    assert "raised" not in broken
    assert "out == x + 1: True; the float after out's end: was -7, now " in broken
    assert "now -7\n" not in broken
    assert "kernels.check: wrote past the end: element(s) 1000 (size is 1000)" in broken
    assert "out == x + 1: True; the float after out's end: was -7, now -7\n" in fixed


@pytest.mark.sim_only
def test_sync_in_branch_is_an_error_naming_both_barriers_on_the_simulator(capsys):
    out = shown("sync_in_branch", "sim", capsys)
    broken, fixed = out.split("fixed:")
    assert re.search(r"divergent __syncthreads: thread \(0,0,0\) waits at sync_in_branch\.cu:26 while thread "
                     r"\(232,0,0\) waits at sync_in_branch\.cu:30", broken)
    assert "(equal)" in fixed


def test_sync_in_branch_fixed_sums_every_block(backend, capsys):
    out = shown("sync_in_branch", backend, capsys)
    assert "(equal)" in out.split("fixed:")[1]


@pytest.mark.sim_only
def test_missing_barrier_gives_wrong_elements_in_both_orders_on_the_simulator(capsys):
    out = shown("missing_barrier", "sim", capsys)
    broken, fixed = out.split("fixed:")
    for order in ("forward", "reverse"):
        wrong = int(re.search(rf"ext\.broken\(x, out\), threads in {order} order: (\d+) of 2048", broken).group(1))
        assert wrong > 0
        assert f"ext.fixed(x, out), threads in {order} order: 0 of 2048 elements wrong" in fixed


def test_sticky_error_breaks_its_process_and_the_fix_runs_in_another(backend, capsys):
    out = shown("sticky_error", backend, capsys)
    broken, fixed = out.split("fixed:")
    if backend == "sim":  # the failed assert stops the launch with its message; the simulator's context is not lost
        assert ("device-side assert triggered: the assertion `label >= 0 && label < classes' failed at "
                "sticky_error.cu:28") in broken and "thread (3,0,0)" in broken
        assert broken.count("returned") == 2  # the unrelated op and the fixed kernel run on (a GPU's would fail)
    else:
        assert broken.count("device-side assert triggered") >= 3  # the kernel, an unrelated op, the fixed kernel
    assert "row 3 (label -100) gets 0, and every row equals -logp[r, label]: True" in fixed


@pytest.mark.parametrize("name", ["no_kernel_image", "timing_without_sync"])
def test_an_entry_the_simulator_cannot_show_says_so_and_quotes_the_guide(name, capsys):
    out = shown(name, "sim", capsys)
    assert "The simulator cannot show this:" in out and "What a GPU shows (from the guide):" in out
    assert debugging.ENTRIES[name].gpu_shows in out


def test_no_kernel_image_on_a_gpu(backend, capsys):
    if backend != "cuda":
        pytest.skip("needs a GPU: the simulator has no GPU architecture")
    out = shown("no_kernel_image", backend, capsys)
    broken, fixed = out.split("fixed:")
    assert "no kernel image is available for execution on the device" in broken
    assert "sets every element to 1: True" in fixed


def test_timing_without_sync_on_a_gpu_measures_the_launch_not_the_kernel(backend, capsys):
    if backend != "cuda":
        pytest.skip("needs a GPU: simulator timings mean nothing")
    out = shown("timing_without_sync", backend, capsys)
    ms = [float(v) for v in re.findall(r"(\d+\.\d+) ms", out)]
    launch, synced, events = ms
    assert launch < synced / 10 and events > synced / 10


def test_the_command_line_refuses_an_unknown_entry(monkeypatch, capsys):
    # `python -m kernels.debugging nope`, run in this process (a new one would import torch again): runpy runs the
    # module as __main__ with that command line
    import runpy
    import warnings

    monkeypatch.setattr(sys, "argv", ["kernels.debugging", "nope"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as done:
        warnings.simplefilter("ignore", RuntimeWarning)  # the module is imported already: runpy says so
        runpy.run_module("kernels.debugging", run_name="__main__", alter_sys=True)
    assert done.value.code == 2 and "no debugging entry 'nope'" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# make sanitize

def test_memcheck_output_is_summarised_by_finding_with_its_kernel_and_line():
    r = sanitize.parse_output("memcheck", (FORMATS / "memcheck_off_by_one.txt").read_text())
    assert r.errors == 3
    assert r.findings == {"Invalid __global__ write of size 4 bytes: out of bounds "
                          "(add_one_kernel<false> at off_by_one.cu:14)": 2}
    assert list(r.api_errors) == ['cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to '
                                  'cudaLaunchKernel']
    assert r.summary().splitlines()[:2] == ["memcheck: 3 errors", "    Invalid __global__ write of size 4 bytes: out "
                                            "of bounds (add_one_kernel<false> at off_by_one.cu:14)  (x2)"]


def test_racecheck_output_names_the_two_lines_of_the_race():
    r = sanitize.parse_output("racecheck", (FORMATS / "racecheck_missing_barrier.txt").read_text())
    assert r.errors == 1
    assert r.findings == {"Error: Race reported between Write access (reverse_kernel<false> at missing_barrier.cu:22)": 1}


def test_synccheck_and_a_clean_initcheck_are_counted():
    sync = sanitize.parse_output("synccheck", (FORMATS / "synccheck_sync_in_branch.txt").read_text())
    assert sync.errors == 2
    assert sync.findings == {"Barrier error detected. Divergent thread(s) in block "
                             "(block_sum_kernel<false> at sync_in_branch.cu:26)": 2}
    clean = sanitize.parse_output("initcheck", (FORMATS / "initcheck_clean.txt").read_text())
    assert (clean.errors, clean.findings, clean.summary()) == (0, {}, "initcheck: 0 errors")


def test_output_without_a_summary_says_the_run_did_not_finish():
    r = sanitize.parse_output("memcheck", "========= COMPUTE-SANITIZER\nSegmentation fault\n")
    assert r.errors is None and "no summary (the run did not finish" in r.summary()


def test_the_sanitizer_command_runs_one_tool_over_the_lessons_self_check():
    cmd = sanitize.sanitizer_command("/cuda/bin/compute-sanitizer", "racecheck", "05", solution=True)
    assert cmd[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck"]
    assert cmd[-7:] == [sys.executable, "-m", "kernels.exercises", "05", "--solution", "--backend", "cuda"]
    with pytest.raises(ValueError, match="unknown tool 'leakcheck': expected one of memcheck, racecheck"):
        sanitize.sanitizer_command("cs", "leakcheck", "05", solution=False)


@pytest.mark.parametrize("argv, said", [
    (["ab"], "expected a lesson number such as 05, got 'ab'"),
    (["99"], "lesson 99 has no exercises"),
    (["05", "--tools", "memcheck,leakcheck"], "unknown tool(s) leakcheck: expected some of memcheck"),
])
def test_make_sanitize_refuses_bad_arguments_saying_what_was_expected(argv, said, capsys):
    assert sanitize.main(argv) == 2
    assert said in capsys.readouterr().out


def test_without_compute_sanitizer_the_gpu_run_says_where_it_looked(monkeypatch, capsys):
    monkeypatch.setattr(sanitize, "find_compute_sanitizer", lambda: None)
    assert sanitize.sanitize_gpu("05", solution=True) == 1
    assert "compute-sanitizer was not found in $CUDA_HOME/bin or on PATH" in capsys.readouterr().out


def test_compute_sanitizer_is_found_in_cuda_home(monkeypatch, tmp_path):
    exe = tmp_path / "bin" / "compute-sanitizer"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    from kernels.build import toolchain

    monkeypatch.setattr(toolchain, "cuda_home", lambda: str(tmp_path))
    assert sanitize.find_compute_sanitizer() == str(exe)


def test_make_sanitize_on_the_simulator_runs_the_self_check_in_every_order_and_says_so(capsys):
    assert sanitize.main(["01", "--solution", "--backend", "sim"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The simulator has no compute-sanitizer; it has its own checks.")
    assert "simulator checks (races and bounds on every case, thread orders, shuffled blocks, poisoning): PASS" in out


# ---------------------------------------------------------------------------------------------
# make profile LESSON=NN KERNEL=name

def test_ncu_details_are_read_into_a_summary_in_base_units():
    [s] = nsight.parse_details((FORMATS / "ncu_details_scale_add4.csv").read_text())
    assert s.kernel.startswith("scale_add_kernel4(") and (s.grid, s.block) == ("(65536, 1, 1)", "(256, 1, 1)")
    assert s.duration_s == pytest.approx(1012.35e-6) and s.dram_pct == pytest.approx(90.87)
    assert (s.achieved_occupancy, s.theoretical_occupancy, s.registers) == (84.93, 100.0, 26.0)
    assert (s.static_smem, s.dynamic_smem) == (0.0, pytest.approx(1020.0))
    text = str(s)
    assert "duration                  1.012 ms" in text and "DRAM throughput           90.9 % of peak" in text
    assert "shared memory per block   0 B static + 1020 B dynamic" in text


@pytest.mark.parametrize("unit, seconds", [("us", 1e-6), ("usecond", 1e-6), ("ns", 1e-9), ("ms", 1e-3)])
def test_ncu_durations_are_read_in_the_long_and_the_short_unit_names(unit, seconds):
    text = (FORMATS / "ncu_details_scale_add4.csv").read_text().replace('"Duration","us",', f'"Duration","{unit}",')
    [s] = nsight.parse_details(text)
    assert s.duration_s == pytest.approx(1012.35 * seconds)


def test_ncu_output_without_a_csv_holds_no_launch():
    assert nsight.parse_details("==PROF== No kernels were profiled.\n") == []


def test_the_kernel_filter_names_every_kernel_of_the_lessons_file_and_no_other():
    names = nsight.kernel_names(nsight.reference_file("04").read_text())
    assert {"copy_kernel1", "scale_add_kernel1", "scale_add_kernel4"} <= set(names)
    assert "__launch_bounds__" not in names and len(names) == len(set(names))
    regex = nsight.kernel_regex(["sum_kernel2", "row_sum_kernel1"])
    assert regex == r"regex:^(sum_kernel2|row_sum_kernel1)(<|$|\()"
    pattern = re.compile(regex[len("regex:"):])
    assert pattern.match("sum_kernel2") and pattern.match("sum_kernel2<true>") and not pattern.match("sum_kernel20")


def test_the_ncu_command_skips_the_warm_up_and_profiles_one_launch_with_three_sections():
    cmd = nsight.ncu_command("ncu", "04", "scale_add4", "regex:^(k)", Path("build/profile/04_scale_add4.ncu-rep"))
    text = " ".join(cmd)
    assert f"--launch-skip {nsight.WARMUP} --launch-count 1" in text and "--kernel-name regex:^(k)" in text
    assert "--section SpeedOfLight --section Occupancy --section LaunchStats" in text
    assert "--export build/profile/04_scale_add4 " in text
    assert cmd[-4:] == ["kernels.tools.nsight", "--workload", "04", "scale_add4"]


@pytest.mark.parametrize("lesson, kernel, said", [
    ("10", "attention", "lesson 10 has no workload for it"),
    ("04", "scale_add9", "lesson 04 has no variant 'scale_add9'; KERNEL= is one of: copy1, copy5, scale_add1"),
])
def test_a_profile_request_without_a_workload_is_refused_saying_what_exists(lesson, kernel, said):
    assert said in nsight.check_request(lesson, kernel)


def test_make_profile_with_kernel_on_the_simulator_says_ncu_needs_a_gpu(capsys):
    from kernels.backend import gpu_available
    from kernels.tools.profile import main

    if gpu_available():
        pytest.skip("with a GPU, KERNEL= runs ncu")
    assert main(["05", "relu_add_bias2"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("KERNEL=relu_add_bias2 runs Nsight Compute, which needs an NVIDIA GPU")
    assert "which lesson? make profile LESSON=NN, with NN one of 04, 06, 09 (on the simulator)" in out


# ---------------------------------------------------------------------------------------------
# make doctor: CUDA versions and the architecture list

@pytest.mark.parametrize("driver, torch_cuda, nvcc, said", [
    ("12.4", "13.0", "13.0", "OLDER THAN torch's CUDA 13.0"),
    ("13.0", "13.1", "13.1", "runs through minor-version compatibility"),
    ("13.0", "13.0", "13.1", "the provided PTX was compiled with an unsupported toolchain"),
    ("12.8", "12.8", "13.0", "a newer major version than the driver's CUDA 12.8"),
    (None, "13.0", "13.0", "no NVIDIA driver found"),
])
def test_doctor_says_what_a_cuda_version_mismatch_breaks(driver, torch_cuda, nvcc, said):
    assert said in " ".join(v for _, v in doctor.cuda_versions(driver, torch_cuda, nvcc))


def test_doctor_accepts_matching_versions_without_a_warning():
    assert doctor.cuda_versions("13.0", "13.0", "13.0") == [("driver", "supports CUDA up to 13.0, enough for torch's CUDA 13.0")]


@pytest.mark.parametrize("value, cc, said", [
    (None, (9, 0), "unset: kernels.build compiles for the GPUs this process sees"),
    ("8.0", (9, 0), "DOES NOT INCLUDE this GPU's 9.0: every kernel built so fails with \"no kernel image"),
    ("8.0;9.0", (9, 0), "includes this GPU's 9.0"),
    ("8.0+PTX", (9, 0), "PTX the driver compiles for it at first launch"),
    ("9.0a", (9, 0), "includes this GPU's 9.0"),  # what the H100 machine's environment sets
    ("10.0a", (9, 0), "DOES NOT INCLUDE this GPU's 9.0"),
])
def test_doctor_says_whether_the_architecture_list_fits_the_gpu(value, cc, said):
    assert said in doctor.arch_list(value, cc)

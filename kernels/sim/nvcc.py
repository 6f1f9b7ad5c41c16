"""The simulator's compiler driver: nvcc's common command line, for code that runs on the CPU.

    kernels/sim/nvcc-sim [options] file.cu ... -o program     a whole program with main() (an executable)
    kernels/sim/nvcc-sim -c file.cu -o file.o                 an object of simulated code
    kernels/sim/nvcc-sim -lib a.o b.cu -o libx.a              a static library
    kernels/sim/nvcc-sim -E file.cu | -M/-MM file.cu          preprocess, or make's dependency rules (-MD/-MMD with
                                                             -c, -MF, -MT, -MP as nvcc has them)
    kernels/sim/nvcc-sim -dlink a.o b.o -o dlink.o            the device link step of -rdc builds: an empty object

(`python -m kernels.sim.nvcc` is the same.) Each .cu file is translated (translate.py) and compiled by the
host C++ compiler against the simulator's headers; .cpp/.c files are compiled as they are, with those
headers first too; objects and libraries are linked. So a Makefile runs with `NVCC=kernels/sim/nvcc-sim`,
and `load(..., extra_objects=[...])` links its objects into a sim build. What nvcc means for the GPU only
(-arch, -gencode, -lineinfo, --use_fast_math, ...) is ignored with a note; -lcublas, -lcublasLt, -lcudart
and -lcuda are dropped (the simulator's headers have the stand-ins). -E and -M see the source as written (the
simulator's headers standing in for the toolkit's), not its translation; -ptx, -cubin and -fatbin ask for GPU
code, which the simulator does not make: they are refused. The loader maps `extra_cuda_cflags`
and `extra_ldflags` of a sim build through `host_flags` and `link_flags` here.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# nvcc options that only concern the GPU code or nvcc itself: ignored (those with a value take the next
# argument unless written with =)
IGNORED_WITH_VALUE = {"-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code", "--gpu-code",
                      "-ccbin", "--compiler-bindir", "-maxrregcount", "--maxrregcount", "-Xptxas", "--ptxas-options",
                      "-Xnvlink", "--nvlink-options", "-t", "--threads", "--default-stream", "-x", "-Xcudafe"}
IGNORED = {"-lineinfo", "--generate-line-info", "--use_fast_math", "-use_fast_math", "--expt-relaxed-constexpr",
           "--expt-extended-lambda", "--extended-lambda", "-G", "--device-debug", "-rdc=true", "-rdc=false",
           "--relocatable-device-code=true", "--relocatable-device-code=false", "-dc", "-res-usage",
           "--resource-usage", "--keep", "-keep", "-Wno-deprecated-gpu-targets", "--ftz=true", "--ftz=false",
           "-ftz=true", "-ftz=false", "--prec-div=false", "--prec-sqrt=false", "--fmad=true", "--fmad=false",
           "-cudart=static", "-cudart=shared", "--cudart=static", "--cudart=shared", "--forward-unknown-to-host-compiler",
           "-forward-unknown-to-host-compiler", "--std=c++17", "-Xcompiler=-fPIC", "-objtemp",
           "--objdir-as-tempdir", "-dlto", "--dlink-time-opt"}
# libraries whose stand-ins are the simulator's headers: nothing to link
STAND_IN_LIBRARIES = {"cublas", "cublasLt", "cudart", "cudart_static", "cuda", "cudadevrt"}
# libraries of the CUDA toolkit that the simulator has no stand-in for
NO_STAND_IN = {"curand", "cufft", "cusparse", "cusparseLt", "cusolver", "cudnn", "cufile", "cupti", "nccl", "nvrtc",
               "nvToolsExt", "nvjpeg", "npp", "nvjitlink", "cudadevrt", "culibos"}


class DriverError(ValueError):
    """A command line the driver cannot run: the message says which argument and why."""


def _value(args: list[str], i: int, flag: str) -> tuple[str, int]:
    """The value of option `flag` at args[i]: joined (-Idir, -arch=sm_90) or the next argument."""
    a = args[i]
    for sep in ("=", ""):
        if a.startswith(flag + sep) and len(a) > len(flag + sep) and (sep or not a.startswith(flag + "=")):
            return a[len(flag + sep):], i + 1
    if i + 1 >= len(args):
        raise DriverError(f"{flag} needs a value")
    return args[i + 1], i + 2


def _split_xcompiler(value: str) -> list[str]:
    return [v for v in value.split(",") if v]


def host_flags(nvcc_flags: list[str], notes: list[str] | None = None) -> list[str]:
    """nvcc compile flags as the host compiler's, for simulated code: -I/-D/-U/-O/-std/-g/-w/-f... kept,
    -Xcompiler's values unwrapped, GPU-only options dropped (each noted in `notes`); an option the driver
    does not know is a DriverError."""
    out, i = [], 0
    notes = [] if notes is None else notes
    while i < len(nvcc_flags):
        a = nvcc_flags[i]
        name = a.split("=", 1)[0]
        if a in IGNORED or name in IGNORED:
            notes.append(a)
            i += 1
        elif name in IGNORED_WITH_VALUE:
            if "=" in a:
                i += 1
            else:
                if i + 1 >= len(nvcc_flags):
                    raise DriverError(f"{a} needs a value")
                i += 2
            notes.append(a if "=" in a else f"{a} {nvcc_flags[i - 1]}")
        elif name in ("-Xcompiler", "--compiler-options"):
            v, i = _value(nvcc_flags, i, name)
            out += _split_xcompiler(v)
        elif name == "-std" or name == "--std":
            v, i = _value(nvcc_flags, i, name)
            out.append(f"-std={v}")
        elif a[:2] in ("-I", "-D", "-U") and not a.startswith("--"):
            if len(a) > 2:
                out.append(a)
                i += 1
            else:
                if i + 1 >= len(nvcc_flags):
                    raise DriverError(f"{a} needs a value")
                out.append(a + nvcc_flags[i + 1])
                i += 2
        elif name in ("--include-path", "--define-macro", "--undefine-macro"):
            v, i = _value(nvcc_flags, i, name)
            out.append({"--include-path": "-I", "--define-macro": "-D", "--undefine-macro": "-U"}[name] + v)
        elif a.startswith("-O") or a in ("-g", "-w", "-fPIC", "-fopenmp", "-pthread") or a.startswith("-W"):
            out.append(a)
            i += 1
        else:
            raise DriverError(f"the simulator's driver does not know nvcc's option {a!r}"
                              + (" (a host compiler option goes after -Xcompiler)" if a.startswith("-f") else ""))
    return out


def link_flags(ldflags: list[str], notes: list[str] | None = None) -> list[str]:
    """Linker flags for simulated code: -lcublas and the other libraries the simulator's headers stand in for
    are dropped (noted), a CUDA library without a stand-in is a DriverError, the rest is kept."""
    out, i = [], 0
    notes = [] if notes is None else notes
    while i < len(ldflags):
        a = ldflags[i]
        if a == "-l" or a == "-L":
            if i + 1 >= len(ldflags):
                raise DriverError(f"{a} needs a value")
            a, i = a + ldflags[i + 1], i + 2
        else:
            i += 1
        if a.startswith("-l"):
            lib = a[2:]
            if lib in STAND_IN_LIBRARIES:
                notes.append(a)
                continue
            if lib in NO_STAND_IN or lib.startswith("cufft") or lib.startswith("npp"):  # the static forms too
                raise DriverError(f"{a}: the simulator has no stand-in for lib{lib} (it has cuBLAS's and "
                                  "cuBLASLt's matrix multiplications and the CUDA runtime); build this with the cuda backend")
        elif a.startswith("-Xlinker") or a.startswith("--linker-options"):
            v, i = _value(ldflags, i - 1, a.split("=", 1)[0])
            out += [f"-Wl,{x}" for x in _split_xcompiler(v)]
            continue
        out.append(a)
    return out


def nvcc_object(path: Path) -> bool:
    """Whether an object or library holds GPU code compiled by nvcc (its fat binary section), which the
    simulator cannot link."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b".nv_fatbin" in data or b"__nv_module_id" in data


# ---- the driver ---------------------------------------------------------------------------------
USAGE = __doc__.split("\n\n")[1]
MODES = {"-c": "object", "--compile": "object", "-dc": "object", "--device-c": "object", "-lib": "lib",
         "--lib": "lib", "-E": "preprocess", "--preprocess": "preprocess", "-M": "deps",
         "--generate-dependencies": "deps", "-MM": "deps", "--generate-nonsystem-dependencies": "deps",
         "-dlink": "dlink", "--device-link": "dlink"}
# dependency rules written while compiling (-MD, -MMD); -MM and -MMD leave out system headers (and the
# simulator's, which stand in for the toolkit's)
WITH_COMPILE = {"-MD": "-MD", "--generate-dependencies-with-compile": "-MD", "-MMD": "-MMD",
                "--generate-nonsystem-dependencies-with-compile": "-MMD"}
DEPENDENCY_VALUES = {"-MF": "-MF", "--dependency-output": "-MF", "-MT": "-MT", "--dependency-target-name": "-MT"}
GPU_CODE = {"-ptx", "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin", "-optix-ir", "--optix-ir", "-ltoir",
            "--ltoir"}


def _parse(argv: list[str]) -> dict:
    """The driver's command line: inputs, output, mode, compile and link flags."""
    opts = {"inputs": [], "out": None, "dir": None, "mode": "link", "compile": [], "link": [], "notes": [],
            "shared": False, "deps": [], "system_deps": True}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            opts["mode"] = "help"
            return opts
        if a in GPU_CODE:
            raise DriverError(f"{a} asks for GPU code (PTX, cubin or a fat binary), which the simulator does not make: "
                              "build it with nvcc (make compile-check compiles every .cu with it)")
        if a in MODES:
            opts["mode"] = MODES[a]
            if MODES[a] == "deps":
                opts["system_deps"] = a not in ("-MM", "--generate-nonsystem-dependencies")
            i += 1
        elif a in WITH_COMPILE:
            opts["deps"].append(WITH_COMPILE[a])
            opts["system_deps"] = WITH_COMPILE[a] == "-MD"
            i += 1
        elif a.split("=", 1)[0] in DEPENDENCY_VALUES:
            value, i = _value(argv, i, a.split("=", 1)[0])
            opts["deps"] += [DEPENDENCY_VALUES[a.split("=", 1)[0]], value]
        elif a in ("-MP", "--generate-dependency-targets"):
            opts["deps"].append("-MP")
            i += 1
        elif a in ("-shared", "--shared"):
            opts["shared"] = True
            i += 1
        elif a.split("=", 1)[0] in ("-odir", "--output-directory"):  # -c's objects go there
            opts["dir"], i = _value(argv, i, a.split("=", 1)[0])
        elif a.split("=", 1)[0] in ("-optf", "--options-file"):
            raise DriverError(f"{a}: options files are not read by the simulator's driver; write the options out")
        elif a == "-o" or a.startswith("-o") and not a.startswith("--") and a not in IGNORED:  # -o out, -o=out, -oout
            opts["out"], i = _value(argv, i, "-o")
        elif a.split("=", 1)[0] == "--output-file":
            opts["out"], i = _value(argv, i, "--output-file")
        elif a.startswith("-l") or a.startswith("-L") or a.startswith("-Xlinker") or a.startswith("--linker-options"):
            n = 2 if a in ("-l", "-L", "-Xlinker", "--linker-options") else 1
            opts["link"] += argv[i:i + n]
            i += n
        elif not a.startswith("-"):
            opts["inputs"].append(a)
            i += 1
        else:
            takes = a.split("=", 1)[0] in IGNORED_WITH_VALUE | {"-Xcompiler", "--compiler-options", "-std", "--std"} \
                and "=" not in a or a in ("-I", "-D", "-U")
            n = 2 if takes else 1
            opts["compile"] += argv[i:i + n]
            i += n
    return opts


def _compiler(openmp: bool = False) -> list[str]:
    """The host compiler of the simulator's builds; for OpenMP code (-fopenmp, or a source that includes omp.h) g++
    where that one is clang without its OpenMP package (no omp.h, no libomp: llm.c's matmul files, the CUDA samples'
    cudaOpenMP), as nvcc with gcc behind it would build them."""
    from ..build.toolchain import cxx

    chosen = shlex.split(cxx("sim"))
    if openmp and not _has_openmp(tuple(chosen)) and shutil.which("g++"):
        return ["g++"]
    return chosen


@functools.lru_cache(maxsize=None)
def _has_openmp(compiler: tuple[str, ...]) -> bool:
    """Whether the compiler builds and links a program that uses OpenMP."""
    with tempfile.TemporaryDirectory(prefix="nvcc-sim-omp-") as tmp:
        run = subprocess.run([*compiler, "-fopenmp", "-x", "c++", "-", "-o", os.path.join(tmp, "a.out")],
                             input="#include <omp.h>\nint main() { return omp_get_max_threads() > 0 ? 0 : 1; }\n",
                             capture_output=True, text=True)
    return run.returncode == 0


_OMP_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]omp\.h[>\"]", re.M)


def _uses_openmp(src: Path, flags: list[str]) -> bool:
    return "-fopenmp" in flags or bool(_OMP_INCLUDE.search(src.read_text(errors="replace")))


def _as_written(src: Path, flags: list[str], what: list[str]) -> subprocess.CompletedProcess:
    """The host compiler's preprocessor on a source as written (not translated), with the simulator's headers
    standing in for the toolkit's: `what` is -E, or -M/-MM and their options. As nvcc's -MM lists the
    toolkit's headers, -MM lists the simulator's (only the host's system headers are left out)."""
    from ..paths import INCLUDE, SIM_INCLUDE

    std = [] if any(f.startswith("-std=") for f in flags) else ["-std=c++17"]
    return subprocess.run([*_compiler(_uses_openmp(src, flags)), *std, f"-I{SIM_INCLUDE}", f"-I{INCLUDE}",
                           f"-I{src.parent}", *flags, "-x", "c++", *what, str(src)], capture_output=True, text=True)


def _dependencies(src: Path, flags: list[str], deps: list[str], system: bool, target: str, out: Path | None) -> str:
    """make's rule for `src` (-M, or -MM without system headers), its target `target` unless -MT names one,
    written to -MF's file, or to `out`, or returned."""
    from ..build.errors import BuildError, display_path

    deps = list(deps)
    if "-MT" not in deps:
        deps += ["-MT", target]
    if "-MF" not in deps and out is not None:
        deps += ["-MF", str(out)]
    run = _as_written(src, flags, ["-M" if system else "-MM", *deps])
    if run.returncode != 0:
        raise BuildError(f"the dependencies of {display_path(src)}:\n{run.stderr.strip()}")
    return run.stdout


def compile_object(src: Path, obj: Path, flags: list[str], build_dir: Path) -> None:
    """Compile one input into an object of simulated code: a .cu translated first, a .cpp/.c as it is."""
    from ..build.errors import BuildError, display_path
    from ..build.sources import SourceSet
    from ..paths import INCLUDE, SIM_INCLUDE
    from .build import NVCC_FLAGS
    from .translate import TranslateError, translate_tree

    search = [Path(f[2:]) for f in flags if f.startswith("-I")]
    if src.suffix == ".cu":
        try:
            main = translate_tree(SourceSet.of(src, [*search, INCLUDE]), build_dir / src.stem, display_path)
        except TranslateError as e:
            raise BuildError(f"the simulator cannot translate {display_path(src)}:\n{e}") from None
    else:
        main = src
    std = [] if any(f.startswith("-std=") for f in flags) else ["-std=c++17"]
    lang = ["-x", "c++"] if src.suffix in (".cu", ".c") and main == src else []
    # nvcc's own defaults, not PyTorch's: half and bfloat16 convert implicitly
    command = [*_compiler(_uses_openmp(src, flags)), *std, *NVCC_FLAGS, "-fPIC", f"-I{SIM_INCLUDE}", f"-I{INCLUDE}",
               f"-I{src.parent}", *flags, *lang, "-c", str(main), "-o", str(obj)]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise BuildError(f"compiling {display_path(src)} for the simulator failed:\n{run.stderr.strip()}")


def _as_written_mode(mode: str, sources: list[Path], out: str | None, cflags: list[str], opts: dict) -> int:
    """-E and -M/-MM: to -o's file (or -MF's) when given, else to standard output."""
    from ..build.errors import BuildError, display_path

    if out and len(sources) > 1:
        raise DriverError(f"{'-E' if mode == 'preprocess' else '-M'} with -o takes one source file")
    text = []
    for src in sources:
        if mode == "preprocess":
            run = _as_written(src, cflags, ["-DCUDASIM_PREPROCESS_ONLY", "-E"])
            if run.returncode != 0:
                raise BuildError(f"preprocessing {display_path(src)} failed:\n{run.stderr.strip()}")
            text.append(run.stdout)
        else:
            text.append(_dependencies(src, cflags, opts["deps"], opts["system_deps"], src.with_suffix(".o").name,
                                      Path(out) if out else None))
    if out and mode == "preprocess":
        Path(out).write_text("".join(text))
    else:
        sys.stdout.write("".join(text))
    return 0


def drive(argv: list[str]) -> int:
    """Run the driver on a command line; returns the exit status (what went wrong goes to stderr)."""
    from ..build.errors import BuildError

    try:
        opts = _parse(argv)
        if opts["mode"] == "help":
            print(USAGE)
            return 0
        notes: list[str] = []
        cflags = host_flags(opts["compile"], notes)
        lflags = link_flags(opts["link"], notes)
        inputs = [Path(p) for p in opts["inputs"]]
        if not inputs:
            raise DriverError("no input files")
        for p in inputs:
            if not p.is_file():
                raise DriverError(f"no such input file: {p}")
            if p.suffix not in (".cu", ".cpp", ".cc", ".cxx", ".c", ".o", ".a", ".so"):
                raise DriverError(f"{p}: the driver takes .cu, .cpp, .c, .o, .a and .so files")
            if p.suffix in (".o", ".a") and nvcc_object(p):
                raise DriverError(f"{p} was compiled by nvcc for the GPU; build it with this driver for the simulator")
        sources = [p for p in inputs if p.suffix not in (".o", ".a", ".so")]
        mode, out = opts["mode"], opts["out"]
        if opts["deps"] and (mode not in ("object", "deps", "link") or mode == "link" and len(sources) != 1):
            raise DriverError(f"{' '.join(opts['deps'])}: dependency options go with -M, -MM, or -MD/-MMD with -c "
                              "or a program of one source")
        if mode in ("preprocess", "deps"):
            return _as_written_mode(mode, sources, out, cflags, opts)
        if mode == "dlink":  # device code is linked with the host code on the simulator: nothing is left to link
            if sources:
                raise DriverError("-dlink takes objects and libraries made with -c or -dc, not sources")
            run = subprocess.run([*_compiler(), "-x", "c++", "-c", "-", "-o", out or "a_dlink.o"], input="",
                                 capture_output=True, text=True)
            if run.returncode != 0:
                raise BuildError(f"writing the device link's object failed:\n{run.stderr.strip()}")
            return 0
        if mode == "object" and out and len(sources) > 1:
            raise DriverError("-c with -o takes one source file")
        if opts["dir"] and not (mode == "object" and not out):
            raise DriverError("-odir names where -c puts its objects (without -o); it does nothing here")
        if mode == "object" and not out:  # each source's object in -odir (or here), named after the source
            stems = [src.stem for src in sources]
            same = sorted({str(src) for src in sources if stems.count(src.stem) > 1})
            if same:
                raise DriverError(f"{' and '.join(same)} would each make {Path(same[0]).stem}.o, one over the "
                                  "other: compile them one at a time with -o")
        if notes:
            print(f"nvcc-sim: ignored on the simulator: {' '.join(notes)}", file=sys.stderr)
        rule_options = [d for d in opts["deps"] if d not in ("-MD", "-MMD")]  # -MF, -MT, -MP of -MD/-MMD's rules
        with tempfile.TemporaryDirectory(prefix="nvcc-sim-") as tmp:
            objects = []
            for n, src in enumerate(sources):
                if mode == "object":
                    obj = Path(out) if out else Path(opts["dir"] or ".") / src.with_suffix(".o").name
                else:
                    obj = Path(tmp) / f"{n}_{src.stem}.o"
                compile_object(src.resolve(), obj, cflags, Path(tmp) / f"src{n}")
                objects.append(obj)
                if mode == "object" and opts["deps"]:
                    _dependencies(src, cflags, rule_options, opts["system_deps"], str(obj), obj.with_suffix(".d"))
            if mode == "object":
                return 0
            linked = objects + [p for p in inputs if p.suffix in (".o", ".a", ".so")]
            if mode == "lib":
                target = Path(out or "a.a")
                target.unlink(missing_ok=True)
                run = subprocess.run(["ar", "rcs", str(target), *map(str, linked)], capture_output=True, text=True)
            else:
                target = Path(out or "a.out")
                shared = ["-shared"] if opts["shared"] else []
                openmp = "-fopenmp" in cflags  # nvcc links with the host compiler's OpenMP flag too
                openmp_linker = _compiler(openmp or any(_uses_openmp(src, cflags) for src in sources))
                run = subprocess.run([*openmp_linker, *shared, *map(str, linked), "-o", str(target), *lflags,
                                      *(["-fopenmp"] if openmp else []), "-pthread", "-ldl"],
                                     capture_output=True, text=True)
            if run.returncode != 0:
                raise BuildError(f"linking {target} failed:\n{run.stderr.strip()}")
            if mode == "link" and opts["deps"]:  # as nvcc: the program's rule, beside it (prog.d)
                _dependencies(sources[0], cflags, rule_options, opts["system_deps"], str(target),
                              target.with_suffix(".d"))
        return 0
    except (DriverError, BuildError) as e:
        print(f"nvcc-sim: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(drive(sys.argv[1:]))
